"""Shared CLI plumbing: one error policy, safe atomic outputs, progress bars.

Exit codes: 0 ok; 2 bad input (the message names the file, column, rows and the fix).
Bad input never produces a traceback, and a failed command leaves no partial output:
outputs are written to a temporary sibling and moved into place only on success, and
never over a file clinrel did not write (rules in ``reports.outputs``).
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Annotated

import typer

from reports.progress import progress  # noqa: F401
from reports.outputs import (OutputError, atomic_dir, atomic_file, check_out_dir,  # noqa: F401
                       check_out_file, check_out_files, write_table, write_tables)

EXIT_OK = 0
EXIT_BAD_INPUT = 2


class InputError(ValueError):
    """A bad input found by the CLI itself (a plan key, an option value, ...)."""


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from stats.schema import ContractError

    types: list[type[BaseException]] = [ContractError, InputError, OutputError]
    with contextlib.suppress(ImportError):
        from analysis.plan import PlanError

        types.append(PlanError)
    with contextlib.suppress(ImportError):
        from inference_runner.config import ConfigError  # type: ignore

        types.append(ConfigError)
    return tuple(types)


#: ``--force`` of every command that has ``--out``
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Replace an earlier clinrel output at --out: a folder clinrel wrote "
                    "(never one holding other files), or an existing file that is not an input.")]

def plan_option(key: str, *decls: str, **kw):
    """The option that sets the plan key ``key``: its flag and its help come from the plan
    schema (``analysis.plan``), so a key's option, meaning, allowed values, default and the
    messages that name it are one declaration."""
    from analysis.plan import declared

    d = declared(key)
    text = d.meaning.replace("`", "")
    if d.allowed:
        text += f" One of: {d.allowed.replace('`', '')}."
    if d.default:
        text += f" Default: {d.default.replace('`', '')}."
    help_text = kw.pop("help", f"{text} (plan key {key})")
    default = kw.pop("default", ...)   # "...": the default is the parameter's (Annotated)
    return typer.Option(default, *(decls or (d.cli,)), help=help_text, **kw)


def check_seed(value: int | None, option: str = "--seed") -> None:
    """The one seed rule (``stats._rng.check_seed``: a whole number from 0 to 2**63 - 1),
    with the option named; refused before any work, as an ``InputError`` (exit 2)."""
    from stats._rng import check_seed as rule
    from stats.schema import ContractError

    try:
        rule(value, key=option)
    except ContractError as exc:
        raise InputError(str(exc)) from None


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
    command knows which file that table came from, so the file goes in front. A message
    about an option (``--out ...``, ``--seed ...``) names the option, not a file.
    """
    if message.startswith("--"):
        return message
    for key in ("cases", "runs"):
        path = kwargs.get(key)
        if isinstance(path, (str, os.PathLike)) and str(path) not in message:
            prefix = f"{key}: "
            body = message[len(prefix):] if message.startswith(prefix) else message
            return f"{path}: {body}"
    return message


