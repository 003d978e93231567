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

from stats.errors import ContractError

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


#: seconds a forked child may go without using CPU before :func:`forked` gives up on it
STALL_SECONDS = 60.0


def _cpu_ticks(pid: int) -> int | None:
    """The CPU time (user + system, clock ticks) process ``pid`` has used, from
    ``/proc/<pid>/stat``; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])    # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def forked(fn: Callable[[], Any], *, stall: float | None = None) -> Callable[[], Any]:
    """Start ``fn()`` in a forked process (it inherits this one's memory: nothing is
    pickled on the way in) and return ``join()``: ``fn``'s value, pickled back, or its
    exception raised here; ``None`` when the process gave no answer, so that the caller
    can compute the same here: it died (killed, out of memory), or it stalled.

    Stalled: the child used no CPU for ``stall`` seconds (default ``STALL_SECONDS``) while
    its answer was awaited. ``fn`` is pure computation, so a child that stops computing
    without answering is deadlocked: a lock or a native thread pool that another thread of
    this process held when it forked (fork copies only the forking thread), which no one
    in the child will ever release. It is killed and a ``RuntimeWarning`` says so.
    """
    import multiprocessing as mp
    import time
    import warnings

    stall = STALL_SECONDS if stall is None else float(stall)
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

    def stalled() -> bool:
        """Wait for the answer; True if the child stopped using CPU for ``stall`` s."""
        last, since = _cpu_ticks(proc.pid), time.monotonic()
        while not recv.poll(min(1.0, stall / 4)):
            now = _cpu_ticks(proc.pid)
            if now is None or now != last:      # computing (or gone: recv sees EOF)
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= stall:
                return True
        return False

    def join():
        try:
            if stalled():
                proc.kill()
                proc.join()
                warnings.warn(f"a forked worker used no CPU for {stall:.0f} s without "
                              "answering (deadlocked); it was stopped and its work is done "
                              "in this process", RuntimeWarning, stacklevel=2)
                return None
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
