"""Decisions on matrices by explicit rules with stated margins, never by whether a
factorisation happens to succeed.

A Cholesky factorisation of a numerically flat matrix succeeds on one CPU (or OpenBLAS
kernel) and fails on another; a standard error, a flag or a fallback decided that way is
not evidence. Here a symmetric matrix counts as **positive definite** when every diagonal
entry is positive and finite and the smallest eigenvalue of its correlation-scaled form
``C = D^-1/2 A D^-1/2`` (``D = diag(A)``, so ``diag(C) = 1`` and the test ignores the
units of the parameters) is at least :data:`PD_MARGIN`. Rounding moves those
eigenvalues by about 1e-15 and a finite-difference Hessian by about 1e-8 (central) to
1e-5 (forward steps); a flat direction (a separated or aliased term) sits near 1e-15
and an estimable model's smallest eigenvalue is typically above 1e-2, so the margin
1e-6 lies far from both.
"""
from __future__ import annotations

import numpy as np

#: smallest eigenvalue of the correlation-scaled matrix for it to count as positive
#: definite (condition number at most 1e6 on that scale)
PD_MARGIN = 1e-6


def is_positive_definite(a: np.ndarray, margin: float = PD_MARGIN) -> bool:
    """True when the symmetric matrix ``a`` is positive definite by the rule above."""
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        return False
    if a.size == 0:
        return True
    d = np.diag(a)
    if not (np.all(np.isfinite(a)) and np.all(d > 0)):
        return False
    s = 1.0 / np.sqrt(d)
    c = a * np.outer(s, s)
    c = 0.5 * (c + c.T)
    return bool(np.linalg.eigvalsh(c)[0] >= margin)


def pd_inverse(a: np.ndarray, margin: float = PD_MARGIN) -> np.ndarray:
    """The inverse of the symmetric matrix ``a`` when it is positive definite by the rule
    of :func:`is_positive_definite`; a matrix of NaN otherwise. The inverse is computed
    on the correlation scale (``D^-1/2 C^-1 D^-1/2``), symmetrised."""
    a = np.asarray(a, dtype=float)
    if not is_positive_definite(a, margin):
        return np.full_like(a, np.nan)
    if a.size == 0:
        return a.copy()
    s = 1.0 / np.sqrt(np.diag(a))
    c = a * np.outer(s, s)
    w, v = np.linalg.eigh(0.5 * (c + c.T))
    inv = (v / w) @ v.T * np.outer(s, s)
    return 0.5 * (inv + inv.T)
