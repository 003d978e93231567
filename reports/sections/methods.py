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
        methods = "; ".join(ADJ_NAMES[m].format(g=md(a.group)) for m in a.methods)
        out.append(f"Confounding-adjusted models of detection among reference positives: "
                   f"{md(a.formula)}, fitted as {methods}. Likelihood-ratio tests compare "
                   f"the full model with the model without each block ("
                   + md("; ".join(f"{b}: {', '.join(t)}" for b, t in a.blocks.items()))
                   + ")."
                   + _repeated_methods(study.results.decisions.adjusted.repeated_scans,
                                       study.results.decisions.adjusted.primary))
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
               + ".")
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


def _calibration(study) -> list[str]:
    from .calibration import definitions

    return ["**Calibration.** ECE with 15 equal-width bins (an edge value in the lower bin), "
            "Brier score and negative log-likelihood; temperature scaling is fitted on the "
            "validation (calibration) split and evaluated on the test split.",
            # plain text (also the table notes), escaped here: a column name is user text
            *(text.md(d) for d in definitions(study, study.results["calibration"]["summary"]))]


#: the analyses of the plan's ``roles`` block, as the sentence names them
ROLE_NAMES = {"overall": "overall accuracy", "precision": "achieved precision",
              "sensitivity_collapse": "sensitivity collapse", "threshold_sweep":
              "threshold sweep", "pooled": "partially pooled cells", "adjusted":
              "adjusted models", "comparisons": "model comparisons", "calibration":
              "calibration", "crs": "CRS", "crs_stability": "CRS stability analyses",
              "metadata": "metadata quality", "label_error": "error-aware intervals"}


def _roles_sentence(study) -> str:
    """Which of the analyses the report shows are exploratory (the analysis layer's
    ``roles``, set by the plan's ``roles`` block and subgroup axes); every caption says it."""
    roles = study.results["roles"]
    plan = study.plan
    shown = set()
    if plan.detection is not None and study.cases is not None:
        shown |= {"overall", "precision", "sensitivity_collapse", "threshold_sweep", "pooled",
                  "comparisons"} | ({"adjusted"} if plan.detection.adjusted else set())
    if plan.crs is not None and study.runs is not None:
        shown |= {"crs", "crs_stability"}
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
    if plan.crs is not None and study.runs is not None:
        sec.add(" ".join(_crs(study)))
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
