"""Calibration: reliability diagrams before and after temperature scaling, fitted on the
validation (calibration) split and evaluated on the test split (``stats.temperature_scale``,
``stats.reliability_table``). Sources: the detection models' ``max_prob`` in the cases
table, and per-case probe probabilities (``inputs.probe_predictions``, clean runs at label
fraction 1) when given."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import PALETTE, ReportFigure, theme
from ..tables import ReportTable
from . import Section, SkipSection, missing_stats

KEY = "calibration"
TITLE = "Calibration"
HALF = "any"
REQUIRES = ("temperature_scale", "reliability_table")
N_BINS = 10
ECE_BOOT = 1000  # case-bootstrap replicates for the ECE intervals
CAL_SPLITS = ("validation", "calibration")


def _groups(study):
    """(source, unit, calibration frame, test frame) with columns label, prob."""
    out = []
    c = study.cases
    if c is not None and {"max_prob", "split"} <= set(c.columns):
        for model, g in c.groupby("model", sort=False):
            cal, test = g[g["split"].isin(CAL_SPLITS)], g[g["split"] == "test"]
            if len(cal) and len(test):
                out.append(("detection model", str(model),
                            cal[["label", "max_prob"]].rename(columns={"max_prob": "prob"}),
                            test[["label", "max_prob"]].rename(columns={"max_prob": "prob"})))
    pp = study.probe_predictions
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


def _repair_runs(study):
    runs = study.runs
    if study.plan.crs is None or runs is None or "ece_after_ts" not in runs.columns:
        return None
    if runs["ece_after_ts"].notna().sum() == 0:
        return None
    return runs


def applies(study) -> bool:
    return bool(_groups(study)) or _repair_runs(study) is not None


def build(study) -> Section:
    sec = Section(KEY, TITLE)
    blocks = []
    if _groups(study):
        blocks += _probabilities(study)
    if _repair_runs(study) is not None and not missing_stats(("calibration_repair",)):
        blocks += _repair(study)
    if not blocks:
        raise SkipSection("no probabilities with a validation/calibration and a test split, and "
                          "no ece_after_ts in the runs table")
    return sec.add(*blocks)


def _repair(study) -> list:
    import stats

    rep = stats.calibration_repair(_repair_runs(study))
    ov = rep[rep["dataset"] == "overall"]
    w = ov.pivot_table(index=["regime", "encoder"], columns="estimand", values="estimate",
                       sort=False).reset_index()
    w = w.sort_values(["regime", "ece_before"], kind="stable").reset_index(drop=True)
    multi = w["regime"].nunique() > 1
    disp = pd.DataFrame({
        "encoder": w["encoder"].astype(str) + (" (" + w["regime"].astype(str) + ")" if multi else ""),
        "before": [text.num(x, 3) for x in w["ece_before"]],
        "after": [text.num(x, 3) for x in w["ece_after"]],
        "reduction": [text.num(x) for x in w["relative_reduction"]]})
    table = ReportTable(
        name="calibration_repair", caption="Encoder probes: ECE before and after temperature "
        "scaling (clean runs, label fraction 1; seed means, averaged over datasets).",
        data=rep, display=disp,
        labels={"encoder": "Encoder", "before": "ECE before", "after": "ECE after",
                "reduction": "Relative reduction (1 \u2212 after/before)"},
        notes=("From the runs table's ece and ece_after_ts columns; per-dataset values are in "
               "tables/calibration_repair.csv.",))
    return ["@tbl-calibration-repair shows how much of each encoder's miscalibration "
            "temperature scaling removes; the CRS calibration axis uses the ECE before "
            "scaling.", table]


def _probabilities(study) -> list:
    import plotnine as p9
    import stats

    groups = _groups(study)
    det = study.plan.detection
    seed = det.bootstrap_seed if det is not None and det.bootstrap_seed is not None else 0
    summary, rel = [], []
    for source, unit, cal, test in groups:
        y, p = test["label"].to_numpy(), test["prob"].to_numpy(float)
        stages = [("before", p)]
        if cal is not None:
            tf = stats.temperature_scale(cal["prob"].to_numpy(float), cal["label"].to_numpy())
            ev = tf.evaluate(p, y).assign(source=source, unit=unit)
            stages.append(("after", tf.apply(p)))
        else:
            ev = pd.DataFrame({"estimand": ["ece"], "estimate": [stats.ece(y, p)], "n": [len(y)],
                               "stage": ["before"], "source": [source], "unit": [unit],
                               "temperature": [float("nan")]})
        for stage, prob in stages:  # bootstrap intervals for the ECE rows
            ci = stats.ece_ci(y, prob, n_boot=ECE_BOOT, seed=seed)
            hit = (ev["estimand"] == "ece") & (ev["stage"] == stage)
            ev.loc[hit, "conf_low"] = float(ci["conf_low"].iloc[0])
            ev.loc[hit, "conf_high"] = float(ci["conf_high"].iloc[0])
        summary.append(ev)
        for stage, prob in stages:
            rt = stats.reliability_table(y, prob, n_bins=N_BINS)
            rel.append(rt.assign(source=source, unit=unit, stage=stage))
    summ = pd.concat(summary, ignore_index=True)
    rel = pd.concat(rel, ignore_index=True)
    rows = []
    for (source, unit), g in summ.groupby(["source", "unit"], sort=False):
        row = {"source": source, "unit": unit,
               "temperature": text.num(g["temperature"].iloc[0], 3)
               if "temperature" in g and g["temperature"].notna().any() else text.DASH}
        for e in ("ece", "brier", "nll"):
            for stage in ("before", "after"):
                v = g[(g["estimand"] == e) & (g["stage"] == stage)]
                if not len(v):
                    row[f"{e}_{stage}"] = text.DASH
                elif e == "ece" and "conf_low" in v:
                    r = v.iloc[0]
                    row[f"{e}_{stage}"] = text.ci(r["estimate"], r["conf_low"], r["conf_high"], 3)
                else:
                    row[f"{e}_{stage}"] = text.num(v["estimate"].iloc[0], 3)
        rows.append(row)
    disp = pd.DataFrame(rows)
    table = ReportTable(
        name="calibration_summary", caption="Calibration on the test split before and after "
        "temperature scaling fitted on the validation split.", data=summ, display=disp,
        group_col="source",
        labels={"unit": "Model", "temperature": "Temperature", "ece_before": "before",
                "ece_after": "after", "brier_before": "before", "brier_after": "after",
                "nll_before": "before", "nll_after": "after"},
        spanners=(("ECE (15 bins) [95% CI]", ["ece_before", "ece_after"]),
                  ("Brier", ["brier_before", "brier_after"]), ("NLL", ["nll_before", "nll_after"])),
        notes=("Temperature T minimises the validation negative log-likelihood of "
               "sigmoid(logit(p) / T); ECE with 15 equal-width bins and a case-bootstrap "
               f"percentile interval ({ECE_BOOT} replicates). The reliability diagram "
               f"uses {N_BINS} equal-width bins (tables/fig_reliability.csv). Encoder probes: "
               "held-out predictions of the clean runs at label fraction 1, pooled over seeds; "
               "without a calibration split no temperature is fitted (\u2014).",))
    d = rel[rel["n"] > 0].copy()
    n_units = d["unit"].nunique()
    d["unit"] = pd.Categorical(d["unit"], categories=list(dict.fromkeys(d["unit"])))
    d["stage"] = pd.Categorical(d["stage"].map({"before": "before scaling",
                                                "after": "after scaling"}),
                                categories=["before scaling", "after scaling"])
    plot = (p9.ggplot(d, p9.aes("mean_confidence", "estimate", color="stage"))
            + p9.geom_abline(slope=1, intercept=0, linetype="dashed", color="#8d96a3")
            + p9.geom_errorbar(p9.aes(ymin="conf_low", ymax="conf_high"), width=0.02)
            + p9.geom_line() + p9.geom_point(p9.aes(size="n"))
            + p9.scale_size_continuous(range=(0.8, 3), name="cases in bin")
            + p9.scale_color_manual(values=PALETTE[:2], name="")
            + p9.facet_wrap("~unit", ncol=min(4, n_units))
            + p9.scale_x_continuous(breaks=[0, 0.5, 1], labels=["0", "0.5", "1"])
            + p9.scale_y_continuous(breaks=[0, 0.5, 1], labels=["0", "0.5", "1"])
            + p9.coord_fixed(xlim=(0, 1), ylim=(0, 1))
            + p9.labs(x="Mean predicted probability", y="Observed frequency") + theme())
    fig = ReportFigure(
        name="reliability", caption="Reliability diagrams on the test split before and after "
        "temperature scaling, with Wilson intervals per bin; the dashed diagonal is perfect "
        "calibration.", alt="Reliability diagrams per model before and after temperature scaling.",
        plot=plot, data=rel[["source", "unit", "stage", "bin", "bin_low", "bin_high",
                             "mean_confidence", "estimate", "conf_low", "conf_high", "n"]],
        width=7.5, height=1.0 + 2.3 * -(-n_units // 4))
    md = ("@tbl-calibration-summary and @fig-reliability show how well predicted probabilities "
          "match observed frequencies, before and after temperature scaling (a monotone "
          "rescaling: discrimination is unchanged).")
    return [md, table, fig]
