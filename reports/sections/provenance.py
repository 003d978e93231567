"""Metadata provenance: how each metadata field was obtained and how far it can be trusted.

Per field (age, sex, race, phase, ...): coverage (cases with a value / cases), the
mentions set aside by their clinical context, the sources and their share of values
with a verbatim evidence span, agreement between extractors (Wilson CI) and Cohen's kappa
(Fleiss-Cohen-Everitt CI), agreement by site with a test of equal agreement, the review
queue and its outcomes, and, when the plan asks (``metadata.label_error``), naive beside
error-aware subgroup intervals. Every number comes from ``analysis.metadata``;
evidence text itself is never shown (it may identify).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .. import text
from ..figures import ReportFigure, points_ci
from ..tables import ReportTable
from . import Section, SkipSection

KEY = "provenance"
TITLE = "Metadata provenance"
HALF = "any"


def applies(study) -> bool:
    return study.metadata is not None


def _pair(df: pd.DataFrame) -> pd.Series:
    return df["extractor_a"].astype(str) + " vs " + df["extractor_b"].astype(str)


def _pct(x) -> str:
    shown = text.num(100 * x, 1)
    return shown if shown == text.DASH else shown + "%"


def _conf(study) -> int:
    det = study.plan.detection
    return round(100 * (det.conf_level if det is not None else 0.95))


def coverage_table(study) -> ReportTable:
    cov = study.results["metadata_coverage"]
    disp = pd.DataFrame({
        "field": cov["field"].astype(str), "extractor": cov["extractor"].astype(str),
        "cases": [text.frac(k, n) for k, n in zip(cov["cases_with_value"], cov["cases"])],
        "coverage": text.ci_vec(cov, 3, est="coverage")})
    return ReportTable(
        name="metadata_coverage", caption=f"Coverage per field: cases with a value / cases, "
        f"[{_conf(study)}% Wilson CI"
        + (", cluster-aware over patients" if "n_clusters" in cov else "")
        + "], per source and for any source.", data=cov, display=disp,
        group_col="field", labels={"extractor": "Source", "cases": "Cases with a value",
                                   "coverage": "Coverage [CI]"},
        notes=("Source 'review': values set by the reviewer after a disagreement.",))


def sources_table(study) -> ReportTable:
    counts = study.results["metadata_sources"]
    disp = pd.DataFrame({"field": counts["field"].astype(str),
                         "extractor": counts["extractor"].astype(str),
                         "cases": counts["cases"].map(text.count),
                         "with_span": [text.pct(a, b) for a, b in
                                      zip(counts["with_evidence"], counts["values"])],
                         "verbatim": [text.pct(a, b) for a, b in
                                      zip(counts["verbatim"], counts["values"])],
                         "distinct": counts["distinct"].map(text.count)})
    return ReportTable(
        name="metadata_sources", caption="Metadata values per field and extractor, and the "
        "share carrying an evidence span and a verbatim one (its length equals end - start).",
        data=counts, display=disp, group_col="field",
        labels={"extractor": "Extractor", "cases": "Cases", "with_span": "With evidence",
                "verbatim": "Verbatim span", "distinct": "Distinct values"},
        notes=("Extractor 'review': values set by a human reviewer after a disagreement. "
               "A value without a span was derived (no contrast agent in a header: "
               "non-contrast; the phase from the bolus timing, whose times are identifiers "
               "the table leaves out) or written new by the reviewer. Evidence spans are kept in the "
               "evidence table, not printed here.",))


def context_table(study) -> ReportTable | None:
    """Mentions set aside by their clinical context (never values)."""
    ctx = study.results["metadata_context"]
    if not len(ctx):
        return None
    disp = pd.DataFrame({"field": ctx["field"].astype(str), "extractor": ctx["extractor"].astype(str),
                         "context": ctx["context"].astype(str),
                         "mentions": ctx["mentions"].map(text.count),
                         "cases": ctx["cases"].map(text.count)})
    return ReportTable(
        name="metadata_context", caption="Mentions in the report texts that were not used as "
        "values, by their clinical context (negated, about a prior study, hypothetical or "
        "recommended, about a relative).", data=ctx, display=disp, group_col="field",
        labels={"extractor": "Extractor", "context": "Context", "mentions": "Mentions",
                "cases": "Cases"},
        notes=("Context read by medspaCy's ConText (NegEx/ConText rules) and its Sectionizer: "
               "a mention is a value only when it is asserted, about the current study and "
               "about the patient. A negated mention of IV contrast (\u201cno IV contrast was "
               "administered\u201d) is the value non-contrast; a negated phase, a prior study's "
               "phase, a recommended examination and a relative's age are kept here, in the "
               "evidence table, and never become the value.",))


def _race_text(study) -> str:
    """The race levels the evidence was put on (decision ``metadata.race_levels``), when
    race is a field."""
    md = study.results["metadata_sources"]
    if "race" not in set(md["field"].astype(str)):
        return ""
    levels = study.results.decisions.metadata.race_levels or {}
    moved = {k: v for k, v in levels.items() if k != v}
    return (" Race values are the extractors' (phrasings such as African American or AA read "
            "as Black, Caucasian as White) put on the study's levels"
            + (": " + text.md(", ".join(f"{k} \u2192 {v}" for k, v in sorted(moved.items())))
               if moved else "") + " (plan key metadata.race_levels).")


def agreement_table(study) -> ReportTable | None:
    ag = study.results["metadata_agreement"]
    if not len(ag):
        return None
    disp = pd.DataFrame({
        "field": ag["field"].astype(str), "pair": _pair(ag),
        "both": ag["n_both"].map(text.count),
        "agree": [text.ci(a, lo, hi, 3) + f" ({text.frac(k, n)})" for a, lo, hi, k, n in
                  zip(ag["agreement"], ag["conf_low"], ag["conf_high"], ag["n_agree"],
                      ag["n_both"])],
        "kappa": text.ci_vec(ag, 3, est="kappa", low="kappa_conf_low", high="kappa_conf_high"),
        "disagree": ag["n_disagree"].map(text.count)})
    if "n_clusters" in ag:      # kappa's interval rests on the patients (its t df: C - 1)
        disp.insert(3, "patients", ag["n_clusters"].map(text.count))
    return ReportTable(
        name="metadata_agreement", caption=f"Agreement between extractors per field: share "
        f"agreeing among the cases with both values [{_conf(study)}% Wilson CI"
        + (", cluster-aware over patients" if "n_clusters" in ag else "") + "] and Cohen's "
        f"kappa [{_conf(study)}% CI].", data=ag, display=disp, group_col="field",
        labels={"pair": "Extractors", "both": "Cases with both", "patients": "Patients",
                "agree": "Agreement [CI]",
                "kappa": "Cohen's kappa [CI]", "disagree": "Disagreements"},
        notes=("Kappa treats values as nominal categories; its interval is the Wald interval, "
               "clipped to [-1, 1], with " + _kappa_se(ag) + ". With perfect agreement that "
               "standard error is 0, and a zero-width interval says nothing of precision: "
               "kappa's interval is then not estimable (\u2014) and the agreement share's "
               "interval gives the precision; kappa is undefined (\u2014) with fewer than two "
               "cases or one category.",))


def _kappa_se(ag: pd.DataFrame) -> str:
    """The note's words for the kappa standard error of the rows' ``kappa_method``."""
    from analysis.metadata import KAPPA_CLUSTER_METHOD

    fce = ("the large-sample standard error of Fleiss, Cohen & Everitt (1969), cases as "
           "independent")
    clustered = ag["kappa_method"].eq(KAPPA_CLUSTER_METHOD)
    if not clustered.any():
        return fce
    lin = ("the linearization (delta-method) standard error over patients, as repeated "
           "scans of one patient are not independent, with a t quantile on the number of "
           "patients minus one degrees of freedom")
    return lin if clustered.all() else f"{lin} (rows without repeated patients: {fce})"


def site_figure(study) -> ReportFigure | None:
    by = study.results["metadata_agreement_by_site"]
    if not len(by):
        return None
    d = by.assign(pair=_pair(by), field=by["field"].astype(str), site=by["site"].astype(str))
    d = d[d["estimate"].notna()].reset_index(drop=True)
    return ReportFigure(
        name="metadata_agreement_by_site",
        caption=f"Agreement between extractors by site, per field, with {_conf(study)}% "
        "Wilson intervals" + (" (cluster-aware: at the effective size over the site's "
                              "patients)" if "n_clusters" in by else "") + ".", alt="Agreement between metadata extractors by site and field.",
        plot=points_ci(d, x="site", y="estimate", color="pair", facet="field",
                       ylab="Agreement", xlab="Site"),
        data=d, width=7.5, height=3.6)


def site_test_table(study) -> ReportTable | None:
    t = study.results["metadata_site_test"]
    if not len(t):
        return None
    rs = (t["method"] == "rao-scott-f").to_numpy()
    den = t["df_denominator"] if "df_denominator" in t else pd.Series(np.nan, index=t.index)
    mixed = rs.any() and not rs.all()
    disp = pd.DataFrame({"field": t["field"].astype(str), "pair": _pair(t),
                         "x2": [(("F " if r else "X\u00b2 ") if mixed else "") + text.num(x)
                                if pd.notna(x) else text.num(x)
                                for x, r in zip(t["statistic"], rs)],
                         "df": [f"{text.num(d, 1)}, {text.num(e, 0)}" if r else text.count(d)
                                for d, e, r in zip(t["df"], den, rs)],
                         "p": t["p_value"].map(text.pvalue),
                         "n": t["n"].map(text.count), "flag": t["flag"].fillna("").astype(str)})
    rao = ("Rao-Scott second-order corrected chi-square with an F reference (R's "
           "survey::svychisq default; statistic F, numerator and denominator df): cases "
           "clustered within patients")
    pearson = ("Pearson's chi-square without continuity correction on the sites x (agree, "
               "disagree) table (R's chisq.test(correct = FALSE)); cases taken as independent")
    how = (f"F rows: {rao}; X\u00b2 rows (every case of the pair from its own patient): "
           f"{pearson}" if mixed else rao if rs.any() else pearson)
    return ReportTable(
        name="metadata_site_test", caption="Test of equal agreement across sites per field "
        "and extractor pair (institution-style bias).", data=t, display=disp,
        group_col="field", labels={"pair": "Extractors",
                                   "x2": ("Statistic" if mixed else "F" if rs.any()
                                          else "X\u00b2"), "df": "df",
                                   "p": "p", "n": "Cases", "flag": "Flag"},
        notes=(how + ". not_estimable: every case agrees (or none does); small_expected: an "
               "expected count below 5.",))


def review_table(study) -> ReportTable | None:
    rv = study.results["metadata_review"]
    if not len(rv):
        return None
    disp = pd.DataFrame({
        "field": rv["field"].astype(str),
        "pair": rv["extractor_a"].astype(str) + " (A) vs " + rv["extractor_b"].astype(str) + " (B)",
        "queued": [f"{text.count(q)} ({text.count(d)} + {text.count(o)})"
                   for q, d, o in zip(rv["queued"], rv["differ"], rv["one_sided"])],
        "kept_a": rv["kept_a"].map(text.count), "kept_b": rv["kept_b"].map(text.count),
        "new": rv["new_value"].map(text.count), "open": rv["not_reviewed"].map(text.count)})
    return ReportTable(
        name="metadata_review", caption="Values sent to review per field and extractor pair, "
        "and the reviewer's decisions.", data=rv, display=disp, group_col="field",
        labels={"pair": "Extractors", "queued": "Sent to review (differ + one only)",
                "kept_a": "Kept A", "kept_b": "Kept B", "new": "New value",
                "open": "Not reviewed"},
        notes=("A case is sent to review when both extractors ran on it (gave a value for "
               "some field) and their values differ, or only one gave this field.",))


# --------------------------------------------------------------------------- label error

def _wants_label_error(study) -> bool:
    opts = getattr(study.plan, "metadata_options", None)
    return opts is not None and opts.label_error is not None and study.cases is not None \
        and study.plan.detection is not None


def label_error_table(study) -> ReportTable:
    t = study.results["label_error_table"]
    right = t[t["recorded_value"].astype(str) == t["true_value"].astype(str)].reset_index(drop=True)
    cols = {"field": right["field"].astype(str), "recorded": right["recorded_value"].astype(str),
            "correct": [text.num(p, 4) for p in right["probability"]]}
    if "n_recorded" in right:
        cols["n"] = right["n_recorded"].map(text.count)
        cols["reviewed"] = right["n_reviewed"].map(text.count)
    return ReportTable(
        name="label_error_table", caption="Probability that a recorded value is the true "
        "one, per field and recorded value (the diagonal of the label-error table).",
        data=t, display=pd.DataFrame(cols), group_col="field",
        labels={"recorded": "Recorded value", "correct": "P(true = recorded)",
                "n": "Cases recorded", "reviewed": "Of them reviewed"},
        notes=("The whole table (every recorded x true value) is in "
               "tables/label_error_table.csv.",))


def label_error_compare(study) -> ReportTable | None:
    m = study.results["label_error_metrics"]
    if not len(m):
        return None
    m = m[(m["estimand"] == "sensitivity") & ~m["group_var"].astype(str).str.contains(":")]
    cluster = study.results.decisions.detection.cluster
    keys = ["model", "group_var", "group_level"]
    naive = m[m["kind"] == "naive"].reset_index(drop=True)
    aware = naive[keys].merge(m[m["kind"] == "error_aware"], on=keys, how="left")
    disp = pd.DataFrame({
        "axis": naive["group_var"].astype(str), "model": naive["model"].astype(str),
        "level": naive["group_level"].astype(str), "pos": naive["n_pos"].map(text.count),
        "naive": text.ci_vec(naive), "aware": text.ci_vec(aware),
        "fmi": [text.num(f, 3) for f in aware["fraction_missing_info"]]})
    return ReportTable(
        name="label_error_sensitivity", caption=f"Sensitivity per subgroup built on an "
        f"extracted field: naive and error-aware {_conf(study)}% intervals side by side.",
        data=pd.concat([naive, aware], ignore_index=True), display=disp, group_col="axis",
        labels={"model": "Model", "level": "Level", "pos": "Positives",
                "naive": "Naive [CI]", "aware": "Error-aware [CI]",
                "fmi": "Fraction of missing information"},
        notes=("Error-aware: multiple imputation of each scan's true level from P(true | "
               "recorded) and an outcome model, pooled by Rubin's rules with the widened "
               "Wilson interval (stats.label_error)" + _per_patient_text(study)
               + (f"; each imputation's variance is the cluster-aware one over its {cluster} "
                  f"clusters, as for the naive intervals (methods mi-wilson-cluster and "
                  f"wilson-cluster)" if cluster else " (method mi-wilson)")
               + ". An error-aware interval can be a little narrower than the naive one: where "
               "the imputations move scans into a level, its mean denominator exceeds the "
               "recorded count, and with little missing information that outweighs the "
               "between-imputation variance. Specificity and the intersections are in "
               "results/label_error_metrics.csv.",))


def label_error_text(study) -> str:
    opts = study.plan.metadata_options
    t = study.results["label_error_table"]
    m = study.results["label_error_metrics"]
    fields = sorted(set(t["field"].astype(str)))
    cluster = study.results.decisions.detection.cluster
    axes = sorted(set(m["group_var"].astype(str))) if len(m) else []
    right = t[t["recorded_value"].astype(str) == t["true_value"].astype(str)]
    worst = right.loc[right["probability"].idxmin()] if len(right) else None
    if opts.label_error == "estimate":
        source = ("estimated from the evidence table by Dawid & Skene's (1979) latent-class "
                  "model, one confusion matrix per extractor, with the review outcomes taken "
                  "as the truth")
    else:
        source = f"given by the table {text.md(Path(opts.label_error).name)}"
    out = (f"**Metadata error in the subgroup intervals.** How often a recorded value is wrong "
           f"(@tbl-label-error-table) was {source}. The subgroup axes built on the fields "
           f"{text.md(text.human_list(fields))} ({text.md(text.human_list(axes))}) get "
           f"error-aware intervals: multiple imputation of each scan's true level from "
           f"P(true | recorded) times an outcome model ({text.count(opts.n_imputations)} "
           f"imputations, seed {text.md(str(study.plan.seed_for('label_error_imputation')))}), pooled by "
           f"Rubin's rules with the "
           f"Barnard-Rubin degrees of freedom (Rubin 1987; Cole, Chu & Greenland 2006)"
           + (f"; the variance within each imputation is the cluster-aware one (scans "
              f"clustered within {text.md(cluster)}, Korn & Graubard's effective size)"
              if cluster else "") + ". "
           f"@tbl-label-error-sensitivity sets them beside the naive intervals. Axes from "
           f"fields no extractor read keep their naive intervals.")
    if worst is not None:
        out += (f" The smallest estimated probability that a recorded value is right is "
                f"{text.num(worst['probability'], 4)} ({text.md(str(worst['field']))} "
                f"{text.md(str(worst['recorded_value']))}).")
    return out


def build(study) -> Section:
    md = study.metadata
    if md is None:
        raise SkipSection("the plan names no inputs.metadata (metadata evidence table)")
    t_cov, t_src, t_agree = coverage_table(study), sources_table(study), agreement_table(study)
    fig_site, t_site, t_review = site_figure(study), site_test_table(study), review_table(study)
    n_fields = study.results["metadata_sources"]["field"].nunique()
    cov = study.results["metadata_coverage"]
    any_cov = cov[cov["extractor"] == "any source"]
    sec = Section(KEY, TITLE)
    lead = (f"The metadata evidence table ({text.md(study.plan.metadata.name)}) holds "
            f"{len(md)} values for {n_fields} fields. @tbl-metadata-coverage gives the share "
            f"of cases with a value per field")
    if len(any_cov):
        lead += (f" (any source: {text.md(', '.join(f'{f} {_pct(c)}' for f, c in zip(any_cov['field'], any_cov['coverage'])))})")
    lead += "; @tbl-metadata-sources the sources and their evidence spans." + _race_text(study)
    sec.add(lead, t_cov, t_src)
    t_ctx = context_table(study)
    if t_ctx is not None:
        sec.add("@tbl-metadata-context counts the mentions set aside by their clinical "
                "context: they stay in the evidence table with their label and are never a "
                "value.", t_ctx)
    if t_agree is not None:
        sec.add("@tbl-metadata-agreement compares the extractors on the cases where both gave "
                "a value" + (" and @fig-metadata-agreement-by-site does so per site, with "
                             "@tbl-metadata-site-test testing whether agreement differs "
                             "between sites (a reporting style one extractor reads worse "
                             "shows as a site effect)" if fig_site is not None else "") + ".",
                t_agree, fig_site, t_site)
    if t_review is not None:
        sec.add("@tbl-metadata-review counts the values sent to review and what the reviewer "
                "decided.", t_review)
    if _wants_label_error(study):
        sec.add(label_error_text(study), label_error_table(study), label_error_compare(study))
    return sec


def _per_patient_text(study) -> str:
    """The fields the imputation drew once per patient (decision
    ``metadata.label_error_per_patient``), for the label-error table note."""
    fields = study.results.decisions.metadata.label_error_per_patient or []
    if not fields:
        return ""
    table = study.results["label_error_table"]
    others = sorted(set(table["field"].astype(str)) - set(fields)) if len(table) else []
    return ("; " + text.human_list(f.replace("_", " ") for f in fields)
            + (" is" if len(fields) == 1 else " are")
            + " recorded once per patient"
            + (" (declared in the plan)" if str(study.results.decisions.get(
                "metadata.per_patient_rule", "")).startswith("declared") else "")
            + " and drawn once per patient, from all of the "
            "patient's scans (a patient is never split between levels)"
            + (", " + text.human_list(f.replace("_", " ") for f in others) + " scan by scan"
               if others else ""))
