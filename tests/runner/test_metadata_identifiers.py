"""DICOM dates and times are identifiers: refused by default, written
only when allowed, or shifted per patient by a salted offset that keeps intervals."""
from __future__ import annotations

import re
import warnings
from datetime import datetime
from pathlib import Path

import pytest

pydicom = pytest.importorskip("pydicom")
pytest.importorskip("medspacy")  # a series description's phase is read in context
from pydicom.dataset import Dataset  # noqa: E402

from inference_runner.config import ConfigError  # noqa: E402
from inference_runner.metadata.dicom import MSG_SHIFT_SALT, date_offset, extract_dataset, is_identifier, shift_dates  # noqa: E402
from inference_runner.metadata.extract import extract_paths  # noqa: E402

TEST_FILES = Path(pydicom.data.__file__).parent / "test_files"  # never get_testdata_files('*')
ECG = TEST_FILES / "waveform_ecg.dcm"  # PatientBirthDate 19710123, StudyDate 20130125


def _date_elements(ds) -> list[tuple[str, str]]:
    """(keyword, value) of every date and time value, nested sequences included, in order."""
    out = []
    for elem in ds.iterall():
        if elem.VR in ("DA", "DT", "TM") and elem.value not in (None, ""):
            values = elem.value if elem.VM > 1 else [elem.value]
            out += [(elem.keyword, str(v).strip()) for v in values if str(v).strip()]
    return out


def _dates_and_times(ds) -> set[str]:
    return {v for _, v in _date_elements(ds)}


def _header(**extra) -> Dataset:
    ds = Dataset()
    ds.PatientID, ds.Modality, ds.PatientAge = "P1", "CT", "061Y"
    ds.PatientBirthDate = "19600229"
    ds.StudyDate, ds.StudyTime = "20210301", "233000"
    ds.SeriesDate, ds.SeriesTime = "20210302", "001500.25"
    ds.AcquisitionDateTime = "20210302001610.5"
    ds.ContrastBolusAgent, ds.ContrastBolusStartTime, ds.AcquisitionTime = "OMNIPAQUE", "001500", "001610"
    ds.ContentDate = "20210302"
    item = Dataset()
    item.ScheduledProcedureStepStartDate = "20210228"
    ds.RequestAttributesSequence = [item]
    for k, v in extra.items():
        setattr(ds, k, v)
    return ds


def _instant(date: str, time: str = "000000") -> datetime:
    return datetime.strptime(date + time.split(".")[0].ljust(6, "0"), "%Y%m%d%H%M%S")


@pytest.fixture(scope="module")
def shipped():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {mode: extract_paths([TEST_FILES], dates=mode, salt="s3cret")[0]
                for mode in ("refuse", "allow", "shift")}


def test_identifier_keywords():
    assert all(map(is_identifier, ["StudyDate", "SeriesDate", "AcquisitionDateTime", "ContentDate",
                                   "PatientBirthDate", "StudyTime", "ContrastBolusStartTime"]))
    assert not any(map(is_identifier, ["PatientAge", "PatientSex", "SeriesDescription", "NotAKeyword"]))


def test_refused_by_default_no_date_or_time_reaches_the_table(shipped):
    t = shipped["refuse"]
    assert "study_date" not in set(t["field"]) and "study_date" in set(shipped["allow"]["field"])
    for path in sorted(set(t["source"].str.extract(r"^dicom:(.*)#")[0].dropna())):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            secrets = _dates_and_times(pydicom.dcmread(path, stop_before_pixels=True))
        rows = t[t["source"].str.startswith(f"dicom:{path}#")]
        assert not secrets & (set(rows["evidence"]) | set(rows["value"])), path
    # the age derived from the birth date stays, without its evidence
    ecg = t[t["source"] == f"dicom:{ECG}#PatientBirthDate"]
    assert list(zip(ecg["value"], ecg["evidence"], ecg["start"], ecg["end"])) == [("42", "", 0, 0)]


def test_allowed_dates_are_written_verbatim(shipped):
    t = shipped["allow"]
    ecg = t[t["source"].str.startswith(f"dicom:{ECG}#")].set_index("field")
    assert ecg.loc["study_date", "value"] == ecg.loc["study_date", "evidence"] == "20130125"
    assert ecg[ecg["extractor"] == "dicom_birthdate"]["evidence"].tolist() == ["19710123"]


def test_shift_needs_a_salt_and_a_known_mode():
    with pytest.raises(ConfigError, match=re.escape(MSG_SHIFT_SALT)):
        extract_dataset(_header(), "x.dcm", dates="shift")
    with pytest.raises(ConfigError, match="dates='keep'.*'refuse'.*'allow'.*'shift'"):
        extract_dataset(_header(), "x.dcm", dates="keep")
    with pytest.raises(ConfigError, match=re.escape(MSG_SHIFT_SALT)):
        extract_paths([ECG], dates="shift")


def test_shift_moves_every_date_and_time_and_keeps_intervals():
    ds = _header()
    out = shift_dates(ds, salt="s3cret")
    assert ds.StudyDate == "20210301"  # the input is not touched
    assert ds.RequestAttributesSequence[0].ScheduledProcedureStepStartDate == "20210228"
    before, after = _date_elements(ds), _date_elements(out)
    assert len(before) == len(after) == 10 and [k for k, _ in before] == [k for k, _ in after]
    assert all(a != b for (_, a), (_, b) in zip(before, after))  # every value moved
    off = date_offset("P1", "s3cret")
    assert off == date_offset("P1", "s3cret") != date_offset("P2", "s3cret") != date_offset("P1", "other")
    assert -3651 <= off.days <= -1
    # instants (date + time partner, DT) move by the whole offset, exactly
    study, series = _instant(out.StudyDate, out.StudyTime), _instant(out.SeriesDate, out.SeriesTime)
    assert study - _instant("20210301", "233000") == off
    assert series - study == _instant("20210302", "001500") - _instant("20210301", "233000")
    assert out.SeriesTime.endswith(".25") and out.AcquisitionDateTime.endswith(".5")
    assert _instant(out.AcquisitionDateTime[:8], out.AcquisitionDateTime[8:14]) - series == \
        _instant("20210302", "001610") - _instant("20210302", "001500")
    # lone dates by whole days, lone times modulo 24 h, nested sequences included
    lone = [("PatientBirthDate", "19600229"), ("ContentDate", "20210302")]
    for kw, was in lone:
        assert (_instant(getattr(out, kw)) - _instant(was)).days == off.days
    item = out.RequestAttributesSequence[0].ScheduledProcedureStepStartDate
    assert (_instant(item) - _instant("20210228")).days == off.days
    t0, t1 = (_instant("20000101", getattr(out, k)) for k in ("ContrastBolusStartTime", "AcquisitionTime"))
    assert (t1 - t0).total_seconds() % 86400 == 70


def test_shifted_extraction_shows_only_shifted_values_and_true_derived_values():
    ds = _header()
    rows = extract_dataset(ds, "x.dcm", dates="shift", salt="s3cret")
    shifted = shift_dates(ds, salt="s3cret")
    by = {(r["field"], r["extractor"]): r for r in rows}
    study = by[("study_date", "dicom_header")]
    assert study["value"] == study["evidence"] == shifted.StudyDate != ds.StudyDate
    assert study["source"] == "dicom:x.dcm#StudyDate(shifted)"
    birth = by[("age", "dicom_birthdate")]
    assert birth["value"] == "61" and birth["evidence"] == shifted.PatientBirthDate  # age from the true dates
    timing = by[("phase", "dicom_header")]
    assert timing["value"] == "venous" and timing["evidence"] == shifted.ContrastBolusStartTime
    assert not _dates_and_times(ds) & {r["evidence"] for r in rows}
    # the same patient in another series keeps the same offset: the interval between studies stays
    later = extract_dataset(_header(StudyDate="20210401"), "y.dcm", dates="shift", salt="s3cret")
    later_date = next(r["value"] for r in later if r["field"] == "study_date")
    assert (_instant(later_date) - _instant(study["value"])).days == 31
    refused = extract_dataset(ds, "x.dcm")
    assert "study_date" not in {r["field"] for r in refused}
    derived = [r for r in refused if r["source"].endswith(("#PatientBirthDate", "#ContrastBolusStartTime"))]
    assert len(derived) == 2 and {r["evidence"] for r in derived} == {""}


def test_a_date_or_time_that_does_not_parse_is_emptied_not_kept():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydicom warns on the invalid values themselves
        ds = _header(InstanceCreationTime="noon", InstanceCreationDate="2021.03.01", StudyTime="23:30:00")
        out = shift_dates(ds, salt="s3cret")
    assert out.InstanceCreationTime == "" and out.InstanceCreationDate == ""
    # the old colon form still parses: StudyDate + StudyTime move together
    assert _instant(out.StudyDate, out.StudyTime) - _instant("20210301", "233000") == date_offset("P1", "s3cret")
