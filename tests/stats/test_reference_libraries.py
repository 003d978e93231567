"""clinrel's own statistics against independent implementations in other libraries.

arch (Kevin Sheppard's bootstrap): percentile and BCa intervals of ``IIDBootstrap`` against
:func:`stats.bootstrap.boot_interval` on the *same* replicates (arch's, re-drawn from the
same seed), with the BCa acceleration from clinrel's cluster jackknife
(:func:`stats.bootstrap.jackknife_acceleration`, each scan its own cluster) against arch's
leave-one-out jackknife.

pingouin: Holm and Benjamini-Hochberg adjusted p-values (``multicomp``) against
:func:`stats.subgroups.adjust_p`; the exact McNemar p-value (``chi2_mcnemar``) against
:func:`stats.intervals.mcnemar_exact` and :func:`stats.compare_models`; Pearson's
chi-square of independence (``chi2_independence``, no continuity correction) against
:func:`stats.heterogeneity_test`.

These libraries are test-time dependencies only (``pip install 'clinrel[test]'``); clinrel
itself imports neither.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pingouin
import pytest
from arch import bootstrap as arch_bootstrap

import stats
from stats.bootstrap import boot_counts, boot_interval, jackknife_acceleration
from stats.detection import case_matrix
from stats.intervals import mcnemar_exact
from stats.subgroups import adjust_p


def _scans(n: int, seed: int, p_pos: float = 0.4, sens: float = 0.8, spec: float = 0.9):
    rng = np.random.default_rng(seed)
    label = (rng.random(n) < p_pos).astype(int)
    pred = np.where(label == 1, rng.random(n) < sens, rng.random(n) >= spec).astype(int)
    return label, pred


def _sensitivity(label, pred):
    return np.array([pred[label == 1].mean()])


def _cases(label, pred) -> pd.DataFrame:
    n = len(label)
    return pd.DataFrame({"case_id": [f"c{i}" for i in range(n)], "model": "m", "label": label,
                         "score": pred.astype(float), "pred": pred, "site": "s",
                         "patient_id": [f"c{i}" for i in range(n)]})


@pytest.mark.parametrize("seed,conf_level", [(1, 0.95), (2, 0.90), (3, 0.99)])
def test_percentile_interval_equals_arch_on_the_same_replicates(seed, conf_level):
    label, pred = _scans(150, seed)
    B = 2000
    ci = arch_bootstrap.IIDBootstrap(label, pred, seed=seed).conf_int(
        _sensitivity, reps=B, method="percentile", size=conf_level)
    reps = arch_bootstrap.IIDBootstrap(label, pred, seed=seed).apply(_sensitivity, B)
    theta = _sensitivity(label, pred)
    lo, hi = boot_interval(reps, theta, conf_level=conf_level, method="percentile")
    np.testing.assert_allclose([lo[0], hi[0]], ci[:, 0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed,n", [(4, 120), (5, 300), (6, 60)])
def test_bca_interval_and_acceleration_equal_arch(seed, n):
    label, pred = _scans(n, seed, sens=0.85)
    B = 3000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = arch_bootstrap.IIDBootstrap(label, pred, seed=seed).conf_int(
            _sensitivity, reps=B, method="bca")
    reps = arch_bootstrap.IIDBootstrap(label, pred, seed=seed).apply(_sensitivity, B)
    theta = _sensitivity(label, pred)
    # clinrel's acceleration from its own leave-one-cluster-out jackknife on cluster counts
    bc = boot_counts(case_matrix(_cases(label, pred)))
    accel = jackknife_acceleration(bc, ["sensitivity"])["sensitivity"][0]   # (M,) of cell 0
    lo, hi = boot_interval(reps, theta, method="bca", accel=accel)
    np.testing.assert_allclose([lo[0], hi[0]], ci[:, 0], rtol=0, atol=1e-12)
    # the BCa interval differs from the percentile one here (the comparison is not vacuous)
    plo, phi = boot_interval(reps, theta, method="percentile")
    assert abs(plo[0] - lo[0]) + abs(phi[0] - hi[0]) > 1e-6


def _pvalues(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.uniform(0, 0.02, n // 3), rng.uniform(0, 1, n - n // 3)])
    return rng.permutation(p)


@pytest.mark.parametrize("seed,n", [(1, 5), (2, 12), (3, 40)])
def test_holm_and_bh_equal_pingouin_multicomp(seed, n):
    p = _pvalues(seed, n)
    family = np.repeat(["a", "b"], [n // 2, n - n // 2])
    p[1] = np.nan  # a missing p-value stays missing and does not count in its family
    out = adjust_p(pd.DataFrame({"p_value": p, "family": family}), ["family"])
    for fam in ("a", "b"):
        rows = (family == fam) & ~np.isnan(p)
        _, holm = pingouin.multicomp(p[rows], method="holm")
        _, bh = pingouin.multicomp(p[rows], method="fdr_bh")
        np.testing.assert_allclose(out.loc[rows, "p_adjusted"], holm, rtol=0, atol=1e-14)
        np.testing.assert_allclose(out.loc[rows, "p_adjusted_bh"], bh, rtol=0, atol=1e-14)
    assert np.isnan(out["p_adjusted"].iloc[1]) and np.isnan(out["p_adjusted_bh"].iloc[1])
    # the adjustment changes something: Holm is not the identity on these p-values
    assert (out["p_adjusted"] > out["p_value"]).any()


def _p_exact(stat: pd.DataFrame) -> float:
    """pingouin's exact McNemar p (``p_exact``; ``p-exact`` before pingouin 0.6)."""
    return float(stat["p_exact" if "p_exact" in stat.columns else "p-exact"].iloc[0])


@pytest.mark.parametrize("b,c", [(3, 11), (0, 7), (20, 25), (9, 9), (1, 0)])
def test_exact_mcnemar_equals_pingouin(b, c):
    # a paired 2x2 table with b, c discordant pairs (a, d concordant)
    a, d = 40, 33
    x = np.repeat([1, 1, 0, 0], [a, b, c, d])
    y = np.repeat([1, 0, 1, 0], [a, b, c, d])
    frame = pd.DataFrame({"x": x, "y": y})
    _, stat = pingouin.chi2_mcnemar(frame, "x", "y")
    np.testing.assert_allclose(mcnemar_exact(b, c), _p_exact(stat), rtol=1e-12)


def test_compare_models_mcnemar_equals_pingouin():
    rng = np.random.default_rng(8)
    n = 240
    label = (rng.random(n) < 0.5).astype(int)
    pa = np.where(label == 1, rng.random(n) < 0.85, rng.random(n) < 0.1).astype(int)
    pb = np.where(rng.random(n) < 0.15, 1 - pa, pa)
    ids = [f"c{i}" for i in range(n)]
    cases = pd.concat([pd.DataFrame({"case_id": ids, "model": m, "label": label,
                                     "score": p.astype(float), "pred": p, "site": "s"})
                       for m, p in (("a", pa), ("b", pb))], ignore_index=True)
    out = stats.compare_models(stats.read_cases(cases))
    for estimand, pop in (("sensitivity_difference", label == 1),
                          ("specificity_difference", label == 0)):
        row = out[(out["estimand"] == estimand) & (out["group_var"] == "overall")]
        assert len(row) == 1, out[["estimand", "group_var"]]
        frame = pd.DataFrame({"a": pa[pop], "b": pb[pop]})
        _, stat = pingouin.chi2_mcnemar(frame, "a", "b")
        np.testing.assert_allclose(row["p_value"].iloc[0], _p_exact(stat), rtol=1e-12)


def test_pearson_heterogeneity_equals_pingouin_chi2_independence():
    rng = np.random.default_rng(9)
    n = 600
    phase = rng.choice(["arterial", "venous", "delayed", "non_contrast"], n)
    label = (rng.random(n) < 0.5).astype(int)
    p_detect = pd.Series(phase).map({"arterial": 0.6, "venous": 0.9, "delayed": 0.8,
                                     "non_contrast": 0.5}).to_numpy()
    pred = np.where(label == 1, rng.random(n) < p_detect, rng.random(n) < 0.1).astype(int)
    cases = pd.DataFrame({"case_id": [f"c{i}" for i in range(n)], "model": "m",
                          "label": label, "score": pred.astype(float), "pred": pred,
                          "site": "s", "phase": phase})
    for estimand, pop, success in (("sensitivity", label == 1, pred == 1),
                                   ("specificity", label == 0, pred == 0)):
        out = stats.heterogeneity_test(stats.read_cases(cases), ["phase"], estimand=estimand)
        frame = pd.DataFrame({"phase": phase[pop], "ok": success[pop].astype(int)})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, res = pingouin.chi2_independence(frame, "phase", "ok", correction=False)
        pearson = res[res["test"] == "pearson"].iloc[0]
        row = out.iloc[0]
        assert row["method"] == "pearson-chisq"
        np.testing.assert_allclose(row["statistic"], pearson["chi2"], rtol=1e-10)
        np.testing.assert_allclose(row["p_value"], pearson["pval"], rtol=1e-8)
        assert row["df"] == pearson["dof"]
