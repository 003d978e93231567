"""clinrel statistics: pure functions, DataFrames in, tidy DataFrames out.

Import it as ``import stats`` (the distribution ``clinrel`` installs this top-level
package) or, unambiguously, as ``from clinrel import stats``.  Nothing here reads or
writes files (except the two readers that validate a user's table), prints, or rounds.

Public names are resolved lazily so that ``import stats`` stays fast and heavy optional
pieces load only when used.
"""
from __future__ import annotations

from importlib import import_module

__clinrel__ = True  # marker: proves this is clinrel's ``stats``, not another package

_EXPORTS: dict[str, str] = {
    # contracts
    "ContractError": "schema",
    "read_cases": "schema",
    "read_runs": "schema",
    "ESTIMATE_COLUMNS": "schema",
    "GLOSSARY": "schema",
    "as_generator": "_rng",
    # intervals and tests (issue 3)
    "proportion_ci": "intervals",
    "auc_ci": "intervals",
    "delong_test": "intervals",
    "newcombe_diff_ci": "intervals",
    "mcnemar_exact": "intervals",
    # detection
    "scan_level": "detection",
    "threshold_sweep": "detection",
    "confusion_counts": "detection",
    "subgroup_metrics": "subgroups",
    "subgroup_vs_rest": "subgroups",
    "failure_map": "subgroups",
    "add_bins": "subgroups",
    "describe": "describe",
    "cluster_bootstrap": "bootstrap",
    "compare_models": "compare",
    # adjusted models (issue 4)
    "fit_adjusted": "models",
    "likelihood_ratio_test": "models",
    "block_tests": "models",
    "fit_complete_case": "models",
    # calibration, CRS and ranking (issue 5)
    "ece": "calibration",
    "reliability_table": "calibration",
    "temperature_scale": "calibration",
    "crs_scores": "crs",
    "crs_axes": "crs",
    "read_reference": "crs",
    "crs_bootstrap": "crs_resample",
    "mce": "calibration",
    "brier": "calibration",
    "nll": "calibration",
    "ece_ci": "calibration",
    "calibration_repair": "calibration",
    "rank_agreement": "ranking",
    "ranking_stability": "ranking",
}

_SUBMODULES = {
    "schema", "intervals", "detection", "subgroups", "bootstrap", "compare", "models",
    "adjust", "calibration", "crs", "crs_resample", "ranking", "simulate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = import_module(f"{__name__}.{_EXPORTS[name]}")
        value = getattr(module, name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        module = import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'stats' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)
