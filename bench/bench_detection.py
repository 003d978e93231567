"""Benchmark: subgroup detection statistics at BenchX scale (issue 3).

Workload (``--full``): ``benchx_cohort(85_000 cases, 10 models)``, 8 subgroup axes (age
group, sex, race, phase, site, scanner, tumour-size bin, tumour location) plus the
age group x phase intersection (56 cells), threshold 50 voxels; ``subgroup_metrics`` with
sensitivity, specificity, PPV, NPV, F1 from 10,000 paired cluster-bootstrap replicates
(patients as clusters) and DeLong AUC per cell. Target: <= 60 s on 2 cores, peak memory
< 4 GB.

Baseline (the way it is done today): a pandas groupby over each axis, then
``scipy.stats.bootstrap`` (paired, vectorized statistic, percentile) per model x cell x
metric. Both run in the same process on a smaller workload where the baseline finishes
(``--baseline-cases`` cases, 3 models, the same axes, ``--baseline-boot`` replicates);
the ratio is baseline / clinrel on that identical workload (count metrics only: AUC is
closed form in both worlds). Target ratio >= 50 (``--full``: 6,000 cases, 1,000
replicates; ``--quick`` is a smoke test at a scale where fixed overheads dominate).
CPU time and the load average are recorded beside wall time: the machines are shared.

Run ``.venv/bin/python bench/bench_detection.py --quick`` or ``--full`` (``--json OUT``).
Prints and returns a dict of figures: median wall times over repeats, the ratio, peak
Python memory (tracemalloc, separate run) and peak RSS.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")  # the target is stated for 2 cores

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

TARGET_S = 60.0
TARGET_RATIO = 50.0
TARGET_MEM_GB = 4.0
COUNT_METRICS = ("sensitivity", "specificity", "ppv", "npv", "f1")
AXES = ["age_group", "sex", "race", "phase", "site", "scanner", "size_bin", "tumor_location"]
BY = [*AXES, ("age_group", "phase")]
SIZE_BINS = {"tumor_size_mm": {"name": "size_bin", "breaks": [0, 10, 20, 30, 1000],
                               "labels": ["<10", "10-19", "20-29", "30+"]}}


def cohort(n_cases: int, n_models: int, seed: int = 1) -> pd.DataFrame:
    from stats import add_bins, scan_level
    from stats.simulate import benchx_cohort

    data = benchx_cohort(n_cases, n_models=n_models, seed=seed).data
    return scan_level(add_bins(data, SIZE_BINS), threshold=50)


def clinrel_run(cases, n_boot, metrics=(*COUNT_METRICS, "auc"), seed=1):
    from stats import subgroup_metrics

    return subgroup_metrics(cases, by=BY, metrics=metrics, ci="bootstrap", n_boot=n_boot,
                            seed=seed, cluster=None)


def _stat(kind):
    def f(y, p, axis=-1):
        tp = (y * p).sum(axis)
        fp = ((1 - y) * p).sum(axis)
        fn = (y * (1 - p)).sum(axis)
        tn = ((1 - y) * (1 - p)).sum(axis)
        num, den = {"sensitivity": (tp, tp + fn), "specificity": (tn, tn + fp),
                    "ppv": (tp, tp + fp), "npv": (tn, tn + fn),
                    "f1": (2 * tp, 2 * tp + fp + fn)}[kind]
        with np.errstate(invalid="ignore", divide="ignore"):
            return num / den
    return f


def baseline_run(cases, n_boot, seed=1):
    """pandas groupby + scipy.stats.bootstrap per model x cell x metric (the user way)."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(seed)
    rows = []
    specs = [("overall", None), *[(a, [a]) for a in AXES], ("age_group:phase", ["age_group", "phase"])]
    for model, mdf in cases.groupby("model", sort=False):
        for name, cols in specs:
            groups = [("overall", mdf)] if cols is None else mdf.groupby(cols, observed=True)
            for level, g in groups:
                y = g["label"].to_numpy(float)
                p = g["pred"].to_numpy(float)
                for metric in COUNT_METRICS:
                    est = _stat(metric)(y, p)
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            res = bootstrap((y, p), _stat(metric), paired=True, vectorized=True,
                                            n_resamples=n_boot, method="percentile",
                                            random_state=rng)
                        lo, hi = res.confidence_interval
                    except ValueError:
                        lo = hi = np.nan
                    rows.append((model, name, str(level), metric, est, lo, hi))
    return pd.DataFrame(rows, columns=["model", "group_var", "group_level", "estimand",
                                       "estimate", "conf_low", "conf_high"])


def _median_time(fn, repeats):
    """Median wall time, all wall times, the last output and the median CPU time (all
    threads; on a shared, loaded machine wall time exceeds CPU time / cores)."""
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    _median_time.cpu = statistics.median(cpu)
    return statistics.median(times), times, out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--baseline-cases", type=int, default=None)
    ap.add_argument("--baseline-boot", type=int, default=None)
    args = ap.parse_args(argv)
    full = args.full and not args.quick
    n_cases, n_models, n_boot = (85_000, 10, 10_000) if full else (8_500, 10, 1_000)
    repeats = args.repeats or (3 if full else 2)
    b_cases = args.baseline_cases or (6_000 if full else 1_500)
    b_boot = args.baseline_boot or (1_000 if full else 300)

    t0 = time.perf_counter()
    cases = cohort(n_cases, n_models)
    sim_s = time.perf_counter() - t0
    load_before = os.getloadavg()[0]
    wall, runs, out = _median_time(lambda: clinrel_run(cases, n_boot), repeats)
    cpu = _median_time.cpu
    n_cells = int(out[["group_var", "group_level"]].drop_duplicates().shape[0])

    tracemalloc.start()
    clinrel_run(cases, n_boot)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    small = cohort(b_cases, 3, seed=2)
    ours_s, ours_runs, _ = _median_time(
        lambda: clinrel_run(small, b_boot, metrics=COUNT_METRICS), max(repeats, 3))
    base_s, base_runs, base = _median_time(lambda: baseline_run(small, b_boot), 1)

    figures = {
        "scale": "full" if full else "quick",
        "n_cases": n_cases, "n_models": n_models, "n_boot": n_boot, "n_cells": n_cells,
        "n_rows_out": int(len(out)), "simulate_s": round(sim_s, 3),
        "wall_s_median": round(wall, 3), "wall_s_runs": [round(t, 3) for t in runs],
        "cpu_s_median": round(cpu, 3), "load_avg_1m_before": round(load_before, 2),
        "cores": os.cpu_count(),
        "target_s": TARGET_S, "meets_time_target": bool(wall <= TARGET_S) if full else None,
        "peak_tracemalloc_gb": round(peak / 2 ** 30, 3), "target_mem_gb": TARGET_MEM_GB,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 3),
        "baseline_workload": f"{b_cases} cases x 3 models, {n_cells} cells, 5 count metrics, "
                             f"{b_boot} replicates",
        "baseline_s": round(base_s, 3), "clinrel_same_workload_s": round(ours_s, 4),
        "ratio_vs_baseline": round(base_s / ours_s, 1), "target_ratio": TARGET_RATIO,
        "baseline_calls": int(len(base)),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=2)
    return figures


if __name__ == "__main__":
    main()
