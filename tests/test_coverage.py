"""Coverage studies (slow; ``make test-all``): nominal 95% intervals against known truth.

Designs (chosen so that the truth is unambiguous and the binomial model holds):

* Wilson / Clopper-Pearson on the simulator: the true sensitivity of a subgroup is the mean
  of ``truth["p_call"]`` over its positives in a large simulated population; each
  replicate samples n positives from that population with replacement and draws the call
  with its ``p_call``, so the count is exactly Binomial(n, true value).
* Small subgroup (about 15 positives): the simulator's <40-year venous-phase subgroup in
  studies sized so that it holds 15 positives on average; the number of positives varies
  from study to study, as it does in real studies. Wilson is in the band. At one fixed n
  and p binomial intervals oscillate (Wilson 91-98% at n = 15), so (a) also checks Wilson
  at n = 15 exactly, averaged over p ~ U(0.5, 0.95). Clopper-Pearson guarantees at least
  95% at every n and p; with the number of positives varying around 15 its expected
  coverage is 97.1-98.8% for p in 0.02-0.98 (98.7% at the simulator's value; exact
  computation), so the band's top cannot hold for it there. The test checks the
  simulated coverage against that exact value and that it never falls below nominal.
* DeLong: binormal scores with AUC = Phi(delta / sqrt 2). The AUC-scale interval (pROC's)
  is in the band at 50 positives / 150 negatives; at 15 positives it under-covers
  (~91-93%, a known small-sample property of Wald AUC intervals). The logit-scale interval
  (``auc_ci(auc_scale="logit")``) is in the band at 15 positives for AUC 0.65-0.85.
* Cluster bootstrap: patients with 1-3 scans and a patient random effect on the logit of
  detection; truth = E[expit(a + u)] by Gauss-Hermite quadrature. Each replicate cohort is
  one stratum of a stratified bootstrap, i.e. an independent cluster bootstrap per cohort.
  The percentile interval is in the band at 150 patients (~128 positive scans); at ~16
  positive scans it under-covers (~91%; BCa 76-95% depending on p; 55% at sensitivity
  0.95). The Wilson interval at the bootstrap's effective sample size
  (``boot_ci="wilson"``) is in the band at both sizes, for sensitivities 0.6-0.9 and a
  patient SD of 1 or 2 on the logit scale. With 2-6 scans per patient and SD 2 the
  design effect matters: the clustering-blind Wilson interval covers 88-92%, the
  effective-n one stays in the band. Its stated limit: with about 12 patients carrying
  4-8 scans each every interval under-covers (effective-n Wilson ~92%).

The band is 93.5-96.5% over >= 1,000 replicates (Monte Carlo SE ~0.7% at 1,000, 0.34% at
4,000).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from scipy.special import expit

from stats import bootstrap as bs
from stats.detection import case_matrix
from stats.intervals import _auc_ci_from, delong_placements, proportion_ci
from stats.simulate import benchx_cohort

pytestmark = pytest.mark.slow
LO, HI = 0.935, 0.965


def _covers(lo, hi, truth):
    return float(np.mean((lo <= truth) & (truth <= hi)))


def _exact_coverage(n, p, method):
    x = np.arange(n + 1)
    lo, hi = proportion_ci(x, n, method=method)
    return float(sps.binom.pmf(x, n, p)[(lo <= p) & (p <= hi)].sum())


@pytest.fixture(scope="module")
def population():
    sim = benchx_cohort(20_000, n_models=1, seed=7)
    d = sim.data.merge(sim.truth["p_call"], on=["model", "case_id"])
    return d[d.label == 1]


def test_wilson_cp_cover_simulator_truth(population):
    rng = np.random.default_rng(1)
    p = population.p_call.to_numpy()
    truth = p.mean()
    n, R = 400, 4000
    draws = rng.choice(p, size=(R, n))
    x = (rng.random((R, n)) < draws).sum(axis=1)
    for method in ("wilson", "clopper-pearson"):
        lo, hi = proportion_ci(x, n, method=method)
        cov = _covers(lo, hi, truth)
        assert LO <= cov <= HI, (method, cov)


def test_small_subgroup_binomial_intervals(population):
    rng = np.random.default_rng(2)
    n, R = 15, 20_000
    # (a) Wilson at exactly 15 positives, averaged over p ~ U(0.5, 0.95)
    p = rng.uniform(0.5, 0.95, R)
    x = rng.binomial(n, p)
    lo, hi = proportion_ci(x, n, method="wilson")
    assert LO <= _covers(lo, hi, p) <= HI
    # (b) the simulator's small subgroup (<40 years, venous phase) in studies of N scans
    # that hold 15 of its positives on average (20,000 scans in the population)
    sub = (population.age_group == "<40") & (population.phase == "venous")
    pool = population[sub].p_call.to_numpy()
    assert len(pool) >= 100
    truth = pool.mean()
    share = len(pool) / 20_000
    n_study = int(round(15 / share))
    npos = rng.binomial(n_study, share, R)
    npos = npos[npos > 0]
    cols = np.arange(npos.max())[None, :] < npos[:, None]  # the first npos draws count
    calls = rng.random(cols.shape) < rng.choice(pool, size=cols.shape)
    x = (calls & cols).sum(axis=1)
    assert abs(npos.mean() - 15) < 0.5
    mc_se = np.sqrt(0.95 * 0.05 / len(x))
    pmf = sps.binom.pmf(np.arange(1, npos.max() + 1), n_study, share)
    for method in ("wilson", "clopper-pearson"):
        lo, hi = proportion_ci(x, npos, method=method)
        cov = _covers(lo, hi, truth)
        expected = sum(w * _exact_coverage(k, truth, method)
                       for k, w in zip(range(1, npos.max() + 1), pmf)) / pmf.sum()
        assert abs(cov - expected) < 4 * mc_se, (method, cov, expected)
        if method == "wilson":
            assert LO <= cov <= HI, cov
        else:  # conservative by construction: never below nominal, above the band here
            assert cov >= 0.95 - 3 * mc_se and expected > HI, (cov, expected)


def _delong_coverage(m, k, auc, R, rng, scale="auc"):
    d = np.sqrt(2) * sps.norm.ppf(auc)
    y = np.r_[np.ones(m, bool), np.zeros(k, bool)]
    s = rng.normal(size=(R, m + k))
    s[:, :m] += d
    res = delong_placements(np.repeat(np.arange(R), m + k), np.tile(y, R), s.ravel(), R)
    _, lo, hi = _auc_ci_from(res["auc"], res["var"], 0.95, scale)
    return _covers(lo, hi, auc)


def test_delong_coverage():
    rng = np.random.default_rng(3)
    assert LO <= _delong_coverage(50, 150, 0.8, 4000, rng) <= HI
    small = _delong_coverage(15, 60, 0.75, 4000, rng)
    assert 0.90 <= small < LO  # AUC-scale Wald under-covers at 15 positives (documented)
    for m, k, auc in ((15, 60, 0.65), (15, 60, 0.75), (15, 60, 0.85), (15, 15, 0.75)):
        cov = _delong_coverage(m, k, auc, 4000, rng, scale="logit")
        assert LO <= cov <= HI, (m, k, auc, cov)


ONE_TO_THREE = ((1, 2, 3), (0.5, 0.3, 0.2))  # scans per patient and their probabilities


def _clustered(rng, R, n_pat, a, sd, scans_per_patient=ONE_TO_THREE):
    sizes, probs = scans_per_patient
    scans = rng.choice(sizes, size=R * n_pat, p=probs)
    rep = np.repeat(np.repeat(np.arange(R), n_pat), scans)
    pat = np.repeat(np.arange(R * n_pat), scans)
    u = rng.normal(0, sd, R * n_pat)[pat]
    y = rng.random(len(pat)) < 0.5
    pred = np.where(y, rng.random(len(pat)) < expit(a + u), rng.random(len(pat)) < 0.1)
    return pd.DataFrame({"case_id": np.arange(len(pat)).astype(str), "patient_id": pat.astype(str),
                         "model": "m", "label": y.astype(int), "score": pred * 100.0,
                         "pred": pred.astype(int), "site": "s", "rep": rep})


def _bootstrap_coverage(R, n_pat, B=1000, batch=200, a=1.5, sd=1.0, seed=0,
                        method="percentile", scans_per_patient=ONE_TO_THREE):
    """Coverage of the ``method`` interval and, from the same cohorts, of the plain
    (clustering-blind) Wilson interval; mean positives per cohort."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    truth = float((w * expit(a + sd * x)).sum() / w.sum())
    rng = np.random.default_rng(seed)
    hits, plain, npos = [], [], []
    for _ in range(R // batch):  # a batch of cohorts per call; replicates stay vectorized
        data = _clustered(rng, batch, n_pat, a, sd, scans_per_patient)
        cm = case_matrix(data, ["rep"])
        bc = bs.boot_counts(cm, strata="rep")
        counts = bs.replicate_counts(bc, B, seed=rng)
        out = bs.bootstrap_table(cm, bc, counts, metrics=["sensitivity"], conf_level=0.95,
                                 boot_ci=method)
        out = out[out.group_var == "rep"]
        hits.append(((out.conf_low <= truth) & (truth <= out.conf_high)).to_numpy())
        n = out.n_pos.to_numpy()
        lo, hi = proportion_ci(np.round(out.estimate.to_numpy() * n), n)
        plain.append((lo <= truth) & (truth <= hi))
        npos.append(n)
    return (float(np.concatenate(hits).mean()), float(np.concatenate(plain).mean()),
            float(np.concatenate(npos).mean()))


def test_cluster_bootstrap_coverage_with_multi_scan_patients():
    cov, _, npos = _bootstrap_coverage(1000, 150)
    assert LO <= cov <= HI and npos > 100
    small, _, npos = _bootstrap_coverage(1000, 19, seed=1)
    assert 13 <= npos <= 19  # about 15 positive scans per cohort
    assert 0.87 <= small < LO  # the percentile interval under-covers there (documented)


@pytest.mark.parametrize("a, sd", [(0.5, 1.0), (1.5, 1.0), (2.5, 1.0), (1.5, 2.0)])
def test_cluster_bootstrap_wilson_covers_small_and_large_subgroups(a, sd):
    seed = int(10 * a + sd)
    small, _, npos = _bootstrap_coverage(4000, 19, a=a, sd=sd, seed=seed, method="wilson")
    assert 13 <= npos <= 19
    assert LO <= small <= HI, small
    large, _, _ = _bootstrap_coverage(1000, 150, a=a, sd=sd, seed=seed, method="wilson")
    assert LO <= large <= HI, large


@pytest.mark.parametrize("n_pat, scans, npos_range, R", [
    (13, ((2, 3, 4), (1 / 3,) * 3), (17, 22), 4000),  # ~20 positives from ~11 patients
    (40, ((2, 3, 4, 5, 6), (0.2,) * 5), (70, 90), 2000),  # ~80 positives from ~36 patients
])
def test_design_effect_matters_with_several_scans_per_patient(n_pat, scans, npos_range, R):
    """Strongly clustered scans (patient SD 2 on the logit scale): the clustering-blind
    Wilson interval falls below the band, the effective-n Wilson interval stays in it.
    (At ~15 positives from ~8 such patients it covers 93.4-94.3%, at the band's edge.)"""
    cov, plain, npos = _bootstrap_coverage(R, n_pat, a=2.0, sd=2.0, seed=n_pat,
                                           method="wilson", scans_per_patient=scans)
    assert npos_range[0] <= npos <= npos_range[1], npos
    assert LO <= cov <= HI, cov
    assert plain < LO, plain


def test_few_patients_with_many_scans_under_cover():
    """Documented limit: 12 patients with 4-8 scans each (~36 positives) are too few
    clusters for the bootstrap variance; every interval here under-covers."""
    cov, plain, _ = _bootstrap_coverage(2000, 12, a=2.0, sd=2.0, seed=12, method="wilson",
                                        scans_per_patient=((4, 5, 6, 7, 8), (0.2,) * 5))
    assert 0.87 <= cov < LO, cov
    assert plain < cov
