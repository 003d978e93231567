"""The held-out institutional report styles: five reporting styles that neither the rules
nor the classifier were written for or trained on, with mentions in clinical context.

``python tests/data/make_metadata_heldout.py`` rewrites ``metadata_heldout.jsonl``
(deterministic: the same bytes every run) and ``metadata_heldout_accuracy.csv`` (both
text extractors on it, per style and field: :func:`measure`). This set is **never** a training corpus:
:mod:`inference_runner.metadata.classifier` is trained on ``metadata_corpus.jsonl``'s
tuning part and on :mod:`inference_runner.metadata.synthetic`'s styles A-D only, and
``tests/data/make_metadata_corpus.py`` does not read this file. These styles were written
and committed before the context handling and race extraction were built or tuned; the
first measurement is recorded in docs/validation.md as it came out.

Styles (``STYLES``):

- ``G``: US academic structured report with sections (EXAMINATION, CLINICAL INFORMATION,
  COMPARISON, TECHNIQUE, FINDINGS, IMPRESSION); comparison studies name their own phase;
  impressions recommend other examinations.
- ``H``: community-hospital run-on dictation; family history with relatives' ages; the
  contrast stated by negation ("No IV contrast was administered").
- ``I``: tele-radiology template with pipes (``DEMOGRAPHICS | Age 71 | Sex F | Race ...``)
  and a protocol line ("delayed (5 min)").
- ``J``: Canadian/European narrative: "Mrs", "aged", "of ... descent", "patient declined
  to state race", phases not obtained.
- ``K``: emergency preliminary reads: "62M AA", "w/ contrast", "prior CT w/o contrast",
  "if ..., consider ...".

Labels per report: ``age`` (years), ``sex`` (F, M), ``race`` (the extracted vocabulary of
:data:`inference_runner.metadata.race.RACE_VALUES`: Black, White, Asian, Hispanic/Latino,
Declined, Unknown, ...), ``phase`` (non_contrast, arterial, venous, delayed); ``null``
where the report does not state the value about the current study and the patient (it
may still mention one in a negated, prior-study, hypothetical or family context:
``traps`` lists which). Any value extracted for a ``null`` label is a false extraction.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELDOUT = HERE / "metadata_heldout.jsonl"
ACCURACY = HERE / "metadata_heldout_accuracy.csv"
FIELDS = ("age", "sex", "race", "phase")
STYLE_NAMES = ("G", "H", "I", "J", "K")
N_PER_STYLE = 80
PHASES = ("non_contrast", "arterial", "venous", "delayed")
RACES = ("Black", "White", "Asian", "Hispanic/Latino", "Declined", "Unknown")
#: probability that a field is not stated about the patient / current study
P_ABSENT = 0.2
#: probability of a context trap (a mention that must not become the value)
P_TRAP = 0.45

INDICATIONS = ["RLQ pain", "hematuria", "weight loss", "elevated LFTs", "flank pain",
               "staging of pancreatic adenocarcinoma", "liver lesion on ultrasound",
               "follow-up of renal mass", "abdominal distension", "suspected abscess"]
FINDINGS = ["Liver: normal in size, no focal lesion.", "Small bilateral renal cysts.",
            "No bowel obstruction.", "Appendix is normal.", "Trace free fluid in the pelvis.",
            "A 1.4 cm hypodense lesion in segment VI, likely a cyst.", "Aorta normal calibre.",
            "No lymphadenopathy.", "Mild colonic diverticulosis without diverticulitis.",
            "Bladder is unremarkable.", "Stable 6 mm pulmonary nodule at the right base."]


def _pick(rng, xs):
    return rng.choice(list(xs))


def labels(rng: random.Random) -> dict:
    return {"age": None if rng.random() < P_ABSENT else rng.randint(19, 93),
            "sex": None if rng.random() < P_ABSENT else rng.choice("FM"),
            "race": None if rng.random() < 0.3 else rng.choice(RACES),
            "phase": None if rng.random() < P_ABSENT else rng.choice(PHASES)}


def _other(rng, value, pool):
    return _pick(rng, [v for v in pool if v != value])


# ------------------------------------------------------------------ phrasings
RACE_WORDS_G = {"Black": ["African American", "Black"], "White": ["White", "Caucasian"],
                "Asian": ["Asian"], "Hispanic/Latino": ["Hispanic", "Latino"],
                "Declined": None, "Unknown": None}


def _noun(rng, sex):
    return {"F": _pick(rng, ["female", "woman"]), "M": _pick(rng, ["male", "man"]),
            None: "patient"}[sex]


def style_g(rng, lab) -> tuple[str, list[str]]:
    """US academic structured report with sections."""
    age, sex, race, phase = lab["age"], lab["sex"], lab["race"], lab["phase"]
    traps = []
    words = []
    if age is not None:
        words.append(f"{age} year old")
    if race in ("Black", "White", "Asian", "Hispanic/Latino"):
        words.append(_pick(rng, RACE_WORDS_G[race]))
    words.append(_noun(rng, sex))
    who = " ".join(words)
    info = f"CLINICAL INFORMATION: {who[0].upper() + who[1:]} with {_pick(rng, INDICATIONS)}."
    if race in ("Declined", "Unknown"):
        info += " Race: " + ("declined" if race == "Declined" else "unknown") + "."
    exam = _pick(rng, ["EXAMINATION: CT ABDOMEN AND PELVIS", "EXAMINATION: CT ABDOMEN PELVIS"])
    if phase == "non_contrast":
        exam += " WITHOUT CONTRAST"
        tech = ("TECHNIQUE: Axial images of the abdomen and pelvis were obtained without "
                "intravenous contrast.")
    elif phase:
        exam += " WITH CONTRAST"
        ph = {"arterial": ["late arterial phase", "arterial phase"],
              "venous": ["portal venous phase", "portal venous"],
              "delayed": ["delayed phase", "5 minute delayed phase"]}[phase]
        tech = (f"TECHNIQUE: Multidetector CT of the abdomen and pelvis was performed in the "
                f"{_pick(rng, ph)} following 100 mL Omnipaque 350 IV.")
    else:
        tech = "TECHNIQUE: Multidetector CT of the abdomen and pelvis."
    comp = "COMPARISON: None."
    if rng.random() < P_TRAP:
        prior = _other(rng, phase, PHASES)
        words = {"non_contrast": "without IV contrast", "arterial": "arterial phase",
                 "venous": "portal venous phase", "delayed": "delayed phase"}[prior]
        comp = _pick(rng, [f"COMPARISON: CT of 03/2021 (prior study: {words}).",
                           f"COMPARISON: Compared with the prior {words} CT from 2020."])
        traps.append("prior_phase")
    if rng.random() < 0.5:
        tech += " No contrast-related complications."
        traps.append("negated_unrelated")
    body = " ".join(rng.sample(FINDINGS, 3))
    imp = "IMPRESSION: No acute abnormality."
    if rng.random() < P_TRAP:
        rec = _other(rng, phase, ("arterial", "delayed", "venous"))
        imp += " " + _pick(rng, [f"Recommend {rec} phase CT for further characterization.",
                                 f"Consider contrast-enhanced MRI with a {rec} phase."])
        traps.append("hypothetical_phase")
    lines = [exam, info, comp, tech, "FINDINGS: " + body, imp]
    return "\n".join(lines), traps


def style_h(rng, lab):
    """Community-hospital run-on dictation with family history."""
    age, sex, race, phase = lab["age"], lab["sex"], lab["race"], lab["phase"]
    traps = []
    rw = {"Black": "African-American", "White": "Caucasian", "Asian": "Asian",
          "Hispanic/Latino": "Hispanic"}
    parts = []
    if age is not None or sex or race in rw:
        s = "Pt is a"
        if age is not None:
            s += f" {age} y/o"
        if race in rw:
            s += f" {rw[race]}"
        s += " " + {"F": "female", "M": "male", None: "patient"}[sex] + f" here for {_pick(rng, INDICATIONS)}."
        parts.append(s)
    else:
        parts.append(f"Here for {_pick(rng, INDICATIONS)}.")
    if race == "Declined":
        parts.append("Pt declined to provide race.")
    elif race == "Unknown":
        parts.append("Race unknown.")
    if rng.random() < P_TRAP:
        rel = _pick(rng, ["Mother", "Father", "Sister", "Brother"])
        parts.append(f"Family hx: {rel.lower()}, {rng.randint(40, 85)}, with pancreatic cancer.")
        traps.append("family_age")
    if phase == "non_contrast":
        parts.append(_pick(rng, ["No IV contrast was administered due to renal insufficiency.",
                                 "IV contrast was not given (allergy)."]))
    elif phase:
        ph = {"arterial": "arterial phase", "venous": "portal venous phase",
              "delayed": "delayed phase"}[phase]
        parts.append(f"Scan obtained with IV contrast, {ph} imaging.")
    else:
        parts.append("Scan obtained per protocol.")
    if rng.random() < P_TRAP:
        prior = _other(rng, phase, PHASES)
        words = {"non_contrast": "non-contrast", "arterial": "arterial phase",
                 "venous": "portal venous", "delayed": "delayed phase"}[prior]
        parts.append(f"Compared with the prior {words} study the cyst is unchanged.")
        traps.append("prior_phase")
    if sex and rng.random() < 0.5:
        parts.append(("She" if sex == "F" else "He") + " tolerated the exam well.")
    parts += rng.sample(FINDINGS, 2)
    return " ".join(parts), traps


def style_i(rng, lab):
    """Tele-radiology template with pipes and a protocol line."""
    age, sex, race, phase = lab["age"], lab["sex"], lab["race"], lab["phase"]
    traps = []
    demo = ["DEMOGRAPHICS"]
    if age is not None:
        demo.append(_pick(rng, [f"Age {age}", f"Age: {age}y", f"{age} yrs"]))
    if sex:
        demo.append(f"Sex {sex}")
    rw = {"Black": ["Black or African American", "Black"], "White": ["White", "Caucasian"],
          "Asian": ["Asian"], "Hispanic/Latino": ["Hispanic/Latino", "Hispanic or Latino"],
          "Declined": ["Declined", "Patient declined"], "Unknown": ["Unknown", "Not recorded"]}
    if race:
        demo.append(f"{_pick(rng, ['Race', 'Race/Ethnicity'])}: {_pick(rng, rw[race])}")
    proto = {"non_contrast": ["non-contrast", "unenhanced"],
             "arterial": ["arterial (25 s)", "late arterial"],
             "venous": ["portal venous (70 s)", "venous"],
             "delayed": ["delayed (5 min)", "delayed (3 min)"]}
    prot = f"PROTOCOL | {_pick(rng, proto[phase])}" if phase else "PROTOCOL | routine abdomen"
    lines = [" | ".join(demo), prot]
    if rng.random() < P_TRAP:
        miss = _other(rng, phase, ("arterial", "delayed"))
        lines.append(f"NOTE | {miss} phase not acquired")
        traps.append("negated_phase")
    if rng.random() < P_TRAP:
        prior = _other(rng, phase, PHASES)
        words = {"non_contrast": "non-contrast", "arterial": "arterial", "venous": "venous",
                 "delayed": "delayed"}[prior]
        lines.append(f"PRIORS | CT 2019, {words}")
        traps.append("prior_phase")
    lines.append("FINDINGS | " + " ".join(rng.sample(FINDINGS, 2)))
    return "\n".join(lines), traps


def style_j(rng, lab):
    """Canadian / European narrative."""
    age, sex, race, phase = lab["age"], lab["sex"], lab["race"], lab["phase"]
    traps = []
    title = {"F": _pick(rng, ["Mrs Smith", "Ms Tremblay"]), "M": _pick(rng, ["Mr Roy", "Mr Dubois"]),
             None: "The patient"}[sex]
    s = title
    if age is not None:
        s += f", aged {age},"
    s += f" was referred with {_pick(rng, INDICATIONS)}."
    parts = [s]
    rw = {"Black": "of African descent", "White": "of White European descent",
          "Asian": "of East Asian descent", "Hispanic/Latino": "of Hispanic origin"}
    if race in rw:
        parts.append(("She" if sex == "F" else "He" if sex == "M" else "The patient")
                     + f" is {rw[race]}.")
    elif race == "Declined":
        parts.append("The patient declined to state race.")
    elif race == "Unknown":
        parts.append("Ethnicity: unknown.")
    if rng.random() < P_TRAP:
        whose = {"F": "Her", "M": "His", None: "The patient's"}[sex]
        parts.append(f"{whose} mother, aged {rng.randint(50, 90)}, had a renal carcinoma."
                     if rng.random() < 0.5 else
                     f"{whose} father died of liver cancer aged {rng.randint(50, 90)}.")
        traps.append("family_age")
    if phase == "non_contrast":
        parts.append(_pick(rng, ["Unenhanced acquisition only.",
                                 "Images acquired before contrast; contrast was not given."]))
    elif phase:
        ph = {"arterial": "in the hepatic arterial phase", "venous": "in the portal phase",
              "delayed": "in the equilibrium phase"}[phase]
        parts.append(f"CT of the abdomen was acquired {ph}.")
    else:
        parts.append("CT of the abdomen.")
    if rng.random() < P_TRAP and phase not in (None, "non_contrast"):
        miss = _other(rng, phase, ("arterial", "delayed"))
        parts.append(f"An {miss} phase was not obtained." if miss == "arterial"
                     else f"A {miss} phase was not obtained.")
        traps.append("negated_phase")
    parts += rng.sample(FINDINGS, 2)
    return " ".join(parts), traps


def style_k(rng, lab):
    """Emergency preliminary reads."""
    age, sex, race, phase = lab["age"], lab["sex"], lab["race"], lab["phase"]
    traps = []
    head = ""
    if age is not None and sex:
        head = f"{age}{sex}"
    elif age is not None:
        head = f"{age}yo"
    elif sex:
        head = {"F": "F pt", "M": "M pt"}[sex]
    rw = {"Black": "AA", "White": "Caucasian", "Asian": "Asian", "Hispanic/Latino": "Hispanic"}
    if race in rw:
        head = f"{head} {rw[race]}".strip()
    head = (head + ", " if head else "") + f"r/o {_pick(rng, ['appendicitis', 'SBO', 'stone', 'abscess'])}."
    parts = [head]
    if race == "Declined":
        parts.append("race declined.")
    elif race == "Unknown":
        parts.append("race: unk.")
    if phase == "non_contrast":
        parts.append("CT A/P w/o contrast.")
    elif phase:
        ph = {"arterial": "arterial phase", "venous": "venous phase", "delayed": "delayed imgs 5 min"}[phase]
        parts.append(f"CT A/P w/ contrast, {ph}.")
    else:
        parts.append("CT A/P.")
    if rng.random() < P_TRAP:
        prior = _other(rng, phase, PHASES)
        words = {"non_contrast": "w/o contrast", "arterial": "arterial phase",
                 "venous": "venous phase", "delayed": "delayed phase"}[prior]
        parts.append(f"Prior CT {words} 2021.")
        traps.append("prior_phase")
    parts.append(_pick(rng, ["No free air.", "Appendix nl.", "No hydro."]))
    if rng.random() < P_TRAP:
        rec = _other(rng, phase, ("arterial", "delayed"))
        parts.append(f"If sx persist, consider {rec} phase CT.")
        traps.append("hypothetical_phase")
    return " ".join(parts), traps


STYLES = {"G": style_g, "H": style_h, "I": style_i, "J": style_j, "K": style_k}


def generate() -> list[dict]:
    out = []
    for style in STYLE_NAMES:
        rng = random.Random(f"clinrel-metadata-heldout-{style}")
        for i in range(N_PER_STYLE):
            lab = labels(rng)
            text, traps = STYLES[style](rng, lab)
            out.append({"id": f"ho-{style}-{i:03d}", "style": style, "text": text, **lab,
                        "traps": traps})
    return out


def dumps(records) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)


def load() -> list[dict]:
    return [json.loads(x) for x in HELDOUT.read_text(encoding="utf-8").splitlines() if x.strip()]


def correct(label, row) -> bool:
    """A missing label wants no value; otherwise the value must equal the label."""
    if row is None:
        return label is None
    if label is None:
        return False
    try:
        return abs(float(row["value"]) - float(label)) < 1e-9
    except ValueError:
        return str(row["value"]) == str(label)


def measure(records, model=None) -> list[dict]:
    """Per extractor x style x field: ``n_stated`` (reports whose label is a value),
    ``n_correct`` (of them, extracted right), ``n_not_stated`` (label null: the field is
    absent or only negated / prior / hypothetical / family), ``n_false`` (of them, a value
    was extracted), and the two rates; style ``all`` pools the styles. The classifier
    (``model``; by default trained on the tuning part of metadata_corpus.jsonl, which
    holds none of these reports)."""
    from inference_runner.metadata.classifier import classifier_answers, train_classifier
    from inference_runner.metadata.text import extract_text, rule_answer

    if model is None:
        spec = __import__("importlib.util").util.spec_from_file_location(
            "make_metadata_corpus", HERE / "make_metadata_corpus.py")
        corpus = __import__("importlib.util").util.module_from_spec(spec)
        spec.loader.exec_module(corpus)
        model = train_classifier([r for r in corpus.load_corpus()
                                  if r["kind"] == "text" and corpus.split_of(r) == "tuning"])
    answers = {"rules": [rule_answer(extract_text(r["id"], r["text"], f"text:heldout#{r['id']}"))
                         for r in records],
               "text_classifier": classifier_answers([r["text"] for r in records], model)}
    rows = []
    for name, got in answers.items():
        for style in (*STYLE_NAMES, "all"):
            idx = [i for i, r in enumerate(records) if style in ("all", r["style"])]
            for field in FIELDS:
                stated = [i for i in idx if records[i][field] is not None]
                absent = [i for i in idx if records[i][field] is None]
                ok = sum(correct(records[i][field], got[i].get(field)) for i in stated)
                false = sum(got[i].get(field) is not None for i in absent)
                rows.append({"extractor": name, "style": style, "field": field,
                             "n_stated": len(stated), "n_correct": ok,
                             "correct_rate": round(ok / len(stated), 4) if stated else "",
                             "n_not_stated": len(absent), "n_false": false,
                             "false_rate": round(false / len(absent), 4) if absent else ""})
    return rows


def accuracy_csv(rows) -> str:
    cols = ("extractor", "style", "field", "n_stated", "n_correct", "correct_rate",
            "n_not_stated", "n_false", "false_rate")
    return "".join(",".join(map(str, line)) + "\n"
                   for line in [cols, *([r[c] for c in cols] for r in rows)])


def main() -> int:
    HELDOUT.write_text(dumps(generate()), encoding="utf-8")
    ACCURACY.write_text(accuracy_csv(measure(load())), encoding="utf-8")
    sys.stdout.write(ACCURACY.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1]))
    raise SystemExit(main())
