"""Cluster-aware closed-form proportion intervals (stats.clustered).

* against R (tests/r/clustered.R -> tests/r/clustered.csv): the ratio SE equals
  ``survey::svymean`` with ``ids = ~patient_id`` on the cell's denominator scans to 1e-8;
  the design effect, Korn & Graubard's effective sample size, the Wilson (``prop.test``)
  and Clopper-Pearson (``qbeta``) intervals at the effective counts follow, and
  Clopper-Pearson equals ``svyciprop(method = "beta")`` where the effective size is below
  n; for five proportions x two models x every cell of phase, age_group (with a Missing
  level), tumor_location (Missing and not applicable) and age_group x phase;
* the rules: no repeated patient -> the plain interval exactly; p of 0 or 1 -> n_eff = n
  and flag ``deff_not_estimable``; one patient with several scans -> n_eff = 1;
* the same numbers through ``threshold_sweep`` and ``failure_map``; ``cluster`` is also the
  bootstrap's resampling unit;
* ``subgroup_vs_rest(cluster=)``: the rest's effective size (the rest as a cell of its
  own, against svymean), prop.test's z and p and Newcombe's interval on the effective
  counts, against R;
* coverage (slow): ``bench/cluster_coverage.py`` at fewer replicates.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stats
from stats.clustered import FLAG_DEFF
from stats.detection import PROPORTIONS
from stats.schema import ContractError, check_tidy

R = Path(__file__).resolve().parents[1] / "r"
BY = ["phase", "age_group", "tumor_location", ("age_group", "phase")]
KEY = ["model", "estimand", "group_var", "group_level"]


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    return pd.read_csv(R / "data" / "clustered.csv", dtype={"case_id": str})


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    """One row per R cell, the quantities as ``r_<name>`` columns."""
    r = pd.read_csv(R / "clustered.csv").rename(columns={"metric": "estimand"})
    r = r[~r.estimand.str.endswith("_difference")]
    wide = r.set_index([*KEY, "quantity"])["value"].unstack("quantity")
    return wide.add_prefix("r_").reset_index()


@pytest.fixture(scope="module")
def ref_vs_rest() -> pd.DataFrame:
    r = pd.read_csv(R / "clustered.csv").rename(columns={"metric": "estimand"})
    r = r[r.estimand.str.endswith("_difference")]
    wide = r.set_index([*KEY, "quantity"])["value"].unstack("quantity")
    return wide.add_prefix("r_").reset_index()


def _joined(cases, ref, ci):
    out = stats.subgroup_metrics(cases, by=BY, metrics=PROPORTIONS, cluster="patient_id", ci=ci)
    check_tidy(out)
    return out, ref.merge(out, on=KEY, how="left", validate="one_to_one")


def test_matches_survey_svymean(cases, ref):
    out, j = _joined(cases, ref, "wilson")
    assert len(j) == 276 and j["estimate"].notna().all()
    assert (out["denominator"] > 0).sum() == len(ref)  # the non-empty cells are R's cells
    for col in ("numerator", "denominator", "n_clusters"):
        r_col = {"numerator": "r_x", "denominator": "r_n", "n_clusters": "r_n_clusters"}[col]
        np.testing.assert_array_equal(j[col], j[r_col], err_msg=col)
    se_r = j["r_se"].to_numpy()
    assert np.isnan(j["std_error"].to_numpy()).tolist() == np.isnan(se_r).tolist()
    ok = ~np.isnan(se_r)
    np.testing.assert_allclose(j["std_error"].to_numpy()[ok], se_r[ok], rtol=0, atol=1e-8)
    np.testing.assert_allclose(j["design_effect"], j["r_design_effect"], rtol=1e-8)
    np.testing.assert_allclose(j["n_effective"], j["r_n_effective"], rtol=1e-8)
    np.testing.assert_allclose(j["conf_low"], j["r_wilson_low"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(j["conf_high"], j["r_wilson_high"], rtol=0, atol=1e-8)
    assert (j["method"] == "wilson-cluster").all()
    # the fixture exercises every rule: deff above 1 and below it (n_eff truncated at n),
    # p of 0 or 1, one patient with several scans
    assert (j["design_effect"] > 1.05).sum() > 100
    assert ((j["design_effect"] < 1) & (j["n_effective"] == j["r_n"])).sum() > 10
    assert ((j["r_x"] == 0) | (j["r_x"] == j["r_n"])).sum() > 10
    assert ((j["r_n_clusters"] == 1) & (j["r_n"] > 1)).any()
    assert (j["n_effective"] <= j["denominator"]).all()


def test_clopper_pearson_at_the_effective_counts(cases, ref):
    _, j = _joined(cases, ref, "clopper-pearson")
    np.testing.assert_allclose(j["conf_low"], j["r_cp_low"], rtol=0, atol=1e-8)
    np.testing.assert_allclose(j["conf_high"], j["r_cp_high"], rtol=0, atol=1e-8)
    assert (j["method"] == "clopper-pearson-cluster").all()
    # Korn & Graubard as survey implements it, wherever the truncation at n is not used
    kg = j["r_svyciprop_low"].notna() & (j["n_effective"] < j["denominator"])
    assert kg.sum() > 100
    np.testing.assert_allclose(j.loc[kg, "conf_low"], j.loc[kg, "r_svyciprop_low"], atol=1e-8)
    np.testing.assert_allclose(j.loc[kg, "conf_high"], j.loc[kg, "r_svyciprop_high"], atol=1e-8)


def test_subgroup_vs_rest_matches_prop_test_on_effective_counts(cases, ref_vs_rest):
    out = stats.subgroup_vs_rest(cases, by=BY, cluster="patient_id")
    check_tidy(out)
    j = ref_vs_rest.merge(out, on=KEY, how="left", validate="one_to_one")
    assert len(j) == 98 and j["estimate"].notna().all()
    for col in ("n_effective", "n_effective_rest", "statistic", "p_value", "conf_low",
                "conf_high"):
        np.testing.assert_allclose(j[col], j[f"r_{col}"], rtol=1e-8, atol=1e-10, err_msg=col)
    np.testing.assert_array_equal(j["n_clusters_rest"], j["r_n_clusters_rest"])
    assert (j["method"] == "newcombe-z-cluster").all()
    assert (j["n_effective_rest"] < j["n_rest"]).sum() > 40  # the rest's clustering counts
    plain = stats.subgroup_vs_rest(cases, by=BY, cluster=None)
    assert (plain["method"] == "newcombe-z").all()
    np.testing.assert_array_equal(plain["estimate"], out["estimate"])
    assert np.nanmedian(np.abs(out["statistic"]) / np.abs(plain["statistic"])) < 0.97


def test_flags_of_the_rules(cases, ref):
    _, j = _joined(cases, ref, "wilson")
    repeats = j["r_n_clusters"] < j["r_n"]
    edge = (j["r_x"] == 0) | (j["r_x"] == j["r_n"])
    single = j["r_n_clusters"] == 1
    want = repeats & (edge | single)
    got = j["flag"].str.split(";").map(lambda f: FLAG_DEFF in f)
    np.testing.assert_array_equal(got, want)
    assert want.sum() > 5 and (want & single).any() and (want & ~single).any()
    assert j.loc[want, "design_effect"].isna().all()
    np.testing.assert_array_equal(j.loc[want & ~single, "n_effective"],
                                  j.loc[want & ~single, "denominator"])
    np.testing.assert_array_equal(j.loc[want & single, "n_effective"], 1.0)
    assert j.loc[~want, "design_effect"].notna().all()


def test_no_repeated_patient_gives_the_plain_interval(cases):
    """Every scan its own cluster: the design effect is exactly 1 and the interval is the
    plain one; the rows carry the method name and n_clusters = denominator."""
    plain = stats.subgroup_metrics(cases, by=BY, metrics=PROPORTIONS, cluster=None)
    clus = stats.subgroup_metrics(cases, by=BY, metrics=PROPORTIONS, cluster="case_id")
    ok = plain["denominator"] > 0
    for col in ("estimate", "conf_low", "conf_high", "numerator", "denominator", "n_effective"):
        np.testing.assert_array_equal(plain[col], clus[col], err_msg=col)
    assert (clus.loc[ok, "design_effect"] == 1).all() and (plain.loc[ok, "design_effect"] == 1).all()
    np.testing.assert_array_equal(plain.loc[ok, "n_effective"], plain.loc[ok, "denominator"])
    np.testing.assert_array_equal(clus.loc[ok, "n_clusters"], clus.loc[ok, "denominator"])
    assert (clus["method"] == "wilson-cluster").all() and (plain["method"] == "wilson").all()
    assert not clus["flag"].str.contains(FLAG_DEFF).any()
    # without cluster, n_clusters still counts the patients behind each row
    assert (plain.loc[ok, "n_clusters"] < plain.loc[ok, "denominator"]).any()


def test_a_wider_interval_where_patients_repeat(cases):
    plain = stats.subgroup_metrics(cases, by=["phase"], metrics=["sensitivity"], cluster=None)
    clus = stats.subgroup_metrics(cases, by=["phase"], metrics=["sensitivity"],
                                  cluster="patient_id")
    wider = (clus.conf_high - clus.conf_low) - (plain.conf_high - plain.conf_low)
    assert (wider >= -1e-15).all() and (wider[clus.n_effective < clus.denominator] > 0).all()
    assert (clus.n_effective < clus.denominator).any()


def test_one_patient_and_edge_proportions():
    """Hand-made cells: a patient with 3 scans (2 detected) alone in a cell -> one
    effective scan, Wilson at 2/3 of it; all detected with repeats -> n_eff = n, flagged."""
    rows = [("a", "p1", 1, 1), ("b", "p1", 1, 1), ("c", "p1", 1, 0),          # cell x
            ("d", "p2", 1, 1), ("e", "p2", 1, 1), ("f", "p3", 1, 1)]          # cell y
    df = pd.DataFrame(rows, columns=["case_id", "patient_id", "label", "pred"]).assign(
        model="m", score=lambda d: d.pred * 100.0, site="s", cell=list("xxxyyy"))
    out = stats.subgroup_metrics(df, by=["cell"], metrics=["sensitivity"], cluster="patient_id")
    x = out[out.group_level == "x"].iloc[0]
    assert x.n_effective == 1 and x.n_clusters == 1 and np.isnan(x.std_error)
    assert np.isnan(x.design_effect)
    lo, hi = stats.proportion_ci(2 / 3, 1, effective=True)
    assert (x.conf_low, x.conf_high) == (lo, hi) and FLAG_DEFF in x.flag
    y = out[out.group_level == "y"].iloc[0]
    assert y.estimate == 1 and y.n_effective == 3 and y.std_error == 0
    assert np.isnan(y.design_effect)
    assert y.flag == f"small_n;{FLAG_DEFF}"
    assert (y.conf_low, y.conf_high) == tuple(stats.proportion_ci(3, 3))


def test_threshold_sweep_and_failure_map_agree(cases):
    called = cases.assign(score=cases["pred"] * 100.0 + cases.index % 7)
    sweep = stats.threshold_sweep(called, [3, 50, 104], cluster="patient_id",
                                  metrics=["sensitivity", "specificity", "f1"])
    check_tidy(sweep)
    for t in (3, 50, 104):
        direct = stats.subgroup_metrics(stats.scan_level(called, threshold=t), by=None,
                                        metrics=["sensitivity", "specificity"],
                                        cluster="patient_id")
        at = sweep[(sweep.threshold == t) & sweep.estimand.isin(["sensitivity", "specificity"])]
        at = at.set_index(["model", "estimand"]).loc[list(zip(direct.model, direct.estimand))]
        for col in ("estimate", "std_error", "conf_low", "conf_high", "design_effect",
                    "n_effective", "n_clusters", "method", "flag"):
            np.testing.assert_array_equal(at[col], direct[col], err_msg=(t, col))
    sens_c = sweep[sweep.estimand == "sensitivity"]
    assert (sens_c.n_effective < sens_c.denominator).any()
    f1 = sweep[sweep.estimand == "f1"]
    assert f1.design_effect.isna().all() and (f1.method == "none").all()
    plain = stats.threshold_sweep(called, [3, 50, 104], metrics=["sensitivity"], cluster=None)
    sens = plain[plain.estimand == "sensitivity"]
    assert (sens.design_effect == 1).all() and sens.n_clusters.isna().all()
    np.testing.assert_array_equal(sens.n_effective, sens.denominator)

    fmap = stats.failure_map(cases, "age_group", "phase", cluster="patient_id")
    sg = stats.subgroup_metrics(cases, by=[("age_group", "phase")], metrics=["sensitivity"],
                                cluster="patient_id")
    sg = sg[sg.group_var != "overall"].reset_index(drop=True)
    for col in ("group_level", "conf_low", "conf_high", "design_effect", "n_effective",
                "n_clusters", "flag"):
        np.testing.assert_array_equal(fmap[col], sg[col], err_msg=col)
    assert "Missing" in set(fmap.row_level)


def test_cluster_is_the_bootstrap_unit(cases):
    """The bootstrap resamples the ``cluster`` column: with patient_id it is the default
    bootstrap (same seed, same numbers); with every scan its own cluster it differs; its
    n_clusters are those of the closed-form rows."""
    kw = dict(by=["phase"], metrics=["sensitivity", "f1"], n_boot=200, seed=3)
    default = stats.subgroup_metrics(cases, **kw)
    by_patient = stats.subgroup_metrics(cases, cluster="patient_id", **kw)
    by_scan = stats.subgroup_metrics(cases, cluster="case_id", **kw)
    f1 = default.estimand == "f1"
    np.testing.assert_array_equal(default.loc[f1, "conf_low"], by_patient.loc[f1, "conf_low"])
    assert not np.array_equal(default.loc[f1, "conf_low"], by_scan.loc[f1, "conf_low"])
    boot = stats.cluster_bootstrap(cases, by=["phase"], metrics=["f1"], n_boot=200, seed=3)
    np.testing.assert_array_equal(boot["n_clusters"], by_patient.loc[f1, "n_clusters"])
    assert by_patient.loc[f1, ["design_effect", "n_effective"]].isna().all().all()


def test_bad_cluster_input(cases):
    with pytest.raises(ContractError, match="cluster: column 'family'"):
        stats.subgroup_metrics(cases, by=["phase"], cluster="family")
    bad = cases.copy()
    bad.loc[[3, 7], "patient_id"] = None
    with pytest.raises(ContractError, match="rows 4, 8 are empty"):
        stats.subgroup_metrics(bad, by=["phase"], cluster="patient_id")


def test_label_error_without_error_is_the_clustered_interval(cases):
    """A label-error table that moves nothing: the multiple-imputation rows of the
    cluster-aware error-aware metrics are exactly wilson-cluster's (every imputation alike,
    so Rubin's rules add nothing), and n_clusters is the cell's."""
    levels = sorted(cases["phase"].unique())
    table = pd.DataFrame({"field": "phase", "recorded_value": levels, "true_value": levels,
                          "probability": 1.0})
    props = ["sensitivity", "specificity", "ppv", "npv", "accuracy"]
    aware = stats.subgroup_metrics(cases, by=["phase"], metrics=props, cluster="patient_id",
                                   label_error=table, seed=1)
    plain = stats.subgroup_metrics(cases, by=["phase"], metrics=props, cluster="patient_id")
    key = ["estimand", "model", "group_var", "group_level"]
    j = plain.merge(aware, on=key, suffixes=("", "_mi"), validate="one_to_one")
    ph = j["group_var"] == "phase"
    assert ph.sum() >= 20 and (j.loc[ph, "method_mi"] == "mi-wilson-cluster").all()
    assert (j.loc[ph, "method"] == "wilson-cluster").all()
    assert (j.loc[ph, "design_effect"] > 1.05).sum() >= 5   # the clustering matters here
    for col in ("estimate", "conf_low", "conf_high", "n_clusters"):
        np.testing.assert_allclose(j.loc[ph, f"{col}_mi"], j.loc[ph, col], rtol=0, atol=1e-12,
                                   err_msg=col)
    assert (j.loc[~ph, "method_mi"] == j.loc[~ph, "method"]).all()   # overall: as computed


@pytest.mark.slow
def test_coverage_fast():
    """bench/cluster_coverage.py at 1,500 cohorts: the default interval ("wilson-cluster")
    in the band where plain Wilson is below it (40 positive scans, patient SD 2)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from cluster_coverage import coverage

    row = coverage(n_patients=20, a=0.5, sd=2.0, reps=1500, seed=11)
    assert 0.935 <= row["wilson-cluster"] <= 0.965, row
    assert row["wilson"] < 0.92, row
    assert 35 <= row["positive scans"] <= 45, row


@pytest.mark.slow
def test_coverage_lower_tail_closed():
    """Where no interval can miss from below (8 patients, about 16 positive scans,
    sensitivity 0.9: the truth above 0.025^(1/n) in every study) the default's two-sided
    coverage is 100% minus its upper-tail error, and that error is near its nominal 2.5%
    (not conservative): the over-band coverage of bench/cluster_coverage.md's closed rows
    is the empty lower tail, not a wide interval."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from cluster_coverage import coverage

    row = coverage(n_patients=8, a=2.5, sd=1.0, reps=3000, seed=7)
    assert row["lower tail open"] == 0 and row["below"] == 0, row
    assert row["wilson-cluster"] == pytest.approx(1 - row["above"]), row
    assert 0.015 <= row["above"] <= 0.045, row          # Monte Carlo SE 0.3%
    assert row["known above"] > row["above"], row       # the reference is in band by erring
