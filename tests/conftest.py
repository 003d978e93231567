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
