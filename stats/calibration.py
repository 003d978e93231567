"""Calibration of predicted probabilities: ECE, MCE, Brier, NLL, reliability tables,
temperature scaling and a bootstrap CI for ECE (DESIGN.md, "Calibration").

Two kinds of input, chosen by the shape of ``prob``:

* binary, ``prob`` of shape (n,): the probability of class 1; the reliability curve
  compares, per bin of ``prob``, the mean predicted probability with the observed
  frequency of ``label == 1``;
* multiclass, ``prob`` of shape (n, k) (rows are class probabilities; ``label`` in
  0..k-1): **top-label** calibration, i.e. confidence ``max_c prob[i, c]`` against
  accuracy ``argmax_c prob[i, c] == label[i]`` (Guo et al. 2017).

Bins: ``strategy="uniform"`` uses ``n_bins`` equal-width bins on [0, 1] (default 15);
``strategy="quantile"`` uses equal-mass bins whose edges are the empirical quantiles of the
confidences, ``np.percentile(conf, np.linspace(0, 1, n_bins + 1) * 100)`` (linear
interpolation). Bins are closed on the right, ``[e_0, e_1], (e_1, e_2], ..., (e_{B-1}, e_B]``:
a value equal to an inner edge falls in the lower bin (``np.searchsorted(edges[1:-1], conf)``),
which is the rule of ``sklearn.calibration.calibration_curve`` (both strategies) and the
bins ``I_m = ((m - 1)/M, m/M]`` of Guo et al. (2017); repeated quantile edges leave empty
bins. Checked against sklearn's ``calibration_curve`` on data with values exactly on the
edges (ties) to 1e-12 (tests/test_calibration.py).

ECE = sum_b (n_b / n) |acc_b - conf_b|;  MCE = max over non-empty bins |acc_b - conf_b|.

References: Naeini, Cooper & Hauskrecht (2015) AAAI; Guo, Pleiss, Sun & Weinberger (2017)
ICML, "On calibration of modern neural networks".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import optimize, sparse, special

from stats import limits as _limits
from . import _validate as _v
from ._quantile import percentile_interval
from ._rng import as_generator
from .limits import check
from .schema import ContractError, tidy

__all__ = ["ece", "mce", "brier", "nll", "reliability_table", "ece_ci", "ece_ci_many", "temperature_scale",
           "TemperatureFit", "calibration_repair", "encoder_ece", "protocol_runs"]

Strategy = Literal["uniform", "quantile"]
EPS = 1e-15

MSG_SHAPE = ("prob must have shape (n,) (binary) or (n, k) (multiclass) matching label's n = {n}; "
             "got shape {shape}")
MSG_PROB = ("prob must be finite probabilities in [0, 1]; rows {rows} have {values}; pass "
            "probabilities (kind='logits' for temperature_scale of raw logits)")
MSG_LABEL = ("label must be {what}; rows {rows} have {values}; recode them")
MSG_STRATEGY = "strategy must be 'uniform' or 'quantile'; got {value!r}"
MSG_BINS = "n_bins must be an integer >= 1; got {value!r}"


# --------------------------------------------------------------------------- input checks


def _rows(bad: np.ndarray) -> str:
    return ", ".join(str(int(i) + 1) for i in bad[:5]) + (
        f" (and {len(bad) - 5} more)" if len(bad) > 5 else "")


def _check(label, prob, func: str) -> tuple[np.ndarray, np.ndarray]:
    """``label`` and ``prob`` checked: matching shapes, at least one case (an empty input
    has no calibration error: :mod:`stats._validate`), probabilities in [0, 1], labels
    0/1 (binary) or 0..k-1 (multiclass). Messages start with ``func``."""
    y = np.asarray(label)
    p = _v._floats(prob, func=func, arg="prob", fix="pass probabilities")
    if y.ndim != 1 or p.ndim not in (1, 2) or p.shape[0] != y.shape[0]:
        raise ContractError(f"{func}: " + MSG_SHAPE.format(n=y.shape[0] if y.ndim else 1,
                                                            shape=p.shape))
    _v.nonempty(y, func=func, arg="label", unit="case")
    bad = np.flatnonzero(~(np.isfinite(p) & (p >= 0) & (p <= 1)).reshape(len(p), -1).all(1))
    if len(bad):
        raise ContractError(f"{func}: " + MSG_PROB.format(rows=_rows(bad),
                                                           values=p[bad[:5]].tolist()),
                            rows=bad[:5] + 1)
    k = 2 if p.ndim == 1 else p.shape[1]
    yf = y.astype(float) if y.dtype.kind in "biuf" else np.full(y.shape, np.nan)
    bad = np.flatnonzero(~np.isin(yf, np.arange(k)))
    if len(bad):
        what = "0/1" if p.ndim == 1 else f"an integer class in 0..{k - 1}"
        raise ContractError(f"{func}: " + MSG_LABEL.format(what=what, rows=_rows(bad),
                                                            values=y[bad[:5]].tolist()),
                            column="label", rows=bad[:5] + 1)
    return yf.astype(np.int64), p


def _confidence(label, prob, func: str = "ece") -> tuple[np.ndarray, np.ndarray]:
    """(confidence, outcome): binary -> (prob, label); multiclass -> top-label."""
    y, p = _check(label, prob, func)
    if p.ndim == 1:
        return p, y.astype(float)
    top = p.argmax(1)
    return p[np.arange(len(p)), top], (top == y).astype(float)


def _edges(conf: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(MSG_BINS.format(value=n_bins))
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "quantile":   # sklearn's expression, so that edges agree to the bit
        return np.percentile(conf, np.linspace(0.0, 1.0, n_bins + 1) * 100)
    raise ValueError(MSG_STRATEGY.format(value=strategy))


def _bin_sums(conf, outcome, n_bins, strategy):
    """Per bin: count, sum of confidence, sum of outcome; and the edges."""
    edges = _edges(conf, n_bins, strategy)
    idx = np.searchsorted(edges[1:-1], conf, side="left")   # an edge value: lower bin
    return (np.bincount(idx, minlength=n_bins).astype(float),
            np.bincount(idx, weights=conf, minlength=n_bins),
            np.bincount(idx, weights=outcome, minlength=n_bins), edges)


# --------------------------------------------------------------------------- scalar metrics


def ece(label, prob, *, n_bins: int = 15, strategy: Strategy = "uniform") -> float:
    """Expected calibration error.

    Parameters
    ----------
    label : (n,) 0/1 (binary) or class index (multiclass)
    prob : (n,) probability of class 1, or (n, k) class probabilities (top-label)
    n_bins : int, default 15
    strategy : "uniform" (equal width) or "quantile" (equal mass)

    Returns
    -------
    float
        ``sum_b (n_b / n) |acc_b - conf_b| = sum_b |sum_{i in b} (y_i - c_i)| / n``.

    Notes
    -----
    Bins as the module docstring (an edge value falls in the lower bin, as sklearn).
    Checked against an independent recomputation (sklearn's ``calibration_curve`` per-bin
    means, bin counts from ``pandas.cut(right=True)``) to 1e-12, including data with many
    values exactly on bin edges, and against hand examples (tests/test_calibration.py).

    Examples
    --------
    An empty input raises :class:`~stats.schema.ContractError` (no ECE exists), as do
    mismatched lengths, probabilities outside [0, 1] and an ``n_bins`` that is not a
    whole number >= 1.

    >>> round(ece([0, 1, 1, 0, 1], [0.2, 0.9, 0.6, 0.4, 0.8], n_bins=5), 4)
    0.26
    """
    n_bins = _v.whole(n_bins, func="ece", arg="n_bins", fix="e.g. n_bins=15")
    conf, out = _confidence(label, prob, "ece")
    n, s_conf, s_out, _ = _bin_sums(conf, out, n_bins, strategy)
    return float(np.abs(s_out - s_conf).sum() / len(conf))


def mce(label, prob, *, n_bins: int = 15, strategy: Strategy = "uniform") -> float:
    """Maximum calibration error: ``max_b |acc_b - conf_b|`` over non-empty bins (input
    checks as :func:`ece`; an empty input is refused)."""
    n_bins = _v.whole(n_bins, func="mce", arg="n_bins", fix="e.g. n_bins=15")
    conf, out = _confidence(label, prob, "mce")
    n, s_conf, s_out, _ = _bin_sums(conf, out, n_bins, strategy)
    keep = n > 0
    return float(np.max(np.abs(s_out[keep] - s_conf[keep]) / n[keep]))


def brier(label, prob) -> float:
    """Brier score: binary ``mean (p_i - y_i)^2``; multiclass ``mean_i sum_c (p_ic - [y_i = c])^2``
    (Brier's original, which is twice the binary score for k = 2). Input checks as
    :func:`ece` (an empty input is refused)."""
    y, p = _check(label, prob, "brier")
    if p.ndim == 1:
        return float(np.mean((p - y) ** 2))
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y] = 1.0
    return float(np.mean(((p - onehot) ** 2).sum(1)))


def nll(label, prob, *, eps: float = EPS) -> float:
    """Negative log-likelihood (mean log loss), probabilities clipped to [eps, 1 - eps]:
    binary ``-mean(y log p + (1 - y) log(1 - p))``; multiclass ``-mean log p_{i, y_i}``.
    Input checks as :func:`ece` (an empty input is refused); ``eps`` in (0, 0.5)."""
    eps = _v.number(eps, func="nll", arg="eps", lo=0.0, hi=0.5, fix="e.g. eps=1e-15")
    y, p = _check(label, prob, "nll")
    p = np.clip(p, eps, 1.0 - eps)
    if p.ndim == 1:
        return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))
    return float(-np.mean(np.log(p[np.arange(len(y)), y])))


# --------------------------------------------------------------------------- tables


def reliability_table(label, prob, *, n_bins: int = 15, strategy: Strategy = "uniform",
                      conf_level: float = 0.95, cluster=None) -> pd.DataFrame:
    """Reliability-diagram table: one row per bin (empty bins kept), tidy.

    ``cluster`` (optional, one id per case, e.g. the patient of each scan): each bin's
    interval is Wilson at Korn & Graubard's effective size over the clusters of the bin
    (:func:`stats.clustered.clustered_proportions`; method "wilson-cluster", flag
    "deff_not_estimable" by its rules), with ``std_error`` (the ratio estimator's
    cluster-robust SE) and extras ``n_clusters``, ``design_effect`` and ``n_effective``.

    Returns
    -------
    DataFrame (tidy)
        ``estimand`` "observed_frequency" (binary) or "accuracy" (top-label); ``estimate``
        the bin's observed frequency / accuracy with a Wilson CI (``conf_low``,
        ``conf_high``, ``conf_level``); ``n`` cases in the bin, ``n_pos`` outcomes = 1,
        ``n_neg`` outcomes = 0; ``method`` "wilson"; ``flag`` "empty" for empty bins;
        extras ``bin`` (1-based), ``bin_low``, ``bin_high`` (edges), ``mean_confidence``
        (mean predicted probability / confidence in the bin), ``gap``
        (``estimate - mean_confidence``), ``n_bins``, ``strategy``.
    """
    from .intervals import proportion_limits

    n_bins = _v.whole(n_bins, func="reliability_table", arg="n_bins", fix="e.g. n_bins=15")
    conf_level = _v.level(conf_level, func="reliability_table")
    conf, out = _confidence(label, prob, "reliability_table")
    if cluster is not None:
        _v.same_length(func="reliability_table", label=conf,
                       cluster=np.asarray(cluster, dtype=object).ravel())
    n, s_conf, s_out, edges = _bin_sums(conf, out, n_bins, strategy)
    with np.errstate(invalid="ignore", divide="ignore"):
        freq = np.where(n > 0, s_out / n, np.nan)
        mean_conf = np.where(n > 0, s_conf / n, np.nan)
    lo, hi = proportion_limits(s_out, n, method="wilson", conf_level=conf_level)
    method, flag, extra = "wilson", np.where(n > 0, "", "empty"), {}
    if cluster is not None:
        from .clustered import FLAG_DEFF, clustered_proportions
        from .intervals import _cluster_codes

        codes = _cluster_codes(cluster, len(conf))
        idx = np.searchsorted(edges[1:-1], conf, side="left")
        member = sparse.csr_matrix((np.ones(len(conf)), (idx, np.arange(len(conf)))),
                                   shape=(n_bins, len(conf)))
        c = clustered_proportions(member, codes, out[:, None], np.ones((len(conf), 1)),
                                  conf_level=conf_level)
        lo, hi = c["conf_low"][:, 0], c["conf_high"][:, 0]
        method = "wilson-cluster"
        flag = np.where(c["not_estimable"][:, 0], FLAG_DEFF, flag)
        extra = {"std_error": c["std_error"][:, 0], "n_clusters": c["n_clusters"][:, 0],
                 "design_effect": c["design_effect"][:, 0],
                 "n_effective": c["n_effective"][:, 0]}
    binary = np.asarray(prob).ndim == 1
    df = pd.DataFrame({
        "estimand": "observed_frequency" if binary else "accuracy",
        "estimate": freq, "conf_low": lo, "conf_high": hi, "conf_level": conf_level,
        "n": n, "n_pos": s_out, "n_neg": n - s_out, "method": method,
        "flag": flag, **extra,
        "bin": np.arange(1, n_bins + 1), "bin_low": edges[:-1], "bin_high": edges[1:],
        "mean_confidence": mean_conf, "gap": freq - mean_conf,
        "n_bins": n_bins, "strategy": strategy})
    return tidy(df)


def _replicate_ece(conf: np.ndarray, out: np.ndarray, idx: np.ndarray, n_bins: int,
                   strategy: str) -> np.ndarray:
    """ECE of each bootstrap replicate ``conf[idx[b]]`` (idx: (B, n)), vectorized: the
    definition, resampling the cases themselves (equal-mass bins, and the reference the
    uniform-bin fast path is tested against)."""
    B, n = idx.shape
    c, o = conf[idx], out[idx]
    if strategy == "uniform":
        inner = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
        bins = np.searchsorted(inner, c, side="left")
    else:
        q = (np.linspace(0.0, 1.0, n_bins + 1) * 100)[1:-1]
        inner = np.percentile(c, q, axis=1).T                 # (B, n_bins - 1)
        bins = (inner[:, None, :] < c[:, :, None]).sum(-1)   # = searchsorted side="left"
    flat = (bins + n_bins * np.arange(B)[:, None]).ravel()
    diff = np.bincount(flat, weights=(o - c).ravel(), minlength=B * n_bins).reshape(B, n_bins)
    return np.abs(diff).sum(1) / n


#: replicates x cases of one block of the uniform-bin ECE bootstrap (its multiplicity
#: matrix is float64: 64 MiB; the draws and counts add about as much again)
_ECE_BLOCK_ELEMENTS = 2 ** 23
#: a block never has fewer replicates than this (the sparse product streams W's rows)
_ECE_MIN_BLOCK = 64
#: replicates per draw of the legacy (equal-mass) path: elements per block
_ECE_LEGACY_ELEMENTS = 4_000_000


def _bin_differences(series: list[tuple[np.ndarray, np.ndarray]], n_bins: int) -> sparse.csc_matrix:
    """``D`` (series x bins, cases), CSC: case i's ``outcome - confidence`` of series s in
    row ``s * n_bins + bin_s(i)``; one entry per case and series."""
    inner = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
    n, S = len(series[0][0]), len(series)
    rows = np.empty((n, S), dtype=np.int64)
    vals = np.empty((n, S))
    for s, (conf, out) in enumerate(series):   # one pass per series, vectorized over cases
        rows[:, s] = np.searchsorted(inner, conf, side="left") + s * n_bins
        vals[:, s] = out - conf
    return sparse.csc_matrix((vals.ravel(), rows.ravel(), np.arange(0, n * S + 1, S)),
                             shape=(S * n_bins, n))


def _replicate_ece_uniform(series: list[tuple[np.ndarray, np.ndarray]], n_bins: int,
                           n_boot: int, rng: np.random.Generator,
                           cluster: np.ndarray | None = None) -> np.ndarray:
    """Replicate ECEs (n_boot x series) of equal-width bins for series of equal length n,
    all resampled with the same draws (``rng.integers(0, n, (block, n))`` per block, the
    stream :func:`_replicate_ece` consumes).

    A replicate's bin sums of ``outcome - confidence`` are ``D @ w`` for its case
    multiplicities ``w`` (a bincount of its draws), so a block of replicates is one sparse
    product ``D @ W^T`` (bins x block) for every series at once: no gathers of resampled
    values, no binning per replicate. Equal to :func:`_replicate_ece` up to the order of
    floating-point summation (tested to 1e-12).

    ``cluster`` (codes 0..C-1 per case): the cluster bootstrap. ``D`` is summed per
    cluster first (bins x C), the draws are C cluster indices per replicate, and each
    replicate's ECE divides by its own number of cases (the drawn clusters' sizes).
    """
    n = len(series[0][0])
    D = _bin_differences(series, n_bins)
    size_of = None
    if cluster is not None:
        C = int(cluster.max()) + 1
        D = (D @ sparse.csr_matrix((np.ones(n), (np.arange(n), cluster)), shape=(n, C))).tocsc()
        size_of = np.bincount(cluster, minlength=C).astype(np.float64)
        n = C
    size = int(min(n_boot, max(_ECE_MIN_BLOCK, _ECE_BLOCK_ELEMENTS // max(n, 1))))
    out = np.empty((n_boot, len(series)))
    for start in range(0, n_boot, size):      # blocks of replicates, vectorized inside
        b = min(size, n_boot - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.uint32)
        flat = (idx.astype(np.int64) * b + np.arange(b)[:, None]).ravel()
        del idx
        WT = np.bincount(flat, minlength=n * b).reshape(n, b).astype(np.float64)
        del flat
        sums = (D @ WT).reshape(len(series), n_bins, b)      # (series, bins, replicates)
        total = n if size_of is None else (size_of @ WT)[:, None]
        out[start:start + b] = np.abs(sums).sum(axis=1).T / total
    return out


def _replicate_eces(series, n_bins: int, strategy: str, n_boot: int, rng,
                    cluster: np.ndarray | None = None) -> np.ndarray:
    """(n_boot x series) replicate ECEs; every series resampled with the same draws
    (``cluster``: whole clusters; equal-width bins only)."""
    if strategy == "uniform":
        return _replicate_ece_uniform(series, n_bins, n_boot, rng, cluster)
    n = len(series[0][0])
    block = max(1, int(_ECE_LEGACY_ELEMENTS // max(n * n_bins, 1)))
    reps = []
    for start in range(0, n_boot, block):   # blocks of replicates, each vectorized
        idx = rng.integers(0, n, size=(min(block, n_boot - start), n))
        reps.append(np.column_stack([_replicate_ece(c, o, idx, n_bins, strategy)
                                     for c, o in series]))
    return np.concatenate(reps)


#: the ECE's bootstrap intervals (:func:`ece_ci`)
ECE_INTERVALS = ("basic", "percentile")
EceInterval = Literal["basic", "percentile"]


def ece_ci(label, prob, *, n_bins: int = 15, strategy: Strategy = "uniform", n_boot: int = 2000,
           seed=None, conf_level: float = 0.95, cluster=None,
           boot_ci: EceInterval = "basic", interval: EceInterval | None = None) -> pd.DataFrame:
    """ECE with a case-resampling bootstrap CI (tidy, one row).

    ``boot_ci``: "basic" (default) or "percentile" (``interval``: its deprecated name; one
    name per concept: the bootstrap interval is ``boot_ci`` everywhere). The plug-in ECE is biased upward in
    finite samples (a bin's |observed - predicted| gap absorbs its noise), and a
    replicate's ECE more so, so the percentile interval sits above the population ECE:
    in ``bench/ece_cluster_coverage.md`` (15 bins, 100-300 patients with 1-4 scans) it
    covers 0-70%. The basic (reflected) interval ``[2 E - q_hi, 2 E - q_lo]`` (Davison &
    Hinkley 1997, eq. 5.6) subtracts that bias as the bootstrap sees it and covers 85-91%
    there: still short of 95%, which the table notes say. Its limits are kept on their
    sides of the estimate E (``low = min(E, max(0, 2 E - q_hi))``,
    ``high = max(E, 2 E - q_lo)``): for a nearly calibrated model, whose replicates all
    exceed E, the reflection alone would put the upper limit below E, or below 0; the
    interval is then [0, E] or close to it.

    ``cluster`` (optional, one id per case, e.g. the patient of each scan): a cluster
    bootstrap instead, resampling whole clusters (every scan of a drawn patient; each
    replicate's ECE over its own number of scans; method
    "cluster-bootstrap-basic" (or "-percentile"), extra ``n_clusters``); equal-width bins only. With
    every cluster of one case it is the case bootstrap, draw for draw.

    Each replicate resamples the n cases with replacement and recomputes the ECE (equal-mass
    edges are recomputed per replicate); replicates run in vectorized blocks (equal-width
    bins: one sparse product per block, see :func:`ece_ci_many`).

    Returns
    -------
    DataFrame (tidy)
        ``estimand`` "ece", ``estimate``, ``std_error`` (bootstrap SD), ``conf_low``,
        ``conf_high``, ``conf_level``, ``n``, ``n_pos``/``n_neg`` (binary: labels;
        multiclass: correct / wrong top-label calls), ``method`` "bootstrap-basic" (or
        "bootstrap-percentile");
        extras ``n_bins``, ``strategy``, ``n_boot``.

    Input checks as :func:`ece` (an empty input is refused); ``n_boot`` a whole number
    >= 2, ``conf_level`` in (0, 1), ``cluster`` one id per case.
    """
    func = "ece_ci"
    boot_ci = _v.renamed(func, "interval", "boot_ci", interval, boot_ci, "basic")
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", minimum=2, fix="e.g. n_boot=2000")
    n_bins = _v.whole(n_bins, func=func, arg="n_bins", fix="e.g. n_bins=15")
    conf_level = _v.level(conf_level, func=func)
    _confidence(label, prob, func)
    if cluster is not None:
        _v.same_length(func=func, label=np.asarray(label).ravel(),
                       cluster=np.asarray(cluster, dtype=object).ravel())
    return ece_ci_many([(label, prob) if cluster is None else (label, prob, cluster)],
                       n_bins=n_bins, strategy=strategy, n_boot=n_boot, seed=seed,
                       conf_level=conf_level, boot_ci=boot_ci)


def ece_ci_many(items, *, n_bins: int = 15, strategy: Strategy = "uniform", n_boot: int = 2000,
                seed=None, conf_level: float = 0.95, boot_ci: EceInterval = "basic",
                interval: EceInterval | None = None) -> pd.DataFrame:
    """:func:`ece_ci` of several ``(label, prob)`` pairs: one row per pair, in order.

    Pairs with the same number of cases are resampled with one set of draws (paired),
    the draws a single :func:`ece_ci` call with ``seed`` makes for that length: with an
    int seed every row equals ``ece_ci(label, prob, seed=seed)``, while the resampling is
    paid once per length instead of once per pair (e.g. a model's ECE before and after
    temperature scaling, and every model of a paired design). With a Generator, the
    lengths draw from it one after another. An item ``(label, prob, cluster)`` gets the
    cluster bootstrap of :func:`ece_ci`; items with the same clusters (equal ids in the
    same order) share its draws.
    """
    from .intervals import _cluster_codes

    interval = _v.renamed("ece_ci_many", "interval", "boot_ci", interval, boot_ci, "basic")
    clusters = [None if len(it) == 2 else _cluster_codes(it[2], len(np.asarray(it[1])))
                for it in items]
    items = [_confidence(it[0], it[1], "ece_ci") for it in items]
    for conf, _ in items[:1]:
        _edges(conf, n_bins, strategy)  # validates n_bins and strategy
    if int(n_boot) < 2:
        raise ValueError(f"n_boot must be >= 2; got {n_boot}")
    if interval not in ECE_INTERVALS:
        raise ValueError(f"boot_ci must be one of {ECE_INTERVALS}; got {interval!r}")
    if strategy != "uniform" and any(c is not None for c in clusters):
        raise ValueError("ece_ci: the cluster bootstrap needs equal-width bins "
                         "(strategy='uniform'); drop cluster= or use uniform bins")
    n_boot = int(n_boot)
    reps = [None] * len(items)
    by_n: dict[tuple, list[int]] = {}
    for i, (conf, _) in enumerate(items):
        key = (len(conf), None if clusters[i] is None else clusters[i].tobytes())
        by_n.setdefault(key, []).append(i)
    for (n, _), members in by_n.items():
        check(ece_bootstrap_work(n_boot, n, n_bins, strategy))  # before any block
        r = _replicate_eces([items[i] for i in members], n_bins, strategy, n_boot,
                            as_generator(seed), cluster=clusters[members[0]])
        for j, i in enumerate(members):
            reps[i] = r[:, j]
    rows = []
    for (conf, out), r, clu in zip(items, reps, clusters):
        n_cases = len(conf)
        _, s_conf, s_out, _ = _bin_sums(conf, out, n_bins, strategy)
        lo, hi = percentile_interval(r, conf_level)
        est = float(np.abs(s_out - s_conf).sum() / n_cases)
        if interval == "basic":   # reflected; never on the wrong side of the estimate
            lo, hi = min(est, max(0.0, 2 * est - float(hi))), max(est, 2 * est - float(lo))
        rows.append({"estimand": "ece", "estimate": est,
                     "std_error": r.std(ddof=1), "conf_low": float(lo), "conf_high": float(hi),
                     "conf_level": conf_level, "n": n_cases, "n_pos": out.sum(),
                     "n_neg": n_cases - out.sum(),
                     "method": ("bootstrap-" if clu is None else "cluster-bootstrap-")
                     + interval,
                     "n_bins": n_bins, "strategy": strategy, "n_boot": float(n_boot),
                     **({} if clu is None else {"n_clusters": float(clu.max() + 1)})})
    return tidy(pd.DataFrame(rows))


# --------------------------------------------------------------------------- temperature


def _resolve_kind(s: np.ndarray, kind: str) -> str:
    if kind == "auto":
        in_unit = bool(np.isfinite(s).all() and (s >= 0).all() and (s <= 1).all())
        sums_one = s.ndim == 1 or np.allclose(s.sum(1), 1.0, atol=1e-6)
        return "probs" if in_unit and sums_one else "logits"
    if kind not in ("logits", "probs"):
        raise ValueError(f"kind must be 'auto', 'logits' or 'probs'; got {kind!r}")
    return kind


def _as_logits(scores, kind: str) -> np.ndarray:
    s = np.asarray(scores, dtype=float)
    if _resolve_kind(s, kind) == "probs":
        p = np.clip(s, EPS, 1 - EPS)
        return special.logit(p) if s.ndim == 1 else np.log(p)
    if not np.isfinite(s).all():
        raise ContractError("logits must be finite; replace infinities or drop the rows")
    return s


def _nll_logits(beta: float, z: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean NLL of sigmoid(beta * z) (binary logits) or softmax(beta * z) (multiclass), and
    its derivative in beta."""
    u = beta * z
    if z.ndim == 1:
        f = np.mean(np.logaddexp(0.0, u) - y * u)
        g = np.mean((special.expit(u) - y) * z)
        return float(f), float(g)
    lse = special.logsumexp(u, axis=1)
    zy = z[np.arange(len(y)), y]
    f = np.mean(lse - beta * zy)
    g = np.mean((np.exp(u - lse[:, None]) * z).sum(1) - zy)
    return float(f), float(g)


#: search range of log(1 / T)
LOG_BETA_BOUNDS = (-10.0, 10.0)


def _fit_log_beta(z: np.ndarray, y: np.ndarray) -> tuple[float, bool]:
    """``argmin`` of the NLL over log beta in ``LOG_BETA_BOUNDS``: the root of its derivative
    (increasing, as the NLL is convex in beta) by Brent's method; at a bound (e.g. separable
    data) the fit is flagged not converged."""
    lo, hi = LOG_BETA_BOUNDS

    def slope(t: float) -> float:
        return _nll_logits(float(np.exp(t)), z, y)[1]

    if not np.any(z):
        return 0.0, True          # constant NLL: T = 1
    if slope(lo) >= 0:
        return lo, False
    if slope(hi) <= 0:
        return hi, False
    t, info = optimize.brentq(slope, lo, hi, xtol=1e-14, full_output=True)
    return float(t), bool(info.converged)


@dataclass(frozen=True)
class TemperatureFit:
    """A fitted temperature ``T``: calibrated probabilities are softmax(z / T) (sigmoid for
    binary logits ``z``)."""

    temperature: float
    kind: str
    n_classes: int
    n: int
    nll_before: float
    nll_after: float
    converged: bool

    def logits(self, scores) -> np.ndarray:
        return _as_logits(scores, self.kind) / self.temperature

    def apply(self, scores) -> np.ndarray:
        """Calibrated probabilities for ``scores`` (same kind and shape as the fit's input)."""
        z = self.logits(scores)
        return special.expit(z) if z.ndim == 1 else special.softmax(z, axis=1)

    def tidy(self) -> pd.DataFrame:
        """One row: ``estimand`` "temperature", ``estimate`` T, ``n``, ``method``
        "temperature-scaling-mle"; extras ``nll_before``, ``nll_after`` (calibration split)."""
        return tidy({"estimand": ["temperature"], "estimate": [self.temperature], "n": [self.n],
                     "method": ["temperature-scaling-mle"],
                     "flag": ["" if self.converged else "not_converged"],
                     "nll_before": [self.nll_before], "nll_after": [self.nll_after]})

    def evaluate(self, scores, label, *, n_bins: int = 15, split: str = "test") -> pd.DataFrame:
        """NLL, Brier and ECE before and after scaling on a (held-out) split (tidy).

        Rows: estimand in nll, brier, ece; extras ``stage`` ("before"/"after"), ``split``.
        """
        z = _as_logits(scores, self.kind)
        before = special.expit(z) if z.ndim == 1 else special.softmax(z, axis=1)
        after = self.apply(scores)
        rows = []
        for stage, p in (("before", before), ("after", after)):
            for name, fn in (("nll", nll), ("brier", brier)):
                rows.append({"estimand": name, "estimate": fn(label, p), "stage": stage})
            rows.append({"estimand": "ece", "estimate": ece(label, p, n_bins=n_bins), "stage": stage})
        df = pd.DataFrame(rows)
        df["n"] = float(len(z))
        df["method"] = "temperature-scaling-mle"
        df["split"] = split
        df["temperature"] = self.temperature
        return tidy(df)


def temperature_scale(scores_cal, label_cal, *, kind: Literal["auto", "logits", "probs"] = "auto"
                      ) -> TemperatureFit:
    """Fit temperature scaling on a calibration split (Guo et al. 2017).

    Parameters
    ----------
    scores_cal : (n,) or (n, k)
        Logits (binary: the logit of class 1) or probabilities of the calibration split.
    label_cal : (n,)
        0/1 or class index.
    kind : "auto" | "logits" | "probs"
        ``auto`` reads values in [0, 1] (with rows summing to 1 for (n, k)) as probabilities;
        probabilities become logits (``logit(p)``, or ``log p`` for multiclass).

    Returns
    -------
    TemperatureFit
        ``temperature`` T > 0 minimizing the calibration split's NLL of softmax(z / T);
        ``.apply(scores_test)`` gives calibrated probabilities for a test split and
        ``.evaluate(scores_test, label_test)`` a tidy before/after table.

    Notes
    -----
    The NLL is convex in beta = 1/T, so its minimum over log beta in [-10, 10] is the root
    of its derivative ``mean((sigmoid(beta z) - y) z)`` (multiclass:
    ``mean(sum_c softmax(beta z)_c z_c - z_y)``), found by ``scipy.optimize.brentq``
    (xtol 1e-14 on log beta, so T to ~1e-14 relative; a search on the NLL's value stops at
    ~1e-8, where the NLL is flat to rounding). An optimum at a bound (e.g. separable data)
    is flagged ``not_converged``. Checked against an independent derivative root to 1e-10
    and a bounded search on the NLL value to 1e-7 relative (tests/test_calibration.py).
    T is a monotone rescaling, so AUROC and top-label predictions are unchanged (tested).
    """
    func = "temperature_scale"
    s = _v._floats(scores_cal, func=func, arg="scores_cal", fix="pass logits or probabilities")
    _v.same_length(func=func, scores_cal=np.atleast_1d(s),
                   label_cal=np.atleast_1d(np.asarray(label_cal)))
    _v.nonempty(np.atleast_1d(s), func=func, arg="scores_cal", unit="case")
    fit_kind = _resolve_kind(s, kind)
    z = _as_logits(scores_cal, fit_kind)
    y, _ = _check(label_cal, np.full(z.shape, 1.0 / (2 if z.ndim == 1 else z.shape[1])), func)

    t, ok = _fit_log_beta(z, y)
    return TemperatureFit(temperature=float(np.exp(-t)), kind=fit_kind,
                          n_classes=2 if z.ndim == 1 else z.shape[1], n=len(z),
                          nll_before=_nll_logits(1.0, z, y)[0],
                          nll_after=_nll_logits(float(np.exp(t)), z, y)[0], converged=ok)


# --------------------------------------------------------------------------- runs level

MSG_NO_TS = ("{source}: column 'ece_after_ts' (ECE after temperature scaling) is missing from "
             "the runs table; add it to measure calibration repair")
MSG_NO_PROTOCOL = ("{source}: no clean runs at label fraction 1 (condition 'clean', "
                   "label_fraction 1); an encoder's ECE is defined on those runs; add them")

#: the runs that define an encoder's ECE (DESIGN.md, CRS calibration axis): one place for
#: the CRS axis (:func:`stats.crs.crs_axes`), :func:`calibration_repair` and :func:`encoder_ece`
PROTOCOL = "clean runs at label fraction 1"
#: the grouping of an encoder's ECE: per regime x encoder, seed-mean per dataset, then the
#: mean over datasets
UNIT_KEYS = ("regime", "encoder")


def protocol_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``PROTOCOL`` (``condition == "clean"`` and ``label_fraction == 1``) of a
    validated runs or probe_predictions table."""
    return frame[(frame["condition"] == "clean") & (frame["label_fraction"] == 1.0)]


def _seed_dataset_means(per_run: pd.DataFrame, values: dict[str, str]) -> pd.DataFrame:
    """Seed-means per regime x encoder x dataset of ``values`` (output name -> per-run
    column), then their means over the encoder's datasets (``dataset == "overall"``);
    ``n`` counts the runs. The one reduction of every encoder ECE, so that the same runs
    give the same number, bit for bit, in every table (tested against the CRS axis)."""
    keys = [*UNIT_KEYS, "dataset"]
    first = next(iter(values.values()))
    per = per_run.groupby(keys, sort=True).agg(
        **{out: (col, "mean") for out, col in values.items()}, n=(first, "size")).reset_index()
    overall = per.groupby(list(UNIT_KEYS), sort=True).agg(
        **{out: (out, "mean") for out in values}, n=("n", "sum")).reset_index().assign(
        dataset="overall")
    return pd.concat([per, overall], ignore_index=True)


def calibration_repair(runs) -> pd.DataFrame:
    """Calibration repair by temperature scaling, from a runs table (tidy).

    At ``condition == "clean"`` and label fraction 1, per regime x encoder x dataset:
    seed-mean ECE before (``ece``) and after temperature scaling (``ece_after_ts``) and
    the relative reduction ``1 - after / before``; ``dataset == "overall"`` rows use the
    means over the encoder's datasets. ECE before is the encoder's ECE of
    :func:`encoder_ece` and the CRS calibration axis (the same reduction of the same runs).

    Returns
    -------
    DataFrame (tidy)
        ``estimand`` in ece_before, ece_after, relative_reduction; ``encoder``, ``regime``,
        ``dataset``; ``estimate``; ``n`` (runs); ``method`` "seed-mean"; ``flag``
        "not_estimable" where ECE before is 0 or a value is missing.
    """
    from .schema import read_runs

    df = read_runs(runs)
    if "ece_after_ts" not in df.columns:
        raise ContractError(MSG_NO_TS.format(source="<runs>"), column="ece_after_ts")
    keys = [*UNIT_KEYS, "dataset"]
    wide = _seed_dataset_means(protocol_runs(df),
                               {"ece_before": "ece", "ece_after": "ece_after_ts"})
    with np.errstate(invalid="ignore", divide="ignore"):
        wide["relative_reduction"] = np.where(wide["ece_before"] > 0,
                                              1.0 - wide["ece_after"] / wide["ece_before"], np.nan)
    long = wide.melt(id_vars=[*keys, "n"], value_vars=["ece_before", "ece_after", "relative_reduction"],
                     var_name="estimand", value_name="estimate")
    long = long.sort_values(keys, kind="stable")
    long["method"] = "seed-mean"
    long["flag"] = np.where(long["estimate"].isna(), "not_estimable", "")
    return tidy(long, group_cols=("encoder", "regime", "dataset"))


# --------------------------------------------------------------------------- encoder ECE


def _seed_bootstrap(per_run: pd.DataFrame, units: list[tuple], n_boot: int, seed) -> np.ndarray:
    """Replicates (n_boot, units) of the seed-mean, dataset-mean ``ece`` of ``per_run``.

    The paired-seed bootstrap of :func:`stats.crs_bootstrap`, with its draws: blocks of
    ``BLOCK_SIZE`` replicates from ``spawn(seed, blocks)``; per block, regime (sorted) and
    dataset (sorted), the dataset's seeds drawn with replacement (``_draw_counts``), shared
    by every encoder and by the regimes with the same seeds; per replicate an encoder's
    seed-mean over the drawn seeds (with multiplicity) and the mean over the datasets where
    it has a drawn run (NaN when it has none: not estimable). With the CRS bootstrap's seed
    and replicate count on the same runs, these are the CRS calibration axis' replicates.
    """
    from ._rng import spawn
    from .crs_resample import BLOCK_SIZE, _draw_counts, _seed_means

    col = {u: j for j, u in enumerate(units)}
    packed = []
    for regime, part in per_run.groupby("regime", sort=True):
        encoders = sorted(pd.unique(part["encoder"]))
        arrays = []
        for ds, sub in part.groupby("dataset", sort=True):
            seeds = np.sort(pd.unique(sub["seed"]))
            e_idx = pd.Index(encoders).get_indexer(sub["encoder"])
            s_idx = np.searchsorted(seeds, sub["seed"].to_numpy())
            ece_ = np.full((len(encoders), len(seeds)), np.nan)
            ece_[e_idx, s_idx] = sub["ece"].to_numpy(dtype=float)
            has = ~np.isnan(ece_)
            complete = bool(has[has.any(1)].all())
            arrays.append((ds, seeds, np.nan_to_num(ece_, nan=0.0),
                           None if complete else has.astype(float), has.astype(float)))
        packed.append(([col[(regime, e)] for e in encoders], arrays))
    sizes = [min(BLOCK_SIZE, n_boot - s) for s in range(0, n_boot, BLOCK_SIZE)]
    out = np.empty((n_boot, len(units)))
    start = 0
    for rng, b in zip(spawn(seed, len(sizes)), sizes):   # blocks, vectorized inside
        shared = {}
        for cols, arrays in packed:                          # regimes
            per = np.empty((b, len(cols), len(arrays)))
            present = np.empty(per.shape, dtype=bool)
            for d, (ds, seeds, values, mask, runs_) in enumerate(arrays):
                key = (ds, tuple(seeds.tolist()))
                if key not in shared:
                    shared[key] = _draw_counts(rng, b, len(seeds))[1]
                W = shared[key].astype(float)
                present[:, :, d] = (W @ runs_.T) > 0
                per[:, :, d] = _seed_means(W, values, mask, len(seeds))
            num = np.where(present, per, 0.0).sum(2)
            n_ds = present.sum(2)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start:start + b, cols] = np.where(n_ds > 0, num / n_ds, np.nan)
        start += b
    return out


def encoder_ece(predictions, *, probs=("prob",), n_bins: int = 15, n_boot: int = 10_000,
                seed=None, conf_level: float = 0.95) -> tuple[pd.DataFrame, pd.DataFrame]:
    """An encoder's ECE from its probes' per-case predictions, as the CRS protocol defines it.

    Per run (regime x encoder x dataset x seed) of ``PROTOCOL`` (clean, label fraction 1):
    the ECE of the run's cases (:func:`ece`, ``n_bins`` equal-width bins); per dataset its
    mean over seeds; per regime x encoder the mean over datasets. When the runs table's
    ``ece`` is this per-run ECE (as the runner writes it), the result is the CRS
    calibration axis (:func:`stats.crs.crs_axes`) and ECE before of
    :func:`calibration_repair` bit for bit (the same reduction of the same numbers).

    Parameters
    ----------
    predictions : DataFrame
        A validated probe_predictions table (:func:`stats.schema.read_probe_predictions`):
        the run keys, ``regime`` (default "frozen"), ``label`` and every column of
        ``probs``; rows other than ``PROTOCOL`` are ignored.
    probs : sequence of str
        Probability columns, each one ``stage`` of the output (e.g. before and after
        temperature scaling); rows with a missing value in a column are left out of it.
    n_boot, seed, conf_level
        The interval: the paired-seed bootstrap of the CRS protocol (:func:`_seed_bootstrap`;
        DESIGN.md, "Paired-seed bootstrap"): seeds drawn with replacement per dataset,
        shared by every encoder. Where a seed fixes the run's train/test split (as the
        runner's do), it reflects the variation of both the probe and its test cases.
        Replicates in which an encoder has no drawn run are left out of its interval and
        counted (``n_boot_not_estimable``).

    Returns
    -------
    (summary, per_run)
        ``summary`` (tidy), one row per regime x encoder x stage: ``estimand`` "ece",
        ``estimate``, ``std_error`` (bootstrap SD), ``conf_low``, ``conf_high``,
        ``conf_level``, ``n`` (cases, summed over runs), ``n_pos``, ``n_neg``, ``method``
        "paired-seed-bootstrap-percentile", ``flag``; extras ``stage`` (the column of
        ``probs``), ``n_runs``, ``n_datasets``, ``n_seeds`` (distinct seeds), ``n_bins``,
        ``n_boot``, ``n_boot_not_estimable``. ``per_run``: regime, encoder, dataset, seed,
        stage, ``ece`` and ``n`` (cases) per run.
    """
    if int(n_boot) < 2:
        raise ValueError(f"n_boot must be >= 2; got {n_boot}")
    n_boot = int(n_boot)
    df = protocol_runs(predictions)
    if not len(df):
        raise ContractError(MSG_NO_PROTOCOL.format(source="<probe_predictions>"))
    if "regime" not in df.columns:
        df = df.assign(regime="frozen")
    run_keys = [*UNIT_KEYS, "dataset", "seed"]
    per_run = []
    for key, run in df.groupby(run_keys, sort=True):
        for stage in probs:
            keep = run[stage].notna().to_numpy()
            if keep.any():
                y = run["label"].to_numpy()[keep]
                per_run.append({**dict(zip(run_keys, key)), "stage": stage,
                                "ece": ece(y, run[stage].to_numpy(float)[keep], n_bins=n_bins),
                                "n": float(keep.sum()), "n_pos": float(np.sum(y == 1))})
    per_run = pd.DataFrame(per_run)
    rows = []
    for stage in probs:
        part = per_run[per_run["stage"] == stage]
        if not len(part):
            continue
        point = _seed_dataset_means(part, {"ece": "ece"})
        point = point[point["dataset"] == "overall"]
        units = list(zip(point["regime"], point["encoder"]))
        reps = _seed_bootstrap(part, units, n_boot, seed)
        lo, hi = percentile_interval(reps, conf_level)
        bad = np.isnan(reps).sum(axis=0)
        for u, (regime, encoder) in enumerate(units):
            g = part[(part["regime"] == regime) & (part["encoder"] == encoder)]
            ok = reps[~np.isnan(reps[:, u]), u]
            rows.append({"estimand": "ece", "regime": regime, "encoder": encoder,
                         "estimate": float(point["ece"].iloc[u]),
                         "std_error": float(ok.std(ddof=1)) if len(ok) > 1 else np.nan,
                         "conf_low": float(lo[u]), "conf_high": float(hi[u]),
                         "conf_level": conf_level, "n": g["n"].sum(), "n_pos": g["n_pos"].sum(),
                         "n_neg": (g["n"] - g["n_pos"]).sum(),
                         "method": "paired-seed-bootstrap-percentile",
                         "flag": "replicates_not_estimable" if bad[u] else "",
                         "stage": stage, "n_runs": float(len(g)),
                         "n_datasets": float(g["dataset"].nunique()),
                         "n_seeds": float(g["seed"].nunique()), "n_bins": n_bins,
                         "n_boot": float(n_boot), "n_boot_not_estimable": float(bad[u])})
    summary = tidy(pd.DataFrame(rows), group_cols=("encoder", "regime"))
    return summary, per_run[[*run_keys, "stage", "ece", "n"]]


# --------------------------------------------------------------------------- work
# (the engine states its own memory and time: stats.limits holds only the caps)

def ece_bootstrap_work(n_boot: int, n: int, n_bins: int, strategy: str, *,
                       setting: str = "n_boot", what: str = "ECE bootstrap") -> _limits.Work:
    """Peak memory and time of :func:`stats.calibration.ece_ci`: the replicate ECEs plus
    one block of about 4 million resampled elements (index, confidence, outcome, bin and
    offset arrays; with equal-mass bins one comparison per bin edge)."""
    B, n = max(int(n_boot), 1), max(int(n), 1)
    per = n * (max(int(n_bins), 1) if strategy == "quantile" else 1)
    block = min(B, max(1, 4_000_000 // per))
    mem = 16.0 * B + 48.0 * block * per
    secs = _limits.SECONDS_PER_ELEMENT * B * per
    return _limits.Work(what=what, setting=f"{setting} ({B:,} replicates)", memory_bytes=mem,
                seconds=secs, detail=f"{B:,} replicates x {n:,} cases")
