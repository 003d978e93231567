"""Precision of subgroup sensitivity and specificity: achieved interval half-widths and
the numbers of positives, negatives and scans needed for a target half-width.

Definitions (``z = Phi^-1(1/2 + conf_level/2)``, ``q = 1 - p``):

* **Half-width** of an interval: ``(high - low) / 2``, for the Wilson or Clopper-Pearson
  interval of :func:`stats.proportion_ci`.
* **Planning half-width** at an expected proportion ``p`` and ``n`` trials: the half-width
  of the interval when the observed proportion equals ``p`` (``x = p n``, not rounded):
  the convention of R's ``presize::prec_prop``. Wilson's is closed form,
  ``w(n) = z sqrt(n p q + z^2 / 4) / (n + z^2)``, decreasing in ``n``, and solving
  ``w(n) = h`` gives ``n = z^2 ((p q - 2 h^2) + sqrt(p^2 q^2 - 4 h^2 p q + h^2)) / (2 h^2)``.
  Clopper-Pearson's ``Beta(a/2; x, n - x + 1)``, ``Beta(1 - a/2; x + 1, n - x)`` limits
  have no closed-form inverse; the smallest sufficient ``n`` is found by a vectorized
  integer search (doubling, then bisection: about 40 steps for every row at once).
* **Repeated scans** (several scans per patient): the design effect
  ``deff = 1 + (m - 1) * icc`` (Kish), with ``m`` the scans per patient (from the data:
  the Kish mean cluster size ``sum m_i^2 / sum m_i`` of the cell) and ``icc`` the
  intra-patient correlation of the outcome, or ``deff`` given directly. The effective
  number of trials is ``n / deff``: achieved intervals are computed at ``x / deff`` out of
  ``n / deff`` (as the bootstrap-Wilson interval of :mod:`stats.bootstrap`), and the
  number required is the smallest whole ``N`` with half-width ``w(N / deff) <= h``
  (Wilson: ``N = ceil(n* deff)``).
* **Scans**: ``positives / prevalence`` (sensitivity) and ``negatives / (1 - prevalence)``
  (specificity), rounded up; a subgroup holding a share ``s`` of the study's scans
  needs a study of ``scans / s`` scans (rounded up) for its target to be met.

Checked in tests/stats/test_precision.py against the closed form (Wilson root equals the integer
search through :func:`stats.proportion_ci`, itself validated against R to 1e-10), against
brute force over every ``n`` (Clopper-Pearson: ``w(N) <= h < w(N - 1)``), and by
simulation (the design effect reproduces the variance inflation of simulated patients
with a random intercept; the median simulated Wilson half-width at the required ``n``
meets the target).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from stats.clustered import AUTO, clusters_per_cell, cluster_cases
from stats.detection import (
    GROUP_COLS,
    OVERALL,
    case_matrix,
    confusion_counts,
    scan_level,
)
from stats import _validate as _v
from stats.intervals import _z, proportion_limits
from stats.schema import ContractError, tidy

PlanMethod = Literal["wilson", "clopper-pearson"]
PLAN_METHODS = ("wilson", "clopper-pearson")
ESTIMANDS = ("sensitivity", "specificity")
#: a Clopper-Pearson search stops here (no finite n reaches a target half-width of 0)
MAX_N = 2 ** 40

MSG_RANGE = ("{name} must lie in {interval}; {where}got {values}; {fix}")
MSG_METHODS = "methods must be a subset of {allowed}; got {methods!r}"
MSG_SUBGROUP_COLUMNS = ("subgroups: columns group_var and group_level are required (columns "
                        "present: {present}); add them (one row per prespecified subgroup)")
MSG_UNKNOWN_COLUMNS = ("subgroups: unknown column(s) {cols}; allowed: {allowed}; rename or drop "
                       "them")
MSG_CASES_AND_SUBGROUPS = ("give either cases (with by=) or subgroups=, not both; counts of "
                           "observed cases come from the cases table")
MSG_CLUSTER = ("cases: cluster column '{cluster}' is missing (columns present: {present}); "
               "pass cluster=<patient column> or leave it out")
MSG_COUNTS = ("subgroups: {col} must not exceed {den}; rows {rows} have {values}; check the "
              "counts")

#: columns a ``subgroups`` frame may carry (per-row values override the scalar arguments)
SUBGROUP_COLUMNS = ("group_var", "group_level", "model", "share", "n_pos", "n_neg", "tp", "tn",
                    "expected_sensitivity", "expected_specificity", "prevalence",
                    "design_effect", "icc", "scans_per_patient", "target_half_width")

# checks: (lower, lower inclusive, upper, upper inclusive, interval text, fix)
_BOUNDS = {
    "target_half_width": (0.0, False, 0.5, False, "(0, 0.5)", "e.g. 0.05 for +-5 points"),
    "expected_sensitivity": (0.0, True, 1.0, True, "[0, 1]", "write a proportion (0.9, not 90)"),
    "expected_specificity": (0.0, True, 1.0, True, "[0, 1]", "write a proportion (0.9, not 90)"),
    "prevalence": (0.0, False, 1.0, False, "(0, 1)", "write a proportion (0.3, not 30)"),
    "share": (0.0, False, 1.0, True, "(0, 1]", "write the subgroup's fraction of all scans"),
    "design_effect": (1.0, True, np.inf, False, "[1, inf)", "1 means independent scans"),
    "icc": (0.0, True, 1.0, True, "[0, 1]", "the intra-patient correlation, e.g. 0.1"),
    "scans_per_patient": (1.0, True, np.inf, False, "[1, inf)", "e.g. 2 scans per patient"),
    "conf_level": (0.0, False, 1.0, False, "(0, 1)", "e.g. 0.95"),
    "n_pos": (0.0, True, np.inf, False, "[0, inf)", "counts are whole numbers >= 0"),
    "n_neg": (0.0, True, np.inf, False, "[0, inf)", "counts are whole numbers >= 0"),
    "tp": (0.0, True, np.inf, False, "[0, inf)", "counts are whole numbers >= 0"),
    "tn": (0.0, True, np.inf, False, "[0, inf)", "counts are whole numbers >= 0"),
}


# --------------------------------------------------------------------------- primitives

def check_range(name: str, values, *, rows: bool = True) -> np.ndarray:
    """``values`` as float64 (same shape), or :class:`ContractError` naming ``name``, the
    offending positions (1-based rows of a table when ``rows``) and the fix; NaN passes."""
    lo, lo_in, hi, hi_in, text, fix = _BOUNDS[name]
    raw = np.atleast_1d(np.asarray(values, dtype=object)).ravel()
    isbool = np.array([isinstance(x, (bool, np.bool_)) for x in raw], dtype=bool)
    v = pd.to_numeric(pd.Series(np.where(isbool, None, raw)), errors="coerce").to_numpy(float)
    missing = pd.isna(pd.Series(raw)).to_numpy()
    below = (v < lo) | ((v == lo) & (not lo_in))
    above = (v > hi) | ((v == hi) & (not hi_in))
    bad = (np.isnan(v) & ~missing) | below | above
    if bad.any():
        idx = np.flatnonzero(bad)[:5]
        where = f"rows {', '.join(str(i + 1) for i in idx)} " if rows else ""
        raise ContractError(MSG_RANGE.format(name=name, interval=text, where=where,
                                             values=", ".join(repr(raw[i]) for i in idx), fix=fix),
                            column=name, rows=[int(i) for i in idx])
    return v.reshape(np.shape(values))


def design_effect(scans_per_patient, icc) -> np.ndarray:
    """Kish's design effect for clustered scans, ``1 + (m - 1) * icc`` (vectorized)."""
    m = np.asarray(scans_per_patient, dtype=float)
    return 1.0 + (m - 1.0) * np.asarray(icc, dtype=float)


def kish_cluster_size(cell, cluster, n_cells: int, weights=None) -> np.ndarray:
    """Per cell, the Kish mean cluster size ``sum_i m_i^2 / sum_i m_i`` (``m_i``: rows of
    cluster ``i`` in the cell; NaN for an empty cell). ``cell`` and ``cluster`` are integer
    codes per row; ``weights`` (0/1 per row) select rows. One pass, no loop over cells."""
    cell = np.asarray(cell, dtype=np.int64)
    cluster = np.asarray(cluster, dtype=np.int64)
    w = np.ones(len(cell)) if weights is None else np.asarray(weights, dtype=float)
    keep = w > 0
    key = cell[keep] * (int(cluster.max(initial=0)) + 1) + cluster[keep]
    uniq, m = np.unique(key, return_counts=True)
    c = uniq // (int(cluster.max(initial=0)) + 1)
    s1 = np.bincount(c, weights=m, minlength=n_cells)
    s2 = np.bincount(c, weights=m.astype(float) ** 2, minlength=n_cells)
    return np.divide(s2, s1, out=np.full(n_cells, np.nan), where=s1 > 0)


def icc_anova(y, cluster, cell) -> np.ndarray:
    """Intra-cluster correlation of ``y`` (rows x models) for clusters nested in cells:
    one-way ANOVA of the deviations from the cell means (so differences between cells are
    not read as patient correlation), truncated to [0, 1]; 0 where no cluster has two rows.

    Clusters are the (cell, cluster) pairs (a patient's scans in one cell). With ``k`` of
    them in ``G`` cells and ``N`` rows, ``SSB = sum_i m_i rbar_i^2``,
    ``SSW = sum r^2 - SSB``, ``MSB = SSB / (k - G)``, ``MSW = SSW / (N - k)``,
    ``m0 = (N - sum_c sum_{i in c} m_i^2 / N_c) / (k - G)`` and
    ``icc = (MSB - MSW) / (MSB + (m0 - 1) MSW)`` (the unbalanced nested ANOVA estimator;
    with one cell, Donner 1986's)."""
    y = np.asarray(y, dtype=float)
    y = y[:, None] if y.ndim == 1 else y
    cell = pd.factorize(np.asarray(cell))[0]
    clu = pd.factorize(np.asarray(cluster))[0]
    pair = pd.factorize(cell * (int(clu.max(initial=0)) + 1) + clu)[0]
    N, k, G = len(y), int(pair.max(initial=-1)) + 1, int(cell.max(initial=-1)) + 1
    if N == 0 or k >= N or k - G < 1:
        return np.zeros(y.shape[1])
    n_c = np.bincount(cell, minlength=G).astype(float)
    cell_sum = np.stack([np.bincount(cell, weights=col, minlength=G) for col in y.T], axis=1)
    r = y - (cell_sum / n_c[:, None])[cell]
    m = np.bincount(pair, minlength=k).astype(float)
    pair_cell = np.zeros(k, dtype=np.int64)
    pair_cell[pair] = cell
    sums = np.stack([np.bincount(pair, weights=col, minlength=k) for col in r.T], axis=1)
    ssb = (sums ** 2 / m[:, None]).sum(axis=0)
    msb = ssb / (k - G)
    msw = ((r * r).sum(axis=0) - ssb) / (N - k)
    m0 = (N - (np.bincount(pair_cell, weights=m * m, minlength=G) / n_c).sum()) / (k - G)
    with np.errstate(divide="ignore", invalid="ignore"):
        icc = (msb - msw) / (msb + (m0 - 1.0) * msw)
    return np.clip(np.nan_to_num(icc, nan=0.0), 0.0, 1.0)


def half_width(p, n, *, method: PlanMethod = "wilson", conf_level: float = 0.95) -> np.ndarray:
    """Planning half-width ``(high - low) / 2`` at proportion ``p`` of ``n`` trials
    (``x = p n``; ``n`` may be fractional, e.g. an effective sample size). NaN at n = 0."""
    p, n = np.broadcast_arrays(np.asarray(p, dtype=float), np.asarray(n, dtype=float))
    lo, hi = proportion_limits(p * n, n, method=method, conf_level=conf_level)
    return (hi - lo) / 2.0


def wilson_n(p, target, *, conf_level: float = 0.95) -> np.ndarray:
    """Continuous ``n`` at which the Wilson planning half-width at ``p`` equals ``target``
    (the closed form in the module docstring)."""
    z2 = _z(conf_level) ** 2
    pq = np.asarray(p, dtype=float) * (1.0 - np.asarray(p, dtype=float))
    h2 = np.asarray(target, dtype=float) ** 2
    return z2 * ((pq - 2.0 * h2) + np.sqrt(pq * pq - 4.0 * h2 * pq + h2)) / (2.0 * h2)


def required_n(p, target, *, method: PlanMethod = "wilson", conf_level: float = 0.95,
               deff=1.0) -> np.ndarray:
    """Smallest whole number of trials ``N`` with ``half_width(p, N / deff) <= target``
    (vectorized over broadcast ``p``, ``target``, ``deff``; NaN where an input is NaN).

    Wilson: ``ceil(wilson_n(p, target) * deff)`` (closed form). Clopper-Pearson: integer
    search, doubling then bisection, all rows at once."""
    p, target, deff = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (p, target, deff)))
    nan = np.isnan(p) | np.isnan(target) | np.isnan(deff)
    p0, t0, d0 = (np.where(nan, v, a) for a, v in ((p, 0.5), (target, 0.1), (deff, 1.0)))
    if method == "wilson":
        # the closed form, then one integer step either way guards the ceil against
        # rounding of an exact root (w(N / deff) <= target is the definition)
        n = np.ceil(wilson_n(p0, t0, conf_level=conf_level) * d0 - 1e-9)
        n = np.maximum(n, 1.0)
        ok = half_width(p0, n / d0, method=method, conf_level=conf_level) <= t0 + 1e-12
        n = np.where(ok, n, n + 1.0)
    elif method == "clopper-pearson":
        n = _search(p0, t0, d0, method, conf_level)
    else:
        raise ValueError(MSG_METHODS.format(allowed=PLAN_METHODS, methods=method))
    return np.where(nan, np.nan, n)


def _search(p, target, deff, method, conf_level) -> np.ndarray:
    def enough(N):
        return half_width(p, N / deff, method=method, conf_level=conf_level) <= target

    lo = np.zeros(p.shape)                 # lo: not enough (0 trials never is)
    hi = np.ones(p.shape)
    while True:                            # doubling: ~log2(n) steps, every row at once
        short = ~enough(hi)
        if not short.any() or hi.max() >= MAX_N:
            break
        lo = np.where(short, hi, lo)
        hi = np.where(short, hi * 2.0, hi)
    while (hi - lo > 1).any():             # bisection on whole numbers
        mid = np.floor((lo + hi) / 2.0)
        ok = enough(mid)
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return hi


# --------------------------------------------------------------------------- the table

def precision_table(cases: pd.DataFrame | None = None, *, by=None,
                    subgroups: pd.DataFrame | None = None,
                    expected_sensitivity: float | None = None,
                    expected_specificity: float | None = None,
                    prevalence: float | None = None, target_half_width: float = 0.05,
                    methods: Sequence[PlanMethod] = PLAN_METHODS, conf_level: float = 0.95,
                    design_effect: float | None = None, icc: float | None = None,
                    scans_per_patient: float | None = None, cluster: str | None = AUTO,
                    threshold: float | Mapping[str, float] | None = None) -> pd.DataFrame:
    """Achieved and required precision of sensitivity and specificity per subgroup.

    Parameters
    ----------
    cases : DataFrame, optional
        A cases table (with ``pred``, or give ``threshold``): the counts come from it, per
        model, for the overall cohort and every cell of ``by`` (column names or tuples for
        intersections, as :func:`stats.subgroup_metrics`).
    subgroups : DataFrame, optional
        Instead of cases (planning before data exists, or counts known elsewhere): one row
        per prespecified subgroup with ``group_var``, ``group_level`` and any of ``model``,
        ``share`` (fraction of the study's scans), ``n_pos``, ``n_neg`` (counts: the
        achieved half-width is then computed), ``tp``, ``tn`` (observed calls: the
        achieved interval is at the observed proportion, else at the expected one), and
        per-row overrides of ``expected_sensitivity``, ``expected_specificity``,
        ``prevalence``, ``design_effect``, ``icc``, ``scans_per_patient``,
        ``target_half_width``. An ``overall`` row (share 1) is added when absent.
    expected_sensitivity, expected_specificity : float, optional
        The values at which the required numbers are computed. Default: with cases, the
        model's observed overall value (not the cell's, which is noisy); without, required.
    prevalence : float, optional
        Converts positives (negatives) into scans. Default: with cases, the cell's observed
        prevalence; without, the scans columns are NaN.
    target_half_width : float in (0, 0.5)
        e.g. 0.05 for an interval of +-5 percentage points.
    methods : subset of ("wilson", "clopper-pearson")
    conf_level : float
    design_effect, icc, scans_per_patient : optional
        Repeated scans: ``design_effect`` given, or ``1 + (m - 1) * icc`` with ``m`` =
        ``scans_per_patient`` or, with cases and ``icc``, the cell's Kish mean cluster size
        (``cluster`` column, default ``patient_id``). Default 1 (independent scans).
    cluster : str or None, default "auto"
        With cases: the column whose repeated values mark scans of one patient, for the
        Kish mean cluster size (with ``icc``) and ``n_clusters``. "auto": ``"patient_id"``
        when a patient has several scans among the rows passed, else None
        (:func:`stats.clustered.resolve_cluster`); None or "none": ``patient_id`` when
        present, else every case its own cluster (each patient of one scan gives the
        same).
    threshold : prespecified threshold when ``cases`` has no ``pred``.

    Returns
    -------
    Tidy DataFrame, one row per model x subgroup x estimand (sensitivity, specificity) x
    method: ``estimand``, ``model`` ("all" without cases and a model column),
    ``group_var``, ``group_level``, ``estimate`` (the proportion the achieved interval is
    computed at: observed, else expected; see ``basis``), ``conf_low``, ``conf_high``
    (achieved interval at the effective counts; NaN without counts), ``conf_level``,
    ``n``, ``n_pos``, ``n_neg`` (NaN without counts), ``method`` (wilson or
    clopper-pearson: the binomial interval, computed at ``n / design_effect``; the
    ``design_effect`` column says whether clustering widened it), ``flag`` ("" or ``empty`` (no positives / negatives),
    ``imprecise`` (achieved half-width above the target)); extras ``basis``
    ("observed", "expected" or "none"), ``half_width`` (achieved), ``target_half_width``,
    ``expected`` (the planning value), ``design_effect``, ``n_required`` (positives for
    sensitivity, negatives for specificity), ``prevalence``, ``scans_required``
    (in the subgroup, for this estimand), ``share``, ``study_scans_required``
    (``scans_required / share``, rounded up), ``n_clusters`` (with cases: clusters with a
    scan among the cell's positives for sensitivity, negatives for specificity: the
    ``cluster`` column, else ``patient_id``, else every case its own, as
    :func:`stats.subgroup_metrics`; NaN without cases).

    Notes
    -----
    Formulas in this module's docstring. The required numbers are exact for the stated
    convention (observed proportion equal to the expected one); the realised half-width
    varies around the target from study to study (about half of studies reach it).

    Examples
    --------
    >>> t = precision_table(subgroups=pd.DataFrame({"group_var": ["phase"],
    ...     "group_level": ["arterial"], "share": [0.2]}), expected_sensitivity=0.9,
    ...     expected_specificity=0.95, prevalence=0.3, target_half_width=0.05,
    ...     methods=["wilson"])
    >>> t.loc[t.group_level == "arterial", ["estimand", "n_required", "scans_required"]].values.tolist()
    [['sensitivity', 141.0, 470.0], ['specificity', 83.0, 119.0]]

    An empty ``cases`` table raises :class:`~stats.schema.ContractError` (no count
    exists; an empty ``subgroups`` table plans the overall row alone), as do a
    ``threshold`` that is not a finite number and ``conf_level`` outside (0, 1).
    """
    func = "precision_table"
    if cases is not None:
        _v.table(cases, func=func)
    _v.threshold(threshold, func=func)
    conf_level = _v.level(conf_level, func=func)
    methods = list(methods)
    if not methods or any(m not in PLAN_METHODS for m in methods):
        raise ValueError(MSG_METHODS.format(allowed=PLAN_METHODS, methods=methods))
    check_range("conf_level", conf_level, rows=False)
    scalars = {"target_half_width": target_half_width,
               "expected_sensitivity": expected_sensitivity,
               "expected_specificity": expected_specificity, "prevalence": prevalence,
               "design_effect": design_effect, "icc": icc, "scans_per_patient": scans_per_patient}
    for k, v in scalars.items():
        if v is not None:
            check_range(k, v, rows=False)
    if cases is not None and subgroups is not None:
        raise ValueError(MSG_CASES_AND_SUBGROUPS)
    if cases is not None:
        rows = _rows_from_cases(cases, by, cluster=cluster, threshold=threshold,
                                icc=icc, scans_per_patient=scans_per_patient)
    else:
        rows = _rows_from_subgroups(subgroups)
    for k, v in scalars.items():   # per-row values win; scalars fill the rest
        if k not in rows:
            rows[k] = np.nan
        rows[k] = check_range(k, rows[k].to_numpy(dtype=object)).astype(float)
        if v is not None:
            rows[k] = rows[k].fillna(float(v))
    rows["target_half_width"] = rows["target_half_width"].fillna(0.05)
    for k in ("expected_sensitivity", "expected_specificity"):
        fill = rows.pop(f"_observed_{k}") if f"_observed_{k}" in rows else np.nan
        rows[k] = rows[k].fillna(fill)
    if "_observed_prevalence" in rows:
        rows["prevalence"] = rows["prevalence"].fillna(rows.pop("_observed_prevalence"))
    return tidy(_expand(rows, methods, conf_level), group_cols=GROUP_COLS)


def _rows_from_cases(cases, by, *, cluster, threshold, icc, scans_per_patient) -> pd.DataFrame:
    if threshold is not None:
        cases = scan_level(cases, threshold=threshold)
    cases, cluster = cluster_cases(cases, cluster)
    rows = confusion_counts(cases, by).drop(columns=["fp", "fn"]).astype(
        {k: "float64" for k in ("n", "n_pos", "n_neg", "tp", "tn")})
    first = rows.groupby("model", sort=False)["n"].transform("first")   # overall row first
    rows["share"] = rows["n"] / first
    with np.errstate(divide="ignore", invalid="ignore"):
        overall = rows.groupby("model", sort=False)[["tp", "n_pos", "tn", "n_neg"]].transform("first")
        rows["_observed_expected_sensitivity"] = overall["tp"] / overall["n_pos"]
        rows["_observed_expected_specificity"] = overall["tn"] / overall["n_neg"]
        rows["_observed_prevalence"] = rows["n_pos"] / rows["n"]
    cm = case_matrix(cases, by)
    G, M = cm.n_cells, len(cm.models)
    col = cluster or ("patient_id" if "patient_id" in cm.covariates else "case_id")
    if col not in cm.covariates:
        raise ContractError(MSG_CLUSTER.format(cluster=col, present=", ".join(
            map(str, cases.columns[:15]))), column=col)
    coo = cm.member.tocoo()
    clu = pd.factorize(cm.covariates[col])[0]
    lab = cm.label.astype(float)
    for est, pop in (("sensitivity", cm.label), ("specificity", ~cm.label)):
        # clusters among the positives (negatives) of each cell
        rows[f"_n_clusters_{est}"] = np.tile(clusters_per_cell(cm.member, clu, pop), M)
    if icc is not None and scans_per_patient is None:
        # m per cell and estimand: clusters among the positives (negatives) of the cell
        kp = kish_cluster_size(coo.row, clu[coo.col], G, weights=lab[coo.col])
        kn = kish_cluster_size(coo.row, clu[coo.col], G, weights=1.0 - lab[coo.col])
        rows["_kish_n_pos"] = np.tile(kp, M)
        rows["_kish_n_neg"] = np.tile(kn, M)
    return rows


def _rows_from_subgroups(subgroups) -> pd.DataFrame:
    if subgroups is None:
        subgroups = pd.DataFrame({"group_var": [], "group_level": []})
    sg = pd.DataFrame(subgroups).reset_index(drop=True)
    if not {"group_var", "group_level"} <= set(sg.columns):
        raise ContractError(MSG_SUBGROUP_COLUMNS.format(present=", ".join(map(str, sg.columns))))
    unknown = [c for c in sg.columns if c not in SUBGROUP_COLUMNS]
    if unknown:
        raise ContractError(MSG_UNKNOWN_COLUMNS.format(cols=unknown, allowed=SUBGROUP_COLUMNS),
                            column=unknown[0])
    sg = sg.copy()
    for col in ("share", "n_pos", "n_neg", "tp", "tn"):
        if col in sg:
            sg[col] = check_range(col, sg[col].to_numpy(dtype=object))
    for num, den in (("tp", "n_pos"), ("tn", "n_neg")):
        if num in sg and den in sg:
            bad = np.flatnonzero(sg[num].to_numpy() > sg[den].to_numpy())
            if len(bad):
                raise ContractError(MSG_COUNTS.format(col=num, den=den, rows=", ".join(
                    str(i + 1) for i in bad[:5]), values=sg[num].to_numpy()[bad[:5]].tolist()),
                    column=num, rows=bad[:5].tolist())
    if "model" not in sg:
        sg.insert(0, "model", "all")
    sg["model"] = sg["model"].astype(str)
    sg["group_var"] = sg["group_var"].astype(str)
    sg["group_level"] = sg["group_level"].astype(str)
    if "share" not in sg:
        sg["share"] = np.nan
    overall = (sg["group_var"] == OVERALL).to_numpy()
    missing = [mdl for mdl in pd.unique(sg["model"]) if not overall[sg["model"] == mdl].any()]
    if missing or len(sg) == 0:
        add = pd.DataFrame({"model": missing or ["all"], "group_var": OVERALL,
                            "group_level": OVERALL, "share": 1.0})
        sg = pd.concat([add, sg], ignore_index=True)
    sg.loc[sg["group_var"] == OVERALL, "share"] = sg.loc[sg["group_var"] == OVERALL,
                                                         "share"].fillna(1.0)
    if {"n_pos", "n_neg"} <= set(sg):
        sg["n"] = sg["n_pos"] + sg["n_neg"]
    return sg


def _expand(rows: pd.DataFrame, methods: list[str], conf_level: float) -> pd.DataFrame:
    """One row per subgroup x estimand x method; every quantity computed on whole columns."""
    frames = []
    for est, den, num, prev_of in (("sensitivity", "n_pos", "tp", lambda p: p),
                                   ("specificity", "n_neg", "tn", lambda p: 1.0 - p)):
        r = rows
        # deff: given, else 1 + (m - 1) icc with m given, else the cell's Kish mean
        # cluster size among its positives (negatives), else 1
        kish = f"_kish_{den}"
        m = r["scans_per_patient"].to_numpy(float)
        if kish in r:
            m = np.where(np.isnan(m), r[kish].to_numpy(float), m)
        deff = r["design_effect"].to_numpy(float)
        deff = np.where(np.isnan(deff), design_effect(np.nan_to_num(m, nan=1.0),
                                                      r["icc"].fillna(0.0).to_numpy(float)), deff)
        expected = r[f"expected_{est}"].to_numpy(float)
        dens = r[den].to_numpy(float) if den in r else np.full(len(r), np.nan)
        nums = r[num].to_numpy(float) if num in r else np.full(len(r), np.nan)
        observed = ~np.isnan(nums) & (dens > 0)
        at = np.where(observed, np.divide(nums, dens, out=np.full(len(r), np.nan),
                                          where=dens > 0), expected)
        basis = np.where(observed, "observed",
                         np.where(~np.isnan(dens) & (dens > 0) & ~np.isnan(expected),
                                  "expected", "none"))
        prev = prev_of(r["prevalence"].to_numpy(float))
        share = r["share"].to_numpy(float)
        target = r["target_half_width"].to_numpy(float)
        for meth in methods:
            eff = dens / deff
            lo, hi = proportion_limits(np.where(basis == "none", np.nan, at * eff),
                                   np.where(basis == "none", np.nan, eff), method=meth,
                                   conf_level=conf_level)
            hw = (hi - lo) / 2.0
            need = required_n(expected, target, method=meth, conf_level=conf_level, deff=deff)
            with np.errstate(divide="ignore", invalid="ignore"):
                scans = np.ceil(need / prev - 1e-9)
                study = np.ceil(scans / share - 1e-9)
            flag = np.where(dens == 0, "empty", np.where(hw > target, "imprecise", ""))
            frames.append(pd.DataFrame({
                "estimand": est, "model": r["model"].to_numpy(), "group_var": r["group_var"].to_numpy(),
                "group_level": r["group_level"].to_numpy(), "estimate": at,
                "conf_low": lo, "conf_high": hi, "conf_level": conf_level,
                "n": r["n"].to_numpy(float) if "n" in r else np.nan,
                "n_pos": r["n_pos"].to_numpy(float) if "n_pos" in r else np.nan,
                "n_neg": r["n_neg"].to_numpy(float) if "n_neg" in r else np.nan,
                "method": meth, "flag": flag, "basis": basis, "half_width": hw,
                "target_half_width": target, "expected": expected, "design_effect": deff,
                "n_required": need, "prevalence": r["prevalence"].to_numpy(float),
                "scans_required": scans, "share": share, "study_scans_required": study,
                "n_clusters": (r[f"_n_clusters_{est}"].to_numpy(float)
                               if f"_n_clusters_{est}" in r else np.nan),
                "_row": np.arange(len(r))}))
    out = pd.concat(frames, ignore_index=True)
    order = np.lexsort((out["method"].map(methods.index), out["estimand"].map(ESTIMANDS.index),
                        out["_row"]))
    return out.iloc[order].drop(columns="_row").reset_index(drop=True)


def plan_summary(table: pd.DataFrame) -> pd.DataFrame:
    """The planning table of a protocol from :func:`precision_table` output: per model x
    subgroup x method the positives, negatives and scans required (the larger of the
    sensitivity and specificity requirements) and the study size that gives the
    subgroup its scans at its share; then, per model x method, a ``study`` row whose
    ``study_scans_required`` is the largest over all subgroups and overall, with the
    subgroup that sets it in ``binding``."""
    key = ["model", "group_var", "group_level", "method"]
    t = table.assign(positives_required=np.where(table["estimand"] == "sensitivity",
                                                 table["n_required"], np.nan),
                     negatives_required=np.where(table["estimand"] == "specificity",
                                                 table["n_required"], np.nan))
    per = t.groupby(key, sort=False, dropna=False).agg(
        share=("share", "first"), expected_sensitivity=("expected", "first"),
        expected_specificity=("expected", "last"), prevalence=("prevalence", "first"),
        design_effect=("design_effect", "max"),
        positives_required=("positives_required", "max"),
        negatives_required=("negatives_required", "max"),
        scans_required=("scans_required", "max"),
        study_scans_required=("study_scans_required", "max")).reset_index()
    per["binding"] = ""
    idx = per.groupby(["model", "method"], sort=False)["study_scans_required"].idxmax()
    idx = idx.dropna().astype(int)
    top = per.loc[idx, ["model", "method", "study_scans_required", "group_var", "group_level"]]
    study = pd.DataFrame({"model": top["model"].to_numpy(), "group_var": "study",
                          "group_level": "total", "method": top["method"].to_numpy(),
                          "study_scans_required": top["study_scans_required"].to_numpy(),
                          "binding": (top["group_var"] + "=" + top["group_level"]).to_numpy()})
    return pd.concat([per, study], ignore_index=True)
