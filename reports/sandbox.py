"""The renderers' sandbox: a report reads no file and no URL it did not write.

Pandoc runs with ``--sandbox`` (it may read only the files named on its command line), so
it cannot embed the figures itself. Instead the markdown is parsed once to Pandoc's AST
and every image is checked and embedded here: an image must be one of this report's
``figures/<name>.png`` (a name of ``[a-z0-9_-]``) and becomes a ``data:`` URI; a link
must point to an anchor in the document (``#...``). Anything else is refused, and the
finished HTML is checked once more (``external_references``): no ``src``/``href``/CSS
``url()`` outside ``data:`` and ``#anchors``, no script, frame or object. User strings are
escaped long before (``reports.text``), so these checks guard the renderer itself: they
never fire on data, whatever it holds.
"""
from __future__ import annotations

import base64
import functools
import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

#: a report item (table, figure, section) id or file stem: made by code, never from data
SAFE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")
FIGURE_SRC = re.compile(r"figures/([a-z0-9][a-z0-9_-]*)\.png\Z")

MSG_UNSAFE_NAME = ("report item {kind} {name!r} is not made of a-z, 0-9, '_' and '-'; "
                   "ids and file names come from code (use reports.text.slug on data)")
MSG_FOREIGN_IMAGE = ("the report markdown refers to the image {src!r}, which is not one of "
                     "its figures/<name>.png; a report never embeds another file")
MSG_FOREIGN_LINK = ("the report markdown links to {target!r}; a report links only to its "
                    "own anchors (#...)")
MSG_EXTERNAL = ("the rendered HTML refers to something outside the document ({refs}); a "
                "report loads no file or URL")
MSG_TYPST_IMPORT = ("the typst source imports or includes a file or package (line "
                    "{line!r}); a report uses none")

SANDBOX_ARGS = ("--sandbox",)


def check_name(kind: str, name: str) -> str:
    """``name`` if it is a safe id or file stem, else ``RuntimeError`` (``MSG_UNSAFE_NAME``)."""
    if not SAFE_NAME.match(str(name)):
        raise RuntimeError(MSG_UNSAFE_NAME.format(kind=kind, name=name))
    return name


def embed_figures(ast: dict, folder: Path) -> dict:
    """Pandoc JSON ``ast`` with every image made a ``data:image/png`` URI read from
    ``folder/figures``; refuses any other image or link target (``RuntimeError``)."""
    figures = Path(folder) / "figures"
    cache: dict[str, str] = {}

    def image(src: str) -> str:
        m = FIGURE_SRC.match(src)
        path = figures / f"{m.group(1)}.png" if m else None
        if path is None or not path.is_file():
            raise RuntimeError(MSG_FOREIGN_IMAGE.format(src=src))
        if src not in cache:
            cache[src] = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
        return cache[src]

    def walk(node):
        if isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, dict):
            kind = node.get("t")
            if kind == "Image":
                target = node["c"][2]
                target[0] = image(target[0])
            elif kind == "Link" and not node["c"][2][0].startswith("#"):
                raise RuntimeError(MSG_FOREIGN_LINK.format(target=node["c"][2][0]))
            walk(node.get("c"))

    walk(ast["blocks"])
    walk(list(ast.get("meta", {}).values()))
    return ast


@functools.lru_cache(maxsize=1)
def find_pandoc() -> str:
    """pypandoc's pandoc, found (and its version read) once per process with SIGINT and
    SIGTERM blocked: pypandoc runs ``pandoc --version`` on every candidate path without
    capturing its stderr, so a Ctrl-C at that instant would add pandoc's own
    ``pandoc: interrupted`` to clinrel's one line. Blocked, the signal waits (for pandoc
    too, which inherits the mask; and held by clinrel, ``reports._signals.held``, where
    another thread receives it) until the probe is done, then stops clinrel as usual."""
    import signal

    import pypandoc

    from reports._signals import held

    mask = {signal.SIGINT, signal.SIGTERM}
    with held():
        old = (signal.pthread_sigmask(signal.SIG_BLOCK, mask)
               if hasattr(signal, "pthread_sigmask") else None)
        try:
            pypandoc.get_pandoc_version()
            return pypandoc.get_pandoc_path()
        finally:
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)


@functools.lru_cache(maxsize=1)
def api_version() -> list:
    """The ``pandoc-api-version`` of the bundled Pandoc (for ASTs built in Python)."""
    import pypandoc

    find_pandoc()
    return json.loads(pypandoc.convert_text("", "json", format="markdown",
                                            extra_args=list(SANDBOX_ARGS)))["pandoc-api-version"]


def write_file(ast: dict, to: str, output: Path, *, extra_args=(), cwd: Path) -> None:
    """Pandoc (in ``--sandbox``: it reads only the files its command line names) writes
    ``ast`` (JSON on stdin) as ``to`` into ``output``."""
    args = [find_pandoc(), *SANDBOX_ARGS, "--from=json", f"--to={to}",
            f"--output={output}", *extra_args]
    done = subprocess.run(args, input=json.dumps(ast).encode(), cwd=str(cwd),
                          capture_output=True, timeout=600, check=False)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace")
        _raise_no_space(err, output)
        raise RuntimeError(f"pandoc could not write {output.name}: {err[:500]}")


def _raise_no_space(message: str, output: Path) -> None:
    """A tool's message of a full disk or quota (pandoc: ``resource exhausted (No space
    left on device)``; typst: ``(os error 28)``) as the ``OSError`` Python would raise,
    naming ``output``: the output layer reports it with the fix (``reports.outputs``)."""
    from reports.outputs import no_space

    full = no_space(RuntimeError(message))
    if full is not None:
        raise OSError(full.errno, full.strerror, str(output))


def set_table_widths(ast: dict, widths: dict[str, list[float]]) -> dict:
    """Give each top-level ``Table`` of ``ast`` whose id is in ``widths`` those relative
    column widths (numbers only; nothing else of the table changes)."""
    for block in ast["blocks"]:
        if block.get("t") == "Table" and block["c"][0][0] in widths:
            specs, new = block["c"][2], widths[block["c"][0][0]]
            if len(new) == len(specs):
                block["c"][2] = [[align, {"t": "ColWidth", "c": float(w)}]
                                 for (align, _), w in zip(specs, new)]
    return ast


def to_ast(md: str, cwd: Path, *extra_args: str) -> dict:
    import pypandoc

    find_pandoc()
    return json.loads(pypandoc.convert_text(md, "json", format="markdown",
                                            extra_args=[*SANDBOX_ARGS, *extra_args],
                                            cworkdir=str(cwd)))


#: attributes that make a browser fetch or navigate
_URL_ATTRS = frozenset(("src", "href", "srcset", "action", "formaction", "poster", "data",
                        "background", "xlink:href", "ping", "manifest"))
_ACTIVE_TAGS = frozenset(("script", "iframe", "frame", "object", "embed", "base", "applet"))
_CSS_URL = re.compile(r"""(?:url\(\s*+["']?+|@import\s++["']?+)(?!data:|#)""", re.I)


def _local(value: str) -> bool:
    v = value.strip().lower()
    return v.startswith("data:") or v.startswith("#")


class _References(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._style = False

    def handle_starttag(self, tag, attrs):
        if tag in _ACTIVE_TAGS:
            self.found.append(f"<{tag}>")
        self._style = tag == "style"
        for name, value in attrs:
            value = value or ""
            if name in _URL_ATTRS and not _local(value):
                self.found.append(f'{name}="{value[:60]}"')
            elif name == "style" and _CSS_URL.search(value):
                self.found.append(f'style="{value[:60]}"')
            elif name.startswith("on"):
                self.found.append(f"{name}=")

    def handle_endtag(self, tag):
        self._style = False

    def handle_data(self, data):
        if self._style and _CSS_URL.search(data):
            self.found.append(f"CSS {_CSS_URL.search(data).group(0)}")


def external_references(html: str) -> list[str]:
    """What in ``html`` would make a browser load or run something outside the document:
    URL attributes other than ``data:`` and ``#anchors``, CSS ``url()``/``@import``, event
    handler attributes and script/frame/object tags. Empty for a self-contained report."""
    parser = _References()
    parser.feed(html)
    parser.close()
    return parser.found


def check_html(html: str) -> None:
    found = external_references(html)
    if found:
        raise RuntimeError(MSG_EXTERNAL.format(refs=", ".join(found[:5])))


_TYPST_IMPORT = re.compile(r"^[ \t]*#[ \t]*(?:import|include)\b.*$", re.M)


def check_typst(typ: str) -> None:
    """Refuse typst source that imports or includes anything (the report needs no
    package, and a package import would reach the network)."""
    m = _TYPST_IMPORT.search(typ)
    if m:
        raise RuntimeError(MSG_TYPST_IMPORT.format(line=m.group(0)[:80]))
