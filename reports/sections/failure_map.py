"""Failure map: sensitivity over a rows x cols grid (default age group x phase), per
model, n in each cell and small cells marked (``stats.failure_map``); subgroups whose
sensitivity collapses against the rest of their axis (``stats.subgroup_vs_rest``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, heatmap
from ..study import level_order
from ..tables import ReportTable
from . import Section, SkipSection
from . import _detection as D

KEY = "failure_map"
TITLE = "Failure map"
HALF = "detection"


def grid(study):
    rows, cols = study.plan.detection.failure_map
    return study.results["failure_map"], rows, cols


def collapse_table(study) -> ReportTable:
    vr = study.results["subgroup_vs_rest"]
    sens = vr[vr["estimand"] == "sensitivity_difference"].reset_index(drop=True)
    spec = vr[vr["estimand"] == "specificity_difference"].reset_index(drop=True)
    keys = ["model", "group_var", "group_level"]
    both = sens.merge(spec[keys + ["estimate", "conf_low", "conf_high", "p_adjusted"]],
                      on=keys, suffixes=("", "_spec"))
    shown = both[both["collapse"].astype(bool)].reset_index(drop=True)
    disp = pd.DataFrame({
        "model": shown["model"].astype(str),
        "cell": [f"{D.axis_label(v)}: {lv}" for v, lv in zip(shown["group_var"], shown["group_level"])],
        "sens": [text.num(x) for x in shown["estimate_subgroup"]],
        "rest": [text.num(x) for x in shown["estimate_rest"]],
        "diff": text.ci_vec(shown),
        "p": [text.pvalue(p) for p in shown["p_adjusted"]],
        "spec_diff": text.ci_vec(shown, est="estimate_spec", low="conf_low_spec",
                                 high="conf_high_spec"),
    })
    return ReportTable(
        name="sensitivity_collapse",
        caption="Subgroups with sensitivity collapse: sensitivity significantly below the rest "
                "of the axis (Holm-adjusted) while specificity is not.",
        data=vr, display=disp, group_col="model",
        labels={"cell": "Subgroup", "sens": "Sensitivity", "rest": "Rest",
                "diff": "Difference [CI]", "p": "Holm p", "spec_diff": "Specificity diff. [CI]"},
        notes=("Difference = subgroup minus the rest of its axis; Newcombe hybrid score "
               "intervals; pooled two-proportion z tests, Holm adjustment per model and metric "
               "over every level of every axis. All cells, with Benjamini-Hochberg p-values, "
               "are in tables/sensitivity_collapse.csv.",))


def applies(study) -> bool:
    return bool(study.plan.detection and study.plan.detection.failure_map)


def build(study) -> Section:
    det = study.plan.detection
    if not det.failure_map:
        raise SkipSection("the plan names no failure_map rows/cols")
    fm, rows, cols = grid(study)
    fm = fm.reset_index(drop=True)
    d = fm.copy()
    d["small"] = (d["n_pos"] < det.small_n)
    d["cell_text"] = [("\u2014" if pd.isna(e) else f"{e:.2f}") + f"\nn={int(n)}" + ("*" if s else "")
                      for e, n, s in zip(d["estimate"], d["n_pos"], d["small"])]
    d[rows] = d["row_level"].astype(str)
    d[cols] = d["col_level"].astype(str)
    order_r = level_order(study.cases[rows])
    order_c = level_order(study.cases[cols])
    d["_r"] = d[rows].map({v: i for i, v in enumerate(order_r)})
    d["_c"] = d[cols].map({v: i for i, v in enumerate(order_c)})
    d = d.sort_values(["_r", "_c"], kind="stable").drop(columns=["_r", "_c"])
    fig = ReportFigure(
        name="failure_map", caption=f"Failure map: sensitivity by {rows.replace('_', ' ')} "
        f"\u00d7 {cols.replace('_', ' ')}, per model; n = reference positives in the cell; "
        f"* and a dashed outline mark cells with fewer than {det.small_n}.",
        alt=f"Heatmap of sensitivity over {rows} and {cols} for each model.",
        plot=heatmap(d, x=cols, y=rows, facet="model", fill_label="Sensitivity"),
        data=d[["model", "row_level", "col_level", "estimate", "conf_low", "conf_high", "n",
                "n_pos", "small"]], width=7.5, height=3.4)
    wide_rows = []
    models = list(pd.unique(study.cases["model"]))
    d["_m"] = d["model"].map({m: i for i, m in enumerate(models)})
    d = d.sort_values("_m", kind="stable").drop(columns="_m")
    for (model, rl), g in d.groupby(["model", rows], sort=False):
        row = {"model": str(model), "level": str(rl)}
        for c, r in zip(g[cols], g.itertuples()):
            row[f"c_{c}"] = (text.ci(r.estimate, r.conf_low, r.conf_high) +
                             f" ({text.frac(r.numerator, r.n_pos)})" +
                             (" \u2020" if r.small else ""))
        wide_rows.append(row)
    disp = pd.DataFrame(wide_rows)
    table = ReportTable(
        name="failure_map", caption=f"Sensitivity [{int(round(det.conf_level * 100))}% CI] "
        f"(TP/P) by {rows.replace('_', ' ')} \u00d7 {cols.replace('_', ' ')}, per model.",
        data=fm, display=disp, group_col="model",
        labels={"level": rows.replace("_", " "), **{f"c_{c}": c for c in order_c}},
        spanners=((cols.replace("_", " "), [f"c_{c}" for c in order_c]),),
        notes=(D.methods_note(det), f"\u2020 fewer than {det.small_n} reference positives."))
    coll = collapse_table(study)
    n_coll = len(coll.display)
    md = (f"@fig-failure-map and @tbl-failure-map show where sensitivity fails across "
          f"{text.md(rows.replace('_', ' '))} and {text.md(cols.replace('_', ' '))}. "
          + (f"@tbl-sensitivity-collapse lists {n_coll} model \u00d7 subgroup cells whose "
             f"sensitivity collapses while specificity holds."
             if n_coll else "No subgroup shows a significant sensitivity collapse "
             "(@tbl-sensitivity-collapse is empty; every comparison is in its CSV)."))
    return Section(KEY, TITLE).add(md, fig, table, coll)
