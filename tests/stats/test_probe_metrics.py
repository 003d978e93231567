"""stats.probe_metrics: the runs' AUROC and ECE recomputed from probe predictions, binary
and multiclass (one probability column per class), against scikit-learn's roc_auc_score
(average="macro", multi_class="ovr") and stats.ece run by run; the multiclass contract."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

import stats

KEY = dict(encoder="e", dataset="d", label_fraction=1.0, condition="clean", severity=0)


def _multiclass(n_runs=4, n=120, k=4, seed=0, ties=False):
    rng = np.random.default_rng(seed)
    frames = []
    for r in range(n_runs):
        P = rng.dirichlet(np.ones(k) * 0.7, n)
        if ties:                        # coarse probabilities: many tied scores and edges
            P = np.round(P * 15) / 15
            P[:, -1] = 1 - P[:, :-1].sum(1)
            P = np.clip(P, 0, 1)
            P /= P.sum(1, keepdims=True)
        y = np.array([rng.choice(k, p=p) for p in P])
        frames.append(pd.DataFrame({**KEY, "encoder": f"e{r % 2}", "seed": r,
                                    "case_id": [f"c{i}" for i in range(n)],
                                    "label": [f"class{j}" for j in y],
                                    **{f"prob_class{j}": P[:, j] for j in range(k)}}))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("ties", [False, True])
def test_multiclass_equals_sklearn_macro_ovr_and_top_label_ece(ties):
    df = _multiclass(ties=ties)
    got = stats.probe_metrics(df)
    stats.schema.check_tidy(got)
    cols = [c for c in df.columns if c.startswith("prob_")]
    for (enc, seed), g in df.groupby(["encoder", "seed"]):
        y = g["label"].str.replace("class", "").astype(int).to_numpy()
        P = g[cols].to_numpy()
        row = got[(got["encoder"] == enc) & (got["seed"] == seed)].set_index("estimand")
        want = roc_auc_score(y, P, multi_class="ovr", average="macro")
        assert abs(row.loc["auroc", "estimate"] - want) <= 1e-12
        assert row.loc["auroc", "method"] == "macro-ovr"
        assert abs(row.loc["ece", "estimate"] - stats.ece(y, P)) <= 1e-12
        assert row.loc["ece", "n_classes"] == 4


def test_binary_equals_sklearn_and_stats_ece():
    rng = np.random.default_rng(3)
    frames = []
    for seed in range(3):
        y = rng.integers(0, 2, 200)
        p = np.clip(np.round(rng.beta(2, 2, 200) * 20) / 20 + 0.1 * y, 0, 1)   # ties, edges
        frames.append(pd.DataFrame({**KEY, "seed": seed, "case_id": [f"c{i}" for i in range(200)],
                                    "label": y, "prob": p}))
    df = pd.concat(frames, ignore_index=True)
    got = stats.probe_metrics(df)
    for seed, g in df.groupby("seed"):
        row = got[got["seed"] == seed].set_index("estimand")
        assert abs(row.loc["auroc", "estimate"] - roc_auc_score(g["label"], g["prob"])) <= 1e-12
        assert row.loc["ece", "estimate"] == pytest.approx(stats.ece(g["label"], g["prob"]), abs=1e-15)
        assert row.loc["auroc", "n_pos"] == g["label"].sum()


def test_the_runner_recomputation_agrees():
    """The runner's runs (sklearn AUROC, stats.ece) equal probe_metrics on its predictions."""
    pytest.importorskip("torch")
    from inference_runner.probe import run_metrics

    df = _multiclass(n_runs=1)
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 150)
    p = rng.random(150)
    binary = pd.DataFrame({**KEY, "seed": 0, "case_id": [f"c{i}" for i in range(150)], "label": y,
                           "prob": p})
    got = stats.probe_metrics(binary).set_index("estimand")["estimate"]
    m = run_metrics(y, p, seed=0)
    assert got["auroc"] == pytest.approx(m["auroc"], abs=1e-12)
    assert got["ece"] == m["ece"]
    assert len(df)


def test_a_class_without_cases_is_not_estimable():
    df = _multiclass(n_runs=1, n=30)
    df.loc[df["label"] == "class3", "label"] = "class0"
    got = stats.probe_metrics(df).set_index("estimand")
    assert np.isnan(got.loc["auroc", "estimate"]) and got.loc["auroc", "flag"] == "not_estimable"
    assert np.isfinite(got.loc["ece", "estimate"])


def test_the_multiclass_contract():
    df = _multiclass(n_runs=1, n=10)
    ok = stats.read_probe_predictions(df)
    assert ok.attrs["classes"] == ["class0", "class1", "class2", "class3"]
    bad = df.copy()
    bad.loc[3, "label"] = "class9"
    with pytest.raises(stats.ContractError, match="must name one of the classes"):
        stats.read_probe_predictions(bad)
    bad = df.copy()
    bad.loc[2, "prob_class0"] += 0.1
    with pytest.raises(stats.ContractError, match="must sum to 1"):
        stats.read_probe_predictions(bad)
    with pytest.raises(stats.ContractError, match="at least 2 classes"):
        stats.read_probe_predictions(df.drop(columns=["prob_class1", "prob_class2", "prob_class3"])
                                     .assign(prob_class0=1.0))
    with pytest.raises(stats.ContractError, match="n_bins"):
        stats.probe_metrics(df, n_bins=0)
