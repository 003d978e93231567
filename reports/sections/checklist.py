"""Checklist map: reporting-guideline items (STARD 2015, TRIPOD+AI, CLAIM 2024) -> the
sections of this appendix that address them. Only sections present in this report are
cited; items this appendix cannot address (study design, registration, ...) say so. The
missing-data items (STARD 15-16, TRIPOD+AI 11) cite sections only where the report says how
missing data were handled (Methods' missing-data sentence, or a "Missing" level in the
subgroup tables); otherwise they read not addressed."""
from __future__ import annotations

import pandas as pd

from ..tables import ReportTable
from . import ORDER, Section

KEY = "checklist"
TITLE = "Reporting checklist map"
HALF = "any"

#: (guideline, item, topic, section keys); the last element empty: not covered here
ITEMS = (
    ("STARD 2015", "12a", "Definition of and rationale for test positivity cut-offs, "
     "pre-specified vs exploratory", ("methods", "threshold")),
    ("STARD 2015", "14", "Methods for estimating or comparing measures of diagnostic accuracy",
     ("methods", "comparisons")),
    ("STARD 2015", "15-16", "Handling of indeterminate results and missing data",
     ("methods", "flow", "cohort", "adjusted")),
    ("STARD 2015", "17", "Analyses of variability in diagnostic accuracy, pre-specified vs "
     "exploratory", ("methods", "subgroups", "precision", "forest", "failure_map", "adjusted",
                     "site_meta")),
    ("STARD 2015", "19", "Flow of participants, using a diagram", ("flow",)),
    ("STARD 2015", "20", "Baseline demographic and clinical characteristics", ("cohort",)),
    ("STARD 2015", "23", "Cross tabulation of the index test results by the reference standard",
     ("twobytwo",)),
    ("STARD 2015", "24", "Estimates of diagnostic accuracy and their precision",
     ("overall", "subgroups")),
    ("STARD 2015", "other items", "Title, abstract, design, participants, test methods, "
     "sample size, discussion, registration, protocol, funding", ()),
    ("TRIPOD+AI", "11", "Missing data", ("methods", "cohort", "adjusted")),
    ("TRIPOD+AI", "12e", "Performance measures and their uncertainty",
     ("methods", "overall", "calibration", "crs")),
    ("TRIPOD+AI", "14", "Fairness: methods to assess performance across groups",
     ("methods", "subgroups", "adjusted")),
    ("TRIPOD+AI", "18f", "Open science: analysis code and software", ("methods",)),
    ("TRIPOD+AI", "20a-b", "Flow of participants; participant characteristics",
     ("flow", "cohort")),
    ("TRIPOD+AI", "23a", "Model performance with confidence intervals",
     ("overall", "calibration", "comparisons", "crs")),
    ("TRIPOD+AI", "23b", "Heterogeneity of performance across subgroups",
     ("subgroups", "forest", "failure_map", "adjusted", "site_meta")),
    ("CLAIM 2024", "7, 9", "Data sources; data preprocessing", ("flow", "provenance")),
    ("CLAIM 2024", "12", "De-identification", ("methods",)),
    ("CLAIM 2024", "28-29", "Performance metrics; statistical measures of significance and "
     "uncertainty", ("methods", "overall", "comparisons")),
    ("CLAIM 2024", "30", "Robustness or sensitivity analysis", ("threshold", "crs")),
    ("CLAIM 2024", "33-34", "Flow of participants; demographic and clinical characteristics",
     ("flow", "cohort")),
    ("CLAIM 2024", "35-36", "Performance on all data partitions; estimates of diagnostic "
     "accuracy and their precision", ("overall", "subgroups", "calibration")),
    ("CLAIM 2024", "37", "Failure analysis of incorrectly classified cases",
     ("failure_map", "subgroups")),
)


#: the missing-data items: their sections are cited only where this report describes
#: missing data (:func:`missing_data_sections`)
MISSING_DATA_ITEMS = (("STARD 2015", "15-16"), ("TRIPOD+AI", "11"))
#: what a missing-data item reads when this report says nothing about missing data
NOT_ADDRESSED_MISSING = ("not addressed in this report (no section of it says how missing "
                         "data were handled)")


def missing_data_sections(study, present: dict) -> set[str]:
    """The sections of this report that say how missing data were handled: Methods when it
    has its missing-data sentence (:func:`reports.sections.methods.missing_data`: the
    detection half), Subgroups when a subgroup table shows a "Missing" level. Empty: the
    missing-data items are not addressed (a CRS-only report)."""
    from stats.detection import MISSING

    from .methods import level_counts, missing_data

    out = set()
    if "methods" in present and missing_data(study) is not None:
        out.add("methods")
    if ("subgroups" in present and study.plan.detection is not None
            and study.cases is not None and level_counts(study, MISSING)[0]):
        out.add("subgroups")
    return out


#: items about the detection design: Methods describes them only when the report has the
#: detection half (a CRS-only report's Methods does not)
DETECTION_ITEMS = (("STARD 2015", "12a"), ("STARD 2015", "14"), ("STARD 2015", "17"),
                   ("TRIPOD+AI", "14"))


def build(study) -> Section:
    present = getattr(study, "built_sections", {})
    described = missing_data_sections(study, present)
    detection = study.plan.detection is not None and study.cases is not None
    rows = []
    for guideline, item, topic, keys in ITEMS:
        if (guideline, item) in DETECTION_ITEMS and not detection:
            keys = tuple(k for k in keys if k != "methods")
        if (guideline, item) in MISSING_DATA_ITEMS:
            wanted = described | (set(keys) - {"methods"}) if described else set()
            keys = tuple(k for k in ORDER if k in wanted)
            here = [present[k] for k in keys if k in present]
            rows.append({"guideline": guideline, "item": item, "topic": topic,
                         "sections": "; ".join(here) if here else NOT_ADDRESSED_MISSING})
            continue
        here = [present[k] for k in keys if k in present]
        rows.append({"guideline": guideline, "item": item, "topic": topic,
                     "sections": "; ".join(here) if here else
                     ("not addressed by a statistical appendix" if not keys else
                      "section not in this report")})
    data = pd.DataFrame(rows)
    table = ReportTable(
        name="checklist_map", caption="Reporting-guideline items and the sections of this "
        "appendix that address them.", data=data, display=data.copy(),
        labels={"guideline": "Guideline", "item": "Item", "topic": "Topic",
                "sections": "Section(s) here"},
        notes=("Item numbers follow STARD 2015 (Bossuyt et al., BMJ 2015), TRIPOD+AI "
               "(Collins et al., BMJ 2024) and CLAIM 2024 (Tejani et al., Radiol AI 2024); "
               "check them against the checklist version the journal or regulator requires. "
               "Items about study design, eligibility and interpretation belong to the "
               "main text.",))
    return Section(KEY, TITLE).add("@tbl-checklist-map maps reporting-guideline items to the "
                                   "sections of this appendix.", table)
