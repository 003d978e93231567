"""Precision of subgroup estimates (FDA-style planning): the achieved 95% CI half-width of
sensitivity and specificity in every prespecified cell, and the reference positives
(negatives) and scans a cell would need for the plan's target half-width at the model's
overall value (``Results['precision']``, ``stats.precision_table``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..study import model_order
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "precision"
TITLE = "Precision of subgroup estimates"
HALF = "detection"


def build(study) -> Section:
    pr = study.results["precision"]
    pr = pr[pr["method"] == "wilson"]
    target = float(pr["target_half_width"].iloc[0])
    keys = ["model", "group_var", "group_level"]
    sens = pr[pr["estimand"] == "sensitivity"].set_index(keys)
    spec = pr[pr["estimand"] == "specificity"].set_index(keys)
    # left join: the cells keep the analysis's order (an outer join would sort them)
    both = sens.join(spec, rsuffix="_spec", how="left").reset_index()
    order = {m: i for i, m in enumerate(model_order(study))}
    both = both.assign(_m=both["model"].astype(str).map(order)).sort_values(
        "_m", kind="stable").drop(columns="_m").reset_index(drop=True)

    def hw(x) -> str:
        return text.DASH if pd.isna(x) else f"\u00b1{100 * float(x):.1f}"

    disp = pd.DataFrame({
        "model": both["model"].astype(str),
        "cell": ["Overall" if v == "overall" else f"{D.axis_label(v)}: {str(lv).replace(':', ' × ')}"
                 for v, lv in zip(both["group_var"], both["group_level"])],
        "n_pos": both["n_pos"].map(text.count),
        "sens_hw": both["half_width"].map(hw),
        "sens_need": both["n_required"].map(text.count),
        "n_neg": both["n_neg"].map(text.count),
        "spec_hw": both["half_width_spec"].map(hw),
        "spec_need": both["n_required_spec"].map(text.count)})
    short = both[(both["half_width"] > target) & (both["group_var"] != "overall")]
    cells = both.loc[both["group_var"] != "overall", ["model", "group_var", "group_level"]]
    n_cells = cells.drop_duplicates().shape[0]
    table = ReportTable(
        name="precision", caption=f"Planning half-width of the 95% Wilson CI (percentage points) "
        f"per prespecified cell at its observed counts, and the reference positives (negatives) a cell needs for a "
        f"half-width of \u00b1{100 * target:.0f} points at the model's overall sensitivity "
        f"(specificity){_icc_text(study.results.decisions.get('precision.icc'))}. "
        f"Prespecified.", data=pr, display=disp, group_col="model",
        labels={"cell": "Subgroup", "n_pos": "Positives", "sens_hw": "Half-width",
                "sens_need": "Positives needed", "n_neg": "Negatives",
                "spec_hw": "Half-width", "spec_need": "Negatives needed"},
        spanners=(("Sensitivity", ["n_pos", "sens_hw", "sens_need"]),
                  ("Specificity", ["n_neg", "spec_hw", "spec_need"])),
        notes=("Required numbers solve the Wilson half-width for n at the expected value; "
               "Clopper-Pearson requirements and the scans implied by each cell's prevalence "
               "are in tables/precision.csv."
               + (" With repeated scans the half-widths use one study-wide ICC, a planning "
                  "assumption: the subgroup tables' intervals use each cell's own design "
                  "effect and can be wider or narrower."
                  if study.results.decisions.precision.icc else ""),))
    md = (f"@tbl-precision shows how precise each prespecified subgroup estimate is and how "
          f"many reference positives it would need for a \u00b1{100 * target:.0f}-point "
          f"interval; {text.count(short[['model', 'group_var', 'group_level']].drop_duplicates().shape[0])} "
          f"of the {text.count(n_cells)} model \u00d7 cell combinations fall short of that "
          f"target for sensitivity. "
          f"The command clinrel plan-size gives the same numbers before data exist.")
    return Section(KEY, TITLE).add(md, table)


def _icc_text(icc: dict | None) -> str:
    """The caption's words for the design effect of repeated scans (the analysis layer's
    ``precision.icc`` decision)."""
    if not icc:
        return "; scans as independent (one scan per patient)"
    src = ("estimated from this study: the one-way ANOVA estimator over patients of "
           "whether each call is right, the largest over models and estimands"
           if icc["source"] == "estimated"
           else "from the plan")
    return (f"; repeated scans of one patient: Wilson at the effective size n / deff, "
            f"deff = 1 + (m - 1) ICC with m the cell's Kish mean number of scans per "
            f"patient and ICC {icc['value']:.3f} ({src}), also in the numbers needed")
