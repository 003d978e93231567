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

Feature depth: an encoder may name several depths (``depths: [mid, last]``); every depth
is probed on the same splits, subsamples and seeds, and its runs carry ``layer`` (the
runs contract's), so that depth is analysed as a factor, not as another encoder.

Adapted regime (``adapt``): per encoder, depth, dataset, seed and label fraction, LoRA
adapters (``peft``'s LoRA for ``torch.nn.Conv2d``: a rank-r convolution A with the base
kernel's shape and a 1x1 convolution B initialised at 0, added to the frozen convolution
scaled by alpha / r) on every convolution up to the probed depth, trained briefly with the
probe's head: the head starts at the frozen probe's solution (its standardisation and
logistic coefficients), the loss is the probe's own objective (mean log loss plus
``||w||^2 / (2 C n)``, C = 0.5), Adam for ``steps`` steps on mini-batches of the same
training subsample, batch-norm statistics frozen. At the start (B = 0) the adapted model
is the frozen probe exactly. Its runs have ``regime == "adapted"``, ``protocol ==
"lora"`` (frozen runs: ``"probe"``), evaluated on the same test cases, perturbations and
shift. An encoder without layers (handcrafted) has no adapter: its adapted runs train the
head alone, from the probe's solution of the same objective, and so reproduce the frozen
probe up to the optimiser's error.

Validation: at label fraction 1 a stratified quarter of the training split
(``random_state=seed``) is held out, the probe (and, adapted, its adapters) fitted on the
rest and scored there: ``val_auroc`` of the clean fraction-1 run (the criterion that picks
an encoder's best layer; never the test cases).

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
RUNS_COLUMNS = (*RUN_KEYS, "regime", "protocol", "layer", "auroc", "ece", "brier", "nll",
                "ece_after_ts", "val_auroc", "n_train", "n_test")
#: the columns that, beside RUN_KEYS, identify a run (and a prediction's run)
VARIANT_KEYS = ("regime", "protocol", "layer")
N_BINS = 15
#: LoRA settings of the adapted regime (config key ``adapt``)
ADAPT_DEFAULTS = {"enabled": False, "rank": 4, "alpha": 8.0, "steps": 40, "lr": 3e-3,
                  "batch_size": 256}
#: the probe's inverse L2 strength (LogisticRegression C); the adapted head keeps it
PROBE_C = 0.5
#: the share of the training split held out for val_auroc (at label fraction 1)
VALIDATION_SHARE = 0.25


# --------------------------------------------------------------------------- metrics


def run_metrics(label, prob, *, seed: int = 0) -> dict[str, float]:
    """auroc, ece, brier, nll and ece_after_ts (two-fold cross-fitted temperature).

    ECE and temperature scaling are ``stats``' (:func:`stats.ece`, 15 equal-width bins,
    an edge value in the lower bin; :func:`stats.temperature_scale`), so the runs table
    and the calibration section measure the same thing. ``auroc`` and ``ece`` are computed
    on the probabilities as given (clipping would tie the most confident cases and move
    the AUROC); Brier, NLL and the logits use them clipped to [1e-7, 1 - 1e-7]. The folds of ``ece_after_ts`` are
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
    out["auroc"] = float(roc_auc_score(label, raw))   # unclipped: clipping ties extremes
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

    One row per run (``regime``, ``protocol``, ``layer`` where present and ``RUN_KEYS``, in
    order of first appearance) with ``auroc``, ``ece``,
    ``brier``, ``nll``, ``ece_after_ts`` (:func:`run_metrics`, seeded by the run's
    ``seed``, on the run's cases in their stored order, as :func:`probe_dataset` computed
    them) and ``n_test``. Deterministic: no probe is refitted.
    """
    keys = [*(c for c in VARIANT_KEYS if c in predictions.columns), *RUN_KEYS]
    rows = []
    for key, g in predictions.groupby(keys, sort=False):
        m = run_metrics(g["label"].to_numpy(), g["prob"].to_numpy(), seed=int(key[-1]))
        rows.append({**dict(zip(keys, key)), **m, "n_test": len(g)})
    return pd.DataFrame(rows, columns=[*keys, "auroc", "ece", "brier", "nll", "ece_after_ts",
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


def depths_of(spec: Mapping) -> list[str]:
    """The depths an encoder spec probes: ``depths`` (a list), else ``[depth]``; a
    handcrafted encoder has one, ``features``."""
    if spec["kind"] == "handcrafted":
        return ["features"]
    d = spec.get("depths") or [spec.get("depth", "last")]
    return [d] if isinstance(d, str) else list(d)


class Encoder:
    """A built encoder: frozen features at each of its depths, and the network (None for
    the handcrafted baseline) with the module name of each depth, for adaptation."""

    def __init__(self, spec: Mapping, *, seed: int = 0, device=None):
        self.spec, self.device = spec, device
        self.layers = depths_of(spec)
        self.net, self.modules = None, {}
        if spec["kind"] != "handcrafted":
            net_seed = seed + zlib.crc32(str(spec["name"]).encode()) % 10_000
            net, depth = build_encoder_net(spec["kind"], width=int(spec.get("width", 8)), seed=net_seed)
            if spec.get("weights"):
                from .segment import load_weights

                load_weights(net, spec["weights"])
            self.net, self.modules = net, {lay: depth[lay] for lay in self.layers}

    def features(self, images: np.ndarray, layer: str) -> np.ndarray:
        if self.net is None:
            return handcrafted_features(images)
        return network_features(self.net, self.modules[layer], images, device=self.device)


def make_encoder(spec: Mapping, *, seed: int = 0, device=None) -> Callable[[np.ndarray], np.ndarray]:
    """``spec`` (name, kind, depth, width, weights) -> a function images -> features (the
    first of its depths)."""
    enc = Encoder(spec, seed=seed, device=device)
    return lambda images: enc.features(images, enc.layers[0])


# --------------------------------------------------------------------------- adaptation


def lora_targets(net, module_name: str) -> list[str]:
    """The convolutions a probe of ``module_name`` depends on: every ``Conv2d`` registered
    up to the end of that module's subtree (module registration order is the forward order
    of the MONAI and torch networks built here)."""
    import torch

    names = [n for n, _ in net.named_modules()]
    end = max(i for i, n in enumerate(names) if n == module_name or n.startswith(module_name + "."))
    mods = dict(net.named_modules())
    return [n for n in names[:end + 1] if isinstance(mods[n], torch.nn.Conv2d)]


class _Head:
    """The probe's standardisation and logistic coefficients as torch tensors."""

    def __init__(self, model, torch):
        scaler, clf = model[0], model[-1]
        self.mean = torch.as_tensor(scaler.mean_, dtype=torch.float32)
        self.scale = torch.as_tensor(scaler.scale_, dtype=torch.float32)
        self.w = torch.nn.Parameter(torch.as_tensor(clf.coef_[0], dtype=torch.float32).clone())
        self.b = torch.nn.Parameter(torch.as_tensor(clf.intercept_, dtype=torch.float32).clone())

    def logit(self, f):
        return ((f - self.mean) / self.scale) @ self.w + self.b


def _pooled(a):
    return __import__("torch").cat([a.mean(dim=(2, 3)), a.amax(dim=(2, 3))], 1)


def adapt_probe(encoder: Encoder, layer: str, images: np.ndarray, labels: np.ndarray,
                model, *, seed: int, rank: int = 4, alpha: float = 8.0, steps: int = 40,
                lr: float = 3e-3, batch_size: int = 256, features: np.ndarray | None = None):
    """LoRA adaptation of ``encoder`` at ``layer`` with the probe ``model`` as the head's
    start (module docstring). ``images``/``labels``: the training subsample (``features``:
    their frozen features, for an encoder without layers). Returns ``predict(images or
    features) -> prob``."""
    import copy

    import torch

    g = torch.Generator().manual_seed(int(seed))
    head = _Head(model, torch)
    y = torch.as_tensor(np.asarray(labels, np.float32))
    n = len(y)
    params = [head.w, head.b]
    if encoder.net is None:
        x_all = torch.as_tensor(np.asarray(features, np.float32))

        def feats(idx):
            return x_all[idx]
        net = None
    else:
        import re

        from peft import LoraConfig, inject_adapter_in_model

        name = encoder.modules[layer]
        net = copy.deepcopy(encoder.net).eval()
        targets = lora_targets(net, name)
        torch.manual_seed(int(seed))            # the adapters' A initialisation
        cfg = LoraConfig(r=int(rank), lora_alpha=float(alpha), lora_dropout=0.0, bias="none",
                         target_modules="|".join(re.escape(t) for t in targets))
        net = inject_adapter_in_model(cfg, net)
        for p_name, p in net.named_parameters():
            p.requires_grad_("lora_" in p_name)
        params += [p for p in net.parameters() if p.requires_grad]
        module = dict(net.named_modules())[name]
        store: list = []
        module.register_forward_hook(lambda m, i, o: store.append(o))
        x_img = torch.as_tensor(np.asarray(images, np.float32))[:, None]

        def feats(idx):
            store.clear()
            net(x_img[idx])
            return _pooled(store[-1].float())
    opt = torch.optim.Adam(params, lr=float(lr))
    l2 = 1.0 / (2.0 * PROBE_C * n)
    for _ in range(int(steps)):
        idx = (torch.randperm(n, generator=g)[:batch_size] if n > batch_size
               else torch.arange(n))
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head.logit(feats(idx)), y[idx]) \
            + l2 * (head.w ** 2).sum()
        loss.backward()
        opt.step()

    def predict(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            if net is None:
                f = torch.as_tensor(np.asarray(x, np.float32))
                return torch.sigmoid(head.logit(f)).numpy().astype(np.float64)
            out = []
            t = torch.as_tensor(np.asarray(x, np.float32))[:, None]
            for i in range(0, len(t), 512):
                store.clear()
                net(t[i:i + 512])
                out.append(torch.sigmoid(head.logit(_pooled(store[-1].float()))))
            return torch.cat(out).numpy().astype(np.float64)
    return predict


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


def _auroc(y, p) -> float:
    """AUROC (scikit-learn), NaN when one class only."""
    from sklearn.metrics import roc_auc_score

    y = np.asarray(y)
    return float(roc_auc_score(y, p)) if y.min() != y.max() else float("nan")


def probe_dataset(features: Mapping[tuple[str, int], np.ndarray], labels: np.ndarray,
                  case_ids: Sequence[str], *, encoder: str, dataset: str,
                  fractions: Sequence[float], seeds: Sequence[int], test_fraction: float = 0.3,
                  shift_mask: np.ndarray | None = None, layer: str = "last",
                  adapt: Callable | None = None, validation: bool = True,
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Probe runs for one encoder x layer x dataset.

    ``features[(condition, severity)]`` holds (N, D) features of every image under that
    condition (``("clean", 0)`` required). ``shift_mask`` marks cases from held-out sites:
    never used for training, evaluated as condition ``shift`` at fraction 1.
    ``adapt(train_idx, model, seed) -> predict(condition, severity, idx) -> prob``: the
    adapted regime (``regime == "adapted"``, ``protocol == "lora"``) on the same
    training subsample, starting from the frozen probe ``model``. ``validation``: at
    fraction 1, ``val_auroc`` from a held-out quarter of the training split (both regimes).
    Returns ``(runs, predictions)``.
    """
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels, int)
    case_ids = np.asarray(case_ids, dtype=object)
    home = np.flatnonzero(~shift_mask) if shift_mask is not None else np.arange(len(labels))
    shift = np.flatnonzero(shift_mask) if shift_mask is not None else np.array([], int)
    clean = features[("clean", 0)]
    runs, preds = [], []
    for seed in seeds:
        tr, te = train_test_split(home, test_size=test_fraction, stratify=labels[home],
                                  random_state=seed)
        rng = np.random.default_rng([seed, zlib.crc32(f"{encoder}|{dataset}".encode())])
        for f in sorted(fractions):
            sub = tr if f >= 1 else tr[stratified_subsample(labels[tr], f, rng)]
            model = _fit_probe(clean[sub], labels[sub])
            evals = [("clean", 0, te)]
            if f >= 1:
                evals += [(c, s, te) for (c, s) in features if c != "clean"]
                if len(shift) and len(np.unique(labels[shift])) == 2:
                    evals.append(("shift", 0, shift))
            val = {}
            if validation and f >= 1:
                fit_i, val_i = train_test_split(tr, test_size=VALIDATION_SHARE,
                                                stratify=labels[tr], random_state=seed)
                m_fit = _fit_probe(clean[fit_i], labels[fit_i])
                val["frozen"] = _auroc(labels[val_i], m_fit.predict_proba(clean[val_i])[:, 1])
                if adapt is not None:
                    pv = adapt(fit_i, m_fit, seed)
                    val["adapted"] = _auroc(labels[val_i], pv("clean", 0, val_i))
            arms = [("frozen", "probe", lambda c, s, idx: model.predict_proba(
                features[("clean", 0) if c == "shift" else (c, s)][idx])[:, 1])]
            if adapt is not None:
                arms.append(("adapted", "lora", adapt(sub, model, seed)))
            for regime, protocol, predict in arms:
                for cond, sev, idx in evals:
                    prob = predict(cond, sev, idx)
                    m = run_metrics(labels[idx], prob, seed=seed)
                    key = dict(encoder=encoder, dataset=dataset, label_fraction=float(f),
                               condition=cond, severity=int(sev), seed=int(seed))
                    v = val.get(regime, np.nan) if cond == "clean" else np.nan
                    runs.append({**key, "regime": regime, "protocol": protocol, "layer": layer,
                                 **m, "val_auroc": v, "n_train": len(sub), "n_test": len(idx)})
                    preds.append(pd.DataFrame({**key, "regime": regime, "protocol": protocol,
                                               "layer": layer, "case_id": case_ids[idx],
                                               "label": labels[idx], "prob": prob}))
    return pd.DataFrame(runs, columns=list(RUNS_COLUMNS)), pd.concat(preds, ignore_index=True)


def condition_images(images: np.ndarray, perturbations: Sequence[str], severities: Sequence[int],
                     *, seed: int = 0) -> dict[tuple[str, int], np.ndarray]:
    """Clean images and every perturbation x severity (deterministic given ``seed``)."""
    out = {("clean", 0): np.asarray(images, np.float32)}
    for j, p in enumerate(perturbations):
        for s in severities:
            out[(p, int(s))] = perturb(images, p, int(s), seed=[seed, j, int(s)])
    return out


def _adapter(enc: Encoder, layer: str, cond: Mapping, feats: Mapping, labels: np.ndarray,
             settings: Mapping):
    """``adapt`` of :func:`probe_dataset` for one encoder x layer: LoRA on the training
    subsample's clean images, then predictions on any condition's images (the shift
    cases: their clean images)."""
    def adapt(train_idx, model, seed):
        kw = {k: settings[k] for k in ("rank", "alpha", "steps", "lr", "batch_size")}
        if enc.net is None:
            predict = adapt_probe(enc, layer, None, labels[train_idx], model, seed=seed,
                                  features=feats[("clean", 0)][train_idx], **kw)
            return lambda c, s, idx: predict(feats[("clean", 0) if c == "shift" else (c, s)][idx])
        predict = adapt_probe(enc, layer, cond[("clean", 0)][train_idx], labels[train_idx],
                              model, seed=seed, **kw)
        return lambda c, s, idx: predict(cond[("clean", 0) if c == "shift" else (c, s)][idx])
    return adapt


def run_probe_study(datasets: Sequence[Mapping], encoders: Sequence[Mapping], *,
                    fractions: Sequence[float], perturbations: Sequence[str],
                    severities: Sequence[int], seeds: Sequence[int], seed: int = 0,
                    test_fraction: float = 0.3, device=None, adapt: Mapping | None = None,
                    validation: bool = True,
                    advance: Callable[[int], None] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All probe runs. ``datasets``: dicts with name, images (N, H, W) in [0, 1], labels,
    case_ids and optional shift_mask. ``adapt``: LoRA settings (:data:`ADAPT_DEFAULTS`;
    ``enabled`` true adds the adapted regime). Every depth of an encoder
    (:func:`depths_of`) is probed. Returns ``(runs, probe_predictions)``."""
    settings = {**ADAPT_DEFAULTS, **(adapt or {})}
    runs, preds = [], []
    for d in datasets:
        cond = condition_images(d["images"], perturbations, severities, seed=seed)
        for e in encoders:
            enc = Encoder(e, seed=seed, device=device)
            for layer in enc.layers:
                feats = {k: enc.features(v, layer) for k, v in cond.items()}
                adapter = (_adapter(enc, layer, cond, feats, np.asarray(d["labels"], int), settings)
                           if settings["enabled"] else None)
                r, p = probe_dataset(feats, d["labels"], d["case_ids"], encoder=e["name"],
                                     dataset=d["name"], fractions=fractions, seeds=seeds,
                                     test_fraction=test_fraction, shift_mask=d.get("shift_mask"),
                                     layer=layer, adapt=adapter, validation=validation)
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
                                  test_fraction=cfg["test_fraction"], device=device,
                                  adapt=cfg["adapt"], advance=advance)
    out = Path(cfg["output"])
    write_parquet(runs, out / "runs.parquet")
    write_parquet(preds, out / "probe_predictions.parquet")
    write_manifest(out, kind="probe", config_hash=config_hash(cfg), seed=cfg["seed"], device=device,
                   tables={"runs": runs, "probe_predictions": preds}, extra={"config": cfg})
    return {"n_runs": len(runs), "output": str(out)}
