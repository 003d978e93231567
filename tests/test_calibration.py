"""Calibration metrics, reliability tables, ECE bootstrap and temperature scaling (issue 5,
items 1 and 5)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq, minimize_scalar
from scipy.special import expit
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score
from statsmodels.stats.proportion import proportion_confint

from stats import calibration as cal
from stats.schema import ContractError, check_tidy


def overconfident(n, *, true_temp=2.5, seed=0):
    """Binary outcomes whose true logit is z / true_temp, scored with logit z."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.5, n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-z / true_temp))).astype(int)
    return z, y


def sklearn_edges(p, n_bins, strategy):
    if strategy == "uniform":
        return np.linspace(0, 1, n_bins + 1)
    return np.percentile(p, np.linspace(0, 1, n_bins + 1) * 100)   # as calibration_curve


def sklearn_ece(y, p, n_bins, strategy):
    """Independent ECE: sklearn's per-bin means times bin counts from a loop over the
    right-closed bins [e0, e1], (e1, e2], ... (an edge value in the lower bin)."""
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy=strategy)
    e = sklearn_edges(p, n_bins, strategy)
    counts = np.array([np.sum(((p > e[b]) | (b == 0)) & ((p <= e[b + 1]) | (b == n_bins - 1)))
                       for b in range(n_bins)])
    counts = counts[counts > 0]
    assert counts.sum() == len(p) and len(counts) == len(prob_true)
    return float(np.sum(counts / len(p) * np.abs(prob_true - prob_pred)))


def edge_data(kind, seed=0):
    """Probabilities and outcomes; all but "beta" put many values exactly on bin edges."""
    rng = np.random.default_rng(seed)
    if kind == "beta":
        p = rng.beta(2, 3, 3000)
    elif kind == "odd_n":          # n = 3001: every quantile edge is a data point
        p = rng.uniform(size=3001)
    elif kind == "rounded":        # multiples of 0.1: on uniform edges, repeated quantile edges
        p = np.round(rng.uniform(size=3000), 1)
    else:                          # few distinct values: repeated quantile edges, empty bins
        p = rng.choice([0.05, 0.2, 0.2, 0.5, 0.8, 0.8, 0.8], size=2000)
    y = (rng.random(len(p)) < p ** 1.3).astype(int)
    return y, p


def test_ece_hand_example():
    # two bins: [0, .5) holds .1, .2 (labels 0, 1); [.5, 1] holds .8, .9 (labels 1, 1)
    y = np.array([0, 1, 1, 1])
    p = np.array([0.1, 0.2, 0.8, 0.9])
    # bin 1: |0.5 - 0.15| * 2/4 = 0.175; bin 2: |1 - 0.85| * 2/4 = 0.075
    assert cal.ece(y, p, n_bins=2) == pytest.approx(0.25, abs=1e-15)
    assert cal.mce(y, p, n_bins=2) == pytest.approx(0.35, abs=1e-15)
    # an edge value goes to the lower bin (as sklearn): 0.5 alone in [0, .5], 0.7 in (.5, 1]
    # -> (|0 - .5| + |1 - .7|) / 2 = 0.4 (the upper-bin rule would give |1 - 1.2| / 2 = 0.1)
    assert cal.ece([0, 1], [0.5, 0.7], n_bins=2) == pytest.approx(0.4, abs=1e-15)
    assert cal.ece([1, 1], [0.0, 1.0], n_bins=2) == pytest.approx(0.5, abs=1e-15)  # 0, 1 inside
    # perfectly calibrated bins give 0
    assert cal.ece([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5], n_bins=15) == 0.0


@pytest.mark.parametrize("kind", ["beta", "odd_n", "rounded", "few_values"])
@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("n_bins", [5, 10, 15])
def test_ece_matches_sklearn_recomputation(kind, strategy, n_bins):
    y, p = edge_data(kind, seed=n_bins)
    edges = sklearn_edges(p, n_bins, strategy)
    on_edge = np.isin(p, edges[1:-1]).sum()
    if kind != "beta" and (strategy, kind) != ("uniform", "odd_n"):
        assert on_edge > 0                     # the tie rule is exercised
    assert cal.ece(y, p, n_bins=n_bins, strategy=strategy) == pytest.approx(
        sklearn_ece(y, p, n_bins, strategy), abs=1e-12)
    # the reliability table has sklearn's bins: its non-empty rows are calibration_curve's
    tab = cal.reliability_table(y, p, n_bins=n_bins, strategy=strategy)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy=strategy)
    full = tab[tab["n"] > 0]
    np.testing.assert_allclose(full["estimate"], prob_true, rtol=0, atol=1e-12)
    np.testing.assert_allclose(full["mean_confidence"], prob_pred, rtol=0, atol=1e-12)


def test_top_label_multiclass_by_hand():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2, size=(500, 4))
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = rng.integers(0, 4, 500)
    conf, pred = p.max(1), p.argmax(1)
    total = 0.0
    for b in range(15):  # slow, obvious loop over bins
        lo, hi = b / 15, (b + 1) / 15
        in_bin = ((conf > lo) if b > 0 else (conf >= lo)) & (conf <= hi)
        if in_bin.any():
            total += in_bin.mean() * abs((pred[in_bin] == y[in_bin]).mean() - conf[in_bin].mean())
    assert cal.ece(y, p) == pytest.approx(total, abs=1e-12)


def test_brier_and_nll_match_sklearn():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.01, 0.99, 400)
    y = rng.integers(0, 2, 400)
    assert cal.brier(y, p) == pytest.approx(brier_score_loss(y, p), abs=1e-14)
    assert cal.nll(y, p) == pytest.approx(log_loss(y, p), abs=1e-12)
    P = rng.dirichlet(np.ones(3), 400)
    Y = rng.integers(0, 3, 400)
    assert cal.nll(Y, P) == pytest.approx(log_loss(Y, P), abs=1e-12)
    onehot = np.eye(3)[Y]
    assert cal.brier(Y, P) == pytest.approx(np.mean(((P - onehot) ** 2).sum(1)), abs=1e-14)


def test_reliability_table():
    rng = np.random.default_rng(2)
    p = rng.uniform(0, 0.6, 300)  # bins above 0.6 stay empty
    y = (rng.random(300) < p).astype(int)
    tab = cal.reliability_table(y, p, n_bins=10)
    check_tidy(tab)
    assert len(tab) == 10 and tab["n"].sum() == 300
    empty = tab[tab["n"] == 0]
    assert len(empty) == 4 and (empty["flag"] == "empty").all() and empty["estimate"].isna().all()
    full = tab[tab["n"] > 0]
    lo, hi = proportion_confint(full["n_pos"], full["n"], method="wilson")
    np.testing.assert_allclose(full["conf_low"], lo, atol=1e-12)
    np.testing.assert_allclose(full["conf_high"], hi, atol=1e-12)
    ece_from_table = np.nansum(tab["n"] / 300 * np.abs(tab["gap"]))
    assert ece_from_table == pytest.approx(cal.ece(y, p, n_bins=10), abs=1e-12)
    assert tab["bin_low"].iloc[3] == pytest.approx(0.3)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_ece_bootstrap_replicates_equal_loop(strategy):
    rng = np.random.default_rng(5)
    p = rng.uniform(0, 1, 200)
    y = (rng.random(200) < p ** 2).astype(int)
    idx = rng.integers(0, 200, size=(30, 200))
    got = cal._replicate_ece(p, y.astype(float), idx, 15, strategy)
    want = [cal.ece(y[i], p[i], strategy=strategy) for i in idx]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_ece_ci():
    z, y = overconfident(1500, seed=4)
    p = 1 / (1 + np.exp(-z))
    out = cal.ece_ci(y, p, n_boot=500, seed=1)
    check_tidy(out)
    row = out.iloc[0]
    assert row["estimate"] == pytest.approx(cal.ece(y, p))
    assert row["conf_low"] < row["estimate"] < row["conf_high"]
    assert row["n"] == 1500 and row["n_pos"] == y.sum()
    again = cal.ece_ci(y, p, n_boot=500, seed=1)
    assert again["conf_low"].item() == row["conf_low"]


def _legacy_replicates(y, p, n_boot, seed, n_bins=15, strategy="uniform"):
    """The replicate ECEs as first written: blocks of 4 million resampled values, each
    replicate's cases gathered and binned (the definition)."""
    out = y.astype(float)
    rng = np.random.default_rng(seed)
    n = len(p)
    block = max(1, 4_000_000 // (n * (n_bins if strategy == "quantile" else 1)))
    reps = [cal._replicate_ece(p, out, rng.integers(0, n, size=(min(block, n_boot - s), n)),
                               n_bins, strategy) for s in range(0, n_boot, block)]
    return np.concatenate(reps)


@pytest.mark.parametrize("n, n_bins", [(1500, 15), (333, 7)])
def test_ece_bootstrap_counts_path_equals_resampling_cases(n, n_bins, monkeypatch):
    # equal-width bins: one sparse product (bins x cases) @ (cases x replicates) of case
    # multiplicities per block; same draws as gathering the cases, sums in another order
    monkeypatch.setattr(cal, "_ECE_BLOCK_ELEMENTS", 37 * n)   # several blocks, odd size
    rng = np.random.default_rng(n)
    p = rng.beta(2, 5, n)
    y = (rng.random(n) < p).astype(int)
    p2 = np.clip(p + rng.normal(0, 0.1, n), 0, 1)
    got = cal._replicate_ece_uniform([(p, y.astype(float)), (p2, y.astype(float))], n_bins,
                                     300, np.random.default_rng(9))
    np.testing.assert_allclose(got[:, 0], _legacy_replicates(y, p, 300, 9, n_bins), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[:, 1], _legacy_replicates(y, p2, 300, 9, n_bins), rtol=0, atol=1e-12)


def test_ece_ci_many_equals_separate_calls():
    rng = np.random.default_rng(4)
    items = []
    for n in (400, 400, 250):   # two share draws, one has its own length
        p = rng.uniform(0, 1, n)
        items.append(((rng.random(n) < p ** 1.5).astype(int), p))
    for strategy in ("uniform", "quantile"):
        many = cal.ece_ci_many(items, n_boot=200, seed=3, strategy=strategy)
        check_tidy(many)
        one = pd.concat([cal.ece_ci(y, p, n_boot=200, seed=3, strategy=strategy)
                         for y, p in items], ignore_index=True)
        pd.testing.assert_frame_equal(many, one)
    # the percentile limits of the legacy replicates, to 1e-12, and the basic (default)
    # interval their reflection about the estimate (lower limit floored at 0)
    y, p = items[0]
    lo, hi = np.percentile(_legacy_replicates(y, p, 200, 3), [2.5, 97.5])
    row = cal.ece_ci(y, p, n_boot=200, seed=3, boot_ci="percentile").iloc[0]
    assert abs(row["conf_low"] - lo) < 1e-12 and abs(row["conf_high"] - hi) < 1e-12
    assert row["method"] == "bootstrap-percentile"
    basic = cal.ece_ci(y, p, n_boot=200, seed=3).iloc[0]
    e = cal.ece(y, p)
    assert basic["method"] == "bootstrap-basic"
    assert basic["conf_low"] == pytest.approx(min(e, max(0.0, 2 * e - hi)), abs=1e-12)
    assert basic["conf_high"] == pytest.approx(max(e, 2 * e - lo), abs=1e-12)
    # a calibrated model: every replicate above E; the reflection alone would invert the
    # interval (review finding); the limits stay on their sides of the estimate, >= 0
    rng = np.random.default_rng(8)
    for n in (100, 1000, 5000):
        pc = np.full(n, 0.3)
        yc = np.zeros(n, int)
        yc[: int(0.3 * n)] = 1
        for q in (pc, rng.uniform(0, 1, n)):
            yy = yc if q is pc else (rng.random(n) < q).astype(int)
            r = cal.ece_ci(yy, q, n_boot=300, seed=1).iloc[0]
            assert 0 <= r["conf_low"] <= r["estimate"] <= r["conf_high"], (n, r.to_dict())
    with pytest.raises(ValueError, match="boot_ci must be one of"):
        cal.ece_ci(y, p, n_boot=20, boot_ci="bca")


def test_temperature_scaling_lowers_held_out_nll_and_keeps_auroc():
    z, y = overconfident(6000, true_temp=2.5, seed=7)
    z_cal, y_cal, z_test, y_test = z[:3000], y[:3000], z[3000:], y[3000:]
    fit = cal.temperature_scale(z_cal, y_cal)
    assert fit.converged and fit.temperature == pytest.approx(2.5, rel=0.12)
    p_before = 1 / (1 + np.exp(-z_test))
    p_after = fit.apply(z_test)
    assert cal.nll(y_test, p_after) < cal.nll(y_test, p_before) - 0.02
    assert cal.ece(y_test, p_after) < cal.ece(y_test, p_before)
    assert roc_auc_score(y_test, p_after) == roc_auc_score(y_test, p_before)
    ev = fit.evaluate(z_test, y_test).set_index(["estimand", "stage"])["estimate"]
    assert ev["nll", "after"] == pytest.approx(cal.nll(y_test, p_after))
    # the fitted T minimizes the calibration NLL
    for t in (fit.temperature * 0.9, fit.temperature * 1.1):
        assert cal.nll(y_cal, 1 / (1 + np.exp(-z_cal / t))) > fit.nll_after
    # probabilities in, same fit
    fit_p = cal.temperature_scale(1 / (1 + np.exp(-z_cal)), y_cal)
    assert fit_p.kind == "probs" and fit_p.temperature == pytest.approx(fit.temperature, rel=1e-6)
    check_tidy(fit.tidy())


def derivative_root_temperature(z, y):
    """T from the root of d NLL / d beta (written out here; brentq, tight)."""
    if z.ndim == 1:
        def d(b):
            return np.mean(z * expit(b * z) - y * z)
    else:
        def d(b):
            e = np.exp(b * z - (b * z).max(1, keepdims=True))
            return np.mean((e * z).sum(1) / e.sum(1) - z[np.arange(len(y)), y])
    return 1.0 / brentq(d, 1e-3, 1e3, xtol=1e-15, rtol=1e-15)


def value_search_temperature(z, y):
    """T from a bounded search on the NLL's value (sklearn log_loss), as tight as the
    NLL's flatness allows (~1e-8)."""
    def f(log_t):
        s = z / np.exp(log_t)
        p = 1 / (1 + np.exp(-s)) if z.ndim == 1 else np.exp(s) / np.exp(s).sum(1, keepdims=True)
        return log_loss(y, p, labels=np.arange(2 if z.ndim == 1 else z.shape[1]))
    return float(np.exp(minimize_scalar(f, bounds=(-3, 3), method="bounded",
                                        options={"xatol": 1e-12}).x))


@pytest.mark.parametrize("seed", [7, 8])
def test_temperature_is_the_exact_nll_minimum(seed):
    z, y = overconfident(3000, true_temp=2.5, seed=seed)
    fit = cal.temperature_scale(z, y)
    assert fit.converged
    assert fit.temperature == pytest.approx(derivative_root_temperature(z, y), rel=1e-10)
    assert fit.temperature == pytest.approx(value_search_temperature(z, y), rel=1e-7)
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1.5, size=(1500, 3))
    yk = (logits / 2 + rng.gumbel(size=logits.shape)).argmax(1)   # true temperature 2
    fit = cal.temperature_scale(logits, yk, kind="logits")
    assert fit.temperature == pytest.approx(derivative_root_temperature(logits, yk), rel=1e-10)
    assert fit.temperature == pytest.approx(value_search_temperature(logits, yk), rel=1e-7)


def test_temperature_at_a_bound_is_not_converged():
    fit = cal.temperature_scale(np.array([-2.0, -1.0, 1.0, 2.0]), np.array([0, 0, 1, 1]))
    assert not fit.converged and fit.temperature < 1e-4      # separable: T -> 0
    assert fit.tidy()["flag"].item() == "not_converged"


def test_temperature_scaling_multiclass_keeps_predictions():
    rng = np.random.default_rng(9)
    true = rng.normal(0, 1.5, size=(4000, 3))
    y = np.array([rng.choice(3, p=np.exp(r) / np.exp(r).sum()) for r in true])
    logits = true * 3.0   # overconfident by a factor 3
    fit = cal.temperature_scale(logits[:2000], y[:2000], kind="logits")
    assert fit.temperature == pytest.approx(3.0, rel=0.15)
    after = fit.apply(logits[2000:])
    before = np.exp(logits[2000:]) / np.exp(logits[2000:]).sum(1, keepdims=True)
    assert cal.nll(y[2000:], after) < cal.nll(y[2000:], before)
    np.testing.assert_array_equal(after.argmax(1), before.argmax(1))


@pytest.mark.parametrize("label, prob, words", [
    ([0, 1, 2], [0.1, 0.2, 0.3], "label must be 0/1; rows 3"),
    ([0, 1], [0.1, 1.2], "finite probabilities in [0, 1]; rows 2"),
    ([0, 1], [0.1], "prob must have shape"),
    ([0, 3], [[0.5, 0.5], [0.2, 0.8]], "an integer class in 0..1"),
])
def test_input_errors(label, prob, words):
    with pytest.raises(ContractError) as info:
        cal.ece(label, prob)
    assert words in str(info.value)


def test_argument_errors():
    with pytest.raises(ValueError, match="strategy"):
        cal.ece([0, 1], [0.2, 0.7], strategy="equal")
    with pytest.raises(ValueError, match="n_bins"):
        cal.ece([0, 1], [0.2, 0.7], n_bins=0)


def test_calibration_repair_from_runs():
    from stats import simulate

    runs = simulate.crs_runs(n_encoders=3, n_datasets=2, n_seeds=2, perturbations=("blur",),
                             seed=6).data
    out = cal.calibration_repair(runs)
    check_tidy(out)
    base = runs[(runs["condition"] == "clean") & (runs["label_fraction"] == 1.0)
                & (runs["encoder"] == "enc_02") & (runs["dataset"] == "dataset_B")]
    got = out[(out["encoder"] == "enc_02") & (out["dataset"] == "dataset_B")].set_index("estimand")
    assert got.loc["ece_before", "estimate"] == pytest.approx(base["ece"].mean())
    assert got.loc["relative_reduction", "estimate"] == pytest.approx(
        1 - base["ece_after_ts"].mean() / base["ece"].mean())
    assert got.loc["ece_before", "n"] == 2
    overall = out[(out["encoder"] == "enc_02") & (out["dataset"] == "overall")].set_index("estimand")
    per = out[(out["encoder"] == "enc_02") & (out["dataset"] != "overall")
              & (out["estimand"] == "ece_after")]["estimate"]
    assert overall.loc["ece_after", "estimate"] == pytest.approx(per.mean())
    with pytest.raises(ContractError, match="ece_after_ts"):
        cal.calibration_repair(runs.drop(columns="ece_after_ts"))


# --------------------------------------------------------------------------- clusters

def _clustered(seed: int = 0, patients: int = 200):
    rng = np.random.default_rng(seed)
    pat = np.repeat(np.arange(patients), rng.choice([1, 2, 3, 4], size=patients,
                                                    p=[0.4, 0.3, 0.2, 0.1]))
    u = rng.normal(0, 1.5, patients)[pat]
    p = 1 / (1 + np.exp(-(rng.normal(size=len(pat)) + u)))
    y = (rng.random(len(pat)) < np.clip(p + 0.1 * u, 0, 1)).astype(int)
    return y, p, pat


def test_ece_cluster_bootstrap_is_the_definition():
    """Each replicate of the cluster bootstrap is the ECE of the scans of the drawn
    patients (recomputed from the definition on the expanded rows); with one scan per
    cluster it is the case bootstrap draw for draw."""
    ece, ece_ci = cal.ece, cal.ece_ci
    from stats.calibration import _confidence, _replicate_ece_uniform

    y, p, pat = _clustered()
    conf, out = _confidence(y, p)
    C = pat.max() + 1
    r = _replicate_ece_uniform([(conf, out)], 15, 4, np.random.default_rng(5), cluster=pat)
    idx = np.random.default_rng(5).integers(0, C, size=(4, C), dtype=np.uint32)
    for k in range(4):
        rows = np.concatenate([np.flatnonzero(pat == i) for i in idx[k]])
        assert r[k, 0] == pytest.approx(ece(y[rows], p[rows]), abs=1e-12)
    a = ece_ci(y, p, n_boot=400, seed=2)
    b = ece_ci(y, p, n_boot=400, seed=2, cluster=np.arange(len(y)))
    for col in ("estimate", "std_error", "conf_low", "conf_high"):
        assert a[col].iloc[0] == pytest.approx(b[col].iloc[0], abs=1e-12)
    c = ece_ci(y, p, n_boot=400, seed=2, cluster=pat)
    assert c["method"].iloc[0] == "cluster-bootstrap-basic"
    assert c["n_clusters"].iloc[0] == C and c["estimate"].iloc[0] == a["estimate"].iloc[0]
    with pytest.raises(ValueError, match="equal-width"):
        ece_ci(y, p, strategy="quantile", cluster=pat)


def test_reliability_bins_are_cluster_aware():
    """reliability_table(cluster=): per bin, the ratio estimator's variance over the bin's
    patients (recomputed here with pandas), the design effect against p(1-p)/n, and the
    Wilson interval at Korn & Graubard's effective size."""
    reliability_table = cal.reliability_table
    from scipy import stats as sps

    from stats.intervals import proportion_ci

    y, p, pat = _clustered(1)
    t = reliability_table(y, p, n_bins=10, cluster=pat)
    assert (t["method"] == "wilson-cluster").all()
    b = np.searchsorted(np.linspace(0, 1, 11)[1:-1], p, side="left")
    df = pd.DataFrame({"b": b, "y": y, "pat": pat})
    checked = 0
    for k, g in df.groupby("b"):
        s = g.groupby("pat")["y"].agg(["sum", "size"])
        n, x, C = len(g), g["y"].sum(), len(s)
        if C < 2 or x in (0, n) or (s["size"] == 1).all():
            continue
        ph = x / n
        var = C / (C - 1) * ((s["sum"] - ph * s["size"]) ** 2).sum() / n ** 2
        deff = var / (ph * (1 - ph) / n)
        f = (sps.t.ppf(0.025, n - 1) / sps.t.ppf(0.025, C - 1)) ** 2
        neff = min(n, n / deff * f)
        lo, hi = proportion_ci(np.array([ph * neff]), np.array([neff]), effective=True)
        row = t.iloc[k]
        assert row["design_effect"] == pytest.approx(deff, rel=1e-10)
        assert row["std_error"] == pytest.approx(np.sqrt(var), rel=1e-10)
        assert row["n_clusters"] == C
        assert (row["conf_low"], row["conf_high"]) == pytest.approx((lo[0], hi[0]), abs=1e-10)
        checked += 1
    assert checked >= 6
    plain = reliability_table(y, p, n_bins=10)
    assert not np.allclose(plain["conf_low"], t["conf_low"], equal_nan=True)
