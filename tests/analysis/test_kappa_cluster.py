"""Cohen's kappa with repeated scans of one patient: the linearization SE over
patients of ``analysis.metadata.kappa_interval(cluster=)``.

* against R (tests/r/kappa_cluster.R -> tests/r/kappa_cluster.csv, on
  tests/r/data/kappa_cluster.csv: four data sets of patients with 1-4 scans whose
  disagreements cluster): kappa to 1e-12 and its SE to 1e-8 against survey's
  ``svycontrast`` of the kappa expression over ``svymean`` of the category indicators;
* reductions: without repeats the Fleiss-Cohen-Everitt SE (statsmodels) unchanged; the
  linearization at singleton clusters is that SE times sqrt(n / (n - 1)) (the C / (C - 1)
  factor), computed here by its formula;
* coverage (known truth): clustered disagreements make the independent-cases SE too
  small; the clustered interval covers the population kappa, the independent one does not;
* the report's agreement table carries the clustered kappa when scans repeat.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.metadata import (KAPPA_CLUSTER_METHOD, KAPPA_METHOD,
                                     kappa_interval)

R = Path(__file__).resolve().parents[1] / "r"


@pytest.fixture(scope="module")
def data():
    return pd.read_csv(R / "data" / "kappa_cluster.csv", dtype=str)


@pytest.mark.parametrize("name", ["three", "two", "unbalanced", "few"])
def test_kappa_and_clustered_se_match_r_survey(data, name):
    ref = pd.read_csv(R / "kappa_cluster.csv").set_index("set").loc[name]
    d = data[data["set"] == name]
    ki = kappa_interval(d["a"], d["b"], cluster=d["patient_id"], conf_level=0.9)
    assert ki["method"] == KAPPA_CLUSTER_METHOD
    assert ki["n_clusters"] == ref["n_clusters"]
    assert ki["kappa"] == pytest.approx(ref["kappa"], abs=1e-12)
    assert ki["std_error"] == pytest.approx(ref["std_error"], rel=1e-8)
    # the t reference on the design's C - 1 df: confint(svycontrast(...), df = degf(des))
    assert ref["df"] == ref["n_clusters"] - 1
    assert ki["conf_low"] == pytest.approx(ref["conf_low_90"], rel=1e-8)
    assert ki["conf_high"] == pytest.approx(ref["conf_high_90"], rel=1e-8)


def test_without_repeats_the_independent_se(data):
    d = data[data["set"] == "three"]
    plain = kappa_interval(d["a"], d["b"])
    single = kappa_interval(d["a"], d["b"], cluster=d["case_id"])
    assert plain["method"] == single["method"] == KAPPA_METHOD
    assert single["std_error"] == plain["std_error"]
    assert single["n_clusters"] == len(d) and np.isnan(plain["n_clusters"])
    # the linearization itself at singleton clusters: FCE x sqrt(n / (n - 1)); by its
    # formula here (influence values of po and pe), one pair of cases forced into a cluster
    a, b = d["a"].to_numpy(), d["b"].to_numpy()
    n = len(a)
    cats = np.union1d(a, b)
    pa = np.array([(a == c).mean() for c in cats])
    pb = np.array([(b == c).mean() for c in cats])
    pe, po = pa @ pb, (a == b).mean()
    ia, ib = np.searchsorted(cats, a), np.searchsorted(cats, b)
    z = ((a == b) - po) / (1 - pe) + (po - 1) * (pb[ia] + pa[ib] - 2 * pe) / (1 - pe) ** 2
    assert np.sqrt((z ** 2).sum()) / n == pytest.approx(plain["std_error"], rel=1e-10)
    pairs = d["case_id"].to_numpy().copy()
    pairs[1] = pairs[0]
    both = kappa_interval(a, b, cluster=pairs)
    zc = z.copy()
    zc[0] += zc[1]
    zc = np.delete(zc, 1)
    want = np.sqrt((n - 1) / (n - 2) * (zc ** 2).sum()) / n
    assert both["std_error"] == pytest.approx(want, rel=1e-10)


def test_edge_cases():
    one = kappa_interval(["M", "M", "F"], ["M", "M", "F"], cluster=["p", "p", "p"])
    assert one["kappa"] == 1.0 and np.isnan(one["std_error"])   # a single cluster
    assert np.isnan(one["conf_low"]) and np.isnan(one["conf_high"])   # no interval
    mixed = kappa_interval(list("MMFFMF"), list("MFFFMM"), cluster=["p"] * 6)
    assert np.isfinite(mixed["kappa"]) and np.isnan(mixed["conf_low"])
    assert one["method"] == KAPPA_CLUSTER_METHOD and one["n_clusters"] == 1
    assert np.isnan(kappa_interval(["M", "M"], ["M", "M"], cluster=["p", "p"])["kappa"])


def _study(rng, n_pat, sd):
    """Patients with 1-4 scans; rater b misreads a scan with a patient-level propensity
    (logit-normal, SD ``sd``), so the disagreements cluster."""
    m = rng.choice([1, 2, 3, 4], n_pat, p=[0.4, 0.3, 0.2, 0.1])
    pid = np.repeat(np.arange(n_pat), m)
    truth = rng.choice(3, len(pid), p=[0.5, 0.3, 0.2])
    miss = rng.random(len(pid)) < 1 / (1 + np.exp(-(-1.5 + sd * rng.normal(size=n_pat))))[pid]
    b = np.where(miss, rng.choice(3, len(pid)), truth)
    return truth, b, pid


def test_clustered_interval_covers_where_the_independent_one_does_not():
    """Known truth: the population kappa of the process (one study of 200,000 patients);
    400 studies of 200 patients, patient SD 2 (at 1,000 studies: 94.5% clustered, 90.1% with
    cases as independent). Monte Carlo SE of a 95% coverage 1.1%."""
    rng = np.random.default_rng(15)
    a, b, _ = _study(rng, 200_000, 2.0)
    truth = kappa_interval(a, b)["kappa"]
    hit = {KAPPA_METHOD: 0, KAPPA_CLUSTER_METHOD: 0}
    for _ in range(400):
        a, b, pid = _study(rng, 200, 2.0)
        for ki in (kappa_interval(a, b), kappa_interval(a, b, cluster=pid)):
            hit[ki["method"]] += ki["conf_low"] <= truth <= ki["conf_high"]
    assert hit[KAPPA_CLUSTER_METHOD] / 400 >= 0.925
    assert hit[KAPPA_METHOD] / 400 < 0.92


def test_cluster_of_the_wrong_length_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="cluster has 2 ids for 3 cases; give one cluster id"):
        kappa_interval(["M", "F", "M"], ["M", "F", "F"], cluster=["p", "q"])
