"""Forest plots as in a meta-analysis: subgroup sensitivity (specificity) with CIs per
model, beside them the counts (TP/P) and "estimate [95% CI]" as text, the overall value
as a labelled dashed line, small cells open and marked with a dagger; rows in the
subgroup tables' order (empty cells keep their row). Same numbers as the subgroup tables.
Two models per figure (more would squeeze the rows): further models get figures
``forest_<estimand>_2``, ``_3``, ..."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, forest_plot
from . import Section
from . import _detection as D

KEY = "forest"
TITLE = "Forest plots"
HALF = "detection"
#: models per forest figure
PER_FIGURE = 2


def rows(study, estimand: str, axes) -> pd.DataFrame:
    """The plotted rows, per model in the subgroup tables' order (axes as listed in the
    plan, levels in ``D.sort_cells`` order), with their text columns."""
    det = study.plan.detection
    m = D.metrics(study)
    m = m[m["estimand"] == estimand]
    denom = "n_pos" if estimand == "sensitivity" else "n_neg"
    parts = []
    for axis in axes:
        part = D.sort_cells(m[m["group_var"] == D.axis_name(axis)].reset_index(drop=True),
                            study, axis)
        part["label"] = D.axis_label(axis) + ": " + part["group_level"].astype(str)
        parts.append(part)
    d = pd.concat(parts, ignore_index=True)
    d["small"] = d[denom].fillna(0) < det.small_n
    d["count"] = [text.frac(k, nn) + (" \u2020" if s else "")
                  for k, nn, s in zip(d["numerator"], d["denominator"], d["small"])]
    d["ci_text"] = text.ci_vec(d)
    return d


def figure(study, estimand: str, axes, models: list, part: int = 1) -> ReportFigure:
    det = study.plan.detection
    d = rows(study, estimand, axes)
    d = d[d["model"].isin(models)].reset_index(drop=True)
    denom = "n_pos" if estimand == "sensitivity" else "n_neg"
    m = D.metrics(study)
    overall = m[(m["estimand"] == estimand) & (m["group_var"] == "overall")
                & m["model"].isin(models)].copy()
    overall["text"] = [f"overall {text.num(e)}" for e in overall["estimate"]]
    data = d[["model", "group_var", "group_level", "label", "estimate", "conf_low",
              "conf_high", "n", denom, "count", "ci_text", "small"]]
    n_rows = d["label"].nunique()
    who = "positives" if estimand == "sensitivity" else "negatives"
    return ReportFigure(
        name=f"forest_{estimand}" + (f"_{part}" if part > 1 else ""),
        caption=f"Subgroup {estimand} with {int(round(det.conf_level * 100))}% confidence "
                f"intervals, per model ({text.human_list(models)}); counts "
                f"{'TP/P' if estimand == 'sensitivity' else 'TN/N'} and estimate [CI] "
                f"beside each row; the dashed line is the model's overall {estimand}; open "
                f"circles and \u2020 mark cells with fewer than {det.small_n} {who}.",
        alt=f"Forest plot of {estimand} by subgroup for {text.human_list(models)}.",
        plot=forest_plot(d, overall=overall, xlab=estimand.capitalize(), width=7.5,
                         count_label="TP/P" if estimand == "sensitivity" else "TN/N"),
        data=data, width=7.5, height=min(1.3 + 0.17 * n_rows, 9.5))


def build(study) -> Section:
    det = study.plan.detection
    single = [a for a in det.subgroups if len(a) == 1]
    if not single:
        single = list(det.subgroups)
    models = list(pd.unique(study.cases["model"]))
    groups = [models[i:i + PER_FIGURE] for i in range(0, len(models), PER_FIGURE)]
    figs = [figure(study, e, single, g, k + 1) for e in ("sensitivity", "specificity")
            for k, g in enumerate(groups)]
    more = (f" ({len(groups)} figures each, {PER_FIGURE} models per figure)"
            if len(groups) > 1 else "")
    md = (f"@fig-forest-sensitivity shows where sensitivity departs from each model's overall "
          f"value; @fig-forest-specificity shows specificity on the same subgroups{more}. A "
          f"subgroup whose sensitivity falls while its specificity holds points to failures "
          f"driven by false negatives.")
    return Section(KEY, TITLE).add(md, *figs)
