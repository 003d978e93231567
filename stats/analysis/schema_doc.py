"""The plan reference: every key the plan schema accepts, documented.

:func:`schema_keys` walks the key tables of :mod:`stats.analysis.plan` (``TOP_KEYS``,
``DETECTION_KEYS``, ...) and of :mod:`stats.limits` and returns every dotted key path the
validator accepts; :data:`KEYS` documents each one (type, default, allowed values, example,
meaning). ``docs/make_plan_reference.py`` writes ``docs/plan.md`` from both, and
``tests/test_docs.py`` checks that the two agree key for key, so a key added to the schema
without a line here (or documented but no longer accepted) fails the tests.

Allowed values are read from the same tuples the validator uses (``CI_METHODS``,
``AUC_SCALES``, ...), never retyped.
"""
from __future__ import annotations

from dataclasses import dataclass

from stats import limits
from stats.analysis import plan as P

#: where each key table sits in a plan (``<column>``: a key the user chooses)
TABLES: dict[str, str] = {
    "": "TOP_KEYS", "inputs": "INPUT_KEYS", "detection": "DETECTION_KEYS",
    "detection.threshold": "THRESHOLD_KEYS", "detection.bins.<column>": "BIN_KEYS",
    "detection.bootstrap": "BOOT_KEYS", "detection.adjusted": "ADJ_KEYS",
    "detection.adjusted.blocks": "BLOCKS", "detection.failure_map": "FMAP_KEYS",
    "detection.precision": "PRECISION_KEYS", "metadata": "METADATA_KEYS",
    "crs": "CRS_KEYS", "crs.bootstrap": "CRS_BOOT_KEYS", "calibration": "CAL_KEYS",
    "calibration.bootstrap": "CAL_BOOT_KEYS", "privacy": "PRIVACY_KEYS",
}
#: keys whose children are named by the user (a column), not by the schema
USER_KEYED = {"detection.bins": "detection.bins.<column>",
              "detection.adjusted.levels": "detection.adjusted.levels.<column>",
              "detection.adjusted.units": "detection.adjusted.units.<variable>"}


def schema_keys() -> list[str]:
    """Every key path the plan validator accepts, in schema order."""
    out: list[str] = []

    def walk(prefix: str) -> None:
        for key in getattr(P, TABLES[prefix]):
            path = f"{prefix}.{key}" if prefix else key
            out.append(path)
            if path in TABLES:
                walk(path)
            elif path in USER_KEYED:
                child = USER_KEYED[path]
                out.append(child)
                if child in TABLES:
                    walk(child)
            elif path == "limits":
                out.extend(f"limits.{k}" for k in limits.CAPS)
            elif path == "roles":
                out.extend(f"roles.{k}" for k in P.ROLE_DEFAULTS)

    walk("")
    return out


#: the type column of the roles.* keys
ROLE_TYPE = "`prespecified` or `exploratory`"


@dataclass(frozen=True)
class Key:
    """One documented key: its type, default, allowed values, an example and its meaning."""

    type: str
    default: str
    meaning: str
    example: str = ""
    allowed: str = ""


def _one_of(values) -> str:
    return ", ".join(f"`{v}`" for v in values)


_AXES = "list of column names, or `[a, b]` lists for intersections"
_SEED = ("whole number 0 .. 2**63-1", "none (a fresh seed each run; the one drawn is "
                                      "recorded in the manifest)")

KEYS: dict[str, Key] = {
    "version": Key("whole number", "`1`", "Plan format version; this clinrel reads 1.", "1", "`1`"),
    "title": Key("text", "`Reliability appendix`", "Title of the report.",
                 '"Liver lesion detection: subgroup reliability"'),
    "inputs": Key("mapping", "required", "The input tables. Relative paths are read from the "
                  "plan file's folder."),
    "inputs.cases": Key("file path (.csv, .tsv, .parquet)", "none",
                        "The cases table (docs/contracts.md#cases); required by `detection`.",
                        "cases.csv"),
    "inputs.runs": Key("file path", "none", "The runs table (docs/contracts.md#runs); "
                       "required by `crs`.", "runs.parquet"),
    "inputs.reference": Key("file path (YAML)", "none",
                            "The CRS reference panel: `panel`, optional `anchors`, `weights`, "
                            "`version` (see clinrel/demo_data/reference.yaml); required by "
                            "`crs`.", "reference.yaml"),
    "inputs.metadata": Key("file path", "none", "The metadata evidence table "
                           "(docs/contracts.md#metadata-evidence); adds the extractor "
                           "agreement section.", "evidence.csv"),
    "inputs.probe_predictions": Key("file path", "none", "Per-case probe probabilities "
                                    "(docs/contracts.md#probe-predictions); adds the "
                                    "calibration section.", "probe_predictions.parquet"),
    "detection": Key("mapping", "none (no detection sections)",
                     "The detection half of the report (needs `inputs.cases`)."),
    "detection.threshold": Key("mapping", "`{criterion: youden}`",
                               "How scans become positive calls. Give exactly one of `value`, "
                               "`criterion` or `given`."),
    "detection.threshold.value": Key("finite number", "none",
                                     "Prespecified threshold: `pred = score >= value` "
                                     "(STARD 12a).", "50"),
    "detection.threshold.criterion": Key("text", "`youden` (when no `value`)",
                                         "Choose the threshold on `split == validation`, "
                                         "then analyse `split == test`.", "youden",
                                         _one_of(P.CRITERIA)),
    "detection.threshold.target": Key("number in (0, 1)", "required with "
                                      "`target_specificity`",
                                      "The specificity the chosen threshold must reach.",
                                      "0.9"),
    "detection.threshold.given": Key("true/false", "`false`",
                                     "Use the table's own `pred` column; no threshold.",
                                     "true"),
    "detection.ci": Key("text", "`wilson`", "Interval for sensitivity, specificity, PPV, NPV "
                        "and accuracy; `bootstrap` puts them on the cluster bootstrap (needs "
                        "`detection.bootstrap.n_boot`).", "wilson", _one_of(P.CI_METHODS)),
    "detection.auc_scale": Key("text", "`auto`", "DeLong AUC interval: `auto` puts it on "
                               "the AUC scale (as pROC) where scans are independent and on "
                               "the logit scale where a patient's scans are clustered "
                               "(Obuchowski's variance, t on C - 1 df); `auc` or `logit` "
                               "force one scale.", "auto", _one_of(P.AUC_SCALES)),
    "detection.compare_by": Key(_AXES, "`[]` (overall only)",
                                "Axes of the paired model comparisons besides overall.",
                                "[phase]"),
    "detection.exploratory_subgroups": Key(_AXES, "`[]`",
                                           "Axes analysed as exploratory: labelled so and "
                                           "kept out of the multiplicity family of "
                                           "`subgroups`.", "[scanner]"),
    "detection.cluster": Key("`auto`, a column name, or `none`", "`auto`",
                             "Cluster of the intervals and tests: `auto` uses `patient_id` "
                             "when a patient has several scans; `none`: scans independent.",
                             "auto"),
    "detection.conf_level": Key("number in (0, 1)", "`0.95`",
                                "Confidence level of every detection interval.", "0.95"),
    "detection.subgroups": Key(_AXES, "`[phase]`", "Subgroup axes of the metric tables, "
                               "forest plots and subgroup-vs-rest tests.",
                               "[phase, age_group, [age_group, phase]]"),
    "detection.bins": Key("mapping column -> bin", "`{}`",
                          "Cut numeric columns into categorical ones (left-closed "
                          "intervals, `[a, b)`).", "{age: {breaks: [0, 40, 60, 75, .inf]}}"),
    "detection.bins.<column>": Key("mapping", "", "One bin of the numeric column `<column>` "
                                   "(e.g. `age`, `tumor_size_mm`)."),
    "detection.bins.<column>.name": Key("column name", "`<column>_group`",
                                        "Name of the new column; not a column clinrel reads "
                                        "or writes (" + ", ".join(P.RESERVED_COLUMNS) + ").",
                                        "age_group"),
    "detection.bins.<column>.breaks": Key("list of 2+ strictly increasing numbers "
                                          "(`.inf` allowed)", "required",
                                          "Cut points.", "[0, 40, 60, 75, .inf]"),
    "detection.bins.<column>.labels": Key("list of texts, one per interval",
                                          "`a-b` per interval", "Level names, all different.",
                                          '["<40", "40-59", "60-74", "75+"]'),
    "detection.small_n": Key("whole number >= 1", "`10`",
                             "Cells whose denominator is below this are flagged `small_n`.",
                             "10"),
    "detection.bootstrap": Key("mapping", "none (no bootstrap)",
                               "The paired cluster bootstrap (F1 intervals, or every metric "
                               "with `ci: bootstrap`)."),
    "detection.bootstrap.n_boot": Key("whole number >= 2", "`0` (no bootstrap)",
                                      "Replicates.", "2000"),
    "detection.bootstrap.seed": Key(_SEED[0], _SEED[1], "Seed of the replicates.",
                                    "20261130"),
    "detection.bootstrap.strata": Key("column name", "none",
                                      "Resample patients within the levels of this column.",
                                      "site"),
    "detection.bootstrap.boot_ci": Key("text", "`percentile`",
                                       "Bootstrap interval (`wilson`: Wilson at the "
                                       "bootstrap's effective sample size, small cells).",
                                       "percentile", _one_of(P.BOOT_INTERVALS)),
    "detection.adjusted": Key("mapping", "none (no adjusted models)",
                              "Confounding-adjusted models of detection."),
    "detection.adjusted.formula": Key("formula `outcome ~ terms` (clinrel's grammar: "
                                      "columns, `C()`, `np.log()`, `:`, `*`)", "required",
                                      "The model; `detected` among positives, `correct` among "
                                      "negatives.",
                                      '"detected ~ phase + age_group + np.log(tumor_size_mm)"'),
    "detection.adjusted.methods": Key("list of texts", "`[glmm]`",
                                      "`glmm`: random site intercept (Laplace / AGQ, as "
                                      "lme4); `gee`: exchangeable, robust SE (as geepack); "
                                      "`fixed`: site fixed effect, cluster-robust SE.",
                                      "[glmm, gee]", _one_of(P.ADJUST_METHODS)),
    "detection.adjusted.group": Key("column name", "`site`",
                                    "The grouping column (random intercept, GEE cluster, "
                                    "fixed effect).", "site"),
    "detection.adjusted.blocks": Key("mapping block -> list of terms", "`{}`",
                                     "Covariate blocks, each tested by a likelihood-ratio "
                                     "test.", "{protocol: [phase]}", _one_of(P.BLOCKS)),
    "detection.adjusted.blocks.site": Key("list of model terms", "none",
                                          "Terms of the site block.", "[scanner]"),
    "detection.adjusted.blocks.protocol": Key("list of model terms", "none",
                                              "Terms of the protocol block.", "[phase]"),
    "detection.adjusted.blocks.demographics": Key("list of model terms", "none",
                                                  "Terms of the demographics block.",
                                                  "[age_group, sex, race]"),
    "detection.adjusted.blocks.tumour": Key("list of model terms", "none",
                                            "Terms of the tumour block.",
                                            '["np.log(tumor_size_mm)"]'),
    "detection.adjusted.population": Key("text", "`positives`",
                                         "`positives`: sensitivity (detected among label 1); "
                                         "`negatives`: specificity (correct among label 0).",
                                         "positives", _one_of(P.POPULATIONS)),
    "detection.adjusted.nagq": Key("whole number >= 1", "`1` (Laplace)",
                                   "Adaptive Gauss-Hermite points of the GLMM.", "1"),
    "detection.adjusted.levels": Key("mapping column -> list of levels", "`{}`",
                                     "Factor levels, reference level first.",
                                     "{phase: [venous, arterial, delayed, non_contrast]}"),
    "detection.adjusted.levels.<column>": Key("list of levels, reference first", "",
                                              "Every level of `<column>`, reference first.",
                                              "[venous, arterial, delayed, non_contrast]"),
    "detection.adjusted.model": Key("text: a model name, or `pooled`", "none (one fit per "
                                    "model)", "Fit one model's rows only, or all models in "
                                    "one fit with `model` as a term.", "pooled"),
    "detection.adjusted.bias_reduced": Key("true/false", "none (Mancl-DeRouen below 20 "
                                           "groups)", "GEE small-sample correction.",
                                           "true"),
    "detection.adjusted.means": Key("list of factors", "`[]`",
                                    "Factors whose adjusted sensitivities are reported.",
                                    "[phase]"),
    "detection.adjusted.means_kind": Key("text", "`standardized`",
                                         "Adjusted sensitivities (and the adjusted-vs-crude "
                                         "figure): `standardized`, g-computation over the "
                                         "observed cohort (like with like against the crude "
                                         "values); `emmeans`, equal-weight reference grid (as "
                                         "R's emmeans).", "standardized",
                                         _one_of(P.MEANS_KINDS)),
    "detection.adjusted.units": Key("mapping variable -> number or `sd`", "`{}` (per 1 unit; "
                                    "log terms per doubling)",
                                    "The unit of each continuous term's odds ratio (a numeric "
                                    "column, or `np.log`/`log2`/`log10` of one, as a main "
                                    "effect); stated in the table's label and `unit` column.",
                                    "{age: 10, tumor_size_mm: sd}"),
    "detection.adjusted.units.<variable>": Key(
        "positive number, or `sd`", "", "A number k: odds ratio per k units of the variable "
        "(a log term: per k-fold change, k != 1; 2 is per doubling). `sd`: per one standard "
        "deviation (pandas, ddof 1) of the variable as the term uses it (its log for a log "
        "term) among the model's rows in the modelled population, the same unit for every "
        "fit of that model; the label states its value.", "10"),
    "detection.failure_map": Key("mapping", "none", "Sensitivity over two axes (a heat "
                                 "map)."),
    "detection.failure_map.rows": Key("column name", "required", "Rows of the map.",
                                      "age_group"),
    "detection.failure_map.cols": Key("column name", "required", "Columns of the map.",
                                      "phase"),
    "detection.failure_map.pooled": Key("true/false", "`true`", "Show partially pooled "
                                        "(GLMM) cell estimates beside the crude ones "
                                        "(exploratory).", "true"),
    "detection.precision": Key("mapping", "", "The precision section: each prespecified "
                               "cell's achieved Wilson half-width and the scans it needs."),
    "detection.precision.target_half_width": Key("number in (0, 0.5)", "`0.05`",
                                                 "Target half-width of a cell's interval.",
                                                 "0.05"),
    "detection.precision.icc": Key("number in [0, 1)", "none (from the data)",
                                   "Intra-patient correlation of repeated scans (design "
                                   "effect).", "0.2"),
    "metadata": Key("mapping", "none", "How metadata extraction error reaches the subgroup "
                    "intervals (needs `inputs.metadata` for `estimate`)."),
    "metadata.label_error": Key("`estimate`, or a file path", "none (naive intervals only)",
                                "`estimate`: a label-error table estimated from the "
                                "evidence and its reviews; a path: a given table (`field, "
                                "recorded_value, true_value, probability`). Adds error-aware "
                                "subgroup intervals (multiple imputation) beside the naive "
                                "ones.", "estimate"),
    "metadata.prefer": Key("list of extractor names", "`[]`", "Extractor order of the "
                           "recorded value where no review exists.",
                           "[dicom_rules, text_rules]"),
    "metadata.n_imputations": Key("whole number >= 2", "`50`", "Imputations of the true "
                                  "subgroup.", "50"),
    "metadata.per_patient": Key("`auto`, or a list of field names", "`auto`",
                                "Fields recorded once per patient (race, sex): each is "
                                "imputed once per patient, and a patient whose scans differ "
                                "in one is an error naming them. `auto`: the fields on which "
                                "every patient's scans agree (a note names a field that "
                                "differs within only a few patients).", "[race, sex]"),
    "metadata.seed": Key(_SEED[0], _SEED[1], "Seed of the imputations.", "3"),
    "crs": Key("mapping", "none (no CRS sections)", "The CRS half of the report (needs "
               "`inputs.runs` and `inputs.reference`)."),
    "crs.bootstrap": Key("mapping", "", "The paired-seed bootstrap of CRS and ranks."),
    "crs.bootstrap.n_boot": Key("whole number >= 2, or 0 for none", f"`{P.Crs.n_boot}`",
                                "Replicates.", "10000"),
    "crs.bootstrap.seed": Key(_SEED[0], _SEED[1], "Seed of the replicates.", "7"),
    "crs.k": Key("whole number >= 1", f"`{P.Crs.k}`", "The k of P(rank <= k).", "3"),
    "crs.n_weights": Key("whole number >= 0", f"`{P.Crs.n_weights}`",
                         "Dirichlet(1,1,1) weight draws of the stability analysis (0 skips "
                         "it).", "1000"),
    "crs.conf_level": Key("number in (0, 1)", f"`{P.Crs.conf_level}`",
                          "Confidence level of the CRS intervals.", "0.95"),
    "calibration": Key("mapping", "", "The calibration section (needs "
                       "`inputs.probe_predictions`)."),
    "calibration.bootstrap": Key("mapping", "", "Bootstrap of the ECE intervals: the "
                                 "detection models' case bootstrap, and the encoders' "
                                 "paired-seed bootstrap when the plan has no `crs` block with "
                                 "a seed (with one, the encoders' ECE intervals use the CRS "
                                 "bootstrap's replicates, as the CRS calibration axis)."),
    "calibration.bootstrap.n_boot": Key("whole number >= 2", f"`{P.Calibration.n_boot}`",
                                        "Replicates.", "1000"),
    "calibration.bootstrap.seed": Key(_SEED[0], _SEED[1], "Seed of the replicates.", "11"),
    "privacy": Key("mapping", "", "Identifier handling."),
    "privacy.allow_identifiers": Key("true/false", "`false`",
                                     "Accept columns that look like direct identifiers or "
                                     "free text (name, mrn, birth date, text, ...).",
                                     "false"),
    "privacy.pseudonymize_ids": Key("true/false", "`false`", "Replace case and patient ids "
                                    "by salted SHA-256 pseudonyms in every output.", "true"),
    "privacy.salt": Key("text", "required with `pseudonymize_ids`", "The secret salt (kept "
                        "out of the report).", '"a long random text"'),
    "prespecified": Key("text or list of texts", "none", "What was fixed before the data "
                        "were seen (printed in the methods; STARD 12a, 17).",
                        '["Threshold 50 voxels; Wilson intervals"]'),
    "exploratory": Key("text or list of texts", "none", "What was not prespecified.",
                       '["Threshold sweep"]'),
    "roles": Key("mapping", "the defaults below", "Whether each analysis is prespecified or "
                 "exploratory; every table and figure caption says which. Subgroup axes take "
                 "theirs from `detection.subgroups` / `detection.exploratory_subgroups`, the "
                 "failure map from its axis. Exploratory tests are not adjusted for "
                 "multiplicity.", "{threshold_sweep: exploratory, adjusted: prespecified}"),
    "roles.overall": Key(ROLE_TYPE, "`prespecified`",
        "The overall accuracy table.", "prespecified"),
    "roles.precision": Key(ROLE_TYPE, "`prespecified`",
        "The achieved-precision table of the prespecified cells.", "prespecified"),
    "roles.sensitivity_collapse": Key(ROLE_TYPE, "`prespecified`",
        "The sensitivity-collapse table (subgroup-versus-rest tests).", "prespecified"),
    "roles.threshold_sweep": Key(ROLE_TYPE, "`exploratory`",
        "The threshold sweep (figure, table, ranking stability).", "exploratory"),
    "roles.pooled": Key(ROLE_TYPE, "`exploratory`",
        "The partially pooled failure-map cells.", "exploratory"),
    "roles.adjusted": Key(ROLE_TYPE, "`prespecified`",
        "The adjusted models (odds ratios, block tests, variance, adjusted "
        "versus crude); exploratory: block tests not Holm-adjusted.", "prespecified"),
    "roles.comparisons": Key(ROLE_TYPE, "`prespecified`",
        "The paired model comparisons.", "prespecified"),
    "roles.calibration": Key(ROLE_TYPE, "`prespecified`",
        "The calibration tables and reliability diagrams.", "prespecified"),
    "roles.crs": Key(ROLE_TYPE, "`prespecified`",
        "The CRS axes, scores, rank probabilities, dominance and differences.", "prespecified"),
    "roles.crs_stability": Key(ROLE_TYPE, "`prespecified`",
        "The CRS stability analyses (leave-one-out panels, random weights, "
        "ranking by AUROC).", "prespecified"),
    "roles.metadata": Key(ROLE_TYPE, "`prespecified`",
        "The metadata coverage, agreement, site test and review tables.", "prespecified"),
    "roles.label_error": Key(ROLE_TYPE, "`prespecified`",
        "The label-error table and the error-aware intervals.", "prespecified"),
    "scheduler": Key("Dask scheduler address", "none (this process)",
                     "Run bootstrap blocks and model fits on a Dask cluster; results are "
                     "identical.", '"tcp://10.0.0.5:8786"'),
    "limits": Key("mapping", "`{}`", "Resource caps: a step estimated above them is refused "
                  "before it runs."),
    "limits.max_memory_gb": Key("positive number", "80% of physical memory "
                                f"(env {limits.ENV['max_memory_gb']})",
                                "Memory cap of one step.", "64"),
    "limits.max_rows": Key("positive whole number", f"`{limits.DEFAULT_MAX_ROWS:,}` "
                           f"(env {limits.ENV['max_rows']})", "Rows of one input table.",
                           "100000000"),
    "limits.max_hours": Key("positive number", f"`{limits.DEFAULT_MAX_HOURS:g}` "
                            f"(env {limits.ENV['max_hours']})",
                            "Estimated single-core hours of one step.", "48"),
    "limits.max_file_gb": Key("positive number", f"`{limits.DEFAULT_MAX_FILE_GB:g}` "
                              f"(env {limits.ENV['max_file_gb']})",
                              "Size in GB of one input table file, checked before it is "
                              "opened.", "8"),
    "limits.max_columns": Key("positive whole number", f"`{limits.DEFAULT_MAX_COLUMNS:,}` "
                              f"(env {limits.ENV['max_columns']})",
                              "Columns of one input table, counted on the CSV header line "
                              "or the parquet schema before the table is parsed.", "20000"),
}
