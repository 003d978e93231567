"""Issue 15, items 2, 6 and 7: estimates R refuses, the paired Newcombe interval as
published, and GEE tests that keep their size with few clusters.

References are computed independently of the code under test: hand-written R functions
from the papers (tests/r/intervals.R, tests/r/gee_md.R), R's emmeans on a fixture
(tests/r/emmeans_nonest.R) and published worked examples.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stats import intervals as iv
from stats.schema import check_tidy

R = Path(__file__).parent / "r"
TOL = 1e-10


@pytest.fixture(scope="module")
def iref() -> pd.DataFrame:
    df = pd.read_csv(R / "intervals.csv")
    df["value"] = df["value"].astype(float)
    return df


# ------------------------------------------------------------------ item 7: Newcombe paired

def test_paired_phi_matches_the_papers_rule(iref):
    """phi against the hand-written R function of Newcombe (1998b) method 10, across its
    three branches (A > N/2, 0 <= A <= N/2, A < 0) and an empty margin."""
    sub = iref[iref.test == "newcombe-phi"]
    assert len(sub) >= 10
    t = np.array([[float(v) for v in i.split("/")] for i in sub.id])
    got = iv.paired_phi(*t.T)
    np.testing.assert_allclose(got, sub.value.to_numpy(), atol=TOL, rtol=0)
    A = t[:, 0] * t[:, 3] - t[:, 1] * t[:, 2]
    n = t.sum(axis=1)
    assert ((A > 0) & (A <= n / 2)).any() and (A < 0).any() and (A > n / 2).any()


@pytest.mark.parametrize("table", ["1/1/7/12", "59/6/16/80", "12/9/2/21", "10/0/0/5", "3/2/2/3"])
def test_newcombe_paired_matches_r_method_10(iref, table):
    """The tables where the continuity correction of phi changes the interval: the old
    (plain phi) interval is narrower and fails these comparisons."""
    v = [float(x) for x in table.split("/")]
    est, lo, hi = iv.newcombe_diff_ci(None, None, None, None, paired_counts=v)
    sub = iref[(iref.test == "newcombe-paired") & (iref.id == table)].set_index("quantity").value
    assert abs(float(est) - sub["estimate"]) < TOL
    assert abs(float(lo) - sub["low"]) < TOL
    assert abs(float(hi) - sub["high"]) < TOL


def test_newcombe_paired_published_examples():
    # Fagerland, Lydersen & Laake (2017) ch. 8 (R package contingencytables):
    # Cavo et al. (59, 6, 16, 80): -0.0621 (95% CI -0.1186 to -0.0046)
    est, lo, hi = iv.newcombe_diff_ci(None, None, None, None, paired_counts=(59, 6, 16, 80))
    assert (round(float(est), 4), round(float(lo), 4), round(float(hi), 4)) == (-0.0621, -0.1186, -0.0046)
    # Bentur et al. (1, 1, 7, 12), the small concordant table of the issue: A = 5 <= N/2,
    # so phi = 0 and the interval is the unpaired square-and-add of the two margins
    est, lo, hi = iv.newcombe_diff_ci(None, None, None, None, paired_counts=(1, 1, 7, 12))
    l1, u1 = iv.proportion_ci(2, 21)
    l2, u2 = iv.proportion_ci(8, 21)
    p1, p2 = 2 / 21, 8 / 21
    assert abs(lo - (est - np.hypot(p1 - l1, u2 - p2))) < 1e-15
    assert abs(hi - (est + np.hypot(u1 - p1, p2 - l2))) < 1e-15
    assert float(hi - lo) > 0.4813  # the uncorrected phi (0.0795) gave 0.4656


# ------------------------------------------------------------------ item 6b: AUC of 0 or 1

@pytest.mark.parametrize("scale", ["auc", "logit"])
@pytest.mark.parametrize("score", [[0.9, 0.8, 0.7, 0.2, 0.3], [0.1, 0.2, 0.3, 0.8, 0.9]])
def test_auc_at_the_boundary_is_flagged(scale, score):
    out = iv.auc_ci([1, 1, 1, 0, 0], score, scale=scale)
    check_tidy(out)
    assert out.estimate[0] in (0.0, 1.0)
    assert out.flag[0] == "auc_boundary"
    assert out.std_error[0] == 0.0
    if scale == "auc":  # pROC's degenerate interval, kept for agreement with pROC
        assert out.conf_low[0] == out.conf_high[0] == out.estimate[0]
    else:  # the logit of 0 or 1 is infinite: no interval rather than a zero-width one
        assert np.isnan(out.conf_low[0]) and np.isnan(out.conf_high[0])


def test_auc_inside_is_not_flagged():
    out = iv.auc_ci([1, 1, 1, 0, 0], [0.9, 0.1, 0.7, 0.2, 0.3], scale="logit")
    assert out.flag[0] == "" and 0 < out.conf_low[0] < out.estimate[0] < out.conf_high[0] < 1
    assert iv.auc_boundary([0.0, 0.5, 1.0, np.nan]).tolist() == [True, False, True, False]
