"""Paired model comparisons on the same cases (``stats.compare_models``): differences in
sensitivity, specificity (exact McNemar, Newcombe intervals) and AUC (paired DeLong)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, points_ci
from ..tables import ReportTable
from . import Section, SkipSection
from . import _detection as D

KEY = "comparisons"
TITLE = "Model comparisons"
HALF = "detection"
LABEL = {"sensitivity_difference": "Sensitivity", "specificity_difference": "Specificity",
         "auc_difference": "AUC", "ppv_difference": "PPV", "npv_difference": "NPV",
         "f1_difference": "F1", "accuracy_difference": "Accuracy"}


def applies(study) -> bool:
    return study.cases["model"].nunique() >= 2


def build(study) -> Section:
    det = study.plan.detection
    ev = D.evaluation(study)
    if ev["model"].nunique() < 2:
        raise SkipSection("only one model: nothing to compare")
    cmp = study.results["comparisons"]
    ov = cmp[cmp["group_var"] == "overall"].reset_index(drop=True)
    nan = pd.Series(float("nan"), index=ov.index)
    boot = ov["method"].eq("bootstrap-percentile").any()
    disp = pd.DataFrame({
        "metric": ov["estimand"].map(LABEL).fillna(ov["estimand"]),
        "pair": ov["model"].astype(str),
        "diff": text.ci_vec(ov, 3),
        "disc": [text.DASH if pd.isna(a) else f"{int(a)} / {int(b)}"
                 for a, b in zip(ov.get("discordant_a", nan), ov.get("discordant_b", nan))],
        "p": [text.pvalue(p) for p in ov["p_value"]],
        # exploratory comparisons (the plan's roles) have no family: no Holm column
        **({"p_adj": [text.pvalue(p) for p in ov["p_adjusted"]]}
           if ov["p_adjusted"].notna().any() else {})})
    cluster = study.results.decisions.detection.cluster
    clustered = (f" Where a {cluster} has several scans in a cell: the clustered McNemar "
                 f"test of Durkalski et al. (2003), Newcombe's interval at the effective "
                 f"counts, and Obuchowski's clustered variance for the AUC."
                 if cluster else "")
    table = ReportTable(
        name="model_comparisons", caption="Paired differences between models (first minus "
        f"second) on the evaluation set, estimate [{int(round(det.conf_level * 100))}% CI].",
        data=cmp, display=disp, group_col="metric",
        labels={"pair": "Models (A - B)", "diff": "Difference [CI]",
                "disc": "Discordant A/B", "p": "p", "p_adj": "Holm p"},
        notes=("Sensitivity and specificity: exact McNemar test on discordant pairs (A right "
               "and B wrong / B right and A wrong) and Newcombe's paired hybrid score interval; "
               "AUC: paired DeLong test and Wald interval with the DeLong covariance." + clustered
               + (" PPV, NPV, F1, accuracy: percentile interval of the paired cluster-"
                  "bootstrap differences and the replicates' two-sided sign p-value."
                  if boot else "")
               + (" Holm adjustment over all pairs per metric." if "p_adj" in disp else
                  " Exploratory (the plan's roles): p-values not adjusted for multiplicity."),))
    ov_plot = ov.assign(metric=ov["estimand"].map(LABEL))
    fig = ReportFigure(
        name="model_comparisons", caption="Paired differences between models with confidence "
        "intervals; the dashed line marks no difference.",
        alt="Dot plot of paired model differences in sensitivity, specificity and AUC.",
        plot=points_ci(ov_plot, x="model", y="estimate", facet="metric", xlab="",
                       ylab="Difference (A - B)", hline=0.0),
        data=ov_plot[["metric", "model", "estimate", "conf_low", "conf_high", "p_value",
                      "p_adjusted"]], width=7.5, height=2.6)
    md = ("@tbl-model-comparisons and @fig-model-comparisons compare every pair of models on "
          "the same cases, so differences are paired.")
    return Section(KEY, TITLE).add(md, table, fig)
