"""Prespecified performance goals: does each prespecified subgroup meet its goal? One
table per plan (``Results['performance_goals']``, ``stats.performance_goals``): per goal,
subgroup and model the estimate with its one-sided limit, the Holm-adjusted one-sided p
and the verdict (met, not met, inconclusive with the count that would settle it)."""
from __future__ import annotations

import pandas as pd

from stats.detection import unplanned_levels

from .. import text
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "goals"
TITLE = "Prespecified performance goals"
HALF = "detection"
VERDICT = {"met": "met", "not_met": "not met", "inconclusive": "inconclusive"}


def applies(study) -> bool:
    return bool(study.plan.detection.goals)


def methods_sentence(study) -> str:
    """How the goals were tested (methods section and the table's note)."""
    det = study.plan.detection
    def one(g) -> str:
        rule = (f"{g.metric} above {text.num(g.goal)}" if g.goal is not None
                else f"{g.metric} above the overall value minus {text.num(g.margin)}")
        rule += f", one-sided {text.num(100 * g.alpha, 1).rstrip('0').rstrip('.')}%"
        return f"{g.name} ({rule})" if g.name else rule

    goals = "; ".join(one(g) for g in det.goals)
    cluster = study.results.decisions.detection.cluster
    exploratory = study.results["roles"]["goals"] != "prespecified"
    return ("**Performance goals.** Prespecified goals: " + text.md(goals) + ". Each is tested "
            "in every level of the prespecified subgroup axes (not the Missing or not "
            "applicable levels) and, for an absolute goal, overall: an absolute goal by the "
            "exact one-sided binomial test with Clopper-Pearson one-sided limits"
            + (f" (where a {text.md(cluster)} has several scans in a subgroup, at Korn & "
               f"Graubard's effective counts, as survey's svyciprop(method = \"beta\"))"
               if cluster else "")
            + "; a margin against overall by Farrington & Manning's score test of the "
            "subgroup against the rest of the cohort, rescaled to the difference from "
            "overall" + (" (at each side's effective size)" if cluster else "") + ". "
            + ("Exploratory: the verdicts read the unadjusted p-values. " if exploratory else
               "Holm's adjustment runs per goal and model over the subgroups (the overall row "
               "is a test of its own). ")
            + "A subgroup meets its goal when its adjusted one-sided p-value is below alpha, "
            "does not meet it when its one-sided upper limit is below the goal, and is "
            "otherwise inconclusive, with the number of reference positives (the metric's "
            "denominator) at which the estimate would settle it at the family's Bonferroni "
            "level. The tests keep their size under repeated scans in simulation "
            "(bench/goals_size.md).")


def build(study) -> Section:
    g = study.results["performance_goals"]
    shown = g[(g["group_var"] == "overall") | ~g["group_var"].str.contains(":", regex=False)]
    shown = shown[~unplanned_levels(shown["group_level"].to_numpy())]
    models = list(pd.unique(g["model"]))
    keys = ["goal_name", "group_var", "group_level"]
    rows = shown[keys].drop_duplicates().reset_index(drop=True)
    disp = pd.DataFrame({
        "goal": rows["goal_name"].astype(str),
        "cell": ["Overall" if v == "overall" else f"{D.axis_label(v)}: {lv}"
                 for v, lv in zip(rows["group_var"], rows["group_level"])]})
    for m in models:
        part = rows.merge(shown[shown["model"] == m], on=keys, how="left")
        disp[f"est_{m}"] = [
            text.DASH if pd.isna(e) else f"{text.num(e)} (\u2265 {text.num(lo)})"
            for e, lo in zip(part["estimate"], part["conf_low"])]
        disp[f"p_{m}"] = [text.pvalue(p) for p in part["p_adjusted"].fillna(part["p_value"])]
        disp[f"v_{m}"] = [
            VERDICT.get(v, text.DASH) + (f" (n \u2248 {text.count(n)} for "
                                         f"{VERDICT[w]})" if v == "inconclusive"
                                         and pd.notna(n) and w else "")
            for v, n, w in zip(part["verdict"], part["n_needed"], part["n_needed_for"])]
    counts = g.groupby(["goal_name", "model"], sort=False)["verdict"].value_counts().unstack(
        fill_value=0)
    summary = "; ".join(
        f"{goal}, {m}: {int(r.get('met', 0))} met, {int(r.get('not_met', 0))} not met, "
        f"{int(r.get('inconclusive', 0))} inconclusive"
        for (goal, m), r in counts.iterrows())
    table = ReportTable(
        name="performance_goals",
        caption="Prespecified performance goals per subgroup and model: estimate (one-sided "
                "lower limit), Holm-adjusted one-sided p and verdict.",
        data=g, display=disp, group_col="goal",
        labels={"cell": "Subgroup", **{f"est_{m}": "Estimate (lower)" for m in models},
                **{f"p_{m}": "Holm p" for m in models}, **{f"v_{m}": "Verdict" for m in models}},
        spanners=tuple((str(m), [f"est_{m}", f"p_{m}", f"v_{m}"]) for m in models),
        notes=("A margin goal's estimate is the subgroup's value minus the overall value "
               "(its bound: minus the margin). n: the denominator count (e.g. reference "
               "positives) at which the estimate would settle the verdict. Intersection "
               "subgroups are in tables/performance_goals.csv.",), wide=len(models) > 2)
    md = (f"@tbl-performance-goals answers whether each prespecified subgroup meets its "
          f"performance goal ({text.md(summary)}; every prespecified cell, intersections "
          f"included). " + methods_sentence(study).replace("**Performance goals.** ", ""))
    return Section(KEY, TITLE).add(md, table)
