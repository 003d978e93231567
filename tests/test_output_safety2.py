"""Output safety, second audit: nothing clinrel did not write is deleted or replaced.

1. A user's file named like a temporary (``.thesis.docx.tmp-31337-autosave``) survives
   every run; clinrel removes only its own marked temporary folders (a killed run's
   single-file temporary is one of them).
2. A folder is empty only with no entry at all: an empty user subfolder in ``--out``, or
   an extra folder (even empty) in an earlier clinrel output, is refused (exit 2, even
   with ``--force``) and survives.
3. A command writing several files writes all of them or none: one bad output path
   (``adjust --glance-out x.txt``, ``metadata extract --review rev.txt``) leaves no file
   behind and every existing file as it was.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from reports import outputs
from clinrel.cli import app
from stats import simulate
from conftest import dead_pid, snapshot

runner = CliRunner()


# --------------------------------------------------------------------------- helpers

def _snapshot(folder: Path) -> dict[str, str]:
    return snapshot(folder)


def _dead_pid() -> int:
    return dead_pid()


def _ok(argv: list[str]) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 0, r.output


def _refused(argv: list[str], *words: str) -> str:
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, f"exit {r.exit_code}\n{r.output}\n{r.exception!r}"
    assert "Traceback" not in r.output
    for w in words:
        assert w in r.output, f"{w!r} not in:\n{r.output}"
    return r.output


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("tables")
    simulate.benchx_cohort(160, n_models=2, n_sites=3, seed=2).data.to_csv(d / "cases.csv", index=False)
    (d / "reps.csv").write_text("case_id,text\nr1,63-year-old man; arterial phase\n"
                                "r2,\"female, 40 years; portal venous phase\"\n")
    return d


@pytest.fixture()
def study(tmp_path, tables, monkeypatch):
    s = tmp_path / "study"
    s.mkdir()
    for name in ("cases.csv", "reps.csv"):
        (s / name).write_bytes((tables / name).read_bytes())
    monkeypatch.chdir(s)
    return s


# --------------------------------------------------------------------------- 1. stale temporaries

def _user_temp_lookalikes(folder: Path) -> list[Path]:
    dead = _dead_pid()
    files = [folder / f".thesis.docx.tmp-{dead}-autosave", folder / ".x.tmp-31337-y",
             folder / f".res.csv.tmp-{dead}-abc.csv", folder / f".demo.tmp-{dead}-x"]
    for f in files:
        f.write_text("draft, not clinrel's\n")
    return files


@pytest.mark.parametrize("argv", [
    ["subgroups", "cases.csv", "--by", "phase", "--threshold", "50", "--out", "res.csv", "--quiet"],
    ["demo", "--out", "demo", "--quiet"],
], ids=["file-output", "folder-output"])
def test_user_files_named_like_temporaries_survive(study, argv):
    mine = _user_temp_lookalikes(study)
    _ok(argv)
    for f in mine:
        assert f.read_text() == "draft, not clinrel's\n", f"{f.name} was removed or changed"


def test_user_file_named_like_a_temporary_survives_in_the_parent_of_out(study):
    parent = study / "p2"
    parent.mkdir()
    mine = _user_temp_lookalikes(parent)
    _ok(["demo", "--out", "p2/demo", "--quiet"])
    assert all(f.read_text() == "draft, not clinrel's\n" for f in mine)


KILLED_WRITER = """
import os, signal, sys
from reports.outputs import atomic_file
with atomic_file(sys.argv[1]) as tmp:
    tmp.write_text("half")
    print(tmp, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killed_runs_single_file_temporary_is_marked_and_removed_by_the_next_run(study):
    """The writer and the cleaner agree: a file temporary lives in a marked folder."""
    p = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(study / "res.csv")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    tmp = Path(p.stdout.strip())
    assert tmp.name == "res.csv" and tmp.read_text() == "half"
    folder = tmp.parent
    assert folder.parent == study and folder.name.startswith(".res.csv.tmp-")
    marker = json.loads((folder / outputs.PARTIAL).read_text())
    assert marker["pid"] == int(folder.name.split(".tmp-")[1].split("-")[0])
    mine = _user_temp_lookalikes(study)
    _ok(["subgroups", "cases.csv", "--by", "phase", "--threshold", "50", "--out", "s.csv", "--quiet"])
    assert not folder.exists() and not (study / "res.csv").exists()
    assert all(f.exists() for f in mine)


def test_clean_stale_never_removes_a_file(tmp_path):
    dead = _dead_pid()
    for name in (f".s.csv.tmp-{dead}-x1.csv", f".rep.tmp-{dead}-abc", f".rep.old-{dead}"):
        (tmp_path / name).write_text("x")
    assert outputs.clean_stale(tmp_path) == []
    assert len(list(tmp_path.iterdir())) == 3


# --------------------------------------------------------------------------- 2. user folders in --out

@pytest.mark.parametrize("sub", ["drafts/2026", "drafts", ".hidden"])
def test_out_folder_with_only_empty_user_subfolders_is_refused(study, sub):
    (study / "o1" / sub).mkdir(parents=True)
    before = _snapshot(study)
    for extra in ([], ["--force"]):
        _refused(["demo", "--out", "o1", "--quiet", *extra],
                 "did not write", sub.split("/")[0] + "/", "--out NEW_FOLDER")
    assert _snapshot(study) == before


def test_report_into_a_folder_holding_an_empty_user_folder_is_refused(study):
    (study / "rep" / "drafts" / "2026").mkdir(parents=True)
    before = _snapshot(study)
    _refused(["report", "--demo", "--out", "rep", "--quiet"], "drafts/", "did not write")
    assert (study / "rep" / "drafts" / "2026").is_dir() and _snapshot(study) == before


@pytest.mark.parametrize("extra", ["mine", "mine/deeper", ".git", "tables"])
def test_earlier_clinrel_output_with_an_extra_empty_folder_is_refused_with_force(study, extra):
    _ok(["demo", "--out", "d", "--quiet"])
    (study / "d" / extra).mkdir(parents=True)
    assert outputs.classify(study / "d")[0] == "foreign"
    before = _snapshot(study)
    _refused(["demo", "--out", "d", "--quiet", "--force"], extra.split("/")[0] + "/",
             "did not write", "--force does not")
    assert (study / "d" / extra).is_dir() and _snapshot(study) == before


def test_truly_empty_folder_is_used_and_clinrels_own_folders_are_replaceable(study):
    (study / "e").mkdir()
    _ok(["demo", "--out", "e", "--quiet"])
    assert outputs.classify(study / "e") == ("clinrel", [])
    _ok(["demo", "--out", "e", "--quiet", "--force"])


def test_folders_clinrel_made_even_empty_ones_are_its_own(tmp_path):
    out = tmp_path / "r"
    with outputs.atomic_dir(out, command="report") as tmp:
        (tmp / "figures").mkdir()  # a report drawn without figures: empty, but clinrel's
        (tmp / "tables").mkdir()
        (tmp / "tables" / "t.csv").write_text("a\n1\n")
    man = json.loads((out / "manifest.json").read_text())
    assert man["folders"] == ["figures", "tables"]
    assert outputs.classify(out) == ("clinrel", [])
    (out / "figures" / "sub").mkdir()
    assert outputs.classify(out) == ("foreign", ["figures/sub/"])
    legacy = tmp_path / "legacy"  # written before manifests listed files' sha256: clinrel
    (legacy / "figures").mkdir(parents=True)  # cannot tell edits, so it is not its own
    (legacy / "manifest.json").write_text(json.dumps(
        {"clinrel_report": 1, "tables": [], "figures": []}))
    assert outputs.classify(legacy)[0] == "foreign"


# --------------------------------------------------------------------------- 3. all or nothing

ADJ = ["adjust", "cases.csv", "--formula", "detected ~ phase", "--threshold", "50", "--quiet"]


@pytest.mark.parametrize("argv, words", [
    ([*ADJ, "--out", "t_terms.csv", "--glance-out", "t_glance.txt"], ["--glance-out", "'.txt'"]),
    ([*ADJ, "--out", "t_terms.csv", "--blocks-out", "x.xlsx"], ["--blocks-out", "'.xlsx'"]),
    ([*ADJ, "--out", "new/sub/t_terms.csv", "--glance-out", "new/g.txt"], ["'.txt'"]),
    (["metadata", "extract", "reps.csv", "--out", "ev.csv", "--review", "rev.txt", "--quiet"],
     ["--review", "'.txt'"]),
], ids=["adjust-glance", "adjust-blocks", "adjust-new-folders", "metadata-review"])
def test_one_bad_output_suffix_leaves_no_file(study, argv, words):
    before = _snapshot(study)
    _refused(argv, *words, ".csv or .parquet")
    assert _snapshot(study) == before


def test_failed_multi_file_run_leaves_existing_outputs_untouched(study):
    (study / "t_terms.csv").write_text("my earlier terms\n")   # --force may replace it
    before = _snapshot(study)
    _refused([*ADJ, "--out", "t_terms.csv", "--glance-out", "g.txt", "--force"], "'.txt'")
    assert _snapshot(study) == before


def test_multi_file_commands_still_write_every_file(study):
    _ok([*ADJ, "--out", "t.csv", "--glance-out", "g.parquet"])
    assert len(pd.read_csv("t.csv")) and len(pd.read_parquet("g.parquet"))
    _ok(["metadata", "extract", "reps.csv", "--out", "ev.csv", "--review", "rev.csv", "--quiet"])
    assert {p.name for p in study.iterdir()} == {"cases.csv", "reps.csv", "t.csv", "g.parquet",
                                                "ev.csv", "ev_agreement.csv", "rev.csv"}


class _Unwritable:
    def to_parquet(self, *a, **k):
        raise OSError(28, "No space left on device")


def test_write_tables_failing_midway_writes_nothing(tmp_path):
    df = pd.DataFrame({"a": [1, 2]})
    (tmp_path / "old.csv").write_text("old\n")               # --force may replace it
    before = _snapshot(tmp_path)
    # a full disk is a message naming the output that failed (reports.outputs.MSG_NO_SPACE)
    with pytest.raises(outputs.OutputError, match=r"--b-out .*b\.parquet.*the disk is full"):
        outputs.write_tables([("--out", tmp_path / "old.csv", df),
                              ("--a-out", tmp_path / "new" / "a.csv", df),
                              ("--b-out", tmp_path / "new" / "b.parquet", _Unwritable())],
                             force=True)
    assert _snapshot(tmp_path) == before  # no file, no folder, no temporary left


def test_write_tables_undoes_the_moves_made_when_one_fails(tmp_path, monkeypatch):
    df = pd.DataFrame({"a": [1, 2]})
    (tmp_path / "one.csv").write_text("old one\n")           # --force may replace it
    before = _snapshot(tmp_path)
    real = os.replace

    def replace(src, dst, *a, **k):
        if Path(dst).name == "two.csv":
            raise PermissionError(13, "Permission denied")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(outputs.OutputError, match="--two-out"):
        outputs.write_tables([("--out", tmp_path / "one.csv", df),
                              ("--two-out", tmp_path / "two.csv", df)], force=True)
    monkeypatch.setattr(os, "replace", real)
    assert _snapshot(tmp_path) == before
    outputs.write_tables([("--out", tmp_path / "one.csv", df),
                          ("--two-out", tmp_path / "two.csv", df)], force=True)
    assert pd.read_csv(tmp_path / "one.csv").equals(df) and (tmp_path / "two.csv").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.csv", "two.csv"]


# --------------------------------------------------------------------------- 4. second audit

HIDDEN = ".clinrel-written.json"   # the name of a record earlier versions kept


def test_no_hidden_bookkeeping_beside_a_file_output_to_plant_a_link_at(study):
    """Second safety audit: the record of written files beside a file output was read and
    rewritten through a planted symlink. There is no such record now: a link planted at
    its old name is never read or written, nothing of clinrel's is left hidden beside the
    outputs, and --force replaces the output (asked)."""
    private = study.parent / "private"
    private.mkdir()
    secret = private / "notes.json"
    secret.write_text('{"api_token": "SECRET-123"}')
    (study / HIDDEN).symlink_to(secret)
    before = secret.read_bytes()
    _ok([*ADJ, "--out", "t.csv"])
    _ok([*ADJ, "--out", "t.csv", "--force"])
    assert secret.read_bytes() == before and (study / HIDDEN).is_symlink()
    assert "SECRET" not in "".join(p.read_text(errors="ignore") for p in study.iterdir()
                                   if p.is_file() and not p.is_symlink())
    assert [p.name for p in study.iterdir() if p.name.startswith(".")] == [HIDDEN]


def test_a_folder_at_the_records_old_name_leaves_no_stray_file(study):
    (study / HIDDEN).mkdir()
    _ok([*ADJ, "--out", "t.csv"])
    assert sorted(p.name for p in study.iterdir() if p.name.startswith(".")) == [HIDDEN]


def test_a_dotdot_output_path_never_removes_a_users_empty_folder(study):
    """Second audit: in nx/../userempty the run counted userempty as a folder it made
    and removed it on failure, leaving nx behind."""
    (study / "userempty").mkdir()
    (study / "somefile").write_text("x")
    _refused([*ADJ, "--out", "nx/../userempty/terms.csv", "--glance-out",
              "nx2/../somefile/g.csv"])
    assert (study / "userempty").is_dir() and not (study / "nx").exists()
    assert not (study / "nx2").exists() and (study / "somefile").read_text() == "x"


@pytest.mark.parametrize("where", ["record", "partial"])
def test_a_fifo_where_clinrel_keeps_its_bookkeeping_never_hangs(study, where):
    """Second audit: a FIFO at the record of written files, or at a dead run's marker,
    made every run hang (reading it blocks); clinrel reads only regular files."""
    if where == "record":
        os.mkfifo(study / HIDDEN)
    else:
        left = study / f".zz.tmp-{_dead_pid()}-x"
        left.mkdir()
        os.mkfifo(left / outputs.PARTIAL)
    done = subprocess.run([sys.executable, "-c", "from clinrel.cli import main; main()",
                           *ADJ[:-1], "--out", "t.csv"], cwd=study, timeout=120,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
