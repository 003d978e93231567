"""Metadata provenance (placeholder until its statistics land)."""
from __future__ import annotations

from . import Section, SkipSection

KEY = "provenance"
TITLE = "Metadata provenance"
HALF = "detection"
REQUIRES = ("__metadata__",)


def build(study) -> Section:
    raise SkipSection("not implemented yet")
