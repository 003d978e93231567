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
