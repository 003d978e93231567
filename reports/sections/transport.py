"""Performance in the intended-use population: the study's scans raked to the plan's
target margins (``detection.target``; ``Results['transport']``, ``stats.transport``):
transported sensitivity, specificity, PPV and NPV beside the study's own, with
design-based CIs, the effective sample size and the largest weight. Same numbers as
``tables/transport_table.csv``."""
from __future__ import annotations

import math

import pandas as pd

from .. import text
from ..tables import ReportTable
from . import Section, SkipSection

KEY = "transport"
TITLE = "Performance in the intended-use population"
HALF = "detection"
NAMES = {"sensitivity": "Sensitivity", "specificity": "Specificity", "ppv": "PPV",
         "npv": "NPV"}
#: how each estimand is named mid-sentence
IN_TEXT = {"sensitivity": "sensitivity", "specificity": "specificity", "ppv": "PPV",
           "npv": "NPV"}
FLAG_TEXT = {"extreme_weights": "a raked weight exceeds {x:g} times the mean weight: the "
                                "transported values rest on few scans",
             "small_n": "effective sample size below 10",
             "empty": "no scan in the domain",
             "not_estimable": "a proportion of 0 or 1 has no logit interval",
             "raking_not_converged": "raking did not reach the margins"}


def applies(study) -> bool:
    det = study.plan.detection
    return bool(det and det.target is not None)


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _margins_text(shares: dict) -> str:
    out = []
    for col, m in shares.items():
        name = "disease prevalence" if col == "label" else col.replace("_", " ")
        if col == "label":
            out.append(f"{name} {text.num(m.get('1', float('nan')), 3)}")
        else:
            out.append(f"{name} " + ", ".join(f"{k} {text.num(v, 3)}" for k, v in m.items()))
    return "; ".join(out)


def table(study, tr: pd.DataFrame) -> ReportTable:
    from stats.raking import EXTREME_WEIGHT

    conf = int(round(study.plan.detection.conf_level * 100))
    dec = study.results.decisions.transport
    d = tr[tr["group_var"] == "overall"].reset_index(drop=True)
    disp = pd.DataFrame({
        "model": d["model"].astype(str),
        "metric": d["estimand"].map(NAMES),
        "study": d["estimate_study"].map(lambda x: text.num(x, 3)),
        "target": text.ci_vec(d, digits=3),
        "n": [f"{text.count(n)} ({text.num(e, 1)})" for n, e in zip(d["n"], d["n_eff"])],
        "max_weight": d["max_weight"].map(lambda x: text.num(x, 2))})
    flags = sorted({f for x in d["flag"] for f in str(x).split(";") if f in FLAG_TEXT})
    notes = [f"Target ({text.plain(dec.name)}): {_margins_text(dec.target)}. The study's "
             f"scans are raked to these margins (iterative proportional fitting to "
             f"convergence); estimates are weighted proportions with linearisation SEs "
             f"under raking and patients as clusters, {conf}% logit intervals with t on "
             f"the domain's patients minus 1 degrees of freedom (R survey rake + svymean / "
             f"svyciprop(method = \"logit\"), which this equals to 1e-6). Effective n: "
             f"Kish's (sum w)\u00b2 / sum w\u00b2 in the domain; the largest weight is "
             f"relative to the mean weight."]
    if dec.left_out:
        notes.append("Left out of the raking (a margin value missing): " + "; ".join(
            f"{text.plain(c)} {text.count(n)} scans" for c, n in dec.left_out.items()) + ".")
    if flags:
        notes.append("Flags: " + "; ".join(f"{f} = "
                                           + FLAG_TEXT[f].format(x=EXTREME_WEIGHT)
                                           for f in flags) + ".")
    notes.append("Valid if, within the cells the margins define, the study's scans are "
                 "exchangeable with the target's, and every target level has scans in the "
                 "study (Methods).")
    return ReportTable(
        name="transport_table",
        caption=f"Performance in the intended-use population ({text.plain(dec.name)}): per "
                f"model, the study's sensitivity, specificity, PPV and NPV and the values "
                f"transported to the target's margins, with {conf}% CIs, the scans in each "
                f"domain (effective n) and the largest raked weight.",
        data=d, display=disp, group_col="model",
        labels={"metric": "Estimand", "study": "Study", "target": f"Target [{conf}% CI]",
                "n": "Scans (effective n)", "max_weight": "Largest weight / mean"},
        notes=tuple(notes))


def build(study) -> Section:
    tr = study.results["transport"]
    if not len(tr):
        raise SkipSection("nothing was transported")
    dec = study.results.decisions.transport
    d = tr[tr["group_var"] == "overall"]
    said = []
    for model, m in d.groupby("model", sort=False):
        parts = [f"{IN_TEXT[r.estimand]} {text.num(r.estimate_study, 3)} \u2192 "
                 f"{text.ci(r.estimate, r.conf_low, r.conf_high, 3)}"
                 for r in m.itertuples() if _finite(r.estimate)]
        if parts:
            said.append(f"{text.md(str(model))}: " + ", ".join(parts))
    mw = max(dec.max_weight.values()) if dec.max_weight else float("nan")
    warn = (f" Some raked weights are extreme (largest {text.num(mw, 2)} times the mean): "
            f"read the transported values with the effective n beside them."
            if dec.extreme else "")
    md = (f"The study's case mix is not the mix where the device will be used. "
          f"@tbl-transport-table reweights the study's scans to the plan's intended-use "
          f"population, {text.md(dec.name)} ({text.md(_margins_text(dec.target))}), and "
          f"reports the performance there (study \u2192 target): " + "; ".join(said)
          + "." + warn)
    return Section(KEY, TITLE).add(md, table(study, tr))
