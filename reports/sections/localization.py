"""Localization: lesion-level analysis from the same masks (``Results['froc']``,
``['froc_curve']``, ``['lesion_metrics']``): FROC curves per model with bands, the CPM
and wAFROC figures of merit, a lesion-size x phase failure map of per-lesion
sensitivity, and scan-level against lesion-level sensitivity per subgroup with the
hidden misses (scans called positive whose tumour was missed). Lays out only."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, heatmap, lines
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "localization"
TITLE = "Localization: lesion-level detection"
HALF = "detection"

RULES = {"iou": "intersection over union", "dice": "Dice overlap"}


def applies(study) -> bool:
    det = study.plan.detection
    return bool(det is not None and det.lesions is not None
                and getattr(study.tables, "lesions", None) is not None)


def hit_sentence(plan) -> str:
    """The hit criterion in words (the methods text and this section)."""
    les = plan.detection.lesions
    if les.hit_rule == "centroid":
        rule = ("its centroid voxel lies inside the reference lesion (the MONAI / "
                "CAMELYON16 rule)")
    else:
        rule = (f"its {RULES[les.hit_rule]} with the reference lesion is at least "
                f"{les.min_overlap:g}")
    return (f"A predicted lesion (a connected component of the model's mask, scored by its "
            f"maximum probability) hits a reference lesion when {rule}; each reference "
            f"lesion is matched at most once, to the highest-scoring prediction that hits "
            f"it (others that hit only matched lesions are duplicates, neither hits nor "
            f"false positives, as in LUNA16 and MONAI's FROC).")


def methods_text(study) -> str:
    """The methods paragraph of the localization analysis."""
    les = study.plan.detection.lesions
    dec = study.results.decisions
    rates = ", ".join(f"{r:g}" for r in les.fp_per_scan)
    boot = (f" Intervals: a patient-cluster bootstrap ({les.n_boot} replicates, seed "
            f"{dec.seeds.lesion_bootstrap}; every lesion and scan of a patient resampled "
            f"together, one draw shared by both models: paired), percentile intervals."
            if les.n_boot else " No bootstrap: point estimates only.")
    return (f"Lesion-level localization (lesions table: one row per reference and predicted "
            f"lesion). " + hit_sentence(study.plan) + f" The FROC gives the lesion "
            f"sensitivity at mean false positives per scan of {rates} (linear "
            f"interpolation of the curve, as MONAI's compute_froc_score); the CPM is their "
            f"mean (LUNA16); the AFROC and wAFROC figures of merit follow RJafroc "
            f"(highest-rated false positive of each normal scan against each lesion's "
            f"rating; equal lesion weights)." + boot + " Per-lesion sensitivity, the "
            f"Dice of detected lesions and false positives per scan are cluster-aware ratio "
            f"estimators over patients; a hidden miss is a scan called positive whose "
            f"reference lesions were all missed, flagged when the lower confidence limit of "
            f"their share of the scan-level true positives exceeds "
            f"{les.hidden_miss_margin:g}.")


def _models(study) -> list:
    return list(pd.unique(study.cases["model"]))


def froc_figure(study) -> ReportFigure:
    import plotnine as p9

    curve = study.results["froc_curve"]
    d = curve[curve["group_var"] == "overall"].reset_index(drop=True)
    f = study.results["froc"]
    pts = f[(f["estimand"] == "lesion_sensitivity") & (f["group_var"] == "overall")]
    p = lines(d, x="fp_per_scan", y="estimate", color="model",
              ribbon=bool(d["conf_low"].notna().any()),
              xlab="Mean false positives per scan (log scale)", ylab="Lesion sensitivity")
    rates = list(study.plan.detection.lesions.fp_per_scan)
    p = (p + p9.geom_point(p9.aes(x="fp_per_scan", y="estimate", color="model"), data=pts,
                           size=2.2, shape="D")
         + p9.scale_x_continuous(trans="log2", breaks=rates,
                                 labels=[f"{r:g}" for r in rates])
         + p9.scale_y_continuous(limits=(0, 1)))
    ends = pts.drop_duplicates("model")
    note = "; ".join(f"{m}: {text.num(x, 3)}" for m, x in zip(ends["model"], ends["max_fp_per_scan"]))
    return ReportFigure(
        name="froc_curves", caption="FROC curves per model: lesion sensitivity against the "
        "mean number of false-positive lesions per scan, with pointwise bootstrap bands; "
        "diamonds mark the rates of the CPM. Beyond a model's last point (every predicted "
        f"lesion counted; mean false positives per scan there: {note}) the curve is flat "
        "(MONAI's convention), flagged extrapolated in the table.",
        alt="FROC curves of lesion sensitivity against false positives per scan for each model.",
        plot=p, data=d[["model", "fp_per_scan", "estimate", "conf_low", "conf_high", "n",
                        "n_pos", "max_fp_per_scan", "flag"]], width=7.0, height=3.6)


def froc_table(study) -> ReportTable:
    f = study.results["froc"]
    ov = f[f["group_var"] == "overall"]
    rates = list(study.plan.detection.lesions.fp_per_scan)
    rows = []
    for m in [*_models(study), *[x for x in pd.unique(ov["model"]) if " - " in str(x)]]:
        g = ov[ov["model"] == m]
        if not len(g):
            continue
        row = {"model": str(m)}
        for r in rates:
            v = g[(g["estimand"] == "lesion_sensitivity") & (g["fp_per_scan"] == r)]
            row[f"s_{r:g}"] = (text.num(v["estimate"].iloc[0])
                               + (" \u2020" if "extrapolated" in v["flag"].iloc[0] else "")
                               if len(v) else text.DASH)
        for e in ("cpm", "wafroc", "afroc"):
            v = g[g["estimand"].isin([e, f"{e}_difference"])]
            row[e] = text.ci(*v[["estimate", "conf_low", "conf_high"]].iloc[0]) if len(v) else text.DASH
        rows.append(row)
    disp = pd.DataFrame(rows)
    return ReportTable(
        name="froc_summary", caption="Lesion sensitivity at mean false positives per scan, "
        "CPM, wAFROC and AFROC per model [95% bootstrap CI]; rows \"A - B\": paired "
        "differences.", data=f, display=disp,
        labels={"model": "Model", **{f"s_{r:g}": f"{r:g}" for r in rates}, "cpm": "CPM [CI]",
                "wafroc": "wAFROC [CI]", "afroc": "AFROC [CI]"},
        spanners=(("Sensitivity at FP per scan", [f"s_{r:g}" for r in rates]),),
        notes=("\u2020 extrapolated: the rate lies beyond the model's curve (every predicted "
               "lesion counted), so the sensitivity is that of its last point. AFROC and "
               "wAFROC coincide when every abnormal scan holds one lesion. Per subgroup: "
               "tables/froc_summary.csv.",), wide=True)


def failure_map(study) -> tuple[ReportFigure, ReportTable]:
    from stats.localization import LESION_SIZE, SIZE_LABELS

    det = study.plan.detection
    cols = det.lesions.map_cols
    lm = study.results["lesion_metrics"]
    var = f"{LESION_SIZE}:{cols}"
    d = lm[(lm["estimand"] == "lesion_sensitivity") & (lm["group_var"] == var)].copy()
    parts = d["group_level"].astype(str).str.split(":", n=1, expand=True)
    d[LESION_SIZE], d[cols] = parts[0], parts[1]
    d["small"] = d["n"] < det.small_n
    d["cell_text"] = [("\u2014" if pd.isna(e) else f"{e:.2f}") + f"\nn={int(n)}" + ("*" if s else "")
                      for e, n, s in zip(d["estimate"], d["n"], d["small"])]
    order_c = D.ordered_levels(study, (cols,))
    d["_r"] = d[LESION_SIZE].map({v: i for i, v in enumerate(SIZE_LABELS)})
    d["_c"] = d[cols].map({v: i for i, v in enumerate(order_c)}).fillna(len(order_c))
    models = _models(study)
    d["_m"] = d["model"].map({m: i for i, m in enumerate(models)})
    d = d.sort_values(["_m", "_r", "_c"], kind="stable").drop(columns=["_r", "_c", "_m"])
    lbl = cols.replace("_", " ")
    fig = ReportFigure(
        name="lesion_failure_map", caption=f"Per-lesion sensitivity by lesion size \u00d7 "
        f"{lbl}, per model; n = reference lesions in the cell; * and a dashed outline mark "
        f"cells with fewer than {det.small_n}.",
        alt=f"Heatmap of per-lesion sensitivity over lesion size and {lbl} for each model.",
        plot=heatmap(d, x=cols, y=LESION_SIZE, facet="model", fill_label="Lesion sensitivity"),
        data=d[["model", LESION_SIZE, cols, "estimate", "conf_low", "conf_high", "n",
                "numerator", "small"]], width=7.5, height=3.6)
    rows = []
    for (model, size), g in d.groupby(["model", LESION_SIZE], sort=False):
        row = {"model": str(model), "level": str(size)}
        for r in g.itertuples():
            row[f"c_{getattr(r, cols)}"] = (text.ci(r.estimate, r.conf_low, r.conf_high)
                                            + f" ({text.frac(r.numerator, r.n)})"
                                            + (" \u2020" if r.small else ""))
        rows.append(row)
    shown = [c for c in order_c if f"c_{c}" in pd.DataFrame(rows).columns]
    table = ReportTable(
        name="lesion_failure_map", caption=f"Per-lesion sensitivity [CI] (found/lesions) by "
        f"lesion size \u00d7 {lbl}, per model.", data=d, display=pd.DataFrame(rows),
        group_col="model", labels={"level": "lesion size", **{f"c_{c}": c for c in shown}},
        spanners=((lbl, [f"c_{c}" for c in shown]),),
        notes=("Lesion size: the diameter of the sphere of the reference lesion's volume. "
               "Wilson intervals at the effective sample size of the patient clusters. "
               f"\u2020 fewer than {det.small_n} reference lesions.",))
    return fig, table


def scan_vs_lesion(study) -> ReportTable:
    from analysis.localization import case_axes

    lm = study.results["lesion_metrics"]
    keys = ["model", "group_var", "group_level"]
    wide = None
    for e in ("scan_sensitivity", "lesion_sensitivity", "hidden_miss", "fp_per_scan",
              "lesion_dice"):
        part = lm[lm["estimand"] == e][keys + ["estimate", "conf_low", "conf_high", "numerator",
                                                "denominator", "flag"]]
        part = part.rename(columns={c: f"{e}__{c}" for c in part.columns if c not in keys})
        wide = part if wide is None else wide.merge(part, on=keys, how="left")
    axes = ["overall", *[":".join(a) for a in case_axes(study.plan)]]
    wide = wide[wide["group_var"].isin(axes)].copy()
    parts = []
    for a in axes:
        sub = wide[wide["group_var"] == a]
        parts.append(sub if a == "overall" else D.sort_cells(sub, study, tuple(a.split(":"))))
    wide = pd.concat(parts, ignore_index=True)
    models = _models(study)
    wide["_m"] = wide["model"].map({m: i for i, m in enumerate(models)})
    wide = wide.sort_values("_m", kind="stable").drop(columns="_m").reset_index(drop=True)

    def cell(e, r):
        return text.ci(r[f"{e}__estimate"], r[f"{e}__conf_low"], r[f"{e}__conf_high"])

    rows = []
    for _, r in wide.iterrows():
        gap = "localization_gap" in str(r["hidden_miss__flag"])
        rows.append({
            "model": str(r["model"]),
            "cell": "Overall" if r["group_var"] == "overall"
            else f"{D.axis_label(r['group_var'])}: {r['group_level']}",
            "scan": cell("scan_sensitivity", r),
            "lesion": cell("lesion_sensitivity", r),
            "hidden": text.frac(r["hidden_miss__numerator"], r["hidden_miss__denominator"])
            + (" \u2021" if gap else ""),
            "fp": text.num(r["fp_per_scan__estimate"]),
            "dice": text.num(r["lesion_dice__estimate"]),
        })
    disp = pd.DataFrame(rows)
    det = study.plan.detection
    return ReportTable(
        name="localization_vs_scan", caption="Scan-level against lesion-level sensitivity "
        "per subgroup [CI], with the hidden misses: scans called positive whose tumour was "
        "missed (of the scans called positive among the positives).",
        data=lm, display=disp, group_col="model",
        labels={"cell": "Subgroup", "scan": "Scan-level sens. [CI]",
                "lesion": "Lesion-level sens. [CI]", "hidden": "Hidden misses",
                "fp": "FP lesions / scan", "dice": "Dice (detected)"},
        notes=("Scan-level: the scan called positive at the operating threshold; "
               "lesion-level: the reference lesion hit by a predicted lesion (every "
               "component of the mask, whatever the scan-level call), so a small tumour "
               "found below the scan-level threshold counts here and not there. "
               f"\u2021 flagged localization_gap: the lower confidence limit of the hidden "
               f"misses' share exceeds {det.lesions.hidden_miss_margin:g}. Every row, with "
               "intervals of each quantity, is in tables/localization_vs_scan.csv.",))


def build(study) -> Section:
    fig = froc_figure(study)
    tab = froc_table(study)
    fmap, ftab = failure_map(study)
    comp = scan_vs_lesion(study)
    lm = study.results["lesion_metrics"]
    hm = lm[(lm["estimand"] == "hidden_miss") & (lm["group_var"] == "overall")]
    said = "; ".join(f"{text.md(m)}: {text.frac(k, n)}" for m, k, n in
                     zip(hm["model"], hm["numerator"], hm["denominator"]))
    flagged = lm[(lm["estimand"] == "hidden_miss")
                 & lm["flag"].astype(str).str.contains("localization_gap")]
    md = (hit_sentence(study.plan) + " @fig-froc-curves and @tbl-froc-summary give each "
          "model's lesion sensitivity against false positives per scan. "
          "@fig-lesion-failure-map and @tbl-lesion-failure-map show where lesions are "
          "missed by size and " + text.md(study.plan.detection.lesions.map_cols.replace("_", " "))
          + ". @tbl-localization-vs-scan sets scan-level against lesion-level sensitivity: "
          f"scans counted as detected whose tumour was missed (hidden misses) number {said}"
          + (f"; {len(flagged)} model \u00d7 subgroup cells are flagged." if len(flagged)
             else "; no cell is flagged."))
    return Section(KEY, TITLE).add(md, fig, tab, fmap, ftab, comp)
