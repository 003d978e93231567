"""Formatting and escaping: every number and user string passes through here.

Rounding lives only here (``stats`` never rounds). User strings (site, model, encoder,
dataset and group names, bin labels, plan title and notes) are data: they may hold any
character, and each output language gets its own escaper, so that no value can become
markup, code, a link or a file reference:

- ``plain``: one line, every control character neutralised (newline, CR, tab, vertical
  tab, form feed, NEL, U+2028/U+2029 become a space; NUL, ESC, bidi overrides, zero-width
  and other invisible format characters become a visible escape such as ``\\u202e``).
  Every escaper below starts with it, so no escaped value can start a line (and so never
  a fence, a heading or a list) in the document it is placed in.
- ``md``: Pandoc/Quarto markdown prose (escapes only what markdown treats as special).
- ``md_attr``: the value of a quoted markdown attribute (``alt="..."``).
- ``html``: an HTML element or attribute.
- ``typst_str``: a typst string literal (every table cell, caption and alt text in typst).
"""
from __future__ import annotations

import html as _html
import math
import re
import unicodedata

import numpy as np

#: control characters that stand for a line or column break: shown as a space
_BREAKS = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x1f\x85\u2028\u2029")
#: invisible characters shown as a visible escape (controls, format/bidi, surrogates)
_INVISIBLE = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))


def _visible(ch: str) -> str:
    if ch in _BREAKS:
        return " "
    if unicodedata.category(ch) not in _INVISIBLE:
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else (
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def plain(text) -> str:
    """``text`` as one line of visible characters.

    Line breaks and other whitespace controls (tab, CR, vertical tab, form feed, NEL,
    U+2028, U+2029) become a space; other control and format characters (NUL, ESC, bidi
    overrides such as U+202E, zero-width spaces, BOM, lone surrogates) become a visible
    escape (``\\x00``, ``\\u202e``), so that two names that differ only in an invisible
    character are shown differently.
    """
    s = str(text)
    return s if s.isprintable() else "".join(map(_visible, s))


#: escaped wherever they occur: inline markup (emphasis, code, spans, attributes,
#: shortcodes, math, citations, cross-references, super/subscript, strikeout, tables,
#: line blocks, smart quotes; ``<`` too, even before a space or digit where it opens
#: nothing: Pandoc's reader tries raw HTML at every bare ``<``, and a BenchX-scale
#: appendix with thousands of "< 0.001" cells took 30 s to read instead of 2.7)
_MD_ALWAYS = frozenset("\\`*{}$@^~|'\"<")
#: escaped when they begin a line: block markers (headings, block quotes, title blocks,
#: definitions)
_MD_FIRST = frozenset("#>%:")
#: escaped when they begin a line and a space, the end or one of these follows (bullets,
#: setext underlines and rules, grid-table borders, an image's "![")
_MD_FIRST_SPACED = {"+": "+-=", "-": "-", "=": "=", "!": "["}
#: doubled, these become dashes or an ellipsis (smart punctuation)
_MD_RUNS = frozenset("-.")
#: what Pandoc reads as an ordered-list number: decimal, one letter or a roman numeral
_MD_ENUM = r"(?:[0-9]{1,9}|[A-Za-z]|[ivxlcdmIVXLCDM]+)"
#: an ordered-list marker ("1.", "iv)") or one in parentheses ("(1)", "(@)")
_MD_LIST_START = re.compile(_MD_ENUM + r"(?=[.)](\s|$))")
_MD_PAREN_LIST = re.compile(r"\((?:" + _MD_ENUM + r"|@[\w-]*)\)(?=\s|$)")
_MD_PAREN_OPEN = re.compile(r"\((?:" + _MD_ENUM + r"|@[\w-]*)\)?")
#: markup characters a bare bracket pair may not hold
_MD_BRACKET_NOT = frozenset("\\`*{}$@^~|'\"_!")
#: the unknown end: anything may follow the text
_ANY = "\x00"


def _alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _bare_brackets(s: str, nxt) -> set[int]:
    """Positions of the brackets of pairs that read as plain text: the pair holds no
    letter (so it can name no heading, as Pandoc's implicit header references would,
    nor a citation, footnote or link reference) and no markup, and no ``( [ { :`` or
    unknown end follows it (a link target or a reference definition)."""
    bare: set[int] = set()
    for m in re.finditer(r"\[([^\[\]]*)\]", s):
        inner = m.group(1)
        if (not any(c.isalpha() or c in _MD_BRACKET_NOT for c in inner)
                and nxt(m.end() - 1) not in "([{:" + _ANY):
            bare.update((m.start(), m.end() - 1))
    return bare


def _line_start(s: str, i: int, nxt, out: list) -> None:
    """Escape, in ``out``, what would make a line beginning at ``s[i]`` a block."""
    ch = s[i]
    if ch in _MD_FIRST:
        out[i] = "\\" + ch
    elif ch in _MD_FIRST_SPACED and (nxt(i) in " " + _ANY or nxt(i) in _MD_FIRST_SPACED[ch]):
        out[i] = "\\" + ch
    elif ch == "(":
        tail = s[i:] if nxt(len(s) - 1) == _ANY else s[i:] + nxt(len(s) - 1)
        if _MD_PAREN_LIST.match(tail) or (nxt(len(s) - 1) == _ANY
                                           and _MD_PAREN_OPEN.fullmatch(s[i:])):
            out[i] = "\\("
    else:
        tail = s[i:] if nxt(len(s) - 1) == _ANY else s[i:] + nxt(len(s) - 1)
        m = _MD_LIST_START.match(tail)
        if m and i + m.end() < len(s):
            out[i + m.end()] = "\\" + s[i + m.end()]


def md(text, *, follow: str | None = None, wrap: bool = False) -> str:
    """Escape ``text`` for Pandoc/Quarto markdown prose, keeping it readable.

    A backslash goes before every character that markdown treats as special where it
    stands, and only there: ``_MD_ALWAYS`` anywhere; ``_`` unless between two letters or
    digits, which Pandoc never reads as emphasis; ``-`` and ``.`` next to another of the
    same, which smart punctuation would turn into a dash or an ellipsis; ``:`` unless a
    space follows it; ``&`` unless a space or
    ``& . , ; )`` follows (an entity needs a letter, digit or ``#``); brackets unless the
    pair holds no letter or markup (``[0.80, 0.90]``) and no ``( [ { :`` follows it; and
    at the start of a line a block marker, a bullet or an ordered-list number. So
    ``plan.yaml``, ``Failure map: sensitivity``, ``0.28 [0.01, 26.85] (280/329)`` and
    ``A & B`` stay as written.

    ``follow``: the character that will come right after the text; ``None`` (unknown)
    escapes at the end as if anything could follow. ``wrap``: a writer may break the
    line at any space (a grid-table cell), so every word is treated as a line start.
    The result is one line (``plain``) and reads as exactly ``text`` wherever it is
    placed in a paragraph, including at the start of a line
    (``tests/reports/test_escaping.py``, and ``tests/reports/test_docx.py`` for grid cells, check
    this with Pandoc on generated strings).
    """
    s = plain(text)
    n = len(s)
    if not s:
        return ""
    end = _ANY if follow is None else (follow[:1] or " ")

    def nxt(i: int) -> str:
        return s[i + 1] if i < n - 1 else end

    bare = _bare_brackets(s, nxt)
    out = []
    for i, ch in enumerate(s):
        if ch in _MD_ALWAYS:
            esc = True
        elif ch in "[]":
            esc = i not in bare
        elif ch == "_":
            esc = not (0 < i < n - 1 and _alnum(s[i - 1]) and _alnum(s[i + 1]))
        elif ch in _MD_RUNS:
            esc = (i > 0 and s[i - 1] == ch) or nxt(i) == ch
        elif ch == ":":  # "Failure map: sensitivity" stays as it is; a colon that could
            # open a fence (":::"), an emoji (":x:") or a URI scheme ("a:b") is escaped
            esc = not (nxt(i) == " " and (i == 0 or s[i - 1] != ":"))
        elif ch == "&":
            esc = nxt(i) not in " &.,;)"
        else:
            esc = False
        out.append("\\" + ch if esc else ch)
    if s[0] == " ":  # a leading space could make the line an indented code block
        out[0] = "\\ "
    starts = [i for i in range(n) if s[i] != " " and (i == 0 or (wrap and s[i - 1] == " "))]
    for i in starts:
        _line_start(s, i, nxt, out)
    if n > 1 and s[-1] == " ":  # trailing spaces before a newline are a hard line break
        out[-1] = "\\ "
    return "".join(out)


_ATTR_SPECIAL = frozenset("\\\"&{}")


def md_attr(text) -> str:
    """``text`` for a double-quoted markdown attribute value (``alt="..."``): one line,
    with ``\\ " & { }`` backslash-escaped (Pandoc reads escapes and entities there; the
    braces keep a Quarto shortcode from forming)."""
    return "".join("\\" + ch if ch in _ATTR_SPECIAL else ch for ch in plain(text))


def html(text) -> str:
    """Escape ``text`` for an HTML element or attribute: one line, ``< > & " '`` and the
    braces as character references (``{{...}}`` is great-tables' units syntax, and with
    ``<`` a Quarto shortcode)."""
    return _html.escape(plain(text), quote=True).replace("{", "&#123;").replace("}", "&#125;")


def typst_str(text) -> str:
    """``text`` as a typst string literal (code mode), quotes included.

    A typst string is never markup or code, whatever it holds (``#image(...)``, ``<l>``,
    ``@ref``); ``\\`` and ``"`` are escaped, and ``{`` is written ``\\u{7b}`` so that a
    Quarto shortcode (``{{< ... >}}``) cannot form inside a raw typst block of the .qmd.
    """
    s = plain(text).replace("\\", "\\\\").replace('"', '\\"').replace("{", "\\u{7b}")
    return f'"{s}"'


_BACKTICKS = re.compile(r"`+")


def fence(*contents: str) -> str:
    """A backtick fence for a raw block holding ``contents``: three backticks, or one more
    than the longest backtick run inside, so that no line of the content can close it."""
    longest = max((len(m.group(0)) for c in contents for m in _BACKTICKS.finditer(c)),
                  default=0)
    return "`" * max(3, longest + 1)


_ID_BAD = re.compile(r"[^a-z0-9]+")


def slug(text) -> str:
    """A lowercase id fragment (``[a-z0-9-]``) for table/figure ids and file names.

    Distinct inputs that collide after slugging get a short hash suffix, so ids stay unique.
    """
    raw = str(text)
    s = _ID_BAD.sub("-", raw.lower()).strip("-") or "x"
    if s != raw:
        import hashlib

        s = f"{s}-{hashlib.sha256(raw.encode()).hexdigest()[:6]}" if _needs_hash(raw, s) else s
    return s


def _needs_hash(raw: str, s: str) -> bool:
    # plain names such as "model_A" or "Age group" map to readable slugs without a hash;
    # anything with other punctuation gets one (e.g. "<40" and ">40" must not collide)
    return bool(re.search(r"[^A-Za-z0-9_ \-.]", raw))


def _finite(x) -> bool:
    try:
        return x is not None and not (isinstance(x, float) and math.isnan(x)) and np.isfinite(float(x))
    except (TypeError, ValueError):
        return False


DASH = "\u2014"

#: Decimals, one decision each (docs/methods.md, "Numbers in tables"): a table shows every
#: estimate of one kind with one number of decimals. Proportions, AUCs, differences and
#: their intervals: ``ci``/``num`` with the ``digits`` the section chooses for the table
#: (2 by default); percentages whole (``pct``); p-values ``pvalue``; odds ratios
#: ``ratio_ci`` (``RATIO_DIGITS``); counts ``count``/``frac``.
PCT_DIGITS = 0
P_DIGITS = 3
RATIO_DIGITS = 2


def num(x, digits: int = 2) -> str:
    """A number rounded to ``digits`` decimals; em dash when missing."""
    if not _finite(x):
        return DASH
    if abs(float(x)) >= 1e5:  # e.g. an odds ratio under separation
        return f"{float(x):.1e}"
    return f"{float(x):.{digits}f}"


def _interval(est, low, high, show) -> str:
    if not _finite(est):
        return DASH
    if not (_finite(low) and _finite(high)):
        return show(est)
    return f"{show(est)} [{show(low)}, {show(high)}]"


def ci(est, low, high, digits: int = 2) -> str:
    """``"0.91 [0.88, 0.93]"``; the estimate alone when the interval is missing."""
    return _interval(est, low, high, lambda x: num(x, digits))


def ratio(x, digits: int = RATIO_DIGITS) -> str:
    """A ratio (odds ratio) with ``digits`` decimals; a positive ratio that would round to
    zero is shown as ``"< 0.01"`` (a ratio is never 0); em dash when missing."""
    if _finite(x) and 0 <= float(x) < 0.5 * 10 ** -digits:
        return f"< {10 ** -digits:.{digits}f}"
    return num(x, digits)


def ratio_ci(est, low, high, digits: int = RATIO_DIGITS) -> str:
    """``"2.31 [0.57, 9.28]"``, ``"< 0.01 [< 0.01, 0.03]"`` (``ratio``); the estimate
    alone when the interval is missing."""
    return _interval(est, low, high, lambda x: ratio(x, digits))


def ratio_reference(digits: int = RATIO_DIGITS) -> str:
    """The reference level's ratio, ``"1.00 (reference)"``: as many decimals as the others."""
    return f"{num(1.0, digits)} (reference)"


def count(x) -> str:
    """A whole number; em dash when missing."""
    return DASH if not _finite(x) else f"{int(round(float(x)))}"


def frac(k, n) -> str:
    """``"45/50"``."""
    return f"{count(k)}/{count(n)}"


def pct(k, n, digits: int = PCT_DIGITS) -> str:
    """``"45 (90%)"``: whole percentages (``PCT_DIGITS``); a count above 0 that would
    round to 0% reads ``"<1%"``, and one short of all that would round to 100%
    ``">99%"`` (decided on the counts: "1 (0%)" would say none)."""
    if not (_finite(k) and _finite(n)) or float(n) == 0:
        return f"{count(k)} ({DASH})"
    k, n = float(k), float(n)
    share = f"{100 * k / n:.{digits}f}"
    floor = 10.0 ** -digits
    if 0 < k < n and float(share) == 0:
        share = f"<{floor:g}"
    elif 0 < k < n and float(share) == 100:
        share = f">{100 - floor:g}"
    return f"{count(k)} ({share}%)"


def pvalue(p, floor=None) -> str:
    """``"0.043"`` (``P_DIGITS`` decimals), ``"< 0.001"`` below 0.001 (no p-value is shown
    as 0). ``floor``: the smallest p-value the method can give (a bootstrap p-value's
    resolution 2/(B + 1)); a p-value at it is shown as ``"\u2264 floor"`` rounded up to
    three decimals, or ``"< 0.001"`` when the floor is below 0.001 (never below the
    resolution, never more decimals than the other p-values)."""
    if not _finite(p):
        return DASH
    p = float(p)
    if floor is not None and _finite(floor) and p <= float(floor) * (1 + 1e-9):
        if float(floor) < 0.001:
            return "< 0.001"
        up = math.ceil(float(floor) * 10 ** P_DIGITS - 1e-9) / 10 ** P_DIGITS
        return f"\u2264 {up:.{P_DIGITS}f}"
    return "< 0.001" if p < 0.001 else f"{p:.{P_DIGITS}f}"


def median_iqr(med, q1, q3, digits: int = 1) -> str:
    """``"61.0 [52.0, 70.0]"``."""
    if not _finite(med):
        return DASH
    return f"{num(med, digits)} [{num(q1, digits)}, {num(q3, digits)}]"


def ci_vec(df, digits: int = 2, *, est="estimate", low="conf_low", high="conf_high"):
    """``ci`` over the rows of a DataFrame; returns a list of strings."""
    return [ci(e, lo, hi, digits) for e, lo, hi in zip(df[est], df[low], df[high])]


def human_list(items) -> str:
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
