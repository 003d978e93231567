"""2x2 tables (STARD 23): calls at the operating threshold against the reference standard,
per model (``stats.confusion_counts``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "twobytwo"
TITLE = "Two-by-two tables"
HALF = "detection"


def build(study) -> Section:
    c = D.counts(study)
    overall = c[c["group_var"] == "overall"].reset_index(drop=True)
    data = overall[["model", "n", "n_pos", "n_neg", "tp", "fp", "fn", "tn"]].copy()
    thr = D.calls(study).attrs.get("threshold", {}).get("values", {})
    data["called_pos"] = data["tp"] + data["fp"]
    data["called_neg"] = data["fn"] + data["tn"]
    data["threshold"] = data["model"].map(lambda m: thr.get(m, float("nan")))
    rows = []
    for r in overall.itertuples():
        for call, a, b in (("Called positive", r.tp, r.fp), ("Called negative", r.fn, r.tn)):
            rows.append({"model": str(r.model), "call": call, "pos": text.count(a),
                         "neg": text.count(b), "total": text.count(a + b)})
        rows.append({"model": str(r.model), "call": "Total", "pos": text.count(r.n_pos),
                     "neg": text.count(r.n_neg), "total": text.count(r.n)})
    disp = pd.DataFrame(rows)
    table = ReportTable(
        name="two_by_two", caption="Scan-level calls against the reference standard, per "
        "model, at the operating threshold (evaluation set).",
        data=data, display=disp, group_col="model",
        labels={"call": "Model call", "pos": "Positive", "neg": "Negative", "total": "Total"},
        spanners=(("Reference standard", ["pos", "neg"]),),
        notes=("Call: positive when the score (predicted tumour voxels) is at or above the "
               "threshold; thresholds per model are in tables/two_by_two.csv.",))
    md = "@tbl-two-by-two gives the cross-classification of each model's calls."
    return Section(KEY, TITLE).add(md, table)
