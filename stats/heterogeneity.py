"""Tests of equal sensitivity (or specificity) across the levels of a subgroup axis.

For each model and axis, the levels x outcome table of the estimand's population
(positives: detected or missed; negatives: correct negative call or false positive) is
tested for independence:

* ``pearson-chisq``: Pearson's X^2 without continuity correction on ``(L - 1)`` df, ``L``
  the levels with at least one scan of the population (R's ``chisq.test(table,
  correct = FALSE)``);
* ``rao-scott-chisq`` (when ``cluster`` names a column whose values repeat among the
  population's scans, e.g. patients with several scans): Rao & Scott's first-order
  correction, ``X^2 / d`` on ``(L - 1)`` df, with ``d = mean(eigenvalues of Delta)`` the
  mean generalized design effect. ``Delta = (C' D^-1 C / N)^-1 (C' D^-1 V D^-1 C)``, where
  the ``2L`` cell proportions ``p`` have ``D = diag(p)`` and the with-replacement cluster
  covariance ``V = K / (K - 1) sum_k z_k z_k'``, ``z_k = (t_k - n_k p) / N`` (``t_k`` cluster
  k's cell counts, ``n_k`` its scans, ``K`` clusters), and ``C`` spans the interaction
  contrasts (the cell indicators' interaction columns projected off the main effects).
  This is R's ``survey::svychisq(~level + outcome, svydesign(ids = ~cluster, data),
  statistic = "Chisq")``; the design is the population's scans with a level (clusters
  without such scans do not count).

Levels with no scan of the population are excluded from the test (they stay named in
``levels_excluded`` and flagged ``empty_levels``); scans with a missing value on the axis
belong to no level. Intersection axes (tuples, ``"a:b"``) are tested over their non-empty
cells, as ``subgroup_metrics`` lays them out.

References: Pearson K (1900); Rao JNK, Scott AJ (1981) JASA 76:221-230; Rao JNK, Scott
AJ (1984) Ann Stat 12:46-60. Validated against R 4.2.2 ``chisq.test(correct = FALSE)``
(statistic and p-value; tested to 1e-10, measured 4e-14) and survey 4.1-1
``svychisq(statistic = "Chisq")`` (p-value and design effect; tested to 1e-8, measured
7e-15) on simulated patients with 1-4 scans, for phase, age_group and their intersection
(tests/r/heterogeneity.R; tests/test_heterogeneity.py).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats as sps

from stats.detection import case_matrix
from stats.schema import ContractError, tidy

Estimand = Literal["sensitivity", "specificity"]
ESTIMANDS = ("sensitivity", "specificity")
MSG_ESTIMAND = "estimand must be one of {allowed}; got {estimand!r}"
MSG_CLUSTER = ("heterogeneity_test: cluster column {cluster!r} is not in the cases table "
               "(columns: {present}); pass cluster='patient_id' or None")
MSG_CLUSTER_NA = ("heterogeneity_test: cluster column {cluster!r} is missing for {n} scans; "
                  "fill it in (e.g. patient_id = case_id for single-scan patients)")
SMALL_EXPECTED = 5.0  # R's chisq.test warns when an expected count is below 5


def heterogeneity_test(cases: pd.DataFrame, by, estimand: Estimand = "sensitivity",
                       cluster: str | None = None) -> pd.DataFrame:
    """Test of equal ``estimand`` across the levels of each axis in ``by``, per model.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred`` (see :func:`stats.scan_level`).
    by : column names or tuples of names (intersections), as ``subgroup_metrics``.
    estimand : "sensitivity" (positives: detected vs missed) or "specificity" (negatives).
    cluster : column whose repeated values mark correlated scans (e.g. ``patient_id``);
        when its values repeat among the population's scans the Rao-Scott corrected test
        is used, otherwise (or with None) Pearson's.

    Returns
    -------
    Tidy DataFrame, one row per model x axis (grouping ``model, group_var``):
    ``estimand``, ``statistic`` (Pearson X^2, or X^2 / design_effect for Rao-Scott),
    ``df`` (levels tested - 1), ``p_value`` (upper chi-square tail), ``n`` (scans of the
    population with a level), ``n_pos``/``n_neg``, ``method`` (``pearson-chisq`` /
    ``rao-scott-chisq``), ``flag`` (``;``-joined: ``empty_levels`` when levels without
    scans were excluded, ``small_expected`` when an expected count is below 5 (R's
    chisq.test warns), ``not_estimable`` when fewer than two levels or only one outcome
    remain: statistic and p NaN); ``estimate`` and the interval columns are NaN; extras
    ``n_levels`` (tested), ``levels_excluded`` (``;``-joined names), ``pearson_statistic``,
    ``design_effect`` (1 for Pearson), ``n_clusters`` (clusters among the scans tested;
    NaN for Pearson), ``min_expected``.

    Notes
    -----
    Pearson: ``X^2 = sum_cells (O - E)^2 / E`` with ``E = row total x column total / N``.
    Rao-Scott: see the module notes. Computed for every axis and model at once from
    sparse cell counts (no loop over levels); the Rao-Scott design effect is one small
    linear-algebra step per axis and model.

    Validated against R's ``chisq.test(correct = FALSE)`` (1e-10) and
    ``survey::svychisq(statistic = "Chisq")`` (1e-8) (tests/r/heterogeneity.R).

    Examples
    --------
    >>> import stats
    >>> from stats import simulate
    >>> calls = stats.scan_level(simulate.benchx_cohort(600, n_models=1, n_sites=6,
    ...                                                 seed=1).data, threshold=50)
    >>> het = heterogeneity_test(calls, ["phase"], estimand="sensitivity")
    >>> print(het[["group_var", "statistic", "df", "method"]].round(3).to_string(index=False))
    group_var  statistic  df        method
        phase     26.783 3.0 pearson-chisq
    """
    if estimand not in ESTIMANDS:
        raise ValueError(MSG_ESTIMAND.format(allowed=ESTIMANDS, estimand=estimand))
    cm = case_matrix(cases, by)
    if cluster is not None and cluster not in cm.covariates.columns:
        raise ContractError(MSG_CLUSTER.format(cluster=cluster,
                                               present=", ".join(map(str, cases.columns[:12]))),
                            column=cluster)
    pop = cm.label if estimand == "sensitivity" else ~cm.label
    success = (cm.pred == 1) if estimand == "sensitivity" else (cm.pred == 0)   # (n, M)
    keep = cm.cells["axis"].to_numpy() > 0
    A = cm.member[np.flatnonzero(keep)]
    cells = cm.cells[keep].reset_index(drop=True)
    w = pop.astype("float64")
    S = np.asarray(A @ (success * w[:, None]))                       # (cells, M)
    T = np.asarray(A @ w).ravel()                                     # (cells,)
    F = T[:, None] - S
    axis = cells["axis"].to_numpy()
    starts = np.flatnonzero(np.r_[True, axis[1:] != axis[:-1]])
    seg = lambda a: np.add.reduceat(a, starts, axis=0)  # noqa: E731  (per axis)
    ax_of = np.cumsum(np.r_[True, axis[1:] != axis[:-1]]) - 1
    n_ax, S_ax, F_ax = seg(T), seg(S), seg(F)                        # (K,), (K, M)
    with np.errstate(divide="ignore", invalid="ignore"):
        ES = T[:, None] * (S_ax / n_ax[:, None])[ax_of]
        EF = T[:, None] * (F_ax / n_ax[:, None])[ax_of]
        present = (T > 0)[:, None]
        contrib = np.where(present, (S - ES) ** 2 / ES + (F - EF) ** 2 / EF, 0.0)
        x2 = seg(contrib)
    levels = seg((T > 0).astype("float64"))
    df = levels - 1
    min_e = np.fmin.reduceat(np.where(present, np.minimum(ES, EF), np.inf), starts, axis=0)
    bad = (df[:, None] < 1) | (S_ax == 0) | (F_ax == 0)
    x2 = np.where(bad, np.nan, x2)
    deff = np.ones_like(x2)
    n_clusters = np.full_like(x2, np.nan)
    use_rs = cluster is not None and _repeats(cm.covariates[cluster], pop)
    if use_rs:
        codes = pd.factorize(cm.covariates[cluster])[0]
        coo = A.tocoo()
        for k, s0 in enumerate(starts):
            for m in range(len(cm.models)):
                if not bad[k, m]:
                    deff[k, m], n_clusters[k, m] = _design_effect(
                        coo, s0, s0 + int(np.sum(axis == axis[s0])), T, pop, success[:, m], codes)
    stat = x2 / deff
    excluded = [";".join(cells["group_level"][(ax_of == k) & (T == 0)]) for k in range(len(starts))]
    M = len(cm.models)
    flags = [";".join(x for x in (
        "empty_levels" if excluded[k] else "",
        "small_expected" if not bad[k, m] and min_e[k, m] < SMALL_EXPECTED else "",
        "not_estimable" if bad[k, m] else "") if x) for m in range(M) for k in range(len(starts))]
    K = len(starts)
    n_rep = np.tile(n_ax, M)
    out = pd.DataFrame({
        "estimand": estimand,
        "model": np.repeat(np.array(cm.models, dtype=object), K),
        "group_var": np.tile(cells["group_var"].to_numpy()[starts], M),
        "statistic": stat.T.ravel(), "df": np.tile(df, M),
        "p_value": sps.chi2.sf(stat, np.maximum(df, 1)[:, None]).T.ravel(),
        "n": n_rep, "n_pos": n_rep if estimand == "sensitivity" else 0.0,
        "n_neg": n_rep if estimand == "specificity" else 0.0,
        "method": "rao-scott-chisq" if use_rs else "pearson-chisq", "flag": flags,
        "n_levels": np.tile(levels, M), "levels_excluded": np.tile(np.array(excluded, dtype=object), M),
        "pearson_statistic": x2.T.ravel(), "design_effect": deff.T.ravel(),
        "n_clusters": n_clusters.T.ravel(), "min_expected": min_e.T.ravel()})
    return tidy(out, group_cols=("model", "group_var"))


def _repeats(values: pd.Series, pop: np.ndarray) -> bool:
    """Whether ``values`` repeat among the population's scans (missing values refused)."""
    v = values[pop]
    if v.isna().any():
        raise ContractError(MSG_CLUSTER_NA.format(cluster=values.name, n=int(v.isna().sum())),
                            column=str(values.name))
    return bool(v.duplicated().any())


def _design_effect(coo, lo, hi, T, pop, success, codes) -> tuple[float, int]:
    """Rao-Scott mean generalized design effect of one axis (cells lo:hi) and one model,
    and the number of clusters among the scans tested."""
    inside = (coo.row >= lo) & (coo.row < hi) & pop[coo.col]
    present = np.flatnonzero(T[lo:hi] > 0)
    L = len(present)
    level = np.searchsorted(present, coo.row[inside] - lo)       # 0..L-1 (non-empty levels)
    case = coo.col[inside]
    cell = level + L * success[case].astype(np.int64)             # rows vary fastest
    kcodes, clus = np.unique(codes[case], return_inverse=True)
    K, N = len(kcodes), len(case)
    t = np.bincount(clus * 2 * L + cell, minlength=K * 2 * L).reshape(K, 2 * L)
    p = t.sum(axis=0) / N
    z = (t - t.sum(axis=1, keepdims=True) * p) / N
    V = K / (K - 1) * (z.T @ z)
    ip = np.where(p > 0, 1 / np.where(p > 0, p, 1), 0.0)
    Cm = _interaction_contrasts(L)
    denom = Cm.T @ (ip[:, None] * Cm) / N
    numr = Cm.T @ (ip[:, None] * V * ip[None, :]) @ Cm
    delta = np.linalg.solve(denom, numr)
    return float(np.trace(delta) / (L - 1)), K


def _interaction_contrasts(L: int) -> np.ndarray:
    """Interaction columns of an L x 2 table (cells ordered rows fastest) projected off the
    main effects: survey's ``qr.resid(qr(X1), X12[, -(1:(nr + nc - 1))])``."""
    row = np.tile(np.arange(L), 2)
    col = np.repeat([0, 1], L)
    R = (row[:, None] == np.arange(1, L)[None, :]).astype("float64")
    X1 = np.column_stack([np.ones(2 * L), R, col])
    X12 = R * col[:, None]
    return X12 - X1 @ np.linalg.lstsq(X1, X12, rcond=None)[0]
