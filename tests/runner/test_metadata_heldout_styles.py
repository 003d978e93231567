"""Accuracy on report styles the extractors were not written for (issue 36 item 4): five
institutional styles (tests/data/make_metadata_heldout.py, committed before the context
and race handling were built) with negated, prior-study, hypothetical and family
mentions. The rules extract each field correctly in >= 95% of the reports that state it,
per style, and extract a value in <= 1% of those that do not (absent, or only in another
context), per field; the recorded table is what the extractors give today; the set is in
no training corpus."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("medspacy")
pytest.importorskip("sklearn")

DATA = Path(__file__).resolve().parents[1] / "data"


def _module(name):
    spec = importlib.util.spec_from_file_location(name, DATA / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


heldout = _module("make_metadata_heldout")
corpus = _module("make_metadata_corpus")


@pytest.fixture(scope="module")
def records():
    return heldout.load()


@pytest.fixture(scope="module")
def table(records):
    return pd.DataFrame(heldout.measure(records))


def test_generator_reproduces_the_committed_styles(records):
    assert heldout.dumps(heldout.generate()) == heldout.HELDOUT.read_text(encoding="utf-8")
    assert {r["style"] for r in records} == set(heldout.STYLE_NAMES) and len(heldout.STYLE_NAMES) >= 5
    traps = {t for r in records for t in r["traps"]}
    assert {"prior_phase", "hypothetical_phase", "negated_phase", "family_age",
            "negated_unrelated"} <= traps
    for field in heldout.FIELDS:  # every field both stated and not, in every style
        for style in heldout.STYLE_NAMES:
            labels = [r[field] for r in records if r["style"] == style]
            assert any(v is None for v in labels) and any(v is not None for v in labels)


def test_the_held_out_styles_are_in_no_training_corpus(records):
    from inference_runner.metadata import demo
    from inference_runner.metadata.synthetic import labelled_reports

    texts = {r["text"] for r in records}
    trained = {r["text"] for r in corpus.load_corpus() if r["kind"] == "text"}
    trained |= {r["text"] for r in labelled_reports(demo.TRAIN_STYLES, demo.N_TRAIN,
                                                    seed="clinrel-demo-classifier-0")}
    assert not texts & trained
    assert "heldout" not in (DATA / "make_metadata_corpus.py").read_text().split('"""', 2)[2]


def test_rules_reach_95_percent_per_style_and_at_most_1_percent_false(table):
    rules = table[table["extractor"] == "rules"]
    per_style = rules[rules["style"] != "all"]
    low = per_style[per_style["n_correct"] < 0.95 * per_style["n_stated"]]
    assert low.empty, low.to_string()
    pooled = rules[rules["style"] == "all"].set_index("field")
    assert set(pooled.index) == {"age", "sex", "race", "phase"}
    assert (pooled["n_false"] <= 0.01 * pooled["n_not_stated"]).all(), pooled.to_string()


def test_recorded_accuracy_table_is_current(table):
    """tests/data/metadata_heldout_accuracy.csv (docs/validation.md quotes it) is what the
    extractors give today; rerun tests/data/make_metadata_heldout.py after changing them."""
    assert heldout.accuracy_csv(table.to_dict("records")) == heldout.ACCURACY.read_text(
        encoding="utf-8")


def test_trap_reports_read_the_current_study_only(records):
    """Reports whose only phase mention is a prior, negated or recommended one give no
    phase; those stating the phase as well give the current one, not the trap's."""
    from inference_runner.metadata.text import extract_text, rule_answer

    trapped = [r for r in records if {"prior_phase", "hypothetical_phase", "negated_phase"}
               & set(r["traps"])]
    assert len(trapped) > 100
    kept = 0
    for r in trapped:
        rows = extract_text(r["id"], r["text"], "text:heldout")
        got = rule_answer(rows).get("phase")
        assert heldout.correct(r["phase"], got), (r["id"], r["text"], got)
        aside = [x for x in rows if x["field"] == "phase" and x["context"] != "asserted"]
        kept += bool(aside)  # the trap is kept, with its label ("PRIORS | CT 2019, delayed":
        for x in aside:      # a bare word there is no phase phrase, so nothing to keep)
            assert r["text"][x["start"]:x["end"]] == x["evidence"]
            assert x["context"] in ("negated", "historical", "hypothetical")
    assert kept > 0.8 * len(trapped), (kept, len(trapped))
