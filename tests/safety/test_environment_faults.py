"""Faults of the environment give a message, not a traceback (issue 28, item 5): a full
disk or quota while writing any output (pandoc's and typst's writes included), a closed or
full standard output, a bad SOURCE_DATE_EPOCH, long legal names. Each: the exit code of
its kind, a message naming the path or variable and the fix, nothing partial and no
temporary left behind.

A full disk is injected, never made: an ``OSError(ENOSPC)`` raised where a write fails
(half the bytes written first), or the real tool (pandoc, typst) writing through a link
to ``/dev/full`` placed where its output goes (a link, so that a tool that replaces or
removes its output on failure, as pyarrow does, removes the link, never the device).
"""
from __future__ import annotations

import errno
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from reports import outputs
from clinrel.cli import app
from conftest import dead_pid, snapshot
from stats import simulate

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("clinrel")
FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(
    not (FULL.exists() and stat.S_ISCHR(FULL.stat().st_mode)), reason="no /dev/full")
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _program(*args, env=None, **kw) -> subprocess.CompletedProcess:
    """The installed ``clinrel`` program, running this checkout's code."""
    env = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    kw.setdefault("capture_output", True)
    return subprocess.run([str(EXE), *map(str, args)], env=env, timeout=300, **kw)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("envtables")
    simulate.benchx_cohort(160, n_models=2, n_sites=3, seed=2).data.to_csv(d / "cases.csv",
                                                                            index=False)
    return d


@pytest.fixture()
def study(tmp_path, tables, monkeypatch):
    """The current folder: cases.csv, plan.yaml (a small report) and notes.txt."""
    s = tmp_path / "study"
    s.mkdir()
    (s / "cases.csv").write_bytes((tables / "cases.csv").read_bytes())
    (s / "plan.yaml").write_text(yaml.safe_dump(
        {"version": 1, "title": "Faults", "inputs": {"cases": "cases.csv"},
         "detection": {"threshold": {"value": 50}, "subgroups": ["site"]}}))
    (s / "notes.txt").write_text("the user's\n")
    monkeypatch.chdir(s)
    return s


def _no_traceback(r) -> str:
    out = (r.output if hasattr(r, "output") else (r.stdout or b"").decode()
           + (r.stderr or b"").decode())
    assert "Traceback" not in out and "Exception ignored" not in out, out
    return out


def _half_then_full(path, data: bytes, err: OSError = ENOSPC):
    """Write half of ``data`` to ``path``, then fail as a full disk does (no file name)."""
    with open(path, "wb") as fh:
        fh.write(data[: len(data) // 2])
    raise OSError(err.errno, err.strerror)


# --------------------------------------------------------------------------- a full disk

def test_no_space_recognises_every_way_a_full_disk_is_reported():
    edquot = getattr(errno, "EDQUOT", None)
    assert outputs.no_space(OSError(errno.ENOSPC, "x")).errno == errno.ENOSPC
    pandoc = RuntimeError("pandoc: /o/appendix.docx: withBinaryFile: resource exhausted "
                          "(No space left on device)\nHasCallStack backtrace: throwIO")
    assert outputs.no_space(pandoc).errno == errno.ENOSPC
    assert outputs.no_space(OSError("No space left on device (os error 28)")).errno == errno.ENOSPC
    assert outputs.no_space(OSError(28, "Error writing bytes to file. Detail: [errno 28] "
                                        "No space left on device")).errno == errno.ENOSPC
    wrapped = RuntimeError("task failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert outputs.no_space(wrapped).errno == errno.ENOSPC
    if edquot is not None:
        assert outputs.no_space(OSError(os.strerror(edquot) + " (os error "
                                        f"{edquot})")).errno == edquot
    for other in (OSError(errno.EACCES, "Permission denied"), RuntimeError("pandoc: bad"),
                  ValueError("No space left on device"), None):
        assert outputs.no_space(other) is None


@needs_dev_full
def test_pandocs_full_disk_is_an_oserror_naming_its_output(tmp_path):
    """pandoc's own write (the docx) on a full disk: its Haskell ``throwIO`` text becomes
    the ``OSError`` Python would raise, with the output's path."""
    from reports import sandbox

    target = tmp_path / "appendix.docx"
    target.symlink_to(FULL)
    ast = sandbox.to_ast("Hello *world*.\n", tmp_path)
    with pytest.raises(OSError) as info:
        sandbox.write_file(ast, "docx", target, cwd=tmp_path)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert FULL.is_char_device()


@needs_dev_full
def test_typsts_full_disk_is_an_oserror_naming_its_output(tmp_path):
    from reports.render import _pandoc_pdf

    folder, build = tmp_path / "out", tmp_path / "build"
    folder.mkdir()
    build.mkdir()
    (folder / "appendix.pdf").symlink_to(FULL)
    with pytest.raises(OSError) as info:
        _pandoc_pdf("# Title\n\nHello.\n", folder, build)
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename == str(folder / "appendix.pdf")
    assert sorted(p.name for p in folder.iterdir()) == ["appendix.pdf"]  # no .appendix.typ
    assert FULL.is_char_device()


def _full_message(r, out: str, what: str, quota: bool = False) -> None:
    text = _no_traceback(r)
    assert r.exit_code == 2, text
    assert f"--out {out}" in text and f"while writing {what}" in text, text
    assert ("the disk quota is exhausted" if quota else "the disk is full") in text, text
    assert "nothing was written and no temporary file is left" in text
    assert "or choose another --out on a disk with space" in text, text


@pytest.mark.parametrize("force", [False, True], ids=["new", "force-over-earlier"])
def test_demo_on_a_full_disk_exits_2_and_leaves_the_folder_as_it_was(study, monkeypatch, force):
    if force:
        assert runner.invoke(app, ["demo", "--out", "d", "--quiet"]).exit_code == 0
    before = snapshot(study)
    calls = []

    def copy2(src, dst, *a, **k):
        calls.append(src)
        if len(calls) == 3:   # the third file: half written, then the disk is full
            _half_then_full(dst, Path(src).read_bytes())
        return Path(dst).write_bytes(Path(src).read_bytes())

    monkeypatch.setattr("clinrel.cli.core.shutil.copy2", copy2)
    r = runner.invoke(app, ["demo", "--out", "d", "--quiet", *(["--force"] if force else [])])
    _full_message(r, "d", "the output")
    assert f"free space on the disk that holds {study}" in r.output
    assert snapshot(study) == before   # no new folder, the earlier one as it was, no temporary


@pytest.mark.parametrize("suffix,quota", [(".csv", False), (".parquet", False), (".csv", True)],
                         ids=["csv", "parquet", "csv-quota"])
def test_subgroups_out_on_a_full_disk_exits_2_and_writes_nothing(study, monkeypatch, suffix,
                                                                 quota):
    edquot = getattr(errno, "EDQUOT", None)
    if quota and edquot is None:
        pytest.skip("no EDQUOT on this system")
    err = OSError(edquot, os.strerror(edquot)) if quota else ENOSPC
    import pandas as pd

    if suffix == ".csv":
        monkeypatch.setattr("reports.csvsafe.write_csv",
                            lambda df, path, **k: _half_then_full(path, b"a,b\n" * 100, err))
    else:   # pyarrow's own words
        def to_parquet(self, path, *a, **k):
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] "
                                        "No space left on device")
        monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)
    (study / "sub").mkdir()
    before = snapshot(study)
    r = runner.invoke(app, ["subgroups", "cases.csv", "--threshold", "50", "--by", "site",
                            "--out", f"sub/t{suffix}", "--quiet"])
    _full_message(r, f"sub/t{suffix}", f"t{suffix}", quota=quota)
    assert ("free space (or ask for a larger quota)" if quota else "; free space on") in r.output
    assert snapshot(study) == before


def _report(extra=()) -> object:
    return runner.invoke(app, ["report", "--plan", "plan.yaml", "--out", "rep", "--quiet",
                               *extra])


@pytest.fixture()
def tempdir(tmp_path, monkeypatch):
    """The temporary directory of this test (the report's build folder goes there)."""
    t = tmp_path / "tmp"
    t.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(t))
    return t


def test_report_on_a_full_disk_writing_a_table_exits_2_and_leaves_nothing(study, monkeypatch,
                                                                        tempdir):
    before = snapshot(study)
    real = __import__("reports.csvsafe", fromlist=["write_csv"]).write_csv

    def write_csv(df, path, **k):
        if Path(path).parent.name == "results":
            _half_then_full(path, b"x,y\n" * 1000)
        return real(df, path, **k)

    monkeypatch.setattr("reports.csvsafe.write_csv", write_csv)
    r = _report()
    _full_message(r, "rep", "results/")
    assert snapshot(study) == before and os.listdir(tempdir) == []


def _link_to_full(name: str):
    """A wrapper of a renderer that puts ``folder/name`` -> /dev/full first: the real tool
    then writes its output onto a full device."""
    def wrap(fn):
        def run(md, folder, *a, **k):
            (Path(folder) / name).symlink_to(FULL)
            return fn(md, folder, *a, **k)
        return run
    return wrap


@pytest.mark.slow
@needs_dev_full
@pytest.mark.parametrize("renderer,name", [("_pandoc_docx", "appendix.docx"),
                                           ("_pandoc_pdf", "appendix.pdf"),
                                           ("_pandoc_html", "appendix.html")],
                         ids=["pandoc-docx", "typst-pdf", "html"])
def test_report_when_a_renderers_own_write_finds_the_disk_full(study, monkeypatch, tempdir,
                                                               renderer, name):
    """pandoc (docx), typst (pdf) and the HTML writing into a full disk: exit 2 with the
    file named, the --out folder as before (an earlier report, replaced with --force),
    nothing in the temporary folder."""
    import reports.render as render

    assert _report().exit_code == 0
    before = snapshot(study)
    monkeypatch.setattr(render, renderer, _link_to_full(name)(getattr(render, renderer)))
    r = _report(["--force"])
    _full_message(r, "rep", name)
    assert snapshot(study) == before and os.listdir(tempdir) == []
    assert FULL.is_char_device()


@pytest.mark.slow
def test_report_when_a_figure_worker_finds_the_disk_full(study, monkeypatch, tempdir):
    """The error comes back from a forked worker (--jobs 2) with its errno."""
    from reports.figures import ReportFigure

    before = snapshot(study)
    monkeypatch.setattr(ReportFigure, "save",
                        lambda self, folder: _half_then_full(Path(folder) / f"{self.name}.png",
                                                             b"\x89PNG" * 500))
    r = _report(["--jobs", "2"])
    _full_message(r, "rep", "the output")
    assert snapshot(study) == before and os.listdir(tempdir) == []


@pytest.mark.slow
def test_report_when_the_temporary_folder_is_full(study, monkeypatch, tempdir):
    """The report's build folder (in TMPDIR) is what is full: the message says so."""
    before = snapshot(study)
    real = outputs._temp_dir

    def temp_dir(parent, prefix, **info):
        if prefix.startswith("clinrel-build-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(parent, prefix, **info)

    monkeypatch.setattr(outputs, "_temp_dir", temp_dir)
    r = _report()
    text = _no_traceback(r)
    assert r.exit_code == 2, text
    assert (f"in the temporary folder {tempdir} while writing the report's build folder"
            in text and "set TMPDIR to a folder" in text), text
    assert snapshot(study) == before and os.listdir(tempdir) == []


def test_a_full_disk_outside_the_output_layer_is_a_message_too(study, monkeypatch):
    """The program's last net: a full disk met anywhere else (a library's cache, say)."""
    code = ("import errno, os, sys\n"
            "import clinrel.cli.core as core\n"
            "def boom(*a, **k): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "
            "'/var/cache/x')\n"
            "core._guess_kind = boom\n"
            "sys.argv = ['clinrel', 'validate', 'cases.csv']\n"
            "from clinrel.cli import main\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    err = _no_traceback(r)
    assert r.returncode == 2 and "the disk is full" in err and "/var/cache/x" in err, err


# --------------------------------------------------------------------------- standard output

@pytest.mark.parametrize("argv", [["validate", "cases.csv"], ["--help"]], ids=["validate", "help"])
def test_stdout_closed_by_its_reader_exits_141_silently(study, argv):
    """``clinrel ... | head -c1``: the reader is gone before clinrel writes (closed at
    once, so the timing is the worst case): no message, 141 (128 + SIGPIPE)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([str(EXE), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141, err
    assert err == ""


@needs_dev_full
@pytest.mark.parametrize("argv", [["validate", "cases.csv"], ["--help"]], ids=["validate", "help"])
def test_full_stdout_is_a_message_and_exit_2(study, argv):
    with open(FULL, "w") as full:
        r = _program(*argv, stdout=full, stderr=subprocess.PIPE, capture_output=False)
    err = r.stderr.decode()
    assert r.returncode == 2, err
    assert "Traceback" not in err
    assert err.strip() == ("clinrel: error: cannot write to standard output (No space left "
                           "on device); free space on the disk that standard output goes to, "
                           "or send it elsewhere (> another file, or --quiet)")


@needs_dev_full
def test_full_stderr_keeps_the_exit_code(study):
    with open(FULL, "w") as full:
        r = _program("validate", "missing.csv", stderr=full, stdout=subprocess.PIPE,
                     capture_output=False)
    assert r.returncode == 2


def test_closed_stdout_is_like_dev_null(study):
    r = _program("validate", "cases.csv", stdout=None, capture_output=False,
                 stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    assert r.returncode == 0 and r.stderr == b""


# --------------------------------------------------------------------------- SOURCE_DATE_EPOCH

BAD_EPOCHS = ["yesterday", "-5", "1.5", "1e9", "+5", "99999999999999999999", "253402300800",
              "9" * 5000]


@pytest.mark.parametrize("value", BAD_EPOCHS, ids=lambda v: v[:22])
def test_bad_source_date_epoch_is_refused_by_the_program(study, value):
    r = _program("report", "--plan", "plan.yaml", "--out", "rep",
                 env=dict(os.environ, SOURCE_DATE_EPOCH=value))
    err = _no_traceback(r)
    assert r.returncode == 2, err
    assert err.startswith(f"clinrel: error: SOURCE_DATE_EPOCH={value[:60]!r}: "), err
    assert "whole number of seconds since 1970-01-01 00:00 UTC" in err
    assert "unset SOURCE_DATE_EPOCH" in err
    assert not (study / "rep").exists()


@pytest.mark.parametrize("value", ["0", " 1700000000 ", "", "253402300799"])
def test_good_or_empty_source_date_epoch_is_accepted(study, value):
    r = _program("validate", "cases.csv", env=dict(os.environ, SOURCE_DATE_EPOCH=value))
    assert r.returncode == 0, r.stderr.decode()


@pytest.mark.parametrize("value", BAD_EPOCHS, ids=lambda v: v[:22])
def test_render_api_refuses_a_bad_source_date_epoch(monkeypatch, value):
    from reports._env import EnvironmentVariableError
    from reports.render import source_date_epoch

    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(EnvironmentVariableError, match=r"^SOURCE_DATE_EPOCH=.*unset it"):
        source_date_epoch()


def test_render_api_reads_a_good_source_date_epoch(monkeypatch):
    from reports.render import DEFAULT_EPOCH, source_date_epoch

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert source_date_epoch() == DEFAULT_EPOCH
    for raw, value in [("", DEFAULT_EPOCH), (" 12 ", 12), ("253402300799", 253402300799)]:
        monkeypatch.setenv("SOURCE_DATE_EPOCH", raw)
        assert source_date_epoch() == value


# --------------------------------------------------------------------------- long names

def _name(n_bytes: int, ch: str = "n", suffix: str = "") -> str:
    body = ch * max(1, (n_bytes - len(suffix.encode())) // len(ch.encode()))
    return body + suffix


def test_temporaries_of_any_legal_name_fit_name_max():
    for n in (1, 100, 200, 201, 233, 250, 255):
        for ch in ("n", "\u00e9", "\u6f22"):
            name = _name(n, ch)
            tmp = f"{outputs._tmp_prefix(name)}{4194304}-abcdefgh"
            assert len(os.fsencode(tmp)) <= 255, (n, ch)
            assert outputs._TMP.match(tmp)
    assert outputs._tmp_prefix("report") == ".report.tmp-"   # a short name is kept
    a, b = _name(250, "a") + "1", _name(250, "a") + "2"
    assert outputs._tmp_prefix(a) != outputs._tmp_prefix(b)


@pytest.mark.parametrize("ch", ["n", "\u00e9"], ids=["ascii", "two-byte"])
def test_a_250_byte_out_folder_name_works_and_can_be_replaced(study, ch):
    name = _name(250, ch)
    assert runner.invoke(app, ["demo", "--out", name, "--quiet"]).exit_code == 0
    assert outputs.classify(study / name)[0] == "clinrel"
    r = runner.invoke(app, ["demo", "--out", name, "--quiet", "--force"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in study.iterdir()) == sorted(["cases.csv", "plan.yaml",
                                                              "notes.txt", name])


def test_a_255_byte_out_file_name_works_and_can_be_replaced(study):
    name = _name(255, suffix=".csv")
    for extra in ([], ["--force"]):
        r = runner.invoke(app, ["simulate", "benchx", "--scale", "30", "--out", name, *extra])
        assert r.exit_code == 0, r.output
    assert (study / name).read_text().startswith("case_id,")
    assert {p.name for p in study.iterdir()} == {"cases.csv", "plan.yaml", "notes.txt", name}


@pytest.mark.parametrize("argv,kind", [
    (["demo", "--quiet", "--out"], "folder"),
    (["simulate", "benchx", "--scale", "30", "--out"], "file"),
    (["subgroups", "cases.csv", "--threshold", "50", "--by", "site", "--out"], "file"),
], ids=["demo", "simulate", "subgroups"])
def test_a_name_over_the_limit_is_refused_with_the_limit(study, argv, kind):
    name = _name(256, suffix=".csv" if kind == "file" else "")
    before = snapshot(study)
    r = runner.invoke(app, [*argv, f"sub/{name}"])
    text = _no_traceback(r)
    assert r.exit_code == 2, text
    assert "is 256 bytes long; this file system allows at most 255 bytes in one name" in text
    assert "give --out a shorter name" in text
    assert snapshot(study) == before


def test_a_path_over_the_limit_is_refused(study):
    deep = "/".join(["d" * 200] * 21) + "/x.csv"
    r = runner.invoke(app, ["simulate", "benchx", "--scale", "30", "--out", deep])
    text = _no_traceback(r)
    assert r.exit_code == 2 and "give --out a shorter path" in text, text
    assert not (study / ("d" * 200)).exists()


def _parked(study: Path, name: str, pid: int) -> Path:
    """What a run killed in the middle of replacing ``name`` leaves: the old output parked
    as ``old`` in a marked folder naming it."""
    assert runner.invoke(app, ["demo", "--out", name, "--quiet"]).exit_code == 0
    park = study / f"{outputs._tmp_prefix(name)}{pid}-killed"
    park.mkdir()
    (park / outputs.PARTIAL).write_text(json.dumps({"pid": pid, "host": socket.gethostname(),
                                                    "restore": name}))
    (study / name).rename(park / "old")
    return park


@pytest.mark.parametrize("n_bytes", [10, 250])
def test_an_old_output_parked_by_a_killed_run_is_put_back(study, n_bytes):
    name = _name(n_bytes)
    park = _parked(study, name, dead_pid())
    want = snapshot(park / "old")
    assert outputs.clean_stale(study) == [park]
    assert not park.exists() and snapshot(study / name) == want


def test_a_parked_output_is_never_put_over_a_new_one_nor_taken_from_a_live_run(study):
    park = _parked(study, "d", dead_pid())
    (study / "d").mkdir()            # the killed run had already moved the new output in
    (study / "d" / "new.txt").write_text("new")
    new = snapshot(study / "d")
    assert outputs.clean_stale(study) == [park]
    assert not park.exists() and snapshot(study / "d") == new
    live = _parked(study, "e", os.getpid())            # a run still going: untouched
    assert outputs.clean_stale(study) == [] and live.exists()
    odd = _parked(study, "f", dead_pid())              # a marker naming no plain name
    info = json.loads((odd / outputs.PARTIAL).read_text())
    (odd / outputs.PARTIAL).write_text(json.dumps({**info, "restore": "../f"}))
    want = snapshot(odd)
    assert outputs.clean_stale(study) == []           # nothing moved, nothing removed
    assert snapshot(odd) == want and not (study.parent / "f").exists()
    (odd / outputs.PARTIAL).write_text(json.dumps(info))
    (odd / "old" / "mine.txt").write_text("added by the user")   # not clinrel's any more
    want = snapshot(odd)
    assert outputs.clean_stale(study) == [] and snapshot(odd) == want
