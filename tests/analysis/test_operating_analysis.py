"""The operating-point analyses (analysis/operating.py): the threshold-shift flag on a
synthetic study, the plan keys and their refusals, seeds, decisions and roles."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from analysis import Tables, run
from analysis.plan import PlanError, plan_for_tables


def _cases(n=1500, seed=11):
    return stats.simulate.benchx_cohort(n, n_models=1, n_sites=4, seed=seed).data


def test_threshold_shift_is_flagged():
    """Model B is model A's score doubled: the same ROC curve, so the same sensitivity at
    matched specificity, but a higher sensitivity at the fixed threshold. The analysis
    flags the fixed-threshold gain as a threshold shift."""
    sim = _cases()
    b = sim.assign(model="model_B", score=sim["score"] * 3.0)
    cases = stats.read_cases(pd.concat([sim, b], ignore_index=True))
    plan = plan_for_tables(detection={"threshold": {"value": 50}, "subgroups": ["phase"],
                                      "operating_points": {"specificity": [0.9],
                                                           "n_boot": 300}})
    res = run(plan, Tables(cases=cases), only=["matched_comparisons"])
    t = res["matched_comparisons"]
    ov = t[t["group_var"] == "overall"].iloc[0]
    assert ov["fixed_p_adjusted"] < 0.05            # the fixed threshold "finds" a gain
    assert ov["matched_estimate"] == 0.0            # none at matched specificity
    assert ov["threshold_shift"] and "threshold_shift" in ov["flag"]
    # a real improvement is not flagged: B is A with better scores for the positives
    better = sim.assign(model="model_B", score=np.where(sim["label"] == 1,
                                                        sim["score"] * 3.0, sim["score"]))
    cases2 = stats.read_cases(pd.concat([sim, better], ignore_index=True))
    t2 = run(plan, Tables(cases=cases2), only=["matched_comparisons"])["matched_comparisons"]
    ov2 = t2[t2["group_var"] == "overall"].iloc[0]
    assert ov2["matched_p_adjusted"] < 0.05 and not ov2["threshold_shift"]


def test_the_flag_fails_without_the_matched_comparison():
    """Guard: on the shifted study the fixed-threshold comparison alone shows a significant
    gain (what a report without the matched operating point would conclude)."""
    sim = _cases()
    cases = stats.read_cases(pd.concat([sim, sim.assign(model="model_B", score=sim["score"] * 3.0)],
                                       ignore_index=True))
    cmp = stats.compare_models(stats.scan_level(cases, threshold=50))
    ov = cmp[(cmp["estimand"] == "sensitivity_difference") & (cmp["group_var"] == "overall")]
    assert ov["p_adjusted"].iloc[0] < 0.05


@pytest.mark.parametrize("block, pattern", [
    ({"goals": [{"metric": "sensitivity", "goal": 0.8, "margin": 0.1}]},
     r"detection\.goals\[0\]' needs exactly one of 'goal'"),
    ({"goals": [{"metric": "auc", "goal": 0.8}]}, r"detection\.goals\[0\]\.metric"),
    ({"goals": [{"metric": "sensitivity", "goal": 1.5}]}, r"goals\[0\]\.goal' must be a number in \(0, 1\)"),
    ({"goals": [{"metric": "sensitivity", "goal": 0.8, "alpha": 0.6}]}, r"goals\[0\]\.alpha"),
    ({"operating_points": {"specificity": [0.9, 1.2]}}, r"operating_points\.specificity\[1\]"),
    ({"operating_points": {"partial_auc": {"specificity": [0.9, 0.8]}}},
     r"partial_auc\.specificity' must be \[lo, hi\] with lo < hi"),
    ({"operating_points": {"partial_auc": {"specificity": [0.8, 1], "sensitivity": [0.8, 1]}}},
     r"gives both 'specificity' and 'sensitivity'"),
    ({"operating_points": {"n_boot": 1}}, r"operating_points\.n_boot"),
    ({"operating_points": {"specificty": [0.9]}}, r"did you mean 'specificity'"),
])
def test_plan_refusals_name_the_key_and_the_fix(block, pattern):
    with pytest.raises(PlanError, match=pattern):
        plan_for_tables(detection={"threshold": {"value": 50}, **block})


def test_seed_stream_and_decisions():
    sim = stats.read_cases(stats.simulate.benchx_cohort(300, n_models=2, n_sites=4, seed=3).data)
    det = {"threshold": {"value": 50}, "subgroups": ["phase"],
           "operating_points": {"specificity": [0.8, 0.9], "sensitivity": 0.5, "n_boot": 50,
                                "partial_auc": {"sensitivity": [0.5, 1.0], "correct": True}},
           "goals": [{"metric": "sensitivity", "goal": 0.5}]}
    plan = plan_for_tables(detection=det, seed=5)
    res = run(plan, Tables(cases=sim), only=["operating_points", "partial_auc",
                                              "performance_goals", "matched_comparisons"])
    d = res.decisions
    assert d.operating.specificity == [0.8, 0.9] and d.operating.sensitivity == [0.5]
    assert d.operating.difference_ci == "linearized"
    diff = res["operating_points"]["estimand"].str.endswith("_difference")
    assert res["operating_points"].loc[diff, "method"].eq("bootstrap-linearized").all()
    assert res["matched_comparisons"]["method"].eq("bootstrap-linearized").all()
    assert d.seeds.operating_bootstrap == plan.seed_for("operating_bootstrap")
    assert d.operating.partial_auc == {"focus": "sensitivity", "range": [0.5, 1.0], "correct": True,
                                       "boot_ci": "bca"}
    assert res["partial_auc"].query("estimand == 'partial_auc_corrected'")["method"].eq(
        "bootstrap-bca").all()
    assert set(res["operating_points"]["estimand"]) >= {"sensitivity_at_specificity",
                                                         "specificity_at_sensitivity"}
    assert res["partial_auc"]["estimand"].iloc[0] == "partial_auc_corrected"
    assert d.goals.multiplicity.startswith("holm")
    # the block's seed overrides the stream
    own = plan_for_tables(detection={**det, "operating_points": {**det["operating_points"],
                                                                 "seed": 99}}, seed=5)
    assert own.seed_for("operating_bootstrap") == 99
    assert "operating_bootstrap" in own.seeds


def test_exploratory_roles_drop_the_families():
    sim = stats.read_cases(stats.simulate.benchx_cohort(300, n_models=2, n_sites=4, seed=3).data)
    det = {"threshold": {"value": 50}, "subgroups": ["phase"],
           "operating_points": {"specificity": [0.9], "n_boot": 30},
           "goals": [{"metric": "sensitivity", "goal": 0.3}]}
    plan = plan_for_tables(detection=det, roles={"operating_points": "exploratory",
                                                 "goals": "exploratory"})
    res = run(plan, Tables(cases=sim), only=["operating_points", "performance_goals",
                                              "auc_vs_rest"])
    assert res["operating_points"]["p_adjusted"].isna().all()
    assert res["auc_vs_rest"]["p_adjusted"].isna().all()
    g = res["performance_goals"]
    assert g["p_adjusted"].isna().all()
    assert ((g["verdict"] == "met") == (g["p_value"] < g["alpha"])).all()


@pytest.mark.parametrize("block, pattern", [
    ({"compare_metrics": ["sensitivity", "f1"]},
     r"'detection\.compare_metrics' names f1, which need\(s\) the paired cluster bootstrap: "
     r"add key 'detection\.bootstrap\.n_boot'"),
    ({"subgroup_gaps": ["sensitivity"]},
     r"'detection\.subgroup_gaps' names sensitivity, which need\(s\) the paired cluster"),
    ({"compare_metrics": ["sensitivity", "brier"]}, r"compare_metrics\[1\]' must be one of"),
    ({"subgroup_gaps": ["auc"], "bootstrap": {"n_boot": 50}},
     r"subgroup_gaps\[0\]' must be one of"),
])
def test_comparison_keys_refuse_what_cannot_be_computed(block, pattern):
    with pytest.raises(PlanError, match=pattern):
        plan_for_tables(detection={"threshold": {"value": 50}, **block})


def test_bootstrap_comparisons_and_gaps_follow_the_plan():
    """The plan's compare_metrics and subgroup_gaps reach stats.compare_models: the same
    rows as a direct call with the plan's bootstrap (replicates, strata, the stream
    detection_bootstrap), the decisions recorded."""
    sim = stats.read_cases(stats.simulate.benchx_cohort(300, n_models=2, n_sites=4, seed=3).data)
    det = {"threshold": {"value": 50}, "subgroups": ["phase", "site"],
           "compare_metrics": ["sensitivity", "ppv", "f1"], "subgroup_gaps": ["sensitivity", "npv"],
           "bootstrap": {"n_boot": 60, "strata": "site"}}
    plan = plan_for_tables(detection=det, seed=8)
    res = run(plan, Tables(cases=sim), only=["comparisons", "subgroup_gaps"])
    seed = plan.seed_for("detection_bootstrap")
    d = res.decisions
    assert d.comparisons.metrics == ["sensitivity", "ppv", "f1"]
    assert d.comparisons.gap_metrics == ["sensitivity", "npv"]
    assert d.seeds.detection_bootstrap == seed and d.detection.bootstrap.n_boot == 60
    ev = res["evaluation"]
    want = stats.compare_models(ev, metrics=("sensitivity", "ppv", "f1"), n_boot=60, seed=seed,
                                strata="site", cluster=res["cluster"])
    got = res["comparisons"]
    assert list(got["estimand"]) == list(want["estimand"])
    assert np.allclose(got["conf_low"], want["conf_low"], equal_nan=True, rtol=0, atol=1e-12)
    gaps = res["subgroup_gaps"]
    assert set(gaps["estimand"]) == {"sensitivity_gap", "npv_gap"}
    assert set(gaps["group_var"]) == {"phase", "site"}
    direct = stats.compare_models(ev, by=["phase", "site"], metrics=("sensitivity", "npv"),
                                  n_boot=60, seed=seed, strata="site", gaps=True,
                                  cluster=res["cluster"])
    direct = direct[direct["estimand"].str.endswith("_gap")].reset_index(drop=True)
    assert np.allclose(gaps["conf_high"], direct["conf_high"], equal_nan=True, rtol=0, atol=1e-12)
    # without them the comparisons stay closed-form and no gaps are computed
    from analysis import wanted

    plain_plan = plan_for_tables(detection={"threshold": {"value": 50}})
    assert "subgroup_gaps" not in wanted(plain_plan, Tables(cases=sim))
    assert "subgroup_gaps" in wanted(plan, Tables(cases=sim))
    plain = run(plain_plan, Tables(cases=sim), only=["comparisons"])
    assert set(plain["comparisons"]["estimand"]) == {"sensitivity_difference",
                                                     "specificity_difference", "auc_difference"}


def test_roc_bands_follow_the_plan():
    """detection.operating_points.bands puts stats.roc_curve's pointwise bootstrap bands on
    the analysis' curves (the block's replicates and stream); the figure draws them."""
    from reports.sections.operating import _curves, roc_plot

    sim = stats.read_cases(stats.simulate.benchx_cohort(300, n_models=2, n_sites=4, seed=3).data)
    det = {"threshold": {"value": 50}, "subgroups": ["phase"],
           "operating_points": {"specificity": [0.9], "n_boot": 40, "bands": True}}
    plan = plan_for_tables(detection=det, seed=2)
    res = run(plan, Tables(cases=sim), only=["roc_curves"])
    roc = res["roc_curves"]
    assert res.decisions.operating.roc_bands is True
    want = stats.roc_curve(res["evaluation"], by=["phase"], n_boot=40,
                           seed=plan.seed_for("operating_bootstrap"), cluster=res["cluster"])
    assert np.allclose(roc["conf_low"], want["conf_low"], equal_nan=True, rtol=0, atol=0)
    ok = roc["conf_low"].notna()
    assert ok.mean() > 0.5 and (roc.loc[ok, "method"] == "bootstrap-percentile").all()
    assert ((roc.loc[ok, "conf_low"] <= roc.loc[ok, "sensitivity"] + 1e-12)
            & (roc.loc[ok, "sensitivity"] <= roc.loc[ok, "conf_high"] + 1e-12)).all()
    layers = [type(l.geom).__name__ for l in roc_plot(_curves(roc, "overall"), None,
                                                       color=None).layers]
    assert "geom_ribbon" in layers
    # without the key: no bands, no ribbon
    plain = run(plan_for_tables(detection={**det, "operating_points": {"specificity": [0.9]}}),
                Tables(cases=sim), only=["roc_curves"])
    assert plain["roc_curves"]["conf_low"].isna().all()
    assert plain.decisions.operating.roc_bands is False
    layers = [type(l.geom).__name__ for l in roc_plot(_curves(plain["roc_curves"], "overall"),
                                                       None, color=None).layers]
    assert "geom_ribbon" not in layers
