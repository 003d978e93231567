"""Benchmark: how cost grows with cases and with bootstrap replicates (issue 8, item 2).

Workloads:
  * paired cluster bootstrap of the BenchX subgroup table (the axes of
    ``bench_detection``; 3 models; count metrics + DeLong AUC) at 10k, 20k, 42.5k, 85k and
    170k cases with 1,000 replicates, and at 85k cases with 250 ... 4,000 replicates;
  * the same bootstrap without the DeLong AUC (count metrics only: the AUC needs a sort,
    O(n log n), so its series cannot be strictly linear);
  * the Laplace GLMM of detection at 10k ... 170k cases (positives ~40%).
For each series the exponent b of ``time = a * size**b`` is fitted by least squares on
the log-log minimum times over repeats (noise on a shared machine only adds time); linear or better cost means b <= 1 (reported with the fit). Peak
RSS is recorded for the largest size (no dense cases x replicates matrix may exist).

``python bench/bench_scaling.py --quick|--full [--json OUT]``
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_detection import cohort  # noqa: E402  (one definition of the BenchX workload)

FORMULA = "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)"


def _median(fn, repeats):
    """Minimum over repeats: on a shared machine noise only ever adds time, so the minimum
    is the steadiest estimate of a workload's cost (the exponent is fitted on it)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def exponent(sizes, times) -> float:
    """Least-squares slope of log(time) on log(size)."""
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


def run(full: bool) -> dict:
    import stats
    from bench_detection import BY

    repeats = 5 if full else 1
    case_sizes = [10_000, 20_000, 42_500, 85_000, 170_000] if full else [5_000, 10_000, 20_000]
    boot_sizes = [250, 500, 1_000, 2_000, 4_000] if full else [100, 200, 400]
    fixed_boot = 1_000 if full else 200
    fixed_cases = 85_000 if full else 10_000
    out: dict = {"repeats": repeats}

    def boot(cases, b, metrics=("sensitivity", "specificity", "ppv", "npv", "f1", "auc")):
        return stats.subgroup_metrics(cases, by=BY, metrics=metrics, ci="bootstrap", bootstrap=b, seed=1)

    t_cases = []
    for n in case_sizes:
        c = cohort(n, 3)
        t_cases.append(_median(lambda: boot(c, fixed_boot), repeats))
        print(f"bootstrap {n} cases x {fixed_boot} replicates: {t_cases[-1]:.2f} s", flush=True)
    out["bootstrap_vs_cases_sizes"] = case_sizes
    out["bootstrap_vs_cases_s"] = [round(t, 3) for t in t_cases]
    out["bootstrap_vs_cases_exponent"] = round(exponent(case_sizes, t_cases), 3)

    # the same without the DeLong AUC, whose per-cell sort is O(n log n) by nature
    t_counts = []
    for n in case_sizes:
        c = cohort(n, 3)
        t_counts.append(_median(lambda: boot(c, fixed_boot, ("sensitivity", "specificity", "ppv", "npv", "f1")),
                                repeats))
        print(f"bootstrap (count metrics only) {n} cases: {t_counts[-1]:.2f} s", flush=True)
    out["bootstrap_counts_only_vs_cases_s"] = [round(t, 3) for t in t_counts]
    out["bootstrap_counts_only_vs_cases_exponent"] = round(exponent(case_sizes, t_counts), 3)

    c = cohort(fixed_cases, 3)
    t_boot = []
    for b in boot_sizes:
        t_boot.append(_median(lambda: boot(c, b), repeats))
        print(f"bootstrap {fixed_cases} cases x {b} replicates: {t_boot[-1]:.2f} s", flush=True)
    out["bootstrap_vs_replicates_sizes"] = boot_sizes
    out["bootstrap_vs_replicates_s"] = [round(t, 3) for t in t_boot]
    out["bootstrap_vs_replicates_exponent"] = round(exponent(boot_sizes, t_boot), 3)

    t_glmm = []
    for n in case_sizes:
        cc = cohort(n, 1)
        t_glmm.append(_median(lambda: stats.fit_adjusted(cc, FORMULA, method="glmm"), repeats))
        print(f"GLMM {n} cases: {t_glmm[-1]:.2f} s", flush=True)
    out["glmm_vs_cases_sizes"] = case_sizes
    out["glmm_vs_cases_s"] = [round(t, 3) for t in t_glmm]
    out["glmm_vs_cases_exponent"] = round(exponent(case_sizes, t_glmm), 3)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["linear_or_better"] = all(out[k] <= 1.1 for k in ("bootstrap_vs_cases_exponent",
                                                          "bootstrap_vs_replicates_exponent",
                                                          "glmm_vs_cases_exponent"))
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--full", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    figures = run(full=args.full)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
