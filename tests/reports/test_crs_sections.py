"""A biostatistician's read of the demo's CRS, calibration and metadata sections,
each finding tested here:

* the CRS bootstrap redraws 3 seeds per dataset, so a replicate is one of 3^3 x 3^3 = 729
  equally likely seed draws: the report never said so, and its p-values (and their Holm
  adjustment) were floored at 2 / (B + 1), far finer than the bootstrap can resolve; now
  every table carries ``n_seed_resamples``, p is never below 2 / N, and the text says it;
* replicates that could not be estimated were said to lack "a condition or fraction"; in
  the demo they are resamples whose full-label AUROC falls to 0.5 or below;
* the methods defined neither label efficiency, robustness, the clipping, dominance nor
  similarity;
* the calibration summary showed a dash for the encoders' ECE after scaling while the
  repair table gave one, unexplained;
* a kappa of 1 had the "interval" [1, 1] on 322 cases: now not estimable, flagged.
"""
from __future__ import annotations

import warnings
from itertools import product

import numpy as np
import pandas as pd
import pytest

from stats import simulate
from analysis.inputs import plan_limits
from stats.crs_resample import crs_bootstrap


@pytest.fixture(scope="module")
def demo():
    from conftest import run_demo

    return run_demo(["crs", "metadata_agreement", "calibration", "calibration_repair"])


def _built(demo, module):
    from reports.study import Study

    plan, tables, r = demo
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return module.build(Study(plan=plan, tables=tables, results=r))


def test_seed_resamples_bound_the_p_values():
    runs = simulate.crs_runs(n_encoders=5, n_datasets=2, n_seeds=3, seed=3).data
    boot = crs_bootstrap(runs, {"panel": ["enc_01", "enc_02", "enc_03"]}, n_boot=3000, seed=1)
    N = 27.0 * 27.0
    assert boot.n_seed_resamples("frozen") == N
    d = boot.differences()
    assert (d["n_seed_resamples"] == N).all() and (boot.scores()["n_seed_resamples"] == N).all()
    assert (d["p_value"] >= 2 / N - 1e-15).all() and (d["p_adjusted"] >= d["p_value"]).all()
    # the draws really are 729 equally likely ones: every replicate's per-dataset seed
    # indices are one of 27 ordered triples, and with 3000 draws nearly all 729 occur
    draws = boot.draws["frozen"]
    key = sum(draws[ds] @ (3 ** np.arange(3)) * 27 ** k for k, ds in enumerate(sorted(draws)))
    assert set(np.unique(key)) <= set(range(729)) and len(np.unique(key)) > 700
    # a difference that every seed draw puts on one side has an exact bootstrap p of 0;
    # the reported p is the resolution 2 / N, not 2 / (B + 1)
    crs = boot.replicates["frozen"][:, :, -1]
    sure = [(i, j) for i, j in product(range(crs.shape[1]), repeat=2)
            if i != j and np.all(crs[:, i] > crs[:, j])]
    assert sure, "the simulated panel has a pair ordered alike in every replicate"
    enc = boot.encoders["frozen"]
    i, j = sure[0]
    row = d[((d["encoder"] == enc[i]) & (d["comparator"] == enc[j]))
            | ((d["encoder"] == enc[j]) & (d["comparator"] == enc[i]))]
    assert row["p_value"].iloc[0] == pytest.approx(2 / N, rel=1e-12)


def test_demo_states_seeds_resolution_and_the_real_reason(demo):
    from reports.sections import crs as sec
    from reports.sections.methods import _crs
    from reports.study import Study

    plan, tables, r = demo
    seeds = r["crs"]["seeds"]
    assert set(seeds["n_seeds"]) == {3} and set(seeds["n_seed_resamples"]) == {729.0}
    # the demo's not-estimable replicates are the seed draws in which the full-label AUROC
    # of the encoder or of a panel member (the CRS compares with every one) has a mean at
    # or below 0.5 on a dataset: recount them by enumerating all 729 equally likely draws
    runs = tables.runs
    full = runs[(runs["condition"] == "clean") & (runs["label_fraction"] == 1.0)
                & (runs["regime"] == "frozen")]
    # the CRS rows: the plan's layer policy (last; the handcrafted baseline has one layer)
    last = full.groupby("encoder")["layer"].transform(lambda x: "last" if (x == "last").any()
                                                       else x.iloc[0])
    full = full[full["layer"] == last]
    wide = full.pivot_table(index=["dataset", "encoder"], columns="seed", values="auroc")
    datasets = list(wide.index.unique("dataset"))
    encoders = list(wide.index.unique("encoder"))
    ok = {}   # dataset -> (27 triples x encoders) bool
    for ds in datasets:
        a = wide.loc[ds].reindex(encoders).to_numpy()          # encoders x 3 seeds
        ok[ds] = np.array([a[:, list(t)].mean(1) > 0.5 for t in product(range(3), repeat=3)])
    both = ok[datasets[0]][:, None, :] & ok[datasets[1]][None, :, :]   # 27 x 27 x encoders
    both = both.reshape(729, len(encoders))
    panel = [encoders.index(e) for e in tables.reference.panel]
    sc = r["crs"]["scores"]
    crs_rows = sc[(sc["estimand"] == "crs") & (sc["regime"] == "frozen")].set_index("encoder")
    for k, enc in enumerate(encoders):
        share = 1 - np.mean(both[:, k] & both[:, panel].all(1))
        n_bad = crs_rows.loc[enc, "n_boot_not_estimable"]
        # binomial(10,000, share): within 5 SDs (exactly 0 when no draw fails)
        assert abs(n_bad - 10_000 * share) <= 5 * np.sqrt(10_000 * share * (1 - share)), enc
    built = _built(demo, sec)
    notes = " ".join(n for t in built.tables for n in t.notes)
    assert "lacked a condition" not in notes
    assert "fell to 0.5 or below" in notes and "729 equally likely seed draws" in notes
    diff = next(t for t in built.tables if t.name == "crs_differences")
    floor = sec.p_floor(diff.data)
    assert floor.min() == pytest.approx(2 / 729, rel=1e-12)
    assert (diff.data["p_value"] >= 2 / 729 - 1e-15).all()
    assert not diff.display["p"].str.contains("< 0.001").any()
    methods = " ".join(_crs(Study(plan=plan, tables=tables, results=r)))
    for words in ("(AUROC_f - 0.5) / (AUROC_1 - 0.5)", "clipped to [0, 1]", "Pareto",
                  "1 - ||a - 1|| / 2", "W = min_j a_j", "3 seeds per encoder and dataset",
                  "Dirichlet(1, 1, 1)"):
        assert words in methods, words


def test_demo_calibration_says_why_the_encoders_have_no_after(demo):
    from reports.sections import calibration as sec

    built = _built(demo, sec)
    summ = next(t for t in built.tables if t.name == "calibration_summary")
    note = " ".join(summ.notes)
    assert "fits no temperature for them" in note and "from the runs table" in note
    rep = next(t for t in built.tables if t.name == "calibration_repair")
    assert "cross-fitting" in " ".join(rep.notes)
    fig = next(f for f in built.figures if f.name == "reliability")
    assert "before scaling only" in fig.caption


def test_perfect_agreement_kappa_is_not_estimable_not_zero_width(demo):
    ag = demo[2]["metadata_agreement"]
    perfect = ag[ag["kappa"] == 1.0]
    assert len(perfect)                      # the demo has such pairs (322-327 cases)
    assert perfect[["kappa_conf_low", "kappa_conf_high"]].isna().all().all()
    assert (perfect["kappa_flag"] == "not_estimable").all()
    rest = ag[ag["kappa"].notna() & (ag["kappa"] < 1.0)]
    assert rest["kappa_conf_low"].notna().all() and (rest["kappa_flag"] == "").all()


def test_p_values_stay_at_most_one_and_datasets_never_merge():
    """Review: with one seed per dataset N = 1 and the floor 2/N gave p = 2; two datasets
    whose (few) draws happen to be equal were counted once in N."""
    runs = simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=1, seed=3).data
    boot = crs_bootstrap(runs, {"panel": ["enc_01", "enc_02", "enc_03"]}, n_boot=50, seed=1)
    assert boot.n_seed_resamples("frozen") == 1.0
    d = boot.differences()
    assert (d["p_value"].dropna() <= 1).all() and (boot.leading_tier()["p_value"] <= 1).all()
    runs = simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=2, seed=3).data
    for s in range(40):                 # some seed makes both datasets' draws alike
        boot = crs_bootstrap(runs, {"panel": ["enc_01", "enc_02", "enc_03"]}, n_boot=3,
                             seed=s)
        a, b = (boot.draws["frozen"][k] for k in sorted(boot.draws["frozen"]))
        if np.array_equal(a, b):
            break
    assert np.array_equal(a, b)
    assert boot.n_seed_resamples("frozen") == 16.0
