"""clinrel operating and clinrel goals: the plan's operating points and goals from the
command line, the same numbers as the analysis layer, refusals with exit 2."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import stats
from analysis import Tables, run
from analysis.plan import plan_for_tables
from clinrel.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def cases_csv(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("operating")
    stats.simulate.benchx_cohort(300, n_models=2, n_sites=4, seed=6).data.to_csv(
        d / "cases.csv", index=False)
    return d / "cases.csv"


def cli(*argv) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in argv])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, " ".join(res.output.split())


def _analysis(path, detection, name):
    cases = stats.read_cases(path)
    res = run(plan_for_tables(detection=detection), Tables(cases=cases), only=[name])
    return res[name]


def test_operating_equals_the_plan(cases_csv, tmp_path):
    out = tmp_path / "op.csv"
    code, text = cli("operating", cases_csv, "--out", out, "--at-specificity", 0.9,
                     "--at-specificity", 0.8, "--threshold", 50, "--n-boot", 60, "--seed", 4,
                     "--by", "phase")
    assert code == 0, text
    got = pd.read_csv(out)
    want = _analysis(cases_csv, {"threshold": {"value": 50}, "subgroups": [],
                                 "compare_by": ["phase"],
                                 "operating_points": {"specificity": [0.9, 0.8], "n_boot": 60,
                                                      "seed": 4}}, "operating_points")
    assert len(got) == len(want)
    assert (got["estimate"].to_numpy() - want["estimate"].to_numpy()).__abs__().max() < 1e-9
    assert (got["conf_low"].fillna(-1) - want["conf_low"].fillna(-1)).abs().max() < 1e-9


def test_goals_equals_the_plan(cases_csv, tmp_path):
    out = tmp_path / "g.csv"
    code, text = cli("goals", cases_csv, "--out", out, "--goal", "sensitivity>=0.5",
                     "--goal", "specificity>=overall-0.05", "--alpha", 0.025, "--by", "phase",
                     "--threshold", 50)
    assert code == 0, text
    got = pd.read_csv(out, keep_default_na=False)
    want = _analysis(cases_csv, {"threshold": {"value": 50}, "subgroups": ["phase"],
                                 "goals": [{"metric": "sensitivity", "goal": 0.5, "alpha": 0.025},
                                           {"metric": "specificity", "margin": 0.05,
                                            "alpha": 0.025}]}, "performance_goals")
    assert list(got["verdict"]) == list(want["verdict"])
    assert (got["alpha"] == 0.025).all()


@pytest.mark.parametrize("argv, pattern", [
    (["operating", "--threshold", "50"], "give --at-specificity"),
    (["operating", "--threshold", "50", "--at-specificity", "1.5"],
     "option --at-specificity must be a list of proportions"),
    (["operating", "--threshold", "50", "--at-specificity", "0.9", "--n-boot", "1"],
     "option --n-boot"),
    (["goals", "--threshold", "50"], "give at least one --goal"),
    (["goals", "--threshold", "50", "--goal", "sensitivity=0.8"], "write METRIC>=VALUE"),
    (["goals", "--threshold", "50", "--goal", "auc>=0.8"], r"detection.goals\[0\].metric"),
    (["goals", "--threshold", "50", "--goal", "sensitivity>=1.5"], "must be a number in"),
])
def test_refusals_exit_2_with_the_fix(cases_csv, tmp_path, argv, pattern):
    import re

    out = tmp_path / "x.csv"
    code, text = cli(argv[0], cases_csv, "--out", out, *argv[1:])
    assert code == 2 and re.search(pattern, text), text
    assert not out.exists()


def test_compare_metrics_and_gaps_equal_the_plan(cases_csv, tmp_path):
    out, gout = tmp_path / "c.csv", tmp_path / "g.csv"
    code, text = cli("compare", cases_csv, "--out", out, "--threshold", 50, "--metric", "ppv",
                     "--metric", "f1", "--n-boot", 40, "--seed", 3)
    assert code == 0, text
    got = pd.read_csv(out)
    want = _analysis(cases_csv, {"threshold": {"value": 50}, "subgroups": [],
                                 "compare_metrics": ["ppv", "f1"],
                                 "bootstrap": {"n_boot": 40, "seed": 3}}, "comparisons")
    assert list(got["estimand"]) == ["ppv_difference", "f1_difference"]
    assert (got["conf_low"] - want["conf_low"]).abs().max() < 1e-9
    code, text = cli("gaps", cases_csv, "--out", gout, "--threshold", 50, "--gap", "sensitivity",
                     "--by", "phase", "--n-boot", 40, "--seed", 3)
    assert code == 0, text
    got = pd.read_csv(gout, keep_default_na=False)
    want = _analysis(cases_csv, {"threshold": {"value": 50}, "subgroups": ["phase"],
                                 "subgroup_gaps": ["sensitivity"],
                                 "bootstrap": {"n_boot": 40, "seed": 3}}, "subgroup_gaps")
    assert list(got["level_best"]) == list(want["level_best"])
    assert (got["conf_high"] - want["conf_high"]).abs().max() < 1e-9


@pytest.mark.parametrize("argv, pattern", [
    (["compare", "--threshold", "50", "--metric", "f1"], "need\\(s\\) the paired cluster "
     "bootstrap: add option --n-boot"),
    (["compare", "--threshold", "50", "--metric", "brier"], "must be one of"),
    (["gaps", "--threshold", "50", "--by", "phase"], "give at least one --gap"),
    (["gaps", "--threshold", "50", "--gap", "sensitivity"], "give at least one --by"),
])
def test_comparison_refusals_exit_2(cases_csv, tmp_path, argv, pattern):
    import re

    out = tmp_path / "x.csv"
    code, text = cli(argv[0], cases_csv, "--out", out, *argv[1:])
    assert code == 2 and re.search(pattern, text), text
    assert not out.exists()
