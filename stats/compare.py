"""Paired comparisons of models on the same cases, per subgroup cell."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import sparse

from stats import _validate as _v
from stats.clustered import AUTO, FLAG_DEFF, paired_difference, pair_codes, cluster_cases
from stats.detection import GROUP_COLS, case_matrix
from stats.intervals import (_paired_auc_frame, clustered_auc_variance, delong_difference_variance,
                             mcnemar_exact, newcombe_limits)
from stats.schema import ContractError, tidy
from stats.detection import _add_flag
from stats.subgroups import adjust_p, grouped_auc

COMPARE_METRICS = ("sensitivity", "specificity", "auc")


def compare_models(cases: pd.DataFrame, *, by=None,
                   metrics: Sequence[str] = COMPARE_METRICS, conf_level: float = 0.95,
                   small_n: int = 10, cluster: str | None = AUTO) -> pd.DataFrame:
    """Every pair of models, per subgroup cell: paired differences with tests.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred``; every model scores every case.
    by : subgroup axes as in :func:`stats.subgroup_metrics` (overall always included).
    metrics : any of "sensitivity", "specificity", "auc".
    conf_level : float
    small_n : flag "small_n" when the cell's positives (sensitivity, AUC) or negatives
        (specificity, AUC) are fewer.
    cluster : column whose repeated values mark scans of one patient (e.g.
        ``"patient_id"``). In a cell where a patient has more than one scan in the
        comparison's denominator, the tests and intervals become cluster-aware:
        sensitivity and specificity differences use Durkalski et al.'s clustered McNemar
        test (its p never below the exact McNemar p on the scans: clustering never makes
        the test more liberal, as the effective counts never exceed the scans) and
        Newcombe's paired interval at Korn & Graubard's effective counts
        (method "newcombe-paired-cluster/mcnemar-clustered",
        :func:`stats.clustered.paired_difference`), AUC differences Obuchowski's
        clustered-data variance of the difference and Student's t on C - 1 degrees of freedom
        (method "delong-paired-cluster-t",
        :func:`stats.intervals.clustered_auc_variance` of the difference of the placement
        values). Cells without a repeat keep the exact McNemar test and DeLong's
        variance. "auto" (default): ``"patient_id"`` when that column exists and a
        patient has several scans among the rows passed, else None
        (:func:`stats.clustered.resolve_cluster`); None or "none": scans as independent.

    Returns
    -------
    Tidy DataFrame, one row per metric x model pair x cell: ``estimand``
    ("sensitivity_difference", "specificity_difference", "auc_difference"), ``model``
    ("A - B"), ``group_var``, ``group_level``, ``estimate`` (A minus B),
    ``std_error`` (DeLong for AUC, Obuchowski's with clusters; for proportions the
    cluster-robust SE of the difference in clustered cells, else NaN),
    ``conf_low``/``conf_high`` (Newcombe paired hybrid score for proportions, at the
    effective counts in clustered cells; Wald for AUC), ``n``, ``n_pos``, ``n_neg``,
    ``statistic`` (z for AUC; Durkalski's X^2 in clustered cells; NaN for the exact
    McNemar test), ``p_value`` (exact McNemar on the discordant pairs, or max(Durkalski,
    exact McNemar) in clustered cells; paired DeLong or its clustered form),
    ``p_adjusted`` (Holm), ``method``, ``flag`` (``deff_not_estimable``: a clustered cell
    with discordant pairs whose design effect cannot be estimated, e.g. one patient, or
    every discordant pair one way; a clustered AUC difference without a variance), extras
    ``model_a``, ``model_b``, ``p_adjusted_bh`` (Benjamini-Hochberg), ``discordant_a`` (A
    right, B wrong), ``discordant_b`` (B right, A wrong), ``n_clusters`` (clusters with a
    scan in the comparison's denominator: positives for sensitivity, negatives for
    specificity, all scans of the cell for AUC; the scans themselves without
    ``cluster``) and, with ``cluster``, ``design_effect`` and ``n_effective`` of the
    proportion differences.

    Notes
    -----
    Among positives (sensitivity) a "success" is a detection; among negatives
    (specificity) a correct negative call. With a = both right, b = A only, c = B only,
    d = both wrong: difference (b - c)/n, Newcombe (1998b) method 10 interval, McNemar
    exact p = min(1, 2 P(Bin(b + c, 1/2) <= min(b, c))). Adjustment families: each
    estimand over all pairs and cells.

    Validated against pROC ``roc.test(paired = TRUE)`` and ``binom.test`` (via
    ``tests/r/intervals.csv``) to 1e-10.

    Examples
    --------
    >>> import stats
    >>> from stats import simulate
    >>> cases = simulate.benchx_cohort(400, n_models=2, n_sites=4, seed=2).data
    >>> cmp = compare_models(stats.scan_level(cases, threshold=50))
    >>> print(cmp.query("group_var == 'overall'")[["estimand", "model_a", "model_b",
    ...       "estimate", "p_value"]].round(3).to_string(index=False))
                  estimand model_a model_b  estimate  p_value
    sensitivity_difference model_A model_B     0.222    0.000
    specificity_difference model_A model_B     0.046    0.027
            auc_difference model_A model_B     0.092    0.000

    An empty ``cases`` table, or one with a single model (no pair exists), raises
    :class:`~stats.schema.ContractError`, as do ``conf_level`` outside (0, 1) and a
    ``small_n`` that is not a whole number >= 0.
    """
    func = "compare_models"
    _v.table(cases, func=func)
    conf_level = _v.level(conf_level, func=func)
    small_n = _v.whole(small_n, func=func, arg="small_n", minimum=0, fix="e.g. small_n=10")
    bad = [k for k in metrics if k not in COMPARE_METRICS]
    if bad:
        raise ValueError(f"metrics: unknown {bad}; choose from {COMPARE_METRICS}")
    cases, cluster = cluster_cases(cases, cluster)
    cm = case_matrix(cases, by, cluster=cluster)
    clustered = cluster is not None
    M, G = len(cm.models), cm.n_cells
    ia, ib = np.triu_indices(M, 1)
    if len(ia) == 0:
        raise ContractError(f"compare_models needs at least two models in column 'model'; "
                            f"the cases hold {M} ({', '.join(map(str, cm.models)) or 'none'}): "
                            f"add the other model's rows for the same cases",
                            column="model")
    counts = cm.cell_counts()
    A: sparse.csr_matrix = cm.member
    P = cm.pred.astype(bool)
    y = cm.label
    names = np.array([f"{cm.models[i]} - {cm.models[j]}" for i, j in zip(ia, ib)], dtype=object)
    base = {
        "model": np.repeat(names, G),
        "group_var": np.tile(cm.cells["group_var"].to_numpy(), len(ia)),
        "group_level": np.tile(cm.cells["group_level"].to_numpy(), len(ia)),
        "model_a": np.repeat(np.array(cm.models, dtype=object)[ia], G),
        "model_b": np.repeat(np.array(cm.models, dtype=object)[ib], G),
        "n": np.tile(counts["n"], len(ia)), "n_pos": np.tile(counts["n_pos"], len(ia)),
        "n_neg": np.tile(counts["n_neg"], len(ia)),
    }
    frames = []
    for metric, mask, right in (("sensitivity", y, P), ("specificity", ~y, ~P)):
        if metric not in metrics:
            continue
        ra, rb = right[:, ia] & mask[:, None], right[:, ib] & mask[:, None]
        a = A @ (ra & rb).astype("float64")
        b = A @ (ra & ~rb).astype("float64")
        c = A @ (~ra & rb).astype("float64")
        n = (counts["n_pos"] if metric == "sensitivity" else counts["n_neg"])[:, None]
        d = n - a - b - c
        est, lo, hi = newcombe_limits(None, None, None, None, paired_counts=(a, b, c, d),
                                       conf_level=conf_level)
        p = np.where(n > 0, mcnemar_exact(b, c), np.nan)
        method = np.full(b.shape, "newcombe-paired/mcnemar-exact", dtype=object)
        extra = {"n_clusters": _mo(np.broadcast_to(n, b.shape))}
        flag = np.where(base["n"].reshape(len(ia), G).T == 0, "empty",
                        np.where(n == 0, "not_estimable", np.where(n < small_n, "small_n", "")))
        if clustered:
            pdiff = paired_difference(A, cm.patient, ra, rb, mask[:, None], conf_level)
            rep = pdiff["repeats"]
            k = np.where(rep, pdiff["n_effective"] / np.where(n > 0, n, 1), 1.0)
            _, lo_c, hi_c = newcombe_limits(None, None, None, None, conf_level=conf_level,
                                             paired_counts=(a * k, b * k, c * k, d * k))
            lo, hi = np.where(rep, lo_c, lo), np.where(rep, hi_c, hi)
            # clustering never makes the test more liberal than the exact McNemar test on
            # the scans (as n_eff never exceeds n): Durkalski's asymptotic X^2 on few
            # discordant patients would; NaN (one patient holding the repeats) stays NaN
            pc = pdiff["p_value"]
            p = np.where(rep, np.where(np.isnan(pc), np.nan, np.maximum(pc, p)), p)
            method[rep] = "newcombe-paired-cluster/mcnemar-clustered"
            # a design effect that cannot be estimated matters only with discordant pairs
            flag = _add_flag(flag, pdiff["not_estimable"] & (b + c > 0), FLAG_DEFF)
            stat = np.where(rep, pdiff["statistic"], np.nan)
            extra = {"std_error": _mo(np.where(rep, pdiff["std_error"], np.nan)),
                     "statistic": _mo(stat), "n_clusters": _mo(pdiff["n_clusters"]),
                     "design_effect": _mo(pdiff["design_effect"]),
                     "n_effective": _mo(pdiff["n_effective"])}
        frames.append(pd.DataFrame({
            "estimand": f"{metric}_difference", **base, "estimate": _mo(est),
            "conf_low": _mo(lo), "conf_high": _mo(hi), "conf_level": conf_level,
            "p_value": _mo(p), "method": _mo(method), "flag": _mo(flag),
            "discordant_a": _mo(b), "discordant_b": _mo(c), **extra}))
    if "auc" in metrics:
        g = grouped_auc(cm)
        lab = cm.label[g["case"]]
        # DeLong variance of each difference, all pairs at once: V_a + V_b - 2 C_ab
        auc, var = g["auc"], g["var"]
        # DeLong variance of each difference from the placement differences: exactly 0
        # for identical placements (stats.intervals.delong_difference_variance)
        var_d = var_delong = np.column_stack([
            delong_difference_variance(g["cell"], lab, g["v"][:, pa] - g["v"][:, pb],
                                       var[:, pa], var[:, pb], g["m"][:, pa], g["k"][:, pa])
            for pa, pb in zip(ia, ib)])
        n_clu = np.broadcast_to(counts["n"][:, None], var_d.shape)
        C = np.full(var_d.shape, np.nan)        # clusters behind a clustered variance
        if clustered:
            pair, pair_cell, _ = pair_codes(g["cell"], g["case"], cm.patient)
            c = clustered_auc_variance(pair, pair_cell, lab, g["v"][:, ia] - g["v"][:, ib],
                                       auc[:, ia] - auc[:, ib])
            rep = np.broadcast_to(c["repeats"][:, None], var_d.shape)
            var_d = np.where(rep, c["var"], var_d)
            n_clu = np.broadcast_to(c["n_clusters"][:, None], var_d.shape)
            C = np.where(rep, n_clu, np.nan)
        cat = _paired_auc_frame(
            {k: _mo(g[k][:, ia]) for k in ("auc", "m", "k")},
            {"auc": _mo(auc[:, ib])}, _mo(var_d), conf_level, clusters=_mo(C))
        cat["n_clusters"] = _mo(n_clu)
        nmin = np.minimum(base["n_pos"], base["n_neg"])
        flag = np.where(base["n"] == 0, "empty",
                        np.where(np.isnan(cat["estimate"]), "not_estimable",
                                 np.where(nmin < small_n, "small_n", "")))
        # a variance that cannot be estimated: the clustered one where DeLong's could be
        # (fewer than two clusters of a label), or any other (identical scores)
        no_var = np.isnan(cat["std_error"]) & ~np.isnan(cat["estimate"])
        deff = _mo(rep & np.isnan(var_d) & ~np.isnan(var_delong)) if clustered else False
        flag = _add_flag(flag, no_var & deff, FLAG_DEFF)
        cat["flag"] = _add_flag(flag, no_var & ~deff & (flag != "empty"), "not_estimable")
        for k in ("n", "n_pos", "n_neg"):
            cat.pop(k)
        frames.append(pd.DataFrame({**base, **cat}))
    out = adjust_p(pd.concat(frames, ignore_index=True), ["estimand"])
    return tidy(out, group_cols=GROUP_COLS)


def _mo(x: np.ndarray) -> np.ndarray:
    """(G x pairs) -> pair-major flat vector."""
    return np.asarray(x).T.ravel()
