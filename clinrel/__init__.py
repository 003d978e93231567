"""clinrel: subgroup-level, confounding-adjusted reliability evidence for imaging models.

The distribution installs three import packages: ``stats`` (pure statistics),
``reports`` (presentation) and ``inference_runner`` (torch/MONAI). This package holds
the command line and the embedded demo data. ``from clinrel import stats`` is the
unambiguous way to import the statistics.
"""
from __future__ import annotations

from reports import _env, _signals

if _signals.running_as_program():
    # the clinrel program: SIGTERM and Ctrl-C end it with one line and no traceback from
    # here on, the imports below included (reports._signals); a library import changes
    # no signal handler
    _signals.install()

with _env.unusable_epoch_hidden():   # refused with a message by the program (reports._env)
    import stats as stats  # noqa: F401  (re-exported)

if not getattr(stats, "__clinrel__", False):  # pragma: no cover - only with a broken install
    raise ImportError(
        f"'import stats' found {getattr(stats, '__file__', '?')}, not clinrel's stats package; "
        "uninstall the other 'stats' distribution (pip uninstall stats) or reinstall clinrel"
    )

__version__ = "0.1.0"
