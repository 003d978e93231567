"""stats.variance_partition against R's performance 0.10.2 ``r2_nakagawa`` and insight
0.19.0 ``get_variance`` (Debian r-cran-performance) and an R recomputation of the block
variances (tests/r/variance_partition.R -> tests/r/variance_partition.csv), on converged
glmer fits with one and with nested random intercepts.

Tolerances: variances and R2 1e-3 relative (the fits agree to ~1e-4: SDs 2e-2 is the
issue's tolerance of the fit itself); the residual pi^2/3 1e-12. Measured: random-effect
variances 1.1e-4 (patient), 1.4e-5 (site); fixed variance 4.4e-6; block variances
3.4e-5; R2 1.2e-5. The shares recover known block variances in simulation
(bench/variance_partition.py, bench/variance_partition.md).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stats
from stats.models import fit_adjusted
from stats.schema import ContractError, check_tidy

R_DIR = Path(__file__).resolve().parents[1] / "r"
FORMULA = "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)"
LEVELS = {"phase": ["venous", "arterial", "delayed", "non_contrast"],
          "age_group": ["<40", "40-59", "60-74", "75+"], "sex": ["F", "M"],
          "race": ["White", "Black", "Asian", "Other", "Unknown"]}
BLOCKS = {"protocol": ["phase"], "demographics": ["age_group", "sex", "race"],
          "tumour": ["np.log(tumor_size_mm)"]}
RTOL = 1e-3


@pytest.fixture(scope="module")
def data():
    d = pd.read_csv(R_DIR / "data" / "glmer_nested.csv")
    for c, lv in LEVELS.items():
        d[c] = pd.Categorical(d[c], categories=lv)
    return d


@pytest.fixture(scope="module")
def ref():
    return pd.read_csv(R_DIR / "variance_partition.csv", keep_default_na=False)


def _r(ref, fit, quantity):
    return ref[(ref.fit == fit) & (ref.quantity == quantity)].set_index("term")["value"]


@pytest.mark.parametrize("name,group", [("glmer", "site"), ("nested", ("site", "patient_id"))])
def test_partition_equals_performance(data, ref, name, group):
    fit = fit_adjusted(data, FORMULA, group=group, model="model_A")
    vp = stats.variance_partition(fit, BLOCKS)
    check_tidy(vp)
    v = vp.set_index("component")
    for g, val in _r(ref, name, "var_intercept").items():
        assert v.loc[g, "variance"] == pytest.approx(val, rel=RTOL)
        assert v.loc[g, "kind"] == "random"
    for b, val in _r(ref, name, "var_block").items():
        assert v.loc[b, "variance"] == pytest.approx(val, rel=RTOL)
    assert v.loc["residual (logistic)", "variance"] == pytest.approx(
        _r(ref, name, "var_residual").iloc[0], rel=1e-12)
    fixed = v[v.kind.isin(["fixed", "covariance"])]["variance"].sum()
    assert fixed == pytest.approx(_r(ref, name, "var_fixed").iloc[0], rel=RTOL)
    assert v.loc[v.kind == "random", "variance"].sum() == pytest.approx(
        _r(ref, name, "var_random").iloc[0], rel=RTOL)
    # shares add up to 1; the fixed shares to the marginal R2, with the random ones to the
    # conditional R2 (performance::r2_nakagawa), and Fit.r2() says the same
    assert v["estimate"].sum() == pytest.approx(1.0, abs=1e-12)
    r2m = v[v.kind.isin(["fixed", "covariance"])]["estimate"].sum()
    r2c = r2m + v[v.kind == "random"]["estimate"].sum()
    assert r2m == pytest.approx(_r(ref, name, "r2_marginal").iloc[0], rel=RTOL)
    assert r2c == pytest.approx(_r(ref, name, "r2_conditional").iloc[0], rel=RTOL)
    assert (v["r2_marginal"] == r2m).all() or np.allclose(v["r2_marginal"], r2m, rtol=1e-12)
    r2 = fit.r2().set_index("estimand")["estimate"]
    assert r2["r2_marginal"] == pytest.approx(r2m, rel=1e-12)
    assert r2["r2_conditional"] == pytest.approx(r2c, rel=1e-12)
    # the covariance component is what the blocks leave of var(X beta)
    eta = fit.fits["model_A"].design.X @ fit.fits["model_A"].beta
    blocks = v.loc[list(BLOCKS), "variance"].sum()
    assert v.loc["between-block covariance", "variance"] == pytest.approx(
        np.var(eta, ddof=1) - blocks, rel=1e-9, abs=1e-12)


def test_fixed_site_model_has_a_site_block(data):
    """A site-fixed fit: the site dummies are a fixed block; a pooled fit's model term is
    in no block ('other fixed effects'); GEE has no latent-scale partition."""
    fit = fit_adjusted(data, FORMULA, method="fixed", model="model_A")
    v = stats.variance_partition(fit, BLOCKS).set_index("component")
    assert v.loc["site", "kind"] == "fixed" and v.loc["site", "terms"] == "site"
    eta_site = None
    mf = fit.fits["model_A"]
    cols = [i for i, t in enumerate(mf.design.terms) if t.startswith("site[")]
    eta_site = mf.design.X[:, cols] @ mf.beta[cols]
    assert v.loc["site", "variance"] == pytest.approx(np.var(eta_site, ddof=1), rel=1e-12)
    pooled = fit_adjusted(data, FORMULA, group="site", model="pooled")
    vp = stats.variance_partition(pooled, BLOCKS).set_index("component")
    assert "other fixed effects" in vp.index and vp.loc["other fixed effects", "variance"] > 0
    gee = fit_adjusted(data, FORMULA, method="gee", model="model_A")
    vg = stats.variance_partition(gee, BLOCKS)
    check_tidy(vg)
    assert vg["estimate"].isna().all() and vg["flag"].str.contains("not_latent_scale").all()


def test_a_term_goes_to_the_first_block_claiming_it(data):
    """phase:age_group uses a protocol and a demographic variable: it is counted once, in
    the first block that claims it (protocol here)."""
    fit = fit_adjusted(data, "detected ~ phase * age_group + np.log(tumor_size_mm)",
                       group="site", model="model_A")
    v = stats.variance_partition(fit, BLOCKS).set_index("component")
    assert v.loc["protocol", "terms"] == "phase + phase:age_group"
    assert v.loc["demographics", "terms"] == "age_group"
    assert v["estimate"].sum() == pytest.approx(1.0, abs=1e-12)


def test_refusals(data):
    with pytest.raises(ContractError, match="must be a Fit"):
        stats.variance_partition(data)
    fit = fit_adjusted(data, "detected ~ phase", group="site", model="model_A")
    with pytest.raises(ContractError, match="blocks must be a mapping"):
        stats.variance_partition(fit, {"protocol": "phase"})
