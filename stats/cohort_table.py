"""Descriptive statistics of a cohort (Table 1, STARD 2015 item 20), in the tidy contract.

Counts with percentages for categorical variables (a missing value is its own level,
``"Missing"``, or ``"not applicable"`` where the case cannot have the attribute: tumour
location of a reference negative, the rule of :mod:`stats.detection` and of every subgroup
table), median and quartiles for continuous ones, overall and per level of a
grouping column (site by default). Descriptive only: no estimates with intervals, no
tests (differences between sites are described, not tested).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from stats import _validate as _v
from stats.detection import MISSING as MISSING  # re-exported: the level of a missing value
from stats.detection import _levels, axis_levels, not_applicable_columns
from stats.schema import ContractError, tidy

OVERALL = "overall"
#: default variables of the cases contract
CATEGORICAL = ("age_group", "sex", "race", "phase", "scanner", "tumor_location", "split")
CONTINUOUS = ("age", "tumor_size_mm")
#: continuous variables summarised among reference positives only
POSITIVES_ONLY = ("tumor_size_mm",)
GROUP_COLS = ("group_var", "group_level", "variable", "level")


def describe(cases: pd.DataFrame, *, by: str | None = "site",
             categorical: Sequence[str] = CATEGORICAL, continuous: Sequence[str] = CONTINUOUS,
             positives_only: Sequence[str] = POSITIVES_ONLY, max_levels: int = 12,
             not_applicable="auto") -> pd.DataFrame:
    """Cohort characteristics, overall and per level of ``by``.

    Parameters
    ----------
    cases : DataFrame, one row per case (deduplicate a long cases table on ``case_id``
        first), with ``label`` (1 = reference positive).
    by : grouping column (levels in categorical order, else sorted); None: overall only.
        Rows whose ``by`` is missing count in the overall column only.
    categorical : columns described as counts and percentages; absent columns, ``by``
        itself, columns with more than ``max_levels`` levels and columns with a single
        value (missing included) are skipped.
    continuous : columns described by median and quartiles (numpy's linear quantiles).
    positives_only : continuous columns summarised among reference positives only (tumour
        size: negatives have none).
    not_applicable : which missing categorical values read "not applicable" rather than
        "Missing" (default "auto": tumour columns and their bins, on reference negatives;
        :func:`stats.detection.not_applicable_columns`), as in the subgroup tables.

    Returns
    -------
    Tidy DataFrame with grouping columns ``group_var`` ("overall" or ``by``),
    ``group_level``, ``variable`` and ``level``; ``estimand`` one of
    ``count`` (``estimate`` = cases; ``n`` = cases in the group), ``percent``
    (100 x count / n), ``median``, ``q1``, ``q3`` (of the non-missing values; ``n`` = the
    values considered, missing included) and ``missing`` (count of missing values).
    Variable ``cases`` gives the group's size; variable ``label`` level "1" the reference
    positives. Method "descriptive". An empty ``cases`` table raises
    :class:`~stats.schema.ContractError` (no cohort to describe), as does a
    ``max_levels`` that is not a whole number >= 1.
    """
    _v.table(cases, func="describe", columns=["label"],
             fix="describe needs the reference standard 'label'")
    max_levels = _v.whole(max_levels, func="describe", arg="max_levels", fix="e.g. max_levels=12")
    if by is not None and by not in cases.columns:
        raise ContractError(f"cases: no column '{by}' to describe by; name an existing column "
                            f"(e.g. site) or pass by=None")
    if "label" not in cases.columns:
        raise ContractError("cases: no 'label' column; describe needs the reference standard")
    if "case_id" in cases.columns and cases["case_id"].duplicated().any():
        rows = np.flatnonzero(cases["case_id"].duplicated(keep=False).to_numpy())[:5] + 1
        raise ContractError(f"cases: case_id repeats (rows {', '.join(map(str, rows))}); "
                            f"describe counts cases, so pass one row per case, e.g. "
                            f"cases.drop_duplicates('case_id')")
    n = len(cases)
    if by is None:
        gcode, gnames = np.full(n, -1), []
    else:
        gcode, gnames = _levels(cases[by])
    groups = [(OVERALL, OVERALL)] + [(by, g) for g in gnames]
    # group index per row: 0 = overall (every row); 1 + code for its own level (if any)
    size = np.r_[n, np.bincount(gcode[gcode >= 0], minlength=len(gnames))].astype(float)
    frames = [_frame("count", groups, "cases", "", size, size)]
    pos = cases["label"].to_numpy() == 1
    cats = [("label", pos.astype(np.int64), ["0", "1"])]
    na_cols = not_applicable_columns(cases, not_applicable)
    for col in categorical:
        if (col not in cases.columns or col == by or cases[col].nunique() > max_levels
                or cases[col].nunique(dropna=False) < 2):
            continue
        codes, names = axis_levels(cases[col], cases["label"].to_numpy(),
                                   negatives_not_applicable=col in na_cols)
        cats.append((col, codes, names))
    cat_frames, cont_frames = [], []
    for col, codes, names in cats:
        L = len(names)
        overall = np.bincount(codes, minlength=L)
        ok = gcode >= 0
        per = np.bincount(gcode[ok] * L + codes[ok], minlength=len(gnames) * L).reshape(-1, L)
        counts = np.vstack([overall, per]).astype(float)  # groups x levels
        keep = [i for i, name in enumerate(names) if col != "label" or name == "1"]
        for estimand, values in (("count", counts),
                                 ("percent", 100 * counts / np.where(size > 0, size, np.nan)[:, None])):
            cat_frames.append(_frame(estimand, groups, col, [names[i] for i in keep],
                                     values[:, keep], np.repeat(size[:, None], len(keep), axis=1)))
    for col in continuous:
        if col not in cases.columns:
            continue
        values = pd.to_numeric(cases[col], errors="coerce").to_numpy(float)
        mask = pos if col in positives_only else np.ones(n, bool)
        vals, gc = values[mask], gcode[mask]
        keys = np.r_[np.zeros(len(vals), np.int64), 1 + gc[gc >= 0]]  # overall, then own group
        s = pd.Series(np.r_[vals, vals[gc >= 0]])
        g = s.groupby(keys)
        idx = np.arange(len(groups))
        summary = {"median": g.median(), "q1": g.quantile(0.25), "q3": g.quantile(0.75),
                   "missing": s.isna().groupby(keys).sum()}
        total = g.size().reindex(idx, fill_value=0).to_numpy(float)
        for estimand, ser in summary.items():
            got = ser.reindex(idx).to_numpy(float)
            if estimand == "missing":
                got = np.nan_to_num(got)
            cont_frames.append(_frame(estimand, groups, col, "", got, total))
    # Table 1 order: size, reference positives, continuous variables, categorical ones
    out = pd.concat([*frames, *cat_frames[:2], *cont_frames, *cat_frames[2:]], ignore_index=True)
    return tidy(out.assign(method="descriptive"), group_cols=GROUP_COLS)


def _frame(estimand: str, groups, variable: str, levels, values, n) -> pd.DataFrame:
    """Rows for every group (x level): ``values`` and ``n`` are (groups,) or (groups, levels)."""
    values = np.asarray(values, float)
    if values.ndim == 1:
        levels, values, n = [levels], values[:, None], np.asarray(n, float)[:, None]
    G, L = values.shape
    return pd.DataFrame({
        "estimand": estimand,
        "group_var": np.repeat([g[0] for g in groups], L),
        "group_level": np.repeat([str(g[1]) for g in groups], L),
        "variable": variable, "level": np.tile(np.asarray(levels, dtype=object), G),
        "estimate": values.ravel(), "n": np.asarray(n, float).ravel()})
