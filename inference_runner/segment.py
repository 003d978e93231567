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

With a ``reference`` column in the cases CSV (each case's reference mask, empty for a
case without tumour) the run also writes ``lesions.parquet``, the lesions table
(docs/contracts.md#lesions): connected components of the prediction and of the
reference, matched by ``inference.hit_rule`` (:func:`lesion_table`); the manifest records
MONAI's FROC score of it (:func:`monai_froc`).

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

#: the optional column of the cases CSV naming each case's reference mask (a label file on
#: the image's grid; empty: no tumour); with it the run writes ``lesions.parquet``
REFERENCE_COLUMN = "reference"
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


#: the columns of the lesions table the runner writes (docs/contracts.md#lesions)
LESION_COLUMNS = ("case_id", "model", "lesion_id", "kind", "score", "volume_mm3",
                  "centroid_i_mm", "centroid_j_mm", "centroid_k_mm", "matched", "duplicate_of",
                  "dice", "iou", "hit_rule")


def _label_batch(mask: np.ndarray, structure) -> tuple[np.ndarray, int]:
    """Connected components of a batch of masks (B, *spatial) in one pass (the cases
    stacked along the first spatial axis with an empty slab between them, so no component
    joins two cases; ids numbered in raster order, so each case holds a contiguous block)."""
    from scipy import ndimage

    b = mask.shape[0]
    padded = np.zeros((b, mask.shape[1] + 1, *mask.shape[2:]), dtype=bool)
    padded[:, :-1] = mask
    stacked, n = ndimage.label(padded.reshape(-1, *mask.shape[2:]), structure=structure)
    return stacked.reshape(padded.shape)[:, :-1], int(n)


def _components(labels: np.ndarray, n: int, prob: np.ndarray | None, spacing) -> dict:
    """Per component id 1..n: owner case, voxels, centroid (voxel index, per spatial axis)
    and, with ``prob``, the maximum probability inside it. Sums over labelled voxels only."""
    b = labels.shape[0]
    flat = labels.reshape(b, -1)
    case_of = np.repeat(np.arange(b), flat.shape[1]).reshape(flat.shape)
    on = np.flatnonzero(flat.ravel())
    ids = flat.ravel()[on]
    size = np.bincount(ids, minlength=n + 1).astype(np.int64)
    coords = np.unravel_index(on % flat.shape[1], labels.shape[1:])
    cent = np.stack([np.bincount(ids, weights=c.astype(float), minlength=n + 1) for c in coords],
                    axis=1) / np.maximum(size, 1)[:, None]
    owner = np.zeros(n + 1, dtype=np.int64)
    owner[ids] = case_of.ravel()[on]
    out = {"size": size, "centroid": cent, "owner": owner}
    if prob is not None:
        best = np.zeros(n + 1)
        np.maximum.at(best, ids, prob.reshape(b, -1).ravel()[on].astype(float))
        out["max_prob"] = best
    return out


def match_lesions(cand_pred: np.ndarray, cand_ref: np.ndarray, cand_overlap: np.ndarray,
                  pred_score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy one-to-one matching of predicted to reference lesions.

    Candidates (pairs that satisfy the hit rule) are taken in order of the prediction's
    score (highest first), then overlap (largest first), then ids; a pair is matched when
    neither side is yet. Greedy by score, the matches among the predictions scoring >= t
    are the same for every threshold t, so one table serves the whole FROC. Returns per
    prediction (index into ``pred_score``) the matched reference (-1: none) and, for a
    prediction with candidates but none left, the reference it duplicates (-1: none).
    The loop runs over candidate pairs only (overlapping components of one case).
    """
    n = len(pred_score)
    matched = np.full(n, -1, dtype=np.int64)
    dup = np.full(n, -1, dtype=np.int64)
    if not len(cand_pred):
        return matched, dup
    order = np.lexsort((cand_ref, cand_pred, -cand_overlap, -pred_score[cand_pred]))
    taken: set[int] = set()
    for k in order:    # candidate pairs of overlapping components: a few per case
        p, r = int(cand_pred[k]), int(cand_ref[k])
        if matched[p] >= 0 or r in taken:
            continue
        matched[p] = r
        taken.add(r)
    for k in order:    # the first (best) candidate of a prediction left unmatched
        p = int(cand_pred[k])
        if matched[p] < 0 and dup[p] < 0:
            dup[p] = int(cand_ref[k])
    return matched, dup


def lesion_table(prob: np.ndarray, reference: np.ndarray, *, case_ids, model: str,
                 threshold: float = 0.5, min_component_voxels: int = 0, connectivity: int = 1,
                 spacing=(1.0, 1.0, 1.0), hit_rule: str = "iou",
                 min_overlap: float = 0.1) -> pd.DataFrame:
    """The lesions table (docs/contracts.md#lesions) of a batch: probability maps ``prob``
    (B, *spatial) and reference masks ``reference`` (B, *spatial; nonzero = tumour).

    Predicted lesions are the connected components of ``prob >= threshold`` of at least
    ``min_component_voxels`` voxels (those :func:`summarize_masks` counts: their voxels
    sum to ``pred_voxels``); reference lesions the components of the reference mask (same
    ``connectivity``). A predicted lesion's ``score`` is the maximum probability inside
    it. Candidates: IoU (or Dice) with a reference component ``>= min_overlap``
    (``hit_rule`` ``iou`` / ``dice``), or the predicted component's centroid voxel inside
    it (``centroid``: MONAI's and CAMELYON16's rule, the lookup of
    ``monai.metrics.froc.compute_fp_tp_probs_nd``). Matching: :func:`match_lesions`.
    Rows per case: the reference lesions ``r1, r2, ...`` then the predictions ``p1,
    ...`` (raster order); ``volume_mm3`` and the centroid in mm along the array axes
    (``spacing``: mm per voxel of each spatial axis); ``matched``, ``duplicate_of``,
    ``dice`` and ``iou`` of the matched pair on both rows; ``hit_rule`` as
    ``stats.localization.hit_rule_text`` writes it.

    MONAI's connected-component transforms (``KeepLargestConnectedComponent``,
    ``RemoveSmallObjects``) keep or drop components but return no labels, so the
    components come from ``scipy.ndimage.label`` (one pass over the batch).
    """
    from scipy import ndimage

    from stats.localization import hit_rule_text

    prob = np.asarray(prob, dtype=np.float32)
    ref = np.asarray(reference) > 0
    b = prob.shape[0]
    spatial = prob.ndim - 1
    spacing = np.broadcast_to(np.asarray(spacing, dtype=float), (spatial,))
    structure = ndimage.generate_binary_structure(spatial, connectivity)
    pl, npred = _label_batch(prob >= threshold, structure)
    rl, nref = _label_batch(ref, structure)
    pc = _components(pl, npred, prob, spacing)
    rc = _components(rl, nref, None, spacing)
    keep = np.zeros(npred + 1, dtype=bool)
    keep[1:] = pc["size"][1:] >= max(int(min_component_voxels), 1)
    # overlaps of every (prediction, reference) pair sharing a voxel
    both = np.flatnonzero((pl.ravel() > 0) & (rl.ravel() > 0))
    pair = pl.ravel()[both].astype(np.int64) * (nref + 1) + rl.ravel()[both]
    upair, inter = np.unique(pair, return_counts=True)
    pp, rr = upair // (nref + 1), upair % (nref + 1)
    sp, sr = pc["size"][pp], rc["size"][rr]
    iou = inter / (sp + sr - inter)
    dice = 2 * inter / (sp + sr)
    if hit_rule == "centroid":
        c = np.rint(pc["centroid"]).astype(np.int64)
        c = np.clip(c, 0, np.array(prob.shape[1:]) - 1)
        hitted = rl[(pc["owner"], *c.T)]                  # the reference label at the centroid
        cand = np.flatnonzero(keep & (hitted > 0))
        cp, cr = cand, hitted[cand]
        lut = pd.Series(np.arange(len(upair)), index=upair)
        at = lut.reindex(cp * (nref + 1) + cr).to_numpy()
        cover = np.where(np.isnan(at), 0.0, iou[np.nan_to_num(at).astype(np.int64)])
    else:
        value = iou if hit_rule == "iou" else dice
        ok = keep[pp] & (value >= min_overlap)
        cp, cr, cover = pp[ok], rr[ok], value[ok]
    score = pc["max_prob"]
    m_ref, m_dup = match_lesions(cp, cr, cover, score)
    # per-pair overlaps of the matched pairs
    lut = pd.Series(np.arange(len(upair)), index=upair)
    pids = np.flatnonzero(keep)
    mr = m_ref[pids]
    at = lut.reindex(pids * (nref + 1) + np.maximum(mr, 0)).to_numpy()
    has = (mr > 0) & ~np.isnan(at)
    ati = np.nan_to_num(at).astype(np.int64)
    p_dice = np.where(has, dice[ati] if len(dice) else 0.0, np.nan)
    p_iou = np.where(has, iou[ati] if len(iou) else 0.0, np.nan)
    vv = float(np.prod(spacing))
    ids = np.asarray(case_ids, dtype=object)
    # names within a case: r1.. / p1.. in raster (id) order
    r_ids = np.arange(1, nref + 1)
    r_owner = rc["owner"][r_ids]
    r_first = np.r_[0, np.flatnonzero(np.diff(r_owner)) + 1] if len(r_ids) else np.zeros(0, int)
    r_rank = np.arange(len(r_ids)) - np.repeat(r_first, np.diff(np.r_[r_first, len(r_ids)]))
    r_name = np.empty(nref + 1, dtype=object)
    r_name[r_ids] = [f"r{k + 1}" for k in r_rank]
    p_owner = pc["owner"][pids]
    p_first = np.r_[0, np.flatnonzero(np.diff(p_owner)) + 1] if len(pids) else np.zeros(0, int)
    p_rank = np.arange(len(pids)) - np.repeat(p_first, np.diff(np.r_[p_first, len(pids)]))
    p_name = np.array([f"p{k + 1}" for k in p_rank], dtype=object)
    credited = np.full(nref + 1, None, dtype=object)
    r_dice = np.full(nref + 1, np.nan)
    r_iou = np.full(nref + 1, np.nan)
    credited[mr[has]] = p_name[has]
    r_dice[mr[has]] = p_dice[has]
    r_iou[mr[has]] = p_iou[has]
    rule = hit_rule_text(hit_rule, min_overlap)
    refs = pd.DataFrame({
        "case_id": ids[r_owner], "model": model, "lesion_id": r_name[r_ids], "kind": "reference",
        "score": np.nan, "volume_mm3": rc["size"][r_ids] * vv,
        **{f"centroid_{a}_mm": rc["centroid"][r_ids, j] * spacing[j]
           for j, a in enumerate("ijk"[:spatial])},
        "matched": credited[r_ids], "duplicate_of": None, "dice": r_dice[r_ids],
        "iou": r_iou[r_ids], "hit_rule": rule})
    dups = m_dup[pids]
    preds = pd.DataFrame({
        "case_id": ids[p_owner], "model": model, "lesion_id": p_name, "kind": "prediction",
        "score": score[pids], "volume_mm3": pc["size"][pids] * vv,
        **{f"centroid_{a}_mm": pc["centroid"][pids, j] * spacing[j]
           for j, a in enumerate("ijk"[:spatial])},
        "matched": np.where(has, r_name[np.maximum(mr, 0)], None),
        "duplicate_of": np.where(dups > 0, r_name[np.maximum(dups, 0)], None),
        "dice": p_dice, "iou": p_iou, "hit_rule": rule})
    out = pd.concat([refs, preds], ignore_index=True)
    # rows grouped by case (input order), references first
    order = np.lexsort((np.r_[np.zeros(len(refs)), np.ones(len(preds))],
                        pd.Categorical(out["case_id"], categories=pd.unique(ids)).codes))
    out = out.iloc[order].reset_index(drop=True)
    for col in ("matched", "duplicate_of"):
        out[col] = out[col].astype(object).where(out[col].notna(), None)
    return out[[c for c in LESION_COLUMNS if c in out.columns]]


def monai_froc(lesions: pd.DataFrame, n_scans: int, *, fp_per_scan=None) -> dict:
    """MONAI's FROC of one model's lesions table (``monai.metrics.froc``:
    ``compute_froc_curve_data`` on the false positives' and the reference lesions'
    matched scores, 0 when missed, then ``compute_froc_score``): a check recorded in the
    run manifest beside the table (``stats.froc`` computes the report's)."""
    from monai.metrics.froc import compute_froc_curve_data, compute_froc_score

    from stats.localization import FP_PER_SCAN

    rates = tuple(FP_PER_SCAN if fp_per_scan is None else fp_per_scan)
    ref = lesions[lesions["kind"] == "reference"]
    pred = lesions[lesions["kind"] == "prediction"]
    if not len(ref) or not n_scans:
        return {"cpm": None, "fp_per_scan": list(rates), "n_lesions": int(len(ref))}
    hit = pred[pred["matched"].notna()].set_index(["case_id", "matched"])["score"]
    tp = hit.reindex(pd.MultiIndex.from_arrays([ref["case_id"], ref["lesion_id"]])) \
        .fillna(0.0).to_numpy(float)
    fp = pred[pred["matched"].isna() & pred["duplicate_of"].isna()]["score"].to_numpy(float)
    fps, sens = compute_froc_curve_data(fp, tp, len(ref), n_scans)
    return {"cpm": float(compute_froc_score(fps, sens, rates)), "fp_per_scan": list(rates),
            "n_lesions": int(len(ref)), "n_false_positives": int(len(fp))}


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


def load_reference(path, transforms: Mapping):
    """Read a reference mask and bring it onto the image's grid: the same orientation and
    spacing as :func:`load_case`, nearest-neighbour (labels stay labels), no window.
    Returns a (*spatial) bool array (nonzero = tumour)."""
    from monai.transforms import Compose, LoadImage, Orientation, Spacing

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"reference mask not found: {p}")
    reader = "PydicomReader" if p.is_dir() or p.suffix.lower() == ".dcm" else "NibabelReader"
    m = LoadImage(reader=reader, image_only=True, ensure_channel_first=True)(str(p))
    if m.ndim == 3:
        m = m.unsqueeze(-1)
    steps = []
    if transforms.get("orientation"):
        steps.append(Orientation(axcodes=transforms["orientation"]))
    if transforms.get("spacing"):
        steps.append(Spacing(pixdim=transforms["spacing"], mode="nearest"))
    m = Compose(steps)(m) if steps else m
    return np.asarray(m)[0] > 0


def _spacing(img) -> np.ndarray:
    """mm per voxel of each spatial axis (the image's pixdim; 1 where it has none)."""
    return np.asarray(img.pixdim, dtype=float)[:3] if hasattr(img, "pixdim") else np.ones(3)


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
    if REFERENCE_COLUMN in df.columns:   # reference masks: the lesions table is written
        ref = df[REFERENCE_COLUMN]
        df[REFERENCE_COLUMN] = [None if pd.isna(v) or not str(v).strip() else
                                (str(v) if Path(str(v)).is_absolute() else str(file.parent / str(v)))
                                for v in ref]
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
    if REFERENCE_COLUMN in row:
        try:
            ref = (np.zeros(prob.shape[1:], dtype=bool) if row[REFERENCE_COLUMN] is None
                   else load_reference(row[REFERENCE_COLUMN], cfg["transforms"]))
            if ref.shape != prob.shape[1:]:
                raise ValueError(f"reference mask grid {ref.shape} differs from the image's "
                                 f"{prob.shape[1:]}")
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            return {"status": "failed", "reason": f"reference: {type(exc).__name__}: {exc}"[:500]}
        les = lesion_table(prob, ref[None], case_ids=[row["case_id"]], model=cfg["model"],
                           threshold=inf["threshold"],
                           min_component_voxels=inf["min_component_voxels"],
                           connectivity=inf["connectivity"], spacing=_spacing(img),
                           hit_rule=inf["hit_rule"], min_overlap=inf["min_overlap"])
        out["lesions"] = json.loads(les.to_json(orient="records"))
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
    tables = {"cases": merged} if merged is not None else {}
    froc = None
    if merged is not None and "lesions" in merged.attrs:
        tables["lesions"] = merged.attrs["lesions"]
        ok = int((merged["status"] == "ok").sum())
        froc = monai_froc(merged.attrs["lesions"], ok)
    write_manifest(out, kind="segment", config_hash=chash, seed=cfg["seed"], device=device,
                   tables=tables,
                   extra={"shard": f"{k}/{n}", "n_cases": len(cases), "n_shard": len(mine),
                          "n_run": len(todo), "seconds": round(elapsed, 3),
                          "model": cfg["model"], "config": cfg,
                          **({"monai_froc": froc} if froc is not None else {})})
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
    lesion_rows = [r for rec in rows for r in (rec.pop("lesions", None) or [])]
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
    if REFERENCE_COLUMN in cases.columns:
        lesions = pd.DataFrame(lesion_rows, columns=list(LESION_COLUMNS))
        for col in ("matched", "duplicate_of"):
            lesions[col] = lesions[col].astype(object).where(lesions[col].notna(), None)
        write_parquet(lesions, Path(cfg["output"]) / "lesions.parquet")
        table.attrs["lesions"] = lesions
    return table
