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
    # a bare "76 yrs" as a field of a demographics line ("DEMOGRAPHICS | 76 yrs | Sex M")
    r"(?:^|(?<=[|;]))\s*(?P<n>\d{1,3})\s*(?:yrs?|years?)\b\.?(?=\s*(?:[|;,]|$))",
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
_PHASE_PATTERNS = [
    ("non_contrast", (r"\b(?:non[- ]?contrast(?:ed)?|non[- ]?con\b|unenhanced|non[- ]?enhanced\b|"
                      r"pre[- ]?contrast|nect|ncct|native (?:phase|scan|ct)|"
                      r"plain (?:ct|scan|phase|images?|acquisition|study))")),
    ("arterial", (r"\b(?:(?:late|early)\s+(?:hepatic\s+)?arterial(?:[- ]?phase)?|hepatic\s+arterial[- ]?phase|"
                  r"arterial[- ]?phase|art\.?\s+phase|corticomedullary(?:[- ]?phase)?|angiographic\s+phase)\b")),
    ("venous", (r"\b(?:portal[- ]?venous(?:[- ]?phase)?|porto[- ]?venous(?:[- ]?phase)?|portal[- ]phase|"
                r"venous[- ]phase|p\.?v\.?[- ]?phase|pvp|nephrographic(?:[- ]?phase)?)\b")),
    ("delayed", (r"\b(?:delayed[- ]?(?:phase|images?|imaging|scans?|series|acquisition|imgs)|"
                 r"equilibrium(?:/delayed)?(?:[- ]?phase)?|"
                 r"\d+[- ]?min(?:ute)?s?\.?\s+delay(?:ed)?(?:[- ]?(?:phase|images?|scans?))?|"
                 r"delay(?:ed)?\s+(?:imgs\s+|images\s+)?(?:of\s+|at\s+)?\d+\s*min(?:ute)?s?|"
                 r"excretory(?:[- ]?phase)?|urographic(?:[- ]?phase)?)\b")),
    # "delayed (5 min)": a delay in brackets (no word boundary after the bracket)
    ("delayed", r"\bdelayed\s*\(\s*\d+(?:\.\d+)?\s*(?:min(?:ute)?s?|m)\s*\)"),
]
_PHASE_LABEL = re.compile(r"\b(?:phase|protocol|acquisition)\s*[:=|]\s*(?P<v>pv|art|nc|del|delayed|arterial|"
                          r"late arterial|early arterial|portal venous|venous|non-?contrast|unenhanced)\b",
                          _I)
_LABEL_VALUES = {"pv": "venous", "venous": "venous", "portal venous": "venous", "art": "arterial",
                 "arterial": "arterial", "late arterial": "arterial", "early arterial": "arterial",
                 "nc": "non_contrast", "noncontrast": "non_contrast", "non-contrast": "non_contrast",
                 "unenhanced": "non_contrast", "del": "delayed", "delayed": "delayed"}
_PHASE_RE = [(v, re.compile(p, _I)) for v, p in _PHASE_PATTERNS]
#: text right after a phase phrase that makes it a finding or an anatomical term, not a phase
_NOT_A_PHASE = re.compile(r"^[- ]?(?:phase\s+)?(?:(?:hyper|hypo|iso)?enhanc|wash|calcif)|"
                          r"^\s*(?:system|thromb|gas|hypertension|flow|invasion|vein)", _I)
#: a mention of IV contrast (ConText decides: negated -> non-contrast; asserted -> no phase):
#: not oral/rectal contrast, not "contrast-enhanced", "contrast-related complications",
#: "contrast allergy", not the "contrast" of "non-contrast" / "pre-contrast"
_CONTRAST = re.compile(
    r"(?<!oral )(?<!po )(?<!rectal )(?<!non-)(?<!non)(?<!pre-)(?<!pre)(?<!post-)(?<!post)"
    r"\b(?:(?:iv|i\.v\.|intravenous)\s+(?:or\s+oral\s+)?)?contrast\b"
    r"(?![- ]?(?:enhanc|uptake|related|reaction|allerg|induced|nephropathy|medium\s+(?:allerg|reaction)|"
    r"agent\s+(?:allerg|reaction)|extravasation|to\s+noise|resolution))", _I)
_CONTRAST_WORDS = re.compile(r"contrast|injection|bolus", _I)
_DELAY = re.compile(r"\b(\d{1,3})\s*(?:s|sec|secs|seconds)\b(?:\s+(?:after|post|following))?", _I)

#: the rule answer per field: the first of these extractors that gave a value
RULE_PREFERENCE = {"phase": ("text_phase_regex", "text_contrast_timing"),
                   "age": ("text_age_yearold", "text_age_label"),
                   "sex": ("text_sex_noun", "text_sex_pronoun"),
                   "race": ("text_race_label", "text_race_mention")}

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


def _is_phase_phrase(text: str, start: int, end: int) -> bool:
    """False for a phrase that is a finding or an anatomical term ("arterial phase
    hyperenhancement", "portal venous thrombosis"), not a phase (a lexical sense: the
    clinical context is ConText's)."""
    return not _NOT_A_PHASE.match(text[end:end + 40])


def _candidates(text: str) -> list[dict]:
    """Every candidate mention: ``field``, ``extractor``, ``value`` (None: read from the
    context: a contrast mention), ``kind`` (the ConText target type), ``start``, ``end``."""
    from . import race as _race
    from .context import AGE, CONTRAST, PHASE, RACE, SEX

    out = []

    def add(field, extractor, value, kind, s, e):
        out.append({"field": field, "extractor": extractor, "value": value, "kind": kind,
                    "start": s, "end": e})

    for v, rx in _PHASE_RE:
        for m in rx.finditer(text):
            if _is_phase_phrase(text, m.start(), m.end()):
                add("phase", "text_phase_regex", v, PHASE, m.start(), m.end())
    for m in _PHASE_LABEL.finditer(text):
        add("phase", "text_phase_regex", _LABEL_VALUES[m.group("v").lower()], PHASE, m.start(), m.end())
    for m in _CONTRAST.finditer(text):
        for extractor in ("text_phase_regex", "text_contrast_timing"):
            add("phase", extractor, None, CONTRAST, m.start(), m.end())
    if _CONTRAST_WORDS.search(text):
        for m in _DELAY.finditer(text):
            sec = int(m.group(1))
            v = "arterial" if sec < 45 else "venous" if sec < 150 else "delayed"
            add("phase", "text_contrast_timing", v, PHASE, m.start(), m.end())
    for extractor, patterns in _AGE_RULES.items():
        for rx in patterns:
            for m in rx.finditer(text):
                if (v := _age(m)) is not None:
                    add("age", extractor, v, AGE, m.start(), m.end())
    for rx in _SEX_RULES:
        for m in rx.finditer(text):
            add("sex", "text_sex_noun", _SEX_WORDS[m.group("s").lower()], SEX, m.start(), m.end())
    for v, rx in _PRONOUN:
        for m in rx.finditer(text):
            add("sex", "text_sex_pronoun", v, SEX, m.start(), m.end())
    for v, s, e in _race.label_mentions(text):
        add("race", "text_race_label", v, RACE, s, e)
    for v, s, e in _race.description_mentions(text):
        add("race", "text_race_mention", v, RACE, s, e)
    return out


def _read(text: str, cands: list[dict]) -> list[dict]:
    """Each candidate with its ``context`` (medspaCy ConText, :mod:`.context`) and its
    value: a contrast mention negated about the current study is non-contrast (context
    asserted), negated about a prior or hypothetical study keeps that label; a contrast
    mention that is not negated states no phase and is dropped."""
    from .context import ASSERTED, NEGATED, Mention, contexts, top_label

    keys = list(dict.fromkeys((c["kind"], c["start"], c["end"]) for c in cands))
    labels = dict(zip(keys, contexts(text, [Mention(*k) for k in keys])))
    out = []
    for c in cands:
        cats = labels[(c["kind"], c["start"], c["end"])]
        if c["value"] is None:  # a contrast mention
            if NEGATED not in cats:
                continue
            c = {**c, "value": "non_contrast", "context": top_label(cats - {NEGATED}) or ASSERTED}
        else:
            c = {**c, "context": top_label(cats) or ASSERTED}
        out.append(c)
    return out


def phase_matches(text: str) -> list[tuple[str, int, int]]:
    """Every phase mention of ``text`` that states this study's phase (asserted, current),
    as ``(value, start, end)`` in text order."""
    from .context import ASSERTED

    hits = {(c["value"], c["start"], c["end"]) for c in _read(text, [
        c for c in _candidates(text) if c["extractor"] == "text_phase_regex"])
        if c["context"] == ASSERTED}
    return sorted(hits, key=lambda h: (h[1], -h[2]))


def _row(case_id, field, value, extractor, text, start, end, source, context="asserted"):
    return {"case_id": case_id, "field": field, "value": str(value), "extractor": extractor,
            "evidence": text[start:end], "start": int(start), "end": int(end), "source": source,
            "context": context}


def extract_text(case_id: str, text: str, source: str) -> list[dict]:
    """Evidence rows from one report: per extractor, its first asserted mention (context
    ``asserted``: the value), and every mention in another context (negated, historical,
    hypothetical, family: kept, never the value); for the pronoun extractor the majority
    of the asserted he/his/him vs she/her/hers (ties give nothing)."""
    from .context import ASSERTED

    read = sorted(_read(text, _candidates(text)), key=lambda c: (c["start"], -c["end"]))
    rows: list[dict] = []
    order = ("text_phase_regex", "text_contrast_timing", "text_age_yearold", "text_age_label",
             "text_sex_noun", "text_sex_pronoun", "text_race_label", "text_race_mention")
    for extractor in order:
        mine = [c for c in read if c["extractor"] == extractor]
        asserted = [c for c in mine if c["context"] == ASSERTED]
        if extractor == "text_sex_pronoun":
            nf = sum(c["value"] == "F" for c in asserted)
            nm = len(asserted) - nf
            asserted = [next(c for c in asserted if c["value"] == ("F" if nf > nm else "M"))] \
                if nf != nm else []
        chosen = asserted[:1]
        seen = set()
        for c in chosen + [c for c in mine if c["context"] != ASSERTED]:
            key = (c["value"], c["start"], c["end"], c["context"])
            if key in seen:
                continue
            seen.add(key)
            rows.append(_row(case_id, c["field"], c["value"], extractor, text, c["start"], c["end"],
                             source, c["context"]))
    return rows


def rule_answer(rows: list[dict], preference: dict = RULE_PREFERENCE) -> dict[str, dict]:
    """field -> the row of the first extractor in ``preference[field]`` that gave a value."""
    out: dict[str, dict] = {}
    for field, order in preference.items():
        for extractor in order:
            row = next((r for r in rows if r["field"] == field and r["extractor"] == extractor
                        and r.get("context", "asserted") == "asserted"), None)
            if row is not None:
                out[field] = row
                break
    return out


def extract_rules(reports, *, source_prefix: str = "text:") -> list[dict]:
    """One evidence row per report x field with a value (extractor ``text_rules``): the rule
    answer of :func:`extract_text` by :data:`RULE_PREFERENCE`; and, with the same extractor
    name, every mention the context set aside (negated, historical, hypothetical, family),
    once per field x span. ``reports``: a DataFrame with ``case_id`` and ``text``."""
    rows = []
    for cid, text in zip(reports["case_id"], reports["text"]):
        found = extract_text(cid, text, f"{source_prefix}#{cid}")
        answer = rule_answer(found)
        rows += [{**r, "extractor": "text_rules"} for r in answer.values()]
        aside = {}
        for r in found:
            if r["context"] != "asserted" and r["field"] in RULE_PREFERENCE:
                aside.setdefault((r["field"], r["start"], r["end"]), {**r, "extractor": "text_rules"})
        rows += list(aside.values())
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
