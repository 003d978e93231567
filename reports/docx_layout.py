"""Page layout of ``appendix.docx`` that Pandoc's Word writer leaves out: tables kept
whole and notes kept with their table, as in the PDF (``reports.tables.KEEP_ROWS``).

Pandoc writes each table as its caption paragraph (style "Table Caption", above the
table; the style keeps it with the next paragraph), the table (header rows marked
``<w:tblHeader/>``: repeated on every page) and then the notes (paragraphs of style
"Table Note"; only bookmark ends lie between the table and its first note). This step
rewrites ``word/document.xml`` so that

- no row of any table breaks across a page (``<w:cantSplit/>`` on every row);
- a table of at most ``KEEP_ROWS`` body rows that fits on a page with its caption
  (:func:`fits_page`, an estimate of its height) never splits: every paragraph of every
  row keeps with the next (``<w:keepNext/>``), the last row only when notes follow, so the
  table moves to the next page whole with its caption; one that does not fit (wrapped
  cells) breaks between rows like a long one, so that its caption is never left alone;
- a longer table breaks between body rows with its header repeated; its header rows keep
  with the first body row (a header never ends a page alone), and so does a row-group
  label (text in the first cell only) with its first row;
- notes are never stranded: the last row of a table with notes keeps with the first note
  and every note but the last keeps with the next.

The zip is written back with its entries in the same order, with the same dates,
compression and attributes (the file stays byte-identical across runs).
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

from .tables import KEEP_ROWS

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
DOCUMENT = "word/document.xml"
NOTE_STYLE = "TableNote"

#: children of ``w:trPr`` that come before ``w:cantSplit`` in the schema's sequence
_TRPR_BEFORE_CANTSPLIT = {f"{W}{t}" for t in ("cnfStyle", "divId", "gridBefore", "gridAfter",
                                                "wBefore", "wAfter")}


def _child(parent, tag: str, *, after: set[str] = frozenset(), first: bool = False):
    """``parent``'s ``tag`` child, made if missing and placed after the children whose
    tags are in ``after`` (OOXML fixes the order of properties); ``first``: before all."""
    found = parent.find(tag)
    if found is not None:
        return found
    from lxml import etree

    el = etree.Element(tag)
    if first:
        parent.insert(0, el)
        return el
    pos = 0
    for i, c in enumerate(parent):
        if c.tag in after:
            pos = i + 1
    parent.insert(pos, el)
    return el


def _keep_next(p) -> None:
    ppr = _child(p, f"{W}pPr", first=True)
    _child(ppr, f"{W}keepNext", after={f"{W}pStyle"})


def _cant_split(tr) -> None:
    trpr = _child(tr, f"{W}trPr", after={f"{W}tblPrEx"})
    _child(trpr, f"{W}cantSplit", after=_TRPR_BEFORE_CANTSPLIT)


def _style(p) -> str | None:
    s = p.find(f"{W}pPr/{W}pStyle")
    return None if s is None else s.get(f"{W}val")


def is_header(tr) -> bool:
    """Whether ``tr`` is a header row (repeated on every page)."""
    h = tr.find(f"{W}trPr/{W}tblHeader")
    return h is not None and h.get(f"{W}val", "on") not in ("0", "false", "off")


def table_notes(tbl) -> list:
    """The note paragraphs right after ``tbl`` (style ``NOTE_STYLE``; bookmark ends and
    other non-block elements in between are skipped)."""
    notes = []
    for el in tbl.itersiblings():
        if el.tag == f"{W}p" and _style(el) == NOTE_STYLE:
            notes.append(el)
        elif el.tag in (f"{W}p", f"{W}tbl", f"{W}sdt", f"{W}sectPr"):
            break
    return notes


#: the estimate of a table's height (:func:`fits_page`): the table style's font (8.5 pt, in
#: twips), a character's width as a share of it (a wide average, to err towards breaking),
#: a line's height, the cells' margins, and the share of the page a kept table may fill
#: with its caption
FONT_TWIPS, CHAR_EM, LINE_EM, CELL_MARGIN_TWIPS, PAGE_SHARE = 170, 0.6, 1.2, 160, 0.85


def _sections(body) -> dict:
    """The ``w:sectPr`` of the section each top-level table lies in (a section ends with
    the paragraph holding its ``sectPr``; the last is the body's own)."""
    out, current = {}, body.find(f"{W}sectPr")
    for el in reversed(list(body)):
        sect = el.find(f"{W}pPr/{W}sectPr") if el.tag == f"{W}p" else None
        current = sect if sect is not None else current
        if el.tag == f"{W}tbl":
            out[el] = current
    return out


def _text(el) -> str:
    """The text of ``el``'s runs (``w:t``)."""
    return "".join(t.text or "" for t in el.iter(f"{W}t"))


def _twips(el, name: str, default: int) -> int:
    try:
        return int(el.get(f"{W}{name}", default))
    except (TypeError, ValueError):
        return default


def fits_page(tbl, sect) -> bool:
    """Whether ``tbl`` with its caption fits on one page of section ``sect``, by an
    estimate of its height: each row as tall as its tallest cell, a cell's paragraphs
    wrapped at the cell's width (the page's text width shared as the table's grid). A
    table kept whole that does not fit would leave its caption alone on a page."""
    pg = sect.find(f"{W}pgSz") if sect is not None else None
    mar = sect.find(f"{W}pgMar") if sect is not None else None
    width = _twips(pg, "w", 11906) - _twips(mar, "left", 1440) - _twips(mar, "right", 1440)
    height = _twips(pg, "h", 16838) - _twips(mar, "top", 1440) - _twips(mar, "bottom", 1440)
    grid = [max(_twips(g, "w", 1), 1) for g in tbl.iter(f"{W}gridCol")] or [1]
    char, line = FONT_TWIPS * CHAR_EM, FONT_TWIPS * LINE_EM
    total = 3 * line                        # the caption (two lines and its spacing)
    for tr in tbl.findall(f"{W}tr"):
        col, tallest = 0, 1
        for tc in tr.findall(f"{W}tc"):
            gs = tc.find(f"{W}tcPr/{W}gridSpan")
            span = _twips(gs, "val", 1) if gs is not None else 1
            cell = width * sum(grid[col:col + span]) / sum(grid) - CELL_MARGIN_TWIPS
            col += span
            per_line = max(1, int(cell // char))
            lines = sum(max(1, -(-len(_text(p)) // per_line)) for p in tc.iter(f"{W}p"))
            tallest = max(tallest, lines)
        total += tallest * line + 40
    return total <= PAGE_SHARE * height


def _label_row(tr) -> bool:
    """A row-group label (``Race``): text in its first cell only; it keeps with the next
    row, so a label never ends a page without its rows."""
    cells = [_text(tc).strip() for tc in tr.findall(f"{W}tc")]
    return len(cells) > 1 and bool(cells[0]) and not any(cells[1:])


def layout_tables(body, keep_rows: int = KEEP_ROWS) -> None:
    """Set the keep and split properties (module docstring) on every top-level table of
    the document ``body`` element, in place."""
    sections = _sections(body)
    for tbl in body.iterchildren(f"{W}tbl"):
        rows = tbl.findall(f"{W}tr")
        notes = table_notes(tbl)
        keep = (sum(not is_header(tr) for tr in rows) <= keep_rows
                and fits_page(tbl, sections.get(tbl)))
        for i, tr in enumerate(rows):
            _cant_split(tr)
            last = i == len(rows) - 1
            if (notes if last else keep or is_header(tr) or _label_row(tr)):
                for p in tr.iter(f"{W}p"):
                    _keep_next(p)
        for p in notes[:-1]:
            _keep_next(p)


PIC = "{http://schemas.openxmlformats.org/drawingml/2006/picture}"
WP = "{http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing}"


def describe_pictures(root) -> None:
    """Each picture's own description (``pic:cNvPr/@descr``) set to its drawing's alt
    text (``wp:docPr/@descr``: the figure caption): pandoc writes the image source
    there, which for an embedded figure is its whole ``data:`` URI (about 2 MB of
    base64 repeated in document.xml for the demo, and read aloud by screen readers)."""
    for drawing in root.iter(f"{W}drawing"):
        alt = next((d.get("descr", "") for d in drawing.iter(f"{WP}docPr")), "")
        for c in drawing.iter(f"{PIC}cNvPr"):
            if c.get("descr", "").startswith("data:"):
                c.set("descr", alt)


def keep_tables_together(path: str | Path, keep_rows: int = KEEP_ROWS) -> None:
    """Rewrite the Word document ``path`` in place with :func:`layout_tables` and
    :func:`describe_pictures` applied."""
    from lxml import etree

    path = Path(path)
    with zipfile.ZipFile(path) as z:
        items = [(info, z.read(info)) for info in z.infolist()]
    tmp = path.with_name(path.name + ".layout")
    with zipfile.ZipFile(tmp, "w") as out:
        for info, data in items:
            if info.filename == DOCUMENT:
                root = etree.fromstring(data, etree.XMLParser(huge_tree=True))
                layout_tables(root.find(f"{W}body"), keep_rows)
                describe_pictures(root)
                data = etree.tostring(root, xml_declaration=True, encoding="UTF-8",
                                      standalone=True)
            new = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            new.compress_type = info.compress_type
            new.create_system = info.create_system
            new.external_attr = info.external_attr
            out.writestr(new, data)
    os.replace(tmp, path)
