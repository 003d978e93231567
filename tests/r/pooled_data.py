"""Write the data that tests/r/pooled_lme4.R and tests/stats/test_pooled.py read (run from the
repository root):

    .venv/bin/python tests/r/pooled_data.py

A cases table (two models, 1,400 scans of 700 patients with 1-3 scans each; seed
20261218): detection depends on age group, phase, a cell effect per age group x phase
(SD 0.6 on the logit scale) and a site effect (SD 0.5), so neither the intersection nor
the site fit is singular. No 'age <40, delayed phase' scan is positive (an empty cell of
the intersection among positives). R and Python read the same CSV.
"""
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

rng = np.random.default_rng(20261218)
n_pat = 700
ages = np.array(["<40", "40-59", "60-74", "75+"])
phases = np.array(["venous", "arterial", "delayed", "non_contrast"])
sites = np.array([f"site_{i:02d}" for i in range(1, 9)])
scans = rng.integers(1, 4, n_pat)
pat = np.repeat(np.arange(n_pat), scans)
n = len(pat)
a_code = rng.choice(4, n_pat, p=[0.1, 0.35, 0.35, 0.2])[pat]
s_code = rng.integers(0, 8, n_pat)[pat]
p_code = rng.choice(4, n, p=[0.45, 0.2, 0.15, 0.2])
age, site, phase = ages[a_code], sites[s_code], phases[p_code]
label = rng.random(n) < 0.45
label[(age == "<40") & (phase == "delayed")] = False
age_eff = np.array([-0.6, 0.0, 0.3, 0.1])
phase_eff = np.array([0.0, -0.7, -0.3, -1.1])
cell_eff = rng.normal(0, 0.6, (4, 4))
site_eff = rng.normal(0, 0.5, 8)
rows = []
for m, shift in (("model_A", 1.6), ("model_B", 0.9)):
    eta = shift + age_eff[a_code] + phase_eff[p_code] + cell_eff[a_code, p_code] + site_eff[s_code]
    p_pos = expit(eta)
    p_neg = expit(2.0 + 0.5 * site_eff[s_code])   # specificity model
    pred = np.where(label, rng.random(n) < p_pos, rng.random(n) > p_neg).astype(int)
    rows.append(pd.DataFrame({"case_id": [f"C{i:05d}" for i in range(n)],
                              "patient_id": [f"P{i:04d}" for i in pat], "model": m,
                              "label": label.astype(int), "score": pred * 100.0, "pred": pred,
                              "site": site, "age_group": age, "phase": phase}))
pd.concat(rows).to_csv(Path(__file__).parent / "data" / "pooled_sim.csv", index=False)
