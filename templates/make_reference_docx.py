"""Make ``templates/reference.docx``: the Word styles of ``appendix.docx``.

Run from the repository root (needs python-docx, in the ``[test]`` extra)::

    .venv/bin/python templates/make_reference_docx.py

It starts from Pandoc's own default reference document (``pandoc --print-default-data-file
reference.docx``, so every style Pandoc's docx writer uses is present) and changes:

- page: A4 portrait, 1.6 cm side margins, 1.8 cm top/bottom (as the PDF); text width 7.0 in
  (``reports.render.DOCX_TEXT_WIDTH``, the widest a figure is placed);
- fonts: Arial everywhere, body 10 pt, headings dark grey, no theme colours;
- tables (style "Table"): 8.5 pt, a rule above and below the table and below the header
  row (journal style, no vertical lines); cell paragraphs ("Compact") tight; header rows
  repeat on every page (Pandoc marks them); a wide table gets a landscape page of its
  own (``reports.render.docx_section_breaks``);
- captions: "Table Caption" above its table (kept with it), "Image Caption" under its
  figure, 9 pt, not italic; "Table Note" (8 pt): the notes right under a table.

To use other styles, open ``templates/reference.docx`` (or a report's ``reference.docx``)
in Word, change the styles (not the text), save it under a new name and pass it with
``clinrel report --reference-docx FILE``. The output is committed; re-running this script
with the same Pandoc and python-docx reproduces it byte for byte (dates fixed at 1980-01-01).
"""
from __future__ import annotations

import datetime
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

FONT = "Arial"
INK = "1F2933"
OUT = Path(__file__).resolve().parent / "reference.docx"
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
EPOCH = datetime.datetime(1980, 1, 1, tzinfo=datetime.UTC)

TABLE_STYLE = f"""
<w:style xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    w:type="table" w:default="1" w:styleId="Table">
  <w:name w:val="Table"/>
  <w:basedOn w:val="TableNormal"/>
  <w:qFormat/>
  <w:rPr><w:sz w:val="17"/><w:szCs w:val="17"/></w:rPr>
  <w:tblPr>
    <w:tblInd w:w="0" w:type="dxa"/>
    <w:tblBorders>
      <w:top w:val="single" w:sz="8" w:space="0" w:color="{INK}"/>
      <w:bottom w:val="single" w:sz="8" w:space="0" w:color="{INK}"/>
    </w:tblBorders>
    <w:tblCellMar>
      <w:top w:w="20" w:type="dxa"/>
      <w:left w:w="80" w:type="dxa"/>
      <w:bottom w:w="20" w:type="dxa"/>
      <w:right w:w="80" w:type="dxa"/>
    </w:tblCellMar>
  </w:tblPr>
  <w:tblStylePr w:type="firstRow">
    <w:rPr><w:b/></w:rPr>
    <w:tcPr>
      <w:tcBorders><w:bottom w:val="single" w:sz="4" w:space="0" w:color="{INK}"/></w:tcBorders>
      <w:vAlign w:val="bottom"/>
    </w:tcPr>
  </w:tblStylePr>
</w:style>
"""


def pandoc_default(path: Path) -> None:
    import pypandoc

    subprocess.run([pypandoc.get_pandoc_path(), "-o", str(path), "--print-default-data-file",
                    "reference.docx"], check=True)


def style(doc, name: str, *, size=None, bold=None, italic=None, color=INK, keep_next=None,
          before=None, after=None):
    from docx.shared import Pt, RGBColor

    with warnings.catch_warnings():  # "Caption": pandoc's name, python-docx's id lookup
        warnings.simplefilter("ignore", UserWarning)
        st = doc.styles[name]
    f = st.font
    f.name = FONT
    fonts = st.element.get_or_add_rPr().find(f"{W}rFonts")
    for tag in ("asciiTheme", "hAnsiTheme", "eastAsiaTheme", "cstheme"):
        fonts.attrib.pop(f"{W}{tag}", None)  # a theme font would win over FONT
    if size is not None:
        f.size = Pt(size)
    if bold is not None:
        f.bold = bold
    if italic is not None:
        f.italic = italic
    if color is not None:
        f.color.rgb = RGBColor.from_string(color)
    if keep_next is None and before is None and after is None:
        return
    pf = st.paragraph_format
    if keep_next is not None:
        pf.keep_with_next = keep_next
    if before is not None:
        pf.space_before = Pt(before)
    if after is not None:
        pf.space_after = Pt(after)


def main(out: Path = OUT) -> Path:
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml import parse_xml
    from docx.shared import Cm

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "default.docx"
        pandoc_default(src)
        doc = docx.Document(str(src))
    defaults = doc.styles.element.find(f"{W}docDefaults/{W}rPrDefault/{W}rPr")
    for tag in ("sz", "szCs"):
        defaults.find(f"{W}{tag}").set(f"{W}val", "20")
    style(doc, "Normal", size=10)
    style(doc, "Body Text", before=4, after=6)
    style(doc, "Compact", before=0, after=0)
    style(doc, "Title", size=18, bold=True)
    style(doc, "Subtitle", size=12, italic=False)
    for level, size in ((1, 14), (2, 12), (3, 11), (4, 10)):
        style(doc, f"Heading {level}", size=size, bold=True, before=14 if level == 1 else 10,
              after=4)
    style(doc, "Caption", size=9, italic=False, before=6, after=4)
    style(doc, "Table Caption", size=9, keep_next=True, before=10, after=3)
    style(doc, "Image Caption", size=9, before=2, after=10)
    style(doc, "Captioned Figure", keep_next=True)
    note = doc.styles.add_style("Table Note", WD_STYLE_TYPE.PARAGRAPH)
    note.base_style = doc.styles["Normal"]
    note.quick_style = True
    style(doc, "Table Note", size=8, before=1, after=1)
    style(doc, "Hyperlink", color="1B5E8A")
    old = doc.styles["Table"].element
    old.addprevious(parse_xml(TABLE_STYLE))
    old.getparent().remove(old)
    sec = doc.sections[0]
    sec.page_width, sec.page_height = Cm(21.0), Cm(29.7)
    sec.left_margin = sec.right_margin = Cm(1.6)
    sec.top_margin = sec.bottom_margin = Cm(1.8)
    doc.core_properties.author = "clinrel"
    doc.core_properties.title = "clinrel reference document"
    for prop in ("created", "modified", "last_printed"):
        setattr(doc.core_properties, prop, EPOCH)
    doc.save(str(out))
    _fixed_dates(out)
    return out


def _fixed_dates(path: Path) -> None:
    """Rewrite the zip with every entry dated 1980-01-01 (the same bytes on every run)."""
    with zipfile.ZipFile(path) as z:
        items = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in items:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data,
                       compress_type=zipfile.ZIP_DEFLATED)


if __name__ == "__main__":
    print(main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
