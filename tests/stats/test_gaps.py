"""stats.decompose_gap: the decomposition against R, its identities, the vectorised
replicate refits against stats.fit_adjusted, and known truth in large samples.

R fixture: tests/r/gaps.R (glm and lme4 glmer, converged; the decomposition written out
by hand in R, the Shapley values from every (reference, comparison) pair without
grouping rows into patterns) -> tests/r/gaps.csv, on tests/r/data/gaps_cases.csv
(tests/r/gaps_data.py). Measured gaps: glm 6e-16 (tested to 1e-9); glmer 1.4e-8, and
5.2e-8 for the default within-site GLMM (glmer with the site's share of group c), from
lme4's own convergence (tested to 1e-6).
Replicate refits (the batched Newton of stats.gaps) against ``stats.fit_adjusted`` on the
duplicated rows, each with the replicate's own site shares: coefficients and site effects
2.3e-10 for the within-site GLMM (30 replicates, 2 of them on the boundary), 1.8e-14 for
the site-fixed model (tested to 1e-7).
The coverage simulations are in bench/gap_decomposition.py (.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stats
from stats import gaps as G
from stats.schema import ContractError, check_tidy

ROOT = Path(__file__).resolve().parents[2]
R = ROOT / "tests" / "r"
sys.path.insert(0, str(ROOT / "bench"))
from gap_decomposition import simulate  # noqa: E402

COVS = ["phase", "np.log(tumor_size_mm)"]
PARTS = ("gap_total", "gap_case_mix", "gap_conditional", "contribution:phase",
         "contribution:np.log(tumor_size_mm)", "contribution:site")


@pytest.fixture(scope="module")
def cases():
    return pd.read_csv(R / "data" / "gaps_cases.csv")


@pytest.fixture(scope="module")
def ref():
    return pd.read_csv(R / "gaps.csv")


@pytest.mark.parametrize("method, fit, within, tol", [
    ("fixed", "glm", True, 1e-9),
    ("glmm", "glmer_within", True, 1e-6),      # the default: the site's share of c (Mundlak)
    ("glmm", "glmer", False, 1e-6)])
def test_matches_r_by_hand(cases, ref, method, fit, within, tol):
    out = stats.decompose_gap(cases, "group", ("c", "r"), covariates=COVS, method=method,
                              n_boot=None, within_site=within)
    check_tidy(out)
    assert (out["within_site"] == (within and method == "glmm")).all()
    r = ref[ref["fit"] == fit].set_index("estimand")["value"]
    got = out.set_index("estimand")
    for e in PARTS:
        assert abs(got.loc[e, "estimate"] - r[e]) < tol, (e, got.loc[e, "estimate"], r[e])
    row = got.loc["gap_total"]
    assert abs(row["p_counterfactual"] - r["p_counterfactual"]) < tol
    assert abs(row["model_residual"] - r["model_residual"]) < tol
    # the identities: total = case mix + conditional; contributions add up to case mix
    assert abs(got.loc["gap_total", "estimate"] - got.loc["gap_case_mix", "estimate"]
               - got.loc["gap_conditional", "estimate"]) < 1e-14
    contrib = got.loc[[e for e in got.index if e.startswith("contribution:")], "estimate"]
    assert abs(contrib.sum() - got.loc["gap_case_mix", "estimate"]) < 1e-12
    # ordered by size, largest first
    assert list(got.loc[contrib.index, "order"]) == sorted(got.loc[contrib.index, "order"])
    assert np.all(np.diff(np.abs(contrib.to_numpy())) <= 0)


def test_crude_gap_by_hand(cases):
    out = stats.decompose_gap(cases, "group", ("c", "r"), covariates=COVS, method="fixed",
                              n_boot=None)
    y = cases.groupby("group")["pred"].mean()
    tot = out.set_index("estimand").loc["gap_total"]
    assert abs(tot["estimate"] - (y["c"] - y["r"])) < 1e-15
    assert tot["p_comparison"] == y["c"] and tot["p_reference"] == y["r"]
    assert abs(tot["model_residual"]) < 1e-10   # the score equations of the group columns


def _setup(cases, method, covariates=COVS, **kw):
    cap = {}
    orig = G._Setup.replicates

    def grab(self, W_all):
        cap["s"] = self
        return orig(self, W_all)

    G._Setup.replicates = grab
    try:
        stats.decompose_gap(cases, "group", ("c", "r"), covariates=covariates,
                            method=method, n_boot=2, seed=1, **kw)
    finally:
        G._Setup.replicates = orig
    return cap["s"]


@pytest.mark.parametrize("method, n_rep, within", [("glmm", 30, True), ("glmm", 30, False),
                                                   ("fixed", 10, True)])
def test_batched_refits_equal_fit_adjusted(method, n_rep, within):
    """Each replicate's refit (vectorised over replicates) equals stats.fit_adjusted on
    the replicate's duplicated rows: the bootstrap refits the model it reports."""
    # seed 5: the within-site GLMM's SD is 0.33 (at seed 1 it is 0, the logistic model,
    # and the random-effect refits went untested: a row-order slip in the shares passed)
    data = simulate(250, "case mix only", np.random.default_rng(5))
    s = _setup(data, method, within_site=within)
    if method == "glmm":
        assert s.mf.theta > 0.2 and G._BatchNewton.for_setup(s).random
        assert bool(s.shares) == within
    W = G._cluster_weights(np.random.default_rng(10), int(s.clusters.max()) + 1, n_rep)
    W = W[:, s.clusters]
    V = s.share_values(W) if s.shares else None
    if method == "glmm" and within:   # the within-site model: its shares per replicate
        assert s.shares and np.ptp(V[:, 0, 0]) > 0
    betas, sites, failed = G._BatchNewton.for_setup(s).fit(W, V)
    assert not failed.any()
    worst, boundary = 0.0, 0
    for i in range(n_rep):
        b2, s2 = s._refit(W[i])
        worst = max(worst, float(np.max(np.abs(betas[i] - b2))))
        if sites is not None:
            worst = max(worst, float(np.max(np.abs(sites[i] - s2))))
            boundary += int(np.all(s2 == 0))
    assert worst < 1e-7, worst
    if method == "glmm" and within:
        assert boundary >= 1   # replicates on the boundary (SD 0) are among them


def test_a_reference_level_of_one_outcome_is_refitted_in_the_batch():
    """Quasi-complete separation along a combination of columns: every scan of the
    covariate's reference level missed (the intercept goes to -inf, the other levels'
    terms to +inf; the single-column count rule cannot see it). The batched Newton
    follows the flat direction until the fitted probabilities settle: every replicate is
    solved in the batch, and its fitted probabilities equal stats.fit_adjusted's on its
    duplicated rows (1e-6: both stop on the way to an infinite estimate). The demo's
    replicates, where the separation appears only in some replicates, are the test of
    FLAT_EIG (tests/analysis/test_attribution_plan.py)."""
    data = simulate(250, "case mix only", np.random.default_rng(3))
    rng = np.random.default_rng(4)
    miss = np.flatnonzero(data["pred"].to_numpy() == 0)
    age = rng.choice(np.array(["b", "c"]), len(data))
    age[rng.choice(miss, 25, replace=False)] = "a"
    data["age_group"] = age
    s = _setup(data, "fixed", COVS + ["age_group"])
    W = G._cluster_weights(np.random.default_rng(5), int(s.clusters.max()) + 1, 20)[:, s.clusters]
    solver = G._BatchNewton.for_setup(s)
    betas, _, failed = solver.fit(W)
    assert not failed.any(), int(failed.sum())
    worst = 0.0
    for i in range(len(W)):
        b2, _ = s._refit(W[i])
        p1 = 1 / (1 + np.exp(-(solver.X @ betas[i])))
        p2 = 1 / (1 + np.exp(-(solver.X @ b2)))
        worst = max(worst, float(np.max(np.abs(p1 - p2)[W[i] > 0])))
    assert worst < 1e-6, worst
    assert np.min(betas[:, 0]) < -15   # the separated direction was followed


def test_bootstrap_is_paired_and_reproducible(cases):
    two = pd.concat([cases.assign(model="a"), cases.assign(model="b")], ignore_index=True)
    out = stats.decompose_gap(two, "group", ("c", "r"), covariates=COVS, method="fixed",
                              n_boot=50, seed=7)
    a, b = (out[out["model"] == m].set_index("estimand") for m in ("a", "b"))
    # the same scans and the same draws: identical intervals for identical models
    assert np.allclose(a["conf_low"], b.loc[a.index, "conf_low"], atol=1e-12)
    again = stats.decompose_gap(two, "group", ("c", "r"), covariates=COVS, method="fixed",
                                n_boot=50, seed=7)
    pd.testing.assert_frame_equal(out, again)
    assert (out["n_boot"] == 50).all()
    assert (out["conf_low"] <= out["estimate"] + 1e-12).all()


@pytest.mark.parametrize("scenario, zero", [("case mix only", "gap_conditional"),
                                            ("conditional only", "gap_case_mix")])
def test_known_truth_large_sample(scenario, zero):
    """In a large study the part whose true value is 0 is near 0 and the other carries
    the gap (coverage at study size: bench/gap_decomposition.md)."""
    data = simulate(12_000, scenario, np.random.default_rng(3))
    out = stats.decompose_gap(data, "group", ("c", "r"), covariates=COVS, method="fixed",
                              n_boot=None).set_index("estimand")
    assert abs(out.loc[zero, "estimate"]) < 0.012
    other = "gap_case_mix" if zero == "gap_conditional" else "gap_conditional"
    assert abs(out.loc[other, "estimate"] - out.loc["gap_total", "estimate"]) < 0.012
    assert abs(out.loc["gap_total", "estimate"]) > 0.1


def test_refusals(cases):
    kw = dict(covariates=COVS, method="fixed", n_boot=None)
    with pytest.raises(ContractError, match="has no positives"):
        stats.decompose_gap(cases, "group", ("x", "r"), **kw)
    with pytest.raises(ContractError, match="two different levels"):
        stats.decompose_gap(cases, "group", ("r", "r"), **kw)
    with pytest.raises(ContractError, match="interaction cannot be split"):
        stats.decompose_gap(cases, "group", ("c", "r"), covariates=["phase:site"])
    with pytest.raises(ContractError, match="uses the group column"):
        stats.decompose_gap(cases, "group", ("c", "r"), covariates=["group"])
    with pytest.raises(ContractError, match="within_site must be True or False"):
        stats.decompose_gap(cases, "group", ("c", "r"), covariates=COVS, within_site="no")
    with pytest.raises(ContractError, match="at most 10"):
        stats.decompose_gap(cases, "group", ("c", "r"), covariates=[f"x{i}" for i in range(11)])


def test_not_estimable_when_group_aliased_with_site(cases):
    """The comparison level only at one site and that site only holding it: under the
    site-fixed model the group effect is aliased with the site, so the counterfactual has
    no unique value: NaN and flag not_estimable."""
    d = cases.copy()
    d["group"] = np.where(d["site"] == "site_6", "c", "r")
    out = stats.decompose_gap(d, "group", ("c", "r"), covariates=COVS, method="fixed",
                              n_boot=5, seed=1)
    row = out.set_index("estimand").loc["gap_case_mix"]
    assert np.isnan(row["estimate"]) and "not_estimable" in row["flag"]
    assert np.isfinite(out.set_index("estimand").loc["gap_total", "estimate"])


def _with_shares(d, levels, site="site", group="group"):
    """The site shares of ``levels`` among ``d``'s rows, computed here independently."""
    d = d.copy()
    for i, lv in enumerate(levels):
        d[f"s{i}"] = d.groupby(site)[group].transform(lambda g, lv=lv: (g == lv).mean())
    return d


def test_within_site_equals_explicit_shares(cases):
    """The within-site GLMM's total case-mix part equals the plain GLMM's with the site
    shares given as ordinary covariates (the total does not depend on how the linear
    predictor is split into pieces); the site's piece holds the share's part, so the
    share's and the site's contributions add up to the site's within the default."""
    d = _with_shares(cases, ["c"])
    kw = dict(method="glmm", n_boot=None)
    within = stats.decompose_gap(cases, "group", ("c", "r"), covariates=COVS, **kw)
    plain = stats.decompose_gap(d, "group", ("c", "r"), covariates=COVS + ["s0"],
                                within_site=False, **kw)
    w, p = within.set_index("estimand"), plain.set_index("estimand")
    for e in ("gap_total", "gap_case_mix", "gap_conditional"):
        assert abs(w.loc[e, "estimate"] - p.loc[e, "estimate"]) < 1e-8, e
    assert w["within_site"].all() and not p["within_site"].any()
    # the plain model's estimate differs: the shares change the fit
    bare = stats.decompose_gap(cases, "group", ("c", "r"), covariates=COVS,
                               within_site=False, **kw).set_index("estimand")
    assert abs(bare.loc["gap_case_mix", "estimate"] - w.loc["gap_case_mix", "estimate"]) > 1e-3


def test_within_site_three_levels_and_aliased_share(cases):
    """With a third level the reference's share joins the comparison's (both kept, as
    explicit covariates give the same case-mix part); a group constant within sites
    has no within-site contrast: its share is collinear with the group and left out, so
    the default equals the plain GLMM."""
    d = cases.copy()
    rng = np.random.default_rng(4)
    d["group"] = np.where((d["group"] == "r") & (rng.random(len(d)) < 0.3), "o", d["group"])
    kw = dict(method="glmm", n_boot=None)
    within = stats.decompose_gap(d, "group", ("c", "r"), covariates=COVS, **kw)
    both = stats.decompose_gap(_with_shares(d, ["c", "r"]), "group", ("c", "r"),
                               covariates=COVS + ["s0", "s1"], within_site=False, **kw)
    one = stats.decompose_gap(_with_shares(d, ["c"]), "group", ("c", "r"),
                              covariates=COVS + ["s0"], within_site=False, **kw)
    cm = lambda t: t.set_index("estimand").loc["gap_case_mix", "estimate"]   # noqa: E731
    assert abs(cm(within) - cm(both)) < 1e-8
    assert abs(cm(within) - cm(one)) > 1e-6          # the reference's share is used
    site_level = cases.copy()
    site_level["group"] = np.where(site_level["site"].isin(["site_5", "site_6"]), "c", "r")
    a = stats.decompose_gap(site_level, "group", ("c", "r"), covariates=COVS, **kw)
    b = stats.decompose_gap(site_level, "group", ("c", "r"), covariates=COVS,
                            within_site=False, **kw)
    assert not a["within_site"].any()
    pd.testing.assert_frame_equal(a, b)
