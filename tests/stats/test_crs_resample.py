"""Paired-seed bootstrap of the CRS: the vectorized engine equals
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
    wide = out.set_index(["encoder", "estimand"])["estimate"].unstack()[list(crs.SCORE_ESTIMANDS)]
    return wide.reindex(res.encoders[regime])   # an encoder without drawn runs: NaN row


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


# --------------------------------------------------------------------------- missing seeds


def _missing_seeds(runs):
    """Frozen runs where enc_04 lacks seed 0 in dataset_A and enc_06 has runs only with
    seed 1 of dataset_B (nowhere else)."""
    r = runs[runs["regime"] == "frozen"]
    gone = ((r["encoder"] == "enc_04") & (r["dataset"] == "dataset_A") & (r["seed"] == 0))
    gone |= (r["encoder"] == "enc_06") & ((r["dataset"] == "dataset_A") | (r["seed"] != 1))
    return r[~gone.to_numpy()].reset_index(drop=True)


def test_missing_seed_replicates_equal_crs_scores_loop(runs, monkeypatch):
    """A replicate that draws only the seed an encoder lacks in one dataset scores that
    encoder on its other datasets, as crs_scores on the resampled rows does (it was NaN)."""
    from stats import crs_resample

    draw = crs_resample._draw_counts

    def deliberate(rng, n, n_seeds):
        """Random draws, except replicate 0 draws only seed index 0 and replicate 1 only
        the last seed (in every dataset)."""
        idx, _ = draw(rng, n, n_seeds)
        idx[0], idx[1] = 0, n_seeds - 1
        counts = np.stack([np.bincount(i, minlength=n_seeds) for i in idx])
        return idx, counts

    monkeypatch.setattr(crs_resample, "_draw_counts", deliberate)
    data = _missing_seeds(runs)
    res = crs_bootstrap(data, {"panel": PANEL}, n_boot=40, seed=5)
    draws_a = res.draws["frozen"]["dataset_A"]
    only_missing = np.flatnonzero((draws_a == 0).all(1))     # drew seed 0 three times
    assert 0 in only_missing
    e4, e6 = res.encoders["frozen"].index("enc_04"), res.encoders["frozen"].index("enc_06")
    for b in range(40):
        want = slow_replicate(data, res, b, "frozen")
        np.testing.assert_allclose(res.replicates["frozen"][b], want.to_numpy(), rtol=1e-12,
                                   atol=1e-13, equal_nan=True)
    rep = res.replicates["frozen"]
    assert np.isfinite(rep[only_missing, e4]).all()
    # enc_06 is not estimable exactly where seed 1 of dataset_B was not drawn
    no_seed1 = ~(res.draws["frozen"]["dataset_B"] == 1).any(1)
    assert 0 < no_seed1.sum() < 40
    np.testing.assert_array_equal(np.isnan(rep[:, e6, :]).all(1), no_seed1)
    assert np.isfinite(np.delete(rep, e6, axis=1)).all()


def test_not_estimable_replicates_are_left_out_and_counted(runs):
    data = _missing_seeds(runs)
    res = crs_bootstrap(data, {"panel": PANEL}, n_boot=300, seed=2)
    k = crs.SCORE_ESTIMANDS.index("crs")
    crs_rep = res.replicates["frozen"][:, :, k]
    e6 = res.encoders["frozen"].index("enc_06")
    n_nan = int(np.isnan(crs_rep[:, e6]).sum())
    assert 0 < n_nan < 300
    sc = res.scores()
    check_tidy(sc)
    row = sc[(sc["encoder"] == "enc_06") & (sc["estimand"] == "crs")].iloc[0]
    finite = crs_rep[~np.isnan(crs_rep[:, e6]), e6]
    assert row["conf_low"] == pytest.approx(np.quantile(finite, 0.025), abs=1e-15)
    assert row["conf_high"] == pytest.approx(np.quantile(finite, 0.975), abs=1e-15)
    assert row["std_error"] == pytest.approx(finite.std(ddof=1), abs=1e-15)
    assert row["n_boot_not_estimable"] == n_nan and row["flag"] == "replicates_not_estimable"
    others = sc[sc["encoder"] != "enc_06"]
    assert (others["n_boot_not_estimable"] == 0).all() and (others["flag"] == "").all()
    assert np.isfinite(sc["conf_low"]).all()
    # ranks: replicates where enc_06 is NaN are left out, not counted as ranked last
    rp = res.rank_probabilities(k=2)
    keep = ~np.isnan(crs_rep).any(1)
    ranks = 1 + (crs_rep[keep][:, None, :] > crs_rep[keep][:, :, None]).sum(-1)
    got = rp[rp["estimand"] == "mean_rank"].set_index("encoder")["estimate"]
    np.testing.assert_allclose(got[res.encoders["frozen"]], ranks.mean(0), atol=1e-14)
    assert (rp["n_boot_not_estimable"] == n_nan).all()
    assert rp[rp["estimand"] == "p_rank_1"]["estimate"].sum() == pytest.approx(1.0)
    diff = res.differences()
    d6 = diff[(diff["encoder"] == "enc_06") | (diff["comparator"] == "enc_06")]
    assert (d6["n_boot_not_estimable"] == n_nan).all() and np.isfinite(d6["p_value"]).all()
    assert np.isfinite(res.leading_tier()["conf_low"]).all()


# --------------------------------------------------------------------------- paired regimes


def test_regimes_share_seed_draws(runs):
    res = crs_bootstrap(runs, {"panel": PANEL}, n_boot=300, seed=8)
    for ds in ("dataset_A", "dataset_B"):
        np.testing.assert_array_equal(res.draws["frozen"][ds], res.draws["adapted"][ds])
    rd = res.regime_differences()
    check_tidy(rd)
    assert rd["paired"].all() and len(rd) == 6
    k = crs.SCORE_ESTIMANDS.index("crs")
    d = res.replicates["adapted"][:, :, k] - res.replicates["frozen"][:, :, k]
    np.testing.assert_allclose(rd["std_error"], d.std(0, ddof=1), atol=1e-15)
    np.testing.assert_allclose(rd["conf_low"], np.quantile(d, 0.025, axis=0), atol=1e-15)
    pt = res.point[res.point["estimand"] == "crs"].set_index(["regime", "encoder"])["estimate"]
    np.testing.assert_allclose(rd["estimate"], pt["adapted"] - pt["frozen"], atol=1e-15)
    # a dataset whose seeds differ between regimes is drawn separately; the other stays shared
    drop = (runs["regime"] == "adapted") & (runs["dataset"] == "dataset_B") & (runs["seed"] == 2)
    res2 = crs_bootstrap(runs[~drop.to_numpy()], {"panel": PANEL}, n_boot=300, seed=8)
    np.testing.assert_array_equal(res2.draws["frozen"]["dataset_A"], res2.draws["adapted"]["dataset_A"])
    assert res2.draws["adapted"]["dataset_B"].max() == 1
    assert not res2.regime_differences()["paired"].any()
    with pytest.raises(ValueError, match="regime 'tuned'"):
        res.regime_differences("tuned")
