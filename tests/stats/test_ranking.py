"""Rank agreement and CRS ranking stability."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

import stats
from stats.ranking import kendall_tau_b
from stats.schema import check_tidy

R_DIR = Path(__file__).resolve().parents[1] / "r"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=2, max_size=25))
def test_tau_b_agrees_with_scipy(pairs):
    a, b = np.array(pairs, dtype=float).T
    want = sps.kendalltau(a, b, variant="b").statistic
    got = kendall_tau_b(a, b)
    if np.isnan(want):
        assert np.isnan(got)
    else:
        assert got == pytest.approx(want, abs=1e-12)


def test_tau_b_agrees_with_r():
    """R: cor(a, b, method = "kendall") (tests/r/crs_kendall.R), tolerance 1e-12."""
    data = pd.read_csv(R_DIR / "data" / "crs_kendall_data.csv")
    want = pd.read_csv(R_DIR / "crs_kendall.csv").set_index("case")["tau_b"]
    for case, d in data.groupby("case"):
        assert kendall_tau_b(d["a"].to_numpy(), d["b"].to_numpy()) == pytest.approx(want[case], abs=1e-12)


def test_tau_b_vectorized_over_rows():
    rng = np.random.default_rng(0)
    a = rng.normal(size=8)
    b = rng.normal(size=(50, 8))
    got = kendall_tau_b(a[None, :], b)
    want = [sps.kendalltau(a, row).statistic for row in b]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_rank_agreement_hand_example():
    # a ranks e1 > e2 > e3 > e4 > e5; b swaps e1/e2 and moves e5 to the top
    a = pd.Series({"e1": 5.0, "e2": 4.0, "e3": 3.0, "e4": 2.0, "e5": 1.0}, name="auroc")
    b = pd.Series({"e1": 0.8, "e2": 0.9, "e3": 0.5, "e4": 0.4, "e5": 0.95}, name="crs")
    out = rank_table = stats.rank_agreement(a, b, k=2)
    check_tidy(rank_table)
    got = out.set_index("estimand")
    assert got.loc["pairs", "estimate"] == 10
    # inverted pairs: (e1,e2), and e5 against each of e1..e4
    assert got.loc["inversions", "estimate"] == 5
    assert got.loc["inversions", "statistic"] == 0.5
    assert got.loc["kendall_tau", "estimate"] == pytest.approx(0.0)
    # ranks a: 1..5; b: e5=1, e2=2, e1=3, e3=4, e4=5 -> |1-3|+|2-2|+|3-4|+|4-5|+|5-1| = 8
    assert got.loc["mean_abs_displacement", "estimate"] == pytest.approx(8 / 5)
    # top-2: a {e1, e2}, b {e5, e2}
    assert got.loc["top_k_overlap", "estimate"] == 0.5
    assert got.loc["top_k_overlap", "statistic"] == 1
    assert (out["score_a"] == "auroc").all() and (out["score_b"] == "crs").all()
    # a reversed ranking inverts every pair; identical rankings none
    rev = stats.rank_agreement(a, -a, k=2).set_index("estimand")["estimate"]
    assert rev["inversions"] == 10 and rev["kendall_tau"] == pytest.approx(-1)
    same = stats.rank_agreement(a, a * 2, k=2).set_index("estimand")["estimate"]
    assert same["inversions"] == 0 and same["kendall_tau"] == 1 and same["top_k_overlap"] == 1


def test_rank_agreement_order_and_errors():
    a = pd.Series({"x": 1.0, "y": 2.0, "z": 3.0})
    b = pd.Series({"z": 3.0, "x": 1.0, "y": 2.0})  # same scores, other order
    assert stats.rank_agreement(a, b).set_index("estimand").loc["kendall_tau", "estimate"] == 1
    with pytest.raises(stats.ContractError, match="only in score_b"):
        stats.rank_agreement(a, pd.Series({"x": 1.0, "y": 2.0, "w": 0.0}))
    with pytest.raises(stats.ContractError, match="missing scores"):
        stats.rank_agreement(a, pd.Series({"x": 1.0, "y": np.nan, "z": 0.0}))


@pytest.fixture(scope="module")
def sim():
    from stats import simulate

    return simulate.crs_runs(n_encoders=7, n_datasets=2, n_seeds=2, regimes=("frozen", "adapted"),
                             seed=8)


def test_ranking_stability(sim):
    ref = {"panel": ["enc_01", "enc_02", "enc_03", "enc_04"]}
    out = stats.ranking_stability(sim.data, ref, n_weights=300, seed=1)
    check_tidy(out)
    assert set(out["analysis"]) == {"leave_one_out", "dirichlet_weights", "auroc_vs_crs",
                                    "frozen_vs_adapted"}
    assert set(out["regime"]) == {"frozen", "adapted", "frozen:adapted"}
    scores = stats.crs_scores(sim.data, ref)
    base = scores[(scores["regime"] == "frozen") & (scores["estimand"] == "crs")].set_index("encoder")["estimate"]

    # leave-one-out: recompute one variant from scratch
    loo = out[(out["analysis"] == "leave_one_out") & (out["regime"] == "frozen")
              & (out["estimand"] == "kendall_tau")].set_index("variant")["estimate"]
    assert list(loo.index) == ref["panel"]
    alt = stats.crs_scores(sim.data, {"panel": ["enc_01", "enc_03", "enc_04"]})
    alt = alt[(alt["regime"] == "frozen") & (alt["estimand"] == "crs")].set_index("encoder")["estimate"]
    assert loo["enc_02"] == pytest.approx(sps.kendalltau(base, alt[base.index]).statistic, abs=1e-12)

    # Dirichlet weights: same draws, recomputed with a loop over a few weight vectors
    diri = out[(out["analysis"] == "dirichlet_weights") & (out["regime"] == "frozen")].set_index("estimand")
    w = np.random.default_rng(1).dirichlet(np.ones(3), size=300)
    comp = np.stack([scores[(scores["regime"] == "frozen") & (scores["estimand"] == c)]
                     .set_index("encoder")["estimate"][base.index] for c in
                     ("dominance", "similarity", "worst_axis")], axis=1)
    taus = [sps.kendalltau(base, comp @ wi).statistic for wi in w]
    assert diri.loc["kendall_tau_mean", "estimate"] == pytest.approx(np.mean(taus), abs=1e-12)
    assert diri.loc["kendall_tau_min", "estimate"] == pytest.approx(np.min(taus), abs=1e-12)
    assert diri.loc["p_tau_1", "estimate"] == pytest.approx(np.mean(np.isclose(taus, 1.0)))
    assert diri.loc["kendall_tau_mean", "conf_low"] <= diri.loc["kendall_tau_median", "estimate"]

    # AUROC vs CRS is rank_agreement of the discrimination axis against the CRS
    avc = out[(out["analysis"] == "auroc_vs_crs") & (out["regime"] == "frozen")].set_index("estimand")
    disc = scores[(scores["regime"] == "frozen") & (scores["estimand"] == "discrimination")].set_index("encoder")["estimate"]
    want = stats.rank_agreement(disc, base).set_index("estimand")
    np.testing.assert_allclose(avc.loc[list(want.index), "estimate"], want["estimate"])

    fva = out[out["analysis"] == "frozen_vs_adapted"].set_index("estimand")
    assert fva.loc["pairs", "estimate"] == 21


def test_ranking_stability_reproducible(sim):
    ref = {"panel": ["enc_01", "enc_02", "enc_03"]}
    a = stats.ranking_stability(sim.data, ref, n_weights=100, seed=4)
    b = stats.ranking_stability(sim.data, ref, n_weights=100, seed=4)
    pd.testing.assert_frame_equal(a, b)


def test_loo_with_unanchorable_panel_is_flagged(sim):
    # a two-member panel leaves one encoder after a removal: axes without anchors degenerate
    out = stats.ranking_stability(sim.data[sim.data["regime"] == "frozen"],
                                  {"panel": ["enc_01", "enc_02"]}, n_weights=10, seed=0)
    loo = out[(out["analysis"] == "leave_one_out") & (out["estimand"] == "kendall_tau")]
    assert len(loo) == 2 and (loo["flag"] == "not_estimable").all() and loo["estimate"].isna().all()
