"""Write the data that tests/r/transport.R and tests/stats/test_raking.py read (run from
the repository root):

    .venv/bin/python tests/r/transport_data.py

A cases table from the BenchX simulator (two models, 700 scans of about 440 patients with
1-3 scans each, five sites; seed 20261203), called at 50 voxels, with age groups; and a
target population's margins (tests/r/data/transport_target.csv: margin, level, share):
a site mix unlike the study's, more arterial and non-contrast scans, more patients over
75, an even sex mix and a 10% prevalence (the study's is about 40%). R and Python read
the same CSVs.
"""
from pathlib import Path

import numpy as np
import pandas as pd

import stats
from stats import simulate

OUT = Path("tests/r/data")
cases = simulate.benchx_cohort(700, n_models=2, n_sites=5, seed=20261203).data
cases = stats.scan_level(cases, threshold=50)
keep = ["case_id", "patient_id", "model", "label", "pred", "site", "phase", "sex", "age_group"]
cases[keep].to_csv(OUT / "transport_cases.csv", index=False)
rows = []
sites = sorted(cases["site"].unique())
for s, share in zip(sites, np.linspace(1.0, 3.0, len(sites))):
    rows.append(("site", s, float(share)))
for ph, share in {"venous": 0.4, "arterial": 0.25, "delayed": 0.1, "non_contrast": 0.25}.items():
    rows.append(("phase", ph, share))
ages = sorted(cases["age_group"].astype(str).unique())
for a, share in zip(ages, [0.1, 0.3, 0.3, 0.3][:len(ages)]):
    rows.append(("age_group", a, share))
rows += [("sex", "F", 0.5), ("sex", "M", 0.5), ("label", "1", 0.1), ("label", "0", 0.9)]
pd.DataFrame(rows, columns=["margin", "level", "share"]).to_csv(OUT / "transport_target.csv",
                                                                index=False)
print(cases.groupby("model").size().to_dict(), len(rows), "target rows")
