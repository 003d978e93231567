"""Binomial GLMM with nested random intercepts (patients within sites), by Laplace ML.

Model (lme4's ``(1 | site/patient_id)`` = ``(1 | site) + (1 | patient_id:site)``)::

    y_i | b ~ Binomial(n_i, expit(x_i' beta + s_site(i) + t_patient(i))),
    s = sigma_s u_s, t = sigma_p u_p, u ~ N(0, I)      (spherical, as lme4).

The Laplace approximation expands the joint log-density around the joint conditional
mode ``u_hat`` of every site and patient effect::

    loglik = sum_i l_i(eta_i) - |u_hat|^2 / 2 - log det(H) / 2 + const,
    H = I + Lambda Z' W Z Lambda        (W = diag(n_i p_i (1 - p_i)) at the mode),

exactly lme4's ``glmer`` Laplace deviance (``nAGQ = 1``; lme4 allows no quadrature for
more than one random-effect term, nor does this fit).

**Block sparsity.** Patients nest in sites, so ``H`` is block diagonal over sites and each
site's block is an arrow (bordered diagonal) matrix: a diagonal over the site's patients,
``d_j = 1 + sigma_p^2 S_j`` (``S_j`` the sum of ``n p (1 - p)`` over patient j's rows),
bordered by the site row ``h_j = sigma_s sigma_p S_j``, corner ``1 + sigma_s^2 T_s``
(``T_s = sum_j S_j``). Every solve with ``H`` is the Schur complement on the site effect::

    C_s = 1 + sigma_s^2 T_s - sum_j h_j^2 / d_j,
    x_s = (b_s - sum_j h_j b_j / d_j) / C_s,   x_j = (b_j - h_j x_s) / d_j,
    log det H_s = sum_j log d_j + log C_s,

computed for every site at once by segment sums (``np.add.reduceat`` over rows sorted by
site then patient, and over patients sorted by site): no patient-by-patient matrix, no
Python loop over sites or patients. Memory and time are linear in the rows.

**Conditional modes**: Newton's method on the joint modes, all sites at once, each site's
step scaled to at most ``_MAX_STEP`` (SD units) and halved for the sites where it does
not increase the site's penalised log-likelihood; warm-started between evaluations.

**Gradient** (analytic; the implicit derivatives of ``u_hat`` and of ``H`` included): with
``q_j = z_j' H^-1 z_j`` (``z_j``: sigma_p at patient j, sigma_s at its site) and
``c = H^-1 a``, ``a_j = sigma_p q_j S1_j``, ``a_s = sigma_s sum_j q_j S1_j``
(``S1 = seg(v (1 - 2p))``)::

    dloglik/dbeta = X' [r - v1 q_j / 2 + v (sigma_p c_j + sigma_s c_s) / 2],

and for each SD the explicit score minus half the trace of ``H^-1 dH/dsigma`` (see
:meth:`NestedObjective.value_grad`); checked against finite differences of the deviance in
tests/stats/test_models_nested.py.

**Optimisation and standard errors** as :func:`stats.models.glmm.fit_glmm`: L-BFGS on the
centred and scaled columns, Newton polish on the finite-difference Hessian of the analytic
gradient; SEs from the inverse of half the deviance Hessian in ``(sigma_s, sigma_p,
beta)`` (lme4's ``use.hessian = TRUE``, at the exact Laplace optimum).

**Extreme SDs.** An SD above :data:`EXTREME_SD` (10 logit units) is flagged
``extreme_sd``: with binary outcomes and a level whose groups' outcomes are nearly all
alike (a patient's scans all detected or all missed) the Laplace deviance can have its
optimum at an implausible SD, the fixed effects are then conditional on extreme effects
and not comparable with the other fits' (lme4 stops there without converging); the
estimates are reported as computed, with the flag.

**Boundary (singular) fits**, each SD by the rule of :func:`stats.models.glmm.fit_glmm`: an
SD below :data:`~stats.models.glmm.SINGULAR_SD`, or one whose removal raises the deviance
by less than :data:`~stats.models.glmm.SINGULAR_DEVIANCE` (the one-level fit without it is
fitted for that check: the site-only GLMM always, it is the warm start; the patient-only
GLMM when the site SD is below :data:`SINGULAR_CHECK_SD`). A singular SD is reported as
exactly 0 with NaN SE and the fit is the one-level GLMM without that level (or the
binomial GLM when both are singular), flagged ``singular`` naming the level.

Validated against R's lme4 1.1-31 ``glmer(y ~ ... + (1 | site/patient_id))``
(tests/r/glmer_nested.R -> tests/r/glmer_nested.csv; tests/stats/test_models_nested.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, gammaln

from stats._linalg import dot, matmul, matvec, pd_inverse, rmatvec, standardize
from ._optim import minimise_laplace

from .glmm import SINGULAR_DEVIANCE, SINGULAR_SD, fit_glmm

_MAX_STEP = 3.0
#: an SD above this (logit units: patients 1 SD apart differ in odds by e^20) is flagged
#: ``extreme_sd``: the Laplace optimum of binary data with few, nearly all-alike scans per
#: patient (separation at that level); lme4 fails to converge there
EXTREME_SD = 10.0
#: the patient-only GLMM is fitted (to check whether the site SD is on the boundary by the
#: deviance rule) only when the site SD ends below this; above it the site level is kept
SINGULAR_CHECK_SD = 0.05


@dataclass
class NestedResult:
    beta: np.ndarray
    sds: np.ndarray              # (sigma_site, sigma_patient)
    vcov_full: np.ndarray        # (2 + p) x (2 + p), order (sigma_site, sigma_patient, beta)
    loglik: float
    u_site: np.ndarray           # conditional modes of u, per site
    u_patient: np.ndarray        # per patient (the nested factor's levels)
    var_site: np.ndarray         # conditional variances of u (diagonal of H^-1)
    var_patient: np.ndarray
    converged: bool
    n_iter: int
    grad_norm: float
    singular: tuple[bool, bool] = (False, False)
    warnings: list[str] = field(default_factory=list)


class NestedObjective:
    """Laplace deviance of the nested random-intercept GLMM and its gradient in
    ``(sigma_s, sigma_p, beta)``; rows of each site contiguous, patients within sites."""

    def __init__(self, X, y, trials, site, patient, n_sites, n_patients):
        # patient codes must nest: each patient in one site (the caller codes
        # patient:site pairs); sort rows by (site, patient)
        order = np.lexsort((patient, site))
        self.order = order
        self.X = np.ascontiguousarray(X[order])
        self.y = y[order].astype(float)
        self.n = trials[order].astype(float)
        s = site[order]
        pt = patient[order]
        # renumber patients in row order, so that patients are sorted by site
        first = np.concatenate([[True], (pt[1:] != pt[:-1]) | (s[1:] != s[:-1])])
        self.pnew = np.cumsum(first) - 1                  # row -> patient (sorted)
        self.P = int(self.pnew[-1]) + 1
        self.p_starts = np.flatnonzero(first)             # first row of each patient
        self.p_orig = pt[self.p_starts]                   # sorted patient -> caller's code
        self.p_site = s[self.p_starts]                    # patient -> site
        self.S = int(n_sites)
        counts = np.bincount(self.p_site, minlength=self.S)
        self.s_starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self.s_row = s
        self.const = float(np.sum(gammaln(self.n + 1) - gammaln(self.y + 1)
                                  - gammaln(self.n - self.y + 1)))
        self.u_s = np.zeros(self.S)
        self.u_p = np.zeros(self.P)
        self.n_eval = 0
        if n_patients != self.P:
            raise ValueError("nested GLMM: patient codes must be unique within sites")

    # segment sums: rows -> patients, patients -> sites
    def _pseg(self, a):
        return np.add.reduceat(a, self.p_starts, axis=0)

    def _sseg(self, a):
        return np.add.reduceat(a, self.s_starts, axis=0)

    def _eta(self, eta0, ss, sp, us, up):
        return eta0 + ss * us[self.s_row] + sp * up[self.pnew]

    def _site_objective(self, eta0, ss, sp, us, up):
        """Per site: ``sum l_i - |u|^2 / 2`` over the site's rows and effects."""
        eta = self._eta(eta0, ss, sp, us, up)
        ll = self._pseg(self.y * eta - self.n * np.logaddexp(0.0, eta)) - 0.5 * up * up
        return self._sseg(ll) - 0.5 * us * us

    def _arrow(self, ss, sp, Sj):
        """Diagonal ``d_j``, border ``h_j`` and Schur complement ``C_s`` of every site's
        block of H."""
        d = 1.0 + sp * sp * Sj
        h = ss * sp * Sj
        C = 1.0 + ss * ss * self._sseg(Sj) - self._sseg(h * h / d)
        return d, h, C

    def _solve(self, d, h, C, bp, bs):
        """``H^-1 b`` (Schur complement on each site effect)."""
        xs = (bs - self._sseg(h * bp / d)) / C
        xp = (bp - h * xs[self.p_site]) / d
        return xp, xs

    def modes(self, eta0, ss, sp, tol=1e-10, max_iter=100):
        """Joint conditional modes of every site and patient effect (Newton, per site
        line search). Returns ``(u_s, u_p, p)``, plus the patient sums ``R``, ``S`` at
        the returned modes (None when the iterations ran out)."""
        us, up = self.u_s.copy(), self.u_p.copy()
        y, n = self.y, self.n
        f = self._site_objective(eta0, ss, sp, us, up)
        for _ in range(max_iter):
            p = expit(self._eta(eta0, ss, sp, us, up))
            R = self._pseg(y - n * p)
            Sj = self._pseg(n * p * (1.0 - p))
            gp = sp * R - up
            gs = ss * self._sseg(R) - us
            d, h, C = self._arrow(ss, sp, Sj)
            dp, ds = self._solve(d, h, C, gp, gs)
            big = np.maximum(np.abs(ds), np.maximum.reduceat(np.abs(dp), self.s_starts))
            if np.max(big) < tol:
                return us, up, p, R, Sj
            t = np.minimum(1.0, _MAX_STEP / np.where(big > 0, big, 1.0))
            for _ in range(40):
                cs, cp = us + t * ds, up + t[self.p_site] * dp
                f_c = self._site_objective(eta0, ss, sp, cs, cp)
                worse = f_c < f - 1e-13 * (1.0 + np.abs(f))
                if not worse.any():
                    break
                t = np.where(worse, 0.5 * t, t)
            keep_p = worse[self.p_site]
            us, up = np.where(worse, us, cs), np.where(keep_p, up, cp)
            f = np.where(worse, f, f_c)
        p = expit(self._eta(eta0, ss, sp, us, up))
        return us, up, p, None, None

    def value_grad(self, params):
        ss, sp, beta = params[0], params[1], params[2:]
        X, y, n = self.X, self.y, self.n
        eta0 = matvec(X, beta)
        us, up, p, R, Sj = self.modes(eta0, ss, sp)
        self.u_s, self.u_p = us, up
        self.n_eval += 1
        v = n * p * (1.0 - p)
        r = y - n * p
        if R is None:
            R, Sj = self._pseg(r), self._pseg(v)
        v1 = v * (1.0 - 2.0 * p)
        S1 = self._pseg(v1)
        d, h, C = self._arrow(ss, sp, Sj)
        hs = h / d
        Cs = C[self.p_site]
        inv_ss = 1.0 / C                      # diagonal blocks of H^-1
        inv_js = -hs / Cs
        inv_jj = 1.0 / d + hs * hs / Cs
        q = sp * sp * inv_jj + 2.0 * sp * ss * inv_js + ss * ss * inv_ss[self.p_site]
        eta = self._eta(eta0, ss, sp, us, up)
        ll = float(np.sum(y * eta - n * np.logaddexp(0.0, eta)))
        logdet = float(np.sum(np.log(d)) + np.sum(np.log(C)))
        loglik = ll - 0.5 * (dot(up, up) + dot(us, us)) - 0.5 * logdet + self.const
        # c = H^-1 a
        qS1 = q * S1
        cp, cs = self._solve(d, h, C, sp * qS1, ss * self._sseg(qS1))
        pj = self.pnew
        w = r - 0.5 * v1 * q[pj] + 0.5 * v * (sp * cp[pj] + ss * cs[self.s_row])
        grad_b = rmatvec(X, w)
        Rs, Ts = self._sseg(R), self._sseg(Sj)
        us_j = us[self.p_site]
        # d g / d sigma_p and d g / d sigma_s (g = Lambda Z' r - u)
        bpp, bps = R - sp * Sj * up, -ss * self._sseg(Sj * up)
        bsp, bss = -sp * Sj * us_j, Rs - ss * Ts * us
        cross = 2.0 * inv_js * Sj
        direct_p = float(np.sum(inv_jj * 2.0 * sp * Sj + cross * ss))
        direct_s = float(np.sum(inv_ss * 2.0 * ss * Ts) + np.sum(cross * sp))
        grad_p = dot(up, R) - 0.5 * (dot(qS1, up) + dot(cp, bpp) + dot(cs, bps)
                                     + direct_p)
        grad_s = dot(us, Rs) - 0.5 * (dot(qS1, us_j) + dot(cp, bsp) + dot(cs, bss)
                                     + direct_s)
        self.last = (us, up, inv_ss, inv_jj)
        return -2.0 * loglik, -2.0 * np.concatenate([[grad_s, grad_p], grad_b])

    def hessian(self, params, central: bool | None = None):
        """Finite differences of the analytic gradient, symmetrised (as
        :meth:`stats.models.glmm.LaplaceObjective.hessian`)."""
        k = len(params)
        if central is None:
            central = self.X.size <= 500_000
        Hm = np.empty((k, k))
        keep = self.u_s.copy(), self.u_p.copy()
        g0 = None if central else self.value_grad(params)[1]
        for j in range(k):
            hh = (1e-4 if central else 1e-5) * max(abs(params[j]), 1.0)
            e = np.zeros(k)
            e[j] = hh
            self.u_s, self.u_p = keep[0].copy(), keep[1].copy()
            gp = self.value_grad(params + e)[1]
            if central:
                self.u_s, self.u_p = keep[0].copy(), keep[1].copy()
                gm = self.value_grad(params - e)[1]
                Hm[:, j] = (gp - gm) / (2 * hh)
            else:
                Hm[:, j] = (gp - g0) / hh
        self.u_s, self.u_p = keep
        return 0.5 * (Hm + Hm.T)


def _minimise(obj, x0, maxiter):
    """L-BFGS, then Newton steps on the finite-difference Hessian (as fit_glmm)."""
    x, dev, grad, Hess, fresh, res = minimise_laplace(obj, x0, maxiter)
    if x[0] < 0 or x[1] < 0:   # the deviance is even in each SD: the positive roots
        x = x.copy()
        if x[0] < 0:
            x[0], obj.u_s = -x[0], -obj.u_s
        if x[1] < 0:
            x[1], obj.u_p = -x[1], -obj.u_p
        fresh = False
    if not fresh:
        Hess = obj.hessian(x)
    dev, grad = obj.value_grad(x)
    return x, dev, grad, Hess, res


def fit_nested_glmm(X, y, trials, site, patient, n_sites, n_patients, *, beta0=None,
                    maxiter=500, glm=None, names=("site", "patient_id:site")) -> NestedResult:
    """Fit ``y ~ X + (1 | site) + (1 | patient:site)`` by Laplace (module notes).

    ``site``: codes 0..n_sites-1 per row; ``patient``: codes 0..n_patients-1 of the
    nested factor (each code within one site). ``glm``: the binomial GLM of the same
    ``X, y, trials`` (:func:`stats.models.fixed.fit_glm`; computed when needed and not
    given). ``names``: the two levels' names, used in the ``singular`` message."""
    from .fixed import fit_glm

    if glm is None:
        glm = fit_glm(X, y, trials)
    # the one-level site GLMM: the warm start, and the fit when the patient SD is singular
    one_site = fit_glmm(X, y, trials, site, n_sites, nagq=1, beta0=glm.beta, glm=glm)
    M, Minv = standardize(X)
    Xs = matmul(X, M)
    obj = NestedObjective(Xs, y, trials, site, patient, n_sites, n_patients)
    p = X.shape[1]
    s0 = one_site.theta if one_site.theta > 0 else 0.5
    x0 = np.concatenate([[s0, 0.5], matvec(Minv, np.asarray(one_site.beta, float))])
    x, dev, grad, Hess, res = _minimise(obj, x0, maxiter)
    gnorm = float(np.max(np.abs(grad)))
    converged = bool(gnorm < 1e-3 * max(1.0, abs(dev)) ** 0.5)
    warnings: list[str] = []
    if not converged:
        warnings.append(f"not_converged: largest deviance gradient {gnorm:.2g} at the end "
                        f"({res.message}); estimates may be off")
    ss, sp = float(x[0]), float(x[1])
    # boundary rule per SD: below SINGULAR_SD, or the fit without it within
    # SINGULAR_DEVIANCE of this one (one-level GLMMs fitted as the rule needs them)
    sing_p = sp < SINGULAR_SD or -2.0 * one_site.loglik - dev < SINGULAR_DEVIANCE
    one_pat = None
    if ss < SINGULAR_CHECK_SD:
        one_pat = fit_glmm(X, y, trials, patient, n_patients, nagq=1, beta0=glm.beta, glm=glm)
    sing_s = ss < SINGULAR_SD or (one_pat is not None
                                  and -2.0 * one_pat.loglik - dev < SINGULAR_DEVIANCE)
    us_, up_, inv_ss, inv_jj = obj.last
    # back to the caller's patient codes
    u_p = np.zeros(int(n_patients))
    v_p = np.zeros(int(n_patients))
    u_p[obj.p_orig] = up_
    v_p[obj.p_orig] = inv_jj
    if sing_s or sing_p:
        # the fit without the singular level; a one-level fit that is itself singular
        # (its SD at 0) leaves the binomial GLM
        r = None
        if sing_p and not sing_s:
            r = one_site
            sing_s = one_site.theta == 0.0
        elif sing_s and not sing_p:
            r = one_pat
            sing_p = one_pat.theta == 0.0
        for lvl, s in ((names[0], sing_s), (names[1], sing_p)):
            if s:
                warnings.append(f"singular: the {lvl} SD is estimated at (or near) 0; that "
                                f"random intercept is not supported by the data (lme4: "
                                f"boundary (singular) fit)")
        vcov = np.full((p + 2, p + 2), np.nan)
        sds = np.zeros(2)
        S, P = int(n_sites), int(n_patients)
        u_site, var_site, u_pat, var_pat = np.zeros(S), np.ones(S), np.zeros(P), np.ones(P)
        if sing_s and sing_p:
            from .glmm import _glm_information

            beta = np.asarray(glm.beta, float)
            info = _glm_information(Xs, trials, matvec(Minv, beta))
            vcov[2:, 2:] = matmul(matmul(M, pd_inverse(info)), M.T)
            loglik = float(glm.loglik)
            more = []
        else:
            k = 0 if sing_p else 1      # the SD that stays
            idx = np.r_[k, 2:p + 2]
            vcov[np.ix_(idx, idx)] = r.vcov_full
            sds[k] = r.theta
            beta, loglik = r.beta, r.loglik
            if k == 0:
                u_site, var_site = r.u_hat, 1.0 / r.h_curv
            else:
                u_pat, var_pat = r.u_hat, 1.0 / r.h_curv
            more = [w for w in r.warnings if not w.startswith("singular")]
            converged = converged and r.converged
        return NestedResult(beta=np.asarray(beta, float), sds=sds, vcov_full=vcov,
                            loglik=loglik, u_site=u_site, u_patient=u_pat, var_site=var_site,
                            var_patient=var_pat, converged=converged, n_iter=int(res.nit),
                            grad_norm=gnorm, singular=(bool(sing_s), bool(sing_p)),
                            warnings=warnings + more + _extreme(sds, names))
    A = np.eye(p + 2)
    A[2:, 2:] = M
    vcov = matmul(matmul(A, pd_inverse(Hess / 2.0)), A.T)
    if not np.all(np.isfinite(np.diag(vcov)[2:])):
        vcov[:, :] = np.nan
        warnings.append("not_estimable: the Hessian is not positive definite; standard errors "
                        "are unavailable (separation or an over-parameterised model)")
    return NestedResult(beta=matvec(M, x[2:]), sds=np.array([ss, sp]), vcov_full=vcov,
                        loglik=-dev / 2.0, u_site=us_, u_patient=u_p, var_site=inv_ss,
                        var_patient=v_p, converged=converged, n_iter=int(res.nit),
                        grad_norm=gnorm, warnings=warnings + _extreme((ss, sp), names))


def _extreme(sds, names) -> list[str]:
    """The ``extreme_sd`` warning of each SD above :data:`EXTREME_SD`."""
    return [f"extreme_sd: the {n} SD is {float(v):.3g} logit units (> {EXTREME_SD:g}): the "
            f"Laplace optimum of a level whose groups' outcomes are nearly all alike "
            f"(separation at that level); the fixed effects are conditional on extreme "
            f"effects, not comparable with other fits'" for n, v in zip(names, sds)
            if v > EXTREME_SD]
