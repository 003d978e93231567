"""Resource limits, values that must be
refused, and messages that mislead.

Every case here failed on the code before the issue: an alias bomb or a 10**12-replicate
bootstrap ran the machine out of memory, a NaN threshold called every case negative, a
negative or non-integer seed, a zero replicate count, a bin that replaced ``split`` and
an all-validation split were accepted, an infinite severity became -9223372036854775808,
ids differing by a BOM looked identical, and a broken reference file gave a traceback.
Each refusal is a ContractError or PlanError (exit 2 on the command line) naming the file,
the key or column, and the fix.
"""
from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import stats
from analysis.plan import PlanError, load_plan
from analysis import load_tables
from stats import limits
from stats._rng import MSG_SEED, as_generator, check_seed, spawn
from stats.schema import ContractError

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"
runner = CliRunner()


# --------------------------------------------------------------------------- helpers


def demo_raw(*, absolute: bool = True) -> dict:
    raw = yaml.safe_load((DEMO / "plan.yaml").read_text())
    if absolute:
        raw["inputs"] = {k: str(DEMO / v) for k, v in raw["inputs"].items()}
    return raw


def put(raw: dict, path: tuple, value) -> dict:
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return raw


def write_plan(folder: Path, raw: dict, name: str = "plan.yaml") -> Path:
    p = folder / name
    p.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return p


def small_study(folder: Path, cases: pd.DataFrame | None = None, **detection) -> dict:
    """A detection-only plan over a small simulated cohort written to ``folder``."""
    if cases is None:
        cases = stats.simulate.benchx_cohort(120, n_models=2, n_sites=3, seed=4).data
    cases.to_csv(folder / "cases.csv", index=False)
    det = {"threshold": {"value": 50}, "subgroups": ["site", "phase"], **detection}
    return {"version": 1, "inputs": {"cases": "cases.csv"}, "detection": det}


def message(fn, *args, exc=ContractError, **kwargs) -> str:
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    return str(info.value)


# --------------------------------------------------------------------------- plan values

PLAN_VALUES = [
    # (id, key path, value, words in the message)
    ("threshold-nan", ("detection", "threshold"), {"value": math.nan},
     ["detection.threshold.value", "finite", "nan"]),
    ("threshold-inf", ("detection", "threshold"), {"value": math.inf},
     ["detection.threshold.value", "finite", "inf"]),
    ("threshold-minus-inf", ("detection", "threshold"), {"value": -math.inf},
     ["detection.threshold.value", "finite"]),
    ("boot-n-zero", ("detection", "bootstrap", "n_boot"), 0, ["detection.bootstrap.n_boot", ">= 2", "got 0"]),
    ("boot-n-negative", ("detection", "bootstrap", "n_boot"), -5, ["detection.bootstrap.n_boot", "got -5"]),
    ("boot-n-one", ("detection", "bootstrap", "n_boot"), 1, ["detection.bootstrap.n_boot", ">= 2"]),
    ("boot-n-float", ("detection", "bootstrap", "n_boot"), 2.5, ["detection.bootstrap.n_boot", ">= 2", "2.5"]),
    ("boot-n-true", ("detection", "bootstrap", "n_boot"), True, ["detection.bootstrap.n_boot", ">= 2", "True"]),
    ("crs-n-one", ("crs", "bootstrap", "n_boot"), 1, ["crs.bootstrap.n_boot", ">= 2"]),
    ("crs-n-negative", ("crs", "bootstrap", "n_boot"), -1, ["crs.bootstrap.n_boot", "got -1"]),
    ("small-n-zero", ("detection", "small_n"), 0, ["detection.small_n", ">= 1"]),
    ("small-n-negative", ("detection", "small_n"), -3, ["detection.small_n", "got -3"]),
    ("k-zero", ("crs", "k"), 0, ["crs.k", ">= 1"]),
    ("k-negative", ("crs", "k"), -2, ["crs.k", "got -2"]),
    ("seed-negative", ("detection", "bootstrap", "seed"), -1,
     ["detection.bootstrap.seed", "whole number from 0", "got -1"]),
    ("seed-1e300", ("detection", "bootstrap", "seed"), 1e300,
     ["detection.bootstrap.seed", "from 0 to 2**63 - 1", "got 1e+300"]),
    ("seed-inf", ("detection", "bootstrap", "seed"), math.inf,
     ["detection.bootstrap.seed", "from 0 to 2**63 - 1", "got inf"]),
    ("seed-true", ("detection", "bootstrap", "seed"), True,
     ["detection.bootstrap.seed", "from 0 to 2**63 - 1", "got True"]),
    ("seed-2-64", ("crs", "bootstrap", "seed"), 2 ** 64, ["crs.bootstrap.seed", str(2 ** 64)]),
    ("seed-float", ("crs", "bootstrap", "seed"), 1.5,
     ["crs.bootstrap.seed", "from 0 to 2**63 - 1", "got 1.5"]),
    ("bin-named-split", ("detection", "bins", "age", "name"), "split",
     ["detection.bins.age.name", "'split'", "new name"]),
    ("bin-named-site", ("detection", "bins", "age", "name"), "site",
     ["detection.bins.age.name", "'site'"]),
    ("bin-named-like-another-bin", ("detection", "bins", "tumor_size_mm", "name"), "age_group",
     ["detection.bins.tumor_size_mm.name", "detection.bins.age", "'age_group'"]),
    ("bin-nan-break", ("detection", "bins", "age", "breaks"), [0, math.nan, 60, math.inf],
     ["detection.bins.age.breaks", "no .nan"]),
    ("bin-duplicate-labels", ("detection", "bins", "age", "labels"), ["young", "mid", "mid", "old"],
     ["detection.bins.age.labels", "repeats", "'mid'"]),
    ("bin-label-not-text", ("detection", "bins", "age", "labels"), [["a"], "b", "c", "d"],
     ["detection.bins.age.labels[0]"]),
    ("limits-negative", ("limits",), {"max_memory_gb": -1}, ["limits.max_memory_gb", "positive"]),
    ("limits-rows-float", ("limits",), {"max_rows": 1.5}, ["limits.max_rows", "whole number"]),
    ("limits-unknown-key", ("limits",), {"max_ram": 4}, ["'max_ram'", "max_memory_gb"]),
    ("formula-code", ("detection", "adjusted", "formula"),
     "detected ~ phase + __import__('os').system('touch X')",
     ["detection.adjusted.formula", "__import__"]),
    ("block-term-code", ("detection", "adjusted", "blocks", "tumour"), ["open('/etc/passwd')"],
     ["detection.adjusted.blocks.tumour[0]", "open"]),
    ("boot-n-1e12", ("detection", "bootstrap", "n_boot"), 10 ** 12,
     ["detection.bootstrap.n_boot", "estimated memory", "max_memory_gb", "CLINREL_MAX_MEMORY_GB"]),
    ("crs-n-1e12", ("crs", "bootstrap", "n_boot"), 10 ** 12,
     ["crs.bootstrap.n_boot", "estimated memory", "max_memory_gb"]),
    # guards: refused before this issue as well; kept so that the suite lists every value
    # a plan must refuse (target and level outside (0, 1), NaN included; a strata number)
    ("target-7", ("detection", "threshold"), {"criterion": "target_specificity", "target": 7},
     ["detection.threshold.target", "(0, 1)"]),
    ("target-nan", ("detection", "threshold"),
     {"criterion": "target_specificity", "target": math.nan}, ["detection.threshold.target"]),
    ("conf-level-nan", ("detection", "conf_level"), math.nan, ["detection.conf_level"]),
    ("unknown-strata-type", ("detection", "bootstrap", "strata"), 3, ["detection.bootstrap.strata"]),
]


@pytest.mark.parametrize("case_id, path, value, words", PLAN_VALUES, ids=[c[0] for c in PLAN_VALUES])
def test_plan_value_is_refused_naming_file_and_key(tmp_path, case_id, path, value, words):
    plan = write_plan(tmp_path, put(demo_raw(), path, value))
    t0 = time.perf_counter()
    text = message(load_plan, plan, exc=PlanError)
    assert time.perf_counter() - t0 < 1.0
    assert text.startswith(f"{plan}: ") or text.startswith(f"{plan.resolve()}: "), text
    for word in words:
        assert word in text, (word, text)


def test_plan_limits_raise_the_cap_and_are_recorded(tmp_path):
    raw = put(demo_raw(), ("detection", "bootstrap", "n_boot"), 10 ** 9)  # about 144 GB at least
    with pytest.raises(PlanError, match="max_memory_gb"):
        load_plan(write_plan(tmp_path, raw))
    raw["limits"] = {"max_memory_gb": 500, "max_hours": 1e6}
    plan = load_plan(write_plan(tmp_path, raw))
    assert plan.limits == {"max_memory_gb": 500.0, "max_hours": 1e6}
    with limits.using(plan.limits, str(plan.path)):
        caps = limits.current()
    assert caps.max_memory_gb == 500 and str(plan.path) in caps.origin["max_memory_gb"]


# --------------------------------------------------------------------------- YAML bombs


def _bomb(levels: int) -> str:
    lines = ['  - &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"  - &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "exploratory:\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [2, 9], ids=["81-values", "billion-laughs"])
def test_yaml_alias_bomb_is_refused_quickly(tmp_path, levels):
    head = yaml.safe_dump({k: v for k, v in demo_raw().items() if k != "exploratory"})
    plan = tmp_path / "plan.yaml"
    plan.write_text(head + _bomb(levels), encoding="utf-8")
    if levels == 9:
        assert len(_bomb(levels)) < 500  # the 455-byte bomb: 9**9 strings expanded
    t0 = time.perf_counter()
    text = message(load_plan, plan, exc=PlanError)
    assert time.perf_counter() - t0 < 1.0
    assert str(plan) in text and "aliases" in text and "*l0" in text


@pytest.mark.parametrize("text, words", [
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", ["nested too deeply"]),
    ("version: 1\n# " + "x" * (limits.MAX_YAML_BYTES + 10) + "\n", ["bytes", "limit"]),
    ("version: 1\ntitle: caf\xe9\n", ["not valid UTF-8", "byte"]),
], ids=["deep-nesting", "too-large", "latin-1"])
def test_unreadable_plan_files_are_plan_errors(tmp_path, text, words):
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(text.encode("latin-1"))
    msg = message(load_plan, plan, exc=PlanError)
    assert str(plan) in msg and all(w in msg for w in words), msg


# --------------------------------------------------------------------------- row caps


def test_parquet_rows_are_read_from_metadata_before_loading(tmp_path, monkeypatch):
    p = tmp_path / "cases.parquet"
    stats.simulate.benchx_cohort(300, n_models=2, seed=1).data.to_parquet(p)
    monkeypatch.setenv("CLINREL_MAX_ROWS", "100")

    def never(*a, **k):  # the table must not be loaded at all
        raise AssertionError("read_parquet called on a table above the row cap")

    monkeypatch.setattr(pd, "read_parquet", never)
    msg = message(stats.read_cases, p)
    assert f"{p}: the table has 600 rows (from the parquet metadata, before loading)" in msg
    assert "CLINREL_MAX_ROWS=600" in msg and "max_rows" in msg


def test_csv_rows_are_counted_before_parsing(tmp_path, monkeypatch):
    p = tmp_path / "runs.csv"
    stats.simulate.crs_runs(n_encoders=3, n_datasets=1, n_seeds=2, seed=1).data.to_csv(p, index=False)
    monkeypatch.setenv("CLINREL_MAX_ROWS", "10")
    msg = message(stats.read_runs, p)
    assert str(p) in msg and "counted as lines" in msg and "above the cap of 10 rows" in msg


def test_plan_max_rows_applies_while_loading(tmp_path):
    raw = small_study(tmp_path)
    raw["limits"] = {"max_rows": 50}
    msg = message(load_tables, load_plan(write_plan(tmp_path, raw)))
    assert "cases.csv" in msg and "limits.max_rows in" in msg and "plan.yaml" in msg


# --------------------------------------------------------------------------- work caps


def _cohort(n=200, models=2):
    return stats.scan_level(stats.simulate.benchx_cohort(n, n_models=models, seed=2).data,
                            threshold=50)


def test_study_checks_the_bootstrap_with_the_data_sizes(tmp_path):
    raw = small_study(tmp_path, bootstrap={"n_boot": 200_000, "seed": 1})
    raw["limits"] = {"max_memory_gb": 0.05}
    plan = load_plan(write_plan(tmp_path, raw))  # the data-free lower bound fits
    msg = message(load_tables, plan, exc=PlanError)
    assert "key 'detection.bootstrap.n_boot'" in msg and "clusters x 2 models" in msg
    assert "limits.max_memory_gb in" in msg


# --------------------------------------------------------------------------- stats values


@pytest.mark.parametrize("threshold", [math.nan, math.inf, -math.inf, "abc", None],
                         ids=["nan", "inf", "-inf", "text", "none-in-mapping"])
def test_scan_level_refuses_a_non_finite_threshold(threshold):
    cases = stats.simulate.benchx_cohort(60, n_models=2, seed=1).data
    value = {"model_A": 50, "model_B": threshold} if threshold is None else threshold
    msg = message(stats.scan_level, cases, threshold=value)
    assert "threshold must be a finite number" in msg


@pytest.mark.parametrize("target", [7, 0, 1, -0.1, math.nan])
def test_scan_level_target_specificity_must_lie_in_0_1(target):
    cases = stats.simulate.benchx_cohort(120, n_models=2, seed=1).data
    msg = message(stats.scan_level, cases, criterion="target_specificity",
                  target_specificity=target)
    assert "strictly between 0 and 1" in msg


@pytest.mark.parametrize("seed, shown", [(-1, "-1"), (1.5, "1.5"), (1e300, "1e+300"),
                                         (math.inf, "inf"), (True, "True"), (np.bool_(1), "True"),
                                         ("7", "'7'"), (2 ** 63, str(2 ** 63))])
def test_one_seed_rule_everywhere(seed, shown):
    for fn in (lambda: check_seed(seed, key="--seed"), lambda: as_generator(seed),
               lambda: spawn(seed, 2)):
        msg = message(fn)
        assert f"got {shown};" in msg and "whole number from 0" in msg
    assert MSG_SEED.format(key="--seed", value=shown) == message(check_seed, seed, key="--seed")


def test_good_seeds_still_work():
    assert check_seed(np.int64(5)) == 5 and check_seed(None) is None
    a = as_generator(2 ** 63 - 1).integers(0, 10, 5)
    assert (a == np.random.default_rng(2 ** 63 - 1).integers(0, 10, 5)).all()


# --------------------------------------------------------------------------- tables


def _two_model_cases() -> pd.DataFrame:
    return pd.DataFrame({"case_id": ["c1", "c2", "c1", "c2"], "model": ["a", "a", "b", "b"],
                         "label": [1, 0, 1, 0], "score": [80.0, 10.0, 70.0, 5.0],
                         "site": "s1", "split": ["test", "validation", "test", "validation"]})


def test_split_must_agree_between_models_of_a_case(tmp_path):
    df = _two_model_cases()
    df.loc[2, "split"] = "validation"
    p = tmp_path / "cases.csv"
    df.to_csv(p, index=False)
    msg = message(stats.read_cases, p)
    assert msg.startswith(f"{p}: column 'split' must be the same for every model of a case")
    assert "case_id c1" in msg and "rows 1, 3" in msg and "give each case one split" in msg
    result = runner.invoke(_app(), ["validate", str(p)])
    assert result.exit_code == 2 and "case_id c1" in result.output


@pytest.mark.parametrize("value, shown", [(math.inf, "inf"), (1e300, "1e+300"),
                                          (-1.0, "-1.0"), (1.5, "1.5")])  # the last two: guards
def test_runs_severity_is_refused_as_written(value, shown):
    runs = stats.simulate.crs_runs(n_encoders=3, n_datasets=1, n_seeds=2, seed=1).data
    runs["severity"] = runs["severity"].astype(float)
    runs.loc[runs["condition"] != "clean", "severity"] = value
    msg = message(stats.read_runs, runs)
    assert "column 'severity'" in msg and shown in msg and "-9223372036854775808" not in msg


@pytest.mark.parametrize("value, shown", [(math.inf, "inf"), (1e300, "1e+300"),
                                          (2.0 ** 60, "1.152921504606847e+18")])
def test_runs_seed_is_refused_as_written(value, shown):
    runs = stats.simulate.crs_runs(n_encoders=3, n_datasets=1, n_seeds=2, seed=1).data
    runs["seed"] = runs["seed"].astype(float)
    runs.loc[3, "seed"] = value
    msg = message(stats.read_runs, runs)
    assert "column 'seed'" in msg and "row 4" in msg and shown in msg


# an NFD id ('cafe\u0301') is now the same id as its NFC form, merged and recorded
# (tests/safety/test_unicode_levels.py); its code points still show where ids differ
INVISIBLE = [("bom", "\ufeffc2", r"'\ufeffc2'"), ("zero-width-space", "c\u200b2", r"'c\u200b2'")]


@pytest.mark.parametrize("case_id, odd, shown", INVISIBLE, ids=[c[0] for c in INVISIBLE])
def test_ids_that_differ_invisibly_are_shown_as_code_points(case_id, odd, shown):
    df = _two_model_cases()
    plain = "caf\u00e9" if case_id == "nfd" else "c2"
    df["case_id"] = ["c1", plain, "c1", odd]
    msg = message(stats.read_cases, df)
    assert shown in msg and "remove invisible characters" in msg
    cm_msg = message(stats.bootstrap.case_matrix, pd.concat([df, df.iloc[[3]]]).assign(pred=1))
    assert shown in cm_msg and "remove invisible characters" in cm_msg


PROBE_BAD = [
    ("missing-prob", lambda d: d.drop(columns="prob"), ["'prob' missing"]),
    ("prob-2", lambda d: d.assign(prob=np.where(np.arange(len(d)) == 3, 2.0, d["prob"])),
     ["'prob' must lie in [0, 1]", "row 4"]),
    ("label-3", lambda d: d.assign(label=np.where(np.arange(len(d)) == 0, 3, d["label"])),
     ["'label' must be 0/1", "row 1"]),
    ("prob-text", lambda d: d.assign(prob=d["prob"].astype(object).where(d.index != 5, "high")),
     ["'prob' must be numeric", "'high'"]),
    ("duplicate-run-case", lambda d: pd.concat([d, d.iloc[[0]]]), ["duplicate", "case_id"]),
    ("split-unknown", lambda d: d.assign(split="train"), ["'split'", "'calibration'"]),
]


@pytest.mark.parametrize("case_id, breaks, words", PROBE_BAD, ids=[c[0] for c in PROBE_BAD])
def test_probe_predictions_are_validated(tmp_path, case_id, breaks, words):
    good = pd.DataFrame({"encoder": "enc_01", "dataset": "d1", "label_fraction": 1.0,
                         "condition": "clean", "severity": 0, "seed": 0,
                         "case_id": [f"c{i}" for i in range(8)], "label": [0, 1] * 4,
                         "prob": np.linspace(0.1, 0.9, 8)})
    assert len(stats.schema.read_probe_predictions(good)) == 8
    p = tmp_path / "probe.csv"
    breaks(good).to_csv(p, index=False)
    msg = message(stats.schema.read_probe_predictions, p)
    assert msg.startswith(str(p)) and all(w in msg for w in words), msg


# --------------------------------------------------------------------------- study checks


def _garbage_probe(folder):
    (folder / "probe.csv").write_text("this is not,a probe table\n1,2\n")
    return "probe.csv"


STUDY_BAD = [
    ("bin-replaces-a-data-column", lambda t: small_study(
        t, bins={"age": {"name": "phase", "breaks": [0, 50, 200]}}),
     ["detection.bins.age.name", "'phase'", "already has"]),
    ("all-validation-split", lambda t: small_study(
        t, stats.simulate.benchx_cohort(120, n_models=2, seed=4).data.assign(split="validation")),
     ["no 'test' rows", "validation", "split: test"]),
    ("unknown-strata", lambda t: small_study(t, bootstrap={"n_boot": 100, "strata": "hospital"}),
     ["detection.bootstrap.strata", "'hospital'"]),
    ("unknown-group", lambda t: small_study(
        t, adjusted={"formula": "detected ~ phase", "group": "hospital"}),
     ["detection.adjusted.group", "'hospital'"]),
    ("formula-unknown-column", lambda t: small_study(
        t, adjusted={"formula": "detected ~ phase + contrast"}),
     ["detection.adjusted.formula", "contrast"]),
    ("garbage-probe-predictions", lambda t: {
        **small_study(t), "inputs": {"cases": "cases.csv", "probe_predictions": _garbage_probe(t)}},
     ["probe.csv", "missing from the probe_predictions table"]),
]


@pytest.mark.parametrize("case_id, build, words", STUDY_BAD, ids=[c[0] for c in STUDY_BAD])
def test_study_refuses_what_the_plan_asks_of_the_data(tmp_path, case_id, build, words):
    plan = load_plan(write_plan(tmp_path, build(tmp_path)))
    msg = message(load_tables, plan, exc=(ContractError, PlanError))
    assert all(w in msg for w in words), msg
    if case_id != "garbage-probe-predictions":
        assert str(plan.path) in msg


def _crs_plan(folder: Path, reference: bytes) -> Path:
    for name in ("runs.parquet",):
        shutil.copy(DEMO / name, folder / name)
    (folder / "reference.yaml").write_bytes(reference)
    raw = {"version": 1, "inputs": {"runs": "runs.parquet", "reference": "reference.yaml"},
           "crs": {"bootstrap": {"n_boot": 50, "seed": 1}}}
    return write_plan(folder, raw)


@pytest.mark.parametrize("reference, words", [
    (b"panel: [a, b\nversion: 1\n", ["reference.yaml", "not valid YAML"]),
    ("panel: [cnn_rand]\ndescription: r\xe9f\xe9rence\n".encode("latin-1"),
     ["reference.yaml", "not valid UTF-8", "re-save"]),
    (b"panel: &p [cnn_rand]\nversion: *p\n", ["reference.yaml", "aliases"]),
    (b"panel: [nobody]\n", ["reference.yaml", "nobody", "no runs"]),
], ids=["syntax", "latin-1", "alias", "unknown-encoder"])
def test_reference_file_errors_name_the_file(tmp_path, reference, words):
    msg = message(load_tables, load_plan(_crs_plan(tmp_path, reference)))
    assert all(w in msg for w in words), msg


def test_unreachable_scheduler_is_named_quickly(tmp_path, monkeypatch):
    monkeypatch.setattr(stats._parallel, "CONNECT_TIMEOUT_S", 1)
    raw = small_study(tmp_path)
    raw["scheduler"] = "tcp://127.0.0.1:9"
    t0 = time.perf_counter()
    msg = message(load_tables, load_plan(write_plan(tmp_path, raw)), exc=PlanError)
    assert time.perf_counter() - t0 < 10
    assert "key 'scheduler'" in msg and "tcp://127.0.0.1:9" in msg and "cannot connect" in msg
    cases = _cohort(60)
    msg = message(stats.subgroup_metrics, cases, by=["phase"], n_boot=20, seed=1,
                  scheduler="not an address")
    assert "scheduler 'not an address': cannot connect" in msg


# --------------------------------------------------------------------------- command line


def _app():
    from clinrel.cli import app

    return app


@pytest.fixture(scope="module")
def cases_csv(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "cases.csv"
    stats.simulate.benchx_cohort(120, n_models=2, seed=4).data.to_csv(p, index=False)
    return p


@pytest.mark.parametrize("args, words", [
    (["--threshold", "nan"], ["threshold must be a finite number"]),
    (["--threshold", "inf"], ["threshold must be a finite number"]),
    (["--criterion", "target_specificity", "--target-specificity", "7"], ["--target-specificity", "(0, 1)", "got 7"]),
    (["--threshold", "-inf"], ["threshold must be a finite number"]),
], ids=["threshold-nan", "threshold-inf", "target-7", "threshold-minus-inf"])
def test_cli_refuses_values_with_exit_2_and_no_traceback(tmp_path, cases_csv, args, words):
    out = tmp_path / "out.csv"
    result = runner.invoke(_app(), ["subgroups", str(cases_csv), "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not out.exists()
    assert str(cases_csv) in result.output and all(w in result.output for w in words)


def test_cli_report_refuses_an_alias_bomb(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({k: v for k, v in demo_raw().items() if k != "exploratory"})
                    + _bomb(9), encoding="utf-8")
    result = runner.invoke(_app(), ["report", "--plan", str(plan), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "aliases" in result.output and str(plan) in result.output
    assert not (tmp_path / "r").exists()
