"""stats.detection: thresholds (prespecified / validation-chosen), sweep, counts."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from stats import detection as det
from stats.schema import ContractError, check_tidy
from stats.simulate import benchx_cohort


@pytest.fixture(scope="module")
def sim() -> pd.DataFrame:
    return benchx_cohort(600, n_models=3, seed=11).data


def _brute_youden(v):
    best = (-np.inf, None)
    for t in np.unique(v.score):
        pred = v.score >= t
        j = pred[v.label == 1].mean() + (~pred[v.label == 0]).mean() - 1
        if j > best[0] or (j == best[0] and t > best[1]):
            best = (j, t)
    return best[1]


def test_scan_level_prespecified(sim):
    out = det.scan_level(sim, threshold=50)
    assert (out.pred == (sim.score >= 50)).all()
    assert (out.threshold_source == "prespecified").all()
    assert out.attrs["threshold"]["prespecified"] is True
    per = det.scan_level(sim, threshold={"model_A": 10, "model_B": 20, "model_C": 30})
    assert set(per.groupby("model").threshold.first()) == {10, 20, 30}
    with pytest.raises(ContractError, match="no value for model"):
        det.scan_level(sim, threshold={"model_A": 10})


def test_scan_level_youden_uses_validation_only(sim):
    out = det.scan_level(sim, criterion="youden")
    assert (out.threshold_source == "validation-youden").all()
    assert out.attrs["threshold"]["prespecified"] is False
    for m, g in sim.groupby("model"):
        v = g[g.split == "validation"]
        assert out.attrs["threshold"]["values"][m] == _brute_youden(v)
    # changing test-split scores does not move the frozen threshold
    sim2 = sim.copy()
    sim2.loc[sim2.split == "test", "score"] *= 3
    assert det.scan_level(sim2).attrs["threshold"]["values"] == out.attrs["threshold"]["values"]


def test_scan_level_target_specificity(sim):
    out = det.scan_level(sim, criterion="target_specificity", target_specificity=0.9)
    for m, g in sim.groupby("model"):
        v = g[g.split == "validation"]
        t = out.attrs["threshold"]["values"][m]
        neg = v.score[v.label == 0]
        assert (neg < t).mean() >= 0.9
        lower = np.unique(v.score)[np.unique(v.score) < t]
        if len(lower):  # the next lower observed threshold misses the target
            assert (neg < lower[-1]).mean() < 0.9
    with pytest.raises(ValueError, match="target_specificity"):
        det.scan_level(sim, criterion="target_specificity")
    with pytest.raises(ContractError, match="validation"):
        det.scan_level(sim.drop(columns="split"))


def test_confusion_counts_match_pandas(sim):
    cases = det.scan_level(sim, threshold=50)
    cc = det.confusion_counts(cases, by=["phase", ("age_group", "phase")])
    n_levels = 1 + 4 + 16
    assert len(cc) == 3 * n_levels
    got = cc[cc.group_var == "phase"].set_index(["model", "group_level"])
    for (m, ph), g in cases.groupby(["model", "phase"], observed=True):
        row = got.loc[(m, ph)]
        assert row.tp == ((g.pred == 1) & (g.label == 1)).sum()
        assert row.fp == ((g.pred == 1) & (g.label == 0)).sum()
        assert row.tn == ((g.pred == 0) & (g.label == 0)).sum()
        assert row.fn == ((g.pred == 0) & (g.label == 1)).sum()
    ov = cc[cc.group_var == "overall"]
    assert (ov.n == 600).all()


def test_empty_intersection_cells_kept():
    df = pd.DataFrame({"case_id": list("abcd") * 2, "model": ["m1"] * 4 + ["m2"] * 4,
                       "label": [1, 0, 1, 0] * 2, "score": [60, 1, 5, 70] * 2,
                       "site": "s", "a": ["x", "x", "y", "y"] * 2,
                       "b": pd.Categorical(["u", "u", "u", "u"] * 2, categories=["u", "v"])})
    cc = det.confusion_counts(det.scan_level(df, threshold=50), by=[("a", "b")])
    assert set(cc.group_level) == {"overall", "x:u", "x:v", "y:u", "y:v"}
    assert (cc[cc.group_level == "x:v"].n == 0).all()


def test_unpaired_and_missing_pred():
    df = pd.DataFrame({"case_id": ["a", "b", "a"], "model": ["m1", "m1", "m2"],
                       "label": [1, 0, 1], "score": [1.0, 2, 3], "pred": [1, 0, 1]})
    with pytest.raises(ContractError, match="paired design"):
        det.confusion_counts(df)
    with pytest.raises(ContractError, match="scan_level"):
        det.confusion_counts(df.drop(columns="pred").iloc[:2])


def test_threshold_sweep(sim):
    thr = [5, 20, 50, 100, 200]
    out = det.threshold_sweep(sim, thr, chosen=50)
    check_tidy(out)
    sens = out[(out.estimand == "sensitivity")]
    for (m, t), row in sens.set_index(["model", "threshold"]).iterrows():
        g = sim[sim.model == m]
        assert row.estimate == pytest.approx((g.score[g.label == 1] >= t).mean(), abs=1e-15)
    f1 = out[(out.estimand == "f1") & (out.threshold == 20)].set_index("model").estimate
    for m, g in sim.groupby("model"):
        p = g.score >= 20
        tp = (p & (g.label == 1)).sum()
        assert f1[m] == pytest.approx(2 * tp / (p.sum() + (g.label == 1).sum()))
    tau = out[(out.estimand == "kendall_tau") & (out.ranked_by == "youden")].set_index("threshold")
    assert tau.estimate[50] == pytest.approx(1.0)
    y = out[out.estimand == "youden"].pivot(index="threshold", columns="model", values="estimate")
    for t in thr:
        want = sps.kendalltau(y.loc[t], y.loc[50]).statistic
        assert tau.estimate[t] == pytest.approx(want, nan_ok=True)


def test_kendall_tau_b_matches_scipy():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, size=(30, 7)).astype(float)
    r = rng.integers(0, 4, size=7).astype(float)
    got = det.kendall_tau_b(X, r)
    want = [sps.kendalltau(x, r).statistic for x in X]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_cli_subgroups_and_compare(tmp_path, sim):
    from typer.testing import CliRunner

    from clinrel.cli import app

    src = tmp_path / "cases.csv"
    sim.to_csv(src, index=False)
    runner = CliRunner()
    out = tmp_path / "sub.csv"
    res = runner.invoke(app, ["subgroups", str(src), "--by", "phase", "--by", "age_group",
                              "--by", "age_group:phase", "--threshold", "50", "--n-boot", "0",
                              "--seed", "1", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out, keep_default_na=False, na_values=[""])
    assert set(table.group_var) == {"overall", "phase", "age_group", "age_group:phase"}
    assert len(table) == 3 * (1 + 4 + 4 + 16) * 7
    out2 = tmp_path / "cmp.parquet"
    res = runner.invoke(app, ["compare", str(src), "--threshold", "50", "--out", str(out2), "--quiet"])
    assert res.exit_code == 0, res.output
    assert set(pd.read_parquet(out2).estimand) == {"sensitivity_difference",
                                                   "specificity_difference", "auc_difference"}
    bad = runner.invoke(app, ["subgroups", str(src), "--by", "nope", "--threshold", "50",
                              "--out", str(tmp_path / "x.csv"), "--quiet"])
    assert bad.exit_code == 2 and "nope" in bad.output
    assert not (tmp_path / "x.csv").exists()
    chosen = runner.invoke(app, ["subgroups", str(src), "--criterion", "youden",
                                 "--out", str(tmp_path / "y.csv"), "--quiet"])
    assert chosen.exit_code == 0, chosen.output
    small = runner.invoke(app, ["subgroups", str(src), "--by", "phase", "--threshold", "50",
                                "--ci", "bootstrap", "--n-boot", "100", "--boot-ci",
                                "wilson", "--auc-scale", "logit", "--out", str(tmp_path / "w.csv"),
                                "--quiet"])
    assert small.exit_code == 0, small.output
    methods = set(pd.read_csv(tmp_path / "w.csv").method)
    assert {"bootstrap-wilson", "delong-cluster-logit-t"} <= methods  # patients repeat
    for opt, bad_value in (("--boot-ci", "basic"), ("--auc-scale", "probit")):
        bad = runner.invoke(app, ["subgroups", str(src), "--by", "phase", "--threshold", "50",
                                  "--n-boot", "10", opt, bad_value,
                                  "--out", str(tmp_path / "z.csv"), "--quiet"])
        assert bad.exit_code == 2 and bad_value in bad.output, bad.output
        assert not (tmp_path / "z.csv").exists()
