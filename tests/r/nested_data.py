"""Write the data that tests/r/glmer_nested.R, tests/r/contrasts_emmeans.R,
tests/r/variance_partition.R and their Python tests read (run from the repository root):

    .venv/bin/python tests/r/nested_data.py

A BenchX-like cases table (stats.simulate.benchx_cohort: 4,000 scans of about 2,500
patients with 1-3 scans each, 12 sites, two models, seed 20261305) whose detection model
has a site effect (SD 0.6) and a patient effect nested in sites (SD 1.0, shared by both
models), so that neither level of ``(1 | site/patient_id)`` is singular. The columns the
fits use are kept; R and Python read the same CSV.
"""
from pathlib import Path

from stats.simulate import benchx_cohort

sim = benchx_cohort(4000, n_models=2, n_sites=12, site_sd=0.6, patient_sd=1.0, seed=20261305)
d = sim.data
d = d.assign(pred=(d["score"] >= sim.truth["threshold"]).astype(int))
cols = ["case_id", "patient_id", "model", "label", "pred", "site", "age_group", "sex", "race",
        "phase", "tumor_size_mm"]
d[cols].to_csv(Path(__file__).parent / "data" / "glmer_nested.csv", index=False,
               float_format="%.10g")
