"""Flow of cases (STARD 2015 item 19): every input row included or excluded, with a reason.

The accountability table sums to the input row count (a check, not an estimate); the
diagram draws the same counts. Reference-standard positives/negatives per model and the
calls come from the analysis layer (``row_flow``, ``confusion_counts``).
"""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, flow_diagram
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "flow"
TITLE = "Flow of cases"
HALF = "detection"


def accountability(study) -> pd.DataFrame:
    """Input rows by disposition and reason (``Results['row_flow']``; sums to the input)."""
    return study.results["row_flow"]


def normalised(study) -> tuple[str, ...]:
    """The readers' Unicode NFC rewrites of the cases table (``cases.unicode_nfc``, from
    ``stats.schema.unify_text``): one sentence each, so no merge of two spellings is
    silent."""
    from stats.schema import merge_notes

    merged = study.results.decisions.cases.unicode_nfc or []
    return tuple(f"Text normalised when read: {line}." for line in merge_notes(merged))


def build(study) -> Section:
    acc = accountability(study)
    counts = D.counts(study)
    overall = counts[counts["group_var"] == "overall"].reset_index(drop=True)
    n_models = study.cases["model"].nunique()
    disp = pd.DataFrame({
        "disposition": acc["disposition"].str.capitalize(), "reason": acc["reason"],
        "rows": acc["rows"].map(text.count), "cases": acc["cases"].map(text.count),
        "patients": acc["patients"].map(text.count),
        "positives": acc["positives"].map(text.count),
        "negatives": acc["negatives"].map(text.count)})
    table = ReportTable(
        name="flow_accountability", caption="Accountability of every input row: included or "
        "excluded, with the reason; the rows add up to the input table.",
        data=acc, display=disp,
        labels={"disposition": "Disposition", "reason": "Reason", "rows": "Rows",
                "cases": "Cases", "patients": "Patients", "positives": "Reference positive",
                "negatives": "Reference negative"},
        spanners=(("Unique cases", ["positives", "negatives"]),),
        notes=(f"Rows are model \u00d7 case pairs ({n_models} models, one row per model and "
               "case); cases and patients are unique identifiers.", *normalised(study)))
    inc = acc[acc["disposition"] == "included"]
    exc = acc[acc["disposition"] == "excluded"]
    total = acc.iloc[-1]
    boxes = [{"x": 1.0, "y": 4.0, "kind": "flow",
              "label": f"Input table\n{int(total['rows'])} rows = {n_models} models \u00d7 "
                       f"{int(total['cases'])} cases\n({int(total['patients'])} patients)"}]
    arrows = []
    if len(exc):
        label = "Excluded\n" + "\n".join(f"{int(r.cases)} cases: {r.reason.split(':')[0]}"
                                          for r in exc.itertuples())
        boxes.append({"x": 1.78, "y": 3.0, "kind": "excluded", "label": label})
        # the arrow stops at the box's left edge (about 0.0088 x-units per character)
        half = 0.0088 * max(len(line) for line in label.split("\n")) + 0.02
        arrows.append({"x": 1.0, "y": 3.0, "xend": 1.78 - half, "yend": 3.0})
    n_inc = int(inc["cases"].sum())
    boxes.append({"x": 1.0, "y": 2.0, "kind": "flow",
                  "label": f"Evaluated\n{n_inc} cases"})
    arrows.append({"x": 1.0, "y": 3.7, "xend": 1.0, "yend": 2.35})
    pos, neg = int(inc["positives"].sum()), int(inc["negatives"].sum())
    for x, lab, n, a, b in ((0.45, "Reference positive", pos, "tp", "fn"),
                            (1.55, "Reference negative", neg, "fp", "tn")):
        lines = [f"{text.count(r[a])} called positive / {text.count(r[b])} negative ({r['model']})"
                 for _, r in overall.iterrows()]
        boxes.append({"x": x, "y": 0.7, "kind": "result",
                      "label": f"{lab}: {n} cases\n" + "\n".join(lines)})
        arrows.append({"x": 1.0, "y": 1.7, "xend": x, "yend": 1.15})
    boxes_df, arrows_df = pd.DataFrame(boxes), pd.DataFrame(arrows)
    fig = ReportFigure(
        name="flow_diagram", caption="STARD-style flow of cases: input rows, exclusions with "
        "reasons, reference-standard results and each model's calls at the operating threshold.",
        alt=f"Flow diagram: {int(total['cases'])} cases in, {n_inc} evaluated, {pos} reference "
            f"positive and {neg} reference negative.",
        plot=flow_diagram(boxes_df, arrows_df), data=boxes_df.assign(
            label=boxes_df["label"].str.replace("\n", " | ")), width=7.5, height=4.0)
    md = (f"The cases table has {int(total['rows'])} rows ({n_models} models \u00d7 "
          f"{int(total['cases'])} cases from {int(total['patients'])} patients). "
          f"@tbl-flow-accountability accounts for every row and @fig-flow-diagram draws the "
          f"flow; {n_inc} cases ({pos} reference positive, {neg} reference negative) enter "
          f"the evaluation.")
    return Section(KEY, TITLE).add(md, table, fig)
