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


def scans_per_patient(study) -> list[tuple[str, int]]:
    """``[(level, evaluated patients)]``: the evaluated patients by their number of scans
    (``Results['cohort_patients']``, variable ``rows_per_unit``)."""
    pat = study.results.get("cohort_patients")
    if pat is None:
        return []
    rows = pat[(pat["variable"] == "rows_per_unit") & (pat["estimand"] == "count")
               & (pat["group_var"] == "overall")]
    return [(str(lv), int(n)) for lv, n in zip(rows["level"], rows["estimate"])]


def build(study) -> Section:
    acc = accountability(study)
    counts = D.counts(study)
    overall = counts[counts["group_var"] == "overall"].reset_index(drop=True)
    n_models = study.cases["model"].nunique()
    disp = pd.DataFrame({
        "disposition": acc["disposition"].str.capitalize(), "reason": acc["reason"],
        "rows": acc["rows"].map(text.count), "cases": acc["cases"].map(text.count),
        "positives": acc["positives"].map(text.count),
        "negatives": acc["negatives"].map(text.count),
        "patients": acc["patients"].map(text.count),
        "pos_pat": acc["positive_patients"].map(text.count),
        "neg_pat": acc["negative_patients"].map(text.count)})
    per = scans_per_patient(study)
    per_text = ", ".join(f"{lv}: {n}" for lv, n in per)
    table = ReportTable(
        name="flow_accountability", caption="Accountability of every input row: included or "
        "excluded, with the reason, in scans and in patients; the rows add up to the input "
        "table.",
        data=acc, display=disp,
        labels={"disposition": "Disposition", "reason": "Reason", "rows": "Rows",
                "cases": "All", "positives": "Reference positive",
                "negatives": "Reference negative", "patients": "All",
                "pos_pat": "With a positive scan", "neg_pat": "Without"},
        spanners=(("Scans", ["cases", "positives", "negatives"]),
                  ("Patients", ["patients", "pos_pat", "neg_pat"])),
        notes=(f"Rows are model \u00d7 scan pairs ({n_models} models, one row per model and "
               "scan); scans and patients are unique identifiers. A patient is reference "
               "positive with at least one positive scan (with and without add up to the "
               "patients)."
               + (f" Evaluated patients by their number of scans: {per_text}." if per else "")
               + _excluded_patients(acc), *normalised(study)))
    inc = acc[acc["disposition"] == "included"]
    exc = acc[acc["disposition"] == "excluded"]
    total = acc.iloc[-1]
    boxes = [{"x": 1.0, "y": 4.0, "kind": "flow",
              "label": f"Input table: {int(total['rows'])} rows = {n_models} models \u00d7 "
                       f"{int(total['cases'])} scans\n{int(total['cases'])} scans from "
                       f"{int(total['patients'])} patients ({int(total['positive_patients'])} "
                       f"with a positive scan, {int(total['negative_patients'])} without)"}]
    arrows = []
    label = "Excluded\n" + ("\n".join(
        f"{int(r.cases)} scans, {int(r.patients)} patients ({int(r.patients_entirely)} "
        f"entirely): {r.reason.split(':')[0]}" for r in exc.itertuples())
        if len(exc) else "0 scans, 0 patients")
    # the box is drawn with no exclusion too (STARD: every step counted, in both units)
    boxes.append({"x": 1.62, "y": 3.0, "kind": "excluded", "label": label})
    # the arrow stops at the box's left edge (about 0.0088 x-units per character)
    half = 0.0088 * max(len(line) for line in label.split("\n")) + 0.02
    arrows.append({"x": 1.0, "y": 3.0, "xend": 1.62 - half, "yend": 3.0})
    n_inc = int(inc["cases"].sum())
    p_inc = int(inc["patients"].sum())
    boxes.append({"x": 1.0, "y": 2.0, "kind": "flow",
                  "label": f"Evaluated: {n_inc} scans from {p_inc} patients"
                           + (f"\nscans per patient: {per_text}" if per else "")})
    arrows.append({"x": 1.0, "y": 3.7, "xend": 1.0, "yend": 2.35})
    pos, neg = int(inc["positives"].sum()), int(inc["negatives"].sum())
    pos_p, neg_p = int(inc["positive_patients"].sum()), int(inc["patients_with_negative"].sum())
    for x, lab, n, pn, a, b in ((0.45, "Reference positive", pos, pos_p, "tp", "fn"),
                                (1.55, "Reference negative", neg, neg_p, "fp", "tn")):
        lines = [f"{text.count(r[a])} called positive / {text.count(r[b])} negative ({r['model']})"
                 for _, r in overall.iterrows()]
        boxes.append({"x": x, "y": 0.7, "kind": "result",
                      "label": f"{lab}: {n} scans of {pn} patients\n" + "\n".join(lines)})
        arrows.append({"x": 1.0, "y": 1.7, "xend": x, "yend": 1.15})
    boxes_df, arrows_df = pd.DataFrame(boxes), pd.DataFrame(arrows)
    fig = ReportFigure(
        name="flow_diagram", caption="STARD-style flow of scans and patients: input rows, "
        "exclusions with reasons, scans per patient, reference-standard results and each "
        "model's calls (scans) at the operating threshold; a patient with positive and "
        "negative scans counts in both result boxes.",
        alt=f"Flow diagram: {int(total['cases'])} scans of {int(total['patients'])} patients "
            f"in, {n_inc} scans of {p_inc} patients evaluated, {pos} scans reference positive "
            f"and {neg} reference negative.",
        plot=flow_diagram(boxes_df, arrows_df), data=boxes_df.assign(
            label=boxes_df["label"].str.replace("\n", " | ")), width=7.5, height=4.2)
    md = (f"The cases table has {int(total['rows'])} rows ({n_models} models \u00d7 "
          f"{int(total['cases'])} scans from {int(total['patients'])} patients, "
          f"{int(total['positive_patients'])} of them with a positive scan). "
          f"@tbl-flow-accountability accounts for every row, in scans and in patients, and "
          f"@fig-flow-diagram draws the flow; {n_inc} scans ({pos} reference positive, "
          f"{neg} reference negative) from {p_inc} patients ({pos_p} with a positive scan) "
          f"enter the evaluation.")
    return Section(KEY, TITLE).add(md, table, fig)


def _excluded_patients(acc: pd.DataFrame) -> str:
    """How many excluded patients lost every scan, per reason (the rest keep others)."""
    exc = acc[acc["disposition"] == "excluded"]
    if not len(exc):
        return " No scan or patient was excluded."
    return " " + " ".join(
        f"Excluded for {r.reason.split(':')[0]}: {int(r.patients)} patients, "
        f"{int(r.patients_entirely)} of them with every scan excluded."
        for r in exc.itertuples())
