"""Confounding-adjusted models of detection among reference positives: odds ratios per
method (``stats.fit_adjusted``), likelihood-ratio tests of covariate blocks and of the
site effect (``stats.block_tests``), adjusted vs crude sensitivity
(``Fit.marginal_means``) and the variance decomposition (group SD, R2)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, points_ci
from ..study import model_order
from ..tables import ReportTable
from . import Section, SkipSection
from . import _detection as D

KEY = "adjusted"
TITLE = "Confounding-adjusted models"
HALF = "detection"
METHOD_LABEL = {"glmm": "GLMM", "gee": "GEE", "fixed": "Fixed site",
                "glmm_cc": "GLMM, known race"}
#: how each fit is named in running text
METHOD_TEXT = {"glmm": "GLMM", "gee": "GEE", "fixed": "site-fixed model",
               "glmm_cc": "complete-case GLMM"}
#: how each kind of adjusted mean is described
KIND_TEXT = {"standardized": "standardized over the observed covariate mix, like the crude "
                             "values",
             "emmeans": "emmeans, equal-weight reference grid, unlike the crude values' mix"}
#: fewer clusters than this: a plain sandwich p-value is not shown (its test over-rejects)
FEW_CLUSTERS = 20


def _naive_few(r) -> bool:
    """A GEE row with the plain sandwich from fewer than FEW_CLUSTERS clusters."""
    return (r["fit_method"] == "gee" and r["method"] != "gee-md-t"
            and pd.notna(r["n_clusters"]) and r["n_clusters"] < FEW_CLUSTERS)


def _not_converged(r) -> bool:
    """A row of a fit that did not converge, or whose random-effect SD is extreme (a
    degenerate Laplace optimum, flag ``extreme_sd``): its odds ratio and p-value are not
    shown."""
    flags = str(r["fit_flag"]).split(";")
    return "not_converged" in flags or "extreme_sd" in flags


def _term_label(r) -> str:
    """The row label; a per-SD unit states the SD (``unit_step``)."""
    if str(r["unit"]).startswith("per SD"):
        return (f"{str(r['variable']).replace('_', ' ')} ({r['unit']} = "
                f"{text.num(r['unit_step'])})")
    return str(r["label"])


def applies(study) -> bool:
    return bool(study.plan.detection and study.plan.detection.adjusted)


def build(study) -> Section:
    det = study.plan.detection
    adj = det.adjusted
    if not adj:
        raise SkipSection("the plan has no detection.adjusted block")
    ev = D.evaluation(study)
    formula, group = adj.formula, adj.group_columns[0]
    res = study.results
    terms = res["adjusted_terms"]
    fits = dict.fromkeys(res.decisions.adjusted.fitted)
    failed = [f"{METHOD_LABEL[m]} ({why[:160]})"
              for m, why in res.decisions.adjusted.failed.items()]
    for m, why in res.decisions.adjusted.failed.items():
        study.note(f"adjusted models: the {m} fit failed: {why}")
    # every model table states the scans each fit used and why others were left out
    miss = res["adjusted_missing"]

    def miss_for(g: pd.DataFrame) -> pd.DataFrame:
        return g[["model", "fit_method"]].merge(miss, on=["model", "fit_method"], how="left")

    def scans_note(fit_methods=None) -> str:
        """Scans used per fit (of ``fit_methods``, default all) and why others were left
        out, once per fit when every model used as many (they score the same scans)."""
        mm = miss if fit_methods is None else miss[miss["fit_method"].isin(fit_methods)]
        return "Scans used: " + scans_used_text(mm) + "."

    excluded_note = scans_note()
    # ---- odds ratios (readable rows: Results['adjusted_table'])
    tab = res["adjusted_table"]
    models = model_order(study)
    key = ["model", "label"]
    order = tab.drop_duplicates(key)[key]
    rows = []
    for mdl in models:
        for label in order.loc[order["model"] == mdl, "label"]:
            first = tab[(tab["model"] == mdl) & (tab["label"] == label)].iloc[0]
            row = {"model": str(mdl), "term": _term_label(first)}
            for m in fits:
                r = tab[(tab["model"] == mdl) & (tab["label"] == label) & (tab["fit_method"] == m)]
                if not len(r):
                    row[f"or_{m}"] = row[f"p_{m}"] = text.DASH
                    continue
                r = r.iloc[0]
                mark = " \u00a7" if r["term_flag"] else ""
                if r["is_reference"]:
                    row[f"or_{m}"], row[f"p_{m}"] = text.ratio_reference(), ""
                else:
                    row[f"or_{m}"] = (text.DASH if _not_converged(r) else text.ratio_ci(
                        r["odds_ratio"], r["or_conf_low"], r["or_conf_high"]) + mark)
                    row[f"p_{m}"] = (text.DASH if _naive_few(r) or _not_converged(r)
                                     else text.pvalue(r["p_value"]))
            rows.append(row)
    disp = pd.DataFrame(rows)
    fit_flags = sorted({f for x in tab["fit_flag"] for f in str(x).split(";") if f})
    term_flags = sorted({f.split(":")[0] for x in tab["term_flag"] for f in str(x).split(";") if f})
    population = adj.population
    outcome = ("detected at the operating threshold, among reference positives"
               if population == "positives" else
               "correctly called negative, among reference negatives")
    gee_label = next((r for r in terms.loc[terms["fit_method"] == "gee", "method"]), "")
    gee_text = (f"exchangeable within {group}, Mancl-DeRouen bias-corrected sandwich SE with a "
                f"t reference (fewer than 20 {group}s)" if gee_label == "gee-md-t" else
                f"exchangeable within {group}, robust sandwich SE")
    gg = res.decisions.adjusted.glmm_group or {}
    nested = len(gg.get("group") or []) == 2
    glmm_text = (f"random intercepts per {group} and per patient within {group} "
                 f"((1 | {'/'.join(gg['group'])}), Laplace ML; {gg['why']})" if nested else
                 f"random intercept per {group}, Laplace ML")
    notes = [f"Model: {formula} (outcome: {outcome}); odds ratios with Wald "
             f"{int(round(det.conf_level * 100))}% CIs; each factor's reference level is its "
             f"first row; each continuous term per the unit in its label (log terms per "
             f"doubling unless the plan says otherwise). "
             + "; ".join(f"{METHOD_LABEL[m]}: {stats_method}" for m, stats_method in
                         (("glmm", glmm_text),
                          ("gee", gee_text),
                          ("fixed", f"{group} as fixed effects, SE clustered on "
                                    f"{study.results.decisions.detection.cluster or 'case'}s"),
                          ("glmm_cc", f"the GLMM refitted on cases with known race "
                                      f"(complete case)")) if m in fits) + "."]
    if term_flags:
        notes.append("\u00a7 a term-specific warning (" + ", ".join(term_flags) + "): the "
                     "estimate is not reliable; tables/adjusted_odds_ratios.csv has the flag.")
    notes.append(excluded_note)
    if fit_flags:
        notes.append("Fit warnings: " + ", ".join(fit_flags) + " (see the variance table and "
                     "the text below)"
                     + ("; a fit that did not converge shows no odds ratios or p-values (\u2014; "
                        "its estimates are in the CSV, flagged not_converged)."
                        if "not_converged" in fit_flags else "")
                     + ("; a fit with an extreme random-effect SD (extreme_sd, above 10 logit "
                        "units: a level whose patients' scans are nearly all alike, where the "
                        "Laplace optimum is degenerate) shows none either (\u2014; its "
                        "estimates are in the CSV)." if "extreme_sd" in fit_flags else "")
                     + ("" if {"not_converged", "extreme_sd"} & set(fit_flags) else "."))
    terms = tab
    primary = (res.decisions.adjusted.primary or {}).get("fit")
    or_table = ReportTable(
        name="adjusted_odds_ratios", caption="Adjusted odds ratios of detection (sensitivity) "
        "per model and estimation method"
        + (f"; the {METHOD_LABEL.get(primary, primary)} columns are the primary fit "
           f"(the design decides: see Reading this report)" if primary else "") + ".",
        data=terms, display=disp, group_col="model",
        labels={"term": "Variable: level vs reference", **{f"or_{m}": "OR [CI]" for m in fits},
                **{f"p_{m}": "p" for m in fits}},
        spanners=tuple((METHOD_LABEL[m] + (" (primary)" if m == primary else ""),
                        [f"or_{m}", f"p_{m}"]) for m in fits),
        notes=tuple(notes))
    sec = Section(KEY, TITLE)
    # ---- block tests (ML methods only)
    from analysis.adjusted import block_method

    ml = block_method(study.plan)
    blocks_tbl = None
    if ml is not None:
        bt = res["adjusted_blocks"]
        lr = bt[bt["estimand"] == "likelihood_ratio"].reset_index(drop=True)
        order = {m: i for i, m in enumerate(models)}
        lr = lr.assign(_m=lr["model"].map(order)).sort_values("_m", kind="stable").drop(
            columns="_m").reset_index(drop=True)
        disp_b = pd.DataFrame({
            "model": lr["model"].astype(str), "block": lr["block"].astype(str),
            "terms": lr["terms"].astype(str), "chisq": [text.num(x) for x in lr["statistic"]],
            "df": [text.count(x) for x in lr["df"]], "p": [text.pvalue(p) for p in lr["p_value"]],
            **({"p_adj": [text.pvalue(p) for p in lr["p_adjusted"]]}
               if "p_adjusted" in lr and lr["p_adjusted"].notna().any() else {})})
        blocks_tbl = ReportTable(
            name="adjusted_block_tests", caption=f"Likelihood-ratio tests of covariate blocks "
            f"({METHOD_LABEL[ml]}): each block dropped from the full model.", data=bt,
            display=disp_b, group_col="model",
            labels={"block": "Block", "terms": "Terms dropped", "chisq": "LR chi-square",
                    "df": "df", "p": "p", "p_adj": "Holm p"},
            notes=(f"The {group} row tests the random intercept against a model without it "
                   "(boundary: 50:50 mixture of chi-square(0) and chi-square(1)). "
                   + ("Prespecified: Holm's adjustment over each model's tests."
                      if str(res.decisions.get("adjusted.block_multiplicity", "")).startswith(
                          "Holm") else "Exploratory: p-values not adjusted for multiplicity."),
                   "Scans used: as in the odds-ratio table (its notes)."))
    # ---- variance decomposition
    glance = res["adjusted_glance"]
    disp_v = pd.DataFrame({
        "model": glance["model"].astype(str),
        "method": glance["fit_method"].map(METHOD_LABEL),
        "nobs": [f"{text.count(u)} of {text.count(n)}" for u, n in zip(
            miss_for(glance)["n_used"], miss_for(glance)["n_population"])],
        "groups": glance["n_groups"].map(text.count),
        "sd": [text.num(x, 3) for x in glance["group_sd"]],
        **({"sd_nested": [text.num(x, 3) for x in glance["nested_sd"]]}
           if "nested_sd" in glance and glance["nested_sd"].notna().any() else {}),
        "r2m": [text.num(x) for x in glance["r2_marginal"]],
        "r2c": [text.num(x) for x in glance["r2_conditional"]],
        "conv": glance["converged"].map({True: "yes", False: "no"}).fillna(text.DASH)})
    var_tbl = ReportTable(
        name="adjusted_variance", caption=f"Variance decomposition: {group} random-intercept "
        f"SD (log-odds){' and the SD of patients within ' + group if nested else ''} and "
        f"latent-scale R\u00b2 (marginal: fixed effects; conditional: "
        f"fixed + {group}{' + patients' if nested else ''}; Nakagawa, GLMM rows only: GEE coefficients are not on the latent "
        f"scale and site-fixed R\u00b2 would count the site dummies, so they show a dash).",
        data=miss_for(glance).merge(glance, on=["model", "fit_method"]), display=disp_v,
        labels={"model": "Model", "method": "Method", "nobs": "Scans used", "groups": "Groups",
                "sd": f"{group} SD", "sd_nested": f"patient-within-{group} SD",
                "r2m": "R\u00b2 marginal", "r2c": "R\u00b2 conditional",
                "conv": "Converged"},
        notes=("Nakagawa & Schielzeth latent-scale R\u00b2; warnings per fit are in "
               "tables/adjusted_variance.csv; why scans were left out: the odds-ratio "
               "table's notes.",))
    # ---- adjusted vs crude
    cmp = res["adjusted_vs_crude"]
    fig = None
    if len(cmp):
        data = cmp
        cmp = cmp.assign(cell=cmp["variable"].str.replace("_", " ") + ": "
                         + cmp["group_level"].astype(str))
        n_cells = cmp["cell"].nunique()
        fig = ReportFigure(
            name="adjusted_vs_crude", caption=f"Adjusted ({KIND_TEXT[res.decisions['adjusted.vs_crude_kind']]}, "
            f"{METHOD_LABEL[res.decisions['adjusted.means_fit']]}) versus crude "
            "sensitivity per level, per model, with confidence intervals"
            + _crude_rows_text(res.decisions.adjusted.crude_rows) + "."
            + ("" if res.decisions.get("adjusted.means_fit_converged", True) else
               " No fit converged: the adjusted values are shown as computed, not to be "
               "relied on."),
            alt="Dot plot comparing adjusted and crude sensitivity by subgroup level.",
            plot=points_ci(cmp, x="cell", y="estimate", color="kind", facet="model",
                           xlab="", ylab="Sensitivity", facet_order=models, limits=(0.0, 1.0)),
            data=data, width=7.5, height=min(1.5 + 0.2 * n_cells, 9.0))
    re_fig = None
    re = res["adjusted_random_effects"]
    if len(re):
        re_fig = ReportFigure(
            name="adjusted_site_effects", caption=f"Predicted {group} effects (GLMM "
            f"conditional modes, log-odds of detection) with conditional intervals, per "
            f"model; 0 is the average {group}.",
            alt=f"Dot plot of {group} random effects per model.",
            plot=points_ci(re, x="group_level", y="estimate", facet="model", xlab="",
                           ylab=f"{group} effect (log-odds)", hline=0.0, facet_order=models),
            data=re[["model", "group_var", "group_level", "estimate", "std_error",
                     "conf_low", "conf_high", "n", "flag"]],
            width=7.5, height=min(1.2 + 0.22 * re["group_level"].nunique(), 6.0))
    con_tbl = _contrasts_table(res, models)
    vp_tbl, vp_fig = _partition(res, models, group)
    int_tbl, int_means, int_cons = _interactions(res, det)
    warn = sorted({w.split(":")[0] for w in glance["warnings"].astype(str) if w}
                  if "warnings" in glance else set())
    rhs = formula.split("~", 1)[1].strip()
    md = (f"@tbl-adjusted-odds-ratios gives odds ratios of detection adjusted for "
          f"{text.md(rhs)}, with {text.md(group)} as "
          + text.human_list([w for m, w in (("glmm", "a random intercept (GLMM)"
                                                     + (", with patients nested within it"
                                                        if nested else "")),
                                            ("gee", "the cluster (GEE)"),
                                            ("fixed", "fixed effects (site-fixed model)"))
                             if m in fits]) + ". "
          + (f"@tbl-adjusted-block-tests tests whether each block of covariates (protocol, "
             f"demographics, tumour) and {text.md(group)} explain detection. " if blocks_tbl
             else "")
          + "@tbl-adjusted-variance decomposes the variance"
          + (f", @fig-adjusted-site-effects shows each {text.md(group)}'s effect"
             if re_fig is not None else
             (f" (in the GLMM on all scans the {text.md(group)} random-intercept SD is "
              f"estimated at zero for every model: a singular fit, so no {text.md(group)} "
              f"effects are drawn; other fits' SDs are in that table)"
              if "glmm" in fits else ""))
          + (" and @fig-adjusted-vs-crude contrasts adjusted with crude sensitivities." if fig
             else ".")
          + _repeated_text(res.decisions.adjusted.repeated_scans, fits, nested=nested)
          + primary_text(res.decisions.adjusted.primary)
          + (f" @tbl-adjusted-contrasts compares the adjusted levels pairwise." if con_tbl
             else "")
          + (" @tbl-adjusted-variance-partition and @fig-adjusted-variance-partition "
             "partition the variation in detection on the latent scale." if vp_tbl else "")
          + (" @tbl-adjusted-interactions tests the plan's interactions"
             + (" and @tbl-adjusted-interaction-means gives the adjusted sensitivities per "
                "cell." if int_means is not None else ".") if int_tbl else "")
          + (f" Fit diagnostics raised: {text.md(', '.join(warn))} (details in the CSV files); "
             f"such estimates are reported, not hidden." if warn else "")
          + (" Fits that failed and are not shown: " + text.md("; ".join(failed)) + "."
             if failed else ""))
    sec.add(md, or_table, blocks_tbl, var_tbl, re_fig, fig, con_tbl, vp_tbl, vp_fig, int_tbl,
            int_means, int_cons)
    return sec


def _crude_rows_text(rows: dict | None) -> str:
    """Which scans the crude values of the adjusted-versus-crude figure count (decision
    ``adjusted.crude_rows``): said only when the fits left some out."""
    if not rows or "used" not in rows:
        return ""
    return (f"; both on the {text.count(rows['used'])} of {text.count(rows['population'])} "
            f"scans per model that the fits used (complete formula variables)")


def _repeated_text(rep: dict | None, fits, *, nested: bool = False) -> str:
    """What the models do with a patient's repeated scans (the analysis layer's
    ``adjusted.repeated_scans`` decision), for the section text; ``nested``: the GLMM
    nests patients in the groups (decision ``adjusted.glmm_group``)."""
    if not rep:
        return ""
    g, c = text.md(rep["group"]), text.md(rep["cluster"])
    out = (f" Scans repeat within patients: {text.count(rep['with_repeats'])} of the "
           f"{text.count(rep['patients'])} patients ({c}) have more than one of the "
           f"{text.count(rep['scans'])} scans each model is fitted on.")
    if "glmm" in fits and nested:
        out += (f" The GLMM nests patients within {g} (a random intercept per {g} and one "
                f"per patient), so its standard errors, tests and intervals allow for the "
                f"correlation of a patient's scans: it is the primary model, and the "
                f"adjusted-versus-crude comparison, the contrasts and the block tests use "
                f"it.")
        if "gee" in fits:
            out += (f" The GEE's robust standard errors are clustered on {g}"
                    + (f" (every patient's scans lie within one {g}, so they allow for the "
                       f"repeats too, with only as many clusters as {g}s)." if rep["nested"]
                       else "."))
        return out
    if "glmm" in fits:
        out += (f" The GLMM's random intercept is per {g}, so its standard errors, tests and "
                f"intervals treat a patient's scans as independent given {g} (too narrow when "
                f"they are correlated).")
    if "gee" in fits:
        out += (f" The GEE's robust standard errors are clustered on {g}"
                + (f", and every patient's scans lie within one {g}, so they allow any "
                   f"correlation within a {g}, a patient's scans included (with few {g}s "
                   f"they rest on few clusters)." if rep["nested"] else
                   f", but some patients have scans in more than one {g}."))
    if "fixed" in fits:
        out += (f" The {g}-fixed model's standard errors are clustered on {c}, so a "
                f"patient's repeated scans are allowed for.")
    if _block_method_of(fits) == "glmm":
        out += " The block tests are the GLMM's likelihood-ratio tests and share its limitation."
    return out


def _contrasts_table(res, models) -> ReportTable | None:
    """Pairwise odds ratios of adjusted levels (``Results['adjusted_contrasts']``)."""
    con = res.get("adjusted_contrasts")
    if con is None or not len(con):
        return None
    order = {m: i for i, m in enumerate(models)}
    con = con.assign(_m=con["model"].map(order)).sort_values("_m", kind="stable").drop(
        columns="_m").reset_index(drop=True)
    disp = pd.DataFrame({
        "model": con["model"].astype(str),
        "factor": con["group_var"].astype(str).str.replace("_", " "),
        "pair": con["group_level"].astype(str),
        "or": [text.ratio_ci(e, lo, hi) for e, lo, hi in zip(
            con["estimate"], con["conf_low"], con["conf_high"])],
        "p": [text.pvalue(p) for p in con["p_value"]],
        "p_adj": [text.pvalue(p) for p in con["p_adjusted"]]})
    m = res.decisions.adjusted.contrasts_fit
    return ReportTable(
        name="adjusted_contrasts", caption=f"Pairwise odds ratios of detection between the "
        f"adjusted levels of each factor ({METHOD_LABEL.get(m, m)}; emmeans-style marginal "
        f"means, equal weights over the other factors).", data=con, display=disp,
        group_col="model", labels={"factor": "Factor", "pair": "Levels (first / second)",
                                   "or": "OR [CI]", "p": "p", "p_adj": "Holm p"},
        notes=("Odds ratio of detection of the first level against the second, Wald "
               "confidence intervals per comparison; Holm's adjustment within each model and "
               "factor (emmeans pairs(..., adjust = \"holm\")).",))


#: the order and labels of the variance components in the report
_COMPONENT_LABEL = {"protocol": "protocol", "demographics": "demographics", "tumour": "tumour",
                    "between-block covariance": "between-block covariance",
                    "other fixed effects": "other fixed effects",
                    "residual (logistic)": "residual (logistic, \u03c0\u00b2/3)"}


def _component_label(name: str, group: str) -> str:
    if name == group:
        return f"{group} (random)"
    if ":" in name and name.endswith(f":{group}"):
        return f"patient within {group} (random)"
    return _COMPONENT_LABEL.get(name, name)


def _partition(res, models, group):
    """The variance partition table and its bar figure (``Results[
    'adjusted_variance_partition']``)."""
    vp = res.get("adjusted_variance_partition")
    if vp is None or not len(vp) or vp["estimate"].isna().all():
        return None, None
    order = {m: i for i, m in enumerate(models)}
    vp = vp.assign(_m=vp["model"].map(order)).sort_values("_m", kind="stable").drop(
        columns="_m").reset_index(drop=True)
    label = [_component_label(str(c), group) for c in vp["component"]]
    # a degenerate fit (extreme_sd) is not partitioned in the display: its numbers are in
    # the CSV, flagged
    bad = vp["flag"].astype(str).str.split(";").map(lambda f: "extreme_sd" in f)
    disp = pd.DataFrame({"model": vp["model"].astype(str), "component": label,
                         "terms": vp["terms"].astype(str),
                         "variance": [text.DASH if b else text.num(v, 3)
                                      for v, b in zip(vp["variance"], bad)],
                         "share": [text.DASH if b else text.num(100 * v, 1) + "%"
                                   for v, b in zip(vp["estimate"], bad)]})
    m = res.decisions.adjusted.partition_fit
    r2 = vp[~bad].drop_duplicates("model")
    r2_text = "; ".join(f"{r.model}: marginal {text.num(r.r2_marginal)}, conditional "
                        f"{text.num(r.r2_conditional)}" for r in r2.itertuples())
    tbl = ReportTable(
        name="adjusted_variance_partition", caption=f"How much of the variation in detection "
        f"is {group}, protocol, demographics and tumour: latent-scale variance partition of "
        f"the {METHOD_LABEL.get(m, m)} (Nakagawa & Schielzeth), per model.",
        data=vp.assign(share_percent=100 * vp["estimate"]),   # the share as shown
        display=disp, group_col="model",
        labels={"component": "Component", "terms": "Terms", "variance": "Variance (logit\u00b2)",
                "share": "Share"},
        notes=("Each block's variance is that of its part of the linear predictor over the "
               "fitted scans; random intercepts contribute their variance, the logistic "
               "residual \u03c0\u00b2/3. The blocks' parts are correlated when their covariates "
               "are (protocol differs by site, say): the between-block covariance row holds the "
               "difference, so that the shares add up to 100% and the fixed-effect rows to the "
               "marginal R\u00b2 (" + r2_text + ")."
               + (" Models whose fit has an extreme random-effect SD (extreme_sd: a "
                  "degenerate Laplace optimum) are not partitioned (\u2014): "
                  + ", ".join(sorted(set(vp.loc[bad, "model"].astype(str)))) + "."
                  if bad.any() else ""),))
    keep = (vp["kind"] != "residual") & ~bad
    d = vp[keep].assign(component=[_component_label(str(c), group)
                                   for c in vp.loc[keep, "component"]])
    if not len(d):
        return tbl, None
    from ..figures import bars

    fig = ReportFigure(
        name="adjusted_variance_partition", caption=f"Share of the latent variation in "
        f"detection by component ({METHOD_LABEL.get(m, m)}), per model; the rest (not drawn) "
        f"is the logistic residual.",
        alt="Bar chart of the variance shares of site, patient, protocol, demographics and "
            "tumour per model.",
        plot=bars(d, x="component", y="estimate", fill="model", xlab="",
                  ylab="Share of latent variance"),
        data=d[["model", "component", "kind", "terms", "variance", "estimate"]],
        width=7.0, height=min(1.5 + 0.35 * d["component"].nunique() * max(
            1, d["model"].nunique()) ** 0.5, 6.0))
    return tbl, fig


def _interactions(res, det):
    """The interaction tests, and per cell adjusted sensitivities and model contrasts when
    prespecified (``Results['adjusted_interactions']``)."""
    got = res.get("adjusted_interactions")
    if not got or not len(got["tests"]):   # no interaction in the plan: no table
        return None, None, None
    tests = got["tests"]
    multiplicity = str(res.decisions.adjusted.interaction_multiplicity or "")
    holm = multiplicity.startswith("Holm")
    disp = pd.DataFrame({
        "term": tests["term"].astype(str), "model": tests["model"].astype(str),
        "chisq": [text.num(x) for x in tests["statistic"]],
        "df": [text.count(x) for x in tests["df"]],
        "p": [text.pvalue(p) for p in tests["p_value"]],
        **({"p_adj": [text.pvalue(p) for p in tests["p_adjusted"]]} if holm else {}),
        "flag": [", ".join(dict.fromkeys(f for f in str(x).split(";") if f and f != "nan"))
                 or "" for x in tests["flag"]]})
    rec = res.decisions.adjusted.interactions or {}
    tbl = ReportTable(
        name="adjusted_interactions", caption="Likelihood-ratio tests of the plan's "
        "interaction terms: the GLMM with the term against the GLMM without it, same rows.",
        data=tests, display=disp,
        labels={"term": "Interaction", "model": "Model", "chisq": "LR chi-square", "df": "df",
                "p": "p", "p_adj": "Holm p", "flag": "Fit flags"},
        notes=("; ".join(f"{t}: {r['fit']}, random intercepts ({' / '.join(r['group'])})"
                         for t, r in rec.items()) + ". "
               + ("Prespecified: Holm's adjustment over the plan's interaction tests."
                  if holm else "Exploratory: p-values not adjusted for multiplicity.")
               + " Fit flags of either fit (singular, extreme_sd, fitted_0_1...): a statistic "
               "of 0 where the fit with the term is no better than the fit without it; none "
               "(full_below_reduced) where it ends below it, its optimum missed.",))
    means_tbl = cons_tbl = None
    mm = got["means"]
    if len(mm):
        dm = pd.DataFrame({
            "term": mm["term"].astype(str), "model": mm["model"].astype(str),
            "cell": mm["group_level"].astype(str),
            "sens": [text.ci(e, lo, hi) for e, lo, hi in zip(
                mm["estimate"], mm["conf_low"], mm["conf_high"])],
            "n": [text.count(x) for x in mm["n"]]})
        kind = det.adjusted.means_kind
        means_tbl = ReportTable(
            name="adjusted_interaction_means", caption="Adjusted sensitivity per cell of each "
            f"prespecified interaction, from the fit with the interaction ({kind}).",
            data=mm, display=dm,
            labels={"term": "Interaction", "model": "Fit", "cell": "Cell", "sens": "Sensitivity [CI]",
                    "n": "Scans"},
            notes=(KIND_TEXT.get(kind, kind).capitalize() + "; a cell without scans of "
                   "some combination has no estimable value (\u2014).",))
    cc = got["contrasts"]
    if len(cc):
        dc = pd.DataFrame({
            "term": cc["term"].astype(str), "stratum": cc["stratum"].astype(str),
            "pair": cc["group_level"].astype(str),
            "or": [text.ratio_ci(e, lo, hi) for e, lo, hi in zip(
                cc["estimate"], cc["conf_low"], cc["conf_high"])],
            "p_adj": [text.pvalue(p) for p in cc["p_adjusted"]]})
        cons_tbl = ReportTable(
            name="adjusted_interaction_contrasts", caption="Odds ratios of detection between "
            "models within each level of the interacting factor (the fit of every model's "
            "scans together, with the interaction).", data=cc, display=dc,
            labels={"term": "Interaction", "stratum": "Level", "pair": "Models",
                    "or": "OR [CI]", "p_adj": "Holm p"},
            notes=("Holm's adjustment within each level (emmeans pairs(~ model | factor)).",))
    return tbl, means_tbl, cons_tbl
def scans_used_text(mm: pd.DataFrame) -> str:
    """``"GLMM and GEE: 870 of 917 scans of each model (47 left out: age_group: 47
    missing); GLMM, known race: 523 of 917 ..."``: the fits that used as many scans for
    every model share one clause; otherwise each model is named."""
    out = []
    keys = ["n_used", "n_population", "n_excluded", "reason"]
    fits = list(dict.fromkeys(mm["fit_method"]))
    same = {f: len(mm.loc[mm["fit_method"] == f, keys].drop_duplicates()) == 1 for f in fits}
    clauses: dict = {}
    for f in fits:
        g = mm[mm["fit_method"] == f]
        if same[f]:
            r = g.iloc[0]
            clauses.setdefault((int(r.n_used), int(r.n_population), int(r.n_excluded),
                                str(r.reason or "")), []).append(METHOD_LABEL.get(f, f))
        else:
            out.append(f"{METHOD_LABEL.get(f, f)}: " + "; ".join(
                f"{r.model} {text.count(r.n_used)} of {text.count(r.n_population)}"
                + (f" ({text.count(r.n_excluded)} left out: {r.reason})" if r.n_excluded else "")
                for r in g.itertuples()))
    shared = [f"{text.human_list(names)}: {text.count(used)} of {text.count(pop)} scans of "
              f"each model" + (f" ({text.count(left)} left out: {why})" if left else "")
              for (used, pop, left, why), names in clauses.items()]
    return "; ".join(shared + out)


def _block_method_of(fits) -> str | None:
    """The method the block tests use among ``fits`` (the GLMM when fitted, as
    ``analysis.adjusted.block_method`` decides)."""
    return next((m for m in fits if m in ("glmm", "fixed")), None)


def primary_text(primary: dict | None) -> str:
    """The sentence naming the primary fit and why (decision ``adjusted.primary``)."""
    if not primary:
        return ""
    name = METHOD_TEXT.get(primary["fit"], primary["fit"])
    return (f" The primary fit is the {name} (columns "
            f"{METHOD_LABEL.get(primary['fit'], primary['fit'])}): {text.md(primary['reason'])}.")
