"""``clinrel metadata extract`` asks for the runner packages its inputs need (pydicom for
DICOM headers; medspaCy for report texts and for a series description's phase, each
mention read in its clinical context) after the output checks, so a refused output is
named as such. An install without medspaCy is simulated by making
``clinrel.cli._extras.missing`` report it missing."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import clinrel.cli._extras as extras
from clinrel.cli import app

runner = CliRunner()
INSTALL = "pip install 'clinrel[runner]'"


def cli(*argv) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in argv])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, " ".join(res.output.split())


@pytest.fixture
def no_medspacy(monkeypatch):
    real = extras.missing
    monkeypatch.setattr(extras, "missing",
                        lambda modules: [m for m in real(modules) if m != "medspacy"]
                        + (["medspacy"] if "medspacy" in modules else []))


@pytest.fixture
def reports(tmp_path):
    p = tmp_path / "reports.csv"
    pd.DataFrame({"case_id": ["r1"], "text": ["Portal venous phase. 63-year-old male."]}).to_csv(
        p, index=False)
    return p


def test_report_texts_without_medspacy_exit_2_naming_it_and_write_nothing(tmp_path, reports,
                                                                        no_medspacy):
    rc, text = cli("metadata", "extract", reports, "--out", tmp_path / "ev.csv")
    assert rc == 2, text
    assert "report texts" in text and "medspacy is not installed" in text and INSTALL in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports.csv"]


def test_an_output_refusal_comes_before_the_missing_package(tmp_path, reports, no_medspacy):
    """--out naming the input is refused as such, with or without medspaCy."""
    rc, text = cli("metadata", "extract", reports, "--out", reports)
    assert rc == 2, text
    assert "medspacy" not in text and str(reports) in text


def test_dicom_headers_without_medspacy_exit_2_naming_it(tmp_path, no_medspacy):
    """A series description's phase is read in context too (``dicom.description_phase``)."""
    pydicom = pytest.importorskip("pydicom")
    dcm = tmp_path / "ct.dcm"
    shutil.copy(Path(pydicom.data.__file__).parent / "test_files" / "CT_small.dcm", dcm)
    rc, text = cli("metadata", "extract", dcm, "--out", tmp_path / "ev.csv", "--quiet")
    assert rc == 2, text
    assert "DICOM files" in text and "medspacy is not installed" in text and INSTALL in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct.dcm"]
