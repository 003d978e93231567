"""Standard output and error of the clinrel program, when they fail.

- **A closed pipe** (``clinrel ... | head -c1``: the reader has gone): no message and exit
  141 (128 + SIGPIPE), what a shell gets from any Unix tool that a closed pipe ends.
- **A full or failing standard output** (``> /dev/full``, a full disk, an I/O error):
  ``MSG_STDOUT`` on stderr, exit 2, as for clinrel's other environment faults.
- **A failing standard error**: what clinrel would print there is dropped; the exit code
  is the command's.
- **A closed descriptor 0, 1 or 2** (``clinrel ... >&-``) is opened on ``/dev/null`` before
  any work, so that no file clinrel or a tool it starts opens can take its number (and
  receive text meant for the terminal); what would go to a closed standard output is
  discarded, as with ``> /dev/null``.

:func:`guard` wraps ``sys.stdout`` and ``sys.stderr`` so that a failed write or flush
raises :class:`StdoutError` (an ``Exception``, not an ``OSError``: the command line
library would otherwise turn a closed pipe into exit 1) for the program to handle once,
at its entry (``clinrel.cli.main``); after a failure the descriptor is pointed at
``/dev/null``, so that nothing (the interpreter's last flush included) fails again.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys

EXIT_BROKEN_PIPE = 128 + 13
MSG_STDOUT = ("cannot write to standard output ({reason}); free space on the disk that "
              "standard output goes to, or send it elsewhere (> another file, or --quiet)")


class StdoutError(Exception):
    """Standard output failed (``errno``: EPIPE for a closed pipe)."""

    def __init__(self, err: OSError):
        super().__init__(err.strerror or str(err))
        self.errno = err.errno
        self.strerror = err.strerror or str(err)

    @property
    def broken_pipe(self) -> bool:
        return self.errno == errno.EPIPE


def _to_devnull(fd: int) -> None:
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


class _Guarded:
    """A text stream whose ``write`` and ``flush`` failures are handled (see the module
    docstring); every other attribute is the stream's own."""

    def __init__(self, stream, fd: int, raise_errors: bool):
        self._stream, self._fd, self._raise = stream, fd, raise_errors

    def _failed(self, exc: OSError, result):
        _to_devnull(self._fd)
        if self._raise:
            global _failure
            _failure = _failure or StdoutError(exc)
            raise StdoutError(exc) from None
        return result

    def write(self, text):
        if isinstance(text, str) and not text:   # a library probing the stream writes ""
            return 0
        try:
            return self._stream.write(text)
        except OSError as exc:
            return self._failed(exc, len(text))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            return self._failed(exc, None)

    def __getattr__(self, name):
        return getattr(self._stream, name)


#: the first failure of standard output (kept: a library may catch the exception)
_failure: StdoutError | None = None


def failure() -> StdoutError | None:
    """The first failure of standard output in this process, or None."""
    return _failure


def _reopen_closed() -> None:
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                got = os.open(os.devnull, os.O_RDWR)
                if got != fd:   # lower descriptors are open: it took another number
                    os.dup2(got, fd)
                    os.close(got)


def guard() -> None:
    """Set up standard output and error of the program (see the module docstring)."""
    _reopen_closed()
    if sys.stdout is not None and not isinstance(sys.stdout, _Guarded):
        sys.stdout = _Guarded(sys.stdout, 1, raise_errors=True)
    if sys.stderr is not None and not isinstance(sys.stderr, _Guarded):
        sys.stderr = _Guarded(sys.stderr, 2, raise_errors=False)


def flush() -> None:
    """Flush standard output now (a failure raises :class:`StdoutError` here, not in the
    interpreter's shutdown)."""
    if sys.stdout is not None:
        sys.stdout.flush()


def error(message: str) -> None:
    """``clinrel: error: MESSAGE`` on stderr (dropped if stderr fails)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"clinrel: error: {message}", file=sys.stderr, flush=True)
