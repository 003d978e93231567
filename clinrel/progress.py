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

    with Progress(transient=True, console=None) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
