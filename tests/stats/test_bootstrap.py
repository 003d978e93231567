"""stats.bootstrap: the count-based paired cluster bootstrap equals resampling rows."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from stats import bootstrap as bs
from stats._rng import spawn
from stats.detection import case_matrix, scan_level
from stats.schema import ContractError, check_tidy
from stats.simulate import benchx_cohort

BY = ["phase", ("age_group", "phase")]


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    return scan_level(benchx_cohort(240, n_models=3, seed=5).data, threshold=50)


def _row_counts(rows: pd.DataFrame, cm) -> np.ndarray:
    """Reference: counts of resampled ROWS in the K column layout, by pandas."""
    G, M = cm.n_cells, len(cm.models)
    out = np.zeros(2 * G + 2 * G * M)
    cells = cm.cells.reset_index()
    for g, (gv, gl) in enumerate(zip(cells.group_var, cells.group_level)):
        if gv == "overall":
            sel = rows
        else:
            cols = gv.split(":")
            key = rows[cols].astype(str).agg(":".join, axis=1)
            sel = rows[key == gl]
        first = sel[sel.model == cm.models[0]]
        out[g] = (first.label == 1).sum()
        out[G + g] = (first.label == 0).sum()
        for m, name in enumerate(cm.models):
            s = sel[sel.model == name]
            out[2 * G + m * G + g] = ((s.pred == 1) & (s.label == 1)).sum()
            out[2 * G + G * M + m * G + g] = ((s.pred == 1) & (s.label == 0)).sum()
    return out


@pytest.mark.parametrize("strata", [None, "site"])
def test_count_path_equals_row_resampling(cases, strata, monkeypatch):
    monkeypatch.setattr(bs, "_BLOCK_ELEMENTS", 7 * 160)  # several blocks, a ragged last one
    monkeypatch.setattr(bs, "_MIN_BLOCK_REPLICATES", 1)
    monkeypatch.setattr(bs, "_DRAW_ELEMENTS", 3 * 160)  # several draw chunks per block
    cm = case_matrix(cases, BY)
    bc = bs.boot_counts(cm, strata=strata)
    n_boot = 9
    R = bs.replicate_counts(bc, n_boot, seed=42)
    assert R.shape == (n_boot, bc.K.shape[1])
    size = bc.block_size(n_boot)
    assert 1 < size < n_boot
    sizes = [size] * (n_boot // size) + ([n_boot % size] if n_boot % size else [])
    patient = pd.factorize(cm.covariates["patient_id"])[1]
    by_patient = {p: g for p, g in cases.groupby("patient_id")}
    b = 0
    for gen, s in zip(spawn(42, len(sizes)), sizes):
        idx = np.concatenate(list(bs.block_draws(gen, bc.strata, s)))
        assert idx.shape == (s, bc.n_clusters)
        for row in idx:
            rows = pd.concat([by_patient[patient[i]] for i in row])
            np.testing.assert_array_equal(R[b], _row_counts(rows, cm))
            b += 1
    assert b == n_boot


def test_draws_respect_strata(cases):
    cm = case_matrix(cases, None)
    bc = bs.boot_counts(cm, strata="site")
    idx = bs.draw_indices(np.random.default_rng(1), bc.strata, 50)
    want = np.bincount(bc.strata)
    for row in idx:
        np.testing.assert_array_equal(np.bincount(bc.strata[row], minlength=len(want)), want)


def test_percentile_and_seed(cases):
    a = bs.cluster_bootstrap(cases, by=BY, n_boot=300, seed=3)
    check_tidy(a)
    b = bs.cluster_bootstrap(cases, by=BY, n_boot=300, seed=3)
    pd.testing.assert_frame_equal(a, b)
    c = bs.cluster_bootstrap(cases, by=BY, n_boot=300, seed=np.random.default_rng(3))
    assert len(c) == len(a)
    # the percentile limits are numpy's quantiles of the replicate statistic
    cm = case_matrix(cases, BY)
    bc = bs.boot_counts(cm)
    R = bs.replicate_counts(bc, 300, seed=3)
    sens = bs.metric_arrays(bc.unpack(R), ["sensitivity"])["sensitivity"][:, 0, 1]
    row = a[(a.estimand == "sensitivity") & (a.group_var == "overall") & (a.model == cm.models[1])]
    assert row.conf_low.iloc[0] == pytest.approx(np.quantile(sens, 0.025), abs=1e-12)
    assert row.conf_high.iloc[0] == pytest.approx(np.quantile(sens, 0.975), abs=1e-12)
    assert row.std_error.iloc[0] == pytest.approx(np.std(sens, ddof=1), abs=1e-12)
    g = cases[cases.model == cm.models[1]]
    assert row.estimate.iloc[0] == pytest.approx(g.pred[g.label == 1].mean(), abs=1e-15)
    with_empty = cases.assign(extra=pd.Categorical(["a"] * len(cases), categories=["a", "b"]))
    e = bs.cluster_bootstrap(with_empty, by=["extra"], n_boot=20, seed=1)
    empty = e[e.group_level == "b"]
    assert len(empty) == 5 * 3 and (empty.flag == "empty").all() and empty.estimate.isna().all()
    assert (empty.n == 0).all() and empty.conf_low.isna().all()


def test_bca_matches_direct_formula(cases):
    cm = case_matrix(cases, None)
    bc = bs.boot_counts(cm)
    R = bs.replicate_counts(bc, 400, seed=9)
    out = bs.bootstrap_table(cm, bc, R, metrics=["f1"], conf_level=0.9, boot_ci="bca")
    reps = bs.metric_arrays(bc.unpack(R), ["f1"])["f1"][:, 0, :]
    for m, name in enumerate(cm.models):
        sub = cases[cases.model == name]

        def f1(d):
            tp = ((d.pred == 1) & (d.label == 1)).sum()
            return 2 * tp / (2 * tp + ((d.pred == 1) & (d.label == 0)).sum()
                             + ((d.pred == 0) & (d.label == 1)).sum())
        theta = f1(sub)
        jack = np.array([f1(sub[sub.patient_id != p]) for p in pd.unique(cm.covariates.patient_id)])
        d = jack.mean() - jack
        a = (d ** 3).sum() / (6 * (d ** 2).sum() ** 1.5)
        z0 = sps.norm.ppf((reps[:, m] < theta).mean())
        lv = [sps.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) for z in sps.norm.ppf([0.05, 0.95])]
        want = np.quantile(reps[:, m], lv)
        row = out[out.model == name]
        assert row.method.iloc[0] == "bootstrap-bca"
        assert row.conf_low.iloc[0] == pytest.approx(want[0], abs=1e-12)
        assert row.conf_high.iloc[0] == pytest.approx(want[1], abs=1e-12)


PROPS = {  # metric: (numerator, denominator) row masks, from pred and label
    "sensitivity": (lambda d: (d.pred == 1) & (d.label == 1), lambda d: d.label == 1),
    "specificity": (lambda d: (d.pred == 0) & (d.label == 0), lambda d: d.label == 0),
    "ppv": (lambda d: (d.pred == 1) & (d.label == 1), lambda d: d.pred == 1),
    "npv": (lambda d: (d.pred == 0) & (d.label == 0), lambda d: d.pred == 0),
    "accuracy": (lambda d: d.pred == d.label, lambda d: d.label >= 0),
}


def test_wilson_deff_interval_by_hand(cases):
    """boot_ci="wilson": Wilson at n / deff, deff = bootstrap variance x C / (C - 1) /
    binomial variance (C clusters in the denominator), recomputed by hand from the
    replicates for every proportion; F1 falls back to the percentile interval."""
    cm = case_matrix(cases, BY)
    bc = bs.boot_counts(cm)
    R = bs.replicate_counts(bc, 500, seed=4)
    metrics = [*PROPS, "f1"]
    out = bs.bootstrap_table(cm, bc, R, metrics=metrics, conf_level=0.9, boot_ci="wilson")
    pct = bs.bootstrap_table(cm, bc, R, metrics=["f1"], conf_level=0.9, boot_ci="percentile")
    z = sps.norm.ppf(0.95)
    reps = bs.metric_arrays(bc.unpack(R), list(PROPS))  # B x G x M each
    checked = 0
    for m, name in enumerate(cm.models):
        sub = cases[cases.model == name]
        for g, level in enumerate(cm.cells.group_level):
            var = cm.cells.group_var[g]
            rows = sub if var == "overall" else sub[
                sub[var.split(":")].astype(str).agg(":".join, axis=1) == level]
            for k, (num, den) in PROPS.items():
                d = rows[den(rows)]
                n, C = len(d), d.patient_id.nunique()
                row = out[(out.estimand == k) & (out.model == name) & (out.group_var == var)
                          & (out.group_level == level)].iloc[0]
                assert row.n_clusters == C
                if n == 0:
                    assert np.isnan(row.conf_low)
                    continue
                p = num(d).mean()
                r = reps[k][:, g, m]
                se = np.std(r[~np.isnan(r)], ddof=1)
                ok = 0 < p < 1 and se > 0
                deff = se ** 2 * C / max(C - 1, 1) / (p * (1 - p) / n) if ok else 1.0
                ne = n / deff
                centre = (p * ne + z * z / 2) / (ne + z * z)
                half = z / (ne + z * z) * np.sqrt(ne * p * (1 - p) + z * z / 4)
                assert row.method == "bootstrap-wilson"
                assert row.conf_low == pytest.approx(0.0 if p == 0 else centre - half, abs=1e-12), k
                assert row.conf_high == pytest.approx(1.0 if p == 1 else centre + half, abs=1e-12), k
                assert row.conf_low <= row.estimate <= row.conf_high
                checked += 1
    assert checked > 100
    f1 = out[out.estimand == "f1"].reset_index(drop=True)
    assert (f1.method == "bootstrap-percentile").all()
    pd.testing.assert_series_equal(f1.conf_low, pct.conf_low, check_names=False)
    with pytest.raises(ValueError, match="boot_ci"):
        bs.bootstrap_table(cm, bc, R, metrics=["f1"], conf_level=0.9, boot_ci="basic")


def test_bad_inputs(cases):
    with pytest.raises(ValueError, match="n_boot"):
        bs.cluster_bootstrap(cases, n_boot=0)
    with pytest.raises(ValueError, match="cannot be bootstrapped"):
        bs.cluster_bootstrap(cases, metrics=["auc"], n_boot=10)
    bad = cases.copy()
    pid = bad.patient_id[bad.duplicated(["patient_id", "model"])].iloc[0]  # a multi-scan patient
    first = bad.index[(bad.patient_id == pid)][0]
    bad["site"] = bad["site"].astype(str)
    bad.loc[bad.case_id == bad.case_id[first], "site"] = "elsewhere"
    with pytest.raises(ContractError, match="more than one 'site' stratum"):
        bs.cluster_bootstrap(bad, n_boot=10, strata="site")


@pytest.mark.slow
def test_dask_gives_identical_results(cases, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(bs, "_BLOCK_ELEMENTS", 40 * 160)  # several blocks
    monkeypatch.setattr(bs, "_MIN_BLOCK_REPLICATES", 1)
    local = bs.cluster_bootstrap(cases, by=BY, n_boot=200, seed=17)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as lc, distributed.Client(lc) as client:
        remote = bs.cluster_bootstrap(cases, by=BY, n_boot=200, seed=17, scheduler=client)
    pd.testing.assert_frame_equal(local, remote)


def test_jackknife_acceleration_chunking(cases):
    bc = bs.boot_counts(case_matrix(cases, BY))
    one = bs.jackknife_acceleration(bc, ["sensitivity", "f1"])
    many = bs.jackknife_acceleration(bc, ["sensitivity", "f1"], chunk=7)
    for k in one:
        np.testing.assert_allclose(one[k], many[k], rtol=1e-9, atol=1e-15)
        assert np.isfinite(one[k]).all()


def test_jackknife_acceleration_of_equal_leave_outs_is_zero():
    """25 patients alike (two detected positive scans and one missed each): every
    leave-one-out sensitivity is 2/3, whose mean is 2/3 + 1.1e-16 after rounding. The
    acceleration is 0 (no skewness), not the +-1/(6 sqrt(25)) = 0.033 a ratio of rounding
    noise gives; a cohort with one patient unlike the others keeps a nonzero one."""
    rows = [{"case_id": f"p{i}_{j}", "patient_id": f"p{i}", "model": "m", "label": 1,
             "pred": int(j < 2), "score": float(j < 2)} for i in range(25) for j in range(3)]
    cases = pd.DataFrame(rows)
    v = np.full(25, 2 / 3)
    assert np.nansum(v) / 25 != 2 / 3          # the rounding the rule is for
    a = bs.jackknife_acceleration(bs.boot_counts(case_matrix(cases)), ["sensitivity"])
    assert a["sensitivity"][0, 0] == 0.0
    cases.loc[0, "pred"] = 0                   # patient p0: one detected, two missed
    a = bs.jackknife_acceleration(bs.boot_counts(case_matrix(cases)), ["sensitivity"])
    assert abs(a["sensitivity"][0, 0]) > 0.05
