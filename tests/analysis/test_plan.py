"""analysis.plan: the analysis plan is validated before any work; errors name file, key, fix."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from analysis.plan import PlanError, load_plan

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"


@pytest.fixture()
def plan_dir(tmp_path):
    for path in DEMO.iterdir():  # every input the demo plan may name
        if path.is_file() and path.suffix in (".parquet", ".csv", ".yaml", ".json"):
            shutil.copy(path, tmp_path / path.name)
    return tmp_path


def write(folder: Path, raw: dict) -> Path:
    p = folder / "plan.yaml"
    p.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return p


def demo_raw() -> dict:
    return yaml.safe_load((DEMO / "plan.yaml").read_text())


def test_demo_plan_loads_with_relative_paths_and_hash():
    plan = load_plan(DEMO / "plan.yaml")
    assert plan.cases == (DEMO / "cases.parquet").resolve()
    assert plan.detection.threshold.value == 50 and plan.detection.prespecified_threshold
    assert ("age_group", "phase") in plan.detection.subgroups
    assert plan.crs.bootstrap.n_boot == 10_000 and plan.crs.k == 3
    assert len(plan.sha256) == 64
    assert [b.name for b in plan.detection.bins.values()] == ["age_group", "size_group"]


def test_unknown_key_is_rejected_with_a_suggestion(plan_dir):
    raw = demo_raw()
    raw["detection"]["subgroup"] = raw["detection"].pop("subgroups")
    with pytest.raises(PlanError, match=r"plan\.yaml: unknown key 'subgroup' under 'detection'.*did you mean 'subgroups'"):
        load_plan(write(plan_dir, raw))


@pytest.mark.parametrize("path, value, pattern", [
    (("detection", "ci"), "wald", r"key 'detection\.ci' must be one of wilson, clopper-pearson, jeffreys"),
    (("detection", "conf_level"), 95, r"detection\.conf_level.*write e\.g\. 0\.95"),
    (("detection", "auc_scale"), "probit", r"detection\.auc_scale' must be one of auto, auc, logit"),
    (("detection", "bootstrap", "boot_ci"), "basic",
     r"detection\.bootstrap\.boot_ci' must be one of percentile, bca, wilson"),
    (("detection", "threshold"), {"criterion": "target_specificity"}, r"detection\.threshold\.target' is missing"),
    (("detection", "threshold"), {"value": 50, "criterion": "youden"}, r"both 'value' and 'criterion'"),
    (("detection", "bins", "age", "breaks"), [0, 60, 40], r"strictly increasing"),
    (("crs", "bootstrap", "seed"), -1, r"crs\.bootstrap\.seed"),
    (("inputs", "cases"), "nowhere.parquet", r"inputs\.cases' names .*nowhere\.parquet, which does not exist"),
    (("privacy", "salt"), None, r"privacy\.salt' is missing"),
])
def test_bad_values_name_the_key_and_the_fix(plan_dir, path, value, pattern):
    raw = demo_raw()
    node = raw
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(PlanError, match=pattern):
        load_plan(write(plan_dir, raw))


def test_plan_may_leave_out_either_half(plan_dir):
    raw = demo_raw()
    raw.pop("crs")
    assert load_plan(write(plan_dir, raw)).crs is None
    raw = demo_raw()
    raw.pop("detection")
    raw["inputs"].pop("cases")
    raw["inputs"].pop("probe_predictions", None)
    plan = load_plan(write(plan_dir, raw))
    assert plan.detection is None and plan.cases is None
    raw.pop("crs")
    with pytest.raises(PlanError, match="neither a 'detection' nor a 'crs' block"):
        load_plan(write(plan_dir, raw))


def test_crs_needs_a_reference(plan_dir):
    raw = demo_raw()
    raw["inputs"].pop("reference")
    with pytest.raises(PlanError, match="no 'inputs.reference'"):
        load_plan(write(plan_dir, raw))


def test_unreadable_plans(tmp_path):
    with pytest.raises(PlanError, match="plan file not found"):
        load_plan(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("inputs: [unclosed\n")
    with pytest.raises(PlanError, match="not valid YAML"):
        load_plan(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(PlanError, match="must be a YAML mapping"):
        load_plan(lst)


def test_hash_changes_with_the_file(plan_dir):
    raw = demo_raw()
    h1 = load_plan(write(plan_dir, raw)).sha256
    raw["title"] = "another title"
    assert load_plan(write(plan_dir, raw)).sha256 != h1


@pytest.mark.parametrize("units, pattern", [
    ({"height": 10}, r"detection\.adjusted\.units\.height' names 'height', which is not a "
                     r"continuous term.*candidates in this formula: .*tumor_size_mm"),
    ({"tumor_size_mm": 1}, r"detection\.adjusted\.units\.tumor_size_mm' must be a positive "
                           r"number.*got 1; a log term changes by a k-fold change"),
    ({"tumor_size_mm": -2}, r"detection\.adjusted\.units\.tumor_size_mm' must be a positive"),
    ({"tumor_size_mm": "sds"}, r"detection\.adjusted\.units\.tumor_size_mm' must be .* or sd"),
    ({"tumor_size_mm": True}, r"detection\.adjusted\.units\.tumor_size_mm' must be"),
    ({"tumor_size_mm": float("nan")}, r"detection\.adjusted\.units\.tumor_size_mm' must be"),
    ([10], r"key 'detection\.adjusted\.units' must be a mapping variable -> .*write e\.g\. "
           r"units: \{age: 10, tumor_size_mm: sd\}"),
])
def test_adjusted_units_errors_name_the_key_and_the_fix(plan_dir, units, pattern):
    raw = demo_raw()
    raw["detection"]["adjusted"]["units"] = units
    with pytest.raises(PlanError, match=pattern):
        load_plan(write(plan_dir, raw))


def test_adjusted_units_are_read(plan_dir):
    raw = demo_raw()
    assert load_plan(DEMO / "plan.yaml").detection.adjusted.units == {}
    raw["detection"]["adjusted"]["units"] = {"tumor_size_mm": "SD"}
    assert load_plan(write(plan_dir, raw)).detection.adjusted.units == {"tumor_size_mm": "sd"}
    raw["detection"]["adjusted"]["units"] = {"tumor_size_mm": 10}
    assert load_plan(write(plan_dir, raw)).detection.adjusted.units == {"tumor_size_mm": 10.0}
