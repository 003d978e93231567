"""stats._linalg: products and solves without BLAS, and the stated rules (positive
definite by margin, zero variance by margin) that replace decisions taken on rounding."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stats import _linalg as la


def _spd(rng, n, cond_scale=True):
    a = rng.normal(size=(n + 4, n))
    a = a.T @ a
    if cond_scale:   # wildly different units per parameter
        d = np.diag(rng.uniform(1e-3, 1e3, n))
        a = d @ a @ d
    return a


@pytest.mark.parametrize("n", [1, 2, 5, 20])
def test_pd_inverse_solve_logdet_equal_lapack(n):
    rng = np.random.default_rng(n)
    a = _spd(rng, n)
    b = rng.normal(size=n)
    np.testing.assert_allclose(la.pd_inverse(a) @ a, np.eye(n), atol=1e-10)
    np.testing.assert_allclose(la.pd_solve(a, b), np.linalg.solve(a, b), rtol=1e-9)
    np.testing.assert_allclose(la.pd_logdet(a), np.linalg.slogdet(a)[1], rtol=1e-12)
    stack = np.stack([a, _spd(rng, n)])
    bs = rng.normal(size=(2, n))
    x, ok = la.pd_solve_stack(stack, bs)
    assert ok.all()
    np.testing.assert_allclose(x, np.linalg.solve(stack, bs[..., None])[..., 0], rtol=1e-9)
    xm, _ = la.pd_solve_stack(stack, np.stack([np.eye(n)] * 2))
    np.testing.assert_allclose(xm, np.linalg.inv(stack), rtol=1e-8, atol=1e-12)


def test_flat_matrices_are_refused_whatever_the_factorisation_does():
    """A flat direction (smallest eigenvalue 1e-15 of the correlation-scaled matrix, as a
    separated term's) is not positive definite even where Cholesky happens to succeed."""
    a = np.array([[1.0, 1.0], [1.0, 1.0 + 1e-12]])
    np.linalg.cholesky(a)                      # LAPACK factors it on this CPU ...
    assert not la.is_positive_definite(a)      # ... the rule refuses it
    assert np.isnan(la.pd_inverse(a)).all() and la.pd_solve(a, np.ones(2)) is None
    assert np.isnan(la.pd_logdet(a))
    x, ok = la.pd_solve_stack(np.stack([np.eye(2), a]), np.ones((2, 2)))
    assert ok.tolist() == [True, False] and np.isnan(x[1]).all() and np.isfinite(x[0]).all()
    # the margin is stated: just above it counts, just below it does not
    c = lambda e: np.array([[1.0, np.sqrt(1 - e)], [np.sqrt(1 - e), 1.0]])   # noqa: E731
    assert la.is_positive_definite(c(4e-6)) and not la.is_positive_definite(c(1e-6))


def test_standardize_maps_back_and_centres_an_uncentred_year():
    rng = np.random.default_rng(3)
    year = rng.integers(2015, 2024, 500).astype(float)
    X = np.column_stack([np.ones(500), year, rng.normal(size=500)])
    M, Minv = la.standardize(X)
    np.testing.assert_allclose(M @ Minv, np.eye(3), atol=1e-12)
    Xs = X @ M
    np.testing.assert_allclose(Xs[:, 1:].mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(Xs[:, 1:].std(axis=0), 1, rtol=1e-12)
    # intercept and year are nearly collinear before centring, not after
    assert not la.is_positive_definite(X.T @ X)
    assert la.is_positive_definite(Xs.T @ Xs)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(0, 2 ** 32 - 1))
def test_products_equal_blas(n, p, seed):
    rng = np.random.default_rng(seed)
    X, b, w = rng.normal(size=(n, p)), rng.normal(size=p), rng.uniform(size=n)
    np.testing.assert_allclose(la.matvec(X, b), X @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(la.rmatvec(X, w), X.T @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(la.gram(X, w), (X * w[:, None]).T @ X, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(la.gram(X), X.T @ X, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(la.matmul(X.T, X), X.T @ X, rtol=1e-12, atol=1e-12)


def test_clean_variance_rule():
    scale = np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    var = np.array([1e-19, -1e-19, -1e-6, 0.3, 0.0])
    out = la.clean_variance(var, scale)
    assert out[0] == 0.0 and out[1] == 0.0 and np.isnan(out[2]) and out[3] == 0.3
    assert out[4] == 0.0
    assert np.isnan(la.clean_variance(np.nan, 1.0))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 20])
def test_sym_eigh_equals_lapack(n):
    """Jacobi eigenvalues equal LAPACK's to 1e-12 (relative to the largest), and the
    eigenvectors are orthonormal and reconstruct the matrix, for a single matrix and a
    stack, definite or not."""
    rng = np.random.default_rng(10 + n)
    a = rng.normal(size=(n, n))
    a = a + a.T
    lam, V = la.sym_eigh(a)
    scale = np.max(np.abs(lam))
    np.testing.assert_allclose(lam, np.linalg.eigvalsh(a), atol=1e-12 * scale)
    np.testing.assert_allclose(V.T @ V, np.eye(n), atol=1e-12)
    np.testing.assert_allclose(V @ np.diag(lam) @ V.T, a, atol=1e-12 * scale)
    stack = np.stack([a, _spd(rng, n, cond_scale=False), np.full((n, n), np.nan)])
    lam_s, V_s = la.sym_eigh(stack)
    np.testing.assert_allclose(lam_s[:2], np.linalg.eigvalsh(stack[:2]), atol=1e-11 * scale)
    assert np.isnan(lam_s[2]).all() and np.isnan(V_s[2]).all()


def test_pivoted_solve_on_aliased_and_separated_information():
    """An aliased column (exactly flat) gets a zero step and the others the Newton step
    of the remaining block (a solution of the consistent system, as lstsq's); a column
    whose information has fallen to 1e-14 of the largest (a separated term) gets no step;
    a positive definite matrix gives the plain solve."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 4))
    X = np.column_stack([X, X[:, 0] - 2 * X[:, 2]])
    a = X.T @ X
    b = X.T @ rng.normal(size=40)
    x = la.pivoted_solve(a, b)
    np.testing.assert_allclose(a @ x, b, atol=1e-10 * np.abs(b).max())
    assert np.count_nonzero(x == 0) == 1
    full = X[:, :4].T @ X[:, :4]
    np.testing.assert_allclose(la.pivoted_solve(full, b[:4]), np.linalg.solve(full, b[:4]),
                               rtol=1e-10)
    sep = full.copy()
    sep[3, :] *= 1e-7
    sep[:, 3] *= 1e-7
    bs = b[:4].copy()
    bs[3] *= 1e-14
    xs = la.pivoted_solve(sep, bs)
    assert xs[3] == 0.0
    np.testing.assert_allclose(xs[:3], np.linalg.solve(sep[:3, :3], bs[:3]), rtol=1e-8)
    assert np.all(la.pivoted_solve(np.zeros((2, 2)), np.ones(2)) == 0.0)
