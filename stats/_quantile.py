"""Quantiles of bootstrap replicates: the one percentile-interval helper of ``stats``.

Every bootstrap in ``stats`` (cluster bootstrap, ECE bootstrap, paired-seed CRS
bootstrap) takes its percentile limits here. The rule is numpy's default ("linear",
Hyndman & Fan type 7) on each column's non-NaN replicates, computed as numpy computes it
(the same interpolation formula, so the limits equal ``np.quantile`` / ``np.nanquantile``
to the bit; tested in tests/stats/test_properties.py). Replicates that are NaN (not estimable)
are left out; a column without any finite replicate gives NaN.
"""
from __future__ import annotations

import numpy as np

__all__ = ["column_quantiles", "percentile_interval"]


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``a + (b - a) t``, evaluated from ``b`` when ``t >= 0.5`` (numpy's ``_lerp``)."""
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def column_quantiles(reps, levels) -> np.ndarray:
    """Quantiles of each column of ``reps`` (B, ...) with NaN replicates dropped.

    Parameters
    ----------
    reps : array (B, ...)
        Replicates along axis 0.
    levels : array (L,) or (L, ...)
        Quantile levels in [0, 1]: one per row (same for every column) or one per row and
        column (shape ``(L, *reps.shape[1:])``, e.g. BCa-adjusted levels).

    Returns
    -------
    array (L, ...)
        ``np.nanquantile(reps[:, j], levels[:, j])`` for every column j (linear
        interpolation); NaN for a column with no non-NaN replicate.
    """
    x = np.asarray(reps)
    if x.dtype.kind not in "fc":
        x = x.astype("float64")
    srt = np.sort(x, axis=0)                                   # NaN sort last
    k = (~np.isnan(x)).sum(axis=0)                             # valid values per column
    q = np.asarray(levels, dtype="float64")
    q = q.reshape(q.shape + (1,) * (x.ndim - 1)) if q.ndim == 1 else q
    q = np.broadcast_to(q, (q.shape[0], *x.shape[1:]))
    pos = (k - 1) * q
    lo = np.clip(np.floor(pos), 0, None).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(k - 1, 0))
    a = np.take_along_axis(srt, np.minimum(lo, srt.shape[0] - 1), axis=0)
    b = np.take_along_axis(srt, hi, axis=0)
    out = _lerp(a, b, pos - lo)
    return np.where(k > 0, out, np.nan)


def percentile_interval(reps, conf_level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed percentile interval per column of ``reps`` (B, ...), NaN replicates
    dropped: the ``(1 - conf_level) / 2`` and ``(1 + conf_level) / 2`` quantiles
    (:func:`column_quantiles`). Returns ``(low, high)``, each of shape ``reps.shape[1:]``
    (0-d arrays for a 1-d ``reps``)."""
    alpha = 1.0 - conf_level
    lo, hi = column_quantiles(reps, [alpha / 2, 1 - alpha / 2])
    return lo, hi
