"""stats.models._optim: the BLAS-free L-BFGS and the Laplace minimiser reach known minima
(Rosenbrock's (1, 1); a quadratic's solve), and stop by their stated rules."""
from __future__ import annotations

import numpy as np
import pytest

from stats.models._optim import lbfgs, minimise_laplace


def _rosenbrock(x):
    f = 100.0 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2
    g = np.array([-400.0 * x[0] * (x[1] - x[0] ** 2) - 2 * (1 - x[0]), 200.0 * (x[1] - x[0] ** 2)])
    return f, g


def test_lbfgs_finds_rosenbrock_minimum():
    res = lbfgs(_rosenbrock, [-1.2, 1.0], maxiter=2000, gtol=1e-8)
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-5)
    assert res.fun < 1e-10 and res.nit < 2000


def test_lbfgs_stops_at_the_iteration_limit():
    res = lbfgs(_rosenbrock, [-1.2, 1.0], maxiter=3)
    assert res.nit == 3 and res.message == "iteration limit reached"


class _Quadratic:
    """0.5 x'Ax - b'x with its exact Hessian: the Newton polish ends at A^-1 b."""

    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        m = rng.normal(size=(n + 3, n))
        self.A, self.b = m.T @ m + np.eye(n), rng.normal(size=n)

    def value_grad(self, x):
        return 0.5 * x @ self.A @ x - self.b @ x, self.A @ x - self.b

    def hessian(self, x):
        return self.A


@pytest.mark.parametrize("n", [1, 4, 12])
def test_minimise_laplace_polishes_to_the_exact_optimum(n):
    q = _Quadratic(n, n)
    x, dev, grad, H, fresh, res = minimise_laplace(q, np.zeros(n), maxiter=2)
    np.testing.assert_allclose(x, np.linalg.solve(q.A, q.b), rtol=1e-9, atol=1e-12)
    assert np.max(np.abs(grad)) < 1e-8 and res.nit <= 2
