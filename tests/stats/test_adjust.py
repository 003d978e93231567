"""stats.adjust (adjusted sensitivities: reference grid and delta method) against
emmeans(type = "response"), on R's own coefficients and from our fits."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from r_models import (  # noqa: F401 (fixtures)
    FORMULA,
    R_DIR,
    TIGHT,
    benchx_fixture,
    compare_means,
    glmm_fit_fixture,
    r_value,
    ref_fixture,
)

from stats.adjust import emmeans_from
from stats.models import fit_adjusted


def test_emmeans_glmer_same_fit(glmm_fit, ref):
    """Our reference grid + delta method on R's coefficients and vcov == emmeans."""
    mf = glmm_fit.fits["model_A"]
    vc = pd.read_csv(R_DIR / "models_vcov.csv")
    rfit = "glmer_laplace" + TIGHT
    v = vc[(vc.model == "model_A") & (vc.fit == rfit)].pivot(index="row", columns="col",
                                                             values="value")
    terms = mf.design.terms
    beta = r_value(ref, "benchx", "model_A", rfit, "estimate").loc[terms].to_numpy()
    from scipy.special import expit

    for by, efit in (("phase", "emmeans_glmer"), ("age_group", "emmeans_glmer_age")):
        out = emmeans_from(mf, [by], beta, v.loc[terms, terms].to_numpy())
        prob = r_value(ref, "benchx", "model_A", efit + TIGHT, "prob")
        se = r_value(ref, "benchx", "model_A", efit + TIGHT, "se")
        got = {lv[0]: (expit(eta), s * expit(eta) * (1 - expit(eta))) for lv, eta, s, _ in out}
        np.testing.assert_allclose([got[k][0] for k in prob.index], prob, atol=1e-8)
        np.testing.assert_allclose([got[k][1] for k in se.index], se, atol=1e-8)
    # and from our own fit: within the fit tolerance
    compare_means(glmm_fit["model_A"].marginal_means("phase"), ref, "benchx", "model_A",
                   "emmeans_glmer" + TIGHT, atol=1e-5)


def test_emmeans_glm_fixed(benchx, ref):
    """emmeans on the site-fixed glm (sites averaged with equal weight): with the
    model-based vcov from emmeans_from, and our marginal_means (cluster-robust vcov) ==
    emmeans(glm, vcov. = vcovCL(glm, cluster = ~patient_id, type = "HC1"))."""
    fit = fit_adjusted(benchx, FORMULA, method="fixed", model="model_A")
    mf = fit.fits["model_A"]
    out = emmeans_from(mf, ["phase"], mf.beta, mf.extra["vcov_model"])
    from scipy.special import expit

    z = 1.959963984540054
    r = {q: r_value(ref, "benchx", "model_A", "emmeans_glm" + TIGHT, q)
         for q in ("prob", "se", "lcl", "ucl")}
    for lv, eta, s, _ in out:
        k = lv[0]
        assert expit(eta) == pytest.approx(r["prob"][k], abs=1e-8)
        assert s * expit(eta) * (1 - expit(eta)) == pytest.approx(r["se"][k], abs=1e-8)
        assert expit(eta - z * s) == pytest.approx(r["lcl"][k], abs=1e-8)
        assert expit(eta + z * s) == pytest.approx(r["ucl"][k], abs=1e-8)
    mm = compare_means(fit.marginal_means("phase"), ref, "benchx", "model_A",
                        "emmeans_glm_cl" + TIGHT, atol=1e-8)
    # the cluster-robust SEs are not the model-based ones (so this check can fail)
    assert not np.allclose(mm.std_error.loc[r["se"].index], r["se"], rtol=1e-2)
