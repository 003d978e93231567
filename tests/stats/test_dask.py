"""Scale-out: every function that resamples or fits many models gives identical
results on a Dask distributed cluster (LocalCluster, 2 worker processes) and locally."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats import simulate

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def cases():
    sim = simulate.benchx_cohort(500, n_models=3, n_sites=6, seed=41)
    return stats.scan_level(sim.data, threshold=50)


def test_cluster_bootstrap_identical(client, cases):
    kw = dict(by=["phase", ("age_group", "phase")], n_boot=300, seed=5, ci="bootstrap")
    local = stats.subgroup_metrics(cases, **kw)
    remote = stats.subgroup_metrics(cases, scheduler=client, **kw)
    pd.testing.assert_frame_equal(local, remote)
    # also through a scheduler address (a client made and closed inside)
    by_address = stats.subgroup_metrics(cases, scheduler=client.scheduler.address, **kw)
    pd.testing.assert_frame_equal(local, by_address)


def test_crs_bootstrap_identical(client):
    runs = simulate.crs_runs(n_encoders=5, n_datasets=2, n_seeds=3, seed=41).data
    ref = {"panel": ["enc_01", "enc_02", "enc_03"]}
    local = stats.crs_bootstrap(runs, ref, n_boot=400, seed=3)
    remote = stats.crs_bootstrap(runs, ref, n_boot=400, seed=3, scheduler=client)
    pd.testing.assert_frame_equal(local.scores(), remote.scores())
    pd.testing.assert_frame_equal(local.rank_probabilities(2), remote.rank_probabilities(2))


def test_per_model_fits_identical(client, cases):
    f = "detected ~ phase + np.log(tumor_size_mm)"
    local = stats.fit_adjusted(cases, f, method="glmm")
    remote = stats.fit_adjusted(cases, f, method="glmm", scheduler=client)
    pd.testing.assert_frame_equal(local.tidy(), remote.tidy())
    assert set(local.tidy()["model"]) == {"model_A", "model_B", "model_C"}


@pytest.mark.slow  # a whole report (about 45 s on 2 cores): make test-all
def test_report_on_a_cluster_equals_local(client, tmp_path):
    """`clinrel report --scheduler ADDRESS` (and `scheduler:` in the plan) gives the same
    tables as a local render."""
    import warnings

    from analysis.plan import PlanError, load_plan
    from reports.render import render_report
    from clinrel.cli.report import demo_plan_path

    plan = load_plan(demo_plan_path())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_report(plan, tmp_path / "local", formats=(), draw=False, only=("subgroups", "adjusted", "crs"))
        import dataclasses

        render_report(plan.updated({"scheduler": client.scheduler.address}), tmp_path / "remote",
                      formats=(), draw=False, only=("subgroups", "adjusted", "crs"))
    local = sorted((tmp_path / "local" / "tables").glob("*.csv"))
    assert local
    for p in local:
        assert p.read_bytes() == (tmp_path / "remote" / "tables" / p.name).read_bytes(), p.name
    import shutil

    for f in demo_plan_path().parent.iterdir():
        if f.suffix in (".parquet", ".yaml"):
            shutil.copy(f, tmp_path / f.name)
    bad = tmp_path / "plan.yaml"
    bad.write_text(bad.read_text() + "\nscheduler: 3\n")
    with pytest.raises(PlanError, match="scheduler"):
        load_plan(bad)
