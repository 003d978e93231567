"""Report tables: a tidy table (written to ``tables/<name>.csv`` at full precision) plus
its display form (strings, rounded here), rendered late as great-tables HTML and as a
hand-written typst table. The spec is immutable; renderers never change it.

Escaping: great-tables escapes neither cell values nor row-group names, keeps line breaks
in labels and reads ``{{...}}`` in labels as units markup (unescaped), so every string is
escaped here (``text.html``: one line, braces as character references) and handed over
as ready HTML; display columns reach great-tables under positional ids (``c0``, ``c1``,
...), never as data-derived names. Typst cells are typst string literals.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from . import text


#: tables of at most this many printed rows are never split across pages (PDF, Word);
#: longer ones break between rows with their header repeated on every page and "Table N
#: (continued)" and the current row group ("(continued)") on every page after the first
#: (as clinical study report tables do); their notes are written once, under the last
#: row, kept with it
KEEP_ROWS = 25

_NUMERIC_CELL = re.compile(r"^[\d\s.,:;\[\]/()%<>=+\-\u2014\u2020\u00d7]*$")


def _numeric(col: pd.Series) -> bool:
    """A display column of numbers (estimates, CIs, n/N, percentages): right-aligned."""
    return bool(len(col)) and col.astype(str).map(lambda v: bool(_NUMERIC_CELL.match(v))).all()


@dataclass(frozen=True)
class ReportTable:
    """One table of the report.

    Attributes
    ----------
    name : file stem of ``tables/<name>.csv`` and id of the table (``tbl-<name>``).
    caption : caption (plain text; escaped per output).
    data : tidy full-precision frame written to CSV: every number shown comes from it.
    display : frame of strings, in display order (one row per shown row).
    labels : column -> header label (plain text).
    spanners : (label, [columns]) pairs over the header.
    notes : footnotes (methods, abbreviations), plain text.
    group_col : a display column whose values become row-group headings (hidden as column).
    """

    name: str
    caption: str
    data: pd.DataFrame
    display: pd.DataFrame
    labels: dict = field(default_factory=dict)
    spanners: tuple = ()
    notes: tuple = ()
    group_col: str | None = None
    digits: int = 2
    wide: bool = False  # many columns: landscape page in the PDF

    @property
    def id(self) -> str:
        return "tbl-" + self.name.replace("_", "-")

    @property
    def columns(self) -> list[str]:
        return [c for c in self.display.columns if c != self.group_col]

    def label(self, col: str) -> str:
        return str(self.labels.get(col, col))

    # ------------------------------------------------------------------ HTML (great-tables)
    def to_html(self) -> str:
        from great_tables import GT
        from great_tables import html as ready

        ids = {c: f"c{i}" for i, c in enumerate(self.display.columns)}
        disp = self.display.astype(str).apply(lambda s: s.map(text.html)).rename(columns=ids)
        group = ids.get(self.group_col)
        gt = GT(disp, groupname_col=group, id=f"gt-{self.name}") if group \
            else GT(disp, id=f"gt-{self.name}")
        gt = gt.cols_label({ids[c]: ready(text.html(self.label(c))) for c in self.columns})
        for k, (label, cols) in enumerate(self.spanners):
            gt = gt.tab_spanner(label=ready(text.html(label)), columns=[ids[c] for c in cols],
                                id=f"sp-{k}")
        for note in self.notes:
            gt = gt.tab_source_note(ready(text.html(note)))
        left = [ids[c] for i, c in enumerate(self.columns)
                if i == 0 or not _numeric(self.display[c])]
        gt = gt.cols_align("left", columns=left).cols_align(
            "right", columns=[ids[c] for c in self.columns if ids[c] not in left]).tab_options(
            table_font_size="13px", data_row_padding="2px", source_notes_font_size="11px")
        return gt.as_raw_html()

    # ------------------------------------------------------------------ shared layout
    def alignments(self) -> list[str]:
        """``left`` for the first column and text columns, ``right`` for numbers."""
        return ["left" if i == 0 or not _numeric(self.display[c]) else "right"
                for i, c in enumerate(self.columns)]

    def spans(self) -> list[tuple[int, int, str | None]]:
        """The spanner row as ``(start, width, label)`` runs covering every column
        (``label`` None: no spanner over those columns); empty without spanners."""
        if not self.spanners:
            return []
        cols = self.columns
        out, pos = [], 0
        for start, width, lab in sorted(((cols.index(c[0]), len(c), lab)
                                         for lab, c in self.spanners), key=lambda t: t[0]):
            if start > pos:
                out.append((pos, start - pos, None))
            out.append((start, width, lab))
            pos = start + width
        if pos < len(cols):
            out.append((pos, len(cols) - pos, None))
        return out

    def body(self):
        """The body: ``("group", heading)`` where a row group starts, then
        ``("row", [cell, ...])`` per row (strings, the shown columns only). Rows keep the
        display order within their group; groups come in order of first appearance, each
        once (as great-tables lays out the HTML, so every format shows the same rows)."""
        disp = self.display
        if self.group_col is not None:
            first = {g: i for i, g in reversed(list(enumerate(disp[self.group_col])))}
            disp = disp.assign(_g=disp[self.group_col].map(first)).sort_values(
                "_g", kind="stable").drop(columns="_g")
        current = object()
        for _, row in disp.iterrows():
            if self.group_col is not None and row[self.group_col] != current:
                current = row[self.group_col]
                yield "group", str(current)
            yield "row", [str(row[c]) for c in self.columns]

    def parts(self, rows: int = None) -> list["ReportTable"]:
        """The table as it is cut for Word, whose pages cannot say "(continued)": itself
        when it is kept whole (``keep``), else consecutive parts of at most ``rows``
        printed rows (default ``KEEP_ROWS``), each kept whole on a page; a part starts at
        a row group where one fits, and a group longer than a part continues in the next
        under its heading with "(continued)". Every part has the same columns; the first
        keeps the table's name (its cross-reference target), the others are named
        ``<name>-part-<k>``."""
        import dataclasses

        rows = KEEP_ROWS if rows is None else rows
        if self.keep:
            return [self]
        disp = self.display
        g = self.group_col
        if g is not None:   # the display in body order: groups in order of first appearance
            first = {v: i for i, v in reversed(list(enumerate(disp[g])))}
            disp = disp.assign(_g=disp[g].map(first)).sort_values("_g", kind="stable").drop(
                columns="_g")
        blocks = [part for _, part in disp.groupby(disp[g].map(
            {v: i for i, v in enumerate(dict.fromkeys(disp[g]))}), sort=True)] \
            if g is not None else [disp]
        heading = 1 if g is not None else 0
        out, current, used = [], [], 0
        for block in blocks:
            start = 0
            while start < len(block):
                room = rows - used - heading
                if room < 1 or (start == 0 and used and len(block) + heading > rows - used):
                    out.append(pd.concat(current))
                    current, used = [], 0
                    continue
                piece = block.iloc[start:start + room]
                if start and g is not None:   # a group continued from the part before
                    piece = piece.assign(**{g: piece[g].astype(str) + " (continued)"})
                current.append(piece)
                used += len(piece) + heading
                start += len(piece)
        if current:
            out.append(pd.concat(current))
        return [dataclasses.replace(self, display=d.reset_index(drop=True),
                                    name=self.name if k == 0 else f"{self.name}-part-{k + 1}",
                                    notes=self.notes if k == len(out) - 1 else ())
                for k, d in enumerate(out)]

    @property
    def n_rows(self) -> int:
        """Rows as printed: body rows plus row-group headings."""
        return sum(1 for _ in self.body())

    @property
    def keep(self) -> bool:
        """Short enough to keep on one page (``KEEP_ROWS``)."""
        return self.n_rows <= KEEP_ROWS

    def char_widths(self) -> list[int]:
        """Each column's width in characters of markdown: its longest cell as escaped
        (at most 40; longer text wraps) or half its label (labels wrap onto two lines),
        at least 4."""
        return [min(40, max(4, len(self.label(c)) // 2 + 1,
                            *(len(text.md(v)) for v in self.display[c].astype(str))))
                for c in self.columns]

    #: the cell margins, in characters
    PAD = 3
    #: characters across a portrait A4 text width (1.6 cm margins) at the table font
    #: (7.5 pt) and at the small one (6.5 pt), and across a landscape page, in the units
    #: of :meth:`rel_widths` (cell margins included)
    PORTRAIT_CHARS = 130
    PORTRAIT_SMALL_CHARS = 150
    LANDSCAPE_CHARS = 195

    def _widths(self) -> tuple[list[int], list[int], list[int]]:
        """Per column, in characters with the cell margins: ``most`` (the longest cell, the
        label at half: it wraps onto two lines), ``text`` (text columns shrunk to their
        longest word, number columns whole) and ``least`` (number columns too shrunk to
        their longest unbreakable part: an interval ``0.55 [0.52, 0.58]`` breaks only
        before its bracket, :func:`protect`)."""
        most, text_least, least = [], [], []
        for c, align in zip(self.columns, self.alignments()):
            label = self.label(c)
            cells = list(self.display[c].astype(str))
            words = [len(w) for v in (label, *cells) for w in v.split()]
            parts = [len(w) for v in cells for w in protect(v).split(" ")]
            longest_word = max(3, *words) if words else 3
            longest_part = max(3, *parts, *(len(w) for w in label.split())) if parts else 3
            full = min(40, max(longest_word, len(label) // 2 + 1, *map(len, cells))) + self.PAD
            most.append(full)
            text_least.append(full if align == "right" else min(full, longest_word + self.PAD))
            least.append(min(full, (longest_part if align == "right" else longest_word)
                             + self.PAD))
        return most, text_least, least

    def rel_widths(self, avail: int = 110) -> list[float]:
        """Column widths as fractions of the table width (sum 1) for a page ``avail``
        characters wide (automatic table layout, as a browser does it): every column as
        wide as its longest cell plus the cell margins when that fits; otherwise text
        columns shrink towards their longest word, and only then number columns towards
        their longest unbreakable part (an interval wraps before its bracket)."""
        most, text_least, least = self._widths()
        if sum(most) <= avail:
            chosen = most
        elif sum(text_least) <= avail:
            give = sum(most) - sum(text_least)
            chosen = [lo + (hi - lo) * (avail - sum(text_least)) / give
                      for lo, hi in zip(text_least, most)]
        elif sum(least) < avail:
            give = sum(text_least) - sum(least)
            chosen = [lo + (hi - lo) * (avail - sum(least)) / give
                      for lo, hi in zip(least, text_least)]
        else:
            chosen = least
        return [k / sum(chosen) for k in chosen]

    @property
    def is_wide(self) -> bool:
        """Set landscape in the PDF and the Word file: ``wide`` asked for, or the columns
        do not fit a portrait A4 page even at the small table font with intervals wrapped
        before their brackets (``PORTRAIT_SMALL_CHARS``): a landscape page is turned only
        for a table that cannot be read upright (each turn ends the page before it)."""
        return self.wide or sum(self._widths()[2]) > self.PORTRAIT_SMALL_CHARS

    @property
    def font_pt(self) -> float:
        """The table's font size in the PDF: 7.5 pt, or 6.5 pt for a portrait table whose
        numbers would not fit on one line at 7.5 pt (``PORTRAIT_CHARS``)."""
        if self.is_wide or sum(self._widths()[1]) <= self.PORTRAIT_CHARS:
            return 7.5
        return 6.5

    # ------------------------------------------------------------------ pandoc (docx, qmd)
    def to_pandoc(self, columns: int = 72) -> dict:
        """The table as a Pandoc AST ``Table`` (no caption and no notes: the template writes
        them next to it): the spanner row and the labels as header rows (repeated on every
        page in Word), row groups as full-width italic rows. Every string is a ``Str``
        node: Pandoc's own writer escapes it wherever the table is written (a grid table in
        the .qmd and the docx markdown). Notes stay out of the grid: a full-width cell
        holding a long note would widen every column (Pandoc never wraps a spanning cell).
        Column widths are ``char_widths`` as fractions of ``columns`` (Pandoc's
        ``--columns``), so a grid table is written at its natural width, unwrapped."""
        ncol = len(self.columns)
        align = [{"t": "AlignLeft" if a == "left" else "AlignRight"} for a in self.alignments()]
        head = []
        if self.spanners:
            head.append(_row([_cell(lab or "", width) for _, width, lab in self.spans()]))
        head.append(_row([_cell(self.label(c)) for c in self.columns]))
        rows = [_row([_cell(value, ncol, emph=True)]) if kind == "group" else
                _row([_cell(protect(v)) for v in value]) for kind, value in self.body()]
        return {"t": "Table", "c": [
            _ATTR, [None, []],
            [[a, {"t": "ColWidth", "c": (w + 3) / columns}]
             for a, w in zip(align, self.char_widths())],
            [_ATTR, head], [[_ATTR, 0, [], rows]], [_ATTR, []]]}

    # ------------------------------------------------------------------ typst
    def to_typst(self) -> str:
        """A typst table (typst string literals for every cell), full width; spanners and
        labels as the header, repeated on every page; a long table's header starts with
        "Table N (continued)" on every page but its first (typst's own number of the
        figure labelled ``id``); row groups as italic full-width subheaders (typst's
        level-2 headers), repeated with "(continued)" on a page that continues the group;
        the notes in a footer written once, under the table's last row."""
        cols = self.columns
        ncol = len(cols)
        align = self.alignments()
        # full text width, columns in proportion to their text (as in the docx): a note in
        # the footer, which spans every column, cannot widen one
        avail = (self.LANDSCAPE_CHARS if self.is_wide else
                 self.PORTRAIT_CHARS if self.font_pt == 7.5 else self.PORTRAIT_SMALL_CHARS)
        fr = ", ".join(f"{w * ncol:.3f}fr" for w in self.rel_widths(avail))
        lines = ["#[", f"#set text(size: {self.font_pt:g}pt)", "#table(",
                 f"  columns: ({fr},),", "  stroke: none,", "  inset: (x: 4pt, y: 2.5pt),",
                 "  align: (" + ", ".join(align) + ",),",
                 "  table.hline(stroke: 0.8pt),", "  table.header("]
        if not self.keep:   # only a page that continues the table says so
            lines.append(f"    table.cell(colspan: {ncol}, align: left, inset: (x: 4pt, y: 1.5pt), "
                         f"context {{ let start = locate(<{self.id}>); "
                         f"if start.page() < here().page() {{ text(style: \"italic\", "
                         f"[Table #numbering(\"1\", ..counter(figure.where(kind: table))"
                         f".at(start)) (continued)]) }} }}),")
        spans = self.spans()
        if spans:
            lines.append("    " + ", ".join(
                f"table.cell(colspan: {width}, [])" if lab is None else
                f"table.cell(colspan: {width}, align: center, "
                f"text(weight: \"bold\", {text.typst_str(lab)}))"
                for _, width, lab in spans) + ",")
            for start, width, lab in spans:
                if lab is not None:
                    lines.append(f"    table.hline(start: {start}, end: {start + width}, "
                                 "stroke: 0.4pt),")
        lines.append("    " + ", ".join(f"text(weight: \"bold\", {text.typst_str(self.label(c))})"
                                        for c in cols) + ",")
        lines.append("  ),")
        lines.append("  table.hline(stroke: 0.5pt),")
        k = 0
        for kind, value in self.body():
            if kind == "group":
                k += 1
                mark = text.typst_str(f"{self.id}/{k}")
                name = text.typst_str(value)
                # a subheader: repeated on the pages its rows continue onto, there with
                # "(continued)" (its first instance's metadata marks where it started)
                cell = (f"table.cell(colspan: {ncol}, [#metadata({mark}) <clinrel-group>"
                        f"#context {{ let first = query(selector(<clinrel-group>)"
                        f".before(here())).filter(m => m.value == {mark}); "
                        f"text(style: \"italic\", if first.len() > 0 and "
                        f"first.first().location().page() < here().page() "
                        f"{{ {name} + \" (continued)\" }} else {{ {name} }}) }}])")
                lines.append(f"  table.header(level: 2, {cell})," if not self.keep else
                             f"  table.cell(colspan: {ncol}, text(style: \"italic\", {name})),")
            else:
                lines.append("  " + ", ".join(text.typst_str(protect(v)) for v in value) + ",")
        if self.notes:  # the footer: written once, under the last row
            lines.append("  table.footer(repeat: false, "
                         "table.hline(stroke: 0.8pt),")
            lines.extend(f"    table.cell(colspan: {ncol}, inset: (x: 4pt, y: 1.5pt), "
                         f"text(size: 6.5pt, {text.typst_str(note)}))," for note in self.notes)
            lines.append("  ),")
        else:
            lines.append("  table.hline(stroke: 0.8pt),")
        lines.append(")")
        lines.append("]")
        return "\n".join(lines)


_ATTR = ["", [], []]
_BRACKETED = re.compile(r"\[[^\[\]]*\]")


def protect(cell: str) -> str:
    """``cell`` with the spaces inside brackets made non-breaking: an interval
    ``0.55 [0.52, 0.58]`` may wrap before its bracket, never inside it."""
    return _BRACKETED.sub(lambda m: m.group(0).replace(" ", "\u00a0"), cell)


def _inlines(s: str) -> list:
    """``s`` (one visible line, ``text.plain``) as Pandoc inlines for the markdown writer:
    each word a raw markdown inline, words joined by spaces. Pandoc's own writer leaves
    too much bare in a cell ("&amp;" reads back as "&", "[@key]" as a citation, a lone
    "|" as a line block, "1." as a list, an em dash written "---" as a rule); ``text.md``
    is the escaper whose read-back is tested, here with ``wrap`` (the writer may break
    the cell's line at any space, so every word is escaped as a possible line start) and
    a space after the last word (the cell's end)."""
    words = [w for w in text.plain(s).split(" ") if w]
    out: list = []
    for word in text.md(" ".join(words), follow=" ", wrap=True).split(" "):
        if out:
            out.append({"t": "Space"})
        out.append({"t": "RawInline", "c": ["markdown", word]})
    return out if words else []


def _cell(s: str, colspan: int = 1, *, emph: bool = False) -> list:
    inl = _inlines(s)
    blocks = [{"t": "Plain", "c": [{"t": "Emph", "c": inl}] if emph else inl}] if inl else []
    return [_ATTR, {"t": "AlignDefault"}, 1, colspan, blocks]


def _row(cells: list) -> list:
    return [_ATTR, cells]
