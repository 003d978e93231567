"""Shared CLI plumbing: one error policy, atomic outputs, progress bars.

Exit codes: 0 ok; 2 bad input (the message names the file, column, rows and the fix).
Bad input never produces a traceback, and a failed command leaves no partial output:
outputs are written to a temporary sibling and moved into place only on success.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import typer

EXIT_OK = 0
EXIT_BAD_INPUT = 2


class InputError(ValueError):
    """A bad input found by the CLI itself (a plan key, an option value, ...)."""


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from stats.schema import ContractError

    types: list[type[BaseException]] = [ContractError, InputError]
    with contextlib.suppress(ImportError):
        from reports.plan import PlanError  # type: ignore

        types.append(PlanError)
    with contextlib.suppress(ImportError):
        from inference_runner.config import ConfigError  # type: ignore

        types.append(ConfigError)
    return tuple(types)


def fail(message: str) -> None:
    """Print ``message`` to stderr and exit with code 2."""
    typer.echo(f"clinrel: error: {message}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def guarded(fn: Callable) -> Callable:
    """Decorate a command: bad-input exceptions become a one-line message and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except _bad_input_types() as exc:  # type: ignore[misc]
            fail(_with_source(str(exc), kwargs))

    return wrapper


def _with_source(message: str, kwargs: dict) -> str:
    """Name the input file in a message raised by ``stats`` on an in-memory table.

    ``stats`` functions see DataFrames and say ``cases: ...`` or ``runs: ...``; the
    command knows which file that table came from, so the file goes in front.
    """
    for key in ("cases", "runs"):
        path = kwargs.get(key)
        if isinstance(path, (str, os.PathLike)) and str(path) not in message:
            prefix = f"{key}: "
            body = message[len(prefix):] if message.startswith(prefix) else message
            return f"{path}: {body}"
    return message


@contextlib.contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """Yield a temporary folder next to ``out``; on success it replaces ``out``.

    On any exception the temporary folder is removed and ``out`` is left as it was. The
    yielded path is absolute, so tools that change directory (pandoc's working folder)
    still write inside it.
    """
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        backup = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(backup)
        tmp.rename(out)
        shutil.rmtree(backup, ignore_errors=True)
    else:
        tmp.rename(out)


@contextlib.contextmanager
def atomic_file(out: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``out``; on success it is renamed to ``out``."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.tmp-", suffix=out.suffix, dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)


def write_table(df, out: Path) -> None:
    """Write ``df`` atomically as CSV or parquet, chosen by the suffix of ``out``."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise InputError(f"--out {out}: unknown file type '{suffix}'; give a .csv or .parquet path")
    with atomic_file(out) as tmp:
        if suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)


@contextlib.contextmanager
def progress(description: str, total: int | None = None, *, quiet: bool = False):
    """A rich progress bar on stderr (silent with ``quiet`` or when stderr is not a TTY
    and CLINREL_PROGRESS is unset). Yields ``advance(n=1)``."""
    show = not quiet and (sys.stderr.isatty() or os.environ.get("CLINREL_PROGRESS"))
    if not show:
        yield lambda n=1: None
        return
    from rich.progress import Progress

    with Progress(transient=True, console=None) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
