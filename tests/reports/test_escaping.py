"""Data values never become markup, code, links or file reads in a report.

Hostile strings (fences, raw blocks, shortcodes, links, HTML, typst code, control
characters) are put into every place a user string reaches (prose, caption, table cell,
column label, spanner, note, row group, figure caption and alt text, plan title) and
rendered by each renderer: the Quarto markdown (.qmd, parsed back by Pandoc), the pandoc
HTML and the pandoc -> typst PDF. Then one full report of the demo study with hostile
site, model, phase, bin and encoder names. The escapers themselves are checked on many
cases and, for markdown, by a Pandoc read-back property over generated strings.
"""
from __future__ import annotations

import base64
import json
import re
import shutil
import string
import warnings
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reports import render, sandbox, text
from reports.figures import ReportFigure
from reports.sections import Section
from reports.tables import ReportTable

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"

#: one payload per class of attack
PAYLOADS = {
    "fence_image": "![leak](/etc/passwd)",
    "tilde_fence": "~~~\n![leak](/etc/passwd)\n~~~",
    "div_fence": ":::\n\n::: {.hidden}\nsecret\n:::",
    "javascript_link": "[click](javascript:alert(1)) <javascript:alert(2)>",
    "raw_html": "<script>alert(1)</script><img src=x onerror=alert(1)>",
    "remote_resource": '<img src="http://example.invalid/x.png"> ![r](http://example.invalid/y.png)',
    "comment_entity": "<!-- hidden --> &amp; &#60;b&#62; &lt;i&gt;",
    "shortcode": "{{< include /etc/passwd >}} {{< meta title >}}",
    "raw_attribute": "`<b>x</b>`{=html} `#read(\"/etc/passwd\")`{=typst}",
    "citation_math": "@tbl-hostile @fig-hostile [@key] $x^2$ \\(y\\) ^sup^ ~sub~",
    "typst_code": '#image("/etc/passwd") #read("/etc/passwd") <lbl> @ref = h',
    "typst_string": '"); #read("/etc/passwd"); ("\\',
    "markdown_blocks": "# h\n> q\n- l\n1. n\n| a | b |\n---\n    code\n% title",
    "control_chars": "a\x00b\rc\td\x1b[31m\u2028e\u2029f\u200bh\ufeffi\x85j",
    "yaml_break": "\n---\ntitle: pwned\n...\n",
}


def _breakout(payload: str) -> str:
    """The attack of issue 13: the payload inline, then a fence line that closes the raw
    block around a table, the payload as a block of its own, a new raw block opened, and a
    bidi override (every target must neutralise it)."""
    return f"x {payload}\n```\n\n{payload}\n\n```{{=html}}\n<p>\u202e"


HOSTILE = {kind: _breakout(p) for kind, p in PAYLOADS.items()}
RENDERERS = ("qmd", "html", "pdf")
PASSWD = "root:x:0:0"

PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
SVG_1PX = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'


def visible(s: str) -> str:
    """What a reader must see for ``s``: its one-line form, whitespace runs as one space."""
    return " ".join(text.plain(s).split())


def _norm(s: str) -> str:
    s = s.replace("\u00a0", " ").translate(str.maketrans("\u201c\u201d\u2018\u2019", "\"\"''"))
    return " ".join(s.split())


class _Text(HTMLParser):
    """Text content of an HTML document outside style, plus every tag attribute."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.attrs, self._skip = [], [], False

    def handle_starttag(self, tag, attrs):
        self._skip = tag in ("style", "title")
        self.attrs.extend((tag, k, v or "") for k, v in attrs)

    def handle_endtag(self, tag):
        self._skip = False

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _html_text(html: str) -> tuple[str, list]:
    p = _Text()
    p.feed(html)
    return _norm(" ".join(p.parts)), p.attrs


_TAG = re.compile(r"""<[a-zA-Z][\w-]*((?:\s+[\w:-]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?)*)\s*/?>""")
_ATTR = re.compile(r"""([\w:-]+)\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+)""")


def outside_urls(html: str) -> list[str]:
    """``src``/``href`` values in the tags of ``html`` (quoted values read whole, so text
    such as ``alt="<img src=x>"`` is not a tag) that are neither ``data:`` nor ``#...``."""
    return [v for m in _TAG.finditer(html) for k, v in _ATTR.findall(m.group(1))
            if k.lower() in ("src", "href") and not re.match(r"""["']?(data:|#)""", v)]


def _pdf_text(path: Path) -> str:
    from pypdf import PdfReader

    return _norm(" ".join(p.extract_text() or "" for p in PdfReader(str(path)).pages))


# --------------------------------------------------------------------------- escapers

CONTROLS = ["\n", "\r", "\t", "\v", "\f", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029",
            "\u202e", "\u2066", "\u200b", "\ufeff", "\ud800"]
BREAKS = "\n\r\t\v\f\x85\u2028\u2029"


@pytest.mark.parametrize("ch", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_every_escaper_neutralises_control_characters(ch):
    raw = f"a{ch}```{ch}b"
    for escape in (text.plain, text.md, text.md_attr, text.html, text.typst_str):
        out = escape(raw)
        assert out.isprintable() and not any(c in out for c in CONTROLS), (escape.__name__, out)
    shown = text.plain(raw)
    if ch in BREAKS:
        assert shown == "a ``` b"
    else:
        assert re.fullmatch(r"a\\(x|u)[0-9a-f]+```\\(x|u)[0-9a-f]+b", shown), shown


def test_plain_shows_invisible_differences():
    assert text.plain("site\u200b1") != text.plain("site1")
    assert text.plain("a\u202eb") == "a\\u202eb" and text.plain("a\x00b") == "a\\x00b"
    assert text.plain("ok é ü 名") == "ok é ü 名"


def _unescape(literal: str, escapes: dict[str, str]) -> str:
    """Read a backslash-escaped literal back; an unknown escape or a bare quote fails."""
    out, i = [], 0
    while i < len(literal):
        ch = literal[i]
        assert ch != '"', f"unescaped quote at {i} in {literal!r}"
        if ch == "\\":
            key = next(k for k in escapes if literal.startswith(k, i + 1))
            out.append(escapes[key])
            i += 1 + len(key)
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_escapers_keep_hostile_strings_inert(kind):
    raw = HOSTILE[kind]
    md = text.md(raw)
    assert "\n" not in md and "{{<" not in md
    assert not re.match(r"(```|~~~|:::|#|>|-|\+|\d+\.|\s)", md), md
    html = text.html(raw)
    assert not re.search(r"[<>\n{}]", html) and "\"" not in html
    typ = text.typst_str(raw)
    assert typ[0] == typ[-1] == '"' and "{" not in typ.replace("\\u{7b}", "")
    assert _unescape(typ[1:-1], {"u{7b}": "{", '"': '"', "\\": "\\"}) == text.plain(raw)
    attr = text.md_attr(raw)
    assert _unescape(attr, {c: c for c in '\\"&{}'}) == text.plain(raw) and "{{" not in attr


def test_fence_outgrows_backtick_runs():
    assert text.fence("no ticks") == "```"
    assert text.fence("a ``` b", "````x") == "`````"


def test_md_leaves_ordinary_punctuation_readable():
    assert text.md("plan.yaml") == "plan.yaml"
    assert text.md("model_A, site-1; 3.5 mm / 40-59 (n=3)?") == "model_A, site-1; 3.5 mm / 40-59 (n=3)?"
    assert text.md("a--b...") == "a\\-\\-b\\.\\.\\."
    assert text.md("_x_ *y*") == "\\_x\\_ \\*y\\*"
    assert text.md("Failure map: sensitivity (protocol: phase)") == \
        "Failure map: sensitivity (protocol: phase)"
    assert text.md(": x a:b :::") == "\\: x a\\:b \\:\\:\\:"
    # estimates, counts and comparisons as the tables print them stay bare
    for shown in ("0.28 [0.01, 26.85] (280/329)", "-0.057", "A & B", "\u2264 0.020",
                  "1.00 (reference)", "split: development"):
        assert text.md(shown) == shown, shown
        assert text.md(shown, follow=" ", wrap=True) == shown, shown
    # ...but never where they would become markup
    assert text.md("[Methods]") == "\\[Methods\\]"          # an implicit header link
    assert text.md("[1](x)") == "\\[1\\](x)"                # a link
    assert text.md("a [0.1]") == "a \\[0.1\\]"              # unknown end: a "(" may follow
    assert text.md("a [0.1]", follow=" ") == "a [0.1]"
    assert text.md("a&b <b>") == "a\\&b \\<b>"              # an entity, a tag
    # "<" always: Pandoc tries raw HTML at each bare "<" (30 s on a BenchX-scale appendix)
    assert text.md("[< 0.01, 2]", follow=" ") == "[\\< 0.01, 2]"
    assert text.md("x (a) y", follow=" ", wrap=True) == "x \\(a) y"  # "(a) " may begin a line
    assert text.md("- x") == "\\- x" and text.md("(1) x") == "\\(1) x"


#: generated strings: markdown constructs, markdown-special ASCII, letters, digits,
#: whitespace, control and non-ASCII characters, in any order
_TOKENS = ["```", "~~~", ":::", "~", "^", "&amp;", "&#60;", "1. ", "a) ", "iv. ", "(@) ", "#. ",
           "# ", "> ", "- ", "+ ", "* ", "---", "...", "--", "'", '"', "[x](y)", "![i](j)",
           "<b>", "<!--", "-->", "$", "@k", "{#i}", "{{<", ">}}", "\\", "`", "_", "*", "|",
           "  ", "    ", "http://x.y", "<http://x.y>", "=", "%", ":", "[^1]", "^[n]", "[@c]",
           "x_y", "_z_", "a:b", "\n", "\t", "\r", "\u2028", "\x00", "\u00a0"]
_ALPHABET = st.sampled_from(list(string.punctuation) + list("aZ09 _-.é"))
_STRINGS = st.one_of(
    st.lists(st.one_of(st.sampled_from(_TOKENS), st.text(_ALPHABET, max_size=3)),
             min_size=1, max_size=6).map("".join),
    st.text(min_size=1, max_size=8)).filter(lambda s: text.plain(s).strip())


def _ws(s: str) -> str:
    return " ".join(s.replace("\u00a0", " ").split())


def _stringify(block) -> str:
    assert block["t"] == "Para", block["t"]
    out = []
    for node in block["c"]:
        assert node["t"] in ("Str", "Space", "SoftBreak"), node
        out.append(node["c"] if node["t"] == "Str" else " ")
    return "".join(out)


@settings(max_examples=60, deadline=None)
@given(st.lists(_STRINGS, min_size=1, max_size=30))
def test_md_reads_back_as_the_same_text_anywhere_in_a_line(strings):
    """Property: Pandoc reads ``md(s)`` as one paragraph of plain text equal to ``s`` (one
    line, visible characters), at the start of a line and inside one."""
    import pypandoc

    doc = "\n\n".join(f"{text.md(s)}\n\nQ {text.md(s)} Q" for s in strings)
    for s in strings:
        out = text.md(s)
        assert "\n" not in out and not re.match(r"(```|~~~|:::)", out) and "{{<" not in out
    ast = json.loads(pypandoc.convert_text(doc, "json", format="markdown"))
    got = [_ws(_stringify(b)) for b in ast["blocks"]]
    want = [v for s in strings for v in (_ws(text.plain(s)), _ws(f"Q {text.plain(s)} Q"))]
    assert got == want


# --------------------------------------------------------------------------- renderer x class

def _hostile_doc(raw: str, folder: Path):
    """A one-section study with ``raw`` in every place a user string reaches."""
    df = pd.DataFrame({"group": [raw, "plain"], "level": [raw, "b"], "value": ["0.91", raw]})
    table = ReportTable(name="hostile", caption=f"Caption {raw}", data=df, display=df,
                        labels={"level": raw, "value": f"Value {raw}"},
                        spanners=((raw, ["value"]),), notes=(f"Note {raw}",), group_col="group")
    figure = ReportFigure(name="hostile", caption=f"Figure {raw}", alt=f"Alt {raw}", plot=None,
                          data=df)
    sec = Section("methods", "Methods").add(
        f"Site {text.md(raw)} and @tbl-hostile.", table, figure)
    notes: list[str] = []
    study = SimpleNamespace(plan=SimpleNamespace(title=f"Title {raw}", path=Path("plan.yaml")),
                            notes=notes, note=notes.append)
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    (folder / "figures" / "hostile.png").write_bytes(PNG_1PX)
    (folder / "figures" / "hostile.svg").write_text(SVG_1PX)
    build = folder / "build"
    build.mkdir(exist_ok=True)
    return study, [sec], build


def _ast_types(node, found):
    if isinstance(node, dict):
        if "t" in node:
            found.append((node["t"], node.get("c")))
        for v in node.values():
            _ast_types(v, found)
    elif isinstance(node, list):
        for v in node:
            _ast_types(v, found)
    return found


def _check_qmd(raw, study, sections, folder, build):
    import pypandoc

    qmd = render.render_markdown(study, sections, "quarto")
    assert "{{<" not in qmd
    front = yaml.safe_load(qmd.split("---\n")[1])
    assert set(front) == {"title", "subtitle", "format", "execute"}
    ast = json.loads(pypandoc.convert_text(qmd, "json", format="markdown"))
    nodes = _ast_types(ast["blocks"], [])
    kinds = [t for t, _ in nodes]
    assert kinds.count("Table") == 1 and kinds.count("Figure") == 1 and kinds.count("Header") == 1
    assert kinds.count("Div") == 1  # the table's notes (custom-style "Table Note")
    assert [c[0][0] for t, c in nodes if t == "Table"] == ["tbl-hostile"]
    assert "RawBlock" not in kinds and "RawInline" not in kinds
    assert [c[2][0] for t, c in nodes if t == "Image"] == ["figures/hostile.png"]
    assert {t for t, _ in nodes} <= {"Para", "Plain", "Str", "Space", "SoftBreak", "Div",
                                     "Figure", "Header", "Image", "Cite", "Caption", "Strong",
                                     "AuthorInText", "Table", "Emph", "AlignLeft",
                                     "AlignRight", "AlignDefault", "ColWidth"}, set(kinds)
    table = next(c for t, c in nodes if t == "Table")
    cells = [_cell_text(cell[4]) for part in (table[3][1], table[4][0][3])
             for row in part for cell in row[1]]
    want = visible(raw)
    assert cells == ["", want, want, f"Value {want}", want, want, "0.91", "plain", "b", want]
    cites = [cit["citationId"] for t, c in nodes if t == "Cite" for cit in c[0]]
    assert cites == ["tbl-hostile"]
    para = next(b for b in ast["blocks"] if b["t"] == "Para" and b["c"][0].get("c") == "Site")
    assert _norm(_stringify_inlines(para["c"])) == _norm(f"Site {visible(raw)} and @tbl-hostile.")
    fences = [ln for ln in qmd.splitlines() if re.match(r"\s*(`{3,}|~{3,}|:{3,})", ln)]
    assert fences == ['::: {custom-style="Table Note"}', ":::"]


def _cell_text(blocks) -> str:
    """A grid-table cell read back: one Plain of text, or (a row-group heading) of one
    Emph of text; anything else is markup from data."""
    if not blocks:
        return ""
    (block,) = blocks
    assert block["t"] == "Plain", block
    inlines = block["c"]
    if len(inlines) == 1 and inlines[0]["t"] == "Emph":
        inlines = inlines[0]["c"]
    assert {n["t"] for n in inlines} <= {"Str", "Space", "SoftBreak"}, inlines
    return _stringify_inlines(inlines)


def _stringify_inlines(inlines) -> str:
    out = []
    for node in inlines:
        if node["t"] == "Str":
            out.append(node["c"])
        elif node["t"] in ("Space", "SoftBreak"):
            out.append(" ")
        elif node["t"] == "Cite":
            out.append(_stringify_inlines(node["c"][1]))
        else:
            raise AssertionError(f"markup from data: {node['t']}")
    return "".join(out)


def _check_html(raw, study, sections, folder, build):
    render._pandoc_html(render.render_markdown(study, sections, "html"), folder, build)
    html = (folder / "appendix.html").read_text(encoding="utf-8")
    assert outside_urls(html) == [] and sandbox.external_references(html) == []
    assert "<script" not in html.lower()
    for uri in re.findall(r"data:[\w/+.-]+;base64,([A-Za-z0-9+/=]+)", html):
        assert base64.b64decode(uri) == PNG_1PX
    shown, attrs = _html_text(html)
    want = visible(raw)
    # prose, caption, cell, label, spanner, note, row group, figure caption (+ title)
    assert shown.count(want) >= 8, (want, shown[:2000])
    assert ("img", "alt", f"Alt {want}") in [(t, k, _norm(v)) for t, k, v in attrs]


def _check_pdf(raw, study, sections, folder, build):
    render._pandoc_pdf(render.render_markdown(study, sections, "typst"), folder, build)
    pdf = _pdf_text(folder / "appendix.pdf")
    assert PASSWD not in pdf
    squash = re.sub(r"\s+", "", pdf)
    want = re.sub(r"\s+", "", _norm(visible(raw)))
    # prose, caption, note, figure caption, title (table cells may wrap across lines)
    assert squash.count(want) >= 5, (want, pdf[:1500])


CHECKS = {"qmd": _check_qmd, "html": _check_html, "pdf": _check_pdf}


@pytest.mark.parametrize("renderer", RENDERERS)
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_renderer_keeps_hostile_string_literal(renderer, kind, tmp_path):
    raw = HOSTILE[kind]
    study, sections, build = _hostile_doc(raw, tmp_path)
    CHECKS[renderer](raw, study, sections, tmp_path, build)


# --------------------------------------------------------------------------- sandbox

def test_pandoc_always_runs_sandboxed(tmp_path, monkeypatch):
    import pypandoc

    calls = []
    real = pypandoc.convert_text

    def spy(*args, **kw):
        calls.append(kw.get("extra_args") or [])
        return real(*args, **kw)

    monkeypatch.setattr(pypandoc, "convert_text", spy)
    study, sections, build = _hostile_doc("x", tmp_path)
    render._pandoc_html(render.render_markdown(study, sections, "html"), tmp_path, build)
    render._pandoc_pdf(render.render_markdown(study, sections, "typst"), tmp_path, build)
    assert len(calls) == 3 and all("--sandbox" in a for a in calls), calls
    assert not any("--embed-resources" in a or "--self-contained" in a for a in calls)


@pytest.mark.parametrize("md, msg", [
    ("![x](/etc/passwd)", "not one of its figures"),
    ("![x](figures/../../etc/passwd.png)", "not one of its figures"),
    ("![x](figures/missing.png)", "not one of its figures"),
    ("![x](http://example.invalid/a.png)", "not one of its figures"),
    ("[x](javascript:alert(1))", "links only to its own anchors"),
    ("[x](file:///etc/passwd)", "links only to its own anchors"),
])
def test_embed_figures_refuses_foreign_images_and_links(md, msg, tmp_path):
    (tmp_path / "figures").mkdir()
    with pytest.raises(RuntimeError, match=msg):
        sandbox.embed_figures(sandbox.to_ast(md, tmp_path), tmp_path)


@pytest.mark.parametrize("html, found", [
    ('<img src="http://example.invalid/x.png">', 'src="http'),
    ("<a href='javascript:alert(1)'>x</a>", "href="),
    ('<link rel="stylesheet" href="/etc/passwd">', "href="),
    ("<script>alert(1)</script>", "<script>"),
    ("<style>body{background:url(https://example.invalid/b.png)}</style>", "CSS url("),
    ('<div style="background: url(/etc/passwd)">x</div>', "style="),
    ('<p onclick="x()">p</p>', "onclick="),
    ('<img src="data:image/png;base64,AAAA"><a href="#sec-x">x</a>', None),
])
def test_external_references_are_found(html, found):
    refs = sandbox.external_references(html)
    assert (refs == []) if found is None else any(found in r for r in refs), refs


def test_unsafe_ids_and_typst_imports_are_refused():
    with pytest.raises(RuntimeError, match="not made of a-z"):
        sandbox.check_name("figure", "../x")
    with pytest.raises(RuntimeError, match="imports or includes"):
        sandbox.check_typst('#set page(width: 1cm)\n#import "@preview/x:0.1.0": *\n')
    sandbox.check_typst('#text("#import \\"@preview/x:0.1.0\\"")\n')


def test_figure_svg_stays_valid_xml_with_control_characters(tmp_path):
    """matplotlib copies label text into SVG comments; typst refuses an SVG with a NUL."""
    import warnings as w
    from xml.etree import ElementTree

    import plotnine as p9

    df = pd.DataFrame({"x": ["<40\x00", "b\x1b\n```"], "y": [1, 2]})
    fig = ReportFigure(name="ctl", caption="c", alt="a", data=df,
                       plot=p9.ggplot(df, p9.aes("x", "y")) + p9.geom_col())
    with w.catch_warnings():
        w.simplefilter("ignore")  # missing glyphs
        fig.save(tmp_path)
    ElementTree.parse(tmp_path / "ctl.svg")


# --------------------------------------------------------------------------- full report

SITE = _breakout(PAYLOADS["fence_image"] + PAYLOADS["javascript_link"] + PAYLOADS["remote_resource"])
MODEL = "unet " + _breakout(PAYLOADS["raw_html"] + " " + PAYLOADS["shortcode"])
PHASE = "delayed " + _breakout(PAYLOADS["div_fence"] + " " + PAYLOADS["typst_code"])
BIN = "<40\n```\n![b](/etc/passwd)\x00"
ENCODER = "cnn\r\n```\n![e](/etc/passwd)\u202e"
TITLE = "Title " + PAYLOADS["yaml_break"] + HOSTILE["fence_image"]


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    """The demo study with hostile site, model, phase, age-bin, encoder names and title
    (bootstraps shortened), rendered once: html, pdf and qmd."""
    from reports.render import render_report

    tmp = tmp_path_factory.mktemp("hostile")
    cases = pd.read_parquet(DEMO / "cases.parquet")
    cases["site"] = cases["site"].replace({"site_07": SITE})
    cases["model"] = cases["model"].replace({"unet_small": MODEL})
    cases["phase"] = cases["phase"].replace({"delayed": PHASE})
    cases.to_parquet(tmp / "cases.parquet")
    lesions = pd.read_parquet(DEMO / "lesions.parquet")
    lesions["model"] = lesions["model"].replace({"unet_small": MODEL})
    lesions.to_parquet(tmp / "lesions.parquet")
    runs = pd.read_parquet(DEMO / "runs.parquet")
    runs["encoder"] = runs["encoder"].replace({"cnn_rand": ENCODER})
    runs.to_parquet(tmp / "runs.parquet")
    ref = yaml.safe_load((DEMO / "reference.yaml").read_text())
    ref["panel"] = [ENCODER if e == "cnn_rand" else e for e in ref["panel"]]
    (tmp / "reference.yaml").write_text(yaml.safe_dump(ref))
    plan = yaml.safe_load((DEMO / "plan.yaml").read_text())
    plan["inputs"].pop("probe_predictions")
    plan["inputs"].pop("metadata", None)  # not copied: the demo's metadata evidence table
    plan.pop("metadata", None)  # and its label-error block, which reads it
    plan["title"] = TITLE
    plan["detection"]["bins"]["age"]["labels"][0] = BIN
    margins = plan["detection"].get("target", {}).get("margins", {})
    for col, old, new in (("age_group", "<40", BIN), ("phase", "delayed", PHASE)):
        if old in margins.get(col, {}):  # the target's margins name the hostile levels too
            margins[col] = {new if k == old else k: v for k, v in margins[col].items()}
    levels = plan["detection"]["adjusted"].get("levels", {})
    if "phase" in levels:  # the hostile phase is a level too (reference levels list them all)
        levels["phase"] = [PHASE if v == "delayed" else v for v in levels["phase"]]
    plan["detection"]["bootstrap"]["n_boot"] = 50
    plan["crs"]["bootstrap"]["n_boot"] = 50
    (tmp / "plan.yaml").write_text(yaml.safe_dump(plan))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = render_report(tmp / "plan.yaml", tmp / "out", strict=True)
    yield tmp / "out", result
    shutil.rmtree(tmp, ignore_errors=True)


HOSTILE_NAMES = (SITE, MODEL, PHASE, BIN, ENCODER)


def test_full_report_html_runs_and_loads_nothing_from_data(hostile_report):
    out, result = hostile_report
    html = (out / "appendix.html").read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    assert outside_urls(html) == [] and sandbox.external_references(html) == []
    for uri in re.findall(r"data:[\w/+.-]+;base64,([A-Za-z0-9+/=]+)", html):
        assert base64.b64decode(uri).startswith(b"\x89PNG"), base64.b64decode(uri)[:40]
    assert len(re.findall(r"<img [^>]*src=\"data:image/png", html)) == len(result.figures)
    assert html.count('class="gt_table"') == len(result.tables)
    shown, _ = _html_text(html)
    for name in HOSTILE_NAMES:
        assert visible(name) in shown, visible(name)
    assert visible(TITLE) in shown


def test_full_report_pdf_shows_names_and_no_local_file(hostile_report):
    out, result = hostile_report
    pdf = _pdf_text(out / "appendix.pdf")
    assert PASSWD not in pdf
    squash = re.sub(r"\s+", "", pdf)
    for name in (MODEL, ENCODER, BIN):
        assert re.sub(r"\s+", "", visible(name)) in squash, visible(name)
    assert f"Table {len(result.tables)}:" in pdf and f"Table {len(result.tables) + 1}:" not in pdf


def test_full_report_qmd_keeps_its_structure(hostile_report):
    import pypandoc

    out, result = hostile_report
    qmd = (out / "appendix.qmd").read_text(encoding="utf-8")
    assert "{{<" not in qmd
    front = yaml.safe_load(qmd.split("---\n")[1])
    assert set(front) == {"title", "subtitle", "format", "execute"}
    ast = json.loads(pypandoc.convert_text(qmd, "json", format="markdown"))
    nodes = _ast_types(ast["blocks"], [])
    assert sorted(c[0][0] for t, c in nodes if t == "Table") == sorted(t.id for t in result.tables)
    images = [c[2][0] for t, c in nodes if t == "Image"]
    assert images == [f"figures/{f.name}.png" for f in result.figures]
    assert not [t for t, _ in nodes if t in ("Link", "RawInline", "Math", "CodeBlock")]
    codes = [c[1] for t, c in nodes if t == "Code"]  # the plan's SHA-256, from the methods
    assert len(codes) == 1 and re.fullmatch("[0-9a-f]{64}", codes[0])
    assert not [t for t, _ in nodes if t in ("RawBlock", "RawInline")]
    # every fence line is one of the report's own: a table's notes div, open or close
    fences = [ln for ln in qmd.splitlines() if re.match(r"\s*(`{3,}|~{3,}|:{3,})", ln)]
    assert len(fences) == 2 * sum(1 for t in result.tables if t.notes)
    own = re.compile(r'::: \{custom-style="Table Note"\}|:::')
    assert [ln for ln in fences if not own.fullmatch(ln)] == []
