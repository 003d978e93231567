"""Rules that replaced decisions taken on floating-point noise outside the models: a zero
variance decided by a stated margin (DeLong differences, bootstrap SDs, cluster sums of
squares, Rubin's between-imputation variance), ties compared exactly (Youden) or within
TIE_TOL (CRS, rankings). Each test failed on the code before the rule."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats import bootstrap, crs_resample, ranking
from stats.clustered import cluster_moments, design_effect
from stats.label_error import rubin_proportion


def test_identical_scores_have_no_paired_delong_test():
    """Identical placements: the variance of the difference is exactly 0, so the test is
    not estimable (before: 56 of 200 tables gave SE ~1e-9 and p = 1 with no flag)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(8, 60))
        y = rng.integers(0, 2, n)
        y[:2] = [0, 1]
        s = rng.choice(rng.uniform(size=5), n) if rng.random() < .5 else rng.uniform(size=n)
        d = stats.delong_test(y, s, s)
        assert d["flag"].iloc[0] == "not_estimable" and np.isnan(d["std_error"].iloc[0])
        # a monotone transform has the same placements
        d = stats.delong_test(y, s, np.exp(3 * s))
        assert d["flag"].iloc[0] == "not_estimable"


def test_compare_models_with_the_same_model_twice_is_not_estimable():
    rng = np.random.default_rng(1)
    n = 80
    base = pd.DataFrame({"case_id": [f"c{i}" for i in range(n)], "label": rng.integers(0, 2, n),
                         "score": rng.uniform(size=n), "site": "s"})
    cases = pd.concat([base.assign(model="a"), base.assign(model="b")], ignore_index=True)
    cases["pred"] = (cases["score"] > .5).astype(int)
    out = stats.compare_models(cases, by=[], metrics=["auc"])
    row = out[out["estimand"] == "auc_difference"].iloc[0]
    assert np.isnan(row["std_error"]) and "not_estimable" in row["flag"]


def test_a_bootstrap_sd_of_equal_replicates_is_exactly_0():
    """B copies of p need not sum to B p: the SD came out 1e-16, and the bootstrap-Wilson
    interval collapsed to [p, p] (a design effect of 1e-33) for 300 of 435 proportions."""
    hit = 0
    for den in range(1, 31):
        for num in range(0, den + 1):
            p = num / den
            reps = np.full((500, 1), p)
            sd = bootstrap._nan_sd(reps, np.array([500]))
            assert sd[0] == 0.0
            lo, hi = bootstrap.wilson_deff_interval(np.array([p]), np.array([float(den)]),
                                                   np.array([1e-16]), np.array([5.0]), 0.95)
            plain = stats.proportion_ci(num, den)
            np.testing.assert_allclose([lo[0], hi[0]], [plain[0], plain[1]], rtol=1e-12)
            hit += 1
    assert hit == 495


def test_youden_ties_go_to_the_larger_threshold_exactly():
    """J = tp / P - fp / N is compared in integers: tied J values whose floating-point
    forms differ in the last bit (44,774 of 157,909 pairs at P = N = 100) no longer pick
    the threshold by rounding."""
    P, N = 100, 100
    # find (tp, fp), (tp + d, fp + d) tied exactly but unequal in floating point
    pair = next((tp, fp, d) for tp in range(20, 90) for fp in range(1, 10) for d in range(1, 10)
                if (tp / P + (1 - fp / N) - 1) < ((tp + d) / P + (1 - (fp + d) / N) - 1))
    tp, fp, d = pair
    # scores: positives and negatives laid out so that threshold t1 gives (tp, fp) and the
    # lower threshold t2 gives (tp + d, fp + d)
    pos = np.r_[np.full(tp, 0.9), np.full(d, 0.5), np.full(P - tp - d, 0.1)]
    neg = np.r_[np.full(fp, 0.9), np.full(d, 0.5), np.full(N - fp - d, 0.1)]
    cases = pd.DataFrame({"case_id": [f"c{i}" for i in range(P + N)], "model": "m",
                          "label": np.r_[np.ones(P, int), np.zeros(N, int)],
                          "score": np.r_[pos, neg], "split": "validation", "site": "s"})
    out = stats.scan_level(cases, criterion="youden")
    thr = float(out.loc[out["pred"] == 1, "score"].min())
    assert thr == 0.9     # the tie goes to the larger threshold


def test_a_cluster_sum_of_squares_that_is_zero_is_exactly_zero():
    """Every patient at the cell's proportion: the sum of squares is 0, written as 0 (not
    1e-30), and the design effect is 0 on every CPU."""
    from scipy import sparse

    # three patients with 33, 44 and 55 scans, 9, 12 and 15 detected (3 of every 11):
    # sum (a - p m)^2 came out 3.2e-30
    m = np.array([33, 44, 55])
    cluster = np.repeat(np.arange(3), m)
    num = np.concatenate([np.r_[np.ones(a), np.zeros(k - a)] for a, k in zip([9, 12, 15], m)])
    n = len(num)
    member = sparse.csr_matrix(np.ones((1, n)))
    mom = cluster_moments(member, cluster, num[:, None], np.ones((n, 1)))
    assert mom["ss"][0, 0] == 0.0
    assert design_effect(mom)["design_effect"][0, 0] == 0.0


def test_equal_scaled_imputations_have_no_between_variance():
    """Equal proportions given as scaled counts differ in the last bit: B was 1e-33, df
    1e62 and fmi 1e-31; now B = 0, df inf, fmi 0."""
    f = np.array([[0.7], [0.3], [1.1], [0.9]])
    num, den = np.array([[7.0]] * 4) * f, np.array([[10.0]] * 4) * f
    out = rubin_proportion(num, den)
    assert np.isinf(out["df"][0]) and out["fraction_missing_info"][0] == 0.0


def test_rank_ties_within_tie_tol():
    x = np.array([[0.5, 0.5 + 1e-16, 0.2]])
    assert ranking._pair_signs(x)[0, 0] == 0.0
    assert crs_resample._ranks(x[0]).tolist() == [1, 1, 3]
    # differences of +-1e-17 count in both tails: #{d <= 0} = 2 and #{d >= 0} = 3 of B = 3
    d = np.array([[1e-17], [-1e-17], [0.1]])
    assert crs_resample._boot_p(d)[0] == min(1.0, 2 * min((1 + 2) / 4, (1 + 3) / 4))
