"""The simulators are reproducible by seed, fill the contracts and recover their truth."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

import stats
from stats import simulate


def test_benchx_reproducible_and_valid():
    a = simulate.benchx_cohort(500, n_models=3, seed=5)
    b = simulate.benchx_cohort(500, n_models=3, seed=5)
    c = simulate.benchx_cohort(500, n_models=3, seed=6)
    pd.testing.assert_frame_equal(a.data, b.data)
    assert not a.data["score"].equals(c.data["score"])
    checked = stats.read_cases(a.data)
    assert len(checked) == 1500
    assert set(checked["split"]) == {"validation", "test"}
    # split is by patient: no patient in both splits
    assert (a.data.groupby("patient_id")["split"].nunique() == 1).all()
    assert a.data.groupby("patient_id")["case_id"].nunique().max() >= 2  # several scans


def test_benchx_confounding_and_unknown_race():
    d = simulate.benchx_cohort(20000, n_models=1, n_sites=12, seed=1).data
    nc_share = d.groupby("site", observed=True)["phase"].apply(lambda s: (s == "non_contrast").mean())
    assert nc_share.max() - nc_share.min() > 0.25  # phase is confounded with site
    unk = d.groupby("site", observed=True)["race"].apply(lambda s: (s == "Unknown").mean())
    assert (unk > 0.4).sum() == 2 and (unk < 0.1).sum() == 10


def test_benchx_call_rate_matches_true_probabilities():
    sim = simulate.benchx_cohort(30000, n_models=2, seed=3)
    pred = (sim.data["score"].to_numpy() >= sim.truth["threshold"]).astype(float)
    p = sim.truth["p_call"]["p_call"].to_numpy()
    # calibration of the generator: observed call rate vs true probability, by decile
    dec = np.minimum((p * 10).astype(int), 9)
    obs = np.bincount(dec, weights=pred) / np.bincount(dec)
    exp = np.bincount(dec, weights=p) / np.bincount(dec)
    n = np.bincount(dec)
    z = (obs - exp) / np.sqrt(exp * (1 - exp) / n + 1e-12)
    assert np.all(np.abs(z[n > 200]) < 4.5), z


def test_benchx_recovers_true_coefficients_with_site_fixed_effects():
    """At large n a logistic GLM with site dummies (the conditional model) recovers the
    simulator's fixed effects: each truth lies within 4 SE of its estimate."""
    sim = simulate.benchx_cohort(60000, n_models=1, n_sites=6, site_sd=0.6, seed=7)
    d = sim.data[sim.data["label"] == 1].copy()
    d["detected"] = (d["score"] >= sim.truth["threshold"]).astype(int)
    fit = smf.glm("detected ~ phase + age_group + sex + race + np.log(tumor_size_mm) + C(site)",
                  data=d, family=sm.families.Binomial()).fit()
    truth = sim.truth["coef"].set_index("term")["estimate"]
    for term, value in truth.items():
        if term == "Intercept":
            continue
        est, se = fit.params[term], fit.bse[term]
        assert abs(est - value) < 4 * se, (term, est, value, se)
    # the sensitivity-collapse pattern: non-contrast sensitivity far below venous,
    # specificity nearly equal
    sens = d.groupby("phase", observed=True)["detected"].mean()
    assert sens["venous"] - sens["non_contrast"] > 0.1
    neg = sim.data[sim.data["label"] == 0]
    spec = (neg["score"] < 50).groupby(neg["phase"], observed=True).mean()
    assert abs(spec["venous"] - spec["non_contrast"]) < 0.05


def test_benchx_scale_in_seconds():
    sim = simulate.benchx_cohort(85000, n_models=10, seed=1)
    assert len(sim.data) == 850000
    assert sim.data["case_id"].nunique() == 85000


def test_crs_runs_shape_truth_and_contract():
    sim = simulate.crs_runs(seed=2)
    runs = stats.read_runs(sim.data)
    # 15 encoders x 3 datasets x 5 fractions x 16 conditions x 5 seeds, + shift for one dataset
    assert len(runs) == 15 * 5 * 5 * (16 * 3 + 1)
    assert set(runs.loc[runs["condition"] == "shift", "dataset"]) == {"dataset_A"}
    again = simulate.crs_runs(seed=2).data
    pd.testing.assert_frame_equal(sim.data, again)
    axes = sim.truth["axes_mean"]
    assert set(axes["axis"]) == {"discrimination", "calibration", "label_efficiency", "robustness"}
    assert axes["value"].between(0, 1).all()


def test_crs_truth_axes_follow_design_formulas():
    """Seed-mean AUROC of a noise-free simulation reproduces truth['axes'] exactly."""
    sim = simulate.crs_runs(n_encoders=3, n_datasets=2, n_seeds=2, run_sd=0.0, seed_sd=0.0, seed=4)
    r = sim.data
    a = r.groupby(["encoder", "dataset", "label_fraction", "condition", "severity"])["auroc"].mean()
    for (enc, ds), grp in sim.truth["axes"].groupby(["encoder", "dataset"]):
        clean1 = a[(enc, ds, 1.0, "clean", 0)]
        fr = [a[(enc, ds, f, "clean", 0)] for f in (0.01, 0.05, 0.1, 0.5)]
        eff = np.mean([(x - 0.5) / (clean1 - 0.5) for x in fr])
        cond = a[enc, ds, 1.0].drop(("clean", 0))
        rel = np.maximum(0, clean1 - cond.to_numpy()) / (clean1 - 0.5)
        rob = 1 - (rel.mean() + rel.max()) / 2
        got = grp.set_index("axis")["value"]
        assert got["discrimination"] == pytest.approx(clean1, abs=1e-12)
        assert got["label_efficiency"] == pytest.approx(eff, abs=1e-12)
        assert got["robustness"] == pytest.approx(rob, abs=1e-12)


def test_adapted_regime():
    sim = simulate.crs_runs(n_encoders=3, n_datasets=1, n_seeds=2, regimes=("frozen", "adapted"), seed=1)
    assert set(sim.data["regime"]) == {"frozen", "adapted"}
    stats.read_runs(sim.data)
