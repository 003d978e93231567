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

    # ------------------------------------------------------------------ typst
    def to_typst(self) -> str:
        cols = self.columns
        ncol = len(cols)
        align = ["left" if i == 0 or not _numeric(self.display[c]) else "right"
                 for i, c in enumerate(cols)]
        lines = ["#[", "#set text(size: 7.5pt)", "#table(",
                 f"  columns: {ncol},", "  stroke: none,", "  inset: (x: 4pt, y: 2.5pt),",
                 "  align: (" + ", ".join(align) + ",),",
                 "  table.hline(stroke: 0.8pt),", "  table.header("]
        if self.spanners:
            row = []
            pos = 0
            spans = sorted(((cols.index(c[0]), len(c), lab) for lab, c in self.spanners),
                           key=lambda t: t[0])
            for start, width, lab in spans:
                if start > pos:
                    row.append(f"table.cell(colspan: {start - pos}, [])")
                row.append(f"table.cell(colspan: {width}, align: center, "
                           f"text(weight: \"bold\", {text.typst_str(lab)}))")
                pos = start + width
            if pos < ncol:
                row.append(f"table.cell(colspan: {ncol - pos}, [])")
            lines.append("    " + ", ".join(row) + ",")
            for start, width, _ in spans:
                lines.append(f"    table.hline(start: {start}, end: {start + width}, stroke: 0.4pt),")
        lines.append("    " + ", ".join(f"text(weight: \"bold\", {text.typst_str(self.label(c))})"
                                        for c in cols) + ",")
        lines.append("  ),")
        lines.append("  table.hline(stroke: 0.5pt),")
        current = object()
        for _, row in self.display.iterrows():
            if self.group_col is not None and row[self.group_col] != current:
                current = row[self.group_col]
                lines.append(f"  table.cell(colspan: {ncol}, text(style: \"italic\", "
                             f"{text.typst_str(current)})),")
            lines.append("  " + ", ".join(text.typst_str(row[c]) for c in cols) + ",")
        lines.append("  table.hline(stroke: 0.8pt),")
        lines.append(")")
        for note in self.notes:
            lines.append(f"#block(above: 3pt, text(size: 6.5pt, {text.typst_str(note)}))")
        lines.append("]")
        return "\n".join(lines)
