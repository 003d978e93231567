"""Scan-level calls from voxel scores, threshold selection and sweeps, 2x2 counts.

``scan_level`` turns a continuous score (predicted tumour voxels) into a call
``pred = score >= threshold``; the threshold is prespecified (from the plan) or chosen on
``split == "validation"`` only and frozen for every row (STARD 12a: the choice is recorded
as prespecified or exploratory). ``threshold_sweep`` reports every metric per model over
a grid of thresholds with the Kendall tau between the model ranking at each threshold and
at the chosen one. ``confusion_counts`` gives tp/fp/tn/fn per model x subgroup.

The :class:`CaseMatrix` here is the shared engine of ``subgroups``, ``bootstrap`` and
``compare``: cases x models matrices of labels, calls and scores plus a sparse
cell-membership matrix (overall, every axis level, every intersection level: the full
product of levels, so empty cells exist), built once and used with matrix products, never
a Python loop per cell or per case.

**Missing values** of a subgroup column are a level of their own, so the levels of every
axis add up to the overall n. A missing value reads ``"not applicable"`` instead of
``"Missing"`` where the attribute does not exist for the scan: tumour size and location
(and bins made from them) of a reference-negative scan. The rule (``not_applicable``
keyword, :func:`not_applicable_columns`): by default ("auto") the tumour columns
``TUMOUR_COLUMNS`` and every column :func:`stats.add_bins` derived from one of them do
not apply to reference negatives; a missing value there on a negative is "not
applicable", on a positive "Missing". Pass a list of columns (or ``{column: "negatives"}``)
to name them yourself, or ``None`` for "Missing" everywhere.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from scipy import sparse

from stats import _validate as _v
from stats.clustered import (AUTO, FLAG_DEFF, SUFFIX, clustered_proportions, metric_indicators,
                             cluster_cases)
from stats.intervals import proportion_limits
from stats.ranking import kendall_tau_b  # the one tau-b (rows of X against r, vectorized)
from stats.schema import INVISIBLE_HINT, ContractError, invisible, show_id, tidy

GROUP_COLS = ("model", "group_var", "group_level")
OVERALL = "overall"
#: the count metrics that are binomial proportions (closed-form and Wilson-type intervals
#: apply); the one list of them in clinrel: import it, never retype it
PROPORTIONS = ("sensitivity", "specificity", "ppv", "npv", "accuracy")
#: every count metric of a 2x2 table
METRICS = (*PROPORTIONS, "f1")

MSG_COLUMNS = ("cases: column(s) {cols} missing (columns present: {present}); {fix}")
#: the binned axes ``clinrel plan init`` proposes: new column -> (source, breaks, labels)
STANDARD_BINS = {"age_group": ("age", (0, 40, 60, 75, float("inf")),
                               ("<40", "40-59", "60-74", "75+")),
                 "size_group": ("tumor_size_mm", (0, 10, 20, 40, float("inf")),
                                ("<10 mm", "10-19 mm", "20-39 mm", ">=40 mm"))}


def missing_fix(missing, columns) -> str:
    """The fix for missing columns: for a standard binned axis whose source column is
    present (``age_group`` from ``age``), the ``stats.add_bins`` call that makes it (the
    cut points ``clinrel plan init`` proposes); otherwise add the columns
    (``stats.read_cases`` validates a table, it adds no column)."""
    cols = set(map(str, columns))
    calls = [f"stats.add_bins(cases, {{{STANDARD_BINS[m][0]!r}: {{'name': {m!r}, "
             f"'breaks': {list(STANDARD_BINS[m][1])}, 'labels': {list(STANDARD_BINS[m][2])}}}}})"
             .replace("inf", "float('inf')")
             for m in missing if m in STANDARD_BINS and STANDARD_BINS[m][0] in cols]
    if calls:
        return "cut " + " and ".join(calls) + " first (or choose your own breaks)"
    return ("add them to the table (stats.read_cases validates a table but adds no column; "
            "a numeric column becomes an axis with stats.add_bins)")
MSG_NO_PRED = ("cases: no 'pred' column (the scan-level call); run "
               "stats.scan_level(cases, threshold=...) first or give --threshold")
MSG_UNPAIRED = ("cases: models do not cover the same cases (paired design): {details}; "
                "give every model one row per case (stats.read_cases names the rows)")
MSG_NO_VALIDATION = ("cases: choosing the threshold needs rows with split == 'validation' "
                     "holding both labels for every model; {details}; give a prespecified "
                     "threshold or add a validation split")
MSG_CRITERION = "criterion must be 'youden' or 'target_specificity'; got {criterion!r}"
MSG_TARGET = ("target_specificity must lie strictly between 0 and 1 when "
              "criterion='target_specificity'; got {target!r}; write a proportion, e.g. 0.9")
MSG_THRESHOLD = ("threshold must be a finite number; got {value} for model(s) {models}; give "
                 "the prespecified number of predicted voxels (or score), e.g. 50")
MSG_THRESHOLD_MODELS = "threshold: no value for model(s) {models}; give one per model or a number"
MSG_CLUSTER = ("cluster: column '{cluster}' is not in cases (columns present: {present}); name "
               "the column whose repeated values mark scans of one patient (e.g. 'patient_id') "
               "or pass cluster=None")
MSG_CLUSTER_NA = ("cluster: column '{cluster}' has missing values; rows {rows} are empty; fill "
                  "them in (a scan without a patient is its own patient: use its case_id)")
MSG_NOT_APPLICABLE = ("not_applicable: {problem}; give 'auto', None, a list of columns, or "
                      "{{column: 'negatives'}} (the reference negatives lack the attribute)")

#: the level of a missing subgroup value
MISSING = "Missing"
#: the level of a missing value of an attribute the scan cannot have (tumour of a negative)
NOT_APPLICABLE = "not applicable"


def unplanned_levels(levels) -> np.ndarray:
    """Bool per cell level: the "Missing" or "not applicable" level, alone or as a part of
    an intersection level ("<40:Missing"): not a level a study plans or a test compares
    (one rule for the heterogeneity test, the precision table and the report's notes)."""
    return missing_levels(levels) | pd.Series(levels, dtype=object).astype(str).str.contains(
        rf"(?:^|:){NOT_APPLICABLE}(?::|$)", regex=True).to_numpy()


def missing_levels(levels) -> np.ndarray:
    """Bool per cell level: the "Missing" level, alone or as a part of an intersection."""
    return pd.Series(levels, dtype=object).astype(str).str.contains(
        rf"(?:^|:){MISSING}(?::|$)", regex=True).to_numpy()
#: attributes of the tumour: they do not apply to reference-negative scans
TUMOUR_COLUMNS = ("tumor_size_mm", "tumor_location", "tumour_size_mm", "tumour_location")
#: ``cases.attrs`` key where :func:`stats.add_bins` records ``{bin column: source column}``
BIN_SOURCES = "clinrel_bin_sources"


# --------------------------------------------------------------------------- case matrix

def normalize_by(by) -> list[tuple[str, ...]]:
    """``by`` as a list of column tuples: "a" -> ("a",), ("a", "b") and "a:b" -> ("a", "b")."""
    if by is None:
        return []
    if isinstance(by, (str, tuple)):
        by = [by]
    out: list[tuple[str, ...]] = []
    for spec in by:
        cols = tuple(spec.split(":")) if isinstance(spec, str) else tuple(spec)
        if not cols or any(not isinstance(c, str) or not c for c in cols):
            raise ContractError(f"by: {spec!r} is not a column name or a tuple of names")
        if cols not in out and cols != (OVERALL,):
            out.append(cols)
    return out


def _levels(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes (-1 = missing) and level names (categories keep their order)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(np.int64), [str(c) for c in col.cat.categories]
    valid = col.dropna()
    try:
        uniq = np.sort(valid.unique())
    except TypeError:
        uniq = np.array(sorted(valid.astype(str).unique()), dtype=object)
        col = col.where(col.isna(), col.astype(str))
    codes = pd.Categorical(col, categories=uniq).codes.astype(np.int64)
    return codes, [str(u) for u in uniq]


def not_applicable_columns(cases: pd.DataFrame, not_applicable="auto") -> dict[str, str]:
    """``{column: "negatives"}``: the columns whose missing values on reference negatives
    read "not applicable" (module docstring). ``"auto"``: ``TUMOUR_COLUMNS`` and the bins
    :func:`stats.add_bins` made from them; None: none; a list of columns or a mapping
    ``{column: "negatives"}``: those."""
    if not_applicable is None:
        return {}
    if isinstance(not_applicable, str):
        if not_applicable != "auto":
            raise ContractError(MSG_NOT_APPLICABLE.format(problem=f"got {not_applicable!r}"))
        sources = cases.attrs.get(BIN_SOURCES, {}) if hasattr(cases, "attrs") else {}
        return {c: "negatives" for c in (*TUMOUR_COLUMNS,
                                         *(b for b, src in sources.items() if src in TUMOUR_COLUMNS))}
    if isinstance(not_applicable, Mapping):
        bad = {k: v for k, v in not_applicable.items() if v != "negatives"}
        if bad:
            raise ContractError(MSG_NOT_APPLICABLE.format(
                problem=f"{bad} (the only population supported is 'negatives')"))
        return {str(k): "negatives" for k in not_applicable}
    cols = list(not_applicable)
    if any(not isinstance(c, str) for c in cols):
        raise ContractError(MSG_NOT_APPLICABLE.format(problem=f"got {not_applicable!r}"))
    return {c: "negatives" for c in cols}


def axis_levels(values: pd.Series, label: np.ndarray | None = None, *,
                negatives_not_applicable: bool = False) -> tuple[np.ndarray, list[str]]:
    """Codes (all >= 0) and level names of a subgroup column, missing values included:
    "not applicable" for a missing value on a reference negative (``label == 0``) when
    ``negatives_not_applicable``, "Missing" for every other missing value. The extra levels
    come after the column's own levels and exist only when used; a column that already
    has a level of that name keeps it (the missing values join it)."""
    codes, names = _levels(values)
    miss = codes < 0
    if not miss.any():
        return codes, names
    na = miss & (np.asarray(label) == 0) if negatives_not_applicable and label is not None \
        else np.zeros_like(miss)
    names = list(names)
    for name, rows in ((NOT_APPLICABLE, na), (MISSING, miss & ~na)):
        if rows.any():
            if name not in names:
                names.append(name)
            codes = np.where(rows, names.index(name), codes)
    return codes, names


@dataclass
class CaseMatrix:
    """Paired cases x models arrays and the cell-membership matrix.

    Attributes: ``case_id`` (n), ``models`` (M), ``label`` (n, bool), ``score`` and
    ``pred`` (n x M), ``patient`` codes (n: the cluster of each case, from ``cluster``,
    else ``patient_id``, else ``case_id``), ``site`` codes (n) and names, ``cells`` (a
    DataFrame group_var, group_level, axis; overall first), ``member`` (sparse
    cells x n, 0/1), ``covariates`` (one row per case; every subgroup column as a
    categorical whose categories are the axis levels, "not applicable" and "Missing"
    included, so that ``_levels`` of it gives the cells' levels).
    """

    case_id: np.ndarray
    models: list[str]
    label: np.ndarray
    score: np.ndarray
    pred: np.ndarray | None
    patient: np.ndarray
    site: np.ndarray
    site_names: list[str]
    cells: pd.DataFrame
    member: sparse.csr_matrix
    covariates: pd.DataFrame = field(repr=False)

    @property
    def n_cells(self) -> int:
        return len(self.cells)

    def cell_counts(self) -> dict[str, np.ndarray]:
        """n, n_pos, n_neg (cells) and tp, fp, tn, fn (cells x models)."""
        y = self.label.astype("float64")
        A = self.member
        n_pos = A @ y
        n = np.asarray(A.sum(axis=1)).ravel()
        n_neg = n - n_pos
        out = {"n": n, "n_pos": n_pos, "n_neg": n_neg}
        if self.pred is not None:
            P = self.pred.astype("float64")
            tp = A @ (P * y[:, None])
            fp = A @ (P * (1 - y)[:, None])
            out.update(tp=tp, fp=fp, fn=n_pos[:, None] - tp, tn=n_neg[:, None] - fp)
        return out


def case_matrix(cases: pd.DataFrame, by=None, *, need_pred: bool = True,
                cluster: str | None = None, not_applicable="auto") -> CaseMatrix:
    """Build the :class:`CaseMatrix` of ``cases`` for subgroup specs ``by``.

    ``cluster``: the column whose repeated values mark scans of one patient (default
    ``patient_id`` when present, else every case its own cluster). ``not_applicable``: the
    rule for missing subgroup values (module docstring).
    """
    specs = normalize_by(by)
    if cluster is not None:
        _check_cluster(cases, cluster)
    needed = ["case_id", "model", "label", "score", *{c for s in specs for c in s}]
    missing = [c for c in dict.fromkeys(needed) if c not in cases.columns]
    if missing:
        raise ContractError(MSG_COLUMNS.format(cols=", ".join(map(repr, missing)),
                                               present=", ".join(map(repr, cases.columns[:15])),
                                               fix=missing_fix(missing, cases.columns)))
    if need_pred and "pred" not in cases.columns:
        raise ContractError(MSG_NO_PRED)
    case_codes, case_ids = pd.factorize(cases["case_id"], sort=False)
    model_codes, models = pd.factorize(cases["model"], sort=False)
    n, M = len(case_ids), len(models)
    seen = np.zeros((n, M), dtype=np.int64)
    np.add.at(seen, (case_codes, model_codes), 1)
    if (seen != 1).any():
        bad = np.argwhere(seen != 1)[:5]
        details = "; ".join(f"model {show_id(models[m], quote=True)} has {seen[c, m]} row(s) "
                            f"for case_id {show_id(case_ids[c], quote=True)}" for c, m in bad)
        if invisible(case_ids[c] for c, _ in bad):
            details += " " + INVISIBLE_HINT
        raise ContractError(MSG_UNPAIRED.format(details=details))
    score = np.empty((n, M))
    score[case_codes, model_codes] = cases["score"].to_numpy("float64")
    pred = None
    if "pred" in cases.columns:
        pred = np.zeros((n, M), dtype=np.int8)
        pred[case_codes, model_codes] = cases["pred"].to_numpy()
    first = np.zeros(n, dtype=np.int64)
    first[case_codes[::-1]] = np.arange(len(cases))[::-1]
    cov = cases.iloc[first].reset_index(drop=True)
    label = cov["label"].to_numpy() == 1
    unit = cluster if cluster is not None else "patient_id" if "patient_id" in cov else "case_id"
    patient = pd.factorize(cov[unit])[0]
    na_cols = not_applicable_columns(cases, not_applicable)
    for col in dict.fromkeys(c for s in specs for c in s):  # axis columns as full categoricals
        codes, lv = axis_levels(cov[col], label, negatives_not_applicable=col in na_cols)
        cov[col] = pd.Categorical.from_codes(codes, categories=lv)
    if "site" in cov:
        site, site_names = pd.factorize(cov["site"].astype(str))
        site_names = list(site_names)
    else:
        site, site_names = np.zeros(n, dtype=np.int64), ["all"]

    rows = [(OVERALL, OVERALL, 0)]
    mem_cell = [np.zeros(n, dtype=np.int64)]
    mem_case = [np.arange(n)]
    offset = 1
    for axis, cols in enumerate(specs, start=1):
        code = np.zeros(n, dtype=np.int64)
        names: list[list[str]] = []
        for col in cols:
            c, lv = _levels(cov[col])  # every case has a level (Missing, not applicable)
            code = code * len(lv) + c
            names.append(lv)
        levels = [":".join(t) for t in _product(names)]
        rows += [(":".join(cols), lv, axis) for lv in levels]
        mem_cell.append(offset + code)
        mem_case.append(np.arange(n))
        offset += len(levels)
    cells = pd.DataFrame(rows, columns=["group_var", "group_level", "axis"])
    mc, mi = np.concatenate(mem_cell), np.concatenate(mem_case)
    member = sparse.csr_matrix((np.ones(len(mc)), (mc, mi)), shape=(len(cells), n))
    return CaseMatrix(case_id=np.asarray(case_ids), models=list(models), label=label,
                      score=score, pred=pred, patient=patient, site=site,
                      site_names=site_names, cells=cells, member=member, covariates=cov)


def _check_cluster(cases: pd.DataFrame, cluster: str) -> None:
    if cluster not in cases.columns:
        raise ContractError(MSG_CLUSTER.format(cluster=cluster, present=", ".join(
            map(repr, cases.columns[:15]))), column=cluster)
    na = np.flatnonzero(cases[cluster].isna().to_numpy())
    if len(na):
        raise ContractError(MSG_CLUSTER_NA.format(cluster=cluster, rows=", ".join(
            str(i + 1) for i in na[:5])), column=cluster, rows=(na[:5] + 1).tolist())


def _product(names: list[list[str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [()]
    for lv in names:
        out = [t + (x,) for t in out for x in lv]
    return out


def ratio(num, den) -> np.ndarray:
    """``num / den`` as float64, NaN where ``den == 0``."""
    num, den = np.broadcast_arrays(np.asarray(num, dtype="float64"), np.asarray(den, dtype="float64"))
    return np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)


def metric_fractions(tp, fp, fn, tn, metrics: Sequence[str] = METRICS
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Numerator and denominator of each count metric in ``metrics`` (any matching shapes)."""
    parts = {
        "sensitivity": lambda: (tp, tp + fn),
        "specificity": lambda: (tn, tn + fp),
        "ppv": lambda: (tp, tp + fp),
        "npv": lambda: (tn, tn + fn),
        "accuracy": lambda: (tp + tn, tp + fp + fn + tn),
        "f1": lambda: (2 * tp, 2 * tp + fp + fn),
    }
    return {k: parts[k]() for k in metrics if k in parts}


# --------------------------------------------------------------------------- scan level

#: how a threshold is chosen on the validation split
Criterion = Literal["youden", "target_specificity"]


def scan_level(cases: pd.DataFrame, *, threshold: float | Mapping[str, float] | None = None,
               criterion: Criterion = "youden",
               target_specificity: float | None = None) -> pd.DataFrame:
    """Scan-level calls ``pred = score >= threshold``, with the threshold's provenance.

    Parameters
    ----------
    cases : DataFrame (the cases contract)
    threshold : float or {model: float}, optional
        Prespecified threshold (e.g. 50 predicted voxels). When None it is chosen per
        model on ``split == "validation"`` rows only and frozen for all rows.
    criterion : {"youden", "target_specificity"}
        Youden: maximise sensitivity + specificity - 1 (ties: the larger threshold).
        target_specificity: the lowest threshold whose validation specificity is
        >= ``target_specificity``.
    target_specificity : float in (0, 1]

    Returns
    -------
    A copy of ``cases`` with ``pred`` (int 0/1), ``threshold`` (float, per model) and
    ``threshold_source`` ("prespecified", "validation-youden" or
    "validation-target-specificity"). ``df.attrs["threshold"]`` records
    ``{"values": {model: t}, "source": ..., "prespecified": bool, "criterion": ...,
    "target_specificity": ..., "n_validation": ...}`` (exploratory when chosen on data).

    An empty ``cases`` table gives an empty copy with the three columns added (a
    row-wise transform: zero cases in, zero out), when the threshold is prespecified.

    Notes
    -----
    Candidate thresholds are the observed validation scores (``pred = score >= t``
    changes only there); when no observed score reaches the target specificity the
    threshold is the next float above the largest validation score (nothing called).

    Examples
    --------
    >>> import pandas as pd
    >>> cases = pd.DataFrame({"case_id": ["c1", "c2", "c3", "c4"], "model": "unet",
    ...                       "label": [1, 1, 0, 0], "score": [120.0, 30.0, 0.0, 55.0]})
    >>> calls = scan_level(cases, threshold=50)    # predicted voxels >= 50: positive
    >>> print(calls[["case_id", "score", "pred", "threshold_source"]].to_string(index=False))
    case_id  score  pred threshold_source
         c1  120.0     1     prespecified
         c2   30.0     0     prespecified
         c3    0.0     0     prespecified
         c4   55.0     1     prespecified
    """
    _v.table(cases, func="scan_level", empty=True)
    need = [c for c in ("model", "score") if c not in cases.columns]
    if need:
        raise ContractError(MSG_COLUMNS.format(cols=", ".join(map(repr, need)),
                                               present=", ".join(map(repr, cases.columns[:15])),
                                               fix=missing_fix(need, cases.columns)))
    df = cases.copy()
    models = pd.unique(df["model"])
    if threshold is not None:
        if isinstance(threshold, Mapping):
            lacking = [m for m in models if m not in threshold]
            if lacking:
                raise ContractError(MSG_THRESHOLD_MODELS.format(models=", ".join(map(str, lacking))))
            values = {m: _finite_threshold(threshold[m], m) for m in models}
        else:
            values = {m: _finite_threshold(threshold, "all") for m in models}
        source, info = "prespecified", {}
    else:
        values, info = _select_thresholds(df, models, criterion, target_specificity)
        source = f"validation-{criterion.replace('_', '-')}"
    t = df["model"].map(values).to_numpy("float64")
    df["pred"] = (df["score"].to_numpy("float64") >= t).astype("int64")
    df["threshold"] = t
    df["threshold_source"] = source
    df.attrs["threshold"] = {"values": values, "source": source,
                             "prespecified": source == "prespecified", **info}
    return df


def _finite_threshold(value, model) -> float:
    """A prespecified threshold as float; NaN, infinities and non-numbers are refused (a NaN
    threshold would call every case negative)."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = np.nan
    if isinstance(value, bool) or not np.isfinite(t):
        shown = repr(value) if isinstance(value, str) else value
        raise ContractError(MSG_THRESHOLD.format(value=shown, models=model))
    return t


def _select_thresholds(df, models, criterion, target):
    if criterion not in ("youden", "target_specificity"):
        raise ContractError(MSG_CRITERION.format(criterion=criterion))
    if criterion == "target_specificity" and not _in_open_unit(target):
        raise ContractError(MSG_TARGET.format(target=target))
    for col in ("split", "label"):
        if col not in df.columns:
            raise ContractError(MSG_NO_VALIDATION.format(details=f"column '{col}' is missing"))
    val = df[df["split"].astype(str).str.lower() == "validation"]
    m_code = pd.Categorical(val["model"], categories=models).codes.astype(np.int64)
    y = val["label"].to_numpy() == 1
    s = val["score"].to_numpy("float64")
    P = np.bincount(m_code[y], minlength=len(models)).astype(float)
    N = np.bincount(m_code[~y], minlength=len(models)).astype(float)
    if (P == 0).any() or (N == 0).any():
        bad = [str(m) for m, p, q in zip(models, P, N) if p == 0 or q == 0]
        raise ContractError(MSG_NO_VALIDATION.format(details=f"model(s) {', '.join(bad)} lack "
                                                     "validation positives or negatives"))
    order = np.lexsort((-s, m_code))
    g, ss, yy = m_code[order], s[order], y[order]
    start = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    tp_c, fp_c = np.cumsum(yy), np.cumsum(~yy)
    base = np.repeat(start, np.diff(np.r_[start, len(g)]))
    tp = tp_c - np.where(base > 0, tp_c[base - 1], 0)
    fp = fp_c - np.where(base > 0, fp_c[base - 1], 0)
    last = np.r_[(g[1:] != g[:-1]) | (ss[1:] != ss[:-1]), True]
    g, t, tp, fp = g[last], ss[last], tp[last], fp[last]
    sens, spec = tp / P[g], 1 - fp / N[g]
    values = {}
    if criterion == "youden":
        # J = tp / P - fp / N compared exactly: J * P * N = tp N - fp P in integers (equal
        # J values computed in floating point can differ in their last bit, and the tie
        # rule, the larger threshold, must decide, not rounding)
        j = tp.astype(np.int64) * N[g].astype(np.int64) - fp.astype(np.int64) * P[g].astype(np.int64)
        pick = np.lexsort((-t, -j, g))
        first = np.r_[True, g[pick][1:] != g[pick][:-1]]
        for gi, ti in zip(g[pick][first], t[pick][first]):
            values[models[gi]] = float(ti)
    else:
        # spec >= target in counts: fp <= (1 - target) N, with a 1e-9 margin for a target
        # written in decimals (0.9 of 10 negatives allows exactly 1 false positive)
        ok = fp <= np.floor((1 - target) * N[g] + 1e-9)
        tmin = np.full(len(models), np.inf)
        np.minimum.at(tmin, g[ok], t[ok])
        top = np.full(len(models), -np.inf)
        np.maximum.at(top, g, t)
        tmin = np.where(np.isinf(tmin), np.nextafter(top, np.inf), tmin)
        values = {m: float(v) for m, v in zip(models, tmin)}
    return values, {"criterion": criterion, "target_specificity": target,
                    "n_validation": int(len(val) // max(len(models), 1))}


def _in_open_unit(value) -> bool:
    try:
        return not isinstance(value, bool) and 0 < float(value) < 1
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- counts

def confusion_counts(cases: pd.DataFrame, by=None, *, not_applicable="auto") -> pd.DataFrame:
    """2x2 counts per model x subgroup cell.

    Returns a plain (wide) DataFrame, not the tidy estimate contract, because these are
    counts, not estimates: ``model, group_var, group_level, n, n_pos, n_neg, tp, fp, tn,
    fn`` (int64), overall first, every level of every axis (and the full product of levels
    for intersections) kept, empty cells with zeros; missing values are the levels
    "Missing" and "not applicable" (module docstring; ``not_applicable`` the rule), so
    every axis adds up to the overall. An empty ``cases`` table is refused
    (:class:`~stats.schema.ContractError`: the overall row always exists).
    """
    _v.table(cases, func="confusion_counts")
    cm = case_matrix(cases, by, not_applicable=not_applicable)
    c = cm.cell_counts()
    G, M = cm.n_cells, len(cm.models)
    out = pd.DataFrame({
        "model": np.repeat(np.array(cm.models, dtype=object), G),
        "group_var": np.tile(cm.cells["group_var"].to_numpy(), M),
        "group_level": np.tile(cm.cells["group_level"].to_numpy(), M),
        "n": np.tile(c["n"], M), "n_pos": np.tile(c["n_pos"], M), "n_neg": np.tile(c["n_neg"], M),
        **{k: c[k].T.ravel() for k in ("tp", "fp", "tn", "fn")},
    })
    for k in ("n", "n_pos", "n_neg", "tp", "fp", "tn", "fn"):
        out[k] = np.rint(out[k]).astype("int64")
    return out


# --------------------------------------------------------------------------- sweep

def _counts_at(score, label, thresholds) -> tuple[np.ndarray, np.ndarray]:
    """tp, fp (T x M) with pred = score >= t, vectorized over models and thresholds.

    ``thresholds`` is (T,) for all models or (T, M) per model.
    """
    n, M = score.shape
    thr = np.asarray(thresholds, dtype="float64")
    thr = np.broadcast_to(thr[:, None] if thr.ndim == 1 else thr, (thr.shape[0], M))
    uniq = np.unique(np.concatenate([score.ravel(), thr.ravel()]))
    K = len(uniq) + 1
    rank = np.searchsorted(uniq, score)
    key = rank + K * np.arange(M)[None, :]
    trank = np.searchsorted(uniq, thr) + K * np.arange(M)[None, :]
    out = []
    for mask in (label, ~label):
        keys = np.sort(key[mask].ravel())
        top = np.searchsorted(keys, K * (np.arange(M) + 1))
        out.append((top[None, :] - np.searchsorted(keys, trank)).astype("float64"))
    return out[0], out[1]


def _sweep_clusters(cm: CaseMatrix, thr: np.ndarray, metrics: Sequence[str], ci: str,
                    conf_level: float) -> dict[str, dict[str, np.ndarray]]:
    """Cluster-aware proportions (T x M arrays per metric) of the overall cell at every
    threshold, as :func:`stats.clustered.clustered_proportions` computes them on the calls
    ``score >= t``, without building the calls: per model, each cluster's positives and
    negatives at or above every threshold come from one bincount of (cluster, number of
    thresholds at or below the score) and a reversed cumulative sum (clusters x
    thresholds); the moments of :func:`stats.clustered.design_effect` follow per
    threshold. Memory O(clusters x thresholds), time O(scans + clusters x thresholds)
    per model."""
    from stats.clustered import design_effect, effective_interval

    n, M = cm.score.shape
    T = len(thr)
    codes = np.asarray(cm.patient, dtype=np.int64)
    C = int(codes.max()) + 1 if n else 1
    y = np.asarray(cm.label, dtype=bool)
    keys = ("n", "x", "n_clusters", "repeats", "ss")
    mom = {k: {c: np.zeros((T, M), dtype=bool if c == "repeats" else "float64") for c in keys}
           for k in metrics}
    for j in range(M):  # one pass per model, vectorized over clusters and thresholds
        key = codes * (T + 1) + np.searchsorted(thr, cm.score[:, j], side="right")
        above = []
        for mask in (y, ~y):   # per cluster: at or above each threshold (C x T), and all
            h = np.bincount(key[mask], minlength=C * (T + 1)).reshape(C, T + 1)
            rev = np.cumsum(h[:, ::-1], axis=1)[:, ::-1].astype("float64")
            above.append((rev[:, 1:], rev[:, :1]))
        (Pt, P), (Nt, N) = above
        parts = {"sensitivity": (Pt, P), "specificity": (N - Nt, N), "ppv": (Pt, Pt + Nt),
                 "npv": (N - Nt, (P - Pt) + (N - Nt)), "accuracy": (Pt + N - Nt, P + N)}
        for k in metrics:
            num, den = parts[k]
            den = np.broadcast_to(den, num.shape)
            nn, xx = den.sum(0), num.sum(0)
            p = np.divide(xx, nn, out=np.zeros_like(xx), where=nn > 0)
            m = mom[k]
            m["n"][:, j], m["x"][:, j] = nn, xx
            m["n_clusters"][:, j] = (den > 0).sum(0)
            m["repeats"][:, j] = (den > 1).any(0)
            m["ss"][:, j] = ((num - p * den) ** 2).sum(0)
    out = {}
    for k in metrics:
        d = design_effect(mom[k], conf_level)
        lo, hi = effective_interval(mom[k]["x"], mom[k]["n"], d["n_effective"], method=ci,
                                    conf_level=conf_level)
        out[k] = {**d, "conf_low": lo, "conf_high": hi, "n_clusters": mom[k]["n_clusters"],
                  "numerator": mom[k]["x"], "denominator": mom[k]["n"]}
    return out


def threshold_sweep(cases: pd.DataFrame, thresholds: Sequence[float], *,
                    chosen: float | Mapping[str, float] | None = None,
                    metrics: Sequence[str] = (*METRICS, "youden"),
                    ci: str = "wilson", conf_level: float = 0.95,
                    cluster: str | None = AUTO) -> pd.DataFrame:
    """Every metric per model across ``thresholds`` and the stability of the ranking.

    Parameters
    ----------
    cases : DataFrame (cases contract; ``pred`` is not needed)
    thresholds : sequence of float (pred = score >= t)
    chosen : float or {model: float}, optional
        The operating threshold; default the ``threshold`` column (per model) left by
        :func:`scan_level`, else the middle of ``thresholds``.
    metrics : metric names (sensitivity, specificity, ppv, npv, accuracy, f1, youden)
    ci : proportion interval for the proportions (wilson, clopper-pearson, jeffreys)
    cluster : column whose repeated values mark scans of one patient (e.g.
        ``"patient_id"``): the proportions' intervals become "<ci>-cluster" (the interval at
        Korn & Graubard's effective sample size; :mod:`stats.clustered`), as in
        :func:`stats.subgroup_metrics`. "auto" (default): ``"patient_id"`` when that
        column exists and a patient has several scans among the rows passed, else None
        (:func:`stats.clustered.resolve_cluster`); None or "none": scans independent.

    Returns
    -------
    Tidy DataFrame. Metric rows: ``estimand`` (metric), ``model``, ``group_var`` and
    ``group_level`` "overall", ``estimate``, ``conf_low``/``conf_high`` (proportions;
    NaN for f1 and youden), ``n``, ``n_pos``, ``n_neg``, ``method``, ``flag``
    (not_estimable, deff_not_estimable), ``std_error`` (the cluster-robust SE with
    ``cluster``, else NaN), extras ``threshold``, ``numerator``, ``denominator``,
    ``ranked_by`` (empty), ``design_effect`` and ``n_effective`` (of the proportions'
    intervals: 1 and the denominator without ``cluster``), ``n_clusters`` (clusters with
    a scan in the denominator; NaN without ``cluster``). Ranking rows:
    ``estimand`` "kendall_tau", ``model`` "all", ``estimate`` Kendall's tau-b between the
    models' values of ``ranked_by`` at ``threshold`` and at the chosen threshold(s),
    ``n`` the number of models, ``method`` "kendall-tau-b".

    Raises
    ------
    ContractError
        An empty ``cases`` table or ``thresholds``, a threshold (or ``chosen``) that is
        not a finite number, ``conf_level`` outside (0, 1) (:mod:`stats._validate`).
    """
    func = "threshold_sweep"
    _v.table(cases, func=func)
    if isinstance(thresholds, (str, bytes)) or np.ndim(thresholds) > 1:
        raise ContractError(_v.MSG_NOT_NUMBER.format(func=func, arg="thresholds",
                                                     value=_v._show(thresholds),
                                                     fix="pass a list of numbers"))
    thresholds = _v.finite(np.atleast_1d(thresholds), func=func, arg="thresholds",
                           fix="give finite thresholds (pred = score >= t), e.g. [10, 50, 100]")
    _v.nonempty(thresholds, func=func, arg="thresholds", unit="threshold")
    _v.threshold(chosen, func=func, arg="chosen")
    conf_level = _v.level(conf_level, func=func)
    cases, cluster = cluster_cases(cases, cluster)
    cm = case_matrix(cases, None, need_pred=False, cluster=cluster)
    thr = np.asarray(sorted(set(float(t) for t in thresholds)), dtype="float64")
    if chosen is None:
        if "threshold" in cases.columns:
            per = cases.groupby("model", sort=False)["threshold"].first()
            chosen = {m: float(per[m]) for m in cm.models}
        else:
            chosen = float(thr[len(thr) // 2])
    if isinstance(chosen, Mapping) and any(m not in chosen for m in cm.models):
        lacking = [str(m) for m in cm.models if m not in chosen]
        raise ContractError(f"{func}: " + MSG_THRESHOLD_MODELS.replace("threshold:", "chosen:")
                            .format(models=", ".join(lacking)))
    ref_thr = (np.array([[chosen[m] for m in cm.models]]) if isinstance(chosen, Mapping)
               else np.array([float(chosen)]))
    P, N = float(cm.label.sum()), float((~cm.label).sum())
    frames, values = [], {}
    for tag, tt in (("sweep", thr), ("ref", ref_thr)):
        tp, fp = _counts_at(cm.score, cm.label, tt)
        fr = metric_fractions(tp, fp, P - tp, N - fp)
        vals = {k: ratio(*fr[k]) for k in METRICS}
        vals["youden"] = vals["sensitivity"] + vals["specificity"] - 1
        values[tag] = (vals, fr)
    vals, fr = values["sweep"]
    T, M = len(thr), len(cm.models)
    bad = [k for k in metrics if k not in vals]
    if bad:
        raise ValueError(f"metrics: unknown metric {bad[0]!r}; choose from {(*METRICS, 'youden')}")
    props = [k for k in metrics if k in PROPORTIONS]
    clus = _sweep_clusters(cm, thr, props, ci, conf_level) if cluster is not None else {}
    nan = np.full((T, M), np.nan)
    for k in metrics:
        num, den = fr.get(k, (nan, nan))
        is_prop = k in PROPORTIONS
        flag = np.where(np.isnan(vals[k]), "not_estimable", "").astype(object)
        se, n_cl = nan, nan
        deff = np.where(is_prop & (den > 0), 1.0, np.nan)
        n_eff = np.where(is_prop & (den > 0), den, np.nan)
        if k in clus:
            c = clus[k]
            lo, hi, se, deff, n_eff, n_cl = (c["conf_low"], c["conf_high"], c["std_error"],
                                             c["design_effect"], c["n_effective"], c["n_clusters"])
            flag = np.where(c["not_estimable"] & (flag == ""), FLAG_DEFF, flag)
        elif is_prop:
            lo, hi = proportion_limits(num, den, method=ci, conf_level=conf_level)
        else:
            lo, hi = nan, nan
        frames.append(pd.DataFrame({
            "estimand": k, "model": np.tile(np.array(cm.models, dtype=object), T),
            "group_var": OVERALL, "group_level": OVERALL,
            "estimate": vals[k].ravel(), "std_error": se.ravel(), "conf_low": lo.ravel(),
            "conf_high": hi.ravel(), "conf_level": conf_level, "n": P + N, "n_pos": P,
            "n_neg": N, "method": (ci + SUFFIX if k in clus else ci) if is_prop else "none",
            "flag": flag.ravel(), "threshold": np.repeat(thr, M), "numerator": num.ravel(),
            "denominator": den.ravel(), "ranked_by": "", "design_effect": deff.ravel(),
            "n_effective": n_eff.ravel(), "n_clusters": n_cl.ravel()}))
        tau = kendall_tau_b(vals[k], values["ref"][0][k][0])
        frames.append(pd.DataFrame({
            "estimand": "kendall_tau", "model": "all", "group_var": OVERALL,
            "group_level": OVERALL, "estimate": tau, "n": float(M), "method": "kendall-tau-b",
            "flag": np.where(np.isnan(tau), "not_estimable", ""), "threshold": thr,
            "ranked_by": k}))
    return tidy(pd.concat(frames, ignore_index=True), group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- table rows
# (shared by the subgroup tables, the comparisons and the error-aware intervals)

def _flags(n, den, small_n):
    return np.where(n == 0, "empty", np.where(den == 0, "not_estimable",
                                              np.where(den < small_n, "small_n", "")))


def _add_flag(flag: np.ndarray, where: np.ndarray, name: str) -> np.ndarray:
    """``flag`` with ``name`` appended (";"-separated) where ``where`` holds."""
    flag = np.asarray(flag, dtype=object)
    return np.where(where, np.where(flag == "", name, flag + ";" + name), flag).astype(object)


def _frame(cm: CaseMatrix, estimand: str, values: Mapping[str, np.ndarray], counts) -> pd.DataFrame:
    """Rows of one metric: ``values`` are (G x M) arrays, laid out model-major."""
    G, M = cm.n_cells, len(cm.models)
    cols = {k: np.asarray(v, dtype=object if k in ("method", "flag") else float).T.ravel()
            if np.ndim(v) == 2 else v for k, v in values.items()}
    return pd.DataFrame({
        "estimand": estimand,
        "model": np.repeat(np.array(cm.models, dtype=object), G),
        "group_var": np.tile(cm.cells["group_var"].to_numpy(), M),
        "group_level": np.tile(cm.cells["group_level"].to_numpy(), M),
        "n": np.tile(counts["n"], M), "n_pos": np.tile(counts["n_pos"], M),
        "n_neg": np.tile(counts["n_neg"], M), **cols})
