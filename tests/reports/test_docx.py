"""``appendix.docx``, a Word appendix a journal or a regulator accepts.

A small study with both halves (hostile site and model names) rendered once to HTML and
docx; the docx is opened with python-docx and compared with the HTML: the same tables
(real Word tables, same cell text), every figure embedded at print size, numbered
captions, working "Table N" / "Figure N" links, notes right under their table, short
tables never split across pages and notes kept with their table (``reports.docx_layout``),
long tables' headers repeated, wide tables on landscape pages, the reference .docx
swappable. Also: hostile strings in every
place stay literal text in the docx.
"""
from __future__ import annotations

import re

import os
import warnings
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import docx  # python-docx, in the [test] extra

from test_escaping import _STRINGS

from reports import render
from reports.render import render_report

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
PIC = "{http://schemas.openxmlformats.org/drawingml/2006/picture}"
SITE = 'S<b>&amp; "1" #2 $x @y *z* _w_ [a](b) {{< meta title >}}'
MODEL = "m<1>&'q' `{=typst}`"
SECTIONS = ("methods", "twobytwo", "overall", "subgroups", "forest", "failure_map", "crs")


def _study(folder: Path) -> Path:
    from stats import simulate

    cases = simulate.benchx_cohort(240, n_models=2, n_sites=3, seed=3).data
    cases["site"] = cases["site"].astype(str).replace({"site_01": SITE})
    cases["model"] = cases["model"].replace({"model_A": MODEL})
    cases.to_csv(folder / "cases.csv", index=False)
    simulate.crs_runs(n_encoders=4, n_datasets=1, n_seeds=3, perturbations=("blur",),
                      severities=(1,), label_fractions=(0.1, 1.0),
                      seed=2).data.to_csv(folder / "runs.csv", index=False)
    (folder / "reference.yaml").write_text("panel: [enc_01, enc_02, enc_03]\n")
    raw = {"version": 1, "title": "Word <appendix> & 'quotes'",
           "inputs": {"cases": "cases.csv", "runs": "runs.csv", "reference": "reference.yaml"},
           "detection": {"threshold": {"value": 50}, "subgroups": ["site", "phase"],
                         "failure_map": {"rows": "age_group", "cols": "phase"}},
           "crs": {"bootstrap": {"n_boot": 100, "seed": 1}, "k": 2}}
    (folder / "plan.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    return folder / "plan.yaml"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("docx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = render_report(_study(folder), folder / "out", only=SECTIONS,
                               formats=("html", "docx"), strict=True)
    return folder / "out", result


class _Tables(HTMLParser):
    """great-tables tables of an HTML page: per table, the column labels and the body rows
    (row-group headings included) as lists of cell texts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables, self._cell, self._row, self._part, self._kind = [], None, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "gt_table" in (a.get("class") or ""):
            self.tables.append({"labels": [], "rows": []})
        elif not self.tables:
            return
        elif tag in ("thead", "tbody", "tfoot"):
            self._part = tag
        elif tag == "tr" and self._part == "tbody":
            self._row = []
        elif tag in ("td", "th"):
            self._cell, self._kind = [], a.get("class") or ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            cell = " ".join("".join(self._cell).split())
            if self._part == "thead" and "gt_col_heading" in self._kind:
                self.tables[-1]["labels"].append(cell)
            elif self._part == "tbody" and self._row is not None:
                self._row.append(cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1]["rows"].append(self._row)
            self._row = None
        elif tag in ("thead", "tbody", "tfoot"):
            self._part = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _html_tables(out: Path) -> list[dict]:
    p = _Tables()
    p.feed((out / "appendix.html").read_text(encoding="utf-8"))
    return p.tables


def _text(el) -> str:
    """The text of a cell or paragraph element, whitespace runs as one space."""
    return " ".join("".join(t.text or "" for t in el.iter(f"{W}t")).split())


def _images(word) -> list[bytes]:
    return sorted(r.target_part.blob for r in word.part.rels.values() if "image" in r.reltype)


def _docx_tables(doc) -> list[dict]:
    """Per Word table: header rows and body rows as lists of cell texts (a merged cell
    once, as in the HTML). A long table cut into parts (issue 30 item 6: each part after
    the first captioned "Table N (continued)", a group it continues headed "X
    (continued)") is read as one table: its parts' body rows joined, the continued
    group headings left out."""
    out, caption = [], ""
    for el in doc.element.body.iterchildren():
        if el.tag == f"{W}p":
            caption = _text(el) or caption
            continue
        if el.tag != f"{W}tbl":
            continue
        trs = el.findall(f"{W}tr")
        rows = [[_text(tc) for tc in tr.findall(f"{W}tc")] for tr in trs]
        n_head = sum(1 for tr in trs if tr.find(f"{W}trPr/{W}tblHeader") is not None)
        body = rows[n_head:]
        if out and re.match(r"Table \d+ \(continued\)", caption):
            out[-1]["rows"] += [r for r in body
                                if not (len(r) == 1 and r[0].endswith(" (continued)"))]
        else:
            out.append({"head": rows[:n_head], "rows": body})
        caption = ""
    return out


@pytest.fixture(scope="module")
def word(report):
    return docx.Document(str(report[0] / "appendix.docx"))


def test_every_table_is_a_word_table_with_the_html_cells(report, word):
    out, result = report
    html, got = _html_tables(out), _docx_tables(word)
    assert len(got) == len(html) == len(result.tables) >= 8
    for t, h, d in zip(result.tables, html, got):
        assert d["rows"] == h["rows"], t.name
        assert sorted(d["head"][-1]) == sorted(h["labels"]), t.name
        if t.spanners:  # the spanner row above the labels
            assert [lab for _, _, lab in t.spans() if lab] == [c for c in d["head"][0] if c]
    shown = [c for d in got for r in d["rows"] for c in r]
    assert any(c.startswith(SITE) for c in shown) and MODEL in shown


def test_every_figure_is_embedded_at_print_size(report, word):
    out, result = report  # the PNGs under out/figures are the embedded images
    shapes = word.inline_shapes
    assert len(shapes) == len(result.figures) >= 3
    assert _images(word) == sorted((out / "figures" / f"{f.name}.png").read_bytes()
                           for f in result.figures)
    for shape, f in zip(shapes, result.figures):
        assert shape.width.inches == pytest.approx(min(f.width, render.DOCX_TEXT_WIDTH), abs=0.01)
        assert shape.height.inches == pytest.approx(
            shape.width.inches * f.height / f.width, rel=0.02), f.name


def test_pictures_are_described_by_their_caption_not_their_data(report, word):
    """Pandoc writes a picture's source as its description; an embedded figure's source
    is its data: URI (megabytes of base64). Every picture is described by its caption."""
    xml = (zipfile.ZipFile(report[0] / "appendix.docx").read("word/document.xml")
           .decode("utf-8"))
    assert "data:image" not in xml
    pics = word.element.body.findall(f".//{PIC}cNvPr")
    assert len(pics) == len(report[1].figures)
    for pic, f in zip(pics, report[1].figures):
        assert pic.get("descr").startswith("Figure ") and f.caption[:40] in pic.get("descr")


def test_captions_are_numbered_and_cross_references_link(report, word):
    result = report[1]
    paras = [p for p in word.paragraphs]
    table_caps = [p.text for p in paras if p.style.name == "Table Caption"]
    fig_caps = [p.text for p in paras if p.style.name == "Image Caption"]
    assert [c.split(".")[0] for c in table_caps] == [f"Table {i + 1}" for i in range(len(result.tables))]
    assert [c.split(".")[0] for c in fig_caps] == [f"Figure {i + 1}" for i in range(len(result.figures))]
    body = word.element.body
    marks = {b.get(f"{W}name") for b in body.iter(f"{W}bookmarkStart")}
    assert {t.id for t in result.tables} | {f.id for f in result.figures} <= marks
    links = [(h.get(f"{W}anchor"), "".join(t.text or "" for t in h.iter(f"{W}t")))
             for h in body.iter(f"{W}hyperlink")]
    assert links and all(a in marks for a, _ in links), links
    number = {t.id: f"Table {i + 1}" for i, t in enumerate(result.tables)}
    number.update({f.id: f"Figure {i + 1}" for i, f in enumerate(result.figures)})
    assert all(text == number[a] for a, text in links if a in number), links
    assert any(a.startswith("tbl-") for a, _ in links) and any(a.startswith("fig-") for a, _ in links)


def _blocks(word):
    return [el for el in word.element.body.iterchildren() if el.tag in (f"{W}p", f"{W}tbl")]


def _style(p) -> str | None:
    s = p.find(f"{W}pPr/{W}pStyle")
    return None if s is None else s.get(f"{W}val")


def test_notes_sit_right_under_their_table(report, word):
    result = report[1]
    blocks = _blocks(word)
    tables = [i for i, b in enumerate(blocks) if b.tag == f"{W}tbl"]
    for t, i in zip(result.tables, tables):
        after = blocks[i + 1: i + 1 + len(t.notes)]
        assert [_style(p) for p in after] == ["TableNote"] * len(t.notes), t.name
        assert [_text(p) for p in after] == [" ".join(n.split()) for n in t.notes]
        assert _style(blocks[i - 1]) == "TableCaption", t.name


def test_wide_tables_get_a_landscape_page(report, word):
    result = report[1]
    blocks = _blocks(word)
    tables = [i for i, b in enumerate(blocks) if b.tag == f"{W}tbl"]

    def section_after(i):
        for b in blocks[i:]:
            sect = b.find(f"{W}pPr/{W}sectPr")
            if sect is not None:
                return sect.find(f"{W}pgSz").get(f"{W}orient")
        return "final"

    kinds = [section_after(i) for i in tables]
    # issue 30 item 6: only a table that cannot be read upright turns the page (the demo
    # may have none; the reviewer's study's Table 1 does: tests/reports)
    assert not all(t.is_wide for t in result.tables)
    for t, kind in zip(result.tables, kinds):
        assert kind == ("landscape" if t.is_wide else kind) and (t.is_wide or kind != "landscape"), t.name
    final = word.element.body.find(f"{W}sectPr/{W}pgSz")
    assert final.get(f"{W}orient") is None  # the document itself stays portrait


def test_docx_uses_the_reference_styles_and_a_swapped_one(report, tmp_path):
    out, _ = report
    assert (out / "reference.docx").read_bytes() == render.default_reference_docx().read_bytes()
    styles = zipfile.ZipFile(out / "appendix.docx").read("word/styles.xml").decode()
    assert 'w:styleId="TableNote"' in styles and "Arial" in styles
    mine = docx.Document(str(render.default_reference_docx()))
    mine.styles["Normal"].font.name = "Courier New"
    mine.save(str(tmp_path / "mine.docx"))
    plan = _study(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_report(plan, tmp_path / "out", only=("twobytwo",), formats=("docx",),
                      reference_docx=tmp_path / "mine.docx")
    assert (tmp_path / "out" / "reference.docx").read_bytes() == (tmp_path / "mine.docx").read_bytes()
    styles = zipfile.ZipFile(tmp_path / "out" / "appendix.docx").read("word/styles.xml").decode()
    assert "Courier New" in styles


def test_cli_refuses_a_reference_that_is_not_a_docx(tmp_path):
    from typer.testing import CliRunner

    from clinrel.cli import app

    (tmp_path / "bad.docx").write_text("not a zip")
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["report", "--demo", "--out", str(out), "--quiet",
                                    "--reference-docx", str(tmp_path / "bad.docx")])
    assert done.exit_code == 2, done.output
    assert "--reference-docx" in done.output and "not a .docx" in done.output
    assert not out.exists()


# --------------------------------------------------------------------------- hostile strings

def test_hostile_strings_stay_text_in_the_docx(tmp_path):
    from test_escaping import HOSTILE, PNG_1PX, _hostile_doc, visible

    for kind, raw in sorted(HOSTILE.items()):
        folder = tmp_path / kind
        study, sections, build = _hostile_doc(raw, folder)
        (folder / render.REFERENCE_DOCX).write_bytes(render.default_reference_docx().read_bytes())
        md = render.render_markdown(study, sections, "docx")
        render._pandoc_docx(md, folder, build, tables=sections[0].tables)
        word = docx.Document(str(folder / "appendix.docx"))
        want = visible(raw)
        (t,) = _docx_tables(word)
        assert t["head"][0] == ["", want] and sorted(t["head"][-1]) == sorted([want, f"Value {want}"])
        assert t["rows"] == [[want], [want, "0.91"], ["plain"], ["b", want]], kind
        texts = [" ".join(p.text.split()) for p in word.paragraphs]
        assert f"Site {want} and Table 1." in texts, (kind, texts[:6])
        assert f"Note {want}" in texts and f"Figure 1. Figure {want}" in texts
        assert f"Table 1. Caption {want}" in texts
        assert _images(word) == [PNG_1PX]
        body = word.element.body
        rid = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
        assert not [h for h in body.iter(f"{W}hyperlink") if h.get(rid)]  # no external link
        assert [h.get(f"{W}anchor") for h in body.iter(f"{W}hyperlink")] == ["tbl-hostile"]
        rels = zipfile.ZipFile(folder / "appendix.docx").read("word/_rels/document.xml.rels").decode()
        assert 'TargetMode="External"' not in rels and "passwd" not in rels


def _grid_cells(grid: str) -> list[list]:
    """A grid table read back by Pandoc: the inline nodes of every cell, row by row."""
    import json

    import pypandoc

    (table,) = json.loads(pypandoc.convert_text(grid, "json", format="markdown"))["blocks"]
    assert table["t"] == "Table"
    c = table["c"]
    return [[cell[4] for cell in row[1]] for part in (c[3][1], c[4][0][3]) for row in part]


#: the report's own typography: a cell of just an em dash (a missing estimate) read back
#: as a horizontal rule when Pandoc's writer spelled it "---"
_TYPOGRAPHY = st.sampled_from(["\u2014", "\u2013", "\u2026", "\u2014 (0/0)", "a \u2014 b",
                               "0.5 \u2020", "\u2264 0.02", "< 0.001", "n = 3"])


@settings(max_examples=int(os.environ.get("CLINREL_GRID_EXAMPLES", "25")), deadline=None)
@given(st.lists(st.one_of(_STRINGS, _TYPOGRAPHY), min_size=1, max_size=12))
def test_grid_table_cells_read_back_as_the_same_text(strings):
    """Property: a grid table written by Pandoc from ``ReportTable.to_pandoc`` reads back
    (as Quarto and the docx path read it) with every cell plain text equal to the value,
    whatever markdown, HTML, entities or citations it holds."""
    from test_escaping import visible

    from reports.tables import ReportTable

    df = pd.DataFrame({"a": strings, "b": strings[::-1]})
    t = ReportTable(name="p", caption="c", data=df, display=df, labels={"a": strings[0]})
    grid = render.grid_tables([t])[t.id]
    rows = _grid_cells(grid)
    got = []
    for row in rows:
        out = []
        for blocks in row:
            assert [b["t"] for b in blocks] in ([], ["Plain"]), blocks
            inl = blocks[0]["c"] if blocks else []
            assert {n["t"] for n in inl} <= {"Str", "Space", "SoftBreak"}, inl
            out.append("".join(n["c"] if n["t"] == "Str" else " " for n in inl))
        got.append(out)
    want = [[visible(strings[0]), "b"]] + [[visible(a), visible(b)]
                                            for a, b in zip(strings, strings[::-1])]
    assert [[" ".join(c.split()) for c in r] for r in got] == want


def test_docx_pandoc_runs_sandboxed(tmp_path, monkeypatch):
    """The docx writer runs with --sandbox and reads only what its command line names:
    the reference docx; the figures arrive as data: URIs."""
    from test_escaping import _hostile_doc

    import reports.sandbox as sb

    calls = []
    real = sb.subprocess.run

    def spy(args, **kw):
        calls.append(list(args))
        return real(args, **kw)

    monkeypatch.setattr(sb.subprocess, "run", spy)
    study, sections, build = _hostile_doc("x", tmp_path)
    (tmp_path / render.REFERENCE_DOCX).write_bytes(render.default_reference_docx().read_bytes())
    render._pandoc_docx(render.render_markdown(study, sections, "docx"), tmp_path, build)
    (args,) = calls
    assert "--sandbox" in args and "--from=json" in args
    assert [a for a in args if a.startswith("--reference-doc=")] == [
        f"--reference-doc={tmp_path / render.REFERENCE_DOCX}"]
    assert not any("resource-path" in a or "embed" in a for a in args)


def test_reference_docx_script_makes_the_committed_styles(tmp_path):
    """templates/make_reference_docx.py (run to refresh templates/reference.docx) gives
    the styles the report relies on, A4 pages with the PDF's margins, and fixed dates."""
    import importlib.util

    path = Path(render.__file__).resolve().parent.parent / "templates" / "make_reference_docx.py"
    spec = importlib.util.spec_from_file_location("make_reference_docx", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    made = mod.main(tmp_path / "ref.docx")
    for ref in (made, render.default_reference_docx()):
        doc = docx.Document(str(ref))
        names = {s.name for s in doc.styles}
        assert {"Table", "Table Caption", "Image Caption", "Table Note", "Compact"} <= names
        assert doc.styles["Table Caption"].paragraph_format.keep_with_next
        sec = doc.sections[0]
        assert (round(sec.page_width.cm, 1), round(sec.page_height.cm, 1)) == (21.0, 29.7)
        assert round(sec.left_margin.cm, 1) == round(sec.right_margin.cm, 1) == 1.6
        text_width = docx.shared.Emu(sec.page_width - sec.left_margin - sec.right_margin)
        assert round(text_width.inches, 1) == render.DOCX_TEXT_WIDTH
        with zipfile.ZipFile(ref) as z:
            assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}


# --------------------------------------------------------------------------- tables in the PDF

def _pdf_pages(sections, folder: Path) -> list[str]:
    from types import SimpleNamespace

    from pypdf import PdfReader

    notes: list[str] = []
    study = SimpleNamespace(plan=SimpleNamespace(title="Layout", path=Path("plan.yaml")),
                            notes=notes, note=notes.append)
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    build = folder / "build"
    build.mkdir(exist_ok=True)
    render._pandoc_pdf(render.render_markdown(study, sections, "typst"), folder, build)
    return [" ".join((p.extract_text() or "").split())
            for p in PdfReader(str(folder / "appendix.pdf")).pages]


def test_pdf_tables_keep_short_tables_whole_and_repeat_long_headers(tmp_path):
    """Item 5 (PDF): a two-row table pushed to a page end moves whole, with its caption and
    notes; a long table breaks with its header repeated on every page and its notes after
    its last row; a wide table gets a landscape page."""
    from reports.sections import Section
    from reports.tables import ReportTable

    filler = " ".join(["Filler sentence to fill the page."] * 12)
    short = pd.DataFrame({"level": ["shortrow1", "shortrow2"], "v": ["0.10", "0.20"]})
    long = pd.DataFrame({"level": [f"longrow{i}" for i in range(150)], "v": ["0.5"] * 150})
    # 12 interval columns: too wide for a portrait page even at 6.5 pt with intervals
    # wrapped (issue 30 item 6: 7 such columns now fit upright)
    wide = pd.DataFrame({f"c{i}": ["0.91 [0.88, 0.93] (123/456)"] for i in range(12)})
    tables = [ReportTable(name="short", caption="Short table.", data=short, display=short,
                          labels={"level": "Levelhead", "v": "Valuehead"},
                          notes=("Shortnote under the table.",)),
              ReportTable(name="long", caption="Long table.", data=long, display=long,
                          labels={"level": "Longlevel", "v": "Longvalue"},
                          notes=("Longnote under the table.",)),
              ReportTable(name="wide", caption="Wide table.", data=wide, display=wide)]
    assert [t.keep for t in tables] == [True, False, True]
    assert [t.is_wide for t in tables] == [False, False, True]
    landed = set()
    for n in range(9, 15):  # as the text above grows, the table meets the page end
        sec = Section("methods", "Methods")
        for _ in range(n):
            sec.add(filler)
        pages = _pdf_pages([sec.add(tables[0])], tmp_path / f"short{n}")
        where = {piece: [i for i, p in enumerate(pages) if piece in p]
                 for piece in ("Short table.", "Levelhead", "shortrow1", "shortrow2",
                               "Shortnote under the table.")}
        assert len({tuple(v) for v in where.values()}) == 1, (n, where)  # one page
        landed.add(where["shortrow1"][0])
    assert len(landed) == 2  # the page end was crossed: the table moved whole
    sec = Section("methods", "Methods").add(filler, *tables)
    pages = _pdf_pages([sec], tmp_path / "all")
    long_pages = [i for i, p in enumerate(pages) if "longrow" in p]
    assert len(long_pages) >= 2
    assert all("Longlevel" in pages[i] and "Longvalue" in pages[i] for i in long_pages)
    # issue 30 item 6: the pages after the first say "(continued)"; the notes are printed
    # once, after the last row (not under every page)
    assert all("(continued)" in pages[i] for i in long_pages[1:])
    assert sum(p.count("Longnote under the table.") for p in pages) == 1
    last = pages[long_pages[-1]]
    assert "longrow149" in last and last.index("longrow149") < last.index("Longnote")
    from pypdf import PdfReader

    reader = PdfReader(str(tmp_path / "all" / "appendix.pdf"))
    (wide_page,) = [i for i, p in enumerate(pages) if "Wide table." in p]
    box = reader.pages[wide_page].mediabox
    assert box.width > box.height  # landscape
    assert reader.pages[0].mediabox.width < reader.pages[0].mediabox.height


def test_interleaved_row_groups_show_the_same_rows_everywhere(tmp_path):
    """great-tables gathers a group's rows under one heading (first appearance order);
    the docx and typst tables do the same, so every format shows the same rows."""
    from types import SimpleNamespace

    from reports.sections import Section
    from reports.tables import ReportTable

    df = pd.DataFrame({"model": ["a", "b", "a", "b"], "axis": ["x", "x", "y", "y"],
                       "v": ["1", "2", "3", "4"]})
    t = ReportTable(name="groups", caption="Groups.", data=df, display=df, group_col="model")
    assert [v for _, v in t.body()] == ["a", ["x", "1"], ["y", "3"], "b", ["x", "2"], ["y", "4"]]
    notes: list[str] = []
    study = SimpleNamespace(plan=SimpleNamespace(title="G", path=Path("plan.yaml")),
                            notes=notes, note=notes.append)
    sections = [Section("methods", "Methods").add("Text.", t)]
    build = tmp_path / "build"
    build.mkdir()
    (tmp_path / "figures").mkdir()
    (tmp_path / render.REFERENCE_DOCX).write_bytes(render.default_reference_docx().read_bytes())
    render._pandoc_html(render.render_markdown(study, sections, "html"), tmp_path, build)
    render._pandoc_docx(render.render_markdown(study, sections, "docx"), tmp_path, build,
                        tables=[t])
    (h,), (d,) = _html_tables(tmp_path), _docx_tables(docx.Document(str(tmp_path / "appendix.docx")))
    assert d["rows"] == h["rows"] == [["a"], ["x", "1"], ["y", "3"], ["b"], ["x", "2"], ["y", "4"]]
    assert "#table(" in t.to_typst() and t.to_typst().count('text(style: "italic"') == 2


# --------------------------------------------------------------------------- tables in Word

def _on(el, path: str) -> bool:
    return el.find(path) is not None


def _keeps_next(tr) -> bool:
    """Every paragraph of the row keeps with the next (``<w:keepNext/>``)."""
    return all(_on(p, f"{W}pPr/{W}keepNext") for p in tr.iter(f"{W}p"))


def _check_table_layout(tbl, table, fits: bool = True) -> None:
    """The Word keep and split properties of one table (``reports.docx_layout``);
    ``fits``: whether it fits on its page with its caption (``docx_layout.fits_page``)."""
    from reports.docx_layout import is_header, table_notes

    rows = tbl.findall(f"{W}tr")
    head = [tr for tr in rows if is_header(tr)]
    body = [tr for tr in rows if not is_header(tr)]
    assert rows[:len(head)] == head and len(head) == 1 + bool(table.spanners), table.name
    assert len(body) == table.n_rows, table.name  # the PDF's count: groups included
    assert all(_on(tr, f"{W}trPr/{W}cantSplit") for tr in rows), table.name
    assert all(_keeps_next(tr) for tr in head), table.name  # header never ends a page
    notes = table_notes(tbl)
    assert len(notes) == len(table.notes), table.name
    last = body[-1] if body else head[-1]   # an empty table (no collapse): its header
    assert _keeps_next(last) == bool(notes), table.name  # the notes follow the table
    chained = [_on(p, f"{W}pPr/{W}keepNext") for p in notes]
    assert chained == [True] * len(notes[1:]) + [False] * bool(notes), table.name
    from reports.docx_layout import _label_row

    inside = [_keeps_next(tr) for tr in body[:-1]]
    # short and fitting its page: whole; long, or too tall for a page: breaks between rows,
    # but never after a row-group label
    assert inside == [(table.keep and fits) or _label_row(tr) for tr in body[:-1]], table.name


def test_short_tables_never_split_and_notes_stay_with_their_table(report, word):
    """Every row of every table is kept on one page (cantSplit); a table of at most
    KEEP_ROWS printed rows keeps every row with the next, its last row with its first
    note (when it has notes) and each note with the next; the caption keeps with the
    table (its style), which it precedes."""
    from reports.docx_layout import _sections, fits_page

    result = report[1]
    tables = word.element.body.findall(f"{W}tbl")
    assert len(tables) == len(result.tables)
    assert any(t.keep and t.notes for t in result.tables)
    sections = _sections(word.element.body)
    for tbl, t in zip(tables, result.tables):
        _check_table_layout(tbl, t, fits_page(tbl, sections[tbl]))
        cap = tbl.getprevious()
        while cap.tag != f"{W}p":
            cap = cap.getprevious()
        assert _style(cap) == "TableCaption", t.name
    assert word.styles["Table Caption"].paragraph_format.keep_with_next


def test_long_tables_repeat_their_header_and_the_layout_is_deterministic(tmp_path):
    """A table of more than KEEP_ROWS rows may break between rows, its header rows
    repeated on every page (``tblHeader``) and kept with the first body row; a short
    table without notes does not keep its last row with what follows; the docx is
    byte-identical when rendered twice, its zip entries dated 1980-01-01."""
    from types import SimpleNamespace

    from reports.sections import Section
    from reports.tables import KEEP_ROWS, ReportTable

    long = pd.DataFrame({"level": [f"row{i}" for i in range(KEEP_ROWS + 15)],
                         "v": ["0.50"] * (KEEP_ROWS + 15)})
    short = long.head(3)
    tables = [ReportTable(name="long", caption="Long.", data=long, display=long,
                          spanners=(("Estimate", ["v"]),), notes=("Note one.", "Note two.")),
              ReportTable(name="bare", caption="Bare.", data=short, display=short),
              ReportTable(name="edge", caption="Edge.", data=long, notes=("Only note.",),
                          display=long.head(KEEP_ROWS))]
    assert [t.keep for t in tables] == [False, True, True]
    notes: list[str] = []
    study = SimpleNamespace(plan=SimpleNamespace(title="L", path=Path("plan.yaml")),
                            notes=notes, note=notes.append)
    sections = [Section("methods", "Methods").add("Text.", *tables, "After.")]
    written = []
    for run in ("a", "b"):
        folder = tmp_path / run
        (folder / "figures").mkdir(parents=True)
        (folder / "build").mkdir()
        ref = render.default_reference_docx()
        (folder / render.REFERENCE_DOCX).write_bytes(ref.read_bytes())
        render._pandoc_docx(render.render_markdown(study, sections, "docx"), folder,
                            folder / "build", tables=tables)
        written.append((folder / "appendix.docx").read_bytes())
    assert written[0] == written[1]
    with zipfile.ZipFile(tmp_path / "a" / "appendix.docx") as z:
        assert {i.date_time for i in z.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert z.namelist()[:3] == ["[Content_Types].xml", "_rels/.rels", "word/document.xml"]
    doc = docx.Document(str(tmp_path / "a" / "appendix.docx"))
    from reports.docx_layout import is_header, table_notes

    tbls = iter(doc.element.body.findall(f"{W}tbl"))
    for t in tables:
        # issue 30 item 6: a long table is cut into parts of at most KEEP_ROWS body rows,
        # each with the header rows; its notes once, after the last part
        parts, n = [], 0
        while n < t.n_rows or not parts:
            parts.append(next(tbls))
            n += sum(not is_header(tr) for tr in parts[-1].findall(f"{W}tr"))
        assert n == t.n_rows, t.name
        if len(parts) == 1:
            _check_table_layout(parts[0], t)
            continue
        assert not t.keep and t.n_rows > KEEP_ROWS, t.name
        for part in parts:
            rows = part.findall(f"{W}tr")
            head = [tr for tr in rows if is_header(tr)]
            assert rows[:len(head)] == head and len(head) == 1 + bool(t.spanners), t.name
            assert len(rows) - len(head) <= KEEP_ROWS, t.name
            assert all(_on(tr, f"{W}trPr/{W}cantSplit") for tr in rows), t.name
        assert [len(table_notes(part)) for part in parts] == \
            [0] * (len(parts) - 1) + [len(t.notes)], t.name
    assert next(tbls, None) is None


def test_a_table_too_tall_for_its_page_is_not_kept_whole():
    """A table of at most KEEP_ROWS rows whose wrapped cells make it taller than a page
    (Table 1 by site on a landscape page: its caption was left alone on a page before the
    table) may break between rows; the same rows on one line each are kept whole."""
    from lxml import etree

    from reports.docx_layout import W, _sections, fits_page, layout_tables

    def doc(text: str, rows: int, orient: bool = True) -> etree._Element:
        ns = W[1:-1]
        cells = "".join(f'<w:tc><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:tc>' for _ in range(12))
        grid = "".join('<w:gridCol w:w="600"/>' for _ in range(12))
        page = ('<w:pgSz w:w="16838" w:h="11906" w:orient="landscape"/>' if orient
                else '<w:pgSz w:w="11906" w:h="16838"/>')
        xml = (f'<w:body xmlns:w="{ns}"><w:tbl><w:tblGrid>{grid}</w:tblGrid>'
               + f"<w:tr>{cells}</w:tr>" * rows + '</w:tbl><w:p/>'
               f'<w:sectPr>{page}<w:pgMar w:top="1020" w:bottom="1020" w:left="907" '
               'w:right="907"/></w:sectPr></w:body>')
        return etree.fromstring(xml)

    short, wrapped = doc("12 (5%)", 25), doc("244 (49%) of the scans, wrapped", 25)
    assert fits_page(short[0], _sections(short)[short[0]])
    assert not fits_page(wrapped[0], _sections(wrapped)[wrapped[0]])
    for body, kept in ((short, True), (wrapped, False)):
        layout_tables(body, keep_rows=25)
        inner = body[0].findall(f"{W}tr")[:-1]
        assert all((tr.find(f"{W}tc/{W}p/{W}pPr/{W}keepNext") is not None) == kept
                   for tr in inner)
    # a row-group label (text in the first cell only) of a table that breaks keeps with
    # its first row; an ordinary row does not
    labelled = doc("244 (49%) of the scans, wrapped", 25)
    label = labelled[0].findall(f"{W}tr")[3]
    for tc in label.findall(f"{W}tc")[1:]:
        for t_ in tc.iter(f"{W}t"):
            t_.text = ""
    layout_tables(labelled, keep_rows=25)
    keeps = [tr.find(f"{W}tc/{W}p/{W}pPr/{W}keepNext") is not None
             for tr in labelled[0].findall(f"{W}tr")[:-1]]
    assert keeps[3] and sum(keeps) == 1
