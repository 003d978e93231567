"""stats.models without R: independent recomputations, known truth and bad data."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from stats.models import (compare_complete_case, fit_adjusted, fit_complete_case,
                          likelihood_ratio_test)
from stats.models.gee import fit_gee
from stats.models.glmm import LaplaceObjective
from stats.schema import ContractError, check_tidy
from stats.simulate import benchx_cohort

FORMULA = "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)"


def _toy(n=400, G=8, seed=0, sd=0.8):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, G, n)
    x = rng.normal(size=n)
    X = np.column_stack([np.ones(n), x])
    b = rng.normal(0, sd, G)
    y = (rng.random(n) < expit(-0.3 + 0.8 * x + b[g])).astype(float)
    return X, y, g, G


@pytest.mark.parametrize("nagq", [1, 5])
def test_analytic_gradient_matches_finite_differences(nagq):
    X, y, g, G = _toy()
    obj = LaplaceObjective(X, y, np.ones_like(y), g, G, nagq=nagq)
    x0 = np.array([0.7, -0.2, 0.6])
    _, grad = obj.value_grad(x0)
    num = np.empty(3)
    for j in range(3):
        e = np.zeros(3)
        e[j] = 1e-5
        num[j] = (obj.value_grad(x0 + e)[0] - obj.value_grad(x0 - e)[0]) / 2e-5
    np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-6)


def test_agq_converges_to_numerical_integral():
    """Many-node AGQ equals the marginal likelihood computed on a fine grid; Laplace is close."""
    X, y, g, G = _toy(n=200, G=6, seed=3)
    params = np.array([1.1, -0.2, 0.6])
    z = np.linspace(-9, 9, 4001)
    phi = np.exp(-z ** 2 / 2) / np.sqrt(2 * np.pi)
    eta = (X @ params[1:])[:, None] + params[0] * z[None, :]
    ll_rows = y[:, None] * eta - np.logaddexp(0, eta)
    per_group = np.zeros((G, len(z)))
    np.add.at(per_group, g, ll_rows)
    dz = z[1] - z[0]
    exact = np.sum(np.log(np.sum(np.exp(per_group) * phi, axis=1) * dz))
    agq = -LaplaceObjective(X, y, np.ones_like(y), g, G, nagq=25).value_grad(params)[0] / 2
    lap = -LaplaceObjective(X, y, np.ones_like(y), g, G, nagq=1).value_grad(params)[0] / 2
    assert agq == pytest.approx(exact, abs=1e-8)
    assert lap == pytest.approx(exact, abs=0.05)


def test_mancl_derouen_bruteforce():
    """Bias-reduced sandwich against explicit n_i x n_i matrices (I - H_ii)^-1."""
    X, y, g, G = _toy(n=120, G=6, seed=5)
    r = fit_gee(X, y, g)
    rb = fit_gee(X, y, g, bias_reduced=True)
    mu = expit(X @ r.beta)
    a = mu * (1 - mu)
    B = np.zeros((2, 2))
    parts = []
    for k in range(G):
        i = g == k
        n_i = i.sum()
        Rw = (1 - r.alpha) * np.eye(n_i) + r.alpha
        V = r.scale * np.sqrt(np.outer(a[i], a[i])) * Rw
        D = a[i, None] * X[i]
        Vi = np.linalg.inv(V)
        B += D.T @ Vi @ D
        parts.append((D, Vi, y[i] - mu[i]))
    Binv = np.linalg.inv(B)
    meat_r = np.zeros((2, 2))
    meat_b = np.zeros((2, 2))
    for D, Vi, e in parts:
        H = D @ Binv @ D.T @ Vi
        u = D.T @ Vi @ e
        ub = D.T @ Vi @ np.linalg.solve(np.eye(len(e)) - H, e)
        meat_r += np.outer(u, u)
        meat_b += np.outer(ub, ub)
    np.testing.assert_allclose(r.vcov, Binv @ meat_r @ Binv, rtol=1e-8)
    np.testing.assert_allclose(rb.vcov, Binv @ meat_b @ Binv, rtol=1e-8)
    assert np.all(np.diag(rb.vcov) > np.diag(r.vcov))


@pytest.fixture(scope="module")
def cohort():
    sim = benchx_cohort(3000, n_models=2, seed=11)
    return sim


def test_standardized_means_recomputed(cohort):
    fit = fit_adjusted(cohort.data, FORMULA, threshold=cohort.truth["threshold"], model="model_A")
    mm = fit.marginal_means("phase", kind="standardized")
    check_tidy(mm)
    mf = fit.fits["model_A"]
    data = mf.design.data
    z = np.linspace(-8, 8, 321)
    w = np.exp(-z ** 2 / 2)
    w /= w.sum()
    import patsy

    def design(level):
        frame = data.copy()
        frame["phase"] = pd.Categorical([level] * len(frame), categories=data["phase"].cat.categories)
        Xn = patsy.build_design_matrices([mf.design.design_info], frame, return_type="dataframe")[0]
        return Xn[mf.design.terms].to_numpy()

    def std_mean(params, Xn):
        eta = Xn @ params[1:]
        return float(np.mean(expit(eta[:, None] + params[0] * z[None, :]) @ w))

    params = np.concatenate([[mf.theta], mf.beta])
    for level, row in mm.set_index("group_level").iterrows():
        Xn = design(level)
        est = std_mean(params, Xn)
        assert row.estimate == pytest.approx(est, abs=1e-8)
        grad = np.empty(len(params))
        for j in range(len(params)):
            e = np.zeros(len(params))
            e[j] = 1e-6
            grad[j] = (std_mean(params + e, Xn) - std_mean(params - e, Xn)) / 2e-6
        assert row.std_error == pytest.approx(np.sqrt(grad @ mf.vcov_full @ grad), rel=1e-4)
        assert row.conf_low < row.estimate < row.conf_high
    # standardized (population-averaged) sensitivities are pulled towards 0.5 vs emmeans
    em = fit.marginal_means("phase").set_index("group_level").estimate
    st = mm.set_index("group_level").estimate
    assert np.all(np.abs(st - 0.5) <= np.abs(em - 0.5) + 1e-12)


def test_threshold_and_pred(cohort):
    d = cohort.data
    with pytest.raises(ContractError, match="threshold"):
        fit_adjusted(d, FORMULA, model="model_A")
    a = fit_adjusted(d, FORMULA, threshold=50, model="model_A", method="fixed")
    b = fit_adjusted(d.assign(pred=(d.score >= 50).astype(int)), FORMULA, model="model_A",
                     method="fixed")
    np.testing.assert_allclose(a.fits["model_A"].beta, b.fits["model_A"].beta)
    with pytest.raises(ContractError, match="no rows for model"):
        fit_adjusted(d, FORMULA, threshold=50, model="nope")
    with pytest.raises(ContractError, match="tumour_size"):
        fit_adjusted(d, "~ tumour_size", threshold=50, model="model_A")


def test_per_model_and_pooled(cohort):
    d = cohort.data
    per = fit_adjusted(d, FORMULA, threshold=50, method="gee")
    assert per.models == ["model_A", "model_B"]
    td = per.tidy()
    assert set(td.model) == {"model_A", "model_B"}
    pooled = fit_adjusted(d, FORMULA, threshold=50, model="pooled")
    assert "model[T.model_B]" in set(pooled.tidy().estimand)
    assert pooled.glance().nobs.iloc[0] == td.groupby("model").n.first().sum()
    mm = pooled.marginal_means("model")   # adjusted sensitivity of each model
    assert list(mm.group_level) == ["model_A", "model_B"] and mm.estimate.between(0, 1).all()


def test_numeric_group_is_a_factor(cohort):
    d = cohort.data.assign(site=cohort.data.site.cat.codes + 1)  # sites coded 1..12
    fixed = fit_adjusted(d, "~ phase", threshold=50, model="model_A", method="fixed")
    terms = set(fixed.tidy().estimand)
    assert "site[T.2]" in terms and "site[T.12]" in terms


def test_warnings_never_crash(cohort):
    d = cohort.data[cohort.data.model == "model_A"].copy()
    d["pred"] = (d.score >= 50).astype(int)
    # separation: every arterial positive detected; an empty race level
    d.loc[(d.label == 1) & (d.phase == "arterial"), "pred"] = 1
    d["race"] = d["race"].cat.add_categories(["Pacific"])
    fit = fit_adjusted(d, FORMULA)
    g = fit.glance().iloc[0]
    assert "separation" in g.warnings and "empty_level" in g.warnings
    td = fit.tidy().set_index("estimand")
    assert td.flag["phase[T.arterial]"].startswith("separation")
    # the separation flag on the term it concerns only, once
    flags = td.flag.fillna("").str.split(";")
    assert flags["phase[T.arterial]"].count("separation") == 1
    assert [t for t, f in flags.items() if "separation" in f] == ["phase[T.arterial]"]
    assert not any("not_estimable" in f for t, f in flags.items() if t != "race[T.Pacific]")
    assert td.flag["race[T.Pacific]"].startswith("empty") and np.isnan(td.estimate["race[T.Pacific]"])
    # fewer than 5 groups
    few = d[d.site.isin(d.site.cat.categories[:3])]
    g = fit_adjusted(few, "~ phase", population="negatives").glance().iloc[0]
    assert "few_groups" in g.warnings


def test_singular_fit():
    rng = np.random.default_rng(2)
    n = 600
    df = pd.DataFrame({"site": rng.integers(0, 10, n).astype(str), "x": rng.normal(size=n)})
    df["y"] = (rng.random(n) < expit(0.2 + 0.5 * df.x)).astype(int)
    fit = fit_adjusted(df, "y ~ x", population=None)
    g = fit.glance().iloc[0]
    assert fit.fits["all"].theta < 1e-4
    assert "singular" in g.warnings and "singular" in fit.tidy().flag.iloc[0]
    assert np.all(np.isfinite(fit.tidy().std_error.iloc[:2]))


def test_complete_case(cohort):
    d = cohort.data
    cc = fit_complete_case(d, FORMULA, threshold=50, model="model_A")
    terms = set(cc.tidy().estimand)
    assert "race[T.Unknown]" not in terms and "race[T.Black]" in terms
    both = compare_complete_case(d, FORMULA, threshold=50, model="model_A", method="fixed")
    check_tidy(both)
    assert set(both.analysis) == {"unknown_as_level", "complete_case"}
    n = both.groupby("analysis").n.first()
    assert n["complete_case"] < n["unknown_as_level"]


def test_complete_case_keeps_the_reference_level(cohort):
    """The primary fit's reference level (the categorical's first: here White) stays the
    reference after Unknown is dropped; pandas' remove_categories would sort the rest
    and make Asian the reference (the report then read 'race: White vs White')."""
    d = cohort.data.copy()
    order = ["White", "Asian", "Black", "Other", "Unknown"]
    assert set(d["race"].astype(str)) <= set(order)
    d["race"] = pd.Categorical(d["race"].astype(str), categories=order)
    primary = set(fit_adjusted(d, FORMULA, threshold=50, model="model_A",
                               method="fixed").tidy().estimand)
    cc = set(fit_complete_case(d, FORMULA, threshold=50, model="model_A",
                               method="fixed").tidy().estimand)
    assert "race[T.Asian]" in primary and "race[T.White]" not in primary
    assert cc == primary - {"race[T.Unknown]"}


def test_lrt_checks_rows(cohort):
    d = cohort.data
    full = fit_adjusted(d, FORMULA, threshold=50, model="model_A", method="fixed", group=None)
    red = fit_adjusted(d[d.age > 30], "~ phase", threshold=50, model="model_A", method="fixed",
                       group=None)
    with pytest.raises(ContractError, match="different rows"):
        likelihood_ratio_test(full, red)
    gee = fit_adjusted(d, FORMULA, threshold=50, model="model_A", method="gee")
    with pytest.raises(ValueError, match="GEE has no likelihood"):
        likelihood_ratio_test(gee, gee)


def test_recovery_large_n():
    """Simulator truth (latent-threshold logistic GLMM) inside the Wald 95% CIs at ~20,000
    positives: every term within 3.3 SE (99.9%), at least 11 of 13 within 1.96 SE."""
    sim = benchx_cohort(50_000, n_models=1, seed=7)
    fit = fit_adjusted(sim.data, FORMULA, threshold=sim.truth["threshold"])
    td = fit.tidy().set_index("estimand")
    truth = sim.truth["coef"].set_index("term")["estimate"]
    z = (td.estimate.reindex(truth.index) - truth) / td.std_error.reindex(truth.index)
    assert np.all(np.abs(z) < 3.3), z
    assert (np.abs(z) < 1.96).sum() >= len(z) - 2, z
    sd = td.loc["sd__(Intercept)"]
    assert abs(sd.estimate - sim.truth["site_sd"]) < 3.3 * sd.std_error


def test_scheduler_gives_identical_fits(cohort):
    distributed = pytest.importorskip("dask.distributed")
    local = fit_adjusted(cohort.data, "~ phase + sex", threshold=50)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None) as client:
        remote = fit_adjusted(cohort.data, "~ phase + sex", threshold=50, scheduler=client)
    pd.testing.assert_frame_equal(local.tidy(), remote.tidy())


def _degenerate(kind):
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame({"site": rng.integers(0, 6, n).astype(str), "x": rng.normal(size=n),
                       "f": rng.choice(["a", "b"], n)})
    if kind == "all_ones":
        return df.assign(y=1)
    if kind == "one_group":
        return df.assign(site="s", y=(rng.random(n) < .5).astype(int))
    return df.assign(y=(df.x > 0).astype(int))   # x separates the outcome completely


@pytest.mark.parametrize("kind,expect", [("all_ones", "separation"), ("one_group", "few_groups"),
                                         ("x_separates", "separation")])
@pytest.mark.parametrize("method", ["glmm", "gee", "fixed"])
def test_degenerate_data_warn_not_crash(kind, expect, method):
    with np.errstate(all="raise"):   # and no floating-point warning escapes
        fit = fit_adjusted(_degenerate(kind), "y ~ x + f", population=None, method=method)
    g = fit.glance().iloc[0]
    if method == "fixed" and expect == "few_groups":
        expect = ""   # site as a fixed effect with one level is a plain logistic model
    assert expect in g.warnings
    check_tidy(fit.tidy())


def test_r_style_formula(cohort):
    d = cohort.data
    a = fit_adjusted(d, "detected ~ phase + log(tumor_size_mm) + (1 | site)", threshold=50,
                     model="model_A")
    b = fit_adjusted(d, "~ phase + np.log(tumor_size_mm)", threshold=50, model="model_A")
    assert "log(tumor_size_mm)" in set(a.tidy().estimand)
    np.testing.assert_allclose(a.fits["model_A"].beta, b.fits["model_A"].beta)
    assert a.marginal_means("phase").estimate.tolist() == pytest.approx(
        b.marginal_means("phase").estimate.tolist())
    with pytest.raises(ValueError, match="random intercept"):
        fit_adjusted(d, "~ phase + (age | site)", threshold=50)


@pytest.mark.parametrize("method", ["glmm", "gee", "fixed"])
def test_row_order_and_site_labels_do_not_matter(cohort, method):
    d = cohort.data[cohort.data.model == "model_A"]
    a = fit_adjusted(d, "~ phase + sex", threshold=50, method=method)
    perm = d.sample(frac=1.0, random_state=1)
    perm = perm.assign(site=perm.site.cat.rename_categories(lambda s: f"x{s}"))
    b = fit_adjusted(perm, "~ phase + sex", threshold=50, method=method)
    ta, tb = a.tidy(), b.tidy()
    keep = ~ta.estimand.str.startswith("site[")
    np.testing.assert_allclose(ta.estimate[keep], tb.estimate[keep], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ta.std_error[keep], tb.std_error[keep], rtol=1e-5)


def test_blocks_by_variable_or_term(cohort):
    from stats.models import block_tests

    d = cohort.data[cohort.data.model == "model_A"]
    f = "~ phase + sex + np.log(tumor_size_mm)"
    a = block_tests(d, f, {"tumour": ["np.log(tumor_size_mm)"], "sex": ["sex"]}, method="fixed",
                    threshold=50)
    b = block_tests(d, f, {"tumour": ["tumor_size_mm"], "sex": ["sex[T.M]", "sex"]},
                    method="fixed", threshold=50)
    lr_a = a[a.estimand == "likelihood_ratio"].set_index("block")
    lr_b = b[b.estimand == "likelihood_ratio"].set_index("block")
    assert list(lr_a.index) == ["tumour", "sex"] and list(lr_a.terms) == ["np.log(tumor_size_mm)", "sex"]
    np.testing.assert_allclose(lr_a.statistic, lr_b.statistic)
    assert (lr_a.statistic > 0).all() and (lr_a.df == 1).all()


@pytest.mark.parametrize("model", [None, "pooled"])
def test_block_tests_repeated_index_labels(cohort, model):
    """Regression: per-model frames concatenated without reset_index repeat index labels;
    the reduced fits must still use exactly the full fit's rows (they used to be looked up
    by label in the whole table: 'the fits use different rows (578 vs 1156)')."""
    from stats.models import block_tests

    d = cohort.data
    parts = [d[d.model == m].reset_index(drop=True) for m in ("model_A", "model_B")]
    repeated = pd.concat(parts)
    assert repeated.index.has_duplicates
    kw = dict(blocks={"sex": ["sex"]}, threshold=50, model=model)
    a = block_tests(repeated, "~ phase + sex", **kw)
    b = block_tests(pd.concat(parts, ignore_index=True), "~ phase + sex", **kw)
    check_tidy(a)
    lr = a[a.estimand == "likelihood_ratio"].set_index(["model", "block"])
    np.testing.assert_allclose(lr.statistic, b[b.estimand == "likelihood_ratio"].statistic)
    # one term per block and one SD for the group, also when the models are pooled
    assert (lr.df == 1).all() and (lr.statistic > 0).all()
    assert set(lr.index.get_level_values("block")) == {"sex", "site"}


def test_block_tests_reuse_a_given_full_fit(cohort):
    """The report passes its primary fit as ``full=``: the same table as fitting it again
    (to the bit), and a fit of another method or group is refused."""
    from stats.models import block_tests, fit_adjusted

    d = cohort.data[cohort.data.model.isin(["model_A", "model_B"])]
    f = "~ phase + sex"
    full = fit_adjusted(d, f, group="site", method="glmm", threshold=50, conf_level=0.9)
    a = block_tests(d, f, {"sex": ["sex"]}, threshold=50)
    b = block_tests(d, f, {"sex": ["sex"]}, threshold=50, full=full)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    gee = fit_adjusted(d, f, group="site", method="gee", threshold=50)
    with pytest.raises(ValueError, match="block_tests: full="):
        block_tests(d, f, {"sex": ["sex"]}, threshold=50, full=gee)


def test_r2_only_where_defined(cohort):
    """Latent-scale R2 for GLMM and plain logistic fits; NaN for site-fixed and GEE fits."""
    d = cohort.data
    kw = dict(threshold=50, model="model_A")
    glmm = fit_adjusted(d, "~ phase + sex", **kw).glance().iloc[0]
    assert 0 < glmm.r2_marginal < glmm.r2_conditional < 1
    glm = fit_adjusted(d, "~ phase + sex", method="fixed", group=None, **kw).glance().iloc[0]
    assert 0 < glm.r2_marginal == glm.r2_conditional < 1
    for method in ("fixed", "gee"):
        g = fit_adjusted(d, "~ phase + sex", method=method, **kw).glance().iloc[0]
        assert np.isnan(g.r2_marginal) and np.isnan(g.r2_conditional), method


def test_conditional_modes_from_a_cold_start():
    """Regression: plain Newton from u = 0 cycled (u = 0 <-> 3) for some groups of four
    0/1 outcomes at a large SD (ohio at theta = 2.34), leaving score residuals of 6.7; the
    safeguarded Newton reaches the modes (score 0) and the exact Laplace value."""
    rng = np.random.default_rng(5)
    G, k = 400, 4
    g = np.repeat(np.arange(G), k)
    x = np.tile([-2.0, -1.0, 0.0, 1.0], G)
    X = np.column_stack([np.ones(G * k), x])
    y = (rng.random(G * k) < expit(-1.9 - 0.1 * x + rng.normal(0, 2.3, G)[g])).astype(float)
    obj = LaplaceObjective(X, y, np.ones_like(y), g, G, nagq=1)
    theta, beta = 2.34, np.array([-3.37, -0.18])
    u, p = obj.modes(X @ beta, theta, u0=np.zeros(G))
    score = theta * np.bincount(g, y - p) - u
    assert np.max(np.abs(score)) < 1e-8
    dev = obj.value_grad(np.array([theta, *beta]))[0]
    H = 1 + theta ** 2 * np.bincount(g, p * (1 - p))
    eta = X @ beta + theta * u[g]
    exact = np.sum(y * eta - np.logaddexp(0, eta)) - u @ u / 2 - np.log(H).sum() / 2
    assert -dev / 2 == pytest.approx(exact, abs=1e-8)
