"""Calibration analyses: temperature scaling fitted on the validation (calibration) split
and evaluated on the test split, ECE with case-bootstrap intervals, reliability tables,
and the runs table's ECE before/after temperature scaling.

Sources: the detection models' ``max_prob`` in the cases table, and per-case probe
probabilities (``inputs.probe_predictions``; clean runs at label fraction 1, pooled over
seeds). Replicates and seed of the ECE intervals come from the plan
(``calibration.bootstrap``), defaulting to ``DEFAULT_BOOT`` and to the detection
bootstrap's seed; both are recorded in ``Results.decisions``.
"""
from __future__ import annotations

import pandas as pd

from .core import analysis

#: equal-width bins of the reliability table (the ECE keeps its own 15 bins)
RELIABILITY_BINS = 10
DEFAULT_BOOT = 1000
DEFAULT_SEED = 0
CAL_SPLITS = ("validation", "calibration")


def groups(plan, tables) -> list[tuple]:
    """(source, unit, calibration frame or None, test frame) with columns label, prob."""
    out = []
    c = tables.cases
    if c is not None and getattr(plan, "detection", None) is not None \
            and {"max_prob", "split"} <= set(c.columns):
        for model, g in c.groupby("model", sort=False):
            cal, test = g[g["split"].isin(CAL_SPLITS)], g[g["split"] == "test"]
            if len(cal) and len(test):
                out.append(("detection model", str(model),
                            cal[["label", "max_prob"]].rename(columns={"max_prob": "prob"}),
                            test[["label", "max_prob"]].rename(columns={"max_prob": "prob"})))
    pp = tables.probe_predictions
    if pp is not None and {"encoder", "label", "prob"} <= set(pp.columns):
        sel = pp
        if "condition" in sel.columns:
            sel = sel[sel["condition"].astype(str).str.lower() == "clean"]
        if "label_fraction" in sel.columns:
            sel = sel[sel["label_fraction"] == 1.0]
        for enc, g in sel.groupby("encoder", sort=False):
            if "split" in g.columns:
                cal, test = g[g["split"].isin(CAL_SPLITS)], g[g["split"] == "test"]
            else:  # held-out predictions only: reliability before scaling, no temperature
                cal, test = None, g
            if len(test) and (cal is None or len(cal)):
                out.append(("encoder probe", str(enc),
                            None if cal is None else cal[["label", "prob"]],
                            test[["label", "prob"]]))
    return out


def boot_settings(plan) -> tuple[int, int]:
    """(replicates, seed) of the ECE bootstrap intervals: ``calibration.bootstrap`` of the
    plan; without a seed there, the detection bootstrap's, else ``DEFAULT_SEED``."""
    cal = getattr(plan, "calibration", None)
    n = DEFAULT_BOOT if cal is None else cal.n_boot
    seed = None if cal is None else cal.seed
    if seed is None:
        det = getattr(plan, "detection", None)
        seed = det.seed if det is not None and det.seed is not None else DEFAULT_SEED
    return int(n), int(seed)


def wants_probabilities(plan, tables) -> bool:
    return bool(groups(plan, tables))


@analysis("calibration", wanted=wants_probabilities)
def calibration(results) -> dict[str, pd.DataFrame]:
    """``{"summary": ECE/Brier/NLL before and after scaling with ECE CIs,
    "reliability": reliability tables}`` per source x unit."""
    from ..calibration import ece, ece_ci_many, reliability_table, temperature_scale

    n_boot, seed = boot_settings(results.plan)
    results.decide("calibration.bootstrap.n_boot", n_boot)
    results.decide("seeds.calibration_bootstrap", seed)
    summary, rel, series = [], [], []
    for source, unit, cal, test in groups(results.plan, results.tables):
        y, p = test["label"].to_numpy(), test["prob"].to_numpy(float)
        stages = [("before", p)]
        if cal is not None:
            tf = temperature_scale(cal["prob"].to_numpy(float), cal["label"].to_numpy())
            ev = tf.evaluate(p, y).assign(source=source, unit=unit)
            stages.append(("after", tf.apply(p)))
        else:
            ev = pd.DataFrame({"estimand": ["ece"], "estimate": [ece(y, p)], "n": [len(y)],
                               "stage": ["before"], "source": [source], "unit": [unit],
                               "temperature": [float("nan")]})
        for stage, prob in stages:
            series.append((ev, stage, y, prob))
            rel.append(reliability_table(y, prob, n_bins=RELIABILITY_BINS).assign(
                source=source, unit=unit, stage=stage))
        summary.append(ev)
    # every series' interval in one call: series of equal length (each model before and
    # after scaling; every model of a paired design) share the seed's draws, as separate
    # ece_ci calls with that seed would, and pay for the resampling once
    cis = ece_ci_many([(y, prob) for _, _, y, prob in series], n_boot=n_boot, seed=seed)
    for (ev, stage, _, _), (_, ci) in zip(series, cis.iterrows()):
        hit = (ev["estimand"] == "ece") & (ev["stage"] == stage)
        ev.loc[hit, "conf_low"] = float(ci["conf_low"])
        ev.loc[hit, "conf_high"] = float(ci["conf_high"])
    return {"summary": pd.concat(summary, ignore_index=True),
            "reliability": pd.concat(rel, ignore_index=True)}


def wants_repair(plan, tables) -> bool:
    runs = tables.runs
    return (getattr(plan, "crs", None) is not None and runs is not None
            and "ece_after_ts" in runs.columns and runs["ece_after_ts"].notna().any())


@analysis("calibration_repair", wanted=wants_repair)
def calibration_repair(results) -> pd.DataFrame:
    """ECE before and after temperature scaling from the runs table."""
    from ..calibration import calibration_repair as compute

    return compute(results.tables.runs)
