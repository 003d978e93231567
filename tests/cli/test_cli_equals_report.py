"""One analysis layer: a command and the report with the same settings write the same
bytes (the command builds a plan fragment and calls the same analysis.run)."""
from __future__ import annotations

import shutil
import warnings
from importlib import resources
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clinrel.cli import app

DEMO = Path(str(resources.files("clinrel") / "demo_data"))
FORMULA = "detected ~ phase + sex"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    from reports.render import render_report

    tmp = tmp_path_factory.mktemp("same")
    for name in ("cases.parquet", "runs.parquet", "reference.yaml"):
        shutil.copy(DEMO / name, tmp / name)
    plan = {"version": 1, "title": "CLI equals report",
            "inputs": {"cases": "cases.parquet", "runs": "runs.parquet",
                       "reference": "reference.yaml"},
            "detection": {"threshold": {"value": 50}, "auc_scale": "logit",
                          "subgroups": ["phase", "site", ["sex", "phase"]],
                          "bootstrap": {"n_boot": 50, "seed": 3, "boot_ci": "percentile"},
                          "adjusted": {"formula": FORMULA, "methods": ["glmm"], "group": "site"}},
            "crs": {"bootstrap": {"n_boot": 200, "seed": 7}, "k": 2, "n_weights": 50}}
    (tmp / "plan.yaml").write_text(yaml.safe_dump(plan))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_report(tmp / "plan.yaml", tmp / "report", formats=(), draw=False,
                      only=("methods",))
    return tmp


def _cli(*args):
    res = CliRunner().invoke(app, [str(a) for a in args] + ["--quiet"])
    assert res.exit_code == 0, res.output


def _same(a: Path, b: Path) -> None:
    assert a.read_bytes() == b.read_bytes(), f"{a} differs from {b}"


def test_subgroups_equals_report(rendered):
    out = rendered / "sub.csv"
    _cli("subgroups", rendered / "cases.parquet", "--by", "phase", "--by", "site",
         "--by", "sex:phase", "--threshold", "50", "--n-boot", "50", "--seed", "3",
         "--auc-scale", "logit", "--out", out)
    _same(out, rendered / "report" / "results" / "subgroup_metrics.csv")


def test_compare_equals_report(rendered):
    out = rendered / "cmp.csv"
    _cli("compare", rendered / "cases.parquet", "--threshold", "50", "--out", out)
    _same(out, rendered / "report" / "results" / "comparisons.csv")


def test_adjust_equals_report(rendered):
    out = rendered / "terms.csv"
    _cli("adjust", rendered / "cases.parquet", "--formula", FORMULA, "--threshold", "50",
         "--method", "glmm", "--group", "site", "--out", out)
    _same(out, rendered / "report" / "results" / "adjusted_terms.csv")


def test_crs_equals_report(rendered):
    out = rendered / "crs"
    _cli("crs", rendered / "runs.parquet", "--reference", rendered / "reference.yaml",
         "--n-boot", "200", "--seed", "7", "--k", "2", "--n-weights", "50", "--out", out)
    names = sorted(p.name for p in out.glob("*.csv"))
    assert {"scores.csv", "rank_probabilities.csv", "differences.csv", "stability.csv"} <= set(names)
    for name in names:
        _same(out / name, rendered / "report" / "results" / f"crs_{name}")
