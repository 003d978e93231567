"""Report-text extractors (regular expressions and rules), each value with its verbatim
evidence span.

Input: a CSV with columns ``case_id`` and ``text``. ``source`` is ``text:<file>#<case_id>``
and ``start``/``end`` index into that case's text, so ``text[start:end] == evidence``.

Two extractors per field (the first is the rule answer, :data:`RULE_PREFERENCE`):

- phase: ``text_phase_regex`` (the first phase phrase that is not negated, not a finding
  such as "arterial phase hyperenhancement" and not in a comparison/prior sentence:
  "portal venous phase", "PV phase", "late arterial", "non-contrast", "unenhanced",
  "without IV contrast", "equilibrium/delayed", "Phase: PV", ...; oral contrast says
  nothing about the IV phase; nephrographic -> venous, corticomedullary -> arterial,
  excretory/urographic -> delayed) and ``text_contrast_timing`` (a scan delay in seconds
  after injection: < 45 s arterial, < 150 s venous, else delayed; or an explicit "without
  (IV) contrast" / "no IV contrast" -> non_contrast);
- age: ``text_age_yearold`` ("63-year-old", "63 yo", "63 y/o", "63y", "63M", "M/63",
  "sixty-three-year-old", "18-month-old" -> 1.5) and ``text_age_label`` ("Age: 63",
  "aged 63", "Age/Sex: 63/M", "patient is 63"); ages in months, weeks or days are years
  rounded to 2 decimals;
- sex: ``text_sex_noun`` (male/female/man/woman/gentleman/lady/boy/girl, "Sex: F",
  "Gender: female", "72M", "72 yo F", "F/72", Mr/Mrs/Ms) and ``text_sex_pronoun`` (the
  majority of he/his/him vs she/her/hers; ties give nothing).

:func:`extract_rules` gives one row per field (extractor ``text_rules``): the rule answer.
Accuracy on the labelled corpus in ``tests/data`` (held-out part): see
``tests/data/metadata_corpus_accuracy.csv``.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

_I = re.IGNORECASE
# ------------------------------------------------------------------ numbers and ages
_UNITS = ("one|two|three|four|five|six|seven|eight|nine")
_TEENS = ("ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen")
_TENS = "twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety"
_WORD_VALUES = {w: i + 1 for i, w in enumerate(_UNITS.split("|"))}
_WORD_VALUES |= {w: i + 10 for i, w in enumerate(_TEENS.split("|"))}
_WORD_VALUES |= {w: 20 + 10 * i for i, w in enumerate(_TENS.split("|"))}
NUM_WORD = (rf"(?:one[- ]hundred(?:[- ](?:and[- ])?(?:{_TEENS}|(?:{_TENS})(?:[- ](?:{_UNITS}))?|{_UNITS}))?"
            rf"|{_TEENS}|(?:{_TENS})(?:[- ](?:{_UNITS}))?|{_UNITS})")
_N = rf"(?P<n>\d{{1,3}}|{NUM_WORD})"
_UNIT_YEARS = {"y": 1.0, "m": 1 / 12, "w": 7 / 365.25, "d": 1 / 365.25}
_NOT_SIZE = r"(?!\s*(?:mm|cm|kg|ml|%|hu|days?|weeks?|hours?|h)\b)"
_FRENCH = r"(?!\s*(?:catheter|sheath|drain|pigtail|fr\b|french))"


def number(token: str) -> int | None:
    """'72' -> 72, 'seventy-two' -> 72, 'one hundred and two' -> 102; else None."""
    if token.isdigit():
        return int(token)
    total = 0
    for w in re.split(r"[- ]+", token.lower()):
        if w == "hundred":
            total = max(total, 1) * 100
        elif w in _WORD_VALUES:
            total += _WORD_VALUES[w]
        elif w != "and":
            return None
    return total or None


def _age(m: re.Match) -> float | int | None:
    n = number(m.group("n"))
    unit = (m.groupdict().get("u") or "y")[0].lower()
    if n is None:
        return None
    years = n * _UNIT_YEARS[unit]
    if not 0 <= years <= 120:
        return None
    return n if unit == "y" else round(years, 2)


_AGE_YEAROLD = [
    rf"\b{_N}\s*[- ]?\s*(?P<u>years?|yrs?|months?|mo|weeks?|wks?|days?)\.?[- ]old\b",
    rf"\b{_N}\s+years?\s+of\s+age\b",
    r"\b(?P<n>\d{1,3})\s*[- ]?(?:yo|y/o|y\.o\.?|y)(?![a-z/])",
    rf"\b(?P<n>\d{{1,3}})(?-i:[MFmf])\b{_FRENCH}",
    r"\b(?P<n>\d{1,3})\s*/\s*(?-i:[MFmf])\b",
    r"(?-i:\b[MFmf])\s*/\s*(?P<n>\d{1,3})\b",
    rf"(?:\b(?:male|female|man|woman)|(?-i:\b[MF])),\s*(?P<n>\d{{1,3}})\b{_NOT_SIZE}",
]
_AGE_LABEL = [
    rf"\b(?:age|aged)\b\s*(?:[:=]\s*|is\s+|of\s+)?{_N}\b{_NOT_SIZE}(?:\s*(?:years?|yrs?|y)\b\.?)?",
    r"\bage\s*/\s*(?:sex|gender)\s*[:=]?\s*(?P<n>\d{1,3})",
    (rf"\b(?:patient|pt|he|she)\s+is\s+(?:an?\s+)?(?P<n>\d{{1,3}})\b{_NOT_SIZE}"
     r"(?!\s*(?:y|yrs?|years?|mo|months?)\b)"),
]
# ------------------------------------------------------------------ sex
_SEX_WORDS = {"female": "F", "woman": "F", "lady": "F", "girl": "F", "f": "F", "mrs": "F",
              "ms": "F", "miss": "F", "male": "M", "man": "M", "gentleman": "M", "boy": "M",
              "m": "M", "mr": "M"}
_SEX_NOUN = [
    r"\b(?:sex|gender)\s*[:=]?\s*(?P<s>male|female|man|woman|m|f)\b",
    r"\bage\s*/\s*(?:sex|gender)\s*[:=]?\s*\d{1,3}\s*(?:y\w*\s*)?[/,]?\s*(?P<s>male|female|m|f)\b",
    rf"\b\d{{1,3}}(?P<s>(?-i:[MFmf]))\b{_FRENCH}",
    r"\b\d{1,3}\s*[- ]?(?:yo|y/o|y\.o\.?|y|years?[- ]old|year[- ]old)\s*,?\s*(?P<s>(?-i:[MFmf]))\b",
    r"\b\d{1,3}\s*/\s*(?P<s>(?-i:[MFmf]))\b",
    r"(?-i:\b(?P<s>[MFmf]))\s*/\s*\d{1,3}\b",
    r"(?-i:\b(?P<s>[MF])),\s*\d{1,3}\b",
    r"\b(?P<s>(?-i:[MFmf]))\s+pt\b",
    r"\b(?P<s>female|woman|lady|girl|gentleman|man|male|boy)\b",
    r"(?-i:\b(?P<s>Mrs|Ms|Miss|Mr)\b)",
]
_PRONOUN = [("F", re.compile(r"\b(?:she|her|hers)\b", _I)),
            ("M", re.compile(r"\b(?:he|his|him)\b", _I))]
# ------------------------------------------------------------------ phase
_NEG_CONTRAST = (r"(?:without|w/o|wo|no)\s+(?:(?:iv|i\.v\.|intravenous)\s+(?:or\s+oral\s+)?|"
                 r"oral\s+or\s+(?:iv|i\.v\.|intravenous)\s+)?contrast\b"
                 r"(?![- ]?(?:enhanc|uptake|related|reaction|allerg))")
_CONTRAST_NONE = (r"(?<!oral )(?<!po )\b(?:(?:iv|i\.v\.|intravenous)\s+)?contrast\s*[:=]\s*"
                  r"(?:none|no|nil|not given)\b")
_PHASE_PATTERNS = [
    ("non_contrast", (r"\b(?:non[- ]?contrast(?:ed)?|non[- ]?con\b|unenhanced|non[- ]?enhanced\b|"
                      r"pre[- ]?contrast|nect|ncct|native (?:phase|scan|ct)|"
                      r"plain (?:ct|scan|phase|images?|acquisition|study))")),
    ("non_contrast", rf"\b{_NEG_CONTRAST}"),
    ("non_contrast", _CONTRAST_NONE),
    ("arterial", (r"\b(?:(?:late|early)\s+(?:hepatic\s+)?arterial(?:[- ]?phase)?|hepatic\s+arterial[- ]?phase|"
                  r"arterial[- ]?phase|art\.?\s+phase|corticomedullary(?:[- ]?phase)?|angiographic\s+phase)\b")),
    ("venous", (r"\b(?:portal[- ]?venous(?:[- ]?phase)?|porto[- ]?venous(?:[- ]?phase)?|portal[- ]phase|"
                r"venous[- ]phase|p\.?v\.?[- ]?phase|pvp|nephrographic(?:[- ]?phase)?)\b")),
    ("delayed", (r"\b(?:delayed[- ]?(?:phase|images?|imaging|scans?|series|acquisition|imgs)|"
                 r"equilibrium(?:/delayed)?(?:[- ]?phase)?|"
                 r"\d+[- ]?min(?:ute)?s?\.?\s+delay(?:ed)?(?:[- ]?(?:phase|images?|scans?))?|"
                 r"delay(?:ed)?\s+(?:imgs\s+|images\s+)?(?:of\s+|at\s+)?\d+\s*min(?:ute)?s?|"
                 r"excretory(?:[- ]?phase)?|urographic(?:[- ]?phase)?)\b")),
]
_PHASE_LABEL = re.compile(r"\bphase\s*[:=]\s*(?P<v>pv|art|nc|del|delayed|arterial|venous|"
                          r"non-?contrast|unenhanced)\b", _I)
_LABEL_VALUES = {"pv": "venous", "venous": "venous", "art": "arterial", "arterial": "arterial",
                 "nc": "non_contrast", "noncontrast": "non_contrast", "non-contrast": "non_contrast",
                 "unenhanced": "non_contrast", "del": "delayed", "delayed": "delayed"}
_PHASE_RE = [(v, re.compile(p, _I)) for v, p in _PHASE_PATTERNS]
#: text right after a phase phrase that makes it a finding or an anatomical term, not a phase
_NOT_A_PHASE = re.compile(r"^[- ]?(?:phase\s+)?(?:(?:hyper|hypo|iso)?enhanc|wash|calcif)|"
                          r"^\s*(?:system|thromb|gas|hypertension|flow|invasion|vein)", _I)
_NEGATED_BEFORE = re.compile(r"\b(?:no|not|without)\s+(?:\w+\s+)?$", _I)
_NEGATED_AFTER = re.compile(r"^[^.;]{0,20}?\b(?:was|were|is)\s+not\s+(?:acquired|performed|obtained|done)|"
                            r"^[^.;]{0,12}\bomitted", _I)
_HISTORY = re.compile(r"\b(?:comparison|compared|prior|previous(?:ly)?|earlier|outside)\b", _I)
_SENTENCE_END = re.compile(r"[.;!?](?=\s|$)|\n")
_DELAY = re.compile(r"\b(\d{1,3})\s*(?:s|sec|secs|seconds)\b(?:\s+(?:after|post|following))?", _I)
_NO_CONTRAST = re.compile(rf"\b{_NEG_CONTRAST}", _I)

#: the rule answer per field: the first of these extractors that gave a value
RULE_PREFERENCE = {"phase": ("text_phase_regex", "text_contrast_timing"),
                   "age": ("text_age_yearold", "text_age_label"),
                   "sex": ("text_sex_noun", "text_sex_pronoun")}

MSG_TEXT_COLUMNS = ("{file}: a report-text CSV needs columns 'case_id' and 'text' (found {found}); "
                    "rename them")
MSG_TEXT_ENCODING = ("{file}: not valid UTF-8 text (a byte {byte} cannot be decoded); evidence spans "
                     "index the exact text, so clinrel does not guess the encoding; re-save the "
                     "file as UTF-8 (in Python: df.to_csv(path, encoding='utf-8'); in R: "
                     "write.csv(..., fileEncoding = 'UTF-8'))")
MSG_TEXT_UNREADABLE = ("{file}: cannot be read as a CSV table ({detail}); save it as CSV (UTF-8, "
                       "comma-separated, header row case_id,text)")


def _compiled(patterns):
    return [re.compile(p, _I) for p in patterns]


_AGE_RULES = {"text_age_yearold": _compiled(_AGE_YEAROLD), "text_age_label": _compiled(_AGE_LABEL)}
_SEX_RULES = _compiled(_SEX_NOUN)


def first_hit(patterns, text: str, value) -> tuple | None:
    """The earliest ``(value, start, end)`` over ``patterns`` whose ``value(match)`` is not None."""
    best = None
    for rx in patterns:
        for m in rx.finditer(text):
            if best is not None and m.start() >= best[1]:
                break
            v = value(m)
            if v is not None:
                best = (v, m.start(), m.end())
                break
    return best


def _sentence_start(text: str, pos: int) -> int:
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, pos)]
    return ends[-1] if ends else 0


def _is_phase(text: str, value: str, start: int, end: int) -> bool:
    """False for a phrase that is a finding, negated, or about a prior study."""
    after, before = text[end:end + 40], text[_sentence_start(text, start):start]
    if _NOT_A_PHASE.match(after) or _HISTORY.search(before):
        return False
    negated = _NEGATED_BEFORE.search(before) or _NEGATED_AFTER.match(after)
    return value == "non_contrast" or not negated


def phase_matches(text: str) -> list[tuple[str, int, int]]:
    """Every phase phrase in ``text`` that states this study's phase, as
    ``(value, start, end)`` in text order."""
    hits = [(v, m.start(), m.end()) for v, rx in _PHASE_RE for m in rx.finditer(text)]
    hits += [(_LABEL_VALUES[m.group("v").lower()], m.start(), m.end()) for m in _PHASE_LABEL.finditer(text)]
    return sorted((h for h in hits if _is_phase(text, *h)), key=lambda h: (h[1], -h[2]))


def _row(case_id, field, value, extractor, text, start, end, source):
    return {"case_id": case_id, "field": field, "value": str(value), "extractor": extractor,
            "evidence": text[start:end], "start": int(start), "end": int(end), "source": source}


def extract_text(case_id: str, text: str, source: str) -> list[dict]:
    """Evidence rows from one report (all six extractors)."""
    rows: list[dict] = []
    hits = phase_matches(text)
    if hits:
        v, s, e = hits[0]
        rows.append(_row(case_id, "phase", v, "text_phase_regex", text, s, e, source))
    if (m := _NO_CONTRAST.search(text)) is not None:
        rows.append(_row(case_id, "phase", "non_contrast", "text_contrast_timing", text, m.start(), m.end(),
                         source))
    elif (m := _DELAY.search(text)) is not None and re.search(r"contrast|injection|bolus", text, _I):
        sec = int(m.group(1))
        v = "arterial" if sec < 45 else "venous" if sec < 150 else "delayed"
        rows.append(_row(case_id, "phase", v, "text_contrast_timing", text, m.start(), m.end(), source))
    for extractor, patterns in _AGE_RULES.items():
        if (hit := first_hit(patterns, text, _age)) is not None:
            rows.append(_row(case_id, "age", hit[0], extractor, text, hit[1], hit[2], source))
    sex = first_hit(_SEX_RULES, text, lambda m: _SEX_WORDS[m.group("s").lower()])
    if sex is not None:
        rows.append(_row(case_id, "sex", sex[0], "text_sex_noun", text, sex[1], sex[2], source))
    counts = {v: [m for m in rx.finditer(text)] for v, rx in _PRONOUN}
    nf, nm = len(counts["F"]), len(counts["M"])
    if nf != nm:
        v = "F" if nf > nm else "M"
        m = counts[v][0]
        rows.append(_row(case_id, "sex", v, "text_sex_pronoun", text, m.start(), m.end(), source))
    return rows


def rule_answer(rows: list[dict], preference: dict = RULE_PREFERENCE) -> dict[str, dict]:
    """field -> the row of the first extractor in ``preference[field]`` that gave a value."""
    out: dict[str, dict] = {}
    for field, order in preference.items():
        for extractor in order:
            row = next((r for r in rows if r["field"] == field and r["extractor"] == extractor), None)
            if row is not None:
                out[field] = row
                break
    return out


def extract_rules(reports, *, source_prefix: str = "text:") -> list[dict]:
    """One evidence row per report x field with a value (extractor ``text_rules``): the rule
    answer of :func:`extract_text` by :data:`RULE_PREFERENCE`. ``reports``: a DataFrame with
    ``case_id`` and ``text``."""
    rows = []
    for cid, text in zip(reports["case_id"], reports["text"]):
        answer = rule_answer(extract_text(cid, text, f"{source_prefix}#{cid}"))
        rows += [{**r, "extractor": "text_rules"} for r in answer.values()]
    return rows


def read_text_csv(path, **kwargs) -> pd.DataFrame:
    """``pd.read_csv(path, **kwargs)`` of a UTF-8 CSV; an undecodable or malformed file is a
    ``ConfigError`` naming the file and the fix."""
    from .. import config

    file = Path(path)
    try:
        return pd.read_csv(file, encoding="utf-8", **kwargs)
    except UnicodeDecodeError as exc:
        raise config.ConfigError(MSG_TEXT_ENCODING.format(
            file=file, byte=exc.object[exc.start:exc.start + 1])) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise config.ConfigError(MSG_TEXT_UNREADABLE.format(file=file, detail=detail)) from None


def read_reports(path) -> pd.DataFrame:
    from .. import config

    file = Path(path)
    df = read_text_csv(file, dtype={"case_id": str, "text": str}, keep_default_na=False)
    if not {"case_id", "text"} <= set(df.columns):
        raise config.ConfigError(MSG_TEXT_COLUMNS.format(file=file, found=list(df.columns)))
    return df


def extract_reports(path, advance=None) -> list[dict]:
    """Evidence rows for every report in a CSV (case_id, text)."""
    df = read_reports(path)
    rows: list[dict] = []
    for cid, text in zip(df["case_id"], df["text"]):
        rows += extract_text(cid, text, f"text:{path}#{cid}")
        if advance:
            advance(1)
    return rows
