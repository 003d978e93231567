"""Threshold sweep and ranking stability (placeholder until its statistics land)."""
from __future__ import annotations

from . import Section, SkipSection

KEY = "threshold"
TITLE = "Threshold sweep and ranking stability"
HALF = "detection"
REQUIRES = ("threshold_sweep",)


def build(study) -> Section:
    raise SkipSection("not implemented yet")
