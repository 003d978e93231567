"""The public API refuses bad arguments with a ContractError that names the function, the
argument, the offending values and the fix (stats/_validate.py): examples
each of which answered like numpy before (a p-value, an interval, a KeyError, a
reshape error, an empty table, a table at a NaN threshold), and the empty inputs whose
empty result is meaningful. The property over every public function is
tests/stats/test_api_validation.py."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import stats
from stats import simulate
from stats.schema import ContractError, check_tidy


@pytest.fixture(scope="module")
def cases():
    sim = simulate.benchx_cohort(150, n_models=2, n_sites=3, seed=4)
    return stats.scan_level(stats.read_cases(sim.data), threshold=50)


@pytest.fixture(scope="module")
def empty(cases):
    return cases.iloc[:0]


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize("b, shown", [(-1, "-1"), (1.5, "1.5"), (math.nan, "nan"),
                                      (math.inf, "inf")])
def test_mcnemar_refuses_a_count_that_is_not_one(b, shown):
    """Was p = 0.0 for b = -1 and NaN for 1.5 or NaN."""
    with pytest.raises(ContractError, match=rf"^mcnemar_exact: b must hold counts \(whole "
                                            rf"numbers >= 0\); index 0 has {shown}; pass"):
        stats.mcnemar_exact(b, 3)


@pytest.mark.parametrize("x", [math.nan, 2.5, -1])
def test_proportion_ci_refuses_a_nan_or_fractional_count(x):
    """Was an interval (NaN for NaN, (0.17, 0.83) for 2.5)."""
    with pytest.raises(ContractError, match=r"^proportion_ci: successes must hold counts"):
        stats.proportion_ci(x, 5)


def test_count_messages_name_the_index_and_value():
    with pytest.raises(ContractError) as e:
        stats.proportion_ci([1, 2, 3, 4], [5, 5, np.nan, 5])
    assert str(e.value).startswith("proportion_ci: n must hold counts (whole numbers >= 0); "
                                   "index 2 has nan;")
    with pytest.raises(ContractError, match=r"successes must not exceed n; index 1 has "
                                            r"successes=6, n=5"):
        stats.proportion_ci([1, 6], [5, 5])
    with pytest.raises(ContractError, match=r"must have the same shape.*successes \(2,\), "
                                            r"n \(3,\)"):
        stats.proportion_ci([1, 2], [5, 5, 5])
    with pytest.raises(ContractError, match=r"paired_counts\[1\] \(b\) must hold counts"):
        stats.newcombe_diff_ci(None, None, None, None, paired_counts=(3, -2, 1, 4))


def test_effective_counts_are_taken_when_said_so():
    """Fractional (effective) counts need effective=True and give the engine's numbers."""
    from stats.intervals import newcombe_limits, proportion_limits

    with pytest.raises(ContractError):
        stats.proportion_ci(2 / 3, 1)
    lo, hi = stats.proportion_ci(2 / 3, 1, effective=True)
    assert (lo, hi) == proportion_limits(2 / 3, 1)
    with pytest.raises(ContractError, match="effective counts"):
        stats.proportion_ci(math.nan, 1, effective=True)
    k = (2.5, 1.5, 0.5, 3.0)
    np.testing.assert_array_equal(
        stats.newcombe_diff_ci(None, None, None, None, paired_counts=k, effective=True),
        newcombe_limits(None, None, None, None, paired_counts=k))


def test_vectorized_primitives_map_no_cells_to_no_cells():
    """Zero cells in, zero out: the empty result is meaningful for the primitives."""
    lo, hi = stats.proportion_ci([], [])
    assert lo.shape == hi.shape == (0,)
    assert stats.mcnemar_exact([], []).shape == (0,)
    assert all(a.shape == (0,) for a in stats.newcombe_diff_ci([], [], [], []))


# --------------------------------------------------------------------------- empty tables


def test_failure_map_on_an_empty_frame_says_so(empty):
    """Was KeyError: 0."""
    with pytest.raises(ContractError, match=r"^failure_map: cases has no rows, so there is "
                                            r"nothing to estimate; pass at least one row"):
        stats.failure_map(empty)


def test_subgroup_vs_rest_on_an_empty_frame_says_so(empty):
    """Was ValueError: need at least one array to stack."""
    with pytest.raises(ContractError, match=r"^subgroup_vs_rest: cases has no rows"):
        stats.subgroup_vs_rest(empty, by=["phase"])


def test_fit_adjusted_on_an_empty_frame_says_so(empty):
    """Was a Fit whose .tidy() raised KeyError: 'effect'."""
    with pytest.raises(ContractError, match=r"^fit_adjusted: cases has no rows"):
        stats.fit_adjusted(empty, "detected ~ phase").tidy()


def test_fit_adjusted_without_the_population_says_so(cases):
    negatives = cases[cases["label"] == 0]
    with pytest.raises(ContractError, match=r"cases holds no positives \(label == 1\)"):
        stats.fit_adjusted(negatives, "detected ~ phase", method="fixed", group=None)


@pytest.mark.parametrize("fn", ["subgroup_metrics", "cluster_bootstrap"])
def test_empty_frames_no_longer_give_an_empty_table(empty, fn):
    """Was an empty table returned silently: no metric exists without a case (every
    table has its overall row)."""
    kw = {"by": ["phase"]} | ({"n_boot": 10, "seed": 1} if fn == "cluster_bootstrap" else {})
    with pytest.raises(ContractError, match=rf"^{fn}: cases has no rows"):
        getattr(stats, fn)(empty, **kw)


def test_ece_of_nothing_says_so():
    """Was ValueError: cannot reshape array of size 0."""
    with pytest.raises(ContractError, match=r"^ece: label has no cases, so there is nothing "
                                            r"to estimate"):
        stats.ece([], [])
    for fn in (stats.mce, stats.brier, stats.nll, stats.reliability_table):
        with pytest.raises(ContractError, match="has no cases"):
            fn([], [])


def test_row_wise_transforms_and_evidence_tables_keep_empty_inputs_empty(empty):
    """Where the empty result is meaningful it comes back with its columns."""
    calls = stats.scan_level(empty.drop(columns=["pred", "threshold", "threshold_source"]),
                             threshold=5)
    assert len(calls) == 0 and {"pred", "threshold", "threshold_source"} <= set(calls.columns)
    binned = stats.add_bins(empty, {"age": {"name": "ag", "breaks": [0, 50, 130]}})
    assert len(binned) == 0 and "ag" in binned.columns
    from stats.agreement import AGREEMENT_COLUMNS

    ev = pd.DataFrame(columns=["case_id", "field", "value", "extractor"])
    agree = stats.extractor_agreement(ev)
    assert len(agree) == 0 and list(agree.columns) == list(AGREEMENT_COLUMNS)
    table = stats.misclassification_from_review(ev)
    assert len(table) == 0 and {"field", "recorded_value", "true_value",
                                "probability"} <= set(table.columns)


# --------------------------------------------------------------------------- thresholds


def test_threshold_sweep_refuses_a_nan_threshold(cases):
    """Was a table of 21 rows computed at NaN (every case called negative)."""
    with pytest.raises(ContractError, match=r"^threshold_sweep: thresholds must be finite "
                                            r"numbers; index 0 has nan"):
        stats.threshold_sweep(cases, [np.nan])
    with pytest.raises(ContractError, match=r"index 1 has inf"):
        stats.threshold_sweep(cases, [10, np.inf])
    with pytest.raises(ContractError, match=r"chosen must be a finite number; got nan"):
        stats.threshold_sweep(cases, [10, 50], chosen=np.nan)
    with pytest.raises(ContractError, match=r"thresholds has no thresholds"):
        stats.threshold_sweep(cases, [])


def test_nan_thresholds_and_breaks_elsewhere(cases):
    with pytest.raises(ContractError, match=r"fit_adjusted: threshold must be a finite number"):
        stats.fit_adjusted(cases, "detected ~ phase", method="fixed", threshold=np.nan)
    with pytest.raises(ContractError, match=r"breaks'\] must be numbers, not NaN; index 1"):
        stats.add_bins(cases, {"age": {"name": "ag", "breaks": [0, np.nan, 130]}})


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize("level", [0, 1, 95, np.nan])
def test_conf_level_outside_the_unit_interval_is_refused_everywhere(cases, level):
    y = np.array([0, 1, 0, 1, 1])
    p = np.array([0.2, 0.7, 0.4, 0.9, 0.6])
    calls = [lambda: stats.proportion_ci(1, 2, conf_level=level),
             lambda: stats.auc_ci(y, p, conf_level=level),
             lambda: stats.ece_ci(y, p, n_boot=10, seed=1, conf_level=level),
             lambda: stats.reliability_table(y, p, conf_level=level),
             lambda: stats.subgroup_metrics(cases, by=["phase"], conf_level=level),
             lambda: stats.cluster_bootstrap(cases, n_boot=5, seed=1, conf_level=level),
             lambda: stats.pooled_subgroup_metrics(cases, "phase", conf_level=level)]
    for f in calls:
        with pytest.raises(ContractError, match=r"conf_level must lie strictly between 0 and "
                                                r"1; got "):
            f()


@pytest.mark.parametrize("n_boot", [0, 2.5, np.nan, True])
def test_replicate_counts_must_be_whole_numbers(cases, n_boot):
    """Was ValueError (0, nan), IndexError or a silent int() (2.5)."""
    with pytest.raises(ContractError, match=r"cluster_bootstrap: n_boot must be a whole "
                                            r"number >= 1"):
        stats.cluster_bootstrap(cases, by=["phase"], n_boot=n_boot, seed=1)
    with pytest.raises(ContractError, match=r"ece_ci: n_boot must be a whole number >= 2"):
        stats.ece_ci([0, 1], [0.2, 0.7], n_boot=n_boot)


def test_mismatched_lengths_name_every_length():
    with pytest.raises(ContractError, match=r"^auc_ci: label, score must have the same length "
                                            r"\(one value per observation\); got lengths "
                                            r"label 3, score 2"):
        stats.auc_ci([0, 1, 1], [0.1, 0.2])
    with pytest.raises(ContractError, match=r"label 3, score_a 3, score_b 2"):
        stats.delong_test([0, 1, 1], [0.1, 0.2, 0.3], [0.1, 0.2])
    with pytest.raises(ContractError, match=r"scores_cal 2, label_cal 1"):
        stats.temperature_scale([0.2, 0.3], [1])


def test_a_table_that_is_not_a_frame_is_refused():
    with pytest.raises(ContractError, match=r"^subgroup_metrics: cases must be a pandas "
                                            r"DataFrame; got list"):
        stats.subgroup_metrics([1, 2], by=["phase"])


def test_valid_calls_still_give_tidy_tables(cases):
    """The checks refuse only what is wrong (the contract test covers every output)."""
    check_tidy(stats.threshold_sweep(cases, [10, 50]))
    check_tidy(stats.subgroup_metrics(cases, by=["phase"], n_boot=0))
    assert stats.ece([0, 1, 1], [0.2, 0.8, 0.6], n_bins=np.int64(5)) >= 0
    assert stats.ece([0, 1], [0.2, 0.8], n_bins=5.0) == stats.ece([0, 1], [0.2, 0.8], n_bins=5)
