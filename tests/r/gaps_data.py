"""Write the data that tests/r/gaps.R and tests/stats/test_gaps.py read (run from the
repository root):

    .venv/bin/python tests/r/gaps_data.py

One study of bench/gap_decomposition.py's "case mix only" design (400 patients, about
560 positive scans; seed 20261204): group c sits at the sites and tumour sizes where
detection is hard, six sites with fixed effects, a patient effect (SD 0.5). R and Python
read the same CSV.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gap_decomposition import simulate  # noqa: E402

cases = simulate(400, "case mix only", np.random.default_rng(20261204))
cases.to_csv(Path("tests/r/data/gaps_cases.csv"), index=False)
print(len(cases), "scans", cases["group"].value_counts().to_dict())
