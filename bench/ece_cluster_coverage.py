"""Coverage of the ECE's bootstrap interval when patients have several scans
(stats.calibration.ece_ci with cluster=; issue 15).

Run from the repository root (about two minutes on 2 cores)::

    .venv/bin/python bench/ece_cluster_coverage.py               # writes the .md
    .venv/bin/python bench/ece_cluster_coverage.py --reps 100    # a quick look (no file)

Design (known truth). Patients carry 1-4 scans (probabilities 0.4, 0.3, 0.2, 0.1); scan
``i`` of patient ``j`` has a scan-level covariate ``x_i ~ N(0, 1)`` and outcome
``y_i ~ Bernoulli(expit(a + b x_i + u_j))`` with a patient effect ``u_j ~ N(0, sd^2)``
(sd 1 or 2) that the model cannot see; the model predicts
``p_i = expit(c0 + c1 (a + b x_i))`` (a = -0.5, b = 1.5; c0 = 0.3, c1 = 1.2: shifted and
over-confident). The population ECE (15 equal-width bins of p) is
``sum_k P(p in bin k) |E[y | p in bin k] - E[p | p in bin k]|`` with
``E[y | x] = E_u[expit(a + b x + u)]``, by quadrature over x (4,001 points) and u
(Gauss-Hermite). Per study: ``ece_ci(y, p, n_bins=15, n_boot=1000)`` (case bootstrap,
scans as independent) and ``ece_ci(..., cluster=patient)`` (the cluster bootstrap, whole
patients resampled: the report's interval whenever patients repeat), each with the basic
(reflected, the default) and the percentile interval from the same replicates. Reported:
the mean plug-in ECE against the truth (its finite-sample bias), the coverage of the
population ECE by each interval and the mean widths. Monte Carlo SE of a 95% coverage
``sqrt(0.95 * 0.05 / reps)``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import md_table  # noqa: E402
from stats.calibration import ece_ci_many  # noqa: E402

SCANS, PROBS = (1, 2, 3, 4), (0.4, 0.3, 0.2, 0.1)
A, B, C0, C1 = -0.5, 1.5, 0.3, 1.2
BINS = 15


def true_ece(sd: float) -> float:
    """The population ECE (module docstring), by quadrature."""
    x = np.linspace(-8, 8, 4001)
    wx = np.exp(-x ** 2 / 2)
    wx /= wx.sum()
    z, wz = np.polynomial.hermite_e.hermegauss(60)
    wz = wz / wz.sum()
    ey = (wz * expit(A + B * x[:, None] + sd * z)).sum(1)
    p = expit(C0 + C1 * (A + B * x))
    k = np.minimum((p * BINS).astype(int), BINS - 1)
    mass = np.bincount(k, weights=wx, minlength=BINS)
    gap = np.bincount(k, weights=wx * (ey - p), minlength=BINS)
    return float(np.abs(gap).sum())


def study(rng: np.random.Generator, n_patients: int, sd: float):
    m = rng.choice(SCANS, size=n_patients, p=PROBS)
    pat = np.repeat(np.arange(n_patients), m)
    x = rng.normal(size=len(pat))
    y = (rng.random(len(pat)) < expit(A + B * x + rng.normal(0, sd, n_patients)[pat])).astype(int)
    return y, expit(C0 + C1 * (A + B * x)), pat


def run(n_patients: int, sd: float, reps: int, seed: int, n_boot: int = 1000) -> dict:
    rng = np.random.default_rng(seed)
    truth = true_ece(sd)
    est, lims = [], {}
    for _ in range(reps):     # one study per replicate: the unit of a coverage study
        y, p, pat = study(rng, n_patients, sd)
        s = int(rng.integers(2 ** 31))
        for interval in ("basic", "percentile"):
            r = ece_ci_many([(y, p), (y, p, pat)], n_bins=BINS, n_boot=n_boot, seed=s,
                            interval=interval)
            for kind, row in zip(("case", "cluster"), r.itertuples()):
                lims.setdefault((kind, interval), []).append((row.conf_low, row.conf_high))
        est.append(float(r["estimate"].iloc[0]))
    est = np.array(est)
    out = {"patients": n_patients, "patient SD": sd, "true ECE": truth,
           "mean ECE": float(est.mean())}
    for (kind, interval), v in lims.items():
        low, high = np.array(v).T
        name = f"{kind} {interval}"
        out[f"{name} coverage"] = float(np.mean((low <= truth) & (truth <= high)))
        out[f"{name} width"] = float(np.mean(high - low))
    return out


def markdown(df: pd.DataFrame, reps: int, seconds: float) -> str:
    lines = ["# ECE interval with repeated scans: coverage", "",
             f"Written by `.venv/bin/python bench/ece_cluster_coverage.py` (design in its "
             f"docstring): {reps} studies per row, 1,000 bootstrap replicates each, "
             f"{seconds:.0f} s. Monte Carlo SE of a 95% coverage "
             f"{np.sqrt(0.95 * 0.05 / reps):.3f}.", "",
             *md_table(df, lambda c, v: f"{v:.3f}" if isinstance(v, float)
                       and c != "patient SD" else str(v))]
    return "\n".join(lines + ["", READING, ""])


READING = """Reading. The plug-in ECE is biased upward (0.109 on average where the population
ECE is 0.059, with 100 patients; 0.077 with 300): each bin's |observed - predicted| gap
absorbs the bin's noise, and a bootstrap replicate's ECE absorbs it twice. So the
percentile interval, which is centred on the replicates, sits above the truth and covers
it 0-70% of the time. The basic (reflected) interval, the default of ``ece_ci`` since this
table, subtracts the bias the bootstrap sees and covers 85-91%: much better, still short
of 95% (the bootstrap sees less bias than there is), which the report's calibration note
says. Resampling whole patients (the cluster bootstrap, the report's interval whenever
patients repeat) changes little here: the patient effect adds outcome noise that the
binning averages over, so the two widths differ by at most 0.002. An unbiased ECE (e.g. a
debiased squared calibration error) would be the way to nominal coverage; clinrel does not
offer one."""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = [run(n, sd, args.reps, args.seed + 10 * i + j)
            for i, n in enumerate((100, 300)) for j, sd in enumerate((1.0, 2.0))]
    df = pd.DataFrame(rows)
    text = markdown(df, args.reps, time.perf_counter() - t0)
    print(text)
    if args.reps >= 300:
        Path(__file__).with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
