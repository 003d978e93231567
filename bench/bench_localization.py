"""Benchmark: the lesion-level analysis at BenchX scale (issue 34).

Workload: 85,000 scans of 2 models (patients of 1-3 scans; 45% positive with 1-3
reference lesions each; a prediction hits a lesion with a probability rising with its
size; false-positive lesions Poisson(0.4) per scan; scores tied at 0.01), about 300,000
lesion rows. Timed: ``stats.froc`` (7 rates, by phase, ``n_boot`` patient-cluster
replicates, the lesions table validated inside) and ``stats.lesion_metrics`` (by phase,
lesion size, lesion size x phase). Linearity: the same at a quarter of the scans; the time
ratio should be about 4 (no loop per lesion, case, cell or replicate). Each call's wall
time and its process CPU time are recorded (with the 1-minute load average): the machine is
shared, and on a loaded one the wall time of a call depends on the other processes, the
CPU time much less, so linearity is read on the CPU-time ratio. ``froc_point_cpu_s`` is
``froc`` without replicates (reading and validating the lesions table, one curve), and
``froc_bootstrap_cpu_s`` the difference: the replicates alone.

``--quick``: 8,500 scans, 20 replicates; ``--full``: 85,000 scans, 200 replicates.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from _common import emit, parser  # noqa: E402


def study(n_scans: int, seed: int = 0, models=("model_a", "model_b")):
    """Cases and lesions tables (vectorized; no loop over scans or lesions)."""
    rng = np.random.default_rng(seed)
    per = rng.choice([1, 2, 3], size=n_scans, p=[0.55, 0.3, 0.15])
    patient = np.repeat(np.arange(n_scans), per)[:n_scans]
    pos = rng.random(n_scans) < 0.45
    phase = rng.choice(["venous", "arterial", "delayed", "non_contrast"], n_scans)
    case_id = np.char.add("c", np.arange(n_scans).astype(str)).astype(object)
    n_les = np.where(pos, rng.choice([1, 2, 3], n_scans, p=[0.7, 0.2, 0.1]), 0)
    les_case = np.repeat(np.arange(n_scans), n_les)
    les_rank = np.arange(len(les_case)) - np.repeat(np.cumsum(n_les) - n_les, n_les)
    diam = np.exp(rng.normal(np.log(13), 0.55, len(les_case)))
    cases, lesions = [], []
    for j, m in enumerate(models):       # two models
        p_hit = 1 / (1 + np.exp(-(diam - 10 - 3 * j) / 4))
        hit = rng.random(len(les_case)) < p_hit
        hit_score = np.round(rng.uniform(0.5, 1.0, len(les_case)), 2)
        n_fp = rng.poisson(0.4, n_scans)
        fp_case = np.repeat(np.arange(n_scans), n_fp)
        fp_rank = np.arange(len(fp_case)) - np.repeat(np.cumsum(n_fp) - n_fp, n_fp)
        ref_id = np.char.add("r", (les_rank + 1).astype(str)).astype(object)
        ref = pd.DataFrame({"case_id": case_id[les_case], "model": m, "lesion_id": ref_id,
                            "kind": "reference", "score": np.nan,
                            "volume_mm3": np.pi / 6 * diam ** 3,
                            "matched": np.where(hit, "h" + ref_id.astype(str), None),
                            "dice": np.where(hit, rng.uniform(0.3, 0.9, len(hit)), np.nan)})
        h = np.flatnonzero(hit)
        tp = pd.DataFrame({"case_id": case_id[les_case[h]], "model": m,
                           "lesion_id": "h" + ref_id[h].astype(str), "kind": "prediction",
                           "score": hit_score[h], "volume_mm3": 500.0, "matched": ref_id[h],
                           "dice": ref["dice"].to_numpy()[h]})
        fp = pd.DataFrame({"case_id": case_id[fp_case], "model": m,
                           "lesion_id": np.char.add("f", fp_rank.astype(str)).astype(object),
                           "kind": "prediction", "score": np.round(rng.uniform(0.5, 1, len(fp_case)), 2),
                           "volume_mm3": 200.0, "matched": None, "dice": np.nan})
        lesions += [ref, tp, fp]
        vox = np.bincount(les_case[h], weights=np.full(len(h), 120.0), minlength=n_scans) \
            + np.bincount(fp_case, weights=np.full(len(fp_case), 40.0), minlength=n_scans)
        cases.append(pd.DataFrame({"case_id": case_id, "model": m, "label": pos.astype(int),
                                   "score": vox, "patient_id": patient.astype(str),
                                   "phase": phase, "site": "s1"}))
    cases = pd.concat(cases, ignore_index=True)
    cases["pred"] = (cases["score"] >= 50).astype(int)
    return cases, pd.concat(lesions, ignore_index=True)


def timed(cases, lesions, n_boot: int, repeats: int) -> dict:
    import stats

    t_froc, t_lm, c_froc, c_lm, c_point, load = [], [], [], [], [], []
    for _ in range(repeats):
        load.append(os.getloadavg()[0])
        t0, c0 = time.perf_counter(), time.process_time()
        f = stats.froc(lesions, cases, by=["phase"], n_boot=n_boot, seed=1)
        t_froc.append(time.perf_counter() - t0)
        c_froc.append(time.process_time() - c0)
        c0 = time.process_time()      # the same without replicates: reading + one curve
        stats.froc(lesions, cases, by=["phase"])
        c_point.append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        lm = stats.lesion_metrics(lesions, cases, by=["phase", "lesion_size",
                                                     ("lesion_size", "phase")])
        t_lm.append(time.perf_counter() - t0)
        c_lm.append(time.process_time() - c0)
    return {"froc_s": statistics.median(t_froc), "lesion_metrics_s": statistics.median(t_lm),
            "froc_cpu_s": statistics.median(c_froc),
            "lesion_metrics_cpu_s": statistics.median(c_lm),
            "froc_point_cpu_s": statistics.median(c_point),
            "froc_bootstrap_cpu_s": statistics.median(c_froc) - statistics.median(c_point),
            "load_1m": statistics.median(load),
            "froc_rows": len(f), "lesion_metrics_rows": len(lm)}


def run(full: bool = False, repeats: int | None = None) -> dict:
    n_scans = 85_000 if full else 8_500
    n_boot = 200 if full else 20
    repeats = repeats or (2 if full else 1)
    cases, lesions = study(n_scans)
    big = timed(cases, lesions, n_boot, repeats)
    qc, ql = study(n_scans // 4)
    small = timed(qc, ql, n_boot, repeats)
    return {"scans": n_scans, "models": 2, "lesion_rows": len(lesions),
            "reference_lesions": int((lesions["kind"] == "reference").sum() // 2),
            "n_boot": n_boot, **big,
            "quarter_scale": {"scans": n_scans // 4, **small},
            "time_ratio_full_to_quarter": {
                "froc": big["froc_s"] / small["froc_s"],
                "lesion_metrics": big["lesion_metrics_s"] / small["lesion_metrics_s"]},
            "cpu_ratio_full_to_quarter": {
                "froc": big["froc_cpu_s"] / small["froc_cpu_s"],
                "lesion_metrics": big["lesion_metrics_cpu_s"] / small["lesion_metrics_cpu_s"],
                "froc_point": big["froc_point_cpu_s"] / small["froc_point_cpu_s"],
                "froc_bootstrap": big["froc_bootstrap_cpu_s"] / small["froc_bootstrap_cpu_s"]},
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    args = parser(__doc__).parse_args()
    figures = run(full=args.full, repeats=args.repeats)
    print(figures)
    emit(figures, args.json)
