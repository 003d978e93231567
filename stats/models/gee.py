"""Logistic GEE with an exchangeable working correlation within group (geepack's estimator).

Marginal model ``logit P(y_ij = 1) = x_ij' beta``; working covariance
``V_i = phi A_i^(1/2) R(alpha) A_i^(1/2)``, ``A_i = diag(mu (1 - mu))``,
``R = (1 - alpha) I + alpha 1 1'``. With Pearson residuals ``r = (y - mu) / sqrt(mu (1 - mu))``
the moment estimators are geepack's (``geese``)::

    phi   = sum r^2 / N
    alpha = sum_i sum_{j != k} r_ij r_ik / (phi * sum_i n_i (n_i - 1))

and beta solves ``sum_i D_i' V_i^-1 (y_i - mu_i) = 0`` by Fisher scoring. ``R^-1`` has a
closed form, so every cluster quantity is a segment sum (no per-cluster matrices of size
n_i x n_i, no Python loop over clusters).

Standard errors: the robust sandwich ``B^-1 (sum_i U_i U_i') B^-1`` (geepack's ``san.se``),
or with ``bias_reduced=True`` Mancl and DeRouen's (2001) small-sample correction, which
inflates each cluster's score by ``(I - H_ii)^-1``; by Woodbury this is
``U_i* = B (B - B_i)^-1 U_i`` with ``B_i`` cluster i's share of the information ``B``.

**Few clusters.** The plain sandwich is a sum of G cluster terms: with few clusters it is
biased down and its z tests reject far too often (3 sites: a null covariate at p < 0.001;
with 6 to 12 sites and a null covariate the 5% z test rejects 10-21% of the time,
bench/gee_size.md). ``bias_reduced=None`` (what ``stats.fit_adjusted`` passes by
default) chooses Mancl-DeRouen when there are fewer than ``SMALL_SAMPLE_CLUSTERS`` (20)
clusters. Mancl-DeRouen SEs are referred to a t distribution with
``df = G - p_between`` degrees of freedom, ``p_between`` the number of columns of X
that are constant within every cluster (the intercept and cluster-level covariates: the
parameters the between-cluster contrasts must estimate; for a model whose covariates are
all cluster-level this is G - p, as in Mancl & DeRouen's and Li & Redden's simulations).
Method label ``gee-md-t``. With 6 to 12 sites and a null covariate that is constant within
site, or whose prevalence varies by site, the 5% test rejects at most 7% of the time
(measured 2.7-4.7%, 4.8% at most with non-converged fits counted as rejections: the
test is conservative; bench/gee_size.md, tests/stats/test_estimability.py). ``df <= 0`` (no more clusters than
between-cluster parameters) leaves every test undefined (NaN, flag ``not_estimable``).
The plain sandwich keeps the normal reference (as geepack) and, below 20 clusters, the
warning ``few_clusters``.

References: Liang & Zeger (1986) Biometrika 73:13-22; Mancl & DeRouen (2001)
Biometrics 57:126-134; Li & Redden (2015) Stat Med 34:281-296. Validated against R's
geepack 1.3.9 ``geeglm(..., corstr = "exchangeable")`` on simulator data,
geepack::ohio and lme4::VerbAgg: estimates, SEs, alpha and scale tested to 1e-6 relative
against geeglm run to convergence (``geese.control(epsilon = 1e-12)``; measured
1.1e-10); against geeglm's default ``epsilon = 1e-4``, which stops early, the gap is
4.2e-5 (tests/stats/test_models_gee.py). The Mancl-DeRouen covariance against explicit
``(I - H_ii)^-1`` matrices in numpy (tests/stats/test_models_edge.py, 1e-8) and in R on
geeglm's fit (tests/r/gee_md.R, 1e-6).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from stats._linalg import (gram, matmul, matvec, pd_inverse, pd_solve,
                           pd_solve_stack, pivoted_solve, rmatvec, standardize)


#: Below this many clusters ``bias_reduced=None`` uses Mancl-DeRouen with a t reference.
SMALL_SAMPLE_CLUSTERS = 20


@dataclass
class GEEResult:
    beta: np.ndarray
    vcov: np.ndarray
    alpha: float
    scale: float
    converged: bool
    n_iter: int
    warnings: list[str] = field(default_factory=list)
    n_clusters: int = 0
    df: float = np.inf            # reference t df of the Wald tests (inf: normal)
    bias_reduced: bool = False

    @property
    def method_label(self) -> str:
        return "gee-md-t" if self.bias_reduced else "gee-exchangeable-robust"


def between_columns(X: np.ndarray, groups: np.ndarray) -> int:
    """Number of columns of ``X`` constant within every cluster of ``groups`` (the
    intercept and cluster-level covariates), vectorized over columns and clusters."""
    if not len(groups):
        return 0
    order = np.argsort(groups, kind="stable")
    Xs, gs = X[order], groups[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    lo, hi = np.minimum.reduceat(Xs, starts, axis=0), np.maximum.reduceat(Xs, starts, axis=0)
    return int(np.sum(np.all(hi - lo <= 1e-12 * np.maximum(1.0, np.abs(hi)), axis=0)))


def small_sample_df(X: np.ndarray, groups: np.ndarray) -> float:
    """``G - p_between``: the t reference df of Mancl-DeRouen Wald tests (see the module
    notes); NaN when it is not positive."""
    G = len(np.unique(groups))
    df = float(G - between_columns(X, groups))
    return df if df > 0 else np.nan


def _cluster_grams(Xt, starts, c2):
    """Per-cluster ``X_i' R^-1 X_i / c1``: segment sums of x x' minus c2 (sum x)(sum x)'.
    One pass per column of X (rows are sorted by cluster), never one per cluster."""
    G, p = len(starts), Xt.shape[1]
    gram = np.empty((G, p, p))
    for j in range(p):
        gram[:, j, :] = np.add.reduceat(Xt[:, [j]] * Xt, starts, axis=0)
    sx = np.add.reduceat(Xt, starts, axis=0)
    return gram - c2[:, None, None] * sx[:, :, None] * sx[:, None, :]


def _admissible(alpha: float, ni: np.ndarray) -> float:
    """Keep the exchangeable correlation inside the range where R(alpha) is positive
    definite for every cluster size: (-1 / (max n_i - 1), 1)."""
    if not np.isfinite(alpha):
        return 0.0
    nmax = float(ni.max())
    lo = -1.0 / (nmax - 1.0) + 1e-6 if nmax > 1 else -0.999
    return float(np.clip(alpha, lo, 0.999))


def fit_gee(X, y, groups, *, bias_reduced: bool | None = False, beta0=None, maxiter=100,
            tol=1e-10) -> GEEResult:
    """Exchangeable logistic GEE (see the module notes). ``bias_reduced``: True for
    Mancl-DeRouen SEs with a t(G - p_between) reference, False for the plain sandwich
    with a normal reference, None to choose Mancl-DeRouen below ``SMALL_SAMPLE_CLUSTERS``
    clusters."""
    n_clusters = len(np.unique(groups))
    if bias_reduced is None:
        bias_reduced = n_clusters < SMALL_SAMPLE_CLUSTERS
    order = np.argsort(groups, kind="stable")
    X = np.ascontiguousarray(X[order])
    y = y[order].astype(float)
    g = groups[order]
    G = int(g.max()) + 1
    ni = np.bincount(g, minlength=G).astype(float)
    starts = np.concatenate([[0], np.cumsum(ni)[:-1]]).astype(np.int64)
    N, p = X.shape
    # fitted on the centred and scaled columns (stats._linalg.standardize): the step rule
    # and the positive-definite rule are decided there, then mapped back
    M, Minv = standardize(X)
    X_orig, X = X, matmul(X, M)
    beta = np.zeros(p) if beta0 is None else matvec(Minv, np.asarray(beta0, float))
    seg = lambda a: np.add.reduceat(a, starts, axis=0)  # noqa: E731
    converged = False
    warnings: list[str] = []
    alpha, phi = 0.0, 1.0
    first = True
    for it in range(maxiter):
        mu = np.clip(expit(matvec(X, beta)), 1e-12, 1 - 1e-12)
        a = mu * (1 - mu)
        sa = np.sqrt(a)
        r = (y - mu) / sa
        phi = float(np.sum(r * r) / N)
        s1, s2 = seg(r), seg(r * r)
        pairs = float(np.sum(ni * (ni - 1)))
        alpha = 0.0 if first or pairs == 0 else float(np.sum(s1 * s1 - s2) / (phi * pairs))
        alpha = _admissible(alpha, ni)
        Xt = X * sa[:, None]
        c1 = 1.0 / (1.0 - alpha)
        c2 = alpha / (1.0 - alpha + ni * alpha)
        sx = seg(Xt)
        B = c1 * (gram(Xt) - np.einsum("g,gp,gq->pq", c2, sx, sx))
        U = c1 * (rmatvec(Xt, r) - rmatvec(sx, c2 * s1))
        step = pd_solve(B, U)
        if step is None:   # a flat direction: the least-squares step
            step = pivoted_solve(B, U)
        if not np.all(np.isfinite(step)):
            break
        beta = beta + step
        if first:
            first = False  # start from the independence fit's first step, then iterate
            continue
        if np.max(np.abs(step)) < tol:
            converged = True
            break
    # final quantities at beta
    mu = np.clip(expit(matvec(X, beta)), 1e-12, 1 - 1e-12)
    a = mu * (1 - mu)
    sa = np.sqrt(a)
    r = (y - mu) / sa
    Xt = X * sa[:, None]
    c1 = 1.0 / (1.0 - alpha)
    c2 = alpha / (1.0 - alpha + ni * alpha)
    sx, s1 = seg(Xt), seg(r)
    B = c1 * (gram(Xt) - np.einsum("g,gp,gq->pq", c2, sx, sx))
    Ui = c1 * (seg(Xt * r[:, None]) - c2[:, None] * sx * s1[:, None])   # (G, p)
    if bias_reduced:
        Bi = c1 * _cluster_grams(Xt, starts, c2)
        # I - H_ii must be invertible for every cluster: B - B_i positive definite by the
        # stated rule (stats._linalg), not by whether a factorisation happens to succeed
        sol, ok = pd_solve_stack(B[None] - Bi, Ui)
        if ok.all():
            Ui = np.einsum("pq,gq->gp", B, sol)
        else:  # a cluster carries all the information on a term
            Ui = np.full_like(Ui, np.nan)
            warnings.append("not_estimable: the bias-reduced SE needs every term informed by "
                            "more than one cluster")
    Binv = pd_inverse(B)
    vcov = matmul(matmul(Binv, gram(Ui)), Binv)
    if not converged:
        warnings.append(f"not_converged: GEE did not converge in {maxiter} iterations")
    df = np.inf
    if bias_reduced:
        df = small_sample_df(X_orig, g)
        if np.isnan(df):
            warnings.append(f"not_estimable: {n_clusters} clusters leave no degrees of freedom "
                            "for the t reference of the Mancl-DeRouen tests (df = clusters - "
                            "cluster-level parameters <= 0); use more clusters or fewer "
                            "cluster-level covariates")
    elif n_clusters < SMALL_SAMPLE_CLUSTERS:
        warnings.append(f"few_clusters: robust (sandwich) SEs from {n_clusters} clusters are "
                        "biased down and their z tests reject too often; use "
                        "bias_reduced=None or True (Mancl-DeRouen with a t reference)")
    beta, vcov = matvec(M, beta), matmul(matmul(M, vcov), M.T)
    return GEEResult(beta=beta, vcov=vcov, alpha=alpha, scale=phi, converged=converged,
                     n_iter=it + 1, warnings=warnings, n_clusters=n_clusters, df=df,
                     bias_reduced=bool(bias_reduced))
