"""The report's operating-point and goals sections on the demo study: the ROC figures, the
matched-operating-point table beside the fixed threshold, the goals table and its methods
sentence; every number shown comes from the analysis layer's tables."""
from __future__ import annotations

import re
import warnings

import pytest

from analysis.inputs import plan_limits


@pytest.fixture(scope="module")
def study():
    from conftest import run_demo
    from reports.study import Study

    plan, tables, res = run_demo(["roc_curves", "operating_points", "matched_comparisons",
                                  "partial_auc", "likelihood_ratios", "auc_vs_rest",
                                  "performance_goals", "subgroup_metrics", "roles"])
    return Study(plan=plan, tables=tables, results=res)


def _build(study, name):
    from reports.sections import _roles, module

    with plan_limits(study.plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sec = module(name).build(study)
    sec.blocks = [_roles.label(study, b) for b in sec.blocks]
    return sec


def test_operating_section_shows_the_roc_figures_and_the_matched_table(study):
    sec = _build(study, "operating")
    figs = {f.name: f for f in sec.figures}
    tabs = {t.name: t for t in sec.tables}
    assert "roc_overall" in figs
    assert {"roc_axis_phase", "roc_axis_age_group", "roc_axis_sex"} <= set(figs)
    assert "roc_axis_size_group" not in figs          # no negatives: no curve per level
    assert {"operating_points", "matched_operating_points", "partial_auc",
            "likelihood_ratios", "auc_vs_rest"} <= set(tabs)
    # the prespecified operating point is marked on the overall figure, with its interval
    marks = figs["roc_overall"].data.query("layer == 'mark'")
    assert set(marks["kind"]) == {"matched operating point", "fixed threshold"}
    op = study.results["operating_points"]
    v = op[(op["estimand"] == "sensitivity_at_specificity") & (op["group_var"] == "overall")]
    got = marks[marks["kind"] == "matched operating point"].set_index("model")
    for _, r in v.iterrows():
        assert got.loc[r["model"], "value"] == r["estimate"]
        assert got.loc[r["model"], "ymin"] == r["conf_low"]
    # the matched table holds the fixed-threshold and the matched differences
    m = tabs["matched_operating_points"]
    assert list(m.display.columns[:3]) == ["pair", "cell", "fixed"]
    assert "Matched operating point" in dict(m.spanners)
    for t in list(figs.values()) + list(tabs.values()):
        assert t.caption.rstrip().endswith(("Prespecified.", "Exploratory.")), t.name


def test_goals_section_gives_verdicts_and_the_methods_sentence(study):
    sec = _build(study, "goals")
    (table,) = sec.tables
    assert table.name == "performance_goals"
    cells = " ".join(table.display.filter(like="v_").to_numpy().ravel())
    assert re.search(r"\bmet\b", cells) and "not met" in cells and "inconclusive (n" in cells
    text = " ".join(b for b in sec.blocks if isinstance(b, str))
    assert "Holm's adjustment runs per goal and model" in text
    assert "Sensitivity above 0.50" in text
    assert table.caption.rstrip().endswith("Prespecified.")


def test_methods_state_the_operating_points_and_goals(study):
    from reports.sections.operating import methods_text

    paras = methods_text(study)
    assert paras[0].startswith("**Operating points.**") and "specificity 0.90" in paras[0]
    assert f"seed {study.plan.seed_for('operating_bootstrap')}" in paras[0]
    assert paras[1].startswith("**Performance goals.**")
