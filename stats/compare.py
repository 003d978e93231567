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
#: metrics without a closed-form paired test: paired cluster-bootstrap differences
BOOT_COMPARE = ("ppv", "npv", "f1", "accuracy")
MSG_NEEDS_BOOT = ("compare_models: {what} need(s) the paired cluster bootstrap; give n_boot= "
                  "a number of replicates (e.g. n_boot=2000)")
MSG_GAP_AXES = ("compare_models: gaps=True needs subgroup axes (by=...): the gap is between a "
                "model's best and worst level of each axis")


def compare_models(cases: pd.DataFrame, *, by=None,
                   metrics: Sequence[str] = COMPARE_METRICS, conf_level: float = 0.95,
                   small_n: int = 10, cluster: str | None = AUTO, n_boot: int | None = None,
                   seed=None, strata: str | None = None, gaps: bool = False,
                   scheduler=None) -> pd.DataFrame:
    """Every pair of models, per subgroup cell: paired differences with tests.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred``; every model scores every case.
    by : subgroup axes as in :func:`stats.subgroup_metrics` (overall always included).
    metrics : any of "sensitivity", "specificity", "auc" (closed-form paired tests) and
        "ppv", "npv", "f1", "accuracy" (paired cluster-bootstrap differences: need
        ``n_boot``).
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
    n_boot, seed, strata, scheduler : the paired cluster bootstrap (:mod:`stats.bootstrap`:
        one index of ``cluster`` clusters, else ``patient_id``, shared by every model and
        cell) of the metrics without a closed form and of the gaps.
    gaps : also the gap between each model's best and worst level of every axis of
        ``by`` (fairlearn's ``MetricFrame.difference(method="between_groups")``), with a
        paired bootstrap interval, for every count metric in ``metrics``; the "Missing"
        and "not applicable" levels are not levels a study plans and are left out. With
        ``gaps`` a single model is enough (there are then no pair rows).

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
    proportion differences. Bootstrap rows ("ppv_difference", ...): the percentile
    interval of the paired replicate differences, ``std_error`` their SD, ``p_value`` the
    two-sided bootstrap p (:func:`stats.operating.boot_p`), method "bootstrap-percentile",
    extras ``n_boot``, ``n_boot_valid``. Gap rows ("<metric>_gap", ``model`` the model,
    ``group_var`` the axis, ``group_level`` "best - worst"): ``estimate`` the largest minus
    the smallest value over the axis's levels, the percentile interval of the same gap in
    each replicate (whichever levels are then best and worst), extras ``level_best``,
    ``level_worst``, ``estimate_best``, ``estimate_worst``; no test (``p_value`` NaN).

    Notes
    -----
    Among positives (sensitivity) a "success" is a detection; among negatives
    (specificity) a correct negative call. With a = both right, b = A only, c = B only,
    d = both wrong: difference (b - c)/n, Newcombe (1998b) method 10 interval, McNemar
    exact p = min(1, 2 P(Bin(b + c, 1/2) <= min(b, c))). Adjustment families: each
    estimand over all pairs and cells.

    Validated against pROC ``roc.test(paired = TRUE)`` and ``binom.test`` (via
    ``tests/r/intervals.csv``) to 1e-10. The bootstrap rows have no R twin; their
    coverage is simulated (bench/compare_coverage.md, 80 or 200 patients with 1-3 scans,
    patient effect 0 or half the variance): PPV, NPV and F1 differences 91.0-95.0% at
    nominal 95%; a gap between levels that truly differ (0.26) 92.2-94.5%. A gap is a
    maximum minus a minimum, biased upward: where the levels do not differ the interval
    never covers the true gap of 0 (coverage 0; mean estimate 0.10-0.18), so a gap shows
    how far apart the subgroups are in this sample, not a test of a difference (use
    :func:`stats.heterogeneity_test`).

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
    bad = [k for k in metrics if k not in (*COMPARE_METRICS, *BOOT_COMPARE)]
    if bad:
        raise ValueError(f"metrics: unknown {bad}; choose from {COMPARE_METRICS + BOOT_COMPARE}")
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", optional=True, fix="e.g. n_boot=2000")
    boot_metrics = [k for k in metrics if k in BOOT_COMPARE]
    gap_metrics = [k for k in metrics if k != "auc"] if gaps else []
    if (boot_metrics or gap_metrics) and not n_boot:
        raise ContractError(MSG_NEEDS_BOOT.format(
            what=", ".join(boot_metrics) or "the gaps"), column="n_boot")
    if gaps and not by:
        raise ContractError(MSG_GAP_AXES)
    cases, cluster = cluster_cases(cases, cluster)
    cm = case_matrix(cases, by, cluster=cluster)
    clustered = cluster is not None
    M, G = len(cm.models), cm.n_cells
    ia, ib = np.triu_indices(M, 1)
    if len(ia) == 0 and not gaps:
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
        if metric not in metrics or not len(ia):
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
    if "auc" in metrics and len(ia):
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
    if boot_metrics or gap_metrics:
        frames += _bootstrapped(cm, base, ia, ib, boot_metrics, gap_metrics, n_boot=n_boot,
                                seed=seed, strata=strata, scheduler=scheduler,
                                conf_level=conf_level, small_n=small_n)
    if not frames:
        raise ContractError(f"compare_models: nothing to compare for metrics {list(metrics)} "
                            f"with one model; ask for gaps of a count metric, or add a model")
    out = pd.concat(frames, ignore_index=True)
    if "p_value" not in out.columns:
        out["p_value"] = np.nan
    out = adjust_p(out, ["estimand"])
    return tidy(out, group_cols=GROUP_COLS)


def _bootstrapped(cm, base, ia, ib, boot_metrics, gap_metrics, *, n_boot, seed, strata,
                  scheduler, conf_level, small_n) -> list[pd.DataFrame]:
    """The paired cluster-bootstrap rows of :func:`compare_models`: differences of the
    metrics without a closed form and each model's best-versus-worst gap per axis."""
    from stats import bootstrap as bs
    from stats._quantile import percentile_interval
    from stats.clustered import clusters_per_cell
    from stats.detection import unplanned_levels
    from stats.operating import boot_p

    bc = bs.boot_counts(cm, strata=strata)
    R = bs.replicate_counts(bc, n_boot, seed=seed, scheduler=scheduler)
    allm = list(dict.fromkeys([*boot_metrics, *gap_metrics]))
    reps = bs.metric_arrays(bc.unpack(R), allm)                       # (B, G, M)
    theta = bs.metric_arrays(bc.unpack(bc.K.sum(axis=0, dtype=np.float64)), allm)
    G, M = cm.n_cells, len(cm.models)
    n_cl = clusters_per_cell(cm.member, cm.patient)
    frames = []
    for k in boot_metrics:
        if not len(ia):
            continue
        d = theta[k][:, ia] - theta[k][:, ib]                          # G x pairs
        dr = (reps[k][:, :, ia] - reps[k][:, :, ib]).transpose(0, 2, 1).reshape(len(R), -1)
        lo, hi = percentile_interval(dr, conf_level)
        valid = (~np.isnan(dr)).sum(axis=0)
        est = _mo(d)
        flag = np.where(base["n"] == 0, "empty", np.where(np.isnan(est), "not_estimable", ""))
        frames.append(pd.DataFrame({
            "estimand": f"{k}_difference", **base, "estimate": est,
            "std_error": bs._nan_sd(dr, valid), "conf_low": lo, "conf_high": hi,
            "conf_level": conf_level, "p_value": np.where(np.isnan(est), np.nan, boot_p(dr)),
            "method": "bootstrap-percentile", "flag": flag, "n_boot": float(n_boot),
            "n_boot_valid": valid.astype(float), "n_clusters": np.tile(n_cl, len(ia))}))
    if gap_metrics:
        axis = cm.cells["axis"].to_numpy()
        planned = ~unplanned_levels(cm.cells["group_level"].to_numpy()) & (axis > 0)
        starts = np.r_[0, np.flatnonzero(np.diff(axis)) + 1]
        axes = axis[starts]
        levels = cm.cells["group_level"].to_numpy()
        counts = cm.cell_counts()
        for k in gap_metrics:
            th = np.where(planned[:, None], theta[k], np.nan)           # G x M
            rp = np.where(planned[None, :, None], reps[k], np.nan)       # B x G x M
            with np.errstate(invalid="ignore"):
                gap = np.fmax.reduceat(th, starts, axis=0) - np.fmin.reduceat(th, starts, axis=0)
                rgap = (np.fmax.reduceat(rp, starts, axis=1)
                        - np.fmin.reduceat(rp, starts, axis=1))          # B x A x M
            lo, hi = percentile_interval(rgap, conf_level)
            valid = (~np.isnan(rgap)).sum(axis=0)
            sd = bs._nan_sd(rgap.reshape(len(R), -1), valid.ravel()).reshape(valid.shape)
            A_all = len(starts)
            best = np.full((A_all, M), "", dtype=object)
            worst = np.full((A_all, M), "", dtype=object)
            vbest, vworst = np.full((A_all, M), np.nan), np.full((A_all, M), np.nan)
            cols = np.arange(M)
            for j, (a0, a1) in enumerate(zip(starts, np.r_[starts[1:], G])):  # per axis
                seg = th[a0:a1]
                ok = ~np.isnan(seg).all(axis=0)
                bi = np.argmax(np.where(np.isnan(seg), -np.inf, seg), axis=0)
                wi = np.argmin(np.where(np.isnan(seg), np.inf, seg), axis=0)
                best[j] = np.where(ok, levels[a0 + bi], "")
                worst[j] = np.where(ok, levels[a0 + wi], "")
                vbest[j] = np.where(ok, seg[bi, cols], np.nan)
                vworst[j] = np.where(ok, seg[wi, cols], np.nan)
            keep = axes > 0
            A = int(keep.sum())
            pick = lambda x: np.asarray(x)[keep].T.ravel()              # noqa: E731  (A x M)
            est = pick(gap)
            frames.append(pd.DataFrame({
                "estimand": f"{k}_gap", "model": np.repeat(np.array(cm.models, dtype=object), A),
                "group_var": np.tile(cm.cells["group_var"].to_numpy()[starts][keep], M),
                "group_level": "best - worst", "estimate": est, "std_error": pick(sd),
                "conf_low": pick(lo), "conf_high": pick(hi), "conf_level": conf_level,
                "n": float(counts["n"][0]), "n_pos": float(counts["n_pos"][0]),
                "n_neg": float(counts["n_neg"][0]), "method": "bootstrap-percentile",
                "flag": np.where(np.isnan(est), "not_estimable", ""),
                "n_boot": float(n_boot), "n_boot_valid": pick(valid).astype(float),
                "level_best": pick(best), "level_worst": pick(worst),
                "estimate_best": pick(vbest), "estimate_worst": pick(vworst)}))
    return frames


def _mo(x: np.ndarray) -> np.ndarray:
    """(G x pairs) -> pair-major flat vector."""
    return np.asarray(x).T.ravel()
