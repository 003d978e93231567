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


#: rows per unit at and above this count share one level ("4+")
ROWS_PER_UNIT_CAP = 4
#: the group level of the standardized-difference rows (every pair of ``by`` levels)
ALL_PAIRS = "all pairs"


def describe(cases: pd.DataFrame, *, by: str | None = "site",
             categorical: Sequence[str] = CATEGORICAL, continuous: Sequence[str] = CONTINUOUS,
             positives_only: Sequence[str] = POSITIVES_ONLY, max_levels: int = 12,
             not_applicable="auto", unit: str | None = None, smd: bool = False,
             rows_per_unit_cap: int = ROWS_PER_UNIT_CAP) -> pd.DataFrame:
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
    unit : a column of units that own several rows (``"patient_id"``): each unit is
        counted once, in the overall column and once in every ``by`` level it has rows in
        (gtsummary's ``tbl_summary`` on one row per patient). A unit's characteristics are
        those of its first row in table order (patient attributes such as sex, race or age
        at the first scan); its ``label`` is 1 when any of its rows is positive (a positive
        patient); variable ``rows_per_unit`` counts its rows (levels 1, 2, ...,
        ``rows_per_unit_cap``+). ``positives_only`` columns are scan attributes and are not
        summarised per unit. None: every row is a unit (scans).
    smd : also give the standardized mean difference of every variable across the levels
        of ``by`` (R tableone's definition, Yang & Dalton 2012): per pair of levels,
        ``|m1 - m2| / sqrt((s1^2 + s2^2) / 2)`` for a continuous variable (observed values,
        variances with ddof 1), and ``sqrt(T' S^-1 T)`` for a categorical one, with ``T``
        the differences of the level proportions and ``S`` the mean of the two multinomial
        covariance matrices, both without a reference level (the first level either group
        has; a level neither group has is left out; "Missing" counts as a level). Rows
        ``estimand`` "smd" (the mean over pairs, as tableone prints for more than two
        groups) and "smd_max" (the largest pair).
    rows_per_unit_cap : with ``unit``, the row count from which units share one level.

    Returns
    -------
    Tidy DataFrame with grouping columns ``group_var`` ("overall" or ``by``),
    ``group_level``, ``variable`` and ``level``; ``estimand`` one of
    ``count`` (``estimate`` = cases; ``n`` = cases in the group), ``percent``
    (100 x count / n), ``median``, ``q1``, ``q3`` (of the non-missing values; ``n`` = the
    values considered, missing included), ``missing`` (count of missing values) and, with
    ``smd``, ``smd`` and ``smd_max`` (group_var ``by``, group_level ``"all pairs"``, level
    "", ``n`` the pairs with an estimate; NaN with flag ``not_estimable`` when no pair has
    one: a categorical pair whose groups share no level, or a continuous pair with fewer
    than two values or no spread in either group; flag ``pairs_not_estimable:k`` when k
    pairs had none).
    Variable ``cases`` (with ``unit``: ``units``) gives the group's size; variable
    ``label`` level "1" the reference positives (units with a positive row). Method
    "descriptive". An empty ``cases`` table raises
    :class:`~stats.schema.ContractError` (no cohort to describe), as does a
    ``max_levels`` that is not a whole number >= 1.

    References
    ----------
    Yang D, Dalton JE (2012). A unified approach to measuring the effect size between two
    groups using SAS. SAS Global Forum, paper 335-2012. Yoshida K, Bartel A. tableone:
    Create 'Table 1' to Describe Baseline Characteristics (R package), ``ExtractSmd``.
    """
    _v.table(cases, func="describe", columns=["label"],
             fix="describe needs the reference standard 'label'")
    max_levels = _v.whole(max_levels, func="describe", arg="max_levels", fix="e.g. max_levels=12")
    rows_per_unit_cap = _v.whole(rows_per_unit_cap, func="describe", arg="rows_per_unit_cap",
                                 fix="e.g. rows_per_unit_cap=4")
    if by is not None and by not in cases.columns:
        raise ContractError(f"cases: no column '{by}' to describe by; name an existing column "
                            f"(e.g. site) or pass by=None")
    if unit is not None and unit not in cases.columns:
        raise ContractError(f"cases: no column '{unit}' to count units by; name the column "
                            f"of the units (e.g. unit='patient_id') or pass unit=None")
    if "label" not in cases.columns:
        raise ContractError("cases: no 'label' column; describe needs the reference standard")
    if "case_id" in cases.columns and cases["case_id"].duplicated().any():
        rows = np.flatnonzero(cases["case_id"].duplicated(keep=False).to_numpy())[:5] + 1
        raise ContractError(f"cases: case_id repeats (rows {', '.join(map(str, rows))}); "
                            f"describe counts cases, so pass one row per case, e.g. "
                            f"cases.drop_duplicates('case_id')")
    kw = dict(categorical=categorical, continuous=continuous, max_levels=max_levels,
              not_applicable=not_applicable, smd=smd)
    if unit is None:
        out = _describe(cases, by=by, positives_only=positives_only, size="cases", **kw)
    else:
        cats = [*categorical, "rows_per_unit"]
        cont = [c for c in continuous if c not in positives_only]
        kw.update(categorical=cats, continuous=cont)
        whole = _units(cases, unit, None, rows_per_unit_cap)
        overall = _describe(whole, by=None, positives_only=(), size="units", **kw)
        parts = [overall]
        if by is not None:
            per = _describe(_units(cases, unit, by, rows_per_unit_cap), by=by,
                            positives_only=(), size="units", **kw)
            parts.append(per[per["group_var"] != OVERALL])
        out = pd.concat(parts, ignore_index=True)
        # Table 1 order: overall first, then the groups, within each variable's block
        first = {v: i for i, v in enumerate(dict.fromkeys(overall["variable"]))}
        out = out.assign(_v=out["variable"].map(first)).sort_values(
            "_v", kind="stable").drop(columns="_v").reset_index(drop=True)
    return tidy(out.assign(method="descriptive"), group_cols=GROUP_COLS)


def _units(cases: pd.DataFrame, unit: str, by: str | None, cap: int) -> pd.DataFrame:
    """One row per unit (per unit and ``by`` level): the unit's first row, ``label`` 1
    when any of its rows is positive, ``rows_per_unit`` its row count (``cap``+ pooled)."""
    keys = [unit] if by is None else [unit, by]
    rows = cases if by is None else cases[cases[by].notna()]
    grouped = rows.groupby(keys, sort=False, observed=True, dropna=False)
    first = rows.drop_duplicates(keys).reset_index(drop=True)
    idx = pd.MultiIndex.from_frame(first[keys]) if by is not None else first[unit]
    pos = grouped["label"].max().reindex(idx).to_numpy()
    count = grouped.size().reindex(idx).to_numpy()
    top = int(min(max(count.max(initial=1), 1), cap))
    names = [str(k) for k in range(1, top)] + [f"{top}+" if count.max(initial=1) > top
                                               or top == cap else str(top)]
    level = np.minimum(count, top) - 1
    return first.drop(columns=["case_id"], errors="ignore").assign(
        label=pos, rows_per_unit=pd.Categorical.from_codes(level, categories=names))


def _describe(cases: pd.DataFrame, *, by, categorical, continuous, positives_only,
              max_levels, not_applicable, size: str, smd: bool) -> pd.DataFrame:
    """The rows of :func:`describe` for one row per unit (not yet tidied)."""
    n = len(cases)
    if by is None:
        gcode, gnames = np.full(n, -1), []
    else:
        gcode, gnames = _levels(cases[by])
    groups = [(OVERALL, OVERALL)] + [(by, g) for g in gnames]
    # group index per row: 0 = overall (every row); 1 + code for its own level (if any)
    size_n = np.r_[n, np.bincount(gcode[gcode >= 0], minlength=len(gnames))].astype(float)
    frames = [_frame("count", groups, size, "", size_n, size_n)]
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
    cat_frames, cont_frames, smd_frames = [], [], []
    G = len(gnames)
    for col, codes, names in cats:
        L = len(names)
        overall = np.bincount(codes, minlength=L)
        ok = gcode >= 0
        per = np.bincount(gcode[ok] * L + codes[ok], minlength=G * L).reshape(-1, L)
        counts = np.vstack([overall, per]).astype(float)  # groups x levels
        keep = [i for i, name in enumerate(names) if col != "label" or name == "1"]
        for estimand, values in (("count", counts),
                                 ("percent", 100 * counts / np.where(size_n > 0, size_n, np.nan)[:, None])):
            cat_frames.append(_frame(estimand, groups, col, [names[i] for i in keep],
                                     values[:, keep], np.repeat(size_n[:, None], len(keep), axis=1)))
        if smd and G >= 2:
            smd_frames.append(_smd_rows(by, col, _smd_categorical(per)))
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
        if smd and G >= 2:
            smd_frames.append(_smd_rows(by, col, _smd_continuous(vals[gc >= 0], gc[gc >= 0], G)))
    # Table 1 order: size, reference positives, continuous variables, categorical ones
    out = pd.concat([*frames, *cat_frames[:2], *cont_frames, *cat_frames[2:]], ignore_index=True)
    if smd_frames:
        out = pd.concat([out, *smd_frames], ignore_index=True)
    return out


def _pairs(G: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(G, k=1)
    return i, j


def _smd_categorical(counts: np.ndarray) -> np.ndarray:
    """Pairwise SMDs of a categorical variable from its ``(groups, levels)`` counts
    (:func:`describe`, ``smd``), NaN where not estimable. Decided by counts, not by a
    rounding-sized determinant: a group without rows gives NaN; levels neither group of a
    pair has are left out; one level left gives 0; two groups that share no level have a
    singular pooled covariance (every level of one is absent from the other): NaN."""
    from stats._linalg import pd_solve_stack

    counts = np.asarray(counts, dtype=float)
    G, L = counts.shape
    i, j = _pairs(G)
    ni, nj = counts[i].sum(1), counts[j].sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p1, p2 = counts[i] / ni[:, None], counts[j] / nj[:, None]
    present = (counts[i] > 0) | (counts[j] > 0)                  # (P, L) exact counts
    # the reference: the first level either group has, left out with the absent ones
    ref = np.argmax(present, axis=1)
    used = present.copy()
    used[np.arange(len(i)), ref] = False
    t = np.where(used, p1 - p2, 0.0)
    cov = lambda p: (p[:, :, None] * (np.eye(L)[None] - p[:, None, :]))  # noqa: E731
    S = (cov(np.nan_to_num(p1)) + cov(np.nan_to_num(p2))) / 2
    mask = used[:, :, None] & used[:, None, :]
    S = np.where(mask, S, np.eye(L)[None])                       # identity where left out
    x, ok = pd_solve_stack(S, t)
    d2 = np.einsum("pl,pl->p", t, np.nan_to_num(x))
    shared = ((counts[i] > 0) & (counts[j] > 0)).any(axis=1)
    out = np.sqrt(np.maximum(d2, 0.0))
    out = np.where(used.any(axis=1), out, 0.0)                   # one level: no difference
    bad = (ni == 0) | (nj == 0) | (used.any(axis=1) & (~shared | ~ok))
    return np.where(bad, np.nan, out)


def _smd_continuous(values: np.ndarray, group: np.ndarray, G: int) -> np.ndarray:
    """Pairwise SMDs of a continuous variable (observed values per group, ``group`` its
    codes 0..G-1), NaN where a group has fewer than two values or neither group spreads
    (every value of each group the same, compared exactly on the data)."""
    ok = np.isfinite(values)
    v, g = values[ok], group[ok]
    n = np.bincount(g, minlength=G).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(g, weights=v, minlength=G) / n
        dev = v - mean[g]
        var = np.bincount(g, weights=dev * dev, minlength=G) / (n - 1)
    lo = np.full(G, np.inf)
    hi = np.full(G, -np.inf)
    np.minimum.at(lo, g, v)
    np.maximum.at(hi, g, v)
    flat = lo == hi                                               # exact: no spread
    i, j = _pairs(G)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.abs(mean[i] - mean[j]) / np.sqrt((var[i] + var[j]) / 2)
    bad = (n[i] < 2) | (n[j] < 2) | (flat[i] & flat[j])
    return np.where(bad, np.nan, out)


def _smd_rows(by: str, variable: str, pairs: np.ndarray) -> pd.DataFrame:
    """The ``smd`` (mean over pairs) and ``smd_max`` rows of one variable."""
    good = np.isfinite(pairs)
    k = int(good.sum())
    missing = len(pairs) - k
    flag = "not_estimable" if k == 0 else (f"pairs_not_estimable:{missing}" if missing else "")
    est = [float(pairs[good].mean()), float(pairs[good].max())] if k else [np.nan, np.nan]
    return pd.DataFrame({"estimand": ["smd", "smd_max"], "group_var": by,
                         "group_level": ALL_PAIRS, "variable": variable, "level": "",
                         "estimate": est, "n": float(k), "flag": flag})


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
