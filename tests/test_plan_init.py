"""``clinrel plan init`` writes a commented, loadable, renderable plan for a user's table;
``clinrel subgroups --bin`` bins as the plan's ``detection.bins`` does."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from clinrel.cli import app
from analysis import load_plan

runner = CliRunner()


def _user_table(n: int = 160, *, site: bool = True, seed: int = 4) -> pd.DataFrame:
    """A table as a user exports it: one model, a few covariates, no clinrel-made columns."""
    rng = np.random.default_rng(seed)
    label = (rng.random(n) < 0.45).astype(int)
    df = pd.DataFrame({
        "case_id": [f"P{i:04d}" for i in range(n)], "model": "unet",
        "label": label, "score": np.where(label == 1, rng.gamma(3, 40, n), rng.gamma(1, 5, n)),
        "age": rng.uniform(20, 90, n).round(), "sex": rng.choice(["F", "M"], n),
        "phase": rng.choice(["arterial", "venous"], n),
        "tumor_size_mm": np.where(label == 1, rng.uniform(4, 60, n), np.nan),
        "protocol_version": 1,
    })
    if site:
        df["site"] = rng.choice(["s1", "s2", "s3"], n)
    return df


def _init(tmp_path, df: pd.DataFrame, *args: str):
    cases = tmp_path / "cases.csv"
    df.to_csv(cases, index=False)
    out = tmp_path / "plan.yaml"
    res = runner.invoke(app, ["plan", "init", str(cases), "--out", str(out), *args])
    return res, out, cases


def _render(plan_path, out):
    from reports.render import render_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return render_report(plan_path, out, formats=(), draw=False, strict=True)


def test_plan_init_writes_a_plan_that_loads_and_renders(tmp_path):
    res, out, _ = _init(tmp_path, _user_table(), "--quiet")
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.count("prespecified") >= 6 and "no outcome was looked at" in text
    plan = load_plan(out)
    det = plan.detection
    assert det.threshold.value == 1  # voxel-count scores: conventional value, stated
    assert "conventional value for voxel counts" in text
    assert ("phase",) in det.subgroups and ("age_group",) in det.subgroups
    assert ("site",) in det.subgroups and ("age_group", "phase") in det.subgroups
    assert {b.column: b.name for b in det.bins.values()} == {"age": "age_group",
                                                     "tumor_size_mm": "size_group"}
    # a fixed root seed (one stream per analysis): the report is reproducible
    assert det.bootstrap.n_boot == 2000 and plan.seed == 20260101 and det.bootstrap.strata == "site"
    assert list(det.adjusted.methods) == ["fixed"]  # 3 sites: site as a fixed effect
    assert "column not used: protocol_version (a single level)" in text
    assert plan.prespecified and "phase" in plan.prespecified[0]
    result = _render(out, tmp_path / "report")
    keys = {s.key for s in result.sections}
    assert {"methods", "subgroups", "forest", "failure_map", "adjusted"} <= keys
    assert result.skipped == [] or not result.skipped


def test_single_site_table_gets_an_implicit_site_and_no_site_model(tmp_path):
    res, out, _ = _init(tmp_path, _user_table(site=False))
    assert res.exit_code == 0, res.output
    assert "no site column: a single-site study" in res.output
    text = out.read_text()
    assert "single-site study (one implicit site, 'single_site')" in text
    assert "adjusted: left out (a single site)" in text
    plan = load_plan(out)
    assert ("site",) not in plan.detection.subgroups
    assert plan.detection.adjusted is None and plan.detection.bootstrap.strata is None
    _render(out, tmp_path / "report")


@pytest.mark.parametrize("extra,expected", [
    ({"pred": 1}, {"given": True}),
    ({"split": "split"}, {"criterion": "youden"}),
])
def test_threshold_rule_follows_the_table(tmp_path, extra, expected):
    df = _user_table()
    if "pred" in extra:
        df["pred"] = (df["score"] >= 30).astype(int)
    else:
        df["split"] = np.where(np.arange(len(df)) % 3 == 0, "validation", "test")
    res, out, _ = _init(tmp_path, df, "--quiet")
    assert res.exit_code == 0, res.output
    det = load_plan(out).detection
    for key, value in expected.items():
        assert getattr(det.threshold, key) == value


def test_threshold_option_and_probability_scores(tmp_path):
    df = _user_table()
    df["score"] = df["score"] / df["score"].max()
    res, out, _ = _init(tmp_path, df, "--quiet")
    assert load_plan(out).detection.threshold.value == 0.5
    res, out, _ = _init(tmp_path, df, "--quiet", "--force", "--threshold", "0.3")
    assert res.exit_code == 0 and load_plan(out).detection.threshold.value == 0.3


def test_plan_init_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "plan.yaml"
    out.write_text("my own plan\n")
    res, out, cases = _init(tmp_path, _user_table())
    assert res.exit_code == 2 and "add --force" in res.output
    assert out.read_text() == "my own plan\n"
    out.unlink()
    for extra in ([], ["--force"]):             # written, then replaced with --force
        res = runner.invoke(app, ["plan", "init", str(cases), "--out", str(out), "--quiet",
                                  *extra])
        assert res.exit_code == 0 and load_plan(out).detection is not None


@pytest.mark.parametrize("args,message", [
    (["--out", "plan.txt"], "give a path ending in .yaml"),
    (["--out", "plan.yaml"], "required column(s) 'score' missing"),
])
def test_plan_init_bad_input_exits_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    pd.DataFrame({"case_id": ["a"], "model": ["m"], "label": [1]}).to_csv("bad.csv", index=False)
    res = runner.invoke(app, ["plan", "init", "bad.csv", *args])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "plan.yaml").exists()


def test_identifier_columns_are_named(tmp_path):
    df = _user_table().assign(patient_name=lambda d: "x" + d["case_id"])
    res, out, _ = _init(tmp_path, df)
    assert res.exit_code == 0
    assert "column patient_name looks like a direct identifier" in out.read_text()
    assert "patient_name" not in str(load_plan(out).detection.subgroups)


def test_subgroups_bin_option_cuts_like_the_plan(tmp_path):
    df = _user_table(200)
    cases = tmp_path / "cases.csv"
    df.to_csv(cases, index=False)
    out = tmp_path / "sub.csv"
    res = runner.invoke(app, ["subgroups", str(cases), "--bin", "age=0,40,60,75,inf",
                              "--by", "age_group", "--threshold", "30", "--out", str(out),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    tab = pd.read_csv(out)
    sens = tab[(tab["estimand"] == "sensitivity") & (tab["group_var"] == "age_group")]
    expected = pd.cut(df.loc[df["label"] == 1, "age"], [0, 40, 60, 75, np.inf], right=False,
                      labels=["0-40", "40-60", "60-75", "75-inf"]).value_counts()
    got = sens.set_index("group_level")["n_pos"]
    assert set(got.index) == set(expected.index)
    for level, n in expected.items():
        assert got[level] == n, level
    named = tmp_path / "named.csv"
    res = runner.invoke(app, ["subgroups", str(cases), "--bin", "age=0,50,inf:age_band",
                              "--by", "age_band", "--threshold", "30", "--out", str(named),
                              "--quiet"])
    assert res.exit_code == 0, res.output
    assert set(pd.read_csv(named).query("group_var == 'age_band'")["group_level"]) == \
        {"0-50", "50-inf"}


@pytest.mark.parametrize("spec,message", [
    ("age=0,x", "write COLUMN=BREAK,BREAK"),
    ("age", "write COLUMN=BREAK,BREAK"),
    ("age=60,40", "option --bin must be at least two strictly increasing numbers"),
    ("nope=0,10", "option --bin"),
])
def test_subgroups_bad_bin_exits_2(tmp_path, spec, message):
    cases = tmp_path / "cases.csv"
    _user_table().to_csv(cases, index=False)
    res = runner.invoke(app, ["subgroups", str(cases), "--bin", spec, "--threshold", "30",
                              "--out", str(tmp_path / "s.csv")])
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()) and "Traceback" not in res.output
