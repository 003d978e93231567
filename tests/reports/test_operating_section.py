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


@pytest.fixture(scope="module")
def gap_study():
    from conftest import run_demo
    from reports.study import Study

    plan, tables, res = run_demo(["comparisons", "subgroup_gaps", "subgroup_metrics", "roles"])
    return Study(plan=plan, tables=tables, results=res)


def test_comparisons_show_the_bootstrap_differences_of_the_demo_plan(gap_study):
    """The demo plan asks for PPV and F1 differences: the comparisons table shows them from
    the paired cluster bootstrap, beside the closed-form rows, with the methods sentence."""
    from reports.sections.methods import _boot_comparisons

    assert {"ppv", "f1"} <= set(gap_study.plan.detection.compare_metrics)
    sec = _build(gap_study, "comparisons")
    table = next(t for t in sec.tables if t.name == "model_comparisons")
    assert {"PPV", "F1", "Sensitivity", "AUC"} <= set(table.display["metric"])
    cmp = gap_study.results["comparisons"]
    boot = cmp[cmp["estimand"].isin(["ppv_difference", "f1_difference"])]
    assert len(boot) and set(boot["method"]) == {"bootstrap-percentile"}
    assert (boot["n_boot"] == gap_study.plan.detection.bootstrap.n_boot).all()
    assert "bootstrap" in " ".join(table.notes)
    assert "Differences in PPV and F1" in _boot_comparisons(gap_study)


def test_gaps_section_gives_each_models_best_and_worst_subgroup(gap_study):
    sec = _build(gap_study, "subgroup_gaps")
    (table,) = sec.tables
    assert table.name == "gaps_best_worst"
    g = gap_study.results["subgroup_gaps"]
    axes = [":".join(a) for a in gap_study.plan.detection.subgroups]
    assert set(g["group_var"]) == set(axes)
    assert set(g["model"]) == set(gap_study.cases["model"])
    # every shown gap is best minus worst of the subgroup table's planned levels
    sm = gap_study.results["subgroup_metrics"]
    sens = sm[(sm["estimand"] == "sensitivity") & (sm["group_var"] == "phase")]
    sens = sens[~sens["group_level"].isin(["Missing", "not applicable"])]
    for _, r in g[(g["group_var"] == "phase") & (g["estimand"] == "sensitivity_gap")].iterrows():
        v = sens[sens["model"] == r["model"]].set_index("group_level")["estimate"]
        assert r["estimate"] == pytest.approx(v.max() - v.min(), abs=1e-12)
        assert r["level_best"] == v.idxmax() and r["level_worst"] == v.idxmin()
        assert r["conf_low"] <= r["estimate"] <= r["conf_high"] or r["estimate"] < r["conf_low"]
    assert table.caption.rstrip().endswith("Prespecified.")
    text = " ".join(b for b in sec.blocks if isinstance(b, str))
    assert "fairlearn" in text and "seed" in text
