"""The shipped documentation is true: docs/plan.md lists exactly the keys the plan schema
accepts, docs/contracts.md every column of the table contracts, docs/tutorial.md's commands
run, the public functions' Examples pass (doctest), and every command's --help is free of
type tags on flags and of mid-sentence line breaks."""
from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
import runpy
import shlex
import shutil
import warnings
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

import stats
from clinrel.cli import app
from stats.analysis import plan as plan_schema
from stats.analysis.plan import PlanError, plan_from_dict
from stats.analysis.schema_doc import KEYS, TABLES, USER_KEYED, schema_keys

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
runner = CliRunner()


# --------------------------------------------------------------------------- plan reference


def _generator(name: str) -> dict:
    return runpy.run_path(str(DOCS / name))


def test_plan_md_is_what_the_generator_writes():
    expected = _generator("make_plan_reference.py")["render"]()
    assert (DOCS / "plan.md").read_text(encoding="utf-8") == expected, \
        "docs/plan.md is stale: run python docs/make_plan_reference.py"


def test_plan_md_lists_exactly_the_schema_keys():
    listed = re.findall(r"^\| `([^`]+)` \|", (DOCS / "plan.md").read_text(), re.MULTILINE)
    assert sorted(listed) == sorted(schema_keys())
    assert len(listed) == len(set(listed))
    assert set(listed) <= set(KEYS)


def test_every_key_table_of_the_schema_is_walked():
    """A new nested key table in plan.py must be placed in schema_doc.TABLES, else its keys
    would be missing from the reference."""
    tables = {n for n, v in vars(plan_schema).items()
              if n.endswith("_KEYS") and isinstance(v, dict)}
    assert tables <= set(TABLES.values()), tables - set(TABLES.values())
    assert "detection.bins.<column>" in schema_keys() and "limits.max_rows" in schema_keys()
    assert set(USER_KEYED) <= set(schema_keys())


def _base_plan(tmp_path) -> dict:
    for name in ("cases.csv", "runs.parquet", "reference.yaml"):
        (tmp_path / name).write_text("x\n")
    return {"inputs": {"cases": "cases.csv", "runs": "runs.parquet",
                       "reference": "reference.yaml"},
            "detection": {"threshold": {"value": 50}}, "crs": {}}


def _set(plan: dict, path: str, value) -> None:
    parts = [("age" if p == "<column>" else p) for p in path.split(".")]
    node = plan
    for p in parts[:-1]:
        node = node.setdefault(p, {}) if isinstance(node.get(p), dict) or p not in node \
            else node[p]
    node[parts[-1]] = value


@pytest.mark.parametrize("key", [k for k in schema_keys() if k in KEYS and KEYS[k].example])
def test_every_documented_key_is_accepted_by_the_validator(tmp_path, key):
    """The documented example of each key, put into a valid plan, is never refused as an
    unknown key (other refusals, e.g. a combination, may happen and are not this test's)."""
    raw = _base_plan(tmp_path)
    _set(raw, key, yaml.safe_load(KEYS[key].example))
    try:
        plan_from_dict(raw, path=tmp_path / "plan.yaml")
    except PlanError as exc:
        assert "unknown key" not in str(exc), str(exc)


def test_an_undocumented_key_is_refused(tmp_path):
    raw = _base_plan(tmp_path)
    _set(raw, "detection.bootstrap.n_replicates", 100)
    with pytest.raises(PlanError, match="unknown key 'n_replicates'"):
        plan_from_dict(raw, path=tmp_path / "plan.yaml")


def test_the_example_plan_in_plan_md_loads(tmp_path):
    text = (DOCS / "plan.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    raw = yaml.safe_load(block)
    for name in raw["inputs"].values():
        (tmp_path / name).write_text("x\n")
    plan = plan_from_dict(raw, path=tmp_path / "plan.yaml")
    assert plan.detection.n_boot == 2000 and plan.crs.n_boot == 10000


# --------------------------------------------------------------------------- doctests

#: the public API of DESIGN.md whose docstrings must carry runnable Examples
WITH_EXAMPLES = ("read_cases", "read_runs", "proportion_ci", "auc_ci", "delong_test",
                 "scan_level", "fit_adjusted", "likelihood_ratio_test", "crs_scores",
                 "crs_bootstrap", "rank_agreement", "compare_models", "heterogeneity_test",
                 "ece")


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_public_functions_have_examples(name):
    doc = inspect.getdoc(getattr(stats, name)) or ""
    assert re.search(r"^Examples\n-{8}\n", doc, re.M) and ">>> " in doc, name


def _stats_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(stats.__path__, prefix="stats.")]


@pytest.mark.parametrize("module", _stats_modules())
def test_doctests(module):
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    run = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in finder.find(mod, module):
        if test.examples and test.name.startswith(module):
            run.run(test)
    assert run.failures == 0, f"{run.failures} failing example(s) in {module} (run " \
                              f"python -m doctest on it to see them)"


def test_doctests_ran():
    """The doctest collection is not empty (a broken finder would pass vacuously)."""
    total = 0
    for module in _stats_modules():
        mod = importlib.import_module(module)
        total += sum(len(t.examples) for t in doctest.DocTestFinder().find(mod, module))
    assert total >= 50


# --------------------------------------------------------------------------- --help


def _commands(cmd, path=()):
    yield list(path), cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _norm(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path,cmd", COMMANDS, ids=[" ".join(p) or "clinrel"
                                                    for p, _ in COMMANDS])
def test_help_has_no_bool_tags_or_mid_sentence_breaks(path, cmd):
    res = runner.invoke(app, [*path, "--help"], terminal_width=2000, max_content_width=2000)
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output
    lines = [ln.strip() for ln in res.output.splitlines()]
    # at an unlimited width, every paragraph and every option's help is one line
    for para in (inspect.cleandoc(cmd.help or "")).split("\n\n"):
        if para.strip():
            assert any(_norm(para) in ln for ln in lines), para
    for param in cmd.params:
        text = getattr(param, "help", None)
        if text:
            assert any(_norm(text) in ln for ln in lines), text
    for name, sub in getattr(cmd, "commands", {}).items():
        # the command list shows the first sentence, whole (never cut with "...")
        first = _norm(inspect.cleandoc(sub.help or "").split("\n\n")[0])
        sentence = re.split(r"(?<=\.)\s", first, maxsplit=1)[0]
        row = next(ln for ln in lines if ln.split(" ", 1)[0] == name)
        assert row.split(" ", 1)[1].strip() == sentence, (row, sentence)


def test_a_normal_terminal_wraps_help_at_words():
    res = runner.invoke(app, ["compare", "--help"], terminal_width=80)
    assert res.exit_code == 0
    assert all(len(ln) <= 80 for ln in res.output.splitlines())
    assert "Every pair of models: sensitivity/specificity differences (Newcombe, exact" \
        in res.output
