"""Failure map (placeholder until its statistics land)."""
from __future__ import annotations

from . import Section, SkipSection

KEY = "failure_map"
TITLE = "Failure map"
HALF = "detection"
REQUIRES = ("failure_map",)


def build(study) -> Section:
    raise SkipSection("not implemented yet")
