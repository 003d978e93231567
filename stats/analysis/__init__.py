"""The analysis layer: the plan decides once, :func:`run` applies it and records it.

``Plan`` (validated, typed, with defaults) + ``Tables`` (the validated inputs) ->
``run(plan, tables, scheduler=None) -> Results`` (tidy tables keyed by name plus the
decisions taken: rows analysed and why, thresholds, seeds, replicate counts, clusters,
exclusions). The CLI and the report both call ``run``; neither makes an analysis decision.
"""
from __future__ import annotations

from . import _register  # noqa: F401  (registers every analysis)
from .core import ANALYSES, Results, Tables, analysis, run, wanted

__all__ = ["ANALYSES", "Results", "Tables", "analysis", "run", "wanted"]
