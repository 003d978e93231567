"""The embedded demo study, made by real (small) networks on synthetic CT-like volumes.

Nothing in the demo decides who is detected by formula. Volumes (24^3 voxels of 2 mm)
are drawn with a simple physics of contrast: the lesion-to-liver difference in HU
depends on the contrast phase (60 HU in portal-venous, 32 delayed, 10 arterial, 7
non-contrast), sites differ in noise SD (9-16 HU, spatially correlated) and calibration
offset, age changes the liver's size, and lesions vary in size (4-44 mm) and position.
Two small MONAI UNets (channels 8-16-32 trained 3000 steps; 4-8-16 trained 1500 steps)
are trained on the CPU on a separate training cohort that is mostly portal-venous (as
public liver-lesion sets are); their predicted tumour voxels on the demo cohort are the
scores. Sensitivity collapses in non-contrast and arterial phases and for small lesions
while specificity holds, because the networks miss faint lesions. Larger (younger)
livers draw more false positives: a weakness of the networks, not of the generator.

``regenerate(out_dir, seed=0)`` writes

- ``cases.parquet``: cases contract, one row per model x case (case_id, patient_id,
  model, label, score = predicted tumour voxels, max_prob, site, split, age, sex, race,
  phase, scanner, tumor_size_mm, tumor_location);
- ``lesions.parquet``: the lesions table (docs/contracts.md#lesions) of the same
  predictions: connected components of each network's mask and of the reference mask,
  matched by IoU >= 0.1 (:func:`inference_runner.segment.lesion_table`), with the
  reference lesions' location;
- ``runs.parquet`` and ``probe_predictions.parquet``: a small probe study (see
  :mod:`inference_runner.probe`) on 2D slices of the same volumes: seven encoders (five
  random-initialised networks and a handcrafted baseline, plus two copies of a small CNN
  pretrained on axial or coronal slices of the training cohort: domain specialists), each
  at two depths (``layer`` mid and last), frozen (``protocol`` probe) and adapted with
  LoRA (``protocol`` lora), on the same splits, seeds and label fractions
  (:func:`regenerate_probe` re-makes only these);
- ``metadata.parquet``: the metadata evidence table of the same cases (report texts in
  each site's style, headers for part of the cases, two extractors, review against the
  truth; :mod:`inference_runner.metadata.demo`), with ``metadata_reports.csv``,
  ``metadata_headers.jsonl`` and ``metadata_review.csv`` to inspect;
- ``run_manifest.json``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

SHAPE = (24, 24, 24)
SPACING_MM = 2.0
WINDOW_HU = (-100.0, 240.0)
PHASES = ("venous", "arterial", "delayed", "non_contrast")
#: liver and lesion attenuation (HU) by phase: a hypovascular lesion in an enhancing liver
LIVER_HU = {"non_contrast": 108.0, "arterial": 112.0, "venous": 122.0, "delayed": 116.0}
LESION_HU = {"non_contrast": 101.0, "arterial": 102.0, "venous": 62.0, "delayed": 84.0}
LOCATIONS = ("right_lobe", "left_lobe", "dome", "inferior")  # named from the lesion's position
N_SITES = 8
SCANNERS = ("GE Revolution", "Siemens Force", "Philips iQon", "Canon Aquilion")
DEMO_MODELS = {  # name: (UNet channels, strides, training steps of 8 volumes, learning rate)
    "unet_large": ((8, 16, 32), (2, 2), 3000, 1e-2),
    "unet_small": ((4, 8, 16), (2, 2), 1500, 1e-2),
}
#: the training cohort is mostly contrast-enhanced CT (as public liver-lesion sets are)
TRAIN_PHASE_MIX = {"venous": 0.65, "delayed": 0.2, "arterial": 0.1, "non_contrast": 0.05}
DEFAULT_THRESHOLD = 50  # voxels (2 mm grid: a sphere of about 9 mm diameter)
MIN_COMPONENT_VOXELS = 8


@dataclass
class Cohort:
    """Per-case attributes (``meta``), volumes (N, 1, *SHAPE) in [0, 1] and lesion masks."""

    meta: pd.DataFrame
    images: np.ndarray
    masks: np.ndarray


def _site_table(rng: np.random.Generator) -> pd.DataFrame:
    sites = [f"site_{i + 1:02d}" for i in range(N_SITES)]
    # phase mix confounded with site: early sites mostly venous, late sites rarely
    venous_share = np.linspace(0.75, 0.15, N_SITES)
    rest = 1 - venous_share
    mix = np.column_stack([venous_share, rest * 0.35, rest * 0.25, rest * 0.40])
    return pd.DataFrame({
        "site": sites,
        "noise_hu": np.linspace(9.0, 16.0, N_SITES)[rng.permutation(N_SITES)],
        "offset_hu": rng.normal(0, 6, N_SITES),
        "scanner": [SCANNERS[i % len(SCANNERS)] for i in range(N_SITES)],
        "unknown_race": np.isin(np.arange(N_SITES), [2, 6]) * 0.6 + 0.03,
        **{f"p_{ph}": mix[:, j] for j, ph in enumerate(PHASES)},
    })


def sample_cohort_meta(n_patients: int, *, prevalence: float = 0.45, seed=0,
                       val_fraction: float = 0.3, phase_mix: dict | None = None) -> pd.DataFrame:
    """Patients (1-3 scans each) with site, demographics, phase and lesion attributes.

    ``phase_mix`` ({phase: probability}) replaces the sites' phase mix (training cohorts).
    """
    rng = np.random.default_rng(seed)
    sites = _site_table(np.random.default_rng(12345))
    site_idx = rng.integers(0, N_SITES, n_patients)
    st = sites.iloc[site_idx].reset_index(drop=True)
    age = np.clip(rng.normal(60, 14, n_patients), 20, 92).round()
    sex = rng.choice(["F", "M"], n_patients)
    race = rng.choice(["White", "Black", "Asian", "Other"], n_patients, p=[0.62, 0.18, 0.12, 0.08])
    race = np.where(rng.random(n_patients) < st["unknown_race"], "Unknown", race).astype(object)
    positive = rng.random(n_patients) < prevalence
    size = np.where(positive, np.clip(np.exp(rng.normal(np.log(13), 0.55, n_patients)), 4, 44), np.nan)
    # lesion centre: uniform in a ball of 0.7 x the liver's semi-axes (fractions x, y, z)
    direction = rng.normal(0, 1, (n_patients, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    offset = direction * 0.7 * rng.random((n_patients, 1)) ** (1 / 3)
    location = np.select([offset[:, 2] > 0.3, offset[:, 2] < -0.3, offset[:, 0] > 0],
                         ["dome", "inferior", "right_lobe"], "left_lobe").astype(object)
    location = np.where(positive, location, None)
    split = np.where(rng.random(n_patients) < val_fraction, "validation", "test")
    n_scans = rng.choice([1, 2, 3], n_patients, p=[0.55, 0.3, 0.15])
    rows = np.repeat(np.arange(n_patients), n_scans)
    probs = st[[f"p_{ph}" for ph in PHASES]].to_numpy()[rows]
    if phase_mix is not None:
        probs = np.broadcast_to(np.array([phase_mix.get(ph, 0.0) for ph in PHASES]), probs.shape)
    u = rng.random(len(rows))[:, None]
    phase = np.array(PHASES)[(u > np.cumsum(probs, axis=1)).sum(axis=1).clip(0, len(PHASES) - 1)]
    meta = pd.DataFrame({
        "case_id": [f"C{i:05d}" for i in range(len(rows))],
        "patient_id": [f"P{j:05d}" for j in rows],
        "label": positive[rows].astype(np.int64),
        "site": st["site"].to_numpy()[rows],
        "split": split[rows],
        "age": age[rows],
        "sex": sex[rows],
        "race": race[rows],
        "phase": phase,
        "scanner": st["scanner"].to_numpy()[rows],
        "tumor_size_mm": size[rows],
        "tumor_location": location[rows],
        "lesion_dx": offset[rows, 0], "lesion_dy": offset[rows, 1], "lesion_dz": offset[rows, 2],
        "noise_hu": st["noise_hu"].to_numpy()[rows],
        "offset_hu": st["offset_hu"].to_numpy()[rows],
    })
    return meta


def render_volumes(meta: pd.DataFrame, *, seed=0, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """CT-like volumes (N, 1, *SHAPE) windowed to [0, 1], and lesion masks (N, *SHAPE).

    Body ellipsoid (fat, -70 HU) in air; liver ellipsoid scaled by age and patient with
    phase-dependent enhancement and smooth heterogeneity; a spherical hypovascular lesion
    (phase-dependent HU) at its location; correlated noise with the site's SD and offset.
    """
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    n = len(meta)
    zz, yy, xx = np.meshgrid(*(np.arange(s, dtype=np.float32) - (s - 1) / 2 for s in SHAPE), indexing="ij")
    images = np.empty((n, 1, *SHAPE), dtype=np.float32)
    masks = np.zeros((n, *SHAPE), dtype=np.uint8)
    lo, hi = WINDOW_HU
    phase = meta["phase"].to_numpy()
    for start in range(0, n, chunk):
        sl = slice(start, min(start + chunk, n))
        m = meta.iloc[sl]
        b = len(m)
        # older livers are smaller (1.08 at age 20 down to 0.92 at 100), times a
        # patient-to-patient size variation
        scale = np.clip(1.0 - 0.002 * (m["age"].to_numpy() - 60), 0.92, 1.08) \
            * np.exp(rng.normal(0, 0.07, b))
        scale = np.clip(scale, 0.8, 1.15).astype(np.float32)[:, None, None, None]
        jitter = rng.normal(0, 1.3, (b, 3)).astype(np.float32)
        cz, cy, cx = (jitter[:, i, None, None, None] for i in range(3))
        semi = np.array([6.8, 7.8, 9.0], dtype=np.float32)  # voxels (z, y, x)
        liver = (((zz - cz) / (semi[0] * scale)) ** 2 + ((yy - cy) / (semi[1] * scale)) ** 2
                 + ((xx - cx) / (semi[2] * scale)) ** 2) <= 1.0
        body = ((zz / 11.5) ** 2 + (yy / 10.5) ** 2 + (xx / 11.5) ** 2) <= 1.0
        liver &= body
        liver_hu = np.array([LIVER_HU[p] for p in phase[sl]], dtype=np.float32)[:, None, None, None]
        lesion_hu = np.array([LESION_HU[p] for p in phase[sl]], dtype=np.float32)[:, None, None, None]
        hu = np.where(body, -70.0, -1000.0).astype(np.float32)  # fat around the liver
        hu = np.where(liver, liver_hu, hu)
        het = ndimage.gaussian_filter(rng.normal(0, 1, (b, *SHAPE)).astype(np.float32), sigma=(0, 3, 3, 3))
        hu = hu + liver * het * (6.0 / max(het.std(), 1e-6))
        # lesions
        pos = m["label"].to_numpy() == 1
        radius = np.where(pos, m["tumor_size_mm"].fillna(0).to_numpy() / 2 / SPACING_MM, 0)
        off = m[["lesion_dz", "lesion_dy", "lesion_dx"]].to_numpy(np.float32)
        centre = off * semi[None, :] * scale[:, 0, 0, 0, None] \
            + jitter + rng.normal(0, 1.2, (b, 3)).astype(np.float32)
        lz, ly, lx = (centre[:, i, None, None, None] for i in range(3))
        r = radius.astype(np.float32)[:, None, None, None]
        aniso = rng.uniform(0.85, 1.15, (b, 3)).astype(np.float32)
        d2 = (((zz - lz) / aniso[:, 0, None, None, None]) ** 2 + ((yy - ly) / aniso[:, 1, None, None, None]) ** 2
              + ((xx - lx) / aniso[:, 2, None, None, None]) ** 2)
        lesion = (d2 <= r ** 2) & body
        # soft lesion edge
        edge = np.clip(r + 0.5 - np.sqrt(d2), 0, 1) * body
        hu = hu + edge * (lesion_hu - np.where(liver, liver_hu, -70.0))
        # correlated CT noise with the site's SD, and the site's calibration offset
        noise = ndimage.gaussian_filter(rng.normal(0, 1, (b, *SHAPE)).astype(np.float32), sigma=(0, 0.8, 0.8, 0.8))
        noise /= noise.std(axis=(1, 2, 3), keepdims=True)
        hu = hu + noise * m["noise_hu"].to_numpy(np.float32)[:, None, None, None] \
            + m["offset_hu"].to_numpy(np.float32)[:, None, None, None]
        images[sl, 0] = np.clip((hu - lo) / (hi - lo), 0, 1)
        masks[sl] = lesion
    return images, masks


def make_cohort(n_patients: int, *, seed=0, prevalence: float = 0.45,
                phase_mix: dict | None = None) -> Cohort:
    meta = sample_cohort_meta(n_patients, prevalence=prevalence, seed=seed, phase_mix=phase_mix)
    images, masks = render_volumes(meta, seed=seed + 1)
    return Cohort(meta, images, masks)


def _lesion_centres(masks: np.ndarray) -> np.ndarray:
    """Centre of mass (voxel index) of each mask; the volume centre when empty."""
    n = len(masks)
    flat = masks.reshape(n, -1).astype(np.float32)
    count = flat.sum(1)
    grids = np.indices(SHAPE).reshape(3, -1).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = (flat @ grids.T) / np.maximum(count, 1)[:, None]
    return np.where(count[:, None] > 0, c, (np.array(SHAPE) - 1) / 2)


def _shift(a: np.ndarray, k: int, axis: int) -> np.ndarray:
    """Translate ``a`` by ``k`` voxels along ``axis``, filling with zeros."""
    out = np.zeros_like(a)
    src = [slice(None)] * a.ndim
    dst = [slice(None)] * a.ndim
    src[axis] = slice(0, a.shape[axis] - k) if k > 0 else slice(-k, None)
    dst[axis] = slice(k, None) if k > 0 else slice(0, a.shape[axis] + k)
    out[tuple(dst)] = a[tuple(src)]
    return out


def train_unet(cohort: Cohort, *, channels, strides, steps: int, seed: int = 0,
               batch_size: int = 8, lr: float = 1e-2):
    """Train a small 3D MONAI UNet (2 output channels, softmax) with Dice + cross-entropy.

    Each step draws ``batch_size`` whole training volumes with random flips; Adam with a
    cosine-decayed learning rate.
    """
    import torch
    from monai.losses import DiceCELoss
    from monai.utils import set_determinism

    from .segment import build_network

    set_determinism(seed=seed)
    rng = np.random.default_rng(seed)
    net = build_network("unet", in_channels=1, out_channels=2, channels=channels, strides=strides,
                        num_res_units=0)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True, batch=True)
    net.train()
    for _ in range(steps):
        idx = rng.integers(0, len(cohort.images), batch_size)
        x, y = cohort.images[idx], cohort.masks[idx][:, None]
        for ax in range(3):
            if rng.random() < 0.5:
                x, y = np.flip(x, ax + 2), np.flip(y, ax + 2)
            shift = int(rng.integers(-4, 5))  # random translation, air (0) shifted in
            if shift:
                x, y = _shift(x, shift, ax + 2), _shift(y, shift, ax + 2)
        x = torch.from_numpy(np.ascontiguousarray(x))
        y = torch.from_numpy(np.ascontiguousarray(y).astype(np.int64))
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        sched.step()
    return net.eval()


def predict_cases(net, images: np.ndarray, *, batch_size: int = 32,
                  threshold: float = 0.5, min_component_voxels: int = MIN_COMPONENT_VOXELS,
                  masks: np.ndarray | None = None, case_ids=None, model: str = ""):
    """Sliding-window inference and per-case summaries (as ``clinrel infer segment``).

    With the reference ``masks`` (and ``case_ids``, ``model``) also the lesions table of
    the same probability maps (:func:`demo_lesions`): returns ``(summaries, lesions)``.
    """
    from .segment import predict_probability, summarize_masks

    out, les = [], []
    for i in range(0, len(images), batch_size):
        prob = predict_probability(net, images[i:i + batch_size], roi_size=SHAPE,
                                   sw_batch_size=batch_size, overlap=0.0, activation="softmax",
                                   tumour_channel=1)
        out.append(summarize_masks(prob, threshold=threshold, min_component_voxels=min_component_voxels,
                                   voxel_volume_mm3=SPACING_MM ** 3))
        if masks is not None:
            les.append(demo_lesions(prob, masks[i:i + batch_size], case_ids[i:i + batch_size],
                                    model, threshold=threshold,
                                    min_component_voxels=min_component_voxels))
    summaries = pd.concat(out, ignore_index=True)
    if masks is None:
        return summaries
    return summaries, pd.concat(les, ignore_index=True)


#: the demo's lesion hit rule (the runner's default: IoU >= 0.1)
HIT_RULE, MIN_OVERLAP = "iou", 0.1


def demo_lesions(prob: np.ndarray, masks: np.ndarray, case_ids, model: str, *,
                 threshold: float = 0.5, min_component_voxels: int = MIN_COMPONENT_VOXELS
                 ) -> pd.DataFrame:
    """The lesions table of a batch of the demo's probability maps against its reference
    masks (:func:`inference_runner.segment.lesion_table` on the 2 mm grid, IoU >= 0.1)."""
    from .segment import lesion_table

    return lesion_table(prob, masks, case_ids=np.asarray(case_ids, dtype=object), model=model,
                        threshold=threshold, min_component_voxels=min_component_voxels,
                        spacing=(SPACING_MM,) * 3, hit_rule=HIT_RULE, min_overlap=MIN_OVERLAP)


def with_locations(lesions: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """``lesions`` with the reference lesions' ``location`` (the position the generator
    drew the tumour at: the case's ``tumor_location``; each demo tumour is one sphere)."""
    loc = meta.set_index("case_id")["tumor_location"]
    out = lesions.copy()
    ref = (out["kind"] == "reference").to_numpy()
    out["location"] = np.where(ref, loc.reindex(out["case_id"]).to_numpy(dtype=object), None)
    out["location"] = out["location"].astype(object).where(out["location"].notna(), None)
    return out


# --------------------------------------------------------------------------- probe study

PROBE_ENCODERS = (
    {"name": "handcrafted_hist", "kind": "handcrafted"},
    {"name": "cnn_rand", "kind": "cnn", "depths": ["mid", "last"], "width": 8},
    {"name": "resnet10_rand", "kind": "resnet", "depths": ["mid", "last"], "width": 8},
    {"name": "resnet18_rand", "kind": "resnet18", "depths": ["mid", "last"], "width": 8},
    {"name": "densenet_rand", "kind": "densenet", "depths": ["mid", "last"], "width": 8},
    # specialists: the same small CNN pretrained on one slice orientation of the training
    # cohort (PROBE_PRETRAIN), frozen afterwards
    {"name": "cnn_axial_pre", "kind": "cnn", "depths": ["mid", "last"], "width": 8},
    {"name": "cnn_coronal_pre", "kind": "cnn", "depths": ["mid", "last"], "width": 8},
)
PROBE_FRACTIONS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
PROBE_SEEDS = (0, 1, 2)
PROBE_SHIFT_SITES = ("site_07", "site_08")
PROBE_SIZE = 32
#: the adapted regime of the demo: LoRA (rank 4) on the convolutions up to the probed
#: depth, 20 Adam steps on mini-batches of 32 (brief, as CRS-Bench's adaptation branch)
PROBE_ADAPT = {"enabled": True, "rank": 4, "alpha": 8.0, "steps": 20, "lr": 5e-3,
               "batch_size": 32}
#: specialist encoders: name -> (the demo dataset whose slices of the *training* cohort
#: pretrain it, steps, learning rate): supervised lesion / no-lesion classification with a
#: linear head on the last depth's pooled features, Adam, mini-batches of 64
PROBE_PRETRAIN = {"cnn_axial_pre": ("ct_axial", 300, 1e-2),
                  "cnn_coronal_pre": ("ct_coronal", 300, 1e-2)}


def pretrain_encoder(spec: dict, images: np.ndarray, labels: np.ndarray, *, steps: int,
                     lr: float, seed: int = 0, batch_size: int = 64) -> dict:
    """Train ``spec``'s network (built as :class:`inference_runner.probe.Encoder` builds it,
    the same initialisation) with a linear head on the pooled features of its last depth to
    classify ``labels``; returns its state dict (the head dropped)."""
    import torch

    from .probe import Encoder, _pooled

    enc = Encoder({**spec, "depths": ["last"]}, seed=seed)
    net = enc.net.train()
    name = enc.modules["last"]
    module = dict(net.named_modules())[name]
    store: list = []
    handle = module.register_forward_hook(lambda m, i, o: store.append(o))
    x = torch.as_tensor(np.asarray(images, np.float32))[:, None]
    y = torch.as_tensor(np.asarray(labels, np.float32))
    with torch.no_grad():
        net(x[:2])
    torch.manual_seed(seed)
    head = torch.nn.Linear(_pooled(store[-1]).shape[1], 1)
    opt = torch.optim.Adam([*net.parameters(), *head.parameters()], lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (batch_size,), generator=g)
        store.clear()
        net(x[idx])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            head(_pooled(store[-1])).squeeze(1), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    handle.remove()
    return {k: v.detach().clone() for k, v in net.eval().state_dict().items()}


def probe_encoders(train: "Cohort", weights_dir, *, seed: int = 0) -> list[dict]:
    """:data:`PROBE_ENCODERS` with the specialists pretrained (:data:`PROBE_PRETRAIN`) on
    the training cohort's slices; their weights are written into ``weights_dir``."""
    import torch

    slices = {d["name"]: d for d in probe_datasets(train, seed=seed + 7)}
    out = []
    for spec in PROBE_ENCODERS:
        spec = dict(spec)
        if spec["name"] in PROBE_PRETRAIN:
            ds, steps, lr = PROBE_PRETRAIN[spec["name"]]
            state = pretrain_encoder(spec, slices[ds]["images"], slices[ds]["labels"],
                                     steps=steps, lr=lr, seed=seed)
            path = Path(weights_dir) / f"{spec['name']}.pt"
            torch.save(state, path)
            spec["weights"] = str(path)
        out.append(spec)
    return out


def probe_datasets(cohort: Cohort, *, seed: int = 0) -> list[dict]:
    """Two 2D datasets from the demo volumes: an axial and a coronal slice through the
    lesion centre (positives) or a random level in the same range (negatives); the axial
    one holds out two sites as an institutional shift."""
    import torch
    import torch.nn.functional as F

    rng = np.random.default_rng(seed)
    n = len(cohort.images)
    centre = np.rint(_lesion_centres(cohort.masks)).astype(int)
    has = cohort.masks.reshape(n, -1).any(1)
    rand = rng.integers(SHAPE[0] // 2 - 4, SHAPE[0] // 2 + 5, (n, 3))
    level = np.where(has[:, None], centre, rand)
    vol = cohort.images[:, 0]
    axial = vol[np.arange(n), level[:, 0]]
    coronal = vol[np.arange(n), :, level[:, 1]]
    label = cohort.meta["label"].to_numpy(int)
    ids = cohort.meta["case_id"].to_numpy(object)

    def up(x):
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[:, None]
        return F.interpolate(t, size=(PROBE_SIZE, PROBE_SIZE), mode="bilinear", align_corners=False)[:, 0].numpy()

    shift = cohort.meta["site"].isin(PROBE_SHIFT_SITES).to_numpy()
    return [
        {"name": "ct_axial", "images": up(axial), "labels": label, "case_ids": ids, "shift_mask": shift},
        {"name": "ct_coronal", "images": up(coronal), "labels": label, "case_ids": ids, "shift_mask": None},
    ]


# --------------------------------------------------------------------------- regenerate


def probe_study(train: "Cohort", test: "Cohort", *, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The demo's probe study: the specialists pretrained on ``train``, then every encoder
    at its depths, frozen and adapted (:data:`PROBE_ADAPT`), on the slices of ``test``."""
    import tempfile

    from .probe import run_probe_study

    with tempfile.TemporaryDirectory() as tmp:
        encoders = probe_encoders(train, tmp, seed=seed)
        return run_probe_study(probe_datasets(test, seed=seed), encoders, fractions=PROBE_FRACTIONS,
                               perturbations=("blur", "jpeg", "contrast", "noise", "crop"),
                               severities=(1, 2, 3), seeds=PROBE_SEEDS, seed=seed,
                               adapt=PROBE_ADAPT)


def probe_manifest() -> dict:
    """The probe study's settings, as run_manifest.json records them."""
    from .probe import depths_of

    return {"probe_encoders": [e["name"] for e in PROBE_ENCODERS],
            "probe": {"encoders": {e["name"]: {"kind": e["kind"], "layers": depths_of(e),
                                               **({"pretrained_on": PROBE_PRETRAIN[e["name"]][0],
                                                   "pretrain_steps": PROBE_PRETRAIN[e["name"]][1]}
                                                  if e["name"] in PROBE_PRETRAIN else {})}
                                  for e in PROBE_ENCODERS},
                      "fractions": list(PROBE_FRACTIONS), "seeds": list(PROBE_SEEDS),
                      "shift_sites": list(PROBE_SHIFT_SITES), "image_size": PROBE_SIZE,
                      "adapt": dict(PROBE_ADAPT)}}


def regenerate_probe(out_dir, *, seed: int = 0, n_patients: int = 440,
                     n_train_patients: int = 240, quiet: bool = False) -> dict:
    """Re-make only the demo's probe side (``runs.parquet``, ``probe_predictions.parquet``)
    from the same cohorts as :func:`regenerate` (no segmentation networks trained; the
    cases and metadata files are not touched) and update ``run_manifest.json`` in
    ``out_dir``: its probe entries, table sizes and the probe's seconds."""
    import json

    import torch
    from monai.utils import set_determinism

    from .writers import MANIFEST_NAME, git_revision, package_versions, write_json, write_parquet

    torch.set_num_threads(2)
    set_determinism(seed=seed)
    out = Path(out_dir)
    t0 = time.perf_counter()
    train = make_cohort(n_train_patients, seed=seed + 100, prevalence=0.5, phase_mix=TRAIN_PHASE_MIX)
    test = make_cohort(n_patients, seed=seed, prevalence=0.45)
    runs, preds = probe_study(train, test, seed=seed)
    write_parquet(runs, out / "runs.parquet")
    write_parquet(preds, out / "probe_predictions.parquet")
    path = out / MANIFEST_NAME
    manifest = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"kind": "demo"}
    manifest.update(probe_manifest())
    manifest.setdefault("tables", {}).update(runs=len(runs), probe_predictions=len(preds))
    manifest.setdefault("seconds", {})["probe"] = round(time.perf_counter() - t0, 2)
    manifest["probe_git_revision"] = git_revision()
    manifest["versions"] = {**manifest.get("versions", {}), **package_versions()}
    write_json(manifest, path)
    if not quiet:
        print(f"[demo] probe study: {len(runs)} runs in {manifest['seconds']['probe']} s -> {out}")
    return {"n_runs": len(runs), "n_predictions": len(preds)}


CASE_COLUMNS = ("case_id", "patient_id", "model", "label", "score", "max_prob", "site", "split", "age",
                "sex", "race", "phase", "scanner", "tumor_size_mm", "tumor_location", "volume_mm3",
                "mean_prob", "n_components")


#: share of the reference-positive cases whose tumour size the registry did not record
UNRECORDED_SIZE = 0.03


def unrecorded_sizes(cases: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """``cases`` with ``tumor_size_mm`` missing for :data:`UNRECORDED_SIZE` of the
    reference-positive cases (both models' rows alike): a size the registry did not record,
    so that the demo shows missing data handled as such (a "Missing" level of the size axis,
    scans left out of the adjusted models with the reason). The volumes were drawn with the
    true size; only the recorded value is removed. Idempotent (the same cases whatever the
    input's sizes)."""
    pos = np.sort(cases.loc[cases["label"] == 1, "case_id"].astype(str).unique())
    rng = np.random.default_rng(seed + 17)
    gone = rng.choice(pos, size=int(round(UNRECORDED_SIZE * len(pos))), replace=False)
    out = cases.copy()
    out.loc[out["case_id"].astype(str).isin(gone), "tumor_size_mm"] = np.nan
    return out


def regenerate(out_dir, *, seed: int = 0, quiet: bool = False, n_patients: int = 440,
               n_train_patients: int = 240, models: dict | None = None, probe: bool = True) -> dict:
    """Make the demo study with real networks and write it into ``out_dir``.

    Writes ``cases.parquet`` (>= 600 cases x 2 models), ``metadata.parquet`` (and its
    inspection files), ``runs.parquet``, ``probe_predictions.parquet`` and
    ``run_manifest.json``. Returns a summary dict
    (``n_cases``, ``n_runs``, ``seconds`` per stage, ``files``).
    """
    import torch
    from monai.utils import set_determinism

    from .metadata.demo import write as write_metadata
    from .writers import write_manifest, write_parquet

    def say(msg):
        if not quiet:
            print(f"[demo] {msg}", flush=True)

    torch.set_num_threads(2)
    set_determinism(seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    models = DEMO_MODELS if models is None else models
    t = {"start": time.perf_counter()}
    train = make_cohort(n_train_patients, seed=seed + 100, prevalence=0.5, phase_mix=TRAIN_PHASE_MIX)
    test = make_cohort(n_patients, seed=seed, prevalence=0.45)
    t["volumes"] = time.perf_counter()
    say(f"{len(train.meta)} training and {len(test.meta)} demo volumes rendered")
    frames, lesion_frames = [], []
    train_seconds = {}
    for j, (name, (channels, strides, steps, lr)) in enumerate(models.items()):
        t0 = time.perf_counter()
        net = train_unet(train, channels=channels, strides=strides, steps=steps, lr=lr, seed=seed + j)
        train_seconds[name] = round(time.perf_counter() - t0, 2)
        res, les = predict_cases(net, test.images, masks=test.masks,
                                 case_ids=test.meta["case_id"].to_numpy(), model=name)
        frames.append(test.meta.assign(model=name, **{c: res[c].to_numpy() for c in res.columns}))
        lesion_frames.append(les)
        say(f"{name}: trained {steps} steps in {train_seconds[name]} s; predictions made")
    cases = unrecorded_sizes(pd.concat(frames, ignore_index=True)[list(CASE_COLUMNS)], seed)
    t["segment"] = time.perf_counter()
    write_parquet(cases, out / "cases.parquet")
    lesions = with_locations(pd.concat(lesion_frames, ignore_index=True), test.meta)
    write_parquet(lesions, out / "lesions.parquet")
    tables = {"cases": cases, "lesions": lesions}
    metadata = write_metadata(cases, out, seed=seed)
    say(f"metadata: {metadata['metadata_rows']} evidence rows, {metadata['reviewed']} reviewed")
    if probe:
        runs, preds = probe_study(train, test, seed=seed)
        write_parquet(runs, out / "runs.parquet")
        write_parquet(preds, out / "probe_predictions.parquet")
        tables.update(runs=runs, probe_predictions=preds)
        say(f"probe study: {len(runs)} runs")
    t["probe"] = time.perf_counter()
    seconds = {"volumes": t["volumes"] - t["start"], "train_and_segment": t["segment"] - t["volumes"],
               "probe": t["probe"] - t["segment"], "total": t["probe"] - t["start"]}
    seconds = {k: round(v, 2) for k, v in seconds.items()}
    write_manifest(out, kind="demo", config_hash="demo-v1", seed=seed, device="cpu", tables=tables,
                   extra={"seconds": seconds, "train_seconds": train_seconds,
                          "models": {k: {"channels": list(v[0]), "strides": list(v[1]), "steps": v[2], "lr": v[3]}
                                     for k, v in models.items()},
                          "threshold_voxels": DEFAULT_THRESHOLD, "spacing_mm": SPACING_MM,
                          "shape": list(SHAPE), "min_component_voxels": MIN_COMPONENT_VOXELS,
                          **probe_manifest(),
                          "lesion_hit_rule": f"{HIT_RULE}>={MIN_OVERLAP:g}",
                          "metadata": metadata})
    say(f"done in {seconds['total']} s -> {out}")
    return {"n_cases": len(test.meta), "n_rows": len(cases), "n_runs": len(tables.get("runs", [])),
            "seconds": seconds, "train_seconds": train_seconds,
            "files": sorted(p.name for p in out.iterdir())}
