"""One ECE per encoder: the calibration table, the calibration-repair table
and the CRS calibration axis show the same number, the CRS protocol's (per-run ECE with 15
equal-width bins, clean runs at label fraction 1, mean over seeds per dataset, mean over
datasets), and the calibration table's interval is the CRS paired-seed bootstrap."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stats
from analysis import run
from analysis.calibration import PROBE
from analysis.inputs import load_tables
from analysis.plan import load_plan
from stats.calibration import encoder_ece
from stats.crs_resample import crs_bootstrap
from stats.schema import check_tidy

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"


@pytest.fixture(scope="module")
def demo():
    plan = load_plan(DEMO / "plan.yaml")
    plan = plan.updated({"crs.n_weights": 0})   # no stability: faster
    tables = load_tables(plan)
    return run(plan, tables, only=["calibration", "calibration_repair", "crs"], errors="raise")


def _by_encoder(frame, value="estimate"):
    """The frozen regime's value per encoder (the demo has frozen and adapted runs; each
    regime is its own table row, compared the same way)."""
    if "regime" in frame.columns:
        frame = frame[frame["regime"] == "frozen"]
    return frame.set_index("encoder")[value].sort_index()


def test_one_ece_per_encoder_in_every_table(demo):
    summ = demo["calibration"]["summary"]
    cal = summ[(summ["source"] == PROBE) & (summ["estimand"] == "ece")
               & (summ["stage"] == "before")]
    rep = demo["calibration_repair"]
    rep = rep[(rep["dataset"] == "overall") & (rep["estimand"] == "ece_before")]
    axes = demo["crs"]["axes"]
    axes = axes[(axes["dataset"] == "overall") & (axes["estimand"] == "calibration")]
    scores = demo["crs"]["scores"]
    scores = scores[scores["estimand"] == "calibration"]
    # one row per encoder and regime (7 encoders, frozen and adapted), in every table
    assert len(cal) == len(rep) == len(axes) == len(scores) == 7 * 2
    # the same number, bit for bit, in the three tables (and the scores table's raw axis)
    pd.testing.assert_series_equal(_by_encoder(cal), _by_encoder(rep), check_exact=True)
    pd.testing.assert_series_equal(_by_encoder(cal), _by_encoder(axes), check_exact=True)
    pd.testing.assert_series_equal(_by_encoder(cal), _by_encoder(scores), check_exact=True)
    # and the same interval as the CRS table: its paired-seed replicates
    for col in ("conf_low", "conf_high"):
        pd.testing.assert_series_equal(_by_encoder(cal, col), _by_encoder(scores, col),
                                       check_exact=True)
    assert (cal["n_boot"] == scores["n_boot"].iloc[0]).all()
    assert demo.decisions["calibration.encoder_bootstrap"]["from"] == "crs.bootstrap"


def test_demo_runs_table_ece_is_the_per_run_ece_of_the_predictions(demo):
    """The runs table's ece equals stats.ece recomputed per run from the predictions."""
    per = demo["calibration"]["encoder_runs"]
    assert len(per) == 7 * 2 * 3 * 2     # encoders x datasets x seeds x regimes
    assert (per["ece"] == per["ece_runs_table"]).all()
    check = demo.decisions["calibration.encoder_ece_vs_runs"]
    assert check == {"runs_compared": 84, "runs_missing": 0, "max_abs_difference": 0.0}
    assert not demo.notes
    # independently: groupby + stats.ece, seed-mean per dataset, mean over datasets
    pp = pd.read_parquet(DEMO / "probe_predictions.parquet")
    pp = pp[(pp["condition"] == "clean") & (pp["label_fraction"] == 1.0)
            & (pp["regime"] == "frozen")]
    # the plan's layer (policy last; the handcrafted baseline has its one layer)
    last = pp.groupby("encoder")["layer"].transform(lambda x: "last" if (x == "last").any()
                                                     else x.iloc[0])
    pp = pp[pp["layer"] == last]
    run_ece = pp.groupby(["encoder", "dataset", "seed"]).apply(
        lambda g: stats.ece(g["label"].to_numpy(), g["prob"].to_numpy(float), n_bins=15),
        include_groups=False)
    want = run_ece.groupby(["encoder", "dataset"]).mean().groupby("encoder").mean()
    summ = demo["calibration"]["summary"]
    got = _by_encoder(summ[summ["source"] == PROBE])
    np.testing.assert_allclose(got.to_numpy(), want.sort_index().to_numpy(), rtol=1e-14)


def _predictions(n_enc=3, n_ds=2, n_seeds=3, n=120, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(n_ds):
        for s in range(n_seeds):
            ids = rng.choice(400, n, replace=False)
            y = rng.integers(0, 2, n)
            for e in range(n_enc):
                p = np.clip(0.5 + (y - 0.5) * rng.uniform(0, 0.9 - 0.2 * e, n)
                            + rng.normal(0, 0.1, n), 0, 1)
                rows.append(pd.DataFrame({
                    "encoder": f"enc_{e}", "dataset": f"ds_{d}", "label_fraction": 1.0,
                    "condition": "clean", "severity": 0, "seed": s,
                    "case_id": [f"c{i}" for i in ids], "label": y, "prob": p}))
    return stats.schema.read_probe_predictions(pd.concat(rows, ignore_index=True))


def _runs_of(pp, seed=0):
    """A runs table whose ece is the per-run ECE of ``pp`` (AUROC filled in)."""
    keys = ["encoder", "dataset", "label_fraction", "condition", "severity", "seed"]
    runs = pp.groupby(keys).apply(lambda g: pd.Series({
        "ece": stats.ece(g["label"].to_numpy(), g["prob"].to_numpy(float))}),
        include_groups=False).reset_index()
    rng = np.random.default_rng(seed)
    return runs.assign(auroc=rng.uniform(0.7, 0.9, len(runs)))


@pytest.mark.parametrize("ragged", [False, True])
def test_encoder_ece_is_the_crs_axis_with_its_bootstrap(ragged):
    pp = _predictions()
    if ragged:   # enc_1 lacks seed 2 on ds_0: seed-means over the seeds it has
        pp = pp[~((pp["encoder"] == "enc_1") & (pp["dataset"] == "ds_0") & (pp["seed"] == 2))]
    summ, per_run = encoder_ece(pp, n_boot=300, seed=5)
    check_tidy(summ)
    runs = _runs_of(pp)
    ref = {"panel": ["enc_0", "enc_1"], "anchors": {
        "discrimination": [0.5, 1], "calibration": [0, 0.3], "label_efficiency": [0, 1],
        "robustness": [0, 1]}}
    boot = crs_bootstrap(runs, ref, n_boot=300, seed=5).scores()
    crs_cal = boot[boot["estimand"] == "calibration"]
    for col in ("estimate", "conf_low", "conf_high"):
        np.testing.assert_array_equal(_by_encoder(summ, col).to_numpy(),
                                      _by_encoder(crs_cal, col).to_numpy())
    assert (summ["n_boot_not_estimable"] == 0).all()
    # n: cases summed over the encoder's runs; n_runs, n_seeds as counted
    n = pp.groupby("encoder").size().sort_index()
    np.testing.assert_array_equal(_by_encoder(summ, "n").to_numpy(), n.to_numpy())
    assert _by_encoder(summ, "n_runs")["enc_1"] == (5 if ragged else 6)
    assert len(per_run) == (17 if ragged else 18)


def test_encoder_ece_stages_regimes_and_protocol_rows():
    pp = _predictions(n_enc=2)
    other = pp.assign(label_fraction=0.5, prob=1.0)                # not the protocol: ignored
    adapted = pp.assign(regime="adapted", prob=pp["prob"] ** 2)
    both = pd.concat([pp, other, adapted], ignore_index=True)
    both["prob_after"] = np.where(both["seed"] == 0, np.nan, 0.5)   # a second stage, partial
    summ, per_run = encoder_ece(both, probs=("prob", "prob_after"), n_boot=50, seed=1)
    assert len(summ) == 2 * 2 * 2      # regimes x encoders x stages
    frozen, _ = encoder_ece(pp, n_boot=50, seed=1)
    got = summ[(summ["regime"] == "frozen") & (summ["stage"] == "prob")]
    np.testing.assert_array_equal(got["estimate"].to_numpy(), frozen["estimate"].to_numpy())
    after = per_run[per_run["stage"] == "prob_after"]
    assert set(after["seed"]) == {1, 2}
    # constant 0.5: each run's ECE is |event rate - 0.5|
    one = both[(both["regime"] == "frozen") & (both["encoder"] == "enc_0")
               & (both["dataset"] == "ds_0") & (both["seed"] == 1)
               & (both["label_fraction"] == 1.0)]
    row = after[(after["regime"] == "frozen") & (after["encoder"] == "enc_0")
                & (after["dataset"] == "ds_0") & (after["seed"] == 1)]
    assert row["ece"].item() == pytest.approx(abs(one["label"].mean() - 0.5), abs=1e-15)
    with pytest.raises(stats.ContractError, match="no clean runs at label fraction 1"):
        encoder_ece(other)


def _CalPlan():
    """A plan with neither half: the calibration section's defaults alone."""
    from analysis.plan import plan_for_tables

    return plan_for_tables(seed=3)


def test_encoder_rows_with_a_calibration_split_scale_each_run():
    """With a split column each run's temperature is fitted on its calibration rows and
    applied to its test rows; the ECE before is the test rows' encoder ECE."""
    from analysis import Tables
    from analysis.calibration import encoder_boot_settings

    pp = _predictions(n_enc=2, n=200, seed=4)
    rng = np.random.default_rng(0)
    pp["split"] = np.where(rng.random(len(pp)) < 0.4, "calibration", "test")
    res = run(_CalPlan(), Tables(probe_predictions=pp), only=["calibration"], errors="raise")
    summ, per = res["calibration"]["summary"], res["calibration"]["encoder_runs"]
    assert set(summ["stage"]) == {"before", "after"}
    assert per["temperature"].notna().all() and len(per) == 2 * 2 * 3 * 2
    n_boot, seed, key = encoder_boot_settings(_CalPlan())
    assert key == "calibration.bootstrap"
    assert res.decisions["seeds.calibration_encoder_bootstrap"] == seed
    want, _ = encoder_ece(pp[pp["split"] == "test"], n_boot=n_boot, seed=seed)
    got = summ[summ["stage"] == "before"]
    np.testing.assert_array_equal(got["estimate"].to_numpy(), want["estimate"].to_numpy())
    # one run by hand: temperature from its calibration rows, ECE of its scaled test rows
    run_ = pp[(pp["encoder"] == "enc_1") & (pp["dataset"] == "ds_0") & (pp["seed"] == 2)]
    cal, test = run_[run_["split"] == "calibration"], run_[run_["split"] == "test"]
    tf = stats.temperature_scale(cal["prob"].to_numpy(), cal["label"].to_numpy())
    row = per[(per["encoder"] == "enc_1") & (per["dataset"] == "ds_0") & (per["seed"] == 2)
              & (per["stage"] == "after")]
    assert row["temperature"].item() == pytest.approx(tf.temperature, rel=1e-12)
    assert row["ece"].item() == pytest.approx(
        stats.ece(test["label"].to_numpy(), tf.apply(test["prob"].to_numpy())), abs=1e-15)
