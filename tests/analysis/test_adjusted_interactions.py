"""The analysis layer's nested GLMM, contrasts, variance partition and interaction tests
(issue 32) on an in-memory cases table with repeated patients nested in sites
(tests/r/data/glmer_nested.csv): the default rule picks ``(1 | site/patient_id)``; the
phase:model interaction fits both models together with patients nested in sites and its
likelihood-ratio test and within-phase model odds ratios equal lme4 / emmeans
(tests/r/glmer_nested.R; 1e-3 absolute on the statistic, 2e-3 relative on the odds
ratios); exploratory interactions carry no Holm adjustment and no cell estimates."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis.plan import plan_for_tables

R_DIR = Path(__file__).resolve().parents[1] / "r"
FORMULA = "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)"
LEVELS = {"phase": ["venous", "arterial", "delayed", "non_contrast"],
          "age_group": ["<40", "40-59", "60-74", "75+"], "sex": ["F", "M"],
          "race": ["White", "Black", "Asian", "Other", "Unknown"]}
ONLY = ["adjusted_interactions", "adjusted_contrasts", "adjusted_variance_partition",
        "adjusted_marginal"]


def _run(roles=None, group="site", interactions=("phase:model",)):
    d = pd.read_csv(R_DIR / "data" / "glmer_nested.csv").assign(score=lambda x: x.pred * 100.0)
    adj = {"formula": FORMULA, "levels": LEVELS, "contrasts": ["phase"],
           "interactions": list(interactions), "group": group}
    plan = plan_for_tables(detection={"threshold": {"value": 50}, "adjusted": adj},
                           **({"roles": roles} if roles else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analysis.run(plan, analysis.Tables(cases=d), only=ONLY, errors="raise")


@pytest.fixture(scope="module")
def res():
    return _run()


@pytest.fixture(scope="module")
def ref():
    return pd.read_csv(R_DIR / "glmer_nested.csv", keep_default_na=False)


def test_nested_by_default_and_the_fit_of_the_means(res):
    gg = res.decisions["adjusted.glmm_group"]
    assert gg == {"group": ["site", "patient_id"], "rule": "repeated_nested",
                  "why": gg["why"]} and "(1 | site/patient_id)" in gg["why"]
    assert res["adjusted_fits"]["glmm"].group == ("site", "patient_id")
    assert res.decisions["adjusted.means_fit"] == "glmm"
    assert res.decisions["adjusted.contrasts_fit"] == "glmm"
    con = res["adjusted_contrasts"]
    assert set(con["group_var"]) == {"phase"} and len(con) == 2 * 6
    assert con["p_adjusted"].notna().all() and (con["fit_method"] == "glmm").all()
    vp = res["adjusted_variance_partition"]
    assert set(vp["component"]) >= {"site", "patient_id:site", "protocol", "demographics",
                                     "tumour", "residual (logistic)"}
    assert np.allclose(vp.groupby("model")["estimate"].sum(), 1.0)
    assert res.decisions["adjusted.partition_fit"] == "glmm"


def test_plan_list_of_one_keeps_one_level():
    r = _run(group=["site"], interactions=())
    assert r.decisions["adjusted.glmm_group"]["rule"] == "plan_one"
    assert r["adjusted_fits"]["glmm"].group == "site"
    # one level per site with repeated patients: the means come from the GEE when fitted
    # (not here: glmm only), so the GLMM
    assert r.decisions["adjusted.means_fit"] == "glmm"


def test_phase_by_model_interaction_equals_lme4(res, ref):
    got = res["adjusted_interactions"]
    t = got["tests"].iloc[0]
    r = ref[(ref.dataset == "interaction") & (ref.fit == "lrt_tight")].set_index("quantity")
    assert t.term == "phase:model" and t.model == "pooled"
    assert t.statistic == pytest.approx(r.loc["statistic", "value"], abs=1e-3)
    assert t.df == r.loc["df", "value"] == 3
    assert t.p_adjusted == pytest.approx(t.p_value)      # one test: Holm leaves it
    rec = res.decisions["adjusted.interactions"]["phase:model"]
    assert rec["group"] == ["site", "patient_id"]
    cc = got["contrasts"]
    pr = ref[(ref.dataset == "interaction") & (ref.fit == "pairs_tight")].pivot(
        index="term", columns="quantity", values="value")
    cc = cc.assign(key=(cc["stratum"] + ":" + cc["group_level"]).to_numpy()).set_index("key")
    np.testing.assert_allclose(cc.loc[pr.index, "estimate"], pr["odds_ratio"], rtol=2e-3)
    np.testing.assert_allclose(cc.loc[pr.index, "p_adjusted"], pr["p_holm"], atol=2e-3)
    mm = got["means"]
    assert len(mm) == 8 and mm["group_var"].iloc[0] == "phase:model"


def test_exploratory_interactions_are_tests_only():
    r = _run(roles={"interactions": "exploratory"},
             interactions=("phase:model", "phase:age_group"))
    got = r["adjusted_interactions"]
    assert list(got["tests"]["term"]) == ["phase:model", "phase:age_group", "phase:age_group"]
    assert got["tests"]["p_adjusted"].isna().all()
    assert not len(got["means"]) and not len(got["contrasts"])
    assert r.decisions["adjusted.interaction_multiplicity"].startswith("none")
