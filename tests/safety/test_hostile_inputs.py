"""Hostile inputs that once gave a traceback, a silent change of the data or a lost section,
now each a clear error with exit 2 or handled:

* one model in ``clinrel compare``: a ValueError traceback (exit 1);
* a reference .docx with styles but no document.xml: accepted, then a KeyError 20 s later;
* ids read from CSV as numbers: patients "0" and "00" merged, cases "002" and "2" called
  duplicates;
* a recorded age outside the plan's bins: silently the "Missing" age group;
* scores of 1e300: the threshold figure raised OverflowError and the section was dropped.
"""
from __future__ import annotations

import zipfile

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import stats
from clinrel.cli import app
from stats.schema import ContractError


def _cases(n=40, models=("m1", "m2")):
    rng = np.random.default_rng(5)
    rows = []
    for m in models:
        for i in range(n):
            rows.append({"case_id": f"{i:03d}", "patient_id": str(i // 2), "model": m,
                         "label": i % 2, "score": float(rng.integers(0, 200)), "site": "s1",
                         "phase": ["venous", "arterial"][i % 2]})
    return pd.DataFrame(rows)


def test_compare_with_one_model_is_a_clear_error(tmp_path):
    _cases(models=("only",)).to_csv(tmp_path / "one.csv", index=False)
    out = tmp_path / "c.csv"
    done = CliRunner().invoke(app, ["compare", str(tmp_path / "one.csv"), "--threshold", "50",
                                    "--out", str(out)])
    assert done.exit_code == 2, done.output
    assert "at least two models" in done.output and "'model'" in done.output
    assert "Traceback" not in done.output and not out.exists()


def test_reference_docx_without_document_is_refused_up_front(tmp_path):
    bad = tmp_path / "styles_only.docx"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("word/styles.xml", "<w:styles/>")
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["report", "--demo", "--out", str(out), "--quiet",
                                    "--reference-docx", str(bad)])
    assert done.exit_code == 2, done.output
    assert "word/document.xml" in done.output and not out.exists()


def test_csv_ids_keep_their_text(tmp_path):
    d = _cases(n=8)
    # patients "0" and "00" are different people; cases "002" and "2" different scans
    d["patient_id"] = np.tile(["0", "00", "1", "01", "2", "02", "3", "03"], 2)
    d.loc[d["case_id"] == "007", "case_id"] = "7"
    d.to_csv(tmp_path / "cases.csv", index=False)
    cases = stats.read_cases(tmp_path / "cases.csv")
    assert cases["patient_id"].nunique() == 8
    assert {"7", "002"} <= set(cases["case_id"])
    assert cases.groupby("model")["case_id"].nunique().eq(8).all()


def test_values_outside_the_bins_are_refused_with_file_rows_and_fix(tmp_path):
    import yaml

    from clinrel.cli.report import demo_plan_path

    src = demo_plan_path().parent
    plan = yaml.safe_load(demo_plan_path().read_text())
    for k, v in plan["inputs"].items():
        plan["inputs"][k] = str(src / v)
    plan["detection"]["bins"]["age"]["breaks"] = [30, 60, 75, 100]
    plan["detection"]["bins"]["age"]["labels"] = ["30-59", "60-74", "75-99"]
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["report", "--plan", str(tmp_path / "plan.yaml"),
                                    "--out", str(out), "--quiet"])
    assert done.exit_code == 2, done.output
    msg = " ".join(done.output.split())
    for words in ("cases.parquet", "column 'age'", "fall outside the breaks 30 to 100",
                  "rows ", "widen the breaks", "detection.bins.age.breaks"):
        assert words in msg, words
    assert not out.exists()


def test_huge_scores_keep_the_threshold_figure():
    from reports.sections.threshold import _curve

    df = pd.DataFrame({"threshold": [0.0, 1e10, 1e150, 1e300, np.inf], "estimate": 0.5,
                       "model": "m", "estimand": "sensitivity"})
    p = _curve(df, True, 1e150, color="model")
    breaks = p.scales.get_scales("x").breaks
    assert len(breaks) <= 10 and breaks[0] == 0.0 and max(breaks) <= 1e300


def test_bins_of_extracted_metadata_stay_lenient():
    """An extractor's value outside the bins is an unusable extraction, not a fact of the
    study: the metadata layer bins it as missing (strict=False), the cases table may not."""
    df = pd.DataFrame({"age": [25.0, 45.0]})
    spec = {"age": {"name": "g", "breaks": [30, 60], "labels": ["30-59"]}}
    assert stats.add_bins(df, spec, strict=False)["g"].isna().tolist() == [True, False]
    with pytest.raises(ContractError, match="outside"):
        stats.add_bins(df, spec)


def test_a_plan_key_written_twice_is_refused(tmp_path):
    """Audit: the plan loader let a repeated key win silently (how injected text in a
    plan overrode inputs.cases); a key written twice is now an error with both lines."""
    from clinrel.cli.report import demo_plan_path

    text = demo_plan_path().read_text()
    src = demo_plan_path().parent
    text = text.replace("inputs:\n", f"inputs:\n  cases: {src / 'cases.parquet'}\n", 1)
    (tmp_path / "plan.yaml").write_text(text)
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["report", "--plan", str(tmp_path / "plan.yaml"),
                                    "--out", str(out), "--quiet"])
    assert done.exit_code == 2, done.output
    assert "key 'cases' is written twice" in done.output and not out.exists()


def test_duplicate_keys_on_one_line_and_merge_keys_refused():
    """Review: a key twice on one line ({cases: a, cases: b}) still loaded silently; a
    merge key (<<) hid duplicates inside it and overrode keys unseen (second audit)."""
    from stats.limits import load_yaml

    with pytest.raises(ContractError, match="key 'cases' is written twice.*both on line 1"):
        load_yaml("inputs: {cases: a.csv, cases: b.csv}\n", source="p.yaml", kind="plan")
    for text in ("x: {a: 1}\n<<: {b: 2}\n", "b:\n  <<: {x: A, x: B}\n",
                 "ci: wilson\n<<: {ci: jeffreys}\n"):
        with pytest.raises(ContractError, match="merge keys"):
            load_yaml(text, source="p.yaml", kind="plan")


def test_csv_and_parquet_give_a_covariate_the_same_type(tmp_path):
    """Review: reading 'scanner' as text from CSV only made it a factor there and a slope
    from parquet; only the contract's id and name columns are read as text."""
    d = _cases(n=12).assign(scanner=np.tile([1, 2, 3], 8))
    d.to_csv(tmp_path / "c.csv", index=False)
    d.to_parquet(tmp_path / "c.parquet", index=False)
    a, b = stats.read_cases(tmp_path / "c.csv"), stats.read_cases(tmp_path / "c.parquet")
    assert a["scanner"].dtype == b["scanner"].dtype and a["scanner"].dtype.kind in "iu"
    assert a["case_id"].tolist() == b["case_id"].tolist()


def test_bin_option_error_names_the_option(tmp_path):
    d = _cases(n=12).assign(age=np.tile([25.0, 45.0, 70.0], 8))
    d.to_csv(tmp_path / "ages.csv", index=False)
    done = CliRunner().invoke(app, ["subgroups", str(tmp_path / "ages.csv"), "--by", "age_group",
                                    "--bin", "age=40,60,75,130", "--threshold", "50",
                                    "--out", str(tmp_path / "s.csv")])
    assert done.exit_code == 2, done.output
    msg = " ".join(done.output.split())
    assert "option --bin" in msg and "<command line>" not in msg and "widen the breaks" in msg


def test_a_numerically_zero_kappa_se_gives_no_interval():
    from analysis.metadata import kappa_interval

    ki = kappa_interval(list("AABBAB"), list("ABBBAA"), cluster=[1, 1, 1, 2, 2, 2])
    assert abs(ki["std_error"]) < 1e-12
    assert np.isnan(ki["conf_low"]) and np.isnan(ki["conf_high"])


def test_an_id_or_name_spelled_NA_is_kept_only_an_empty_cell_is_missing(tmp_path):
    """Review doubt: a site called "NA" (or "None") was read as missing and refused as an
    empty id; ids and names keep their text, other cells follow R's read.csv ("NA" is
    missing), and an empty patient_id still falls back to the case."""
    (tmp_path / "c.csv").write_text(
        "case_id,model,label,score,site,patient_id,age,race\n"
        "c1,m,1,60,NA,p1,NA,NA\nc2,m,0,10,s2,,45,White\nc3,m,1,70,None,p3,50,\n")
    d = stats.read_cases(tmp_path / "c.csv").set_index("case_id")
    assert d.loc["c1", "site"] == "NA" and d.loc["c3", "site"] == "None"
    assert d.loc["c2", "patient_id"] == "c2"
    assert np.isnan(d.loc["c1", "age"]) and d["age"].dtype.kind == "f"
    assert d["race"].isna().tolist() == [True, False, True]
    (tmp_path / "e.csv").write_text("case_id,model,label,score,site\n,m,1,60,s1\n")
    with pytest.raises(ContractError, match="case_id"):
        stats.read_cases(tmp_path / "e.csv")


def test_a_derived_bootstrap_seed_is_recorded_and_repeats_the_run(tmp_path):
    """New-user walkthrough: without --seed two runs gave different F1 intervals and the
    seed was recorded nowhere (a file output has no manifest). The command's plan derives
    its root seed from its settings, the command prints the stream's seed, and --seed with
    it repeats the run."""
    _cases(n=40).to_csv(tmp_path / "c.csv", index=False)
    args = ["subgroups", str(tmp_path / "c.csv"), "--by", "phase", "--threshold", "50",
            "--n-boot", "60", "--quiet"]
    done = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a.csv")])
    assert done.exit_code == 0, done.output
    import re
    seed = re.search(r"bootstrap seed (\d+) \(derived", done.output).group(1)
    again = CliRunner().invoke(app, [*args, "--seed", seed, "--out", str(tmp_path / "b.csv")])
    assert again.exit_code == 0 and "derived" not in again.output
    a, b = (pd.read_csv(tmp_path / f) for f in ("a.csv", "b.csv"))
    f1 = a["estimand"] == "f1"
    assert f1.any() and a[f1]["conf_low"].equals(b[f1]["conf_low"])


def test_one_root_seed_with_a_stream_per_analysis_and_no_borrowing():
    """The one seed rule (analysis.plan): a plan's root seed (or one derived from the plan
    itself, recorded) gives every analysis its own stream; a block's own seed overrides only its
    streams; the calibration intervals never borrow the detection bootstrap's seed; a crs
    block with n_boot 0 leaves the encoders' ECE on the calibration bootstrap (n_boot 0
    was a traceback)."""
    from analysis.calibration import boot_settings, encoder_boot_settings
    from analysis.plan import plan_from_dict

    from clinrel.cli.report import demo_plan_path

    src = demo_plan_path().parent
    inputs = {k: str(src / f) for k, f in (("cases", "cases.parquet"), ("runs", "runs.parquet"),
                                           ("reference", "reference.yaml"))}

    def plan(raw):
        return plan_from_dict({"inputs": inputs, **raw}, path=src / "p.yaml")

    det = {"threshold": {"value": 50}, "bootstrap": {"n_boot": 100}}
    first, second = plan({"detection": det}), plan({"detection": det})
    assert first.seed_source == "plan sha256" and first.seed == second.seed  # same plan,
    assert first.seeds["root"] == first.seed                      # same seed; recorded
    other = plan({"detection": {**det, "small_n": 5}})
    assert other.seed != first.seed                               # another plan, another
    same = plan({"seed": 11, "detection": det})
    again = plan({"seed": 11, "detection": det})
    assert same.seed_source == "plan" and same.seeds == again.seeds  # same file: same streams
    streams = [same.seed_for(n) for n in ("detection_bootstrap", "calibration_bootstrap",
                                          "crs_bootstrap", "label_error_imputation")]
    assert len(set(streams)) == 4                                 # one stream per analysis
    given = plan({"seed": 11, "detection": {**det, "bootstrap": {"n_boot": 100, "seed": 5}}})
    assert given.seed_for("detection_bootstrap") == 5             # the block's seed overrides
    assert boot_settings(given)[1] == boot_settings(same)[1] != 5  # ... only its own stream
    crs0 = plan({"seed": 11, "crs": {"bootstrap": {"n_boot": 0}, "n_weights": 10}})
    assert encoder_boot_settings(crs0)[2] == "calibration.bootstrap"
    assert encoder_boot_settings(crs0)[:2] == boot_settings(crs0)


def test_a_header_with_a_trailing_space_keeps_id_text(tmp_path):
    (tmp_path / "sp.csv").write_text("case_id,site ,label,model,score\n007,NA,1,m,3\n")
    from stats.schema import read_table

    d, _ = read_table(tmp_path / "sp.csv")
    site = [c for c in d.columns if c.strip() == "site"][0]
    assert d[site].iloc[0] == "NA" and d["case_id"].iloc[0] == "007"
