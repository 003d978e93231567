"""stats.heterogeneity.heterogeneity_test against R (tests/r/heterogeneity.R ->
tests/r/heterogeneity.csv): Pearson's X^2 = chisq.test(correct = FALSE) to 1e-10, the
Rao-Scott design effect = survey::svychisq(statistic = "Chisq") to 1e-8 and the default
cluster-aware test = svychisq(statistic = "F") (second-order Rao-Scott, F reference) to
1e-8, on simulated patients with 1-4 scans, for phase, age_group and their intersection;
its size by simulation (bench/heterogeneity_size.py, slow)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stats.heterogeneity import heterogeneity_test
from stats.schema import ContractError, check_tidy

R = Path(__file__).resolve().parents[1] / "r"
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
    out = heterogeneity_test(cases, BY, estimand=estimand, cluster=None)
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
    """Patients repeat: Rao-Scott's second-order test with an F reference, svychisq's
    default (measured agreement 3e-15, relative). Plain Pearson (the old behaviour of
    treating scans as independent) has p-values 1e-3 to 0.1 away from svychisq's here."""
    out = heterogeneity_test(cases, BY, estimand=estimand, cluster="patient_id")
    check_tidy(out)
    assert (out.method == "rao-scott-f").all()
    for row in out.itertuples():
        r = _r(ref, row.model, estimand, row.group_var, "rao-scott")
        f = _r(ref, row.model, estimand, row.group_var, "rao-scott-f")
        assert abs(row.pearson_statistic - r["pearson_statistic"]) < 1e-10, row
        assert abs(row.design_effect - r["design_effect"]) < 1e-8, row
        assert abs(row.statistic - f["statistic"]) < 1e-8 * max(1.0, f["statistic"]), row
        assert abs(row.df - f["ndf"]) < 1e-8 and abs(row.df_denominator - f["ddf"]) < 1e-6
        assert abs(row.p_value - f["p_value"]) < 1e-8 * max(1.0, f["p_value"]), row
        assert row.n_levels - 1 == r["df"] and row.n_clusters == r["n_clusters"]
    # clustering matters in these data: the corrected p-values are not Pearson's
    plain = heterogeneity_test(cases, BY, estimand=estimand, cluster=None)
    assert np.max(np.abs(out.p_value - plain.p_value)) > 1e-3
    assert plain.df_denominator.isna().all()


def test_empty_levels_are_excluded_and_said(cases, ref):
    """An unused category is left out (R drops it) and named; results unchanged."""
    d = cases.copy()
    d["phase"] = pd.Categorical(d["phase"], categories=["venous", "arterial", "portal",
                                                         "delayed", "non_contrast"])
    out = heterogeneity_test(d, ["phase"], cluster="patient_id")
    assert (out.flag.str.split(";").map(lambda f: "empty_levels" in f)).all()
    assert (out.levels_excluded == "portal").all() and (out.n_levels == 4).all()
    for row in out.itertuples():
        r = _r(ref, row.model, "sensitivity", "phase", "rao-scott-f")
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
    out = heterogeneity_test(cases, [("age_group", "phase")], cluster=None)
    got = out[out.model == "model_B"].statistic.iloc[0]
    assert got == pytest.approx(x2, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("setting, bound", [
    (("2-4", 2.0, 0.6, 6, "patient", 300), 0.07),   # sex/race-like axis, strong clustering
    (("2-4", 2.0, 0.6, 4, "scan", 30), 0.07),       # phase-like axis, few patients
    (("2-4", 1.0, 0.6, 4, "patient", 30), 0.09),    # the worst setting: 7.7% at 20,000 reps
])
def test_size_by_simulation(setting, bound):
    """The default cluster-aware test (Rao-Scott second order, F reference) keeps its 5%
    size under the null (bench/heterogeneity_size.py, 3,000 replicates, Monte Carlo SE
    0.4%): at most 7%, except with 30 patients on a patient-level axis, where the bench
    measures up to 7.7% (the bound here is 9%). Where the level is a patient attribute,
    Pearson with scans as independent rejects far more often, and so does the first-order
    correction (the default before) with 30 patients: the bound is one they break."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from heterogeneity_size import rejection_rates

    r = rejection_rates(*setting, reps=3000, check=3)
    assert r["method"] == "rao-scott-f" and r["not estimable"] <= 3, r
    assert 0.02 <= r["default"] <= bound, r
    if setting[4] == "patient":
        assert r["pearson"] > 0.1, r
    if setting[-1] == 30 and setting[4] == "patient":
        assert r["rs-chisq"] > bound, r
