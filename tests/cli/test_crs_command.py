"""``clinrel crs`` end to end."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from clinrel.cli import app
from stats.schema import check_tidy


@pytest.fixture()
def study(tmp_path):
    from stats import simulate

    sim = simulate.crs_runs(n_encoders=5, n_datasets=2, n_seeds=3, perturbations=("blur",),
                            seed=12)
    runs = tmp_path / "runs.csv"
    sim.data.to_csv(runs, index=False)
    ref = tmp_path / "ref.yaml"
    ref.write_text("panel: [enc_01, enc_02, enc_03]\nversion: t-1\n")
    return tmp_path, runs, ref


def test_crs_command_writes_tidy_tables(study):
    tmp, runs, ref = study
    out = tmp / "out"
    res = CliRunner().invoke(app, ["crs", str(runs), "--reference", str(ref), "--n-boot", "200",
                                   "--seed", "1", "--n-weights", "50", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    for name in ("axes", "scores", "rank_probabilities", "differences", "leading_tier", "stability"):
        df = pd.read_csv(out / f"{name}.csv", keep_default_na=False, na_values=[""])
        assert len(df) > 0 and df.columns[0] == "estimand", name
    scores = pd.read_csv(out / "scores.csv")
    assert (scores["reference_version"] == "t-1").all()
    meta = json.loads((out / "reference.json").read_text())
    assert meta["reference_hash"] == scores["reference_hash"].iloc[0]
    # same seed, same numbers as the Python API
    import stats

    api = stats.crs_bootstrap(stats.read_runs(runs), str(ref), n_boot=200, seed=1).scores()
    check_tidy(api)
    pd.testing.assert_series_equal(scores["conf_low"], api["conf_low"], check_names=False)
    # no leftovers beside OUT
    assert sorted(p.name for p in tmp.iterdir()) == ["out", "ref.yaml", "runs.csv"]


def test_crs_command_writes_paired_regime_differences(tmp_path):
    from stats import simulate

    sim = simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=3, perturbations=("blur",),
                            regimes=("frozen", "adapted"), seed=3)
    runs = tmp_path / "runs.csv"
    sim.data.to_csv(runs, index=False)
    ref = tmp_path / "ref.yaml"
    ref.write_text("panel: [enc_01, enc_02]\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["crs", str(runs), "--reference", str(ref), "--n-boot", "100",
                                   "--n-weights", "0", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    rd = pd.read_csv(out / "regime_differences.csv", converters={"flag": str})
    check_tidy(rd)
    assert len(rd) == 4 and rd["paired"].all() and (rd["baseline"] == "frozen").all()


def test_crs_command_without_bootstrap(study):
    tmp, runs, ref = study
    out = tmp / "plain"
    res = CliRunner().invoke(app, ["crs", str(runs), "--reference", str(ref), "--n-boot", "0",
                                   "--n-weights", "0", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["axes.csv", "domain_scores.csv", "manifest.json", "reference.json",
                                                     "scores.csv"]


@pytest.mark.parametrize("args, words", [
    (["--n-boot", "1"], "option --n-boot must be a whole number >= 2"),
    (["--conf-level", "95"], "option --conf-level must be a number in (0, 1)"),
    (["--k", "0"], "option --k must be a whole number >= 1"),
])
def test_crs_command_bad_options(study, args, words):
    tmp, runs, ref = study
    res = CliRunner().invoke(app, ["crs", str(runs), "--reference", str(ref), "--out",
                                   str(tmp / "o"), "--quiet", *args])
    assert res.exit_code == 2
    assert words in res.output
    assert not (tmp / "o").exists()


def test_crs_command_bad_reference_leaves_old_output(study):
    tmp, runs, ref = study
    out = tmp / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    bad = tmp / "bad.yaml"
    bad.write_text("panel: [enc_01, nobody]\n")
    res = CliRunner().invoke(app, ["crs", str(runs), "--reference", str(bad), "--out", str(out)])
    assert res.exit_code == 2
    assert "['nobody']" in res.output and "no runs" in res.output
    assert (out / "keep.txt").read_text() == "old"
