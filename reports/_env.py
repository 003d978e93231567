"""The environment variables clinrel reads, checked before anything uses them (standard
library only: ``clinrel/__init__`` uses it before importing the statistics).

``SOURCE_DATE_EPOCH`` (https://reproducible-builds.org/specs/source-date-epoch/) dates the
report's PDF. It must be what ``date +%s`` prints: a whole number of seconds since
1970-01-01 00:00 UTC, from 0 to :data:`MAX_EPOCH` (9999-12-31 23:59:59 UTC, the last
date a PDF can hold); spaces around it are ignored, and an empty value counts as unset.
Anything else (``yesterday``, ``-5``, ``1.5``, ``1e9``, a number past year 9999) is
refused with ``MSG_SOURCE_DATE_EPOCH`` (the program: exit 2, before any work), not left
to the libraries that also read it (numpy at import, matplotlib's SVG and PDF writers),
which fail with a traceback.
"""
from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

EPOCH_VAR = "SOURCE_DATE_EPOCH"
#: 9999-12-31T23:59:59Z
MAX_EPOCH = 253402300799
MSG_SOURCE_DATE_EPOCH = (
    "SOURCE_DATE_EPOCH={value!r}: {why}; it must be a whole number of seconds since "
    "1970-01-01 00:00 UTC, from 0 to " + str(MAX_EPOCH) + " (year 9999), as `date +%s` "
    "prints; set it to one (e.g. export SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)) "
    "or unset it (unset SOURCE_DATE_EPOCH; the report's PDF is then dated 1980-01-01)")

_DIGITS = re.compile(r"[0-9]+\Z")


class EnvironmentVariableError(ValueError):
    """An environment variable clinrel cannot use; the message names it and the fix."""


def source_date_epoch(default: int) -> int:
    """``SOURCE_DATE_EPOCH`` as an int (``default`` when unset or empty), else
    :class:`EnvironmentVariableError` (``MSG_SOURCE_DATE_EPOCH``)."""
    raw = os.environ.get(EPOCH_VAR)
    if raw is None or not raw.strip():
        return default
    value = raw.strip()
    why = None
    if not _DIGITS.match(value):
        why = ("a negative number (a date before 1970)" if re.fullmatch(r"-[0-9]+", value)
               else "not a whole number")
    elif len(value) > 20 or int(value) > MAX_EPOCH:
        why = "too large (after the year 9999)"
    if why:
        raise EnvironmentVariableError(MSG_SOURCE_DATE_EPOCH.format(value=raw[:60], why=why))
    return int(value)


def check() -> str | None:
    """The message for an unusable environment variable, else None; a usable
    ``SOURCE_DATE_EPOCH`` is written back in its plain form (digits only), and an empty one
    is removed, so that every library and tool clinrel starts reads a clean value."""
    try:
        source_date_epoch(0)
    except EnvironmentVariableError as exc:
        return str(exc)
    raw = os.environ.get(EPOCH_VAR)
    if raw is not None:
        if raw.strip():
            os.environ[EPOCH_VAR] = raw.strip()
        else:
            del os.environ[EPOCH_VAR]
    return None


@contextlib.contextmanager
def unusable_epoch_hidden() -> Iterator[None]:
    """While importing the libraries: a ``SOURCE_DATE_EPOCH`` that numpy cannot read at
    import (it calls ``int()`` on it) is taken out of the environment, and put back
    after, so that the program can refuse it with its message instead of a traceback."""
    raw = os.environ.get(EPOCH_VAR)
    try:
        source_date_epoch(0)
        usable = raw is None or bool(raw.strip())
    except EnvironmentVariableError:
        usable = False
    if usable:
        yield
        return
    del os.environ[EPOCH_VAR]
    try:
        yield
    finally:
        os.environ[EPOCH_VAR] = raw
