"""Agreement between metadata extractors: per field and extractor pair, the share of cases
(with both values) that agree, with a Wilson interval, and Cohen's kappa.

``extractor_agreement(evidence)`` takes the metadata evidence table (``case_id, field,
value, extractor, ...``); ``review`` rows (human decisions) are not an extractor and are
left out of the pairs. Columns: ``field, extractor_a, extractor_b, n_a, n_b, n_both,
n_agree, agreement, conf_low, conf_high, kappa, n_disagree``. Kappa is
``sklearn.metrics.cohen_kappa_score`` over the cases with both values; NaN with fewer than
two such cases or a single category.
"""
from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from stats import _validate as _v

AGREEMENT_COLUMNS = ("field", "extractor_a", "extractor_b", "n_a", "n_b", "n_both", "n_agree",
                     "agreement", "conf_low", "conf_high", "kappa", "n_disagree")

__all__ = ["extractor_agreement", "extractor_pairs", "AGREEMENT_COLUMNS"]


def extractor_pairs(evidence: pd.DataFrame):
    """``(field, a, b, rows_a, rows_b)`` per field and pair of extractors (first value of
    each case x field x extractor; review rows excluded), rows indexed by case_id."""
    ev = evidence[evidence["extractor"] != "review"].drop_duplicates(
        ["case_id", "field", "extractor"])
    for field, g in ev.groupby("field", sort=True):
        for a, b in combinations(sorted(g["extractor"].unique()), 2):
            yield (field, a, b, g[g["extractor"] == a].set_index("case_id"),
                   g[g["extractor"] == b].set_index("case_id"))


def extractor_agreement(evidence: pd.DataFrame, *, conf_level: float = 0.95) -> pd.DataFrame:
    """Agreement (Wilson CI) and Cohen's kappa per field x extractor pair.

    ``evidence``: the metadata evidence table (``case_id, field, value, extractor``).
    Returns one row per field x pair of extractors (``AGREEMENT_COLUMNS``); an evidence
    table without rows, like one from a single extractor, has no pair: the table without
    rows, with its columns. Not a DataFrame, a missing column or ``conf_level`` outside
    (0, 1) raise :class:`~stats.schema.ContractError`.
    """
    from sklearn.metrics import cohen_kappa_score

    func = "extractor_agreement"
    _v.table(evidence, func=func, arg="evidence", empty=True,
             columns=("case_id", "field", "value", "extractor"),
             fix="give the evidence table clinrel metadata extract writes",
             hint=" (the evidence table clinrel metadata extract writes)")
    conf_level = _v.level(conf_level, func=func)

    from .intervals import proportion_limits

    rows = []
    for field, a, b, wa, wb in extractor_pairs(evidence):
        both = wa.index.intersection(wb.index)
        va = wa.loc[both, "value"].astype(str).to_numpy()
        vb = wb.loc[both, "value"].astype(str).to_numpy()
        agree = int((va == vb).sum())
        kappa = np.nan
        if len(both) >= 2 and len(set(va) | set(vb)) >= 2:
            kappa = float(cohen_kappa_score(va, vb))
        rows.append({"field": field, "extractor_a": a, "extractor_b": b, "n_a": len(wa),
                     "n_b": len(wb), "n_both": len(both), "n_agree": agree,
                     "agreement": agree / len(both) if len(both) else np.nan, "kappa": kappa,
                     "n_disagree": len(both) - agree})
    out = pd.DataFrame(rows, columns=[c for c in AGREEMENT_COLUMNS
                                      if c not in ("conf_low", "conf_high")])
    lo, hi = proportion_limits(out["n_agree"].to_numpy(float), out["n_both"].to_numpy(float),
                           conf_level=conf_level)
    out["conf_low"], out["conf_high"] = lo, hi
    return out[list(AGREEMENT_COLUMNS)]
