"""Benchmark: the inference runner's per-case work (issue 6).

Workloads:

- ``summaries``: per-case summaries (predicted voxels, components, max/mean probability)
  of a batch of probability maps by :func:`inference_runner.segment.summarize_masks`
  (one ``scipy.ndimage.label`` call for the whole batch, bincount reductions) against the
  baseline of a Python loop that labels and summarises one case at a time. Ratio =
  baseline / clinrel on the same maps (``--quick``: 128 maps of 24^3; ``--full``: 512
  maps of 48^3; smoothed noise thresholded at 0.75: sparse masks of many small components, the
  speckle an undertrained network produces).
- ``network``: sliding-window inference throughput (cases per second) of the demo's
  UNet (channels 8-16-32) on 24^3 volumes, CPU, 2 threads.
- ``segment``: ``clinrel infer segment`` end to end (NIfTI read, transforms, inference,
  part files, merge) on small NIfTI files written to a scratch folder, cases per second.

Run ``.venv/bin/python bench/bench_inference.py --quick`` or ``--full``. Prints and
returns a dict: median wall times over repeats, the ratio, peak RSS.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402


def _timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _maps(n, size, seed=0):
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    x = ndimage.gaussian_filter(rng.random((n, size, size, size), dtype=np.float32), sigma=(0, 0.8, 0.8, 0.8))  # speckle: many small components
    lo, hi = x.min(axis=(1, 2, 3), keepdims=True), x.max(axis=(1, 2, 3), keepdims=True)
    return (x - lo) / (hi - lo)


THRESHOLD = 0.75  # a few per cent of voxels above it: sparse masks, many small components


def baseline_summaries(prob, threshold=THRESHOLD, min_size=8):
    """One case at a time: label, drop small components, summarise."""
    from scipy import ndimage

    rows = []
    for p in prob:
        lab, n = ndimage.label(p >= threshold)
        keep = np.zeros(p.shape, bool)
        comps = 0
        for k in range(1, n + 1):
            m = lab == k
            if m.sum() >= min_size:
                keep |= m
                comps += 1
        rows.append((keep.sum(), comps, p.max(), p[keep].mean() if keep.any() else np.nan))
    return rows


def bench_summaries(n, size, repeats):
    from inference_runner.segment import summarize_masks

    prob = _maps(n, size)
    t_new, new = _timed(lambda: summarize_masks(prob, threshold=THRESHOLD, min_component_voxels=8), repeats)
    t_old, old = _timed(lambda: baseline_summaries(prob), 1)
    old = np.array(old, dtype=float)
    assert np.array_equal(new["pred_voxels"].to_numpy(), old[:, 0])  # same answers
    assert np.array_equal(new["n_components"].to_numpy(), old[:, 1])
    return {"summaries_cases": n, "summaries_size": size, "summaries_s": round(t_new, 4),
            "summaries_baseline_s": round(t_old, 4), "summaries_ratio": round(t_old / t_new, 1)}


def bench_network(n, repeats):
    import torch

    from inference_runner.demo import SHAPE
    from inference_runner.segment import build_network, predict_probability

    torch.set_num_threads(2)
    net = build_network("unet", channels=(8, 16, 32), strides=(2, 2), num_res_units=0).eval()
    x = np.random.default_rng(0).random((n, 1, *SHAPE), dtype=np.float32)
    t, _ = _timed(lambda: predict_probability(net, x, roi_size=SHAPE, sw_batch_size=32, overlap=0.0), repeats)
    return {"network_cases": n, "network_s": round(t, 3), "network_cases_per_s": round(n / t, 1)}


def bench_segment(n):
    import nibabel as nib
    import pandas as pd
    import torch

    from inference_runner.config import validate_segment_config
    from inference_runner.segment import build_network, run_segment

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rng = np.random.default_rng(0)
        for i in range(n):
            nib.save(nib.Nifti1Image(rng.normal(60, 30, (32, 32, 24)).astype(np.float32), np.diag([1.5, 1.5, 2, 1])),
                     str(tmp / f"c{i}.nii.gz"))
        pd.DataFrame({"case_id": [f"c{i}" for i in range(n)], "image": [f"c{i}.nii.gz" for i in range(n)],
                      "label": 0, "site": "s"}).to_csv(tmp / "cases.csv", index=False)
        kw = {"channels": [8, 16, 32], "strides": [2, 2], "num_res_units": 0}
        torch.save(build_network("unet", **kw).state_dict(), tmp / "m.pt")
        cfg = validate_segment_config({
            "cases": "cases.csv", "output": "out", "device": "cpu",
            "transforms": {"spacing": [2.0, 2.0, 2.0], "window": [-100, 240]},
            "network": {"name": "unet", "weights": "m.pt", "kwargs": kw},
            "inference": {"roi_size": [24, 24, 24], "sw_batch_size": 4}}, file="bench", base=tmp)
        t0 = time.perf_counter()
        run_segment(cfg)
        t = time.perf_counter() - t0
    return {"segment_cases": n, "segment_s": round(t, 3), "segment_cases_per_s": round(n / t, 1)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--full", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    full = args.full
    out = {"mode": "full" if full else "quick"}
    out.update(bench_summaries(512 if full else 128, 48 if full else 24, args.repeats))
    out.update(bench_network(256 if full else 64, args.repeats))
    out.update(bench_segment(40 if full else 10))
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
