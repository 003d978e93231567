"""Subgroup tables (one per plan axis and intersection): sensitivity and specificity with
CIs and n per level, per model; small cells marked. Numbers from ``stats.subgroup_metrics``
(or ``stats.confusion_counts`` + ``stats.proportion_ci``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "subgroups"
TITLE = "Subgroup accuracy"
HALF = "detection"


def axis_table(study, axis: tuple[str, ...]) -> ReportTable:
    det = study.plan.detection
    m = D.metrics(study)
    name = D.axis_name(axis)
    data = m[(m["group_var"] == name) & m["estimand"].isin(["sensitivity", "specificity"])]
    data = D.sort_cells(data.reset_index(drop=True), study, axis)
    w = D.sort_cells(D.wide(data), study, axis)
    c = D.counts(study)
    c = c[c["group_var"] == name].set_index(["model", "group_level"])
    tp = [c.loc[(mm, lv), "tp"] if (mm, lv) in c.index else float("nan")
          for mm, lv in zip(w["model"], w["group_level"])]
    tn = [c.loc[(mm, lv), "tn"] if (mm, lv) in c.index else float("nan")
          for mm, lv in zip(w["model"], w["group_level"])]
    disp = pd.DataFrame({
        "model": w["model"].astype(str),
        "level": [str(lv).replace(":", " \u00d7 ") + D.small_mark(npos, det.small_n)
                  for lv, npos in zip(w["group_level"], w["n_pos"])],
        "n": w["n"].map(text.count),
        "sens": text.ci_vec(w, est="sensitivity_estimate", low="sensitivity_conf_low",
                            high="sensitivity_conf_high"),
        "sens_n": [text.frac(a, b) for a, b in zip(tp, w["n_pos"])],
        "spec": text.ci_vec(w, est="specificity_estimate", low="specificity_conf_low",
                            high="specificity_conf_high"),
        "spec_n": [text.frac(a, b) for a, b in zip(tn, w["n_neg"])]})
    label = D.axis_label(axis)
    return ReportTable(
        name=f"subgroup_{text.slug(name.replace(':', '_x_'))}",
        caption=f"Sensitivity and specificity by {label}, per model, estimate "
                f"[{int(round(det.conf_level * 100))}% CI].",
        data=D.with_counts(study, data), display=disp, group_col="model",
        labels={"level": label[:1].upper() + label[1:], "n": "n", "sens": "Sensitivity",
                "sens_n": "TP/P", "spec": "Specificity", "spec_n": "TN/N"},
        spanners=(("Reference positive", ["sens", "sens_n"]),
                  ("Reference negative", ["spec", "spec_n"])),
        notes=(D.methods_note(det),
               f"\u2020 fewer than {det.small_n} reference positives in the cell (small n); "
               "\u2014 not estimable (no cases)."))


def build(study) -> Section:
    det = study.plan.detection
    sec = Section(KEY, TITLE)
    tables = [axis_table(study, axis) for axis in det.subgroups]
    refs = ", ".join(f"@{t.id}" for t in tables)
    sec.add(f"Subgroup axes were prespecified in the plan: "
            f"{text.md(text.human_list(D.axis_label(a) for a in det.subgroups))} ({refs}). "
            f"Every level is shown, empty cells included, with its counts.")
    for t in tables:
        sec.add(t)
    return sec
