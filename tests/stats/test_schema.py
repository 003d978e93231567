"""Every contract violation of the cases and runs tables gives its own message that names
the file, the column, the rows and the fix."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import stats
from stats import schema
from stats.schema import ContractError


def _cases(n=6, models=("m1", "m2")):
    rows = []
    for m in models:
        for i in range(n):
            rows.append({"case_id": f"c{i}", "model": m, "label": i % 2, "score": float(10 * i),
                         "site": "s1" if i < 3 else "s2"})
    return pd.DataFrame(rows)


def _runs():
    from stats import simulate

    return simulate.crs_runs(n_encoders=2, n_datasets=1, n_seeds=2, perturbations=("blur",),
                             severities=(1,), seed=3).data


def _write(tmp_path, df, name="cases.csv"):
    p = tmp_path / name
    df.to_csv(p, index=False)
    return p


def _err(fn, *a, **k) -> ContractError:
    with pytest.raises(ContractError) as info:
        fn(*a, **k)
    return info.value


def test_valid_cases_roundtrip(tmp_path):
    df = _cases()
    out = stats.read_cases(_write(tmp_path, df))
    assert len(out) == len(df)
    assert out["label"].dtype == np.int64
    assert (out["patient_id"] == out["case_id"]).all()  # default cluster = case


@pytest.mark.parametrize(
    "mutate, column, rows, words",
    [
        (lambda d: d.drop(columns="score"), "score", [], "required column(s) 'score' missing"),
        (lambda d: d.assign(score=d["score"].astype(object).where(d.index != 3, "abc")), "score", [4],
         "must be numeric"),
        (lambda d: d.assign(label=d["label"].where(d.index != 2, 2)), "label", [3], "must be 0/1"),
        (lambda d: d.assign(label=d["label"].where(d.index != 4, np.nan)), "label", [5], "missing values"),
        (lambda d: d.assign(score=d["score"].where(d.index != 1, np.nan)), "score", [2], "missing values"),
        (lambda d: d.assign(score=d["score"].where(d.index != 5, np.inf)), "score", [6], "must be finite"),
        (lambda d: d.assign(score=d["score"].where(d.index != 0, -1.0)), "score", [1], "must be >= 0"),
        (lambda d: pd.concat([d, d.iloc[[2]]], ignore_index=True), "case_id", [13], "duplicate"),
        (lambda d: d.drop(index=[8]), "case_id", [3], "do not cover the same cases"),
        (lambda d: d.assign(split=["validation", "test", "train"] * 4), "split", [3, 6, 9, 12], "'validation' or 'test'"),
        (lambda d: d.assign(pred=[0, 1, 5] * 4), "pred", [3, 6, 9, 12], "must be 0/1"),
        (lambda d: d.assign(case_id=d["case_id"].where(d.index != 0, "")), "case_id", [1], "empty identifiers"),
        (lambda d: d.assign(age=[30.0, 40.0, 500.0] * 4), "age", [3, 6, 9, 12], "must lie in [0, 130]"),
    ],
)
def test_cases_violations_name_file_column_rows_fix(tmp_path, mutate, column, rows, words):
    path = _write(tmp_path, mutate(_cases()))
    err = _err(stats.read_cases, path)
    msg = str(err)
    assert str(path) in msg, msg
    assert words in msg, msg
    assert err.column == column
    assert err.rows[: len(rows)] == rows, (err.rows, msg)
    for r in rows[:5]:
        assert re.search(rf"\b{r}\b", msg), msg
    # the fix: every message tells the user what to do
    assert re.search(r"(add|rename|recode|drop|fill|replace|keep|give|check|export|every row)", msg), msg


def test_unpaired_names_missing_ids(tmp_path):
    df = _cases().drop(index=[7, 8])  # m2 lacks c1, c2
    msg = str(_err(stats.read_cases, _write(tmp_path, df)))
    assert "model 'm2' lacks case_id c1, c2" in msg


def test_label_must_agree_across_models():
    df = _cases()
    df.loc[df.index[7], "label"] = 1 - df.loc[df.index[7], "label"]
    assert "same for every model" in str(_err(stats.read_cases, df))


def test_empty_table_zero_byte_and_garbage(tmp_path):
    empty = _cases().iloc[:0]
    assert "has no rows" in str(_err(stats.read_cases, _write(tmp_path, empty)))
    zero = tmp_path / "zero.csv"
    zero.write_bytes(b"")
    assert "empty (0 bytes)" in str(_err(stats.read_cases, zero))
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1\x00\x01garbage")
    assert "cannot be read as a parquet table" in str(_err(stats.read_cases, garbage))
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\x00\x01\x02\x03" * 100)
    assert "binary" in str(_err(stats.read_cases, binary))
    latin = tmp_path / "latin.csv"
    latin.write_bytes("case_id,model,label,score,site\nc1,m,1,2,Z\u00fcrich\n".encode("latin-1"))
    assert "not valid UTF-8" in str(_err(stats.read_cases, latin))
    missing = tmp_path / "nope.csv"
    assert "file not found" in str(_err(stats.read_cases, missing))
    odd = tmp_path / "cases.xlsx"
    odd.write_bytes(b"x")
    assert "unknown file type" in str(_err(stats.read_cases, odd))


def test_truncated_parquet(tmp_path):
    p = tmp_path / "cases.parquet"
    _cases().to_parquet(p)
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    assert "cannot be read as a parquet table" in str(_err(stats.read_cases, p))


def test_parquet_and_dataframe_inputs_agree(tmp_path):
    df = _cases()
    p = tmp_path / "cases.parquet"
    df.to_parquet(p)
    pd.testing.assert_frame_equal(stats.read_cases(p), stats.read_cases(df))


def test_messages_are_constants():
    for name in dir(schema):
        if name.startswith("MSG_"):
            text = getattr(schema, name)
            assert "{source}" in text, name


# ----------------------------------------------------------------------------- runs

def test_valid_runs_roundtrip():
    runs = _runs()
    out = stats.read_runs(runs)
    assert len(out) == len(runs)
    assert out["severity"].dtype == np.int64


@pytest.mark.parametrize(
    "mutate, column, words",
    [
        (lambda d: d.drop(columns="auroc"), "auroc", "required column(s) 'auroc' missing"),
        (lambda d: d.assign(label_fraction=d["label_fraction"] * 100), "label_fraction", "must lie in (0, 1]"),
        (lambda d: d.assign(severity=d["severity"] + 0.5), "severity", "whole number"),
        (lambda d: d[d["condition"] != "clean"], "condition", "'clean' with label_fraction 1"),
        (lambda d: d[d["label_fraction"] != 1.0], "condition", "'clean' with label_fraction 1"),
        (lambda d: pd.concat([d, d.iloc[[0]]]), "seed", "duplicate"),
        (lambda d: d.assign(auroc=d["auroc"] + 2), "auroc", "must lie in [0, 1]"),
        (lambda d: d.assign(regime="finetuned"), "regime", "'frozen' or 'adapted'"),
        (lambda d: d.assign(seed=d["seed"] + 0.25), "seed", "whole number"),
    ],
)
def test_runs_violations(tmp_path, mutate, column, words):
    path = _write(tmp_path, mutate(_runs()), "runs.csv")
    err = _err(stats.read_runs, path)
    assert words in str(err), str(err)
    assert str(path) in str(err)
    assert err.column == column


# ----------------------------------------------------------------------------- tidy contract

def test_tidy_builds_and_check_guards():
    out = schema.tidy({"estimand": ["sensitivity"], "model": ["m"], "estimate": [0.5], "n": [3]},
                      group_cols=("model",))
    schema.check_tidy(out)
    assert list(out.columns[:3]) == ["estimand", "model", "estimate"]
    assert out["flag"].iloc[0] == ""
    bad = out.copy()
    bad["estimate"] = [np.array([1, 2])]
    with pytest.raises(AssertionError):
        schema.check_tidy(bad.astype({"estimate": object}))
    with pytest.raises(AssertionError):
        schema.check_tidy(out.drop(columns="p_value"))


def test_stats_is_clinrels():
    import clinrel

    assert stats.__clinrel__ is True
    assert clinrel.stats is stats
    from pathlib import Path

    # the same installation: stats sits next to the clinrel package, not elsewhere on sys.path
    assert Path(stats.__file__).resolve().parents[1] == Path(clinrel.__file__).resolve().parents[1]
