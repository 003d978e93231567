"""Formatting and escaping: every number and user string passes through here.

Rounding lives only here (``stats`` never rounds). User strings (site, model and group
names) may hold ``< & " ' # $ @ * _ [ ]``; each output language gets its own escaper:
``md`` (Pandoc/Quarto markdown prose), ``html`` (table cells), ``typst_str`` (a typst
string literal, used for every table cell and caption in typst).
"""
from __future__ import annotations

import html as _html
import math
import re
import string

import numpy as np

_MD_SPECIAL = set(string.punctuation)


def md(text) -> str:
    """Escape ``text`` for Pandoc markdown prose: backslash before every ASCII punctuation."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s)


def html(text) -> str:
    """Escape ``text`` for an HTML element or attribute."""
    return _html.escape(str(text), quote=True)


def typst_str(text) -> str:
    """``text`` as a typst string literal (code mode), quotes included."""
    s = str(text)
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "")
    s = s.replace("\t", " ")
    return f'"{s}"'


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


def num(x, digits: int = 2) -> str:
    """A number rounded to ``digits`` decimals; em dash when missing."""
    if not _finite(x):
        return DASH
    if abs(float(x)) >= 1e5:  # e.g. an odds ratio under separation
        return f"{float(x):.1e}"
    return f"{float(x):.{digits}f}"


def ci(est, low, high, digits: int = 2) -> str:
    """``"0.91 [0.88, 0.93]"``; the estimate alone when the interval is missing."""
    if not _finite(est):
        return DASH
    if not (_finite(low) and _finite(high)):
        return num(est, digits)
    return f"{num(est, digits)} [{num(low, digits)}, {num(high, digits)}]"


def count(x) -> str:
    """A whole number; em dash when missing."""
    return DASH if not _finite(x) else f"{int(round(float(x)))}"


def frac(k, n) -> str:
    """``"45/50"``."""
    return f"{count(k)}/{count(n)}"


def pct(k, n, digits: int = 1) -> str:
    """``"45 (90.0%)"``."""
    if not (_finite(k) and _finite(n)) or float(n) == 0:
        return f"{count(k)} ({DASH})"
    return f"{count(k)} ({100 * float(k) / float(n):.{digits}f}%)"


def pvalue(p) -> str:
    """``"<0.001"`` below 0.001, else three decimals."""
    if not _finite(p):
        return DASH
    return "<0.001" if float(p) < 0.001 else f"{float(p):.3f}"


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
