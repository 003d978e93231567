"""Coverage of stats.compare_models' paired cluster-bootstrap intervals (issue 31 item 7):
the PPV, NPV and F1 differences between two models, and each model's best-versus-worst
subgroup gap.

Run from the repository root (about three minutes on 2 busy cores)::

    .venv/bin/python bench/compare_coverage.py       # writes bench/compare_coverage.md

Design (known truth). A cohort has P patients with 1 to 3 scans each (uniform); each scan
is a reference positive with probability 0.4 and falls in one of three phases (a scan-level
subgroup, probability 1/3 each), independently. Two models score every scan: ``s_m = mu_m
y + sqrt(tau2) u_patient + sqrt(1 - tau2) (sqrt(0.5) z + sqrt(0.5) e_m)``, with ``u``,
``z``, ``e`` standard normal (``u`` shared by a patient's scans and both models, ``z`` by
both models), so each model's negatives are N(0, 1) and its positives N(mu_m, 1)
marginally; a scan is called positive when ``s_m >= 1``. Model A's ``mu`` depends on the
phase (2.0, 1.6, 1.2: its sensitivity differs between phases), model B's does not (1.5).
The truths are the population (scan-level) values: sensitivity per phase ``1 - Phi(1 -
mu)``, specificity ``Phi(1)``, overall sensitivity their mean, and from them PPV ``pi Se /
(pi Se + (1 - pi)(1 - Sp))``, NPV, F1 ``2 pi Se / (2 pi Se + (1 - pi)(1 - Sp) + pi (1 -
Se))``; the sensitivity gap is the largest minus the smallest phase sensitivity (model B:
0).

Per scenario, ``COHORTS`` cohorts, each analysed by one call of ``stats.compare_models(by=
["phase"], metrics=("ppv", "npv", "f1", "sensitivity"), n_boot=..., gaps=True)`` (patients
as clusters; a plain loop over cohorts: the gaps are per cohort). Reported: the coverage of
the 95% percentile interval, the share of intervals entirely below / above the truth, the
Monte Carlo SE and the mean estimate.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

import stats

MU_A = (2.0, 1.6, 1.2)       # model A per phase
MU_B = 1.5                   # model B, every phase
PHASES = ("p1", "p2", "p3")
PI, T = 0.4, 1.0             # prevalence, threshold


def truths() -> dict:
    sp = float(sps.norm.cdf(T))
    out = {}
    for m, mus in (("model_A", MU_A), ("model_B", (MU_B,) * 3)):
        se_k = [float(1 - sps.norm.cdf(T - mu)) for mu in mus]
        se = float(np.mean(se_k))
        tp, fn, fp, tn = PI * se, PI * (1 - se), (1 - PI) * (1 - sp), (1 - PI) * sp
        out[m] = {"ppv": tp / (tp + fp), "npv": tn / (tn + fn), "f1": 2 * tp / (2 * tp + fp + fn),
                  "sensitivity_gap": max(se_k) - min(se_k)}
    return out


def cohort(rng: np.random.Generator, patients: int, tau2: float) -> pd.DataFrame:
    scans = rng.integers(1, 4, size=patients)
    pat = np.repeat(np.arange(patients), scans)
    k = len(pat)
    y = rng.random(k) < PI
    phase = rng.integers(0, 3, size=k)
    u = rng.normal(size=patients)[pat]
    z = rng.normal(size=k)
    frames = []
    for m, mu in (("model_A", np.asarray(MU_A)[phase]), ("model_B", np.full(k, MU_B))):
        e = rng.normal(size=k)
        s = mu * y + np.sqrt(tau2) * u + np.sqrt(1 - tau2) * (np.sqrt(0.5) * z + np.sqrt(0.5) * e)
        frames.append(pd.DataFrame({"case_id": np.arange(k).astype(str), "model": m,
                                    "label": y.astype(int), "score": s,
                                    "pred": (s >= T).astype(int),
                                    "patient_id": pat.astype(str),
                                    "phase": np.asarray(PHASES)[phase]}))
    return pd.concat(frames, ignore_index=True)


def _cover(est, lo, hi, truth: float) -> dict:
    est, lo, hi = (np.asarray(v, dtype=float) for v in (est, lo, hi))
    ok = ~np.isnan(lo)
    below, above = (hi[ok] < truth).mean(), (lo[ok] > truth).mean()
    cov = 1 - below - above
    return {"coverage": cov, "miss_low": below, "miss_high": above,
            "mc_se": float(np.sqrt(cov * (1 - cov) / ok.sum())), "cohorts": int(ok.sum()),
            "mean_estimate": float(np.nanmean(est)), "truth": truth}


def run(n: int, n_boot: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    tr = truths()
    out = []
    for patients in (80, 200):
        for tau2 in (0.0, 0.5):
            t0 = time.perf_counter()
            rows = []
            for _ in range(n):
                d = cohort(rng, patients, tau2)
                r = stats.compare_models(d, by=["phase"], metrics=("ppv", "npv", "f1",
                                                                   "sensitivity"),
                                         n_boot=n_boot, seed=int(rng.integers(2 ** 31)),
                                         gaps=True, cluster="patient_id")
                rows.append(r[(r["group_var"] == "overall") | r["estimand"].str.endswith("_gap")])
            t = pd.concat(rows, ignore_index=True)
            secs = time.perf_counter() - t0
            sc = {"patients": patients, "tau2": tau2}
            for k in ("ppv", "npv", "f1"):
                part = t[t["estimand"] == f"{k}_difference"]
                out.append({**sc, "statistic": f"{k.upper() if k != 'f1' else 'F1'} difference",
                            "target": "A - B", **_cover(part["estimate"], part["conf_low"],
                                                        part["conf_high"],
                                                        tr["model_A"][k] - tr["model_B"][k])})
            for m, label in (("model_A", "model A (phases differ)"),
                             ("model_B", "model B (no true gap)")):
                part = t[(t["estimand"] == "sensitivity_gap") & (t["model"] == m)]
                out.append({**sc, "statistic": "sensitivity gap, best - worst phase",
                            "target": label, **_cover(part["estimate"], part["conf_low"],
                                                      part["conf_high"],
                                                      tr[m]["sensitivity_gap"])})
            print(patients, tau2, round(secs, 1), flush=True)
    return out


def write(rows: list[dict], path: Path, *, n: int, n_boot: int, seed: int, secs: float) -> None:
    t = pd.DataFrame(rows)
    lines = [
        "# Model comparisons: coverage of the paired cluster-bootstrap differences and gaps",
        "",
        f"Written by `.venv/bin/python bench/compare_coverage.py` (design in its docstring): "
        f"{n} cohorts per scenario, {n_boot} bootstrap replicates, seed {seed}, "
        f"{secs:.0f} s on 2 cores. Nominal 95% percentile intervals of "
        f"`stats.compare_models(n_boot=, gaps=True)`, patients as clusters.",
        "",
        "| patients | tau2 | statistic | target | coverage | below | above | MC SE | truth | "
        "mean estimate |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in t.iterrows():
        f = lambda v, d=3: "" if pd.isna(v) else f"{v:.{d}f}"          # noqa: E731
        lines.append(f"| {r.patients} | {r.tau2:g} | {r.statistic} | {r.target} | "
                     f"{f(r.coverage)} | {f(r.miss_low)} | {f(r.miss_high)} | {f(r.mc_se)} | "
                     f"{f(r.truth, 4)} | {f(r.mean_estimate, 4)} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cohorts", type=int, default=200)
    ap.add_argument("--n-boot", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20261231)
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".md")))
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = run(a.cohorts, a.n_boot, a.seed)
    write(rows, Path(a.out), n=a.cohorts, n_boot=a.n_boot, seed=a.seed,
          secs=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
