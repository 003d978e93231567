"""Linear algebra whose results do not depend on the BLAS kernel, and decisions on
matrices by explicit rules with stated margins.

**Why.** NumPy's ``@``, ``solve``, ``inv`` and ``eigh`` call OpenBLAS / LAPACK, whose
kernels (chosen per CPU: Haswell, SkylakeX, Zen, ...) sum in different orders: the same
fit then differs in its last bits from one CPU to the next, and a finite-difference
Hessian or a tail p-value amplifies that to 1e-12. Every model fit whose numbers clinrel
writes uses the functions below instead: ``np.einsum`` (NumPy's own loops, no BLAS) for
products, a Cholesky factorisation written here for solves and inverses, a pivoted
Cholesky for the steps along flat directions (where ``lstsq`` was), and Jacobi rotations
for eigen-decompositions (the GLMMs' minimiser, :mod:`stats.models._optim`, is written
with them too). On one machine the results are then the same whatever
``OPENBLAS_CORETYPE`` or thread count. Decisions (positive definite or not) may still use
LAPACK's eigenvalues: they are taken against a margin far from its rounding.

**Positive definite, by rule.** A Cholesky factorisation of a numerically flat matrix
succeeds on one CPU and fails on another; a standard error, a flag or a fallback decided
that way is not evidence. Here a symmetric matrix counts as positive definite when every
diagonal entry is positive and finite and the smallest eigenvalue of its
correlation-scaled form ``C = D^-1/2 A D^-1/2`` (``D = diag(A)``, so ``diag(C) = 1`` and
the rule ignores the units of the parameters) is at least :data:`PD_MARGIN`. Rounding
moves those eigenvalues by about 1e-15 and a finite-difference Hessian's by about 1e-8
(central) to 1e-5 (forward steps); a flat direction (a separated or aliased term) sits
near 1e-15 and an estimable model's smallest eigenvalue is typically above 1e-2, so the
margin 1e-6 lies far from both.
"""
from __future__ import annotations

import numpy as np

#: smallest eigenvalue of the correlation-scaled matrix for it to count as positive
#: definite (condition number at most 1e6 on that scale)
PD_MARGIN = 1e-6


# ----------------------------------------------------------------- products (no BLAS)

def dot(a: np.ndarray, b: np.ndarray) -> float:
    """``a @ b`` for 1-D arrays, without BLAS (NumPy's ``@`` on vectors is BLAS ``ddot``,
    whose kernels sum in different orders)."""
    return float(np.einsum("i,i->", a, b))


def matvec(X: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``X @ b`` for a 2-D ``X`` and 1-D ``b``, without BLAS."""
    return np.einsum("ij,j->i", X, b)


def rmatvec(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``X.T @ w`` for a 2-D ``X`` and 1-D ``w``, without BLAS."""
    return np.einsum("ij,i->j", X, w)


def matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A @ B`` for 2-D arrays, without BLAS (for the small p x p products)."""
    return np.einsum("ik,kj->ij", A, B)


def gram(X: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """``X.T @ diag(w) @ X`` without BLAS (``w`` None: ``X.T @ X``)."""
    XT = np.ascontiguousarray(X.T)
    XwT = XT if w is None else XT * w
    return np.einsum("ji,ki->jk", XwT, XT)


def quad(a: np.ndarray, V: np.ndarray, b: np.ndarray | None = None) -> float:
    """``a' V b`` (``b`` None: ``a' V a``), without BLAS."""
    return float(np.einsum("i,ij,j->", a, V, a if b is None else b))


def standardize(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``M`` with ``X @ M`` centred (when X has an intercept column) and unit-SD columns,
    and its inverse (written out, not computed by LAPACK). Fits work on
    ``beta' = M^-1 beta``, which is far better conditioned, and decide positive
    definiteness there: an intercept and an uncentred covariate (a calendar year) are
    nearly collinear only before centring. A column is constant when its SD is at most
    1e-12 times its mean's magnitude (the intercept: SD 0, mean 1)."""
    p = X.shape[1]
    M = np.eye(p)
    Minv = np.eye(p)
    sd = X.std(axis=0)
    mean = X.mean(axis=0)
    const = sd <= 1e-12 * np.maximum(1.0, np.abs(mean))
    icpt = [j for j in range(p) if const[j] and mean[j] == 1.0]
    for j in range(p):
        if not const[j]:
            M[j, j] = 1.0 / sd[j]
            Minv[j, j] = sd[j]
            if icpt:
                M[icpt[0], j] = -mean[j] / sd[j]
                Minv[icpt[0], j] = mean[j]
    return M, Minv


# ----------------------------------------------------------------- rules

#: a variance within this fraction of its scale (the positive terms it is made of) is
#: zero; below minus that, it is not estimable
ZERO_VARIANCE_REL = 1e-12


def clean_variance(var, scale):
    """A computed variance with its rounding noise decided by rule, elementwise: within
    ``ZERO_VARIANCE_REL * scale`` of 0 it is exactly 0 (a mathematically zero variance,
    e.g. identical placements, comes out as +-1e-19); below ``-ZERO_VARIANCE_REL * scale``
    it is NaN (not estimable: a negative variance estimate); else unchanged. ``scale`` is a
    non-negative quantity of the same units that the variance is built from (the sum of
    its positive terms, or ``p (1 - p) / n`` for a proportion)."""
    var = np.asarray(var, dtype=float)
    tol = ZERO_VARIANCE_REL * np.abs(np.asarray(scale, dtype=float))
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(var) <= tol, 0.0, np.where(var < -tol, np.nan, var))


def _correlation_scaled(a: np.ndarray):
    d = np.diag(a)
    if not (np.all(np.isfinite(a)) and np.all(d > 0)):
        return None, None
    s = 1.0 / np.sqrt(d)
    c = a * np.outer(s, s)
    return 0.5 * (c + c.T), s


def is_positive_definite(a: np.ndarray, margin: float = PD_MARGIN) -> bool:
    """True when the symmetric matrix ``a`` is positive definite by the rule above
    (smallest eigenvalue of the correlation-scaled matrix at least ``margin``)."""
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        return False
    if a.size == 0:
        return True
    c, _ = _correlation_scaled(a)
    if c is None:
        return False
    return bool(np.linalg.eigvalsh(c)[0] >= margin)


# ----------------------------------------------------------------- factorisations
# Written for a stack of matrices (leading batch axes, ``(..., n, n)``): a loop over the
# n columns, vectorised over the stack, with NumPy's own sums (no LAPACK).

def _cholesky(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower Cholesky factors of a stack of symmetric matrices, and a bool per matrix:
    whether every pivot was positive (where not, that matrix's factor is garbage)."""
    n = c.shape[-1]
    L = np.zeros_like(c)
    ok = np.ones(c.shape[:-2], dtype=bool)
    for j in range(n):
        piv = c[..., j, j] - np.sum(L[..., j, :j] * L[..., j, :j], axis=-1)
        ok &= piv > 0
        d = np.sqrt(np.where(piv > 0, piv, 1.0))
        L[..., j, j] = d
        if j + 1 < n:
            L[..., j + 1:, j] = (c[..., j + 1:, j] - np.sum(
                L[..., j + 1:, :j] * L[..., j, None, :j], axis=-1)) / d[..., None]
    return L, ok


def _forward(L: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Solve ``L Y = B`` (L lower triangular; B ``(..., n, k)``)."""
    n = L.shape[-1]
    Y = np.zeros(np.broadcast_shapes(L.shape[:-2], B.shape[:-2]) + B.shape[-2:])
    for i in range(n):
        Y[..., i, :] = (B[..., i, :] - np.sum(L[..., i, :i, None] * Y[..., :i, :], axis=-2)
                        ) / L[..., i, i, None]
    return Y


def _backward(L: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Solve ``L' X = Y`` (L lower triangular; Y ``(..., n, k)``)."""
    n = L.shape[-1]
    X = np.zeros_like(Y)
    for i in range(n - 1, -1, -1):
        X[..., i, :] = (Y[..., i, :] - np.sum(L[..., i + 1:, i, None] * X[..., i + 1:, :],
                                              axis=-2)) / L[..., i, i, None]
    return X


def _scaled_stack(a: np.ndarray, margin: float):
    """Correlation-scaled stack, its scales, and the positive-definite rule per matrix."""
    d = np.diagonal(a, axis1=-2, axis2=-1)
    good = np.all(np.isfinite(a), axis=(-2, -1)) & np.all(d > 0, axis=-1)
    s = 1.0 / np.sqrt(np.where(d > 0, d, 1.0))
    c = a * s[..., :, None] * s[..., None, :]
    c = 0.5 * (c + np.swapaxes(c, -1, -2))
    c = np.where(good[..., None, None], np.nan_to_num(c), np.eye(a.shape[-1]))
    good &= np.linalg.eigvalsh(c)[..., 0] >= margin
    return c, s, good


def pd_inverse(a: np.ndarray, margin: float = PD_MARGIN) -> np.ndarray:
    """The inverse of each symmetric matrix of ``a`` (``(n, n)`` or a stack
    ``(..., n, n)``) that is positive definite by the rule of
    :func:`is_positive_definite`; NaN for the others. Computed on the correlation scale
    by clinrel's own Cholesky (no BLAS or LAPACK), symmetrised."""
    a = np.asarray(a, dtype=float)
    if a.shape[-1] == 0:
        return a.copy()
    c, s, good = _scaled_stack(a, margin)
    L, ok = _cholesky(c)
    good &= ok
    eye = np.broadcast_to(np.eye(a.shape[-1]), a.shape)
    Y = _forward(L, eye)
    inv = np.einsum("...ki,...kj->...ij", Y, Y) * s[..., :, None] * s[..., None, :]
    inv = 0.5 * (inv + np.swapaxes(inv, -1, -2))
    return np.where(good[..., None, None], inv, np.nan)


def pd_solve(a: np.ndarray, b: np.ndarray, margin: float = PD_MARGIN) -> np.ndarray | None:
    """``a^-1 b`` for a positive definite ``a`` (the rule above), or None when it is not.
    ``b`` may be 1-D or 2-D (one matrix ``a``)."""
    a = np.asarray(a, dtype=float)
    c, s, good = _scaled_stack(a, margin)
    L, ok = _cholesky(c)
    if not (good and ok):
        return None
    b = np.asarray(b, dtype=float)
    B = (b if b.ndim == 2 else b[:, None]) * s[:, None]
    X = _backward(L, _forward(L, B)) * s[:, None]
    return X if b.ndim == 2 else X[:, 0]


def pd_solve_stack(a: np.ndarray, b: np.ndarray, margin: float = PD_MARGIN
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``a_g^-1 b_g`` for a stack ``a`` (``(G, n, n)``) and ``b`` (``(G, n)`` vectors or
    ``(G, n, k)`` matrices), and a bool per matrix: positive definite by the rule (where
    False, the solution is NaN)."""
    a = np.asarray(a, dtype=float)
    c, s, good = _scaled_stack(a, margin)
    L, ok = _cholesky(c)
    good &= ok
    b = np.asarray(b, dtype=float)
    vector = b.ndim == a.ndim - 1
    B = (b[..., None] if vector else b) * s[..., :, None]
    X = _backward(L, _forward(L, B)) * s[..., :, None]
    X = np.where(good[..., None, None], X, np.nan)
    return (X[..., 0] if vector else X), good


def pd_logdet(a: np.ndarray, margin: float = PD_MARGIN) -> np.ndarray:
    """``log det`` of each symmetric matrix of ``a`` (``(n, n)`` or a stack) that is
    positive definite by the rule; NaN for the others (clinrel's own Cholesky)."""
    a = np.asarray(a, dtype=float)
    c, s, good = _scaled_stack(a, margin)
    L, ok = _cholesky(c)
    good &= ok
    diag = np.diagonal(L, axis1=-2, axis2=-1)
    val = 2.0 * np.sum(np.log(np.where(diag > 0, diag, 1.0)), axis=-1) - 2.0 * np.sum(
        np.log(s), axis=-1)
    return np.where(good, val, np.nan)


# ------------------------------------------------- eigen-decomposition (no LAPACK)

def _round_robin(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The n - 1 rounds (n even; odd n gets a dummy index, dropped) of disjoint pairs
    ``(p, q)`` that together meet every pair once: the tournament schedule of parallel
    Jacobi (Brent and Luk 1985)."""
    m = n + (n % 2)
    players = list(range(m))
    rounds = []
    for _ in range(m - 1):
        pairs = [(players[k], players[m - 1 - k]) for k in range(m // 2)]
        pairs = [(min(a, b), max(a, b)) for a, b in pairs if a < n and b < n]
        rounds.append((np.array([a for a, _ in pairs], np.int64),
                       np.array([b for _, b in pairs], np.int64)))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def sym_eigh(a: np.ndarray, *, max_sweeps: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors (columns) of each symmetric matrix of
    ``a`` (``(n, n)`` or a stack ``(..., n, n)``), by Jacobi rotations written with
    NumPy's elementwise operations (LAPACK's ``dsyevd`` sums in kernel-dependent orders):
    each sweep meets every pair ``(p, q)`` once, in n - 1 rounds of disjoint pairs rotated
    together (parallel Jacobi). Sweeps stop when every off-diagonal entry is at most
    1e-15 times the matrix's Frobenius norm (quadratic convergence: typically 6-10
    sweeps). For the small p x p matrices of the fits; a non-finite matrix gives NaN."""
    A = np.array(a, dtype=float, copy=True)
    squeeze = A.ndim == 2
    if squeeze:
        A = A[None]
    A = 0.5 * (A + np.swapaxes(A, -1, -2))
    n = A.shape[-1]
    finite = np.all(np.isfinite(A), axis=(-2, -1))
    A = np.where(finite[..., None, None], A, 0.0)
    V = np.broadcast_to(np.eye(n), A.shape).copy()
    tol = 1e-15 * np.sqrt(np.sum(A * A, axis=(-2, -1)))[..., None]
    iu = np.triu_indices(n, 1)
    rounds = _round_robin(n)
    for _ in range(max_sweeps):
        if n < 2 or np.all(np.abs(A[..., iu[0], iu[1]]) <= tol):
            break
        for P, Q in rounds:
            apq = A[..., P, Q]                                   # (..., pairs)
            rot = np.abs(apq) > tol
            if not rot.any():
                continue
            theta = (A[..., Q, Q] - A[..., P, P]) / (2.0 * np.where(rot, apq, 1.0))
            t = np.sign(theta) / (np.abs(theta) + np.sqrt(theta * theta + 1.0))
            t = np.where(rot, np.where(theta == 0, 1.0, t), 0.0)
            c = 1.0 / np.sqrt(t * t + 1.0)
            s = t * c
            cc, ss = c[..., None, :], s[..., None, :]            # over columns P, Q
            Ap, Aq = A[..., :, P], A[..., :, Q]
            A[..., :, P], A[..., :, Q] = cc * Ap - ss * Aq, ss * Ap + cc * Aq
            Vp, Vq = V[..., :, P], V[..., :, Q]
            V[..., :, P], V[..., :, Q] = cc * Vp - ss * Vq, ss * Vp + cc * Vq
            cr, sr = c[..., :, None], s[..., :, None]            # over rows P, Q
            Ap, Aq = A[..., P, :], A[..., Q, :]
            A[..., P, :], A[..., Q, :] = cr * Ap - sr * Aq, sr * Ap + cr * Aq
    lam = np.diagonal(A, axis1=-2, axis2=-1).copy()
    order = np.argsort(lam, axis=-1, kind="stable")
    lam = np.take_along_axis(lam, order, axis=-1)
    V = np.take_along_axis(V, order[..., None, :], axis=-1)
    lam = np.where(finite[..., None], lam, np.nan)
    V = np.where(finite[..., None, None], V, np.nan)
    return (lam[0], V[0]) if squeeze else (lam, V)


#: pivots of :func:`pivoted_solve` at most this share of the largest diagonal entry
#: count as 0 (a flat direction)
FLAT_REL = 1e-12


def pivoted_solve(a: np.ndarray, b: np.ndarray, rel: float = FLAT_REL) -> np.ndarray:
    """The step ``a^- b`` for a symmetric positive semi-definite ``a`` (an information
    matrix) that is not positive definite by the rule: a Cholesky factorisation with
    symmetric pivoting (largest remaining diagonal first) stops when the largest
    remaining pivot is at most ``rel`` times the largest diagonal entry; the parameters
    factored get the Newton step of their block, the others (an aliased column, or a
    separated one whose information has fallen to rounding level) a zero step. This is
    the basic solution of the rank-revealing factorisation, where ``np.linalg.lstsq``
    (the minimum-norm one, through LAPACK) sums in kernel-dependent orders and inverts
    directions chosen by a machine-epsilon cutoff. No BLAS or LAPACK; O(p) NumPy
    operations on p x p arrays."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    n = len(b)
    out = np.zeros(n)
    d = np.diag(a)
    usable = np.isfinite(d) & (d > 0) & np.all(np.isfinite(a), axis=1) & np.isfinite(b)
    if not usable.any():
        return out
    S = np.where(usable[:, None] & usable[None, :], 0.5 * (a + a.T), 0.0)
    cut = rel * float(np.max(d[usable]))
    L = np.zeros((n, n))
    order: list[int] = []
    free = usable.copy()
    for _ in range(n):
        diag = np.where(free, np.diag(S), -np.inf)
        j = int(np.argmax(diag))
        if not diag[j] > cut:
            break
        col = S[:, j] / np.sqrt(S[j, j])
        col[~free] = 0.0
        L[:, len(order)] = col
        S = S - col[:, None] * col[None, :]
        free[j] = False
        order.append(j)
    if not order:
        return out
    idx = np.array(order)
    Lk = L[np.ix_(idx, np.arange(len(idx)))]          # lower triangular in pivot order
    x = _backward(Lk, _forward(Lk, b[idx][:, None]))[:, 0]
    out[idx] = x
    return out
