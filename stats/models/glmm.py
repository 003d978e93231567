"""Binomial GLMM with one random intercept per group, by maximum likelihood.

Model: ``y_i | b ~ Binomial(n_i, expit(x_i' beta + b_g(i)))``, ``b_g = theta * u_g``,
``u_g ~ N(0, 1)`` (lme4's spherical parameterisation; ``theta`` is the group SD).

The marginal likelihood of group g, ``int exp(l_g(u)) phi(u) du``, is approximated around
the conditional mode ``u_hat_g`` (curvature ``H_g = 1 + theta^2 sum_i n_i p_i (1 - p_i)``)
by adaptive Gauss-Hermite quadrature with K standard-normal nodes ``z_k``, weights
``w_k``::

    L_g = log sum_k w_k exp(l_g(a_gk) - a_gk^2 / 2 + z_k^2 / 2 - log(H_g) / 2),
    a_gk = u_hat_g + z_k / sqrt(H_g).

K = 1 (z = 0, w = 1) is the Laplace approximation: lme4's ``glmer`` default; K > 1 is
``nAGQ = K``. The deviance ``-2 sum_g L_g`` (with the binomial constants
``log choose(n_i, y_i)``, so ``loglik`` equals R's ``logLik``) is minimised jointly over
``(theta, beta)`` by L-BFGS with its analytic gradient (the implicit derivatives of
``u_hat`` and ``H`` are included), then polished by Newton steps on a finite-difference
Hessian of that gradient. The conditional modes are found by Newton's method run for all
groups at once on group-sorted rows (segment sums with ``np.add.reduceat``; no Python loop
over groups) and warm-started between evaluations.

Standard errors: as lme4's default (``use.hessian = TRUE``), the inverse of half the
Hessian of the deviance with respect to ``(theta, beta)``; the ``beta`` block gives the
fixed-effect covariance and the ``theta`` diagonal the SE of the group SD.

Validated against R's lme4 1.1-31 ``glmer`` (Laplace and ``nAGQ = 10``) on ``cbpp``,
``ohio``, ``VerbAgg`` and simulator data, with lme4 run to convergence (``tolPwrss =
1e-12``, bobyqa ``rhoend = 1e-10``): estimates 3.1e-5 relative, SEs 2.2e-4, group SD
8.6e-6; lme4 at its defaults is 1.3e-3 / 1.3e-2 / 4.4e-4 away (its PIRLS tolerance makes
its deviance and finite-difference Hessian noisy). tests/stats/r_models.py states the
tolerances tested.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, gammaln

from stats._linalg import gram, matmul, matvec, pd_inverse, rmatvec, standardize
from ._optim import minimise_laplace

_MAX_STEP = 3.0  # cap on a Newton step for a conditional mode (in SD units of u)
#: a group SD below this is a boundary (singular) fit, reported as 0 (lme4's isSingular tol)
SINGULAR_SD = 1e-4
#: a deviance at SD 0 within this of the fit's is a boundary fit too (deviance units)
SINGULAR_DEVIANCE = 1e-6


@dataclass
class GLMMResult:
    beta: np.ndarray
    theta: float
    vcov_full: np.ndarray        # (1 + p) x (1 + p), order (theta, beta)
    loglik: float
    u_hat: np.ndarray            # conditional modes of u, one per group
    h_curv: np.ndarray           # H_g at the modes
    converged: bool
    n_iter: int
    grad_norm: float
    warnings: list[str] = field(default_factory=list)


def gh_rule(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and weights for the standard normal (weights sum to 1);
    ``k == 1`` gives the Laplace rule ``([0], [1])``."""
    if k <= 1:
        return np.zeros(1), np.ones(1)
    x, w = np.polynomial.hermite_e.hermegauss(k)
    return x, w / w.sum()


class LaplaceObjective:
    """Deviance of the random-intercept binomial GLMM and its gradient in (theta, beta)."""

    def __init__(self, X, y, trials, groups, n_groups, nagq=1):
        order = np.argsort(groups, kind="stable")
        self.order = order
        self.X = np.ascontiguousarray(X[order])
        self.y = y[order].astype(float)
        self.n = trials[order].astype(float)
        g = groups[order]
        self.g = g
        self.G = int(n_groups)
        counts = np.bincount(g, minlength=self.G)
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self.z, self.w = gh_rule(nagq)
        self.logw = np.log(self.w)
        self.const = float(np.sum(gammaln(self.n + 1) - gammaln(self.y + 1)
                                  - gammaln(self.n - self.y + 1)))
        self.u = np.zeros(self.G)
        self.n_eval = 0

    # segment sum over groups (rows are sorted by group)
    def _seg(self, a):
        return np.add.reduceat(a, self.starts, axis=0)

    def _penalised(self, eta0, theta, u):
        """Per-group ``l_g(u_g) - u_g^2 / 2`` (strictly concave in u_g)."""
        eta = eta0 + theta * u[self.g]
        return self._seg(self.y * eta - self.n * np.logaddexp(0.0, eta)) - 0.5 * u * u

    def modes(self, eta0, theta, u0=None, tol=1e-10, max_iter=100):
        """Conditional modes of u for every group at once: Newton with a capped step,
        halved for the groups where it does not increase ``l_g(u) - u^2 / 2`` (plain
        Newton can cycle, e.g. between u = 0 and u = 3 for a group of four 0/1 outcomes
        at a large SD, when started away from the warm start). Returns ``(u, p)``."""
        return self._modes(eta0, theta, u0, tol, max_iter)[:2]

    def _modes(self, eta0, theta, u0=None, tol=1e-10, max_iter=100):
        """:meth:`modes`, plus the group sums ``S = seg(n p (1 - p))`` and
        ``R = seg(y - n p)`` at the returned modes when the last Newton step computed them
        (None otherwise), so that :meth:`value_grad` does not compute them again."""
        u = self.u.copy() if u0 is None else u0.copy()
        y, n, g = self.y, self.n, self.g
        f = self._penalised(eta0, theta, u)
        for _ in range(max_iter):
            p = expit(eta0 + theta * u[g])
            R = self._seg(y - n * p)
            S = self._seg(n * p * (1.0 - p))
            score = theta * R - u
            H = 1.0 + theta * theta * S
            step = np.clip(score / H, -_MAX_STEP, _MAX_STEP)
            if np.max(np.abs(step)) < tol:
                return u, p, S, R        # p, S and R belong to this u
            t = np.ones_like(u)
            for _ in range(40):
                cand = u + t * step
                f_cand = self._penalised(eta0, theta, cand)
                worse = f_cand < f - 1e-13 * (1.0 + np.abs(f))
                if not worse.any():
                    break
                t[worse] *= 0.5
            u, f = np.where(worse, u, cand), np.where(worse, f, f_cand)
        p = expit(eta0 + theta * u[g])
        return u, p, None, None

    def value_grad(self, params):
        theta, beta = params[0], params[1:]
        X, y, n, g = self.X, self.y, self.n, self.g
        eta0 = matvec(X, beta)
        u, p, S, R = self._modes(eta0, theta)
        self.u = u
        self.n_eval += 1
        v = n * p * (1.0 - p)
        if S is None:   # the Newton loop ran out of iterations: sums at the final u
            S, R = self._seg(v), self._seg(y - n * p)
        H = 1.0 + theta * theta * S
        if len(self.z) == 1:
            return self._laplace(eta0, theta, u, p, v, S, H, R)
        # Adaptive GHQ. Every beta-derivative is a group-weighted sum of x_i, so the
        # gradient folds into one product X' w (no (G, K, p) arrays):
        #   du/db = -theta Xv_g / H,  dH/db = theta^2 (Xv1_g + theta S1 du/db),
        #   da_k/db = du/db - z_k dH/db / (2 H^1.5),  dg_k/db = Xr_gk + c_k da_k/db - dH/db / (2H)
        theta2 = theta * theta
        v1 = v * (1.0 - 2.0 * p)
        S1 = self._seg(v1)
        du_dt = (R - theta * u * S) / H
        dH_dt = 2.0 * theta * S + theta2 * S1 * (u + theta * du_dt)
        sqH = np.sqrt(H)
        logH = np.log(H)
        K = len(self.z)
        gk = np.empty((self.G, K))
        ck = np.empty((self.G, K))
        dgt = np.empty((self.G, K))
        rmat = np.empty((len(y), K))
        for k in range(K):  # quadrature nodes (K <= ~25), not groups
            zk = self.z[k]
            a = u + zk / sqH
            eta = eta0 + theta * a[g]
            rk = y - n * expit(eta)
            rmat[:, k] = rk
            Rk = self._seg(rk)
            ll = self._seg(y * eta - n * np.logaddexp(0.0, eta))
            da_dt = du_dt - 0.5 * zk * dH_dt / (H * sqH)
            c = theta * Rk - a
            ck[:, k] = c
            gk[:, k] = ll - 0.5 * a * a + 0.5 * zk * zk - 0.5 * logH
            dgt[:, k] = Rk * a + c * da_dt - 0.5 * dH_dt / H
        lw = self.logw[None, :] + gk
        m = lw.max(axis=1, keepdims=True)
        e = np.exp(lw - m)
        tot = e.sum(axis=1, keepdims=True)
        L = (m + np.log(tot))[:, 0]
        pi = e / tot
        C1 = np.sum(pi * ck, axis=1)
        C2 = np.sum(pi * ck * self.z[None, :], axis=1)
        coef_dH = -0.5 * C2 / (H * sqH) - 0.5 / H          # multiplies dH/db
        coef_Xv = -(C1 + coef_dH * theta2 * theta * S1) * theta / H
        w = np.einsum("nk,nk->n", pi[g], rmat) + v * coef_Xv[g] + v1 * (coef_dH * theta2)[g]
        grad_b = rmatvec(X, w)
        grad_t = np.sum(pi * dgt)
        loglik = float(L.sum()) + self.const
        dev = -2.0 * loglik
        grad = -2.0 * np.concatenate([[grad_t], grad_b])
        self.last = (u, H)
        return dev, grad

    def _laplace(self, eta0, theta, u, p, v, S, H, R):
        """K = 1: at the mode the u-derivatives of l - u^2/2 vanish, and every group sum
        weighted by a group constant folds into one X' w product (no (G, p) segment sums)."""
        X, y, n, g = self.X, self.y, self.n, self.g
        eta = eta0 + theta * u[g]
        r = y - n * p
        v1 = v * (1.0 - 2.0 * p)
        S1 = self._seg(v1)
        logH = np.log(H)
        ll = float(np.sum(y * eta - n * np.logaddexp(0.0, eta)))
        loglik = ll - 0.5 * float(np.sum(u * u)) - 0.5 * float(logH.sum()) + self.const
        th2 = theta * theta
        w = r - 0.5 * th2 * v1 / H[g] + 0.5 * th2 * th2 * v * (S1 / (H * H))[g]
        grad_b = rmatvec(X, w)
        du_dt = (R - theta * u * S) / H
        dH_dt = 2.0 * theta * S + th2 * S1 * (u + theta * du_dt)
        grad_t = float(np.sum(R * u - 0.5 * dH_dt / H))
        self.last = (u, H)
        return -2.0 * loglik, -2.0 * np.concatenate([[grad_t], grad_b])

    def hessian(self, params, central: bool | None = None):
        """Finite differences of the analytic gradient, symmetrised: central (step 1e-4)
        for small problems, forward (step 1e-5, half the evaluations; error ~1e-5
        relative) when n * p > 5e5."""
        k = len(params)
        if central is None:
            central = self.X.size <= 500_000
        Hm = np.empty((k, k))
        u_keep = self.u.copy()
        g0 = None if central else self.value_grad(params)[1]
        for j in range(k):
            h = (1e-4 if central else 1e-5) * max(abs(params[j]), 1.0)
            e = np.zeros(k)
            e[j] = h
            self.u = u_keep.copy()
            gp = self.value_grad(params + e)[1]
            if central:
                self.u = u_keep.copy()
                gm = self.value_grad(params - e)[1]
                Hm[:, j] = (gp - gm) / (2 * h)
            else:
                Hm[:, j] = (gp - g0) / h
        self.u = u_keep
        return 0.5 * (Hm + Hm.T)


def fit_glmm(X, y, trials, groups, n_groups, *, nagq=1, beta0=None, theta0=None,
             maxiter=500, glm=None) -> GLMMResult:
    """Fit the random-intercept binomial GLMM (Laplace when ``nagq == 1``).

    The optimisation runs on centred and scaled columns (``X M``); L-BFGS to a moderate
    tolerance, then Newton steps on the finite-difference Hessian (quadratic convergence);
    estimates and covariance are mapped back (``beta = M beta'``, ``V = M V' M'``).
    Products and solves avoid BLAS (:mod:`stats._linalg`), so one machine gives the same
    bits whatever its BLAS kernel.

    Rules (each decided by data or a stated margin, never by whether a factorisation
    of a numerically flat matrix happens to succeed on this CPU):

    * **Separated terms** are handled by the caller (``stats.models``): it fits the rows
      outside the separated levels without the separated columns (the exact limit).
    * **Boundary (singular) fit.** When the group SD ends below :data:`SINGULAR_SD`
      (lme4's ``isSingular`` tolerance), or the deviance at SD 0 is within
      :data:`SINGULAR_DEVIANCE` (1e-6) of the fit's, the fit is on the boundary: the SD
      is reported as exactly 0 and the fixed effects, their covariance and the
      log-likelihood are the binomial GLM's (``glm``: a
      :class:`stats.models.fixed.GLMResult` of the same X, y, trials, computed here when
      not given), which is the model at SD 0. The SD's SE is NaN.
    * **Positive definiteness** of the Hessian, decided on the centred and scaled
      parameterisation the optimiser works in (an intercept and an uncentred covariate,
      a calendar year, are nearly collinear only before centring):
      :func:`stats._linalg.pd_inverse` (smallest eigenvalue of the correlation-scaled
      matrix at least 1e-6); otherwise the standard errors are NaN with the fit-level
      code ``not_estimable``.
    """
    M, Minv = standardize(X)
    Xs = matmul(X, M)
    obj = LaplaceObjective(Xs, y, trials, groups, n_groups, nagq=nagq)
    p = X.shape[1]
    b0 = np.zeros(p) if beta0 is None else matvec(Minv, np.asarray(beta0, float))
    x0 = np.concatenate([[1.0 if theta0 is None else theta0], b0])
    warnings: list[str] = []
    x, dev, grad, Hess, fresh, res = minimise_laplace(obj, x0, maxiter)
    if x[0] < 0:  # the deviance is even in theta: report the positive root
        x = x.copy()
        x[0] = -x[0]
        obj.u = -obj.u
        fresh = False
    if not fresh:
        Hess = obj.hessian(x)
    dev, grad = obj.value_grad(x)
    theta = float(x[0])
    gnorm = float(np.max(np.abs(grad)))
    converged = bool(gnorm < 1e-3 * max(1.0, abs(dev)) ** 0.5)
    if not converged:
        warnings.append(f"not_converged: largest deviance gradient {gnorm:.2g} at the end "
                        f"({res.message}); estimates may be off")
    if glm is None and theta < 10 * SINGULAR_SD:
        from .fixed import fit_glm
        glm = fit_glm(X, y, trials)
    singular = theta < SINGULAR_SD or (
        glm is not None and -2.0 * glm.loglik - dev < SINGULAR_DEVIANCE)
    A = np.eye(p + 1)
    A[1:, 1:] = M
    if singular:
        warnings.append("singular: the group SD is estimated at (or near) 0; the random "
                        "intercept is not supported by the data (lme4: boundary (singular) fit)")
        beta = np.asarray(glm.beta, float)
        info_s = _glm_information(Xs, trials, matvec(Minv, beta))   # scaled parameters
        vcov = np.full((p + 1, p + 1), np.nan)
        vcov[1:, 1:] = matmul(matmul(M, pd_inverse(info_s)), M.T)
        loglik = float(glm.loglik)
        u, H = np.zeros(int(n_groups)), np.ones(int(n_groups))
        theta = 0.0
    else:
        vcov = matmul(matmul(A, pd_inverse(Hess / 2.0)), A.T)
        beta = matvec(M, x[1:])
        loglik = -dev / 2.0
        u, H = obj.last
    if not np.all(np.isfinite(np.diag(vcov)[1:])):
        vcov[:, :] = np.nan
        warnings.append("not_estimable: the Hessian is not positive definite; standard errors "
                        "are unavailable (separation or an over-parameterised model)")
    return GLMMResult(beta=beta, theta=theta, vcov_full=vcov, loglik=loglik,
                      u_hat=u, h_curv=H, converged=converged, n_iter=int(res.nit),
                      grad_norm=gnorm, warnings=warnings)


def _glm_information(X, trials, beta) -> np.ndarray:
    """Fisher information ``X' W X`` of the binomial GLM at ``beta`` (the Hessian of half
    the deviance in beta at group SD 0)."""
    p = expit(matvec(X, beta))
    return gram(X, trials * p * (1.0 - p))
