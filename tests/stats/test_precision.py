"""stats.precision: achieved half-widths and required sample sizes.

Independent checks: the Wilson closed form against a brute-force scan over every n of the
half-width of :func:`stats.proportion_ci` (validated against R's prop.test / binom.test
to 1e-10); Clopper-Pearson's search against the same brute force; the design effect
against simulated patients with a random intercept (exact ICC by quadrature); the
achieved half-widths against :func:`stats.subgroup_metrics`.
"""
from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit
from typer.testing import CliRunner

import stats
import stats.precision as sp
from clinrel.cli import app
from clinrel.cli import plansize as ps
from stats.intervals import proportion_ci
from stats.precision import (
    MSG_RANGE,
    half_width,
    icc_anova,
    kish_cluster_size,
    plan_summary,
    precision_table,
    required_n,
    wilson_n,
)
from stats.schema import ContractError, check_tidy
from stats.simulate import benchx_cohort

P = np.array([0.5, 0.7, 0.85, 0.9, 0.95, 0.99, 1.0])
H = np.array([0.03, 0.05, 0.1])


def _brute(p, h, method, deff=1.0, top=6000):
    """Smallest N in 1..top with the half-width at x = p N / deff of N / deff <= h."""
    N = np.arange(1, top + 1, dtype=float)
    lo, hi = proportion_ci(p * N / deff, N / deff, method=method, effective=True)
    ok = (hi - lo) / 2 <= h
    assert ok.any(), (p, h, method)
    return N[np.argmax(ok)]


def test_doctests():
    assert doctest.testmod(sp).failed == 0


def test_wilson_root_solves_the_half_width_equation():
    p, h = np.meshgrid(P, H)
    n = wilson_n(p, h)
    np.testing.assert_allclose(half_width(p, n), h, rtol=1e-10)
    # p = 0.5, +-5 points: z^2 (0.245 + 0.25) / 0.005 = 99 z^2 = 380.30 (Wald: 384.15)
    assert wilson_n(0.5, 0.05) == pytest.approx(99 * 1.959963984540054 ** 2, rel=1e-12)


@pytest.mark.parametrize("method", ["wilson", "clopper-pearson"])
@pytest.mark.parametrize("deff", [1.0, 1.7])
def test_required_n_equals_brute_force(method, deff):
    p, h = (a.ravel() for a in np.meshgrid(P, H))
    got = required_n(p, h, method=method, deff=deff)
    want = np.array([_brute(pi, hi, method, deff) for pi, hi in zip(p, h)])
    np.testing.assert_array_equal(got, want)
    # minimality, stated directly
    w = half_width(p, got / deff, method=method)
    w_less = half_width(p, (got - 1) / deff, method=method)
    assert (w <= h).all() and (w_less[got > 1] > h[got > 1]).all()


def test_clopper_pearson_needs_more_than_wilson_and_nan_passes():
    cp = required_n(P, 0.05, method="clopper-pearson")
    wi = required_n(P, 0.05, method="wilson")
    assert (cp >= wi).all() and (cp > wi).any()
    assert np.isnan(required_n(np.nan, 0.05)) and np.isnan(required_n(0.9, np.nan, method="clopper-pearson"))


def test_design_effect_matches_simulated_variance_inflation():
    """m scans per patient, patient random intercept (SD 1.2) on the logit: the variance
    of the observed proportion over 20,000 simulated studies is deff = 1 + (m - 1) icc
    times the binomial one, with the binary-scale icc computed exactly by quadrature."""
    rng = np.random.default_rng(11)
    a, s, m, n_pat, reps = 1.5, 1.2, 3, 60, 20_000
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()
    pi = expit(a + s * x)
    p = float(w @ pi)
    icc = float(w @ pi ** 2 - p ** 2) / (p * (1 - p))
    deff = float(sp.design_effect(m, icc))
    prob = expit(a + s * rng.normal(size=(reps, n_pat)))
    phat = rng.binomial(m, prob).sum(axis=1) / (m * n_pat)
    ratio = phat.var() / (p * (1 - p) / (m * n_pat))
    assert deff > 1.2
    assert ratio == pytest.approx(deff, rel=0.04)       # MC relative SE ~1%
    # the ANOVA estimator recovers that icc from one large data set
    v = rng.normal(size=20_000)
    y = rng.binomial(1, expit(a + s * v)[:, None], size=(20_000, m)).ravel()
    est = icc_anova(y, np.repeat(np.arange(20_000), m), np.zeros(len(y), dtype=int))
    assert est[0] == pytest.approx(icc, abs=0.015)


def test_icc_ignores_differences_between_cells():
    """Independent scans, very different cell rates, patients nested in cells: the ICC
    is ~0 (a plain one-way ANOVA over patients would read the cell differences as patient
    correlation). With a patient effect in every cell it is clearly positive."""
    rng = np.random.default_rng(8)
    n_pat, m, G = 3000, 3, 6
    cell = np.repeat(rng.integers(0, G, n_pat), m)
    patient = np.repeat(np.arange(n_pat), m)
    rate = np.linspace(0.1, 0.95, G)[cell]
    y = (rng.random(len(cell)) < rate).astype(float)
    assert abs(icc_anova(y, patient, cell)[0]) < 0.02
    assert icc_anova(y, patient, np.zeros_like(cell))[0] > 0.1
    u = np.repeat(rng.normal(0, 1.5, n_pat), m)
    y2 = (rng.random(len(cell)) < expit(np.log(rate / (1 - rate)) + u)).astype(float)
    assert icc_anova(np.c_[y, y2], patient, cell)[1] > 0.1


def test_half_width_at_required_n_in_simulation():
    """At the required n the realised Wilson half-width is centred on the target."""
    rng = np.random.default_rng(5)
    p, h = 0.85, 0.05
    n = int(required_n(p, h))
    x = rng.binomial(n, p, 20_000)
    lo, hi = proportion_ci(x, n)
    assert np.median((hi - lo) / 2) == pytest.approx(h, rel=0.03)


def test_kish_cluster_size():
    cell = np.array([0, 0, 0, 0, 1, 1, 1, 2])
    clu = np.array([0, 0, 0, 1, 2, 3, 4, 5])    # cell 0: sizes 3, 1; cell 1: 1, 1, 1
    got = kish_cluster_size(cell, clu, 4)
    np.testing.assert_allclose(got[:3], [(9 + 1) / 4, 1, 1])
    assert np.isnan(got[3])


@pytest.fixture(scope="module")
def cases():
    return stats.scan_level(benchx_cohort(800, n_models=2, n_sites=5, seed=4).data, threshold=50)


def test_cases_mode_matches_subgroup_metrics(cases):
    t = precision_table(cases, by=["phase"], methods=["wilson", "clopper-pearson"])
    check_tidy(t)
    for meth in ("wilson", "clopper-pearson"):
        sm = stats.subgroup_metrics(cases, by=["phase"], metrics=["sensitivity", "specificity"],
                                    ci=meth, cluster=None)
        m = t[t.method == meth].merge(sm, on=["estimand", "model", "group_var", "group_level"],
                                      suffixes=("", "_sm"))
        assert len(m) == len(sm)
        np.testing.assert_allclose(m["estimate"], m["estimate_sm"], rtol=1e-12)
        np.testing.assert_allclose(m["half_width"], (m["conf_high_sm"] - m["conf_low_sm"]) / 2,
                                   rtol=1e-12)
        assert (m["basis"] == "observed").all()
        np.testing.assert_array_equal(m["flag"] == "imprecise", m["half_width"] > 0.05)
    # expected default: the model's overall observed value; prevalence: the cell's
    ov = t[(t.group_var == "overall") & (t.estimand == "sensitivity")]
    np.testing.assert_allclose(ov["expected"], ov["estimate"])
    sens = t[t.estimand == "sensitivity"]
    np.testing.assert_allclose(sens["prevalence"], sens["n_pos"] / sens["n"])
    np.testing.assert_allclose(sens["scans_required"], np.ceil(sens["n_required"] / sens["prevalence"] - 1e-9))


def test_cases_mode_with_icc_uses_kish_cluster_sizes():
    rows = pd.DataFrame({
        "case_id": [f"c{i}" for i in range(8)], "model": "m", "score": 1.0, "site": "s",
        "label": [1, 1, 1, 1, 0, 0, 0, 0], "pred": [1, 1, 0, 1, 0, 0, 1, 0],
        "patient_id": ["a", "a", "a", "b", "c", "d", "e", "e"]})
    t = precision_table(rows, icc=0.5, methods=["wilson"])
    deff = t.set_index("estimand")["design_effect"]
    # positives: patients a (3 scans), b (1): m = 10/4; negatives: c, d, e (2): m = 6/4
    assert deff["sensitivity"] == pytest.approx(1 + (10 / 4 - 1) * 0.5)
    assert deff["specificity"] == pytest.approx(1 + (6 / 4 - 1) * 0.5)
    sens = t[t.estimand == "sensitivity"].iloc[0]
    lo, hi = proportion_ci(3 / deff["sensitivity"], 4 / deff["sensitivity"], effective=True)
    assert sens["half_width"] == pytest.approx((hi[()] - lo[()]) / 2)
    # given design_effect wins over icc
    t2 = precision_table(rows, icc=0.5, design_effect=1.3, methods=["wilson"])
    assert (t2["design_effect"] == 1.3).all()


def test_planning_mode_and_summary():
    sg = pd.DataFrame({"group_var": ["phase", "phase", "age_group"],
                       "group_level": ["arterial", "venous", "<40"], "share": [0.2, 0.5, 0.1],
                       "expected_sensitivity": [0.8, np.nan, np.nan]})
    t = precision_table(subgroups=sg, expected_sensitivity=0.9, expected_specificity=0.95,
                        prevalence=0.3, target_half_width=0.05, scans_per_patient=2, icc=0.2)
    check_tidy(t)
    assert len(t) == 4 * 2 * 2            # overall added; 2 estimands x 2 methods
    np.testing.assert_allclose(t["design_effect"], 1.2, rtol=1e-12)
    art = t[(t.group_level == "arterial") & (t.estimand == "sensitivity") & (t.method == "wilson")].iloc[0]
    assert art["expected"] == 0.8 and art["basis"] == "none" and np.isnan(art["conf_low"])
    assert art["n_required"] == np.ceil(wilson_n(0.8, 0.05) * 1.2 - 1e-9)
    assert art["scans_required"] == np.ceil(art["n_required"] / 0.3)
    assert art["study_scans_required"] == np.ceil(art["scans_required"] / 0.2)
    s = plan_summary(t)
    total = s[(s.group_var == "study") & (s.method == "wilson")].iloc[0]
    per = s[(s.group_var != "study") & (s.method == "wilson")]
    assert total["study_scans_required"] == per["study_scans_required"].max()
    assert total["binding"] == "age_group=<40"       # 10% share: the binding subgroup
    # given counts: achieved half-width at the expected value, then at the observed one
    cnt = pd.DataFrame({"group_var": ["site"], "group_level": ["A"], "n_pos": [40], "n_neg": [100]})
    t = precision_table(subgroups=cnt, expected_sensitivity=0.9, expected_specificity=0.9,
                        methods=["wilson"])
    row = t[(t.group_level == "A") & (t.estimand == "sensitivity")].iloc[0]
    assert row["basis"] == "expected" and row["half_width"] == pytest.approx(half_width(0.9, 40))
    t = precision_table(subgroups=cnt.assign(tp=30, tn=95), expected_sensitivity=0.9,
                        expected_specificity=0.9, methods=["wilson"])
    row = t[(t.group_level == "A") & (t.estimand == "sensitivity")].iloc[0]
    assert row["basis"] == "observed" and row["estimate"] == 0.75


def test_columns_do_not_depend_on_the_mode(cases):
    a = precision_table(cases, by=["phase"])
    b = precision_table(expected_sensitivity=0.9, expected_specificity=0.9)
    assert list(a.columns) == list(b.columns)
    assert (a.dtypes.to_numpy() == b.dtypes.to_numpy()).all()


def test_bad_input():
    with pytest.raises(ContractError) as e:
        precision_table(expected_sensitivity=0.9, expected_specificity=0.9, target_half_width=0.6)
    assert str(e.value) == MSG_RANGE.format(name="target_half_width", interval="(0, 0.5)",
                                            where="", values="0.6", fix="e.g. 0.05 for +-5 points")
    with pytest.raises(ContractError, match="write a proportion"):
        precision_table(expected_sensitivity=90, expected_specificity=0.9)
    sg = pd.DataFrame({"group_var": ["a", "a"], "group_level": ["x", "y"], "share": [0.2, 1.5]})
    with pytest.raises(ContractError, match=r"share must lie in \(0, 1\]; rows 2 got 1.5"):
        precision_table(subgroups=sg, expected_sensitivity=0.9, expected_specificity=0.9)
    with pytest.raises(ContractError, match="tp must not exceed n_pos; rows 1"):
        precision_table(subgroups=pd.DataFrame({"group_var": ["a"], "group_level": ["x"],
                                                "n_pos": [3], "tp": [4]}))
    with pytest.raises(ContractError, match="unknown column"):
        precision_table(subgroups=pd.DataFrame({"group_var": ["a"], "group_level": ["x"],
                                                "shares": [0.2]}))
    with pytest.raises(ContractError, match="group_var and group_level are required"):
        precision_table(subgroups=pd.DataFrame({"level": ["x"]}))
    with pytest.raises(ValueError, match="methods must be"):
        precision_table(expected_sensitivity=0.9, methods=["jeffreys"])
    with pytest.raises(ContractError, match="design_effect must lie in"):
        precision_table(expected_sensitivity=0.9, design_effect=0.5)


# --------------------------------------------------------------------------- clinrel plan-size

runner = CliRunner()
BASE = ["plan-size", "--sensitivity", "0.9", "--specificity", "0.95", "--prevalence", "0.3",
        "--half-width", "0.05"]


def test_plan_size_writes_and_prints(tmp_path):
    out = tmp_path / "sizes.csv"
    r = runner.invoke(app, [*BASE, "--subgroup", "phase=arterial:0.2", "--subgroup",
                            "age_group=<40:0.1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "Study size (wilson): 4,700 scans (set by age_group=<40)" in r.output
    df = pd.read_csv(out)
    assert "model" not in df.columns
    sg = pd.DataFrame({"group_var": ["phase", "age_group"], "group_level": ["arterial", "<40"],
                       "share": [0.2, 0.1]})
    want = plan_summary(precision_table(subgroups=sg, expected_sensitivity=0.9,
                                        expected_specificity=0.95, prevalence=0.3))
    np.testing.assert_array_equal(df["study_scans_required"], want["study_scans_required"])
    wil = df[df.method == "wilson"].set_index("group_level")
    assert wil.loc["<40", "positives_required"] == required_n(0.9, 0.05)
    assert wil.loc["total", "study_scans_required"] == 4700 and wil.loc["total", "binding"] == "age_group=<40"
    # an existing file is kept unless --force
    before = out.read_bytes()
    r = runner.invoke(app, [*BASE, "--out", str(out)])
    assert r.exit_code == 2 and "the file exists; add --force" in r.output
    assert out.read_bytes() == before
    r = runner.invoke(app, [*BASE, "--out", str(out), "--force", "--method", "wilson"])
    assert r.exit_code == 0 and set(pd.read_csv(out)["method"]) == {"wilson"}


def test_plan_size_from_yaml(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("precision:\n  expected_sensitivity: 0.9\n  expected_specificity: 0.95\n"
                    "  prevalence: 0.3\n  target_half_width: 0.05\n  methods: wilson\n"
                    "  icc: 0.2\n  scans_per_patient: 2\n  subgroups:\n"
                    "    - {group_var: phase, group_level: arterial, share: 0.2,"
                    " expected_sensitivity: 0.8}\n")
    out = tmp_path / "o.csv"
    r = runner.invoke(app, ["plan-size", "--plan", str(plan), "--out", str(out)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out).set_index("group_level")
    assert df.loc["arterial", "expected_sensitivity"] == 0.8
    assert df.loc["arterial", "positives_required"] == required_n(0.8, 0.05, deff=1.2)
    # an option wins over the file
    r = runner.invoke(app, ["plan-size", "--plan", str(plan), "--half-width", "0.1",
                            "--out", str(out), "--force"])
    assert r.exit_code == 0
    assert pd.read_csv(out).set_index("group_level").loc["overall", "positives_required"] == \
        required_n(0.9, 0.1, deff=1.2)


@pytest.mark.parametrize("args,message", [
    (["--sensitivity", "90"], "expected_sensitivity must lie in [0, 1]; got 90.0; write a proportion"),
    (["--half-width", "0"], "target_half_width must lie in (0, 0.5); got 0.0"),
    (["--subgroup", "phase=arterial"], ps.MSG_SUBGROUP.format(spec="phase=arterial")),
    (["--subgroup", "phase=a:0.7", "--subgroup", "phase=b:0.6"],
     ps.MSG_SHARES.format(axis="phase", total=1.3)),
    (["--subgroup", "phase=a:0.2", "--subgroup", "phase=a:0.3"],
     ps.MSG_DUPLICATE.format(axis="phase", level="a")),
    (["--design-effect", "0.8"], "design_effect must lie in [1, inf)"),
])
def test_plan_size_bad_values(tmp_path, args, message):
    out = tmp_path / "o.csv"
    r = runner.invoke(app, [*BASE, *args, "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split())
    assert "Traceback" not in r.output and not out.exists()


def test_plan_size_missing_values_and_bad_plan(tmp_path):
    out = tmp_path / "o.csv"
    r = runner.invoke(app, ["plan-size", "--sensitivity", "0.9", "--specificity", "0.9",
                            "--out", str(out)])
    assert r.exit_code == 2
    assert ps.MSG_REQUIRED.format(what="prevalence", option="--prevalence", key="prevalence",
                                  example="0.3") in " ".join(r.output.split())
    plan = tmp_path / "p.yaml"
    plan.write_text("expected_sensitivity: 0.9\nexpected_specificty: 0.9\nprevalence: 0.3\n")
    r = runner.invoke(app, ["plan-size", "--plan", str(plan), "--out", str(out)])
    assert r.exit_code == 2 and "unknown key(s) expected_specificty" in r.output
    plan.write_text("expected_sensitivity: 0.9\nexpected_specificity: 0.9\nprevalence: 0.3\n"
                    "methods: [jeffreys]\n")
    r = runner.invoke(app, ["plan-size", "--plan", str(plan), "--out", str(out)])
    assert r.exit_code == 2 and "methods: ['jeffreys'] not among" in r.output
    r = runner.invoke(app, ["plan-size", "--plan", str(tmp_path / "nope.yaml"), "--out", str(out)])
    assert r.exit_code == 2 and "file not found" in r.output
    assert not out.exists()
