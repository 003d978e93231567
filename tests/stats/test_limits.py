"""stats.limits: the caps (memory, rows, hours, counts) read from the plan and the
environment, the work estimates of the engines checked against them before any work, and
the one table of caps that docs/plan.md lists."""
from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import pytest

import stats
from stats import limits
from stats.bootstrap import cluster_bootstrap_work
from stats.crs_resample import crs_bootstrap_work
from stats.schema import ContractError

ROOT = Path(__file__).resolve().parents[2]


def message(fn, *args, exc=ContractError, **kwargs) -> str:
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    return str(info.value)


def _cohort(n=200, models=2):
    return stats.scan_level(stats.simulate.benchx_cohort(n, n_models=models, seed=2).data,
                            threshold=50)


@pytest.mark.parametrize("value", ["lots", "-3", "nan", "0"])
def test_a_bad_environment_cap_is_named(monkeypatch, value):
    monkeypatch.setenv("CLINREL_MAX_MEMORY_GB", value)
    assert "CLINREL_MAX_MEMORY_GB" in message(limits.current)


def test_absurd_bootstrap_sizes_are_refused_in_well_under_a_second():
    cases = _cohort()
    runs = stats.simulate.crs_runs(n_encoders=4, n_datasets=1, n_seeds=3, seed=1).data
    ref = {"panel": ["enc_01", "enc_02"]}
    checks = [
        lambda: stats.cluster_bootstrap(cases, by=["phase"], n_boot=10 ** 12, seed=1),
        lambda: stats.subgroup_metrics(cases, by=["phase"], n_boot=10 ** 12, seed=1),
        lambda: stats.crs_bootstrap(runs, ref, n_boot=10 ** 12, seed=1),
        lambda: stats.ece_ci(cases["label"], cases["score"] / cases["score"].max(),
                             n_boot=10 ** 12, seed=1),
    ]
    for fn in checks:
        t0 = time.perf_counter()
        msg = message(fn)
        assert time.perf_counter() - t0 < 1.0
        assert "n_boot (1,000,000,000,000 replicates)" in msg and "max_memory_gb" in msg


def test_benchx_scale_is_allowed_on_a_24_gb_machine():
    # 85,000 cases x 10 models x 10,000 replicates, 56 subgroup cells (bench/README.md:
    # 1.3 GB peak RSS); the default cap is 80% of physical memory
    caps = limits.Caps(max_memory_gb=limits.DEFAULT_MEMORY_FRACTION * 24, max_rows=10 ** 8,
                       max_hours=limits.DEFAULT_MAX_HOURS, origin={})
    work = limits.check(cluster_bootstrap_work(10_000, 85_000, 56, 10), caps)
    assert 1e9 < work.memory_bytes < 4e9 and work.seconds < 3600
    runs = crs_bootstrap_work(10_000, [(50, [5] * 10, [20] * 10)] * 2)
    assert limits.check(runs, caps).memory_bytes < 2e9


def test_bootstrap_memory_is_blocked_and_the_estimate_bounds_the_peak():
    from stats.bootstrap import _MIN_BLOCK_REPLICATES, boot_counts, case_matrix

    cases = _cohort(1500, 3)
    by = ["phase", "site", ("sex", "phase")]
    bc = boot_counts(case_matrix(cases, by))
    assert bc.block_size(10 ** 9) == max(_MIN_BLOCK_REPLICATES, 2 ** 26 // bc.n_clusters)
    est = cluster_bootstrap_work(1500, bc.n_clusters, bc.G, bc.M).memory_bytes
    tracemalloc.start()
    try:
        stats.cluster_bootstrap(cases, by=by, n_boot=1500, seed=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= est <= 4 * peak, (peak, est)


def test_every_cap_is_in_the_one_table_and_in_the_docs():
    names = [c.name for c in limits.cap_table()]
    assert set(limits.CAPS) <= set(names) and set(limits.COUNT_CAPS) <= set(names)
    table = (ROOT / "docs" / "plan.md").read_text(encoding="utf-8").split("## Caps", 1)[1]
    for cap in limits.cap_table():
        assert re.search(rf"^\| {re.escape(cap.name)} \| {re.escape(cap.value)} \|", table,
                         re.MULTILINE), cap.name
    for key in limits.ESTIMATED:                 # bounded by the estimates, named there
        assert f"`{key}`" in table
    from analysis.plan import keys               # the plan's list caps, declared with them
    for k in keys():
        if k.cap:
            assert re.search(rf"^\| `{re.escape(k.path)}` \| {k.cap[0]:,} \|", table,
                             re.MULTILINE), k.path
