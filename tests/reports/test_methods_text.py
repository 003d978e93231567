"""The methods text and the checklist map say what this study holds (the demo and
variants of its plan):

1. ``detection.cluster: none`` while patient ids repeat: the methods says clustering was
   turned off by the plan and how many patients have several scans, never "one scan per
   patient"; "one scan per patient" only where that is true.
2. The missing-data sentence is built from the results: which axes have missing values
   and how many, "not applicable" attributes, a recorded "Unknown" and the complete-case
   refit only where they exist, the scans the adjusted models left out; one sentence when
   nothing is missing.
3. The checklist's missing-data items (STARD 15-16, TRIPOD+AI 11) cite Methods only where
   its missing-data sentence exists (and Subgroups where a "Missing" level is shown); a
   CRS-only report marks them not addressed.

Every expected count is recomputed here from the cases table with pandas.
"""
from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"
MISSING_ITEMS = {("STARD 2015", "15-16"), ("TRIPOD+AI", "11")}


def _study(folder: Path, edit_plan=None, edit_cases=None, *, detection=True, crs=False):
    """A variant of the demo study in ``folder``: the demo's plan without the metadata and
    probe inputs (and without the CRS half unless ``crs``), edited by ``edit_plan(raw)``;
    the cases table edited by ``edit_cases(df) -> df``."""
    from reports.study import load_study
    from analysis import load_plan
    from analysis.inputs import plan_limits

    raw = yaml.safe_load((DEMO / "plan.yaml").read_text())
    for key in ("probe_predictions", "metadata", "lesions"):
        raw["inputs"].pop(key, None)
    raw.pop("metadata", None)
    (raw.get("detection") or {}).pop("lesions", None)  # lesions.parquet is not copied
    if detection:
        cases = pd.read_parquet(DEMO / "cases.parquet")
        (edit_cases(cases) if edit_cases else cases).to_parquet(folder / "cases.parquet")
    else:
        raw.pop("detection")
        raw["inputs"].pop("cases")
    if crs:
        for name in ("runs.parquet", "reference.yaml"):
            shutil.copy(DEMO / name, folder / name)
        raw["crs"]["bootstrap"]["n_boot"] = 200
    else:
        raw.pop("crs")
        raw["inputs"].pop("runs")
        raw["inputs"].pop("reference")
    if detection:
        raw["detection"].pop("bootstrap")  # not what these tests read; faster
        for key in ("compare_metrics", "subgroup_gaps"):   # they need the bootstrap
            raw["detection"].pop(key, None)
    if edit_plan:
        edit_plan(raw)
    (folder / "plan.yaml").write_text(yaml.safe_dump(raw))
    plan = load_plan(folder / "plan.yaml")
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_study(plan)


def _sections(study, only=None) -> dict:
    from reports.sections import build_all
    from analysis.inputs import plan_limits

    with plan_limits(study.plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {s.key: s for s in build_all(study, only=only, strict=True)}


def _methods_text(sections) -> str:
    return " ".join(b for b in sections["methods"].blocks if isinstance(b, str))


def _missing_sentence(methods: str) -> str:
    m = re.search(r"Missing data: .*?\.(?= [A-Z*]|$)", methods)
    assert m, methods
    return m.group(0)


def _checklist(sections) -> dict:
    data = sections["checklist"].tables[0].data
    return {(r.guideline, r.item): r.sections for r in data.itertuples()}


def _sizes_recorded(cases: pd.DataFrame) -> pd.DataFrame:
    """The demo's cases with a tumour size for every reference positive (the demo leaves
    3% unrecorded: inference_runner.demo.unrecorded_sizes); 15 mm where it had none."""
    c = cases.copy()
    c.loc[(c["label"] == 1) & c["tumor_size_mm"].isna(), "tumor_size_mm"] = 15.0
    return c


def _test_split(cases: pd.DataFrame) -> pd.DataFrame:
    return cases[cases["split"] == "test"]


def _no_adjusted(raw):
    raw["detection"].pop("adjusted")


# ------------------------------------------------------------------ 1. clustering turned off


def test_cluster_none_with_repeated_patients_says_the_plan_turned_it_off(tmp_path):
    def plan(raw):
        _no_adjusted(raw)
        raw["detection"]["cluster"] = "none"

    study = _study(tmp_path, plan)
    assert study.results.decisions["detection.cluster"] is None
    text = _methods_text(_sections(study, only=("methods",)))
    ev = _test_split(pd.read_parquet(DEMO / "cases.parquet"))
    per = ev.groupby(["model", "patient_id"]).size()
    several = (per > 1).groupby(level=0).sum()
    patients = per.groupby(level=0).size()
    assert several.max() > 0  # the demo's patients repeat
    m = several.idxmax()
    assert "Each patient contributes one scan" not in text
    assert "Clustering was turned off by the plan" in text
    assert (f"independent although {several[m]} of the {patients[m]} patients have several "
            f"scans") in text
    assert "Scans are clustered within" not in text


def test_one_scan_per_patient_is_said_only_when_true(tmp_path):
    def one_per_patient(cases):
        return cases.assign(patient_id=cases["case_id"])

    for cluster, note in (("none", True), ("auto", False)):
        folder = tmp_path / cluster
        folder.mkdir()

        def plan(raw, cluster=cluster):
            _no_adjusted(raw)
            raw["detection"]["cluster"] = cluster

        study = _study(folder, plan, one_per_patient)
        text = _methods_text(_sections(study, only=("methods",)))
        assert "Each patient contributes one scan per model" in text
        assert "Clustering was turned off" not in text
        assert ("the plan also sets" in text) is note


# ------------------------------------------------------------------ 2. missing-data sentence


def test_missing_data_without_race_or_adjusted_models(tmp_path):
    """No race column, no adjusted models: no word of Unknown, complete case, the
    adjusted models or their variance table."""
    def plan(raw):
        _no_adjusted(raw)
        raw["detection"]["subgroups"] = [a for a in raw["detection"]["subgroups"]
                                         if a != "race"]
        raw["detection"].pop("gaps")    # the demo's contrast is race Unknown vs White

    study = _study(tmp_path, plan, lambda c: _sizes_recorded(c).drop(columns=["race"]))
    sentence = _missing_sentence(_methods_text(_sections(study, only=("methods",))))
    for absent in ("Unknown", "race", "complete case", "variance table", "adjusted",
                   "na.omit"):
        assert absent not in sentence, (absent, sentence)
    # the demo's tumour attributes of reference negatives are not applicable, not missing
    assert "no subgroup axis or baseline characteristic has a missing value" in sentence
    assert re.search(r"size\\?_group and tumor\\?_location of reference-negative scans read "
                     r"\"not applicable\"", sentence), sentence


def test_nothing_missing_is_one_sentence(tmp_path):
    def plan(raw):
        _no_adjusted(raw)
        det = raw["detection"]
        det.pop("gaps")    # the demo's contrast is race Unknown vs White, by tumour size
        det["subgroups"] = ["phase", "sex", "site"]
        det["bins"].pop("tumor_size_mm")
        det.pop("failure_map")

    def cases(c):
        c = c.drop(columns=["race", "tumor_size_mm", "tumor_location"])
        return c

    study = _study(tmp_path, plan, cases)
    sentence = _missing_sentence(_methods_text(_sections(study, only=("methods",))))
    assert sentence == ("Missing data: no subgroup axis or baseline characteristic of the "
                        "evaluated scans has a missing value.")


def test_missing_values_are_named_and_counted(tmp_path):
    """Some ages and phases missing (per case, every model): the axes name them with their
    counts, the adjusted models state the scans they left out and why; the demo's race
    Unknown and its complete-case refit are still described."""
    rng = np.random.default_rng(11)
    ids = pd.read_parquet(DEMO / "cases.parquet")["case_id"].unique()
    no_age, no_phase = rng.choice(ids, 30, replace=False), rng.choice(ids, 17, replace=False)

    def cases(c):
        c = c.copy()
        c.loc[c["case_id"].isin(no_age), "age"] = np.nan
        c["phase"] = c["phase"].astype(object)
        c.loc[c["case_id"].isin(no_phase), "phase"] = None
        return c

    study = _study(tmp_path, None, cases)
    sections = _sections(study, only=("methods", "subgroups", "adjusted", "checklist"))
    sentence = _missing_sentence(_methods_text(sections))
    ev = _test_split(cases(pd.read_parquet(DEMO / "cases.parquet")))
    one = ev[ev["model"] == ev["model"].iloc[0]]
    n_phase, n_age = int(one["phase"].isna().sum()), int(one["age"].isna().sum())
    assert n_phase and n_age
    assert "a missing subgroup value is shown as a level of its own" in sentence
    assert "tests of equal sensitivity and specificity across levels leave it out" in sentence
    assert f"phase ({n_phase} scans)" in sentence
    assert re.search(rf"age\\?_group \({n_age} scans\)", sentence), sentence
    pos = one[one["label"] == 1]
    gone = int((pos["phase"].isna() | pos["age"].isna() | pos["tumor_size_mm"].isna()).sum())
    assert (f"which leaves out {gone} of {len(pos)} scans of each model's population"
            in sentence), sentence
    assert f"phase: {int(pos['phase'].isna().sum())} missing" in sentence
    unknown = int((one["race"] == "Unknown").sum())
    assert f"\"Unknown\" (race: {unknown} scans)" in sentence
    assert "refitted without race Unknown beside the main fit" in sentence
    assert "variance table" in sentence  # the adjusted section is in this report
    # a Missing level in the subgroup tables: the checklist cites Subgroups too
    items = _checklist(sections)
    for key in MISSING_ITEMS:
        assert "Methods" in items[key] and "Subgroup" in items[key], items[key]


def test_demo_missing_data_sentence(tmp_path):
    """The demo: sizes missing for 3% of the positives (a Missing level of the size axis,
    scans left out of the adjusted models), tumour attributes not applicable to negatives,
    race Unknown kept in the adjusted models and refitted without it."""
    study = _study(tmp_path)
    sections = _sections(study, only=("methods", "adjusted", "checklist"))
    sentence = _missing_sentence(_methods_text(sections))
    one = _test_split(pd.read_parquet(DEMO / "cases.parquet"))
    one = one[one["model"] == one["model"].iloc[0]]
    pos = one[one["label"] == 1]
    unknown = int((one["race"] == "Unknown").sum())
    no_size = int(pos["tumor_size_mm"].isna().sum())
    assert no_size > 0
    assert re.search(rf"values are missing in size\\?_group \({no_size} scans\)", sentence), \
        sentence
    assert (f"\"Unknown\" (race: {unknown} scans) is a recorded category, shown as a level "
            f"and kept in the adjusted models") in sentence
    cc = int(((pos["race"] == "Unknown") | pos["tumor_size_mm"].isna()).sum())
    assert f"the GLMM leaves out {cc} of {len(pos)} scans" in sentence, sentence
    assert (f"which leaves out {no_size} of {len(pos)} scans of each model's population "
            f"(tumor\\_size\\_mm: {no_size} missing)") in sentence or \
        (f"which leaves out {no_size} of {len(pos)} scans of each model's population "
         f"(tumor_size_mm: {no_size} missing)") in sentence, sentence
    items = _checklist(sections)
    for key in MISSING_ITEMS:
        assert items[key].startswith("Methods"), items[key]


# ------------------------------------------------------------------ 3. checklist map


def test_crs_only_report_does_not_claim_the_missing_data_items(tmp_path):
    study = _study(tmp_path, detection=False, crs=True)
    sections = _sections(study)
    assert "methods" in sections and "flow" not in sections
    assert "Missing data" not in _methods_text(sections)
    items = _checklist(sections)
    for key in MISSING_ITEMS:
        assert "Methods" not in items[key], (key, items[key])
        assert items[key].startswith("not addressed"), (key, items[key])
    from reports.sections.checklist import NOT_ADDRESSED_MISSING

    assert {items[k] for k in MISSING_ITEMS} == {NOT_ADDRESSED_MISSING}
    # the other items that cite Methods still do, except those about the detection design
    assert "Methods" in items[("TRIPOD+AI", "18f")]
    for key in (("STARD 2015", "12a"), ("STARD 2015", "14"), ("STARD 2015", "17"),
                ("TRIPOD+AI", "14")):
        assert "Methods" not in items[key], (key, items[key])


def test_no_patient_id_column_is_said_as_such(tmp_path):
    """Second review: read_cases fills a missing patient_id from case_id, so the methods
    said one scan per patient; without the column it says the column is absent."""
    study = _study(tmp_path, _no_adjusted, lambda c: c.drop(columns=["patient_id"]))
    text_ = _methods_text(_sections(study, only=("methods",)))
    assert "no patient_id column" in text_ and "one scan per model" not in text_
    assert study.results.decisions["detection.patient_repeats"] is None
