"""DICOM header extractors (pydicom), each value with verbatim evidence and offsets.

One case per series (``SeriesInstanceUID``; the file stem when absent); the first
readable file of a series is used. Evidence is the element's string value (or the part
of it that carries the value), ``start``/``end`` are offsets into that string and
``source`` is ``dicom:<file>#<Keyword>``.

Extractors:

- ``dicom_header``: PatientAge (``058Y`` -> 58; M/W/D units converted to years),
  PatientSex, ContrastBolusAgent (absent or empty on CT/MR -> ``non_contrast`` with empty
  evidence, start = end = 0; present
  with ContrastBolusStartTime and AcquisitionTime -> arterial < 45 s <= venous < 150 s <=
  delayed; present without timing -> no phase), and Manufacturer, ManufacturerModelName,
  SliceThickness, KVP, StudyDate, Modality, SeriesDescription verbatim.
- ``dicom_birthdate``: age from PatientBirthDate and StudyDate (whole years; none when
  the dates give more than 120 years).
- ``dicom_description``: phase from SeriesDescription / StudyDescription / ProtocolName
  keywords (the same patterns as the report-text regex).
"""
from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from .text import phase_matches

IMAGING = {"CT", "MR"}  # contrast phase is read only for these modalities
PASSTHROUGH = {"Manufacturer": "manufacturer", "ManufacturerModelName": "scanner",
               "SliceThickness": "slice_thickness_mm", "KVP": "kvp", "StudyDate": "study_date",
               "Modality": "modality", "SeriesDescription": "series_description",
               "ContrastBolusAgent": "contrast_agent"}
_AGE = re.compile(r"^(\d{1,3})([DWMY])$")
_UNIT_YEARS = {"Y": 1.0, "M": 1 / 12, "W": 7 / 365.25, "D": 1 / 365.25}


def find_dicom_files(paths) -> list[Path]:
    """DICOM candidates under ``paths`` (files as given; folders searched recursively for
    ``*.dcm`` and extension-less files)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and (q.suffix.lower() == ".dcm" or not q.suffix))
        elif p.is_file():
            out.append(p)
    return out


def _row(case_id, field, value, extractor, evidence, start, end, source):
    return {"case_id": case_id, "field": field, "value": str(value), "extractor": extractor,
            "evidence": evidence, "start": int(start), "end": int(end), "source": source}


def _text(ds, keyword) -> str | None:
    v = ds.get(keyword)
    if v is None:
        return None
    s = str(v).strip()
    return s or None


def _parse_time(s: str | None) -> float | None:
    """DICOM TM (HHMMSS.frac) -> seconds since midnight."""
    if not s:
        return None
    m = re.match(r"^(\d{2})(\d{2})?(\d{2})?(\.\d+)?", s)
    if not m:
        return None
    h, mi, se, fr = m.groups()
    return int(h) * 3600 + int(mi or 0) * 60 + int(se or 0) + float(fr or 0)


def _parse_date(s: str | None) -> date | None:
    if not s:
        return None
    digits = re.sub(r"\D", "", s)
    if len(digits) != 8:
        return None
    try:
        return date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
    except ValueError:
        return None


def read_header(path):
    """pydicom dataset without pixels, or None when the file is not DICOM."""
    import pydicom
    from pydicom.errors import InvalidDicomError

    try:
        return pydicom.dcmread(str(path), stop_before_pixels=True)
    except (InvalidDicomError, OSError, ValueError, TypeError, AttributeError, KeyError):
        return None


def case_id_of(ds, path: Path) -> str:
    uid = _text(ds, "SeriesInstanceUID")
    return uid or Path(path).stem


def extract_dataset(ds, path) -> list[dict]:
    """Evidence rows from one header (all three extractors)."""
    rows: list[dict] = []
    case = case_id_of(ds, Path(path))
    src = f"dicom:{path}"
    modality = _text(ds, "Modality")
    for kw, field in PASSTHROUGH.items():
        s = _text(ds, kw)
        if s is not None:
            rows.append(_row(case, field, s, "dicom_header", s, 0, len(s), f"{src}#{kw}"))
    age = _text(ds, "PatientAge")
    if age and (m := _AGE.match(age)):
        years = int(m.group(1)) * _UNIT_YEARS[m.group(2)]
        value = int(years) if m.group(2) == "Y" else round(years, 2)
        rows.append(_row(case, "age", value, "dicom_header", age, 0, len(age), f"{src}#PatientAge"))
    sex = _text(ds, "PatientSex")
    if sex and sex.upper() in ("M", "F", "O"):
        rows.append(_row(case, "sex", sex.upper(), "dicom_header", sex, 0, len(sex), f"{src}#PatientSex"))
    birth, study = _text(ds, "PatientBirthDate"), _text(ds, "StudyDate")
    b, s = _parse_date(birth), _parse_date(study)
    years = None
    if b and s and b <= s:
        years = s.year - b.year - ((s.month, s.day) < (b.month, b.day))
    if years is not None and years <= 120:  # an implausible birth date gives nothing
        rows.append(_row(case, "age", years, "dicom_birthdate", birth, 0, len(birth),
                         f"{src}#PatientBirthDate"))
    if modality in IMAGING:
        rows += _header_phase(ds, case, src)
        for kw in ("SeriesDescription", "StudyDescription", "ProtocolName"):
            desc = _text(ds, kw)
            if not desc:
                continue
            hits = phase_matches(desc)
            if hits:
                value, start, end = hits[0]
                rows.append(_row(case, "phase", value, "dicom_description", desc[start:end], start, end,
                                 f"{src}#{kw}"))
                break
    return rows


def _header_phase(ds, case, src) -> list[dict]:
    agent = _text(ds, "ContrastBolusAgent")
    if agent is None:
        # absent or empty agent on an imaging series: no contrast given (empty evidence)
        return [_row(case, "phase", "non_contrast", "dicom_header", "", 0, 0, f"{src}#ContrastBolusAgent")]
    t0 = _parse_time(_text(ds, "ContrastBolusStartTime"))
    t1 = _parse_time(_text(ds, "AcquisitionTime"))
    if t0 is None or t1 is None or t1 < t0:
        return []
    delay = t1 - t0
    value = "arterial" if delay < 45 else "venous" if delay < 150 else "delayed"
    s = _text(ds, "ContrastBolusStartTime")
    return [_row(case, "phase", value, "dicom_header", s, 0, len(s), f"{src}#ContrastBolusStartTime")]


def extract_dicom(paths, advance=None) -> list[dict]:
    """Evidence rows for every DICOM series under ``paths`` (non-DICOM files skipped)."""
    rows, seen = [], set()
    for f in find_dicom_files(paths):
        ds = read_header(f)
        if advance:
            advance(1)
        if ds is None:
            continue
        case = case_id_of(ds, f)
        if case in seen:
            continue
        seen.add(case)
        rows += extract_dataset(ds, f)
    return rows
