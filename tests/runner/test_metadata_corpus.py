"""The labelled metadata corpus (tests/data): the generator reproduces the committed part,
the corpus has the phrasings a report writer uses, the rules reach 98% per field on the held-out
part, the recorded accuracy table is what the extractors give today, every value's
evidence is its verbatim span, and the classifier is deterministic and disagrees with the
rules in other places."""
from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest

pydicom = pytest.importorskip("pydicom")
pytest.importorskip("medspacy")  # report texts: each mention's context (runner extra)
pytest.importorskip("sklearn")

from inference_runner.config import ConfigError  # noqa: E402
from inference_runner.metadata.classifier import (  # noqa: E402
    MSG_COLUMNS,
    classifier_answers,
    extract_with_classifier,
    train_classifier,
)
from inference_runner.metadata.dicom import extract_dataset  # noqa: E402
from inference_runner.metadata.text import extract_rules, extract_text  # noqa: E402

_SPEC = importlib.util.spec_from_file_location(
    "make_metadata_corpus", Path(__file__).resolve().parents[1] / "data" / "make_metadata_corpus.py")
corpus = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(corpus)


@pytest.fixture(scope="module")
def records():
    return corpus.load_corpus()


@pytest.fixture(scope="module")
def texts(records):
    return [r for r in records if r["kind"] == "text"]


@pytest.fixture(scope="module")
def model(texts):
    return train_classifier([r for r in texts if corpus.split_of(r) == "tuning"])


@pytest.fixture(scope="module")
def accuracy(records, model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydicom warns on the lower-case PatientSex 'm' cases
        return pd.DataFrame(corpus.accuracy_table(records, model))


def test_generator_reproduces_the_committed_corpus():
    assert corpus.dumps(corpus.generate()) == corpus.GENERATED.read_text(encoding="utf-8")


def test_corpus_size_split_and_phrasings(records, texts):
    assert len(texts) >= 300 and len({r["id"] for r in records}) == len(records)
    splits = pd.Series([corpus.split_of(r) for r in texts]).value_counts()
    assert splits["held_out"] >= 100 and splits["tuning"] >= 200
    joined = "\n".join(r["text"] for r in texts)
    for pattern in [r"\d+-year-old", r"\d+ yo\b", r"(?i)age: \d+", r"\b\d+y\b", r"(?i)seventy-two",
                    r"\b\d+M\b", r"Sex: F", r"Gender: female", r"\bwoman\b", r"\bgentleman\b",
                    r"portal venous", r"PV phase", r"late arterial", r"[Uu]nenhanced",
                    r"without IV contrast", r"[Nn]on-contrast", r"equilibrium/delayed",
                    r"nephrographic", r"(?i)no oral contrast", r"(?i)no IV contrast",
                    r"[A-Z]{5,} [A-Z]{5,}"]:  # upper-case dictation
        assert re.search(pattern, joined), pattern
    for field in corpus.FIELDS:  # some of every field absent, in every split
        for split in ("tuning", "held_out"):
            assert any(r[field] is None for r in texts if corpus.split_of(r) == split), (field, split)
    headers = [r["header"] for r in records if r["kind"] == "dicom"]
    ages = {h.get("PatientAge", "") for h in headers}
    assert any(re.fullmatch(r"\d{3}Y", a) for a in ages) and any(re.fullmatch(r"\d{3}M", a) for a in ages)
    descriptions = {h.get("SeriesDescription") for h in headers}
    assert {"PORTAL VENOUS 5mm", "ART", "NC"} <= descriptions
    assert sum(r["kind"] == "dicom_file" for r in records) >= 5


def test_rules_reach_98_percent_per_field_on_the_held_out_part(accuracy):
    rules = accuracy[(accuracy["extractor"] == "rules") & (accuracy["split"] == "held_out")]
    assert set(rules["kind"]) == {"text", "dicom"} and len(rules) == 8  # 4 fields x 2 kinds
    low = rules[rules["accuracy"] < 0.98]
    assert low.empty, low.to_string()


def test_recorded_accuracy_table_is_current(accuracy):
    """tests/data/metadata_corpus_accuracy.csv is what the extractors give today
    (rerun tests/data/make_metadata_corpus.py after changing them)."""
    assert corpus.accuracy_csv(accuracy.to_dict("records")) == corpus.ACCURACY.read_text(encoding="utf-8")


def test_classifier_is_a_second_opinion_with_other_failures(accuracy, texts, model):
    clf = accuracy[(accuracy["extractor"] == "text_classifier") & (accuracy["split"] == "held_out")]
    assert len(clf) == 4 and (clf["accuracy"] > 0.6).all()
    held = [r for r in texts if corpus.split_of(r) != "tuning"]
    answers = classifier_answers([r["text"] for r in held], model)
    wrong_clf = {(r["id"], f) for r, a in zip(held, answers) for f in corpus.FIELDS
                 if not corpus.correct(r.get(f), a.get(f))}
    rules = [corpus.rule_answers(r) for r in held]
    wrong_rules = {(r["id"], f) for r, a in zip(held, rules) for f in corpus.FIELDS
                   if not corpus.correct(r.get(f), a.get(f))}
    assert wrong_clf and wrong_clf != wrong_rules and wrong_clf - wrong_rules


def test_every_value_carries_its_verbatim_span(records, texts, model):
    answers = classifier_answers([r["text"] for r in texts], model)
    for r, answer in zip(texts, answers):
        rows = extract_text(r["id"], r["text"], "text:corpus") + list(answer.values())
        for row in rows:
            assert r["text"][row["start"]:row["end"]] == row["evidence"] != "", (r["id"], row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in records:
            if r["kind"] == "text":
                continue
            ds = corpus.dataset_of(r)
            for row in extract_dataset(ds, r["id"], dates="allow"):
                keyword = row["source"].rsplit("#", 1)[1]
                assert str(ds.get(keyword) or "").strip()[row["start"]:row["end"]] == row["evidence"], row


def test_extract_rules_gives_one_answer_per_field():
    reports = pd.DataFrame({"case_id": ["a", "b"],
                            "text": ["No oral contrast. PV phase. 72 yo F; she is well.", "Liver normal."]})
    rows = extract_rules(reports, source_prefix="text:r.csv")
    got = {(r["case_id"], r["field"]): (r["value"], r["evidence"]) for r in rows}
    assert got == {("a", "phase"): ("venous", "PV phase"), ("a", "age"): ("72", "72 yo"),
                   ("a", "sex"): ("F", "72 yo F")}
    assert {r["extractor"] for r in rows} == {"text_rules"} and rows[0]["source"] == "text:r.csv#a"


def test_classifier_is_deterministic_and_checks_its_corpus(texts, model):
    tuning = [r for r in texts if corpus.split_of(r) == "tuning"]
    again = train_classifier(pd.DataFrame(tuning))
    reports = pd.DataFrame({"case_id": [r["id"] for r in texts], "text": [r["text"] for r in texts]})
    assert extract_with_classifier(reports, model) == extract_with_classifier(reports, again)
    rows = extract_with_classifier(reports.head(3), model, source_prefix="text:x.csv")
    assert rows and {r["extractor"] for r in rows} == {"text_classifier"}
    assert all(r["source"].startswith("text:x.csv#") for r in rows)
    with pytest.raises(ConfigError, match=re.escape(MSG_COLUMNS.format(missing="phase"))):
        train_classifier([{"text": "x", "age": 1, "sex": "F"}])
    one_sex = [{**r, "sex": "F"} for r in tuning]
    with pytest.raises(ConfigError, match="field 'sex' has only the value"):
        train_classifier(one_sex)
