"""Render a study into an appendix folder.

``render_report(plan, out)`` writes, atomically (a temporary sibling folder moved into
place only on success)::

    out/appendix.qmd      Quarto markdown (cross-references @tbl-/@fig-/@sec-)
    out/_quarto.yml       so that `quarto render appendix.qmd` works in the folder
    out/appendix.html     self-contained (pandoc --embed-resources, or quarto)
    out/appendix.pdf      pandoc -> typst markup -> typst.compile (or quarto), no LaTeX
    out/appendix.docx     pandoc's Word writer with out/reference.docx (styles; swap it
                          with ``reference_docx=`` / ``clinrel report --reference-docx``)
    out/reference.docx    the Word style reference the .docx (and Quarto's docx) uses
    out/tables/*.csv      every number shown, full precision (figures: tables/fig_*.csv)
    out/figures/*.png|svg PNG for HTML, SVG for the PDF
    out/manifest.json     versions, input sha256, plan hash, seeds, git revision, times

The four markdown variants come from one Jinja template (``templates/appendix.qmd.j2``)
with ``target`` = quarto | html | typst | docx: Quarto resolves cross-references itself;
for pandoc the HTML and docx variants write "Table N" links and the typst variant lets
typst number figures and resolve ``@labels``. Tables in the .qmd and the docx are Pandoc
grid tables that Pandoc writes from each table's AST (``ReportTable.to_pandoc``), so the
.qmd has one table source Quarto renders to HTML, PDF and Word, and holds no raw block.

Determinism: every file is byte-identical across runs for the same inputs, seeds and
software: the PDF's dates are ``SOURCE_DATE_EPOCH`` (default 1980-01-01) and it uses
typst's own fonts only; the docx's are fixed (Pandoc in ``--sandbox`` reads no clock: core
properties 1970-01-01, zip entries 1980-01-01); the
exceptions are ``created_utc`` and ``timings_s`` in ``manifest.json``.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from analysis import Plan, load_plan
from analysis.inputs import plan_limits
from reports.outputs import named

from . import sandbox, text
from ._fork import run_tasks
from .figures import ReportFigure, save_figures
from .sections import Section, build_all
from .study import load_study
from .tables import ReportTable

log = logging.getLogger("clinrel.report")

#: 1980-01-01T00:00:00Z: the date stamped into the PDF unless the
#: environment sets SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/)
DEFAULT_EPOCH = 315532800
REFERENCE_DOCX = "reference.docx"
MSG_REFERENCE_DOCX = ("--reference-docx {path}: {why}; give a Word .docx file (start from "
                      "templates/reference.docx, change its styles in Word, save it)")

_REF = re.compile(r"(?<!\\)@((tbl|fig|sec)-[A-Za-z0-9_-]*[A-Za-z0-9])")


@dataclass
class RenderResult:
    out: Path
    sections: list
    tables: list
    figures: list
    skipped: list
    seconds: float
    renderer: str


def _template_text(name: str) -> str:
    return resources.files("templates").joinpath(name).read_text(encoding="utf-8")


def _yaml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid YAML flow scalar


def _attr(s: str) -> str:
    return text.md_attr(s)


def dangling_refs(sections: list[Section], index: dict) -> list[str]:
    """Cross-references in the sections' markdown that name no table, figure or section."""
    found = [m.group(1) for s in sections for b in s.blocks if isinstance(b, str)
             for m in _REF.finditer(b)]
    return sorted({f for f in found if f not in index})


def _refs(md: str, target: str, index: dict) -> str:
    def sub(m):
        ident, kind = m.group(1), m.group(2)
        if ident not in index:
            return m.group(0).replace("@", "\\@")
        if target == "quarto":
            return m.group(0)
        number, title = index[ident]
        if target in ("html", "docx"):
            label = {"tbl": f"Table {number}", "fig": f"Figure {number}"}.get(kind, title)
            return f"[{label}](#{ident})"
        return f"`@{ident}`{{=typst}}"

    return _REF.sub(sub, md)


def _blocks(sections: list[Section], target: str, index: dict, numbers: dict,
            grids: dict, parts: dict | None = None) -> list[dict]:
    """Template blocks: every string escaped for where it goes (``reports.text``), ids and
    file names checked (``sandbox.check_name``), and each raw block's ``fence`` longer
    than any backtick run in it; ``grids``: table id -> grid table (quarto, docx);
    ``parts``: table id -> ``[(part id, grid)]`` for a long table cut into parts (docx:
    ``ReportTable.parts``, each after the first captioned "(continued)")."""
    parts = parts or {}
    out = []
    for s in sections:
        blocks = []
        for b in s.blocks:
            if isinstance(b, str):
                blocks.append({"kind": "md", "text": _refs(b, target, index)})
            elif isinstance(b, ReportTable):
                sandbox.check_name("table", b.name)
                d = {"kind": "table", "id": sandbox.check_name("table id", b.id),
                     "number": numbers[b.id],
                     # each target writes one form of a table (the .qmd and the docx:
                     # the grid table), so only that form is rendered
                     "html": b.to_html() if target == "html" else "",
                     "typst": b.to_typst() if target == "typst" else "",
                     "caption_md": text.md(b.caption),
                     "grid": grids.get(b.id, ""), "notes_md": [text.md(n) for n in b.notes],
                     "caption_typst": text.typst_str(b.caption), "wide": b.is_wide,
                     "keep": b.keep,
                     "parts": [{"id": sandbox.check_name("table id", pid), "grid": g}
                               for pid, g in parts.get(b.id, [])]}
                blocks.append(d | {"fence": text.fence(d["html"], d["typst"], d["caption_typst"])})
            elif isinstance(b, ReportFigure):
                d = {"kind": "figure", "id": sandbox.check_name("figure id", b.id),
                     "number": numbers[b.id], "name": sandbox.check_name("figure", b.name),
                     "caption_md": text.md(b.caption),
                     "caption_typst": text.typst_str(b.caption),
                     "alt_attr": _attr(b.alt), "alt_typst": text.typst_str(b.alt),
                     "width_pct": min(100, int(round(100 * b.width / 7.5))),
                     "width_in": f"{min(b.width, DOCX_TEXT_WIDTH):.2f}"}
                blocks.append(d | {"fence": text.fence(d["caption_typst"], d["alt_typst"])})
            else:
                raise TypeError(f"section {s.key}: unknown block {type(b).__name__}")
        out.append({"id": sandbox.check_name("section id", s.id), "title_md": text.md(s.title),
                    "blocks": blocks})
    flat = [b for s in out for b in s["blocks"]]
    for i, b in enumerate(flat):  # runs of adjacent wide tables share one landscape part
        if b["kind"] == "table":
            wide = b["wide"]
            b["landscape_open"] = wide and not (i and flat[i - 1].get("wide"))
            b["landscape_close"] = wide and not (i + 1 < len(flat) and flat[i + 1].get("wide"))
    for s in out:
        # a section whose first table turns the page and that has only text before it
        # turns the page at its heading: heading, text and table share the landscape
        # page instead of leaving the heading and a few lines alone on a portrait one
        first = next((i for i, b in enumerate(s["blocks"]) if b["kind"] != "md"), None)
        s["landscape_open"] = bool(first is not None and s["blocks"][first]["kind"] == "table"
                                   and s["blocks"][first]["landscape_open"])
        if s["landscape_open"]:
            s["blocks"][first]["landscape_open"] = False
    return out


#: text width of templates/reference.docx (A4, 1.6 cm margins), inches
DOCX_TEXT_WIDTH = 7.0
_TABLE_END = "CLINREL-TABLE-END"


def grid_tables(tables: list[ReportTable]) -> dict[str, str]:
    """Table id -> the table as a Pandoc grid table at its natural width (columns as wide
    as their cells, ``ReportTable.char_widths``), written by Pandoc from
    ``ReportTable.to_pandoc`` (one Pandoc call for all tables; Pandoc escapes every cell)."""
    import pypandoc

    if not tables:
        return {}
    columns = max(72, *(sum(w + 3 for w in t.char_widths()) + 1 for t in tables))
    end = {"t": "Para", "c": [{"t": "Str", "c": _TABLE_END}]}
    doc = {"pandoc-api-version": sandbox.api_version(), "meta": {},
           "blocks": [b for t in tables for b in (t.to_pandoc(columns), end)]}
    md = pypandoc.convert_text(json.dumps(doc), "markdown-simple_tables-multiline_tables-pipe_tables",
                               format="json", extra_args=[*sandbox.SANDBOX_ARGS,
                                                          f"--columns={columns}"])
    parts = [p.strip("\n") for p in re.split(rf"^{_TABLE_END}$", md, flags=re.M)][:len(tables)]
    if len(parts) != len(tables) or not all(p.startswith("+") for p in parts):
        raise RuntimeError("pandoc did not write one grid table per report table")
    return {t.id: p for t, p in zip(tables, parts)}


def _part_grids(parts: list[ReportTable]) -> list[str]:
    """The grid tables of ``parts`` (:meth:`ReportTable.parts`), in order (their ids
    repeat the table's for the first part, so they are not keyed by id)."""
    import dataclasses

    named = [dataclasses.replace(p, name=f"{p.name}-grid-{k}") for k, p in enumerate(parts)]
    grids = grid_tables(named)
    return [grids[p.id] for p in named]


def cross_references(study, sections: list[Section]) -> tuple[dict, dict]:
    """Numbers of tables and figures and the index of referable ids; a cross-reference
    that names nothing is noted in ``study`` (once: every document shares the note)."""
    tables = [t for s in sections for t in s.tables]
    figures = [b for s in sections for b in s.figures]
    numbers = {t.id: i + 1 for i, t in enumerate(tables)}
    numbers.update({f.id: i + 1 for i, f in enumerate(figures)})
    index = {k: (v, "") for k, v in numbers.items()}
    index.update({s.id: (i + 1, s.title) for i, s in enumerate(sections)})
    for ident in dangling_refs(sections, index):
        msg = f"cross-reference @{ident} names nothing in this report; written as text"
        if msg not in study.notes:
            study.note(msg)
    return numbers, index


def render_markdown(study, sections: list[Section], target: str = "quarto",
                    grids: dict | None = None, reference: Path | None = None) -> str:
    """The appendix as markdown for ``target`` (quarto | html | typst | docx); ``grids``
    (from :func:`grid_tables`) is made here when a quarto or docx target needs it;
    ``reference``: the docx style reference whose page a wide table turns (docx)."""
    import jinja2

    tables = [b for s in sections for b in s.tables]
    if grids is None and target in ("quarto", "docx"):
        grids = grid_tables(tables)
    parts = {}
    if target == "docx":   # Word cannot say "(continued)": long tables go in parts
        cut = {t.id: t.parts() for t in tables}
        cut = {k: v for k, v in cut.items() if len(v) > 1}
        flat = [p for ps in cut.values() for p in ps]
        made = _part_grids(flat) if flat else []
        it = iter(made)
        parts = {k: [(p.id, next(it)) for p in ps] for k, ps in cut.items()}
    numbers, index = cross_references(study, sections)
    plan = study.plan
    lead = (f"This appendix was generated by clinrel from the analysis plan "
            f"{text.md(plan.path.name)}. Every number shown is "
            f"also in the CSV files under tables/ (the tables and figures) or results/ (every "
            f"analysis, e.g. the heterogeneity tests under the subgroup tables), at full "
            f"precision; manifest.json records "
            f"the software versions, input hashes and seeds.")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False, comment_start_string="{##",
                             comment_end_string="##}")
    tpl = env.from_string(_template_text("appendix.qmd.j2"))
    portrait, landscape = docx_section_breaks(reference or default_reference_docx()) \
        if target == "docx" else ("", "")
    md = tpl.render(target=target, portrait_xml=portrait, landscape_xml=landscape,
                    title_yaml=_yaml_str(text.md(plan.title)),
                    subtitle_yaml=_yaml_str("Reliability evidence appendix"),
                    lead=lead, sections=_blocks(sections, target, index, numbers, grids or {},
                                                parts))
    return re.sub(r"\n{3,}", "\n\n", md).rstrip() + "\n"


def _check_unique(tables, figures) -> None:
    seen: set[str] = set()
    for item in [*tables, *figures]:
        if item.id in seen:
            raise RuntimeError(f"two report items share the id {item.id}; rename one")
        seen.add(item.id)


def _pandoc_html(md: str, folder: Path, build: Path) -> None:
    """Self-contained HTML: pandoc in ``--sandbox`` (it reads only the style header named
    on its command line; resource path: the empty build folder), the figures embedded as
    ``data:`` URIs from ``folder/figures`` by ``sandbox.embed_figures`` (the only images
    and links allowed), the result checked to refer to nothing outside itself."""
    import pypandoc

    header = build / "style.html"
    with named(header):
        header.write_text("<style>\n" + _template_text("appendix.css") + "</style>\n",
                          encoding="utf-8")
    ast = sandbox.embed_figures(sandbox.to_ast(md, build), folder)
    html = pypandoc.convert_text(
        json.dumps(ast), "html5", format="json",
        extra_args=[*sandbox.SANDBOX_ARGS, "--standalone", "--wrap=none", "--toc",
                    "--toc-depth=2", "--number-sections", f"--include-in-header={header}",
                    f"--resource-path={build}", "--metadata=lang:en"],
        cworkdir=str(build))
    sandbox.check_html(html)
    with named(folder / "appendix.html"):
        (folder / "appendix.html").write_text(html, encoding="utf-8")


def _pandoc_pdf(md: str, folder: Path, build: Path, epoch: int = DEFAULT_EPOCH) -> None:
    """PDF through pandoc -> typst markup -> typst, with typst's own fonts only (never
    the machine's) and ``epoch`` as the creation date: the same bytes on every machine."""
    import pypandoc
    import typst

    typ = pypandoc.convert_text(md, "typst", format="markdown",
                                extra_args=[*sandbox.SANDBOX_ARGS, "--standalone", "--toc",
                                            "--wrap=none", f"--resource-path={build}"],
                                cworkdir=str(build))
    sandbox.check_typst(typ)  # no package import: typst would fetch it from the network
    src = folder / ".appendix.typ"
    with named(src):
        src.write_text(typ, encoding="utf-8")
    try:
        try:
            typst.compile(str(src), output=str(folder / "appendix.pdf"), root=str(folder),
                          ignore_system_fonts=True, timestamp=epoch)
        except Exception as exc:   # typst's OSError names no errno: "(os error 28)"
            sandbox._raise_no_space(str(exc), folder / "appendix.pdf")
            raise
    finally:
        with contextlib.suppress(OSError):   # a copy for debugging, in the build folder
            shutil.copyfile(src, build / "appendix.typ")
        src.unlink()


def _pandoc_docx(md: str, folder: Path, build: Path, tables: list[ReportTable] = ()) -> None:
    """Word: pandoc's docx writer in ``--sandbox`` with ``folder/reference.docx`` (named
    on the command line) and the figures embedded as ``data:`` URIs from
    ``folder/figures`` (``sandbox.embed_figures``); fixed dates (the sandbox reads no
    clock: core properties 1970-01-01, zip entries 1980-01-01). Each table is
    set at the full text width, its columns as wide as their text
    (``ReportTable.rel_widths``: the grid's own widths count escapes)."""
    ast = sandbox.embed_figures(sandbox.to_ast(md, build), folder)
    sandbox.set_table_widths(ast, {p.id: t.rel_widths(160 if t.is_wide else 110)
                                   for t in tables for p in t.parts()})
    sandbox.write_file(ast, "docx", folder / "appendix.docx", cwd=build,
                       extra_args=[f"--reference-doc={folder / REFERENCE_DOCX}",
                                   "--number-sections"])
    from .docx_layout import keep_tables_together  # tables kept whole, notes with them
    keep_tables_together(folder / "appendix.docx")


#: relative cost of each document task (the order they are handed out: longest first)
_DOC_COST = {"docx": 4, "html": 2, "pdf": 2, "qmd": 1}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return round(time.perf_counter() - t, 3)


def default_jobs() -> int:
    """The CPUs this process may use (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` from the environment, else ``DEFAULT_EPOCH``; a value that is
    not a whole number of seconds from 0 to year 9999 raises ``ValueError`` naming the
    variable and the fix (``reports._env.MSG_SOURCE_DATE_EPOCH``)."""
    from reports._env import source_date_epoch as read

    return read(DEFAULT_EPOCH)


def default_reference_docx() -> Path:
    return Path(str(resources.files("templates").joinpath(REFERENCE_DOCX)))


_PG_ATTR = re.compile(r'w:(w|h|left|right|top|bottom|header|footer|gutter)="(\d+)"')


def docx_section_breaks(reference: Path) -> tuple[str, str]:
    """Raw OpenXML paragraphs that end a portrait and a landscape section, with the page
    size and margins of ``reference`` (turned for landscape): a wide table sits between
    them. Only numbers read from the reference go into the XML."""
    import zipfile

    with zipfile.ZipFile(reference) as z:
        doc = z.read("word/document.xml").decode("utf-8", errors="replace")
    sect = doc[doc.rfind("<w:sectPr"):]
    size = dict(_PG_ATTR.findall(re.search(r"<w:pgSz[^>]*>", sect).group(0))) \
        if "<w:pgSz" in sect else {"w": "11906", "h": "16838"}
    mar = dict(_PG_ATTR.findall(re.search(r"<w:pgMar[^>]*>", sect).group(0))) \
        if "<w:pgMar" in sect else {}
    w, h = sorted((int(size.get("w", 11906)), int(size.get("h", 16838))))
    m = " ".join(f'w:{k}="{v}"' for k, v in mar.items())

    def brk(pg: str) -> str:
        return f"<w:p><w:pPr><w:sectPr>{pg}<w:pgMar {m}/></w:sectPr></w:pPr></w:p>"

    return (brk(f'<w:pgSz w:w="{w}" w:h="{h}"/>'),
            brk(f'<w:pgSz w:w="{h}" w:h="{w}" w:orient="landscape"/>'))


def check_reference_docx(path: str | Path) -> Path:
    """``path`` if it is a Word document pandoc can take styles from, else ``ValueError``
    (``MSG_REFERENCE_DOCX``)."""
    import zipfile

    path = Path(path)
    why = None
    if not path.is_file():
        why = "no such file"
    else:
        try:
            with zipfile.ZipFile(path) as z:
                names = set(z.namelist())
                missing = [n for n in ("word/document.xml", "word/styles.xml")
                           if n not in names]
                if missing:
                    why = f"it holds no {' or '.join(missing)}"
                else:   # the page size and margins are read from it (docx_section_breaks)
                    z.read("word/document.xml").decode("utf-8")
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError, RuntimeError) as exc:
            why = f"not a .docx (zip) file, or not readable ({exc})"
    if why:
        raise ValueError(MSG_REFERENCE_DOCX.format(path=path, why=why))
    return path


def _quarto(folder: Path, formats) -> None:
    for fmt in [{"pdf": "typst"}.get(f, f) for f in formats]:
        subprocess.run(["quarto", "render", "appendix.qmd", "--to", fmt], cwd=folder, check=True,
                       capture_output=True, timeout=600)


def render_report(plan: Plan | str | Path, out: str | Path, *, quiet: bool = True,
                  formats: tuple[str, ...] = ("html", "pdf", "docx"), only=None,
                  draw: bool = True, strict: bool = False, force: bool = False,
                  reference_docx: str | Path | None = None,
                  jobs: int | None = None) -> RenderResult:
    """Load the study of ``plan``, build every applicable section and write ``out``.

    ``formats`` selects the rendered documents (``html``, ``pdf``, ``docx``); the .qmd,
    tables and manifest are always written. ``reference_docx``: a Word document whose
    styles (fonts, headings, table style, captions, page size and margins) the .docx
    takes, copied to ``out/reference.docx`` (default ``templates/reference.docx``). ``only`` restricts the sections (keys). ``draw=False``
    skips drawing the figure images (their tables are still written; for tests).
    ``strict``: a section that raises an unexpected error fails the whole render (nothing
    is written) instead of being left out and named in the methods, CLI output and
    manifest.
    ``jobs``: processes that run the analyses (the adjusted models beside the rest), draw
    the figures and render the documents (default
    :func:`default_jobs`: the CPUs this process may use); every output file is the same
    bytes whatever ``jobs`` is.
    ``out`` must be a new or empty folder, or (with ``force``) an earlier clinrel report
    that holds no input of the plan; anything else raises ``OutputError`` before any work
    (rules: ``reports.outputs``).
    """
    if not draw and formats:
        raise ValueError("draw=False writes no figure images, so it needs formats=()")
    from reports.csvsafe import write_csv
    from reports.progress import progress
    from reports.outputs import atomic_dir, build_dir, check_out_dir

    t0 = time.perf_counter()
    jobs = default_jobs() if jobs is None else max(1, int(jobs))
    plan = plan if isinstance(plan, Plan) else load_plan(plan)
    reference = check_reference_docx(reference_docx or default_reference_docx())
    inputs = [plan.path, *plan.inputs.values(), *([reference] if reference_docx else [])]
    check_out_dir(out, force=force, inputs=inputs)
    epoch = source_date_epoch()
    timings: dict[str, float] = {}
    with plan_limits(plan):
        study = load_study(plan, jobs=jobs)
    timings["load"] = round(time.perf_counter() - t0, 3)
    timings["analyses"] = dict(study.results.timings)
    out = Path(out)
    renderer = "quarto" if shutil.which("quarto") else "pandoc+typst"
    with progress("building sections", total=15, quiet=quiet) as advance, plan_limits(plan):
        sections = build_all(study, only=only, advance=advance, strict=strict)
    timings["sections"] = dict(getattr(study, "timings", {}))
    tables = [t for s in sections for t in s.tables]
    figures = [f for s in sections for f in s.figures]
    _check_unique(tables, figures)
    with atomic_dir(out, force=force, inputs=inputs, command="report") as tmp, \
            build_dir() as build:
        tmp.chmod(0o755)
        (tmp / "tables").mkdir()
        (tmp / "figures").mkdir()
        t1 = time.perf_counter()
        csvs = [(t.data, tmp / "tables" / f"{t.name}.csv") for t in tables]
        csvs += [(df, tmp / "results" / f"{name}.csv")
                 for name, df in study.results.tidy_tables().items()]
        csvs += [(f.data, tmp / "tables" / f"fig_{f.name}.csv") for f in figures]
        (tmp / "results").mkdir()
        for df, path in csvs:
            with named(path):
                write_csv(df, path, lineterminator="\n")
        if draw:
            with progress("drawing figures", total=len(figures), quiet=quiet) as advance:
                save_figures(figures, tmp / "figures", jobs=jobs, advance=advance)
        timings["tables_figures"] = round(time.perf_counter() - t1, 3)
        grids = grid_tables(tables)
        (tmp / "_quarto.yml").write_text(_template_text("_quarto.yml"), encoding="utf-8")
        shutil.copyfile(reference, tmp / REFERENCE_DOCX)
        if renderer == "quarto":
            (tmp / "appendix.qmd").write_text(render_markdown(study, sections, "quarto", grids),
                                              encoding="utf-8")
            try:
                _quarto(tmp, formats)
            except (subprocess.SubprocessError, OSError) as exc:
                study.note(f"quarto render failed ({exc}); rendered with pandoc and typst instead")
                renderer = "pandoc+typst"
        # the .qmd and each document from the same sections, each its own task (its own
        # files), in parallel when jobs > 1: the same bytes either way (reports._fork);
        # notes the documents would add are added here first, so the manifest has them
        cross_references(study, sections)
        docs = {}
        if renderer != "quarto":
            docs = {
                "qmd": lambda: (tmp / "appendix.qmd").write_text(
                    render_markdown(study, sections, "quarto", grids), encoding="utf-8"),
                "html": lambda: _pandoc_html(render_markdown(study, sections, "html"), tmp,
                                             build),
                "pdf": lambda: _pandoc_pdf(render_markdown(study, sections, "typst"), tmp,
                                           build, epoch),
                "docx": lambda: _pandoc_docx(render_markdown(study, sections, "docx", grids,
                                                             reference), tmp, build, tables)}
            docs = {k: v for k, v in docs.items() if k == "qmd" or k in formats}
        names = list(docs)
        # the PDF here: typst's thread pool may already run in this process (an earlier
        # report), and a forked child would wait for its threads forever
        spent = run_tasks([functools.partial(_timed, docs[k]) for k in names], jobs=jobs,
                          order=sorted(range(len(names)), key=lambda i: -_DOC_COST[names[i]]),
                          here=[i for i, k in enumerate(names) if k == "pdf"])
        timings.update({k: sec for k, sec in zip(names, spent) if k != "qmd"})
        seconds = round(time.perf_counter() - t0, 3)
        timings["total"] = seconds
        from .manifest import build_manifest, write_manifest

        write_manifest(build_manifest(study, sections=sections, tables=tables, figures=figures,
                                      renderer=renderer, timings=timings), tmp / "manifest.json")
    return RenderResult(out=out, sections=sections, tables=tables, figures=figures,
                        skipped=list(study.skipped), seconds=seconds, renderer=renderer)
