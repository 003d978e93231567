"""Every output file is byte-identical across runs.

A small study (both halves, every section, every format) rendered by the CLI in two
separate processes with different hash seeds, one with ``--jobs 1`` and one with
``--jobs 2`` (analyses, figures and documents in forked processes); every file must be
byte-identical except ``manifest.json``, whose only differences may be the documented ones (``created_utc``,
``timings_s``, ``git_revision``). Also: the PDF's dates follow ``SOURCE_DATE_EPOCH``; no
output carries a clock time (PNG text chunks, SVG dates, docx core properties).
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_docx import _study

#: the manifest keys documented to differ between runs (README, reports/render.py)
VOLATILE = ("created_utc", "timings_s", "git_revision")


def _render(plan: Path, out: Path, hash_seed: str, jobs: int = 1) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    env.pop("SOURCE_DATE_EPOCH", None)
    clinrel = Path(sys.executable).with_name("clinrel")
    done = subprocess.run([str(clinrel), "report", "--plan", str(plan), "--out", str(out),
                           "--strict", "--quiet", "--jobs", str(jobs)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("determinism")
    plan = _study(folder)
    _render(plan, folder / "a", "1")
    _render(plan, folder / "b", "2", jobs=2)
    return folder / "a", folder / "b"


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_two_runs_write_byte_identical_files(two_runs):
    a, b = two_runs
    names = _files(a)
    assert names == _files(b)
    kinds = {Path(n).suffix for n in names}
    assert {".qmd", ".html", ".pdf", ".docx", ".png", ".svg", ".csv", ".json"} <= kinds
    differ = [n for n in names if n != "manifest.json"
              and (a / n).read_bytes() != (b / n).read_bytes()]
    assert differ == []


def test_manifests_differ_only_in_the_documented_keys(two_runs):
    a, b = two_runs
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert set(ma) == set(mb) and set(VOLATILE) <= set(ma)
    assert [k for k in ma if k not in VOLATILE and ma[k] != mb[k]] == []
    assert ma["files"] == mb["files"]  # the sha256 of every other file


def _png_chunks(data: bytes) -> list[str]:
    out, i = [], 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        out.append(data[i + 4:i + 8].decode("ascii"))
        i += 12 + n
    return out


def test_no_output_carries_a_clock_time(two_runs):
    a, _ = two_runs
    for png in (a / "figures").glob("*.png"):
        chunks = _png_chunks(png.read_bytes())
        assert not {"tIME", "tEXt", "iTXt", "zTXt"} & set(chunks), (png.name, chunks)
    for svg in (a / "figures").glob("*.svg"):
        assert "<dc:date>" not in svg.read_text(encoding="utf-8"), svg.name
    with zipfile.ZipFile(a / "appendix.docx") as z:
        assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        core = z.read("docProps/core.xml").decode()
    assert "1970-01-01T00:00:00Z" in core  # pandoc --sandbox reads no clock
    from pypdf import PdfReader

    meta = PdfReader(str(a / "appendix.pdf")).metadata
    assert meta["/CreationDate"] == meta["/ModDate"] == "D:19800101000000Z"


def test_pdf_dates_follow_source_date_epoch(tmp_path, monkeypatch):
    from pypdf import PdfReader
    from test_escaping import _hostile_doc

    from reports import render

    study, sections, build = _hostile_doc("x", tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14T22:13:20Z
    render._pandoc_pdf(render.render_markdown(study, sections, "typst"), tmp_path, build,
                       render.source_date_epoch())
    meta = PdfReader(str(tmp_path / "appendix.pdf")).metadata
    assert meta["/CreationDate"] == "D:20231114221320Z"
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert render.source_date_epoch() == render.DEFAULT_EPOCH
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "not a number")   # refused, not ignored
    with pytest.raises(ValueError, match=r"^SOURCE_DATE_EPOCH='not a number': not a whole"):
        render.source_date_epoch()


def test_reports_in_one_process_with_forked_workers_finish(tmp_path):
    """Two reports in one process: the first (one job) starts typst's native thread pool
    here; the second (two jobs) would hang if its PDF were rendered in a forked child,
    which waits forever for threads fork did not copy (reports._fork runs the PDF in
    this process; measured: the old code hung). Run in a subprocess with a time limit,
    so a regression fails instead of hanging the suite."""
    plan = _study(tmp_path)
    code = ("import sys, warnings; warnings.simplefilter('ignore')\n"
            "from reports.render import render_report\n"
            "for k in (1, 2):\n"
            f"    render_report({str(plan)!r}, {str(tmp_path)!r} + f'/r{{k}}', jobs=k,"
            " strict=True)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, check=False, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "r2" / "appendix.pdf").read_bytes() == \
        (tmp_path / "r1" / "appendix.pdf").read_bytes()
