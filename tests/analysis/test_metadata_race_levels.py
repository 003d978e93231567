"""Race through the metadata analyses (issue 36 items 1 and 3): the plan key
metadata.race_levels puts extracted race values on the study's levels (default Declined ->
Unknown), mentions set aside by their context are counted and never values, and the
analysis vocabulary is the extractors'."""
from __future__ import annotations

import pandas as pd
import pytest

from analysis import Tables, run
from analysis.plan import DEFAULT_RACE_LEVELS, RACE_VALUES, PlanError, plan_for_tables

COLS = ["case_id", "field", "value", "extractor", "evidence", "start", "end", "source", "context"]


def _evidence():
    rows = []
    for i, (a, b) in enumerate([("Hispanic/Latino", "Other"), ("Declined", "Unknown"),
                                ("White", "White"), ("Black", "White")]):
        rows += [(f"c{i}", "race", a, "text_rules", a, 0, len(a), "s", "asserted"),
                 (f"c{i}", "race", b, "dicom_rules", b, 0, len(b), "s", "asserted")]
    rows += [("c0", "phase", "arterial", "text_rules", "arterial phase", 0, 14, "s", "historical"),
             ("c1", "age", "60", "text_rules", "60", 0, 2, "s", "family"),
             ("c1", "phase", "venous", "text_rules", "PV", 0, 2, "s", "asserted")]
    return pd.DataFrame(rows, columns=COLS)


def _run(race_levels=None):
    meta = {} if race_levels is None else {"metadata": {"race_levels": race_levels}}
    plan = plan_for_tables(**meta)
    return run(plan, Tables(metadata=_evidence()),
               only=["metadata_agreement", "metadata_context", "metadata_sources"],
               errors="raise")


def test_default_levels_and_plan_override():
    r = _run()
    ag = r["metadata_agreement"].set_index("field")
    # default: Declined -> Unknown agrees with Unknown; Hispanic/Latino vs Other differs
    assert ag.loc["race", "n_agree"] == 2 and ag.loc["race", "n_both"] == 4
    assert r.decisions["metadata.race_levels"]["Declined"] == "Unknown"
    r = _run({"Hispanic/Latino": "Other"})
    assert r["metadata_agreement"].set_index("field").loc["race", "n_agree"] == 3
    assert r.decisions["metadata.race_levels"]["Hispanic/Latino"] == "Other"


def test_set_aside_mentions_are_counted_not_values():
    r = _run()
    ctx = r["metadata_context"]
    assert ctx[["field", "context", "mentions"]].values.tolist() == [
        ["age", "family", 1], ["phase", "historical", 1]]
    assert r.decisions["metadata.context_excluded"] == 2
    src = r["metadata_sources"]
    assert set(src["field"]) == {"race", "phase"}  # the family age is no value
    assert src.loc[src["field"] == "phase", "values"].tolist() == [1]


def test_race_levels_refuses_a_value_the_extractors_never_write():
    with pytest.raises(PlanError, match="'Hispanic', which the extractors never write"):
        plan_for_tables(metadata={"race_levels": {"Hispanic": "Other"}})


def test_the_vocabulary_is_the_extractors():
    race = pytest.importorskip("inference_runner.metadata.race")
    assert RACE_VALUES == race.RACE_VALUES and DEFAULT_RACE_LEVELS == race.DEFAULT_LEVELS
