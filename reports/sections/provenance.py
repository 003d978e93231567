"""Metadata provenance: how each metadata field was obtained (DICOM header, report text,
review), whether every value carries an evidence span, and agreement between extractors
(share agreeing with a Wilson CI, Cohen's kappa; ``inference_runner.metadata.compare``
and ``stats.proportion_ci``). Evidence text itself is never shown (it may identify)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section, SkipSection

KEY = "provenance"
TITLE = "Metadata provenance"
HALF = "any"
REQUIRES = ("proportion_ci",)
NEEDED = ("case_id", "field", "value", "extractor")


def applies(study) -> bool:
    return study.metadata is not None


def build(study) -> Section:
    import stats

    md = study.metadata
    if md is None:
        raise SkipSection("the plan names no inputs.metadata (metadata evidence table)")
    missing = [c for c in NEEDED if c not in md.columns]
    if missing:
        raise stats.ContractError(
            f"{study.plan.metadata}: metadata evidence table lacks column(s) "
            f"{', '.join(missing)}; write it with clinrel metadata extract")
    ev = md.copy()
    has_span = ev["evidence"].fillna("").astype(str).str.len() > 0 if "evidence" in ev else \
        pd.Series(False, index=ev.index)
    ev["with_evidence"] = has_span.astype(int)
    counts = (ev.groupby(["field", "extractor"], sort=True)
              .agg(values=("case_id", "size"), cases=("case_id", "nunique"),
                   with_evidence=("with_evidence", "sum"), distinct=("value", "nunique"))
              .reset_index())
    disp_c = pd.DataFrame({"field": counts["field"].astype(str),
                           "extractor": counts["extractor"].astype(str),
                           "cases": counts["cases"].map(text.count),
                           "evidence": [text.pct(a, b, 0) for a, b in
                                        zip(counts["with_evidence"], counts["values"])],
                           "distinct": counts["distinct"].map(text.count)})
    counts["evidence_percent"] = 100 * counts["with_evidence"] / counts["values"]
    t_counts = ReportTable(
        name="metadata_sources", caption="Metadata values per field and extractor, and the "
        "share carrying a verbatim evidence span.", data=counts, display=disp_c,
        group_col="field",
        labels={"extractor": "Extractor", "cases": "Cases", "evidence": "With evidence",
                "distinct": "Distinct values"},
        notes=("Extractor 'review': values set by a human reviewer after a disagreement. "
               "Evidence spans are kept in the evidence table, not printed here.",))
    sec = Section(KEY, TITLE)
    try:
        from inference_runner.metadata.compare import agreement
    except ImportError:
        agreement = None
    t_agree = None
    if agreement is not None:
        ag = agreement(ev).reset_index(drop=True)
        if len(ag):
            lo, hi = stats.proportion_ci(ag["n_agree"].to_numpy(float),
                                         ag["n_both"].to_numpy(float))
            ag["conf_low"], ag["conf_high"] = lo, hi
            reviewed = (ev[ev["extractor"] == "review"].groupby("field")["case_id"].nunique())
            ag["reviewed"] = ag["field"].map(reviewed).fillna(0).astype(int)
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
            f"{len(ev)} values for {n_fields} fields (@tbl-metadata-sources)"
            + ("; @tbl-metadata-agreement compares the extractors." if t_agree else "."),
            t_counts, t_agree)

    return sec
