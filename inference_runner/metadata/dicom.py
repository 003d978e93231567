"""DICOM header extractors (pydicom), each value with verbatim evidence and offsets.

One case per series (``SeriesInstanceUID``; the file stem when absent); the first
readable file of a series is used. Evidence is the element's string value (or the part
of it that carries the value), ``start``/``end`` are offsets into that string and
``source`` is ``dicom:<file>#<Keyword>``.

Extractors:

- ``dicom_header``: PatientAge (``058Y`` -> 58; M/W/D units converted to years),
  PatientSex, EthnicGroup (0010,2160; free text, its spellings read by
  :func:`.race.race_value`: ``WHITE``, ``W``, ``CAUC``, ``AFR AM``, ``B``, ``HISP``,
  ``UNK``, ``DECLINED``, the CDC race codes ``2106-3`` ...; a spelling it does not know
  gives no value), ContrastBolusAgent (absent or empty on CT/MR -> ``non_contrast`` with empty
  evidence, start = end = 0; present
  with ContrastBolusStartTime and AcquisitionTime -> arterial < 45 s <= venous < 150 s <=
  delayed; present without timing -> no phase), and Manufacturer, ManufacturerModelName,
  SliceThickness, KVP, StudyDate, Modality, SeriesDescription verbatim.
- ``dicom_birthdate``: age from PatientBirthDate and StudyDate (whole years; none when
  the dates give more than 120 years).
- ``dicom_description``: phase from SeriesDescription / StudyDescription / ProtocolName
  keywords (the report-text phrases plus the abbreviations of series names: ``ART``,
  ``PV``, ``VEN``, ``PORTAL``, ``NC``, ``NON CON``, ``PRE``, ``PLAIN``, ``C-``, ``DEL``,
  ``EQ``, ``DELAYED 3MIN``).

The rule answer per field (:data:`RULE_PREFERENCE`): phase from the description first
(a CT/MR header without ContrastBolusAgent says non_contrast even where the description
names a phase), age from PatientAge first.

**Dates and times are identifiers** (every element of VR DA, DT or TM: StudyDate,
SeriesDate, AcquisitionDateTime, ContentDate, PatientBirthDate, StudyTime, ...). The
``dates`` switch says what the evidence table may hold of them:

- ``"refuse"`` (default, as identifier columns are refused unless the plan allows them):
  no date or time value is written. ``study_date`` is left out; the values derived from
  dates (age from PatientBirthDate, phase from the contrast timing) are kept with empty
  evidence (start = end = 0; ``source`` still names the element).
- ``"allow"``: as read.
- ``"shift"``: every date and time of a patient moves by one deterministic offset, a
  salted SHA-256 of the patient (PatientID, else PatientName, else the case id):
  offset = -(``d`` days + ``s`` seconds), ``d`` in 1..3650, ``s`` in 0..86399. A DT, or a
  date with its time partner (StudyDate + StudyTime, SeriesDate + SeriesTime, ...), moves
  as one instant by the offset; a lone date by the offset's whole days (rounded down); a
  lone time by the offset modulo 24 h. Intervals within a patient are kept (exactly between
  instants, between lone dates and modulo 24 h between lone times; a lone date against an
  instant can differ by one day); a value that does not parse is emptied, never kept.
  Values and evidence come from the shifted header
  (:func:`shift_dates`) and ``source`` ends in ``(shifted)``; derived values are computed
  from the true dates.
"""
from __future__ import annotations

import copy
import hashlib
import re
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Literal

from .race import race_value
from .text import first_hit, phase_matches
from .text import rule_answer as _rule_answer

IMAGING = {"CT", "MR"}  # contrast phase is read only for these modalities
PASSTHROUGH = {"Manufacturer": "manufacturer", "ManufacturerModelName": "scanner",
               "SliceThickness": "slice_thickness_mm", "KVP": "kvp", "StudyDate": "study_date",
               "Modality": "modality", "SeriesDescription": "series_description",
               "ContrastBolusAgent": "contrast_agent"}
_AGE = re.compile(r"^(\d{1,3})([DWMY])$")
_UNIT_YEARS = {"Y": 1.0, "M": 1 / 12, "W": 7 / 365.25, "D": 1 / 365.25}
_DESCRIPTION_ABBREVIATIONS = [
    ("non_contrast", r"\b(?:nc|non\s*con|noncon|pre|plain|native)\b|\bc-(?=\s|$)"),
    ("arterial", r"\b(?:(?:late|early)\s+)?(?:art|arterial)\b"),
    ("venous", r"\b(?:pv|pvp|ven|venous|portal)\b"),
    ("delayed", r"\b(?:del|delay|delayed|eq|equil|equilibrium)\b|\b\d+\s*min\b"),
]
_DESCRIPTION_RE = [re.compile(p, re.IGNORECASE) for _, p in _DESCRIPTION_ABBREVIATIONS]
_DESCRIPTION_VALUE = {p: v for v, p in _DESCRIPTION_ABBREVIATIONS}
#: the rule answer per field: the first of these extractors that gave a value
RULE_PREFERENCE = {"phase": ("dicom_description", "dicom_header"),
                   "age": ("dicom_header", "dicom_birthdate"), "sex": ("dicom_header",),
                   "race": ("dicom_header",)}
DATE_MODES = ("refuse", "allow", "shift")
DateMode = Literal["refuse", "allow", "shift"]
IDENTIFIER_VRS = ("DA", "DT", "TM")
MAX_SHIFT_DAYS = 3650
MSG_DATE_MODE = ("dates={mode!r}: give 'refuse' (default: DICOM dates and times are identifiers "
                 "and stay out of the evidence table), 'allow', or 'shift' with a salt")
MSG_SHIFT_SALT = ("dates='shift' needs a salt: a long random secret text kept out of the report "
                  "(the same salt gives the same shift); give one, or use dates='refuse'")


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


def description_phase(desc: str) -> tuple | None:
    """``(value, start, end)`` of the first phase phrase or series-name abbreviation."""
    hits = phase_matches(desc)
    abbrev = first_hit(_DESCRIPTION_RE, desc, lambda m: _DESCRIPTION_VALUE[m.re.pattern])
    cands = hits[:1] + ([abbrev] if abbrev else [])
    return min(cands, key=lambda h: (h[1], -h[2])) if cands else None


def rule_answer(rows: list[dict]) -> dict[str, dict]:
    """field -> the rule answer's row among one header's rows (:data:`RULE_PREFERENCE`)."""
    return _rule_answer(rows, RULE_PREFERENCE)


def is_identifier(keyword: str) -> bool:
    """True for a date or time element (VR DA, DT or TM)."""
    from pydicom.datadict import dictionary_VR, tag_for_keyword

    tag = tag_for_keyword(keyword)
    return tag is not None and dictionary_VR(tag) in IDENTIFIER_VRS


def date_offset(patient: str, salt: str) -> timedelta:
    """The patient's shift: minus (1..3650 days + 0..86399 s), from SHA-256(salt, patient)."""
    h = hashlib.sha256(f"{salt}\x00{patient}".encode()).digest()
    days = 1 + int.from_bytes(h[:4], "big") % MAX_SHIFT_DAYS
    return -timedelta(days=days, seconds=int.from_bytes(h[4:8], "big") % 86400)


def patient_key(ds, case: str) -> str:
    return _text(ds, "PatientID") or _text(ds, "PatientName") or case


_DT = re.compile(r"^(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\.\d{1,6})?([+-]\d{4})?$")
_DT_WIDTH = (4, 6, 8, 10, 12, 14)


def _shift_dt(value: str, offset: timedelta, *, whole_days: bool = False) -> str:
    """A DA/DT string moved by ``offset`` (by its days only with ``whole_days`` or when the
    value has no time), written back at the precision it had; unparseable: emptied."""
    m = _DT.match(value.strip())
    if not m:
        return ""
    parts = [int(g) if g else None for g in m.groups()[:6]]
    width = _DT_WIDTH[max(i for i, p in enumerate(parts) if p is not None)]
    frac, zone = m.group(7) or "", m.group(8) or ""
    try:
        t = datetime(parts[0], parts[1] or 1, parts[2] or 1, parts[3] or 0, parts[4] or 0,
                     parts[5] or 0, int(float(frac or "0") * 1e6))
    except ValueError:
        return ""
    step = timedelta(days=offset.days) if whole_days or width <= 8 else offset
    return (t + step).strftime("%Y%m%d%H%M%S")[:width] + frac + zone  # whole-second offsets


def _shift_tm(value: str, offset: timedelta) -> str:
    """A TM string moved by ``offset``'s seconds modulo 24 h, at the precision it had;
    unparseable: emptied."""
    s = value.strip().replace(":", "")
    m = re.match(r"^(\d{2})(\d{2})?(\d{2})?(\.\d{1,6})?$", s)
    if not m:
        return ""
    h, mi, se, frac = m.groups()
    total = (int(h) * 3600 + int(mi or 0) * 60 + int(se or 0) + offset.seconds) % 86400
    minutes = f"{total // 60 % 60:02d}" if mi else ""
    return f"{total // 3600:02d}" + minutes + (f"{total % 60:02d}" if se else "") + (frac or "")


def _shift_level(ds, offset: timedelta) -> None:
    """Shift one dataset level in place: date + time partners as instants first, then the
    rest; sequences recursively."""
    elements = {e.keyword: e for e in ds if e.keyword}
    filled = {kw for kw, e in elements.items() if e.VR in IDENTIFIER_VRS and e.value not in (None, "")}
    for kw in sorted(filled):
        date, time = elements[kw], elements.get(kw[:-4] + "Time")
        if (date.VR == "DA" and kw.endswith("Date") and kw[:-4] + "Time" in filled
                and date.VM == 1 and time.VM == 1):
            joined = _shift_dt(str(date.value) + _tm_digits(str(time.value)), offset)
            date.value, time.value = joined[:8], _shift_tm(str(time.value), offset)
            filled -= {kw, time.keyword}
    shifts = {"DA": lambda v: _shift_dt(v, offset, whole_days=True),
              "DT": lambda v: _shift_dt(v, offset), "TM": lambda v: _shift_tm(v, offset)}
    for kw, elem in elements.items():
        if kw in filled:
            shift = shifts[elem.VR]
            elem.value = [shift(str(v)) for v in elem.value] if elem.VM > 1 else shift(str(elem.value))
        elif elem.VR == "SQ":
            for item in elem.value or []:
                _shift_level(item, offset)


def _tm_digits(value: str) -> str:
    m = re.match(r"^(\d{2})(\d{2})?(\d{2})?", value.strip().replace(":", ""))
    return "".join(g or "00" for g in m.groups()) if m else "000000"


def shift_dates(ds, *, salt: str, patient: str | None = None):
    """A copy of ``ds`` with every date and time moved by the patient's salted offset
    (see the module docstring; nested sequences included)."""
    from ..config import ConfigError

    if not salt:
        raise ConfigError(MSG_SHIFT_SALT)
    out = copy.deepcopy(ds)
    _shift_level(out, date_offset(patient or patient_key(ds, case_id_of(ds, Path("unknown"))), salt))
    return out


def _row(case_id, field, value, extractor, evidence, start, end, source):
    return {"case_id": case_id, "field": field, "value": str(value), "extractor": extractor,
            "evidence": evidence, "start": int(start), "end": int(end), "source": source,
            "context": "asserted"}


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


#: elements of which an image's header has at least one (a DICOMDIR or garbage has none)
IMAGE_KEYWORDS = ("SOPClassUID", "SOPInstanceUID", "Modality", "SeriesInstanceUID",
                  "StudyInstanceUID")


def read_header(path):
    """pydicom dataset without pixels, or None when the file is not DICOM (or a DICOM
    header so damaged that pydicom cannot read it: a truncated or garbage file raises
    many kinds of error inside pydicom). Only regular files are opened: a FIFO or a
    device (a link to /dev/zero) would block or read forever."""
    import os
    import stat

    import pydicom

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        ds = pydicom.dcmread(str(path), stop_before_pixels=True)
        # an image's header names its instance, series, study or modality; garbage after
        # a 'DICM' prefix is read as a few meaningless elements, and gives none of them
        if not any(k in ds for k in IMAGE_KEYWORDS):
            return None
        return ds
    except Exception:  # noqa: BLE001 - any failure inside pydicom means "not readable DICOM"
        return None


def case_id_of(ds, path: Path) -> str:
    uid = _text(ds, "SeriesInstanceUID")
    return uid or Path(path).stem


def check_dates(dates: str, salt: str | None) -> None:
    """A ``ConfigError`` naming the fix for an unknown mode or a shift without a salt."""
    from ..config import ConfigError

    if dates not in DATE_MODES:
        raise ConfigError(MSG_DATE_MODE.format(mode=dates))
    if dates == "shift" and not salt:
        raise ConfigError(MSG_SHIFT_SALT)


def extract_dataset(ds, path, *, dates: DateMode = "refuse", salt: str | None = None) -> list[dict]:
    """Evidence rows from one header (all three extractors); ``dates``: see the module
    docstring."""
    check_dates(dates, salt)
    rows: list[dict] = []
    case = case_id_of(ds, Path(path))
    src = f"dicom:{path}"
    shown = shift_dates(ds, salt=salt, patient=patient_key(ds, case)) if dates == "shift" else ds

    def evidence(keyword: str) -> tuple[str, int, int, str]:
        """(evidence, start, end, source) of a whole element as the table may show it."""
        if not is_identifier(keyword) or dates == "allow":
            s = _text(ds, keyword) or ""
            return s, 0, len(s), f"{src}#{keyword}"
        if dates == "refuse":
            return "", 0, 0, f"{src}#{keyword}"
        s = _text(shown, keyword) or ""
        return s, 0, len(s), f"{src}#{keyword}(shifted)"

    modality = _text(ds, "Modality")
    for kw, field in PASSTHROUGH.items():
        if _text(ds, kw) is not None and not (dates == "refuse" and is_identifier(kw)):
            s, start, end, source = evidence(kw)
            rows.append(_row(case, field, s, "dicom_header", s, start, end, source))
    age = _text(ds, "PatientAge")
    if age and (m := _AGE.match(age)):
        years = int(m.group(1)) * _UNIT_YEARS[m.group(2)]
        value = int(years) if m.group(2) == "Y" else round(years, 2)
        rows.append(_row(case, "age", value, "dicom_header", age, 0, len(age), f"{src}#PatientAge"))
    sex = _text(ds, "PatientSex")
    if sex and sex.upper() in ("M", "F", "O"):
        rows.append(_row(case, "sex", sex.upper(), "dicom_header", sex, 0, len(sex), f"{src}#PatientSex"))
    ethnic = _text(ds, "EthnicGroup")
    if ethnic and (race := race_value(ethnic)) is not None:
        rows.append(_row(case, "race", race, "dicom_header", ethnic, 0, len(ethnic),
                         f"{src}#EthnicGroup"))
    b, s = _parse_date(_text(ds, "PatientBirthDate")), _parse_date(_text(ds, "StudyDate"))
    years = None
    if b and s and b <= s:
        years = s.year - b.year - ((s.month, s.day) < (b.month, b.day))
    if years is not None and years <= 120:  # an implausible birth date gives nothing
        rows.append(_row(case, "age", years, "dicom_birthdate", *evidence("PatientBirthDate")))
    if modality in IMAGING:
        rows += _header_phase(ds, case, src, evidence)
        for kw in ("SeriesDescription", "StudyDescription", "ProtocolName"):
            desc = _text(ds, kw)
            hit = description_phase(desc) if desc else None
            if hit is not None:
                value, start, end = hit
                rows.append(_row(case, "phase", value, "dicom_description", desc[start:end], start, end,
                                 f"{src}#{kw}"))
                break
    return rows


def _header_phase(ds, case, src, evidence) -> list[dict]:
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
    return [_row(case, "phase", value, "dicom_header", *evidence("ContrastBolusStartTime"))]


def extract_dicom(paths, advance=None, *, dates: DateMode = "refuse", salt: str | None = None,
                  unreadable: list | None = None) -> list[dict]:
    """Evidence rows for every DICOM series under ``paths`` (non-DICOM files skipped, and
    appended to ``unreadable`` when it is given); ``dates``: see the module docstring."""
    check_dates(dates, salt)
    rows, seen = [], set()
    for f in find_dicom_files(paths):
        ds = read_header(f)
        if advance:
            advance(1)
        if ds is None:
            if unreadable is not None:
                unreadable.append(f)
            continue
        case = case_id_of(ds, f)
        if case in seen:
            continue
        seen.add(case)
        rows += extract_dataset(ds, f, dates=dates, salt=salt)
    return rows
