"""The report sections of the CRS mechanisms (per domain and shift, adaptation and
protocols, E1/E3/E4/E6) build from a simulated study with layers, regimes, protocols,
a shift condition and label fractions: every table shows numbers of its own CSV, every
figure draws, and every table and figure states its role."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import Tables, run
from analysis.plan import plan_for_tables
from stats import simulate
from stats.crs import read_reference


@pytest.fixture(scope="module")
def study():
    from reports.study import Study

    sim = simulate.crs_runs(n_encoders=5, n_datasets=2, n_seeds=3, perturbations=("blur", "noise"),
                            severities=(1, 3), label_fractions=(0.05, 0.25, 1.0),
                            regimes=("frozen", "adapted"), seed=5)
    r = sim.data
    rng = np.random.default_rng(1)
    mid = r.assign(layer="mid", auroc=np.clip(r["auroc"] - 0.03 + rng.normal(0, 0.005, len(r)), 0, 1))
    runs = pd.concat([mid, r.assign(layer="last")], ignore_index=True)
    runs["val_auroc"] = np.clip(runs["auroc"] + rng.normal(0, 0.01, len(runs)), 0, 1)
    runs["protocol"] = np.where(runs["regime"] == "adapted", "lora", "probe")
    ds = sorted(runs["dataset"].unique())
    plan = plan_for_tables(crs={"bootstrap": {"n_boot": 20}, "n_weights": 20,
                                "encoder_domains": {"enc_01": "A"},
                                "dataset_domains": {ds[0]: "A", ds[1]: "B"}})
    tables = Tables(runs=runs, reference=read_reference(sim.truth["reference"]))
    return Study(plan=plan, tables=tables, results=run(plan, tables, errors="raise"))


@pytest.mark.parametrize("key", ["crs_domains", "crs_adaptation", "crs_mechanisms"])
def test_section_builds_with_tables_figures_and_roles(study, key, tmp_path):
    from reports.sections import _roles, applies, module

    mod = module(key)
    assert applies(mod, study)
    sec = mod.build(study)
    blocks = [_roles.label(study, b) for b in sec.blocks]
    tables = [b for b in blocks if hasattr(b, "display")]
    figures = [b for b in blocks if hasattr(b, "plot")]
    assert tables and figures
    for b in tables + figures:
        assert b.caption.rstrip().endswith((".",)) and ("Exploratory." in b.caption
                                                         or "Prespecified." in b.caption)
    for t in tables:
        assert len(t.display) and len(t.data)
    for f in figures:
        f.save(tmp_path)
        assert (tmp_path / f"{f.name}.png").stat().st_size > 1000


def test_domain_table_shows_the_domain_scores(study):
    from reports.sections import module

    sec = module("crs_domains").build(study)
    t = next(b for b in sec.blocks if getattr(b, "name", "") == "crs_domain_scores")
    dom = study.results["crs"]["domain_scores"]
    r = dom[(dom["estimand"] == "crs") & (dom["encoder"] == "enc_02") & (dom["regime"] == "frozen")]
    ds = r["dataset"].iloc[0]
    shown = t.display.loc[t.display["encoder"] == "enc_02 (frozen)", ds].iloc[0]
    assert shown.startswith(f"{r['estimate'].iloc[0]:.3f}")
    assert t.display.loc[t.display["encoder"] == "enc_01 (frozen)", "domain"].iloc[0] == "A"


def test_mechanisms_cover_e1_e3_e4_e6(study):
    from reports.sections import module

    names = {getattr(b, "name", None) for b in module("crs_mechanisms").build(study).blocks}
    assert {"crs_specialization", "crs_depth", "crs_depth_best_vs_last", "crs_confidence_loss",
            "crs_learning_curves", "crs_label_crossovers"} <= names


def test_methods_text_states_the_rows_and_every_mechanism(study):
    from reports.sections.methods import _crs_mechanisms

    txt = " ".join(_crs_mechanisms(study))
    dec = study.results.decisions.crs
    assert f"{dec.rows['used']} of {dec.rows['runs']} runs" in txt
    for what in ("Per-domain CRS", "Adaptation", "institutional shift", "E1", "E3", "E4",
                 "E5", "E6"):
        assert what in txt, what
    for stream in ("crs_shift", "crs_depth", "crs_labels"):
        assert f"seed {study.plan.seed_for(stream)}" in txt
