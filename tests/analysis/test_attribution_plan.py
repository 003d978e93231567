"""The plan keys detection.gaps and detection.target and their analyses
(analysis/attribution.py): the blocks turn the decomposition and the transport on, their
settings reach stats.decompose_gap and stats.transport on the evaluated rows, a plan
without contrasts decomposes each demographic axis's largest gap (exploratory), the
decisions are recorded, and bad settings are refused naming the key."""
from __future__ import annotations

import pandas as pd
import pytest

import analysis
import stats
from analysis.plan import PlanError, plan_for_tables

CONTRAST = {"group": "race", "levels": ["Unknown", "White"], "covariates": ["phase", "sex"]}


@pytest.fixture(scope="module")
def cases(benchx_small):
    return stats.read_cases(benchx_small.data)


def _plan(**detection):
    return plan_for_tables(detection={"threshold": {"value": 50}, **detection})


def test_off_without_the_blocks(cases):
    tables = analysis.Tables(cases=cases)
    wanted = analysis.wanted(_plan(), tables)
    assert "gap_decomposition" not in wanted and "transport" not in wanted
    wanted = analysis.wanted(_plan(gaps={"contrasts": [CONTRAST]},
                                   target={"prevalence": 0.1}), tables)
    assert "gap_decomposition" in wanted and "transport" in wanted


def test_contrast_equals_the_stats_call(cases):
    plan = _plan(gaps={"contrasts": [CONTRAST], "method": "fixed", "n_boot": 20, "seed": 3},
                 conf_level=0.9)
    res = analysis.run(plan, analysis.Tables(cases=cases), errors="raise",
                       only=["gap_decomposition"])
    out = res["gap_decomposition"]
    want = stats.decompose_gap(res["evaluation"], "race", ("Unknown", "White"),
                               covariates=["phase", "sex"], method="fixed", n_boot=20, seed=3,
                               cluster=res["cluster"], conf_level=0.9)
    assert set(out["contrast"]) == {"race: Unknown vs White"}
    assert set(out["role"]) == {"prespecified"}
    pd.testing.assert_frame_equal(out.drop(columns=["contrast", "role"]), want)
    d = res.decisions
    assert d.gaps.method == "fixed" and d.gaps.n_boot == 20 and d.gaps.population == "positives"
    assert d.seeds.gap_bootstrap == 3
    assert d.gaps.contrasts[0]["covariates"] == ["phase", "sex"]
    assert d.gaps.contrasts[0]["role"] == "prespecified"


def test_within_site_key_and_nested_group(cases):
    """detection.gaps.within_site reaches stats.decompose_gap and is recorded; a nested
    adjusted grouping ([site, patient_id]) decomposes on its site level."""
    for within in (True, False):
        plan = _plan(gaps={"contrasts": [CONTRAST], "n_boot": 2, "seed": 3,
                           "within_site": within},
                     adjusted={"formula": "detected ~ race + phase + sex",
                               "group": ["site", "patient_id"]})
        res = analysis.run(plan, analysis.Tables(cases=cases), errors="raise",
                           only=["gap_decomposition"])
        out = res["gap_decomposition"]
        want = stats.decompose_gap(res["evaluation"], "race", ("Unknown", "White"),
                                   covariates=["phase", "sex"], n_boot=2, seed=3,
                                   cluster=res["cluster"], fit_group="site",
                                   within_site=within)
        pd.testing.assert_frame_equal(out.drop(columns=["contrast", "role"]), want)
        assert res.decisions.gaps.within_site is within
        assert out["within_site"].all() == within


def test_default_contrasts_are_each_axis_largest_gap(cases):
    """No contrast listed: per demographic axis of the plan, the level farthest from the
    reference level (the adjusted model's first level, else the largest) among levels with
    at least small_n positives, exploratory,
    with the adjusted formula's other terms as covariates."""
    plan = _plan(subgroups=["race", "sex", "phase"],
                 adjusted={"formula": "detected ~ phase + sex + race", "methods": ["fixed"],
                           "levels": {"race": ["White", "Asian", "Black", "Other",
                                               "Unknown"]}},
                 gaps={"n_boot": 5})
    res = analysis.run(plan, analysis.Tables(cases=cases), errors="raise",
                       only=["gap_contrasts"])
    got = {c["group"]: c for c in res["gap_contrasts"]}
    assert set(got) == {"race", "sex"}         # phase is not a demographic axis
    sm = res["subgroup_metrics"]
    sm = sm[(sm["estimand"] == "sensitivity") & (sm["denominator"] >= plan.detection.small_n)]
    race = sm[sm["group_var"] == "race"].groupby("group_level")["estimate"].mean()
    gap = (race - race["White"]).drop("White").abs()
    assert got["race"]["levels"] == [gap.idxmax(), "White"]
    assert got["race"]["covariates"] == ["phase", "sex"]
    sex = sm[sm["group_var"] == "sex"].groupby("group_level")["denominator"].max()
    assert got["sex"]["levels"][1] == sex.idxmax()
    assert got["sex"]["covariates"] == ["phase", "race"]
    assert {c["role"] for c in got.values()} == {"exploratory"}


@pytest.mark.parametrize("gaps, fragment", [
    ({"contrasts": [{"group": "race", "levels": ["White", "White"]}]},
     "must be two different levels"),
    ({"contrasts": [{"group": "race", "levels": ["Unknown"]}]}, "must be two different"),
    ({"n_boot": 1}, "n_boot"),
])
def test_bad_gaps_refused(gaps, fragment):
    with pytest.raises(PlanError, match=fragment):
        _plan(gaps=gaps)


def test_no_covariates_without_a_formula_refused(cases):
    plan = _plan(gaps={"contrasts": [{"group": "race", "levels": ["Unknown", "White"]}]})
    with pytest.raises(Exception, match="lists no covariates"):
        analysis.run(plan, analysis.Tables(cases=cases), errors="raise",
                     only=["gap_contrasts"])


TARGET = {"name": "community", "margins": {"sex": {"F": 1, "M": 1},
                                           "phase": {"venous": 0.5, "arterial": 0.2,
                                                     "delayed": 0.1, "non_contrast": 0.2}},
          "prevalence": 0.2}


def test_transport_equals_the_stats_call(cases):
    res = analysis.run(_plan(target=TARGET), analysis.Tables(cases=cases), errors="raise",
                       only=["transport"])
    out = res["transport"]
    want = stats.transport(res["evaluation"], {"sex": {"F": 1, "M": 1},
                                               "phase": TARGET["margins"]["phase"],
                                               "prevalence": 0.2},
                           cluster=res["cluster"])
    pd.testing.assert_frame_equal(out.drop(columns="role"), want)
    d = res.decisions.transport
    assert d.name == "community"
    assert d.target["sex"] == {"F": 0.5, "M": 0.5}            # counts become shares
    assert d.target["label"] == {"1": 0.2, "0": 0.8}
    assert d.max_weight == {m: float(w) for m, w in
                            want.groupby("model")["max_weight"].first().items()}
    assert d.extreme == bool((want["max_weight"] > stats.raking.EXTREME_WEIGHT).any())


def test_target_outside_support_refused_naming_the_key(cases):
    bad = {"margins": {"phase": {"venous": 0.5, "portal": 0.5, "arterial": 0.1,
                                 "delayed": 0.1, "non_contrast": 0.1}}}
    with pytest.raises(PlanError, match=r"detection\.target.*outside the study's support"):
        analysis.run(_plan(target=bad), analysis.Tables(cases=cases), errors="raise",
                     only=["transport"])


@pytest.mark.parametrize("target, fragment", [
    ({}, "neither margins nor a prevalence"),
    ({"margins": {"label": {"1": 1, "0": 4}}, "prevalence": 0.2}, "label margin twice"),
    ({"margins": {"sex": {"F": 0, "M": 0}}}, "a share of 0"),
    ({"prevalence": 1.5}, "prevalence"),
])
def test_bad_target_refused(target, fragment):
    with pytest.raises(PlanError, match=fragment):
        _plan(target=target)


def test_missing_margin_value_left_out_and_counted(cases):
    """A scan without a value of a margin column cannot be raked: the analysis leaves it
    out (every model's row of it), counts it per column, and transports the rest;
    stats.transport itself refuses it."""
    c = cases.copy()
    c["sex"] = c["sex"].astype(object)
    gone = c["case_id"].drop_duplicates().iloc[:7]
    c.loc[c["case_id"].isin(gone), "sex"] = None
    res = analysis.run(_plan(target=TARGET), analysis.Tables(cases=c), errors="raise",
                       only=["transport"])
    ev = res["evaluation"]
    n = int(ev.loc[ev["sex"].isna(), "case_id"].nunique())
    assert n > 0 and res.decisions.transport.left_out == {"sex": n}
    want = stats.transport(ev[ev["sex"].notna()], {"sex": {"F": 1, "M": 1},
                                                   "phase": TARGET["margins"]["phase"],
                                                   "prevalence": 0.2},
                           cluster=res["cluster"])
    pd.testing.assert_frame_equal(res["transport"].drop(columns="role"), want)
    with pytest.raises(stats.schema.ContractError, match="is missing in rows"):
        stats.transport(ev, {"sex": {"F": 1, "M": 1}})


def test_the_demos_replicates_are_all_refitted_in_the_batch():
    """The demo's contrast (race Unknown vs White; the GLMM on its boundary, i.e. the
    logistic model, with age group, phase, sex, log size and the site shares): a
    replicate that leaves out the few detected scans of the youngest age group is
    quasi-completely separated along the intercept and the other age levels. The batched
    Newton solves every replicate (stats.gaps.FLAT_EIG; with the old floor of 1e-8, 26 and
    73 of the 500 replicates ran out of iterations and were refitted alone, 18 s of the
    demo's CPU time)."""
    from analysis.plan import load_plan
    from clinrel.cli.report import demo_plan_path
    from reports.study import load_tables

    plan = load_plan(demo_plan_path())
    res = analysis.run(plan, load_tables(plan), errors="raise", only=["gap_decomposition"])
    out = res["gap_decomposition"]
    assert len(out) and (out["n_refit"] == 0).all(), out.groupby("model")["n_refit"].first()
    assert (out["n_boot"] == plan.detection.gaps.n_boot).all()
