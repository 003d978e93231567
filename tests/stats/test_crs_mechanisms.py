"""The mechanism analyses (E1 specialization, E3 depth, E4 confidence loss, E6 learning
curves and crossovers) and the institutional shift table (stats.crs_mechanisms): point
estimates against pandas recomputations written from the definitions, intervals against
a loop that resamples the runs table replicate by replicate with the same seed draws,
and cases with a known answer."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import stats
from stats import simulate
from stats._quantile import percentile_interval
from stats._rng import spawn
from stats.crs_resample import BLOCK_SIZE, _draw_counts
from stats.schema import check_tidy

B = 25


@pytest.fixture(scope="module")
def runs():
    return simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=3, perturbations=("blur", "noise"),
                             severities=(1, 3), label_fractions=(0.05, 0.25, 1.0),
                             regimes=("frozen", "adapted"), seed=11).data


def resamples(runs: pd.DataFrame, seed: int, n_boot: int, datasets=None):
    """The replicates' runs tables, drawn as the module draws them: blocks of BLOCK_SIZE
    from spawn(seed, blocks); per block and dataset (sorted) the seed indices; a seed drawn
    twice appears twice (relabelled 0..S-1)."""
    datasets = sorted(runs["dataset"].unique()) if datasets is None else datasets
    seeds = {d: np.sort(runs.loc[runs["dataset"] == d, "seed"].unique()) for d in datasets}
    sizes = [min(BLOCK_SIZE, n_boot - s) for s in range(0, n_boot, BLOCK_SIZE)]
    out = []
    for rng, n in zip(spawn(seed, len(sizes)), sizes):
        draws = {d: _draw_counts(rng, n, len(seeds[d]))[0] for d in datasets}
        for b in range(n):
            parts = [runs[(runs["dataset"] == d) & (runs["seed"] == seeds[d][i])].assign(seed=j)
                     for d in datasets for j, i in enumerate(draws[d][b])]
            out.append(pd.concat(parts, ignore_index=True))
    return out


def check_intervals(got: pd.DataFrame, keys: list[str], by_hand, tables, runs) -> None:
    """Point = by_hand(runs); CI = percentiles of by_hand over the resampled tables."""
    point = by_hand(runs)
    reps = pd.concat([by_hand(t) for t in tables], axis=1).reindex(point.index)
    g = got.set_index(keys)
    lo, hi = percentile_interval(reps.to_numpy().T, 0.95)
    idx = point.index
    np.testing.assert_allclose(g.loc[idx, "estimate"], point.to_numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.loc[idx, "conf_low"], lo, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.loc[idx, "conf_high"], hi, rtol=1e-12, atol=1e-13)


def _cell_means(runs, frac=1.0):
    r = runs[runs["label_fraction"] == frac]
    return r.groupby(["regime", "encoder", "dataset", "condition", "severity"])[["auroc", "ece"]].mean()


# --------------------------------------------------------------------------- E4


def e4_by_hand(runs: pd.DataFrame) -> pd.Series:
    m = _cell_means(runs).reset_index()
    clean = m[m["condition"] == "clean"].set_index(["regime", "encoder", "dataset"])
    out = {}
    pert = m[~m["condition"].isin(["clean", "shift"])]
    for (reg, enc, cond, sev), g in pert.groupby(["regime", "encoder", "condition", "severity"]):
        da = [row.auroc - clean.loc[(reg, enc, row.dataset), "auroc"] for row in g.itertuples()]
        de = [row.ece - clean.loc[(reg, enc, row.dataset), "ece"] for row in g.itertuples()]
        out[("delta_auroc", reg, enc, cond, float(sev))] = np.mean(da)
        out[("delta_ece", reg, enc, cond, float(sev))] = np.mean(de)
    for (reg, enc), g in m.groupby(["regime", "encoder"]):
        per = []
        for ds, h in g.groupby("dataset"):
            e0 = h.loc[h["condition"] == "clean", "ece"].iloc[0]
            inc = [max(0.0, e - e0) for e in h.loc[h["condition"] != "clean", "ece"]]
            per.append(1 - (np.mean(inc) + max(inc)) / 2)
        out[("calibration_robustness", reg, enc, "all", -1.0)] = np.mean(per)  # severity NaN
    s = pd.Series(out)
    s.index.names = ["estimand", "regime", "encoder", "condition", "severity"]
    return s


def test_confidence_loss_equals_pandas_and_the_resampling_loop(runs):
    got = stats.confidence_loss(runs, n_boot=B, seed=4)
    check_tidy(got)
    got = got.assign(severity=got["severity"].fillna(-1))
    check_intervals(got, ["estimand", "regime", "encoder", "condition", "severity"], e4_by_hand,
                    resamples(runs, 4, B), runs)


def test_confidence_loss_flags_calibration_lost_while_discrimination_holds():
    """An encoder whose blur runs keep their AUROC but double their ECE is flagged; one
    whose AUROC falls with the ECE is not; one with no change is not."""
    rows = []
    for enc, da, de in (("holds", 0.0, 0.10), ("falls", -0.10, 0.10), ("same", 0.0, 0.0)):
        for seed in range(5):
            jitter = 0.002 * (seed - 2)
            for cond, sev, a, e in (("clean", 0, 0.85, 0.05), ("blur", 2, 0.85 + da, 0.05 + de)):
                rows.append({"encoder": enc, "dataset": "d", "label_fraction": 1.0, "condition": cond,
                             "severity": sev, "seed": seed, "auroc": a + jitter, "ece": e + jitter})
    got = stats.confidence_loss(pd.DataFrame(rows), n_boot=200, seed=1, auroc_margin=0.02)
    flag = got[got["estimand"] == "delta_ece"].set_index("encoder")["confidence_loss"]
    assert flag.to_dict() == {"falls": False, "holds": True, "same": False}
    with pytest.raises(stats.ContractError, match="auroc_margin"):
        stats.confidence_loss(pd.DataFrame(rows), auroc_margin=-0.1)


# --------------------------------------------------------------------------- shift


def shift_by_hand(runs: pd.DataFrame) -> pd.Series:
    m = _cell_means(runs).reset_index()
    has = sorted(m.loc[m["condition"] == "shift", "dataset"].unique())
    m = m[m["dataset"].isin(has)]
    out = {}
    for (reg, enc), g in m.groupby(["regime", "encoder"]):
        vals = {"shift_auroc_drop": [], "shift_ece_increase": [], "corruption_auroc_drop": [],
                "corruption_ece_increase": []}
        for ds, h in g.groupby("dataset"):
            c = h[h["condition"] == "clean"].iloc[0]
            s = h[h["condition"] == "shift"].iloc[0]
            p = h[~h["condition"].isin(["clean", "shift"])]
            vals["shift_auroc_drop"].append(c.auroc - s.auroc)
            vals["shift_ece_increase"].append(s.ece - c.ece)
            vals["corruption_auroc_drop"].append(np.mean(c.auroc - p["auroc"]))
            vals["corruption_ece_increase"].append(np.mean(p["ece"] - c.ece))
        for k, v in vals.items():
            out[(k, reg, enc)] = np.mean(v)
    s = pd.Series(out)
    for reg in s.index.get_level_values(1).unique():
        drop = s.xs(("shift_auroc_drop", reg), level=(0, 1))
        for enc, r in drop.rank(method="min").items():
            s[("shift_rank", reg, enc)] = r
    s.index.names = ["estimand", "regime", "encoder"]
    return s.sort_index()


def test_shift_drop_equals_pandas_and_the_resampling_loop(runs):
    got = stats.shift_drop(runs, n_boot=B, seed=9)
    check_tidy(got)
    has = sorted(runs.loc[runs["condition"] == "shift", "dataset"].unique())
    assert has == ["dataset_A"] and set(got["datasets"]) == {"dataset_A"}
    check_intervals(got, ["estimand", "regime", "encoder"], shift_by_hand,
                    resamples(runs, 9, B, datasets=has), runs)
    with pytest.raises(stats.ContractError, match="condition 'shift'"):
        stats.shift_drop(runs[runs["condition"] != "shift"], n_boot=4)


# --------------------------------------------------------------------------- E6


def curves_by_hand(runs: pd.DataFrame) -> pd.Series:
    r = runs[runs["condition"] == "clean"]
    m = r.groupby(["regime", "encoder", "dataset", "label_fraction"])["auroc"].mean()
    c = m.groupby(["regime", "encoder", "label_fraction"]).mean()
    full = c.xs(1.0, level="label_fraction")
    ret = (c - 0.5) / (full.reindex(c.index.droplevel(2)).to_numpy() - 0.5)
    s = pd.concat({"auroc": c, "retention": ret})
    s.index.names = ["estimand", "regime", "encoder", "label_fraction"]
    return s


def test_learning_curves_equal_pandas_and_the_resampling_loop(runs):
    got = stats.label_efficiency_curves(runs, n_boot=B, seed=2)
    check_tidy(got)
    check_intervals(got, ["estimand", "regime", "encoder", "label_fraction"], curves_by_hand,
                    resamples(runs, 2, B), runs)


def _crossing_by_hand(a: dict, b: dict) -> float:
    fr = sorted(a, reverse=True)
    prev = None
    for f in fr:
        d = a[f] - b[f]
        if d > 1e-12:
            if prev is None:
                return 1.0
            fp, dp = prev
            t = -dp / (d - dp)
            return math.exp(math.log(fp) + t * (math.log(f) - math.log(fp)))
        prev = (f, d)
    return math.nan


def crossovers_by_hand(runs: pd.DataFrame, pairs) -> pd.Series:
    c = curves_by_hand(runs)["auroc"]
    out = {}
    for reg, enc, comp in pairs:
        a = c.loc[(reg, enc)].to_dict()
        b = c.loc[(reg, comp)].to_dict()
        out[("crossover_fraction", enc, comp, reg)] = _crossing_by_hand(a, b)
    s = pd.Series(out, dtype=float)
    s.index.names = ["estimand", "encoder", "comparator", "regime"]
    return s


def test_crossover_of_a_known_pair():
    """A: 0.80, 0.75, 0.72 at fractions 1, 0.1, 0.01; B: 0.85, 0.74, 0.62. A trails by 0.05
    at full labels and leads by 0.01 at 0.1: the crossover is at
    10 ** -(0.05 / 0.06) (log-linear interpolation)."""
    rows = []
    for enc, vals in (("A", (0.80, 0.75, 0.72)), ("B", (0.85, 0.74, 0.62))):
        for f, v in zip((1.0, 0.1, 0.01), vals):
            for seed in range(3):
                rows.append({"encoder": enc, "dataset": "d", "label_fraction": f, "condition": "clean",
                             "severity": 0, "seed": seed, "auroc": v, "ece": 0.05})
    got = stats.label_crossovers(pd.DataFrame(rows), n_boot=50, seed=1).set_index("estimand")
    x = got.loc["crossover_fraction"]
    assert (x["encoder"], x["comparator"]) == ("A", "B")
    assert x["estimate"] == pytest.approx(10 ** -(0.05 / 0.06), rel=1e-12)
    assert got.loc["p_crossover", "estimate"] == 1.0         # no seed noise: every replicate
    assert got.loc["auroc_gap_full", "estimate"] == pytest.approx(0.05)
    assert got.loc["auroc_gap_lowest", "estimate"] == pytest.approx(0.10)


def test_crossovers_equal_pandas_and_the_resampling_loop(runs):
    got = stats.label_crossovers(runs, n_boot=B, seed=6)
    check_tidy(got)
    cross = got[got["estimand"] == "crossover_fraction"]
    pairs = list(zip(cross["regime"], cross["encoder"], cross["comparator"]))
    tables = resamples(runs, 6, B)
    point = crossovers_by_hand(runs, pairs)
    reps = pd.concat([crossovers_by_hand(t, pairs) for t in tables], axis=1).reindex(point.index)
    g = cross.set_index(["estimand", "encoder", "comparator", "regime"]).loc[point.index]
    np.testing.assert_allclose(g["estimate"], point, rtol=1e-12, equal_nan=True)
    lo, hi = percentile_interval(reps.to_numpy().T, 0.95)
    np.testing.assert_allclose(g["conf_low"], lo, rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(g["conf_high"], hi, rtol=1e-12, equal_nan=True)
    p = got[got["estimand"] == "p_crossover"].set_index(["encoder", "comparator", "regime"])
    np.testing.assert_allclose(p.loc[[(e, c, r) for _, e, c, r in point.index], "estimate"],
                               reps.notna().mean(1).to_numpy(), rtol=1e-12)
    # the encoder named first is the one behind at full labels
    full = curves_by_hand(runs)["auroc"].xs(1.0, level="label_fraction")
    for reg, enc, comp in pairs:
        assert full[(reg, enc)] <= full[(reg, comp)]


# --------------------------------------------------------------------------- E1


def specialization_by_hand(runs, domains, dataset_domains, baseline) -> pd.Series:
    m = _cell_means(runs).reset_index()
    m = m[m["condition"] == "clean"]
    out = {}
    for reg, g in m.groupby("regime"):
        a = g.set_index(["encoder", "dataset"])["auroc"]
        base = {d: np.mean([a[(b, d)] for b in baseline]) for d in g["dataset"].unique()}
        for enc in g["encoder"].unique():
            dom = domains.get(enc, "general")
            ds = sorted(g["dataset"].unique())
            mt = [d for d in ds if dataset_domains.get(d, d) == dom]
            cr = [d for d in ds if d not in mt]
            ma = np.mean([a[(enc, d)] for d in mt]) if mt else math.nan
            ca = np.mean([a[(enc, d)] for d in cr]) if cr else math.nan
            mg = np.mean([a[(enc, d)] - base[d] for d in mt]) if mt else math.nan
            cg = np.mean([a[(enc, d)] - base[d] for d in cr]) if cr else math.nan
            for k, v in (("matched_auroc", ma), ("cross_auroc", ca), ("matched_gain", mg),
                         ("cross_gain", cg), ("specialization", mg - cg)):
                out[(k, enc, reg)] = v
    s = pd.Series(out)
    s.index.names = ["estimand", "encoder", "regime"]
    return s


def test_specialization_equals_pandas_and_the_resampling_loop(runs):
    domains = {"enc_01": "derm", "enc_02": "eye"}
    dd = {"dataset_A": "derm", "dataset_B": "eye"}
    got = stats.specialization(runs, domains, dataset_domains=dd, n_boot=B, seed=3)
    check_tidy(got)
    enc_rows = got[got["level"] == "encoder"]
    by_hand = lambda t: specialization_by_hand(t, domains, dd, ["enc_03", "enc_04"])  # noqa: E731
    point = by_hand(runs).dropna()
    tables = resamples(runs, 3, B)
    reps = pd.concat([by_hand(t) for t in tables], axis=1).reindex(point.index)
    g = enc_rows.set_index(["estimand", "encoder", "regime"]).loc[point.index]
    np.testing.assert_allclose(g["estimate"], point, rtol=1e-12, atol=1e-13)
    lo, hi = percentile_interval(reps.to_numpy().T, 0.95)
    np.testing.assert_allclose(g["conf_low"], lo, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g["conf_high"], hi, rtol=1e-12, atol=1e-13)
    # generalists have no matched domain; families average their encoders
    gen = enc_rows[(enc_rows["encoder"] == "enc_03") & (enc_rows["estimand"] == "matched_gain")]
    assert gen["estimate"].isna().all() and (gen["flag"] == "not_estimable").all()
    fam = got[(got["level"] == "family") & (got["family"] == "derm") & (got["estimand"] == "specialization")]
    one = enc_rows[(enc_rows["encoder"] == "enc_01") & (enc_rows["estimand"] == "specialization")]
    np.testing.assert_allclose(fam.sort_values("regime")["estimate"],
                               one.sort_values("regime")["estimate"], rtol=1e-12)


# --------------------------------------------------------------------------- E3


@pytest.fixture(scope="module")
def layered(runs):
    rng = np.random.default_rng(5)
    mid = runs.assign(layer="mid", auroc=np.clip(runs["auroc"] + rng.normal(0, 0.02, len(runs)), 0, 1))
    out = pd.concat([runs.assign(layer="last"), mid], ignore_index=True)
    full = (out["condition"] == "clean") & (out["label_fraction"] == 1.0)
    out["val_auroc"] = np.where(full, np.clip(out["auroc"] + rng.normal(0, 0.02, len(out)), 0, 1), np.nan)
    return out


def test_layer_comparison_axes_selection_and_differences(layered):
    got = stats.layer_comparison(layered, n_boot=B, seed=8)
    check_tidy(got)
    tables = resamples(layered, 8, B)

    def axes(t):
        t = t.assign(encoder=t["encoder"] + "@" + t["layer"]).drop(columns=["layer", "val_auroc"])
        a = stats.crs_axes(t)
        a = a[a["dataset"] == "overall"].set_index(["estimand", "encoder", "regime"])["estimate"]
        return a

    point = axes(layered)
    reps = pd.concat([axes(t) for t in tables], axis=1).reindex(point.index)
    g = got[got["estimand"].isin(stats.crs.AXES)].assign(
        encoder=lambda d: d["encoder"] + "@" + d["layer"]).set_index(["estimand", "encoder", "regime"])
    np.testing.assert_allclose(g.loc[point.index, "estimate"], point, rtol=1e-12, atol=1e-13)
    lo, hi = percentile_interval(reps.to_numpy().T, 0.95)
    np.testing.assert_allclose(g.loc[point.index, "conf_low"], lo, rtol=1e-12, atol=1e-13)
    # the selection: highest seed-mean validation AUROC (mean over datasets)
    full = layered[(layered["condition"] == "clean") & (layered["label_fraction"] == 1.0)]
    crit = full.groupby(["regime", "encoder", "layer", "dataset"])["val_auroc"].mean() \
        .groupby(["regime", "encoder", "layer"]).mean()
    best = crit.groupby(["regime", "encoder"]).idxmax().map(lambda t: t[2])
    sel = got[got["selected"] & (got["estimand"] == "selection_criterion")]
    assert dict(zip(zip(sel["regime"], sel["encoder"]), sel["layer"])) == best.to_dict()
    # best minus last, paired: the difference of the two layers in each replicate
    for axis in stats.crs.AXES:
        d = got[got["estimand"] == f"difference_{axis}"].set_index(["regime", "encoder"])
        for (reg, enc), row in d.iterrows():
            b = best[(reg, enc)]
            want = point[(axis, f"{enc}@{b}", reg)] - point[(axis, f"{enc}@last", reg)]
            assert row["estimate"] == pytest.approx(want, abs=1e-13)
            if b == "last":
                assert row["flag"] == "best_is_last" and row["conf_low"] == 0
            else:
                rep = reps.loc[(axis, f"{enc}@{b}", reg)] - reps.loc[(axis, f"{enc}@last", reg)]
                lo, hi = percentile_interval(rep.to_numpy()[:, None], 0.95)
                assert row["conf_low"] == pytest.approx(lo[0], abs=1e-12)
                assert row["conf_high"] == pytest.approx(hi[0], abs=1e-12)


def test_layer_comparison_without_validation_selects_on_test_and_says_so(layered):
    got = stats.layer_comparison(layered.drop(columns="val_auroc"), n_boot=4, seed=1)
    crit = got[got["estimand"] == "selection_criterion"]
    assert (crit["flag"] == "selected_on_test").all() and set(crit["criterion"]) == {"auroc (test)"}
    with pytest.raises(stats.ContractError, match="none is named 'final'"):
        stats.layer_comparison(layered, last="final", n_boot=4)
    with pytest.raises(stats.ContractError, match="no 'layer' column"):
        stats.layer_comparison(layered[layered["layer"] == "last"].drop(columns="layer"), n_boot=4)
