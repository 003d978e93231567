"""Compare two extractors of a field, write disagreements for review, merge reviews back.

Only values count (rows whose ``context`` is asserted): a negated, prior-study,
hypothetical or family mention is evidence kept for the reader, not a value to compare.

``agreement(evidence)`` -> one row per field x extractor pair that both ran:
``field, extractor_a, extractor_b, n_a, n_b, n_both, n_agree, agreement`` (share of
cases with both values that agree), ``kappa`` (Cohen's kappa over those cases,
``sklearn.metrics.cohen_kappa_score``; NaN with fewer than 2 cases or one category),
``n_disagree``.

``disagreements(evidence)`` -> the review table: ``case_id, field, extractor_a,
value_a, evidence_a, source_a, extractor_b, value_b, evidence_b, source_b,
reviewed_value`` (empty, for the reviewer), one row per case where the two extractors'
values differ (or only one gave a value).

``merge_reviewed(evidence, review)`` adds one ``extractor == "review"`` row per filled
``reviewed_value``; its evidence is that of the extractor whose value the reviewer kept
(empty when the reviewer wrote a new value). ``resolve(evidence)`` gives one value per
case x field: a review wins, then the preferred extractor order.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stats.agreement import AGREEMENT_COLUMNS  # noqa: F401  (one definition, in stats)

from . import EVIDENCE_COLUMNS, asserted

MSG_REVIEW_COLUMNS = ("{source}: the review table needs columns case_id, field, reviewed_value "
                      "(missing {missing}); start from the review CSV that extraction wrote")
REVIEW_COLUMNS = ("case_id", "field", "extractor_a", "value_a", "evidence_a", "source_a",
                  "extractor_b", "value_b", "evidence_b", "source_b", "reviewed_value")


def _pairs(evidence: pd.DataFrame):
    from stats.agreement import extractor_pairs

    return extractor_pairs(asserted(evidence))


def agreement(evidence: pd.DataFrame) -> pd.DataFrame:
    """Agreement (Wilson CI) and Cohen's kappa per field x extractor pair: the statistic
    lives in ``stats`` (:func:`stats.extractor_agreement`); the runner only calls it."""
    from stats.agreement import extractor_agreement

    return extractor_agreement(asserted(evidence))


def disagreements(evidence: pd.DataFrame) -> pd.DataFrame:
    """Cases where two extractors of a field differ or only one answered (for review)."""
    rows = []
    for field, a, b, wa, wb in _pairs(evidence):
        for case in wa.index.union(wb.index):
            ra = wa.loc[case] if case in wa.index else None
            rb = wb.loc[case] if case in wb.index else None
            if ra is not None and rb is not None and str(ra["value"]) == str(rb["value"]):
                continue
            rows.append({"case_id": case, "field": field,
                         "extractor_a": a, "value_a": None if ra is None else ra["value"],
                         "evidence_a": None if ra is None else ra["evidence"],
                         "source_a": None if ra is None else ra["source"],
                         "extractor_b": b, "value_b": None if rb is None else rb["value"],
                         "evidence_b": None if rb is None else rb["evidence"],
                         "source_b": None if rb is None else rb["source"],
                         "reviewed_value": ""})
    return pd.DataFrame(rows, columns=list(REVIEW_COLUMNS))


def merge_reviewed(evidence: pd.DataFrame, review: pd.DataFrame, *, source: str = "<review>") -> pd.DataFrame:
    """``evidence`` plus one ``review`` row per filled ``reviewed_value`` (replacing older
    review rows for the same case x field)."""
    from ..config import ConfigError

    missing = {"case_id", "field", "reviewed_value"} - set(review.columns)
    if missing:
        raise ConfigError(MSG_REVIEW_COLUMNS.format(source=source, missing=sorted(missing)))
    rv = review.copy()
    rv["reviewed_value"] = rv["reviewed_value"].fillna("").astype(str).str.strip()
    rv = rv[rv["reviewed_value"] != ""].drop_duplicates(["case_id", "field"], keep="last")
    if rv.empty:
        return evidence.copy()
    new = []
    for r in rv.to_dict("records"):
        ev, start, end, src = "", 0, 0, source
        for side in ("a", "b"):
            if str(r.get(f"value_{side}")) == r["reviewed_value"] and isinstance(r.get(f"evidence_{side}"), str):
                match = asserted(evidence)
                match = match[(match["case_id"].astype(str) == str(r["case_id"]))
                              & (match["field"] == r["field"])
                              & (match["extractor"] == r.get(f"extractor_{side}"))]
                if len(match):
                    m = match.iloc[0]
                    ev, start, end, src = m["evidence"], m["start"], m["end"], m["source"]
                break
        new.append({"case_id": str(r["case_id"]), "field": r["field"], "value": r["reviewed_value"],
                    "extractor": "review", "evidence": ev, "start": int(start), "end": int(end),
                    "source": src, "context": "asserted"})
    keys = set(zip(rv["case_id"].astype(str), rv["field"]))
    pairs = pd.MultiIndex.from_arrays([evidence["case_id"].astype(str), evidence["field"]])
    old_review = (evidence["extractor"] == "review").to_numpy() & pairs.isin(list(keys))
    kept = evidence[~np.asarray(old_review, bool)]
    if "context" not in kept.columns:
        kept = kept.assign(context="asserted")
    out = pd.concat([kept, pd.DataFrame(new)], ignore_index=True)
    return out[list(EVIDENCE_COLUMNS)]


def resolve(evidence: pd.DataFrame, *, prefer: tuple[str, ...] = ()) -> pd.DataFrame:
    """One value per case x field: ``review`` first, then ``prefer`` order, then the rest
    in table order. Columns: case_id, field, value, extractor."""
    order = {"review": 0, **{e: i + 1 for i, e in enumerate(prefer)}}
    evidence = asserted(evidence)
    ev = evidence.assign(_rank=evidence["extractor"].map(order).fillna(len(order) + 1),
                         _pos=np.arange(len(evidence)))
    ev = ev.sort_values(["_rank", "_pos"]).drop_duplicates(["case_id", "field"])
    return ev.sort_values("_pos")[["case_id", "field", "value", "extractor"]].reset_index(drop=True)
