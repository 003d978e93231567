"""Calibration analyses: temperature scaling fitted on the validation (calibration) split
and evaluated on the test split, ECE with bootstrap intervals, reliability tables, and the
runs table's ECE before/after temperature scaling.

Sources: the detection models' ``max_prob`` in the cases table (one model's predictions:
ECE of the test split, case-bootstrap interval), and per-case probe probabilities
(``inputs.probe_predictions``). An encoder has one ECE, the CRS protocol's
(``stats.calibration.encoder_ece``): per run (clean, label fraction 1) the ECE with 15
equal-width bins, the mean over seeds per dataset, the mean over datasets: the number the
CRS calibration axis and the calibration-repair table show. Its interval is the CRS
paired-seed bootstrap, with the CRS bootstrap's replicates and seed when the plan has a
``crs`` block (then its replicates are the CRS table's), else ``calibration.bootstrap``.
Replicates and seeds are recorded in ``Results.decisions``; so is the largest difference
between the per-run ECEs recomputed here and the runs table's ``ece``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .core import analysis

#: equal-width bins of the reliability table (the ECE keeps its own 15 bins)
RELIABILITY_BINS = 10
ECE_BINS = 15
CAL_SPLITS = ("validation", "calibration")
#: per-run ECEs closer than this to the runs table's count as the same number
SAME_ECE = 1e-12
PROBE = "encoder probe"
DETECTION = "detection model"


def groups(plan, tables, cluster: str | None = None) -> list[tuple]:
    """(model, calibration frame, test frame) of the detection models, columns label, prob
    (and ``cluster``, the cluster column's values, when one is given)."""
    out = []
    c = tables.cases
    if c is not None and getattr(plan, "detection", None) is not None \
            and {"max_prob", "split"} <= set(c.columns):
        cols = {"max_prob": "prob", **({cluster: "cluster"} if cluster else {})}
        keep = ["label", "max_prob", *([cluster] if cluster else [])]
        for model, g in c.groupby("model", sort=False):
            cal, test = g[g["split"].isin(CAL_SPLITS)], g[g["split"] == "test"]
            if len(cal) and len(test):
                out.append((str(model), cal[keep].rename(columns=cols),
                            test[keep].rename(columns=cols)))
    return out


def probe_rows(tables) -> pd.DataFrame | None:
    """The probe predictions that define an encoder's ECE: clean runs at label fraction 1
    (``stats.calibration.protocol_runs``); None when there are none, or when a split column
    marks none of them as test rows."""
    from stats.calibration import protocol_runs

    pp = tables.probe_predictions
    need = {"encoder", "label", "prob", "condition", "label_fraction"}
    if pp is None or not need <= set(pp.columns):
        return None
    sel = protocol_runs(pp)
    if "split" in sel.columns and not (sel["split"] == "test").any():
        return None
    return sel if len(sel) else None


def boot_settings(plan) -> tuple[int, int]:
    """(replicates, seed) of the detection models' ECE intervals: the plan's
    ``calibration.bootstrap`` replicates and the run's ``calibration_bootstrap`` stream
    (``Plan.seed_for``: its own seed, or the root's stream)."""
    return (int(plan.calibration.bootstrap.n_boot),
            int(plan.seed_for("calibration_bootstrap")))


def encoder_boot_settings(plan) -> tuple[int, int, str]:
    """(replicates, seed, plan key) of the encoders' paired-seed bootstrap: with a ``crs``
    block that bootstraps, the CRS bootstrap's replicates and stream (the same draws as the
    CRS table's calibration axis, by declaration: one stream, ``crs_bootstrap``), else the
    calibration bootstrap's."""
    crs = getattr(plan, "crs", None)
    if crs is not None and crs.bootstrap.n_boot >= 2:
        return int(crs.bootstrap.n_boot), int(plan.seed_for("crs_bootstrap")), "crs.bootstrap"
    return (*boot_settings(plan), "calibration.bootstrap")


def wants_probabilities(plan, tables) -> bool:
    return bool(groups(plan, tables)) or probe_rows(tables) is not None


def _scaled_runs(rows: pd.DataFrame):
    """Per run: the test rows with ``prob_after`` (the run's temperature, fitted on its
    calibration rows, applied; NaN without them) and the run's temperature. Without a
    split column every row is a test row and nothing is scaled."""
    from stats.calibration import temperature_scale

    if "split" not in rows.columns:
        return rows.assign(prob_after=np.nan), pd.DataFrame()
    keys = ["regime", "encoder", "dataset", "seed"]
    parts, temps = [], []
    for key, g in rows.groupby(keys, sort=True):
        cal, test = g[g["split"].isin(CAL_SPLITS)], g[g["split"] == "test"]
        if not len(test):
            continue
        after = np.full(len(test), np.nan)
        if len(cal):
            tf = temperature_scale(cal["prob"].to_numpy(float), cal["label"].to_numpy())
            after = tf.apply(test["prob"].to_numpy(float))
            temps.append({**dict(zip(keys, key)), "temperature": tf.temperature})
        parts.append(test.assign(prob_after=after))
    return pd.concat(parts, ignore_index=True), pd.DataFrame(temps)


def _encoders(results, rows: pd.DataFrame):
    """The encoder rows of the summary, the pooled reliability tables and the per-run ECEs."""
    from stats.calibration import encoder_ece, protocol_runs, reliability_table

    n_boot, seed, key = encoder_boot_settings(results.plan)
    results.decide("calibration.encoder_ece", "seed-mean of per-run ECE (15 equal-width "
                   "bins), clean runs at label fraction 1, mean over datasets (the CRS "
                   "calibration axis)")
    results.decide("calibration.encoder_bootstrap", {"method": "paired-seed", "n_boot": n_boot,
                                                     "seed": seed, "from": key})
    results.decide("seeds.calibration_encoder_bootstrap", seed)
    test, temps = _scaled_runs(rows)
    stages = {"prob": "before"}
    if test["prob_after"].notna().any():
        stages["prob_after"] = "after"
    summ, per_run = encoder_ece(test, probs=tuple(stages), n_bins=ECE_BINS, n_boot=n_boot,
                                seed=seed)
    summ = summ.assign(stage=summ["stage"].map(stages), source=PROBE, unit=summ["encoder"])
    per_run = per_run.assign(stage=per_run["stage"].map(stages))
    if len(temps):
        per_run = per_run.merge(temps, on=["regime", "encoder", "dataset", "seed"], how="left")
        summ["temperature"] = np.nan   # one temperature per run: in the per-run table
    runs = results.tables.runs
    if runs is not None:   # the same runs in the runs table: the same per-run ECE?
        ref = protocol_runs(runs)[["regime", "encoder", "dataset", "seed", "ece"]]
        per_run = per_run.merge(ref.rename(columns={"ece": "ece_runs_table"}),
                                on=["regime", "encoder", "dataset", "seed"], how="left")
        before = per_run[per_run["stage"] == "before"]
        diff = (before["ece"] - before["ece_runs_table"]).abs()
        results.decide("calibration.encoder_ece_vs_runs", {
            "runs_compared": int(diff.notna().sum()), "runs_missing": int(diff.isna().sum()),
            "max_abs_difference": float(diff.max()) if diff.notna().any() else None})
        if diff.isna().any() or (diff > SAME_ECE).any():
            results.note("The encoders' ECEs in the calibration table are recomputed from the "
                         "probe predictions; for some runs they differ from (or are missing in) "
                         "the runs table's ece, which the CRS calibration axis and the "
                         "calibration-repair table use (calibration_encoder_runs.csv).")
    rel = []
    # the pooled runs score each case once per seed: a case's predictions are a cluster
    by_case = "case_id" in test.columns
    results.decide("calibration.encoder_reliability_cluster",
                   "dataset x case_id (a case's predictions over seeds)" if by_case else None)
    for (regime, enc), g in test.groupby(["regime", "encoder"], sort=False):
        y = g["label"].to_numpy()
        case = ((g["dataset"].astype(str) + "\x1f" + g["case_id"].astype(str)).to_numpy()
                if by_case else None)
        for col, stage in stages.items():
            keep = g[col].notna().to_numpy()
            rel.append(reliability_table(y[keep], g[col].to_numpy(float)[keep],
                                         n_bins=RELIABILITY_BINS,
                                         cluster=None if case is None else case[keep]).assign(
                source=PROBE, unit=str(enc), regime=regime, stage=stage))
    return summ, rel, per_run


#: the detection models' ECE interval (bench/ece_cluster_coverage.md: the percentile
#: interval covers the population ECE 0-70%, the basic one 85-91%)
ECE_INTERVAL = "basic"

@analysis("calibration", wanted=wants_probabilities)
def calibration(results) -> dict[str, pd.DataFrame]:
    """``{"summary": ECE/Brier/NLL before and after scaling with ECE CIs,
    "reliability": reliability tables, "encoder_runs": per-run ECEs}`` per source x unit."""
    from stats.calibration import ece_ci_many, reliability_table, temperature_scale

    summary, rel, series = [], [], []
    det = groups(results.plan, results.tables)
    # repeated scans of a patient: cluster-aware bins and a cluster bootstrap of the ECE
    cluster = results["cluster"] if det else None
    if cluster:
        det = groups(results.plan, results.tables, cluster)
    if det:
        n_boot, seed = boot_settings(results.plan)
        results.decide("calibration.bootstrap.n_boot", n_boot)
        results.decide("seeds.calibration_bootstrap", seed)
    for unit, cal, test in det:
        y, p = test["label"].to_numpy(), test["prob"].to_numpy(float)
        clu = test["cluster"].to_numpy() if cluster else None
        tf = temperature_scale(cal["prob"].to_numpy(float), cal["label"].to_numpy())
        ev = tf.evaluate(p, y).assign(source=DETECTION, unit=unit)
        for stage, prob in (("before", p), ("after", tf.apply(p))):
            series.append((ev, stage, y, prob, clu))
            rel.append(reliability_table(y, prob, n_bins=RELIABILITY_BINS,
                                         cluster=clu).assign(
                source=DETECTION, unit=unit, stage=stage))
        summary.append(ev)
    if series:
        # every series' interval in one call: series of equal length (each model before and
        # after scaling; every model of a paired design) share the seed's draws, as separate
        # ece_ci calls with that seed would, and pay for the resampling once
        results.decide("calibration.ece_interval", ECE_INTERVAL)
        cis = ece_ci_many([(y, prob) if clu is None else (y, prob, clu)
                           for _, _, y, prob, clu in series], n_boot=n_boot, seed=seed,
                          boot_ci=ECE_INTERVAL)
        for (ev, stage, *_), (_, ci) in zip(series, cis.iterrows()):
            hit = (ev["estimand"] == "ece") & (ev["stage"] == stage)
            ev.loc[hit, "conf_low"] = float(ci["conf_low"])
            ev.loc[hit, "conf_high"] = float(ci["conf_high"])
            ev.loc[hit, "method"] = ci["method"]   # the ECE row's interval
    out = {}
    rows = probe_rows(results.tables)
    if rows is not None:
        summ, prel, out["encoder_runs"] = _encoders(results, rows)
        summary.append(summ)
        rel += prel
    return {"summary": pd.concat(summary, ignore_index=True),
            "reliability": pd.concat(rel, ignore_index=True), **out}


def wants_repair(plan, tables) -> bool:
    runs = tables.runs
    return (getattr(plan, "crs", None) is not None and runs is not None
            and "ece_after_ts" in runs.columns and runs["ece_after_ts"].notna().any())


@analysis("calibration_repair", wanted=wants_repair)
def calibration_repair(results) -> pd.DataFrame:
    """ECE before and after temperature scaling from the runs table."""
    from stats.calibration import calibration_repair as compute

    return compute(results.tables.runs)
