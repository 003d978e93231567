"""Logistic regression with the group as a fixed effect and cluster-robust standard errors.

``logit P(y = 1) = x' beta + gamma_site`` by maximum likelihood (IRLS with Cholesky
solves, no BLAS: :mod:`stats._linalg`; binomial trials allowed); the covariance is the cluster sandwich over patients
``B^-1 (sum_c s_c s_c') B^-1 * G / (G - 1) * (N - 1) / (N - K)`` with ``s_c`` a cluster's
summed score (R's ``sandwich::vcovCL(type = "HC1")``). The model-based covariance
``B^-1`` is kept too (what ``emmeans`` uses on a ``glm``).

Validated against R's ``glm`` + ``sandwich::vcovCL(type = "HC1")`` run to convergence
(``glm.control(epsilon = 1e-14)``): estimates, SEs and log-likelihood tested to 1e-6
(measured: estimates 4e-14, SEs 7e-9); R's default ``epsilon = 1e-8`` leaves its SEs
up to 4.5e-8 off here, ~3e-5 on other data (tests/stats/test_models_fixed.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, gammaln

from stats._linalg import (gram, matmul, matvec, pd_inverse, pd_solve, pivoted_solve, rmatvec,
                           standardize)

#: the fit-level warning code of fitted probabilities of 0 or 1 (R's glm warning); the
#: term-level code "separation" marks the term whose level is all one outcome
FITTED_0_1 = "fitted_0_1"


@dataclass
class GLMResult:
    beta: np.ndarray
    vcov: np.ndarray          # cluster-robust (model-based when no cluster)
    vcov_model: np.ndarray    # inverse Fisher information
    loglik: float
    converged: bool
    warnings: list[str] = field(default_factory=list)


#: R's glm.fit warns "fitted probabilities numerically 0 or 1 occurred" within this of 0/1
FITTED_EPS = 10 * np.finfo(float).eps


def irls(X, y, n, *, beta0=None, maxiter=100, tol=1e-10):
    """Binomial-logit ML by Newton-Raphson (= IRLS) on the centred and scaled columns
    (:func:`stats._linalg.standardize`); returns beta, the information ``X' W X`` (both in
    X's own parameters) and whether it converged: the largest step on the scaled
    parameters below ``tol``, or the relative change of the deviance below 1e-12 with
    steps below 1e-6."""
    M, Minv = standardize(X)
    Xs = matmul(X, M)
    b = np.zeros(X.shape[1]) if beta0 is None else matvec(Minv, np.asarray(beta0, float))
    dev_old = np.inf
    converged = False
    for _ in range(maxiter):
        eta = matvec(Xs, b)
        p = expit(eta)
        info = gram(Xs, n * p * (1 - p))
        score = rmatvec(Xs, y - n * p)
        step = pd_solve(info, score)
        if step is None:   # a flat direction: the least-squares step
            step = pivoted_solve(info, score)
        b = b + step
        eta = matvec(Xs, b)
        dev = -2 * np.sum(y * eta - n * np.logaddexp(0, eta))
        big = float(np.max(np.abs(step)))
        if big < tol or (abs(dev - dev_old) < 1e-12 * (abs(dev) + 0.1) and big < 1e-6):
            converged = True
            break
        dev_old = dev
    beta = matvec(M, b)
    p = expit(matvec(X, beta))
    info = gram(X, n * p * (1 - p))
    return beta, info, converged


def loglik_binomial(X, y, n, beta) -> float:
    eta = matvec(X, beta)
    const = gammaln(n + 1) - gammaln(y + 1) - gammaln(n - y + 1)
    return float(np.sum(const + y * eta - n * np.logaddexp(0, eta)))


def fit_glm(X, y, trials, cluster=None) -> GLMResult:
    """Binomial GLM; ``cluster`` codes give the cluster-robust covariance (None: model-based).

    The covariance is inverted on the centred and scaled parameters
    (:func:`stats._linalg.standardize`) when positive definite by the stated rule
    (:func:`stats._linalg.pd_inverse`), NaN otherwise. ``fitted_0_1`` is R's rule: a
    fitted probability within ``10 * eps`` of 0 or 1 (separated terms are found by
    exact counts and fitted apart by the caller, ``stats.models``)."""
    beta, info, converged = irls(X, y, trials)
    msgs: list[str] = []
    p = expit(matvec(X, beta))
    if np.any((p < FITTED_EPS) | (p > 1 - FITTED_EPS)):
        msgs.append(f"{FITTED_0_1}: fitted probabilities numerically 0 or 1 occurred (complete "
                    "or quasi-complete separation)")
    if not converged:
        msgs.append("not_converged: IRLS did not converge in 100 iterations")
    M, _ = standardize(X)
    vcov_model = matmul(matmul(M, pd_inverse(matmul(matmul(M.T, info), M))), M.T)
    vcov = vcov_model
    if cluster is not None:
        s = X * (y - trials * p)[:, None]
        G = int(cluster.max()) + 1
        sc = np.zeros((G, X.shape[1]))
        np.add.at(sc, cluster, s)
        N, K = X.shape
        adj = G / (G - 1) * (N - 1) / (N - K) if G > 1 and N > K else np.nan
        vcov = matmul(matmul(vcov_model, gram(sc)), vcov_model) * adj
    return GLMResult(beta=beta, vcov=vcov, vcov_model=vcov_model,
                     loglik=loglik_binomial(X, y, trials, beta), converged=converged,
                     warnings=msgs)
