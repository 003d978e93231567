"""Synthetic radiology report texts and DICOM-like headers with known labels: the phrase
pools and per-site reporting styles shared by the labelled corpus
(``tests/data/make_metadata_corpus.py``) and the demo study's metadata
(:mod:`inference_runner.metadata.demo`).

Six styles (``STYLES``, keys ``A``-``F``): academic prose (A), terse abbreviated notes
(B), structured ``key: value`` lines in a random order (C), British prose (D), upper-case
dictation (E), informal mixed phrasing with spelled ages (F). Each takes a
``random.Random`` and the labels ``{"age": int | None, "sex": "F" | "M" | None, "phase":
"non_contrast" | "arterial" | "venous" | "delayed" | None}`` (None: the report states no
value; ``"race"``: a value of :data:`RACES` or None, stated by :func:`race_statement`)
and returns one report text. :func:`random_header` draws a header and its labels;
:func:`header_for` writes a header for given labels. Pure Python ``random``: the same seed
gives the same text on every platform.
"""
from __future__ import annotations

import random
import re

# ---------------------------------------------------------------- phrase pools
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
         8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen",
         14: "fourteen", 15: "fifteen", 16: "sixteen", 17: "seventeen", 18: "eighteen",
         19: "nineteen", 20: "twenty", 30: "thirty", 40: "forty", 50: "fifty", 60: "sixty",
         70: "seventy", 80: "eighty", 90: "ninety"}


def spelled(n: int) -> str:
    """19 -> 'nineteen', 72 -> 'seventy-two'."""
    if n in WORDS:
        return WORDS[n]
    return f"{WORDS[n - n % 10]}-{WORDS[n % 10]}"


INDICATIONS = ["abdominal pain", "known cirrhosis, HCC surveillance", "weight loss",
               "staging of colorectal cancer", "deranged LFTs", "follow-up of a liver lesion",
               "painless jaundice", "right upper quadrant pain", "renal mass on ultrasound",
               "pancreatic cyst", "blunt trauma", "fever of unknown origin", "haematuria"]
FINDINGS = ["A {size} cm hypodense lesion in segment {seg}.", "No free fluid.",
            "The portal vein is patent.", "Conventional hepatic arterial anatomy.",
            "Spleen measures {n} cm.", "Kidneys enhance symmetrically.",
            "{k} subcentimetre hypodensities, too small to characterise.",
            "Gallbladder unremarkable.", "Mild hepatic steatosis.",
            "Follow-up in {m} months is advised.", "Lesion measures {a} x {b} mm.",
            "Attenuation of the lesion {hu} HU.", "DLP {dlp} mGy*cm.",
            "No lymphadenopathy.", "Small hiatus hernia.", "Renal cyst of {a} mm (Bosniak 1).",
            "Appendix normal.", "Degenerative change at L{k}."]
PRONOUN_SENTENCES = {"M": ["He reports {sym}.", "His bloods are unremarkable.",
                           "He was referred by the GP."],
                     "F": ["She reports {sym}.", "Her bloods are unremarkable.",
                           "She was referred by the GP."]}
SYMPTOMS = ["intermittent pain", "nausea", "early satiety", "fatigue"]
PHASES = {
    "venous": ["portal venous phase", "portal-venous phase", "PV phase", "portovenous phase",
               "venous phase", "portal phase", "PVP", "nephrographic phase"],
    "arterial": ["arterial phase", "late arterial phase", "early arterial phase",
                 "hepatic arterial phase", "late hepatic arterial phase", "arterial-phase",
                 "corticomedullary phase"],
    "non_contrast": ["unenhanced", "non-contrast", "noncontrast", "without IV contrast",
                     "without intravenous contrast", "non-enhanced", "NECT", "plain CT",
                     "w/o contrast"],
    "delayed": ["delayed phase", "equilibrium phase", "equilibrium/delayed phase",
                "5-minute delayed phase", "3 min delayed images", "excretory phase",
                "delayed images"],
}
AGENTS = ["Omnipaque 350", "IOPAMIDOL 370", "ISOVUE-370", "Visipaque 320", "Ultravist 300"]


def _fill(rng: random.Random, template: str) -> str:
    return template.format(size=f"{rng.randint(1, 9)}.{rng.randint(0, 9)}", seg=rng.randint(2, 8),
                           n=rng.randint(9, 14), k=rng.randint(2, 5), m=rng.choice([3, 6, 12]),
                           a=rng.randint(4, 40), b=rng.randint(4, 40), hu=rng.randint(-10, 80),
                           dlp=rng.randint(300, 900), sym=rng.choice(SYMPTOMS))


def _findings(rng: random.Random, sex, k: int = 3) -> list[str]:
    out = [_fill(rng, t) for t in rng.sample(FINDINGS, k)]
    if sex in ("F", "M") and rng.random() < 0.5:
        out.insert(rng.randint(0, len(out)), _fill(rng, rng.choice(PRONOUN_SENTENCES[sex])))
    return out


#: the race values the synthetic reports state (the extracted vocabulary of .race)
RACES = ("White", "Black", "Asian", "Hispanic/Latino", "Other", "Declined", "Unknown")
#: a report states race less often than the other fields
P_RACE_ABSENT = 0.35


def random_labels(rng: random.Random, p_absent: float = 0.15) -> dict:
    """Random labels; each field absent (None) with probability ``p_absent`` (race: at
    least :data:`P_RACE_ABSENT`)."""
    lab = {"age": None if rng.random() < p_absent else rng.randint(19, 94),
           "sex": None if rng.random() < p_absent else rng.choice("FM"),
           "phase": None if rng.random() < p_absent else rng.choice(sorted(PHASES))}
    lab["race"] = None if rng.random() < max(p_absent, P_RACE_ABSENT) else rng.choice(RACES)
    return lab


def _pick(rng: random.Random, options):
    return rng.choice(options)


def _technique(rng: random.Random, phase, phrases: dict, forms: tuple[str, str, str],
               oral: list[str], p_oral: float) -> str:
    """The technique sentence: ``forms`` = (non-contrast template, phase template, text
    without a phase), ``{}`` taking a phrase picked from ``phrases[phase]``; then, with
    probability ``p_oral``, one of the ``oral`` contrast sentences."""
    if phase is None:
        tech = forms[2]
    else:
        tech = forms[0 if phase == "non_contrast" else 1].format(_pick(rng, phrases[phase]))
    if rng.random() < p_oral:
        tech += " " + _pick(rng, oral)
    return tech


# ---------------------------------------------------------------- per-site styles
def _site_a(rng, lab) -> str:
    """Academic prose: history, technique, findings, impression; words spelled out."""
    age, sex, phase = lab["age"], lab["sex"], lab["phase"]
    noun = {"M": _pick(rng, ["man", "male", "gentleman"]), "F": _pick(rng, ["woman", "female", "lady"]),
            None: _pick(rng, ["patient", "adult"])}[sex]
    who = f"{age}-year-old {noun}" if age is not None else f"Adult {noun}" if sex else "Patient"
    if age is not None and rng.random() < 0.4:
        who = f"{age} year old {noun}"
    hist = f"CLINICAL HISTORY: {who} with {_pick(rng, INDICATIONS)}."
    phrases = {**PHASES, "non_contrast": ["without IV contrast", "without intravenous contrast",
                                          "performed unenhanced", "non-contrast"]}
    tech = _technique(rng, phase, phrases,
                      ("TECHNIQUE: CT of the abdomen and pelvis {}.",
                       "TECHNIQUE: CT of the abdomen and pelvis with intravenous contrast in the {}.",
                       "TECHNIQUE: CT of the abdomen and pelvis with intravenous contrast."),
                      ["No oral contrast.", "Oral contrast was not given.", "Positive oral contrast was given."],
                      0.4)
    body = " ".join(_findings(rng, sex))
    impression = _pick(rng, ["No acute abnormality.", "Indeterminate lesion, MRI advised.", "Stable appearances."])
    return f"{hist} {tech} FINDINGS: {body} IMPRESSION: {impression}"


def _site_b(rng, lab) -> str:
    """Terse abbreviated notes, lower or sentence case, age and sex run together."""
    age, sex, phase = lab["age"], lab["sex"], lab["phase"]
    if age is not None and sex:
        who = _pick(rng, [f"{age}yo {sex}", f"{age} y/o {sex}", f"{age}{sex}", f"{age} yo {sex}",
                          f"{age}y {sex}", f"{sex}/{age}", f"{age}/{sex}"])
    elif age is not None:
        who = _pick(rng, [f"{age}yo", f"{age} y/o", f"{age}y", f"{age} yo pt"])
    elif sex:
        who = _pick(rng, [f"{sex} pt", f"pt {'male' if sex == 'M' else 'female'}"])
    else:
        who = "pt"
    ph = {"venous": ["PV phase", "pv phase", "PVP", "portal venous", "venous phase"],
          "arterial": ["art phase", "late arterial", "arterial phase", "early arterial"],
          "non_contrast": ["non-con", "noncontrast", "NECT", "no IV contrast", "w/o contrast"],
          "delayed": ["delayed phase", "delayed imgs 5 min", "3 min delay", "equilibrium phase"],
          None: ["+IV contrast", "with IV contrast", "c+"]}[phase]
    exam = f"CT A/P {_pick(rng, ph)}"
    parts = [who, exam, _pick(rng, ["hx " + _pick(rng, INDICATIONS), "?collection", "f/u lesion"])]
    if rng.random() < 0.3:
        parts.insert(2, _pick(rng, ["no PO contrast", "no oral contrast", "oral contrast given"]))
    text = ". ".join(parts) + ". " + " ".join(_findings(rng, sex, 2))
    return text.lower() if rng.random() < 0.3 else text


def _site_c(rng, lab) -> str:
    """Structured key: value lines in a random order; some keys absent."""
    age, sex, phase = lab["age"], lab["sex"], lab["phase"]
    lines = []
    if age is not None:
        lines.append(_pick(rng, [f"Age: {age}", f"AGE: {age}", f"Patient age: {age}", f"Age {age}",
                                 f"Age: {age} years"]))
    if sex:
        word = {"M": ["M", "Male", "male", "MALE"], "F": ["F", "Female", "female", "FEMALE"]}[sex]
        lines.append(f"{_pick(rng, ['Sex', 'Gender', 'SEX', 'sex'])}: {_pick(rng, word)}")
    if phase == "non_contrast":
        lines.append(_pick(rng, ["Contrast: none", "IV contrast: none", "Contrast: without IV contrast",
                                 "Phase: non-contrast", "Phase: unenhanced"]))
    elif phase:
        lines.append(f"Contrast: IV {_pick(rng, AGENTS)}")
        lines.append(f"{_pick(rng, ['Phase', 'Acquisition'])}: {_pick(rng, PHASES[phase])}")
    elif rng.random() < 0.5:
        lines.append(f"Contrast: IV {_pick(rng, AGENTS)}")
    if rng.random() < 0.4:
        lines.append(_pick(rng, ["Oral contrast: none", "Oral contrast: water", "Oral contrast: yes"]))
    lines.append(f"Indication: {_pick(rng, INDICATIONS)}")
    rng.shuffle(lines)
    lines.append("Findings: " + " ".join(_findings(rng, None, 2)))
    return "\n".join(lines)


def _site_d(rng, lab) -> str:
    """British prose: 'gentleman', 'lady', 'Age 72', 'portal phase', 'equilibrium phase'."""
    age, sex, phase = lab["age"], lab["sex"], lab["phase"]
    noun = {"M": _pick(rng, ["gentleman", "man", "male"]), "F": _pick(rng, ["lady", "woman", "female"]),
            None: "patient"}[sex]
    if age is not None and rng.random() < 0.5:
        who = f"{age} year old {noun}."
    elif age is not None:
        who = f"Age {age}. {noun.capitalize()}." if sex else f"Age {age}."
    else:
        who = f"{noun.capitalize()}." if sex else ""
    phrases = {"venous": ["portal phase", "portal venous phase", "portovenous phase"],
               "arterial": ["arterial phase", "late arterial phase"],
               "non_contrast": ["Unenhanced", "Non-contrast", "Non-enhanced"],
               "delayed": ["equilibrium phase", "delayed phase", "excretory phase"]}
    tech = _technique(rng, phase, phrases, ("{} CT abdomen.", "CT abdomen, {}.", "CT abdomen following IV contrast."),
                      ["No oral contrast given.", "Oral contrast not administered."], 0.35)
    parts = [who, tech, f"Indication: {_pick(rng, INDICATIONS)}.", *_findings(rng, sex)]
    if rng.random() < 0.5:
        parts[0], parts[1] = parts[1], parts[0]
    return " ".join(p for p in parts if p)


def _site_e(rng, lab) -> str:
    """Held out. Upper-case dictation with W/ and W/O, 'Y/O', 'YRS', 'DELAYED 5 MIN'."""
    age, sex, phase = lab["age"], lab["sex"], lab["phase"]
    noun = {"M": "MALE", "F": "FEMALE", None: "PATIENT"}[sex]
    if age is not None:
        who = _pick(rng, [f"PATIENT IS A {age} Y/O {noun}.", f"{age} YO {noun}.",
                          f"AGE: {age} YRS. " + (f"SEX: {sex}." if sex else ""),
                          f"{age} YEAR OLD {noun}."])
    else:
        who = f"SEX: {sex}." if sex else "HISTORY AS BELOW."
    phrases = {"venous": ["PORTAL VENOUS PHASE", "PV PHASE", "VENOUS PHASE"],
               "arterial": ["LATE ARTERIAL PHASE", "ARTERIAL PHASE"],
               "non_contrast": ["W/O IV CONTRAST", "WITHOUT CONTRAST", "NONCONTRAST", "UNENHANCED"],
               "delayed": ["DELAYED PHASE", "DELAYED 5 MIN", "EQUILIBRIUM PHASE"]}
    exam = _technique(rng, phase, phrases, ("EXAM: CT ABD/PEL {}.", "EXAM: CT ABD/PEL W/ IV CONTRAST, {}.",
                                            "EXAM: CT ABD/PEL W/ IV CONTRAST."),
                      ["NO ORAL CONTRAST.", "ORAL CONTRAST: NONE."], 0.4)
    body = " ".join(_findings(rng, sex, 2)).upper()
    parts = [who, exam, f"INDICATION: {_pick(rng, INDICATIONS).upper()}.", body]
    if rng.random() < 0.3:
        parts[0], parts[1] = parts[1], parts[0]
    return " ".join(parts)


def _site_f(rng, lab) -> str:
    """Held out. Informal mixed styles: spelled ages, 'yr', 'Gender:', comparisons."""
    age, sex, phase = lab["age"], lab["sex"], lab["phase"]
    word = {"M": ["man", "male", "gentleman"], "F": ["woman", "female", "lady"]}
    pieces = []
    if age is not None:
        noun = _pick(rng, word[sex]) if sex else "patient"
        pieces.append(_pick(rng, [f"{spelled(age).capitalize()}-year-old {noun}.",
                                  f"{age}-yr-old {noun}.", f"Pt aged {age}, {noun}.",
                                  f"{age} y.o. {noun}.", f"{age} years old, {noun}."]))
        if sex and rng.random() < 0.3:
            pieces.append(_pick(rng, [f"Gender: {'female' if sex == 'F' else 'male'}.", f"sex {sex}."]))
    elif sex:
        pieces.append(_pick(rng, [f"Gender: {'female' if sex == 'F' else 'male'}.",
                                  f"{_pick(rng, word[sex]).capitalize()}, age not given."]))
    ph = {"venous": ["portal venous phase", "PV phase", "nephrographic phase"],
          "arterial": ["late arterial phase", "arterial phase", "hepatic arterial phase"],
          "delayed": ["equilibrium/delayed phase", "delayed phase", "equilibrium phase"]}
    if phase == "non_contrast":
        pieces.append(_pick(rng, ["CT done without intravenous contrast.", "Unenhanced CT.",
                                  "Non-contrast study."]))
    elif phase:
        pieces.append(f"Contrast CT in the {_pick(rng, ph[phase])}.")
    else:
        pieces.append("Contrast-enhanced CT.")
    if rng.random() < 0.35:
        pieces.append(_pick(rng, ["No oral contrast.", "Oral contrast: none."]))
    if rng.random() < 0.3:
        pieces.append("Comparison: none.")
    pieces += _findings(rng, sex, 2)
    return " ".join(pieces)


#: how each style states race: a description ("{}" a race phrase) or a label ("{}" a label value)
RACE_WORDS = {"Black": ["African American", "Black", "AA"], "White": ["White", "Caucasian"],
              "Asian": ["Asian"], "Hispanic/Latino": ["Hispanic", "Latino", "Hispanic/Latino"]}
RACE_LABEL_WORDS = {**RACE_WORDS, "Other": ["other", "multiracial"], "Declined": ["declined"],
                    "Unknown": ["unknown", "not recorded"]}
_RACE_FORMS = {"A": ("The patient is {}.", "Race: {}."), "B": ("pt {}.", "race {}."),
               "C": (None, "Race: {}"), "D": ("The patient is of {} descent.", "Ethnicity: {}."),
               "E": (None, "RACE: {}."), "F": ("Pt is {}.", "Race: {}.")}
_DESCENT = {"Black": "African", "White": "White European", "Asian": "Asian",
            "Hispanic/Latino": "Hispanic"}


def race_statement(rng: random.Random, style: str, race: str) -> str:
    """One sentence (a line for C) stating ``race`` in ``style``'s manner."""
    described, labelled = _RACE_FORMS[style]
    if described and race in RACE_WORDS and rng.random() < 0.6:
        word = _DESCENT[race] if style == "D" else _pick(rng, [w for w in RACE_WORDS[race] if w != "AA"]
                                                         if style in ("A", "F") else RACE_WORDS[race])
        return described.format(word)
    word = _pick(rng, RACE_LABEL_WORDS[race])
    return labelled.format(word.upper() if style == "E" else word)


def _with_race(style: str, write):
    """``write`` (a style) and, when ``lab`` has a race, its race statement inserted at a
    sentence (for C: line) boundary."""
    def styled(rng: random.Random, lab: dict) -> str:
        text = write(rng, lab)
        if not lab.get("race"):
            return text
        said = race_statement(rng, style, lab["race"])
        sep = "\n" if style == "C" else " "
        if style == "C":
            parts = text.split("\n")
        else:
            parts = [p for p in re.split(r"(?<=[.])\s+", text) if p]
        parts.insert(rng.randint(0, min(2, len(parts))), said)
        return sep.join(parts)

    styled.__doc__ = write.__doc__
    return styled


STYLES = {k: _with_race(k, f) for k, f in
          {"A": _site_a, "B": _site_b, "C": _site_c, "D": _site_d, "E": _site_e, "F": _site_f}.items()}

# ---------------------------------------------------------------- DICOM headers
DESCRIPTIONS = {
    "venous": ["PORTAL VENOUS 5mm", "PV 3.0 B30f", "AX PV 2.5", "Venous 2.0", "PORTAL 5mm", "VEN 3mm"],
    "arterial": ["ART", "ARTERIAL 1.25mm", "LATE ART 2mm", "Arterial 3.0 B30f"],
    "non_contrast": ["NC", "NON CON 5mm", "WO CONTRAST", "Plain 5mm", "PRE 5mm"],
    "delayed": ["DELAYED 3MIN", "Delayed 5mm", "EQUILIBRIUM 180s", "DEL 5mm"],
    None: ["Abd Pel 5mm", "AXIAL 3mm", "Recon 2", "SOFT TISSUE 5.0"],
}
SEX_VALUES = {"M": ["M", "M", "m"], "F": ["F", "F", "f"], "O": ["O"]}
#: EthnicGroup (0010,2160) spellings, as sites write the free text (16 characters at most)
ETHNIC_GROUP = {"White": ["WHITE", "W", "CAUCASIAN", "2106-3"],
                "Black": ["BLACK", "B", "AFR AM", "AFRICAN AMERICAN"], "Asian": ["ASIAN", "ASN"],
                "Hispanic/Latino": ["HISPANIC", "H"], "Other": ["OTHER"],
                "Declined": ["DECLINED", "PT REFUSED"], "Unknown": ["UNKNOWN", "UNK"]}


def random_header(rng: random.Random, site: str) -> tuple[dict, dict]:
    """A random header (CT or MR; ages in years or months, or empty; sex M/F/O or absent;
    a phase from the description, the contrast timing, or no agent; EthnicGroup in half)
    and its labels."""
    age_unit = rng.random()
    header = {"Modality": rng.choice(["CT", "CT", "CT", "MR"]), "PatientID": f"{site}{rng.randint(1000, 9999)}"}
    labels = {"age": None, "sex": None, "phase": None, "race": None}
    if age_unit < 0.6:
        a = rng.randint(19, 94)
        header["PatientAge"], labels["age"] = f"{a:03d}Y", a
    elif age_unit < 0.7:
        months = rng.randint(1, 30)
        header["PatientAge"], labels["age"] = f"{months:03d}M", round(months / 12, 2)
    elif age_unit < 0.8:
        header["PatientAge"] = ""  # present but empty: no value
    s = rng.choice(["M", "F", "O", None, "M", "F"])
    if s:
        header["PatientSex"] = rng.choice(SEX_VALUES[s])
        labels["sex"] = s
    phase = rng.choice(["venous", "arterial", "non_contrast", "delayed", None])
    if rng.random() < 0.85:
        header["SeriesDescription"] = rng.choice(DESCRIPTIONS[phase])
    else:
        phase = None
    if phase != "non_contrast" and rng.random() < 0.8:
        header["ContrastBolusAgent"] = rng.choice(AGENTS)
        if phase is None and rng.random() < 0.5:  # timing only
            delay = rng.choice([30, 70, 240])
            phase = "arterial" if delay < 45 else "venous" if delay < 150 else "delayed"
            header["ContrastBolusStartTime"] = "101500"
            header["AcquisitionTime"] = f"10{15 + delay // 60:02d}{delay % 60:02d}"
    if "ContrastBolusAgent" not in header and phase is None:
        phase = "non_contrast"  # a conforming CT/MR header without the agent: no contrast
    labels["phase"] = phase
    if rng.random() < 0.5:  # EthnicGroup, in a site's spelling (after the other draws)
        race = rng.choice(RACES)
        header["EthnicGroup"], labels["race"] = rng.choice(ETHNIC_GROUP[race]), race
    return header, labels


def header_for(rng: random.Random, lab: dict, *, p_no_age: float = 0.1, p_no_sex: float = 0.1,
               p_plain_description: float = 0.2, p_timing: float = 0.3,
               p_agent_missing: float = 0.0, p_race: float = 0.0) -> dict:
    """A DICOM-like header (keyword -> string) for known labels ``lab``.

    ``PatientAge`` as ``"072Y"`` (absent with probability ``p_no_age``), ``PatientSex``
    (absent with ``p_no_sex``), ``EthnicGroup`` for a race label with probability ``p_race``
    (a spelling of :data:`ETHNIC_GROUP`), ``Modality`` CT, a ``SeriesDescription`` naming the phase
    (a plain one such as ``"AXIAL 3mm"`` with ``p_plain_description``), and for a
    contrast phase ``ContrastBolusAgent`` (left out with ``p_agent_missing``: a header
    error that reads as non-contrast) with, with ``p_timing``, the bolus start and
    acquisition times of the phase's delay (arterial 30 s, venous 70 s, delayed 240 s).
    """
    header = {"Modality": "CT"}
    if lab.get("age") is not None and rng.random() >= p_no_age:
        header["PatientAge"] = f"{int(lab['age']):03d}Y"
    if lab.get("sex") and rng.random() >= p_no_sex:
        header["PatientSex"] = rng.choice(SEX_VALUES[lab["sex"]])
    if lab.get("race") and rng.random() < p_race:
        header["EthnicGroup"] = rng.choice(ETHNIC_GROUP[lab["race"]])
    phase = lab.get("phase")
    plain = rng.random() < p_plain_description
    header["SeriesDescription"] = rng.choice(DESCRIPTIONS[None if plain else phase])
    if phase not in (None, "non_contrast") and rng.random() >= p_agent_missing:
        header["ContrastBolusAgent"] = rng.choice(AGENTS)
        if rng.random() < p_timing:
            delay = {"arterial": 30, "venous": 70, "delayed": 240}[phase]
            header["ContrastBolusStartTime"] = "101500"
            header["AcquisitionTime"] = f"10{15 + delay // 60:02d}{delay % 60:02d}"
    return header


def labelled_reports(styles, n_per_style: int, *, seed: str = "clinrel-synthetic",
                     p_absent: float = 0.15) -> list[dict]:
    """``n_per_style`` labelled reports per style: ``{"style", "text", "age", "sex",
    "phase"}`` with random labels (:func:`random_labels`); deterministic for ``seed``."""
    out = []
    for style in styles:
        rng = random.Random(f"{seed}-{style}")
        for _ in range(n_per_style):
            lab = random_labels(rng, p_absent)
            out.append({"style": style, "text": STYLES[style](rng, lab), **lab})
    return out
