"""The core commands: exit 0 on success, 2 with a one-line message on bad input, no
traceback, and no partial output."""
from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from clinrel.cli import app

runner = CliRunner()


def test_validate_ok_and_bad(tmp_path):
    good = tmp_path / "cases.csv"
    r = runner.invoke(app, ["simulate", "benchx", "--scale", "200", "--out", str(good)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["validate", str(good)])
    assert r.exit_code == 0 and "valid cases table" in r.output
    df = pd.read_csv(good)
    df.loc[[4, 9], "label"] = 2
    bad = tmp_path / "bad.csv"
    df.to_csv(bad, index=False)
    r = runner.invoke(app, ["validate", str(bad)])
    assert r.exit_code == 2
    assert "column 'label' must be 0/1; rows 5, 10 have 2" in r.output
    assert "Traceback" not in r.output


def test_validate_runs_and_missing_file(tmp_path):
    runs = tmp_path / "runs.parquet"
    assert runner.invoke(app, ["simulate", "crs", "--scale", "3", "--out", str(runs)]).exit_code == 0
    r = runner.invoke(app, ["validate", str(runs)])
    assert r.exit_code == 0 and "valid runs table" in r.output
    r = runner.invoke(app, ["validate", str(tmp_path / "nope.csv"), "--kind", "cases"])
    assert r.exit_code == 2 and "file not found" in r.output


def test_console_script_exit_code_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("case_id,model,label,site\n1,m,1,s1\n")
    exe = Path(sys.executable).with_name("clinrel")
    p = subprocess.run([str(exe), "validate", str(bad), "--kind", "cases"], capture_output=True,
                       text=True)
    assert p.returncode == 2
    assert "required column(s) 'score' missing" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_single_site_table_gets_one_implicit_site_and_says_so(tmp_path):
    one_site = tmp_path / "cases.csv"
    one_site.write_text("case_id,model,label,score\nc1,m,1,3\nc2,m,0,0\n")
    r = runner.invoke(app, ["validate", str(one_site)])
    assert r.exit_code == 0, r.output
    assert "1 site (no site column: a single-site study, site 'single_site')" in r.output
    two_sites = tmp_path / "sites.csv"
    two_sites.write_text("case_id,model,label,score,site\nc1,m,1,3,a\nc2,m,0,0,b\n")
    r = runner.invoke(app, ["validate", str(two_sites)])
    assert r.exit_code == 0 and "2 sites" in r.output and "single-site" not in r.output


def test_demo_writes_study_atomically(tmp_path):
    out = tmp_path / "demo"
    r = runner.invoke(app, ["demo", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    assert (out / "cases.parquet").exists() and (out / "runs.parquet").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_bad_out_suffix_writes_nothing(tmp_path):
    r = runner.invoke(app, ["simulate", "benchx", "--scale", "50", "--out", str(tmp_path / "x.xlsx")])
    assert r.exit_code == 2 and "unknown file type" in r.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a whole report (about 45 s on 2 cores): make test-all
def test_report_with_a_relative_out_path(tmp_path, monkeypatch):
    """`make report` passes a relative --out: every file, the HTML included, lands there
    (pandoc runs in the output folder, so a relative temp path once nested the HTML)."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["report", "--demo", "--out", "build/report", "--quiet"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "build" / "report"
    for name in ("appendix.qmd", "appendix.html", "appendix.pdf", "manifest.json"):
        assert (out / name).stat().st_size > 0, name
    assert not (out / "build").exists()
    assert sorted(p.name for p in (tmp_path / "build").iterdir()) == ["report"]
