"""Confidence intervals and paired tests for proportions and AUCs.

Closed forms only, vectorized over cells: binomial intervals (Wilson, Clopper-Pearson,
Jeffreys), Newcombe's hybrid score intervals for unpaired and paired differences of
proportions, the exact McNemar test, DeLong's AUC variance (the fast O(n log n)
algorithm of Sun & Xu 2014) with the paired DeLong test, and Obuchowski's (1997)
clustered-data AUC variance (DeLong's placement values summed per cluster) for patients
with several scans.

Every function here is validated against R (``tests/r/intervals.R`` -> ``intervals.csv``):
``binom.test`` (Clopper-Pearson), ``prop.test(correct = FALSE)`` (Wilson), ``qbeta``
(Jeffreys), ``binom.test`` on discordant pairs (exact McNemar), pROC 1.18 ``auc``,
``ci.auc(method = "delong")`` and ``roc.test(paired = TRUE, method = "delong")``;
agreement is 1e-10 or better (see ``tests/test_intervals.py``). No R package in reach
implements Obuchowski's variance (pROC's ``method = "obuchowski"`` is another method); it
is checked against a plain double-loop recomputation of the paper's definitions and
against DeLong (pROC) with every cluster of size 1 (``tests/test_auc_cluster.py``).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from scipy import sparse, special
from scipy import stats as sps

from stats import _validate as _v
from stats._linalg import clean_variance
from stats.schema import ContractError, tidy

ProportionMethod = Literal["wilson", "clopper-pearson", "jeffreys"]
PROPORTION_METHODS = ("wilson", "clopper-pearson", "jeffreys")

MSG_LEVEL = "conf_level must lie strictly between 0 and 1; got {level}"
MSG_METHOD = "method must be one of {allowed}; got {method!r}"
MSG_PAIRED = ("{func}: paired_counts must be a tuple (a, b, c, d) of four counts (or arrays "
              "of counts); got {got}; pass (both, first only, second only, neither)")
MSG_LABEL = ("label must be 0/1 with the same length as the score(s); "
             "positions {rows} have {values}; recode them (1 = case, 0 = control)")


def _z(conf_level: float) -> float:
    if not 0 < conf_level < 1:
        raise ContractError(MSG_LEVEL.format(level=conf_level))
    return float(sps.norm.ppf(0.5 + conf_level / 2))


def _counts(successes, n, func: str, *, effective: bool = False,
            names: tuple[str, str] = ("successes", "n")) -> tuple[np.ndarray, np.ndarray]:
    """The public count arguments, checked (:mod:`stats._validate`): counts (whole unless
    ``effective``), broadcast together, successes <= trials."""
    x = _v.counts(successes, func=func, arg=names[0], whole=not effective)
    n = _v.counts(n, func=func, arg=names[1], whole=not effective)
    x, n = _v.broadcast(func=func, **{names[0]: x, names[1]: n})
    _v.at_most(x, n, func=func, arg=names[0], other=names[1])
    return x, n


def proportion_ci(successes, n, *, method: ProportionMethod = "wilson",
                  conf_level: float = 0.95, effective: bool = False
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided confidence interval for a binomial proportion, vectorized.

    Parameters
    ----------
    successes, n : array-like (broadcast together)
        Number of successes and of trials: whole numbers >= 0 with successes <= n.
        Empty arrays give empty limits (zero cells in, zero out).
    effective : bool
        True: ``successes`` and ``n`` are effective counts (e.g. ``p n_eff`` of
        ``n_eff`` at Korn & Graubard's effective sample size), which may be fractional;
        still finite and >= 0.
    method : {"wilson", "clopper-pearson", "jeffreys"}
        Wilson score interval (default), Clopper-Pearson exact interval, or Jeffreys
        equal-tailed Beta(1/2, 1/2) posterior interval.
    conf_level : float
        Confidence level, e.g. 0.95.

    Returns
    -------
    (low, high) : tuple of float64 arrays with the broadcast shape.
        ``n == 0`` gives NaN for both limits. At ``successes == 0`` the lower limit is
        exactly 0 and at ``successes == n`` the upper limit is exactly 1 for every method.

    Raises
    ------
    ContractError
        A count that is negative, not a whole number (without ``effective``), NaN or
        infinite, successes above n, shapes that do not broadcast, an unknown ``method``
        or ``conf_level`` outside (0, 1); the message names the argument, the index and
        the value (:mod:`stats._validate`).

    Notes
    -----
    Wilson: ``(x + z^2/2) / (n + z^2) +- z / (n + z^2) * sqrt(x (n - x) / n + z^2 / 4)``.
    Clopper-Pearson: ``Beta(a/2; x, n - x + 1)`` and ``Beta(1 - a/2; x + 1, n - x)``
    quantiles. Jeffreys: ``Beta(a/2 or 1 - a/2; x + 1/2, n - x + 1/2)`` quantiles, with
    the boundary convention of Brown, Cai & DasGupta (2001): low = 0 at x = 0 and
    high = 1 at x = n.

    References
    ----------
    Wilson EB (1927) JASA 22:209-212. Clopper CJ, Pearson ES (1934) Biometrika 26:404-413.
    Brown LD, Cai TT, DasGupta A (2001) Statistical Science 16:101-133.

    Validated against R's ``prop.test(x, n, correct = FALSE)$conf.int`` (Wilson),
    ``binom.test(x, n)$conf.int`` (Clopper-Pearson) and ``qbeta`` (Jeffreys) to 1e-10.

    Examples
    --------
    >>> low, high = proportion_ci([45, 0], [50, 12])    # Wilson: 45/50 and 0/12
    >>> low.round(4), high.round(4)
    (array([0.7864, 0.    ]), array([0.9565, 0.2425]))
    >>> low, high = proportion_ci(45, 50, method="clopper-pearson")
    >>> round(float(low), 4), round(float(high), 4)
    (0.7819, 0.9667)
    """
    func = "proportion_ci"
    if method not in PROPORTION_METHODS:
        raise ContractError(f"{func}: " + MSG_METHOD.format(allowed=PROPORTION_METHODS,
                                                             method=method))
    conf_level = _v.level(conf_level, func=func)
    x, n = _counts(successes, n, func, effective=effective)
    return proportion_limits(x, n, method=method, conf_level=conf_level)


def proportion_limits(successes, n, *, method: ProportionMethod = "wilson",
                      conf_level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """:func:`proportion_ci` without its argument checks, for clinrel's own callers:
    counts may be fractional (effective counts) and NaN (a cell that is not estimable:
    NaN limits); ``n == 0`` gives NaN limits."""
    if method not in PROPORTION_METHODS:
        raise ValueError(MSG_METHOD.format(allowed=PROPORTION_METHODS, method=method))
    z = _z(conf_level)
    x, n = np.broadcast_arrays(np.asarray(successes, dtype="float64"),
                               np.asarray(n, dtype="float64"))
    alpha = 1 - conf_level
    with np.errstate(divide="ignore", invalid="ignore"):
        if method == "wilson":
            z2 = z * z
            centre = (x + z2 / 2) / (n + z2)
            half = z / (n + z2) * np.sqrt(x * (n - x) / n + z2 / 4)
            low, high = centre - half, centre + half
        elif method == "clopper-pearson":
            low = special.betaincinv(x, n - x + 1, alpha / 2)
            high = special.betaincinv(x + 1, n - x, 1 - alpha / 2)
        else:
            low = special.betaincinv(x + 0.5, n - x + 0.5, alpha / 2)
            high = special.betaincinv(x + 0.5, n - x + 0.5, 1 - alpha / 2)
    low = np.where(x == 0, 0.0, np.clip(low, 0.0, 1.0))
    high = np.where(x == n, 1.0, np.clip(high, 0.0, 1.0))
    empty = (n == 0) | np.isnan(x) | np.isnan(n)
    low = np.where(empty, np.nan, low)
    high = np.where(empty, np.nan, high)
    return low, high


def newcombe_diff_ci(x1, n1, x2, n2, *, paired_counts=None, conf_level: float = 0.95,
                     effective: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Newcombe's hybrid score interval for a difference of two proportions, vectorized.

    Parameters
    ----------
    x1, n1, x2, n2 : array-like
        Unpaired design: successes and trials of the two independent samples; the
        difference is ``x1/n1 - x2/n2`` (Newcombe 1998a, method 10).
    paired_counts : tuple (a, b, c, d) of array-like, optional
        Paired design (Newcombe 1998b, method 10): ``a`` both positive, ``b`` first
        positive only, ``c`` second positive only, ``d`` both negative. When given,
        ``x1, n1, x2, n2`` are ignored (pass ``None``) and the difference is
        ``(a + b)/n - (a + c)/n = (b - c)/n``.
    conf_level : float
    effective : bool
        True: the counts are effective counts (fractional allowed; finite, >= 0), as
        :func:`proportion_ci`.

    Returns
    -------
    (estimate, low, high) float64 arrays; NaN where a denominator is 0. Empty arrays in,
    empty arrays out.

    Raises
    ------
    ContractError
        Counts that are negative, NaN, infinite or (without ``effective``) not whole,
        successes above trials, shapes that do not broadcast, ``conf_level`` outside
        (0, 1) (:mod:`stats._validate`).

    Notes
    -----
    With Wilson limits ``(l_i, u_i)`` of ``p_i``: unpaired
    ``L = d - sqrt((p1 - l1)^2 + (u2 - p2)^2)``, ``U = d + sqrt((u1 - p1)^2 + (p2 - l2)^2)``.
    Paired: the same with the cross terms ``- 2 phi (p1 - l1)(u2 - p2)`` and
    ``- 2 phi (u1 - p1)(p2 - l2)`` under the square roots, where phi is Newcombe's
    continuity-corrected correlation (:func:`paired_phi`): with ``A = ad - bc``,
    ``phi = (A - N/2) / sqrt((a+b)(c+d)(a+c)(b+d))`` when ``A > N/2``, 0 when
    ``0 <= A <= N/2``, ``A / sqrt(...)`` when ``A < 0`` (0 when the denominator is 0).
    The uncorrected phi gives intervals that are too narrow in small concordant tables.

    References
    ----------
    Newcombe RG (1998a) Stat Med 17:873-890. Newcombe RG (1998b) Stat Med 17:2635-2650.

    Validated against an R recomputation from ``prop.test`` Wilson limits and a
    hand-written R function of the paper's formula (``tests/r/intervals.R``) to 1e-10, and
    against published examples: Newcombe (1998a) Table II (unpaired) and Fagerland,
    Lydersen & Laake (2017, Statistical Analysis of Contingency Tables, ch. 8; R package
    contingencytables) for the paired Cavo et al. table (59, 6, 16, 80): -0.0621
    [-0.1186, -0.0046].
    """
    func = "newcombe_diff_ci"
    conf_level = _v.level(conf_level, func=func)
    whole = not effective
    if paired_counts is not None:
        if not isinstance(paired_counts, (tuple, list)) or len(paired_counts) != 4:
            raise ContractError(MSG_PAIRED.format(func=func, got=_v._show(paired_counts)))
        abcd = {k: _v.counts(v, func=func, arg=f"paired_counts[{i}] ({k})", whole=whole)
                for i, (k, v) in enumerate(zip("abcd", paired_counts))}
        paired_counts = _v.broadcast(func=func, **abcd)
    else:
        x1, n1 = _counts(x1, n1, func, effective=effective, names=("x1", "n1"))
        x2, n2 = _counts(x2, n2, func, effective=effective, names=("x2", "n2"))
        _v.broadcast(func=func, x1=x1, x2=x2)
    return newcombe_limits(x1, n1, x2, n2, paired_counts=paired_counts, conf_level=conf_level)


def newcombe_limits(x1, n1, x2, n2, *, paired_counts=None, conf_level: float = 0.95
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`newcombe_diff_ci` without its argument checks, for clinrel's own callers
    (effective counts; NaN where not estimable)."""
    if paired_counts is not None:
        a, b, c, d = np.broadcast_arrays(*(np.asarray(v, dtype="float64") for v in paired_counts))
        n = a + b + c + d
        x1, n1, x2, n2 = a + b, n, a + c, n
        phi = paired_phi(a, b, c, d)
    else:
        phi = 0.0
    l1, u1 = proportion_limits(x1, n1, method="wilson", conf_level=conf_level)
    l2, u2 = proportion_limits(x2, n2, method="wilson", conf_level=conf_level)
    with np.errstate(divide="ignore", invalid="ignore"):
        p1, p2 = x1 / n1, x2 / n2
    est = p1 - p2
    dl = np.sqrt(np.maximum((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0))
    du = np.sqrt(np.maximum((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0))
    return est, est - dl, est + du


def paired_phi(a, b, c, d) -> np.ndarray:
    """Newcombe's (1998b, method 10) continuity-corrected correlation of a paired 2x2 table.

    With ``A = ad - bc`` and ``N = a + b + c + d``: ``phi = (A - N/2) / sqrt((a+b)(c+d)(a+c)(b+d))``
    when ``A > N/2``; 0 when ``0 <= A <= N/2``; ``A / sqrt(...)`` when ``A < 0``; 0 when a
    margin is empty (the denominator is 0).
    """
    a, b, c, d = np.broadcast_arrays(*(np.asarray(v, dtype="float64") for v in (a, b, c, d)))
    n = a + b + c + d
    den = np.sqrt((a + b) * (c + d) * (a + c) * (b + d))
    A = a * d - b * c
    num = np.where(A > n / 2, A - n / 2, np.where(A < 0, A, 0.0))
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def mcnemar_exact(b, c) -> np.ndarray:
    """Exact (conditional) McNemar p-value, vectorized: a two-sided binomial test of
    ``b`` successes in ``b + c`` discordant pairs with probability 1/2.

    Returns ``min(1, 2 * P(X <= min(b, c)))`` for ``X ~ Bin(b + c, 1/2)``; 1 when there
    are no discordant pairs; an array of the broadcast shape (empty arrays in, empty
    out). ``b`` and ``c`` are counts: a negative, fractional, NaN or infinite value, or
    shapes that do not broadcast, raise :class:`~stats.schema.ContractError` naming the
    index and value. Validated against R's ``binom.test(b, b + c)$p.value``
    (identical to ``exact2x2::mcnemar.exact``) to 1e-12.
    """
    func = "mcnemar_exact"
    b, c = _v.broadcast(func=func, b=_v.counts(b, func=func, arg="b"),
                        c=_v.counts(c, func=func, arg="c"))
    m = b + c
    p = 2 * sps.binom.cdf(np.minimum(b, c), m, 0.5)
    return np.where(m == 0, 1.0, np.minimum(p, 1.0))


# --------------------------------------------------------------------------- DeLong

def _labels(label, *scores, func: str, names: tuple[str, ...] = ("score",),
            cluster=None) -> tuple[np.ndarray, list[np.ndarray]]:
    """The label and score arguments, checked (:mod:`stats._validate`): equal lengths, at
    least one observation, labels 0/1, finite scores."""
    y = _v._floats(label, func=func, arg="label", fix="recode them (1 = case, 0 = control)",
                   booleans=True).ravel()
    out = [_v._floats(s, func=func, arg=k, fix="pass numbers").ravel()
           for k, s in zip(names, scores)]
    _v.same_length(func=func, unit="observation", label=y, **dict(zip(names, out)),
                   cluster=None if cluster is None else np.asarray(cluster, dtype=object).ravel())
    _v.nonempty(y, func=func, arg="label", unit="observation")
    bad = np.flatnonzero(~np.isin(y, (0.0, 1.0)))
    if len(bad):
        raise ContractError(f"{func}: " + MSG_LABEL.format(rows=", ".join(map(str, bad[:5])),
                                                           values=y[bad[:5]].tolist()))
    for k, s in zip(names, out):
        _v.finite(s, func=func, arg=k, fix="drop or impute them")
    return y.astype(bool), out


def delong_placements(group, label, score, n_groups: int | None = None, *,
                      ranks: np.ndarray | None = None, placements: bool = True
                      ) -> dict[str, np.ndarray]:
    """DeLong structural components per group (Sun & Xu 2014), vectorized over groups.

    Parameters
    ----------
    group : int array (codes 0..G-1), label : bool array, score : float array.
    ranks : optional int array, the dense rank of ``score`` (equal scores, equal rank),
        when the caller has it already (saves one sort).
    placements : also return the per-observation placement values ``v``.

    Returns
    -------
    dict with ``auc``, ``var``, ``m`` (cases), ``k`` (controls) per group (length G) and,
    with ``placements``, ``v`` per observation: V10 for cases (fraction of controls below,
    ties 1/2) and V01 for controls (fraction of cases above, ties 1/2).

    Notes
    -----
    One sort of ``(group, score)``. Placement values are constant within a run of tied
    scores, so everything is computed per run: a case's placement is
    ``(controls below + controls tied / 2) / k`` (the midrank difference of Sun & Xu), a
    control's ``1 - (cases below + cases tied / 2) / m``; AUC and the variances are
    count-weighted sums over runs.
    """
    group = np.asarray(group, dtype=np.int64)
    y = np.asarray(label, dtype=bool)
    s = np.asarray(score, dtype="float64")
    G = int(n_groups if n_groups is not None else (group.max() + 1 if len(group) else 0))
    m = np.bincount(group[y], minlength=G).astype("float64")
    k = np.bincount(group[~y], minlength=G).astype("float64")
    N = len(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        if N:
            srank = np.unique(s, return_inverse=True)[1].ravel() if ranks is None else ranks
            key = group * (int(srank.max()) + 1) + srank
            order = np.argsort(key)
            ks = key[order]
            run_start = np.r_[True, ks[1:] != ks[:-1]]
            first = np.flatnonzero(run_start)
            cpos = np.r_[0, np.cumsum(y[order])]
            bounds = np.r_[first, N]
            pos_tied = np.diff(cpos[bounds]).astype("float64")
            neg_tied = np.diff(bounds) - pos_tied
            g = group[order[first]]
            gfirst = np.maximum.accumulate(np.where(np.r_[True, g[1:] != g[:-1]],
                                                    np.arange(len(first)), 0))
            pos_below = (cpos[first] - cpos[first[gfirst]]).astype("float64")
            neg_below = (first - first[gfirst]) - pos_below
            v_pos = (neg_below + neg_tied / 2) / k[g]
            v_neg = 1 - (pos_below + pos_tied / 2) / m[g]
        else:
            g = np.zeros(0, dtype=np.int64)
            v_pos = v_neg = pos_tied = neg_tied = np.zeros(0)
        auc = np.bincount(g, weights=pos_tied * v_pos, minlength=G) / m
        s10 = np.bincount(g, weights=pos_tied * (v_pos - auc[g]) ** 2, minlength=G) / (m - 1)
        s01 = np.bincount(g, weights=neg_tied * (v_neg - auc[g]) ** 2, minlength=G) / (k - 1)
        var = s10 / m + s01 / k
    out = {"auc": np.where((m > 0) & (k > 0), auc, np.nan),
           "var": np.where((m > 1) & (k > 1), var, np.nan), "m": m, "k": k}
    if placements:
        v = np.empty(N)
        if N:
            run_id = np.cumsum(run_start) - 1
            v[order] = np.where(y[order], v_pos[run_id], v_neg[run_id])
        out["v"] = v
    return out


def group_sum(group: np.ndarray, n_groups: int, values: np.ndarray) -> np.ndarray:
    """Column sums of ``values`` (rows x K) per group code (one sparse product)."""
    group = np.asarray(group, dtype=np.int64)
    T = sparse.csr_matrix((np.ones(len(group)), (group, np.arange(len(group)))),
                          shape=(n_groups, len(group)))
    return np.asarray(T @ np.asarray(values, dtype="float64"))


def clustered_auc_variance(pair, pair_group, label, v, auc) -> dict[str, np.ndarray]:
    """Obuchowski's (1997) variance of the AUC for clustered observations, vectorized over
    groups (e.g. subgroup cells) and score columns (e.g. models).

    Parameters
    ----------
    pair : int array (rows,): the (group, cluster) pair of each observation, codes 0..P-1.
    pair_group : int array (P,): the group of each pair.
    label : bool array (rows,).
    v : float array (rows, K): DeLong placement values of each observation within its
        group (``delong_placements(...)["v"]``), one column per score.
    auc : float array (G, K): the AUC of each group and column.

    Returns
    -------
    dict with ``var`` (G x K; NaN where fewer than two clusters hold a positive or a
    negative, where the AUC is NaN, or where the estimate is below 0, as rounding or few
    clusters can make it), and per group ``n_clusters`` (I), ``n_clusters_pos``
    (I10), ``n_clusters_neg`` (I01) and ``repeats`` (some cluster holds more than one of
    the group's observations).

    Notes
    -----
    With ``m_i`` positives and ``n_i`` negatives in cluster ``i`` (``M = sum m_i``,
    ``N = sum n_i``), the cluster sums of the placement values
    ``V10_i = sum_j V10(X_ij)`` (positives) and ``V01_i = sum_j V01(Y_ij)`` (negatives),
    ``d10_i = V10_i - m_i A`` and ``d01_i = V01_i - n_i A``::

        S10 = I10 / ((I10 - 1) M) sum_i d10_i^2
        S01 = I01 / ((I01 - 1) N) sum_i d01_i^2
        S11 = I / (I - 1) sum_i d10_i d01_i
        var(A) = S10 / M + S01 / N + 2 S11 / (M N)

    (Obuchowski 1997, section 2; clusters without a positive add 0 to S10, without a
    negative 0 to S01). With every cluster of size 1, ``S11 = 0`` and S10, S01 are
    DeLong's sample variances of the placement values: the variance is DeLong's.
    Each group's sums run over its own observations: a cluster's scans outside the
    group do not enter. One sparse product over (pair, label) codes and one over groups;
    no loop over groups, clusters or observations.

    References
    ----------
    Obuchowski NA (1997) Nonparametric analysis of clustered ROC curve data. Biometrics
    53:567-578.
    """
    pair = np.asarray(pair, dtype=np.int64)
    pair_group = np.asarray(pair_group, dtype=np.int64)
    y = np.asarray(label, dtype=bool)
    v = np.asarray(v, dtype="float64").reshape(len(pair), -1)
    auc = np.asarray(auc, dtype="float64").reshape(-1, v.shape[1])
    P, G = len(pair_group), auc.shape[0]
    half = 2 * pair + y                                  # (pair, label): negatives even
    sums = group_sum(half, 2 * P, v)                     # placement sums per half-pair
    cnt = np.bincount(half, minlength=2 * P).astype("float64")
    n_i, m_i = cnt[0::2], cnt[1::2]
    a = auc[pair_group]
    d10 = sums[1::2] - m_i[:, None] * a
    d01 = sums[0::2] - n_i[:, None] * a
    T = sparse.csr_matrix((np.ones(P), (pair_group, np.arange(P))), shape=(G, P))
    ss10, ss01, ss11 = (np.asarray(T @ x) for x in (d10 ** 2, d01 ** 2, d10 * d01))
    per = np.asarray(T @ np.column_stack([m_i, n_i, m_i > 0, n_i > 0, np.ones(P),
                                          m_i + n_i > 1]))
    M, N, I10, I01, I = (per[:, j:j + 1] for j in range(5))
    with np.errstate(divide="ignore", invalid="ignore"):
        t10 = I10 / ((I10 - 1) * M) * ss10 / M
        t01 = I01 / ((I01 - 1) * N) * ss01 / N
        t11 = 2 * I / (I - 1) * ss11 / (M * N)
        # rounding around a zero variance (every cluster's placement sum at its share of
        # the AUC) is decided by rule (stats._linalg.clean_variance, scale: the terms'
        # magnitudes): within 1e-12 of it, 0; a clearly negative estimate (the covariance
        # term outweighing the others with few clusters) is no variance: not estimable,
        # as with fewer than two clusters of a label
        var = clean_variance(t10 + t01 + t11, np.abs(t10) + np.abs(t01) + np.abs(t11))
    # a zero reached by cancellation (the covariance term against the others, with few
    # clusters) is no estimate either; only placements that are all alike (every term
    # exactly 0) give a true zero variance
    var = np.where((var == 0) & (ss10 + ss01 > 0), np.nan, var)
    var = np.where((I10 > 1) & (I01 > 1), var, np.nan)
    return {"var": var, "n_clusters": I[:, 0], "n_clusters_pos": I10[:, 0],
            "n_clusters_neg": I01[:, 0], "repeats": per[:, 5] > 0}


def delong_difference_variance(group, label, d, var_a, var_b, m, k) -> np.ndarray:
    """DeLong variance of ``AUC_a - AUC_b`` on the same observations, per group, from the
    placement differences ``d = v_a - v_b`` (``S10(d) / m + S01(d) / k``; equal to
    ``V_a + V_b - 2 C_ab`` but exactly 0 when the placements are identical: the same
    scores, or a monotone transform of them). By :func:`stats._linalg.clean_variance`
    with scale ``V_a + V_b`` a value within 1e-12 of it is 0 (not estimable downstream:
    no test of a zero variance)."""
    group = np.asarray(group, dtype=np.int64)
    y = np.asarray(label, dtype=bool)
    G = len(m)
    d = np.asarray(d, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean10 = np.bincount(group[y], weights=d[y], minlength=G) / m
        mean01 = np.bincount(group[~y], weights=d[~y], minlength=G) / k
        r = np.where(y, d - mean10[group], d - mean01[group])
        s10 = np.bincount(group[y], weights=r[y] ** 2, minlength=G) / (m - 1)
        s01 = np.bincount(group[~y], weights=r[~y] ** 2, minlength=G) / (k - 1)
        var = s10 / m + s01 / k
    return clean_variance(var, np.asarray(var_a) + np.asarray(var_b))


def delong_covariance(group, label, v_a, v_b, auc_a, auc_b, m, k) -> np.ndarray:
    """DeLong covariance of two AUCs on the same observations, per group."""
    group = np.asarray(group, dtype=np.int64)
    y = np.asarray(label, dtype=bool)
    G = len(m)
    prod = (v_a - auc_a[group]) * (v_b - auc_b[group])
    with np.errstate(divide="ignore", invalid="ignore"):
        s10 = np.bincount(group[y], weights=prod[y], minlength=G) / (m - 1)
        s01 = np.bincount(group[~y], weights=prod[~y], minlength=G) / (k - 1)
        return s10 / m + s01 / k


AucScale = Literal["auto", "auc", "logit"]
AUC_SCALES = ("auto", "auc", "logit")


def _auc_ci_from(auc, var, conf_level, scale: AucScale = "auc", clusters=None):
    """DeLong SE and a Wald interval on the AUC scale (pROC) or the logit scale.

    Logit: ``expit(logit(A) +- q se / (A (1 - A)))`` (delta method), which stays inside
    (0, 1) and covers better in small cells (15 positives, AUC 0.65-0.85: 94-96% against
    89-94% on the AUC scale; ``tests/test_coverage.py``); near the ceiling it too falls
    short (AUC 0.95: 91-93%).

    ``clusters``: per row the number of clusters C behind a clustered (Obuchowski)
    variance, NaN where scans are independent. A clustered row's quantile ``q`` is
    Student's t on C - 1 degrees of freedom (the cluster variance rests on C clusters;
    as survey's ``degf``), an independent row's the normal one, as pROC. ``scale``
    "auto": the logit scale on clustered rows, the AUC scale (pROC's interval exactly) on
    the others; in ``bench/auc_cluster_coverage.md`` the clustered logit-t interval covers
    89-97% (32 of 36 rows in 93.5-96.5%) where the clustered AUC-scale one covers 76-95%.

    At A = 0 or 1 (complete separation) DeLong's variance is 0: the AUC-scale interval is
    pROC's degenerate [A, A] (pROC warns "ci.auc() of a ROC curve with AUC == 1 is always
    1-1 and can be misleading"), and the logit is infinite, so the logit-scale limits are
    NaN. Callers flag these rows ``auc_boundary`` (:func:`auc_boundary`).
    """
    if scale not in AUC_SCALES:
        raise ValueError(MSG_METHOD.format(allowed=AUC_SCALES, method=scale))
    auc = np.asarray(auc, dtype="float64")
    z = _z(conf_level)
    C = (np.full(auc.shape, np.nan) if clusters is None
         else np.broadcast_to(np.asarray(clusters, dtype="float64"), auc.shape))
    clustered = np.isfinite(C)
    with np.errstate(invalid="ignore"):
        q = np.where(clustered & (C >= 2),
                     sps.t.ppf(0.5 + conf_level / 2, np.fmax(np.nan_to_num(C, nan=2.0) - 1, 1)),
                     z)
    se = np.sqrt(var)
    low = np.clip(auc - q * se, 0.0, 1.0)
    high = np.clip(auc + q * se, 0.0, 1.0)
    logit = _logit_rows(scale, clustered)
    if logit.any():
        inner = (auc > 0) & (auc < 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            centre = special.logit(auc)
            half = q * se / (auc * (1 - auc))
            low = np.where(logit, np.where(inner, special.expit(centre - half), np.nan), low)
            high = np.where(logit, np.where(inner, special.expit(centre + half), np.nan), high)
    return se, low, high


def _logit_rows(scale: AucScale, clustered) -> np.ndarray:
    """Where the interval is on the logit scale: everywhere ("logit"), nowhere ("auc"), or
    on the clustered rows ("auto")."""
    clustered = np.asarray(clustered, dtype=bool)
    if scale == "auto":
        return clustered
    return np.full(clustered.shape, scale == "logit")


def auc_boundary(auc) -> np.ndarray:
    """True where an AUC is exactly 0 or 1: DeLong's variance is then 0, the AUC-scale
    interval has zero width and the logit-scale one is undefined (flag ``auc_boundary``)."""
    auc = np.asarray(auc, dtype="float64")
    return (auc == 0.0) | (auc == 1.0)


def auc_method(clustered, scale: AucScale = "auc"):
    """The ``method`` of an AUC interval: "delong", "delong-logit" (scans as independent),
    "delong-cluster-t" or "delong-cluster-logit-t" (Obuchowski's variance, t on C - 1 df);
    ``clustered`` a bool or a bool array, vectorized."""
    clustered = np.asarray(clustered, dtype=bool)
    logit = _logit_rows(scale, clustered)
    return np.where(clustered, np.where(logit, "delong-cluster-logit-t", "delong-cluster-t"),
                    np.where(logit, "delong-logit", "delong")).astype(object)


def auc_ci(label, score, *, conf_level: float = 0.95, auc_scale: AucScale = "auto",
           cluster=None, scale: AucScale | None = None) -> pd.DataFrame:
    """AUC with DeLong's variance (Obuchowski's with clustered scans) and a Wald interval
    on the AUC scale (as pROC) when observations are independent.

    Parameters
    ----------
    label : array-like of 0/1 (1 = case), score : array-like (higher = more likely a case).
    conf_level : float
    auc_scale : "auto" (default): the AUC scale, as ``pROC::ci.auc``, with independent
        observations, the logit scale with clustered ones; "auc" or "logit" force one:
        the Wald interval on the logit of the AUC, back-transformed (method
        "delong-logit"), covers better in small cells (at 15 positives 94-96% where the AUC
        scale covers 91-93%).
    cluster : array-like, optional
        Cluster id of each observation (e.g. the patient of each scan), same length as
        ``label``; no missing values. When a cluster holds more than one observation the
        variance is Obuchowski's (1997) clustered-data variance
        (:func:`clustered_auc_variance`) and the quantile Student's t on C - 1 degrees of
        freedom (method "delong-cluster-logit-t", or "delong-cluster-t" on the AUC
        scale); when every cluster has one observation it is DeLong's (identical; method
        "delong"). Adds the column ``n_clusters``.
    scale : deprecated name of ``auc_scale`` (one name per concept: the plan's
        ``detection.auc_scale``, ``subgroup_metrics(auc_scale=)``, ``--auc-scale``).

    Returns
    -------
    Tidy one-row DataFrame: ``estimand`` "auc", ``estimate`` (AUC, ties counted 1/2),
    ``std_error`` (DeLong), ``conf_low``/``conf_high`` (``auc +- z se`` clipped to
    [0, 1], as ``pROC::ci.auc``), ``conf_level``, ``n``, ``n_pos``, ``n_neg``,
    ``method`` "delong" (or "delong-logit", "delong-cluster-t", "delong-cluster-logit-t"),
    ``flag`` ("not_estimable" when a class is missing, "small_n" when a class has one
    observation, or with repeated clusters lies within one cluster, and no variance, "auc_boundary"
    when the AUC is exactly 0 or 1: the AUC-scale interval is then pROC's zero-width
    [A, A] and the logit-scale limits are NaN; neither is a usable interval, and pROC
    warns likewise).

    Notes
    -----
    Direction is fixed: cases are expected to score higher (pROC ``direction = "<"``).
    Midranks handle ties exactly as pROC's placement values. Variance
    ``S10/m + S01/n`` with sample (n - 1) variances of the placement values; with
    clusters ``S10/M + S01/N + 2 S11/(M N)`` from the per-cluster sums of the placement
    values (:func:`clustered_auc_variance`). Coverage of the clustered interval:
    ``bench/auc_cluster_coverage.md``.

    References
    ----------
    DeLong ER, DeLong DM, Clarke-Pearson DL (1988) Biometrics 44:837-845.
    Sun X, Xu W (2014) IEEE Signal Processing Letters 21:1389-1393.
    Pepe MS (2003) The Statistical Evaluation of Medical Tests, sec. 5.2 (logit interval);
    Qin G, Hotilovac L (2008) Stat Methods Med Res 17:207-221.
    Obuchowski NA (1997) Biometrics 53:567-578 (clustered data).

    Validated against pROC 1.18 ``ci.auc(roc(..., direction = "<"), method = "delong")``
    on pROC::aSAH and simulator data to 1e-10.

    Examples
    --------
    >>> label = [0, 0, 0, 0, 1, 1, 1, 1]
    >>> score = [0.1, 0.4, 0.35, 0.8, 0.7, 0.9, 0.6, 0.95]
    >>> t = auc_ci(label, score)
    >>> print(t[["estimand", "estimate", "conf_low", "conf_high", "n_pos", "method"]]
    ...       .round(4).to_string(index=False))
    estimand  estimate  conf_low  conf_high  n_pos method
         auc     0.875    0.5921        1.0    4.0 delong
    """
    scale = _v.renamed("auc_ci", "scale", "auc_scale", scale, auc_scale, "auto")
    y, (s,) = _labels(label, score, func="auc_ci", cluster=cluster)
    conf_level = _v.level(conf_level, func="auc_ci")
    zero = np.zeros(len(y), dtype=np.int64)
    d = delong_placements(zero, y, s, 1, placements=cluster is not None)
    var, extra, clustered = d["var"], {}, False
    if cluster is not None:
        pair = _cluster_codes(cluster, len(y))
        c = clustered_auc_variance(pair, np.zeros(int(pair.max()) + 1 if len(pair) else 0,
                                                  dtype=np.int64), y, d["v"], d["auc"])
        clustered = bool(c["repeats"][0])
        var = c["var"][:, 0] if clustered else var
        extra = {"n_clusters": c["n_clusters"]}
    C = np.asarray(extra["n_clusters"], dtype=float).ravel() if clustered else None
    se, low, high = _auc_ci_from(d["auc"], var, conf_level, scale, clusters=C)
    flag = ("not_estimable" if np.isnan(d["auc"][0]) else "small_n" if np.isnan(var[0])
            else "auc_boundary" if auc_boundary(d["auc"])[0] else "")
    return tidy({"estimand": ["auc"], "estimate": d["auc"], "std_error": se, "conf_low": low,
                 "conf_high": high, "conf_level": conf_level, "n": [len(y)], "n_pos": d["m"],
                 "n_neg": d["k"], "method": auc_method([clustered], scale), "flag": flag,
                 **extra})


def _cluster_codes(cluster, n: int) -> np.ndarray:
    """Codes 0..C-1 of cluster ids (first-appearance order); missing ids are refused."""
    ids = pd.Series(np.asarray(cluster, dtype=object).ravel())
    if len(ids) != n:
        raise ContractError(f"cluster must have one id per observation ({n}); got {len(ids)}")
    na = np.flatnonzero(ids.isna().to_numpy())
    if len(na):
        raise ContractError(f"cluster: positions {', '.join(map(str, na[:5]))} have no id; "
                            f"give every observation a cluster (a scan alone is its own)")
    return pd.factorize(ids)[0].astype(np.int64)


def delong_test(label, score_a, score_b, *, conf_level: float = 0.95, cluster=None
                ) -> pd.DataFrame:
    """Paired DeLong test of two correlated AUCs (two-sided).

    ``cluster`` (optional, one id per observation, e.g. the patient of each scan): when a
    cluster holds more than one observation, the variance of the difference is
    Obuchowski's (1997) clustered-data variance of the difference of the placement values
    (:func:`clustered_auc_variance` with ``v_a - v_b`` and ``A - B``; method
    "delong-paired-cluster-t": the interval and p-value then use Student's t on C - 1
    degrees of freedom); with every cluster of size 1 it is DeLong's (identical).
    Adds the column ``n_clusters``.

    Returns
    -------
    Tidy one-row DataFrame: ``estimand`` "auc_difference", ``estimate`` AUC_a - AUC_b,
    ``std_error`` (DeLong, with the covariance), ``conf_low``/``conf_high`` (Wald),
    ``statistic`` (z), ``p_value`` (two-sided normal), ``n``, ``n_pos``, ``n_neg``,
    ``method`` "delong-paired", and extras ``auc_a``, ``auc_b``.

    Notes
    -----
    ``z = (A - B) / sqrt(V_A + V_B - 2 C_AB)`` with DeLong (co)variances. A zero
    variance (identical scores) gives z = NaN and p = 1 is NOT assumed: p is NaN with
    flag "not_estimable".

    Validated against pROC 1.18 ``roc.test(r1, r2, paired = TRUE, method = "delong")``
    (statistic, p-value and ``conf.int``) to 1e-10.

    Examples
    --------
    >>> label = [0, 0, 0, 0, 1, 1, 1, 1]
    >>> a = [0.1, 0.4, 0.35, 0.8, 0.7, 0.9, 0.6, 0.95]
    >>> b = [0.2, 0.5, 0.45, 0.3, 0.4, 0.55, 0.35, 0.8]
    >>> d = delong_test(label, a, b)
    >>> print(d[["estimand", "estimate", "p_value", "auc_a", "auc_b"]].round(4)
    ...       .to_string(index=False))
          estimand  estimate  p_value  auc_a  auc_b
    auc_difference     0.125   0.6171  0.875   0.75
    """
    y, (a, b) = _labels(label, score_a, score_b, func="delong_test",
                        names=("score_a", "score_b"), cluster=cluster)
    conf_level = _v.level(conf_level, func="delong_test")
    g = np.zeros(len(y), dtype=np.int64)
    da = delong_placements(g, y, a, 1)
    db = delong_placements(g, y, b, 1)
    var = delong_difference_variance(g, y, da["v"] - db["v"], da["var"], db["var"], da["m"],
                                     da["k"])
    clustered, extra = False, {}
    if cluster is not None:
        pair = _cluster_codes(cluster, len(y))
        c = clustered_auc_variance(pair, np.zeros(int(pair.max()) + 1 if len(pair) else 0,
                                                  dtype=np.int64), y, da["v"] - db["v"],
                                   da["auc"] - db["auc"])
        clustered = bool(c["repeats"][0])
        deff_na = clustered and np.isnan(c["var"][0, 0]) and not np.isnan(var[0])
        var = c["var"][:, 0] if clustered else var
        extra = {"n_clusters": c["n_clusters"]}
    out = _paired_auc_frame(da, db, var, conf_level,
                            clusters=np.asarray(extra["n_clusters"], float) if clustered
                            else None)
    if clustered:
        if deff_na:   # as compare_models: the clustered variance, not DeLong's, is missing
            out["flag"] = np.array(["deff_not_estimable"], dtype=object)
    return tidy({**out, **extra})


def _paired_auc_frame(da, db, var, conf_level, clusters=None) -> dict:
    """Columns of a paired DeLong comparison (shared by delong_test and compare_models):
    ``da`` holds side A's ``auc``, ``m``, ``k``, ``db`` side B's ``auc``, ``var`` the
    variance of the difference; ``clusters`` per row the number of clusters C behind a
    clustered variance (NaN where scans are independent): those rows' interval and
    p-value use Student's t on C - 1 degrees of freedom (as the single AUC's interval;
    method "delong-paired-cluster-t"), the others the normal, as pROC's ``roc.test``."""
    diff = da["auc"] - db["auc"]
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(np.where(var > 0, var, np.nan))
        zstat = diff / se
    C = (np.full(np.shape(diff), np.nan) if clusters is None
         else np.broadcast_to(np.asarray(clusters, dtype="float64"), np.shape(diff)))
    t_rows = np.isfinite(C) & (C >= 2)
    df = np.fmax(np.nan_to_num(C, nan=2.0) - 1, 1)
    z = _z(conf_level)
    q = np.where(t_rows, sps.t.ppf(0.5 + conf_level / 2, df), z)
    p = np.where(t_rows, 2 * sps.t.sf(np.abs(zstat), df), 2 * sps.norm.sf(np.abs(zstat)))
    flag = np.where(np.isnan(zstat), "not_estimable", "")
    method = np.where(np.isfinite(C), "delong-paired-cluster-t", "delong-paired")
    return {"estimand": "auc_difference", "estimate": diff, "std_error": se,
            "conf_low": diff - q * se, "conf_high": diff + q * se, "conf_level": conf_level,
            "n": da["m"] + da["k"], "n_pos": da["m"], "n_neg": da["k"],
            "method": method if np.ndim(diff) else method.item(), "flag": flag,
            "statistic": zstat, "p_value": p, "auc_a": da["auc"], "auc_b": db["auc"]}


def wald_reference(df: float, level: float):
    """Quantile and two-sided p-value function of a Wald test: normal when ``df`` is
    infinite, t(df) otherwise (GEE with few clusters, :mod:`stats.models.gee`); NaN df
    gives NaN limits and p-values."""
    if df == np.inf:
        return sps.norm.ppf(0.5 + level / 2), lambda st: 2 * sps.norm.sf(np.abs(st))
    return sps.t.ppf(0.5 + level / 2, df), lambda st: 2 * sps.t.sf(np.abs(st), df)
