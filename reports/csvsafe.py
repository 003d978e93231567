"""Spreadsheet-safe CSV: text cells cannot become formulas (OWASP "CSV injection").

Every CSV clinrel writes (a report's ``tables/*.csv``, ``--out FILE.csv`` of any command,
``clinrel crs`` tables) goes through :func:`write_csv`. A text cell (or column name) that
begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is written with a single
quote in front (``=HYPERLINK(...)`` -> ``'=HYPERLINK(...)``), so Excel, LibreOffice and
Google Sheets show it as text instead of evaluating it. Numeric columns are written
unchanged at full precision (a negative number in a float column is a number, not text),
and a text cell that is itself a plain number (``-3``, ``+0.5``, ``-inf``) is left as it
is: a spreadsheet reads it as that number, which runs nothing. To get the original text
back, drop the one leading quote of such cells.

Numbers are written with :data:`SIGNIFICANT_DIGITS` (12) significant digits (``%.12g``):
more than any estimate here is accurate to, and few enough that the last bits a CPU's
BLAS kernel or SIMD width changes do not reach the file (a whole number is written
without a decimal point: ``888``, not ``888.0``).
"""
from __future__ import annotations

import re

import pandas as pd

#: first characters that make a spreadsheet treat a cell as a formula (OWASP)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)",
                           re.IGNORECASE)


def neutralise_text(value):
    """``value`` with a leading ``'`` when it is text that a spreadsheet would run."""
    if (isinstance(value, str) and value[:1] in FORMULA_START
            and not _PLAIN_NUMBER.fullmatch(value)):
        return "'" + value
    return value


def _is_text(dtype) -> bool:
    return dtype == object or isinstance(dtype, (pd.StringDtype, pd.CategoricalDtype))


def neutralise(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose text cells and column names cannot run as formulas.

    Only object, string and categorical columns are looked at; numeric, boolean and
    datetime columns are returned untouched.
    """
    out = df.copy(deep=False)
    for i, dtype in enumerate(df.dtypes):
        if not _is_text(dtype):
            continue
        col = df.iloc[:, i]
        values = col.astype(object)
        fixed = values.map(neutralise_text)
        if not fixed.equals(values):
            out.isetitem(i, fixed)
    out.columns = [neutralise_text(c) for c in df.columns]
    return out


#: significant digits of every number clinrel writes to CSV
SIGNIFICANT_DIGITS = 12


def _digits(df: pd.DataFrame) -> pd.DataFrame:
    """Float columns with -0.0 made 0.0; floats held in object columns written at the
    same significant digits as the float columns (``%.12g``)."""
    out = df.copy(deep=False)
    fmt = f"%.{SIGNIFICANT_DIGITS}g"
    for i, dtype in enumerate(df.dtypes):
        col = df.iloc[:, i]
        if pd.api.types.is_float_dtype(dtype):
            out.isetitem(i, col + 0.0)           # -0.0 + 0.0 is 0.0
        elif dtype == object:
            is_float = col.map(lambda v: isinstance(v, float) and v == v)
            if is_float.any():
                out.isetitem(i, col.where(~is_float, col[is_float].map(
                    lambda v: fmt % (v + 0.0))))
    return out


def write_csv(df: pd.DataFrame, path, **kwargs) -> None:
    """``df.to_csv(path, index=False, **kwargs)`` with formula-like text neutralised and
    numbers at :data:`SIGNIFICANT_DIGITS` significant digits."""
    kwargs.setdefault("lineterminator", "\n")  # the same bytes on every platform
    kwargs.setdefault("float_format", f"%.{SIGNIFICANT_DIGITS}g")
    neutralise(_digits(df)).to_csv(path, index=False, **kwargs)
