"""Failure map: sensitivity over a rows x cols grid (default age group x phase), per
model, n in each cell and small cells marked (``stats.failure_map``); subgroups whose
sensitivity collapses against the rest of their axis (``stats.subgroup_vs_rest``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, heatmap
from ..study import level_order, model_order
from ..tables import ReportTable
from . import Section, SkipSection
from . import _detection as D

KEY = "failure_map"
TITLE = "Failure map"
HALF = "detection"


def grid(study):
    fmap = study.plan.detection.failure_map
    rows, cols = fmap.rows, fmap.cols
    return study.results["failure_map"], rows, cols


def collapse_table(study) -> ReportTable:
    vr = study.results["subgroup_vs_rest"]
    sens = vr[vr["estimand"] == "sensitivity_difference"].reset_index(drop=True)
    spec = vr[vr["estimand"] == "specificity_difference"].reset_index(drop=True)
    keys = ["model", "group_var", "group_level"]
    both = sens.merge(spec[keys + ["estimate", "conf_low", "conf_high", "p_adjusted"]],
                      on=keys, suffixes=("", "_spec"))
    shown = both[both["collapse"].astype(bool)].reset_index(drop=True)
    # the family the analysis layer adjusted (exploratory: raw p-values, said so)
    holm = study.results.decisions.get("sensitivity_collapse.multiplicity", "holm") == "holm"
    pooled = None
    cluster = study.results.decisions.detection.cluster
    if study.plan.detection.failure_map.pooled:
        pa = study.results["pooled_axes"][keys + ["estimate", "conf_low", "conf_high"]]
        shown = shown.merge(pa.rename(columns={"estimate": "pooled", "conf_low": "pooled_low",
                                               "conf_high": "pooled_high"}),
                            on=keys, how="left")
        # a collapse survives pooling when the pooled interval stays below the rest
        shown["survives_pooling"] = shown["pooled_high"] < shown["estimate_rest"]
        pooled = {"pooled": text.ci_vec(shown, est="pooled", low="pooled_low",
                                        high="pooled_high"),
                  "survives": shown["survives_pooling"].map({True: "yes", False: "no"})}
    disp = pd.DataFrame({
        "model": shown["model"].astype(str),
        "cell": [f"{D.axis_label(v)}: {lv}" for v, lv in zip(shown["group_var"], shown["group_level"])],
        "sens": [text.num(x) for x in shown["estimate_subgroup"]],
        "rest": [text.num(x) for x in shown["estimate_rest"]],
        "diff": text.ci_vec(shown),
        "p": [text.pvalue(p) for p in (shown["p_adjusted"] if holm else shown["p_value"])],
        "spec_diff": text.ci_vec(shown, est="estimate_spec", low="conf_low_spec",
                                 high="conf_high_spec"),
        **(pooled or {}),
    })
    return ReportTable(
        name="sensitivity_collapse",
        caption="Subgroups with sensitivity collapse: sensitivity significantly below the rest "
                f"of the axis ({'Holm-adjusted' if holm else 'unadjusted p-values'}) while "
                "specificity is not.",
        data=vr, display=disp, group_col="model",
        labels={"cell": "Subgroup", "sens": "Sensitivity", "rest": "Rest",
                "diff": "Difference [CI]", "p": "Holm p" if holm else "p",
                "spec_diff": "Specificity diff. [CI]",
                "pooled": "Pooled sens. [CI]", "survives": "Survives pooling"},
        notes=("Difference = subgroup minus the rest of its axis; Newcombe hybrid score "
               "intervals; pooled two-proportion z tests"
               + (f", each side at its effective counts (scans clustered within "
                  f"{cluster}: Korn & Graubard design effects)" if cluster else "")
               + (", Holm adjustment per model and metric over every level of every "
                  "single-variable axis of the plan, Missing levels included. "
                  "All cells, with Benjamini-Hochberg p-values, are in "
                  "tables/sensitivity_collapse.csv." if holm else
                  "; exploratory (the plan's roles): p-values not adjusted for multiplicity. "
                  "All cells are in tables/sensitivity_collapse.csv.")
               + (" Pooled: partially pooled sensitivity (binomial GLMM, a random intercept "
                  "per level; results/pooled_axes.csv); a collapse survives pooling when the "
                  "pooled interval stays below the rest's sensitivity." if pooled else ""),))


def _height(d: pd.DataFrame, rows: str) -> float:
    """Figure height: rows of panels (``figures.panels_per_row``) of about 0.45 in per
    tile row, plus axis labels and the colour bar; at most 9.5 in."""
    from ..figures import panels_per_row

    n = d["model"].nunique()
    lines = -(-n // panels_per_row(n))
    return min(9.5, 1.9 + lines * (0.45 * d[rows].nunique() + 0.35))


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
        plot=heatmap(d, x=cols, y=rows, facet="model", fill_label="Sensitivity",
                     facet_order=model_order(study)),
        data=d[["model", "row_level", "col_level", "estimate", "conf_low", "conf_high", "n",
                "n_pos", "small"]], width=7.5, height=_height(d, rows))
    wide_rows = []
    models = model_order(study)
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
        notes=(D.methods_note(study), f"\u2020 fewer than {det.small_n} reference positives."))
    pooled_tbl = pooled_table(study, rows, cols, order_r, order_c, models) if det.failure_map.pooled else None
    coll = collapse_table(study)
    n_coll = len(coll.display)
    md = (f"@fig-failure-map and @tbl-failure-map show where sensitivity fails across "
          f"{text.md(rows.replace('_', ' '))} and {text.md(cols.replace('_', ' '))}. "
          + (f"@tbl-sensitivity-collapse lists {n_coll} model \u00d7 subgroup cells whose "
             f"sensitivity collapses while specificity holds."
             if n_coll else "No subgroup shows a significant sensitivity collapse "
             "(@tbl-sensitivity-collapse is empty; every comparison is in its CSV).")
          + (" @tbl-failure-map-pooled puts partially pooled cell estimates beside the crude "
             "ones: a cell with few positives borrows strength from its row and column, so a "
             "1.00 or 0.00 from two scans is no longer read as a collapse." if pooled_tbl
             else ""))
    return Section(KEY, TITLE).add(md, fig, table, pooled_tbl, coll)


def pooled_table(study, rows, cols, order_r, order_c, models) -> ReportTable:
    """Crude and partially pooled sensitivity per failure-map cell, side by side
    (``Results['pooled_failure_map']``)."""
    det = study.plan.detection
    pf = study.results["pooled_failure_map"]
    parts = pf["group_level"].astype(str).str.split(":", n=1, expand=True)
    pf = pf.assign(row_level=parts[0], col_level=parts[1])
    pf["_r"] = pf["row_level"].map({v: i for i, v in enumerate(order_r)})
    pf["_m"] = pf["model"].map({m: i for i, m in enumerate(models)})
    pf = pf.sort_values(["_m", "_r"], kind="stable")
    out = []
    for (model, rl), g in pf.groupby(["model", "row_level"], sort=False):
        row = {"model": str(model), "level": str(rl)}
        for r in g.itertuples():
            row[f"c_{r.col_level}"] = (text.ci(r.estimate, r.conf_low, r.conf_high)
                                  + f" (crude {text.num(r.crude_estimate)}, "
                                  f"{text.frac(r.numerator, r.denominator)})"
                                  + (" \u2020" if r.n_pos < det.small_n else ""))
        out.append(row)
    return ReportTable(
        name="failure_map_pooled", caption=f"Partially pooled sensitivity [{int(round(det.conf_level * 100))}% "
        f"CI] by {rows.replace('_', ' ')} \u00d7 {cols.replace('_', ' ')}, with the crude "
        f"estimate and TP/P, per model. Exploratory.", data=pf.drop(columns=["_r", "_m"]),
        display=pd.DataFrame(out), group_col="model",
        labels={"level": rows.replace("_", " "), **{f"c_{c}": c for c in order_c}},
        spanners=((cols.replace("_", " "), [f"c_{c}" for c in order_c]),),
        notes=("Binomial GLMM with the row and column main effects fixed and a random "
               "intercept per cell (as lme4's predict), the cell SD integrated out for the "
               "interval; repeated scans of a patient by design-effect inflation. "
               f"\u2020 fewer than {det.small_n} reference positives.",))
