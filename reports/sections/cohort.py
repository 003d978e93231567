"""Cohort characteristics by site (Table 1, STARD 20): counts with column percentages for
categorical variables, median [IQR] for continuous ones, missing values shown as a level.
Descriptive counts only (no estimates, no tests)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import text
from ..study import level_order
from ..tables import ReportTable
from . import Section
from . import _detection as D

KEY = "cohort"
TITLE = "Cohort characteristics"
HALF = "detection"

CONTINUOUS = (("age", "Age, years"), ("tumor_size_mm", "Tumour size, mm (positives)"))
SITES_PER_TABLE = 10  # more sites than this: several tables (a landscape page each)
NAMES = {"cases": "Cases", "label": "Reference positive"}


def build(study) -> Section:
    ev = D.evaluation(study).drop_duplicates("case_id").reset_index(drop=True)
    by = "site"
    described = study.results["cohort"]
    long = described.assign(
        group=np.where(described["group_var"] == "overall", "Overall", described["group_level"]),
        variable=described["variable"].map(lambda v: NAMES.get(v, v)),
        level=np.where(described["variable"] == "label", "", described["level"]))
    groups = ["Overall", *level_order(ev[by])]
    piv = long.pivot_table(index=["variable", "level", "estimand"], columns="group",
                           values="estimate", sort=False, dropna=False)
    labels = dict(CONTINUOUS)
    size = {g: piv.loc[("Cases", "", "count"), g] for g in groups}
    out_rows = []
    for var in dict.fromkeys(long["variable"]):
        sub = long[long["variable"] == var]
        if var in labels:
            cells = {g: text.median_iqr(piv.loc[(var, "", "median"), g], piv.loc[(var, "", "q1"), g],
                                        piv.loc[(var, "", "q3"), g], digits=0) for g in groups}
            out_rows.append({"variable": labels[var], "level": "median [IQR]", **cells})
            miss = {g: piv.loc[(var, "", "missing"), g] for g in groups}
            # tumour size counts its missing values among the positives (stats.describe):
            # negatives have none to miss
            if any(v > 0 for v in miss.values()):
                out_rows.append({"variable": labels[var], "level": "missing",
                                 **{g: text.count(v) for g, v in miss.items()}})
            continue
        for lv in dict.fromkeys(sub["level"]):
            if var == "Cases":
                cells = {g: text.count(piv.loc[(var, lv, "count"), g]) for g in groups}
            else:
                cells = {g: text.pct(piv.loc[(var, lv, "count"), g], size[g])
                         for g in groups}
            vlabel = var.replace("_", " ").capitalize() if var not in ("Cases", "Reference positive") else var
            out_rows.append({"variable": vlabel, "level": lv or ("n" if var == "Cases" else "n (%)"),
                             **cells})
    disp = pd.DataFrame(out_rows)
    disp.columns = ["variable", "level", *[f"g{i}" for i in range(len(groups))]]
    sites = list(range(1, len(groups)))
    chunks = [sites[i:i + SITES_PER_TABLE] for i in range(0, len(sites), SITES_PER_TABLE)] or [[]]
    tables = []
    for k, chunk in enumerate(chunks):
        cols = ["g0", *[f"g{i}" for i in chunk]]
        shown = {groups[0], *[groups[i] for i in chunk]}
        part = f" (sites {chunk[0]}-{chunk[-1]} of {len(sites)})" if len(chunks) > 1 else ""
        tables.append(ReportTable(
            name="cohort_by_site" + (f"_{k + 1}" if k else ""),
            caption="Characteristics of the evaluated cases, overall and by site" + part +
                    ": n (%) or median [IQR]; missing values shown as their own level.",
            data=described[long["group"].isin(shown).to_numpy()].reset_index(drop=True),
            display=disp[["variable", "level", *cols]], group_col="variable",
            labels={"level": "", **{f"g{i}": g for i, g in enumerate(groups)}},
            spanners=(("Site", cols[1:]),) if len(cols) > 1 else (),
            notes=("Percentages are of the column's cases; tumour size among reference "
                   "positives. No hypothesis tests: differences between sites are described, "
                   "not tested.",),
            wide=len(cols) > 6))
    refs = ", ".join(f"@{t.id}" for t in tables)
    md = (f"{refs} describe{'s' if len(tables) == 1 else ''} the {len(ev)} evaluated cases by "
          f"site. Where sites differ in protocol or case mix, crude subgroup differences can be "
          f"confounded by site; the adjusted models separate the two.")
    return Section(KEY, TITLE).add(md, *tables)
