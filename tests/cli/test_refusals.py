"""Inputs that cannot be analysed are refused: each was accepted
before (exit 0) or answered with a misleading message; now exit 2, a message naming the
file or option and the fix, no traceback, no output left."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import stats
from clinrel.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("refusals")
    stats.simulate.benchx_cohort(200, n_models=2, n_sites=4, seed=6).data.to_csv(
        d / "cases.csv", index=False)
    stats.simulate.crs_runs(n_encoders=4, n_datasets=1, n_seeds=2, seed=6).data.to_csv(
        d / "runs.csv", index=False)
    (d / "ref.yaml").write_text(yaml.safe_dump({"panel": ["enc_01", "enc_02"], "version": "1"}))
    return d


def cli(*argv) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in argv])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, " ".join(res.output.split())


def cli_subprocess(*argv, timeout: float = 60) -> tuple[int, str]:
    """In a process of its own: a command that would hang fails the test, not the suite."""
    p = subprocess.run([sys.executable, "-c", "from clinrel.cli import main; main()",
                        *map(str, argv)], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out
    return p.returncode, " ".join(out.split())


# --------------------------------------------------------------------------- subgroup axes


@pytest.mark.parametrize("axis, words", [
    ("score", ["'score' as a subgroup axis", "the model's score", "--bin score="]),
    ("label", ["'label' as a subgroup axis", "reference standard"]),
    ("pred", ["'pred' as a subgroup axis", "the model's call"]),
    ("case_id", ["'case_id' as a subgroup axis", "an identifier"]),
    ("patient_id", ["'patient_id' as a subgroup axis", "an identifier"]),
    ("model", ["'model' as a subgroup axis", "already computed per model"]),
    ("site:score", ["'score' as a subgroup axis"]),
])
def test_an_axis_that_does_not_group_cases_is_refused(good, tmp_path, axis, words):
    out = tmp_path / "sub.csv"
    rc, text = cli("subgroups", good / "cases.csv", "--by", axis, "--threshold", 50, "--out", out)
    assert rc == 2, text
    assert "option --by" in text and str(good / "cases.csv") in text
    for word in words:
        assert word in text, (word, text)
    assert not out.exists()


def test_an_intersection_naming_one_column_twice_is_refused(good, tmp_path):
    rc, text = cli("subgroups", good / "cases.csv", "--by", "phase:phase", "--threshold", 50,
                   "--out", tmp_path / "sub.csv")
    assert rc == 2 and "'phase:phase'" in text and "names column 'phase' twice" in text, text


def test_an_axis_listed_twice_is_refused(good, tmp_path):
    rc, text = cli("subgroups", good / "cases.csv", "--by", "phase", "--by", "phase",
                   "--threshold", 50, "--out", tmp_path / "sub.csv")
    assert rc == 2 and "lists the axis 'phase' twice" in text, text


def test_a_failure_map_of_one_column_by_itself_or_of_the_score_is_refused(good, tmp_path):
    from analysis.plan import PlanError, load_plan

    for rows, cols, word in (("phase", "phase", "twice"), ("score", "phase", "model's score")):
        raw = {"inputs": {"cases": str(good / "cases.csv")},
               "detection": {"threshold": {"value": 50}, "failure_map": {"rows": rows,
                                                                         "cols": cols}}}
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
        with pytest.raises(PlanError, match=word):
            load_plan(tmp_path / "plan.yaml")


# --------------------------------------------------------------------------- column types


@pytest.mark.parametrize("column", ["score", "label"])
def test_a_datetime_score_or_label_in_parquet_is_refused(good, tmp_path, column):
    df = pd.read_csv(good / "cases.csv")
    df[column] = pd.to_datetime(df[column] * 1e9)
    p = tmp_path / "cases.parquet"
    df.to_parquet(p)
    rc, text = cli("validate", p)
    assert rc == 2, text
    assert f"column '{column}' must be numeric; it holds dates or times (datetime64" in text
    assert "nanoseconds since 1970" in text and "row" in text


def test_a_tz_aware_or_duration_column_is_refused_too(good):
    df = pd.read_csv(good / "cases.csv")
    df["age"] = pd.to_timedelta(df["age"], unit="D")
    with pytest.raises(stats.schema.ContractError, match="column 'age' must be numeric; it "
                                                         "holds dates or times \\(timedelta"):
        stats.read_cases(df)
    df = pd.read_csv(good / "cases.csv")
    df["score"] = pd.to_datetime(df["score"], unit="s", utc=True)
    with pytest.raises(stats.schema.ContractError, match="datetime64\\[ns, UTC\\]"):
        stats.read_cases(df)


# --------------------------------------------------------------------------- crs


def test_crs_k_above_the_number_of_encoders_is_refused(good, tmp_path):
    out = tmp_path / "crs"
    rc, text = cli("crs", good / "runs.csv", "--reference", good / "ref.yaml", "--n-boot", 0,
                   "--n-weights", 0, "--k", 50, "--out", out)
    assert rc == 2, text
    assert "option --k is 50" in text and "4 encoder(s)" in text and "lower k" in text
    assert not out.exists()
    rc, text = cli("crs", good / "runs.csv", "--reference", good / "ref.yaml", "--n-boot", 0,
                   "--n-weights", 0, "--k", 4, "--out", out, "--quiet")
    assert rc == 0, text                                        # k = encoders is allowed


# --------------------------------------------------------------------------- metadata extract


def _test_dicom(name: str = "CT_small.dcm") -> Path:
    pydicom = pytest.importorskip("pydicom")
    pytest.importorskip("medspacy")  # DICOM extraction reads a series description in context
    return Path(pydicom.data.__file__).parent / "test_files" / name


@pytest.mark.parametrize("kind, make, words", [
    ("fifo", lambda p: os.mkfifo(p), ["named pipe (FIFO)", "not a file or a folder"]),
    ("link-to-dev-zero", lambda p: os.symlink("/dev/zero", p),
     ["character device", "not a file or a folder"]),
])
def test_metadata_extract_refuses_a_fifo_or_a_device_without_opening_it(tmp_path, kind, make,
                                                                        words):
    pytest.importorskip("pydicom")
    p = tmp_path / "series.dcm"
    make(p)
    rc, text = cli_subprocess("metadata", "extract", p, "--out", tmp_path / "ev.csv")
    assert rc == 2, text
    for word in words:
        assert word in text, (word, text)
    assert not (tmp_path / "ev.csv").exists()


@pytest.mark.parametrize("kind, data, words", [
    ("random-bytes", os.urandom(4000), ["not a readable DICOM file"]),
    ("garbage-after-DICM", b"\0" * 128 + b"DICM" + bytes(range(256)) * 12,
     ["not a readable DICOM file"]),
])
def test_metadata_extract_refuses_a_garbage_dicom(tmp_path, kind, data, words):
    pytest.importorskip("pydicom")
    pytest.importorskip("medspacy")
    p = tmp_path / "garbage.dcm"
    p.write_bytes(data)
    rc, text = cli("metadata", "extract", p, "--out", tmp_path / "ev.csv")
    assert rc == 2 and str(p) in text, text
    for word in words:
        assert word in text, (word, text)
    assert not (tmp_path / "ev.csv").exists()


@pytest.mark.parametrize("name", ["notes.txt", "scan.json", "report.docx"])
def test_metadata_extract_refuses_an_unsupported_file_type(tmp_path, name):
    p = tmp_path / name
    p.write_text("portal venous phase, 63-year-old male")
    rc, text = cli("metadata", "extract", p, "--out", tmp_path / "ev.csv")
    assert rc == 2, text
    assert f"unsupported file type '{p.suffix}'" in text and ".csv, .tsv" in text
    assert "0 evidence rows" not in text


def test_metadata_extract_refuses_a_folder_without_dicom(tmp_path):
    pytest.importorskip("pydicom")
    pytest.importorskip("medspacy")
    folder = tmp_path / "series"
    folder.mkdir()
    (folder / "a.dcm").write_bytes(os.urandom(500))
    (folder / "readme").write_text("not dicom")
    rc, text = cli("metadata", "extract", folder, "--out", tmp_path / "ev.csv")
    assert rc == 2 and "holds no readable DICOM file (2 candidate" in text, text


def test_metadata_extract_still_reads_real_dicom_and_skips_garbage_in_a_folder(tmp_path):
    import shutil

    folder = tmp_path / "series"
    folder.mkdir()
    shutil.copy(_test_dicom(), folder / "ct.dcm")
    (folder / "junk.dcm").write_bytes(os.urandom(500))
    rc, text = cli("metadata", "extract", folder, "--out", tmp_path / "ev.csv")
    assert rc == 0, text
    assert "1 file(s) in the folders skipped (not readable DICOM)" in text
    assert len(pd.read_csv(tmp_path / "ev.csv")) > 0


# --------------------------------------------------------------------------- messages


def test_a_doubled_bom_shows_the_column_name_as_code_points(good, tmp_path):
    p = tmp_path / "cases.csv"
    p.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + (good / "cases.csv").read_bytes())
    rc, text = cli("validate", p)
    assert rc == 2, text
    assert "'case_id' missing" in text and r"'\ufeffcase_id'" in text
    assert "byte-order mark" in text


def test_validate_points_a_report_text_table_to_metadata_extract(tmp_path):
    p = tmp_path / "reports.csv"
    pd.DataFrame({"case_id": ["r1", "r2"], "text": ["venous phase", "no contrast"]}).to_csv(
        p, index=False)
    rc, text = cli("validate", p)
    assert rc == 2, text
    assert "table of report texts" in text and f"clinrel metadata extract {p}" in text
    assert "'label'" not in text
