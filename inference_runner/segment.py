"""MONAI sliding-window segmentation -> one row per case (the cases contract).

Per case: the image is read with MONAI ``LoadImage`` (NIfTI file or DICOM series folder),
reoriented, resampled and windowed; the network runs by sliding windows; the tumour
channel's probability is thresholded; connected components smaller than
``min_component_voxels`` are removed (``scipy.ndimage.label``). The row holds

``score`` (= ``pred_voxels``, predicted tumour voxels after component filtering),
``volume_mm3`` (voxels x voxel volume on the resampled grid), ``max_prob`` (maximum tumour
probability anywhere), ``mean_prob`` (mean tumour probability over the predicted voxels;
NaN when none), ``n_components``, ``status`` (``ok`` / ``failed``), ``reason`` (why a
case failed; empty when ok), plus every column of the input cases CSV.

Runs resume: each finished case is a part file under ``parts/``; a rerun skips them.
``--shard k/n`` takes every n-th case (input order, offset k-1); when all parts exist,
``cases.parquet`` is (re)merged in input order, so shards give the same rows as one run.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from .config import ConfigError, config_hash
from .writers import write_json, write_manifest, write_parquet

SUMMARY_COLUMNS = ("score", "pred_voxels", "volume_mm3", "max_prob", "mean_prob", "n_components")
MSG_CASES_COLUMNS = ("{file}: the cases CSV needs columns 'case_id' and 'image' (found {found}); "
                     "add them (image: a NIfTI file or a DICOM series folder)")
MSG_CASES_DUP = "{file}: case_id values repeat ({ids}); give each case one row"


# --------------------------------------------------------------------------- network


def select_device(preference: str = "auto"):
    """``auto``: CUDA when available, else CPU; ``cuda`` without a GPU raises ConfigError."""
    import torch

    if preference == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda requested but no CUDA device is visible; use device: auto or cpu")
    if preference in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda:0")
    return torch.device("cpu")


def build_network(name: str, *, in_channels: int = 1, out_channels: int = 2, spatial_dims: int = 3,
                  **kwargs):
    """A MONAI ``UNet`` (default channels (8, 16, 32), strides (2, 2)) or ``SegResNet``."""
    from monai.networks import nets

    if name == "unet":
        kw = {"channels": (8, 16, 32), "strides": (2, 2), "num_res_units": 1}
        kw.update(kwargs)
        return nets.UNet(spatial_dims=spatial_dims, in_channels=in_channels,
                         out_channels=out_channels, **kw)
    if name == "segresnet":
        kw = {"init_filters": 8}
        kw.update(kwargs)
        return nets.SegResNet(spatial_dims=spatial_dims, in_channels=in_channels,
                              out_channels=out_channels, **kw)
    raise ConfigError(f"network.name: unknown network {name!r}; use unet or segresnet")


def resolve_weights(path) -> Path:
    """A ``.pt`` file, or a MONAI bundle folder holding ``models/model.pt``."""
    p = Path(path)
    if p.is_dir():
        for cand in (p / "models" / "model.pt", p / "model.pt"):
            if cand.is_file():
                return cand
        raise ConfigError(f"network.weights: bundle folder {p} has no models/model.pt; "
                          "give the .pt file directly")
    return p


def load_weights(net, path) -> None:
    """Load a state dict (plain, or under 'state_dict' / 'model') into ``net`` (strict)."""
    import torch

    file = resolve_weights(path)
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad weights file
        raise ConfigError(f"network.weights: cannot read {file} ({exc}); give a torch state dict") from exc
    for key in ("state_dict", "model"):
        if isinstance(state, Mapping) and key in state and isinstance(state[key], Mapping):
            state = state[key]
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"network.weights: {file} does not fit the configured network ({first}); "
                          "check network.name and network.kwargs") from exc


def network_from_config(cfg: Mapping):
    n = cfg["network"]
    net = build_network(n["name"], in_channels=n["in_channels"], out_channels=n["out_channels"],
                        **n["kwargs"])
    if n["weights"] is not None:
        load_weights(net, n["weights"])
    return net.eval()


# --------------------------------------------------------------------------- inference


def predict_probability(net, images, *, roi_size, sw_batch_size: int = 2, overlap: float = 0.25,
                        activation: str = "softmax", tumour_channel: int = 1, device=None,
                        amp: bool = True) -> np.ndarray:
    """Tumour probability maps for a batch ``images`` (B, C, *spatial) by sliding windows.

    CUDA runs under ``torch.autocast`` (float16) when ``amp``; the CPU in float32.
    Returns a float32 array (B, *spatial).
    """
    import torch
    from monai.inferers import sliding_window_inference

    device = device or torch.device("cpu")
    x = torch.as_tensor(images, dtype=torch.float32)
    x = x.as_tensor() if hasattr(x, "as_tensor") else x
    x = x.to(device)
    net = net.to(device).eval()
    use_amp = bool(amp) and device.type == "cuda"
    with torch.inference_mode(), torch.autocast(device_type=device.type, dtype=torch.float16,
                                                enabled=use_amp):
        logits = sliding_window_inference(x, roi_size=list(roi_size), sw_batch_size=sw_batch_size,
                                          predictor=net, overlap=overlap, mode="gaussian")
        logits = logits.float()
        if activation == "softmax":
            prob = torch.softmax(logits, dim=1)[:, tumour_channel]
        else:
            prob = torch.sigmoid(logits[:, tumour_channel])
    return prob.cpu().numpy().astype(np.float32)


def summarize_masks(prob: np.ndarray, *, threshold: float = 0.5, min_component_voxels: int = 0,
                    connectivity: int = 1, voxel_volume_mm3=1.0) -> pd.DataFrame:
    """Per-case summaries of a batch of probability maps ``prob`` (B, *spatial).

    Components are labelled in one pass over the batch (cases stacked along the first
    spatial axis, separated by an empty slab, so no component joins two cases);
    components below ``min_component_voxels`` are dropped.
    Returns columns ``score`` (= ``pred_voxels``), ``pred_voxels``, ``volume_mm3``,
    ``max_prob``, ``mean_prob`` (over predicted voxels; NaN when none), ``n_components``.
    """
    from scipy import ndimage

    prob = np.asarray(prob, dtype=np.float32)
    b = prob.shape[0]
    spatial = prob.ndim - 1
    structure = ndimage.generate_binary_structure(spatial, connectivity)
    # stack the cases along the first spatial axis with an empty slab between them: one
    # labelling pass, and no component can join two cases
    padded = np.zeros((b, prob.shape[1] + 1, *prob.shape[2:]), dtype=bool)
    padded[:, :-1] = prob >= threshold
    stacked, n = ndimage.label(padded.reshape(-1, *prob.shape[2:]), structure=structure)
    labels = stacked.reshape(padded.shape)[:, :-1]
    flat = labels.ravel()
    on = np.flatnonzero(flat)  # reductions over labelled voxels only (masks are sparse)
    sizes = np.bincount(flat[on], minlength=n + 1)
    psums = np.bincount(flat[on], weights=prob.ravel()[on], minlength=n + 1)
    ids = np.arange(1, n + 1)
    kept = ids[sizes[1:] >= max(int(min_component_voxels), 1)]
    # labels are numbered in raster order and never span cases, so each case holds a
    # contiguous block of ids: the running maximum of per-case maxima maps id -> case
    case_max = np.maximum.accumulate(labels.reshape(b, -1).max(axis=1))
    owner = np.searchsorted(case_max, kept, side="left")
    pred_voxels = np.bincount(owner, weights=sizes[kept], minlength=b).astype(np.int64)
    psum = np.bincount(owner, weights=psums[kept], minlength=b)
    n_comp = np.bincount(owner, minlength=b)
    vv = np.broadcast_to(np.asarray(voxel_volume_mm3, dtype=float), (b,))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_prob = np.where(pred_voxels > 0, psum / np.maximum(pred_voxels, 1), np.nan)
    pflat = prob.reshape(b, -1)
    return pd.DataFrame({
        "score": pred_voxels.astype(float),
        "pred_voxels": pred_voxels.astype(np.int64),
        "volume_mm3": pred_voxels * vv,
        "max_prob": pflat.max(axis=1).astype(float),
        "mean_prob": mean_prob.astype(float),
        "n_components": n_comp.astype(np.int64),
    })


def case_transforms(transforms: Mapping):
    """The MONAI pre-processing chain: LoadImage -> Orientation -> Spacing -> window."""
    from monai.transforms import Compose, Orientation, ScaleIntensityRange, Spacing

    steps = []
    if transforms.get("orientation"):
        steps.append(Orientation(axcodes=transforms["orientation"]))
    if transforms.get("spacing"):
        steps.append(Spacing(pixdim=transforms["spacing"], mode="bilinear"))
    if transforms.get("window"):
        lo, hi = transforms["window"]
        steps.append(ScaleIntensityRange(a_min=lo, a_max=hi, b_min=0.0, b_max=1.0, clip=True))
    return Compose(steps)


def load_case(path, transforms: Mapping):
    """Read one image (NIfTI file or DICOM series folder) and pre-process it.

    Returns ``(image, voxel_volume_mm3)`` with image a (C, *spatial) MetaTensor.
    """
    from monai.transforms import LoadImage

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"image not found: {p}")
    reader = "PydicomReader" if p.is_dir() or p.suffix.lower() == ".dcm" else "NibabelReader"
    img = LoadImage(reader=reader, image_only=True, ensure_channel_first=True)(str(p))
    if img.ndim == 3:  # a single 2D slice: add a depth axis of 1
        img = img.unsqueeze(-1)
    img = case_transforms(transforms)(img)
    pixdim = np.asarray(img.pixdim, dtype=float) if hasattr(img, "pixdim") else np.ones(3)
    return img, float(np.prod(pixdim[:3]))


# --------------------------------------------------------------------------- the run


def read_case_list(path) -> pd.DataFrame:
    """The cases CSV (case_id, image, ...); relative image paths are read from its folder."""
    file = Path(path)
    df = pd.read_csv(file, dtype={"case_id": str})
    if not {"case_id", "image"} <= set(df.columns):
        raise ConfigError(MSG_CASES_COLUMNS.format(file=file, found=list(df.columns)))
    dup = df["case_id"][df["case_id"].duplicated()].unique()
    if len(dup):
        raise ConfigError(MSG_CASES_DUP.format(file=file, ids=", ".join(map(str, dup[:5]))))
    img = df["image"].astype(str)
    df["image"] = [s if Path(s).is_absolute() else str(file.parent / s) for s in img]
    return df


def _part_path(parts: Path, case_id: str) -> Path:
    digest = hashlib.sha1(case_id.encode("utf-8")).hexdigest()[:16]
    return parts / f"{digest}.json"


def _read_part(parts: Path, case_id: str, chash: str) -> dict | None:
    """The finished part of ``case_id`` under config ``chash``, or None (missing or stale)."""
    p = _part_path(parts, case_id)
    if not p.is_file():
        return None
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return rec if rec.get("config_hash") == chash else None


def _run_one(net, row: Mapping, cfg: Mapping, device) -> dict:
    inf = cfg["inference"]
    try:
        img, voxel_volume = load_case(row["image"], cfg["transforms"])
    except Exception as exc:  # noqa: BLE001 - any read failure is recorded, the run goes on
        return {"status": "failed", "reason": f"load: {type(exc).__name__}: {exc}"[:500]}
    try:
        prob = predict_probability(net, img[None], roi_size=inf["roi_size"],
                                   sw_batch_size=inf["sw_batch_size"], overlap=inf["overlap"],
                                   activation=inf["activation"], tumour_channel=inf["tumour_channel"],
                                   device=device, amp=cfg["amp"])
    except Exception as exc:  # noqa: BLE001 - e.g. channel mismatch for this image
        return {"status": "failed", "reason": f"inference: {type(exc).__name__}: {exc}"[:500]}
    summary = summarize_masks(prob, threshold=inf["threshold"],
                              min_component_voxels=inf["min_component_voxels"],
                              connectivity=inf["connectivity"], voxel_volume_mm3=voxel_volume)
    out = summary.iloc[0].to_dict()
    out.update(status="ok", reason="")
    return out


def run_segment(cfg: Mapping, *, shard: tuple[int, int] = (1, 1),
                advance: Callable[[int], None] | None = None) -> dict:
    """Run segmentation for the shard's cases; merge ``cases.parquet`` when all are done.

    Returns a dict: ``n_cases``, ``n_shard``, ``n_run`` (processed now), ``n_skipped``
    (already done), ``n_failed`` (in this shard), ``merged`` (bool), ``output``.
    """
    import torch
    from monai.utils import set_determinism

    cases = read_case_list(cfg["cases"])
    k, n = shard
    out = Path(cfg["output"])
    parts = out / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    chash = config_hash(cfg)
    mine = cases.iloc[k - 1::n]
    todo = [r for r in mine.to_dict("records") if _read_part(parts, r["case_id"], chash) is None]
    device = select_device(cfg["device"])
    set_determinism(seed=cfg["seed"])
    n_failed = 0
    t0 = time.perf_counter()
    if todo:
        net = network_from_config(cfg).to(device)
        for row in todo:
            res = _run_one(net, row, cfg, device)
            n_failed += res["status"] != "ok"
            res.update(case_id=row["case_id"], config_hash=chash)
            write_json(res, _part_path(parts, row["case_id"]))
            if advance:
                advance(1)
    elapsed = time.perf_counter() - t0
    merged = merge_parts(cfg, cases=cases)
    write_manifest(out, kind="segment", config_hash=chash, seed=cfg["seed"], device=device,
                   tables={"cases": merged} if merged is not None else {},
                   extra={"shard": f"{k}/{n}", "n_cases": len(cases), "n_shard": len(mine),
                          "n_run": len(todo), "seconds": round(elapsed, 3),
                          "model": cfg["model"], "config": cfg})
    return {"n_cases": len(cases), "n_shard": len(mine), "n_run": len(todo),
            "n_skipped": len(mine) - len(todo), "n_failed": n_failed,
            "merged": merged is not None, "output": str(out)}


def merge_parts(cfg: Mapping, *, cases: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """Merge part files into ``cases.parquet`` (input order) once every case has one.

    Parts written under another config hash are stale and count as missing.
    """
    cases = read_case_list(cfg["cases"]) if cases is None else cases
    parts = Path(cfg["output"]) / "parts"
    chash = config_hash(cfg)
    rows = []
    for cid in cases["case_id"]:
        rec = _read_part(parts, cid, chash)
        if rec is None:
            return None
        rows.append(rec)
    res = pd.DataFrame(rows).drop(columns=["config_hash"])
    for col in SUMMARY_COLUMNS:
        if col not in res.columns:
            res[col] = np.nan
    meta = cases.drop(columns=[c for c in SUMMARY_COLUMNS + ("status", "reason", "model")
                               if c in cases.columns])
    table = meta.merge(res, on="case_id", how="left", validate="one_to_one")
    table.insert(1, "model", cfg["model"])
    lead = ["case_id", "model", *[c for c in ("label", "score", "site") if c in table.columns]]
    table = table[lead + [c for c in table.columns if c not in lead]]
    write_parquet(table, Path(cfg["output"]) / "cases.parquet")
    return table
