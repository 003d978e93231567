"""Checklist map: reporting-guideline items (STARD 2015, TRIPOD+AI, CLAIM 2024) -> the
sections of this appendix that address them. Only sections present in this report are
cited; items this appendix cannot address (study design, registration, ...) say so."""
from __future__ import annotations

import pandas as pd

from ..tables import ReportTable
from . import Section

KEY = "checklist"
TITLE = "Reporting checklist map"
HALF = "any"
REQUIRES = ()

#: (guideline, item, topic, section keys); the last element empty: not covered here
ITEMS = (
    ("STARD 2015", "12a", "Index test: definition and rationale for test positivity cut-offs "
     "(prespecified vs exploratory)", ("methods", "threshold")),
    ("STARD 2015", "14", "Methods for estimating diagnostic accuracy", ("methods",)),
    ("STARD 2015", "16", "Handling of missing / indeterminate results", ("flow", "cohort")),
    ("STARD 2015", "17", "Analyses of variability (prespecified vs exploratory)",
     ("subgroups", "forest", "failure_map", "adjusted")),
    ("STARD 2015", "19", "Flow of participants (diagram)", ("flow",)),
    ("STARD 2015", "20", "Baseline demographic and clinical characteristics", ("cohort",)),
    ("STARD 2015", "23", "Cross tabulation of index test by reference standard",
     ("twobytwo",)),
    ("STARD 2015", "24", "Estimates of diagnostic accuracy and their precision",
     ("overall", "subgroups")),
    ("STARD 2015", "3-4, 18, 26-30", "Study design, sample size rationale, registration, "
     "protocol, funding", ()),
    ("TRIPOD+AI", "9", "Data preparation, missing data", ("flow", "cohort")),
    ("TRIPOD+AI", "12c-e", "Model performance measures, calibration, uncertainty",
     ("overall", "calibration", "crs")),
    ("TRIPOD+AI", "12f", "Model fairness: performance across subgroups",
     ("subgroups", "forest", "failure_map", "adjusted")),
    ("TRIPOD+AI", "14", "Open science: code, software versions, reproducibility",
     ("methods",)),
    ("TRIPOD+AI", "20-23", "Participants, model performance, model updating",
     ("flow", "cohort", "overall", "comparisons")),
    ("CLAIM 2024", "7-9", "Data sources, eligibility, preprocessing", ("flow", "provenance")),
    ("CLAIM 2024", "20-21", "Data partitions and their characteristics", ("flow", "cohort")),
    ("CLAIM 2024", "28-29", "Performance metrics, statistical measures of significance and "
     "uncertainty", ("methods", "overall", "comparisons")),
    ("CLAIM 2024", "30", "Robustness or sensitivity analyses", ("threshold", "crs")),
    ("CLAIM 2024", "32", "Subgroup / failure analysis", ("subgroups", "failure_map")),
    ("CLAIM 2024", "33", "Flow of patients / cases", ("flow",)),
    ("CLAIM 2024", "35-36", "Performance and comparisons with baselines",
     ("overall", "comparisons", "crs")),
)


def build(study) -> Section:
    present = getattr(study, "built_sections", {})
    rows = []
    for guideline, item, topic, keys in ITEMS:
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
               "(Collins et al., BMJ 2024) and CLAIM 2024 (Tejani et al., Radiol AI 2024).",))
    return Section(KEY, TITLE).add("@tbl-checklist-map maps reporting-guideline items to the "
                                   "sections of this appendix.", table)
