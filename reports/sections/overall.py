"""Overall accuracy per model (STARD 24): sensitivity, specificity, PPV, NPV with CIs,
and the AUC with DeLong's interval (from ``stats.subgroup_metrics``, else ``stats.auc_ci``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "overall"
TITLE = "Overall accuracy"
HALF = "detection"


def build(study) -> Section:
    det = study.plan.detection
    m = D.metrics(study)
    m = m[m["group_var"] == "overall"]
    est = ["sensitivity", "specificity", "ppv", "npv"]
    if "f1" in set(m["estimand"]):
        est.append("f1")
    data = m[m["estimand"].isin(est)].copy()
    if "auc" in set(m["estimand"]):  # stats.subgroup_metrics gives the DeLong AUC itself
        data = pd.concat([data, m[m["estimand"] == "auc"]], ignore_index=True)
        est.append("auc")
    data = D.with_counts(study, data.reset_index(drop=True))
    w = D.wide(data, tuple(est))
    c = D.counts(study)
    c = c[c["group_var"] == "overall"].set_index("model")
    disp = pd.DataFrame({"model": w["model"].astype(str)})
    for e in est:
        disp[e] = text.ci_vec(w, est=f"{e}_estimate", low=f"{e}_conf_low", high=f"{e}_conf_high")
        if e == "sensitivity":
            disp["sens_n"] = [text.frac(c.loc[mm, "tp"], c.loc[mm, "n_pos"]) for mm in w["model"]]
        if e == "specificity":
            disp["spec_n"] = [text.frac(c.loc[mm, "tn"], c.loc[mm, "n_neg"]) for mm in w["model"]]
    labels = {"model": "Model", "sensitivity": "Sensitivity", "sens_n": "TP/P",
              "specificity": "Specificity", "spec_n": "TN/N", "ppv": "PPV", "npv": "NPV",
              "f1": "F1", "auc": "AUC"}
    notes = [D.methods_note(study) + " PPV and NPV depend on the prevalence of the evaluation set."]
    if "auc" in est:
        cluster = study.results.decisions.detection.cluster
        notes.append("AUC of the continuous score: "
                     + D.auc_interval_text(det.auc_scale, cluster) + ".")
    if "f1" in est:
        kind = "BCa" if det.bootstrap.boot_ci == "bca" else "percentile"
        notes.append(f"F1: cluster-bootstrap {kind} interval (patients resampled).")
    table = ReportTable(name="overall_metrics", caption="Overall accuracy per model on the "
                        "evaluation set, estimate [95% CI].".replace(
                            "95%", f"{int(round(det.conf_level * 100))}%"),
                        data=data, display=disp, labels=labels, notes=tuple(notes),
                        spanners=(("Positives", ["sensitivity", "sens_n"]),
                                  ("Negatives", ["specificity", "spec_n"])))
    best = w.sort_values("sensitivity_estimate", ascending=False).iloc[0]
    md = (f"@tbl-overall-metrics summarises each model. The highest sensitivity is "
          f"{text.md(best['model'])}'s, "
          f"{text.md(text.ci(best['sensitivity_estimate'], best['sensitivity_conf_low'], best['sensitivity_conf_high']))}.")
    return Section(KEY, TITLE).add(md, table)
