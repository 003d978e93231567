"""Tests of equal sensitivity (or specificity) across the levels of a subgroup axis.

For each model and axis, the levels x outcome table of the estimand's population
(positives: detected or missed; negatives: correct negative call or false positive) is
tested for independence:

* ``pearson-chisq``: Pearson's X^2 without continuity correction on ``(L - 1)`` df, ``L``
  the levels with at least one scan of the population (R's ``chisq.test(table,
  correct = FALSE)``);
* ``rao-scott-f`` (when ``cluster`` names a column whose values repeat among the
  population's scans, e.g. patients with several scans): Rao & Scott's second-order
  correction with an F reference, ``F = X^2 / trace(Delta)`` against
  ``F(nu, nu (K - 1))``, ``nu = trace(Delta)^2 / trace(Delta^2)`` (Satterthwaite), ``K``
  the clusters; ``design_effect`` reports ``mean(eigenvalues of Delta)``, the mean
  generalized design effect. ``Delta = (C' D^-1 C / N)^-1 (C' D^-1 V D^-1 C)``, where
  the ``2L`` cell proportions ``p`` have ``D = diag(p)`` and the with-replacement cluster
  covariance ``V = K / (K - 1) sum_k z_k z_k'``, ``z_k = (t_k - n_k p) / N`` (``t_k`` cluster
  k's cell counts, ``n_k`` its scans, ``K`` clusters), and ``C`` spans the interaction
  contrasts (the cell indicators' interaction columns projected off the main effects).
  This is R's ``survey::svychisq(~level + outcome, svydesign(ids = ~cluster, data))``
  (its default ``statistic = "F"``); the design is the population's scans with a level
  (clusters without such scans do not count).

Size (bench/heterogeneity_size.py -> bench/heterogeneity_size.md: 144 null settings, 30-300
patients with 1-4 or 2-4 scans, patient SD 1-2 on the logit, 2-6 levels constant or varying
within patient, 4,000 replicates each): the default rejects 3.3-8.5% (median 5.1%) at the
5% level, at most 7.1% from 100 patients on; its worst case, 30 patients and a
patient-level axis, is 7.7% when rerun at 20,000 replicates. The first-order correction
(``X^2 / mean eigenvalue`` on ``L - 1`` df, ``statistic = "Chisq"``, the default before)
reached 11.9% there, and Pearson (scans as independent) up to 32% on patient-level axes.

Levels with no scan of the population are excluded from the test (they stay named in
``levels_excluded`` and flagged ``empty_levels``); scans with a missing value on the axis
(the "Missing" level of ``subgroup_metrics``, of an intersection too) belong to no level
and are left out, as R's ``chisq.test`` drops NA (named in ``levels_excluded``); the
subgroup-versus-rest tests (:func:`stats.subgroup_vs_rest`) do compare the Missing level
with everyone else, deliberately (a different question). Intersection axes (tuples, ``"a:b"``) are tested over their non-empty
cells, as ``subgroup_metrics`` lays them out.

References: Pearson K (1900); Rao JNK, Scott AJ (1981) JASA 76:221-230; Rao JNK, Scott
AJ (1984) Ann Stat 12:46-60; Thomas DR, Rao JNK (1987) JASA 82:630-636 (the F form).
Validated against R 4.2.2 ``chisq.test(correct = FALSE)`` (statistic and p-value; tested
to 1e-10, measured 4e-14) and survey 4.1-1 ``svychisq(statistic = "F")`` (F, both df and
p-value; tested to 1e-8 relative, measured 3e-15) and ``statistic = "Chisq"`` (design
effect; tested to 1e-8, measured 7e-15) on simulated patients with 1-4 scans, for phase,
age_group and their intersection (tests/r/heterogeneity.R; tests/stats/test_heterogeneity.py).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats as sps

from stats import _validate as _v
from stats.clustered import AUTO, cluster_cases
from stats.detection import case_matrix, missing_levels
from stats._linalg import gram, matmul, pd_solve, pd_solve_stack
from stats.schema import ContractError, tidy

Estimand = Literal["sensitivity", "specificity"]
ESTIMANDS = ("sensitivity", "specificity")
MSG_ESTIMAND = "estimand must be one of {allowed}; got {estimand!r}"
MSG_CLUSTER = ("heterogeneity_test: cluster column {cluster!r} is not in the cases table "
               "(columns: {present}); pass cluster='patient_id' or None")
MSG_CLUSTER_NA = ("heterogeneity_test: cluster column {cluster!r} is missing for {n} scans; "
                  "fill it in (e.g. patient_id = case_id for single-scan patients)")
SMALL_EXPECTED = 5.0
METHOD_RS = "rao-scott-f"
BATCH_CELLS = 4_000_000  # cluster x cell counts per batch of models (memory bound)  # R's chisq.test warns when an expected count is below 5


def heterogeneity_test(cases: pd.DataFrame, by, estimand: Estimand = "sensitivity",
                       cluster: str | None = AUTO) -> pd.DataFrame:
    """Test of equal ``estimand`` across the levels of each axis in ``by``, per model.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred`` (see :func:`stats.scan_level`).
    by : column names or tuples of names (intersections), as ``subgroup_metrics``.
    estimand : "sensitivity" (positives: detected vs missed) or "specificity" (negatives).
    cluster : column whose repeated values mark correlated scans (e.g. ``patient_id``);
        when its values repeat among the population's scans the Rao-Scott corrected test
        (second order, F reference) is used, otherwise (or with None) Pearson's.
        "auto" (default): ``"patient_id"`` when that column exists and a patient has
        several scans among the rows passed, else None
        (:func:`stats.clustered.resolve_cluster`); "none": as None.

    Returns
    -------
    Tidy DataFrame, one row per model x axis (grouping ``model, group_var``):
    ``estimand``, ``statistic`` (Pearson X^2, or F = X^2 / trace(Delta) for Rao-Scott),
    ``df`` (levels tested - 1; Rao-Scott: the F's numerator df ``nu``), ``p_value`` (upper
    chi-square or F tail), ``n`` (scans of the population with a level),
    ``n_pos``/``n_neg``, ``method`` (``pearson-chisq`` / ``rao-scott-f``), ``flag`` (``;``-joined: ``empty_levels`` when levels without
    scans were excluded, ``small_expected`` when an expected count is below 5 (R's
    chisq.test warns), ``not_estimable`` when fewer than two levels or only one outcome
    remain: statistic and p NaN); ``estimate`` and the interval columns are NaN; extras
    ``n_levels`` (tested), ``levels_excluded`` (``;``-joined names), ``pearson_statistic``,
    ``design_effect`` (mean eigenvalue of Delta; 1 for Pearson), ``df_denominator`` (the
    F's ``nu (K - 1)``; NaN for Pearson), ``n_clusters`` (clusters among the scans tested;
    NaN for Pearson), ``min_expected``. An empty ``cases`` table raises
    :class:`~stats.schema.ContractError` (no level exists to compare).

    Notes
    -----
    Pearson: ``X^2 = sum_cells (O - E)^2 / E`` with ``E = row total x column total / N``.
    Rao-Scott: see the module notes. Computed for every axis and model at once from
    sparse cell counts (no loop over levels); the Rao-Scott ``Delta`` is one batched
    linear-algebra step per axis (all models at once).

    Validated against R's ``chisq.test(correct = FALSE)`` (1e-10) and
    ``survey::svychisq`` (1e-8) (tests/r/heterogeneity.R); its size by simulation is in
    bench/heterogeneity_size.md.

    Examples
    --------
    >>> import stats
    >>> from stats import simulate
    >>> calls = stats.scan_level(simulate.benchx_cohort(600, n_models=1, n_sites=6,
    ...                                                 seed=1).data, threshold=50)
    >>> het = heterogeneity_test(calls, ["phase"], estimand="sensitivity")  # patients repeat
    >>> print(het[["group_var", "statistic", "df", "method"]].round(3).to_string(index=False))
    group_var  statistic    df      method
        phase      9.031 2.991 rao-scott-f
    >>> het = heterogeneity_test(calls, ["phase"], estimand="sensitivity", cluster=None)
    >>> print(het[["group_var", "statistic", "df", "method"]].round(3).to_string(index=False))
    group_var  statistic  df        method
        phase     26.783 3.0 pearson-chisq
    """
    _v.table(cases, func="heterogeneity_test")
    if estimand not in ESTIMANDS:
        raise ValueError(MSG_ESTIMAND.format(allowed=ESTIMANDS, estimand=estimand))
    cases, cluster = cluster_cases(cases, cluster)
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
    # a missing value is no level (R's chisq.test drops NA): the "Missing" cells (of an
    # intersection too) are left out of the test and named in levels_excluded
    missing = missing_levels(cells["group_level"])
    empty = T == 0
    A = A.multiply((~missing).astype("float64")[:, None]).tocsr()
    A.eliminate_zeros()     # no stored entry for a Missing scan (the cluster table reads them)
    S[missing], T[missing] = 0.0, 0.0
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
    ndf = np.broadcast_to(df[:, None], x2.shape).astype("float64")   # numerator df
    ddf = np.full_like(x2, np.nan)                                    # denominator df (F)
    n_clusters = np.full_like(x2, np.nan)
    use_rs = cluster is not None and _repeats(cm.covariates[cluster], pop)
    if use_rs:
        codes = pd.factorize(cm.covariates[cluster])[0]
        coo = A.tocoo()
        ndf = ndf.copy()
        for k, s0 in enumerate(starts):
            ok = np.flatnonzero(~bad[k])
            per_model = int(pop.sum()) * 2 * int(levels[k])       # bound on K x 2L
            for part in np.array_split(ok, max(1, -(-len(ok) * per_model // BATCH_CELLS))):
                if not len(part):
                    continue
                t = _cluster_table(coo, s0, s0 + int(np.sum(axis == axis[s0])), T, pop,
                                   success[:, part], codes)
                tr, tr2 = _delta_traces(t)
                deff[k, part], ndf[k, part] = tr / df[k], tr ** 2 / tr2
                ddf[k, part], n_clusters[k, part] = ndf[k, part] * (t.shape[1] - 1), t.shape[1]
        stat = x2 / (deff * df[:, None])
        p_value = sps.f.sf(stat, ndf, ddf)
    else:
        stat = x2
        p_value = sps.chi2.sf(stat, np.maximum(df, 1)[:, None])
    excluded = [";".join(cells["group_level"][(ax_of == k) & (T == 0)]) for k in range(len(starts))]
    has_empty = [bool(np.any(empty[ax_of == k])) for k in range(len(starts))]
    M = len(cm.models)
    flags = [";".join(x for x in (
        "empty_levels" if has_empty[k] else "",
        "small_expected" if not bad[k, m] and min_e[k, m] < SMALL_EXPECTED else "",
        "not_estimable" if bad[k, m] else "") if x) for m in range(M) for k in range(len(starts))]
    K = len(starts)
    n_rep = np.tile(n_ax, M)
    out = pd.DataFrame({
        "estimand": estimand,
        "model": np.repeat(np.array(cm.models, dtype=object), K),
        "group_var": np.tile(cells["group_var"].to_numpy()[starts], M),
        "statistic": stat.T.ravel(), "df": ndf.T.ravel(), "p_value": p_value.T.ravel(),
        "n": n_rep, "n_pos": n_rep if estimand == "sensitivity" else 0.0,
        "n_neg": n_rep if estimand == "specificity" else 0.0,
        "method": METHOD_RS if use_rs else "pearson-chisq", "flag": flags,
        "n_levels": np.tile(levels, M), "levels_excluded": np.tile(np.array(excluded, dtype=object), M),
        "pearson_statistic": x2.T.ravel(), "design_effect": deff.T.ravel(),
        "df_denominator": ddf.T.ravel(), "n_clusters": n_clusters.T.ravel(), "min_expected": min_e.T.ravel()})
    return tidy(out, group_cols=("model", "group_var"))


def _repeats(values: pd.Series, pop: np.ndarray) -> bool:
    """Whether ``values`` repeat among the population's scans (missing values refused)."""
    v = values[pop]
    if v.isna().any():
        raise ContractError(MSG_CLUSTER_NA.format(cluster=values.name, n=int(v.isna().sum())),
                            column=str(values.name))
    return bool(v.duplicated().any())


def _cluster_table(coo, lo, hi, T, pop, success, codes) -> np.ndarray:
    """Cluster x cell counts ``(M, K, 2L)`` of one axis (cells lo:hi) for the ``M`` columns
    of ``success`` (models): the population's scans with a non-empty level, cells
    ``level + L * success``, ``K`` the clusters among those scans."""
    inside = (coo.row >= lo) & (coo.row < hi) & pop[coo.col]
    present = np.flatnonzero(T[lo:hi] > 0)
    L = len(present)
    level = np.searchsorted(present, coo.row[inside] - lo)       # 0..L-1 (non-empty levels)
    case = coo.col[inside]
    cell = level + L * success[case].T.astype(np.int64)           # (M, scans); rows fastest
    kcodes, clus = np.unique(codes[case], return_inverse=True)
    M, K = success.shape[1], len(kcodes)
    idx = (np.arange(M)[:, None] * K + clus) * 2 * L + cell
    return np.bincount(idx.ravel(), minlength=M * K * 2 * L).reshape(M, K, 2 * L)


def _delta_traces(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``trace(Delta)`` and ``trace(Delta^2)`` of Rao & Scott's generalized design-effect
    matrix for a batch of L x 2 tables given as cluster x cell counts ``t`` of shape
    ``(B, K, 2L)`` (cells ``level + L * outcome``, every level and outcome present, ``K``
    clusters with a scan each); the module notes give ``Delta``."""
    B, K, C = t.shape
    L = C // 2
    N = t.sum(axis=(1, 2)).astype("float64")                       # (B,)
    p = t.sum(axis=1) / N[:, None]                                  # (B, C)
    z = (t - t.sum(axis=2, keepdims=True) * p[:, None, :]) / N[:, None, None]
    V = K / (K - 1) * np.einsum("bki,bkj->bij", z, z)
    ip = np.where(p > 0, 1 / np.where(p > 0, p, 1), 0.0)
    Cm = _interaction_contrasts(L)
    denom = np.einsum("ci,bc,cj->bij", Cm, ip, Cm) / N[:, None, None]
    Cp = np.einsum("ci,bc->bci", Cm, ip)
    numr = np.einsum("bci,bcd,bdj->bij", Cp, V, Cp)   # NumPy's own loops: no BLAS kernel
    delta, _ = pd_solve_stack(denom, numr)   # clinrel's Cholesky (stats._linalg)
    return np.trace(delta, axis1=1, axis2=2), np.einsum("bij,bji->b", delta, delta)


def _interaction_contrasts(L: int) -> np.ndarray:
    """Interaction columns of an L x 2 table (cells ordered rows fastest) projected off the
    main effects: survey's ``qr.resid(qr(X1), X12[, -(1:(nr + nc - 1))])``."""
    row = np.tile(np.arange(L), 2)
    col = np.repeat([0, 1], L)
    R = (row[:, None] == np.arange(1, L)[None, :]).astype("float64")
    X1 = np.column_stack([np.ones(2 * L), R, col])
    X12 = R * col[:, None]
    return X12 - matmul(X1, pd_solve(gram(X1), matmul(X1.T, X12)))
