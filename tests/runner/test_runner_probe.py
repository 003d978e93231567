"""inference_runner.probe and .corruptions: encoders, stratified subsamples, per-run
metrics against independent recomputation, the runs contract, and the CLI on real files."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from inference_runner import corruptions  # noqa: E402
from inference_runner.probe import (RUN_KEYS, RUNS_COLUMNS, handcrafted_features, make_encoder,  # noqa: E402
                                    run_metrics, run_probe_study, runs_from_predictions,
                                    stratified_subsample)


def _toy(n=80, size=16, seed=0):
    """Images with a bright square in positives."""
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 2).astype(int)
    x = rng.normal(0.4, 0.08, (n, size, size)).astype(np.float32)
    x[y == 1, 5:10, 5:10] += 0.3
    return np.clip(x, 0, 1), y


def test_runner_ece_is_stats_ece_on_edge_values():
    """The runs table's ECE is stats.ece, also for probabilities 0, 1 and exactly on the 15
    bin edges (the runner's own ECE put an edge value in the upper bin and clipped 0/1)."""
    import stats

    edges = np.linspace(0, 1, 16)
    mids = (edges[:-1] + edges[1:]) / 2
    p = np.concatenate([edges, mids, [0.0, 1.0]])          # every edge, 0 and 1 included
    y = np.concatenate([np.ones(16, int), np.zeros(15, int), [1, 0]])
    # upper-bin rule: the bins hold different cases, so the ECE differs (the test can fail)
    upper = np.clip((p * 15).astype(int), 0, 14)
    ece_upper = np.abs(np.bincount(upper, p - y, 15)).sum() / len(p)
    assert abs(stats.ece(y, p) - ece_upper) > 1e-3
    m = run_metrics(y, p, seed=3)
    assert m["ece"] == stats.ece(y, p)
    # after temperature scaling: stats' fit on one half applied to the other, and stats.ece
    z = np.log(np.clip(p, 1e-7, 1 - 1e-7)) - np.log1p(-np.clip(p, 1e-7, 1 - 1e-7))
    fold = np.random.default_rng(3).permutation(len(p)) % 2
    scaled = np.empty_like(p)
    for f in (0, 1):
        scaled[fold == f] = stats.temperature_scale(z[fold != f], y[fold != f], kind="logits").apply(z[fold == f])
    assert m["ece_after_ts"] == stats.ece(y, scaled)


def test_run_metrics_and_temperature_scaling_help_an_overconfident_model():
    from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

    rng = np.random.default_rng(2)
    z = rng.normal(0, 1, 2000)
    y = (rng.random(2000) < 1 / (1 + np.exp(-z))).astype(int)
    p = 1 / (1 + np.exp(-4 * z))  # four times too confident
    m = run_metrics(y, p)
    assert m["auroc"] == pytest.approx(roc_auc_score(y, p))
    assert m["brier"] == pytest.approx(brier_score_loss(y, p))
    assert m["nll"] == pytest.approx(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)))
    assert m["ece_after_ts"] < m["ece"] / 2


def test_stratified_subsample_keeps_two_per_class():
    y = np.array([0] * 90 + [1] * 10)
    idx = stratified_subsample(y, 0.01, np.random.default_rng(0))
    assert (y[idx] == 0).sum() == 2 and (y[idx] == 1).sum() == 2
    idx = stratified_subsample(y, 0.5, np.random.default_rng(0))
    assert (y[idx] == 0).sum() == 45 and (y[idx] == 1).sum() == 5 and len(set(idx)) == len(idx)


@pytest.mark.parametrize("name", corruptions.PERTURBATIONS)
def test_corruptions_keep_shape_and_grow_with_severity(name):
    x, _ = _toy(6)
    before = x.copy()
    dist = [np.abs(corruptions.apply(x, name, s, seed=0) - x).mean() for s in (1, 2, 3)]
    out = corruptions.apply(x, name, 2, seed=0)
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_array_equal(x, before)
    assert dist[0] > 0 and dist[0] < dist[2]
    with pytest.raises(ValueError):
        corruptions.apply(x, name, 4)


@pytest.mark.parametrize("spec", [
    {"name": "h", "kind": "handcrafted"},
    {"name": "r", "kind": "resnet", "depth": "last", "width": 4},
    {"name": "rm", "kind": "resnet", "depth": "mid", "width": 4},
    {"name": "d", "kind": "densenet", "depth": "last", "width": 4},
    {"name": "c", "kind": "cnn", "depth": "mid", "width": 4},
])
def test_encoders_give_finite_deterministic_features(spec):
    x, _ = _toy(10)
    f1 = make_encoder(spec, seed=3)(x)
    f2 = make_encoder(spec, seed=3)(x)
    assert f1.ndim == 2 and len(f1) == 10 and np.isfinite(f1).all()
    np.testing.assert_array_equal(f1, f2)


def test_handcrafted_histogram_sums_to_one():
    x, _ = _toy(4)
    assert np.allclose(handcrafted_features(x)[:, :16].sum(1), 1.0)


def test_probe_study_writes_the_runs_contract():
    import stats

    x, y = _toy(120)
    shift = np.zeros(120, bool)
    shift[:20] = True
    ds = [{"name": "toy", "images": x, "labels": y, "case_ids": [f"c{i}" for i in range(120)],
           "shift_mask": shift}]
    enc = [{"name": "hist", "kind": "handcrafted"}, {"name": "cnn", "kind": "cnn", "depth": "last", "width": 4}]
    runs, preds = run_probe_study(ds, enc, fractions=[0.05, 1.0], perturbations=["blur", "noise"],
                                  severities=[1, 3], seeds=[0, 1])
    assert tuple(runs.columns) == RUNS_COLUMNS
    # per encoder x seed: 2 clean fractions + 4 perturbed + 1 shift
    assert len(runs) == 2 * 2 * 7
    assert set(runs["condition"]) == {"clean", "blur", "noise", "shift"}
    assert (runs.loc[runs["condition"].isin(["clean", "shift"]), "severity"] == 0).all()
    validated = stats.read_runs(runs)
    assert len(validated) == len(runs)
    clean = runs[(runs["condition"] == "clean") & (runs["label_fraction"] == 1.0)]
    assert (clean["auroc"] > 0.9).all()  # a bright square is easy
    # the predictions reproduce each run's AUROC
    from sklearn.metrics import roc_auc_score

    key = ["encoder", "dataset", "label_fraction", "condition", "severity", "seed"]
    for k, g in preds.groupby(key):
        row = runs.set_index(key).loc[k]
        assert row["auroc"] == pytest.approx(roc_auc_score(g["label"], g["prob"]))
        assert row["n_test"] == len(g)
    # the predictions reproduce every metric column exactly (no probe is refitted)
    again = runs_from_predictions(preds)
    pd.testing.assert_frame_equal(again, runs[list(again.columns)])
    shift_ids = set(preds.loc[preds["condition"] == "shift", "case_id"])
    assert shift_ids == {f"c{i}" for i in range(20)}
    assert not shift_ids & set(preds.loc[preds["condition"] == "clean", "case_id"])


def test_cli_probe_on_png_and_npy_files(tmp_path):
    import yaml
    from PIL import Image
    from typer.testing import CliRunner

    from clinrel.cli import app

    x, y = _toy(40)
    rows = []
    for i in range(40):
        name = f"img{i}.png" if i % 2 else f"img{i}.npy"
        if name.endswith(".png"):
            Image.fromarray((x[i] * 255).astype(np.uint8)).save(tmp_path / name)
        else:
            np.save(tmp_path / name, x[i])
        rows.append({"case_id": f"c{i}", "image": name, "label": int(y[i]), "site": "a" if i < 30 else "b"})
    pd.DataFrame(rows).to_csv(tmp_path / "ds.csv", index=False)
    cfg = {"output": "out", "seeds": [0], "datasets": [{"name": "toy", "cases": "ds.csv", "shift_sites": ["b"]}],
           "encoders": [{"name": "hist", "kind": "handcrafted"}], "label_fractions": [0.2, 1.0],
           "perturbations": ["jpeg", "crop"], "severities": [2], "image_size": 16}
    (tmp_path / "probe.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["infer", "probe", "--config", str(tmp_path / "probe.yaml"), "--quiet"])
    assert res.exit_code == 0, res.output
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert len(runs) == 2 + 2 + 1
    assert (tmp_path / "out" / "probe_predictions.parquet").exists()
    assert (tmp_path / "out" / "run_manifest.json").exists()
    cfg["label_fractions"] = [0.5]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["infer", "probe", "--config", str(tmp_path / "bad.yaml")])
    assert res.exit_code == 2 and "label_fractions" in res.output and "bad.yaml" in res.output


@pytest.mark.parametrize("change, key", [
    ({"encoders": [{"name": "a", "kind": "handcrafted"}, {"name": "a", "kind": "cnn"}]}, "encoders[1].name"),
    ({"encoders": [{"name": "a", "kind": "vit"}]}, "encoders[0].kind"),
    ({"encoders": [{"name": "a", "kind": "cnn", "layers": 3}]}, "encoders[0].layers"),
    ({"datasets": []}, "datasets"),
    ({"seeds": [0, 0]}, "seeds"),
    ({"severities": [4]}, "severities"),
    ({"perturbations": ["fog"]}, "perturbations"),
])
def test_probe_config_errors_name_file_key_and_fix(tmp_path, change, key):
    from inference_runner.config import ConfigError, validate_probe_config

    pd.DataFrame({"case_id": ["a"], "image": ["a.npy"], "label": [0]}).to_csv(tmp_path / "d.csv", index=False)
    cfg = {"output": "o", "datasets": [{"name": "d", "cases": "d.csv"}], **change}
    with pytest.raises(ConfigError) as exc:
        validate_probe_config(cfg, file="probe.yaml", base=tmp_path)
    assert "probe.yaml" in str(exc.value) and f"'{key}'" in str(exc.value)


def test_encoder_weights_from_a_local_file_are_used(tmp_path):
    import torch

    from inference_runner.probe import build_encoder_net, network_features

    net, depth = build_encoder_net("resnet", width=4, seed=11)
    torch.save(net.state_dict(), tmp_path / "enc.pt")
    x, _ = _toy(6)
    expected = network_features(net, depth["last"], x)
    spec = {"name": "r", "kind": "resnet", "depth": "last", "width": 4, "weights": str(tmp_path / "enc.pt")}
    got = make_encoder(spec, seed=0)(x)  # another init seed: only the loaded weights can match
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(make_encoder({**spec, "weights": None}, seed=0)(x), expected)


# --------------------------------------------------------------------------- adapted regime


def test_lora_targets_stop_at_the_probed_depth():
    from inference_runner.probe import build_encoder_net, lora_targets

    net, depth = build_encoder_net("resnet", width=4, seed=0)
    mid = lora_targets(net, depth["mid"])
    assert mid[0] == "conv1" and any(t.startswith("layer2.") for t in mid)
    assert not any(t.startswith(("layer3.", "layer4.")) for t in mid)
    last = lora_targets(net, depth["last"])
    assert set(mid) < set(last) and any(t.startswith("layer4.") for t in last)


@pytest.mark.parametrize("kind", ["resnet", "densenet", "cnn", "handcrafted"])
def test_adapted_model_starts_as_the_frozen_probe_and_moves_only_adapters(kind):
    """With zero steps the adapted model (LoRA B = 0, head = the probe's solution) gives the
    frozen probe's probabilities (float32 vs float64: 1e-5); with steps it moves, the
    encoder's own weights stay as they were, and two runs with one seed agree exactly."""
    import torch

    from inference_runner.probe import Encoder, _fit_probe, adapt_probe

    x, y = _toy(60, size=16, seed=3)
    spec = {"name": "e", "kind": kind, "depths": ["mid"], "width": 4}
    enc = Encoder(spec, seed=1)
    layer = enc.layers[0]
    f = enc.features(x, layer)
    model = _fit_probe(f, y)
    frozen = model.predict_proba(f)[:, 1]
    kw = dict(features=f) if kind == "handcrafted" else {}
    before = None if enc.net is None else {k: v.clone() for k, v in enc.net.state_dict().items()}
    p0 = adapt_probe(enc, layer, x, y, model, seed=0, steps=0, **kw)
    np.testing.assert_allclose(p0(f if kind == "handcrafted" else x), frozen, atol=1e-5)
    p1 = adapt_probe(enc, layer, x, y, model, seed=0, steps=15, lr=1e-2, **kw)
    p2 = adapt_probe(enc, layer, x, y, model, seed=0, steps=15, lr=1e-2, **kw)
    inp = f if kind == "handcrafted" else x
    np.testing.assert_array_equal(p1(inp), p2(inp))
    if kind != "handcrafted":      # the head alone starts at its optimum: it barely moves
        assert np.abs(p1(inp) - frozen).max() > 1e-3
        for k, v in enc.net.state_dict().items():
            torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_probe_study_with_two_depths_and_the_adapted_regime():
    """Frozen and adapted runs at two depths: the same test cases, splits and subsamples
    in every arm (paired), the runs contract read back with protocol and layer as run
    keys, val_auroc on the clean full-label runs only, and the predictions reproducing
    every run's metrics."""
    import stats

    x, y = _toy(100, size=16)
    shift = np.zeros(100, bool)
    shift[:16] = True
    ds = [{"name": "toy", "images": x, "labels": y, "case_ids": [f"c{i}" for i in range(100)],
           "shift_mask": shift}]
    enc = [{"name": "cnn", "kind": "cnn", "depths": ["mid", "last"], "width": 4},
           {"name": "hist", "kind": "handcrafted"}]
    runs, preds = run_probe_study(ds, enc, fractions=[0.2, 1.0], perturbations=["blur"],
                                  severities=[2], seeds=[0, 1],
                                  adapt={"enabled": True, "steps": 5, "batch_size": 16})
    assert tuple(runs.columns) == RUNS_COLUMNS
    arms = runs.groupby(["encoder", "layer", "regime", "protocol"]).size()
    assert set(arms.index) == {("cnn", "mid", "frozen", "probe"), ("cnn", "mid", "adapted", "lora"),
                               ("cnn", "last", "frozen", "probe"), ("cnn", "last", "adapted", "lora"),
                               ("hist", "features", "frozen", "probe"),
                               ("hist", "features", "adapted", "lora")}
    assert (arms == 2 * (2 + 1 + 1)).all()           # seeds x (2 clean + blur + shift)
    read = stats.read_runs(runs)
    assert len(read) == len(runs)
    has_val = runs["val_auroc"].notna()
    full_clean = (runs["condition"] == "clean") & (runs["label_fraction"] == 1.0)
    assert (has_val == full_clean).all()
    # paired: every arm scores the same cases in each run key
    key = ["dataset", "label_fraction", "condition", "severity", "seed"]
    cases = preds.groupby([*key, "encoder", "layer", "regime"])["case_id"].apply(frozenset)
    assert (cases.groupby(level=key).nunique() == 1).all()
    pp = stats.read_probe_predictions(preds)
    assert len(pp) == len(preds)
    again = runs_from_predictions(preds)
    merged = again.merge(runs, on=["regime", "protocol", "layer", *RUN_KEYS], suffixes=("", "_runs"))
    assert len(merged) == len(runs)
    for col in ("auroc", "ece", "brier", "nll", "ece_after_ts"):
        np.testing.assert_array_equal(merged[col], merged[f"{col}_runs"])


def test_probe_config_depths_and_adapt(tmp_path):
    from inference_runner.config import ConfigError, validate_probe_config

    pd.DataFrame({"case_id": ["a"], "image": ["a.npy"], "label": [0]}).to_csv(tmp_path / "d.csv", index=False)
    base = {"output": "o", "datasets": [{"name": "d", "cases": "d.csv"}]}
    cfg = validate_probe_config({**base, "encoders": [{"name": "r", "kind": "resnet",
                                                       "depths": ["mid", "last"]}],
                                 "adapt": {"enabled": True, "steps": 3}}, file="p.yaml", base=tmp_path)
    assert cfg["adapt"] == {"enabled": True, "rank": 4, "alpha": 8.0, "steps": 3, "lr": 0.003,
                            "batch_size": 256}
    for change, key in (({"encoders": [{"name": "r", "kind": "resnet", "depths": ["deep"]}]},
                         "encoders[0].depths"),
                        ({"encoders": [{"name": "r", "kind": "resnet", "depths": ["mid", "mid"]}]},
                         "encoders[0].depths"),
                        ({"adapt": {"rank": 0}}, "adapt.rank"), ({"adapt": {"lr": -1}}, "adapt.lr"),
                        ({"adapt": {"enabled": "yes"}}, "adapt.enabled"),
                        ({"adapt": {"dropout": 0.1}}, "adapt.dropout")):
        with pytest.raises(ConfigError) as exc:
            validate_probe_config({**base, **change}, file="p.yaml", base=tmp_path)
        assert f"'{key}'" in str(exc.value)
