"""The study a report formats: the plan, its validated inputs (``analysis``) and the
analysis layer's :class:`~analysis.Results`. Nothing here loads, selects rows or
computes: :func:`load_study` calls ``analysis.load_tables`` and ``analysis.run``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pandas as pd

from analysis import Plan, Results, Tables, load_tables, run

log = logging.getLogger("clinrel.report")


@dataclass
class Study:
    plan: Plan
    tables: Tables
    results: Results
    notes: list = field(default_factory=list)  # logged notes (skipped sections, ...)
    skipped: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)

    def note(self, message: str) -> None:
        log.info(message)
        if message not in self.notes:
            self.notes.append(message)

    # the inputs, as the sections read them
    cases = property(lambda self: self.tables.cases)
    runs = property(lambda self: self.tables.runs)
    reference = property(lambda self: self.tables.reference)
    metadata = property(lambda self: self.tables.metadata)
    probe_predictions = property(lambda self: self.tables.probe_predictions)
    input_sha256 = property(lambda self: self.tables.input_sha256)
    input_rows = property(lambda self: self.tables.input_rows)


def load_study(plan: Plan, *, scheduler=None, jobs: int = 1) -> Study:
    """Load the plan's inputs and run every analysis the plan asks for (``jobs``:
    :func:`analysis.run`; the results are the same whatever it is)."""
    tables = load_tables(plan)
    return Study(plan=plan, tables=tables,
                 results=run(plan, tables, scheduler=scheduler, jobs=jobs))


def level_order(values: pd.Series) -> list:
    """Levels in their categorical order (or sorted), for display."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return [str(v) for v in values.cat.categories]
    vals = pd.unique(values.dropna())
    try:
        return [str(v) for v in sorted(vals)]
    except TypeError:
        return [str(v) for v in vals]
