"""The analysis layer: the plan decides once, :func:`run` applies it and records it.

``load_plan(path) -> Plan`` (validated, typed, with defaults) and
``load_tables(plan) -> Tables`` (the validated inputs, checked against the plan) are the
only file reads; ``run(plan, tables, scheduler=None) -> Results`` is pure and returns tidy
tables keyed by name plus the decisions taken (rows analysed and why, thresholds, seeds,
replicate counts, clusters, exclusions). The CLI and the report both call ``run``; neither
makes an analysis decision.
"""
from __future__ import annotations

# every analysis module, so that its analyses are registered (order matters: run computes
# them in registration order); the analyses import core, never this package
from . import adjusted, calibration, crs, detection, metadata  # noqa: F401,E402
from . import meta_analysis  # noqa: F401,E402
from .core import ANALYSES, Results, Tables, analysis, run, wanted
from .inputs import load_tables
from .plan import Plan, PlanError, PlanSpec, load_plan, plan_from_dict

__all__ = ["ANALYSES", "Plan", "PlanError", "PlanSpec", "Results", "Tables", "analysis", "load_plan",
           "load_tables", "plan_from_dict", "run", "wanted"]
