"""Subgroup gaps: each model's gap between its best and worst level of every prespecified
subgroup axis (``Results['subgroup_gaps']``, ``stats.compare_models(gaps=True)``:
fairlearn's ``MetricFrame.difference()``, with the paired cluster-bootstrap interval that
fairlearn lacks)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "subgroup_gaps"
TITLE = "Subgroup gaps"
HALF = "detection"
METRIC = {"sensitivity_gap": "Sensitivity", "specificity_gap": "Specificity",
          "ppv_gap": "PPV", "npv_gap": "NPV", "accuracy_gap": "Accuracy", "f1_gap": "F1"}


def applies(study) -> bool:
    det = study.plan.detection
    return bool(det.subgroup_gaps) and bool(det.subgroups)


def methods_sentence(study) -> str:
    """How the gaps were estimated (methods section and the section's text)."""
    det = study.plan.detection
    cluster = study.results.decisions.detection.cluster
    return ("**Subgroup gaps.** For " + text.human_list(det.subgroup_gaps) + ", each "
            "model's gap between its best and worst level of every prespecified subgroup axis "
            "(the largest minus the smallest value, as fairlearn's difference(); the Missing "
            "and not applicable levels left out), with the percentile interval of the same "
            f"gap in {det.bootstrap.n_boot} replicates of the paired cluster bootstrap ("
            + (f"{text.md(cluster)} clusters" if cluster else "scans") + " resampled, seed "
            f"{study.plan.seed_for('detection_bootstrap')}; in each replicate whichever "
            "levels are then best and worst). A gap is never below zero: where the levels "
            "truly differ the interval covers at its level in simulation, but where they do "
            "not it lies above the true gap of zero (bench/compare_coverage.md), so the gap "
            "describes the sample and is no test of a difference (the heterogeneity tests "
            "are).")


def build(study) -> Section:
    g = study.results["subgroup_gaps"]
    g = g[g["estimand"].isin(list(METRIC))]
    digits = 3
    disp = pd.DataFrame({
        "metric": g["estimand"].map(METRIC).to_numpy(),
        "model": g["model"].astype(str).to_numpy(),
        "axis": [D.axis_label(v) for v in g["group_var"]],
        "best": [text.DASH if not b else f"{text.md(b)} ({text.num(e, digits)})"
                 for b, e in zip(g["level_best"], g["estimate_best"])],
        "worst": [text.DASH if not w else f"{text.md(w)} ({text.num(e, digits)})"
                  for w, e in zip(g["level_worst"], g["estimate_worst"])],
        "gap": text.ci_vec(g, digits)})
    det = study.plan.detection
    table = ReportTable(
        name="gaps_best_worst",
        caption="Each model's gap between its best and worst level of each prespecified "
                f"subgroup axis, estimate [{int(round(det.conf_level * 100))}% paired "
                "cluster-bootstrap percentile CI].",
        data=g, display=disp, group_col="metric",
        labels={"model": "Model", "axis": "Axis", "best": "Best level (value)",
                "worst": "Worst level (value)", "gap": "Gap [CI]"},
        notes=("The interval is that of the gap itself (best minus worst in each replicate, "
               "whichever levels are then best and worst); a gap is never below zero.",))
    md = ("@tbl-gaps-best-worst gives, per model and prespecified axis, how far apart its best "
          "and worst subgroups are. " + methods_sentence(study).replace(
              "**Subgroup gaps.** ", ""))
    return Section(KEY, TITLE).add(md, table)
