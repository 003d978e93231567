"""The study a report formats: the plan, its validated inputs (``analysis``) and the
analysis layer's :class:`~analysis.Results`. Nothing here loads, selects rows or
computes: :func:`load_study` calls ``analysis.load_tables`` and ``analysis.run``.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

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
    #: what the plan file records of itself (:func:`plan_record`), read when loading
    plan_file: dict = field(default_factory=dict)

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
    record = plan_record(plan)   # before the analysis: the file as it was read
    tables = load_tables(plan)
    return Study(plan=plan, tables=tables, plan_file=record,
                 results=run(plan, tables, scheduler=scheduler, jobs=jobs))


#: the date ``clinrel plan init`` writes into a plan's first comment line
_PLAN_INIT_DATE = re.compile(r"^# Analysis plan written by `clinrel plan init` on "
                             r"(\d{4}-\d{2}-\d{2})\b")


def plan_record(plan: Plan) -> dict:
    """What the plan file itself records: ``sha256`` (of its bytes), ``modified_utc`` (the
    file system's modification time, ``YYYY-MM-DD HH:MM:SS UTC``; None when the plan has no
    file) and ``plan_init_date`` (the date ``clinrel plan init`` wrote in its first line,
    or None). None of them proves when the plan was written: prespecification is its
    author's declaration, and the report says so."""
    import datetime as dt

    out = {"sha256": plan.sha256, "modified_utc": None, "plan_init_date": None}
    path = Path(plan.path) if plan.path is not None else None
    if path is None or not path.is_file():
        return out
    stamp = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
    out["modified_utc"] = stamp.strftime("%Y-%m-%d %H:%M:%S UTC")
    with open(path, encoding="utf-8", errors="replace") as fh:
        m = _PLAN_INIT_DATE.match(fh.readline())
    out["plan_init_date"] = m.group(1) if m else None
    return out


def level_order(values: pd.Series) -> list:
    """Levels in their categorical order (or sorted), for display."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return [str(v) for v in values.cat.categories]
    vals = pd.unique(values.dropna())
    try:
        return [str(v) for v in sorted(vals)]
    except TypeError:
        return [str(v) for v in vals]


def model_order(study) -> list[str]:
    """The models in the one order every table and figure of the report uses: their order
    of first appearance in the cases table (the order the analysis layer's tables keep)."""
    if study.cases is None or "model" not in study.cases.columns:
        return []
    return [str(m) for m in dict.fromkeys(study.cases["model"].astype(str))]
