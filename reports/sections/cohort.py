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
REQUIRES = ("scan_level",)

CATEGORICAL = ("age_group", "sex", "race", "phase", "scanner", "tumor_location", "split")
CONTINUOUS = (("age", "Age, years", None), ("tumor_size_mm", "Tumour size, mm (positives)", 1))
MAX_LEVELS = 12
SITES_PER_TABLE = 10  # more sites than this: several tables (a landscape page each)


def describe(cases: pd.DataFrame, by: str) -> pd.DataFrame:
    """Long descriptive table: variable, level, group, statistic, value."""
    groups = ["Overall", *level_order(cases[by])]
    rows = []

    def add(var, level, g, stat, value):
        rows.append({"variable": var, "level": level, "group": g, "statistic": stat,
                     "value": float(value)})

    for g in groups:
        sub = cases if g == "Overall" else cases[cases[by].astype(str) == g]
        add("Cases", "", g, "n", len(sub))
        add("Reference positive", "", g, "n", int((sub["label"] == 1).sum()))
        add("Reference positive", "", g, "denominator", len(sub))
        add("Reference positive", "", g, "percent",
            100 * (sub["label"] == 1).mean() if len(sub) else np.nan)
        for col, _, pos in CONTINUOUS:
            if col not in cases.columns:
                continue
            vals = sub[col] if pos is None else sub.loc[sub["label"] == 1, col]
            v = vals.dropna().to_numpy(float)
            for stat, val in (("median", np.median(v) if len(v) else np.nan),
                              ("q1", np.quantile(v, 0.25) if len(v) else np.nan),
                              ("q3", np.quantile(v, 0.75) if len(v) else np.nan),
                              ("missing", vals.isna().sum()), ("denominator", len(vals))):
                add(col, "", g, stat, val)
        for col in CATEGORICAL:
            if (col not in cases.columns or col == by or cases[col].nunique() > MAX_LEVELS
                    or cases[col].nunique(dropna=False) < 2):
                continue
            vc = sub[col].astype(object).where(sub[col].notna(), "Missing").astype(str)
            levels = level_order(cases[col]) + (["Missing"] if cases[col].isna().any() else [])
            counts = vc.value_counts()
            for lv in levels:
                add(col, lv, g, "n", counts.get(lv, 0))
                add(col, lv, g, "denominator", len(sub))
                add(col, lv, g, "percent", 100 * counts.get(lv, 0) / len(sub) if len(sub) else np.nan)
    return pd.DataFrame(rows)


def build(study) -> Section:
    ev = D.evaluation(study).drop_duplicates("case_id").reset_index(drop=True)
    by = "site"
    long = describe(ev, by)
    groups = ["Overall", *level_order(ev[by])]
    piv = long.pivot_table(index=["variable", "level", "statistic"], columns="group",
                           values="value", sort=False)
    labels = {c: l for c, l, _ in CONTINUOUS}
    out_rows = []
    for var in dict.fromkeys(long["variable"]):
        sub = long[long["variable"] == var]
        if var in labels:
            cells = {g: text.median_iqr(piv.loc[(var, "", "median"), g], piv.loc[(var, "", "q1"), g],
                                        piv.loc[(var, "", "q3"), g], digits=0) for g in groups}
            out_rows.append({"variable": labels[var], "level": "median [IQR]", **cells})
            miss = {g: piv.loc[(var, "", "missing"), g] for g in groups}
            if any(v > 0 for v in miss.values()) and var != "tumor_size_mm":
                out_rows.append({"variable": labels[var], "level": "missing",
                                 **{g: text.count(v) for g, v in miss.items()}})
            continue
        for lv in dict.fromkeys(sub["level"]):
            if var == "Cases":
                cells = {g: text.count(piv.loc[(var, lv, "n"), g]) for g in groups}
            else:
                cells = {g: text.pct(piv.loc[(var, lv, "n"), g], piv.loc[(var, lv, "denominator"), g],
                                     digits=0) for g in groups}
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
            data=long[long["group"].isin(shown)].reset_index(drop=True),
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
