"""How the clinrel program stops on SIGTERM or SIGINT (Ctrl-C): one line on stderr, exit
128 + the signal's number (143, 130), no traceback, no temporary left behind, every time.

:func:`install` (the program's first step, ``clinrel.cli.main``; also at the first line of
``clinrel`` when the process is the ``clinrel`` program, so that a signal during the
imports is handled too) makes both signals

- print ``MSG_STOPPED`` once (``os.write`` to descriptor 2: no Python buffer, so it
  cannot collide with a write the signal interrupted), then raise :class:`Terminated`
  (a ``SystemExit`` with the exit code) in the main thread. Every temporary of the output
  layer is removed on the way out (``reports.outputs``), forked workers are stopped
  first (``reports._fork``);
- wait while :func:`held` sections run: the output layer's bookkeeping (making a
  temporary and recording it, the final moves, the removal of temporaries) is never cut
  in half; the signal is raised when the section ends;
- be ignored once raised: a second Ctrl-C while the temporaries are being removed does
  not interrupt their removal;
- in a forked child (a figure or document worker, an analysis lane): stop the child's
  own subprocesses (pandoc) and ``os._exit`` at once, silently: the main process reports,
  and removes what the child was writing only once the child is gone.

A :class:`Terminated` that lands where Python cannot raise it (a ``__del__``, a weakref
callback: "Exception ignored in ...", with a traceback) is not printed: the signal is sent
again :data:`RESEND_SECONDS` later, to be raised in ordinary code. After the program's work is done (:func:`finish`),
a signal ends the process at once (``os._exit``), so that none can land in the
interpreter's own shutdown. A signal ignored when clinrel starts (``nohup``, a background
job of a non-interactive shell) stays ignored.

What is not covered: Python's own start-up before the first line of ``clinrel`` runs
(tens of milliseconds), where a Ctrl-C is Python's ``KeyboardInterrupt``; nothing of
clinrel's exists yet then.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

MSG_STOPPED = "clinrel: stopped by {name}; nothing unfinished is kept (exit {code})\n"

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM or SIGINT; ``code`` is 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(128 + int(signum))
        self.signum = int(signum)

    def __reduce__(self):   # a forked worker may hand it back through a pickle
        return (Terminated, (self.signum,))


class _State:
    pid: int | None = None       # the process install() was called in (the main process)
    received: int = 0            # the first signal received
    raised: bool = False         # Terminated raised for it (later signals are ignored)
    held: int = 0                # depth of held() sections
    finished: bool = False       # the program's work is done (finish())
    previous_unraisable = None


_state = _State()


def install() -> None:
    """Install the handlers in this (the main) process; a second call does nothing."""
    if _state.pid == os.getpid():
        return
    _state.pid = os.getpid()
    for signum in SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handler)
    if sys.unraisablehook is not _unraisable:
        _state.previous_unraisable = sys.unraisablehook
        sys.unraisablehook = _unraisable


def installed() -> bool:
    return _state.pid == os.getpid()


def received() -> int:
    """The signal received (0: none)."""
    return _state.received if installed() else 0


def finish() -> None:
    """The program's work is done: a signal from now on ends the process at once."""
    _state.finished = True


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A section a signal does not interrupt: it is raised when the section ends (also
    when the section ends by an exception: stopping wins). Nested sections count."""
    _state.held += 1
    try:
        yield
    finally:
        _state.held -= 1
        if (not _state.held and _state.received and not _state.raised
                and installed() and not _state.finished):
            _state.raised = True
            raise Terminated(_state.received)


def _say(signum: int) -> None:
    name = signal.Signals(signum).name
    with contextlib.suppress(OSError, ValueError):
        os.write(2, MSG_STOPPED.format(name=name, code=128 + signum).encode())


def _handler(signum, frame) -> None:
    if os.getpid() != _state.pid:
        _end_child(signum)
    if _state.finished:
        os._exit(128 + signum)
    if not _state.received:
        _state.received = signum
        _say(signum)
    if _state.raised or _state.held:
        return
    _state.raised = True
    raise Terminated(_state.received)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux ``/proc``; empty elsewhere)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def _end_child(signum: int) -> None:
    """A forked child stops: its subprocesses (pandoc writing into the report's temporary
    folder) are killed and reaped first, so that nothing writes there once it is gone."""
    for pid in _children(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    os._exit(128 + signum)


def _unraisable(unraisable) -> None:
    exc = getattr(unraisable, "exc_value", None)
    if isinstance(exc, Terminated) and installed() and not _state.finished:
        # it did not get through: the signal again in a moment, from another thread (sent
        # from here it would be handled here, inside the hook), to land in ordinary code
        import threading

        _state.raised = False
        timer = threading.Timer(RESEND_SECONDS, _resend, (exc.signum,))
        timer.daemon = True
        timer.start()
        return
    (_state.previous_unraisable or sys.__unraisablehook__)(unraisable)


#: how long after a swallowed Terminated the signal is sent again
RESEND_SECONDS = 0.05


def _resend(signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signum)


def running_as_program() -> bool:
    """Whether this process is the installed ``clinrel`` program (its console script)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return os.path.basename(argv0).removesuffix(".exe") == "clinrel"
