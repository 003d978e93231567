"""stats.models' block tests (likelihood-ratio tests of variable blocks, latent R2) against
anova() and R's Nakagawa R2, and the public names; tolerances in r_models.py."""
from __future__ import annotations

import pytest
from r_models import FORMULA, TIGHT, benchx_fixture, r_one, ref_fixture  # noqa: F401 (fixtures)

import stats
from stats.models import block_tests, fit_adjusted, likelihood_ratio_test
from stats.schema import check_tidy


def test_block_tests_match_anova(benchx, ref):
    bt = block_tests(benchx, FORMULA, model="model_A")
    check_tidy(bt)
    lrt = bt[bt.estimand == "likelihood_ratio"].set_index("block")
    for b in ("protocol", "demographics", "tumour", "site"):
        assert lrt.statistic[b] == pytest.approx(
            r_one(ref, "benchx", "model_A", f"lrt_{b}" + TIGHT, "statistic"), abs=1e-3), b
        assert lrt.p_value[b] == pytest.approx(
            r_one(ref, "benchx", "model_A", f"lrt_{b}" + TIGHT, "p_value"), rel=1e-3), b
    assert lrt.df["demographics"] == 8 and lrt.df["protocol"] == 3
    assert lrt.method["site"] == "lrt-chibar2"
    r2 = bt[bt.estimand.str.startswith("r2_")].set_index("estimand").estimate
    assert 0 < r2["r2_marginal"] < r2["r2_conditional"] < 1
    for k in ("marginal", "conditional"):  # R's recomputation on the glmer fit
        assert r2[f"r2_{k}"] == pytest.approx(r_one(ref, "benchx", "model_A", "r2" + TIGHT, k),
                                              rel=1e-4)


def test_public_names():
    assert stats.fit_adjusted is fit_adjusted
    assert stats.likelihood_ratio_test is likelihood_ratio_test
    assert stats.block_tests is block_tests
