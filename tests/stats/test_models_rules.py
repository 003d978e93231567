"""stats.models: the rules that replaced decisions taken on rounding (separation by exact
counts, boundary fits at SD 0, positive definiteness on the scaled parameters, R's
aliasing tolerance), for every method. Each test failed on the code before the rules."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy.special import expit

from stats.models import fit_adjusted
from stats.models.design import estimable_columns

R_DIR = Path(__file__).resolve().parents[1] / "r"
LEVELS = {"phase": ["venous", "arterial", "delayed", "non_contrast"],
          "age_group": ["<40", "40-59", "60-74", "75+"], "sex": ["F", "M"],
          "race": ["White", "Black", "Asian", "Other", "Unknown"]}
SEP = "phase[T.arterial]"
FORMULA = "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)"


def _separated_cases():
    d = pd.read_csv(R_DIR / "data" / "models_benchx.csv")
    d = d[(d["model"] == "model_A") & (d["label"] == 1)].copy()
    d.loc[d["phase"] == "arterial", "pred"] = 1       # every arterial positive detected
    for c, lv in LEVELS.items():
        d[c] = pd.Categorical(d[c], categories=lv)
    return d


@pytest.mark.parametrize("method", ["glmm", "fixed", "gee"])
def test_a_separated_term_is_infinite_with_no_se_and_the_others_keep_theirs(method):
    """The separated term: estimate +inf, SE NaN, flag 'separation' on it alone; the other
    terms are the fit of the rows outside the separated level (the exact limit), with
    finite SEs. Before: fixed gave every term NaN, GEE coefficients of 1e9-1e12 with
    p = 5.8e-12 on the separated term."""
    d = _separated_cases()
    td = fit_adjusted(d, FORMULA, method=method, population="positives").tidy()
    td = td[td["effect"] == "fixed"].set_index("estimand")
    assert td.loc[SEP, "estimate"] == np.inf and np.isnan(td.loc[SEP, "std_error"])
    assert [t for t, f in td["flag"].items() if "separation" in f.split(";")] == [SEP]
    others = td.drop(index=SEP)
    assert np.isfinite(others["std_error"]).all() and (others["std_error"] < 5).all()
    # the limit: the same model fitted without the arterial rows and the arterial column
    rest = d[d["phase"] != "arterial"].copy()
    rest["phase"] = pd.Categorical(rest["phase"].astype(str),
                                   categories=["venous", "delayed", "non_contrast"])
    ref = fit_adjusted(rest, FORMULA, method=method, population="positives").tidy()
    ref = ref[ref["effect"] == "fixed"].set_index("estimand")
    np.testing.assert_allclose(others["estimate"], ref.loc[others.index, "estimate"],
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(others["std_error"], ref.loc[others.index, "std_error"],
                               rtol=1e-8)


def _year_data(lo, hi, n=800, seed=5, sd=0.0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"site": rng.integers(0, 8, n).astype(str),
                       "year": rng.integers(lo, hi + 1, n).astype(float)})
    b = rng.normal(0, sd, 8)[df["site"].astype(int)]
    df["y"] = (rng.random(n) < expit(0.3 + 0.2 * (df["year"] - 2019) + b)).astype(int)
    return df


def test_an_uncentred_year_keeps_its_se_in_every_method():
    """An intercept and a calendar year are nearly collinear only before centring: the
    positive-definite rule is decided on the scaled parameters (before: all SEs NaN for a
    boundary GLMM, and for method 'fixed' in the draft), 'fitted_0_1' is R's rule (before:
    every term flagged because |intercept| > 15)."""
    df = _year_data(2015, 2023, seed=1)
    glm = sm.GLM(df["y"], sm.add_constant(df["year"]), family=sm.families.Binomial()).fit()
    for method in ("glmm", "fixed", "gee"):
        fit = fit_adjusted(df, "y ~ year", method=method, population=None)
        td = fit.tidy()
        td = td[td["effect"] == "fixed"].set_index("estimand")
        assert np.isfinite(td["std_error"]).all(), method
        assert not any("fitted_0_1" in f for f in td["flag"]), method
        if method == "glmm" and fit.fits["all"].theta == 0:   # boundary: the GLM
            np.testing.assert_allclose(td["estimate"].to_numpy(), glm.params.to_numpy(),
                                       rtol=1e-7)
            np.testing.assert_allclose(td["std_error"].to_numpy(), glm.bse.to_numpy(),
                                       rtol=1e-6)


@pytest.mark.parametrize("lo,hi", [(2019, 2021), (2020, 2021)])
def test_a_year_spanning_two_or_three_years_is_not_aliased(lo, hi):
    """R's QR tolerance (|R_jj| < 1e-7 |x_j|): R's glm keeps such a year; the eigenvalue
    rule at 1e-7 dropped it as aliased."""
    df = _year_data(lo, hi)
    X = np.column_stack([np.ones(len(df)), df["year"]])
    keep, dropped = estimable_columns(X, ["Intercept", "year"])
    assert keep == [0, 1] and dropped == {}
    td = fit_adjusted(df, "y ~ year", method="fixed", group=None, population=None).tidy()
    glm = sm.GLM(df["y"], sm.add_constant(df["year"]), family=sm.families.Binomial()).fit()
    np.testing.assert_allclose(td.set_index("estimand").loc[["Intercept", "year"], "estimate"],
                               glm.params.to_numpy(), rtol=1e-6)
    # a true alias is still dropped
    keep, dropped = estimable_columns(np.column_stack([X, 2 * X[:, 1] - 1]), ["a", "b", "c"])
    assert keep == [0, 1] and dropped == {"c": "aliased"}


def test_a_boundary_glmm_reports_sd_0_and_the_glm():
    """A group SD at the boundary is exactly 0 (lme4's singular fit), with the GLM's
    estimates, SEs and log-likelihood, so its likelihood-ratio test against the model
    without the random intercept is exactly 0 (before: SD 1e-13, LRT 1.4e-14, both
    changing with the BLAS kernel)."""
    from stats.models import likelihood_ratio_test

    df = _year_data(0, 3, n=600, seed=2)
    full = fit_adjusted(df, "y ~ year", population=None)
    mf = full.fits["all"]
    assert mf.theta == 0.0 and any(w.startswith("singular") for w in mf.warnings)
    red = fit_adjusted(df, "y ~ year", method="fixed", group=None, cluster=None,
                       population=None)
    np.testing.assert_array_equal(mf.beta, red.fits["all"].beta)
    assert mf.loglik == red.fits["all"].loglik
    lrt = likelihood_ratio_test(full, red)
    assert lrt["statistic"].iloc[0] == 0.0 and lrt["p_value"].iloc[0] == 0.5


def test_mancl_derouen_with_a_term_held_by_one_cluster_is_not_estimable():
    """A covariate nonzero in one cluster only: that cluster carries all the information
    on it, I - H_ii is singular. Before: no warning and SEs of 6.4e21 (the singular matrix
    factored by rounding)."""
    rng = np.random.default_rng(4)
    n = 400
    df = pd.DataFrame({"site": rng.integers(0, 8, n).astype(str), "z": rng.normal(size=n)})
    df["x"] = np.where(df["site"] == "0", rng.normal(size=n), 0.0)
    df["y"] = (rng.random(n) < expit(0.2 + 0.3 * df["z"])).astype(int)
    fit = fit_adjusted(df, "y ~ z + x", method="gee", bias_reduced=True, population=None)
    td = fit.tidy()
    assert td["std_error"].isna().all()
    assert any("not_estimable" in w for w in fit.warnings)
