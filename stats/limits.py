"""Resource caps: work that could exhaust memory or run for days is estimated and refused
before it starts, above a stated cap the user can raise explicitly.

The caps (this module is their one definition; the README's "Safety" section quotes it):

``max_memory_gb``
    Estimated peak memory of one step (a bootstrap, the CRS bootstrap, an ECE bootstrap).
    Default: ``DEFAULT_MEMORY_FRACTION`` (80%) of this machine's physical memory, or
    ``FALLBACK_MEMORY_GB`` where that is unknown.
``max_rows``
    Rows of one input table, read from a parquet file's metadata (or by counting a CSV's
    lines) before the table is loaded. Default ``DEFAULT_MAX_ROWS``.
``max_hours``
    Estimated single-core compute time of one step. Default ``DEFAULT_MAX_HOURS``.
``max_file_gb``
    Size of one input table file, read from the file system (``stat``) before a byte of
    it is read. Default ``DEFAULT_MAX_FILE_GB``.
``max_columns``
    Columns of one input table: a CSV's header line (read alone, at most
    ``MAX_HEADER_BYTES``) or a parquet file's schema, before the table is parsed.
    Default ``DEFAULT_MAX_COLUMNS``.

Each is raised (or lowered) by the plan, ``limits: {max_memory_gb: 64, max_rows: 1e8,
max_hours: 48}``, or by the environment variables in ``ENV``; the plan wins over the
environment, which wins over the default. The plan's counts that size an allocation
(``ESTIMATED``: replicate counts, weight draws, imputations) are bounded by the estimates
of their steps against ``max_memory_gb`` and ``max_hours``. The other caps are fixed:
plan and reference files larger than ``MAX_YAML_BYTES``, YAML aliases (``*name``: the
"billion laughs" bomb), and the plan's list lengths and its other counts
(``COUNT_CAPS``: bin breaks, subgroup axes, quadrature points), set far above what any
study needs. :func:`cap_table` lists every cap (name, value, what it bounds, how to
raise it); docs/plan.md prints it.

Estimates follow the code they guard (block sizes of :mod:`stats.bootstrap`, the arrays
each step keeps), so they scale with the data the way the step does; they are meant to
be within a factor of about two, erring high. Refusals raise
:class:`~stats.schema.ContractError` (exit 2 on the command line) naming the setting that
asked for the work and how to raise the cap.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stats.errors import ContractError

#: share of physical memory one step may use by default
DEFAULT_MEMORY_FRACTION = 0.8
#: the memory cap where the physical memory cannot be read
FALLBACK_MEMORY_GB = 16.0
#: rows of one input table (85,000 cases x 10 models is 850,000)
DEFAULT_MAX_ROWS = 50_000_000
#: estimated single-core hours of one step
DEFAULT_MAX_HOURS = 24.0
#: size of one input table file, in GB (10**9 bytes): 20 times a BenchX-scale CSV
#: (850,000 rows x 20 columns is about 100 MB)
DEFAULT_MAX_FILE_GB = 2.0
#: columns of one input table (a study's tables have tens)
DEFAULT_MAX_COLUMNS = 10_000
#: the longest CSV header line read (10,000 columns of 400-byte names)
MAX_HEADER_BYTES = 4 << 20
#: largest plan or reference YAML file read (a plan is a few kilobytes)
MAX_YAML_BYTES = 1 << 20
#: environment variables that set the caps (the plan's ``limits`` block wins over them)
ENV = {"max_memory_gb": "CLINREL_MAX_MEMORY_GB", "max_rows": "CLINREL_MAX_ROWS",
       "max_hours": "CLINREL_MAX_HOURS", "max_file_gb": "CLINREL_MAX_FILE_GB",
       "max_columns": "CLINREL_MAX_COLUMNS"}
CAPS = tuple(ENV)

#: the plan's counts that size an allocation, and the estimate that bounds each (against
#: ``max_memory_gb`` and ``max_hours``: raised with the machine, so not fixed): checked
#: when the plan is read with the smallest data (one cluster, encoder, row), and again
#: with the data's real sizes before any statistic
ESTIMATED: dict[str, str] = {
    "detection.bootstrap.n_boot": "stats.bootstrap.cluster_bootstrap_work",
    "crs.bootstrap.n_boot": "stats.crs_resample.crs_bootstrap_work",
    "calibration.bootstrap.n_boot": "stats.calibration.ece_bootstrap_work",
    "crs.n_weights": "stats.ranking.ranking_stability_work",
    "metadata.n_imputations": "stats.label_error.imputation_work",
    "detection.operating_points.n_boot": "stats.operating.roc_bootstrap_work",
    "detection.lesions.n_boot": "stats.localization.froc_bootstrap_work",
    "detection.gaps.n_boot": "stats.gaps.gap_bootstrap_work",
}
#: fixed caps on the plan's other counts and its list lengths (and the commands' options
#: that set them): key -> (cap, what it bounds). Each is far above what a study needs (a
#: few bins and axes) and bounds work that no estimate covers (a list of 100,000 bin
#: breaks gave no answer in 180 s). ``<column>``: any bin; ``[i]``: any axis.
COUNT_CAPS: dict[str, tuple[int, str]] = {
    # the plan's own list caps are declared with their keys (analysis.plan: ``cap``)
    "simulate benchx --scale": (10_000_000, "simulated cases"),
    "simulate benchx --models": (1_000, "simulated models"),
    "simulate crs --scale": (10_000, "simulated encoders"),
}
#: message of a command option above its fixed cap
MSG_OPTION_CAP = ("{option} {value:,}: above the cap of {cap:,} {what}; {hint}")

#: throughput assumed by the time estimates (one core, conservative for 2026 hardware)
SECONDS_PER_DRAW = 2e-8        # one random index drawn and counted (bootstrap)
FLOPS_PER_SECOND = 2e10        # float32/float64 BLAS products
SECONDS_PER_ELEMENT = 2e-8     # one element of a vectorized NumPy pass

MSG_MEMORY = ("{what}: the estimated memory is {need} ({detail}), above the cap of {cap} "
              "({origin}); lower {setting}, or raise the cap: limits: {{max_memory_gb: "
              "{suggest}}} in the plan, or the environment variable "
              "CLINREL_MAX_MEMORY_GB={suggest}")
MSG_TIME = ("{what}: the estimated compute time is {need} ({detail}), above the cap of {cap} "
            "({origin}); lower {setting}, or raise the cap: limits: {{max_hours: {suggest}}} in "
            "the plan, or the environment variable CLINREL_MAX_HOURS={suggest}")
MSG_ROWS = ("{source}: the table has {rows:,} rows ({how}), above the cap of {cap:,} rows "
            "({origin}); filter or split the table, or raise the cap: limits: {{max_rows: "
            "{rows}}} in the plan, or the environment variable CLINREL_MAX_ROWS={rows}")
MSG_FILE_SIZE = ("{source}: the file is {size} ({bytes:,} bytes), above the cap of {cap} "
                 "({origin}) for one input table; check that this is the right file, or "
                 "raise the cap: limits: {{max_file_gb: {suggest}}} in the plan, or the "
                 "environment variable CLINREL_MAX_FILE_GB={suggest}")
MSG_COLUMNS = ("{source}: the table has {n:,} columns ({how}), above the cap of {cap:,} "
               "({origin}); keep the columns the analysis uses, or raise the cap: limits: "
               "{{max_columns: {n}}} in the plan, or the environment variable "
               "CLINREL_MAX_COLUMNS={n}")
MSG_HEADER_LONG = ("{source}: the first line (the header) is longer than {cap:,} bytes, so "
                   "this is not a table's header row (or it has far more than {columns:,} "
                   "columns); check the file: a CSV starts with one line of column names")
MSG_COUNT_CAP = ("{file}: key '{key}' is {value:,}, above the cap of {cap:,} {what}; a study "
                 "needs far fewer ({hint}), and more would exhaust memory or time before "
                 "any result: lower it")
MSG_LIST_CAP = ("{file}: key '{key}' lists {n:,} {what}, above the cap of {cap:,}; a study "
                "has far fewer: shorten the list")
MSG_ENV = ("environment variable {name}={value!r}: must be a positive number; unset it or "
           "write e.g. {name}=32")
MSG_LIMIT_VALUE = ("{file}: key 'limits.{key}' must be a positive {kind}; got {value!r}; write "
                   "e.g. {key}: {example}")
MSG_LIMIT_KEY = ("{file}: unknown key '{key}' under 'limits'; allowed keys: {allowed}; remove "
                 "it or fix its spelling")
MSG_YAML_SIZE = ("{source}: the file is {size:,} bytes, above the {cap:,}-byte limit for a "
                 "YAML {kind}; a {kind} is a few kilobytes: check that this is the right file")
MSG_YAML_MERGE = ("{source}: line {line}: YAML merge keys (<<) are not allowed in a {kind} "
                  "(their keys can override or hide others unseen); write the keys out")
MSG_YAML_DUPLICATE = ("{source}: key {key!r} is written twice in this {kind} ({where}); YAML "
                      "would silently keep the last one: keep one")
MSG_YAML_ALIAS = ("{source}: line {line}: YAML aliases (*{name}) are not allowed in a {kind} "
                  "(they can expand a small file into billions of values); write the values "
                  "out in full instead of using &anchors and *aliases")
MSG_YAML_DEPTH = ("{source}: the YAML is nested too deeply to read; a {kind} is a few levels "
                  "of key: value lines")
MSG_YAML_SYNTAX = "{source}: not valid YAML ({detail}); check the indentation and quotes"
MSG_YAML_ENCODING = ("{source}: not valid UTF-8 text (byte {pos}); re-save the file as UTF-8")

_EXAMPLES = {"max_memory_gb": (float, "a number of gigabytes", 64),
             "max_rows": (int, "whole number of rows", 100_000_000),
             "max_hours": (float, "number of hours", 48),
             "max_file_gb": (float, "number of gigabytes", 8),
             "max_columns": (int, "whole number of columns", 20_000)}


# --------------------------------------------------------------------------- caps


@dataclass(frozen=True)
class Caps:
    """The caps in force: values and, per cap, where it came from (for messages)."""

    max_memory_gb: float
    max_rows: int
    max_hours: float
    origin: Mapping[str, str]
    max_file_gb: float = DEFAULT_MAX_FILE_GB
    max_columns: int = DEFAULT_MAX_COLUMNS


_OVERRIDES: contextvars.ContextVar[tuple[Mapping[str, float], str] | None] = \
    contextvars.ContextVar("clinrel_limits", default=None)


def physical_memory_gb() -> float | None:
    """This machine's physical memory in GB (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return None


def _default_memory_gb() -> tuple[float, str]:
    phys = physical_memory_gb()
    if phys is None:
        return FALLBACK_MEMORY_GB, "default"
    return DEFAULT_MEMORY_FRACTION * phys, (f"default: {DEFAULT_MEMORY_FRACTION:.0%} of this "
                                            f"machine's {phys:.0f} GB")


def _env_value(name: str) -> float | None:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ContractError(MSG_ENV.format(name=name, value=text))
    return value


def current() -> Caps:
    """The caps in force: the active plan's ``limits`` (:func:`using`), else the
    environment (``ENV``), else the defaults."""
    values: dict[str, float] = {}
    origin: dict[str, str] = {}
    mem, mem_origin = _default_memory_gb()
    defaults = {"max_memory_gb": (mem, mem_origin), "max_rows": (DEFAULT_MAX_ROWS, "default"),
                "max_hours": (DEFAULT_MAX_HOURS, "default"),
                "max_file_gb": (DEFAULT_MAX_FILE_GB, "default"),
                "max_columns": (DEFAULT_MAX_COLUMNS, "default")}
    active = _OVERRIDES.get()
    for cap in CAPS:
        if active is not None and cap in active[0]:
            values[cap], origin[cap] = active[0][cap], f"limits.{cap} in {active[1]}"
            continue
        env = _env_value(ENV[cap])
        if env is not None:
            values[cap], origin[cap] = env, f"environment variable {ENV[cap]}"
        else:
            values[cap], origin[cap] = defaults[cap]
    return Caps(max_memory_gb=float(values["max_memory_gb"]), max_rows=int(values["max_rows"]),
                max_hours=float(values["max_hours"]), origin=origin,
                max_file_gb=float(values["max_file_gb"]),
                max_columns=int(values["max_columns"]))


@contextlib.contextmanager
def using(overrides: Mapping[str, float] | None, source: str = "the plan") -> Iterator[Caps]:
    """Make ``overrides`` (a validated plan ``limits`` block) the caps inside the block."""
    token = _OVERRIDES.set((dict(overrides or {}), source))
    try:
        yield current()
    finally:
        _OVERRIDES.reset(token)


def parse_limits(raw: Any, *, file: str) -> dict[str, float]:
    """Validate a plan's ``limits`` block (keys ``CAPS``: ``max_memory_gb``, ``max_rows``,
    ``max_hours``, ``max_file_gb``, ``max_columns``)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ContractError(f"{file}: key 'limits' must be a mapping such as "
                            f"limits: {{max_memory_gb: 64}}; got {raw!r}")
    out: dict[str, float] = {}
    for key, value in raw.items():
        if key not in _EXAMPLES:
            raise ContractError(MSG_LIMIT_KEY.format(file=file, key=key, allowed=", ".join(CAPS)))
        kind, noun, example = _EXAMPLES[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value) and value > 0
        if ok and kind is int:
            ok = float(value).is_integer()
        if not ok:
            raise ContractError(MSG_LIMIT_VALUE.format(file=file, key=key, kind=noun, value=value,
                                                       example=example))
        out[key] = int(value) if kind is int else float(value)
    return out


# --------------------------------------------------------------------------- work


@dataclass(frozen=True)
class Work:
    """An estimate of one step: peak bytes, single-core seconds, and what asked for it."""

    what: str
    setting: str
    memory_bytes: float
    seconds: float
    detail: str = ""


def _gb(b: float) -> str:
    return f"{b / 1e9:,.1f} GB" if b < 1e13 else f"{b / 1e9:.3g} GB"


def _hours(s: float) -> str:
    return f"{s / 3600:,.1f} hours" if s < 3.6e9 else f"{s / 3600:.3g} hours"


def check(work: Work, caps: Caps | None = None) -> Work:
    """Raise :class:`ContractError` when ``work`` is above the memory or time cap."""
    caps = caps or current()
    if work.memory_bytes > caps.max_memory_gb * 1e9:
        need = work.memory_bytes / 1e9
        raise ContractError(MSG_MEMORY.format(
            what=work.what, need=_gb(work.memory_bytes), detail=work.detail or "estimate",
            cap=f"{caps.max_memory_gb:,.1f} GB", origin=caps.origin["max_memory_gb"],
            setting=work.setting, suggest=_suggest(need)))
    if work.seconds > caps.max_hours * 3600:
        raise ContractError(MSG_TIME.format(
            what=work.what, need=_hours(work.seconds), detail=work.detail or "estimate",
            cap=f"{caps.max_hours:,.1f} hours", origin=caps.origin["max_hours"],
            setting=work.setting, suggest=_suggest(work.seconds / 3600)))
    return work


def _suggest(x: float) -> str:
    if not math.isfinite(x) or x > 1e9:
        return "N"
    return str(int(math.ceil(x * 1.25)))


# --------------------------------------------------------------------------- counts


def check_option(value: int, *, command: str, option: str, hint: str) -> int:
    """Refuse a command option above its fixed cap (``COUNT_CAPS["<command> <option>"]``)."""
    cap, what = COUNT_CAPS[f"{command} {option}"]
    if int(value) > cap:
        raise ContractError(MSG_OPTION_CAP.format(option=option, value=int(value), cap=cap,
                                                  what=what, hint=hint))
    return value


def check_rows(n_rows: int, *, source: str, how: str) -> None:
    """Refuse a table of more than ``max_rows`` rows (``how``: how they were counted)."""
    caps = current()
    if n_rows > caps.max_rows:
        raise ContractError(MSG_ROWS.format(source=source, rows=int(n_rows), how=how,
                                            cap=caps.max_rows, origin=caps.origin["max_rows"]),
                            source=source)


def check_file_size(size: int, *, source: str) -> None:
    """Refuse an input table file of more than ``max_file_gb`` (its size from ``stat``,
    before it is opened)."""
    caps = current()
    if size > caps.max_file_gb * 1e9:
        raise ContractError(MSG_FILE_SIZE.format(
            source=source, size=_gb(size), bytes=int(size), cap=f"{caps.max_file_gb:g} GB",
            origin=caps.origin["max_file_gb"], suggest=_suggest(size / 1e9)), source=source)


def check_columns(n_columns: int, *, source: str, how: str) -> None:
    """Refuse a table of more than ``max_columns`` columns (``how``: how they were
    counted, before the table was parsed)."""
    caps = current()
    if n_columns > caps.max_columns:
        raise ContractError(MSG_COLUMNS.format(source=source, n=int(n_columns), how=how,
                                               cap=caps.max_columns,
                                               origin=caps.origin["max_columns"]),
                            source=source)


def parquet_rows(path: str | os.PathLike) -> int:
    """Row count of a parquet file from its footer metadata (nothing is decoded)."""
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


# --------------------------------------------------------------------------- YAML


def read_yaml(path: str | os.PathLike, *, kind: str = "file") -> Any:
    """Read a small YAML file safely: at most ``MAX_YAML_BYTES``, UTF-8, no aliases.

    Every failure is a :class:`ContractError` naming the file (``kind``: "plan",
    "reference", used in the messages)."""
    import stat

    path = Path(path)
    source = str(path)
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):    # a FIFO or a device would block or read forever
        raise ContractError(f"{source}: is not a regular file (a folder, a FIFO or a "
                            f"device); give the path of the {kind} file", source=source)
    size = st.st_size
    if size > MAX_YAML_BYTES:
        raise ContractError(MSG_YAML_SIZE.format(source=source, size=size, cap=MAX_YAML_BYTES,
                                                 kind=kind), source=source)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ContractError(MSG_YAML_ENCODING.format(source=source, pos=exc.start),
                            source=source) from None
    return load_yaml(text, source=source, kind=kind)


def load_yaml(text: str, *, source: str, kind: str = "file") -> Any:
    """``yaml.safe_load`` without aliases (see :func:`read_yaml`)."""
    import yaml

    class _NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise ContractError(MSG_YAML_ALIAS.format(
                    source=source, line=event.start_mark.line + 1, name=event.anchor,
                    kind=kind), source=source)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            # a key written twice: YAML would keep the last silently (a typo, or text
            # pasted into the file, would override a prespecified choice unseen); a merge
            # key (<<) is refused too: its keys would override or hide others unseen
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise ContractError(MSG_YAML_MERGE.format(
                        source=source, kind=kind, line=key_node.start_mark.line + 1),
                        source=source)
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:       # an unhashable key: the base class refuses it
                    break
                where = key_node.start_mark.line + 1
                if key in seen:
                    lines = (f"both on line {where}" if seen[key] == where
                             else f"lines {seen[key]} and {where}")
                    raise ContractError(MSG_YAML_DUPLICATE.format(
                        source=source, kind=kind, key=key, where=lines), source=source)
                seen[key] = where
            return super().construct_mapping(node, deep=deep)

    try:
        loader = _NoAliasLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except RecursionError:
        raise ContractError(MSG_YAML_DEPTH.format(source=source, kind=kind),
                            source=source) from None
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ContractError(MSG_YAML_SYNTAX.format(source=source, detail=detail),
                            source=source) from None


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Cap:
    """One cap: its name (a ``limits`` key, a plan key or a fixed quantity; plain text),
    its value (as text), what it bounds, and how to raise it (``"fixed: "`` and why,
    where raising it is not sensible)."""

    name: str
    value: str
    bounds: str
    raise_by: str


def _fixed(why: str) -> str:
    return f"fixed: {why}"


def cap_table() -> tuple[Cap, ...]:
    """Every cap clinrel applies to its inputs, in one table (docs/plan.md#caps prints it;
    the checks read the same constants)."""
    def env(cap: str) -> str:
        return f"`limits.{cap}` in the plan, or the environment variable `{ENV[cap]}`"

    rows = [
        Cap("max_file_gb", f"{DEFAULT_MAX_FILE_GB:g} GB", "size of one input table file "
            "(CSV, TSV, parquet), from the file system before it is opened", env("max_file_gb")),
        Cap("max_columns", f"{DEFAULT_MAX_COLUMNS:,}", "columns of one input table: the CSV "
            "header line (read alone) or the parquet schema, before parsing",
            env("max_columns")),
        Cap("max_rows", f"{DEFAULT_MAX_ROWS:,}", "rows of one input table: counted as lines "
            "(CSV) or read from the parquet metadata, before parsing", env("max_rows")),
        Cap("max_memory_gb", f"{DEFAULT_MEMORY_FRACTION:.0%} of physical memory",
            "estimated peak memory of one step, and so the counts that size it: "
            + ", ".join(f"`{k}`" for k in ESTIMATED), env("max_memory_gb")),
        Cap("max_hours", f"{DEFAULT_MAX_HOURS:g} hours", "estimated single-core time of one "
            "such step (the same counts)", env("max_hours")),
        Cap("CSV header line", f"{MAX_HEADER_BYTES:,} bytes", "the first line of a CSV, read "
            "before the rest", _fixed("a header of max_columns long names is shorter")),
        Cap("plan and reference YAML", f"{MAX_YAML_BYTES:,} bytes, no aliases",
            "a plan or reference file", _fixed("a plan is a few kilobytes")),
    ]
    for key, (cap, what) in COUNT_CAPS.items():
        rows.append(Cap(key, f"{cap:,}", f"{what} (count)",
                        _fixed("far above any study's need; lower the value")))
    return tuple(rows)
