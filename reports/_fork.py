"""Run independent report tasks (drawing a figure, rendering a document) in forked
processes.

Tasks are closures over the study, sections and plots, which do not pickle (plotnine
plots hold local functions), so the workers are forked and inherit them; only task
indices go to the workers and only the tasks' small return values come back. Every task
writes its own files, computed from its own inputs alone, so the outputs are the same
bytes whether the tasks run here, one after another, or in any number of processes.
Where the OS cannot fork (``stats._parallel.can_fork``), or with one job, the tasks run
here in order. A worker that dies is not waited for: its tasks run here instead.

Tasks that must not run in a forked child are named in ``here``: a library whose native
thread pool this process may already have started (typst's, behind the PDF) would wait
forever in the child for threads that fork did not copy; those tasks run in this process
while the workers run the others.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Sequence
from typing import Any

from stats._parallel import can_fork

#: the tasks of the running :func:`run_tasks` (forked workers inherit them)
_TASKS: list[Callable[[], Any]] = []


def _call(i: int) -> tuple[int, Any]:
    return i, _TASKS[i]()


def run_tasks(tasks: Sequence[Callable[[], Any]], *, jobs: int = 1,
              order: Sequence[int] | None = None, here: Collection[int] = (),
              done: Callable[[], None] = lambda: None) -> list:
    """``[task() for task in tasks]``, in up to ``jobs`` forked processes.

    ``order``: the order to hand tasks out (longest first balances the load); results
    come back in task order whatever the order of completion. ``here``: indices of tasks
    that run in this process (while the workers run the rest). ``done()`` is called in
    this process as each task finishes (a progress bar). An exception in a task is raised
    here."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    tasks = list(tasks)
    order = list(range(len(tasks))) if order is None else list(order)
    away = [i for i in order if i not in here]
    jobs = max(1, min(int(jobs), len(tasks)))
    out: dict[int, Any] = {}
    if jobs == 1 or not away or not can_fork():
        for i in order:
            out[i] = tasks[i]()
            done()
        return [out[i] for i in range(len(tasks))]
    if _TASKS:
        raise RuntimeError("run_tasks is not re-entrant")
    import multiprocessing as mp

    _TASKS[:] = tasks
    try:
        with ProcessPoolExecutor(min(jobs, len(away)), mp_context=mp.get_context("fork")) as pool:
            try:
                futures = [pool.submit(_call, i) for i in away]
                for i in order:
                    if i in here:
                        out[i] = tasks[i]()
                        done()
                try:
                    for fut in as_completed(futures):
                        i, value = fut.result()
                        out[i] = value
                        done()
                except BrokenProcessPool:   # a worker died (killed, out of memory)
                    pass
            except BaseException:
                _stop_workers(pool)
                raise
    finally:
        _TASKS.clear()
    for i in order:                     # what a dead worker left undone
        if i not in out:
            out[i] = tasks[i]()
            done()
    return [out[i] for i in range(len(tasks))]


#: seconds a stopped worker may take to end (its own subprocesses first) before it is killed
STOP_SECONDS = 10.0


def _stop_workers(pool) -> None:
    """End every worker of ``pool`` before an error (or SIGTERM, Ctrl-C) goes on, so that
    none writes into the report's temporary folder once that is being removed: SIGTERM
    (a worker of the clinrel program stops its subprocesses and exits,
    ``reports._signals``), SIGKILL after :data:`STOP_SECONDS`; then the pool is shut down
    without waiting for tasks that will never run."""
    import signal

    from reports._signals import held

    with held():
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for p in procs:
            if p.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(p.pid, signal.SIGTERM)
        for p in procs:
            p.join(STOP_SECONDS)
            if p.is_alive():
                p.kill()
                p.join()
        pool.shutdown(wait=True, cancel_futures=True)
