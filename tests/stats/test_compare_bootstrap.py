"""stats.compare_models' paired cluster-bootstrap rows (PPV, NPV, F1 differences) and the
best-versus-worst subgroup gap, against a plain recomputation from resampled rows."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats import simulate
from stats._quantile import percentile_interval
from stats._rng import spawn
from stats.bootstrap import draw_indices
from stats.detection import case_matrix
from stats.operating import boot_p
from stats.schema import ContractError

B = 40


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    d = stats.read_cases(simulate.benchx_cohort(500, n_models=2, n_sites=4, seed=8).data)
    return stats.scan_level(d, threshold=50)


def _rows_metric(df: pd.DataFrame, metric: str) -> float:
    tp = ((df.pred == 1) & (df.label == 1)).sum()
    fp = ((df.pred == 1) & (df.label == 0)).sum()
    fn = ((df.pred == 0) & (df.label == 1)).sum()
    tn = ((df.pred == 0) & (df.label == 0)).sum()
    num, den = {"ppv": (tp, tp + fp), "npv": (tn, tn + fn), "f1": (2 * tp, 2 * tp + fp + fn),
                "sensitivity": (tp, tp + fn)}[metric]
    return num / den if den else np.nan


def _replicates(cases, metric, cell):
    """Per replicate, the metric of each model on the resampled rows (patients drawn with
    the engine's own draws: one block, one chunk)."""
    cm = case_matrix(cases, ["phase"])
    idx = draw_indices(spawn(5, 1)[0], np.zeros(int(cm.patient.max()) + 1, np.int64), B)
    pid = pd.Series(cm.patient, index=cm.case_id)
    out = np.full((B, 2), np.nan)
    for b in range(B):                              # a plain loop: the reference
        mult = np.bincount(idx[b], minlength=len(pid.unique()))
        for j, m in enumerate(cm.models):
            d = cases[cases.model == m]
            if cell != "overall":
                d = d[d.phase == cell]
            w = mult[pid.loc[d.case_id].to_numpy()]
            out[b, j] = _rows_metric(d.loc[d.index.repeat(w)], metric)
    return out


@pytest.mark.parametrize("metric", ["ppv", "npv", "f1"])
def test_bootstrap_differences_equal_resampled_rows(cases, metric):
    cmp = stats.compare_models(cases, by=["phase"], metrics=(metric,), n_boot=B, seed=5)
    for cell in ("overall", "arterial"):
        row = cmp[(cmp.estimand == f"{metric}_difference") & (cmp.group_level == cell)].iloc[0]
        reps = _replicates(cases, metric, cell)
        d = reps[:, 0] - reps[:, 1]
        lo, hi = percentile_interval(d[:, None], 0.95)
        full = [_rows_metric(cases[(cases.model == m) & ((cases.phase == cell) | (cell == "overall"))],
                             metric) for m in ("model_A", "model_B")]
        assert abs(row.estimate - (full[0] - full[1])) < 1e-12
        assert abs(row.conf_low - lo[0]) < 1e-12 and abs(row.conf_high - hi[0]) < 1e-12
        assert abs(row.p_value - boot_p(d[:, None])[0]) < 1e-12
        assert row.method == "bootstrap-percentile"


def test_gap_is_best_minus_worst_with_a_paired_interval(cases):
    cmp = stats.compare_models(cases, by=["phase"], metrics=("sensitivity",), n_boot=B, seed=5,
                               gaps=True)
    gap = cmp[cmp.estimand == "sensitivity_gap"]
    assert len(gap) == 2 and (gap.group_var == "phase").all()
    for _, row in gap.iterrows():
        d = cases[(cases.model == row.model) & (cases.label == 1)]
        by = d.groupby("phase", observed=True)["pred"].mean()
        assert abs(row.estimate - (by.max() - by.min())) < 1e-12
        assert row.level_best == by.idxmax() and row.level_worst == by.idxmin()
        assert row.conf_low <= row.estimate <= row.conf_high or row.conf_low <= row.conf_high
    # each replicate's gap is recomputed (whichever levels are then best and worst)
    reps = np.stack([_replicates(cases, "sensitivity", ph) for ph in
                     sorted(cases.phase.unique())], axis=2)          # B x models x levels
    g = np.nanmax(reps, axis=2) - np.nanmin(reps, axis=2)
    lo, hi = percentile_interval(g, 0.95)
    assert np.allclose(gap.conf_low.to_numpy(), lo, atol=1e-12)
    assert np.allclose(gap.conf_high.to_numpy(), hi, atol=1e-12)


def test_gap_leaves_out_missing_levels():
    d = stats.read_cases(simulate.benchx_cohort(300, n_models=1, n_sites=4, seed=2).data)
    d.loc[d.index[:40], "phase"] = np.nan               # a "Missing" level
    d = stats.scan_level(d, threshold=50)
    gap = stats.compare_models(d, by=["phase"], metrics=("sensitivity",), n_boot=20, seed=1,
                               gaps=True)
    assert "Missing" not in set(gap.level_best) | set(gap.level_worst)


def test_bootstrap_metrics_need_replicates(cases):
    with pytest.raises(ContractError, match="n_boot"):
        stats.compare_models(cases, metrics=("ppv",))
    with pytest.raises(ContractError, match="needs subgroup axes"):
        stats.compare_models(cases, metrics=("sensitivity",), n_boot=10, gaps=True)
    with pytest.raises(ContractError, match="at least two models"):
        stats.compare_models(cases[cases.model == "model_A"])


def test_default_rows_unchanged(cases):
    """The closed-form rows do not move when bootstrap rows are added beside them."""
    a = stats.compare_models(cases, by=["phase"])
    b = stats.compare_models(cases, by=["phase"], metrics=("sensitivity", "specificity", "auc",
                                                           "ppv"), n_boot=10, seed=1)
    b = b[b.estimand != "ppv_difference"].reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b[a.columns])
