"""The minimiser of the GLMMs' Laplace deviance: L-BFGS, then Newton steps on the
finite-difference Hessian of the analytic gradient. Written here, with BLAS-free products
(:func:`stats._linalg.dot`) and clinrel's own Cholesky (:func:`stats._linalg.pd_solve`),
because scipy's L-BFGS-B calls BLAS ``ddot``/``daxpy`` and LAPACK ``dpotrf``: its iterates,
and so a fit whose optimum is flat (an SD running to the boundary or to ``extreme_sd``),
then differ in their last digits between OpenBLAS kernels on one machine.

The L-BFGS is the textbook two-loop recursion (Nocedal & Wright 2006, Algorithm 7.4) with
at most ``memory`` pairs, a backtracking line search with the Armijo condition
(``c1 = 1e-4``), and a pair kept only when it satisfies the curvature condition
``s'y > 1e-10 |y|^2``. It stops when the largest gradient component is at most ``gtol``,
when the deviance falls by at most ``ftol`` relative to its size (scipy's ``factr`` rule),
or after ``maxiter`` iterations; the Newton polish that follows gives the optimum its
last digits, whatever point the L-BFGS stops at.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stats._linalg import dot, pd_solve


@dataclass
class LbfgsResult:
    x: np.ndarray
    fun: float
    jac: np.ndarray
    nit: int
    message: str


def lbfgs(fun, x0, *, maxiter=500, memory=20, gtol=1e-4, ftol=1e-12) -> LbfgsResult:
    """Minimise ``fun`` (returns ``(value, gradient)``) from ``x0`` (module notes)."""
    x = np.asarray(x0, dtype=float).copy()
    f, g = fun(x)
    hist: list[tuple[np.ndarray, np.ndarray, float]] = []
    message = "iteration limit reached"
    it = 0
    for it in range(1, maxiter + 1):
        if not np.all(np.isfinite(g)):
            message = "the gradient is not finite"
            break
        if float(np.max(np.abs(g))) <= gtol:
            message = "largest gradient component at most gtol"
            it -= 1
            break
        q = g.copy()
        alphas = []
        for s, y, rho in reversed(hist):
            a = rho * dot(s, q)
            q = q - a * y
            alphas.append(a)
        if hist:
            s, y, _ = hist[-1]
            q = q * (dot(s, y) / dot(y, y))
        else:
            q = q / max(1.0, float(np.sqrt(dot(g, g))))
        for (s, y, rho), a in zip(hist, reversed(alphas)):
            b = rho * dot(y, q)
            q = q + (a - b) * s
        d = -q
        gd = dot(g, d)
        if not gd < 0:                      # not a descent direction: restart on -g
            hist.clear()
            d = -g / max(1.0, float(np.sqrt(dot(g, g))))
            gd = dot(g, d)
        t, ok = 1.0, False
        for _ in range(40):
            xn = x + t * d
            fn, gn = fun(xn)
            if np.isfinite(fn) and fn <= f + 1e-4 * t * gd:
                ok = True
                break
            t *= 0.5
        if not ok:
            message = "the line search found no decrease"
            break
        s, y = xn - x, gn - g
        sy = dot(s, y)
        if sy > 1e-10 * dot(y, y):
            hist.append((s, y, 1.0 / sy))
            if len(hist) > memory:
                hist.pop(0)
        drop = f - fn
        x, f, g = xn, fn, gn
        if drop <= ftol * max(abs(f), abs(fn), 1.0):
            message = "relative reduction of the deviance at most ftol"
            break
    return LbfgsResult(x=x, fun=float(f), jac=g, nit=int(it), message=message)


def minimise_laplace(obj, x0, maxiter):
    """L-BFGS, then up to 8 Newton steps (each halved up to 8 times until the deviance
    does not rise) on ``obj.hessian``. ``obj.value_grad(x)`` gives the deviance and its
    gradient. Returns ``(x, dev, grad, Hess, fresh, res)``: ``fresh`` is whether ``Hess``
    was computed at ``x``."""
    res = lbfgs(obj.value_grad, x0, maxiter=maxiter)
    x = res.x
    dev, grad = obj.value_grad(x)
    Hess = obj.hessian(x)
    fresh = True
    for _ in range(8):
        step = pd_solve(Hess, grad)
        if step is None:
            break
        t, accepted = 1.0, False
        for _ in range(8):
            cand = x - t * step
            d2, g2 = obj.value_grad(cand)
            if d2 <= dev + 1e-12 * max(1.0, abs(dev)):
                x, dev, grad, accepted = cand, d2, g2, True
                break
            t /= 2
        if not accepted:
            break
        moved = float(np.max(np.abs(t * step)))
        if moved > 1e-3:      # far from the Hessian's point: refresh it
            Hess, fresh = obj.hessian(x), True
        else:
            fresh = False
        if moved < 1e-8 or np.max(np.abs(grad)) < 1e-8:
            break
    return x, dev, grad, Hess, fresh, res
