"""Paired-seed bootstrap of the CRS (issue 5, items 3 and 5): the vectorized engine equals
a slow pandas loop per replicate for the same seed draws."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats import crs
from stats.crs_resample import crs_bootstrap
from stats.schema import check_tidy


def slow_replicate(runs: pd.DataFrame, res, b: int, regime: str) -> pd.DataFrame:
    """Replicate ``b`` the obvious way: per dataset, take the drawn seeds' runs (a seed
    drawn twice appears twice, relabelled), then crs_scores with the point anchors fixed."""
    parts = []
    for ds, idx in res.draws[regime].items():
        for j, i in enumerate(idx[b]):
            s = res.seeds[regime][ds][i]
            sel = (runs["dataset"] == ds) & (runs["seed"] == s) & (runs["regime"] == regime)
            parts.append(runs[sel].assign(seed=j))
    point = res.point[res.point["regime"] == regime]
    anchors = {a: point.loc[point["estimand"] == a, ["anchor_low", "anchor_high"]].iloc[0].tolist()
               for a in crs.AXES}
    ref = {"panel": PANEL, "anchors": anchors}
    out = stats.crs_scores(pd.concat(parts, ignore_index=True), ref)
    return out.set_index(["encoder", "estimand"])["estimate"].unstack()[list(crs.SCORE_ESTIMANDS)]


PANEL = ["enc_01", "enc_02", "enc_03"]


@pytest.fixture(scope="module")
def runs():
    from stats import simulate

    return simulate.crs_runs(n_encoders=6, n_datasets=2, n_seeds=3, perturbations=("blur", "noise"),
                             label_fractions=(0.1, 0.5, 1.0), regimes=("frozen", "adapted"),
                             seed=21).data


def _ragged(runs):
    rng = np.random.default_rng(0)
    drop = (runs["condition"] != "clean") & (rng.random(len(runs)) < 0.15)
    drop |= (runs["encoder"] == "enc_04") & (runs["condition"] == "noise") & (runs["dataset"] == "dataset_B")
    return runs[~drop.to_numpy()].reset_index(drop=True)


@pytest.mark.parametrize("ragged", [False, True])
def test_vectorized_equals_loop_per_replicate(runs, ragged):
    data = _ragged(runs) if ragged else runs
    res = crs_bootstrap(data, {"panel": PANEL}, n_boot=12, seed=7)
    for regime in ("frozen", "adapted"):
        for b in range(12):
            want = slow_replicate(data, res, b, regime)
            got = res.replicates[regime][b]
            np.testing.assert_allclose(got, want.to_numpy(), rtol=1e-12, atol=1e-13, equal_nan=True)


def test_draws_are_paired_and_reproducible(runs):
    a = crs_bootstrap(runs, {"panel": PANEL}, n_boot=1500, seed=3)
    b = crs_bootstrap(runs, {"panel": PANEL}, n_boot=1500, seed=3)
    for regime in a.replicates:
        np.testing.assert_array_equal(a.replicates[regime], b.replicates[regime])
    draws = a.draws["frozen"]
    assert set(draws) == {"dataset_A", "dataset_B"}
    assert draws["dataset_A"].shape == (1500, 3)
    assert draws["dataset_A"].min() == 0 and draws["dataset_A"].max() == 2
    # the two datasets draw independently
    assert not np.array_equal(draws["dataset_A"], draws["dataset_B"])
    c = crs_bootstrap(runs, {"panel": PANEL}, n_boot=1500, seed=4)
    assert not np.array_equal(a.replicates["frozen"], c.replicates["frozen"])


def test_tables(runs):
    res = crs_bootstrap(runs, {"panel": PANEL, "version": "v9"}, n_boot=400, seed=1)
    sc = res.scores()
    check_tidy(sc)
    point = stats.crs_scores(runs, {"panel": PANEL, "version": "v9"})
    np.testing.assert_array_equal(sc["estimate"].to_numpy(), point["estimate"].to_numpy())
    fin = sc[np.isfinite(sc["estimate"]) & (sc["estimand"] == "crs")]
    assert (fin["conf_low"] <= fin["conf_high"]).all()
    assert (sc["method"] == "paired-seed-bootstrap-percentile").all()
    assert (sc["reference_version"] == "v9").all()
    # replicate SD and percentile interval of one cell, recomputed
    rep = res.replicates["frozen"][:, 0, crs.SCORE_ESTIMANDS.index("crs")]
    row = sc[(sc["regime"] == "frozen") & (sc["encoder"] == "enc_01") & (sc["estimand"] == "crs")].iloc[0]
    assert row["conf_low"] == pytest.approx(np.quantile(rep, 0.025))
    assert row["std_error"] == pytest.approx(rep.std(ddof=1))

    rp = res.rank_probabilities(k=2)
    check_tidy(rp)
    for regime in ("frozen", "adapted"):
        part = rp[rp["regime"] == regime].set_index(["estimand", "encoder"])["estimate"]
        assert part["p_rank_1"].sum() == pytest.approx(1.0)   # continuous scores: no ties
        assert part["p_top_k"].sum() == pytest.approx(2.0)
        assert sorted(part["rank"].to_list()) == list(range(1, 7))

    diff = res.differences()
    check_tidy(diff)
    assert len(diff) == 2 * 15
    assert (diff["estimate"] >= 0).all()     # ordered by point CRS
    crs_pt = point[point["estimand"] == "crs"].set_index(["regime", "encoder"])["estimate"]
    d0 = diff.iloc[0]
    assert d0["estimate"] == pytest.approx(crs_pt[(d0["regime"], d0["encoder"])]
                                           - crs_pt[(d0["regime"], d0["comparator"])])
    assert ((diff["p_value"] > 0) & (diff["p_value"] <= 1)).all()
    assert (diff["p_adjusted"] >= diff["p_value"]).all()

    tier = res.leading_tier()
    check_tidy(tier)
    for regime in ("frozen", "adapted"):
        part = tier[tier["regime"] == regime]
        best = part["best"].iloc[0]
        assert part.loc[part["encoder"] == best, "in_leading_tier"].item()
        assert crs_pt[regime].idxmax() == best
        # tier membership agrees with the pairwise difference CI against the best
        d = diff[(diff["regime"] == regime) & (diff["encoder"] == best)].set_index("comparator")
        for _, r in part[part["encoder"] != best].iterrows():
            assert r["in_leading_tier"] == (d.loc[r["encoder"], "conf_low"] <= 0)


def test_wide_intervals_when_seeds_disagree():
    """A toy where two encoders swap order by seed: neither is significantly better."""
    rows = []
    for enc, base in (("X", 0.80), ("Y", 0.80), ("Z", 0.60)):
        for s in range(4):
            wobble = (0.05 if (s % 2 == 0) == (enc == "X") else -0.05) if enc != "Z" else 0.0
            for frac, cond, sev in ((0.5, "clean", 0), (1.0, "clean", 0), (1.0, "blur", 1)):
                auc = base + wobble - (0.05 if frac < 1 else 0) - (0.05 if cond == "blur" else 0)
                rows.append({"encoder": enc, "dataset": "d", "label_fraction": frac, "condition": cond,
                             "severity": sev, "seed": s, "auroc": auc,
                             "ece": 0.05 + 0.01 * s + {"X": 0.0, "Y": 0.004, "Z": 0.02}[enc]})
    res = crs_bootstrap(pd.DataFrame(rows), {"panel": ["X", "Y", "Z"]}, n_boot=2000, seed=2)
    tier = res.leading_tier().set_index("encoder")
    assert tier.loc["X", "in_leading_tier"] and tier.loc["Y", "in_leading_tier"]
    assert not tier.loc["Z", "in_leading_tier"]


def test_bad_arguments(runs):
    with pytest.raises(ValueError, match="n_boot"):
        crs_bootstrap(runs, {"panel": PANEL}, n_boot=1)
    with pytest.raises(ValueError, match="conf_level"):
        crs_bootstrap(runs, {"panel": PANEL}, n_boot=10, conf_level=95)
    with pytest.raises(stats.ContractError, match="no runs"):
        crs_bootstrap(runs, {"panel": ["nobody"]}, n_boot=10)


@pytest.mark.slow
def test_dask_scheduler_gives_identical_results(runs):
    from dask.distributed import Client, LocalCluster

    local = crs_bootstrap(runs, {"panel": PANEL}, n_boot=2500, seed=9)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as cluster, \
            Client(cluster) as client:
        remote = crs_bootstrap(runs, {"panel": PANEL}, n_boot=2500, seed=9, scheduler=client)
    for regime in local.replicates:
        np.testing.assert_array_equal(local.replicates[regime], remote.replicates[regime])
