"""Confounding-adjusted models (placeholder until its statistics land)."""
from __future__ import annotations

from . import Section, SkipSection

KEY = "adjusted"
TITLE = "Confounding-adjusted models"
HALF = "detection"
REQUIRES = ("fit_adjusted",)


def build(study) -> Section:
    raise SkipSection("not implemented yet")
