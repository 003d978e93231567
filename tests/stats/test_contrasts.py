"""``Fit.contrasts`` (stats.adjust.contrasts) against R's emmeans 1.8.4
``pairs(emmeans(fit, ~ by, type = "response"), adjust = "holm")`` (fixtures:
tests/r/contrasts_emmeans.R -> tests/r/contrasts_emmeans.csv; the phase | model pairs of
the pooled interaction fit from tests/r/glmer_nested.R).

Tolerance 2e-3 relative on odds ratios, SEs, limits and z, 2e-3 absolute on the (Holm and
unadjusted) p-values (issue 32). Largest gaps measured: glm (model-based covariance)
5e-11; geeglm (sandwich) 3e-11; glmer (1 | site), converged lme4, 1e-5 (z 4e-5);
(1 | site/patient_id) 2e-4 (odds ratios 2e-5, SEs and z 2e-4 relative, p 3e-5); the
pooled phase | model pairs 2e-4.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stats.adjust import _adjust_family
from stats.models import fit_adjusted
from stats.schema import ContractError, check_tidy

R_DIR = Path(__file__).resolve().parents[1] / "r"
FORMULA = "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)"
LEVELS = {"phase": ["venous", "arterial", "delayed", "non_contrast"],
          "age_group": ["<40", "40-59", "60-74", "75+"], "sex": ["F", "M"],
          "race": ["White", "Black", "Asian", "Other", "Unknown"]}
RTOL, ATOL = 2e-3, 2e-3


@pytest.fixture(scope="module")
def data():
    d = pd.read_csv(R_DIR / "data" / "glmer_nested.csv")
    for c, lv in LEVELS.items():
        d[c] = pd.Categorical(d[c], categories=lv)
    return d


@pytest.fixture(scope="module")
def ref():
    return pd.read_csv(R_DIR / "contrasts_emmeans.csv", keep_default_na=False)


FITS = {"glm": dict(method="fixed", group=None, cluster=None),
        "geeglm": dict(method="gee", group="site", bias_reduced=False),
        "glmer": dict(method="glmm", group="site"),
        "nested": dict(method="glmm", group=("site", "patient_id"))}


@pytest.fixture(scope="module")
def fits(data):
    return {k: fit_adjusted(data, FORMULA, model="model_A", **kw) for k, kw in FITS.items()}


def _check(c, ref_rows: pd.DataFrame):
    check_tidy(c)
    key = c["stratum"].astype(str) + "|" + c["group_level"].astype(str)
    c = c.assign(key=key.to_numpy()).set_index("key")
    r = ref_rows.pivot(index="term", columns="quantity", values="value")
    # emmeans parenthesises a level holding an operator ("(40-59) / (75+)")
    r.index = [re.sub(r"\(([^()]*)\)", r"\1", t) for t in r.index]
    assert len(r) >= 6 and set(r.index) == set(c.index), (list(r.index), list(c.index))
    c = c.loc[r.index]
    for q, col in (("odds_ratio", "estimate"), ("se", "std_error"), ("lcl", "conf_low"),
                   ("ucl", "conf_high")):
        np.testing.assert_allclose(c[col], r[q], rtol=RTOL, err_msg=q)
    np.testing.assert_allclose(c["statistic"], r["z"], rtol=RTOL)
    np.testing.assert_allclose(c["p_adjusted"], r["p_holm"], atol=ATOL)
    np.testing.assert_allclose(c["p_value"], r["p_value"], atol=ATOL)
    return c


@pytest.mark.parametrize("name,by,strata", [
    ("glm", "phase", None), ("glm", "age_group", None), ("geeglm", "phase", None),
    ("glmer", "phase", None), ("nested", "phase", None), ("nested", "age_group", None),
    ("nested", "phase", "sex")])
def test_pairs_equal_emmeans(fits, ref, name, by, strata):
    fit = fits[name]
    c = fit.contrasts(by, strata=strata)
    rby = by if strata is None else f"{by}|{strata}"
    got = _check(c, ref[(ref.fit == name) & (ref.by == rby)])
    assert (got.method == "emmeans-pairs-wald").all() and (got.adjust == "holm").all()
    assert (got.n > 0).all()


def test_pairs_within_phase_of_the_pooled_interaction_fit(data):
    """phase x model fitted across both models (patients within sites as random effects):
    the model contrast within each phase, pairs(emmeans(~ model | phase))."""
    ref = pd.read_csv(R_DIR / "glmer_nested.csv", keep_default_na=False)
    ref = ref[(ref.dataset == "interaction") & (ref.fit == "pairs_tight")]
    fit = fit_adjusted(data, "detected ~ phase * model + age_group + sex + race + "
                       "np.log(tumor_size_mm)", group=("site", "patient_id"), model="pooled")
    c = fit.contrasts("model", strata="phase")
    key = (c["stratum"] + ":" + c["group_level"]).to_numpy()
    c = c.assign(key=key).set_index("key")
    r = ref.pivot(index="term", columns="quantity", values="value")
    c = c.loc[r.index]
    np.testing.assert_allclose(c.estimate, r.odds_ratio, rtol=RTOL)
    np.testing.assert_allclose(c.std_error, r.se, rtol=RTOL)
    np.testing.assert_allclose(c.statistic, r.z, rtol=RTOL)
    np.testing.assert_allclose(c.p_adjusted, r.p_holm, atol=ATOL)


def test_contrast_is_the_difference_of_marginal_means(fits):
    """Independent recomputation: log OR = difference of the emmeans logits; Holm within
    the family by hand."""
    fit = fits["glmer"]
    mm = fit.marginal_means("phase", kind="emmeans").set_index("group_level")
    c = fit.contrasts("phase", adjust="none").set_index("group_level")
    eta = mm["link_estimate"]
    assert c.loc["venous / arterial", "log_odds_ratio"] == pytest.approx(
        eta["venous"] - eta["arterial"], rel=1e-12)
    assert (c["p_adjusted"] == c["p_value"]).all()
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.5])
    np.testing.assert_allclose(_adjust_family(p, "holm"), [0.04, 0.09, 0.09, np.nan, 0.5])  # R p.adjust
    np.testing.assert_allclose(_adjust_family(p, "bonferroni"), [0.04, 0.16, 0.12, np.nan, 1])


def test_refusals(fits):
    with pytest.raises(ContractError, match="not a factor of the formula"):
        fits["glm"].contrasts("tumor_size_mm")
    with pytest.raises(ContractError, match="adjust must be"):
        fits["glm"].contrasts("phase", adjust="tukey")


def test_not_estimable_pair_is_nan(data):
    """A cell without data (no delayed-phase positives under 40) makes the phase x age
    means of that cell nonEst; its pairs are NaN with the flag."""
    d = data[~((data.phase == "delayed") & (data.age_group == "<40"))]
    fit = fit_adjusted(d, "detected ~ phase * age_group + sex", group="site", model="model_A")
    c = fit.contrasts("phase", strata="age_group")
    bad = c[(c.stratum == "<40") & c.group_level.str.contains("delayed")]
    assert len(bad) == 3 and bad.estimate.isna().all()
    assert bad.flag.str.contains("not_estimable").all()
    good = c[c.stratum == "40-59"]
    assert good.estimate.notna().all()
