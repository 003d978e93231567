"""Report sections. Each module ``reports/sections/<name>.py`` defines

- ``TITLE`` (the heading), ``HALF`` (``"detection"``, ``"crs"`` or ``"any"``),
- ``build(study) -> Section``,
- optionally ``applies(study) -> bool`` (False: the study lacks the input it describes).

A :class:`Section` holds ordered blocks: markdown strings (which may cite ``@tbl-x``,
``@fig-x``, ``@sec-x``), :class:`~reports.tables.ReportTable` and
:class:`~reports.figures.ReportFigure` objects.
"""
from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass, field

from ..figures import ReportFigure
from ..tables import ReportTable
from . import _roles

log = logging.getLogger("clinrel.report")

#: section modules in report order
ORDER = ("methods", "flow", "cohort", "twobytwo", "overall", "subgroups", "precision", "forest",
         "failure_map", "threshold", "adjusted", "site_meta", "comparisons", "crs",
         "calibration", "provenance", "checklist")


#: built after the others (they describe them), placed by ORDER
LATE = ("checklist", "methods")


class SkipSection(Exception):
    """Raised by ``build`` when the section cannot be produced from this study; the message
    is logged (never a substitute number)."""


@dataclass
class Section:
    key: str
    title: str
    blocks: list = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"sec-{self.key.replace('_', '-')}"

    def add(self, *blocks) -> "Section":
        self.blocks.extend(b for b in blocks if b is not None)
        return self

    @property
    def tables(self) -> list[ReportTable]:
        return [b for b in self.blocks if isinstance(b, ReportTable)]

    @property
    def figures(self) -> list[ReportFigure]:
        return [b for b in self.blocks if isinstance(b, ReportFigure)]


def module(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def applies(mod, study) -> bool:
    """Whether the study has what the section describes (else it is left out silently,
    like the half of the report a plan leaves out)."""
    half = getattr(mod, "HALF", "any")
    if half == "detection" and (study.plan.detection is None or study.cases is None):
        return False
    if half == "crs" and (study.plan.crs is None or study.runs is None):
        return False
    own = getattr(mod, "applies", None)
    return own is None or bool(own(study))


def _input_errors() -> tuple:
    from stats.schema import ContractError

    from analysis.plan import PlanError

    return (ContractError, PlanError)


class SectionFailed(RuntimeError):
    """A section raised an unexpected error and the report was built with ``strict``."""


def _failed(study, key, title, exc, strict: bool = False) -> None:
    if strict:
        raise SectionFailed(f"section '{title}' failed with {type(exc).__name__}: {exc}; "
                            f"nothing was written (without --strict the report leaves the "
                            f"section out and names it)") from exc
    reason = f"failed with {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    study.skipped.append((key, title, reason))
    study.note(f"section '{title}' {reason}")
    log.warning("section %s failed", key, exc_info=exc)


def build_all(study, *, only=None, advance=lambda n=1: None, strict: bool = False
              ) -> list[Section]:
    """Build every applicable section in ``ORDER`` (methods last, placed first).

    ``strict``: a section that raises an unexpected error stops the build
    (:class:`SectionFailed`) instead of being left out and named.

    Returns the built sections; skipped ones are recorded in ``study.skipped`` as
    ``(key, reason)`` and logged via ``study.note``.
    """
    study.skipped = []
    study.timings = {}
    built: dict[str, Section] = {}
    keys = [k for k in ORDER if only is None or k in only]
    late = [k for k in LATE if k in keys]
    for key in [k for k in keys if k not in late] + late:
        if late and key == late[0]:
            study.built_sections = {k: module(k).TITLE for k in keys
                                    if k in built or k in late}
        mod = module(key)
        if not applies(mod, study):
            advance()
            continue
        t0 = time.perf_counter()
        try:
            built[key] = mod.build(study)
            built[key].blocks = [_roles.label(study, b) for b in built[key].blocks]
        except SkipSection as exc:
            if strict:  # the plan asked for this section (it applies): a skip is a failure
                _failed(study, key, mod.TITLE, exc, strict)
            study.skipped.append((key, mod.TITLE, str(exc)))
            study.note(f"section '{mod.TITLE}' skipped: {exc}")
        except ValueError as exc:  # bad user input (ContractError, PlanError): exit 2
            if isinstance(exc, _input_errors()):
                raise
            _failed(study, key, mod.TITLE, exc, strict)
        except Exception as exc:  # a failing statistic must not take the whole report down
            _failed(study, key, mod.TITLE, exc, strict)
        study.timings[key] = round(time.perf_counter() - t0, 3)
        advance()
    return [built[k] for k in keys if k in built]
