"""stats.subgroups: per-cell metrics vs pandas/R, empty cells, bins, vs-rest tests, map."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stats import subgroups as sg
from stats.detection import scan_level
from stats.intervals import auc_ci, proportion_ci
from stats.schema import ContractError, check_tidy
from stats.simulate import benchx_cohort

R = Path(__file__).resolve().parents[1] / "r"


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    return scan_level(benchx_cohort(500, n_models=3, seed=21).data, threshold=50)


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    df = pd.read_csv(R / "intervals.csv")
    df["value"] = df["value"].astype(float)
    return df


def test_subgroup_metrics_match_groupby(cases):
    out = sg.subgroup_metrics(cases, by=["phase", ("age_group", "phase")], cluster=None)
    check_tidy(out)
    assert list(out.columns[:4]) == ["estimand", "model", "group_var", "group_level"]
    n_cells = 1 + 4 + 16
    assert len(out) == 3 * n_cells * 7
    for (m, ph), g in cases.groupby(["model", "phase"], observed=True):
        rows = out[(out.model == m) & (out.group_var == "phase") & (out.group_level == ph)]
        r = rows.set_index("estimand")
        pos, neg = g[g.label == 1], g[g.label == 0]
        tp = pos.pred.sum()
        assert r.estimate["sensitivity"] == pytest.approx(pos.pred.mean(), nan_ok=True)
        assert r.estimate["specificity"] == pytest.approx(1 - neg.pred.mean(), nan_ok=True)
        assert r.estimate["ppv"] == pytest.approx(tp / g.pred.sum(), nan_ok=True)
        assert r.estimate["f1"] == pytest.approx(2 * tp / (g.pred.sum() + len(pos)))
        lo, hi = proportion_ci(tp, len(pos))
        assert r.conf_low["sensitivity"] == pytest.approx(lo) and r.conf_high["sensitivity"] == pytest.approx(hi)
        a = auc_ci(g.label, g.score)
        assert r.estimate["auc"] == pytest.approx(a.estimate[0], abs=1e-12)
        assert r.conf_low["auc"] == pytest.approx(a.conf_low[0], abs=1e-12)
        assert r.n_pos["sensitivity"] == len(pos) and r.n["auc"] == len(g)
        assert r.method["f1"] == "none" and np.isnan(r.conf_low["f1"])
    ov = out[(out.group_var == "overall") & (out.estimand == "accuracy")]
    for m, g in cases.groupby("model"):
        assert ov.set_index("model").estimate[m] == pytest.approx((g.pred == g.label).mean())


def test_empty_and_small_cells(cases):
    d = cases.assign(extra=pd.Categorical(["a"] * len(cases), categories=["a", "b"]))
    out = sg.subgroup_metrics(d, by=["extra", ("extra", "phase")], small_n=10_000,
                              cluster=None)
    empty = out[out.group_level.str.startswith("b")]
    assert len(empty) == 3 * 5 * 7
    assert (empty.flag == "empty").all() and (empty.n == 0).all() and empty.estimate.isna().all()
    nonempty = out[out.n > 0]
    # F1 has no interval without bootstrap replicates: NaN limits, flagged no_interval
    f1 = nonempty.estimand == "f1"
    assert nonempty[~f1].flag.isin(["small_n", "not_estimable"]).all()
    assert nonempty[f1].flag.str.endswith("no_interval").all()
    assert nonempty[f1].conf_low.isna().all() and (nonempty[f1].method == "none").all()


def test_f1_bootstrap_and_ci_bootstrap(cases):
    out = sg.subgroup_metrics(cases, by=["phase"], metrics=("sensitivity", "f1"),
                              n_boot=200, seed=4, cluster=None)
    f1 = out[out.estimand == "f1"]
    assert (f1.method == "bootstrap-percentile").all()
    ok = f1[f1.n > 0]
    assert (ok.conf_low <= ok.estimate).all() and (ok.estimate <= ok.conf_high).all()
    assert (out[out.estimand == "sensitivity"].method == "wilson").all()
    allb = sg.subgroup_metrics(cases, by=["phase"], metrics=("sensitivity",), ci="bootstrap",
                               n_boot=200, seed=4)
    assert (allb.method == "bootstrap-percentile").all()
    wil = sg.subgroup_metrics(cases, by=["phase"], metrics=("sensitivity", "f1", "auc"),
                              ci="bootstrap", n_boot=200, seed=4, boot_ci="wilson",
                              auc_scale="logit", cluster=None)
    assert set(wil.method) == {"bootstrap-wilson", "bootstrap-percentile", "delong-logit"}
    assert (wil[wil.estimand == "f1"].method == "bootstrap-percentile").all()
    for col in ("estimate", "std_error"):  # same replicates: only the interval differs
        np.testing.assert_array_equal(wil[wil.estimand == "sensitivity"][col],
                                      allb[col].to_numpy())
    auc = wil[(wil.estimand == "auc") & (wil.estimate > 0) & (wil.estimate < 1)]
    assert len(auc) and ((0 < auc.conf_low) & (auc.conf_low < auc.estimate)
                         & (auc.estimate < auc.conf_high) & (auc.conf_high < 1)).all()
    with pytest.raises(ValueError, match="auc_scale"):
        sg.subgroup_metrics(cases, by=["phase"], auc_scale="probit")
    with pytest.raises(ValueError, match="boot_ci"):
        sg.subgroup_metrics(cases, by=["phase"], n_boot=10, boot_ci="basic")
    with pytest.raises(ValueError, match="needs n_boot"):
        sg.subgroup_metrics(cases, by=["phase"], ci="bootstrap")
    with pytest.raises(ValueError, match="unknown metric"):
        sg.subgroup_metrics(cases, by=["phase"], metrics=("kappa",))
    with pytest.raises(ContractError, match="missing"):
        sg.subgroup_metrics(cases, by=["nope"])


def test_add_bins():
    df = pd.DataFrame({"age": [10, 39.9, 40, 59, 60, 75, 129, np.nan],
                       "tumor_size_mm": [np.nan, 5, 10, 20, 30, 50, np.nan, 1]})
    out = sg.add_bins(df, {"age": {"name": "age_group", "breaks": [0, 40, 60, 75, 130],
                                   "labels": ["<40", "40-59", "60-74", "75+"]},
                           "tumor_size_mm": {"name": "size_bin", "breaks": [0, 10, 20, 1000]}})
    assert list(out.age_group.astype(object).fillna("NA")) == [
        "<40", "<40", "40-59", "40-59", "60-74", "75+", "75+", "NA"]
    assert list(out.age_group.cat.categories) == ["<40", "40-59", "60-74", "75+"]
    assert out.size_bin.iloc[2] == "[10, 20)" and pd.isna(out.size_bin.iloc[0])
    with pytest.raises(ContractError, match="labels"):
        sg.add_bins(df, {"age": {"breaks": [0, 1, 2], "labels": ["a"]}})
    with pytest.raises(ContractError, match="increasing"):
        sg.add_bins(df, {"age": {"breaks": [0, 5, 2]}})
    # a recorded value outside the breaks is not a missing value (audit: ages 20-29 with
    # breaks from 30 were reported as age group "Missing"): an error naming rows and fix
    with pytest.raises(ContractError, match=r"column 'age': 2 recorded value\(s\) fall outside"
                       r".*rows 1 \(10\), 2 \(39.9\).*widen the breaks to cover 10 to 39.9"):
        sg.add_bins(df, {"age": {"name": "a", "breaks": [40, 60, 75, 130]}})
    with pytest.raises(ContractError, match=r"1 recorded value\(s\) are not numbers.*'45y'"):
        sg.add_bins(df.assign(age=df["age"].astype(object).where(df.index != 3, "45y")),
                    {"age": {"name": "a", "breaks": [0, 130]}})


def _two_level_cases(x1, n1, x2, n2):
    """Cases where level 'a' detects x1 of n1 positives and level 'b' x2 of n2."""
    rows = []
    for lvl, x, n in (("a", x1, n1), ("b", x2, n2)):
        for i in range(n):
            rows.append((lvl, 1, int(i < x)))
        rows += [(lvl, 0, 0)] * 20
    df = pd.DataFrame(rows, columns=["g", "label", "pred"])
    df["case_id"] = [f"c{i}" for i in range(len(df))]
    df["model"], df["score"], df["site"] = "m", df["pred"] * 100.0, "s"
    return df


def test_vs_rest_matches_prop_test(ref):
    sub = ref[ref.test == "prop-test-2"]
    for id_ in sub.id.unique():
        x1, n1, x2, n2 = (int(v) for v in id_.split("/"))
        want_p = float(sub[(sub.id == id_) & (sub.quantity == "p")].value.iloc[0])
        want_chi = float(sub[(sub.id == id_) & (sub.quantity == "chisq")].value.iloc[0])
        out = sg.subgroup_vs_rest(_two_level_cases(x1, n1, x2, n2), by=["g"])
        check_tidy(out)
        row = out[(out.estimand == "sensitivity_difference") & (out.group_level == "a")].iloc[0]
        if np.isnan(want_p):
            continue
        assert row.p_value == pytest.approx(want_p, abs=1e-10)
        assert row.statistic ** 2 == pytest.approx(want_chi, rel=1e-10)
        assert row.estimate == pytest.approx(x1 / n1 - x2 / n2)


def test_multipletests_match_p_adjust(ref):
    from statsmodels.stats.multitest import multipletests
    pv = [0.001, 0.04, 0.03, 0.2, 0.0125, 0.5, 0.049]
    sub = ref[ref.test == "p-adjust"]
    np.testing.assert_allclose(multipletests(pv, method="holm")[1],
                               sub[sub.quantity == "holm"].value, atol=1e-12)
    np.testing.assert_allclose(multipletests(pv, method="fdr_bh")[1],
                               sub[sub.quantity == "BH"].value, atol=1e-12)


def test_sensitivity_collapse_flag():
    df = _two_level_cases(5, 40, 180, 200)   # level a: sensitivity 0.125 vs 0.9
    out = sg.subgroup_vs_rest(df, by=["g"])
    a = out[out.group_level == "a"].set_index("estimand")
    assert a.collapse.all() and (a.flag == "sensitivity_collapse").all()
    assert a.p_adjusted["sensitivity_difference"] < 0.05
    assert not out[out.group_level == "b"].collapse.any()
    # if specificity collapses too, it is not a sensitivity collapse
    df2 = df.copy()
    neg_a = df2.index[(df2.g == "a") & (df2.label == 0)]
    df2.loc[neg_a, "pred"] = 1
    out2 = sg.subgroup_vs_rest(df2, by=["g"])
    assert not out2.collapse.any()


def test_failure_map(cases):
    fm = sg.failure_map(cases)
    check_tidy(fm)
    assert len(fm) == 3 * 16 and set(fm.estimand) == {"sensitivity"}
    assert set(fm.row_level) == {"<40", "40-59", "60-74", "75+"}
    g = cases[(cases.model == "model_A") & (cases.age_group == "60-74") & (cases.phase == "venous")]
    r = fm[(fm.model == "model_A") & (fm.row_level == "60-74") & (fm.col_level == "venous")].iloc[0]
    assert r.n == len(g) and r.n_pos == g.label.sum()
    assert r.estimate == pytest.approx(g.pred[g.label == 1].mean(), nan_ok=True)
