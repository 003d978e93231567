"""One way to run independent blocks (bootstrap replicate blocks, per-model fits) here or
on a Dask distributed cluster.

``scheduler=None`` runs the blocks in this process; a ``dask.distributed.Client`` or a
scheduler address runs them on that cluster. Randomness never depends on where a block
runs: callers hand each block its own generator (``stats._rng.spawn``), so results are
identical either way, and are returned in block order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from stats.schema import ContractError

#: seconds to wait for a scheduler given by address before refusing it
CONNECT_TIMEOUT_S = 10
MSG_SCHEDULER = ("scheduler {address!r}: cannot connect ({detail}); start the Dask scheduler "
                 "(dask scheduler) and check the address, e.g. tcp://10.0.0.5:8786, or leave "
                 "the scheduler out to run here")


def connect(address: str):
    """A ``dask.distributed.Client`` for ``address``, or :class:`ContractError` naming it
    when nothing answers within ``CONNECT_TIMEOUT_S`` (or the address is malformed)."""
    from distributed import Client

    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, ValueError, TypeError) as exc:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ContractError(MSG_SCHEDULER.format(address=address, detail=detail)) from None


def map_blocks(fn: Callable, items: Sequence[tuple], *, shared: tuple = (), scheduler: Any = None) -> list:
    """``[fn(*shared, *item) for item in items]``, locally or on a Dask cluster.

    ``shared`` arguments (large arrays used by every block) are scattered to the workers
    once. A client made here from an address is closed afterwards; a given client is not.
    """
    if scheduler is None:
        return [fn(*shared, *item) for item in items]
    from distributed import Client

    client = scheduler if isinstance(scheduler, Client) else connect(scheduler)
    try:
        remote = client.scatter(list(shared), broadcast=True) if shared else []
        futures = [client.submit(fn, *remote, *item, pure=False) for item in items]
        return client.gather(futures)
    finally:
        if client is not scheduler:
            client.close()


def can_fork() -> bool:
    """Whether :func:`forked` (and the report's figure workers) may fork: Linux only
    (macOS forbids forking a process that has used system frameworks; Windows cannot)."""
    import multiprocessing as mp
    import sys

    return sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods()


def forked(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``fn()`` in a forked process (it inherits this one's memory: nothing is
    pickled on the way in) and return ``join()``: ``fn``'s value, pickled back, or its
    exception raised here; ``None`` when the process died without an answer (killed,
    out of memory), so that the caller can compute the same here."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            out = (True, fn())
        except BaseException as exc:  # handed to the parent, which raises it
            out = (False, exc)
        try:
            send.send(out)
        except Exception as exc:  # an unpicklable exception or value
            send.send((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        finally:
            send.close()

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send.close()

    def join():
        try:
            ok, value = recv.recv()
        except EOFError:
            proc.join()
            return None
        finally:
            recv.close()
        proc.join()
        if not ok:
            raise value
        return value

    return join
