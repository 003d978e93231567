"""Safety at the boundary, outputs: refused outputs lose nothing.

- A user who points ``--out`` at the wrong place loses nothing: every refused output exits 2
  with a message naming the folder or file and the fix, and leaves every file below the
  test's folder byte-identical (no file added, changed or removed).
- Spreadsheet formulas cannot ride in a CSV clinrel writes; numbers keep 12 significant digits.
- Leftovers of killed runs are removed by the next run, and only those.
- Bad seeds, a latin-1 report CSV and an unreachable --llm-url are exit 2, no traceback.
"""
from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from reports.csvsafe import FORMULA_START, neutralise, neutralise_text, write_csv
from clinrel.cli import app
from reports import outputs
from stats import simulate
from stats._rng import MSG_SEED
from conftest import dead_pid, snapshot

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("clinrel")


# --------------------------------------------------------------------------- helpers

def _snapshot(folder: Path) -> dict[str, str]:
    return snapshot(folder)


def _dead_pid() -> int:
    return dead_pid()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_plan(folder: Path, cases: str = "cases.csv") -> Path:
    raw = {"version": 1, "title": "Safety study", "inputs": {"cases": cases},
           "detection": {"threshold": {"value": 50}, "subgroups": ["site", "phase"]}}
    p = folder / "plan.yaml"
    p.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Small cases and runs tables, made once."""
    d = tmp_path_factory.mktemp("tables")
    simulate.benchx_cohort(160, n_models=2, n_sites=3, seed=2).data.to_csv(d / "cases.csv", index=False)
    simulate.crs_runs(n_encoders=4, n_datasets=1, n_seeds=2, seed=2).data.to_csv(d / "runs.csv",
                                                                               index=False)
    return d


@pytest.fixture()
def study(tmp_path, tables, monkeypatch):
    """A user's study folder (the current folder): cases.csv, plan.yaml, runs.csv, ref.yaml,
    reports.csv and notes.txt, none written by clinrel."""
    s = tmp_path / "study"
    s.mkdir()
    for name in ("cases.csv", "runs.csv"):
        (s / name).write_bytes((tables / name).read_bytes())
    _write_plan(s)
    (s / "ref.yaml").write_text("panel: [enc_01, enc_02]\nversion: '1'\n")
    (s / "reports.csv").write_text("case_id,text\nr1,63-year-old man; arterial phase\n")
    (s / "notes.txt").write_text("my notes, not clinrel's\n")
    monkeypatch.chdir(s)
    return s


def _demo(out: Path, *extra: str) -> None:
    r = runner.invoke(app, ["demo", "--out", str(out), "--quiet", *extra])
    assert r.exit_code == 0, r.output


def _elsewhere(t: Path) -> Path:
    """A second study outside the current folder: other/plan.yaml -> other/cases.csv."""
    o = t / "other"
    o.mkdir()
    (o / "cases.csv").write_bytes((t / "study" / "cases.csv").read_bytes())
    _write_plan(o)
    return o


def _nested(t: Path) -> Path:
    """other/sub/plan.yaml naming ../data/cases.csv."""
    o = t / "other"
    (o / "sub").mkdir(parents=True)
    (o / "data").mkdir()
    (o / "data" / "cases.csv").write_bytes((t / "study" / "cases.csv").read_bytes())
    return _write_plan(o / "sub", cases="../data/cases.csv")


def _mine(t: Path, manifest: dict | None = None) -> Path:
    """A folder of the user's: thesis.docx (and a manifest.json not written by clinrel)."""
    m = t / "mine"
    m.mkdir()
    (m / "thesis.docx").write_bytes(b"PK\x03\x04 chapter 3")
    if manifest is not None:
        (m / "manifest.json").write_text(json.dumps(manifest))
    return m


def _demo_then(t: Path, edit) -> Path:
    d = t / "d"
    _demo(d)
    edit(d)
    return d


def _link(t: Path, target: str, name: str, hard: bool = False) -> str:
    (os.link if hard else os.symlink)(t / "study" / target, t / "study" / name)
    return name


def _latin1(t: Path, name: str) -> str:
    (t / "study" / name).write_bytes("case_id,text\nr1,Z\u00fcrich: arterial phase\n".encode("latin-1"))
    return name


CRS = ["crs", "runs.csv", "--reference", "ref.yaml", "--n-boot", "0", "--n-weights", "0"]
SUB = ["subgroups", "cases.csv", "--threshold", "50"]
ADJ = ["adjust", "cases.csv", "--formula", "detected ~ phase", "--threshold", "50"]
LEGACY = {"clinrel_report": 1, "tables": [{"csv": "tables/t.csv"}], "figures": []}
IS_INPUT = ["is the input", "never writes over an input"]
HOLDS = ["holds the input", "--out NEW_FOLDER"]
FOREIGN = ["did not write", "--out NEW_FOLDER"]

# (id, builder(tmp_path) -> argv (cwd: tmp/study), words in the message)
REFUSED = [
    # ---- folder outputs: never a folder holding other files, an input, or the current one
    ("report-out-dot", lambda t: ["report", "--plan", "plan.yaml", "--out", "."],
     ["--out .", "current folder", "--out NEW_FOLDER"]),
    ("report-out-dot-force", lambda t: ["report", "--plan", "plan.yaml", "--out", ".", "--force"],
     ["current folder"]),
    ("report-demo-out-dot", lambda t: ["report", "--demo", "--out", "."], ["current folder"]),
    ("report-out-parent", lambda t: ["report", "--plan", "plan.yaml", "--out", "..", "--force"],
     ["folder above it"]),
    ("report-out-plan-folder", lambda t: ["report", "--plan", str(_elsewhere(t) / "plan.yaml"),
                                          "--out", str(t / "other"), "--force"], HOLDS + ["plan.yaml"]),
    ("report-out-parent-of-inputs", lambda t: ["report", "--plan", str(_nested(t)), "--out",
                                               str(t / "other"), "--force"], HOLDS),
    ("report-out-cases-folder", lambda t: ["report", "--plan", str(_nested(t)), "--out",
                                           str(t / "other" / "data")], HOLDS + ["cases.csv"]),
    ("report-out-user-folder", lambda t: ["report", "--plan", "plan.yaml", "--out", str(_mine(t))],
     FOREIGN + ["thesis.docx"]),
    ("report-out-user-folder-force", lambda t: ["report", "--plan", "plan.yaml", "--out",
                                                str(_mine(t)), "--force"], FOREIGN + ["--force does not"]),
    ("report-out-foreign-manifest", lambda t: ["report", "--plan", "plan.yaml", "--out",
                                               str(_mine(t, {"name": "x"})), "--force"],
     FOREIGN + ["manifest.json"]),
    ("report-out-legacy-report-plus-user-file",
     lambda t: ["report", "--plan", "plan.yaml", "--out", str(_mine(t, LEGACY)), "--force"],
     FOREIGN + ["thesis.docx"]),
    ("report-into-demo-holding-its-plan",
     lambda t: ["report", "--plan", str(_demo_then(t, lambda d: None) / "plan.yaml"),
                "--out", str(t / "d"), "--force"], HOLDS),
    ("demo-out-user-folder", lambda t: ["demo", "--out", str(_mine(t))], FOREIGN),
    ("demo-out-user-folder-force", lambda t: ["demo", "--out", str(_mine(t)), "--force"], FOREIGN),
    ("demo-out-dot", lambda t: ["demo", "--out", ".", "--force"], ["current folder"]),
    ("demo-out-earlier-demo-without-force", lambda t: ["demo", "--out", str(_demo_then(t, lambda d: None))],
     ["earlier clinrel output", "add --force"]),
    ("demo-out-earlier-demo-with-user-file",
     lambda t: ["demo", "--force", "--out", str(_demo_then(t, lambda d: (d / "extra.txt").write_text("x")))],
     FOREIGN + ["extra.txt"]),
    ("demo-out-earlier-demo-edited",
     lambda t: ["demo", "--force", "--out", str(_demo_then(t, lambda d: (d / "plan.yaml").write_text("mine")))],
     ["plan.yaml changed since clinrel wrote", "even with --force"]),
    ("demo-out-is-a-file", lambda t: ["demo", "--out", "notes.txt"], ["is a file, not a folder"]),
    ("demo-out-symlink", lambda t: ["demo", "--out", _link(t, "../study", "here")], ["symbolic link"]),
    ("demo-out-below-a-file", lambda t: ["demo", "--out", "notes.txt/demo"],
     ["cannot write there", "is a file"]),
    ("demo-out-unwritable", lambda t: ["demo", "--out", "/proc/clinrel-no/demo"], ["cannot write there"]),
    ("crs-out-dot", lambda t: [*CRS, "--out", ".", "--force"], ["current folder"]),
    ("crs-out-user-folder-force", lambda t: [*CRS, "--out", str(_mine(t)), "--force"], FOREIGN),
    ("crs-out-demo-holding-runs",
     lambda t: ["crs", str(_demo_then(t, lambda d: None) / "runs.parquet"), "--reference",
                str(t / "d" / "reference.yaml"), "--n-boot", "0", "--n-weights", "0",
                "--out", str(t / "d"), "--force"], HOLDS),
    # ---- file outputs: never an input, an existing file only with --force, never a folder
    ("subgroups-out-is-input", lambda t: [*SUB, "--out", "cases.csv"], IS_INPUT),
    ("subgroups-out-is-input-force", lambda t: [*SUB, "--out", "cases.csv", "--force"], IS_INPUT),
    ("subgroups-out-is-input-absolute", lambda t: [*SUB, "--out", str(t / "study" / "cases.csv")], IS_INPUT),
    ("subgroups-out-symlink-to-input", lambda t: [*SUB, "--force", "--out", _link(t, "cases.csv", "l.csv")],
     IS_INPUT),
    ("subgroups-out-hardlink-to-input",
     lambda t: [*SUB, "--force", "--out", _link(t, "cases.csv", "h.csv", hard=True)], IS_INPUT),
    ("compare-out-is-input", lambda t: ["compare", "cases.csv", "--threshold", "50", "--out",
                                        "cases.csv", "--force"], IS_INPUT),
    ("adjust-out-is-input", lambda t: [*ADJ, "--out", "cases.csv", "--force"], IS_INPUT),
    ("adjust-means-out-is-input", lambda t: [*ADJ, "--out", "t.csv", "--means", "phase",
                                             "--means-out", "cases.csv"], ["--means-out cases.csv", *IS_INPUT]),
    ("adjust-two-outputs-one-file", lambda t: [*ADJ, "--out", "t.csv", "--glance-out", "./t.csv"],
     ["same file as --out t.csv"]),
    ("metadata-out-is-input", lambda t: ["metadata", "extract", "reports.csv", "--out", "reports.csv",
                                         "--force"], IS_INPUT),
    ("metadata-review-is-input", lambda t: ["metadata", "extract", "reports.csv", "--out", "ev.csv",
                                            "--review", "reports.csv"], ["--review", *IS_INPUT]),
    ("metadata-derived-output-is-input",
     lambda t: ["metadata", "extract", str((t / "study" / "reports.csv").rename(t / "study" / "ev_agreement.csv")),
                "--out", "ev.csv"], ["agreement table", *IS_INPUT]),
    ("simulate-out-existing-user-file", lambda t: ["simulate", "benchx", "--scale", "20", "--out", "cases.csv"],
     ["the file exists", "add --force"]),
    ("subgroups-out-existing-file", lambda t: [*SUB, "--out", "runs.csv"], ["the file exists", "--force"]),
    ("subgroups-out-is-folder", lambda t: [*SUB, "--out", "."], ["is a folder", "result.csv"]),
    ("simulate-out-is-folder", lambda t: ["simulate", "crs", "--scale", "3", "--out", str(_mine(t))],
     ["is a folder"]),
    ("adjust-out-is-folder", lambda t: [*ADJ, "--out", ".."], ["is a folder"]),
    ("metadata-out-is-folder", lambda t: ["metadata", "extract", "reports.csv", "--out", "."], ["is a folder"]),
    ("subgroups-out-below-a-file", lambda t: [*SUB, "--out", "notes.txt/x.csv"], ["cannot write there"]),
    ("subgroups-out-unwritable", lambda t: [*SUB, "--out", "/proc/clinrel-no/x.csv"], ["cannot write there"]),
    ("simulate-out-unwritable", lambda t: ["simulate", "benchx", "--out", "/sys/x.csv"], ["cannot write there"]),
    # ---- values refused at the command line
    ("crs-negative-seed", lambda t: [*CRS, "--seed", "-1", "--out", "c"],
     [MSG_SEED.format(key="--seed", value=-1)]),
    ("subgroups-negative-seed", lambda t: [*SUB, "--seed", "-3", "--out", "s.csv"], ["--seed", "from 0 to 2**63 - 1"]),
    ("demo-negative-seed", lambda t: ["demo", "--seed", "-1", "--out", "d2"], ["--seed", "from 0 to 2**63 - 1"]),
    ("simulate-negative-seed", lambda t: ["simulate", "crs", "--seed", "-1", "--out", "r.csv"], ["--seed", "from 0 to 2**63 - 1"]),
    ("metadata-latin1-reports", lambda t: ["metadata", "extract", _latin1(t, "l1.csv"), "--out", "ev.csv"],
     ["l1.csv", "not valid UTF-8", "re-save the file as UTF-8"]),
    ("metadata-latin1-reviewed", lambda t: ["metadata", "extract", "reports.csv", "--out", "ev.csv",
                                            "--reviewed", _latin1(t, "rv.csv")], ["rv.csv", "UTF-8"]),
    ("metadata-llm-refused", lambda t: ["metadata", "extract", "reports.csv", "--out", "ev.csv",
                                        "--llm-url", f"http://127.0.0.1:{_free_port()}/v1"],
     ["--llm-url http://127.0.0.1:", "cannot connect", "leave out --llm-url"]),
    ("metadata-llm-not-a-url", lambda t: ["metadata", "extract", "reports.csv", "--out", "ev.csv",
                                          "--llm-url", "localhost:8000"], ["not an http(s) URL"]),
]

#: report-text extraction reads each mention's context with medspaCy (runner extra):
#: without it these cases exit 2 naming medspaCy instead, so they are skipped
NO_MEDSPACY = importlib.util.find_spec("medspacy") is None


@pytest.mark.parametrize("case_id, build, words", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_output_exits_2_and_touches_nothing(tmp_path, study, case_id, build, words):
    if NO_MEDSPACY and case_id in ("metadata-latin1-reports", "metadata-latin1-reviewed",
                                    "metadata-llm-refused", "metadata-llm-not-a-url"):
        pytest.skip("report-text extraction needs medspaCy (runner extra)")
    argv = build(tmp_path)
    before = _snapshot(tmp_path)
    t0 = time.perf_counter()
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, f"{case_id}: exit {result.exit_code}\n{result.output}\n{result.exception!r}"
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output, f"{case_id}: {word!r} not in:\n{result.output}"
    assert _snapshot(tmp_path) == before, f"{case_id}: files changed"
    assert time.perf_counter() - t0 < 15, "refused after doing the work"


def test_console_script_refuses_out_dot_without_traceback(tmp_path, study):
    """The reported accident: `clinrel report --out .` inside a study folder."""
    before = _snapshot(tmp_path)
    for argv in (["report", "--plan", "plan.yaml", "--out", "."],
                 ["crs", "runs.csv", "--reference", "ref.yaml", "--seed", "-1", "--out", "c"]):
        p = subprocess.run([str(EXE), *argv], capture_output=True, text=True, cwd=study, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr + p.stdout, p.stderr
    assert _snapshot(tmp_path) == before


# --------------------------------------------------------------------------- allowed outputs

def test_empty_folder_is_used_and_marked_as_clinrels(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    _demo(out)
    man = json.loads((out / "manifest.json").read_text())
    assert man["generator"] == "clinrel" and man["command"] == "clinrel demo"
    files = sorted(p.name for p in out.iterdir() if p.name != "manifest.json")
    assert sorted(man["files"]) == files and "plan.yaml" in files
    assert man["files"]["plan.yaml"] == hashlib.sha256((out / "plan.yaml").read_bytes()).hexdigest()
    assert outputs.classify(out) == ("clinrel", [])


def test_force_replaces_an_earlier_clinrel_output_and_nothing_beside_it(tmp_path):
    out = tmp_path / "d"
    _demo(out)
    (tmp_path / "beside.txt").write_text("keep")
    first = json.loads((out / "manifest.json").read_text())
    (out / "run_manifest.json").unlink()  # a file clinrel wrote may be missing: still its folder
    _demo(out, "--force")
    assert (out / "run_manifest.json").is_file()
    assert json.loads((out / "manifest.json").read_text())["files"] == first["files"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beside.txt", "d"]


def test_force_replaces_a_file_only_when_asked_and_never_an_input_or_a_link(tmp_path):
    """A file output names one file: an existing one is replaced only with --force (the
    user asking for it; the rule of issue 29: no hidden record beside the user's files),
    never when it is one of the command's inputs, never through a symbolic link."""
    out = tmp_path / "s.csv"
    out.write_text("old")                       # an existing file of that name
    r = runner.invoke(app, ["simulate", "benchx", "--scale", "20", "--out", str(out)])
    assert r.exit_code == 2 and "add --force" in r.output and out.read_text() == "old"
    r = runner.invoke(app, ["simulate", "benchx", "--scale", "10", "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
    assert len(pd.read_csv(out)) == 10 * 3      # asked: replaced
    before = out.read_bytes()
    r = runner.invoke(app, ["subgroups", str(out), "--threshold", "50", "--out", str(out), "--force"])
    assert r.exit_code == 2 and "is the input" in r.output and out.read_bytes() == before
    target = tmp_path / "notes.yaml"
    target.write_text("my notes\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    r = runner.invoke(app, ["plan", "init", str(out), "--out", str(link), "--force"])
    assert r.exit_code == 2 and "symbolic link" in r.output, r.output
    assert target.read_text() == "my notes\n" and link.is_symlink()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing hidden


def test_render_report_api_refuses_what_the_cli_refuses(tmp_path, tables):
    from reports.render import render_report

    (tmp_path / "cases.csv").write_bytes((tables / "cases.csv").read_bytes())
    plan = _write_plan(tmp_path)
    mine = _mine(tmp_path)
    kw = dict(formats=(), draw=False, only=("methods", "overall"))
    for out, force, words in ((tmp_path, True, "holds the input"), (mine, True, "did not write")):
        with pytest.raises(outputs.OutputError, match=words):
            render_report(plan, out, force=force, **kw)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.csv", "mine", "plan.yaml"]
    out = tmp_path / "rep"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_report(plan, out, **kw)
        man = json.loads((out / "manifest.json").read_text())
        assert man["generator"] == "clinrel" and "appendix.qmd" in man["files"]
        assert set(man["files"]) == {f for f in outputs._walk(out)[0] if f != "manifest.json"}
        with pytest.raises(outputs.OutputError, match="add --force"):
            render_report(plan, out, **kw)
        render_report(plan, out, force=True, **kw)  # the second `make report`
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_report_written_before_manifests_listed_files_is_not_replaced(tmp_path):
    """A manifest without the files' sha256 cannot tell an edited appendix.qmd from the
    one clinrel wrote (second safety audit: --force deleted the user's edits), so such a
    folder is not clinrel's to replace, even with --force."""
    old = tmp_path / "old"
    (old / "tables").mkdir(parents=True)
    (old / "manifest.json").write_text(json.dumps(LEGACY))
    (old / "tables" / "t.csv").write_text("a\n1\n")
    (old / "appendix.qmd").write_text("my edited appendix\n")
    assert outputs.classify(old)[0] == "foreign"
    with pytest.raises(outputs.OutputError, match="did not write"):
        outputs.check_out_dir(old, force=True)
    assert (old / "appendix.qmd").read_text() == "my edited appendix\n"


def test_make_report_passes_force_so_a_second_run_works():
    report = [line for line in (ROOT / "Makefile").read_text().splitlines()
              if "clinrel report" in line]
    assert report and all("--force" in line for line in report)


# --------------------------------------------------------------------------- CSV formulas

@pytest.mark.parametrize("value, expected", [
    ("=1+1", "'=1+1"),
    ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"),
    ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
    ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"),
    ("-", "'-"),
    ("-1", "-1"),
    ("+0.25", "+0.25"),
    ("-1.5e-3", "-1.5e-3"),
    ("-inf", "-inf"),
    ("site_01", "site_01"),
    ("a=b", "a=b"),
    ("", ""),
    (3.5, 3.5),
    (-2, -2),
])
def test_neutralise_text(value, expected):
    assert neutralise_text(value) == expected


def test_numbers_have_twelve_significant_digits_and_text_is_neutralised(tmp_path):
    """Numbers are written at 12 significant digits (reports.csvsafe.SIGNIFICANT_DIGITS),
    whole numbers without a decimal point, -0.0 as 0, floats held in text columns too."""
    x = np.array([-0.1234567890123456789, -1e-300, 2.0 / 3.0, np.nan])
    df = pd.DataFrame({"estimate": x, "n": [-1, 2, 3, 4], "ok": [True, False, True, False],
                       "site": ["=cmd", "-x", "plain", None],
                       "phase": pd.Categorical(["@a", "b", "@a", "b"]), "=col": [1, 2, 3, 4],
                       "count": [888.0, -0.0, 3.0, 1.5],
                       "mixed": pd.Series([0.30000000000000004, "a", 1.0, None], dtype=object)})
    path = tmp_path / "t.csv"
    write_csv(df, path)
    back = pd.read_csv(path, float_precision="round_trip")
    np.testing.assert_array_equal(back["estimate"].to_numpy(),
                                  [-0.123456789012, -1e-300, 0.666666666667, np.nan])
    text = path.read_text()
    assert ",888," in text and ",-0," not in text and "0.30000000000000004" not in text
    assert back["count"].tolist() == [888, 0, 3, 1.5] and back["mixed"].tolist()[:3] == [
        "0.3", "a", "1"]
    assert back["n"].tolist() == [-1, 2, 3, 4] and back["ok"].tolist() == [True, False, True, False]
    assert back["site"].tolist()[:3] == ["'=cmd", "'-x", "plain"]
    assert back["phase"].tolist() == ["'@a", "b", "'@a", "b"] and "'=col" in back.columns
    assert df["site"][0] == "=cmd" and "=col" in df.columns and df["count"][1] == 0.0  # input unchanged
    assert neutralise(df.iloc[:0]).empty


def _unsafe_cells(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [c for row in csv.reader(fh) for c in row
                if c[:1] in FORMULA_START and neutralise_text(c) != c]


HOSTILE = {"site_01": "=HYPERLINK(\"http://evil\",\"x\")", "site_02": "+1+cmd|' /C calc'!A0",
           "site_03": "@SUM(1)"}


def test_cli_csv_has_no_formula_and_keeps_numbers(tmp_path, tables):
    import stats

    cases = pd.read_csv(tables / "cases.csv")
    cases["site"] = cases["site"].replace(HOSTILE)
    cases["model"] = cases["model"].replace({"model_A": "-2+3"})
    src = tmp_path / "cases.csv"
    cases.to_csv(src, index=False)
    out = tmp_path / "sub.csv"
    r = runner.invoke(app, ["subgroups", str(src), "--by", "site", "--threshold", "50",
                            "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    assert _unsafe_cells(out) == []
    text = out.read_text()
    assert "'=HYPERLINK" in text and "'@SUM(1)" in text and "'-2+3" in text
    got = pd.read_csv(out, float_precision="round_trip")
    called = stats.scan_level(stats.read_cases(cases), threshold=50)
    api = stats.subgroup_metrics(called[called["split"] == "test"], by=["site"])  # test split
    np.testing.assert_allclose(got["estimate"].to_numpy(), api["estimate"].to_numpy(),
                               rtol=1e-11, atol=0)      # 12 significant digits


def test_report_and_crs_tables_have_no_formula(tmp_path, tables):
    from reports.render import render_report

    cases = pd.read_csv(tables / "cases.csv")
    cases["site"] = cases["site"].replace(HOSTILE)
    cases.to_csv(tmp_path / "cases.csv", index=False)
    plan = _write_plan(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = render_report(plan, tmp_path / "rep", formats=(), draw=False,
                            only=("methods", "overall", "subgroups"))
    written = sorted((tmp_path / "rep" / "tables").glob("*.csv"))
    assert written and all(_unsafe_cells(p) == [] for p in written)
    assert any("'=HYPERLINK" in p.read_text() for p in written)
    for t in res.tables:
        csv_t = pd.read_csv(tmp_path / "rep" / "tables" / f"{t.name}.csv", float_precision="round_trip")
        for col in t.data.select_dtypes("float").columns:   # at 12 significant digits
            np.testing.assert_allclose(csv_t[col].to_numpy(), t.data[col].to_numpy(),
                                       rtol=1e-11, atol=0)
    runs = pd.read_csv(tables / "runs.csv")
    runs["encoder"] = runs["encoder"].replace({"enc_01": "=1+1"})
    runs.to_csv(tmp_path / "runs.csv", index=False)
    (tmp_path / "ref.yaml").write_text(yaml.safe_dump({"panel": ["=1+1", "enc_02"]}))
    r = runner.invoke(app, ["crs", str(tmp_path / "runs.csv"), "--reference", str(tmp_path / "ref.yaml"),
                            "--n-boot", "0", "--n-weights", "0", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert _unsafe_cells(tmp_path / "c" / "scores.csv") == []
    assert "'=1+1" in (tmp_path / "c" / "axes.csv").read_text()


# --------------------------------------------------------------------------- leftovers

def _partial(folder: Path, pid: int, host: str | None = None) -> None:
    folder.mkdir()
    (folder / "tables").mkdir()
    (folder / "tables" / "half.csv").write_text("a\n")
    (folder / outputs.PARTIAL).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname()}))


def _old(folder: Path) -> None:
    _demo(folder)


# (id, make(parent, dead_pid) -> leftover path, expected: "removed" | "kept" | "restored")
LEFTOVERS = [
    ("tmp-folder-of-dead-run", lambda p, pid: _partial(p / f".rep.tmp-{pid}-abc", pid) or p / f".rep.tmp-{pid}-abc",
     "removed"),
    # a bare file cannot prove it is clinrel's (a user's ".thesis.docx.tmp-31337-autosave"
    # was deleted by this rule): kept; clinrel's own single-file temporaries live in marked
    # folders, removed by the rule above (tests/safety/test_no_overwrite.py)
    ("tmp-file-of-dead-run", lambda p, pid: (p / f".s.csv.tmp-{pid}-x1.csv").write_text("half")
     and p / f".s.csv.tmp-{pid}-x1.csv", "kept"),
    ("old-output-of-dead-run-restored", lambda p, pid: _old(p / f".rep.old-{pid}") or p / f".rep.old-{pid}",
     "restored"),
    ("old-output-of-dead-run-superseded",
     lambda p, pid: (_old(p / "d"), _old(p / f".d.old-{pid}")) and p / f".d.old-{pid}", "removed"),
    ("tmp-folder-without-marker", lambda p, pid: (p / f".rep.tmp-{pid}-abc").mkdir() or p / f".rep.tmp-{pid}-abc",
     "kept"),
    ("tmp-folder-of-live-run", lambda p, pid: _partial(p / ".rep.tmp-1-abc", 1) or p / ".rep.tmp-1-abc", "kept"),
    ("tmp-folder-of-other-host",
     lambda p, pid: _partial(p / f".rep.tmp-{pid}-abc", pid, "elsewhere") or p / f".rep.tmp-{pid}-abc", "kept"),
    ("tmp-file-of-live-run", lambda p, pid: (p / ".s.csv.tmp-1-x1.csv").write_text("x")
     and p / ".s.csv.tmp-1-x1.csv", "kept"),
    ("old-folder-not-clinrels", lambda p, pid: _mine(p).rename(p / f".rep.old-{pid}") and p / f".rep.old-{pid}",
     "kept"),
    ("user-file-with-similar-name", lambda p, pid: (p / ".rep.tmp-notes").write_text("x") and p / ".rep.tmp-notes",
     "kept"),
]


@pytest.mark.parametrize("case_id, make, expected", LEFTOVERS, ids=[c[0] for c in LEFTOVERS])
def test_next_run_removes_only_dead_runs_leftovers(tmp_path, case_id, make, expected):
    leftover = make(tmp_path, _dead_pid())
    assert leftover.exists() or leftover.is_symlink()
    snap = _snapshot(leftover) if leftover.is_dir() else leftover.read_bytes()
    _demo(tmp_path / "next")  # any run writing into the same folder
    if expected == "removed":
        assert not leftover.exists()
    elif expected == "kept":
        assert (_snapshot(leftover) if leftover.is_dir() else leftover.read_bytes()) == snap
    else:
        target = tmp_path / leftover.name[1:].rsplit(".old-", 1)[0]
        assert not leftover.exists() and _snapshot(target) == snap


def test_dead_runs_build_folders_are_removed(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pid = _dead_pid()
    _partial(tmp_path / f"clinrel-build-{pid}-abc", pid)
    (tmp_path / f"clinrel-build-{pid}-nomark").mkdir()
    _partial(tmp_path / "clinrel-build-1-live", 1)
    with outputs.build_dir() as b:
        assert b.parent == tmp_path and b.name.startswith(f"clinrel-build-{os.getpid()}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clinrel-build-1-live",
                                                         f"clinrel-build-{pid}-nomark"]


def _start_report(tmp_path: Path, out: Path) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return subprocess.Popen([str(EXE), "report", "--demo", "--out", str(out), "--quiet"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_mid_run(tmp_path: Path, proc: subprocess.Popen) -> None:
    """Until the report has its temporary output and build folders (then it is writing)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (list(tmp_path.glob(".rep.tmp-*/tables/*.csv"))
                and list((tmp_path / "tmp").glob("clinrel-build-*"))):
            return
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.05)
    pytest.fail("the report never started writing")


# SIGTERM's clean stop is in make test through tests/safety/test_signals.py; here it is slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=["SIGKILL", "SIGTERM"])
def test_killed_report_leaves_nothing_after_the_next_run(tmp_path, monkeypatch, sig):
    out = tmp_path / "rep"
    proc = _start_report(tmp_path, out)
    _wait_mid_run(tmp_path, proc)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    builds = list((tmp_path / "tmp").iterdir())
    if sig == signal.SIGTERM:  # unwinds at once: nothing half-written survives
        assert proc.returncode == 128 + sig and leftovers == [] and builds == []
    else:
        assert leftovers and builds  # what a SIGKILL leaves ...
    assert not out.exists()
    _demo(tmp_path / "next")  # ... the next run in that folder removes
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    with outputs.build_dir():
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["next", "tmp"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_llm_check_gives_up_quickly():
    """A server that never accepts (its backlog is full) costs the timeout, not minutes."""
    from inference_runner.metadata.llm import CONNECT_TIMEOUT, LLMError, check_endpoint

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        port = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2):  # fills the backlog
            t0 = time.perf_counter()
            with pytest.raises(LLMError, match=rf"--llm-url http://127.0.0.1:{port}/v1: .*timed out"):
                check_endpoint(f"http://127.0.0.1:{port}/v1", timeout=0.5)
            assert time.perf_counter() - t0 < 3
    assert CONNECT_TIMEOUT <= 10
