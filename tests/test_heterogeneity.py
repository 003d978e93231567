"""stats.heterogeneity.heterogeneity_test against R (tests/r/heterogeneity.R ->
tests/r/heterogeneity.csv): Pearson's X^2 = chisq.test(correct = FALSE) to 1e-10 and the
Rao-Scott first-order correction = survey::svychisq(statistic = "Chisq") to 1e-8, on
simulated patients with 1-4 scans, for phase, age_group and their intersection."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stats.heterogeneity import heterogeneity_test
from stats.schema import ContractError, check_tidy

R = Path(__file__).parent / "r"
BY = ["phase", "age_group", ("age_group", "phase")]


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    return pd.read_csv(R / "data" / "heterogeneity.csv", dtype={"case_id": str})


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    return pd.read_csv(R / "heterogeneity.csv")


def _r(ref, model, estimand, axis, test):
    sel = ref[(ref.model == model) & (ref.estimand == estimand) & (ref.axis == axis)
              & (ref.test == test)]
    return sel.set_index("quantity").value


@pytest.mark.parametrize("estimand", ["sensitivity", "specificity"])
def test_pearson_matches_chisq_test(cases, ref, estimand):
    out = heterogeneity_test(cases, BY, estimand=estimand)
    check_tidy(out)
    assert len(out) == 6 and (out.method == "pearson-chisq").all()
    assert (out.estimand == estimand).all() and out.design_effect.eq(1).all()
    for row in out.itertuples():
        r = _r(ref, row.model, estimand, row.group_var, "pearson")
        assert abs(row.statistic - r["statistic"]) < 1e-10, row
        assert abs(row.p_value - r["p_value"]) < 1e-10, row
        assert row.df == r["df"] and row.n == r["n"] and row.n_levels == r["n_levels"]
        assert row.n_pos == (row.n if estimand == "sensitivity" else 0)


@pytest.mark.parametrize("estimand", ["sensitivity", "specificity"])
def test_rao_scott_matches_svychisq(cases, ref, estimand):
    """Patients repeat: the first-order Rao-Scott test. Plain Pearson (the old behaviour of
    treating scans as independent) has p-values 1e-3 to 0.1 away from svychisq's here."""
    out = heterogeneity_test(cases, BY, estimand=estimand, cluster="patient_id")
    check_tidy(out)
    assert (out.method == "rao-scott-chisq").all()
    for row in out.itertuples():
        r = _r(ref, row.model, estimand, row.group_var, "rao-scott")
        assert abs(row.pearson_statistic - r["pearson_statistic"]) < 1e-10, row
        assert abs(row.design_effect - r["design_effect"]) < 1e-8, row
        assert abs(row.statistic - r["pearson_statistic"] / r["design_effect"]) < 1e-8
        assert abs(row.p_value - r["p_value"]) < 1e-8 * max(1.0, r["p_value"]), row
        assert row.df == r["df"] and row.n_clusters == r["n_clusters"]
    # clustering matters in these data: the corrected p-values are not Pearson's
    plain = heterogeneity_test(cases, BY, estimand=estimand)
    assert np.max(np.abs(out.p_value - plain.p_value)) > 1e-3


def test_empty_levels_are_excluded_and_said(cases, ref):
    """An unused category is left out (R drops it) and named; results unchanged."""
    d = cases.copy()
    d["phase"] = pd.Categorical(d["phase"], categories=["venous", "arterial", "portal",
                                                         "delayed", "non_contrast"])
    out = heterogeneity_test(d, ["phase"], cluster="patient_id")
    assert (out.flag.str.split(";").map(lambda f: "empty_levels" in f)).all()
    assert (out.levels_excluded == "portal").all() and (out.n_levels == 4).all()
    for row in out.itertuples():
        r = _r(ref, row.model, "sensitivity", "phase", "rao-scott")
        assert abs(row.p_value - r["p_value"]) < 1e-8


def test_not_estimable_and_small_expected():
    d = pd.DataFrame({"case_id": [f"c{i}" for i in range(12)], "model": "m",
                      "label": [1] * 8 + [0] * 4, "score": 0.0, "site": "s",
                      "pred": [1] * 8 + [0, 0, 1, 0],
                      "phase": ["a", "a", "b", "b", "c", "c", "a", "b", "a", "b", "a", "b"],
                      "only": "x"})
    sens = heterogeneity_test(d, ["phase", "only"]).set_index("group_var")
    # every positive detected: one outcome only, no test (R: NaN statistic)
    assert np.isnan(sens.loc["phase", "statistic"]) and np.isnan(sens.loc["phase", "p_value"])
    assert "not_estimable" in sens.loc["phase", "flag"]
    assert sens.loc["only", "n_levels"] == 1 and "not_estimable" in sens.loc["only", "flag"]
    spec = heterogeneity_test(d, ["phase"], estimand="specificity").iloc[0]
    # no negatives at level c: excluded and said; 4 negatives: expected counts below 5
    assert spec.flag == "empty_levels;small_expected" and spec.levels_excluded == "c"
    assert spec.n_levels == 2 and spec.df == 1 and spec.n == 4 and spec.n_neg == 4
    assert spec.n_pos == 0 and np.isfinite(spec.p_value)
    with pytest.raises(ValueError, match="estimand must be one of"):
        heterogeneity_test(d, ["phase"], estimand="ppv")
    with pytest.raises(ContractError, match="cluster column 'patient'"):
        heterogeneity_test(d, ["phase"], cluster="patient")


def test_pearson_recomputed_by_hand(cases):
    """An independent recomputation with pandas (crosstab) for one model and axis."""
    pos = cases[(cases.model == "model_B") & (cases.label == 1)]
    tab = pd.crosstab(pos.age_group + ":" + pos.phase, pos.pred).to_numpy(float)
    e = tab.sum(1, keepdims=True) * tab.sum(0, keepdims=True) / tab.sum()
    x2 = ((tab - e) ** 2 / e).sum()
    out = heterogeneity_test(cases, [("age_group", "phase")])
    got = out[out.model == "model_B"].statistic.iloc[0]
    assert got == pytest.approx(x2, rel=1e-12)
