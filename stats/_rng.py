"""One place that turns a user's ``seed`` into a :class:`numpy.random.Generator`.

Every function that draws random numbers takes ``seed: int | Generator | None`` and
normalises it here (the arch habit), so that randomness is injected, never global.
"""
from __future__ import annotations

import numpy as np

SeedLike = "int | np.random.Generator | np.random.SeedSequence | None"


def as_generator(seed: int | np.random.Generator | np.random.SeedSequence | None = None) -> np.random.Generator:
    """Return a Generator for ``seed``.

    ``None`` gives a fresh, OS-seeded generator; an ``int`` or ``SeedSequence`` a
    reproducible PCG64 generator; a ``Generator`` is returned unchanged (so a caller can
    thread one stream through several calls).
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, (int, np.integer, np.random.SeedSequence)):
        if isinstance(seed, (int, np.integer)) and seed < 0:
            raise ValueError(f"seed must be a non-negative integer; got {seed}")
        return np.random.default_rng(seed)
    raise TypeError(
        f"seed must be an int, a numpy Generator, a SeedSequence or None; got {type(seed).__name__}"
    )


def spawn(seed, n: int) -> list[np.random.Generator]:
    """``n`` independent child generators of ``seed`` (for blocks that may run on a cluster).

    The children depend only on ``seed`` and ``n``, never on where they run, so a Dask
    run gives the same numbers as a local one.
    """
    if isinstance(seed, np.random.Generator):
        return list(seed.spawn(n))
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return [np.random.default_rng(s) for s in ss.spawn(n)]
