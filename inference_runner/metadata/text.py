"""Report-text extractors (regular expressions and rules), each value with its verbatim
evidence span.

Input: a CSV with columns ``case_id`` and ``text``. ``source`` is ``text:<file>#<case_id>``
and ``start``/``end`` index into that case's text, so ``text[start:end] == evidence``.

Two extractors per field:

- phase: ``text_phase_regex`` (the first phase phrase: "portal venous phase",
  "late arterial", "non-contrast", "unenhanced", "delayed phase", ...) and
  ``text_contrast_timing`` (a scan delay in seconds after injection: < 45 s arterial,
  < 150 s venous, else delayed; or an explicit "without (IV) contrast" -> non_contrast);
- age: ``text_age_yearold`` ("63-year-old", "63 yo", "63 y/o") and ``text_age_label``
  ("Age: 63", "aged 63");
- sex: ``text_sex_noun`` (male/female/man/woman/gentleman/lady) and ``text_sex_pronoun``
  (the majority of he/his/him vs she/her/hers; ties give nothing).
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

_PHASE_PATTERNS = [
    ("non_contrast", r"\b(?:non[- ]?contrast|unenhanced|non[- ]?enhanced|without (?:iv |intravenous )?contrast|"
                     r"pre[- ]?contrast|plain|native phase|nc ct)\b"),
    ("arterial", r"\b(?:(?:late |early )?arterial(?: phase)?|hepatic arterial|art\.? phase)\b"),
    ("venous", r"\b(?:portal[- ]?venous(?: phase)?|portovenous|venous phase|pv phase)\b"),
    ("delayed", r"\b(?:delayed(?: phase)?|equilibrium phase|late phase|excretory phase)\b"),
]
_PHASE_RE = [(v, re.compile(p, re.IGNORECASE)) for v, p in _PHASE_PATTERNS]
_DELAY = re.compile(r"\b(\d{1,3})\s*(?:s|sec|secs|seconds)\b(?:\s+(?:after|post|following))?", re.IGNORECASE)
_NO_CONTRAST = re.compile(r"\bwithout (?:iv |intravenous )?contrast\b|\bno (?:iv |intravenous )?contrast\b",
                          re.IGNORECASE)
_AGE_YO = re.compile(r"\b(\d{1,3})[- ]?(?:year[- ]old|years? old|yo\b|y/o|y\.o\.)", re.IGNORECASE)
_AGE_LABEL = re.compile(r"\b(?:age[d:]?\s*:?\s*)(\d{1,3})\b", re.IGNORECASE)
_SEX_NOUN = [("F", re.compile(r"\b(?:female|woman|lady|girl)\b", re.IGNORECASE)),
             ("M", re.compile(r"\b(?:male|man|gentleman|boy)\b", re.IGNORECASE))]
_PRONOUN = [("F", re.compile(r"\b(?:she|her|hers)\b", re.IGNORECASE)),
            ("M", re.compile(r"\b(?:he|his|him)\b", re.IGNORECASE))]

MSG_TEXT_COLUMNS = ("{file}: a report-text CSV needs columns 'case_id' and 'text' (found {found}); "
                    "rename them")
MSG_TEXT_ENCODING = ("{file}: not valid UTF-8 text (a byte {byte} cannot be decoded); evidence spans "
                     "index the exact text, so clinrel does not guess the encoding; re-save the "
                     "file as UTF-8 (in Python: df.to_csv(path, encoding='utf-8'); in R: "
                     "write.csv(..., fileEncoding = 'UTF-8'))")
MSG_TEXT_UNREADABLE = ("{file}: cannot be read as a CSV table ({detail}); save it as CSV (UTF-8, "
                       "comma-separated, header row case_id,text)")


def phase_matches(text: str) -> list[tuple[str, int, int]]:
    """All phase phrases in ``text`` as ``(value, start, end)``, in text order."""
    hits = [(v, m.start(), m.end()) for v, rx in _PHASE_RE for m in rx.finditer(text)]
    return sorted(hits, key=lambda h: h[1])


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
        rows.append(_row(case_id, "phase", "non_contrast", "text_contrast_timing", text, m.start(), m.end(), source))
    elif (m := _DELAY.search(text)) is not None and re.search(r"contrast|injection|bolus", text, re.IGNORECASE):
        sec = int(m.group(1))
        v = "arterial" if sec < 45 else "venous" if sec < 150 else "delayed"
        rows.append(_row(case_id, "phase", v, "text_contrast_timing", text, m.start(), m.end(), source))
    for extractor, rx in (("text_age_yearold", _AGE_YO), ("text_age_label", _AGE_LABEL)):
        m = rx.search(text)
        if m is not None and 0 <= int(m.group(1)) <= 120:
            rows.append(_row(case_id, "age", int(m.group(1)), extractor, text, m.start(), m.end(), source))
    nouns = sorted((m.start(), m.end(), v) for v, rx in _SEX_NOUN for m in rx.finditer(text))
    if nouns:
        s, e, v = nouns[0]
        rows.append(_row(case_id, "sex", v, "text_sex_noun", text, s, e, source))
    counts = {v: [m for m in rx.finditer(text)] for v, rx in _PRONOUN}
    nf, nm = len(counts["F"]), len(counts["M"])
    if nf != nm:
        v = "F" if nf > nm else "M"
        m = counts[v][0]
        rows.append(_row(case_id, "sex", v, "text_sex_pronoun", text, m.start(), m.end(), source))
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
