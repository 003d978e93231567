"""Where the gaps come from: per contrast of the plan (``detection.gaps``; none listed:
each demographic axis's largest gap, exploratory), the crude sensitivity (specificity)
gap split into its case-mix part, each covariate's contribution and the part at equal
case mix (``Results['gap_decomposition']``, ``stats.decompose_gap``): a bar figure per
contrast and one table. Same numbers as ``tables/gap_decomposition.csv``."""
from __future__ import annotations

import math
import re

import pandas as pd

from .. import text
from ..figures import ReportFigure, gap_bars
from ..tables import ReportTable
from . import Section, SkipSection

KEY = "gaps"
TITLE = "Where the gaps come from"
HALF = "detection"
#: the parts of a gap, in display order: estimand -> (row label, fill kind)
PARTS = {"gap_total": ("Crude gap", "crude gap"),
         "gap_case_mix": ("Case mix", "case mix"),
         "gap_conditional": ("At equal case mix", "equal case mix")}
CONTRIBUTION = "contribution:"
#: a covariate written as a log transform in the plan's formula (``np.log(x)``,
#: ``np.log2(x)``, ``log(x)``): shown as "log x"
_LOG_TERM = re.compile(r"^(?:np\.|numpy\.)?log(2|10)?\((\w+)\)$")
FLAG_TEXT = {"not_estimable": "the counterfactual needs a coefficient the data cannot "
                              "estimate (NaN)",
             "small_n": "a level has fewer than 10 scans",
             "singular": "the site random-intercept SD is at the boundary (0): the site "
                         "adds nothing to the case mix"}


def applies(study) -> bool:
    det = study.plan.detection
    return bool(det and det.gaps is not None)


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _metric(study) -> str:
    pop = study.results.decisions.gaps.population or "positives"
    return "sensitivity" if pop == "positives" else "specificity"


def covariate_label(term) -> str:
    """A covariate as a reader names it: ``np.log(tumor_size_mm)`` -> "log tumor size
    mm", ``age_group`` -> "age group" (the tables' CSVs keep the term itself)."""
    t = str(term).strip()
    m = _LOG_TERM.match(t)
    if m:
        return f"log{m.group(1) or ''} " + m.group(2).replace("_", " ")
    return t.replace("_", " ")


def ordered(gd: pd.DataFrame) -> pd.DataFrame:
    """One contrast's rows per model in display order (crude gap, case mix, its
    contributions largest first, equal case mix), with ``row`` and ``part`` labels."""
    parts = []
    for _, m in gd.groupby("model", sort=False):
        head = m[m["estimand"] == "gap_total"]
        mix = m[m["estimand"] == "gap_case_mix"]
        contrib = m[m["estimand"].str.startswith(CONTRIBUTION)].sort_values("order",
                                                                            kind="stable")
        cond = m[m["estimand"] == "gap_conditional"]
        parts.append(pd.concat([
            head.assign(row=PARTS["gap_total"][0], part=PARTS["gap_total"][1]),
            mix.assign(row=PARTS["gap_case_mix"][0], part=PARTS["gap_case_mix"][1]),
            contrib.assign(row=["  " + covariate_label(c) for c in contrib["covariate"]],
                           part="contribution"),
            cond.assign(row=PARTS["gap_conditional"][0], part=PARTS["gap_conditional"][1])]))
    return pd.concat(parts, ignore_index=True)


def _role(c: dict) -> str:
    return f"{str(c['role']).capitalize()}."


def figure(study, gd: pd.DataFrame, c: dict, i: int) -> ReportFigure:
    conf = int(round(study.plan.detection.conf_level * 100))
    metric = _metric(study)
    d = ordered(gd)
    models = list(pd.unique(d["model"]))
    comp, ref = c["levels"]
    n_rows = d.groupby("model").size().max()
    cols = ["model", "row", "part", "estimand", "covariate", "order", "estimate",
            "std_error", "conf_low", "conf_high", "n_comparison", "n_reference",
            "p_comparison", "p_reference", "p_counterfactual", "method", "flag", "role"]
    return ReportFigure(
        name=f"gap_{i + 1}",
        caption=f"Where the {metric} gap between {c['group']} {comp} and {ref} comes from, "
                f"per model ({text.human_list(models)}): the crude gap ({comp} minus {ref}), "
                f"its case-mix part ({ref}'s predicted {metric} given {comp}'s case mix, "
                f"minus its own) with each covariate's contribution (Shapley values, "
                f"averaged over every order of the covariates; they add up to the case-mix "
                f"part) and the part at equal case mix (crude minus case mix); bars with "
                f"paired cluster-bootstrap {conf}% percentile intervals. {_role(c)}",
        alt=f"Bar chart of the {metric} gap between {c['group']} {comp} and {ref} split into "
            f"case mix, covariate contributions and the part at equal case mix, for "
            f"{text.human_list(models)}.",
        plot=gap_bars(d, xlab=f"Difference in {metric} ({comp} \u2212 {ref})"),
        data=d[[x for x in cols if x in d.columns]],
        width=7.0, height=min(1.4 + 0.28 * n_rows * math.ceil(len(models) / 3), 8.0))


def table(study, gd: pd.DataFrame, contrasts: list[dict]) -> ReportTable:
    conf = int(round(study.plan.detection.conf_level * 100))
    metric = _metric(study)
    d = ordered_all(gd)
    disp = pd.DataFrame({
        "contrast": d["contrast"].astype(str) + " (" + d["role"].astype(str) + ")",
        "model": d["model"].astype(str),
        "part": [r.strip() if p == "contribution" else r
                 for r, p in zip(d["row"], d["part"])],
        "kind": ["contribution" if p == "contribution" else "" for p in d["part"]],
        "estimate": text.ci_vec(d, digits=3),
        "observed": [f"{text.num(a, 3)} vs {text.num(b, 3)}" if k == "gap_total" else ""
                     for a, b, k in zip(d["p_comparison"], d["p_reference"], d["estimand"])],
        "n": [f"{text.count(a)} / {text.count(b)}" if k == "gap_total" else ""
              for a, b, k in zip(d["n_comparison"], d["n_reference"], d["estimand"])]})
    dec = study.results.decisions.gaps
    notes = [f"Gap = {metric} of the comparison level minus the reference level's. Case "
             f"mix: the reference level's mean predicted {metric} under the adjusted model "
             f"({dec.method}) over the comparison's rows, minus over its own (g-computation, "
             f"Fairlie's decomposition for a binary outcome); at equal case mix: the crude "
             f"gap minus the case-mix part. Contributions: Shapley values over the "
             f"covariates (every order averaged, exactly), adding up to the case-mix part. "
             f"{conf}% paired cluster-bootstrap percentile intervals "
             f"({text.count(dec.n_boot)} replicates, each refitting the model; patients "
             f"resampled, one draw shared by every contrast and model)."]
    why = [f"{x['group']}: {x['levels'][0]} vs {x['levels'][1]} {x['why']}"
           for x in contrasts if x["role"] == "exploratory"]
    if why:
        notes.append("Exploratory contrasts (chosen from the data, not prespecified): "
                     + "; ".join(why) + ".")
    heads = d[d["estimand"] == "gap_total"]
    dropped = heads[heads["n_dropped"] > 0] if "n_dropped" in heads else heads.iloc[:0]
    if len(dropped):
        notes.append("Scans left out of the model (fitted on every level of the group) for "
                     "a missing covariate value: "
                     + "; ".join(f"{r.contrast}, {r.model}: {text.count(r.n_dropped)}"
                                 for r in dropped.itertuples()) + ".")
    flags = sorted({f for x in d["flag"] for f in str(x).split(";") if f in FLAG_TEXT})
    if flags:
        notes.append("Flags: " + "; ".join(f"{f} = {FLAG_TEXT[f]}" for f in flags) + ".")
    roles = set(d["role"])
    return ReportTable(
        name="gap_decomposition",
        caption=f"Where the {metric} gaps come from: per contrast and model, the crude gap, "
                f"its case-mix part with each covariate's contribution, and the part at "
                f"equal case mix, with {conf}% CIs. "
                + ("Prespecified." if roles == {"prespecified"} else
                   "Exploratory." if roles == {"exploratory"} else
                   "Prespecified and exploratory contrasts (in the headings)."),
        data=d, display=disp.drop(columns="kind"), group_col="contrast",
        labels={"model": "Model", "part": "Part", "estimate": f"Difference [{conf}% CI]",
                "observed": f"Observed {metric} (comparison vs reference)",
                "n": "Scans (comparison / reference)"},
        notes=tuple(notes))


def ordered_all(gd: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([ordered(part) for _, part in gd.groupby("contrast", sort=False)],
                     ignore_index=True)


def _sentence(study, gd: pd.DataFrame, c: dict) -> str:
    metric = _metric(study)
    comp, ref = c["levels"]
    said = []
    for model, m in gd.groupby("model", sort=False):
        est = {e: m[m["estimand"] == e].iloc[0] for e in PARTS if (m["estimand"] == e).any()}
        if not all(e in est for e in PARTS):
            continue
        t, x, q = est["gap_total"], est["gap_case_mix"], est["gap_conditional"]
        if not _finite(t.estimate):
            continue
        top = m[m["estimand"].str.startswith(CONTRIBUTION) & (m["order"] == 1)]
        lead = (f"; the largest contribution {text.md(covariate_label(top.iloc[0]['covariate']))} "
                f"{text.num(top.iloc[0]['estimate'], 3)}" if len(top)
                and _finite(top.iloc[0]["estimate"]) else "")
        said.append(f"{text.md(str(model))}: crude gap "
                    f"{text.ci(t.estimate, t.conf_low, t.conf_high, 3)}, case mix "
                    f"{text.ci(x.estimate, x.conf_low, x.conf_high, 3)}{lead}, at equal case "
                    f"mix {text.ci(q.estimate, q.conf_low, q.conf_high, 3)}")
    head = (f"{text.md(c['group'])} {text.md(comp)} vs {text.md(ref)} ({c['role']}; "
            f"{metric} of {text.md(comp)} minus {text.md(ref)})")
    return head + (": " + "; ".join(said) + "." if said else ": not estimable.")


def build(study) -> Section:
    gd = study.results["gap_decomposition"]
    contrasts = study.results["gap_contrasts"]
    if not len(gd):
        raise SkipSection("no gap could be decomposed")
    figs, lines = [], []
    for i, c in enumerate(contrasts):
        label = f"{c['group']}: {c['levels'][0]} vs {c['levels'][1]}"
        part = gd[gd["contrast"] == label]
        if not len(part):
            continue
        figs.append(figure(study, part, c, i))
        lines.append(f"{_sentence(study, part, c)} (@fig-gap-{i + 1})")
    md = ("A subgroup's crude gap mixes two things: the subgroup's scans come from other "
          "sites, phases and tumour sizes (case mix), and at the same case mix the model may "
          "still do worse. @tbl-gap-decomposition splits each gap into the two, and the "
          "case-mix part into each covariate's contribution, on the adjusted model; the "
          "part at equal case mix is causal only if no unmeasured factor drives both the "
          "group and detection (Methods). ")
    return Section(KEY, TITLE).add(md + " ".join(lines), *figs, table(study, gd, contrasts))
