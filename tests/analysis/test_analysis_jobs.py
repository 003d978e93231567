"""``analysis.run(jobs=)``: the adjusted-models lane in a forked process gives the
same results, decisions and notes as one process, and failures cross back intact."""
from __future__ import annotations

import os

import pandas as pd
import pytest

import stats
from stats._parallel import can_fork
from analysis import ANALYSES, load_plan, run
from analysis.core import Analysis
from analysis.inputs import load_tables, plan_limits

pytestmark = pytest.mark.skipif(not can_fork(), reason="forking is Linux-only here")


@pytest.fixture(scope="module")
def demo():
    from clinrel.cli.report import demo_plan_path

    plan = load_plan(demo_plan_path())
    with plan_limits(plan):
        return plan, load_tables(plan)


def _same(a, b) -> None:
    ta, tb = a.tidy_tables(), b.tidy_tables()
    assert list(ta) == list(tb)                      # the same tables, in the same order
    for name in ta:
        pd.testing.assert_frame_equal(ta[name], tb[name], check_exact=True, obj=name)
    assert list(a.decisions.items()) == list(b.decisions.items())
    assert a.notes == b.notes
    assert set(a.failed) == set(b.failed)


@pytest.mark.slow  # a whole report (about 45 s on 2 cores): make test-all
def test_two_jobs_give_what_one_job_gives(demo):
    plan, tables = demo
    with plan_limits(plan):
        one, two = run(plan, tables, jobs=1), run(plan, tables, jobs=2)
    lanes = {ANALYSES[n].lane for n in one.tidy_tables() if n in ANALYSES}
    assert lanes == {"main", "models", "after"}   # the demo exercises every lane
    # the crude subgroup table is computed once, in the main lane, not again in the lane
    assert "subgroup_metrics" not in _lane_store(plan, tables)
    assert "adjusted_table" in two.tidy_tables()
    _same(one, two)
    # the lane's row-level table came back too (the adjusted section reads it)
    pd.testing.assert_frame_equal(one["adjusted_rows"], two["adjusted_rows"])


def _lane_store(plan, tables) -> dict:
    from analysis import core

    names = [n for n in core.wanted(plan, tables) if ANALYSES[n].lane == "models"]
    with plan_limits(plan):
        return core._lane(plan, tables, names, "record")["store"]


def _lane_analysis(monkeypatch, name, fn):
    monkeypatch.setitem(ANALYSES, name, Analysis(name, fn, lambda p, t: True, "x",
                                                 lane="models"))


def test_a_failure_in_the_lane_is_recorded_like_here(demo, monkeypatch):
    plan, tables = demo

    class Odd(Exception):  # a local class: cannot be pickled back
        pass

    def broken(results):
        raise Odd("boom in the lane")

    _lane_analysis(monkeypatch, "lane_broken", broken)
    res = run(plan, tables, only=["calls", "lane_broken"], jobs=2)
    assert "lane_broken" in res.failed
    with pytest.raises(Exception, match="boom in the lane"):
        res["lane_broken"]


def test_bad_input_in_the_lane_is_raised(demo, monkeypatch):
    plan, tables = demo

    def bad(results):
        raise stats.ContractError("cases.csv: column 'x' is bad; fix it", column="x")

    _lane_analysis(monkeypatch, "lane_bad", bad)
    with pytest.raises(stats.ContractError, match="column 'x' is bad") as info:
        run(plan, tables, only=["calls", "lane_bad"], jobs=2)
    assert info.value.column == "x"


def test_a_lane_process_that_dies_is_computed_here(demo, monkeypatch):
    plan, tables = demo
    parent = os.getpid()

    def dies_in_a_child(results):
        if os.getpid() != parent:
            os._exit(3)          # killed: no answer comes back
        return pd.DataFrame({"where": ["here"]})

    _lane_analysis(monkeypatch, "lane_dies", dies_in_a_child)
    res = run(plan, tables, only=["calls", "lane_dies"], jobs=2)
    assert res["lane_dies"]["where"].tolist() == ["here"]


def test_a_deadlocked_child_is_stopped_and_its_work_done_here():
    """A child that blocks on a lock the parent held at the fork (no CPU used) is killed
    after ``stall`` seconds: join() warns and returns None, so the caller computes the
    lane itself. A child that computes longer than ``stall`` is left to finish."""
    import threading
    import time

    from stats._parallel import forked

    lock = threading.Lock()

    def blocked():
        with lock:              # held by the parent at the fork: never released here
            return "unreachable"

    def busy():
        end = time.process_time() + 3.0   # 3 s of CPU, longer than the stall limit
        x = 0
        while time.process_time() < end:
            x += 1
        return "done"

    with lock:
        join = forked(blocked, stall=0.5)
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match="deadlocked"):
        assert join() is None
    assert time.monotonic() - t0 < 10
    assert forked(busy, stall=2.0)() == "done"
