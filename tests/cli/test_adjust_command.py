"""clinrel adjust: end to end on a simulated cases table."""
from __future__ import annotations

import pandas as pd
from typer.testing import CliRunner

from clinrel.cli import app
from stats.simulate import benchx_cohort


def test_adjust_cli(tmp_path):
    cases = tmp_path / "cases.csv"
    benchx_cohort(1500, n_models=2, seed=3).data.to_csv(cases, index=False)
    out, mm = tmp_path / "terms.csv", tmp_path / "means.csv"
    runner = CliRunner()
    res = runner.invoke(app, ["adjust", str(cases), "--formula", "~ phase + sex",
                              "--threshold", "50", "--out", str(out), "--means", "phase",
                              "--means-out", str(mm), "--quiet",
                              "--levels", "phase=venous,arterial,delayed,non_contrast"])
    assert res.exit_code == 0, res.output
    terms = pd.read_csv(out, keep_default_na=False, na_values=[""])
    assert set(terms.model) == {"model_A", "model_B"}
    assert "phase[T.arterial]" in set(terms.estimand)  # venous is the reference
    means = pd.read_csv(mm)
    assert list(means.group_level[means.model == "model_A"]) == ["venous", "arterial", "delayed",
                                                                "non_contrast"]
    assert ((means.conf_low < means.estimate) & (means.estimate < means.conf_high)).all()
    # the CLI's default means are the plan's default (standardized: g-computation), one
    # decision in one place (the walkthrough found emmeans on the command line)
    assert set(means.method) == {"g-computation-delta"}
    res = runner.invoke(app, ["adjust", str(cases), "--formula", "~ phase + race", "--threshold",
                              "50", "--method", "glmm", "--model", "model_A", "--out", str(out),
                              "--force", "--blocks-out", str(tmp_path / "b.csv"), "--quiet"])
    assert res.exit_code == 0, res.output
    terms = pd.read_csv(out)
    # race has an Unknown level: the complete-case GLMM is fitted beside the primary one,
    # as in the report (the analysis layer decides it; column fit_method names the fit)
    assert set(terms.fit_method) == {"glmm", "glmm_cc"}
    blocks = pd.read_csv(tmp_path / "b.csv")
    assert {"protocol", "demographics"} <= set(blocks.block.dropna())
    res = runner.invoke(app, ["adjust", str(cases), "--formula", "~ phase", "--out",
                              str(tmp_path / "x.csv")])
    assert res.exit_code == 2 and "threshold" in res.output
    assert not (tmp_path / "x.csv").exists()
