"""Per-domain CRS (crs_scores(by="dataset"), CRSBootstrap.domain_scores), frozen-vs-adapted
rank persistence with paired-seed intervals, protocols scored as arms, and the runs
contract's layer / protocol columns (issue 35 items 1, 4 and 5)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import stats
from stats import crs, simulate
from stats.crs_resample import crs_bootstrap

PANEL = ["enc_01", "enc_02", "enc_03"]


@pytest.fixture(scope="module")
def runs():
    return simulate.crs_runs(n_encoders=6, n_datasets=2, n_seeds=3, perturbations=("blur", "noise"),
                             label_fractions=(0.1, 0.5, 1.0), regimes=("frozen", "adapted"),
                             seed=21).data


def _ragged(runs):
    rng = np.random.default_rng(0)
    drop = (runs["condition"] != "clean") & (rng.random(len(runs)) < 0.15)
    return runs[~drop.to_numpy()].reset_index(drop=True)


# ----------------------------------------------------------------------- independent recomputation

def _axes_by_hand(runs: pd.DataFrame, regime: str, enc: str, ds: str) -> list[float]:
    """The four raw axes of one encoder on one dataset, written out from DESIGN.md."""
    r = runs[(runs["regime"] == regime) & (runs["encoder"] == enc) & (runs["dataset"] == ds)]

    def mean(col, **eq):
        sel = r
        for k, v in eq.items():
            sel = sel[sel[k] == v]
        return float(sel[col].mean()) if len(sel) else math.nan

    a1 = mean("auroc", condition="clean", label_fraction=1.0)
    ece = mean("ece", condition="clean", label_fraction=1.0)
    fr = sorted(f for f in r.loc[r["condition"] == "clean", "label_fraction"].unique() if f < 1)
    le = float(np.mean([(mean("auroc", condition="clean", label_fraction=f) - 0.5) / (a1 - 0.5)
                        for f in fr])) if fr and a1 > 0.5 else math.nan
    conds = r[(r["condition"] != "clean") & (r["label_fraction"] == 1.0)][["condition", "severity"]]
    drops = []
    for c, s in conds.drop_duplicates().itertuples(index=False):
        ac = float(r[(r["condition"] == c) & (r["severity"] == s) & (r["label_fraction"] == 1.0)]["auroc"].mean())
        drops.append(max(0.0, a1 - ac) / (a1 - 0.5))
    rob = 1 - (np.mean(drops) + max(drops)) / 2 if drops and a1 > 0.5 else math.nan
    return [a1, ece, le, rob]


def _composite_by_hand(a: list[float], panel: list[list[float]], w) -> tuple[float, ...]:
    dom = sum(all(x >= y for x, y in zip(a, p)) and any(x > y for x, y in zip(a, p)) for p in panel)
    sub = sum(all(y >= x for x, y in zip(a, p)) and any(y > x for x, y in zip(a, p)) for p in panel)
    D = (1 + (dom - sub) / len(panel)) / 2
    S = 1 - math.sqrt(sum((x - 1) ** 2 for x in a)) / 2
    W = min(a)
    return D, S, W, w[0] * D + w[1] * S + w[2] * W


@pytest.mark.parametrize("ragged", [False, True])
def test_domain_scores_equal_a_recomputation_by_hand(runs, ragged):
    """Per dataset: the dataset's own axes, normalized with the overall anchors (the
    panel's min and max of the dataset-mean axes), dominance against the panel on that
    dataset; equal to a loop that writes every formula out, to 1e-12."""
    data = _ragged(runs) if ragged else runs
    got = stats.crs_scores(data, {"panel": PANEL}, by="dataset")
    overall = stats.crs_scores(data, {"panel": PANEL})
    w = (1 / 3, 1 / 3, 1 / 3)
    for regime in ("frozen", "adapted"):
        o = overall[overall["regime"] == regime]
        lo = [o.loc[o["estimand"] == a, "anchor_low"].iloc[0] for a in crs.AXES]
        hi = [o.loc[o["estimand"] == a, "anchor_high"].iloc[0] for a in crs.AXES]
        for ds in sorted(data["dataset"].unique()):
            encs = sorted(data["encoder"].unique())
            raw = {e: _axes_by_hand(data, regime, e, ds) for e in encs}
            norm = {}
            for e, x in raw.items():
                a = [min(1.0, max(0.0, (v - l) / (h - l))) for v, l, h in zip(x, lo, hi)]
                a[1] = 1 - a[1]
                norm[e] = a
            for e in encs:
                want = [*raw[e], *norm[e], *_composite_by_hand(norm[e], [norm[p] for p in PANEL], w)]
                g = got[(got["regime"] == regime) & (got["dataset"] == ds) & (got["encoder"] == e)]
                g = g.set_index("estimand")["estimate"].reindex(crs.SCORE_ESTIMANDS)
                np.testing.assert_allclose(g.to_numpy(), want, rtol=1e-12, atol=1e-13)


def test_domain_scores_of_one_dataset_differ_from_the_mean(runs):
    """The test above could pass by scoring the mean twice: here the two datasets give
    different CRS (a domain-blind implementation would not)."""
    got = stats.crs_scores(runs, {"panel": PANEL}, by="dataset")
    c = got[got["estimand"] == "crs"].pivot_table(index=["regime", "encoder"], columns="dataset",
                                                  values="estimate")
    assert (c["dataset_A"] - c["dataset_B"]).abs().max() > 0.01


def _slow_domain_replicate(runs, res, b, regime):
    parts = []
    for ds, idx in res.draws[regime].items():
        for j, i in enumerate(idx[b]):
            s = res.seeds[regime][ds][i]
            sel = (runs["dataset"] == ds) & (runs["seed"] == s) & (runs["regime"] == regime)
            parts.append(runs[sel].assign(seed=j))
    point = res.point[res.point["regime"] == regime]
    anchors = {a: point.loc[point["estimand"] == a, ["anchor_low", "anchor_high"]].iloc[0].tolist()
               for a in crs.AXES}
    out = stats.crs_scores(pd.concat(parts, ignore_index=True), {"panel": PANEL, "anchors": anchors},
                           by="dataset")
    wide = out.set_index(["encoder", "dataset", "estimand"])["estimate"].unstack()
    wide = wide[list(crs.SCORE_ESTIMANDS)]
    full = pd.MultiIndex.from_product([res.encoders[regime], res.datasets[regime]])
    return wide.reindex(full).to_numpy().reshape(len(res.encoders[regime]),
                                                 len(res.datasets[regime]), -1)


@pytest.mark.parametrize("ragged", [False, True])
def test_domain_bootstrap_equals_a_loop_per_replicate(runs, ragged):
    """Each replicate's per-domain scores equal crs_scores(by="dataset") on the resampled
    rows with the anchors fixed (rtol 1e-12); the point table is crs_scores(by="dataset")."""
    data = _ragged(runs) if ragged else runs
    res = crs_bootstrap(data, {"panel": PANEL}, n_boot=10, seed=5, by="dataset")
    for regime in ("frozen", "adapted"):
        for b in range(10):
            want = _slow_domain_replicate(data, res, b, regime)
            np.testing.assert_allclose(res.domain_replicates[regime][b], want, rtol=1e-12,
                                       atol=1e-13, equal_nan=True)
    # the overall replicates are unchanged by by="dataset"
    plain = crs_bootstrap(data, {"panel": PANEL}, n_boot=10, seed=5)
    for regime in plain.replicates:
        np.testing.assert_array_equal(plain.replicates[regime], res.replicates[regime])
    tab = res.domain_scores()
    stats.schema.check_tidy(tab)
    point = stats.crs_scores(data, {"panel": PANEL}, by="dataset")
    m = tab.merge(point, on=["regime", "encoder", "dataset", "estimand"], suffixes=("", "_p"))
    assert len(m) == len(point)
    np.testing.assert_array_equal(m["estimate"], m["estimate_p"])
    crs_rows = tab[tab["estimand"] == "crs"]
    assert (crs_rows["conf_low"] <= crs_rows["estimate"] + 1e-12).all()
    assert (crs_rows["conf_high"] >= crs_rows["estimate"] - 1e-12).all()


def test_domain_scores_need_by_dataset(runs):
    res = crs_bootstrap(runs, {"panel": PANEL}, n_boot=4, seed=1)
    with pytest.raises(ValueError, match="by='dataset'"):
        res.domain_scores()
    with pytest.raises(stats.ContractError, match="by must be None or 'dataset'"):
        stats.crs_scores(runs, {"panel": PANEL}, by="site")


# ----------------------------------------------------------------------- rank persistence

def test_rank_persistence_equals_rank_agreement_per_replicate(runs):
    """Every replicate's tau, displacement, inversions and top-k overlap are those of
    stats.rank_agreement on that replicate's frozen and adapted CRS (same seed draws);
    the intervals are their percentiles and P(top-k kept) the share with overlap 1."""
    from stats._quantile import percentile_interval

    res = crs_bootstrap(runs, {"panel": PANEL}, n_boot=60, seed=3)
    enc = res.encoders["frozen"]
    assert enc == res.encoders["adapted"]
    vals = {e: [] for e in ("kendall_tau", "mean_abs_displacement", "inversions", "top_k_overlap")}
    for b in range(60):
        ag = stats.rank_agreement(pd.Series(res._crs("frozen")[b], index=enc),
                                  pd.Series(res._crs("adapted")[b], index=enc), k=3)
        for e in vals:
            vals[e].append(float(ag.loc[ag["estimand"] == e, "estimate"].iloc[0]))
    out = res.rank_persistence("adapted", "frozen", k=3).set_index(["estimand", "encoder"])
    for e, v in vals.items():
        lo, hi = percentile_interval(np.asarray(v)[:, None], 0.95)
        assert out.loc[(e, "all"), "conf_low"] == pytest.approx(lo[0], abs=1e-12)
        assert out.loc[(e, "all"), "conf_high"] == pytest.approx(hi[0], abs=1e-12)
    assert out.loc[("p_top_k_kept", "all"), "estimate"] == pytest.approx(
        np.mean(np.asarray(vals["top_k_overlap"]) == 1.0))
    point = stats.rank_agreement(res.point.query("regime == 'frozen' and estimand == 'crs'")
                                 .set_index("encoder")["estimate"],
                                 res.point.query("regime == 'adapted' and estimand == 'crs'")
                                 .set_index("encoder")["estimate"], k=3).set_index("estimand")
    for e in vals:
        assert out.loc[(e, "all"), "estimate"] == pytest.approx(point.loc[e, "estimate"])
    # per encoder rank change: adapted rank minus frozen rank
    pf = res.point.query("regime == 'frozen' and estimand == 'crs'").set_index("encoder")["estimate"]
    pa = res.point.query("regime == 'adapted' and estimand == 'crs'").set_index("encoder")["estimate"]
    change = pa.rank(ascending=False, method="min") - pf.rank(ascending=False, method="min")
    got = out.xs("rank_change", level="estimand")["estimate"]
    pd.testing.assert_series_equal(got.sort_index(), change.sort_index(), check_names=False)
    assert bool(out["paired"].all())
    stats.schema.check_tidy(out.reset_index())


# ----------------------------------------------------------------------- protocols as arms

def _with_protocols(runs):
    fz = runs[runs["regime"] == "frozen"]
    prompt = fz.assign(protocol="prompt", auroc=np.clip(fz["auroc"] - 0.05, 0, 1))
    return pd.concat([fz.assign(protocol="probe"), prompt,
                      runs[runs["regime"] == "adapted"].assign(protocol="lora")],
                     ignore_index=True).drop(columns="regime")


def test_protocols_are_scored_as_arms(runs):
    """arm="protocol": each protocol is scored as crs_scores scores the subset of its runs;
    the tables name the column protocol; probe vs lora is paired like frozen vs adapted."""
    data = _with_protocols(runs)
    res = crs_bootstrap(data, {"panel": PANEL}, n_boot=20, seed=2, arm="protocol")
    sc = res.scores()
    assert "protocol" in sc and "regime" not in sc
    for p in ("probe", "prompt", "lora"):
        want = stats.crs_scores(data[data["protocol"] == p].drop(columns="protocol"),
                                {"panel": PANEL})
        got = sc[sc["protocol"] == p].set_index(["encoder", "estimand"])["estimate"]
        np.testing.assert_allclose(got.loc[want.set_index(["encoder", "estimand"]).index],
                                   want["estimate"], rtol=0, atol=0, equal_nan=True)
    diff = res.regime_differences("lora", "probe")
    assert {"protocol", "baseline_protocol"} <= set(diff.columns)
    by_regime = crs_bootstrap(runs, {"panel": PANEL}, n_boot=20, seed=2).regime_differences()
    np.testing.assert_allclose(diff["estimate"], by_regime["estimate"], rtol=1e-12)
    # the CRS by regime refuses two frozen protocols of one encoder: choose one
    with pytest.raises(stats.ContractError, match="one layer and one protocol"):
        stats.crs_scores(data, {"panel": PANEL})


def test_protocol_and_regime_must_agree():
    base = {"encoder": "a", "dataset": "d", "label_fraction": 1.0, "condition": "clean",
            "severity": 0, "seed": 0, "auroc": 0.8, "ece": 0.1}
    ok = stats.read_runs(pd.DataFrame([{**base, "protocol": "lora"}, {**base, "protocol": "probe"}]))
    assert list(ok["regime"]) == ["adapted", "frozen"]
    with pytest.raises(stats.ContractError, match="does not match column 'regime'"):
        stats.read_runs(pd.DataFrame([{**base, "protocol": "lora", "regime": "frozen"}]))
    with pytest.raises(stats.ContractError, match="'probe', 'prompt' or 'lora'"):
        stats.read_runs(pd.DataFrame([{**base, "protocol": "finetune"}]))


def test_layers_are_part_of_the_run_key_but_the_crs_takes_one():
    base = {"encoder": "a", "dataset": "d", "label_fraction": 1.0, "condition": "clean",
            "severity": 0, "seed": 0, "auroc": 0.8, "ece": 0.1}
    two = pd.DataFrame([{**base, "layer": "mid"}, {**base, "layer": "last", "auroc": 0.7}])
    assert len(stats.read_runs(two)) == 2          # two layers: two runs
    with pytest.raises(stats.ContractError, match="layer: last, mid"):
        stats.crs_scores(two, {"panel": ["a"], "anchors": {a: [0, 1] for a in crs.AXES}})
    with pytest.raises(stats.ContractError, match="duplicate"):
        stats.read_runs(pd.concat([two, two.iloc[:1]]))
