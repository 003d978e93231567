"""Bounded work for every input: input files are checked before they
are read (size, header width, file type), the plan's counts and lists when the plan is
read, and every refusal is exit 2 naming the file or key, the value, the cap and how to
raise it; no report goes on without a section because of an allocation."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import analysis
import stats
from clinrel.cli import app
from analysis.plan import PlanError, load_plan
from stats.schema import ContractError

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "clinrel" / "demo_data"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounded")
    cases = stats.simulate.benchx_cohort(120, n_models=2, n_sites=3, seed=4).data
    cases.to_csv(d / "cases.csv", index=False)
    runs = stats.simulate.crs_runs(n_encoders=4, n_datasets=1, n_seeds=2, seed=5).data
    runs.to_csv(d / "runs.csv", index=False)
    (d / "ref.yaml").write_text(yaml.safe_dump({"panel": ["enc_01", "enc_02"], "version": "1"}))
    return d


def demo_raw() -> dict:
    raw = yaml.safe_load((DEMO / "plan.yaml").read_text())
    raw["inputs"] = {k: str(DEMO / v) for k, v in raw["inputs"].items()}
    return raw


def write_plan(folder: Path, raw: dict, name: str = "plan.yaml") -> Path:
    p = folder / name
    p.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return p


def cli(*argv) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in argv])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, " ".join(res.output.split())


def cli_subprocess(*argv, timeout: float = 60) -> tuple[int, str]:
    """The command in a process of its own: a hang fails the test instead of the suite."""
    code = "from clinrel.cli import main; main()"
    p = subprocess.run([sys.executable, "-c", code, *map(str, argv)], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out
    return p.returncode, " ".join(out.split())


# --------------------------------------------------------------------------- input files


def test_a_header_of_100000_extra_columns_is_refused_before_parsing(study, tmp_path):
    lines = (study / "cases.csv").read_text().splitlines()
    wide = tmp_path / "wide.csv"
    wide.write_text("\n".join([lines[0] + "".join(f",x{i}" for i in range(100_000)),
                               *lines[1:]]) + "\n")
    t0 = time.perf_counter()
    rc, out = cli("validate", wide)
    assert time.perf_counter() - t0 < 10        # was 75 s
    assert rc == 2, out
    assert "100,016 columns" in out and "cap of 10,000" in out and "CLINREL_MAX_COLUMNS" in out
    assert "max_columns" in out and str(wide) in out


def test_a_header_line_longer_than_its_cap_is_refused_by_its_length(tmp_path):
    """A first line with no line end within MAX_HEADER_BYTES: refused by its length (the
    message was a NameError before)."""
    from stats.limits import MAX_HEADER_BYTES

    long = tmp_path / "long.csv"
    long.write_bytes(b"case_id," + b"x" * (MAX_HEADER_BYTES + 10))
    with pytest.raises(ContractError, match="the first line \\(the header\\) is longer than"):
        stats.read_cases(long)


def test_the_column_cap_is_raised_by_the_environment(study, tmp_path, monkeypatch):
    lines = (study / "cases.csv").read_text().splitlines()
    wide = tmp_path / "wide.csv"
    wide.write_text("\n".join([lines[0] + ",extra1,extra2", *lines[1:]]) + "\n")
    monkeypatch.setenv("CLINREL_MAX_COLUMNS", "10")
    with pytest.raises(ContractError, match=r"18 columns .*cap of 10 \(environment"):
        stats.read_cases(wide)
    monkeypatch.setenv("CLINREL_MAX_COLUMNS", "18")
    assert len(stats.read_cases(wide)) == 240


def test_parquet_columns_are_counted_from_the_schema(study, tmp_path, monkeypatch):
    p = tmp_path / "cases.parquet"
    pd.read_csv(study / "cases.csv").to_parquet(p)
    monkeypatch.setenv("CLINREL_MAX_COLUMNS", "5")
    with pytest.raises(ContractError, match="from the parquet schema, before loading"):
        stats.read_cases(p)


def test_a_real_header_and_2_gb_of_sparse_file_is_refused_by_size(study, tmp_path):
    big = tmp_path / "big.csv"
    with open(big, "wb") as fh:
        fh.write((study / "cases.csv").read_bytes())
        fh.truncate(2 * 1024 ** 3)              # sparse: no disk used
    t0 = time.perf_counter()
    rc, out = cli("validate", big)
    assert time.perf_counter() - t0 < 10        # nothing read: no MemoryError
    assert rc == 2, out
    assert "2,147,483,648 bytes" in out and "cap of 2 GB" in out and "max_file_gb" in out
    assert "CLINREL_MAX_FILE_GB" in out


def test_the_plan_raises_the_file_cap_while_loading(study, tmp_path):
    raw = {"inputs": {"cases": str(study / "cases.csv")},
           "detection": {"threshold": {"value": 50}, "subgroups": ["site"]},
           "limits": {"max_file_gb": 1e-6}}
    plan = load_plan(write_plan(tmp_path, raw))
    with pytest.raises(ContractError, match=r"limits.max_file_gb in .*plan.yaml"):
        analysis.load_tables(plan)


@pytest.mark.parametrize("kind, make", [
    ("fifo", lambda p: os.mkfifo(p)),
    ("dev-zero", lambda p: os.symlink("/dev/zero", p)),
    ("folder", lambda p: p.mkdir()),
])
def test_a_path_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path, kind, make):
    p = tmp_path / "cases.csv"
    make(p)
    rc, out = cli_subprocess("validate", p)
    assert rc == 2, out
    assert {"fifo": "named pipe (FIFO)", "dev-zero": "character device",
            "folder": "a folder"}[kind] in out and "not a file" in out


# --------------------------------------------------------------------------- plan counts


def test_n_weights_of_1e12_is_refused_when_the_plan_is_read(tmp_path):
    raw = demo_raw()
    raw["crs"]["n_weights"] = 10 ** 12
    t0 = time.perf_counter()
    with pytest.raises(PlanError) as info:
        load_plan(write_plan(tmp_path, raw))
    assert time.perf_counter() - t0 < 2
    msg = str(info.value)
    assert "crs.n_weights (1,000,000,000,000 draws)" in msg and "max_memory_gb" in msg
    assert "CLINREL_MAX_MEMORY_GB" in msg and "estimated memory" in msg


def test_crs_n_weights_of_1e12_exits_2_through_the_command(study, tmp_path):
    rc, out = cli("crs", study / "runs.csv", "--reference", study / "ref.yaml", "--n-boot", 0,
                  "--n-weights", 10 ** 12, "--out", tmp_path / "crs")
    assert rc == 2, out
    assert "--n-weights" in out and "1,000,000,000,000" in out and "max_memory_gb" in out
    assert not (tmp_path / "crs").exists()


def test_n_weights_is_checked_again_with_the_encoders_of_the_data(study, tmp_path):
    # 2,000,000 draws pass the data-free floor (one encoder) but not with 4 encoders under
    # a 0.5 GB cap
    raw = {"inputs": {"runs": str(study / "runs.csv"), "reference": str(study / "ref.yaml")},
           "crs": {"bootstrap": {"n_boot": 0}, "n_weights": 2_000_000},
           "limits": {"max_memory_gb": 0.5}}
    plan = load_plan(write_plan(tmp_path, raw))
    with pytest.raises(ContractError,
                       match=r"crs.n_weights.*2,000,000 weight draws x 4 encoders"):
        analysis.load_tables(plan)


def test_n_imputations_of_1e12_is_refused_when_the_plan_is_read(tmp_path):
    raw = demo_raw()
    raw["metadata"]["n_imputations"] = 10 ** 12
    with pytest.raises(PlanError) as info:
        load_plan(write_plan(tmp_path, raw))
    msg = str(info.value)
    assert "metadata.n_imputations (1,000,000,000,000 imputations)" in msg
    assert "max_memory_gb" in msg


def test_calibration_replicates_are_refused_when_the_plan_is_read(tmp_path):
    raw = demo_raw()
    raw["calibration"] = {"bootstrap": {"n_boot": 10 ** 12}}
    with pytest.raises(PlanError, match=r"calibration.bootstrap.n_boot \(1,000,000,000,000"):
        load_plan(write_plan(tmp_path, raw))


def test_a_bin_of_100000_breaks_is_refused_fast(study, tmp_path):
    breaks = ", ".join(str(i) for i in range(100_000))
    (tmp_path / "plan.yaml").write_text(
        f"inputs: {{cases: {study / 'cases.csv'}}}\ndetection:\n  threshold: {{value: 50}}\n"
        f"  subgroups: [age_band]\n  bins:\n    age: {{name: age_band, breaks: [{breaks}]}}\n")
    t0 = time.perf_counter()
    with pytest.raises(PlanError) as info:
        load_plan(tmp_path / "plan.yaml")
    assert time.perf_counter() - t0 < 30       # no answer in 180 s before; YAML parsing
    assert ("key 'detection.bins.age.breaks' lists 100,000 cut points of one bin, above the "
            "cap of 1,000") in str(info.value)


@pytest.mark.parametrize("path, value, words", [
    (("detection", "subgroups"), [f"c{i}" for i in range(101)],
     ["detection.subgroups", "101 subgroup axes", "cap of 100"]),
    (("detection", "subgroups"), [["a", "b", "c", "d", "e", "f"]],
     ["detection.subgroups[0]", "6 columns of one intersection axis", "cap of 5"]),
    (("detection", "compare_by"), [f"c{i}" for i in range(101)],
     ["detection.compare_by", "cap of 100"]),
    (("detection", "adjusted", "nagq"), 1000,
     ["detection.adjusted.nagq", "1,000", "cap of 25", "quadrature"]),
    (("detection", "adjusted", "blocks", "protocol"), [f"x{i}" for i in range(101)],
     ["detection.adjusted.blocks.protocol", "cap of 100"]),
    (("metadata", "prefer"), [f"e{i}" for i in range(101)], ["metadata.prefer", "cap of 100"]),
])
def test_plan_lists_and_counts_above_their_fixed_caps_are_refused(tmp_path, path, value, words):
    raw = demo_raw()
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(PlanError) as info:
        load_plan(write_plan(tmp_path, raw))
    msg = str(info.value)
    assert msg.startswith(str(tmp_path)), msg
    for word in words:
        assert word in msg, (word, msg)


def test_simulate_sizes_are_capped(tmp_path):
    rc, out = cli("simulate", "benchx", "--scale", 10 ** 12, "--out", tmp_path / "s.csv")
    assert rc == 2 and "--scale 1,000,000,000,000" in out and "cap of 10,000,000" in out
    rc, out = cli("simulate", "crs", "--scale", 10 ** 6, "--out", tmp_path / "s.csv")
    assert rc == 2 and "cap of 10,000 simulated encoders" in out
    assert not (tmp_path / "s.csv").exists()


# --------------------------------------------------------------------------- no missing section


def test_an_analysis_out_of_memory_stops_the_run_whatever_errors_is(monkeypatch, tmp_path):
    from analysis import core
    from analysis.core import ANALYSES, Analysis, run

    def hungry(results):
        import numpy as np

        return np.empty((10 ** 12, 3))          # 21.8 TiB: the n_weights failure

    monkeypatch.setitem(ANALYSES, "hungry", Analysis("hungry", hungry, lambda p, t: True))
    plan = load_plan(write_plan(tmp_path, demo_raw()))
    with pytest.raises(ContractError) as info:
        run(plan, core.Tables(), only=["hungry"], errors="record")
    assert "the analysis 'hungry' ran out of memory" in str(info.value)
    assert "TiB" in str(info.value)


# --------------------------------------------------------------------------- one table


@pytest.mark.parametrize("block, key", [("operating_points", "detection.operating_points.n_boot"),
                                        ("lesions", "detection.lesions.n_boot"),
                                        ("gaps", "detection.gaps.n_boot")])
def test_the_new_bootstraps_are_refused_before_any_work(tmp_path, block, key):
    """The operating points', the lesions' and the gap decomposition's replicates are
    checked against the caps with the data's sizes, before any statistic (they ran
    unchecked: a plan could ask for a trillion GLMM refits)."""
    from analysis import load_tables

    raw = demo_raw()
    raw["detection"][block]["n_boot"] = 10 ** 12
    with pytest.raises(PlanError) as info:   # when the plan is read, or with the data's sizes
        load_tables(load_plan(write_plan(tmp_path, raw)))
    msg = str(info.value)
    assert key in msg and "1,000,000,000,000 replicates" in msg, msg
