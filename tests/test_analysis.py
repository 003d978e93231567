"""The analysis layer (stats.analysis): one row rule, decisions recorded, results shared."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import stats
from stats.analysis import ANALYSES, Tables, run
from stats.analysis import detection as AD
from stats.analysis.plan import Detection


def _Det(**kw):
    """The detection block of a plan (defaults as a plan file would give)."""
    return Detection(**kw)


class _Plan:
    def __init__(self, det, cases="cases.csv"):
        self.detection, self.crs, self.cases, self.scheduler = det, None, cases, None


@pytest.fixture(scope="module")
def cases(benchx_small):
    df = stats.read_cases(benchx_small.data)
    rng = np.random.default_rng(3)
    split = np.where(rng.random(df["case_id"].nunique()) < 0.3, "validation", "test")
    return df.assign(split=df["case_id"].map(dict(zip(pd.unique(df["case_id"]), split))))


def test_row_rule_is_the_test_split_whatever_the_threshold_source(cases):
    """A prespecified threshold evaluates the test split too (the CLI used every row)."""
    for det in (_Det(threshold_value=50.0), _Det(criterion="youden")):
        res = run(_Plan(det), Tables(cases=cases, input_rows={"cases": len(cases)}),
                  only=["evaluation"])
        ev = res["evaluation"]
        assert set(ev["split"]) == {"test"}
        assert len(ev) == int((cases["split"] == "test").sum())
        flow = res["row_flow"]
        assert int(flow.loc[flow["disposition"] != "total", "rows"].sum()) == len(cases)
        assert res.decisions["detection.rows"][AD.REASON_TEST] == len(ev)


def test_without_split_every_row_is_evaluated(cases):
    c = cases.drop(columns="split")
    res = run(_Plan(_Det(threshold_value=50.0)), Tables(cases=c, input_rows={"cases": len(c)}),
              only=["evaluation"])
    assert len(res["evaluation"]) == len(c)
    assert res.decisions["detection.rows"] == {AD.REASON_ALL: len(c), "input table": len(c)}


def test_split_without_test_rows_is_refused(cases):
    c = cases.assign(split="validation")
    with pytest.raises(stats.ContractError, match="has no 'test' rows"):
        run(_Plan(_Det(threshold_value=50.0)), Tables(cases=c, input_rows={"cases": len(c)}),
            only=["evaluation"])


def test_given_calls_need_a_pred_column(cases):
    c = cases.drop(columns=[x for x in ("pred",) if x in cases.columns])
    with pytest.raises(stats.ContractError, match="no 'pred' column"):
        run(_Plan(_Det(given_calls=True)), Tables(cases=c), only=["calls"])


def test_results_compute_once_and_record_seeds(cases):
    det = _Det(threshold_value=50.0, n_boot=20, seed=5)
    res = run(_Plan(det), Tables(cases=cases, input_rows={"cases": len(cases)}),
              only=["subgroup_metrics"])
    first = res["subgroup_metrics"]
    assert res["subgroup_metrics"] is first
    assert res.decisions["seeds.detection_bootstrap"] == 5
    assert res.decisions["detection.bootstrap.n_boot"] == 20
    direct = stats.subgroup_metrics(res["evaluation"], by=[("phase",)], ci="wilson",
                                    n_boot=20, seed=5, strata=None, boot_ci="percentile")
    pd.testing.assert_frame_equal(first.reset_index(drop=True), direct.reset_index(drop=True))


def test_a_failed_analysis_raises_again_on_access(cases, monkeypatch):
    from stats.analysis.core import Analysis

    calls = []

    def broken(results):
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setitem(ANALYSES, "broken", Analysis("broken", broken, lambda p, t: True, "x"))
    res = run(_Plan(_Det(threshold_value=50.0)), Tables(cases=cases), only=["broken"])
    assert "broken" in res.failed
    with pytest.raises(RuntimeError, match="boom"):
        res["broken"]
    assert calls == [1]  # not recomputed


def test_bad_input_is_raised_not_recorded(cases):
    det = _Det(threshold_value=50.0, subgroups=(("no_such_column",),))
    with pytest.raises(stats.ContractError, match="no_such_column"):
        run(_Plan(det), Tables(cases=cases, input_rows={"cases": len(cases)}),
            only=["confusion_counts"])


def test_every_analysis_has_a_docstring():
    assert all(a.doc for a in ANALYSES.values()), [n for n, a in ANALYSES.items() if not a.doc]
