"""clinrel statistics: pure functions, DataFrames in, tidy DataFrames out.

Import it as ``import stats`` (the distribution ``clinrel`` installs this top-level
package) or, unambiguously, as ``from clinrel import stats``.  Nothing here reads or
writes files (except the two readers that validate a user's table), prints, or rounds.

Every public name is imported explicitly below and listed in ``__all__`` (IDEs and type
checkers see them). No public function shares its name with a submodule, so
``import stats.<submodule>`` never replaces a function (tests/test_exports.py).
Heavy optional pieces (dask, threadpoolctl) are imported inside the functions that use
them; plotting, table rendering and torch are never imported by ``stats``.
"""
from __future__ import annotations

__clinrel__ = True  # marker: proves this is clinrel's ``stats``, not another package

# contracts
from ._rng import as_generator
from .schema import (ESTIMATE_COLUMNS, GLOSSARY, ContractError, read_cases,
                     read_probe_predictions, read_runs)
from .formula import FormulaError, ParsedFormula, parse_formula

# intervals and tests
from .intervals import auc_ci, delong_test, mcnemar_exact, newcombe_diff_ci, proportion_ci

# detection
from .detection import METRICS, PROPORTIONS, confusion_counts, scan_level, threshold_sweep
from .subgroups import add_bins, failure_map, subgroup_metrics, subgroup_vs_rest
from .cohort_table import describe
from .bootstrap import cluster_bootstrap
from .compare import compare_models
from .heterogeneity import heterogeneity_test
from .agreement import extractor_agreement
from .pooled import pooled_subgroup_metrics
from .meta_analysis import site_meta_analysis
from .precision import precision_table
from .label_error import compare_naive, misclassification_from_review

# adjusted models
from .models import block_tests, fit_adjusted, fit_complete_case, likelihood_ratio_test

# calibration, CRS and ranking
from .calibration import (brier, calibration_repair, ece, ece_ci, mce, nll, reliability_table,
                          temperature_scale)
from .crs import crs_axes, crs_scores, read_reference
from .crs_resample import crs_bootstrap
from .ranking import rank_agreement, ranking_stability

# submodules reachable as attributes (``stats.simulate.benchx_cohort``, ``stats.adjust``)
from . import adjust, simulate  # noqa: E402  (isort: after the names they do not shadow)

__all__ = [
    # contracts
    "ContractError", "ESTIMATE_COLUMNS", "GLOSSARY", "as_generator", "read_cases",
    "read_probe_predictions", "read_runs", "FormulaError", "ParsedFormula", "parse_formula",
    # intervals and tests
    "auc_ci", "delong_test", "mcnemar_exact", "newcombe_diff_ci", "proportion_ci",
    # detection
    "METRICS", "PROPORTIONS", "add_bins", "cluster_bootstrap", "compare_models",
    "confusion_counts", "describe", "extractor_agreement", "failure_map", "heterogeneity_test",
    "compare_naive", "misclassification_from_review",
    "pooled_subgroup_metrics", "precision_table", "scan_level", "subgroup_metrics",
    "subgroup_vs_rest", "threshold_sweep",
    "site_meta_analysis",
    # adjusted models
    "block_tests", "fit_adjusted", "fit_complete_case", "likelihood_ratio_test",
    # calibration, CRS and ranking
    "brier", "calibration_repair", "crs_axes", "crs_bootstrap", "crs_scores", "ece", "ece_ci",
    "mce", "nll", "rank_agreement", "ranking_stability", "read_reference", "reliability_table",
    "temperature_scale",
]
