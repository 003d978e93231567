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


def _terminate(signum, frame) -> None:
    """SIGTERM unwinds like an error: temporary outputs are removed on the way out."""
    raise SystemExit(128 + signum)


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


def main() -> None:  # console-script entry point
    import signal

    one_blas_thread_everywhere()
    signal.signal(signal.SIGTERM, _terminate)
    app()
