"""The analysis layer (analysis): one row rule, decisions recorded, results shared."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import stats
from analysis import ANALYSES, Tables, run
from analysis import detection as AD
from analysis.plan import plan_for_tables


def _Det(**kw):
    """The detection block of a plan, as a plan file writes it, from short keywords."""
    det: dict = {}
    if "threshold_value" in kw:
        det["threshold"] = {"value": kw.pop("threshold_value")}
    if "criterion" in kw:
        det["threshold"] = {"criterion": kw.pop("criterion")}
    if kw.pop("given_calls", False):
        det["threshold"] = {"given": True}
    boot = {k: kw.pop(k) for k in ("n_boot", "seed") if k in kw}
    if boot:
        det["bootstrap"] = boot
    if "failure_map" in kw:
        rows, cols = kw.pop("failure_map")
        det["failure_map"] = {"rows": rows, "cols": cols, **(
            {"pooled": kw.pop("pooled")} if "pooled" in kw else {})}
    if "subgroups" in kw:
        det["subgroups"] = [a[0] if len(a) == 1 else list(a) for a in kw.pop("subgroups")]
    det.update(kw)
    return det


def _Plan(det, cases="cases.csv"):
    return plan_for_tables(detection=det)


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
                                    n_boot=20, seed=5, strata=None, boot_ci="percentile",
                                    cluster=res["cluster"])
    pd.testing.assert_frame_equal(first.reset_index(drop=True), direct.reset_index(drop=True))


def test_a_failed_analysis_raises_again_on_access(cases, monkeypatch):
    from analysis.core import Analysis

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


def test_roles_and_heterogeneity_family(cases):
    from statsmodels.stats.multitest import multipletests

    det = _Det(threshold_value=50.0, subgroups=(("phase",), ("sex",)),
               exploratory_subgroups=(("age_group",),), failure_map=("age_group", "phase"))
    res = run(_Plan(det), Tables(cases=cases, input_rows={"cases": len(cases)}),
              only=["heterogeneity", "roles"])
    roles = res["roles"]
    assert roles["axis:phase"] == roles["axis:sex"] == "prespecified"
    assert roles["axis:age_group"] == roles["failure_map"] == "exploratory"
    assert roles["threshold"] == "prespecified" and roles["threshold_sweep"] == "exploratory"
    h = res["heterogeneity"]
    assert h.loc[h["group_var"] == "age_group", "p_adjusted"].isna().all()  # exploratory
    for (m, e), g in h[h["role"] == "prespecified"].groupby(["model", "estimand"]):
        want = multipletests(g["p_value"], method="holm")[1]
        np.testing.assert_allclose(g["p_adjusted"], want, rtol=1e-12)
    assert "Holm" in res.decisions["multiplicity"]


def test_cluster_is_patient_id_only_when_scans_repeat(cases):
    det = _Det(threshold_value=50.0)
    one = cases.drop_duplicates(["model", "patient_id"])
    res = run(_Plan(det), Tables(cases=one, input_rows={"cases": len(one)}), only=["cluster"])
    assert res["cluster"] is None
    rep = cases.copy()
    rep.loc[rep.index[:40], "patient_id"] = rep["patient_id"].iloc[0]
    rep = rep[~rep.duplicated(["model", "case_id"])]
    res = run(_Plan(det), Tables(cases=rep, input_rows={"cases": len(rep)}), only=["cluster"])
    assert res["cluster"] == "patient_id"
    assert run(_Plan(_Det(threshold_value=50.0, cluster=None)), Tables(cases=rep),
               only=["cluster"])["cluster"] is None


def test_adjusted_table_reference_rows_and_per_doubling(cases):
    adjusted = {"formula": "detected ~ phase + np.log(tumor_size_mm)", "methods": ["glmm"],
                "group": "site", "blocks": {}, "population": "positives", "nagq": 1,
                "levels": {"phase": ["venous", "arterial", "delayed", "non_contrast"]},
                "model": None, "bias_reduced": None, "means": [], "means_kind": "emmeans"}
    det = _Det(threshold_value=50.0, adjusted=adjusted)
    res = run(_Plan(det), Tables(cases=cases, input_rows={"cases": len(cases)}),
              only=["adjusted_table"])
    tab, terms = res["adjusted_table"], res["adjusted_terms"]
    m = tab["model"].iloc[0]
    t = tab[tab["model"] == m]
    ref = t[t["is_reference"]]
    assert list(ref["label"]) == ["phase: venous"] and (ref["odds_ratio"] == 1).all()
    assert "phase: arterial vs venous" in set(t["label"])
    size = t[t["variable"] == "tumor_size_mm"].iloc[0]
    raw = terms[(terms["model"] == m) & (terms["estimand"] == "np.log(tumor_size_mm)")].iloc[0]
    assert size["unit"] == "per doubling"
    assert size["odds_ratio"] == pytest.approx(raw["odds_ratio"] ** np.log(2), rel=1e-12)
    assert size["or_conf_low"] == pytest.approx(raw["or_conf_low"] ** np.log(2), rel=1e-12)
    # the fitted rows are inputs, one per scan: not among the result tables (results/ of a
    # report held an 81 MB copy of them at 85,000 cases x 10 models)
    assert "adjusted_rows" in res and "adjusted_rows" not in res.tidy_tables()
    assert len(res["adjusted_rows"]) == len(res["evaluation"])


def test_axis_cannot_be_both_prespecified_and_exploratory(tmp_path):
    from analysis import PlanError, plan_from_dict

    (tmp_path / "c.csv").write_text("x\n")
    raw = {"inputs": {"cases": "c.csv"},
           "detection": {"subgroups": ["phase"], "exploratory_subgroups": ["phase"]}}
    with pytest.raises(PlanError, match="either prespecified"):
        plan_from_dict(raw, path=tmp_path / "plan.yaml")


def test_pooled_and_precision_analyses(cases):
    det = _Det(threshold_value=50.0, subgroups=(("phase",), ("age_group",)),
               failure_map=("age_group", "phase"))
    res = run(_Plan(det), Tables(cases=cases, input_rows={"cases": len(cases)}),
              only=["pooled_failure_map", "pooled_axes", "precision"])
    pf = res["pooled_failure_map"]
    crude = res["failure_map"] if "failure_map" in res else None
    assert set(pf["group_var"]) == {"age_group:phase"}
    assert pf["estimate"].dropna().between(0, 1).all() and pf["crude_estimate"].notna().any()
    assert (pf.loc[pf["estimate"].isna(), "n_pos"] == 0).all()  # only empty cells are NaN
    assert set(res["pooled_axes"]["group_var"]) == {"phase", "age_group"}
    pr = res["precision"]
    assert {"half_width", "n_required"} <= set(pr.columns)
    assert res.decisions["precision.target_half_width"] == 0.05
    assert crude is None  # only what was asked is computed
    off = run(_Plan(_Det(threshold_value=50.0, failure_map=("age_group", "phase"),
                         pooled=False)), Tables(cases=cases))
    assert "pooled_failure_map" not in off and "failure_map" in off
