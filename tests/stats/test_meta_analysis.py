"""stats.site_meta_analysis against R's metafor (and survey for the clustered variances).

Fixture: tests/r/meta_analysis.R -> tests/r/meta_analysis.csv (metafor 3.8-1, survey
4.1-1), data tests/r/data/meta_analysis_counts.csv and meta_analysis_scans.csv
(tests/r/meta_analysis_data.py). Tolerances (absolute; measured gaps in the comments):

* metafor run to convergence (threshold 1e-13): every quantity TOL = 1e-6 (site logits,
  variances, weights (percent) and intervals; pooled logit, KH SE, tau2, se(tau2), I2 (as
  a proportion), H2, Q and its p-value, the back-transformed pooled value, interval and
  prediction interval; I2 and the weights, in percent, compared as proportions); measured
  at most 4.0e-12 (H2 of zero_cell) over the seven count datasets;
* metafor's default control (threshold 1e-5 on tau2): DEFAULT_TOL = 1e-4 (its Fisher
  scoring stops earlier); measured at most 5.1e-5 (H2 of zero_cell);
* the clustered part (survey's SE, Korn-Graubard effective counts, then metafor): TOL;
  measured at most 2.2e-13.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stats
from stats.meta_analysis import (FLAG_ONE, FLAG_ZERO_CELL, FLAG_ZERO_VARIANCE,
                                 site_meta_analysis)
from stats.schema import ContractError, check_tidy

R = Path(__file__).resolve().parents[1] / "r"
TOL = 1e-6
DEFAULT_TOL = 1e-4
#: R quantity -> (estimand row, column)
POOLED = {"mu": ("pooled", "logit"), "se": ("pooled", "logit_se"),
          "pred": ("pooled", "estimate"), "ci_lb": ("pooled", "conf_low"),
          "ci_ub": ("pooled", "conf_high"), "pi_lb": ("pooled", "pi_low"),
          "pi_ub": ("pooled", "pi_high"), "tau2": ("tau2", "estimate"),
          "se_tau2": ("tau2", "std_error"), "i2": ("i2", "estimate"), "h2": ("i2", "h2"),
          "q": ("q", "statistic"), "q_p": ("q", "p_value"), "k": ("pooled", "k")}
SITE = {"yi": "logit", "vi": "logit_se", "weight": "weight", "ci_low": "conf_low",
        "ci_high": "conf_high", "n_eff": "n_effective", "deff": "design_effect"}


@cache
def reference() -> pd.DataFrame:
    return pd.read_csv(R / "meta_analysis.csv", keep_default_na=False,
                       na_values=["NA"]).assign(site=lambda d: d["site"].astype(str))


def counts_cases(dataset: str) -> pd.DataFrame:
    """The counts of one dataset as a cases table: x detected of n positives per site,
    one scan per patient."""
    d = pd.read_csv(R / "data" / "meta_analysis_counts.csv")
    d = d[d["dataset"] == dataset]
    site = np.repeat(d["site"].to_numpy(), d["n"].to_numpy())
    within = np.concatenate([np.arange(n) for n in d["n"]])
    pred = (within < np.repeat(d["x"].to_numpy(), d["n"].to_numpy())).astype(int)
    return pd.DataFrame({"case_id": [f"c{i}" for i in range(len(site))], "model": "m",
                         "label": 1, "score": pred * 100.0, "pred": pred, "site": site})


def scans_cases() -> pd.DataFrame:
    return pd.read_csv(R / "data" / "meta_analysis_scans.csv")


def gaps(ours: pd.DataFrame, ref: pd.DataFrame) -> dict[str, float]:
    """Largest absolute gap per R quantity between one analysis of ours (rows of one
    model x cell) and R's (rows of one dataset, estimand, group, control)."""
    out = {}
    for q, (row, col) in POOLED.items():
        r = ref.loc[(ref["site"] == "") & (ref["quantity"] == q), "value"]
        mine = ours.loc[ours["estimand"] == row, col]
        assert len(r) == 1 and len(mine) == 1, q
        scale = 100.0 if q == "i2" else 1.0      # I2 in percent: compared as a proportion
        out[q] = abs(float(mine.iloc[0]) - float(r.iloc[0])) / scale
    sites = ours[ours["estimand"] == "site"].set_index("site")
    for q, col in SITE.items():
        r = ref[(ref["site"] != "") & (ref["quantity"] == q)].set_index("site")["value"]
        if not len(r):
            continue
        mine = sites.loc[r.index, col].astype(float)
        if q == "vi":
            mine = mine ** 2
        scale = 100.0 if q == "weight" else 1.0   # percent: compared as a proportion
        both = r.notna() & mine.notna()
        assert (r.isna() == mine.isna()).all(), (q, r[r.isna()], mine[mine.isna()])
        out[q] = float(np.max(np.abs(mine[both].to_numpy() - r[both].to_numpy()),
                              initial=0)) / scale
    return out


COUNT_SETS = ["heterogeneous", "homogeneous", "zero_cell", "two_sites", "many_sites", "small"]


@pytest.mark.parametrize("dataset", COUNT_SETS)
def test_counts_equal_metafor(dataset):
    """Every quantity equals metafor's (converged) within 1e-6 and metafor's defaults
    within 1e-4 (module docstring: measured gaps)."""
    ours = site_meta_analysis(counts_cases(dataset), cluster=None)
    check_tidy(ours)
    ref = reference()
    ref = ref[(ref["dataset"] == dataset)]
    g = gaps(ours, ref[ref["control"] == "tight"])
    assert max(g.values()) < TOL, g
    default = ref[ref["control"] == "default"]
    if (default["quantity"] == "converged").any():   # metafor's own iteration cycles
        assert dataset == "overshoot"
        assert ref.loc[ref["quantity"] == "stepadj", "value"].eq(0.5).all()
        assert ours["flag"].eq("").all()   # converged here (safeguarded Fisher scoring)
        return
    g = gaps(ours, default)
    assert max(g.values()) < DEFAULT_TOL, g


def test_zero_cells_take_the_half_correction_only():
    ours = site_meta_analysis(counts_cases("zero_cell"), cluster=None)
    sites = ours[ours["estimand"] == "site"].set_index("site")
    assert sites.loc[["s01", "s03", "s05"], "flag"].eq(FLAG_ZERO_CELL).all()
    assert sites.drop(index=["s01", "s03", "s05"])["flag"].eq("").all()
    assert sites.loc["s01", "logit"] == pytest.approx(np.log(20.5 / 0.5), abs=1e-14)
    assert sites.loc["s02", "logit"] == pytest.approx(np.log(15 / 3), abs=1e-14)


def test_identical_sites_zero_variance_is_nan_and_flagged():
    """Every site at 17/20: Q = 0, tau2 = 0 (as metafor); the Knapp-Hartung variance is 0,
    where metafor gives a zero-width interval: NaN + flag zero_variance."""
    ours = site_meta_analysis(counts_cases("identical"), cluster=None)
    row = ours[ours["estimand"] == "pooled"].iloc[0]
    assert row["estimate"] == pytest.approx(0.85, abs=1e-12)
    assert FLAG_ZERO_VARIANCE in row["flag"].split(";")
    assert np.isnan([row["conf_low"], row["conf_high"], row["pi_low"], row["pi_high"]]).all()
    het = ours.set_index("estimand")
    assert het.loc["tau2", "estimate"] == 0 and het.loc["q", "estimate"] == 0
    assert het.loc["i2", "estimate"] == 0 and het.loc["q", "p_value"] == 1


def test_one_site_is_not_estimable():
    cases = counts_cases("heterogeneous")
    one = site_meta_analysis(cases[cases["site"] == "s01"], cluster=None)
    pooled = one[one["estimand"] != "site"]
    assert pooled["estimate"].isna().all()
    assert pooled["flag"].str.contains(FLAG_ONE).all()
    assert pooled["flag"].str.contains("not_estimable").all()
    site = one[one["estimand"] == "site"].iloc[0]
    assert site["estimate"] == pytest.approx(44 / 50) and np.isnan(site["weight"])


@pytest.mark.parametrize("estimand", ["sensitivity", "specificity"])
def test_clustered_equals_survey_then_metafor(estimand):
    """Patients with 1-4 scans: per-site effective counts from survey's SE (Korn &
    Graubard), then metafor on them, overall and per phase (by=), within 1e-6."""
    ours = site_meta_analysis(scans_cases(), estimand=estimand, by="phase")
    ref = reference()
    ref = ref[(ref["dataset"] == "scans") & (ref["estimand"] == estimand)]
    worst = {}
    for group in ("overall", "venous", "arterial"):
        mine = ours[ours["group_level"] == group]
        part = mine[mine["estimand"] == "site"]
        r = ref[(ref["group"] == group)]
        present = set(r.loc[r["site"] != "", "site"])
        assert set(part.loc[part["denominator"] > 0, "site"]) == present
        mine = mine[(mine["estimand"] != "site") | mine["site"].isin(present)]
        g = gaps(mine, r)
        worst = {q: max(worst.get(q, 0), v) for q, v in g.items()}
    assert max(worst.values()) < TOL, worst
    assert ours.loc[ours["estimand"] == "pooled", "method"].eq("reml-knha-cluster").all()


def test_specificity_one_with_repeats_keeps_n_and_flags():
    """Site s8: every negative called correctly, patients repeating: the design effect
    cannot be estimated (Korn & Graubard's rule n_eff = n), escalc's 0.5 correction."""
    ours = site_meta_analysis(scans_cases(), estimand="specificity")
    s8 = ours[(ours["estimand"] == "site") & (ours["site"] == "s8")].iloc[0]
    assert set(s8["flag"].split(";")) == {FLAG_ZERO_CELL, "deff_not_estimable"}
    assert s8["n_effective"] == s8["denominator"]


def test_without_repeats_cluster_changes_nothing():
    cases = counts_cases("heterogeneous")
    cases["patient_id"] = cases["case_id"]
    a = site_meta_analysis(cases, cluster="patient_id")
    b = site_meta_analysis(cases, cluster=None)
    pd.testing.assert_frame_equal(a, b)


def test_clustering_widens_the_site_variances():
    """With repeats the per-site variance is the binomial one times n / n_eff >= 1."""
    cases = scans_cases()
    a = site_meta_analysis(cases, cluster="patient_id")
    b = site_meta_analysis(cases, cluster=None)
    sa, sb = (x[x["estimand"] == "site"].reset_index(drop=True) for x in (a, b))
    ratio = (sa["logit_se"] / sb["logit_se"]) ** 2
    expected = sa["denominator"] / sa["n_effective"]
    assert np.allclose(ratio, expected, rtol=1e-12)
    assert (ratio >= 1 - 1e-12).all() and (ratio > 1.05).any()


def test_by_equals_the_subset_and_models_are_independent():
    """A level's meta-analysis is the meta-analysis of that level's scans; two models at
    once give each model's own analysis (one vectorised fit for all)."""
    cases = scans_cases()
    both = pd.concat([cases, cases.assign(model="model_B",
                                          pred=1 - cases["pred"].where(cases.index % 7 == 0,
                                                                       1 - cases["pred"]))])
    both["score"] = both["pred"] * 100.0
    full = site_meta_analysis(both, by=["phase"])
    for model in ("model_A", "model_B"):
        for level in ("venous", "arterial"):
            sub = both[(both["phase"] == level) & (both["model"] == model)]
            alone = site_meta_analysis(sub)
            mine = full[(full["model"] == model) & (full["group_level"] == level)]
            alone = alone[alone["estimand"] != "site"].reset_index(drop=True)
            mine = mine[mine["estimand"] != "site"].reset_index(drop=True)
            for col in ("estimate", "conf_low", "conf_high", "pi_low", "std_error"):
                np.testing.assert_allclose(mine[col], alone[col], rtol=1e-10, atol=1e-12)


def test_weights_sum_to_100_and_empty_sites_stay():
    cases = scans_cases()
    out = site_meta_analysis(cases, by="phase")
    sites = out[out["estimand"] == "site"]
    sums = sites.groupby(["model", "group_var", "group_level"])["weight"].sum()
    assert np.allclose(sums, 100)
    # s9 has no arterial-phase positive: its row stays, empty, weight 0
    s9 = sites[(sites["site"] == "s9") & (sites["group_level"] == "arterial")].iloc[0]
    assert s9["flag"] == "empty" and s9["weight"] == 0 and np.isnan(s9["estimate"])
    assert set(sites["site"]) == set(cases["site"])


def test_bad_input_is_refused():
    cases = scans_cases()
    with pytest.raises(ContractError, match="estimand must be one of"):
        site_meta_analysis(cases, estimand="auc")
    with pytest.raises(ContractError, match="lacks column"):
        site_meta_analysis(cases.drop(columns="site"))
    with pytest.raises(ContractError, match="missing values"):
        site_meta_analysis(cases.assign(site=cases["site"].where(cases.index > 3)))
    with pytest.raises(ContractError, match="conf_level"):
        site_meta_analysis(cases, conf_level=95)


def test_exported():
    assert stats.site_meta_analysis is site_meta_analysis
