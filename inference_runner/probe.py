"""Frozen encoders -> features -> logistic probes -> the runs table (CRS half).

Encoders are built in code: small random-initialised MONAI networks (``ResNet`` with
``spatial_dims=2``, ``DenseNet``; local weights when given), a plain torch CNN, and a
handcrafted baseline (intensity histogram + gradient/Laplacian texture statistics).
Features come from the last layer or an intermediate depth (global average pooling of
the block's output), computed once per image and condition.

Per encoder x dataset x seed: a stratified train/test split (``random_state=seed``);
per label fraction a stratified subsample of the training set (at least 2 per class);
a scikit-learn ``LogisticRegression`` on standardised clean features; evaluated on the
clean test set (every fraction) and, at fraction 1, on the perturbed test set for every
perturbation x severity and on the held-out shift sites (``condition == "shift"``).

Per run (the runs contract): ``auroc``; ``ece`` (:func:`stats.ece`: 15 equal-width bins,
sum of |mean prob - event rate| weighted by bin share); ``brier``; ``nll`` (mean log loss);
``ece_after_ts`` (:func:`stats.temperature_scale` fitted on one half of the test set and
applied to the other half, both ways: two-fold cross-fitting). The runner computes these
with ``stats`` (it may import it; ``stats`` never imports the runner), and
:func:`runs_from_predictions` recomputes them from ``probe_predictions``.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .corruptions import apply as perturb

RUN_KEYS = ("encoder", "dataset", "label_fraction", "condition", "severity", "seed")
RUNS_COLUMNS = (*RUN_KEYS, "regime", "layer", "auroc", "ece", "brier", "nll", "ece_after_ts",
                "n_train", "n_test")
N_BINS = 15


# --------------------------------------------------------------------------- metrics


def run_metrics(label, prob, *, seed: int = 0) -> dict[str, float]:
    """auroc, ece, brier, nll and ece_after_ts (two-fold cross-fitted temperature).

    ECE and temperature scaling are ``stats``' (:func:`stats.ece`, 15 equal-width bins,
    an edge value in the lower bin; :func:`stats.temperature_scale`), so the runs table
    and the calibration section measure the same thing. ``ece`` is computed on the
    probabilities as given; Brier, NLL and the logits use them clipped to
    [1e-7, 1 - 1e-7]. The folds of ``ece_after_ts`` are
    ``default_rng(seed).permutation(n) % 2``: each half is scaled by the temperature fitted
    on the other half.
    """
    import stats
    from sklearn.metrics import roc_auc_score

    label = np.asarray(label, int)
    raw = np.asarray(prob, float)
    prob = np.clip(raw, 1e-7, 1 - 1e-7)
    out = {"auroc": float("nan"), "ece": stats.ece(label, raw, n_bins=N_BINS), "brier": stats.brier(label, prob),
           "nll": stats.nll(label, prob), "ece_after_ts": float("nan")}
    if label.min() == label.max():
        return out
    out["auroc"] = float(roc_auc_score(label, prob))
    logit = np.log(prob) - np.log1p(-prob)
    fold = np.random.default_rng(seed).permutation(len(label)) % 2
    scaled = np.empty_like(prob)
    for f in (0, 1):
        fit = stats.temperature_scale(logit[fold != f], label[fold != f], kind="logits")
        scaled[fold == f] = fit.apply(logit[fold == f])
    out["ece_after_ts"] = stats.ece(label, scaled, n_bins=N_BINS)
    return out


def runs_from_predictions(predictions: pd.DataFrame) -> pd.DataFrame:
    """Recompute the metric columns of the runs table from ``probe_predictions``.

    One row per run (``RUN_KEYS``, in order of first appearance) with ``auroc``, ``ece``,
    ``brier``, ``nll``, ``ece_after_ts`` (:func:`run_metrics`, seeded by the run's
    ``seed``, on the run's cases in their stored order, as :func:`probe_dataset` computed
    them) and ``n_test``. Deterministic: no probe is refitted.
    """
    rows = []
    for key, g in predictions.groupby(list(RUN_KEYS), sort=False):
        m = run_metrics(g["label"].to_numpy(), g["prob"].to_numpy(), seed=int(key[-1]))
        rows.append({**dict(zip(RUN_KEYS, key)), **m, "n_test": len(g)})
    return pd.DataFrame(rows, columns=[*RUN_KEYS, "auroc", "ece", "brier", "nll", "ece_after_ts",
                                       "n_test"])


# --------------------------------------------------------------------------- encoders


def handcrafted_features(images: np.ndarray, n_bins: int = 16) -> np.ndarray:
    """Histogram (``n_bins`` on [0, 1]), intensity moments/quantiles, gradient and
    Laplacian texture statistics per image: (N, n_bins + 12)."""
    from scipy import ndimage

    x = np.asarray(images, np.float32)
    n = len(x)
    flat = x.reshape(n, -1)
    idx = np.clip((flat * n_bins).astype(int), 0, n_bins - 1)
    hist = np.zeros((n, n_bins), np.float32)
    np.add.at(hist, (np.repeat(np.arange(n), flat.shape[1]), idx.ravel()), 1.0)
    hist /= flat.shape[1]
    gy = ndimage.sobel(x, axis=1)
    gx = ndimage.sobel(x, axis=2)
    grad = np.hypot(gx, gy).reshape(n, -1)
    lap = ndimage.laplace(x, mode="nearest").reshape(n, -1)
    q = np.quantile(flat, [0.05, 0.25, 0.5, 0.75, 0.95], axis=1).T
    stats = np.column_stack([flat.mean(1), flat.std(1), q, grad.mean(1), grad.std(1),
                             np.abs(lap).mean(1), lap.std(1), (grad > 0.2).mean(1)])
    return np.column_stack([hist, stats]).astype(np.float32)


def build_encoder_net(kind: str, *, width: int = 8, seed: int = 0):
    """A random-initialised 2D network (eval mode) and the module names for last/mid depth."""
    import torch
    from monai.networks import nets

    torch.manual_seed(seed)
    w = width
    if kind in ("resnet", "resnet18"):
        layers = [1, 1, 1, 1] if kind == "resnet" else [2, 2, 2, 2]
        net = nets.ResNet(block="basic", layers=layers, block_inplanes=[w, 2 * w, 4 * w, 8 * w],
                          spatial_dims=2, n_input_channels=1, num_classes=2, feed_forward=False)
        depth = {"last": "layer4", "mid": "layer2"}
    elif kind == "densenet":
        net = nets.DenseNet(spatial_dims=2, in_channels=1, out_channels=2, init_features=w,
                            growth_rate=w, block_config=(2, 2, 2))
        depth = {"last": "features.norm5", "mid": "features.transition1"}
    elif kind == "cnn":
        c = torch.nn
        net = c.Sequential(c.Conv2d(1, w, 3, padding=1), c.ReLU(), c.MaxPool2d(2),
                           c.Conv2d(w, 2 * w, 3, padding=1), c.ReLU(), c.MaxPool2d(2),
                           c.Conv2d(2 * w, 4 * w, 3, padding=1), c.ReLU())
        depth = {"last": "5", "mid": "2"}
    else:
        raise ValueError(f"unknown encoder kind {kind!r}")
    return net.eval(), depth


def network_features(net, module_name: str, images: np.ndarray, *, batch_size: int = 256,
                     device=None) -> np.ndarray:
    """Global-average- and max-pooled activations of ``module_name`` for ``images`` (N, H, W)."""
    import torch

    device = device or torch.device("cpu")
    module = dict(net.named_modules())[module_name]
    store: list = []
    handle = module.register_forward_hook(lambda m, i, o: store.append(o))
    net = net.to(device).eval()
    out = []
    try:
        with torch.inference_mode():
            for i in range(0, len(images), batch_size):
                store.clear()
                x = torch.as_tensor(np.asarray(images[i:i + batch_size], np.float32))[:, None].to(device)
                net(x)
                a = store[-1].float()
                out.append(torch.cat([a.mean(dim=(2, 3)), a.amax(dim=(2, 3))], 1).cpu().numpy())
    finally:
        handle.remove()
    return np.concatenate(out).astype(np.float32)


def make_encoder(spec: Mapping, *, seed: int = 0, device=None) -> Callable[[np.ndarray], np.ndarray]:
    """``spec`` (name, kind, depth, width, weights) -> a function images -> features."""
    if spec["kind"] == "handcrafted":
        return handcrafted_features
    net_seed = seed + zlib.crc32(str(spec["name"]).encode()) % 10_000
    net, depth = build_encoder_net(spec["kind"], width=int(spec.get("width", 8)), seed=net_seed)
    if spec.get("weights"):
        from .segment import load_weights

        load_weights(net, spec["weights"])
    name = depth[spec.get("depth", "last")]
    return lambda images: network_features(net, name, images, device=device)


# --------------------------------------------------------------------------- probes


def stratified_subsample(label: np.ndarray, fraction: float, rng: np.random.Generator,
                         min_per_class: int = 2) -> np.ndarray:
    """Indices of a stratified subsample: per class max(min_per_class, round(f * n_c))."""
    label = np.asarray(label)
    keep = []
    for c in np.unique(label):
        idx = np.flatnonzero(label == c)
        k = min(len(idx), max(min_per_class, int(round(fraction * len(idx)))))
        keep.append(rng.choice(idx, size=k, replace=False))
    return np.sort(np.concatenate(keep))


def _fit_probe(x, y):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=0.5, max_iter=2000)).fit(x, y)


def probe_dataset(features: Mapping[tuple[str, int], np.ndarray], labels: np.ndarray,
                  case_ids: Sequence[str], *, encoder: str, dataset: str,
                  fractions: Sequence[float], seeds: Sequence[int], test_fraction: float = 0.3,
                  shift_mask: np.ndarray | None = None, layer: str = "last",
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Probe runs for one encoder x dataset.

    ``features[(condition, severity)]`` holds (N, D) features of every image under that
    condition (``("clean", 0)`` required). ``shift_mask`` marks cases from held-out sites:
    never used for training, evaluated as condition ``shift`` at fraction 1.
    Returns ``(runs, predictions)``.
    """
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels, int)
    case_ids = np.asarray(case_ids, dtype=object)
    home = np.flatnonzero(~shift_mask) if shift_mask is not None else np.arange(len(labels))
    shift = np.flatnonzero(shift_mask) if shift_mask is not None else np.array([], int)
    runs, preds = [], []
    for seed in seeds:
        tr, te = train_test_split(home, test_size=test_fraction, stratify=labels[home],
                                  random_state=seed)
        rng = np.random.default_rng([seed, zlib.crc32(f"{encoder}|{dataset}".encode())])
        for f in sorted(fractions):
            sub = tr if f >= 1 else tr[stratified_subsample(labels[tr], f, rng)]
            model = _fit_probe(features[("clean", 0)][sub], labels[sub])
            evals = [("clean", 0, te)]
            if f >= 1:
                evals += [(c, s, te) for (c, s) in features if c != "clean"]
                if len(shift) and len(np.unique(labels[shift])) == 2:
                    evals.append(("shift", 0, shift))
            for cond, sev, idx in evals:
                feats = features[("clean", 0) if cond == "shift" else (cond, sev)][idx]
                prob = model.predict_proba(feats)[:, 1]
                m = run_metrics(labels[idx], prob, seed=seed)
                key = dict(encoder=encoder, dataset=dataset, label_fraction=float(f), condition=cond,
                           severity=int(sev), seed=int(seed))
                runs.append({**key, "regime": "frozen", "layer": layer, **m,
                             "n_train": len(sub), "n_test": len(idx)})
                preds.append(pd.DataFrame({**key, "case_id": case_ids[idx], "label": labels[idx],
                                           "prob": prob}))
    return pd.DataFrame(runs, columns=list(RUNS_COLUMNS)), pd.concat(preds, ignore_index=True)


def condition_images(images: np.ndarray, perturbations: Sequence[str], severities: Sequence[int],
                     *, seed: int = 0) -> dict[tuple[str, int], np.ndarray]:
    """Clean images and every perturbation x severity (deterministic given ``seed``)."""
    out = {("clean", 0): np.asarray(images, np.float32)}
    for j, p in enumerate(perturbations):
        for s in severities:
            out[(p, int(s))] = perturb(images, p, int(s), seed=[seed, j, int(s)])
    return out


def run_probe_study(datasets: Sequence[Mapping], encoders: Sequence[Mapping], *,
                    fractions: Sequence[float], perturbations: Sequence[str],
                    severities: Sequence[int], seeds: Sequence[int], seed: int = 0,
                    test_fraction: float = 0.3, device=None,
                    advance: Callable[[int], None] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All probe runs. ``datasets``: dicts with name, images (N, H, W) in [0, 1], labels,
    case_ids and optional shift_mask. Returns ``(runs, probe_predictions)``."""
    runs, preds = [], []
    for d in datasets:
        cond = condition_images(d["images"], perturbations, severities, seed=seed)
        for e in encoders:
            enc = make_encoder(e, seed=seed, device=device)
            feats = {k: enc(v) for k, v in cond.items()}
            r, p = probe_dataset(feats, d["labels"], d["case_ids"], encoder=e["name"],
                                 dataset=d["name"], fractions=fractions, seeds=seeds,
                                 test_fraction=test_fraction, shift_mask=d.get("shift_mask"),
                                 layer=e.get("depth", "last") if e["kind"] != "handcrafted" else "features")
            runs.append(r)
            preds.append(p)
            if advance:
                advance(1)
    return pd.concat(runs, ignore_index=True), pd.concat(preds, ignore_index=True)


# --------------------------------------------------------------------------- files


def load_image_2d(path, size: int) -> np.ndarray:
    """A 2D image in [0, 1] at ``size`` x ``size``: .npy (2D, or 3D -> middle slice of the
    last axis), .png/.jpg (PIL), or NIfTI/DICOM via MONAI LoadImage (middle slice).
    Intensities are min-max scaled per image."""
    import torch
    import torch.nn.functional as F

    p = Path(path)
    suffix = "".join(p.suffixes).lower()
    if suffix.endswith(".npy"):
        arr = np.load(p)
    elif suffix.endswith((".png", ".jpg", ".jpeg")):
        from PIL import Image

        arr = np.asarray(Image.open(p).convert("L"), dtype=np.float32)
    else:
        from monai.transforms import LoadImage

        arr = np.asarray(LoadImage(image_only=True)(str(p)))
    arr = np.asarray(arr, np.float32)
    while arr.ndim > 2:
        arr = arr[..., arr.shape[-1] // 2]
    lo, hi = float(arr.min()), float(arr.max())
    arr = (arr - lo) / (hi - lo) if hi > lo else np.zeros_like(arr)
    t = torch.from_numpy(np.ascontiguousarray(arr))[None, None]
    return F.interpolate(t, size=(size, size), mode="bilinear", align_corners=False)[0, 0].numpy()


def read_probe_dataset(spec: Mapping, size: int) -> dict:
    """A dataset CSV (case_id, image, label[, site]) -> arrays for :func:`run_probe_study`."""
    from .config import ConfigError

    file = Path(spec["cases"])
    df = pd.read_csv(file, dtype={"case_id": str})
    missing = {"case_id", "image", "label"} - set(df.columns)
    if missing:
        raise ConfigError(f"{file}: probe dataset needs columns case_id, image, label; "
                          f"missing {sorted(missing)}; add them")
    if not df["label"].isin([0, 1]).all():
        rows = (np.flatnonzero(~df["label"].isin([0, 1]))[:5] + 1).tolist()
        raise ConfigError(f"{file}: column 'label' must be 0/1; rows {rows}; recode them")
    paths = [s if Path(s).is_absolute() else str(file.parent / s) for s in df["image"].astype(str)]
    images = np.stack([load_image_2d(p, size) for p in paths])
    shift = None
    if spec.get("shift_sites"):
        if "site" not in df.columns:
            raise ConfigError(f"{file}: shift_sites given but the CSV has no 'site' column; add it")
        shift = df["site"].astype(str).isin([str(s) for s in spec["shift_sites"]]).to_numpy()
    return {"name": spec["name"], "images": images, "labels": df["label"].to_numpy(int),
            "case_ids": df["case_id"].to_numpy(object), "shift_mask": shift}


def run_from_config(cfg: Mapping, *, advance: Callable[[int], None] | None = None) -> dict:
    """``clinrel infer probe``: read the datasets, run every probe, write
    ``runs.parquet``, ``probe_predictions.parquet`` and ``run_manifest.json`` into the
    config's output folder. Returns ``{"n_runs", "output"}``."""
    from monai.utils import set_determinism

    from .config import config_hash
    from .segment import select_device
    from .writers import write_manifest, write_parquet

    set_determinism(seed=cfg["seed"])
    device = select_device(cfg["device"])
    datasets = [read_probe_dataset(d, cfg["image_size"]) for d in cfg["datasets"]]
    runs, preds = run_probe_study(datasets, cfg["encoders"], fractions=cfg["label_fractions"],
                                  perturbations=cfg["perturbations"], severities=cfg["severities"],
                                  seeds=cfg["seeds"], seed=cfg["seed"],
                                  test_fraction=cfg["test_fraction"], device=device, advance=advance)
    out = Path(cfg["output"])
    write_parquet(runs, out / "runs.parquet")
    write_parquet(preds, out / "probe_predictions.parquet")
    write_manifest(out, kind="probe", config_hash=config_hash(cfg), seed=cfg["seed"], device=device,
                   tables={"runs": runs, "probe_predictions": preds}, extra={"config": cfg})
    return {"n_runs": len(runs), "output": str(out)}
