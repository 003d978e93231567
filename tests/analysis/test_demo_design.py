"""The demo's intervals respect the data's design (repeated scans, few sites).

* the precision table with repeated scans and no ICC in the plan: its half-widths treated
  scans as independent and contradicted the cluster-aware subgroup tables; the analysis
  layer now estimates the ICC from the study (the one-way ANOVA estimator over patients
  of whether each call is right, per model and estimand, the largest) and records it
  (``precision.icc``);
* the multiplicity statement names the family the code adjusts;
* the encoder probes' reliability bins pool each case's predictions over seeds: now
  cluster-aware over cases."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from analysis import load_plan, run
from analysis.inputs import load_tables, plan_limits


@pytest.fixture(scope="module")
def demo():
    from clinrel.cli.report import demo_plan_path

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(plan, load_tables(plan), only=["precision", "subgroup_metrics"],
                   errors="raise")


def test_icc_is_estimated_from_the_study(demo):
    r = demo
    icc = r.decisions["precision.icc"]
    assert icc["source"] == "estimated"
    ev, sm = r["evaluation"], r["subgroup_metrics"]
    want = 0.0
    for model in ev["model"].unique():
        for lab in (1, 0):      # sensitivity on positives, specificity on negatives
            d = ev[(ev["model"] == model) & (ev["label"] == lab)]
            y = pd.Series(((d["pred"] == 1) == (d["label"] == 1)).astype(float).to_numpy(),
                          index=d["patient_id"].to_numpy())
            # unbalanced one-way ANOVA estimator (Donner 1986), written out here
            g = y.groupby(level=0)
            m, mean = g.size(), g.mean()
            N, k = len(y), len(m)
            msb = (m * (mean - y.mean()) ** 2).sum() / (k - 1)
            msw = ((y - mean.reindex(y.index).to_numpy()) ** 2).sum() / (N - k)
            m0 = (N - (m ** 2).sum() / N) / (k - 1)
            want = max(want, (msb - msw) / (msb + (m0 - 1) * msw))
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

    from analysis.detection import VS_REST_CLAUSE

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run(plan, load_tables(plan), only=["subgroup_vs_rest", "heterogeneity"],
                errors="raise")
    svr = r["subgroup_vs_rest"]
    assert "every level of every single-variable axis" in VS_REST_CLAUSE
    # the recorded statement (the heterogeneity analysis writes it), not the constant
    assert "every level of every single-variable axis" in r.decisions["multiplicity"]
    for _, g in svr.groupby(["model", "estimand"]):
        ok = g["p_value"].notna()
        assert g["group_var"].nunique() > 1
        np.testing.assert_allclose(g.loc[ok, "p_adjusted"],
                                   multipletests(g.loc[ok, "p_value"], method="holm")[1],
                                   rtol=1e-12)


def test_encoder_reliability_bins_cluster_on_the_case():
    from clinrel.cli.report import demo_plan_path

    from analysis.calibration import PROBE
    from stats.calibration import reliability_table

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run(plan, load_tables(plan), only=["calibration"], errors="raise")
    rel = r["calibration"]["reliability"]
    enc = rel[(rel["source"] == PROBE) & (rel["stage"] == "before")]
    assert len(enc) and (enc["method"] == "wilson-cluster").all()
    assert (enc["n_clusters"] < enc["n"]).any()          # cases repeat over seeds
    probe = r.tables.probe_predictions
    unit = enc["unit"].iloc[0]
    # the CRS rows: the frozen regime at the plan's layer policy (last; the handcrafted
    # baseline has one layer)
    assert plan.crs.layer_policy == "last"
    layers = set(probe.loc[probe["encoder"] == unit, "layer"])
    layer = "last" if "last" in layers else layers.pop()
    g = probe[(probe["encoder"] == unit) & (probe["label_fraction"] == 1)
              & (probe["condition"] == "clean") & (probe["regime"] == "frozen")
              & (probe["layer"] == layer)]
    want = reliability_table(g["label"].to_numpy(), g["prob"].to_numpy(float),
                             n_bins=int(enc["n_bins"].iloc[0]),
                             cluster=(g["dataset"] + "|" + g["case_id"]).to_numpy())
    got = enc[(enc["unit"] == unit) & (enc["regime"] == "frozen")]
    np.testing.assert_allclose(got["conf_low"].to_numpy(), want["conf_low"].to_numpy(),
                               rtol=1e-12)
    np.testing.assert_array_equal(got["n_clusters"].to_numpy(), want["n_clusters"].to_numpy())


def test_crs_replicate_counts_are_the_crs_rows_and_the_ranks_are_stated():
    """Review finding: the methods counted 0 to 1491 unusable replicates over every axis
    row (the ECE rows have none) while the CRS table said 369 to 1491, and the rank
    probabilities' replicates were not stated."""
    import pandas as pd

    from reports.sections.crs import replicates_text

    from analysis.plan import plan_for_tables

    crs = plan_for_tables(crs={"bootstrap": {"n_boot": 100, "seed": 7}})   # the plan
    scores = pd.DataFrame({"estimand": ["calibration", "crs", "crs"], "n_boot": 100,
                           "n_boot_not_estimable": [0, 3, 9]})
    ranks = pd.DataFrame({"n_boot_not_estimable": [12, 12]})
    t = replicates_text(scores, crs, ranks)
    assert "3 to 9 of them (by encoder or pair) could not be estimated" in t
    assert "rank probabilities use the 88 replicates" in t
    one = replicates_text(pd.DataFrame({"n_boot": [100], "n_boot_not_estimable": [4]}), crs)
    assert "; 4 of them could not be estimated" in one and "rank" not in one
    none = replicates_text(pd.DataFrame({"n_boot": [100], "n_boot_not_estimable": [0]}), crs)
    assert none == "100 paired-seed bootstrap replicates drawn (seed 7)"


def test_block_tests_are_holm_adjusted_per_model_and_crude_n_is_the_denominator():
    from clinrel.cli.report import demo_plan_path
    from statsmodels.stats.multitest import multipletests

    from analysis.detection import MULTIPLICITY

    BLOCKS_CLAUSE_TEXT = "likelihood-ratio tests of their blocks"
    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run(plan, load_tables(plan), only=["adjusted_blocks", "adjusted_vs_crude",
                                               "heterogeneity"], errors="raise")
    assert BLOCKS_CLAUSE_TEXT in r.decisions["multiplicity"]     # the recorded statement
    bt = r["adjusted_blocks"]
    lr = bt[bt["estimand"] == "likelihood_ratio"]
    for _, g in lr.groupby("model"):
        assert len(g) >= 4
        np.testing.assert_allclose(g["p_adjusted"], multipletests(g["p_value"], method="holm")[1],
                                   rtol=1e-12)
    from analysis.detection import BLOCKS_CLAUSE

    assert "likelihood-ratio tests of their blocks" in BLOCKS_CLAUSE
    assert "{blocks}" in MULTIPLICITY
    cmp = r["adjusted_vs_crude"]
    for (model, var, level), g in cmp.groupby(["model", "variable", "group_level"]):
        if set(g["kind"]) >= {"crude"} and len(g) == 2:
            assert g["n"].nunique() == 1, (model, var, level)   # both count positives
    # the demo's fits leave out the positives without a recorded size: the crude values
    # count the same scans as the fits (like with like)
    rows = r.decisions["adjusted.crude_rows"]
    miss = r["adjusted_missing"]
    used = miss.loc[miss["fit_method"] == "glmm", "n_used"]
    assert rows["used"] < rows["population"] and (used == rows["used"]).all(), (rows, miss)


def test_zero_width_auc_intervals_are_flagged():
    """Review finding: a subgroup AUC of 0.50 [0.50, 0.50] (all scores tied) carried only
    small_n, and subgroup AUCs of exactly 1 carried no auc_boundary flag."""
    import pandas as pd

    import stats

    rows = []
    for lvl, scores, labels in (("perfect", [0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]),
                                ("tied", [0.5, 0.5, 0.5, 0.5], [1, 1, 0, 0]),
                                ("mixed", [0.9, 0.2, 0.8, 0.1], [1, 1, 0, 0])):
        for i, (s, y) in enumerate(zip(scores, labels)):
            rows.append({"case_id": f"{lvl}{i}", "model": "m", "label": y, "score": s,
                         "pred": int(s >= 0.5), "site": "s", "group": lvl})
    out = stats.subgroup_metrics(pd.DataFrame(rows), by=["group"], metrics=["auc"])
    out = out[out.group_var == "group"].set_index("group_level")
    assert "auc_boundary" in out.loc["perfect", "flag"].split(";")
    assert out.loc["perfect", "conf_low"] == out.loc["perfect", "conf_high"] == 1.0
    assert "auc_zero_variance" in out.loc["tied", "flag"].split(";")
    assert out.loc["tied", "estimate"] == 0.5
    assert not {"auc_boundary", "auc_zero_variance"} & set(out.loc["mixed", "flag"].split(";"))


def test_report_coverage_figures_match_the_bench_tables():
    """The methods and calibration texts quote simulated coverage; the figures must be
    those of the bench tables they cite (a rerun that changes them fails here)."""
    import inspect
    import re
    from pathlib import Path

    from reports.sections import calibration, methods

    bench = Path(__file__).resolve().parents[2] / "bench"
    cc = (bench / "cluster_coverage.md").read_text()
    both = re.search(r"\| open: both tails can err \| \d+ \| ([\d.]+) \| ([\d.]+) \|", cc)
    closed = re.search(r"\| closed in most studies \| \d+ \| ([\d.]+) \| ([\d.]+) \| "
                       r"\d+ of \d+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", cc).groups()
    wilson_lo = re.search(r"\| wilson \| ([\d.]+) \|", cc).group(1)
    src = inspect.getsource(methods)
    assert "{}-{}%".format(*both.groups()) in src
    assert "{}-{}%".format(*closed[:2]) in src and "{}-{}%".format(*closed[3:]) in src
    assert f"at most {closed[2]}%" in src
    assert f"down to {wilson_lo}%" in src
    ece = (bench / "ece_cluster_coverage.md").read_text()
    rows = [r.split("|")[1:-1] for r in ece.splitlines() if re.match(r"\| \d+ \| ", r)]
    basic = [float(r[i]) for r in rows for i in (4, 6)]        # case and cluster basic
    span = f"{round(100 * min(basic))}-{round(100 * max(basic))}%"
    assert span in inspect.getsource(calibration), span
