"""Image perturbations at severities 1-3 for the robustness axis.

Each function takes a batch of 2D images ``(N, H, W)`` with intensities in [0, 1] and
returns a new float32 batch of the same shape (inputs are never modified):

========  ====================================================  ===================
name      what                                                  severity 1 / 2 / 3
========  ====================================================  ===================
blur      Gaussian blur (scipy.ndimage), sigma in pixels        0.6 / 1.2 / 2.0
jpeg      JPEG re-encoding with PIL, quality                    50 / 25 / 10
contrast  contrast reduction about each image's mean, factor    0.7 / 0.5 / 0.3
noise     Rician noise sqrt((x + s n1)^2 + (s n2)^2), sigma s   0.03 / 0.06 / 0.10
crop      field-of-view crop (central fraction), resized back   0.85 / 0.70 / 0.55
========  ====================================================  ===================
"""
from __future__ import annotations

import io

import numpy as np

SEVERITY = {
    "blur": (0.6, 1.2, 2.0),
    "jpeg": (50, 25, 10),
    "contrast": (0.7, 0.5, 0.3),
    "noise": (0.03, 0.06, 0.10),
    "crop": (0.85, 0.70, 0.55),
}
PERTURBATIONS = tuple(SEVERITY)


def _level(name: str, severity: int):
    if name not in SEVERITY:
        raise ValueError(f"unknown perturbation {name!r}; use one of {list(PERTURBATIONS)}")
    if severity not in (1, 2, 3):
        raise ValueError(f"severity must be 1, 2 or 3; got {severity!r}")
    return SEVERITY[name][severity - 1]


def blur(images: np.ndarray, severity: int, rng=None) -> np.ndarray:
    from scipy import ndimage

    s = _level("blur", severity)
    return ndimage.gaussian_filter(np.asarray(images, np.float32), sigma=(0, s, s)).astype(np.float32)


def jpeg(images: np.ndarray, severity: int, rng=None) -> np.ndarray:
    from PIL import Image

    q = _level("jpeg", severity)
    x = np.asarray(images, np.float32)
    out = np.empty_like(x)
    u8 = np.clip(np.rint(x * 255), 0, 255).astype(np.uint8)
    for i in range(len(x)):  # PIL encodes one image at a time
        buf = io.BytesIO()
        Image.fromarray(u8[i], mode="L").save(buf, format="JPEG", quality=int(q))
        buf.seek(0)
        out[i] = np.asarray(Image.open(buf), dtype=np.float32) / 255.0
    return out


def contrast(images: np.ndarray, severity: int, rng=None) -> np.ndarray:
    f = _level("contrast", severity)
    x = np.asarray(images, np.float32)
    mean = x.mean(axis=(1, 2), keepdims=True)
    return (mean + (x - mean) * f).astype(np.float32)


def noise(images: np.ndarray, severity: int, rng=None) -> np.ndarray:
    s = _level("noise", severity)
    rng = np.random.default_rng(rng)
    x = np.asarray(images, np.float32)
    n1 = rng.normal(0, s, x.shape).astype(np.float32)
    n2 = rng.normal(0, s, x.shape).astype(np.float32)
    return np.sqrt((x + n1) ** 2 + n2 ** 2).astype(np.float32)


def crop(images: np.ndarray, severity: int, rng=None) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    frac = _level("crop", severity)
    x = np.asarray(images, np.float32)
    h, w = x.shape[1:]
    ch, cw = max(2, int(round(h * frac))), max(2, int(round(w * frac)))
    top, left = (h - ch) // 2, (w - cw) // 2
    sub = torch.from_numpy(np.ascontiguousarray(x[:, None, top:top + ch, left:left + cw]))
    return F.interpolate(sub, size=(h, w), mode="bilinear", align_corners=False)[:, 0].numpy()


_FUNCS = {"blur": blur, "jpeg": jpeg, "contrast": contrast, "noise": noise, "crop": crop}


def apply(images: np.ndarray, name: str, severity: int, *, seed=None) -> np.ndarray:
    """Apply perturbation ``name`` at ``severity`` (1-3) to a batch ``(N, H, W)``."""
    _level(name, severity)
    return _FUNCS[name](images, severity, seed)
