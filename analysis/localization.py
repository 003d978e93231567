"""Lesion-level localization analyses: the FROC (lesion sensitivity at mean false
positives per scan, CPM, AFROC / wAFROC, paired patient-cluster bootstrap), the FROC
curve for the figure, and the per-lesion metrics (sensitivity by lesion size, location
and case subgroup; false positives per scan; Dice of detected lesions; scan-level
sensitivity and hidden misses beside them).

The rows are the detection evaluation's (the test split): lesions of other cases are
left out and counted (decision ``localization.lesions``). The hit rule is the plan's
``detection.lesions.hit_rule``; a lesions table that states its own must agree (checked
when the inputs are read).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .core import analysis
from .detection import closed_form_ci

#: the FROC curve of the figure: 37 rates from 1/64 to 8, evenly spaced on a log2 scale
#: (below the CPM rates too: where the curve of masks thresholded at 0.5 ends)
CURVE_RATES = tuple(float(x) for x in 2.0 ** np.linspace(-6, 3, 37))


def _wants(plan, tables) -> bool:
    det = getattr(plan, "detection", None)
    return (det is not None and det.lesions is not None and tables.cases is not None
            and tables.lesions is not None)


def case_axes(plan) -> list[tuple[str, ...]]:
    """The case axes of the lesion tables: ``detection.lesions.subgroups``, else the
    single-column axes of ``detection.subgroups``."""
    det = plan.detection
    return list(det.lesions.subgroups) or [a for a in det.subgroups if len(a) == 1]


def lesion_axes(plan) -> list:
    """Every axis of the per-lesion rows: the case axes, the lesion's size and location,
    and the lesion-size x ``map_cols`` failure map."""
    from stats.localization import LESION_LOCATION, LESION_SIZE

    return [*case_axes(plan), (LESION_SIZE,), (LESION_LOCATION,),
            (LESION_SIZE, plan.detection.lesions.map_cols)]


@analysis("lesion_rows", wanted=_wants)
def lesion_rows(results) -> pd.DataFrame:
    """The lesions of the evaluated cases (and models); the others are counted as left
    out (decision ``localization.lesions``)."""
    ev = results["evaluation"]
    les = results.tables.lesions
    key = les["model"].astype(str) + "\x1f" + les["case_id"].astype(str)
    have = set(ev["model"].astype(str) + "\x1f" + ev["case_id"].astype(str))
    keep = key.isin(have).to_numpy()
    out = les[keep].reset_index(drop=True)
    ref = out["kind"] == "reference"
    results.decide("localization.lesions", {
        "reference lesions analysed": int(ref.sum()),
        "predicted lesions analysed": int((~ref).sum()),
        "rows of cases not evaluated (left out)": int((~keep).sum())})
    rule = pd.unique(les["hit_rule"].dropna().astype(str)) if "hit_rule" in les else []
    det = results.plan.detection.lesions
    results.decide("localization.hit_rule", det.rule_text + (
        " (the plan's, as the lesions table states)" if len(rule) else
        " (the plan's; the lesions table states none)"))
    results.decide("localization.axes", [":".join(a) for a in case_axes(results.plan)])
    return out


def _boot(results) -> dict:
    det = results.plan.detection.lesions
    if not det.n_boot:
        return {}
    seed = results.plan.seed_for("lesion_bootstrap")
    results.decide("seeds.lesion_bootstrap", seed)
    results.decide("localization.bootstrap.n_boot", det.n_boot)
    return {"n_boot": det.n_boot, "seed": seed}


@analysis("froc", wanted=_wants)
def froc(results) -> pd.DataFrame:
    """Lesion sensitivity at the plan's false-positive rates, CPM, AFROC and wAFROC per
    model, overall and per case axis (``stats.froc``; paired patient-cluster bootstrap)."""
    from stats.localization import froc as compute

    det = results.plan.detection
    return compute(results["lesion_rows"], results["evaluation"],
                   fp_per_scan=det.lesions.fp_per_scan, by=case_axes(results.plan),
                   conf_level=det.conf_level, cluster=results["cluster"], **_boot(results))


@analysis("froc_curve", wanted=_wants)
def froc_curve(results) -> pd.DataFrame:
    """The FROC curve per model (overall) at ``CURVE_RATES``, with pointwise bands from
    the same replicates' seed (``stats.froc``): the figure's data."""
    from stats.localization import froc as compute

    det = results.plan.detection
    out = compute(results["lesion_rows"], results["evaluation"], fp_per_scan=CURVE_RATES,
                  conf_level=det.conf_level, cluster=results["cluster"], **_boot(results))
    return out[out["estimand"] == "lesion_sensitivity"].reset_index(drop=True)


@analysis("lesion_metrics", wanted=_wants)
def lesion_metrics(results) -> pd.DataFrame:
    """Per-lesion sensitivity and Dice by lesion size, location, the case axes and
    lesion size x ``map_cols``; scan-level sensitivity, hidden misses and false positives
    per scan by the case axes (``stats.lesion_metrics``)."""
    from stats.localization import lesion_metrics as compute

    det = results.plan.detection
    return compute(results["lesion_rows"], results["evaluation"], by=lesion_axes(results.plan),
                   ci=closed_form_ci(results), conf_level=det.conf_level, small_n=det.small_n,
                   hidden_miss_margin=det.lesions.hidden_miss_margin,
                   cluster=results["cluster"])
