"""Methods, written from the plan: inputs, threshold (prespecified or exploratory), CI
methods, subgroups, bootstrap size and seed, models, CRS reference, software versions,
and which sections this build could not produce."""
from __future__ import annotations

from analysis.adjusted import UNKNOWN, formula_columns
from stats.detection import MISSING, NOT_APPLICABLE

from .. import text
from ..manifest import package_versions
from . import Section
from ._detection import CI_NAMES

KEY = "methods"
TITLE = "Methods"
HALF = "any"

BOOT_NAMES = {
    "percentile": "percentile intervals",
    "bca": "bias-corrected and accelerated (BCa) intervals, acceleration from the "
           "jackknife over patients",
    "wilson": "percentile intervals for F1, which is not a proportion (Wilson intervals at "
              "the effective sample size implied by the bootstrap variance, Kish 1965 and "
              "Korn & Graubard 1998, apply to bootstrapped proportions only, and this "
              "report's proportions carry the closed-form intervals above)"}
ADJ_NAMES = {"glmm": "a logistic mixed model with a random intercept per {g} (maximum "
                     "likelihood, Laplace approximation)",
             "gee": "a GEE logistic model, exchangeable correlation within {g}, robust "
                    "standard errors",
             "fixed": "a logistic model with {g} as a fixed effect and standard errors "
                      "clustered on patients"}


def _detection(study) -> list[str]:
    plan, det = study.plan, study.plan.detection
    md = text.md
    out = []
    n_rows = study.input_rows.get("cases")
    models = list(dict.fromkeys(study.cases["model"].astype(str)))
    split = "split" in study.cases.columns
    out.append(
        f"**Detection.** The cases table ({md(plan.cases.name)}, {n_rows} rows) holds one row "
        f"per model and case for {len(models)} models ({md(text.human_list(models))}). "
        + ("Accuracy is estimated on the test split; the validation split is not evaluated. "
           if split else "Accuracy is estimated on every row (the table has no split column). "))
    thr_value = det.threshold.value
    if thr_value is not None:
        out.append(f"A case is called positive when its score (predicted tumour voxels) is at "
                   f"least {text.num(thr_value, 0) if float(thr_value).is_integer() else thr_value}; "
                   f"this threshold was **prespecified** in the plan (STARD 12a).")
    else:
        rule = ("maximising Youden's J" if det.threshold.criterion == "youden" else
                f"the lowest threshold reaching specificity {det.threshold.target}")
        thr = ""
        chosen = study.results.decisions.detection.threshold
        if chosen is not None:
            vals = chosen["values"]
            thr = " Chosen values: " + md(", ".join(f"{m} {v:g}" for m, v in vals.items())) + "."
        out.append(f"The threshold was chosen per model on the validation split by {rule} and "
                   f"then frozen for the test split; the choice is **exploratory** "
                   f"(data-driven).{thr}")
    conf = int(round(det.conf_level * 100))
    from ._detection import auc_interval_text

    auc = auc_interval_text(det.auc_scale, study.results.decisions.detection.cluster)
    out.append(f"Proportions (sensitivity, specificity, PPV, NPV) carry {CI_NAMES[det.ci]} "
               f"{conf}% confidence intervals; the AUC carries {auc}. An estimate whose "
               f"denominator is below {det.small_n} (reference positives for sensitivity, "
               f"negatives for specificity) is flagged as small.")
    axes = text.human_list(" \u00d7 ".join(a) for a in det.subgroups)
    out.append(f"Prespecified subgroup axes: {md(axes)}.")
    if det.exploratory_subgroups:
        exp = text.human_list(" \u00d7 ".join(a) for a in det.exploratory_subgroups)
        out.append(f"Exploratory subgroup axes (labelled so in every table): {md(exp)}.")
    res = study.results
    cluster = res.decisions.detection.cluster
    if cluster:
        out.append(f"Scans are clustered within {md(cluster)} (some have several scans): every "
                   f"proportion's interval is computed at the effective sample size implied by "
                   f"the cluster-robust variance over the {md(cluster)} clusters of its cell "
                   f"(Korn & Graubard 1998: never above the number of scans, so clustering "
                   f"never narrows an interval; the CSVs show the raw design effect, which can "
                   f"be below 1, and the effective size used; in simulation it covers "
                   f"94.0-96.2% wherever an interval can miss the truth on either side, "
                   f"and 96.0-97.4% in cells of 15-40 scans with sensitivity 0.83-0.96, "
                   f"where in most studies no interval that keeps its lower tail at 2.5% "
                   f"can miss from below (its upper tail errs 2.4-4.0%, its lower "
                   f"at most 1.1%, nominal 2.5% each); scans as independent cover "
                   f"down to 87.7%: "
                   f"bench/cluster_coverage.md), the "
                   f"tests of equal sensitivity and specificity across levels use the Rao-Scott "
                   f"second-order correction with an F reference (R's survey::svychisq "
                   f"default), and the cluster bootstrap resamples whole {md(cluster)} "
                   f"clusters. The AUC's interval is cluster-aware too: where a {md(cluster)} "
                   f"has several scans in a cell it uses Obuchowski's (1997) clustered-data "
                   f"variance (DeLong's placement values summed per {md(cluster)}), "
                   f"elsewhere DeLong's, which it then equals. Paired model comparisons "
                   f"follow the same rule: where a {md(cluster)} has several scans in a "
                   f"cell, differences in sensitivity and specificity use the clustered "
                   f"McNemar test of Durkalski et al. (2003; its p never below the exact "
                   f"McNemar p on the scans) and Newcombe's paired interval at the "
                   f"effective counts of the difference's cluster-robust variance (Obuchowski "
                   f"1998), and AUC differences Obuchowski's (1997) variance of the "
                   f"difference with a Student t reference on the number of {md(cluster)} "
                   f"clusters minus one degrees of freedom.")
    else:
        out.append(_independent(study))
    if "multiplicity" in res.decisions:
        out.append("Multiplicity: " + res.decisions.multiplicity + _unadjusted(study))
    missing = missing_data(study)
    if missing:
        out.append(missing)
    if det.bins:
        out.append("Bins (left-closed intervals): " + md("; ".join(
            f"{b.column} \u2192 {b.name} ({', '.join(b.labels)})" for b in det.bins.values()))
            + ".")
    boot = det.bootstrap
    if boot.n_boot:
        strata = f", stratified by {md(boot.strata)}" if boot.strata else ""
        out.append(f"Statistics without a closed-form interval use a cluster bootstrap "
                   f"(patients resampled with replacement{strata}; one index shared by all "
                   f"models and subgroups) with {boot.n_boot} replicates and seed "
                   f"{study.plan.seed_for('detection_bootstrap')}; {BOOT_NAMES[boot.boot_ci]}.")
    if det.adjusted:
        a = det.adjusted
        dec = study.results.decisions.adjusted
        gg = dec.glmm_group or {}
        g0 = a.group_columns[0]
        names = dict(ADJ_NAMES)
        if len(gg.get("group") or []) == 2:
            names["glmm"] = NESTED_NAME
        methods = "; ".join(names[m].format(g=md(g0)) for m in a.methods)
        out.append(f"Confounding-adjusted models of detection among reference positives: "
                   f"{md(a.formula)}, fitted as {methods}. Likelihood-ratio tests compare "
                   f"the full model with the model without each block ("
                   + md("; ".join(f"{b}: {', '.join(t)}" for b, t in a.blocks.items()))
                   + ")."
                   + (_nested_methods(gg, dec.repeated_scans) if names["glmm"] == NESTED_NAME
                      else _repeated_methods(dec.repeated_scans))
                   + _repeated_methods(None, dec.primary))
        out += _model_extras(study)
        units = study.results.decisions.adjusted.units or {}
        if units:
            out.append("Odds ratios of continuous terms are reported per a stated unit: "
                       + md("; ".join(f"{t} {u}" for t, u in units.items()))
                       + (" (per SD: the standard deviation of the variable, as the term "
                          "uses it, among the model's modelled rows)"
                          if any(u.startswith("per SD") for u in units.values()) else "")
                       + ".")
    if det.site_meta_analysis is not None:
        out.append(_site_meta(study))
    out.append("Paired model comparisons on the same cases use the exact McNemar test and "
               "Newcombe's interval for differences of proportions, and DeLong's paired test "
               "for AUCs" + (" (their cluster-aware forms where a patient repeats; above)"
                             if study.results.decisions.detection.cluster else "")
               + "." + _boot_comparisons(study))
    return out


def _site_meta(study) -> str:
    """The methods sentence of the meta-analysis across sites (plan key
    ``detection.site_meta_analysis``; ``stats.site_meta_analysis``)."""
    block = study.plan.detection.site_meta_analysis
    dec = study.results.decisions.site_meta_analysis
    names = text.human_list(block.estimands)
    by = (f", overall and per level of {text.md(text.human_list(' x '.join(a) for a in block.by))}"
          if block.by else "")
    cluster = (f" Each site's variance is cluster-aware: the delta-method variance of its "
               f"logit from the cluster-robust variance of its proportion over "
               f"{text.md(dec.cluster)} clusters (Korn & Graubard's effective counts, never "
               f"below the binomial variance)." if dec.cluster else "")
    verb = "is" if len(block.estimands) == 1 else "are"
    return (f"Meta-analysis across sites: per model, each site is a study and its {names} "
            f"{verb} pooled on the logit scale{by} (escalc's 0.5 correction for a site with a "
            f"zero cell only) by a random-effects model with REML tau², a Knapp-Hartung "
            f"confidence interval and a prediction interval for a new site, both with t on "
            f"k - 1 degrees of freedom (k sites), back-transformed; heterogeneity as "
            f"tau², I² and Cochran's Q (R's metafor rma(escalc(measure = \"PLO\"), "
            f"method = \"REML\", test = \"knha\"), which it equals to 1e-6).{cluster} In "
            f"simulation with 1-4 scans per patient (bench/meta_analysis_coverage.md) the "
            f"pooled interval covers 93.9-95.3% with 40-160 patients per site and 89.4-95.0% "
            f"with 10-40 (the logit of a small site's proportion is biased), and the "
            f"prediction interval 94.3-96.1% when sites agree but 81.7-93.3% when they "
            f"differ: it is too narrow when few sites are pooled.")


def _attribution(study) -> list[str]:
    """The paragraphs of the gap decomposition (``detection.gaps``; ``stats.decompose_gap``)
    and of the transported performance (``detection.target``; ``stats.transport``): what
    was done, then each assumption in a paragraph of its own."""
    det = study.plan.detection
    res = study.results
    out = []
    if det.gaps is not None and "gap_decomposition" in res:
        dec = res.decisions.gaps
        metric = "sensitivity" if dec.population == "positives" else "specificity"
        contrasts = "; ".join(
            text.md(f"{c['group']} {c['levels'][0]} vs {c['levels'][1]}") + f" ({c['role']}; "
            f"covariates {text.md(', '.join(c['covariates']))})" for c in (dec.contrasts or []))
        within = (" with each site's share of the comparison level as a site-level "
                  "covariate, so that the group term is the within-site effect (Mundlak's "
                  "within-between model) and does not take up site effects that go with "
                  "the group's share" if dec.within_site else "")
        out.append((
            f"Where the gaps come from: for each contrast ({contrasts}) the crude "
            f"difference in {metric} between the comparison and the reference level is split "
            f"on the adjusted model ({dec.method}{within}; the site is a covariate through "
            f"its effect in the model) into a case-mix part, the change in the reference "
            f"level's mean predicted {metric} when it is given the comparison level's "
            f"covariates (g-computation; Fairlie's decomposition for a binary outcome), "
            f"and the part at equal case mix, the rest. The case-mix part is split into "
            f"each covariate's contribution by Shapley values, averaged exactly over every "
            f"order in which the covariates can be switched (the comparison's and the "
            f"reference's rows paired in every combination), so that the contributions do "
            f"not depend on an order and add up to the case-mix part. Intervals: paired "
            f"cluster bootstrap over patients ({dec.n_boot} replicates, seed "
            f"{study.plan.seed_for('gap_bootstrap')}, each refitting the model, the site "
            f"shares recomputed from the replicate's rows), "
            f"percentile limits. In simulation with known truth (bench/gap_decomposition.md; "
            f"6 sites, about 350 positive scans, 1,000 studies per scenario) the intervals "
            f"of the GLMM with the site shares covered 94.8-96.5% (the site-fixed model's "
            f"94.8-96.6%), the part whose truth is 0 among them (a gap made only by case "
            f"mix: the part at equal case mix; only by a conditional effect: the case-mix "
            f"part); without the site shares the GLMM's case-mix part of a gap made by "
            f"case mix was biased toward 0 (+0.029; 88.5% coverage in 200 studies), its "
            f"shrunken site effects handing part of the site's share to the group."))
        out.append(
            "Assumption of the decomposition, no unmeasured confounding: the part at equal "
            "case mix is the effect of the group itself only if the covariates hold every "
            "factor that differs between the groups and affects detection (hospital, "
            "scanning workflow, disease stage, reporting style). A factor left out moves "
            "its share of the gap into the part at equal case mix; the decomposition then "
            "describes the model, not a cause, and race in particular stands for such "
            "factors.")
        out.append(
            "Assumption of the decomposition, positivity: every covariate pattern of the "
            "comparison level must be possible for the reference level (its scans cover "
            "the same sites, phases and tumour sizes); where they do not, the reference "
            "level's predictions there are the model's extrapolation, and a coefficient "
            "the data cannot estimate makes the parts not estimable (flagged).")
    if det.target is not None and "transport" in res:
        dec = res.decisions.transport
        margins = ", ".join("disease prevalence" if c == "label" else c.replace("_", " ")
                            for c in (dec.target or {}))
        out.append((
            f"Performance in the intended-use population ({text.md(dec.name)}): the study's scans "
            f"are raked (iterative proportional fitting to convergence) to the target's "
            f"margins ({text.md(margins)}), and sensitivity, specificity, PPV and NPV are the "
            f"weighted proportions, with linearisation standard errors under raking "
            f"(patients as clusters) and logit intervals, as R survey's rake(), svymean() "
            f"and svyciprop(method = \"logit\"), which they equal to 1e-6; Kish's effective "
            f"sample size and the largest weight are reported, and a weight above "
            f"five times the mean is flagged."
            + (" Scans with a missing margin value are left out of the raking ("
               + text.md("; ".join(f"{c}: {n}" for c, n in dec.left_out.items()))
               + " scans)." if dec.left_out else "")))
        out.append(
            "Assumption of the transport, no unmeasured effect modification: within the "
            "cells the margins define, the study's scans are exchangeable with the "
            "target's: performance may differ between the study and the target only "
            "through the raked variables. A factor that changes performance and differs "
            "between the two populations but is not a margin is not corrected for.")
        out.append(
            "Assumption of the transport, positivity: every level of the target's margins "
            "has scans in the study; a target level the study has no scans of is outside "
            "its support and is refused, and large weights (few scans standing for much of "
            "the target) widen the intervals and are flagged.")
    return out


def _crs(study) -> list[str]:
    crs, ref = study.plan.crs, study.reference
    md = text.md
    runs = study.runs
    panel = list(ref.panel) if ref is not None else []
    ref_hash = ref.hash if ref is not None else ""
    ref_name = md(study.plan.reference.name) if study.plan.reference else "not given"
    w = dict(ref.weights) if ref is not None else {}
    wt = (f"w_D = {w['dominance']:.3g}, w_S = {w['similarity']:.3g}, "
          f"w_W = {w['worst_axis']:.3g} (reference file)" if w else "weights from the reference")
    out = [f"**Clinical Reliability Score.** The runs table ({md(study.plan.runs.name)}, "
           f"{len(runs)} runs) covers {runs['encoder'].nunique()} encoders on "
           f"{runs['dataset'].nunique()} datasets. Per encoder and dataset, with AUROC_f the "
           f"seed-mean AUROC of the clean condition at label fraction f: discrimination is "
           f"AUROC_1; calibration the seed-mean ECE (15 equal-width bins, clean, full labels; "
           f"lower is better; the encoder's one ECE, shown also in the calibration section); "
           f"label efficiency the mean over the fractions f < 1 of "
           f"(AUROC_f - 0.5) / (AUROC_1 - 0.5); robustness 1 - (mean_c r_c + max_c r_c) / 2 "
           f"with r_c = max(0, AUROC_1 - AUROC_c) / (AUROC_1 - 0.5) over every perturbation "
           f"and severity and the shift condition at full labels. Label efficiency and "
           f"robustness are not estimable where AUROC_1 <= 0.5. Each axis is the mean over "
           f"datasets, then normalized against the fixed reference panel "
           f"({md(text.human_list(panel))}; reference file {ref_name}; panel hash "
           f"{ref_hash[:16]}: the SHA-256 of the panel's canonical content, recorded with "
           f"every score in the CSV files, not of the file's bytes, whose SHA-256 is in "
           f"manifest.json): a_j = (x_j - lo_j) / (hi_j - lo_j), clipped to [0, 1] (flipped "
           f"for calibration), with anchors lo_j, hi_j the panel's minimum and maximum unless "
           f"the reference fixes them, so a candidate better than every panel member on an "
           f"axis reads 1 there. Dominance D = (1 + (panel members the encoder Pareto-"
           f"dominates - those dominating it) / panel size) / 2 on the normalized axes; "
           f"similarity S = 1 - ||a - 1|| / 2 (the distance to the ideal profile of four 1s, "
           f"scaled to [0, 1]); worst axis W = min_j a_j; and "
           f"CRS = w_D D + w_S S + w_W W with {wt}."]
    from .crs import replicates_text

    scores = study.results["crs"]["scores"]
    ranks = study.results["crs"].get("rank_probabilities")
    seeds = study.results["crs"].get("seeds")
    out.append(f"Uncertainty, anchors held fixed: {replicates_text(scores, study.plan, ranks, seeds)}; "
               f"intervals are bootstrap percentiles, the rank interval the percentiles of "
               f"the encoder's rank over the replicates, and P(top k) with k = {crs.k} the share "
               f"of replicates ranking it there. Ranking stability: Kendall tau-b of the CRS "
               f"ranking with each panel member left out of the reference, and its mean with "
               f"the central {round(100 * crs.conf_level):g}% band over {crs.n_weights} "
               f"Dirichlet(1, 1, 1) weight vectors (seed {study.plan.seed_for('crs_stability')}); "
               f"inversions are the "
               f"encoder pairs ordered oppositely by AUROC and by CRS.")
    return out


def _crs_mechanisms(study) -> list[str]:
    """The rows the CRS ranks and the mechanism analyses, as run (only those computed)."""
    from analysis.core import ANALYSES

    res, crs, plan = study.results, study.plan.crs, study.plan
    dec = res.decisions.crs
    computed = {n for n in ("crs_shift", "crs_specialization", "crs_depth", "crs_confidence",
                            "crs_protocol", "crs_labels")
                if ANALYSES[n].wanted(plan, study.tables) and n in res}
    out = []
    if dec.rows and (dec.rows["other_layers"] or dec.rows["other_protocols"] or dec.layers):
        r = dec.rows
        out.append(f"**CRS rows.** The ranking uses one feature layer and one protocol per "
                   f"encoder and regime ({r['used']} of {r['runs']} runs; "
                   f"{r['other_layers']} runs of other layers feed only the depth analysis, "
                   f"{r['other_protocols']} of other protocols only the protocol comparison): "
                   f"layers by {text.md(dec.layer_rule or 'the only layer')}"
                   + (f"; protocols {text.md('; '.join(f'{k}: {v}' for k, v in dec.protocols.items()))}"
                      if dec.protocols else "") + ".")
    boot = res["crs"]
    if boot.get("domain_scores") is not None:
        out.append("Per-domain CRS: each dataset's axes normalized with the overall anchors, "
                   "dominance against the panel on the same dataset, from the same bootstrap "
                   "replicates as the overall CRS.")
    if boot.get("rank_persistence") is not None:
        out.append(f"Adaptation: both regimes' CRS are recomputed in every replicate from the "
                   f"same seed draws; rank persistence is Kendall tau-b between the frozen and "
                   f"adapted rankings, the mean absolute rank change, the inverted pairs, the "
                   f"top-{crs.k} overlap (percentile CIs) and P(top {crs.k} kept), the share of "
                   f"replicates in which the frozen top {crs.k} is the adapted top {crs.k}.")
    mech = []
    if "crs_shift" in computed:
        mech.append(f"institutional shift: the clean-minus-shift AUROC drop and ECE rise at full "
                    f"labels per encoder, ranked by AUROC drop, beside the mean drop over "
                    f"perturbations and severities (seed {plan.seed_for('crs_shift')})")
    if "crs_specialization" in computed:
        mech.append(f"E1 specialization: an encoder's AUROC gain over the reference panel's mean "
                    f"on the datasets of its pretraining domain (crs.encoder_domains) and on the "
                    f"others, and their difference (seed {plan.seed_for('crs_specialization')})")
    if "crs_depth" in computed:
        mech.append(f"E3 depth: the four axes per encoder and layer, the best layer by the "
                    f"seed-mean validation AUROC at clean, full labels (held fixed across "
                    f"replicates), best minus last per axis (seed {plan.seed_for('crs_depth')})")
    if "crs_confidence" in computed:
        mech.append(f"E4 confidence loss: per perturbation and severity the change in ECE and "
                    f"in AUROC from clean (seed-mean, full labels), flagged where the ECE "
                    f"change's CI lies above 0 and the AUROC change's lower limit above "
                    f"-{text.num(crs.auroc_margin)} (crs.auroc_margin), with a calibration-"
                    f"robustness companion axis outside the CRS (seed {plan.seed_for('crs_confidence')})")
    if "crs_protocol" in computed:
        mech.append(f"E5 protocols: each protocol scored as an arm against the same reference, "
                    f"differences from the probe paired by seed (seed {plan.seed_for('crs_protocol')})")
    if "crs_labels" in computed:
        mech.append(f"E6 label efficiency: clean AUROC per label fraction with bands, and per "
                    f"pair of encoders the largest fraction at which the one behind at full "
                    f"labels leads (interpolated in log fraction) and the share of replicates "
                    f"with a crossover (seed {plan.seed_for('crs_labels')})")
    if mech:
        out.append(f"Mechanism analyses ({crs.bootstrap.n_boot} paired-seed bootstrap replicates "
                   f"each, the CRS's seed draws scheme, one random stream each; percentile "
                   f"CIs): " + "; ".join(mech) + ".")
    if dec.runs_vs_predictions:
        v = dec.runs_vs_predictions
        if v.get("runs_compared"):
            out.append(f"The runs' AUROC and ECE were recomputed from the probe predictions "
                       f"(macro one-vs-rest AUROC and top-label ECE for multiclass probes): "
                       f"{v['runs_compared']} runs, largest differences "
                       f"{v['max_abs_auroc_difference']:.1g} (AUROC) and "
                       f"{v['max_abs_ece_difference']:.1g} (ECE).")
    return out


def _calibration(study) -> list[str]:
    from .calibration import definitions

    return ["**Calibration.** ECE with 15 equal-width bins (an edge value in the lower bin), "
            "Brier score and negative log-likelihood; temperature scaling is fitted on the "
            "validation (calibration) split and evaluated on the test split.",
            # plain text (also the table notes), escaped here: a column name is user text
            *(text.md(d) for d in definitions(study, study.results["calibration"]["summary"]))]


def _boot_comparisons(study) -> str:
    """The sentence on the comparisons without a closed form (``detection.compare_metrics``:
    PPV, NPV, F1, accuracy), or nothing."""
    from stats.compare import BOOT_COMPARE

    names = {"ppv": "PPV", "npv": "NPV", "f1": "F1", "accuracy": "accuracy"}
    boot = [names[m] for m in study.plan.detection.compare_metrics if m in BOOT_COMPARE]
    if not boot:
        return ""
    return (" Differences in " + text.human_list(boot) + ", which have no closed-form "
            "paired test, are percentiles of the paired cluster bootstrap above (the same "
            "replicates for both models), with the two-sided p-value of the replicates' "
            "sign (twice the smaller share of replicate differences on one side of zero) "
            "and Holm over every pair and cell per metric.")


#: the analyses of the plan's ``roles`` block, as the sentence names them
ROLE_NAMES = {"overall": "overall accuracy", "precision": "achieved precision",
              "sensitivity_collapse": "sensitivity collapse", "threshold_sweep":
              "threshold sweep", "pooled": "partially pooled cells", "adjusted":
              "adjusted models", "comparisons": "model comparisons", "calibration":
              "calibration", "crs": "CRS", "crs_stability": "CRS stability analyses",
              "crs_domains": "per-domain CRS and shift table", "crs_mechanisms":
              "mechanism analyses (E1-E6) and adaptation",
              "metadata": "metadata quality", "label_error": "error-aware intervals",
              "operating_points": "operating points", "goals": "performance goals"}


def _roles_sentence(study) -> str:
    """Which of the analyses the report shows are exploratory (the analysis layer's
    ``roles``, set by the plan's ``roles`` block and subgroup axes); every caption says it."""
    roles = study.results["roles"]
    plan = study.plan
    shown = set()
    if plan.detection is not None and study.cases is not None:
        shown |= {"overall", "precision", "sensitivity_collapse", "threshold_sweep", "pooled",
                  "comparisons"} | ({"adjusted"} if plan.detection.adjusted else set())
        shown |= ({"operating_points"} if plan.detection.operating_points else set()) | (
            {"goals"} if plan.detection.goals else set())
    if plan.crs is not None and study.runs is not None:
        shown |= {"crs", "crs_stability"}
        if study.results.decisions.crs.rows or "crs_shift" in study.results:
            shown |= {"crs_domains", "crs_mechanisms"}
    if "calibration" in study.results:
        shown.add("calibration")
    if plan.metadata is not None:
        shown |= {"metadata"} | ({"label_error"} if plan.metadata_options and
                                 plan.metadata_options.label_error else set())
    exp = [ROLE_NAMES[k] for k in ROLE_NAMES if k in shown and roles.get(k) == "exploratory"]
    own = bool((getattr(plan, "raw", None) or {}).get("roles"))
    return ("Every table and figure caption says whether its analysis is prespecified or "
            "exploratory (" + ("the plan's roles block" if own else
                               "clinrel's defaults, which a roles block in the plan can change")
            + "; subgroup axes by detection.subgroups). "
            + ("Exploratory analyses: " + text.human_list(exp) + "; their tests are not "
               "adjusted for multiplicity (the multiplicity statement names the adjusted "
               "families)." if exp else "Every analysis is prespecified."))


def build(study) -> Section:
    plan = study.plan
    sec = Section(KEY, TITLE)
    sec.add(declaration(study), f"`{plan.sha256}`")
    reading = reading_text(study)
    if reading:
        sec.add(reading)
    if plan.prespecified:
        sec.add("Prespecified: " + " ".join(text.md(p) for p in plan.prespecified))
    if plan.exploratory:
        sec.add("Exploratory: " + " ".join(text.md(p) for p in plan.exploratory))
    sec.add(_roles_sentence(study))
    if plan.detection is not None and study.cases is not None:
        sec.add(" ".join(_detection(study)))
        from .operating import methods_text

        sec.add(*methods_text(study))
    if plan.detection is not None and study.cases is not None:
        for paragraph in _attribution(study):
            sec.add(paragraph)
    from . import localization

    if plan.detection is not None and study.cases is not None and localization.applies(study):
        sec.add(localization.methods_text(study))
    if plan.crs is not None and study.runs is not None:
        sec.add(" ".join(_crs(study)))
        more = _crs_mechanisms(study)
        if more:
            sec.add(" ".join(more))
    if "calibration" in study.results:
        sec.add(" ".join(_calibration(study)))
    if plan.privacy.pseudonymize_ids:
        sec.add("Case and patient identifiers were replaced by salted SHA-256 pseudonyms "
                "before analysis; columns that look like direct identifiers are refused.")
    v = package_versions()
    soft = ", ".join(f"{k} {v[k]}" for k in ("python", "clinrel", "numpy", "pandas", "scipy",
                                               "statsmodels", "plotnine", "great-tables",
                                               "pandoc", "typst") if k in v)
    sec.add(f"Software: {text.md(soft)}. Input hashes, seeds and the code revision are in "
            f"manifest.json.")
    skipped = getattr(study, "skipped", [])
    if skipped:
        sec.add("Sections not produced in this build: " + text.md("; ".join(
            f"{t} ({r})" for _, t, r in skipped)) + ".")
    return sec


NESTED_NAME = ("a logistic mixed model with random intercepts per {g} and per patient "
               "within {g} (lme4's (1 | site/patient_id); maximum likelihood, Laplace "
               "approximation, the conditional modes solved per site by the Schur complement "
               "of its bordered-diagonal Hessian)")


def _nested_methods(gg: dict, rep: dict | None) -> str:
    """The methods sentence of the nested GLMM: the rule that chose it (decision
    ``adjusted.glmm_group``) and what it does with repeated scans."""
    out = f" The GLMM's random intercepts: {text.md(gg.get('why', ''))}"
    if rep:
        out += (f" ({text.count(rep['with_repeats'])} of the {text.count(rep['patients'])} "
                f"patients have several of the modelled scans)")
    return out + ("; the patient level carries the correlation of a patient's scans. A variance component at the boundary "
                  "(SD below 1e-4, or removing it raises the deviance by less than 1e-6) is "
                  "reported as 0 and flagged singular, and the fit is the model without it.")


def _model_extras(study) -> list[str]:
    """Methods sentences of the contrasts, the variance partition and the interaction
    tests, when the run has them."""
    a = study.plan.detection.adjusted
    dec = study.results.decisions.adjusted
    md = text.md
    out = []
    if a.contrasts:
        out.append("Pairwise contrasts of adjusted levels (" + md(", ".join(a.contrasts))
                   + ") are odds ratios of emmeans-style marginal means (equal weights over "
                   "the other factors), Wald intervals per comparison and Holm's adjustment "
                   "within each model and factor (emmeans pairs).")
    if dec.partition_fit:
        out.append("The variation in detection is partitioned on the latent (logit) scale "
                   "(Nakagawa & Schielzeth): each random intercept's variance, each block's "
                   "variance of its part of the linear predictor, their covariance, and the "
                   "logistic residual \u03c0\u00b2/3.")
    if a.interactions:
        out.append("Interaction terms (" + md(", ".join(a.interactions)) + ") are tested by "
                   "likelihood-ratio tests of the GLMM with and without the term; a term with "
                   "the model fits every model's scans together with patients (nested in "
                   "sites) as a random effect; "
                   + md(str(dec.interaction_multiplicity or "")) + ".")
    return out


def _repeated_methods(rep: dict | None, primary: dict | None = None) -> str:
    """The methods sentence for a patient's repeated scans in the adjusted models (the
    analysis layer's ``adjusted.repeated_scans``) and the primary fit
    (``adjusted.primary``: decided from the design)."""
    from .adjusted import METHOD_TEXT

    out = ""
    if rep:
        g = text.md(rep["group"])
        out = (f" {text.count(rep['with_repeats'])} of the {text.count(rep['patients'])} "
               f"patients have several of the modelled scans; the GLMM's random intercept "
               f"per {g} treats them as independent given {g}"
               + (f", while the GEE's sandwich over the {g}s nests each patient"
                  if rep["nested"] else f", and some patients span several {g}s") + ".")
    if primary:
        out += (f" The primary fit, read for inference and for the adjusted-versus-crude "
                f"comparison, is the {METHOD_TEXT.get(primary['fit'], primary['fit'])}: "
                f"{text.md(primary['reason'])}.")
    return out


def declaration(study) -> str:
    """The plan's provenance, as the file records it and as its author declares it: the
    file, its modification time and the date ``clinrel plan init`` stamped in it
    (``Study.plan_file``); the SHA-256 follows as its own block."""
    plan = study.plan
    rec = getattr(study, "plan_file", None) or {}
    when = [f"file modified {rec['modified_utc']}"] if rec.get("modified_utc") else []
    if rec.get("plan_init_date"):
        when.append(f"its first line records that clinrel plan init wrote it on "
                    f"{rec['plan_init_date']}")
    return (f"This appendix follows the analysis plan {text.md(plan.path.name)}"
            + (f" ({'; '.join(when)})" if when else "")
            + ". That the plan was written before the analysis, and what it lists as "
            "prespecified, is the declaration of its author: clinrel records the file it "
            "was given, not when the plan was written. Plan SHA-256:")


def reading_text(study) -> str | None:
    """"Reading this report": the design (scans, patients, repeated scans, sites) and
    what follows from it, above all which adjusted-model table is primary and why
    (decision ``adjusted.primary``, from the number of sites and the repeated patients,
    never from the estimates). None without the detection half."""
    from .adjusted import METHOD_LABEL, METHOD_TEXT

    plan, res = study.plan, study.results
    if plan.detection is None or study.cases is None or "evaluation" not in res:
        return None
    ev = res["evaluation"].drop_duplicates("case_id")
    n_scans, n_pat = len(ev), int(ev["patient_id"].nunique())
    per = ev.groupby("patient_id", observed=True).size()
    rep = int((per > 1).sum())
    n_sites = int(ev["site"].nunique()) if "site" in ev.columns else 1
    cluster = res.decisions.detection.cluster
    out = [f"**Reading this report.** The evaluation has {n_scans} scans of {n_pat} "
           f"patients ({rep} with more than one scan) at {n_sites} "
           f"site{'s' if n_sites != 1 else ''}, scored by "
           f"{study.cases['model'].nunique()} models, shown in the order of the cases "
           f"table in every table and figure. "
           + (f"Scans of one patient are not independent: every interval and test of the "
              f"accuracy tables is cluster-aware over {text.md(cluster)}. " if cluster else
              "Scans are treated as independent. ")]
    primary = res.decisions.adjusted.primary if plan.detection.adjusted else None
    if primary and "adjusted" in getattr(study, "built_sections", {"adjusted": 1}):
        name = METHOD_TEXT.get(primary["fit"], primary["fit"])
        others = [METHOD_LABEL.get(m, m) for m in (res.decisions.adjusted.fitted or [])
                  if m != primary["fit"]]
        out.append(f"The primary adjusted model is the {name} (its columns "
                   f"\u201c{METHOD_LABEL.get(primary['fit'], primary['fit'])}\u201d of "
                   f"@tbl-adjusted-odds-ratios): {text.md(primary['reason'])}."
                   + (" The columns " + text.human_list(f"\u201c{o}\u201d" for o in others)
                      + " are shown beside it for comparison, not for inference."
                      if others else ""))
    out.append("Captions say whether a table or figure is prespecified or exploratory.")
    return " ".join(out)


# --------------------------------------------------------------- clustering and missing data

def _repeats(study) -> tuple[int, int] | None:
    """``(patients with several scans, patients)`` as the analysis layer recorded them
    (decision ``detection.patient_repeats``, beside ``detection.cluster``); None without a
    ``patient_id`` column."""
    rep = study.results.decisions.detection.patient_repeats
    return None if not rep else (int(rep["with_repeats"]), int(rep["patients"]))


def _unadjusted(study) -> str:
    """The tests the report shows outside any family, named so the multiplicity statement
    covers every p-value: the adjusted models' per-term Wald p-values (the block tests are
    their family), the metadata site tests, and the CRS pairwise differences' own family."""
    plan = study.plan
    parts = []
    if plan.detection is not None and plan.detection.adjusted:
        parts.append("the adjusted models' per-term p-values are not adjusted (their "
                     "prespecified tests are the block tests)")
    if plan.metadata is not None:
        parts.append("the tests of equal metadata agreement across sites are shown "
                     "unadjusted (a data-quality check)")
    if plan.crs is not None and study.runs is not None:
        parts.append("the pairwise CRS differences are their own family (Holm over all "
                     "encoder pairs)")
    return (" In addition: " + "; ".join(parts) + ".") if parts else ""


def _independent(study) -> str:
    """The sentence for scans treated as independent (the analysis layer decided no
    cluster, ``detection.cluster`` None): turned off by the plan (its
    ``detection.cluster: none``) although patients repeat, or one scan per patient."""
    off = getattr(study.plan.detection, "cluster", "auto") is None
    rep = _repeats(study)
    if off and rep is not None and rep[0]:
        return (f"Clustering was turned off by the plan (`detection.cluster: none`): scans "
                f"are treated as independent although {text.count(rep[0])} of the "
                f"{text.count(rep[1])} patients have several scans, so the closed-form "
                f"intervals and the tests, the paired model comparisons included, ignore "
                f"the correlation of a patient's scans and may be too narrow.")
    if rep is None:
        return ("Scans are treated as independent (the cases table has no patient_id "
                "column).")
    return ("Each patient contributes one scan per model, so scans are treated as "
            "independent" + (" (the plan also sets `detection.cluster: none`)." if off
                             else "."))


def level_counts(study, level: str) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Where the results hold ``level`` ("Missing", "not applicable", "Unknown"):
    ``({axis: scans per model}, {baseline characteristic: scans})``, first the
    single-variable subgroup axes (the analysis layer's ``confusion_counts``), then the
    other variables of the baseline table (``cohort``, one row per scan; for "Missing" also
    a continuous variable's ``missing`` count), leaving out a column a binned axis was cut
    from (the axis speaks for it)."""
    res = study.results
    axes: dict[str, list[int]] = {}
    base: dict[str, list[int]] = {}
    seen: set[str] = set()
    cc = res.get("confusion_counts")
    if cc is not None and len(cc):
        single = cc[~cc["group_var"].astype(str).str.contains(":", regex=False)
                    & (cc["group_var"].astype(str) != "overall")]
        seen = set(single["group_var"].astype(str))
        hit = single[(single["group_level"].astype(str) == level) & (single["n"] > 0)]
        for var, g in hit.groupby(hit["group_var"].astype(str), sort=False):
            axes[var] = [int(n) for n in g["n"]]
    seen |= {b.column for b in study.plan.detection.bins.values() if b.name in seen}
    coh = res.get("cohort")
    if coh is not None and len(coh):
        ov = coh[coh["group_var"].astype(str) == "overall"]
        hit = (ov["estimand"] == "count") & (ov["level"].astype(str) == level)
        if level == MISSING:
            hit |= ov["estimand"] == "missing"
        for r in ov[hit & (ov["estimate"] > 0)].itertuples():
            if str(r.variable) not in seen:
                base.setdefault(str(r.variable), [int(r.estimate)])
    return axes, base


def _scans(ns) -> str:
    """``"11 scans"``; ``"11-12 scans by model"`` where the models' counts differ."""
    ns = sorted({int(n) for n in ns})
    k = text.count(ns[0]) if len(ns) == 1 else f"{text.count(ns[0])}-{text.count(ns[-1])}"
    return f"{k} scan{'' if ns == [1] else 's'}" + (" by model" if len(ns) > 1 else "")


#: how a variable with an "Unknown" level is named: "race: 81 scans"
UNKNOWN_FORM = "{v}: {n}"


def _named(counts: dict[str, list[int]], form: str = "{v} ({n})") -> str:
    """``"phase (11 scans) and age_group (23 scans)"``, the names escaped."""
    return text.human_list(form.format(v=text.md(v), n=_scans(n)) for v, n in counts.items())


def _left_out(rows, *, reason: bool = True) -> str:
    """``"39 of 244 scans of each model's population"`` when every row (model x fit) of
    ``adjusted_missing`` leaves out as many, else the rows that leave out any, one by one;
    with the reason the analysis layer recorded."""
    from .adjusted import METHOD_LABEL

    pairs = set(zip(rows["n_excluded"], rows["n_population"], rows["reason"]))
    if len(pairs) == 1:
        n, pop, why = pairs.pop()
        return (f"{text.count(n)} of {text.count(pop)} scans of each model's population"
                + (f" ({text.md(why)})" if why and reason else ""))
    return "; ".join(f"{text.md(r.model)}, {METHOD_LABEL.get(r.fit_method, r.fit_method)}: "
                     f"{text.count(r.n_excluded)} of {text.count(r.n_population)}"
                     + (f" ({text.md(r.reason)})" if r.reason and reason else "")
                     for r in rows[rows["n_excluded"] > 0].itertuples())


def missing_data(study) -> str | None:
    """The methods' missing-data sentence, each clause from what this study holds: the
    subgroup axes and other baseline characteristics with missing values and how many
    (:func:`level_counts`), the attributes "not applicable" to reference negatives, a
    recorded "Unknown" category (kept in the adjusted models when the formula uses it, and
    the complete-case refit ``glmm_cc`` where the analysis layer fitted one), and the scans
    the adjusted models left out and why (``adjusted_missing``). One sentence when nothing
    is missing. None without the detection half (the checklist map reads this: no
    sentence, no missing-data item covered by Methods)."""
    plan, res = study.plan, study.results
    det = plan.detection
    if det is None or study.cases is None:
        return None
    miss_axes, miss_base = level_counts(study, MISSING)
    na, unknown = ({**a, **b} for a, b in (level_counts(study, NOT_APPLICABLE),
                                           level_counts(study, UNKNOWN)))
    am = res.get("adjusted_missing") if det.adjusted else None
    main = cc = None
    if am is not None and len(am):
        main, cc = am[am["fit_method"] != "glmm_cc"], am[am["fit_method"] == "glmm_cc"]
    left = main is not None and bool((main["n_excluded"] > 0).any())
    if not (miss_axes or miss_base or na or unknown or left):
        where = ["subgroup axis", "baseline characteristic",
                 *(["adjusted-model variable"] if main is not None else [])]
        return (f"Missing data: no {', '.join(where[:-1])} or {where[-1]} of the evaluated "
                f"scans has a missing value.")
    parts = []
    if miss_axes:
        parts.append(f"a missing subgroup value is shown as a level of its own (\"Missing\"), "
                     f"so every axis's levels add up to the evaluated scans, and compared with "
                     f"the rest of its axis; the tests of equal sensitivity and specificity "
                     f"across levels leave it out (as R's chisq.test drops NA); values are "
                     f"missing in {_named(miss_axes)}")
    else:
        parts.append("no subgroup axis has a missing value" if miss_base else
                     "no subgroup axis or baseline characteristic has a missing value")
    if miss_base:
        parts.append(f"the baseline table counts the missing values of {_named(miss_base)}")
    if na:
        parts.append(f"{text.human_list(text.md(v) for v in na)} of reference-negative scans "
                     f"read \"not applicable\" (the attribute does not exist), not missing")
    if unknown:
        cols = set(formula_columns(det.adjusted.formula, res["evaluation"].columns)
                   ) if det.adjusted else set()
        used = [v for v in unknown if v in cols]  # the formula's, in the order shown
        fitted = res.decisions.adjusted.fitted or []
        clause = (f"a value recorded as \"{UNKNOWN}\" ({_named(unknown, UNKNOWN_FORM)}) is a "
                  f"recorded category, shown as a level")
        if used:
            clause += " and kept in the adjusted models" + (
                "" if len(used) == len(unknown) else
                f" ({text.human_list(text.md(v) for v in used)})")
        if "race" in used and cc is not None and len(cc) and "glmm_cc" in fitted:
            clause += (f", which are refitted without race {UNKNOWN} beside the main fit "
                       f"(complete case: the GLMM leaves out "
                       f"{_left_out(cc, reason=False)})")
        elif "race" in used and res.decisions.adjusted.complete_case:
            clause += (f"; the complete-case refit without race {UNKNOWN} failed (the "
                       f"adjusted models say why)")
        parts.append(clause)
    if main is not None:
        parts.append("the adjusted models use the scans with every formula variable present "
                     f"(R's na.omit), which leaves out {_left_out(main)}"
                     if left else "the adjusted models' main fits use every scan of their "
                     "population (no formula variable has a missing value)")
        if "adjusted" in getattr(study, "built_sections", {}):
            parts.append("the scans each fit used and left out, and why, are counted under "
                         "the adjusted models' variance table")
    return "Missing data: " + "; ".join(parts) + "."
