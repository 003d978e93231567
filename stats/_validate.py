"""Argument checks at the entry of every public ``stats`` function.

The command line refuses bad input before any work with a message that names the file,
the column, a few rows and the fix (:mod:`stats.schema`). A statistician calling
``stats`` from a notebook gets the same: each public function starts with the checks
here, which raise :class:`~stats.schema.ContractError` naming the function, the
argument, the offending values (with their 0-based ``index`` in the flattened array) and
the fix. The messages are the ``MSG_*`` constants below, so tests match them.

One rule per kind of argument:

* :func:`counts`: counts are whole numbers >= 0 (``NaN``, ``inf``, ``-1`` and ``2.5``
  are refused; effective counts, with ``whole=False``, may be fractional but are
  finite and >= 0);
* :func:`finite` (arrays) and :func:`threshold`: thresholds, breaks and other numbers a
  result is computed *at* are finite (a ``NaN`` threshold would call every case
  negative);
* :func:`level`: ``conf_level`` lies strictly between 0 and 1;
* :func:`number`: any other number in a stated interval (``alpha``, a prior, ...);
* :func:`whole`: one whole number >= a minimum (``n_boot``, ``n_bins``, ``k``, ...);
* :func:`same_length` and :func:`broadcast`: arrays that pair up element by element;
* :func:`table`: a DataFrame with the required columns and, unless an empty result is
  meaningful, at least one row; :func:`nonempty` the same for arrays.

Empty inputs, one rule for the whole API: a function whose result always has a row for
a non-empty input (every table with an ``overall`` row, every fit, every scalar metric)
refuses an empty input (:data:`MSG_EMPTY`: no result can exist). A function whose rows
follow the input's items one to one returns the empty result with all its columns:
the vectorized count primitives (``proportion_ci``, ``newcombe_diff_ci``,
``mcnemar_exact``: zero cells in, zero cells out), the row-wise transforms
(``scan_level``, ``add_bins``: zero cases in, zero cases out) and the tables of pairs
or values found in an evidence table (``extractor_agreement``,
``misclassification_from_review``: an evidence table from one extractor has no pairs
either). Each function's docstring says which. Within a table an empty *cell* (a
subgroup level without cases) is a row with ``flag`` "empty", as ever.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from stats.errors import ContractError

MSG_COUNT = ("{func}: {arg} must hold counts (whole numbers >= 0); {at}; pass the number of "
             "cases (an integer), not a proportion, a missing value or an estimate")
MSG_EFFECTIVE = ("{func}: {arg} must hold finite numbers >= 0 (effective counts); {at}; pass "
                 "the effective number of successes or trials")
MSG_ORDER = ("{func}: {arg} must not exceed {other}; {at}; check the counts (successes "
             "are among the trials)")
MSG_FINITE = "{func}: {arg} must be finite numbers; {at}; {fix}"
MSG_NAN = "{func}: {arg} must be numbers, not NaN; {at}; {fix}"
MSG_LEVEL = ("{func}: conf_level must lie strictly between 0 and 1; got {value}; write the "
             "confidence level as a proportion, e.g. 0.95")
MSG_RANGE = "{func}: {arg} must be a number in {interval}; got {value}; {fix}"
MSG_FINITE_ONE = "{func}: {arg} must be a finite number; got {value}; {fix}"
MSG_WHOLE = "{func}: {arg} must be a whole number >= {minimum}; got {value}; {fix}"
MSG_LENGTH = ("{func}: {args} must have the same length (one value per {unit}); got lengths "
              "{lengths}; pass arrays of equal length")
MSG_SHAPE = ("{func}: {args} must have the same shape, or be scalars (one value per cell); "
             "got shapes {shapes}; pass arrays of equal length")
MSG_EMPTY = ("{func}: {arg} has no {unit}s, so there is nothing to estimate; pass at least "
             "one {unit}")
MSG_NOT_TABLE = ("{func}: {arg} must be a pandas DataFrame; got {kind}; build one with "
                 "pd.DataFrame(...){hint}")
MSG_COLUMNS = ("{func}: {arg} lacks column(s) {missing} (columns present: {present}); "
               "{fix}")
MSG_NOT_NUMBER = "{func}: {arg} must be numbers; got {value}; {fix}"

#: values shown in a message
SHOWN = 5


# --------------------------------------------------------------------------- text


def _show(value) -> str:
    """A value as a message shows it: ``nan``, ``-1``, ``2.5``, ``'a'``, ``True``."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value.is_integer() and abs(value) < 2 ** 53:
            return str(int(value)) if not isinstance(value, bool) else str(value)
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _at(bad: np.ndarray, *columns: tuple[str | None, np.ndarray]) -> str:
    """'index 3 has 2.5' / 'indices 0, 4 have nan, -1 (and 2 more)'; with several named
    columns 'index 0 has successes=3, n=2'."""
    bad = np.asarray(bad).ravel()
    shown = bad[:SHOWN]
    more = f" (and {len(bad) - SHOWN} more)" if len(bad) > SHOWN else ""
    if len(columns) == 1 and columns[0][0] is None:
        vals = ", ".join(_show(v) for v in np.asarray(columns[0][1]).ravel()[shown])
    else:
        vals = "; ".join(", ".join(f"{name}={_show(np.asarray(v).ravel()[i])}"
                                   for name, v in columns) for i in shown)
    where = ", ".join(str(int(i)) for i in shown)
    if len(bad) == 1:
        return f"index {where} has {vals}"
    return f"indices {where}{more} have {vals}"


# --------------------------------------------------------------------------- arrays


def _floats(value, *, func: str, arg: str, fix: str, booleans: bool = False) -> np.ndarray:
    """``value`` as a float64 array; text, objects that are not numbers and (unless
    ``booleans``, e.g. for 0/1 labels) booleans are refused (:data:`MSG_NOT_NUMBER`).
    Numeric arrays and Series are converted without a pass over their elements."""
    arr = np.asarray(value)
    if arr.dtype.kind in "iuf" or (booleans and arr.dtype.kind == "b"):
        return arr.astype("float64", copy=False)
    odd = arr.dtype.kind == "b" or arr.dtype.kind in "USVMm" or (
        arr.dtype == object and any(isinstance(v, (bool, np.bool_, str, bytes))
                                    for v in arr.ravel()[:1000]))
    try:
        if not odd:
            return np.asarray(arr, dtype="float64")
    except (TypeError, ValueError):
        pass
    shown = ", ".join(_show(v) for v in arr.ravel()[:SHOWN])
    raise ContractError(MSG_NOT_NUMBER.format(func=func, arg=arg, value=shown or "[]",
                                              fix=fix))


def counts(value, *, func: str, arg: str, whole: bool = True) -> np.ndarray:
    """``value`` as a float64 array of counts: finite, >= 0 and (``whole``) whole numbers.

    ``whole=False`` takes effective counts (Korn & Graubard's ``p n_eff`` of ``n_eff``),
    which may be fractional; ``NaN`` is refused either way (a missing count is not a
    count: say "not estimable" by leaving the cell out)."""
    fix = "pass counts"
    arr = _floats(value, func=func, arg=arg, fix=fix)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(arr) & (arr >= 0)
        if whole:
            ok &= arr == np.round(arr)
    if not ok.all():
        bad = np.flatnonzero(~ok.ravel())
        at = _at(bad, (None, arr))
        raise ContractError((MSG_COUNT if whole else MSG_EFFECTIVE).format(func=func, arg=arg,
                                                                            at=at))
    return arr


def at_most(x: np.ndarray, n: np.ndarray, *, func: str, arg: str, other: str) -> None:
    """Refuse ``x > n`` element-wise (successes above the trials); ``x``, ``n`` broadcast."""
    x, n = np.broadcast_arrays(x, n)
    bad = np.flatnonzero((x > n).ravel())
    if len(bad):
        raise ContractError(MSG_ORDER.format(func=func, arg=arg, other=other,
                                             at=_at(bad, (arg, x), (other, n))))


def finite(value, *, func: str, arg: str,
           fix: str = "replace missing values and infinities, or drop them",
           infinite: bool = False) -> np.ndarray:
    """``value`` as a float64 array of finite numbers (NaN and infinities refused;
    ``infinite``: infinities allowed, e.g. an open-ended bin, NaN still refused)."""
    arr = _floats(value, func=func, arg=arg, fix=fix)
    ok = ~np.isnan(arr) if infinite else np.isfinite(arr)
    if not ok.all():
        bad = np.flatnonzero(~ok.ravel())
        raise ContractError((MSG_NAN if infinite else MSG_FINITE).format(
            func=func, arg=arg, at=_at(bad, (None, arr)), fix=fix))
    return arr


def broadcast(*, func: str, **arrays: np.ndarray) -> list[np.ndarray]:
    """The arrays broadcast together, or :data:`MSG_SHAPE` naming their shapes."""
    try:
        return list(np.broadcast_arrays(*arrays.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in arrays.items())
        raise ContractError(MSG_SHAPE.format(func=func, args=", ".join(arrays),
                                             shapes=shapes)) from None


def same_length(*, func: str, unit: str = "case", **arrays) -> int:
    """The common length of 1-D ``arrays`` (``None`` values skipped), or
    :data:`MSG_LENGTH` naming every length."""
    given = {k: v for k, v in arrays.items() if v is not None}
    lengths = {k: (len(v) if hasattr(v, "__len__") and np.ndim(v) else np.size(v))
               for k, v in given.items()}
    if len(set(lengths.values())) > 1:
        raise ContractError(MSG_LENGTH.format(
            func=func, args=", ".join(given), unit=unit,
            lengths=", ".join(f"{k} {n}" for k, n in lengths.items())))
    return next(iter(lengths.values()), 0)


def nonempty(value, *, func: str, arg: str, unit: str = "case") -> None:
    """Refuse an array (or any sized input) with no elements (:data:`MSG_EMPTY`)."""
    if np.size(value) == 0 if not hasattr(value, "__len__") else len(value) == 0:
        raise ContractError(MSG_EMPTY.format(func=func, arg=arg, unit=unit))


# --------------------------------------------------------------------------- scalars


def _scalar(value, *, func: str, arg: str, fix: str) -> float:
    if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
        raise ContractError(MSG_NOT_NUMBER.format(func=func, arg=arg, value=_show(value),
                                                  fix=fix))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ContractError(MSG_NOT_NUMBER.format(func=func, arg=arg, value=_show(value),
                                                  fix=fix)) from None


def level(conf_level, *, func: str) -> float:
    """``conf_level`` as a float strictly between 0 and 1 (:data:`MSG_LEVEL`)."""
    try:
        v = _scalar(conf_level, func=func, arg="conf_level", fix="e.g. 0.95")
    except ContractError:
        v = math.nan
    if not 0 < v < 1:
        raise ContractError(MSG_LEVEL.format(func=func, value=_show(conf_level)))
    return v


def number(value, *, func: str, arg: str, lo: float = -math.inf, hi: float = math.inf,
           closed: str = "neither", fix: str = "", optional: bool = False) -> float | None:
    """``value`` as a finite float in the interval ``lo``..``hi`` (``closed``: "neither",
    "left", "right" or "both" ends included); ``None`` passes when ``optional``."""
    if value is None and optional:
        return None
    left, right = closed in ("left", "both"), closed in ("right", "both")
    interval = f"{'[' if left else '('}{_show(lo)}, {_show(hi)}{']' if right else ')'}"
    fix = fix or ("give a finite number" if math.isinf(lo) and math.isinf(hi)
                  else "give a number in that interval")
    v = _scalar(value, func=func, arg=arg, fix=fix)
    ok = (math.isfinite(v) and (v >= lo if left else v > lo) and (v <= hi if right else v < hi))
    if not ok:
        unbounded = math.isinf(lo) and math.isinf(hi)
        raise ContractError((MSG_FINITE_ONE if unbounded else MSG_RANGE).format(
            func=func, arg=arg, interval=interval, value=_show(value), fix=fix))
    return v


def whole(value, *, func: str, arg: str, minimum: int = 1, fix: str = "",
          optional: bool = False) -> int | None:
    """``value`` as an int >= ``minimum``: an integer or a whole-valued float (``2.0``);
    ``True``, ``2.5``, ``NaN`` and infinities are refused. ``None`` passes when
    ``optional``."""
    if value is None and optional:
        return None
    fix = fix or f"write a whole number of at least {minimum}"
    ok = not isinstance(value, (bool, np.bool_)) and np.ndim(value) == 0
    v = math.nan
    if ok:
        try:
            v = float(value)
        except (TypeError, ValueError):
            ok = False
    ok = ok and math.isfinite(v) and v.is_integer() and v >= minimum
    if not ok:
        raise ContractError(MSG_WHOLE.format(func=func, arg=arg, minimum=minimum,
                                             value=_show(value), fix=fix))
    return int(v)


# --------------------------------------------------------------------------- tables


def table(frame, *, func: str, arg: str = "cases", columns: Iterable[str] = (),
          empty: bool = False, unit: str = "row",
          fix: str = "add or rename them (stats.read_cases validates a cases table)",
          hint: str = " or stats.read_cases(path)") -> pd.DataFrame:
    """``frame`` if it is a DataFrame with ``columns``, and (unless ``empty``, where an
    empty result is meaningful) at least one row."""
    if not isinstance(frame, pd.DataFrame):
        raise ContractError(MSG_NOT_TABLE.format(func=func, arg=arg,
                                                 kind=type(frame).__name__, hint=hint))
    missing = [c for c in dict.fromkeys(columns) if c not in frame.columns]
    if missing:
        present = ", ".join(map(repr, list(frame.columns)[:15]))
        raise ContractError(MSG_COLUMNS.format(func=func, arg=arg,
                                               missing=", ".join(map(repr, missing)),
                                               present=present or "none", fix=fix),
                            column=missing[0])
    if not empty and len(frame) == 0:
        raise ContractError(MSG_EMPTY.format(func=func, arg=arg, unit=unit))
    return frame


def threshold(value, *, func: str, arg: str = "threshold") -> None:
    """A threshold (a number, or ``{model: number}``) is a finite number
    (:data:`MSG_FINITE_ONE`); ``None`` (not given) passes."""
    if value is None:
        return
    items = value.items() if isinstance(value, Mapping) else [(None, value)]
    for key, v in items:
        name = arg if key is None else f"{arg}[{key!r}]"
        number(v, func=func, arg=name, fix="give the prespecified number of predicted "
               "voxels (or score), e.g. 50")


def renamed(func: str, old: str, new: str, old_value, new_value, default):
    """One name per concept: ``old=`` still works for one release, with a
    DeprecationWarning naming ``new=``; returns the value to use."""
    if old_value is None:
        return new_value
    import warnings

    warnings.warn(f"{func}({old}=) is deprecated and will be removed; use {new}=",
                  DeprecationWarning, stacklevel=3)
    if new_value != default and new_value != old_value:
        raise ContractError(f"{func}: {old}={old_value!r} and {new}={new_value!r} disagree; "
                            f"give {new}= only")
    return old_value
