"""Model comparisons (placeholder until its statistics land)."""
from __future__ import annotations

from . import Section, SkipSection

KEY = "comparisons"
TITLE = "Model comparisons"
HALF = "detection"
REQUIRES = ("compare_models",)


def build(study) -> Section:
    raise SkipSection("not implemented yet")
