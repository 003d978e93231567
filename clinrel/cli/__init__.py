"""The ``clinrel`` command line (typer). Each command group lives in its own module
and registers itself through ``register(app)``."""
from __future__ import annotations

import importlib
import importlib.util

import typer

app = typer.Typer(
    name="clinrel",
    help="Subgroup-level, confounding-adjusted reliability evidence for imaging models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: paragraphs re-wrapped to the terminal, flags without a "<bool>"
    # type tag (typer's rich panels print one for every option and keep the docstrings'
    # line breaks mid-sentence)
    rich_markup_mode=None,
)

#: command modules, in help order; a module not yet present is skipped
_COMMAND_MODULES = ("core", "plan", "detection", "adjust", "crs", "report", "infer", "metadata",
                    "plansize")

for _name in _COMMAND_MODULES:
    _full = f"{__name__}.{_name}"
    if importlib.util.find_spec(_full) is not None:
        importlib.import_module(_full).register(app)
for _group in app.registered_groups:  # command groups (infer, metadata, plan): the same help
    _group.typer_instance.rich_markup_mode = None


def one_blas_thread_everywhere() -> None:
    """Hold BLAS to one thread in this process and in every process it starts (Dask
    workers, forked lanes): multi-threaded OpenBLAS splits a reduction differently from
    run to run, so the last digits of a fit changed between two runs of one plan.
    clinrel's parallelism is in processes (``--jobs``, ``--scheduler``), not in BLAS."""
    import os

    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return
    threadpool_limits(1, user_api="blas")


#: a fault of the environment around a command (a full disk, standard output)
EXIT_ENVIRONMENT = 2
MSG_NO_SPACE = ("{reason}{where}; nothing unfinished is kept; free space on that disk, or "
                "choose another --out (for the temporary folder: set TMPDIR to a folder on "
                "a disk with space)")


def main() -> None:  # console-script entry point
    """The ``clinrel`` program. Faults of its environment end with a message, never a
    traceback, and nothing unfinished left behind:

    - SIGTERM, Ctrl-C: one line, exit 143 / 130 (``reports._signals``);
    - standard output closed by its reader (``| head -c1``): no message, exit 141; full
      or failing (``> /dev/full``): a message, exit 2 (``clinrel._stdio``);
    - a bad ``SOURCE_DATE_EPOCH``: a message naming it and the fix, exit 2, before any
      work (``reports._env``);
    - a full disk or quota: the output layer's message with the path and the fix, exit 2
      (``reports.outputs.MSG_NO_SPACE``); one met outside it (a library's cache, the
      temporary folder), :data:`MSG_NO_SPACE`, exit 2.
    """
    from clinrel import _signals

    _signals.install()
    code = _run()
    _signals.finish()   # from here a signal ends the process at once
    raise SystemExit(code)


def _stdout_failed() -> int | None:
    """The exit code for a failure of standard output (its message printed), or None."""
    from clinrel import _stdio

    exc = _stdio.failure()
    if exc is None:
        return None
    if exc.broken_pipe:
        return _stdio.EXIT_BROKEN_PIPE
    _stdio.error(_stdio.MSG_STDOUT.format(reason=exc.strerror))
    return EXIT_ENVIRONMENT


def _run():
    import errno

    from clinrel import _env, _signals, _stdio
    from reports.outputs import no_space

    _stdio.guard()
    try:
        problem = _env.check()
        if problem:
            _stdio.error(problem)
            return EXIT_ENVIRONMENT
        one_blas_thread_everywhere()
        try:
            app()
        finally:
            _stdio.flush()      # the last bytes of stdout fail here, not at shutdown
        return _stdout_failed() or 0
    except _signals.Terminated as stop:
        return stop.code
    except SystemExit as done:
        if _signals.received():
            return 128 + _signals.received()
        failed = _stdout_failed()
        return done.code if done.code not in (0, None) else (failed or done.code)
    except _stdio.StdoutError:
        return 128 + _signals.received() if _signals.received() else _stdout_failed()
    except Exception as exc:
        if _signals.received():   # a tool that the signal stopped first (pandoc) failed
            return 128 + _signals.received()
        if _stdio.failure() is not None:   # a library turned it into another error
            return _stdout_failed()
        full = no_space(exc)
        if full is None:
            raise
        quota = getattr(errno, "EDQUOT", None) == full.errno
        reason = ("the disk quota is exhausted (Disk quota exceeded)" if quota
                  else "the disk is full (No space left on device)")
        name = full.filename2 or full.filename
        _stdio.error(MSG_NO_SPACE.format(reason=reason,
                                         where=f" while writing {name}" if name else ""))
        return EXIT_ENVIRONMENT
