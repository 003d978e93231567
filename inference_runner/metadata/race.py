"""Race as the extractors read it: the phrasings and the values they map to.

The extracted vocabulary (:data:`RACE_VALUES`) and the phrasings of each value
(:data:`RACE_PHRASES`, matched case-insensitively on word boundaries, except ``AA``, which
must be upper case: "aa" is not a race):

==================================  ================================================
value                               phrasings
==================================  ================================================
Black                               Black, African American, African-American,
                                    Afro-American, Afro-Caribbean, Black or African
                                    American, AA, of African descent/origin
White                               White, Caucasian, non-Hispanic White, White
                                    European, of (White) European descent
Asian                               Asian, Asian American, East Asian, South Asian,
                                    Southeast Asian, of (East) Asian descent
Hispanic/Latino                     Hispanic, Latino, Latina, Latinx, Hispanic/Latino,
                                    Hispanic or Latino, of Hispanic origin
American Indian/Alaska Native       American Indian, Alaska(n) Native, Native American
Native Hawaiian/Pacific Islander    Native Hawaiian, Pacific Islander
Other                               Other, multiracial, mixed race, biracial, two or
                                    more races (only after a label: "Race: other")
Declined                            declined, refused, patient declined, prefers not
                                    to say ("declined to state race"; after a label)
Unknown                             unknown, unk, not recorded, not stated, not
                                    documented, not available (after a label;
                                    "unknown race")
==================================  ================================================

A report states race in three forms: a label (``Race: Caucasian``, ``Race/Ethnicity:
Hispanic/Latino``, ``Ethnicity - unknown``), a refusal ("patient declined to state
race"), or a description of the patient ("67 year old African American female", "62M
AA", "she is of East Asian descent"); a race word elsewhere ("white matter", "black
stool") is not a mention. DICOM's EthnicGroup (0010,2160) is free text (16 characters):
:func:`race_value` reads its spellings (``WHITE``, ``W``, ``CAUC``, ``AFR AM``, ``B``,
``HISP``, ``UNK``, the CDC race codes ``2106-3`` ...).

These are the *extracted* values; the study's levels come from the plan key
``metadata.race_levels`` (extracted value -> level; default :data:`DEFAULT_LEVELS`:
Declined -> Unknown, every other value as itself), applied by ``analysis.metadata``.
"""
from __future__ import annotations

import re

RACE_VALUES = ("Black", "White", "Asian", "Hispanic/Latino", "American Indian/Alaska Native",
               "Native Hawaiian/Pacific Islander", "Other", "Declined", "Unknown")
#: extracted value -> the study's level when the plan gives no metadata.race_levels
DEFAULT_LEVELS = {v: v for v in RACE_VALUES} | {"Declined": "Unknown"}

#: value -> phrasings (regular expressions) of a description or a label's value
RACE_PHRASES = {
    "Black": [r"black\s+or\s+african[- ]american", r"african[- ]american", r"afro[- ]american",
              r"afro[- ]caribbean", r"black", r"(?-i:AA)"],
    "White": [r"non[- ]hispanic\s+white", r"white\s+european", r"white", r"caucasian"],
    "Asian": [r"asian[- ]american", r"(?:east|south|southeast|south[- ]east)\s+asian", r"asian"],
    "Hispanic/Latino": [r"hispanic\s*(?:/|or)\s*latin[oa]x?", r"hispanic", r"latin[oa]x?"],
    "American Indian/Alaska Native": [r"american\s+indian(?:\s*(?:/|or)\s*alaska(?:n)?\s+native)?",
                                      r"alaska(?:n)?\s+native", r"native\s+american"],
    "Native Hawaiian/Pacific Islander": [r"native\s+hawaiian(?:\s*(?:/|or)\s*(?:other\s+)?pacific\s+islander)?",
                                         r"pacific\s+islander"],
}
#: only after a label ("Race: other", "Race: unknown")
LABEL_ONLY = {
    "Other": [r"other", r"multi[- ]?racial", r"mixed(?:\s+race)?", r"bi[- ]?racial",
              r"two\s+or\s+more(?:\s+races)?"],
    "Declined": [r"(?:patient\s+|pt\s+)?declined(?:\s+to\s+(?:answer|state|say|provide))?",
                 r"(?:patient\s+|pt\s+)?refused", r"prefers?\s+not\s+to\s+(?:say|answer|state)"],
    "Unknown": [r"unknown", r"unk\b\.?", r"not\s+(?:recorded|stated|documented|available|known|given|specified)",
                r"n/?a\b"],
}
#: "of African descent": the words before descent/origin/ancestry/heritage
_DESCENT = {"Black": r"african|black|afro[- ]caribbean", "White": r"(?:white\s+)?european|white|caucasian",
            "Asian": r"(?:east|south|southeast)?\s*asian",
            "Hispanic/Latino": r"hispanic|latin[oa]x?|latin\s+american"}

_NOT_RACE_NEXT = (r"(?!\s+(?:matter|blood|cells?|counts?|stool|area|out|phase|light|spots?|plaques?|"
                  r"coat|line|pulp|fat|dot|box))")
_PERSON = (r"(?:male|female|man|woman|gentleman|lady|boy|girl|pt|patient|individual|adult|"
           r"(?-i:[MF])\b)")
_LABEL = r"\b(?:race\s*(?:/|and|or)\s*ethnicity|race|ethnicity|ethnic\s+group|ethnic\s+origin)\b"
_SEP = r"\s*(?:[:=|\-]\s*|\s+(?:is\s+)?)"


def _alt(pairs) -> tuple[str, dict]:
    """One alternation of named groups (v0, v1, ...) and group -> value."""
    parts, values = [], {}
    for i, (value, phrase) in enumerate(pairs):
        parts.append(f"(?P<v{i}>{phrase})")
        values[f"v{i}"] = value
    return "|".join(parts), values


_ALL = [(v, p) for v, ps in RACE_PHRASES.items() for p in ps]
_LABEL_ALL = [(v, p) for v, ps in LABEL_ONLY.items() for p in ps] + _ALL
_A_LABEL, V_LABEL = _alt(_LABEL_ALL)
_A_TERM, V_TERM = _alt(_ALL)
_A_DESCENT, V_DESCENT = _alt(list(_DESCENT.items()))

#: "Race: Caucasian", "Race/Ethnicity: Patient declined", "race unknown", "Ethnicity - Hispanic"
LABEL = re.compile(rf"{_LABEL}{_SEP}(?:(?:patient|pt)\s+is\s+)?(?:{_A_LABEL})(?![a-z])", re.IGNORECASE)
#: "declined to state race", "refused to provide ethnicity", "unknown race"
REFUSAL = re.compile(
    r"\b(?P<Declined>(?:declined|refused)\s+to\s+(?:state|provide|give|report|answer|disclose)\s+"
    r"(?:(?:his|her|their)\s+)?(?:race|ethnicity))\b|\b(?P<Unknown>unknown\s+(?:race|ethnicity))\b",
    re.IGNORECASE)
#: a race word describing the patient: before a person noun ("African American female"),
#: after an age/sex token ("62M AA", "67 yo Caucasian"), "is (a/an) ...", "of ... descent"
DESCRIPTION = [
    re.compile(rf"(?<![\w-])(?:{_A_TERM})(?![\w-])(?=[\s,]+(?:[a-z]+\s+)?{_PERSON}(?![\w-]))", re.IGNORECASE),
    re.compile(rf"(?:\b\d{{1,3}}\s*(?-i:[MF])|\b\d{{1,3}}\s*(?:yo|y/o|y\.o\.|yrs?|years?[- ]old)|"
               rf"\b(?-i:[MF])\s+pt|\b{_PERSON})[\s,]+(?:{_A_TERM})(?![\w-]){_NOT_RACE_NEXT}", re.IGNORECASE),
    re.compile(rf"\b(?:patient|pt|she|he)\s+(?:is|was)\s+(?:an?\s+)?(?:{_A_TERM})(?![\w-]){_NOT_RACE_NEXT}",
               re.IGNORECASE),
    re.compile(rf"\bof\s+(?:{_A_DESCENT})\s+(?:descent|origin|ancestry|heritage|background)\b",
               re.IGNORECASE),
]


def _value_of(m: re.Match, values: dict) -> tuple[str, int, int] | None:
    for g, v in values.items():
        if m.group(g) is not None:
            return v, m.start(g), m.end(g)
    return None


def label_mentions(text: str) -> list[tuple[str, int, int]]:
    """``(value, start, end)`` of every labelled or refused race statement; the span is
    the label with its value ("Race: Caucasian")."""
    out = []
    for m in LABEL.finditer(text):
        hit = _value_of(m, V_LABEL)
        if hit:
            out.append((hit[0], m.start(), hit[2]))
    for m in REFUSAL.finditer(text):
        v = "Declined" if m.group("Declined") else "Unknown"
        out.append((v, m.start(), m.end()))
    return sorted(set(out), key=lambda h: (h[1], -h[2]))


def description_mentions(text: str) -> list[tuple[str, int, int]]:
    """``(value, start, end)`` of every race word that describes a person; the span is
    the race phrase itself ("African American")."""
    out = []
    for i, rx in enumerate(DESCRIPTION):
        for m in rx.finditer(text):
            hit = _value_of(m, V_DESCENT if i == 3 else V_TERM)
            if hit:
                out.append((hit[0], m.start() if i == 3 else hit[1], m.end() if i == 3 else hit[2]))
    # a label's value is not a description too
    spans = [(s, e) for _, s, e in label_mentions(text)]
    out = [h for h in out if not any(s <= h[1] and h[2] <= e for s, e in spans)]
    return sorted(set(out), key=lambda h: (h[1], -h[2]))


#: DICOM EthnicGroup spellings (whole value, case and punctuation ignored) -> value
DICOM_CODES = {
    "W": "White", "WH": "White", "WHT": "White", "CAUC": "White", "C": "White",
    "B": "Black", "BL": "Black", "BLK": "Black", "AFR AM": "Black", "AFRAM": "Black",
    "AF AM": "Black", "AFR AMER": "Black", "AFRICAN AM": "Black", "BLACK AFR AM": "Black",
    "BLACK AFRICAN AMER": "Black", "BLACK AFRICAN AM": "Black",
    "ASN": "Asian", "AS": "Asian", "H": "Hispanic/Latino", "HISP": "Hispanic/Latino",
    "LAT": "Hispanic/Latino", "AI AN": "American Indian/Alaska Native", "AIAN": "American Indian/Alaska Native",
    "NH PI": "Native Hawaiian/Pacific Islander", "NHPI": "Native Hawaiian/Pacific Islander",
    "PI": "Native Hawaiian/Pacific Islander", "O": "Other", "OTH": "Other", "OTHER": "Other",
    "MULTI": "Other", "U": "Unknown", "UNK": "Unknown", "UNKNOWN": "Unknown", "UNKN": "Unknown",
    "NOT SPECIFIED": "Unknown", "DECLINED": "Declined", "REFUSED": "Declined",
    "PT DECLINED": "Declined", "PT REFUSED": "Declined", "DECL": "Declined",
    # CDC Race & Ethnicity code set (PHIN VADS)
    "2106-3": "White", "2054-5": "Black", "2028-9": "Asian", "2135-2": "Hispanic/Latino",
    "1002-5": "American Indian/Alaska Native", "2076-8": "Native Hawaiian/Pacific Islander",
    "2131-1": "Other",
}
_WHOLE = re.compile(rf"^\s*(?:{_A_LABEL})\s*$", re.IGNORECASE)


def race_value(text: str) -> str | None:
    """The race value of a whole short text (a DICOM EthnicGroup, an LLM's value, a plan
    key): a phrasing of :data:`RACE_PHRASES` / :data:`LABEL_ONLY`, an EthnicGroup
    spelling of :data:`DICOM_CODES`, or a value of :data:`RACE_VALUES`; else None."""
    s = str(text).strip()
    if not s:
        return None
    for v in RACE_VALUES:
        if s.lower() == v.lower():
            return v
    key = re.sub(r"[^A-Z0-9-]+", " ", s.upper()).strip()
    if key in DICOM_CODES:
        return DICOM_CODES[key]
    m = _WHOLE.match(s)
    if m:
        return _value_of(m, V_LABEL)[0]
    return None
