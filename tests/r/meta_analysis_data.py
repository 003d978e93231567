"""Write the data that tests/r/meta_analysis.R and tests/stats/test_meta_analysis.py read
(run from the repository root):

    /work/main/.venv/bin/python tests/r/meta_analysis_data.py

Two files under tests/r/data/:

* ``meta_analysis_counts.csv`` (dataset, site, x, n): per-site successes ``x`` of ``n``
  (e.g. detected positives of positives), one independent scan per patient. Datasets:
  ``heterogeneous`` (8 sites, proportions 0.55-0.95), ``homogeneous`` (6 sites, REML
  tau2 at its boundary 0), ``zero_cell`` (7 sites, two with x = n and one with x = 0:
  escalc's 0.5 correction), ``two_sites`` (k = 2), ``many_sites`` (25 sites, seed
  20261232), ``identical`` (4 sites of 17 / 20: Q = 0 and the Knapp-Hartung variance 0),
  ``small`` (5 sites of 3-9 scans), ``overshoot`` (8 sites, six with x = n: from the
  Hedges start 0 a Fisher step overshoots below 0, and metafor halves it; a projection
  onto 0 would cycle between 0 and 0.81).
* ``meta_analysis_scans.csv``: a cases table (one model, 9 sites, 835 scans of 380
  patients with 1-4 scans each; seed 20261233): each patient's probability of a correct
  call is Beta-distributed around the site's (intra-patient correlation 0.4), so
  scans of one patient are correlated; a phase per scan. Site ``s9`` has two patients
  only (a site whose design effect rests on few clusters); site ``s8``'s negatives are
  all called correctly (specificity 1 with repeats: design effect not estimable).
"""
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent / "data"

# ----------------------------------------------------------------------------- counts
counts = {
    "heterogeneous": ([44, 30, 61, 18, 52, 25, 70, 38], [50, 48, 66, 33, 60, 30, 74, 52]),
    "homogeneous": ([34, 41, 28, 45, 30, 38], [40, 48, 33, 53, 36, 44]),
    "zero_cell": ([20, 15, 0, 31, 12, 26, 9], [20, 18, 6, 36, 12, 30, 14]),
    "two_sites": ([40, 22], [45, 35]),
    "identical": ([17, 17, 17, 17], [20, 20, 20, 20]),
    "small": ([2, 5, 7, 3, 8], [3, 6, 9, 5, 9]),
    "overshoot": ([6, 3, 2, 6, 12, 7, 8, 12], [6, 3, 2, 6, 13, 7, 12, 12]),
}
rng = np.random.default_rng(20261232)
n_many = rng.integers(15, 120, 25)
p_many = 1 / (1 + np.exp(-(rng.normal(1.6, 0.6, 25))))
counts["many_sites"] = (list(rng.binomial(n_many, p_many)), list(n_many))
rows = [{"dataset": name, "site": f"s{i + 1:02d}", "x": int(x), "n": int(n)}
        for name, (xs, ns) in counts.items() for i, (x, n) in enumerate(zip(xs, ns))]
pd.DataFrame(rows).to_csv(HERE / "meta_analysis_counts.csv", index=False)

# ----------------------------------------------------------------------------- scans
rng = np.random.default_rng(20261233)
icc = 0.4
sites = [f"s{i}" for i in range(1, 10)]
patients_per_site = [60, 55, 50, 50, 45, 45, 40, 33, 2]
sens = [0.88, 0.80, 0.92, 0.70, 0.85, 0.95, 0.78, 0.83, 0.75]
spec = [0.90, 0.93, 0.88, 0.95, 0.91, 0.97, 0.89, 1.00, 0.90]
out = []
pid = 0
for s, P, se, sp in zip(sites, patients_per_site, sens, spec):
    for _ in range(P):
        k = int(rng.choice([1, 2, 3, 4], p=[0.35, 0.3, 0.2, 0.15]))
        label = int(rng.random() < 0.55)
        mean = se if label else sp
        if mean >= 1.0:
            p_right = 1.0
        else:
            a, b = mean * (1 - icc) / icc, (1 - mean) * (1 - icc) / icc
            p_right = rng.beta(a, b)
        right = rng.random(k) < p_right
        pred = right.astype(int) if label else (~right).astype(int)
        phase = rng.choice(["venous", "arterial"], size=k, p=[0.6, 0.4])
        for j in range(k):
            out.append({"case_id": f"C{len(out):05d}", "patient_id": f"P{pid:04d}",
                        "model": "model_A", "label": label, "score": float(pred[j] * 100),
                        "pred": int(pred[j]), "site": s, "phase": phase[j]})
        pid += 1
pd.DataFrame(out).to_csv(HERE / "meta_analysis_scans.csv", index=False)
