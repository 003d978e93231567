"""Methods, written from the plan: inputs, threshold (prespecified or exploratory), CI
methods, subgroups, bootstrap size and seed, models, CRS reference, software versions,
and which sections this build could not produce."""
from __future__ import annotations

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
             "fixed": "a logistic model with {g} as a fixed effect and cluster-robust "
                      "standard errors"}


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
    if det.threshold_value is not None:
        out.append(f"A case is called positive when its score (predicted tumour voxels) is at "
                   f"least {text.num(det.threshold_value, 0) if float(det.threshold_value).is_integer() else det.threshold_value}; "
                   f"this threshold was **prespecified** in the plan (STARD 12a).")
    else:
        rule = ("maximising Youden's J" if det.criterion == "youden" else
                f"the lowest threshold reaching specificity {det.target}")
        thr = ""
        chosen = study.results.decisions.get("detection.threshold")
        if chosen is not None:
            vals = chosen["values"]
            thr = " Chosen values: " + md(", ".join(f"{m} {v:g}" for m, v in vals.items())) + "."
        out.append(f"The threshold was chosen per model on the validation split by {rule} and "
                   f"then frozen for the test split; the choice is **exploratory** "
                   f"(data-driven).{thr}")
    conf = int(round(det.conf_level * 100))
    auc = ("DeLong's variance with a Wald interval on the AUC scale (as pROC)"
           if det.auc_scale == "auc" else
           "DeLong's variance with a Wald interval on the logit scale, back-transformed "
           "(better coverage in small cells than the AUC scale)")
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
    cluster = res.decisions.get("detection.cluster")
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
                   f"difference.")
    else:
        out.append("Each patient contributes one scan per model, so scans are treated as "
                   "independent.")
    if "multiplicity" in res.decisions:
        out.append("Multiplicity: " + res.decisions["multiplicity"])
    out.append("Missing data: a missing subgroup value is a level of its own (\"Missing\"), "
               "so every axis's levels add up to the evaluated scans; a value recorded as "
               "\"Unknown\" (race) is a recorded category, shown as a level and kept in the "
               "adjusted models, which are refitted without it (complete case) beside the "
               "main fit; tumour size and location "
               "of reference-negative scans read \"not applicable\" (the attribute does not "
               "exist), not missing. The adjusted models use the scans with every formula "
               "variable present (R's na.omit); the scans each fit left out, and why, are "
               "counted under the variance table.")
    if det.bins:
        out.append("Bins (left-closed intervals): " + md("; ".join(
            f"{b.column} \u2192 {b.name} ({', '.join(b.labels)})" for b in det.bins)) + ".")
    if det.n_boot:
        strata = f", stratified by {md(det.strata)}" if det.strata else ""
        out.append(f"Statistics without a closed-form interval use a cluster bootstrap "
                   f"(patients resampled with replacement{strata}; one index shared by all "
                   f"models and subgroups) with {det.n_boot} replicates and seed "
                   f"{det.seed}; {BOOT_NAMES[det.boot_ci]}.")
    if det.adjusted:
        a = det.adjusted
        methods = "; ".join(ADJ_NAMES[m].format(g=md(a["group"])) for m in a["methods"])
        out.append(f"Confounding-adjusted models of detection among reference positives: "
                   f"{md(a['formula'])}, fitted as {methods}. Likelihood-ratio tests compare "
                   f"the full model with the model without each block ("
                   + md("; ".join(f"{b}: {', '.join(t)}" for b, t in a["blocks"].items()))
                   + ")."
                   + _repeated_methods(study.results.decisions.get("adjusted.repeated_scans")))
        units = study.results.decisions.get("adjusted.units") or {}
        if units:
            out.append("Odds ratios of continuous terms are reported per a stated unit: "
                       + md("; ".join(f"{t} {u}" for t, u in units.items()))
                       + (" (per SD: the standard deviation of the variable, as the term "
                          "uses it, among the model's modelled rows)"
                          if any(u.startswith("per SD") for u in units.values()) else "")
                       + ".")
    out.append("Paired model comparisons on the same cases use the exact McNemar test and "
               "Newcombe's interval for differences of proportions, and DeLong's paired test "
               "for AUCs" + (" (their cluster-aware forms where a patient repeats; above)"
                             if study.results.decisions.get("detection.cluster") else "")
               + ".")
    return out


def _crs(study) -> list[str]:
    crs, ref = study.plan.crs, study.reference
    md = text.md
    runs = study.runs
    panel = list(ref.panel) if ref is not None else []
    ref_hash = ref.hash if ref is not None else ""
    ref_name = md(study.plan.reference.name) if study.plan.reference else "not given"
    out = [f"**Clinical Reliability Score.** The runs table ({md(study.plan.runs.name)}, "
           f"{len(runs)} runs) covers {runs['encoder'].nunique()} encoders on "
           f"{runs['dataset'].nunique()} datasets. Axes: discrimination (seed-mean AUROC, clean, "
           f"full labels), calibration (seed-mean ECE with 15 equal-width bins, clean, full "
           f"labels; lower is better; the encoder's one ECE, shown also in the calibration "
           f"section), label efficiency and robustness, averaged over datasets. Each axis is "
           f"normalized against the fixed reference panel ({md(text.human_list(panel))}; "
           f"reference file {ref_name}; panel hash {ref_hash[:16]}: the SHA-256 of the "
           f"panel's canonical content, recorded with every score in the CSV files, not of "
           f"the file's bytes, whose SHA-256 is in manifest.json), and "
           f"CRS = weighted dominance + similarity + worst axis."]
    from .crs import replicates_text

    scores = study.results["crs"]["scores"]
    ranks = study.results["crs"].get("rank_probabilities")
    out.append(f"Uncertainty, anchors held fixed: {replicates_text(scores, crs, ranks)}; "
               f"P(top k) with k = {crs.k}.")
    return out


def _calibration(study) -> list[str]:
    from .calibration import definitions

    return ["**Calibration.** ECE with 15 equal-width bins (an edge value in the lower bin), "
            "Brier score and negative log-likelihood; temperature scaling is fitted on the "
            "validation (calibration) split and evaluated on the test split.",
            # plain text (also the table notes), escaped here: a column name is user text
            *(text.md(d) for d in definitions(study, study.results["calibration"]["summary"]))]


def build(study) -> Section:
    plan = study.plan
    sec = Section(KEY, TITLE)
    sec.add(f"This appendix follows the analysis plan {text.md(plan.path.name)}, written "
            f"before the analysis. Plan SHA-256:", f"`{plan.sha256}`")
    if plan.prespecified:
        sec.add("Prespecified: " + " ".join(text.md(p) for p in plan.prespecified))
    if plan.exploratory:
        sec.add("Exploratory: " + " ".join(text.md(p) for p in plan.exploratory))
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


def _repeated_methods(rep: dict | None) -> str:
    """The methods sentence for a patient's repeated scans in the adjusted models (the
    analysis layer's ``adjusted.repeated_scans``)."""
    if not rep:
        return ""
    g = text.md(rep["group"])
    return (f" {text.count(rep['with_repeats'])} of the {text.count(rep['patients'])} "
            f"patients have several of the modelled scans; the GLMM's random intercept per "
            f"{g} treats them as independent given {g}, so inference is read from the GEE, "
            + ("whose sandwich is clustered on the " + g + " that nests each patient, and "
               "the adjusted-versus-crude comparison uses it." if rep["nested"] else
               "although some patients span several " + g + "s, so neither accounts for them."))
