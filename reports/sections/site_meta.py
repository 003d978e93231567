"""Meta-analysis across sites: per model and estimand, each site a study, a random-effects
meta-analysis of the sites' logit proportions (``Results['site_meta_analysis']``,
``stats.site_meta_analysis``): a forest plot per estimand (the sites with their weights,
the pooled diamond and the prediction interval for a new site) and a table of the pooled
values, prediction intervals and heterogeneity (overall and per level of the plan's
``by`` axes). Same numbers as ``tables/site_meta_analysis.csv``."""
from __future__ import annotations

import math

import pandas as pd

from .. import text
from ..figures import ReportFigure, meta_forest_plot
from ..tables import ReportTable
from . import Section, SkipSection
from . import _detection as D

KEY = "site_meta"
TITLE = "Meta-analysis across sites"
HALF = "detection"
#: the counts each estimand's proportion is made of
COUNT_LABELS = {"sensitivity": "TP/P", "specificity": "TN/N", "ppv": "TP/(TP+FP)",
                "npv": "TN/(TN+FN)", "accuracy": "correct/n"}
NAMES = {"sensitivity": "sensitivity", "specificity": "specificity", "ppv": "PPV",
         "npv": "NPV", "accuracy": "accuracy"}
#: what a flag of a pooled row means, for the table's notes
FLAG_TEXT = {"one_site": "one site: nothing to pool", "empty": "no site has a scan",
             "zero_variance": "every site's logit equal: the Knapp-Hartung variance is 0 "
                              "(no interval)",
             "not_converged": "REML did not converge"}
#: the prediction interval's coverage in simulation where sites differ (tau 0.5 on the
#: logit, 5-20 sites; bench/meta_analysis_coverage.md, cluster-aware fit)
PI_COVERAGE = "82-93%"


def applies(study) -> bool:
    det = study.plan.detection
    return bool(det and det.site_meta_analysis is not None)


def _pct(w) -> str:
    return text.DASH if not _finite(w) or float(w) == 0 else f"{float(w):.1f}%"


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _pi_text(lo, hi) -> str:
    if not (_finite(lo) and _finite(hi)):
        return text.DASH
    return f"[{text.num(lo)}, {text.num(hi)}]"


def summary(ma: pd.DataFrame) -> pd.DataFrame:
    """One row per metric x model x cell: the pooled row's numbers with tau2, I2, H2, Q and
    its p beside them (every number the table shows)."""
    keys = ["metric", "model", "group_var", "group_level"]
    pooled = ma[ma["estimand"] == "pooled"][keys + [
        "estimate", "conf_low", "conf_high", "pi_low", "pi_high", "logit", "logit_se", "k",
        "df", "n", "numerator", "denominator", "method", "flag", "conf_level"]]
    pooled = pooled.rename(columns={"estimate": "pooled"})
    tau2 = ma[ma["estimand"] == "tau2"][keys + ["estimate", "std_error"]].rename(
        columns={"estimate": "tau2", "std_error": "tau2_se"})
    i2 = ma[ma["estimand"] == "i2"][keys + ["estimate", "h2"]].rename(columns={"estimate": "i2"})
    q = ma[ma["estimand"] == "q"][keys + ["statistic", "p_value"]].rename(
        columns={"statistic": "q", "p_value": "q_p"})
    return pooled.merge(tau2, on=keys).merge(i2, on=keys).merge(q, on=keys)


def figure(study, ma: pd.DataFrame, estimand: str) -> ReportFigure:
    det = study.plan.detection
    conf = int(round(det.conf_level * 100))
    m = ma[(ma["metric"] == estimand) & (ma["group_var"] == "overall")]
    sites = m[m["estimand"] == "site"].copy()
    sites["label"] = sites["site"].astype(str)
    sites["count"] = [text.frac(k, n) for k, n in zip(sites["numerator"], sites["denominator"])]
    sites["weight_text"] = sites["weight"].map(_pct)
    sites["ci_text"] = text.ci_vec(sites)
    s = summary(m)
    pooled = s.assign(
        count=[text.frac(k, n) for k, n in zip(s["numerator"], s["denominator"])],
        ci_text=text.ci_vec(s, est="pooled"),
        pi_text=[_pi_text(lo, hi) for lo, hi in zip(s["pi_low"], s["pi_high"])],
        note=[_note(r) for r in s.itertuples()], estimate=s["pooled"])
    models = list(pd.unique(sites["model"]))
    n_rows = sites["label"].nunique() + 3
    panel_rows = math.ceil(len(models) / 2)
    name = NAMES[estimand]
    clustered = bool(sites["method"].str.endswith("-cluster").any())
    data = pd.concat([sites[["model", "site", "estimate", "conf_low", "conf_high", "weight",
                             "numerator", "denominator", "logit", "logit_se", "n_effective",
                             "method", "flag"]].assign(row="site"),
                      pooled[["model", "pooled", "conf_low", "conf_high", "pi_low", "pi_high",
                              "numerator", "denominator", "tau2", "i2", "q", "q_p", "k",
                              "method", "flag"]].rename(columns={"pooled": "estimate"})
                      .assign(row="pooled", site="")], ignore_index=True)
    return ReportFigure(
        name=f"site_meta_{estimand}",
        caption=f"Meta-analysis of {name} across sites, per model ({text.human_list(models)}): "
                f"each site's {name} with its {conf}% Wald interval on the logit scale "
                f"(square's area in proportion to its random-effects weight), the pooled "
                f"{name} (RE, diamond: REML, Knapp-Hartung {conf}% CI) and the {conf}% prediction interval for a "
                f"new site (bar); counts {COUNT_LABELS[estimand]}, weights and estimate [CI] "
                f"beside each row; under each panel the number of sites k, tau\u00b2 (logit "
                f"scale), I\u00b2 and Cochran's Q."
                + (" Site variances are cluster-aware (patients with several scans)."
                   if clustered else ""),
        alt=f"Forest plot of {name} by site with the pooled estimate and prediction interval "
            f"for {text.human_list(models)}.",
        plot=meta_forest_plot(sites, pooled, xlab=name[0].upper() + name[1:], width=7.5,
                              count_label=COUNT_LABELS[estimand]),
        data=data, width=7.5, height=min(1.2 + 0.19 * n_rows * panel_rows, 9.5))


def _note(r) -> str:
    if not _finite(r.pooled):
        why = [FLAG_TEXT[f] for f in str(r.flag).split(";") if f in FLAG_TEXT]
        return "not estimable" + (f" ({why[0]})" if why else "")
    return (f"k = {int(r.k)}; tau\u00b2 = {text.num(r.tau2, 3)}; I\u00b2 = {text.num(r.i2, 0)}%; "
            f"Q = {text.num(r.q)} (df {int(r.df)}), p = {text.pvalue(r.q_p)}")


def table(study, ma: pd.DataFrame) -> ReportTable:
    det = study.plan.detection
    conf = int(round(det.conf_level * 100))
    s = summary(ma)
    order = {e: i for i, e in enumerate(det.site_meta_analysis.estimands)}
    s = s.assign(_e=s["metric"].map(order)).sort_values(["model", "_e"], kind="stable").drop(
        columns="_e").reset_index(drop=True)
    disp = pd.DataFrame({
        "model": s["model"].astype(str),
        "metric": s["metric"].map(NAMES),
        "cell": ["Overall" if v == "overall" else f"{D.axis_label(v)}: "
                 f"{str(lv).replace(':', ' × ')}" for v, lv in zip(s["group_var"],
                                                                    s["group_level"])],
        "k": s["k"].map(text.count),
        "pooled": text.ci_vec(s, est="pooled"),
        "pi": [_pi_text(lo, hi) for lo, hi in zip(s["pi_low"], s["pi_high"])],
        "tau2": s["tau2"].map(lambda x: text.num(x, 3)),
        "i2": s["i2"].map(lambda x: text.num(x, 0)),
        "q": [f"{text.num(q)} ({int(df)})" if _finite(df) else text.DASH
              for q, df in zip(s["q"], s["df"])],
        "q_p": s["q_p"].map(text.pvalue)})
    flags = sorted({f for x in s["flag"] for f in str(x).split(";") if f in FLAG_TEXT})
    notes = [f"Per model and estimand, each site is a study: its proportion on the logit "
             f"scale (0.5 added to a site's zero cell), pooled by a random-effects model "
             f"(REML tau\u00b2; Knapp-Hartung {conf}% CI, t on k - 1 df; the prediction "
             f"interval for a new site adds tau\u00b2 to the pooled variance, t on k - 1 df); "
             f"metafor's rma(escalc(measure = \"PLO\"), method = \"REML\", test = \"knha\") "
             f"and predict(transf = plogis). I\u00b2 in percent; Q on k - 1 df."]
    if study.results.decisions.site_meta_analysis.cluster:
        notes.append("Repeated scans: each site's variance is the delta-method variance of "
                     "its logit from the cluster-robust variance of its proportion over "
                     "patients (Korn & Graubard's effective counts), never below the "
                     "binomial one.")
    notes.append(f"The prediction interval under-covers when sites differ ({PI_COVERAGE} in "
                 f"simulation with 5-20 sites; bench/meta_analysis_coverage.md): read it as "
                 f"the least spread a new site may see.")
    if flags:
        notes.append("Not estimable: " + "; ".join(f"{f} = {FLAG_TEXT[f]}" for f in flags)
                     + ".")
    return ReportTable(
        name="site_meta_table",
        caption=f"Meta-analysis across sites: pooled values with {conf}% CIs, {conf}% "
                f"prediction intervals for a new site and heterogeneity, per model, "
                f"estimand and subgroup.",
        data=s, display=disp, group_col="model",
        labels={"metric": "Estimand", "cell": "Subgroup", "k": "Sites",
                "pooled": f"Pooled [{conf}% CI]", "pi": f"{conf}% prediction interval",
                "tau2": "tau\u00b2", "i2": "I\u00b2 (%)", "q": "Q (df)", "q_p": "p (Q)"},
        notes=tuple(notes))


def build(study) -> Section:
    ma = study.results["site_meta_analysis"]
    det = study.plan.detection
    block = det.site_meta_analysis
    if not len(ma):
        raise SkipSection("the meta-analysis across sites has no rows")
    conf = int(round(det.conf_level * 100))
    figs = [figure(study, ma, e) for e in block.estimands]
    s = summary(ma[ma["group_var"] == "overall"])
    lines = []
    for e in block.estimands:
        part = s[s["metric"] == e]
        said = "; ".join(f"{r.model} {text.ci(r.pooled, r.conf_low, r.conf_high)}, a new site "
                         f"{_pi_text(r.pi_low, r.pi_high)}" for r in part.itertuples()
                         if _finite(r.pooled))
        if said:
            lines.append(f"pooled {NAMES[e]} {said}")
    sites = study.results.decisions.site_meta_analysis.sites
    fig_refs = text.human_list(f"@fig-site-meta-{e}" for e in block.estimands)
    md = (f"Sites are the unit a deployment cares about: {fig_refs} treat each of the "
          f"{text.count(sites)} sites as a study and pool them by a random-effects "
          f"meta-analysis; @tbl-site-meta-table gives the pooled values, the {conf}% "
          f"prediction interval for a new site and the heterogeneity between sites"
          + (" overall and per subgroup" if block.by else "") + ". "
          + ("Overall: " + "; ".join(lines) + ". " if lines else
             "No pooled value could be estimated (fewer than two sites with scans). ")
          + f"The prediction interval is the range a new hospital should expect; it is "
            f"too narrow when sites differ and few are pooled ({PI_COVERAGE} coverage of a "
            f"nominal 95% in simulation).")
    return Section(KEY, TITLE).add(md, *figs, table(study, ma))
