"""The plan key detection.site_meta_analysis and its analysis (analysis/meta_analysis.py):
the block turns the meta-analysis across sites on, its settings reach
stats.site_meta_analysis, its decisions are recorded, bad settings are refused."""
from __future__ import annotations

import pandas as pd
import pytest

import analysis
import stats
from analysis.plan import PlanError, plan_for_tables
from stats.schema import ContractError


@pytest.fixture(scope="module")
def cases(benchx_small):
    return stats.read_cases(benchx_small.data)


def _run(cases, block, **detection):
    plan = plan_for_tables(detection={"threshold": {"value": 50}, **detection,
                                      **({"site_meta_analysis": block} if block is not None
                                         else {})})
    return plan, analysis.run(plan, analysis.Tables(cases=cases), errors="raise",
                              only=["site_meta_analysis"])


def test_off_without_the_block(cases):
    plan = plan_for_tables(detection={"threshold": {"value": 50}})
    assert "site_meta_analysis" not in analysis.wanted(plan, analysis.Tables(cases=cases))
    plan = plan_for_tables(detection={"threshold": {"value": 50}, "site_meta_analysis": {}})
    assert "site_meta_analysis" in analysis.wanted(plan, analysis.Tables(cases=cases))


def test_equals_the_stats_call_on_the_evaluated_rows(cases):
    plan, res = _run(cases, {"estimands": ["specificity", "sensitivity"], "by": ["phase"],
                             "models": ["model_B"]}, conf_level=0.9)
    out = res["site_meta_analysis"]
    ev = res["evaluation"]
    ev = ev[ev["model"] == "model_B"]
    want = pd.concat([stats.site_meta_analysis(ev, estimand=e, by=["phase"],
                                               cluster=res["cluster"], conf_level=0.9)
                      for e in ("specificity", "sensitivity")], ignore_index=True)
    pd.testing.assert_frame_equal(out, want)
    d = res.decisions.site_meta_analysis
    assert d.estimands == ["specificity", "sensitivity"] and d.models == ["model_B"]
    assert d.sites == ev["site"].nunique() and d.cluster == res["cluster"]
    assert d.not_estimable == []
    assert res["roles"]["site_meta_analysis"] == "prespecified"


def test_role_and_defaults(cases):
    plan = plan_for_tables(detection={"site_meta_analysis": {}},
                           roles={"site_meta_analysis": "exploratory"})
    block = plan.detection.site_meta_analysis
    assert block.estimands == ("sensitivity", "specificity") and block.models == ()
    assert block.by == () and dict(plan.roles)["site_meta_analysis"] == "exploratory"


@pytest.mark.parametrize("block, match", [
    ({"estimands": ["auc"]}, "must be one of sensitivity"),
    ({"estimands": []}, "site_meta_analysis.estimands"),
    ({"by": ["site"]}, "the study of the meta-analysis"),
    ({"by": ["score"]}, "the model's score"),
    ({"models": "model_A", "typo": 1}, "unknown key"),
])
def test_bad_blocks_are_refused(block, match):
    with pytest.raises(PlanError, match=match):
        plan_for_tables(detection={"site_meta_analysis": block})


def test_unknown_model_is_refused(cases):
    with pytest.raises(ContractError, match="names 'zz', which the cases table lacks"):
        _run(cases, {"models": ["zz"]})


def test_one_site_is_recorded_not_estimable(cases):
    one = cases[cases["site"] == cases["site"].iloc[0]]
    _, res = _run(one, {"estimands": ["sensitivity"]})
    assert res.decisions.site_meta_analysis.sites == 1
    assert res.decisions.site_meta_analysis.not_estimable    # every model: one site
