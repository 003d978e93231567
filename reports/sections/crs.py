"""Clinical Reliability Score (placeholder until its statistics land)."""
from __future__ import annotations

from . import Section, SkipSection

KEY = "crs"
TITLE = "Clinical Reliability Score"
HALF = "crs"
REQUIRES = ("crs_bootstrap",)


def build(study) -> Section:
    raise SkipSection("not implemented yet")
