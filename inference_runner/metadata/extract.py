"""Route paths to the DICOM or report-text extractors; build the evidence table."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import EVIDENCE_COLUMNS
from .dicom import extract_dicom
from .text import extract_reports, read_reports

MSG_NO_PATH = "{path}: not found; give DICOM files or folders, or a CSV with columns case_id, text"
MSG_NOT_FILE = ("{path}: is {kind}, not a file or a folder; give DICOM files or folders, or a "
                "CSV with columns case_id, text")
MSG_SUFFIX = ("{path}: unsupported file type '{suffix}'; give DICOM files ({dicom}) or folders "
              "of them, or report texts as a CSV ({reports}) with columns case_id, text")
MSG_NOT_DICOM = ("{path}: not a readable DICOM file (pydicom cannot read its header); give "
                 "DICOM files, or report texts as a CSV with columns case_id, text")
MSG_NO_DICOM = ("{path}: the folder holds no readable DICOM file ({n} candidate file(s) "
                "named *.dcm or without an extension, none readable); give the folder of the "
                "DICOM series")
#: suffixes of files given by name: report tables, and DICOM (which often has none)
REPORT_SUFFIXES = (".csv", ".tsv")
DICOM_SUFFIXES = (".dcm", ".dicom", ".ima", "")


def _is_report_csv(p: Path) -> bool:
    return p.is_file() and p.suffix.lower() in REPORT_SUFFIXES


def check_paths(paths) -> list[Path]:
    """``paths`` as Paths, each checked before anything is opened: it exists, it is a
    regular file or a folder (a FIFO would block and a device such as /dev/zero read
    forever), a file has a report-table or DICOM suffix, and a report table is under the
    input size cap (``stats.limits`` ``max_file_gb``). A failure is a ``ConfigError``
    naming the path and the fix."""
    import os
    import stat

    from stats.schema import ContractError, _file_kind, check_input_file

    from ..config import ConfigError

    out = list(map(Path, paths))
    for p in out:
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            raise ConfigError(MSG_NO_PATH.format(path=p)) from None
        except OSError as exc:
            raise ConfigError(f"{p}: cannot be read ({exc.strerror}); check the path and its "
                              "permissions") from None
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise ConfigError(MSG_NOT_FILE.format(path=p, kind=_file_kind(mode)))
        suffix = p.suffix.lower()
        if suffix not in REPORT_SUFFIXES + DICOM_SUFFIXES:
            raise ConfigError(MSG_SUFFIX.format(
                path=p, suffix=suffix, reports=", ".join(REPORT_SUFFIXES),
                dicom=", ".join(s or "no extension" for s in DICOM_SUFFIXES)))
        if suffix in REPORT_SUFFIXES:
            try:
                check_input_file(p)
            except ContractError as exc:
                raise ConfigError(str(exc)) from None
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
    skipped: list[Path] = []
    if dicom:
        rows += extract_dicom(dicom, advance=advance, dates=dates, salt=salt,
                              unreadable=skipped)
        _check_dicom_found(dicom, skipped)
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
    return table, {"n_rows": len(table), "llm_rejected": rejected, "skipped": skipped}


def _check_dicom_found(dicom: list[Path], skipped: list[Path]) -> None:
    """A DICOM file named on the command line must be readable; a folder must hold at
    least one readable DICOM file (in a folder, other unreadable files are skipped:
    ``skipped``). Nothing is extracted silently from nothing."""
    from ..config import ConfigError
    from .dicom import find_dicom_files

    bad = set(map(str, skipped))
    for p in dicom:
        if p.is_dir():
            found = find_dicom_files([p])
            if all(str(f) in bad for f in found):
                raise ConfigError(MSG_NO_DICOM.format(path=p, n=len(found)))
        elif str(p) in bad:
            raise ConfigError(MSG_NOT_DICOM.format(path=p))
