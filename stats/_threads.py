"""One BLAS thread: the single thread-limiting helper of ``stats``.

The model fits (matrix-vector sized products) and the paired-seed CRS bootstrap (small
``(block, S) x (S, E*C)`` products) run faster with one BLAS thread: OpenBLAS's spinning
threads only add contention on a busy machine (2-3x slower fits, 10-50x slower CRS
blocks). Parallelism in ``stats`` comes from blocks of work (``stats._parallel``), not
from BLAS.
"""
from __future__ import annotations

import contextlib

__all__ = ["one_blas_thread"]


def one_blas_thread():
    """A context manager limiting BLAS to one thread (``threadpoolctl``); a no-op context
    when threadpoolctl is not installed (it ships with scikit-learn)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")
