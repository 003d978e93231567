"""The analysis layer's core: a registry of named analyses, :class:`Results`, :func:`run`.

Every analysis decision (which rows, which threshold, clusters, seeds, replicate counts,
exclusions) is made here, once, and recorded in ``Results.decisions``; the CLI and the
report both call :func:`run` and only format what it returns.

An analysis is a function ``fn(results) -> DataFrame`` registered under a name with
:func:`analysis`; it reads the plan (``results.plan``), the validated inputs
(``results.tables``) and other analyses (``results[name]``), and may record decisions
with ``results.decide(key, value)``. Results are computed once and cached, so an analysis
that several tables need (the scan-level calls, the subgroup metrics) runs once.
Pure: no files, no printing, no rounding.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .decisions import Decisions

#: analyses whose tables have one row per input row (inputs with calls, not results;
#: adjusted_rows is the evaluation rows with the plan's factor levels; crs_rows the runs
#: and probe predictions the CRS analyses read)
ROW_LEVEL = ("calls", "evaluation", "adjusted_rows", "lesion_rows", "crs_rows")

#: name -> Analysis, in registration order (the order :func:`run` computes them)
ANALYSES: dict[str, "Analysis"] = {}


@dataclass(frozen=True)
class Analysis:
    name: str
    fn: Callable[["Results"], Any]
    #: whether the plan asks for this analysis (``run`` computes only those)
    wanted: Callable[[Any, Any], bool]
    doc: str = ""
    #: analyses of one lane besides ``MAIN`` may run in a process of their own (``run``)
    lane: str = "main"


MAIN = "main"
#: computed in this process after every lane has been merged (joins of lanes' results)
AFTER = "after"


def analysis(name: str, *, wanted: Callable[[Any, Any], bool] = lambda plan, tables: True,
             lane: str = MAIN):
    """Register ``fn(results)`` as the analysis ``name``.

    ``wanted(plan, tables)`` says whether a plan asks for it; an analysis that is not
    wanted can still be computed on request (``results[name]``) by another analysis.
    ``lane``: analyses outside the main lane (the adjusted models: seconds of model
    fitting that share nothing with the rest but the evaluated rows) are computed after
    the main lane, in a process of their own when :func:`run` has ``jobs > 1``.
    """
    def deco(fn):
        if name in ANALYSES:
            raise RuntimeError(f"analysis {name!r} registered twice")
        ANALYSES[name] = Analysis(name, fn, wanted, (fn.__doc__ or "").strip().split("\n")[0],
                                  lane)
        return fn
    return deco


@dataclass
class Tables:
    """The validated inputs of a study (see ``analysis.inputs.load_tables``)."""

    cases: pd.DataFrame | None = None
    runs: pd.DataFrame | None = None
    reference: Any = None
    metadata: pd.DataFrame | None = None
    #: a given label-error table (plan key metadata.label_error naming a file)
    label_error: pd.DataFrame | None = None
    probe_predictions: pd.DataFrame | None = None
    #: the lesions table (``stats.read_lesions``)
    lesions: pd.DataFrame | None = None
    input_sha256: dict = field(default_factory=dict)
    input_rows: dict = field(default_factory=dict)
    #: values the readers rewrote as Unicode NFC (``stats.schema.unify_text``): one dict
    #: per spelling, recorded in the flow of cases
    text_merged: list = field(default_factory=list)


class Results:
    """A bag of tidy tables keyed by analysis name, plus the decisions taken.

    ``results[name]`` computes the analysis on first use and caches it; an analysis that
    failed raises its error again on every access (the report leaves its section out, or
    fails under ``--strict``). ``decisions`` (:class:`analysis.decisions.Decisions`)
    holds what was decided, typed and by name (``decisions.detection.rows``,
    ``decisions.seeds.detection_bootstrap``, ...); ``notes`` are sentences for
    the methods text; ``timings`` seconds per analysis.
    """

    def __init__(self, plan, tables: Tables, *, scheduler=None):
        self.plan = plan
        self.tables = tables
        self.scheduler = scheduler if scheduler is not None else getattr(plan, "scheduler", None)
        self._store: dict[str, Any] = {}
        self._failed: dict[str, BaseException] = {}
        self.decisions = Decisions()
        self.notes: list[str] = []
        self.timings: dict[str, float] = {}

    def __getitem__(self, name: str):
        if name in self._store:
            return self._store[name]
        if name in self._failed:
            raise self._failed[name]
        if name not in ANALYSES:
            raise KeyError(f"no analysis named {name!r}; known: {', '.join(ANALYSES)}")
        t0 = time.perf_counter()
        try:
            value = ANALYSES[name].fn(self)
        except Exception as exc:
            self._failed[name] = exc
            raise
        finally:
            self.timings[name] = round(time.perf_counter() - t0, 3)
        self._store[name] = value
        return value

    def __contains__(self, name: str) -> bool:
        return name in self._store

    def get(self, name: str, default=None):
        try:
            return self[name]
        except Exception:
            return default

    @property
    def failed(self) -> dict[str, BaseException]:
        return dict(self._failed)

    def decide(self, key: str, value) -> None:
        """Record a decision (rows analysed and why, seeds, replicate counts, clusters...):
        one of the names :class:`analysis.decisions.Decisions` declares, with its type."""
        self.decisions.set(key, value)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def computed(self) -> dict[str, Any]:
        return dict(self._store)

    def tidy_tables(self) -> dict[str, pd.DataFrame]:
        """Every computed table by name (a dict-valued analysis gives ``name_key``), except
        the row-level ones (``ROW_LEVEL``: one row per input row, not results). These are
        what ``clinrel report`` writes under ``results/`` and what the commands write: the
        same settings give the same bytes."""
        out: dict[str, pd.DataFrame] = {}
        for name, value in self._store.items():
            if name in ROW_LEVEL:
                continue
            if isinstance(value, pd.DataFrame):
                out[name] = value
            elif isinstance(value, dict):
                out.update({f"{name}_{k}": v for k, v in value.items()
                            if isinstance(v, pd.DataFrame)})
        return out


def wanted(plan, tables) -> list[str]:
    """The analyses a plan asks for, in registration order."""
    return [name for name, a in ANALYSES.items() if a.wanted(plan, tables)]


def run(plan, tables: Tables, *, scheduler=None, only: Iterable[str] | None = None,
        errors: str = "record", jobs: int = 1) -> Results:
    """Run every analysis the plan asks for (or ``only`` those named) and return Results.

    ``scheduler``: a Dask client or address for the resampling and fitting blocks
    (results are identical either way; overrides the plan's). ``errors``: ``"record"``
    keeps going when an analysis fails (the failure is re-raised when its table is
    read), ``"raise"`` stops at the first failure. Bad input (``ContractError``) always
    raises, and so does an analysis out of memory (as a ``ContractError``,
    ``MSG_OUT_OF_MEMORY``): no report leaves a section out because of an allocation.

    The main lane's analyses are computed first, then each other lane's (registration
    order within a lane), then the ``AFTER`` lane (joins of the others' results). ``jobs > 1`` (and no scheduler, on a system that can fork)
    computes the other lanes in a forked process while this one computes the main lane;
    its tables, decisions and notes are merged as if computed here after the main lane,
    so every result is the same whatever ``jobs`` is (tests/analysis/test_analysis.py).
    """
    from stats._parallel import can_fork, forked

    results = Results(plan, tables, scheduler=scheduler)
    if getattr(plan, "seed", None) is not None:   # the root of every random stream
        results.decide("seeds.root", int(plan.seed))
    names = list(only) if only is not None else wanted(plan, tables)
    lane = {n: ANALYSES[n].lane if n in ANALYSES else MAIN for n in names}
    main = [n for n in names if lane[n] == MAIN]
    after = [n for n in names if lane[n] == AFTER]
    rest = [n for n in names if lane[n] not in (MAIN, AFTER)]
    payload = None
    if rest and jobs > 1 and results.scheduler is None and can_fork():
        join = forked(functools.partial(_lane, plan, tables, rest, errors))
        _compute(results, main, errors)
        payload = join()          # None: the process died; the lane is computed here
        if payload is not None:
            _merge(results, payload)
    else:
        _compute(results, main, errors)
    if payload is None:
        _compute(results, rest, errors)
    _compute(results, after, errors)
    return results


#: an analysis that ran out of memory: never a section silently left out (exit 2)
MSG_OUT_OF_MEMORY = ("the analysis '{name}' ran out of memory ({detail}); the estimate of "
                     "stats.limits did not foresee it: lower the plan setting that sizes it "
                     "(replicates, weight draws, imputations, subgroup axes), or run it on a "
                     "machine with more memory")


def _compute(results: Results, names: Iterable[str], errors: str) -> None:
    from stats.schema import ContractError

    for name in names:
        try:
            results[name]
        except ContractError:
            raise
        except MemoryError as exc:   # whatever ``errors``: a report never goes on without it
            detail = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise ContractError(MSG_OUT_OF_MEMORY.format(name=name, detail=detail)) from None
        except Exception:
            if errors == "raise":
                raise


def _lane(plan, tables: Tables, names: list[str], errors: str) -> dict:
    """Compute ``names`` in a fresh Results (in a forked process); what the parent needs
    to merge: the tables (row-level ones only of this lane), failures, decisions, notes,
    timings. Failures that cannot be pickled come back as RuntimeError with their text."""
    import pickle

    r = Results(plan, tables)
    _compute(r, names, errors)
    store = {k: v for k, v in r._store.items()
             if k not in ROW_LEVEL or ANALYSES[k].lane != MAIN}
    failed = {}
    for k, exc in r._failed.items():
        try:
            pickle.dumps(exc)
            failed[k] = exc
        except Exception:
            failed[k] = RuntimeError(f"{type(exc).__name__}: {exc}")
    return {"store": store, "failed": failed, "decisions": r.decisions, "notes": r.notes,
            "timings": r.timings}


def _merge(results: Results, payload: dict) -> None:
    """Add a lane's payload as if its analyses had been computed in ``results`` after
    what it holds: tables and failures not yet present, decisions updated, new notes
    appended in order."""
    for k, v in payload["store"].items():
        if k not in results._store and k not in results._failed:
            results._store[k] = v
    for k, exc in payload["failed"].items():
        if k not in results._store and k not in results._failed:
            results._failed[k] = exc
    results.decisions.update(payload["decisions"])
    for m in payload["notes"]:
        results.note(m)
    for k, v in payload["timings"].items():
        results.timings.setdefault(k, v)
