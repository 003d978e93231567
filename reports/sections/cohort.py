"""Cohort characteristics by site (Table 1, STARD 2015 item 20), patients and scans side by
side as gtsummary's ``tbl_summary`` by site gives them for one row per patient and one row
per scan: counts with column percentages for categorical variables, median [IQR] for
continuous ones, missing values shown as a level, and the standardized mean difference
across sites (R tableone's SMD) to show how comparable the sites are. Descriptive counts
only (no estimates, no tests)."""
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

CONTINUOUS = (("age", "Age, years"), ("tumor_size_mm", "Tumour size, mm (positive scans)"))
#: sites per table: each has a patients and a scans column (more: several tables)
SITES_PER_TABLE = 5
NAMES = {"label": "Reference positive", "rows_per_unit": "Scans per patient"}
#: an SMD above this is commonly read as imbalance (Austin 2009)
SMD_IMBALANCE = 0.1


def _lookup(tidy: pd.DataFrame) -> dict:
    """``(estimand, group, variable, level) -> estimate`` of a ``stats.describe`` table;
    group "Overall" for the overall column, "SMD" for the standardized differences."""
    group = np.where(tidy["group_var"] == "overall", "Overall",
                     np.where(tidy["estimand"].isin(["smd", "smd_max"]), "SMD",
                              tidy["group_level"].astype(str)))
    return dict(zip(zip(tidy["estimand"], group, tidy["variable"].astype(str),
                        tidy["level"].astype(str)), tidy["estimate"]))


def _levels(tidy: pd.DataFrame, variable: str) -> list[str]:
    rows = tidy[(tidy["variable"] == variable) & (tidy["estimand"] == "count")
                & (tidy["group_var"] == "overall")]
    return [str(v) for v in rows["level"]]


def _smd(v) -> str:
    return text.DASH if v is None or not np.isfinite(v) else text.num(v)


def sizes(study, groups: list[str]) -> tuple[dict, dict]:
    """Patients and scans per group (``Overall`` first), for the column labels."""
    P, S = _lookup(study.results["cohort_patients"]), _lookup(study.results["cohort"])
    return ({g: P.get(("count", g, "units", "")) for g in groups},
            {g: S.get(("count", g, "cases", "")) for g in groups})


def rows(study, groups: list[str]) -> pd.DataFrame:
    """Display rows: ``variable``, ``level``, then ``p<i>`` (patients) and ``s<i>``
    (scans) per group of ``groups`` (Overall first), and ``smd``."""
    pat, scan = study.results["cohort_patients"], study.results["cohort"]
    P, S = _lookup(pat), _lookup(scan)
    p_vars = list(dict.fromkeys(pat["variable"].astype(str)))
    s_vars = list(dict.fromkeys(scan["variable"].astype(str)))
    units = {g: P.get(("count", g, "units", "")) for g in groups}
    cases = {g: S.get(("count", g, "cases", "")) for g in groups}
    out: list[dict] = []

    def add(variable, level, p=None, s=None, smd=""):
        row = {"variable": variable, "level": level, "smd": smd}
        for i, g in enumerate(groups):
            row[f"p{i}"] = "" if p is None else p(g)
            row[f"s{i}"] = "" if s is None else s(g)
        out.append(row)

    if "rows_per_unit" in p_vars:
        for k, lv in enumerate(_levels(pat, "rows_per_unit")):
            add(NAMES["rows_per_unit"], f"{lv} scan{'' if lv == '1' else 's'}",
                p=lambda g, lv=lv: text.pct(P.get(("count", g, "rows_per_unit", lv)), units[g]),
                smd=_smd(P.get(("smd", "SMD", "rows_per_unit", ""))) if k == 0 else "")
    add(NAMES["label"], "n (%)",
        p=lambda g: text.pct(P.get(("count", g, "label", "1")), units[g]),
        s=lambda g: text.pct(S.get(("count", g, "label", "1")), cases[g]),
        smd=_smd(P.get(("smd", "SMD", "label", ""))))
    for var, label in CONTINUOUS:
        on_p, on_s = var in p_vars, var in s_vars
        if not (on_p or on_s):
            continue
        tabs = [(on_p, P), (on_s, S)]
        mi = [(lambda g, T=T: text.median_iqr(T.get(("median", g, var, "")),
                                              T.get(("q1", g, var, "")),
                                              T.get(("q3", g, var, "")), digits=0))
              if on else None for on, T in tabs]
        src = P if on_p else S
        add(label, "median [IQR]", p=mi[0], s=mi[1], smd=_smd(src.get(("smd", "SMD", var, ""))))
        if any((T.get(("missing", g, var, "")) or 0) > 0 for on, T in tabs if on
               for g in groups):
            ms = [(lambda g, T=T: text.count(T.get(("missing", g, var, "")))) if on else None
                  for on, T in tabs]
            add(label, "missing", p=ms[0], s=ms[1])
    cont = {v for v, _ in CONTINUOUS}
    for var in dict.fromkeys([*p_vars, *s_vars]):
        if var in cont or var in ("units", "cases", "label", "rows_per_unit"):
            continue
        on_p, on_s = var in p_vars, var in s_vars
        src_tab, src = (pat, P) if on_p else (scan, S)
        vlabel = var.replace("_", " ").capitalize()
        for k, lv in enumerate(_levels(src_tab, var)):
            add(vlabel, lv,
                p=(lambda g, lv=lv: text.pct(P.get(("count", g, var, lv)), units[g]))
                if on_p else None,
                s=(lambda g, lv=lv: text.pct(S.get(("count", g, var, lv)), cases[g]))
                if on_s else None,
                smd=_smd(src.get(("smd", "SMD", var, ""))) if k == 0 else "")
    return pd.DataFrame(out)


def _spanning(study) -> int:
    """Patients with evaluated scans at more than one site (counted in each of them)."""
    ev = D.evaluation(study).drop_duplicates("case_id")
    return int((ev.groupby("patient_id", observed=True)["site"].nunique() > 1).sum())


def build(study) -> Section:
    ev = D.evaluation(study).drop_duplicates("case_id").reset_index(drop=True)
    groups = ["Overall", *level_order(ev["site"])]
    disp = rows(study, groups)
    n_units, n_cases = sizes(study, groups)
    data = pd.concat([study.results["cohort_patients"].assign(unit="patients"),
                      study.results["cohort"].assign(unit="scans")], ignore_index=True)
    sites = list(range(1, len(groups)))
    chunks = [sites[i:i + SITES_PER_TABLE] for i in range(0, len(sites), SITES_PER_TABLE)] or [[]]
    spanning = _spanning(study)
    n_pat = int(ev["patient_id"].nunique())
    notes = (
        "Patients: each patient counted once per column, with the characteristics of their "
        "first evaluated scan; a patient is reference positive with at least one positive "
        "scan. Scans: every evaluated scan. Percentages are of the column's patients or "
        "scans; tumour size among positive scans; a blank patient cell is a characteristic "
        "of the scan, not of the patient."
        + (f" {spanning} of the {n_pat} patients have scans at more than one site and count "
           f"in each of them, so the site columns' patients add up to more than the "
           f"overall column." if spanning else ""),
        "SMD: standardized mean difference across sites, the mean over every pair of sites "
        "(R tableone's definition; the largest pair is in the CSV as smd_max), of patients "
        "for a patient characteristic and of scans for a scan characteristic; a missing "
        f"value counts as a level. An SMD above {SMD_IMBALANCE:g} is commonly read as an "
        "imbalance between sites. No hypothesis tests: differences between sites are "
        "described, not tested.")
    tables = []
    for k, chunk in enumerate(chunks):
        idx = [0, *chunk]
        cols = [c for i in idx for c in (f"p{i}", f"s{i}")]
        part = f" (sites {chunk[0]}-{chunk[-1]} of {len(sites)})" if len(chunks) > 1 else ""
        shown = {groups[i] for i in idx}
        keep = (data["group_var"] == "overall") | data["group_level"].astype(str).isin(shown) \
            | (data["group_level"].astype(str) == "all pairs")
        tables.append(ReportTable(
            name="cohort_by_site" + (f"_{k + 1}" if k else ""),
            caption="Characteristics of the evaluated patients and scans, overall and by "
                    "site" + part + ": n (%) or median [IQR]; missing values shown as their "
                    "own level; SMD across sites.",
            data=data[keep.to_numpy()].reset_index(drop=True),
            display=disp[["variable", "level", *cols, "smd"]], group_col="variable",
            labels={"level": "", **{f"p{i}": f"Patients, N = {text.count(n_units[groups[i]])}"
                                    for i in idx},
                    **{f"s{i}": f"Scans, N = {text.count(n_cases[groups[i]])}" for i in idx},
                    "smd": "SMD"},
            spanners=tuple((groups[i], [f"p{i}", f"s{i}"]) for i in idx),
            notes=notes if k == len(chunks) - 1 else (
                "Continued for the other sites in the next table; the notes are under it.",),
            wide=len(cols) > 6))
    refs = text.human_list(f"@{t.id}" for t in tables)
    n_scans = len(ev)
    md = (f"{refs} describe{'s' if len(tables) == 1 else ''} the {n_pat} evaluated patients "
          f"and their {n_scans} scans by site, patients and scans side by side. Where sites "
          f"differ in protocol or case mix (an SMD above {SMD_IMBALANCE:g}), crude subgroup "
          f"differences can be confounded by site; the adjusted models separate the two.")
    return Section(KEY, TITLE).add(md, *tables)
