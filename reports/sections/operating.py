"""Operating points and fair comparisons: ROC curves per model (the prespecified operating
points and the fixed threshold marked) and per prespecified axis, the matched operating
point beside the fixed-threshold comparison (a gain that vanishes there is flagged a
threshold shift), the partial AUC, likelihood ratios and each subgroup's AUC against the
rest (``Results['roc_curves']``, ``['operating_points']``, ``['matched_comparisons']``,
``['partial_auc']``, ``['likelihood_ratios']``, ``['auc_vs_rest']``)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stats.detection import unplanned_levels
from stats.operating import SLOPE_BANDWIDTH

from .. import text
from ..figures import PALETTE, ReportFigure, theme
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "operating"
TITLE = "Operating points and fair comparisons"
HALF = "detection"


def applies(study) -> bool:
    return study.plan.detection.operating_points is not None


def _pct(conf_level: float) -> str:
    return f"{int(round(conf_level * 100))}%"


def _p_floor(n_boot) -> float:
    return 2.0 / (float(n_boot) + 1.0)


def _fixed_points(study) -> pd.DataFrame:
    """Each model's overall sensitivity and specificity at the fixed threshold (the subgroup
    table's overall rows)."""
    m = D.metrics(study)
    ov = m[(m["group_var"] == "overall") & m["estimand"].isin(["sensitivity", "specificity"])]
    w = ov.pivot(index="model", columns="estimand", values="estimate").reset_index()
    return w


def roc_plot(curves: pd.DataFrame, marks: pd.DataFrame | None, *, color: str | None,
             facet: str = "model", color_name: str = ""):
    """ROC curves (1 - specificity against sensitivity, the points joined as pROC draws
    them) per ``facet``, coloured by ``color``; ``marks``: points with vertical intervals
    (``x``, ``y``, ``ymin``, ``ymax``, ``kind``)."""
    import plotnine as p9

    d = curves.assign(fpr=1 - curves["specificity"])
    aes = p9.aes(x="fpr", y="sensitivity", group="curve")
    if color:
        aes = p9.aes(x="fpr", y="sensitivity", group="curve", color=color)
    p = (p9.ggplot(d, aes)
         + p9.geom_abline(intercept=0, slope=1, linetype="dotted", color="#8d96a3"))
    if _has_bands(d):   # the sensitivity's pointwise band at each point's threshold
        p += p9.geom_ribbon(p9.aes(x="fpr", ymin="conf_low", ymax="conf_high", group="curve"),
                            data=d[d["conf_low"].notna()], inherit_aes=False, alpha=0.2,
                            fill="#2e4057")
    p += p9.geom_path(size=0.6)
    if color:
        n = d[color].nunique()
        p += p9.scale_color_manual(values=list(PALETTE[:n]) + ["#333333"] * max(0, n - len(PALETTE)),
                                   name=color_name or color.replace("_", " "))
    if marks is not None and len(marks):
        p += p9.geom_errorbar(p9.aes(x="x", ymin="ymin", ymax="ymax"), data=marks,
                              inherit_aes=False, width=0.03, color="#2e4057")
        p += p9.geom_point(p9.aes(x="x", y="y", shape="kind"), data=marks, inherit_aes=False,
                           size=2.2, fill="white", color="#d1495b")
        p += p9.scale_shape_manual(values={"matched operating point": "o",
                                           "fixed threshold": "^"})
    return (p + p9.facet_wrap(f"~{facet}")
            + p9.scale_x_continuous(limits=(0, 1), breaks=[0, 0.25, 0.5, 0.75, 1],
                                    labels=["0", "0.25", "0.5", "0.75", "1"])
            + p9.scale_y_continuous(limits=(0, 1), breaks=[0, 0.25, 0.5, 0.75, 1],
                                    labels=["0", "0.25", "0.5", "0.75", "1"])
            + p9.coord_fixed() + p9.labs(x="1 - specificity", y="Sensitivity") + theme()
            + (p9.theme(legend_title=p9.element_blank()) if not color else p9.theme()))


def _has_bands(curves: pd.DataFrame) -> bool:
    return "conf_low" in curves and bool(curves["conf_low"].notna().any())


def _curves(roc: pd.DataFrame, group_var: str) -> pd.DataFrame:
    c = roc[(roc["group_var"] == group_var) & roc["sensitivity"].notna()
            & roc["specificity"].notna()].copy()
    c["curve"] = c["model"].astype(str) + "|" + c["group_level"].astype(str)
    return c


def overall_figure(study) -> ReportFigure:
    det = study.plan.detection
    roc = study.results["roc_curves"]
    curves = _curves(roc, "overall")
    op = study.results["operating_points"]
    marks = []
    if len(op):
        v = op[(op["estimand"] == "sensitivity_at_specificity") & (op["group_var"] == "overall")]
        marks.append(pd.DataFrame({"model": v["model"], "x": 1 - v["at"], "y": v["estimate"],
                                   "ymin": v["conf_low"], "ymax": v["conf_high"],
                                   "kind": "matched operating point"}))
        s = op[(op["estimand"] == "specificity_at_sensitivity") & (op["group_var"] == "overall")]
        if len(s):
            marks.append(pd.DataFrame({"model": s["model"], "x": 1 - s["estimate"],
                                       "y": s["at"], "ymin": s["at"], "ymax": s["at"],
                                       "kind": "matched operating point"}))
    fx = _fixed_points(study)
    marks.append(pd.DataFrame({"model": fx["model"], "x": 1 - fx["specificity"],
                               "y": fx["sensitivity"], "ymin": fx["sensitivity"],
                               "ymax": fx["sensitivity"], "kind": "fixed threshold"}))
    marks = pd.concat(marks, ignore_index=True)
    at = ", ".join(text.num(a) for a in det.operating_points.specificity)
    sens_at = ", ".join(text.num(a) for a in det.operating_points.sensitivity)
    which = " and ".join(x for x in (f"specificity {at}" if at else "",
                                     f"sensitivity {sens_at}" if sens_at else "") if x)
    bands = _has_bands(curves)
    cols = ["model", "group_var", "group_level", "point", "threshold", "sensitivity",
            "specificity"] + (["conf_low", "conf_high", "specificity_low", "specificity_high"]
                              if bands else [])
    data = pd.concat([curves[cols].assign(layer="curve"),
                      marks.rename(columns={"x": "fpr", "y": "value"}).assign(layer="mark")],
                     ignore_index=True)
    return ReportFigure(
        name="roc_overall",
        caption=("Empirical ROC curve of each model on the evaluation set; circles: the "
                 f"prespecified matched operating point{'s' if ',' in which else ''}"
                 + (f" ({which}) with {_pct(det.conf_level)} paired cluster-bootstrap "
                    f"intervals" if which else "") + "; triangle: the fixed threshold. The "
                 "dotted line is chance."
                 + (f" Shaded: the pointwise {_pct(det.conf_level)} bootstrap band of the "
                    "sensitivity at each point's threshold." if bands else "")),
        alt="ROC curves per model with the operating points marked.",
        plot=roc_plot(curves, marks, color=None), data=data,
        width=7.5, height=3.6 if curves["model"].nunique() <= 3 else 6.0)


def axis_figures(study) -> list[ReportFigure]:
    from analysis.operating import roc_axes

    roc = study.results["roc_curves"]
    out, skipped = [], []
    for axis in roc_axes(study.plan):
        name = D.axis_name(axis)
        c = _curves(roc, name)
        c = c[~unplanned_levels(c["group_level"].to_numpy())]
        if c.empty:
            skipped.append(D.axis_label(axis))
            continue
        order = [lv for lv in D.ordered_levels(study, axis) if lv in set(c["group_level"])]
        order += [lv for lv in pd.unique(c["group_level"].astype(str)) if lv not in order]
        c["level"] = pd.Categorical(c["group_level"].astype(str), categories=order)
        out.append(ReportFigure(
            name=f"roc_axis_{text.slug(name).replace('-', '_')}",
            caption=f"ROC curves per level of {D.axis_label(axis)}, per model (levels with "
                    f"positives and negatives; missing values left out).",
            alt=f"ROC curves by {D.axis_label(axis)} for each model.",
            plot=roc_plot(c, None, color="level", color_name=D.axis_label(axis)),
            data=c[["model", "group_var", "group_level", "point", "threshold", "sensitivity",
                    "specificity"]], width=7.5, height=3.8))
    return out, skipped


def matched_table(study) -> ReportTable | None:
    if "matched_comparisons" not in study.results.computed() and \
            study.results.get("matched_comparisons") is None:
        return None
    det = study.plan.detection
    t = study.results["matched_comparisons"]
    if not len(t):
        return None
    n_boot = float(t["n_boot"].iloc[0])
    disp = pd.DataFrame({
        "pair": t["model"].astype(str),
        "cell": ["Overall" if v == "overall" else f"{D.axis_label(v)}: {lv}"
                 for v, lv in zip(t["group_var"], t["group_level"])],
        "fixed": text.ci_vec(t, 3, est="fixed_estimate", low="fixed_conf_low",
                             high="fixed_conf_high"),
        "fixed_p": [text.pvalue(p) for p in t["fixed_p_adjusted"].fillna(t["fixed_p_value"])],
        "fixed_spec": [text.num(x, 3) for x in t["fixed_specificity_estimate"]],
        "at": [text.num(a) for a in t["at"]],
        "matched": text.ci_vec(t, 3),
        "matched_p": [text.pvalue(p, floor=_p_floor(n_boot))
                      for p in t["matched_p_adjusted"].fillna(t["p_value"])],
        "shift": np.where(t["threshold_shift"], "threshold shift", "")})
    adj = t["matched_p_adjusted"].notna().any()
    return ReportTable(
        name="matched_operating_points",
        caption=f"Paired sensitivity differences between models (first minus second), at the "
                f"fixed threshold and at the matched operating point (each model at its own "
                f"threshold giving the prespecified specificity), estimate "
                f"[{_pct(det.conf_level)} CI].",
        data=t, display=disp, group_col="pair",
        labels={"cell": "Subgroup", "fixed": "Sensitivity difference [CI]",
                "fixed_p": "Holm p" if adj else "p", "fixed_spec": "Specificity difference",
                "at": "At specificity", "matched": "Sensitivity difference [CI]",
                "matched_p": "Holm p" if adj else "p", "shift": "Flag"},
        spanners=(("Fixed threshold", ["fixed", "fixed_p", "fixed_spec"]),
                  ("Matched operating point", ["at", "matched", "matched_p"])),
        notes=("Fixed threshold: Newcombe's paired interval and the exact McNemar test "
               "(their cluster-aware forms where a patient has several scans), as in the "
               "model comparisons. Matched operating point: sensitivity at the "
               "prespecified specificity, as pROC's coords() reads it (interpolated between "
               "the two neighbouring ROC points where no threshold gives that specificity "
               "exactly), with percentile intervals and two-sided p-values from "
               f"{int(n_boot)} replicates of the paired cluster bootstrap (patients "
               "resampled, one index for both models)"
               + ("; each replicate linearized: both models' sensitivity and specificity "
                  "read at their full-sample thresholds, the sensitivity moved along the "
                  "full-sample ROC slope to the prespecified specificity (a replicate read "
                  "off its own ROC adds each model's local noise to the difference: "
                  "conservative intervals)."
                  if (t["method"] == "bootstrap-linearized").any() else ".")
               + (" Holm over every pair and cell, per specificity." if adj else
                  " Exploratory: not adjusted for multiplicity.")
               + " Flag: a significant sensitivity difference at the fixed threshold, bought "
               "with specificity, that is not significant at any prespecified matched "
               "specificity: a move along the same ROC curve (a threshold shift), not a "
               "better curve.",))


def values_table(study) -> ReportTable | None:
    det = study.plan.detection
    op = study.results["operating_points"]
    if not len(op):
        return None
    v = op[~op["estimand"].str.endswith("_difference")]
    n_boot = float(v["n_boot"].iloc[0])
    fx = _fixed_points(study).set_index("model")
    label = {"sensitivity_at_specificity": "Sensitivity at specificity",
             "specificity_at_sensitivity": "Specificity at sensitivity"}
    disp = pd.DataFrame({
        "what": [f"{label[e]} {text.num(a)}" for e, a in zip(v["estimand"], v["at"])],
        "model": v["model"].astype(str),
        "cell": ["Overall" if g == "overall" else f"{D.axis_label(g)}: {lv}"
                 for g, lv in zip(v["group_var"], v["group_level"])],
        "value": text.ci_vec(v, 2),
        "threshold": ["between two" if pd.isna(x) else text.num(x, 1) for x in v["threshold"]],
        "fixed": [f"{text.num(fx.loc[m, 'sensitivity'])} / {text.num(fx.loc[m, 'specificity'])}"
                  if g == "overall" and m in fx.index else text.DASH
                  for m, g in zip(v["model"], v["group_var"])]})
    # the fixed-threshold values shown beside the overall rows are in the table's data too
    shown = ~op["estimand"].str.endswith("_difference") & (op["group_var"] == "overall")
    data = op.assign(**{f"fixed_{k}": [fx.loc[m, k] if s and m in fx.index else float("nan")
                                       for m, s in zip(op["model"], shown)]
                        for k in ("sensitivity", "specificity")})
    return ReportTable(
        name="operating_points",
        caption=f"Each model at the prespecified operating point{'s' if len(v) > 2 else ''}, "
                f"estimate [{_pct(det.conf_level)} CI], and its threshold; beside it the "
                f"sensitivity / specificity at the fixed threshold.",
        data=data, display=disp, group_col="what",
        labels={"model": "Model", "cell": "Subgroup", "value": "Estimate [CI]",
                "threshold": "Threshold", "fixed": "At the fixed threshold (Se / Sp)"},
        notes=(f"Percentile intervals of {int(n_boot)} paired cluster-bootstrap replicates. "
               "Threshold: pROC's threshold giving the value exactly (the midpoint between two "
               "scores); 'between two': no threshold gives it, and the estimate is "
               "interpolated between the two neighbouring ROC points, as pROC does.",))


def pauc_table(study) -> ReportTable | None:
    if study.plan.detection.operating_points.partial_auc is None:
        return None
    det = study.plan.detection
    pa = study.results["partial_auc"]
    r = pa.iloc[0]
    corr = r["estimand"].startswith("partial_auc_corrected")
    n_boot = float(r["n_boot"])
    disp = pd.DataFrame({
        "model": pa["model"].astype(str),
        "cell": ["Overall" if g == "overall" else f"{D.axis_label(g)}: {lv}"
                 for g, lv in zip(pa["group_var"], pa["group_level"])],
        "value": text.ci_vec(pa, 3),
        "p": [text.pvalue(p, floor=_p_floor(n_boot)) if e.endswith("_difference") else ""
              for p, e in zip(pa["p_adjusted"].fillna(pa["p_value"]), pa["estimand"])]})
    rng = f"{text.num(r['range_low'])} to {text.num(r['range_high'])}"
    return ReportTable(
        name="partial_auc",
        caption=f"Partial AUC over {r['focus']} {rng}"
                + (" (McClish-standardized: 0.5 chance, 1 perfect)" if corr else
                   f" (the area under the ROC curve over that range; at most "
                   f"{text.num(r['range_high'] - r['range_low'])})")
                + f", per model and the paired differences (first minus second), estimate "
                  f"[{_pct(det.conf_level)} CI].",
        data=pa, display=disp,
        labels={"model": "Model or pair", "cell": "Subgroup", "value": "Estimate [CI]",
                "p": "Holm p" if pa["p_adjusted"].notna().any() else "p"},
        notes=("As pROC's auc(partial.auc =, partial.auc.focus =, partial.auc.correct =): the "
               "area under the linear interpolation of the ROC points, the range's ends "
               "interpolated. "
               + ("Each model's interval is the bootstrap's BCa interval (bias-corrected "
                  "and accelerated; the acceleration from a jackknife over patients); the "
                  "differences' intervals are percentiles"
                  if (pa["method"] == "bootstrap-bca").any() else "Percentile intervals")
               + f", and p-values, from {int(n_boot)} replicates of the paired cluster "
               "bootstrap.",))


def lr_table(study) -> ReportTable:
    det = study.plan.detection
    lr = study.results["likelihood_ratios"]
    ov = lr[lr["group_var"] == "overall"]
    pos, neg = (ov[ov["estimand"] == e].set_index("model") for e in ("lr_positive",
                                                                      "lr_negative"))
    models = list(pos.index)
    clustered = ov["method"].str.endswith("-cluster").any()
    disp = pd.DataFrame({
        "model": models,
        "lr_pos": [text.ratio_ci(*pos.loc[m, ["estimate", "conf_low", "conf_high"]])
                   for m in models],
        "lr_neg": [text.ratio_ci(*neg.loc[m, ["estimate", "conf_low", "conf_high"]])
                   for m in models]})
    return ReportTable(
        name="likelihood_ratios",
        caption=f"Positive and negative likelihood ratios at the fixed threshold, per model, "
                f"estimate [{_pct(det.conf_level)} CI] (STARD 24).",
        data=lr, display=disp,
        labels={"model": "Model", "lr_pos": "LR+ [CI]", "lr_neg": "LR\u2212 [CI]"},
        notes=("LR+ = sensitivity / (1 - specificity), LR\u2212 = (1 - sensitivity) / "
               "specificity; log-method intervals (Simel, Samsa & Matchar 1991; as epiR's "
               "epi.tests)" + ("; with repeated scans the log LR's variance is the "
                              "linearization over patients (as survey's svycontrast)"
                              if clustered else "")
               + ". Every prespecified subgroup is in tables/likelihood_ratios.csv.",))


def auc_rest_table(study) -> ReportTable | None:
    det = study.plan.detection
    a = study.results["auc_vs_rest"]
    if not len(a):
        return None
    a = a[~unplanned_levels(a["group_level"].to_numpy()) & a["estimate"].notna()]
    if not len(a):
        return None
    clustered = a["method"].str.endswith("-cluster").any()
    adj = a["p_adjusted"].notna().any()
    disp = pd.DataFrame({
        "model": a["model"].astype(str),
        "cell": [f"{D.axis_label(g)}: {lv}" for g, lv in zip(a["group_var"], a["group_level"])],
        "auc": [f"{text.num(x)} / {text.num(y)}" for x, y in zip(a["auc_subgroup"],
                                                                  a["auc_rest"])],
        "diff": text.ci_vec(a, 2),
        "d": [f"{text.num(s)} ({text.num(df, 0)})" for s, df in zip(a["statistic"], a["df"])],
        "p": [text.pvalue(p) for p in (a["p_adjusted"] if adj else a["p_value"])]})
    return ReportTable(
        name="auc_vs_rest",
        caption=f"AUC of each subgroup against the rest of its axis, per model: unpaired "
                f"DeLong test, difference [{_pct(det.conf_level)} CI].",
        data=study.results["auc_vs_rest"], display=disp, group_col="model",
        labels={"cell": "Subgroup", "auc": "AUC subgroup / rest", "diff": "Difference [CI]",
                "d": "D (df)", "p": "Holm p" if adj else "p"},
        notes=("pROC's roc.test(paired = FALSE, method = \"delong\"): D = (A - B) / sqrt(V_A + "
               "V_B) with DeLong's variances and Welch-Satterthwaite degrees of freedom"
               + ("; where a patient has several scans, Obuchowski's clustered variance on "
                  "each side, the covariance of the two AUCs through patients with scans on "
                  "both sides, and the degrees of freedom on patients" if clustered else "")
               + (". Holm per model over every level of every axis." if adj else ".")
               + " Axes whose subgroups lack negatives (tumour size) have no AUC and are "
                 "left out.",))


def methods_text(study) -> list[str]:
    """The methods sentences of the operating points and the goals (methods section)."""
    det = study.plan.detection
    out = []
    op = det.operating_points
    if op is not None:
        seed = study.plan.seed_for("operating_bootstrap")
        at = []
        if op.specificity:
            at.append("sensitivity at specificity " + text.human_list(
                text.num(v) for v in op.specificity))
        if op.sensitivity:
            at.append("specificity at sensitivity " + text.human_list(
                text.num(v) for v in op.sensitivity))
        pa = op.partial_auc
        out.append(
            "**Operating points.** Empirical ROC curves per model and prespecified subgroup "
            "(thresholds and points as pROC's coords(roc, \"all\")). Prespecified matched "
            "operating points: " + (text.human_list(at) or "none")
            + ", each model at its own threshold (where no threshold attains the value, "
            "linear interpolation between the two neighbouring ROC points, as pROC's coords; "
            "at a value several thresholds attain, the best value of the other coordinate)"
            + (f"; the partial AUC over {'sensitivity' if pa.sensitivity else 'specificity'} "
               f"{text.num((pa.sensitivity or pa.specificity)[0])} to "
               f"{text.num((pa.sensitivity or pa.specificity)[1])}"
               + (" (McClish-standardized)" if pa.correct else "")
               + (" with BCa intervals for each model (the acceleration from a jackknife over "
                  "patients)" if pa.boot_ci == "bca" else "") if pa else "")
            + f". Intervals and paired differences between models: percentiles of {op.n_boot} "
            f"replicates of the paired cluster bootstrap (patients resampled with one index "
            f"for every model and subgroup; seed {seed})"
            + ("; a paired difference at a matched operating point from linearized "
               "replicates (each model's two coordinates read at its full-sample threshold, "
               "the other one moved along the full-sample ROC slope, the chord over the "
               f"fixed value +- {text.num(SLOPE_BANDWIDTH)} n^(-1/3), to the fixed value: "
               "the delta method's expansion with resampled counts; replicates read off "
               "their own ROC gave conservative intervals, 96-99% in simulation, "
               "bench/operating_coverage.md)"
               if study.results.decisions.operating.difference_ci == "linearized" else "")
            + "; Holm over every pair and cell per "
            "operating point. A sensitivity gain at the fixed threshold that is bought with "
            "specificity and not significant at any matched specificity is flagged a "
            "threshold shift. Likelihood ratios carry log-method intervals (Simel et al. "
            "1991), and each subgroup's AUC is compared with the rest of its axis by pROC's "
            "unpaired DeLong test" + (" (Obuchowski's clustered variances, the covariance "
                                      "through shared patients, degrees of freedom on "
                                      "patients)" if study.results.decisions.detection.cluster
                                      else "") + ".")
    if det.goals:
        from .goals import methods_sentence

        out.append(methods_sentence(study))
    if det.subgroup_gaps and det.subgroups:
        from .subgroup_gaps import methods_sentence as gaps_sentence

        out.append(gaps_sentence(study))
    return out


def build(study) -> Section:
    sec = Section(KEY, TITLE)
    fig = overall_figure(study)
    axes, skipped = axis_figures(study)
    matched = matched_table(study)
    values = values_table(study)
    pauc = pauc_table(study)
    lr = lr_table(study)
    rest = auc_rest_table(study)
    n_models = study.cases["model"].nunique()
    md = ["@fig-roc-overall draws each model's ROC curve with the prespecified operating "
          "point and the fixed threshold marked"
          + (f"; {text.human_list('@' + f.id for f in axes)} draw"
             f"{'s' if len(axes) == 1 else ''} the curves per level of each prespecified "
             f"axis" if axes else "") + "."]
    if skipped:
        md.append(f"No ROC curve per level of {text.human_list(skipped)}: no level has both "
                  f"positives and negatives.")
    if matched is not None:
        t = study.results["matched_comparisons"]
        n_shift = int(t["threshold_shift"].sum())
        md.append("@tbl-matched-operating-points sets the comparison at the fixed threshold "
                  "beside the comparison at the matched operating point: "
                  + (f"{text.count(n_shift)} fixed-threshold gain"
                     f"{'s are' if n_shift != 1 else ' is'} only a threshold shift."
                     if n_shift else "no fixed-threshold gain is only a threshold shift."))
    elif n_models < 2:
        md.append("One model: no paired comparison at a matched operating point.")
    if values is not None:
        md.append("@tbl-operating-points gives each model's value at the operating point.")
    if pauc is not None:
        md.append("@tbl-partial-auc gives the partial AUC.")
    md.append("@tbl-likelihood-ratios gives the likelihood ratios"
              + (" and @tbl-auc-vs-rest each subgroup's AUC against the rest of its axis."
                 if rest is not None else "."))
    sec.add(" ".join(md), fig, *axes, values, matched, pauc, lr, rest)
    return sec
