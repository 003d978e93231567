"""Fuzzing the table readers: whatever bytes or table a user gives, ``read_cases`` and
``read_runs`` either return a frame that meets the contract or raise ``ContractError``,
never another exception. A bounded quick run is part of ``make test``;
the long run is marked slow (``make test-all``)."""
from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stats
from stats.schema import CASES_REQUIRED, RUNS_REQUIRED, ContractError

_TMP = Path(tempfile.mkdtemp(prefix="clinrel-fuzz-"))

cell = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                 st.sampled_from(["", "0", "1", "abc", "NA", "1e400", "-0", "validation", "clean",
                                  "test", "train", " 1 ", "\u00e9", "<b>&"]))


def _frame(columns, rows):
    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame(columns=columns)


def _check(reader, obj):
    try:
        out = reader(obj)
    except ContractError as exc:
        assert str(exc)  # a message, never empty
        return
    assert len(out) > 0


cases_cols = st.lists(st.sampled_from([*CASES_REQUIRED, "patient_id", "pred", "split", "age", "x"]),
                      min_size=1, max_size=8)
runs_cols = st.lists(st.sampled_from([*RUNS_REQUIRED, "regime", "brier"]), min_size=1, max_size=10)


def _fuzz_tables(cols_strategy, reader, max_examples):
    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cols=cols_strategy, data=st.data())
    def run(cols, data):
        rows = data.draw(st.lists(st.lists(cell, min_size=len(cols), max_size=len(cols)), max_size=6))
        df = _frame(cols, rows)
        _check(reader, df)
        p = _TMP / "t.csv"
        df.to_csv(p, index=False)
        _check(reader, p)

    run()


def _fuzz_bytes(reader, suffix, max_examples):
    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(raw=st.binary(max_size=400) | st.text(max_size=300).map(lambda s: s.encode("utf-8")))
    def run(raw):
        p = _TMP / f"b{suffix}"
        p.write_bytes(raw)
        _check(reader, p)

    run()


@pytest.mark.parametrize("reader, cols", [(stats.read_cases, cases_cols), (stats.read_runs, runs_cols)])
def test_fuzz_tables_quick(reader, cols):
    _fuzz_tables(cols, reader, 400)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".tsv"])
def test_fuzz_bytes_quick(suffix):
    _fuzz_bytes(stats.read_cases, suffix, 100)


@pytest.mark.slow
@pytest.mark.parametrize("reader, cols", [(stats.read_cases, cases_cols), (stats.read_runs, runs_cols)])
def test_fuzz_tables_long(reader, cols):
    _fuzz_tables(cols, reader, 3000)


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_fuzz_bytes_long(suffix):
    _fuzz_bytes(stats.read_cases, suffix, 2000)
