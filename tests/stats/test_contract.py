"""One test guards the tidy estimate contract over every public ``stats`` function
(the broom ``check_tidy_output`` habit). A public name must either be exercised here or
be listed in ``EXEMPT`` with the reason it does not return a tidy table; adding an export
without doing either fails ``test_every_public_name_is_covered``."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats import simulate
from stats.schema import check_tidy

EXEMPT = {
    "ContractError": "exception class",
    "ESTIMATE_COLUMNS": "constant",
    "GLOSSARY": "constant",
    "METRICS": "constant (the count metrics)",
    "PROPORTIONS": "constant (the count metrics that are proportions)",
    "as_generator": "returns a numpy Generator",
    "read_cases": "validated input table (input contract, tested in test_schema)",
    "read_runs": "validated input table (input contract, tested in test_schema)",
    "read_lesions": "validated input table (input contract, tested in test_localization)",
    "read_reference": "returns a Reference object (validated input)",
    "add_bins": "returns the cases table with binned columns added (input contract)",
    "scan_level": "returns the cases table with pred/threshold added (input contract)",
    "confusion_counts": "count table (tp, fp, tn, fn) feeding the estimators",
    "proportion_ci": "(low, high) arrays, as DESIGN.md specifies",
    "newcombe_diff_ci": "(estimate, low, high) arrays, vectorized primitive",
    "mcnemar_exact": "p-value array, vectorized primitive",
    "ece": "a scalar (float) summary; tidy form via reliability_table / ece_ci",
    "mce": "a scalar (float) summary",
    "brier": "a scalar (float) summary",
    "nll": "a scalar (float) summary",
    "fit_complete_case": "returns a Fit (complete-case refit); checked like fit_adjusted",
    "fit_adjusted": "returns a Fit; its .tidy(), .random_effects(), .marginal_means() are checked",
    "temperature_scale": "returns a TemperatureFit; its .tidy() is checked",
    "crs_bootstrap": "returns a result; .scores(), .rank_probabilities(), .differences() are checked",
    "read_probe_predictions": "validated input table (input contract, tested in test_safety_values)",
    "FormulaError": "exception class",
    "ParsedFormula": "parsed formula (grammar), tested in test_safety_formula",
    "parse_formula": "returns a ParsedFormula, tested in test_safety_formula",
    "misclassification_from_review": "returns a label-error table (an input of "
                                     "subgroup_metrics), tested in test_label_error",
    "extractor_agreement": "agreement per field x extractor pair (metadata provenance table, "
                           "not a model estimate); tested in test_agreement",
}


@pytest.fixture(scope="module")
def cases():
    sim = simulate.benchx_cohort(600, n_models=2, n_sites=6, seed=21)
    return stats.scan_level(stats.read_cases(sim.data), threshold=50)


@pytest.fixture(scope="module")
def runs():
    return stats.read_runs(simulate.crs_runs(n_encoders=6, n_datasets=2, n_seeds=3, seed=21).data)


@pytest.fixture(scope="module")
def reference(runs):
    return {"panel": sorted(runs["encoder"].unique())[:3], "version": "t1"}


def _lesions(cases):
    """A lesions table for ``cases``: one reference lesion per positive case (every model),
    one prediction per case called positive, matched when the case is a positive."""
    ref = cases[cases["label"] == 1][["case_id", "model"]].assign(
        lesion_id="r1", kind="reference", volume_mm3=500.0)
    pred = cases[cases["pred"] == 1][["case_id", "model", "label", "score"]].assign(
        lesion_id="p1", kind="prediction")
    pred["matched"] = pred["label"].map({1: "r1", 0: None})
    pred["dice"] = pred["label"].map({1: 0.6, 0: float("nan")})
    pred["score"] = pred["score"] / pred["score"].max()
    return pd.concat([ref, pred.drop(columns="label")], ignore_index=True)


def _outputs(cases, runs, reference):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    p = np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, 300), 0.01, 0.99)
    m = cases[cases["model"] == "model_A"]
    m2 = cases[cases["model"] == "model_B"]
    fit = stats.fit_adjusted(cases, "detected ~ phase + np.log(tumor_size_mm)", method="glmm",
                             model="model_A")
    fit_small = stats.fit_adjusted(cases, "detected ~ np.log(tumor_size_mm)", method="glmm",
                                   model="model_A")
    boot = stats.crs_bootstrap(runs, reference, n_boot=50, seed=1)
    ts = stats.temperature_scale(p[:150], y[:150])
    return {
        "auc_ci": stats.auc_ci(m["label"], m["score"]),
        "delong_test": stats.delong_test(m["label"], m["score"], m2["score"].to_numpy()),
        "subgroup_metrics": stats.subgroup_metrics(cases, by=["phase", ("age_group", "phase")]),
        "subgroup_vs_rest": stats.subgroup_vs_rest(cases, by=["phase"]),
        "failure_map": stats.failure_map(cases),
        "describe": stats.describe(cases.drop_duplicates("case_id")),
        "threshold_sweep": stats.threshold_sweep(cases, [10, 50, 100]),
        "cluster_bootstrap": stats.cluster_bootstrap(cases, by=["phase"], n_boot=50, seed=1),
        "compare_models": stats.compare_models(cases, by=["phase"]),
        "fit_adjusted.tidy": fit.tidy(),
        "fit_adjusted.random_effects": fit.random_effects(),
        "fit_adjusted.marginal_means": fit.marginal_means("phase"),
        "likelihood_ratio_test": stats.likelihood_ratio_test(fit, fit_small),
        "block_tests": stats.block_tests(cases[cases["model"] == "model_A"],
                                         "detected ~ phase + np.log(tumor_size_mm)",
                                         {"protocol": ["phase"], "tumour": ["np.log(tumor_size_mm)"]}),
        "reliability_table": stats.reliability_table(y, p),
        "ece_ci": stats.ece_ci(y, p, n_boot=50, seed=1),
        "temperature_scale.tidy": ts.tidy(),
        "calibration_repair": stats.calibration_repair(runs),
        "crs_axes": stats.crs_axes(runs),
        "crs_scores": stats.crs_scores(runs, reference),
        "crs_bootstrap.scores": boot.scores(),
        "crs_bootstrap.rank_probabilities": boot.rank_probabilities(3),
        "crs_bootstrap.differences": boot.differences(),
        "crs_bootstrap.rank_persistence": stats.crs_bootstrap(
            pd.concat([runs, runs.assign(regime="adapted")]), reference, n_boot=20,
            seed=1).rank_persistence(),
        "crs_bootstrap.domain_scores": stats.crs_bootstrap(runs, reference, n_boot=20, seed=1,
                                                           by="dataset").domain_scores(),
        "specialization": stats.specialization(runs, {"enc_01": "dataset_A"}, n_boot=20, seed=1),
        "layer_comparison": stats.layer_comparison(
            pd.concat([runs.assign(layer="last"), runs.assign(layer="mid")]), n_boot=20, seed=1),
        "confidence_loss": stats.confidence_loss(runs, n_boot=20, seed=1),
        "shift_drop": stats.shift_drop(runs, n_boot=20, seed=1),
        "label_efficiency_curves": stats.label_efficiency_curves(runs, n_boot=20, seed=1),
        "label_crossovers": stats.label_crossovers(runs, n_boot=20, seed=1),
        "probe_metrics": stats.probe_metrics(pd.DataFrame({
            "encoder": "e", "dataset": "d", "label_fraction": 1.0, "condition": "clean",
            "severity": 0, "seed": 0, "case_id": [f"c{i}" for i in range(300)], "label": y,
            "prob": p})),
        "rank_agreement": stats.rank_agreement(pd.Series([3.0, 2, 1], index=list("abc")),
                                               pd.Series([1.0, 2, 3], index=list("abc"))),
        "ranking_stability": stats.ranking_stability(runs, reference, n_weights=20, seed=1),
        "heterogeneity_test": stats.heterogeneity_test(cases, by="phase"),
        "pooled_subgroup_metrics": stats.pooled_subgroup_metrics(cases, ["phase",
                                                                         ("age_group", "phase")]),
        "precision_table": stats.precision_table(cases, by=["phase"]),
        "roc_curve": stats.roc_curve(cases, by=["phase"], n_boot=20, seed=1),
        "operating_point": stats.operating_point(cases, specificity=[0.9], by=["phase"],
                                                 n_boot=20, seed=1),
        "partial_auc": stats.partial_auc(cases, by=["phase"], n_boot=20, seed=1),
        "delong_test_unpaired": stats.delong_test_unpaired(m["label"][:300], m["score"][:300],
                                                           m["label"][300:], m["score"][300:]),
        "likelihood_ratios": stats.likelihood_ratios(cases, by=["phase"]),
        "performance_goals": stats.performance_goals(
            cases, [{"metric": "sensitivity", "goal": 0.6},
                    {"metric": "specificity", "margin": 0.05}], by=["phase"]),
        "site_meta_analysis": stats.site_meta_analysis(cases, by="phase"),
        "variance_partition": stats.variance_partition(fit),
        "froc": stats.froc(_lesions(cases), cases, by=["phase"], n_boot=20, seed=1),
        "lesion_metrics": stats.lesion_metrics(_lesions(cases), cases, by=["phase"]),
        "decompose_gap": stats.decompose_gap(m, "phase", ("arterial", "venous"),
                                             covariates=["age_group"], method="fixed",
                                             n_boot=20, seed=1),
        "transport": stats.transport(m, {"phase": {lv: 1 / m["phase"].nunique()
                                                   for lv in m["phase"].unique()}}),
        "compare_naive": stats.compare_naive(
            cases, ["phase"], pd.DataFrame({"field": "phase", "recorded_value": ["venous"] * 2,
                                            "true_value": ["venous", "arterial"],
                                            "probability": [0.9, 0.1]}), seed=1),
    }


@pytest.fixture(scope="module")
def outputs(cases, runs, reference):
    return _outputs(cases, runs, reference)


def test_every_output_meets_the_tidy_contract(outputs):
    for name, df in outputs.items():
        try:
            check_tidy(df)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
        assert len(df) > 0, name


def test_every_public_name_is_covered(outputs):
    covered = {k.split(".")[0] for k in outputs}
    missing = [n for n in stats.__all__ if n not in covered and n not in EXEMPT]
    assert not missing, f"public names neither checked nor exempt: {missing}"


def test_dtypes_do_not_depend_on_the_input(cases):
    """An empty-cell input and a full input give identical column dtypes."""
    full = stats.subgroup_metrics(cases, by=["phase"])
    tiny = stats.subgroup_metrics(cases.iloc[:3], by=["phase"])
    assert list(full.columns) == list(tiny.columns)
    assert (full.dtypes == tiny.dtypes).all()
