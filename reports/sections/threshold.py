"""Threshold sweep: every metric per model across thresholds and the stability of the
model ranking (Kendall tau against the ranking at the operating threshold), from
``stats.threshold_sweep``."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import text
from ..figures import ReportFigure, lines
from ..study import model_order
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "threshold"
TITLE = "Threshold sweep and ranking stability"
HALF = "detection"


#: the ranking-stability figure needs this many models: with two, Kendall's tau between
#: two rankings is +1 or -1 and the figure is a flat line that says nothing
MIN_MODELS_RANKING = 3


def _curve(df: pd.DataFrame, logx: bool, vline: float, **kw):
    """Lines over the threshold; for voxel counts spanning decades a pseudo-log axis
    (asinh-like: logarithmic above a few voxels, linear near 0), so a threshold of 0 is
    drawn at 0, left of 1, never moved onto 1."""
    import plotnine as p9
    from mizani.transforms import pseudo_log_trans

    p = lines(df, x="threshold", y="estimate", vline=vline,
              xlab="Threshold (score)" + (", pseudo-log scale" if logx else ""), **kw)
    if not logx:
        return p
    t = df["threshold"].to_numpy(float)
    t = t[np.isfinite(t)]
    top = max(float(t.max()) if len(t) else 1.0, 1.0)
    # every decade up to the top one, thinned to at most 8 ticks (scores may span
    # hundreds of decades: a huge but finite score is valid input)
    decades = int(np.floor(np.log10(top)))
    step = max(1, -(-(decades + 1) // 8))
    breaks = [0.0] + [10.0 ** k for k in range(0, decades + 1, step)]
    return p + p9.scale_x_continuous(trans=pseudo_log_trans(sigma=0.5, base=10),
                                     breaks=breaks, labels=[f"{b:g}" for b in breaks])


def build(study) -> Section:
    ev = D.evaluation(study)
    chosen = D.calls(study).attrs["threshold"]["values"]
    score = ev["score"].to_numpy(float)
    sweep = study.results["threshold_sweep"]
    grid = np.asarray(sweep.attrs["grid"])
    m = sweep[sweep["estimand"].isin(["sensitivity", "specificity"])].reset_index(drop=True)
    logx = score.min() >= 0 and np.quantile(score, 0.95) > 50 * max(np.quantile(score, 0.05), 1)
    vline = float(np.median(list(chosen.values())))
    fig_m = _curve(m, logx, vline, color="model", facet="estimand", ribbon=True,
                   ylab="Estimate", color_order=model_order(study))
    fig1 = ReportFigure(
        name="threshold_sweep", caption="Sensitivity and specificity per model across "
        "thresholds, with pointwise confidence bands; the dashed line is the operating "
        "threshold.", alt="Sensitivity and specificity curves over the threshold for each model.",
        plot=fig_m, data=m[["estimand", "model", "threshold", "estimate", "conf_low", "conf_high",
                            "numerator", "denominator"]], width=7.5, height=3.2)
    tau = sweep[sweep["estimand"] == "kendall_tau"].reset_index(drop=True)
    tau_plot = tau[tau["ranked_by"].isin(["sensitivity", "specificity", "youden"])]
    n_models = ev["model"].nunique()
    fig2 = None
    if n_models >= MIN_MODELS_RANKING:
        fig2 = ReportFigure(
            name="ranking_stability_threshold", caption="Stability of the model ranking "
            "across thresholds: Kendall's tau-b between the ranking at each threshold and at "
            "the operating threshold, by the metric ranked.",
            alt="Kendall tau of the model ranking against threshold.",
            plot=_curve(tau_plot, logx, vline, color="ranked_by", linetype=True,
                        ylab="Kendall tau vs operating ranking"),
            data=tau_plot[["ranked_by", "threshold", "estimate", "n"]], width=7.5, height=3.0)
    picks = grid[np.linspace(0, len(grid) - 1, min(9, len(grid))).round().astype(int)]
    sel = sweep[sweep["threshold"].isin(picks)]
    rows = []
    models = model_order(study)
    for t in picks:
        s = sel[sel["threshold"] == t]
        row = {"threshold": text.num(t, 1)}
        for mdl in models:
            v = s[(s["estimand"] == "sensitivity") & (s["model"] == mdl)]["estimate"]
            row[f"sens_{mdl}"] = text.num(v.iloc[0]) if len(v) else text.DASH
        for rb in ("sensitivity", "youden"):
            v = s[(s["estimand"] == "kendall_tau") & (s["ranked_by"] == rb)]["estimate"]
            row[f"tau_{rb}"] = text.num(v.iloc[0]) if len(v) else text.DASH
        rows.append(row)
    disp = pd.DataFrame(rows)
    table = ReportTable(
        name="threshold_sweep", caption="Sensitivity per model and ranking agreement at "
        "selected thresholds.", data=sweep, display=disp,
        labels={"threshold": "Threshold", **{f"sens_{mm}": str(mm) for mm in models},
                "tau_sensitivity": "by sensitivity", "tau_youden": "by Youden's J"},
        spanners=(("Sensitivity", [f"sens_{mm}" for mm in models]),
                  ("Kendall tau vs operating ranking", ["tau_sensitivity", "tau_youden"])),
        notes=("Thresholds are quantiles of the evaluation scores; the full sweep (every "
               "metric, threshold and interval) is in tables/threshold_sweep.csv. "
               "The sweep is exploratory (STARD 12a).",))
    tmin = tau_plot.groupby("ranked_by")["estimate"].min()
    lowest = (f"lowest Kendall tau by sensitivity: "
              f"{text.num(tmin.get('sensitivity', np.nan))}")
    if fig2 is not None:
        md = (f"@fig-threshold-sweep shows the trade-off around the operating threshold; "
              f"@fig-ranking-stability-threshold and @tbl-threshold-sweep show how far the "
              f"model ranking depends on it ({lowest}).")
    elif n_models == 2:
        md = (f"@fig-threshold-sweep shows the trade-off around the operating threshold; "
              f"@tbl-threshold-sweep shows whether the ranking of the two models depends on "
              f"it ({lowest}). The ranking stability is not drawn: Kendall's tau between two "
              f"rankings of two models is +1 (same order) or \u22121 (swapped), so a curve "
              f"would show nothing the table does not; it is drawn from "
              f"{MIN_MODELS_RANKING} models on.")
    else:
        md = ("@fig-threshold-sweep shows the trade-off around the operating threshold "
              "(one model: no ranking to compare).")
    return Section(KEY, TITLE).add(md, fig1, fig2, table)
