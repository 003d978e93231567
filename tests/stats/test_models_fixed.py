"""stats.models.fixed (glm with site fixed effects, cluster-robust SEs) against glm +
sandwich::vcovCL(type = "HC1"); tolerances and measured gaps in r_models.py."""
from __future__ import annotations

import pytest
from r_models import (  # noqa: F401 (fixtures)
    FORMULA,
    TIGHT,
    benchx_fixture,
    compare_terms,
    ohio_data,
    r_one,
    r_value,
    ref_fixture,
)

from stats.models import fit_adjusted


def test_glm_fixed_site(benchx, ref):
    fit = fit_adjusted(benchx, FORMULA, method="fixed")
    compare_terms(fit, ref, "benchx", "glm_fixed" + TIGHT, est_rtol=1e-6, se_rtol=1e-6,
                   est_se_floor=0.0)
    for m, f in fit.fits.items():
        assert f.loglik == pytest.approx(r_one(ref, "benchx", m, "glm_fixed" + TIGHT, "loglik"),
                                         abs=1e-6)
        hc0 = r_value(ref, "benchx", m, "glm_fixed" + TIGHT, "se_hc0")
        assert len(hc0) > 20
    assert fit.tidy().method.iloc[0] == "glm-fixed-cluster-robust"


def test_ohio_glm_cluster(ref):
    """geepack::ohio: glm + sandwich::vcovCL by child."""
    d = ohio_data()
    glm = fit_adjusted(d, "resp ~ age + smoke", group=None, population=None, method="fixed",
                       cluster="id")
    compare_terms(glm, ref, "ohio", "glm_cluster" + TIGHT, est_rtol=1e-6, se_rtol=1e-6,
                   est_se_floor=0.0, rmodel="")
    assert glm.loglik == pytest.approx(r_one(ref, "ohio", "", "glm_cluster" + TIGHT, "loglik"),
                                       abs=1e-6)
