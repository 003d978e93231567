"""Per-subgroup detection metrics, subgroup-vs-rest tests and the failure map.

Overall is just another group (``group_var == group_level == "overall"``); every level of
every axis and the full product of levels of every intersection is a row, empty cells
included (n = 0, NaN estimate, flag "empty"). A missing value on an axis is a level of its
own, "Missing", or "not applicable" where the scan cannot have the attribute (tumour size
or location of a reference negative; :mod:`stats.detection`), so the levels of every axis
add up to the overall n.

With ``cluster`` (default ``"auto"``: ``patient_id`` when a patient has several scans
among the rows passed, :func:`stats.clustered.resolve_cluster`; None keeps scans
independent) every closed-form proportion interval is cluster-aware: the chosen interval at Korn & Graubard's effective sample size, from the
cluster-robust variance of the cell's ratio estimator (:mod:`stats.clustered`); the AUC's
interval uses Obuchowski's (1997) clustered-data variance in every cell where a patient
has several scans (:func:`stats.intervals.clustered_auc_variance`).
"""
from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from stats import _validate as _v
from stats import bootstrap as bs
from stats.clustered import (AUTO, FLAG_DEFF, SUFFIX, clustered_proportions, complement_moments,
                             design_effect, effective_counts, metric_indicators, pair_codes,
                             cluster_cases)
from stats.detection import (BIN_SOURCES, GROUP_COLS, METRICS, OVERALL, PROPORTIONS, CaseMatrix,
                             _add_flag, _flags, _frame, case_matrix, metric_fractions, ratio)
from stats.intervals import (AUC_SCALES, PROPORTION_METHODS, AucScale, _auc_ci_from,
                             auc_boundary, auc_method, clustered_auc_variance,
                             delong_placements, newcombe_limits, proportion_limits)
from stats.schema import ContractError, tidy

ALL_METRICS = (*METRICS, "auc")
#: AUC rows whose DeLong variance is 0 (zero-width interval): the AUC is 0 or 1 ...
FLAG_AUC_BOUNDARY = "auc_boundary"
#: a metric without a closed-form interval (F1) when no bootstrap replicates were asked for
FLAG_NO_INTERVAL = "no_interval"
#: ... or every placement value is alike (e.g. all of the cell's scores tied)
FLAG_AUC_ZERO_VARIANCE = "auc_zero_variance"
MSG_METRIC = "metrics: unknown metric(s) {bad}; choose from {allowed}"
MSG_CI = "ci must be one of {allowed} or 'bootstrap'; got {ci!r}"
MSG_BOOT = "ci='bootstrap' needs n_boot= a number of replicates (e.g. 2000); got {b!r}"
MSG_BINS = ("bins['{col}']: {problem}; give {{'name': ..., 'breaks': [increasing numbers], "
            "'labels': [one fewer than breaks]}}")
MSG_BIN_VALUES = ("column '{col}': {n} recorded value(s) {what} and cannot be binned "
                  "(rows {examples}); {fix}")


def _examples(values: pd.Series, mask, k: int = 5) -> str:
    """'3 (25), 17 (29), ...': the first ``k`` data rows (1-based, as in a spreadsheet
    below its header) where ``mask`` holds, with their values."""
    idx = np.flatnonzero(mask)
    def show(v) -> str:
        return f"{v:g}" if isinstance(v, (int, float, np.number)) else repr(str(v))

    shown = ", ".join(f"{i + 1} ({show(values.iloc[i])})" for i in idx[:k])
    return shown + (f" and {len(idx) - k} more" if len(idx) > k else "")


def cluster_columns(cm: CaseMatrix, metrics: Sequence[str], *, ci: str, conf_level: float
                    ) -> dict[str, dict[str, np.ndarray]]:
    """Per metric (and "auc": clusters with a scan in the cell), (G x M) arrays from
    :func:`stats.clustered.clustered_proportions` over the clusters ``cm.patient``: the
    cluster-aware interval, SE and design effect of the proportions, ``n_clusters`` of
    every metric. One pass over every metric and model (one sparse aggregation)."""
    ind = metric_indicators(cm.label, cm.pred, [k for k in metrics if k != "auc"])
    if "auc" in metrics:
        ind["auc"] = (np.zeros(cm.pred.shape), np.ones(cm.pred.shape))
    keys, M = list(ind), len(cm.models)
    res = clustered_proportions(cm.member, cm.patient, np.hstack([ind[k][0] for k in keys]),
                                np.hstack([ind[k][1] for k in keys]), method=ci,
                                conf_level=conf_level)
    return {k: {c: v[:, i * M:(i + 1) * M] for c, v in res.items()} for i, k in enumerate(keys)}


def grouped_auc(cm: CaseMatrix, *, placements: bool = True, clustered: bool = False
                ) -> dict[str, np.ndarray]:
    """DeLong AUC per cell x model (G x M arrays ``auc``, ``var``) plus the placement
    values ``v`` (memberships x M) and the membership arrays, in one vectorized pass.

    ``clustered``: also Obuchowski's clustered-data variance over the clusters
    ``cm.patient`` within each cell (``var_cluster``, G x M) and ``repeats`` (G: some
    cluster has more than one scan in the cell), from the same placement values
    (:func:`stats.intervals.clustered_auc_variance`); skipped (``repeats`` all False)
    when no cluster repeats at all."""
    coo = cm.member.tocoo()
    cell, case = coo.row.astype(np.int64), coo.col.astype(np.int64)
    G, M = cm.n_cells, len(cm.models)
    repeats = clustered and len(np.unique(cm.patient)) < len(cm.patient)
    grp = (cell[:, None] * M + np.arange(M)[None, :]).ravel()
    y = np.repeat(cm.label[case], M)
    d = delong_placements(grp, y, cm.score[case].ravel(), G * M,
                          ranks=dense_ranks(cm.score)[case].ravel(),
                          placements=placements or repeats)
    out = {"auc": d["auc"].reshape(G, M), "var": d["var"].reshape(G, M),
           "m": d["m"].reshape(G, M), "k": d["k"].reshape(G, M), "cell": cell, "case": case}
    if placements or repeats:
        out["v"] = d["v"].reshape(-1, M)
    if clustered:
        out["repeats"] = np.zeros(G, dtype=bool)
        out["var_cluster"] = out["var"]
    if repeats:
        pair, pair_cell, _ = pair_codes(cell, case, cm.patient)
        c = clustered_auc_variance(pair, pair_cell, cm.label[case], out["v"], out["auc"])
        out["repeats"], out["var_cluster"] = c["repeats"], c["var"]
    return out


def dense_ranks(score: np.ndarray) -> np.ndarray:
    """Dense ranks (0-based, ties equal) of each column of ``score`` (n x M)."""
    order = np.argsort(score, axis=0)
    srt = np.take_along_axis(score, order, axis=0)
    dense = np.cumsum(np.vstack([np.zeros((1, score.shape[1]), dtype=np.int64),
                                 (np.diff(srt, axis=0) != 0).astype(np.int64)]), axis=0)
    out = np.empty_like(dense)
    np.put_along_axis(out, order, dense, axis=0)
    return out


def subgroup_metrics(cases: pd.DataFrame, *, by, metrics: Sequence[str] = (
        "sensitivity", "specificity", "ppv", "npv", "accuracy", "f1", "auc"),
        ci: str = "wilson", conf_level: float = 0.95, n_boot: int | None = None,
        seed=None, small_n: int = 10, scheduler=None, strata: str | None = None,
        boot_ci: bs.CIMethod = "percentile", auc_scale: AucScale = "auto",
        label_error: pd.DataFrame | None = None, cluster: str | None = AUTO,
        not_applicable="auto") -> pd.DataFrame:
    """Detection metrics with confidence intervals per model x subgroup cell.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred`` (see :func:`stats.scan_level`).
    by : list of column names or tuples of names (intersections), e.g.
        ``["phase", ("age_group", "phase")]``; ``"a:b"`` also means an intersection.
    metrics : any of sensitivity, specificity, ppv, npv, accuracy, f1, auc.
    ci : "wilson" (default), "clopper-pearson" or "jeffreys" for the proportions, or
        "bootstrap" (cluster-bootstrap intervals for every count metric).
    conf_level : float
    n_boot : int, optional
        Replicates of the paired cluster bootstrap (``patient_id`` clusters) used for F1
        (and for every count metric when ``ci="bootstrap"``). None (or 0): F1 gets no
        interval (method "none").
    seed, scheduler, strata, boot_ci : passed to the bootstrap engine
        (:mod:`stats.bootstrap`): seed int/Generator, Dask scheduler, strata column,
        "percentile", "bca" or "wilson" (Wilson at the bootstrap's effective sample size,
        for the proportions; F1 then gets the percentile interval).
    auc_scale : "auto" (default: the AUC scale, as pROC, in cells whose scans are
        independent; the logit scale where the clustered variance is used), "auc" or
        "logit"; see :func:`stats.auc_ci`.
    small_n : int
        Flag "small_n" when a metric's denominator is below this.
    label_error : DataFrame, optional
        Deprecated (removed in the next release): call
        :func:`stats.label_error.error_aware_metrics` (or ``compare_naive``) directly,
        with the same arguments; ``subgroup_metrics`` no longer dispatches to it.
    cluster : str or None, default "auto"
        Column whose repeated values mark scans of one patient (e.g. ``"patient_id"``).
        "auto" (default): ``"patient_id"`` when that column exists and some patient has
        more than one scan (per model) among the rows passed, else None
        (:func:`stats.clustered.resolve_cluster`); None or "none": scans independent.
        With a cluster every closed-form proportion interval (sensitivity, specificity, PPV, NPV,
        accuracy) becomes the ``ci`` interval at Korn & Graubard's effective sample size
        (``n / deff`` with a degrees-of-freedom factor, at most ``n``; method
        ``"<ci>-cluster"``, e.g. "wilson-cluster"; :mod:`stats.clustered`), the AUC's
        interval uses Obuchowski's clustered-data variance and a t quantile on C - 1
        degrees of freedom in each cell where a cluster has more than one scan (method
        "delong-cluster-logit-t" by default, "delong-cluster-t" on the AUC scale; DeLong's,
        identical there, in cells without repeats), and the cluster bootstrap resamples
        this column. None (or "auto" without repeated ``patient_id``): closed-form
        intervals treat scans as independent; the bootstrap resamples ``patient_id``.
    not_applicable : "auto" (default), None, list of columns or ``{column: "negatives"}``
        Which missing values read "not applicable" rather than "Missing": by default
        tumour size and location (and bins made from them) of reference negatives
        (:func:`stats.detection.not_applicable_columns`).

    Returns
    -------
    Tidy DataFrame, one row per metric x model x cell (overall first): ``estimand``,
    ``model``, ``group_var``, ``group_level``, ``estimate``, ``std_error`` (DeLong, or
    Obuchowski with ``cluster``, for AUC, bootstrap SD for bootstrapped metrics, else NaN),
    ``conf_low``, ``conf_high``,
    ``conf_level``, ``n`` (cases in the cell), ``n_pos``, ``n_neg``, ``method`` (wilson,
    clopper-pearson, jeffreys, delong, delong-logit, delong-cluster-t, delong-cluster-logit-t,
    bootstrap-percentile, bootstrap-bca, bootstrap-wilson or none),
    ``flag`` ("", empty, not_estimable, small_n, deff_not_estimable, no_interval (F1
    without bootstrap replicates: method "none", NaN limits), and for AUC
    auc_boundary (AUC 0 or 1) or auc_zero_variance (every placement alike, e.g. tied
    scores): a zero-width DeLong interval; several joined by ";"), extras ``numerator`` and ``denominator`` (the counts behind a proportion; NaN for
    AUC), ``n_clusters`` (clusters with a scan in the row's denominator: the ``cluster``
    column, else ``patient_id``, else every case its own; for AUC, with a scan in the
    cell), ``design_effect`` and ``n_effective`` (closed-form proportions: 1 and the
    denominator without ``cluster``; with it the cell's design effect, NaN where not
    estimable, and the effective number of trials the interval used, never above the
    denominator: :mod:`stats.clustered`; NaN for F1, AUC and bootstrap rows). With
    ``cluster``, ``std_error`` of a proportion is the cluster-robust (ratio-estimator) SE
    (NaN with a single cluster).

    Raises
    ------
    ContractError
        An empty ``cases`` table (no metric exists: every table has its overall row),
        ``conf_level`` outside (0, 1), ``small_n`` or ``n_boot`` not a whole number >= 0
        (:mod:`stats._validate`), and the cases contract's violations.

    Notes
    -----
    Every row passed is analysed: after a threshold chosen on the validation split, pass
    the test rows only (the CLI does). sensitivity = TP/(TP+FN), specificity = TN/(TN+FP), PPV = TP/(TP+FP),
    NPV = TN/(TN+FN), accuracy = (TP+TN)/n, F1 = 2TP/(2TP+FP+FN); AUC with DeLong's
    variance and a Wald interval clipped to [0, 1] (as pROC). Without ``cluster``
    closed-form intervals treat scans as independent; with it the proportions' and the
    AUC's intervals respect patients with several scans (Obuchowski 1997 for the AUC:
    DeLong's placement values summed per patient within the cell; a cell whose positives
    or negatives all belong to one patient has no such variance: NaN interval, flag
    deff_not_estimable); the cluster bootstrap always respects them.

    Validated against R: proportions and AUC via ``tests/r/intervals.R`` (binom.test,
    prop.test, pROC) to 1e-10; cell counts against a pandas groupby recomputation; the
    cluster-robust SE and design effect against ``survey::svymean`` (tests/r/clustered.R);
    the clustered AUC variance against a plain recomputation of Obuchowski's definitions
    (tests/test_auc_cluster.py). Coverage of "wilson-cluster": ``bench/cluster_coverage.md``;
    of the clustered AUC intervals: ``bench/auc_cluster_coverage.md``.

    Examples
    --------
    >>> import pandas as pd
    >>> import stats
    >>> cases = pd.DataFrame({"case_id": [f"c{i}" for i in range(8)], "model": "unet",
    ...                       "label": [1, 1, 1, 1, 0, 0, 0, 0],
    ...                       "score": [90.0, 60.0, 20.0, 75.0, 0.0, 55.0, 3.0, 1.0],
    ...                       "phase": ["venous", "arterial", "arterial", "venous"] * 2})
    >>> calls = stats.scan_level(cases, threshold=50)
    >>> tab = subgroup_metrics(calls, by=["phase"], metrics=["sensitivity", "specificity"])
    >>> print(tab[["estimand", "group_var", "group_level", "estimate", "conf_low",
    ...            "conf_high", "n_pos", "flag"]].round(3).to_string(index=False))
       estimand group_var group_level  estimate  conf_low  conf_high  n_pos    flag
    sensitivity   overall     overall      0.75     0.301      0.954    4.0 small_n
    specificity   overall     overall      0.75     0.301      0.954    4.0 small_n
    sensitivity     phase    arterial      0.50     0.095      0.905    2.0 small_n
    specificity     phase    arterial      0.50     0.095      0.905    2.0 small_n
    sensitivity     phase      venous      1.00     0.342      1.000    2.0 small_n
    specificity     phase      venous      1.00     0.342      1.000    2.0 small_n
    """
    func = "subgroup_metrics"
    _v.table(cases, func=func)
    conf_level = _v.level(conf_level, func=func)
    small_n = _v.whole(small_n, func=func, arg="small_n", minimum=0, fix="e.g. small_n=10")
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", minimum=0, optional=True,
                      fix="e.g. n_boot=2000, or None for no bootstrap")
    bad = [k for k in metrics if k not in ALL_METRICS]
    if bad:
        raise ValueError(MSG_METRIC.format(bad=bad, allowed=ALL_METRICS))
    if ci not in (*PROPORTION_METHODS, "bootstrap"):
        raise ValueError(MSG_CI.format(allowed=PROPORTION_METHODS, ci=ci))
    if ci == "bootstrap" and not n_boot:
        raise ValueError(MSG_BOOT.format(b=n_boot))
    if auc_scale not in AUC_SCALES:
        raise ValueError(f"auc_scale must be one of {AUC_SCALES}; got {auc_scale!r}")
    if boot_ci not in bs.CI_METHODS:
        raise ValueError(f"boot_ci must be one of {bs.CI_METHODS}; got {boot_ci!r}")
    cases, cluster = cluster_cases(cases, cluster)
    if label_error is not None:  # deprecated: the one import back into label_error
        import warnings

        warnings.warn("subgroup_metrics(label_error=) is deprecated; call "
                      "stats.label_error.error_aware_metrics(cases, by=..., label_error=...)",
                      DeprecationWarning, stacklevel=2)
        from stats.label_error import error_aware_metrics
        return error_aware_metrics(cases, by=by, label_error=label_error, metrics=metrics, ci=ci,
                                   conf_level=conf_level, seed=seed, small_n=small_n,
                                   n_boot=n_boot, scheduler=scheduler, strata=strata,
                                   boot_ci=boot_ci, auc_scale=auc_scale, cluster=cluster)
    cm = case_matrix(cases, by, cluster=cluster, not_applicable=not_applicable)
    counts = cm.cell_counts()
    fr = metric_fractions(counts["tp"], counts["fp"], counts["fn"], counts["tn"])
    count_metrics = [k for k in metrics if k != "auc"]
    boot_metrics = [k for k in count_metrics if ci == "bootstrap" or (k == "f1" and n_boot)]
    clus = cluster_columns(cm, metrics, ci=ci if ci in PROPORTION_METHODS else "wilson",
                           conf_level=conf_level)
    frames = []
    for k in count_metrics:
        num, den = fr[k]
        nan = np.full(num.shape, np.nan)
        flag = _flags(counts["n"][:, None], den, small_n)
        se, deff, n_eff = nan, np.where(den > 0, 1.0, np.nan), np.where(den > 0, den, np.nan)
        if k == "f1" or ci == "bootstrap":
            lo, hi, method, deff, n_eff = nan, nan, "none", nan, nan
        elif cluster is not None:
            c = clus[k]
            lo, hi, se = c["conf_low"], c["conf_high"], c["std_error"]
            deff, n_eff, method = c["design_effect"], c["n_effective"], ci + SUFFIX
            flag = _add_flag(flag, c["not_estimable"], FLAG_DEFF)
        else:
            lo, hi = proportion_limits(num, den, method=ci, conf_level=conf_level)
            method = ci
        frames.append(_frame(cm, k, {
            "estimate": ratio(num, den), "std_error": se, "conf_low": lo, "conf_high": hi,
            "conf_level": conf_level, "method": method, "flag": flag,
            "numerator": num, "denominator": den, "n_clusters": clus[k]["n_clusters"],
            "design_effect": deff, "n_effective": n_eff}, counts))
    if boot_metrics:
        bc = bs.boot_counts(cm, strata=strata)
        R = bs.replicate_counts(bc, int(n_boot), seed=seed, scheduler=scheduler)
        boot = bs.bootstrap_table(cm, bc, R, metrics=boot_metrics, conf_level=conf_level,
                                  boot_ci=boot_ci)
        for i, k in enumerate(count_metrics):
            if k in boot_metrics:
                b = boot[boot.estimand == k]
                f = frames[i]
                if not (b["model"].to_numpy() == f["model"].to_numpy()).all() or not (
                        b["group_level"].to_numpy() == f["group_level"].to_numpy()).all():
                    raise RuntimeError("internal: bootstrap rows out of order")
                for col in ("std_error", "conf_low", "conf_high", "method"):
                    f[col] = b[col].to_numpy()
                f["n_boot"] = b["n_boot"].to_numpy()
    for f in frames:    # F1 without bootstrap replicates: no interval, and the row says so
        none = (f["method"] == "none").to_numpy() & (f["flag"] != "empty").to_numpy()
        if none.any():
            f["flag"] = _add_flag(f["flag"].to_numpy(dtype=object), none, FLAG_NO_INTERVAL)
    if "auc" in metrics:
        a = grouped_auc(cm, placements=False, clustered=cluster is not None)
        rep = np.broadcast_to(a.get("repeats", np.zeros(cm.n_cells, bool))[:, None],
                              a["auc"].shape)
        var = np.where(rep, a.get("var_cluster", a["var"]), a["var"])
        C = np.where(rep, clus["auc"]["n_clusters"], np.nan)   # t on C - 1 df where clustered
        se, lo, hi = _auc_ci_from(a["auc"], var, conf_level, auc_scale, clusters=C)
        nmin = np.minimum(a["m"], a["k"])
        flag = np.where(counts["n"][:, None] == 0, "empty",
                        np.where(nmin == 0, "not_estimable",
                                 np.where(nmin < small_n, "small_n", "")))
        flag = _add_flag(flag, rep & np.isnan(var) & ~np.isnan(a["var"]), FLAG_DEFF)
        # a zero-width interval: AUC 0 or 1 (complete separation; pROC warns), or every
        # placement alike (e.g. all scores tied): DeLong's variance is 0
        bnd = auc_boundary(a["auc"])
        flag = _add_flag(flag, bnd, FLAG_AUC_BOUNDARY)
        flag = _add_flag(flag, ~bnd & (var == 0), FLAG_AUC_ZERO_VARIANCE)
        nan = np.full(a["auc"].shape, np.nan)
        frames.append(_frame(cm, "auc", {
            "estimate": a["auc"], "std_error": se, "conf_low": lo, "conf_high": hi,
            "conf_level": conf_level, "method": auc_method(rep, auc_scale),
            "flag": flag, "numerator": nan, "denominator": nan,
            "n_clusters": clus["auc"]["n_clusters"], "design_effect": nan,
            "n_effective": nan}, counts))
    out = pd.concat(frames, ignore_index=True)
    return tidy(_order(out, cm), group_cols=GROUP_COLS)


def _order(out: pd.DataFrame, cm: CaseMatrix) -> pd.DataFrame:
    """Rows ordered model, cell (overall first, axes in ``by`` order), metric."""
    cell_pos = {(v, l): i for i, (v, l) in enumerate(zip(cm.cells.group_var, cm.cells.group_level))}
    key = pd.DataFrame({
        "m": out["model"].map({m: i for i, m in enumerate(cm.models)}),
        "c": [cell_pos[t] for t in zip(out["group_var"], out["group_level"])],
        "e": out["estimand"].map({k: i for i, k in enumerate(ALL_METRICS)})})
    return out.iloc[np.lexsort((key.e, key.c, key.m))].reset_index(drop=True)


# --------------------------------------------------------------------------- bins

def add_bins(cases: pd.DataFrame, bins: Mapping[str, Mapping], *,
             strict: bool = True) -> pd.DataFrame:
    """Add binned (ordered categorical) columns from the analysis plan.

    Parameters
    ----------
    bins : ``{column: {"name": new_column, "breaks": [b0, b1, ...], "labels": [...],
        "right": False}}``, e.g. ``{"age": {"name": "age_group", "breaks": [0, 40, 60,
        75, 130], "labels": ["<40", "40-59", "60-74", "75+"]}}``. Intervals are
        ``[b_i, b_{i+1})`` unless ``right`` is true; default labels ``"[b_i, b_{i+1})"``.

    Returns
    -------
    A copy of ``cases`` with one categorical column per entry (all labels kept as
    categories, so empty bins stay visible downstream); missing values are NaN: as a
    subgroup axis they form the "Missing" level, or "not applicable" for reference
    negatives when the source is a tumour column (the copy's
    ``attrs["clinrel_bin_sources"]`` records ``{new column: source column}`` for that
    rule; :func:`stats.detection.not_applicable_columns`).

    strict : bool
        True (default): refuse recorded values that cannot be binned (below). False: bin
        them as missing (NaN), for values read by a metadata extractor, where a value
        outside the breaks is an unusable extraction, not a fact of the study.

    Raises
    ------
    ContractError
        With ``strict``, when a recorded value is not a number, or falls outside the
        breaks: it would otherwise be read as missing, and a recorded age of 25 with
        breaks from 30 is not a missing age. The message names the column, the rows and
        values, and the fix. Breaks that are NaN are refused.

    An empty ``cases`` table gives an empty copy with the binned columns (a row-wise
    transform: zero cases in, zero out).
    """
    _v.table(cases, func="add_bins", empty=True)
    if not isinstance(bins, Mapping):
        raise ContractError(MSG_BINS.format(col="...", problem=f"bins must be a mapping "
                                            f"of columns; got {type(bins).__name__}"))
    df = cases.copy()
    df.attrs[BIN_SOURCES] = dict(df.attrs.get(BIN_SOURCES, {}))
    for col, spec in bins.items():
        if col not in df.columns:
            raise ContractError(MSG_BINS.format(col=col, problem=f"column '{col}' is not in cases"))
        if not isinstance(spec, Mapping):
            raise ContractError(MSG_BINS.format(col=col, problem=f"got {_v._show(spec)}"))
        breaks = list(_v.finite(np.atleast_1d(spec.get("breaks", [])), func="add_bins",
                                arg=f"bins[{col!r}]['breaks']",
                                fix="give increasing numbers (inf for an open end)",
                                infinite=True))
        if len(breaks) < 2 or any(b <= a for a, b in zip(breaks, breaks[1:])):
            raise ContractError(MSG_BINS.format(col=col, problem="'breaks' must be >= 2 increasing numbers"))
        right = bool(spec.get("right", False))
        labels = spec.get("labels")
        if labels is None:
            labels = [(f"({a:g}, {b:g}]" if right else f"[{a:g}, {b:g})")
                      for a, b in zip(breaks, breaks[1:])]
        if len(labels) != len(breaks) - 1:
            raise ContractError(MSG_BINS.format(col=col, problem=f"{len(labels)} labels for "
                                                f"{len(breaks) - 1} bins"))
        values = pd.to_numeric(df[col], errors="coerce")
        recorded = df[col].notna().to_numpy()
        text = recorded & values.isna().to_numpy()
        if strict and text.any():
            raise ContractError(MSG_BIN_VALUES.format(
                col=col, n=int(text.sum()), what="are not numbers",
                examples=_examples(df[col], text), fix="record numbers (or leave the cell "
                "empty when the value is unknown)"), column=col, rows=np.flatnonzero(text))
        name = spec.get("name", f"{col}_bin")
        df[name] = pd.cut(values, breaks, labels=list(labels), right=right, ordered=True)
        outside = recorded & ~text & df[name].isna().to_numpy()
        if strict and outside.any():
            lo, hi = values[outside].min(), values[outside].max()
            raise ContractError(MSG_BIN_VALUES.format(
                col=col, n=int(outside.sum()),
                what=(f"fall outside the breaks {breaks[0]:g} to {breaks[-1]:g} "
                      f"({'(a, b]' if right else '[a, b)'} intervals)"),
                examples=_examples(df[col], outside),
                fix=f"widen the breaks to cover {lo:g} to {hi:g} (e.g. start at 0 and end "
                f"above the largest value), or correct the values"),
                column=col, rows=np.flatnonzero(outside))
        df.attrs[BIN_SOURCES][name] = col
    return df


# --------------------------------------------------------------------------- vs rest

def adjust_p(out: pd.DataFrame, family: list[str]) -> pd.DataFrame:
    """Add ``p_adjusted`` (Holm) and ``p_adjusted_bh`` (Benjamini-Hochberg), computed by
    statsmodels' ``multipletests`` within each family (rows sharing ``family`` columns);
    NaN p-values stay NaN and do not count in the family."""
    out["p_adjusted"] = np.nan
    out["p_adjusted_bh"] = np.nan
    # statsmodels' Holm calls gc.collect() on every call: about 70 ms each in a report's
    # process (millions of tracked objects); frozen objects are not scanned (same numbers)
    gc.freeze()
    try:
        for _, idx in out.groupby(family, sort=False).groups.items():  # one call per family
            sub = out.loc[idx, "p_value"]
            ok = sub.notna()
            if ok.any():
                out.loc[sub.index[ok], "p_adjusted"] = multipletests(sub[ok], method="holm")[1]
                out.loc[sub.index[ok], "p_adjusted_bh"] = multipletests(sub[ok], method="fdr_bh")[1]
    finally:
        gc.unfreeze()
    return out


def _effective_counts_vs_rest(cm: CaseMatrix, conf_level: float
                              ) -> dict[str, tuple[np.ndarray, ...]]:
    """Per metric (sensitivity, specificity): the effective counts ``x1, n1, x2, n2`` (G x M)
    of each cell and of the rest of its axis (:func:`stats.clustered.effective_counts` at
    Korn & Graubard's effective sizes) and the clusters of each."""
    keys = ("sensitivity", "specificity")
    ind = metric_indicators(cm.label, cm.pred, keys)
    one, rest = complement_moments(cm.member, cm.cells["axis"].to_numpy(), cm.patient,
                                   np.hstack([ind[k][0] for k in keys]),
                                   np.hstack([ind[k][1] for k in keys]))
    e1 = effective_counts(one["x"], one["n"], design_effect(one, conf_level)["n_effective"])
    e2 = effective_counts(rest["x"], rest["n"], design_effect(rest, conf_level)["n_effective"])
    arrays = (*e1, *e2, one["n_clusters"], rest["n_clusters"])
    M = len(cm.models)
    return {k: tuple(a[:, i * M:(i + 1) * M] for a in arrays) for i, k in enumerate(keys)}


def _two_proportions(x1, n1, x2, n2, conf_level: float) -> dict[str, np.ndarray]:
    """Newcombe's hybrid interval and the pooled two-proportion z test (R's
    ``prop.test(correct = FALSE)``), vectorized; p = 1 where both samples are constant."""
    est, lo, hi = newcombe_limits(x1, n1, x2, n2, conf_level=conf_level)
    pool = ratio(x1 + x2, n1 + n2)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = est / np.sqrt(pool * (1 - pool) * (1 / n1 + 1 / n2))
    z = np.where(np.isfinite(z), z, np.nan)
    p = 2 * sps.norm.sf(np.abs(z))
    both_const = (pool == 0) | (pool == 1)
    p = np.where(both_const & (n1 > 0) & (n2 > 0), 1.0, p)
    return {"estimate": est, "conf_low": lo, "conf_high": hi, "statistic": z, "p_value": p}


def subgroup_vs_rest(cases: pd.DataFrame, *, by, conf_level: float = 0.95, alpha: float = 0.05,
                     adjust: str = "holm", not_applicable="auto",
                     cluster: str | None = AUTO) -> pd.DataFrame:
    """Sensitivity and specificity of each subgroup against the rest of its axis.

    Every level is compared with everyone else on its axis, the "Missing" level included
    (are the scans without a value detected differently?), and the rest holds every other
    scan. :func:`stats.heterogeneity_test` instead leaves the missing values out, as R's
    ``chisq.test`` drops NA: it asks whether the known levels differ.

    Parameters
    ----------
    cases : DataFrame with ``pred``.
    by : axes as in :func:`subgroup_metrics`.
    alpha : level for the sensitivity-collapse flag.
    adjust : "holm" or "fdr_bh": the adjusted p-value the collapse flag uses; "none": the
        unadjusted p-value (an exploratory family: ``p_adjusted`` columns NaN).
    not_applicable : as in :func:`subgroup_metrics` (missing values are levels).
    cluster : column whose repeated values mark scans of one patient (e.g.
        ``"patient_id"``): method "newcombe-z-cluster", the interval and the test on each
        side's effective counts (Notes). "auto" (default): ``"patient_id"`` when a
        patient has several scans among the rows passed, else None
        (:func:`stats.clustered.resolve_cluster`); None or "none": scans independent
        (method "newcombe-z").

    Returns
    -------
    Tidy DataFrame, rows ``estimand`` "sensitivity_difference" and
    "specificity_difference" per model x cell (overall excluded): ``estimate`` =
    subgroup - rest, ``conf_low``/``conf_high`` (Newcombe hybrid score, method 10),
    ``statistic`` (pooled two-proportion z), ``p_value`` (two-sided), ``p_adjusted``
    (Holm), extras ``p_adjusted_bh`` (Benjamini-Hochberg), ``estimate_subgroup``,
    ``estimate_rest``, ``n_rest``, ``n_clusters`` and ``n_clusters_rest`` (clusters with a
    scan in the subgroup's and in the rest's denominator: the ``cluster`` column, else
    ``patient_id``, else every case its own, as :func:`subgroup_metrics`), ``collapse``
    (bool) and ``flag`` "sensitivity_collapse" on both rows of a collapsed subgroup
    ("not_estimable" when a denominator is 0).

    Notes
    -----
    The rest of a level is every other case (missing values are levels of the axis, so
    the rest of a level is the overall minus the level).
    z = (p1 - p2) / sqrt(p (1 - p) (1/n1 + 1/n2)), p pooled: the square root of R's
    ``prop.test(correct = FALSE)`` statistic, with the same p-value. Families for the
    adjustment: per model and metric, every level of every axis. Subgroup and rest are
    disjoint sets of scans but may share patients; without ``cluster`` the tests treat
    scans as independent. With ``cluster``: the same interval and test on the effective
    counts of the subgroup and of the rest, ``p n_eff`` of ``n_eff`` with each side's
    Korn & Graubard effective size (:mod:`stats.clustered`), i.e. Newcombe's interval
    from the two cluster-aware Wilson intervals and the z test with each side's binomial
    variance inflated by its design effect (the rest's computed over its own clusters;
    the covariance of a patient's scans on both sides is left out, which is conservative
    when it is positive); extras ``n_effective``, ``n_effective_rest``. Type-I error in simulation: ``bench/cluster_coverage.md``.

    A subgroup shows **sensitivity collapse** when its sensitivity is significantly
    below the rest (adjusted p < alpha) while its specificity is not significantly
    below the rest.

    An empty ``cases`` table raises :class:`~stats.schema.ContractError` (no subgroup
    exists to compare), as do ``conf_level`` or ``alpha`` outside (0, 1).

    Validated against R's ``prop.test(..., correct = FALSE)`` and ``p.adjust`` to 1e-10.
    """
    func = "subgroup_vs_rest"
    _v.table(cases, func=func)
    conf_level = _v.level(conf_level, func=func)
    alpha = _v.number(alpha, func=func, arg="alpha", lo=0.0, hi=1.0, fix="e.g. alpha=0.05")
    if adjust not in ("holm", "fdr_bh", "none"):
        raise ValueError(f"adjust must be 'holm', 'fdr_bh' or 'none'; got {adjust!r}")
    cases, cluster = cluster_cases(cases, cluster)
    cm = case_matrix(cases, by, not_applicable=not_applicable, cluster=cluster)
    c = cm.cell_counts()
    axis = cm.cells["axis"].to_numpy()
    n_axes = int(axis.max()) + 1
    eff = _effective_counts_vs_rest(cm, conf_level)  # the clusters of each side, always
    frames = []
    for metric, x, n in (("sensitivity", c["tp"], c["n_pos"][:, None] + 0 * c["tp"]),
                         ("specificity", c["tn"], c["n_neg"][:, None] + 0 * c["tn"])):
        xa = np.stack([np.bincount(axis, weights=x[:, j], minlength=n_axes) for j in range(x.shape[1])], 1)
        na = np.stack([np.bincount(axis, weights=n[:, j], minlength=n_axes) for j in range(x.shape[1])], 1)
        x2, n2 = xa[axis] - x, na[axis] - n
        *counts, c1, c2 = eff[metric]
        extra, method = {"n_clusters": c1, "n_clusters_rest": c2}, "newcombe-z"
        if cluster is None:
            res = _two_proportions(x, n, x2, n2, conf_level)
        else:
            res = _two_proportions(*counts, conf_level)
            res["estimate"] = ratio(x, n) - ratio(x2, n2)
            extra = {"n_effective": counts[1], "n_effective_rest": counts[3], **extra}
            method = "newcombe-z-cluster"
        frames.append(_frame(cm, f"{metric}_difference", {
            **res, "conf_level": conf_level, "method": method,
            "flag": np.where(np.isnan(res["p_value"]), "not_estimable", ""),
            "estimate_subgroup": ratio(x, n), "estimate_rest": ratio(x2, n2), "n_rest": n2,
            **extra}, c))
    out = pd.concat(frames, ignore_index=True)
    out = adjust_p(out[out["group_var"] != OVERALL].reset_index(drop=True), ["model", "estimand"])
    if adjust == "none":     # exploratory: no family, the flag reads the raw p-values
        out["p_adjusted"] = out["p_adjusted_bh"] = np.nan
    padj = {"holm": out["p_adjusted"], "fdr_bh": out["p_adjusted_bh"],
            "none": out["p_value"]}[adjust]
    sig_low = (out["estimate"] < 0) & (padj < alpha)
    key = ["model", "group_var", "group_level"]
    sens = sig_low[out.estimand == "sensitivity_difference"].set_axis(
        pd.MultiIndex.from_frame(out.loc[out.estimand == "sensitivity_difference", key]))
    spec = sig_low[out.estimand == "specificity_difference"].set_axis(
        pd.MultiIndex.from_frame(out.loc[out.estimand == "specificity_difference", key]))
    collapse = (sens & ~spec.reindex(sens.index, fill_value=False))
    out["collapse"] = collapse.reindex(pd.MultiIndex.from_frame(out[key])).to_numpy(bool)
    out.loc[out["collapse"], "flag"] = "sensitivity_collapse"
    return tidy(out, group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- failure map

def failure_map(cases: pd.DataFrame, rows: str = "age_group", cols: str = "phase", *,
                metric: str = "sensitivity", ci: str = "wilson", conf_level: float = 0.95,
                small_n: int = 10, cluster: str | None = AUTO,
                not_applicable="auto") -> pd.DataFrame:
    """A metric (default sensitivity) over the ``rows`` x ``cols`` grid, per model.

    Returns the tidy rows of :func:`subgroup_metrics` for the intersection
    ``rows:cols`` (every combination, empty ones with n = 0 and flag "empty"; missing
    values as the "Missing" or "not applicable" row or column), plus ``row_level`` and
    ``col_level`` so a report can draw the grid directly. ``cluster`` (default "auto":
    ``patient_id`` when it repeats) and ``not_applicable`` as in :func:`subgroup_metrics`
    (with a cluster the intervals are "<ci>-cluster"; every row carries its
    ``design_effect`` and ``n_clusters``). An empty ``cases`` table raises
    :class:`~stats.schema.ContractError`, as in :func:`subgroup_metrics`.
    """
    func = "failure_map"
    _v.table(cases, func=func, columns=[c for c in (rows, cols) if isinstance(c, str)],
             fix="name the grid's row and column axes (rows=, cols=) or add them "
                 "(stats.add_bins makes age_group)")
    for arg, col in (("rows", rows), ("cols", cols)):
        if not isinstance(col, str):
            raise ContractError(f"{func}: {arg} must be one column name; got {_v._show(col)}")
    conf_level = _v.level(conf_level, func=func)
    small_n = _v.whole(small_n, func=func, arg="small_n", minimum=0, fix="e.g. small_n=10")
    out = subgroup_metrics(cases, by=[(rows, cols)], metrics=(metric,), ci=ci,
                           conf_level=conf_level, small_n=small_n, cluster=cluster,
                           not_applicable=not_applicable)
    out = out[out["group_var"] != OVERALL].reset_index(drop=True)
    split = out["group_level"].str.split(":", n=1, expand=True)
    out["row_level"] = split[0].astype(object)
    out["col_level"] = split[1].astype(object)
    return tidy(out, group_cols=GROUP_COLS)
