"""Shared fixtures: small simulated studies (seeded) and a temporary folder helper."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def benchx_small():
    from stats import simulate

    return simulate.benchx_cohort(400, n_models=2, n_sites=6, seed=11)


@pytest.fixture(scope="session")
def crs_small():
    from stats import simulate

    return simulate.crs_runs(n_encoders=6, n_datasets=2, n_seeds=3, seed=11)


def run_demo(only):
    """The demo plan, its tables and the analyses ``only`` (with whatever they need), run
    quietly under the plan's limits: ``(plan, tables, results)``."""
    import warnings

    from clinrel.cli.report import demo_plan_path
    from analysis import load_plan, run
    from analysis.inputs import load_tables, plan_limits

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tables = load_tables(plan)
        return plan, tables, run(plan, tables, only=list(only), errors="raise")


def snapshot(folder):
    """sha256 of every file (hidden ones included) and a marker for every folder below
    ``folder``: any file added, changed or removed shows up as a difference."""
    import hashlib
    import os
    from pathlib import Path

    snap = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            snap[str(Path(root, d).relative_to(folder)) + "/"] = "dir"
        for f in files:
            p = Path(root, f)
            snap[str(p.relative_to(folder))] = ("link:" + os.readlink(p) if p.is_symlink()
                                                else hashlib.sha256(p.read_bytes()).hexdigest())
    return snap


def dead_pid() -> int:
    """The id of a process that has exited."""
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid
