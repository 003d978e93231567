"""Subgroup tables (one per plan axis and intersection): sensitivity and specificity with
CIs and n per level, per model; small cells marked. Numbers from ``stats.subgroup_metrics``
(or ``stats.confusion_counts`` + ``stats.proportion_ci``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "subgroups"
TITLE = "Subgroup accuracy"
HALF = "detection"


def axis_table(study, axis: tuple[str, ...]) -> ReportTable:
    det = study.plan.detection
    m = D.metrics(study)
    name = D.axis_name(axis)
    data = m[(m["group_var"] == name) & m["estimand"].isin(["sensitivity", "specificity"])]
    data = D.sort_cells(data.reset_index(drop=True), study, axis)
    w = D.sort_cells(D.wide(data), study, axis)
    c = D.counts(study)
    c = c[c["group_var"] == name].set_index(["model", "group_level"])
    tp = [c.loc[(mm, lv), "tp"] if (mm, lv) in c.index else float("nan")
          for mm, lv in zip(w["model"], w["group_level"])]
    tn = [c.loc[(mm, lv), "tn"] if (mm, lv) in c.index else float("nan")
          for mm, lv in zip(w["model"], w["group_level"])]
    disp = pd.DataFrame({
        "model": w["model"].astype(str),
        "level": [str(lv).replace(":", " \u00d7 ") for lv in w["group_level"]],
        "n": w["n"].map(text.count),
        "sens": _marked(w, "sensitivity", "n_pos", det.small_n),
        "sens_n": [text.frac(a, b) for a, b in zip(tp, w["n_pos"])],
        "spec": _marked(w, "specificity", "n_neg", det.small_n),
        "spec_n": [text.frac(a, b) for a, b in zip(tn, w["n_neg"])]})
    label = D.axis_label(axis)
    role = D.role(study, axis)
    return ReportTable(
        name=f"subgroup_{text.slug(name.replace(':', '_x_'))}",
        caption=f"Sensitivity and specificity by {label}, per model, estimate "
                f"[{int(round(det.conf_level * 100))}% CI]. {role.capitalize()}.",
        data=D.with_counts(study, data), display=disp, group_col="model",
        labels={"level": label[:1].upper() + label[1:], "n": "n", "sens": "Sensitivity",
                "sens_n": "TP/P", "spec": "Specificity", "spec_n": "TN/N"},
        spanners=(("Reference positive", ["sens", "sens_n"]),
                  ("Reference negative", ["spec", "spec_n"])),
        notes=(D.methods_note(study), heterogeneity_note(study, axis),
               f"\u2020 fewer than {det.small_n} reference positives (negatives) behind the "
               f"sensitivity (specificity) (small n); \u2021 design effect not estimable: "
               f"where every scan of the cell is detected (or none), the interval treats the "
               f"cell's scans as independent (Korn & Graubard's rule), so it may be too "
               f"narrow; where all of them belong to one patient, it counts them as one "
               f"observation (effective size 1, the widest interval); \u2014 not estimable "
               f"(no cases)."))


def _marked(w: pd.DataFrame, estimand: str, n_col: str, small_n: int) -> list[str]:
    """The estimand's "estimate [CI]" with \u2020 where its denominator is below
    ``small_n`` and \u2021 where its design effect could not be estimated (flag
    ``deff_not_estimable``; the interval then treats the cell's scans as independent)."""
    from stats.clustered import FLAG_DEFF

    cis = text.ci_vec(w, est=f"{estimand}_estimate", low=f"{estimand}_conf_low",
                      high=f"{estimand}_conf_high")
    flags = w[f"{estimand}_flag"].fillna("").astype(str)
    return [c if c == text.DASH else
            c + D.small_mark(n, small_n) + (" \u2021" if FLAG_DEFF in f.split(";") else "")
            for c, n, f in zip(cis, w[n_col], flags)]


def _p(p) -> str:
    """"p = 0.615" or "p < 0.001"."""
    shown = text.pvalue(p)
    return f"p {shown}" if shown.startswith("<") else f"p = {shown}"


def heterogeneity_note(study, axis: tuple[str, ...]) -> str:
    """One line per estimand: the test of equal sensitivity (specificity) across the
    levels, per model, with Holm's p for prespecified axes (``Results['heterogeneity']``)."""
    h = study.results["heterogeneity"]
    h = h[h["group_var"] == D.axis_name(axis)]
    parts = []
    for est, g in h.groupby("estimand", sort=False):
        cells = []
        for r in g.itertuples():
            if pd.isna(r.statistic):
                cells.append(f"{r.model} not testable")
                continue
            adj = "" if pd.isna(r.p_adjusted) else f", Holm {_p(r.p_adjusted)}"
            dist = (f"F({text.num(r.df, 1)}, {text.num(r.df_denominator, 0)})"
                    if r.method == "rao-scott-f" else f"\u03c7\u00b2({text.count(r.df)})")
            small = (" (small expected counts: the reference distribution is approximate)"
                     if "small_expected" in str(getattr(r, "flag", "") or "").split(";") else "")
            cells.append(f"{r.model} {dist} = {text.num(r.statistic)}, {_p(r.p_value)}{adj}"
                         f"{small}")
        parts.append(f"Equal {est} across levels: " + "; ".join(cells))
    method = h["method"].iloc[0] if len(h) else ""
    how = ("Rao-Scott second-order corrected Pearson chi-square, F reference (scans clustered "
           "within patients)" if method == "rao-scott-f"
           else "Pearson chi-square without continuity correction")
    from stats.detection import missing_levels

    excluded = [lv for v in h.get("levels_excluded", []) for lv in str(v).split(";") if lv]
    missing = bool(missing_levels(excluded).any()) if excluded else False
    left_out = (" Scans with a missing value on the axis are left out of the tests (a "
                "missing value is no level)." if missing else "")
    return f"Tests ({how}). " + ". ".join(parts) + "." + left_out if parts else ""


def build(study) -> Section:
    det = study.plan.detection
    sec = Section(KEY, TITLE)
    pre = list(det.subgroups)
    exp = [a for a in det.exploratory_subgroups if a not in pre]
    tables = [axis_table(study, axis) for axis in pre + exp]
    refs = ", ".join(f"@{t.id}" for t in tables[:len(pre)])
    md = (f"Subgroup axes prespecified in the plan: "
          f"{text.md(text.human_list(D.axis_label(a) for a in pre))} ({refs}). ")
    if exp:
        md += (f"Exploratory axes (not in the prespecified family, tests unadjusted): "
               f"{text.md(text.human_list(D.axis_label(a) for a in exp))} "
               f"({', '.join(f'@{t.id}' for t in tables[len(pre):])}). ")
    md += ("Every level is shown, empty cells included, with its counts; under each table a "
           "test of equal sensitivity and specificity across its levels, with Holm's "
           "adjustment over the prespecified axes.")
    sec.add(md)
    for t in tables:
        sec.add(t)
    return sec
