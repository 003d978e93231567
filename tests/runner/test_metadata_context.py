"""Mentions read in clinical context (medspaCy's ConText and Sectionizer) and race in every
extractor (issue 36 items 1-2): the issue's phrases, each value's evidence verbatim, the
set-aside mentions kept with their label, DICOM EthnicGroup spellings, the LLM's race
validation, and the review/agreement tables reading values only."""
from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("medspacy")

from inference_runner.metadata import EVIDENCE_COLUMNS, asserted  # noqa: E402
from inference_runner.metadata.context import Mention, contexts  # noqa: E402
from inference_runner.metadata.race import RACE_VALUES, race_value  # noqa: E402
from inference_runner.metadata.text import extract_rules, extract_text, rule_answer  # noqa: E402


def _answer(text):
    rows = extract_text("c", text, "text:t#c")
    for r in rows:
        assert text[r["start"]:r["end"]] == r["evidence"] != "", r
    return {f: r["value"] for f, r in rule_answer(rows).items()}, rows


@pytest.mark.parametrize("text, phase", [
    ("No IV contrast was administered due to renal failure.", "non_contrast"),
    ("No contrast-related complications. Portal venous phase.", "venous"),
    ("No contrast-related complications.", None),
    ("COMPARISON: CT of 03/2021 (prior study: without IV contrast).\nTECHNIQUE: CT in the "
     "arterial phase.\nFINDINGS: normal.", "arterial"),
    ("COMPARISON: CT of 03/2021 (prior study: without IV contrast).\nFINDINGS: normal.", None),
    ("Compared with the prior non-contrast study the cyst is unchanged.", None),
    ("Recommend contrast-enhanced CT.", None),
    ("Recommend arterial phase CT for further characterization.", None),
    ("PROTOCOL | delayed (5 min)", "delayed"),
    ("Images in the delayed (5 min) phase.", "delayed"),
    ("CT A/P w/o contrast.", "non_contrast"),
    ("EXAM: CT W/ IV CONTRAST, LATE ARTERIAL PHASE. ORAL CONTRAST: NONE.", "arterial"),
    ("IV contrast: none. Oral contrast: yes.", "non_contrast"),
    ("An arterial phase was not obtained. Venous phase only.", "venous"),
    ("If symptoms persist, consider arterial phase CT.", None),
])
def test_phase_only_from_asserted_current_mentions(text, phase):
    got, rows = _answer(text)
    assert got.get("phase") == phase, (text, rows)


def test_set_aside_mentions_stay_with_their_label():
    text = ("Pt is a 54 y/o Caucasian female. Family hx: mother, aged 60, with pancreatic "
            "cancer. No IV contrast was administered. Compared with the prior arterial phase "
            "study the cyst is unchanged. Recommend delayed phase CT.")
    got, rows = _answer(text)
    assert got == {"age": "54", "sex": "F", "race": "White", "phase": "non_contrast"}
    ctx = {(r["field"], r["evidence"], r["context"]) for r in rows if r["context"] != "asserted"}
    assert ("age", "aged 60", "family") in ctx
    assert ("phase", "arterial phase", "historical") in ctx
    assert ("phase", "delayed phase", "hypothetical") in ctx
    rules = extract_rules(pd.DataFrame({"case_id": ["c"], "text": [text]}), source_prefix="text:x")
    assert {r["context"] for r in rules} == {"asserted", "family", "historical", "hypothetical"}
    assert sum(r["context"] == "asserted" for r in rules) == 4  # one value per field
    assert all(set(r) == set(EVIDENCE_COLUMNS) for r in rules)


def test_context_labels_from_sentences_and_sections():
    text = ("DEMOGRAPHICS | Age 83 | Sex F\nPROTOCOL | non-contrast\nNOTE | delayed phase not "
            "acquired\nPRIORS | CT 2019, venous phase\nFINDINGS | normal")
    spans = [("non-contrast", "PHASE"), ("delayed phase", "PHASE"), ("venous phase", "PHASE"),
             ("Age 83", "AGE")]
    got = contexts(text, [Mention(k, text.index(w), text.index(w) + len(w)) for w, k in spans])
    assert got == [frozenset(), frozenset({"negated"}), frozenset({"historical"}), frozenset()]
    # a lone "Comparison:" line in prose is no section: the current study after it stays current
    prose = "Comparison: non-contrast CT from 2019. Current study: portal venous phase CT."
    got, _ = _answer(prose)
    assert got == {"phase": "venous"}
    # "CLINICAL HISTORY" is no past event (medspaCy's default "history" rule would say so)
    got, _ = _answer("CLINICAL HISTORY: 66 year old woman with haematuria.")
    assert got == {"age": "66", "sex": "F"}


@pytest.mark.parametrize("text, race", [
    ("67 year old African American female.", "Black"),
    ("62M AA, r/o appendicitis.", "Black"),
    ("Race: Caucasian.", "White"),
    ("Race/Ethnicity: Hispanic/Latino", "Hispanic/Latino"),
    ("Race: non-Hispanic White", "White"),
    ("The patient declined to state race.", "Declined"),
    ("Race: declined.", "Declined"),
    ("race: unk.", "Unknown"),
    ("Race/Ethnicity: Not recorded", "Unknown"),
    ("She is of East Asian descent.", "Asian"),
    ("Periventricular white matter lesions. Black stool reported.", None),
    ("Her mother is Caucasian.", None),
    ("AAA repair in 2019.", None),
])
def test_race_phrasings_map_to_the_stated_values(text, race):
    got, _ = _answer(text)
    assert got.get("race") == race


def test_dicom_ethnic_group_spellings():
    pydicom = pytest.importorskip("pydicom")
    from inference_runner.metadata.dicom import extract_dataset, rule_answer as dicom_answer

    for spelling, value in [("WHITE", "White"), ("W", "White"), ("CAUCASIAN", "White"),
                            ("2106-3", "White"), ("AFR AM", "Black"), ("B", "Black"),
                            ("African American", "Black"), ("HISP", "Hispanic/Latino"),
                            ("UNK", "Unknown"), ("PT REFUSED", "Declined"), ("ASIAN", "Asian")]:
        ds = pydicom.Dataset()
        ds.Modality, ds.EthnicGroup = "CT", spelling
        row = dicom_answer(extract_dataset(ds, "x.dcm"))["race"]
        assert (row["value"], row["evidence"], row["source"]) == (value, spelling, "dicom:x.dcm#EthnicGroup")
    ds = pydicom.Dataset()
    ds.Modality, ds.EthnicGroup = "CT", "XYZ"
    assert "race" not in dicom_answer(extract_dataset(ds, "x.dcm"))
    assert all(race_value(v) == v for v in RACE_VALUES)


def test_llm_race_must_be_stated_by_its_evidence():
    from inference_runner.metadata.llm import PROMPT, parse_answer

    text = "Pt is a 54 y/o African-American female. Findings unremarkable."
    rows, rejected = parse_answer(
        '[{"field": "race", "value": "African American", "evidence": "African-American"},'
        ' {"field": "race", "value": "White", "evidence": "unremarkable"},'
        ' {"field": "race", "value": "Martian", "evidence": "female"}]',
        text, case_id="c", source="s")
    assert [(r["value"], r["evidence"], r["context"]) for r in rows] == [
        ("Black", "African-American", "asserted")]
    assert rejected == 2
    assert "race" in PROMPT and "prior" in PROMPT and "relative" in PROMPT


def test_comparison_and_review_read_values_only():
    from inference_runner.metadata.compare import agreement, disagreements

    ev = pd.DataFrame([
        ("1", "phase", "venous", "a", "PV", 0, 2, "s", "asserted"),
        ("1", "phase", "venous", "b", "PV", 0, 2, "s", "asserted"),
        ("1", "phase", "arterial", "b", "art", 5, 8, "s", "historical"),
        ("2", "phase", "arterial", "a", "art", 0, 3, "s", "asserted"),
        ("2", "phase", "arterial", "b", "art", 0, 3, "s", "asserted"),
    ], columns=list(EVIDENCE_COLUMNS))
    assert len(asserted(ev)) == 4
    ag = agreement(ev)
    assert ag["n_agree"].tolist() == [2] and disagreements(ev).empty
