"""Calibration (placeholder until its statistics land)."""
from __future__ import annotations

from . import Section, SkipSection

KEY = "calibration"
TITLE = "Calibration"
HALF = "crs"
REQUIRES = ("reliability_table",)


def build(study) -> Section:
    raise SkipSection("not implemented yet")
