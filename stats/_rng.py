"""One place that turns a user's ``seed`` into a :class:`numpy.random.Generator`.

Every function that draws random numbers takes ``seed: int | Generator | None`` and
normalises it here (the arch habit), so that randomness is injected, never global.
:func:`check_seed` is the one rule for a seed a user wrote (plan, command line, API):
a whole number from 0 to ``MAX_SEED``; ``True``, ``1.5``, ``1e300``, ``inf`` and
negative numbers are refused with the value as written.
"""
from __future__ import annotations

import numpy as np

from stats.errors import ContractError

SeedLike = "int | np.random.Generator | np.random.SeedSequence | None"

#: the largest seed accepted (seeds are recorded in int64 table columns and manifests)
MAX_SEED = 2 ** 63 - 1
MSG_SEED = ("{key}: a seed must be a whole number from 0 to 2**63 - 1; got {value}; "
            "write an integer seed, e.g. 20261130")


def check_seed(seed, *, key: str = "seed") -> int | None:
    """Return ``seed`` as an ``int`` (``None`` stays ``None``), or raise
    :class:`~stats.schema.ContractError` naming ``key`` and the value as written."""
    if seed is None:
        return None
    ok = isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_))
    if not ok or not 0 <= int(seed) <= MAX_SEED:
        raise ContractError(MSG_SEED.format(key=key, value=_as_written(seed)))
    return int(seed)


def _as_written(value) -> str:
    if isinstance(value, str):
        return repr(value)
    return str(value.item() if isinstance(value, np.generic) else value)


def as_generator(seed: int | np.random.Generator | np.random.SeedSequence | None = None) -> np.random.Generator:
    """Return a Generator for ``seed``.

    ``None`` gives a fresh, OS-seeded generator; an ``int`` or ``SeedSequence`` a
    reproducible PCG64 generator; a ``Generator`` is returned unchanged (so a caller can
    thread one stream through several calls). Any other seed raises
    :class:`~stats.schema.ContractError` (:func:`check_seed`).
    """
    if isinstance(seed, (np.random.Generator, np.random.SeedSequence)):
        return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return np.random.default_rng(check_seed(seed))


def spawn(seed, n: int) -> list[np.random.Generator]:
    """``n`` independent child generators of ``seed`` (for blocks that may run on a cluster).

    The children depend only on ``seed`` and ``n``, never on where they run, so a Dask
    run gives the same numbers as a local one.
    """
    if isinstance(seed, np.random.Generator):
        return list(seed.spawn(n))
    if not isinstance(seed, np.random.SeedSequence):
        seed = np.random.SeedSequence(check_seed(seed))
    return [np.random.default_rng(s) for s in seed.spawn(n)]
