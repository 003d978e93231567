"""Progress bars on stderr, shared by the CLI and the report renderer."""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def progress(description: str, total: int | None = None, *, quiet: bool = False):
    """A rich progress bar on stderr (silent with ``quiet`` or when stderr is not a TTY
    and CLINREL_PROGRESS is unset). Yields ``advance(n=1)``."""
    show = not quiet and (sys.stderr.isatty() or os.environ.get("CLINREL_PROGRESS"))
    if not show:
        yield lambda n=1: None
        return
    from rich.progress import Progress

    # no refresh thread (redrawn on each step): the report forks workers while a bar is
    # shown, and a thread holding the terminal's lock at that moment would hang a child
    with Progress(transient=True, console=None, auto_refresh=False) as bar:
        task = bar.add_task(description, total=total)
        bar.refresh()

        def advance(n=1):
            bar.advance(task, n)
            bar.refresh()

        yield advance
