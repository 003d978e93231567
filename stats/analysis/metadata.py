"""Metadata provenance analyses: values per field and extractor with the share carrying a
verbatim evidence span, and agreement between extractors (``stats.extractor_agreement``).
Evidence text itself never leaves this layer in a table (it may identify)."""
from __future__ import annotations

import pandas as pd

from ..schema import ContractError
from .core import analysis

NEEDED = ("case_id", "field", "value", "extractor")
MSG_COLUMNS = ("{file}: metadata evidence table lacks column(s) {missing}; write it with "
               "clinrel metadata extract")


def _wants(plan, tables) -> bool:
    return tables.metadata is not None


def _checked(results) -> pd.DataFrame:
    md = results.tables.metadata
    missing = [c for c in NEEDED if c not in md.columns]
    if missing:
        raise ContractError(MSG_COLUMNS.format(file=getattr(results.plan, "metadata", "metadata"),
                                               missing=", ".join(missing)))
    return md


@analysis("metadata_sources", wanted=_wants)
def metadata_sources(results) -> pd.DataFrame:
    """Values, cases, values with evidence and distinct values per field x extractor."""
    ev = _checked(results)
    has_span = ev["evidence"].fillna("").astype(str).str.len() > 0 if "evidence" in ev else \
        pd.Series(False, index=ev.index)
    ev = ev.assign(with_evidence=has_span.astype(int))
    counts = (ev.groupby(["field", "extractor"], sort=True)
              .agg(values=("case_id", "size"), cases=("case_id", "nunique"),
                   with_evidence=("with_evidence", "sum"), distinct=("value", "nunique"))
              .reset_index())
    counts["evidence_percent"] = 100 * counts["with_evidence"] / counts["values"]
    return counts


@analysis("metadata_agreement", wanted=_wants)
def metadata_agreement(results) -> pd.DataFrame:
    """Agreement between extractors per field, with Wilson CI, kappa and reviews."""
    from ..agreement import extractor_agreement

    ev = _checked(results)
    ag = extractor_agreement(ev).reset_index(drop=True)
    reviewed = ev[ev["extractor"] == "review"].groupby("field")["case_id"].nunique()
    ag["reviewed"] = ag["field"].map(reviewed).fillna(0).astype(int)
    return ag
