"""Coverage of Cohen's kappa interval when patients have several scans
(analysis.metadata.kappa_interval with cluster=; issue 15).

Run from the repository root (about a minute on 2 cores)::

    .venv/bin/python bench/kappa_cluster_coverage.py              # writes the .md
    .venv/bin/python bench/kappa_cluster_coverage.py --reps 200   # a quick look (no file)

Design (known truth). Patients carry 1-4 scans (probabilities 0.4, 0.3, 0.2, 0.1); each
scan has a true category (three, shares 0.5, 0.3, 0.2) that rater a reads correctly;
rater b misreads a scan (writes a uniformly drawn category) with a patient-level
propensity ``expit(-1.5 + sd u_j)``, ``u_j ~ N(0, 1)`` (sd 1 or 2), so disagreements
cluster within patients. The truth is the population kappa of the process (one study of
200,000 patients). Per study, one call of ``kappa_interval(a, b, cluster=patient)``
gives kappa, its linearization SE over patients and the default interval (t quantile on
C - 1 degrees of freedom, method ``linearization-cluster-t``); from the same kappa and SE
the interval with a normal quantile (clinrel's interval before this table) and, with
cases as independent, ``kappa_interval(a, b)`` (Fleiss-Cohen-Everitt). Reported: coverage
of the truth by each, and the default's error in each tail (``truth below`` its lower
limit, ``truth above`` its upper limit; nominal 2.5% each); Monte Carlo SE ``sqrt(0.95 * 0.05 / reps)``.

Each simulated study is one call of the public function (a loop over studies, not over
cases or replicates inside the estimator).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import md_table  # noqa: E402
from analysis.metadata import kappa_interval  # noqa: E402

PATIENTS = (10, 20, 40, 100)
SDS = (1.0, 2.0)


def study(rng: np.random.Generator, n_pat: int, sd: float):
    """One study's two raters' categories and patient ids (module docstring)."""
    m = rng.choice([1, 2, 3, 4], n_pat, p=[0.4, 0.3, 0.2, 0.1])
    pid = np.repeat(np.arange(n_pat), m)
    truth = rng.choice(3, len(pid), p=[0.5, 0.3, 0.2])
    miss = rng.random(len(pid)) < expit(-1.5 + sd * rng.normal(size=n_pat))[pid]
    return truth, np.where(miss, rng.choice(3, len(pid)), truth), pid


def coverage(n_pat: int, sd: float, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    truth = kappa_interval(*study(np.random.default_rng(seed + 1), 200_000, sd)[:2])["kappa"]
    z = norm.ppf(0.975)
    hit = {"t (default)": 0, "truth below": 0, "truth above": 0, "normal": 0,
           "independent": 0}
    for _ in range(reps):
        a, b, pid = study(rng, n_pat, sd)
        ki = kappa_interval(a, b, cluster=pid)
        ind = kappa_interval(a, b)
        hit["t (default)"] += ki["conf_low"] <= truth <= ki["conf_high"]
        hit["truth below"] += truth < ki["conf_low"]
        hit["truth above"] += truth > ki["conf_high"]
        hit["normal"] += (max(-1, ki["kappa"] - z * ki["std_error"]) <= truth
                          <= min(1, ki["kappa"] + z * ki["std_error"]))
        hit["independent"] += ind["conf_low"] <= truth <= ind["conf_high"]
    return {"patients": n_pat, "patient SD": sd, "true kappa": truth,
            **{k: 100 * v / reps for k, v in hit.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = pd.DataFrame([coverage(n, sd, args.reps, seed=int(100 * sd + n))
                       for sd in SDS for n in PATIENTS])
    secs = time.perf_counter() - t0
    print(df.round(3).to_string(index=False))
    if args.reps != 4000:
        return
    se = 100 * np.sqrt(0.95 * 0.05 / args.reps)
    lines = ["# Coverage of Cohen's kappa interval with repeated scans", "",
             f"Written by `.venv/bin/python bench/kappa_cluster_coverage.py` (design in its "
             f"docstring): {args.reps} studies per row, {secs:.0f} s. Coverage in % of the "
             f"nominal 95% interval; Monte Carlo SE {se:.2f}%.", "",
             *md_table(df, lambda c, v: f"{v:.0f}" if c == "patients"
                       else f"{v:.3f}" if c == "true kappa" else f"{v:.1f}"), "", READING]
    (ROOT / "bench" / "kappa_cluster_coverage.md").write_text("\n".join(lines) + "\n")


READING = """Reading. With repeated scans the default (linearization SE over patients, t
quantile on C - 1 df, as R's `confint(svycontrast(...), df = degf(design))`) covers
94-95% from 100 patients on and falls short with few patients: about 89-91% with 10,
91-93% with 20, 93-94% with 40. Its misses are mostly from below (the truth under the
lower limit: 4-9% against 1-2% above): a small study often sees none of the misreads of
the few patients prone to them, so its kappa is too high and its SE too small together,
which no quantile repairs. The t quantile adds 3-4 points over the normal one (clinrel's
interval before this table) with 10 patients and under 1.5 from 20 on; cases as independent (Fleiss-Cohen-Everitt) cover less at every
size, 84-93%. The report's agreement table gives the number of patients beside each
kappa; with fewer than about 40 patients read kappa's interval as too narrow."""

if __name__ == "__main__":
    main()
