"""A second report-text extractor with other failure modes than the rules: character
n-gram TF-IDF and logistic regression (scikit-learn), trained on labelled reports.

- ``phase``, ``sex`` and ``race``: one multinomial logistic regression per field on the whole
  report (classes: the values seen in training plus ``none``). The predicted value's
  evidence is the sentence of the report whose own probability of that value is highest,
  so ``text[start:end] == evidence`` holds.
- ``age``: a candidate scorer. Every number in the report (digits, or words such as
  "seventy-two") is a candidate; its context (``WINDOW`` characters each side, the number
  masked) goes through TF-IDF character n-grams and a logistic regression for P(this
  number is the patient's age). The best candidate with P >= 0.5 gives the value (years;
  "month/week/day" right after the number converts it) and the number's span is the
  evidence.

It learns the phrasings of the sites it was trained on: on another site's style it fails
where the rules do not (and the reverse), which is what a second opinion is for. Fitting
is deterministic (``lbfgs``, fixed ``random_state``) and runs with one BLAS thread.

``train_classifier(corpus)`` -> :class:`ClassifierModel`; ``extract_with_classifier(reports,
model)`` -> evidence rows (extractor ``text_classifier``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stats._threads import one_blas_thread

from .text import NUM_WORD, _row, number

FIELDS = ("phase", "sex", "race", "age")
NONE = "none"
WINDOW = 24
SEED = 0
EXTRACTOR = "text_classifier"
_CANDIDATE = re.compile(rf"(?<![\d.])\d{{1,3}}(?![\d])|\b{NUM_WORD}\b", re.IGNORECASE)
_UNIT_AFTER = re.compile(r"^\s*[- ]?(months?|mo|weeks?|wks?|days?)\b", re.IGNORECASE)
_UNIT_YEARS = {"m": 1 / 12, "w": 7 / 365.25, "d": 1 / 365.25}
_SENTENCE = re.compile(r"[^.;\n]+(?:[.;](?=\s|$))?")
MSG_ONE_CLASS = ("train_classifier: field '{field}' has only the value(s) {values} in the "
                 "training corpus; the classifier needs labelled reports with at least two "
                 "(a missing label counts as 'none')")
MSG_COLUMNS = ("train_classifier: the corpus needs columns text, age, sex, phase (missing "
               "{missing}), and race to learn race; give one row per labelled report, None "
               "where a field is absent")


@dataclass(frozen=True)
class ClassifierModel:
    """Fitted pipelines: ``phase``, ``sex`` and ``race`` (report -> value or 'none'; race
    None when the corpus labels no race), ``age`` (number in context -> P(age));
    ``n_train`` reports."""

    phase: object
    sex: object
    age: object
    n_train: int
    race: object = None


def _pipeline():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True,
                                         min_df=1),
                         LogisticRegression(C=10.0, max_iter=5000, random_state=SEED))


def candidates(text: str) -> list[tuple[int, int, float, str]]:
    """Numbers in ``text`` as ``(start, end, years, masked context)``."""
    out = []
    for m in _CANDIDATE.finditer(text):
        n = number(m.group(0))
        if n is None:
            continue
        unit = _UNIT_AFTER.match(text[m.end():m.end() + 12])
        years = round(n * _UNIT_YEARS[unit.group(1)[0].lower()], 2) if unit else n
        if years > 120:
            continue
        context = f"{text[max(0, m.start() - WINDOW):m.start()]} <N> {text[m.end():m.end() + WINDOW]}"
        out.append((m.start(), m.end(), years, context))
    return out


def _label(value) -> str:
    return NONE if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def _same_age(a: float, label) -> bool:
    return label is not None and not (isinstance(label, float) and np.isnan(label)) \
        and abs(float(a) - float(label)) < 1e-9


def train_classifier(corpus) -> ClassifierModel:
    """Fit the models on labelled reports: a DataFrame (or records) with ``text``, ``age``,
    ``sex``, ``phase`` and optionally ``race`` (None/NaN where the report states no value;
    without a race column, or with no race label, no race model)."""
    from ..config import ConfigError

    df = pd.DataFrame(list(corpus) if not isinstance(corpus, pd.DataFrame) else corpus)
    missing = [c for c in ("text", "age", "sex", "phase") if c not in df.columns]
    if missing:
        raise ConfigError(MSG_COLUMNS.format(missing=", ".join(missing)))
    texts = df["text"].astype(str).tolist()
    data = {field: (texts, [_label(v) for v in df[field].astype(object)]) for field in ("phase", "sex")}
    if "race" in df.columns and df["race"].notna().any():
        data["race"] = (texts, [_label(v) for v in df["race"].astype(object)])
    contexts, is_age = [], []
    for text, age in zip(texts, df["age"].astype(object)):
        for _, _, years, context in candidates(text):
            contexts.append(context)
            is_age.append(int(_same_age(years, age)))
    data["age"] = (contexts, is_age)
    for field, (_, y) in data.items():
        if len(set(y)) < 2:
            raise ConfigError(MSG_ONE_CLASS.format(field=field, values=sorted(set(map(str, y)))))
    with one_blas_thread():  # many BLAS threads on small problems only contend
        fitted = {field: _pipeline().fit(x, y) for field, (x, y) in data.items()}
    return ClassifierModel(phase=fitted["phase"], sex=fitted["sex"], age=fitted["age"], n_train=len(df),
                           race=fitted.get("race"))


def _sentences(text: str) -> list[tuple[int, int]]:
    spans = []
    for m in _SENTENCE.finditer(text):
        seg = m.group(0)
        lead = len(seg) - len(seg.lstrip())
        s, e = m.start() + lead, m.start() + len(seg.rstrip())
        if e > s:
            spans.append((s, e))
    return spans


def _classified(texts: list[str], pipe) -> list[tuple | None]:
    """Per text: ``(value, start, end)`` of the predicted value and its best sentence."""
    classes = list(pipe.classes_)
    pred = pipe.predict(texts)
    spans = [_sentences(t) for t in texts]
    flat = [t[s:e] for t, sp in zip(texts, spans) for s, e in sp]
    proba = pipe.predict_proba(flat) if flat else np.zeros((0, len(classes)))
    out, k = [], 0
    for value, sp in zip(pred, spans):
        block, k = proba[k:k + len(sp)], k + len(sp)
        if value == NONE or not sp:
            out.append(None)
            continue
        best = int(np.argmax(block[:, classes.index(value)]))
        out.append((value, *sp[best]))
    return out


def _ages(texts: list[str], pipe) -> list[tuple | None]:
    cands = [candidates(t) for t in texts]
    flat = [c[3] for cs in cands for c in cs]
    p = pipe.predict_proba(flat)[:, list(pipe.classes_).index(1)] if flat else np.zeros(0)
    out, k = [], 0
    for cs in cands:
        block, k = p[k:k + len(cs)], k + len(cs)
        if not cs or block.max() < 0.5:
            out.append(None)
            continue
        s, e, years, _ = cs[int(np.argmax(block))]
        out.append((years, s, e))
    return out


def classifier_answers(texts: list[str], model: ClassifierModel, *, case_ids=None,
                       source_prefix: str = "text:") -> list[dict[str, dict]]:
    """Per text: field -> evidence row (extractor ``text_classifier``)."""
    texts = [str(t) for t in texts]
    case_ids = list(range(len(texts))) if case_ids is None else list(case_ids)
    with one_blas_thread():
        hits = {"phase": _classified(texts, model.phase), "sex": _classified(texts, model.sex),
                "age": _ages(texts, model.age)}
        if model.race is not None:
            hits["race"] = _classified(texts, model.race)
    out = []
    for i, (cid, text) in enumerate(zip(case_ids, texts)):
        answer = {}
        for field in FIELDS:
            if field in hits and (h := hits[field][i]) is not None:
                answer[field] = _row(cid, field, h[0], EXTRACTOR, text, h[1], h[2], f"{source_prefix}#{cid}")
        out.append(answer)
    return out


def extract_with_classifier(reports, model: ClassifierModel, *, source_prefix: str = "text:") -> list[dict]:
    """Evidence rows for ``reports`` (DataFrame with ``case_id``, ``text``), one per report
    x field with a predicted value."""
    answers = classifier_answers(reports["text"].tolist(), model, case_ids=reports["case_id"].tolist(),
                                 source_prefix=source_prefix)
    return [row for a in answers for row in a.values()]
