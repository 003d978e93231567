"""Property tests (hypothesis) of the detection statistics and the shared internals.

* level counts sum to the overall counts (``subgroup_metrics``, ``confusion_counts``),
  for single axes and intersections, also with missing axis values (their "Missing"
  level; issue 15 item 3);
* sensitivity is non-increasing and specificity non-decreasing in the threshold, and
  the sweep agrees with ``scan_level`` + ``subgroup_metrics`` at the same threshold;
* AUC(-score) = 1 - AUC, with the DeLong SE unchanged and the interval mirrored;
* identical models: zero paired difference in every cluster-bootstrap replicate, zero
  differences in ``compare_models`` and a zero paired DeLong difference;
* the percentile helper equals ``np.nanquantile`` to the bit.

Inputs that do not apply are skipped with ``assume`` (never ``return``), so hypothesis
counts them as rejected, not passed. The whole file runs in about 10-20 s on 2 busy cores.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import stats
from stats import bootstrap as bs
from stats._quantile import column_quantiles, percentile_interval
from stats.detection import case_matrix

#: the profile of this file: enough examples to find count and ordering slips, fast
PROFILE = settings(max_examples=30, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

COUNTS = ["n", "n_pos", "n_neg"]


@st.composite
def cohorts(draw, *, missing: bool = False, models: int = 2, identical: bool = False):
    """A small paired cases table: ``models`` models scoring the same cases, integer scores
    (ties), patients with one to three scans, two subgroup axes (``phase``, ``sex``).
    ``missing``: the ``phase`` column has at least one missing value."""
    n = draw(st.integers(4, 40))
    label = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    patient = np.array(draw(st.lists(st.integers(0, max(1, n // 2)), min_size=n, max_size=n)))
    phase = draw(st.lists(st.sampled_from(["arterial", "venous", "native"]), min_size=n, max_size=n))
    sex = draw(st.lists(st.sampled_from(["F", "M"]), min_size=n, max_size=n))
    phase = pd.Series(phase, dtype=object)
    if missing:
        gaps = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=max(1, n // 3)))
        phase.iloc[sorted(set(gaps))] = np.nan
    frames = []
    first = None
    for m in range(models):
        score = (first if identical and first is not None
                 else np.array(draw(st.lists(st.integers(0, 8), min_size=n, max_size=n)), float))
        first = score if first is None else first
        frames.append(pd.DataFrame({
            "case_id": [f"c{i}" for i in range(n)], "model": f"m{m}", "label": label,
            "score": score, "patient_id": [f"p{p}" for p in patient], "site": "s1",
            "phase": phase.to_numpy(), "sex": sex}))
    return pd.concat(frames, ignore_index=True)


def _threshold(draw_value: int) -> float:
    return float(draw_value) - 0.5 if draw_value % 2 else float(draw_value)


def _sums_match_overall(table: pd.DataFrame, keys: list[str], columns: list[str]) -> None:
    """Per ``keys`` group and per axis (group_var), level sums equal the overall row."""
    overall = table[table["group_var"] == "overall"].set_index(keys)[columns]
    levels = table[table["group_var"] != "overall"]
    assert len(levels), "no subgroup rows"
    sums = levels.groupby([*keys, "group_var"], sort=False)[columns].sum()
    for (*key, axis), row in sums.iterrows():
        want = overall.loc[tuple(key) if len(key) > 1 else key[0]]
        np.testing.assert_array_equal(row.to_numpy(float), want.to_numpy(float),
                                      err_msg=f"{axis} levels do not sum to overall for {key}")


def _check_level_sums(cases: pd.DataFrame, threshold: float) -> None:
    called = stats.scan_level(cases, threshold=threshold)
    by = ["phase", "sex", ("phase", "sex")]
    metrics = stats.subgroup_metrics(called, by=by, metrics=["sensitivity", "specificity", "ppv"])
    _sums_match_overall(metrics, ["estimand", "model"], COUNTS)
    counts = stats.confusion_counts(called, by=by)
    _sums_match_overall(counts, ["model"], [*COUNTS, "tp", "fp", "tn", "fn"])


@PROFILE
@given(cases=cohorts(), t=st.integers(0, 9))
def test_level_counts_sum_to_the_overall(cases, t):
    _check_level_sums(cases, _threshold(t))


@PROFILE
@given(cases=cohorts(missing=True), t=st.integers(0, 9))
def test_level_counts_sum_to_the_overall_with_missing_axis_values(cases, t):
    """Rows whose axis value is missing form the "Missing" level of the axis (and of each
    intersection that uses it), so the levels still sum to the overall."""
    _check_level_sums(cases, _threshold(t))
    levels = stats.confusion_counts(cases.assign(pred=0), by=["phase"])["group_level"]
    assert "Missing" in set(levels)


@PROFILE
@given(cases=cohorts(), thresholds=st.lists(st.integers(0, 9), min_size=2, max_size=6, unique=True),
       pick=st.integers(0, 5))
def test_sensitivity_non_increasing_in_the_threshold(cases, thresholds, pick):
    assume(cases["label"].nunique() == 2)
    thr = sorted(_threshold(t) for t in thresholds)
    sweep = stats.threshold_sweep(cases, thr, metrics=["sensitivity", "specificity"])
    sweep = sweep[sweep["estimand"] != "kendall_tau"].sort_values(["model", "threshold"])
    for (model, estimand), g in sweep.groupby(["model", "estimand"]):
        steps = np.diff(g["estimate"].to_numpy())
        if estimand == "sensitivity":
            assert (steps <= 0).all(), (model, g["estimate"].tolist())
        else:
            assert (steps >= 0).all(), (model, g["estimate"].tolist())
    # the sweep at one threshold is the scan-level call at that threshold
    t = thr[pick % len(thr)]
    direct = stats.subgroup_metrics(stats.scan_level(cases, threshold=t), by=[],
                                    metrics=["sensitivity", "specificity"])
    at_t = sweep[sweep["threshold"] == t].set_index(["model", "estimand"])["estimate"]
    for _, row in direct.iterrows():
        assert at_t[(row["model"], row["estimand"])] == row["estimate"]


@PROFILE
@given(label=st.lists(st.integers(0, 1), min_size=3, max_size=60),
       data=st.data(), scale=st.sampled_from(["auc", "logit"]))
def test_auc_of_the_negated_score_is_one_minus_auc(label, data, scale):
    y = np.array(label)
    assume(0 < y.sum() < len(y))
    s = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=len(y), max_size=len(y))), float)
    a = stats.auc_ci(y, s, auc_scale=scale).iloc[0]
    b = stats.auc_ci(y, -s, auc_scale=scale).iloc[0]
    assert b["estimate"] == pytest.approx(1 - a["estimate"], abs=1e-12)
    assert b["std_error"] == pytest.approx(a["std_error"], abs=1e-12, nan_ok=True)
    if np.isfinite(a["conf_low"]) and np.isfinite(b["conf_high"]):
        assert b["conf_low"] == pytest.approx(1 - a["conf_high"], abs=1e-9)
        assert b["conf_high"] == pytest.approx(1 - a["conf_low"], abs=1e-9)


@PROFILE
@given(cases=cohorts(identical=True), t=st.integers(0, 9), seed=st.integers(0, 2**32 - 1))
def test_identical_models_differ_by_zero_in_every_bootstrap_replicate(cases, t, seed):
    called = stats.scan_level(cases, threshold=_threshold(t))
    # every cluster-bootstrap replicate: model m0 and m1 get the same value (paired draws)
    cm = case_matrix(called, ["phase"])
    bc = bs.boot_counts(cm)
    R = bs.replicate_counts(bc, 64, seed=seed)
    reps = bs.metric_arrays(bc.unpack(R), bs.BOOT_METRICS)        # (B, G, M)
    for k, v in reps.items():
        np.testing.assert_array_equal(v[..., 0], v[..., 1], err_msg=k)
    boot = stats.cluster_bootstrap(called, by=["phase"], n_boot=64, seed=seed)
    cols = ["estimate", "std_error", "conf_low", "conf_high", "n_boot_valid"]
    a, b = (boot[boot["model"] == m].reset_index(drop=True)[cols] for m in ("m0", "m1"))
    pd.testing.assert_frame_equal(a, b)


#: compare_models costs ~0.3 s an example here (statsmodels' Holm runs gc.collect() per
#: call), so fewer examples
@settings(PROFILE, max_examples=10)
@given(cases=cohorts(identical=True), t=st.integers(0, 9))
def test_identical_models_give_zero_paired_differences(cases, t):
    called = stats.scan_level(cases, threshold=_threshold(t))
    cmp = stats.compare_models(called, by=["phase"])
    ok = cmp["estimate"].notna()
    assert ok.any() and (cmp.loc[ok, "estimate"] == 0).all()
    prop = ok & cmp["estimand"].isin(["sensitivity_difference", "specificity_difference"])
    assert (cmp.loc[prop, "conf_low"] <= 0).all() and (cmp.loc[prop, "conf_high"] >= 0).all()
    # DeLong SE of a zero difference: 0 up to rounding (var_a + var_b - 2 cov leaves ~1e-9,
    # or exactly 0, which gives NaN with flag not_estimable)
    assert not (cmp.loc[cmp["estimand"] == "auc_difference", "std_error"] > 1e-8).any()
    assume(cases["label"].nunique() == 2)
    y = cases.loc[cases["model"] == "m0", "label"].to_numpy()
    s = cases.loc[cases["model"] == "m0", "score"].to_numpy()
    d = stats.delong_test(y, s, s.copy()).iloc[0]
    assert d["estimate"] == 0 and d["auc_a"] == d["auc_b"]
    assert not d["std_error"] > 1e-8
    assert np.isnan(d["p_value"]) or d["p_value"] == 1


@PROFILE
@given(B=st.integers(1, 80), cols=st.integers(1, 4), nan_share=st.floats(0, 0.9),
       conf=st.floats(0.5, 0.999), seed=st.integers(0, 2**32 - 1))
def test_percentile_interval_is_numpy_nanquantile_to_the_bit(B, cols, nan_share, conf, seed):
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=(B, cols)), int(rng.integers(1, 6)))   # ties
    x[rng.random(x.shape) < nan_share] = np.nan
    alpha = 1 - conf
    levels = rng.random((3, cols))
    with warnings.catch_warnings():   # all-NaN columns: NaN there, as in ours
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanquantile(x, [alpha / 2, 1 - alpha / 2], axis=0)
        per_col = np.stack([np.nanquantile(x[:, j], levels[:, j]) for j in range(cols)], axis=1)
    lo, hi = percentile_interval(x, conf)
    np.testing.assert_array_equal(lo, want[0])
    np.testing.assert_array_equal(hi, want[1])
    np.testing.assert_array_equal(column_quantiles(x, levels), per_col)
