"""Forest plot: subgroup sensitivity with CIs per model, the overall sensitivity as a
dashed line; small cells drawn open. Same numbers as the subgroup tables."""
from __future__ import annotations

import pandas as pd

from ..figures import ReportFigure, forest_plot
from . import Section
from . import _detection as D

KEY = "forest"
TITLE = "Forest plots"
HALF = "detection"


def figure(study, estimand: str, axes) -> ReportFigure:
    det = study.plan.detection
    m = D.metrics(study)
    m = m[m["estimand"] == estimand]
    parts = []
    for axis in axes:
        name = D.axis_name(axis)
        part = D.sort_cells(m[m["group_var"] == name].reset_index(drop=True), study, axis)
        part["label"] = D.axis_label(axis) + ": " + part["group_level"].astype(str)
        parts.append(part)
    d = pd.concat(parts, ignore_index=True)
    d = d[d["estimate"].notna()].reset_index(drop=True)  # empty cells: in the tables, not drawn
    denom = "n_pos" if estimand == "sensitivity" else "n_neg"
    d["small"] = d[denom] < det.small_n
    overall = m[m["group_var"] == "overall"]
    data = d[["model", "group_var", "group_level", "label", "estimate", "conf_low", "conf_high",
              "n", denom, "small"]]
    n_rows = d["label"].nunique()
    return ReportFigure(
        name=f"forest_{estimand}",
        caption=f"Subgroup {estimand} with {int(round(det.conf_level * 100))}% confidence "
                f"intervals, per model; the dashed line is the model's overall {estimand}; "
                f"open circles mark cells with fewer than {det.small_n} "
                f"{'positives' if estimand == 'sensitivity' else 'negatives'}.",
        alt=f"Forest plot of {estimand} by subgroup for each model.",
        plot=forest_plot(d, overall=overall, xlab=estimand.capitalize()),
        data=data, width=7.5, height=min(1.2 + 0.16 * n_rows, 9.5))


def build(study) -> Section:
    det = study.plan.detection
    single = [a for a in det.subgroups if len(a) == 1]
    if not single:
        single = list(det.subgroups)
    figs = [figure(study, "sensitivity", single), figure(study, "specificity", single)]
    md = (f"@fig-forest-sensitivity shows where sensitivity departs from each model's overall "
          f"value; @fig-forest-specificity shows specificity on the same subgroups. A subgroup "
          f"whose sensitivity falls while its specificity holds points to failures driven by "
          f"false negatives.")

    return Section(KEY, TITLE).add(md, *figs)
