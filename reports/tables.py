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


#: tables of at most this many printed rows are never split across pages (PDF); longer
#: ones break with their header and notes repeated on every page (as clinical study
#: report tables do), so a note is never stranded on a page without its table
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

    def rel_widths(self, avail: int = 110) -> list[float]:
        """Column widths as fractions of the table width (sum 1) for a page ``avail``
        characters wide: every column as wide as its longest cell (label: half, it wraps;
        never narrower than its longest word) plus the cell margins when that fits;
        otherwise number columns keep that width and text columns shrink towards their
        longest word (automatic table layout, as a browser does it)."""
        pad = 3  # the cell margins, in characters
        most, least = [], []
        for c, align in zip(self.columns, self.alignments()):
            label = self.label(c)
            words = [len(w) for v in (label, *self.display[c].astype(str)) for w in v.split()]
            cells = [len(label) // 2 + 1, *map(len, self.display[c].astype(str))]
            longest_word = max(3, *words) if words else 3
            most.append(min(40, max(longest_word, *cells)) + pad)
            least.append(most[-1] if align == "right" else min(most[-1], longest_word + pad))
        spare, give = avail - sum(least), sum(most) - sum(least)
        if sum(most) <= avail or give == 0:
            chosen = most
        elif spare <= 0:
            chosen = least
        else:
            chosen = [lo + (hi - lo) * spare / give for lo, hi in zip(least, most)]
        return [k / sum(chosen) for k in chosen]

    @property
    def is_wide(self) -> bool:
        """Set landscape in the PDF: ``wide`` asked for, or the columns need more than a
        portrait A4 text width at the table font size (about 120 characters)."""
        if self.wide:
            return True
        return sum(self.char_widths()) + 2 * len(self.columns) > 120

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
                _row([_cell(v) for v in value]) for kind, value in self.body()]
        return {"t": "Table", "c": [
            _ATTR, [None, []],
            [[a, {"t": "ColWidth", "c": (w + 3) / columns}]
             for a, w in zip(align, self.char_widths())],
            [_ATTR, head], [[_ATTR, 0, [], rows]], [_ATTR, []]]}

    # ------------------------------------------------------------------ typst
    def to_typst(self) -> str:
        """A typst table (typst string literals for every cell), full width; spanners and
        labels as the header (repeated on every page), row groups as italic full-width
        rows, the notes in a footer (repeated on every page of a long table: never
        stranded)."""
        cols = self.columns
        ncol = len(cols)
        align = self.alignments()
        # full text width, columns in proportion to their text (as in the docx): a note in
        # the footer, which spans every column, cannot widen one
        fr = ", ".join(f"{w * ncol:.3f}fr" for w in self.rel_widths(195 if self.is_wide else 130))
        lines = ["#[", "#set text(size: 7.5pt)", "#table(",
                 f"  columns: ({fr},),", "  stroke: none,", "  inset: (x: 4pt, y: 2.5pt),",
                 "  align: (" + ", ".join(align) + ",),",
                 "  table.hline(stroke: 0.8pt),", "  table.header("]
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
        for kind, value in self.body():
            if kind == "group":
                lines.append(f"  table.cell(colspan: {ncol}, text(style: \"italic\", "
                             f"{text.typst_str(value)})),")
            else:
                lines.append("  " + ", ".join(map(text.typst_str, value)) + ",")
        if self.notes:  # the footer: a kept table is one block; a long one repeats it
            lines.append(f"  table.footer(repeat: {str(not self.keep).lower()}, "
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
