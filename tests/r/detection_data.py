"""Write the simulator data that tests/r/intervals.R reads (run from the repo root):

    .venv/bin/python tests/r/detection_data.py

benchx_cohort(400 cases, 3 models, seed 20261130): R and Python read the same CSV.
"""
from pathlib import Path

from stats.simulate import benchx_cohort

cols = ["case_id", "patient_id", "model", "label", "score", "site", "phase", "age_group"]
d = benchx_cohort(400, n_models=3, seed=20261130).data[cols]
d.to_csv(Path(__file__).parent / "data" / "detection_sim.csv", index=False)
