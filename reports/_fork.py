"""Run independent report tasks (drawing a figure, rendering a document) in forked
processes.

Tasks are closures over the study, sections and plots, which do not pickle (plotnine
plots hold local functions), so the workers are forked and inherit them; only task
indices go to the workers and only the tasks' small return values come back. Every task
writes its own files, computed from its own inputs alone, so the outputs are the same
bytes whether the tasks run here, one after another, or in any number of processes.
Where the OS cannot fork (Windows, and macOS, where forking a process that has used
system frameworks is unsafe), or with one job, the tasks run here in order.
"""
from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import Any

from stats._parallel import can_fork

#: the tasks of the running :func:`run_tasks` (forked workers inherit them)
_TASKS: list[Callable[[], Any]] = []


def _call(i: int) -> tuple[int, Any]:
    return i, _TASKS[i]()


def run_tasks(tasks: Sequence[Callable[[], Any]], *, jobs: int = 1,
              order: Sequence[int] | None = None, done: Callable[[], None] = lambda: None
              ) -> list:
    """``[task() for task in tasks]``, in up to ``jobs`` forked processes.

    ``order``: the order to hand tasks out (longest first balances the load); results
    come back in task order whatever the order of completion. ``done()`` is called in
    this process as each task finishes (a progress bar). An exception in a task is raised
    here."""
    tasks = list(tasks)
    order = list(range(len(tasks))) if order is None else list(order)
    jobs = max(1, min(int(jobs), len(tasks)))
    out: list = [None] * len(tasks)
    if jobs == 1 or not can_fork():
        for i in order:
            out[i] = tasks[i]()
            done()
        return out
    if _TASKS:
        raise RuntimeError("run_tasks is not re-entrant")
    _TASKS[:] = tasks
    try:
        with mp.get_context("fork").Pool(jobs) as pool:
            for i, value in pool.imap_unordered(_call, order):
                out[i] = value
                done()
    finally:
        _TASKS.clear()
    return out
