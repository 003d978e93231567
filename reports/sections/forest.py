"""Forest plots as in a meta-analysis: subgroup sensitivity (specificity) with CIs, one
panel per model and one estimate scale (0 to 1) for every model of a metric; beside each
row the counts (TP/P) and "estimate [95% CI]" as text; below the rows the overall value
as a diamond over its CI with its own counts, and a dashed line at it; small cells open
and marked with a dagger; rows in the subgroup tables' order (empty cells keep their
row). Same numbers as the subgroup tables.

Rows that cannot exist are not drawn: the "not applicable" level (a tumour attribute of
a reference-negative scan) has no positives, so it is left out of sensitivity, and an
attribute of positives only has no negatives in any other level, so its axis is left out
of specificity (the subgroup tables still list them). Exploratory single-variable axes
get figures of their own, labelled exploratory. A figure holds up to
``FOREST_COLUMNS`` x ``FOREST_ROWS`` models; a study with more continues in further
figures ``forest_<estimand>_2``, ... drawn at the same panel width and scale."""
from __future__ import annotations

import pandas as pd

from stats.detection import NOT_APPLICABLE

from .. import text
from ..figures import FOREST_COLUMNS, FOREST_ROWS, ReportFigure, forest_plot
from ..study import model_order
from . import Section
from . import _detection as D

KEY = "forest"
TITLE = "Forest plots"
HALF = "detection"
#: models per forest figure
PER_FIGURE = FOREST_COLUMNS * FOREST_ROWS
#: inches per row of a panel, and around each row of panels
ROW_IN, PANEL_EXTRA_IN, FIGURE_EXTRA_IN = 0.14, 0.4, 0.95


def _drawable(part: pd.DataFrame, estimand: str) -> pd.DataFrame:
    """The rows of one axis that can exist for ``estimand``: without the "not applicable"
    level for sensitivity, and no row at all for specificity when the axis has that level
    (an attribute of reference positives only)."""
    na = part["group_level"].astype(str) == NOT_APPLICABLE
    if estimand == "specificity" and na.any():
        return part.iloc[0:0]
    return part[~na]


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
        part = _drawable(part, estimand)
        part["label"] = D.axis_label(axis) + ": " + part["group_level"].astype(str)
        parts.append(part)
    d = pd.concat(parts, ignore_index=True) if parts else m.iloc[0:0].assign(label="")
    d = d.reset_index(drop=True)
    d["small"] = d[denom].fillna(0) < det.small_n
    d["count"] = [text.frac(k, nn) + (" \u2020" if s else "")
                  for k, nn, s in zip(d["numerator"], d["denominator"], d["small"])]
    d["ci_text"] = text.ci_vec(d)
    return d


def overall_rows(study, estimand: str, models: list) -> pd.DataFrame:
    """Each model's overall estimate with its counts and CI text (the overall row)."""
    m = D.metrics(study)
    ov = m[(m["estimand"] == estimand) & (m["group_var"] == "overall")
           & m["model"].isin(models)].copy()
    ov["count"] = [text.frac(k, n) for k, n in zip(ov["numerator"], ov["denominator"])]
    ov["ci_text"] = text.ci_vec(ov)
    return ov


def figure(study, estimand: str, axes, models: list, part: int = 1,
           exploratory: bool = False) -> ReportFigure | None:
    det = study.plan.detection
    d = rows(study, estimand, axes)
    d = d[d["model"].isin(models)].reset_index(drop=True)
    if not len(d):
        return None
    denom = "n_pos" if estimand == "sensitivity" else "n_neg"
    overall = overall_rows(study, estimand, models)
    data = d[["model", "group_var", "group_level", "label", "estimate", "conf_low",
              "conf_high", "n", denom, "count", "ci_text", "small"]]
    n_rows = d["label"].nunique() + 1
    n_models = len(models)
    ncol = 1 if len(model_order(study)) == 1 else FOREST_COLUMNS
    panel_rows = -(-n_models // ncol)
    who = "positives" if estimand == "sensitivity" else "negatives"
    left = ("" if estimand == "sensitivity" else
            _left_out_text(study, axes))
    return ReportFigure(
        name=f"forest_{estimand}" + ("_exploratory" if exploratory else "")
             + (f"_{part}" if part > 1 else ""),
        caption=("Exploratory subgroup axes: s" if exploratory else "S")
        + f"ubgroup {estimand} with {int(round(det.conf_level * 100))}% confidence "
        f"intervals, per model ({text.human_list(models)}), every model on the same scale; "
        f"counts {'TP/P' if estimand == 'sensitivity' else 'TN/N'} and estimate [CI] "
        f"beside each row; the overall row's diamond spans the model's overall {estimand} "
        f"interval and the dashed line marks its estimate; open circles and \u2020 mark "
        f"cells with fewer than {det.small_n} {who}" + left + ".",
        alt=f"Forest plot of {estimand} by subgroup for {text.human_list(models)}.",
        plot=forest_plot(d, overall=overall, xlab=estimand.capitalize(), width=7.5,
                         count_label="TP/P" if estimand == "sensitivity" else "TN/N",
                         ncol=ncol, facet_order=model_order(study)),
        data=data, width=7.5,
        height=min(FIGURE_EXTRA_IN + panel_rows * (ROW_IN * (n_rows + 2.2) + PANEL_EXTRA_IN),
                   9.5))


def _left_out_text(study, axes) -> str:
    """The axes not drawn for specificity (attributes of reference positives only)."""
    m = D.metrics(study)
    gone = [D.axis_label(a) for a in axes
            if (m.loc[m["group_var"] == D.axis_name(a), "group_level"].astype(str)
                == NOT_APPLICABLE).any()]
    return (f"; {text.human_list(gone)} not drawn (an attribute of reference positives: "
            f"negatives read \"not applicable\")" if gone else "")


def build(study) -> Section:
    det = study.plan.detection
    single = [a for a in det.subgroups if len(a) == 1]
    if not single:
        single = list(det.subgroups)
    explore = [a for a in det.exploratory_subgroups if len(a) == 1 and a not in single]
    models = model_order(study)
    groups = [models[i:i + PER_FIGURE] for i in range(0, len(models), PER_FIGURE)]
    figs = [figure(study, e, single, g, k + 1) for e in ("sensitivity", "specificity")
            for k, g in enumerate(groups)]
    figs += [figure(study, e, explore, g, k + 1, exploratory=True)
             for e in ("sensitivity", "specificity") for k, g in enumerate(groups)
             if explore]
    figs = [f for f in figs if f is not None]
    more = (f" ({len(groups)} figures each, {PER_FIGURE} models per figure, every panel at "
            f"the same width and scale)" if len(groups) > 1 else "")
    md = (f"@fig-forest-sensitivity shows where sensitivity departs from each model's overall "
          f"value; @fig-forest-specificity shows specificity on the same subgroups{more}; "
          f"every model of a metric is drawn on one scale. A subgroup whose sensitivity "
          f"falls while its specificity holds points to failures driven by false negatives.")
    if explore:
        md += (" @fig-forest-sensitivity-exploratory and @fig-forest-specificity-exploratory "
               "draw the exploratory axes (" + text.md(text.human_list(
                   D.axis_label(a) for a in explore)) + ") apart from the prespecified ones.")
    return Section(KEY, TITLE).add(md, *figs)
