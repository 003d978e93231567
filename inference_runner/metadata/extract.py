"""Route paths to the DICOM or report-text extractors; build the evidence table."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import EVIDENCE_COLUMNS
from .dicom import extract_dicom
from .text import extract_reports, read_reports

MSG_NO_PATH = "{path}: not found; give DICOM files or folders, or a CSV with columns case_id, text"


def _is_report_csv(p: Path) -> bool:
    return p.is_file() and p.suffix.lower() in (".csv", ".tsv")


def check_paths(paths) -> list[Path]:
    """``paths`` as Paths; a missing one is a ``ConfigError`` naming it and the fix."""
    from ..config import ConfigError

    out = list(map(Path, paths))
    for p in out:
        if not p.exists():
            raise ConfigError(MSG_NO_PATH.format(path=p))
    return out


def extract_paths(paths, *, llm_url: str | None = None, llm_model: str = "local",
                  advance=None, dates: str = "refuse", salt: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Evidence table for ``paths`` and a summary dict (``n_rows``, ``llm_rejected``).

    A ``.csv`` path is a report-text table (case_id, text); anything else is DICOM (a
    file or a folder searched recursively). With ``llm_url`` the LLM extractor also runs
    on every report text. ``dates`` (``refuse``, ``allow``, ``shift`` with ``salt``): what
    the table may hold of DICOM dates and times (identifiers; see :mod:`.dicom`).
    """
    rows: list[dict] = []
    dicom: list[Path] = []
    reports: list[Path] = []
    for p in check_paths(paths):
        (reports if _is_report_csv(p) else dicom).append(p)
    if llm_url and reports:
        from .llm import check_endpoint

        check_endpoint(llm_url)  # fail fast, before any extraction
    if dicom:
        rows += extract_dicom(dicom, advance=advance, dates=dates, salt=salt)
    rejected = 0
    for p in reports:
        rows += extract_reports(p, advance=advance)
        if llm_url:
            from .llm import extract_llm

            r, n = extract_llm(read_reports(p), llm_url, model=llm_model, source_prefix=f"text:{p}")
            rows += r
            rejected += n
    table = pd.DataFrame(rows, columns=list(EVIDENCE_COLUMNS))
    table["start"] = table["start"].astype("int64")
    table["end"] = table["end"].astype("int64")
    return table, {"n_rows": len(table), "llm_rejected": rejected}
