"""The precision table with repeated scans and no ICC in the plan (issue 15; review
finding: its half-widths treated scans as independent and contradicted the cluster-aware
subgroup tables). The analysis layer estimates the ICC from the study (Kish's
deff = 1 + (m - 1) icc solved at the overall cells) and records it (``precision.icc``)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from stats.analysis import load_plan, run
from stats.analysis.inputs import load_tables, plan_limits


@pytest.fixture(scope="module")
def demo():
    from clinrel.cli.report import demo_plan_path

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(plan, load_tables(plan), only=["precision", "subgroup_metrics"],
                   errors="raise")


def test_icc_is_estimated_from_the_overall_design_effects(demo):
    r = demo
    icc = r.decisions["precision.icc"]
    assert icc["source"] == "estimated"
    ev, sm = r["evaluation"], r["subgroup_metrics"]
    want = 0.0
    for model in ev["model"].unique():
        for est, lab in (("sensitivity", 1), ("specificity", 0)):
            m = ev[(ev["model"] == model) & (ev["label"] == lab)].groupby("patient_id").size()
            kish = (m ** 2).sum() / m.sum()
            deff = sm[(sm.group_var == "overall") & (sm.model == model)
                      & (sm.estimand == est)]["design_effect"].iloc[0]
            want = max(want, (deff - 1) / (kish - 1))
    assert icc["value"] == pytest.approx(want, rel=1e-12) and 0 < want < 1
    pr = r["precision"]
    o = pr[(pr.group_var == "overall") & (pr.method == "wilson")
           & (pr.estimand == "sensitivity")].iloc[0]
    m = ev[(ev["model"] == o["model"]) & (ev["label"] == 1)].groupby("patient_id").size()
    assert o["design_effect"] == pytest.approx(1 + ((m ** 2).sum() / m.sum() - 1) * want,
                                               rel=1e-12)
    # no longer the scans-as-independent half-width: at least the cluster-aware table's
    s = sm[(sm.group_var == "overall") & (sm.model == o["model"])
           & (sm.estimand == "sensitivity")].iloc[0]
    assert o["half_width"] >= (s["conf_high"] - s["conf_low"]) / 2 - 1e-9
    assert np.isfinite(pr["design_effect"]).all() and (pr["design_effect"] >= 1).all()


def test_multiplicity_statement_names_the_family_the_code_uses():
    """Review finding: the methods said Holm per axis for the subgroup-versus-rest tests
    while the adjustment runs over every level of every single axis per model and
    estimand. The statement now says so, and the family is checked here."""
    from clinrel.cli.report import demo_plan_path
    from statsmodels.stats.multitest import multipletests

    from stats.analysis.detection import MULTIPLICITY

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run(plan, load_tables(plan), only=["subgroup_vs_rest"], errors="raise")
    svr = r["subgroup_vs_rest"]
    assert "every level of every single-variable axis" in MULTIPLICITY
    for _, g in svr.groupby(["model", "estimand"]):
        ok = g["p_value"].notna()
        assert g["group_var"].nunique() > 1
        np.testing.assert_allclose(g.loc[ok, "p_adjusted"],
                                   multipletests(g.loc[ok, "p_value"], method="holm")[1],
                                   rtol=1e-12)
