"""Metadata provenance: how each metadata field was obtained (DICOM header, report text,
review), whether every value carries an evidence span, and agreement between extractors
(share agreeing with a Wilson CI, Cohen's kappa; ``stats.extractor_agreement`` through the
analysis layer). Evidence text itself is never shown (it may identify)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section, SkipSection

KEY = "provenance"
TITLE = "Metadata provenance"
HALF = "any"


def applies(study) -> bool:
    return study.metadata is not None


def build(study) -> Section:
    md = study.metadata
    if md is None:
        raise SkipSection("the plan names no inputs.metadata (metadata evidence table)")
    counts = study.results["metadata_sources"]
    disp_c = pd.DataFrame({"field": counts["field"].astype(str),
                           "extractor": counts["extractor"].astype(str),
                           "cases": counts["cases"].map(text.count),
                           "evidence": [text.pct(a, b, 0) for a, b in
                                        zip(counts["with_evidence"], counts["values"])],
                           "distinct": counts["distinct"].map(text.count)})
    t_counts = ReportTable(
        name="metadata_sources", caption="Metadata values per field and extractor, and the "
        "share carrying a verbatim evidence span.", data=counts, display=disp_c,
        group_col="field",
        labels={"extractor": "Extractor", "cases": "Cases", "evidence": "With evidence",
                "distinct": "Distinct values"},
        notes=("Extractor 'review': values set by a human reviewer after a disagreement. "
               "Evidence spans are kept in the evidence table, not printed here.",))
    sec = Section(KEY, TITLE)
    t_agree = None
    ag = study.results["metadata_agreement"]
    if len(ag):
        disp_a = pd.DataFrame({
            "field": ag["field"].astype(str),
            "pair": ag["extractor_a"].astype(str) + " vs " + ag["extractor_b"].astype(str),
            "both": ag["n_both"].map(text.count),
            "agree": [text.ci(a, lo_, hi_) + f" ({text.frac(k, n)})" for a, lo_, hi_, k, n in
                      zip(ag["agreement"], ag["conf_low"], ag["conf_high"], ag["n_agree"],
                          ag["n_both"])],
            "kappa": [text.num(k) for k in ag["kappa"]],
            "disagree": ag["n_disagree"].map(text.count),
            "reviewed": ag["reviewed"].map(text.count)})
        t_agree = ReportTable(
            name="metadata_agreement", caption="Agreement between extractors per field: "
            "share agreeing [95% Wilson CI], Cohen's kappa, disagreements and reviews.",
            data=ag, display=disp_a, group_col="field",
            labels={"pair": "Extractors", "both": "Cases with both", "agree": "Agreement [CI]",
                    "kappa": "Cohen's kappa", "disagree": "Disagreements",
                    "reviewed": "Reviewed"},
            notes=("Kappa is undefined (\u2014) with fewer than two cases or one category.",))
    n_fields = counts["field"].nunique()
    sec.add(f"The metadata evidence table ({text.md(study.plan.metadata.name)}) holds "
            f"{len(md)} values for {n_fields} fields (@tbl-metadata-sources)"
            + ("; @tbl-metadata-agreement compares the extractors." if t_agree else "."),
            t_counts, t_agree)
    return sec
