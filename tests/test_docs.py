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

import pandas as pd
import pytest
import typer
import yaml
from typer.testing import CliRunner

import stats
from clinrel.cli import app
from analysis.plan import PlanError, keys as plan_keys, plan_from_dict

#: the documented keys, by path (analysis.plan.keys(): the schema's own declarations)
KEYS = {k.path: k for k in plan_keys()}


def schema_keys() -> list[str]:
    return list(KEYS)

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
    keys_section = (DOCS / "plan.md").read_text().split("## Caps")[0]
    listed = re.findall(r"^\| `([^`]+)` \|", keys_section, re.MULTILINE)
    assert sorted(listed) == sorted(schema_keys())
    assert len(listed) == len(set(listed))


def test_every_model_of_the_schema_is_walked():
    """Every block of the schema is in the reference: a nested model, a user-keyed
    mapping and the limits are reached by the walk."""
    assert "detection.bins.<column>" in schema_keys() and "limits.max_rows" in schema_keys()
    assert "detection.bins.<column>.breaks" in schema_keys()
    assert "detection.adjusted.units.<variable>" in schema_keys()
    assert all(KEYS[k].meaning for k in schema_keys()), [k for k in schema_keys()
                                                         if not KEYS[k].meaning]


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
    assert plan.detection.bootstrap.n_boot == 2000 and plan.crs.bootstrap.n_boot == 10000


# --------------------------------------------------------------------------- doctests

#: the public API of DESIGN.md whose docstrings must carry runnable Examples
WITH_EXAMPLES = ("read_cases", "read_runs", "proportion_ci", "auc_ci", "delong_test",
                 "scan_level", "subgroup_metrics", "fit_adjusted", "likelihood_ratio_test",
                 "crs_scores", "crs_bootstrap", "rank_agreement", "compare_models",
                 "heterogeneity_test", "ece")


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


# --------------------------------------------------------------------------- contracts


def test_contracts_md_is_what_the_generator_writes():
    expected = _generator("make_contracts.py")["render"]()
    assert (DOCS / "contracts.md").read_text(encoding="utf-8") == expected, \
        "docs/contracts.md is stale: run python docs/make_contracts.py"


def test_contracts_document_every_column_with_its_required_flag():
    from inference_runner.metadata import EVIDENCE_COLUMNS
    from stats import schema as S

    gen = _generator("make_contracts.py")
    tables = {
        "cases": (gen["CASES"], S.CASES_REQUIRED, S.CASES_REQUIRED + S.CASES_OPTIONAL),
        "runs": (gen["RUNS"], S.RUNS_REQUIRED, S.RUNS_REQUIRED + S.RUNS_OPTIONAL),
        "probe_predictions": (gen["PROBE"], S.PROBE_REQUIRED,
                              S.PROBE_REQUIRED + gen["PROBE_OPTIONAL"]),
        "metadata evidence": (gen["EVIDENCE"], EVIDENCE_COLUMNS, EVIDENCE_COLUMNS),
        "lesions": (gen["LESIONS"], S.LESIONS_REQUIRED, S.LESIONS_REQUIRED + S.LESIONS_OPTIONAL),
    }
    text = (DOCS / "contracts.md").read_text()
    for title, (documented, required, every) in tables.items():
        assert set(documented) == set(every), (title, set(documented) ^ set(every))
        section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
        for col in every:
            flag = "**required**" if col in required else "optional"
            assert f"| `{col}` | {flag} |" in section, (title, col)
    for value in (*S.SPLITS, *S.REGIMES, *S.PROBE_SPLITS):
        assert f"`{value}`" in text


# --------------------------------------------------------------------------- tutorial


def _tutorial_commands() -> list[str]:
    text = (DOCS / "tutorial.md").read_text()
    blocks = re.findall(r"```console\n(.*?)```", text, re.S)
    return [ln[2:] for b in blocks for ln in b.splitlines() if ln.startswith("$ ")]


def test_tutorial_commands_run(tmp_path, monkeypatch):
    """Every `$ ...` line of docs/tutorial.md, in order, in a fresh folder, with the output
    the tutorial shows where it shows one."""
    shutil.copy(DOCS / "example" / "cases.csv", tmp_path / "example.csv")
    monkeypatch.chdir(tmp_path)
    commands = _tutorial_commands()
    assert commands[0] == "cp docs/example/cases.csv cases.csv"
    assert any(c.startswith("clinrel report --plan plan.yaml") for c in commands)
    shown = (DOCS / "tutorial.md").read_text()
    shutil.copy("example.csv", "cases.csv")
    for command in commands[1:]:
        args = shlex.split(command)
        assert args[0] == "clinrel", command
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = runner.invoke(app, args[1:], terminal_width=200)
        assert res.exit_code == 0, (command, res.output)
        for line in res.output.splitlines():   # what the command prints is what is shown
            assert line in shown, (command, line)
    from analysis import load_plan

    plan = load_plan(tmp_path / "plan.yaml")
    assert plan.detection.threshold.value == 50
    excerpt = re.search(r"```yaml\n(.*?)```", shown, re.S).group(1)
    written = (tmp_path / "plan.yaml").read_text()
    for line in excerpt.splitlines():
        assert line in written, line
    for name in ("appendix.html", "appendix.pdf", "appendix.qmd", "manifest.json"):
        assert (tmp_path / "report" / name).stat().st_size > 0, name
    assert list((tmp_path / "report" / "tables").glob("*.csv"))
    assert (tmp_path / "subgroups.csv").stat().st_size > 0


def test_docs_link_to_files_that_exist():
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), (page.name, target)


def test_validation_record_names_every_r_script_and_simulation_study():
    text = (DOCS / "validation.md").read_text()
    for script in sorted((ROOT / "tests" / "r").glob("*.R")):
        assert f"tests/r/{script.name}" in text, script.name
    for study in ("cluster_coverage", "gee_size", "pooled_coverage", "label_error_coverage"):
        if (ROOT / "bench" / f"{study}.md").exists():
            assert f"bench/{study}.md" in text, study
    for name in sorted([*(ROOT / "bench").glob("*coverage*.md"),
                        *(ROOT / "bench").glob("*size*.md")]):
        assert f"bench/{name.name}" in text, name.name


# --------------------------------------------------------------------------- README examples

README = ROOT / "README.md"
#: README lines that cannot run in the test suite, each with its reason (asserted to be the
#: only ones left out): the runner extra (torch, MONAI, a run config), the package index,
#: the Makefile (it would run this suite), a Dask cluster at a placeholder address
NOT_RUN = {"clinrel demo --regenerate": "needs clinrel[runner] (MONAI networks)",
           "clinrel infer": "needs clinrel[runner] and a run config",
           "pip install": "installs from the package index",
           "make ": "runs the Makefile (the suite itself)",
           "dask ": "starts a Dask cluster", "--scheduler tcp://HOST": "needs that cluster"}


def _readme_blocks() -> tuple[list[str], list[str]]:
    """The README's shell lines (fenced blocks without a language, and indented blocks;
    comment continuation lines dropped) and its ```python blocks, read line by line."""
    shell, python = [], []
    fence = None   # (language, lines) of the open fenced block
    indented = False   # inside an indented code block (it starts after a blank line)
    prev_blank = True
    for line in README.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                fence = (stripped[3:].strip(), [])
            else:
                lang, body = fence
                if lang == "":
                    shell += [ln for ln in body if ln.strip() and not ln.startswith(" ")]
                elif lang == "python":
                    python.append("\n".join(body) + "\n")
                fence = None
            prev_blank = indented = False
            continue
        if fence is not None:
            fence[1].append(line)
            continue
        indented = line.startswith("    ") and bool(stripped) and (prev_blank or indented)
        if indented:
            shell.append(line[4:])
        prev_blank = not stripped
    return shell, python


def _skipped(line: str) -> str | None:
    return next((why for key, why in NOT_RUN.items() if key in line), None)


@pytest.fixture()
def example_folder(tmp_path, monkeypatch):
    """A fresh folder holding docs/example, the working folder of the README's lines."""
    shutil.copytree(DOCS / "example", tmp_path / "docs" / "example")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_command_lines_run_on_the_example_table(example_folder):
    """Every command line of README.md runs as written, in order, on docs/example/cases.csv
    (raw age: --bin makes age_group) and the demo study; a line whose comment says
    "(exit 2)" must be refused with exit 2. Only the lines of NOT_RUN are left out."""
    shell, _ = _readme_blocks()
    run = [ln for ln in shell if _skipped(ln) is None]
    left_out = {_skipped(ln) for ln in shell} - {None}
    assert left_out == set(NOT_RUN.values()), left_out
    assert any("--by age_group:phase" in ln and "docs/example/cases.csv" in ln for ln in run)
    assert any(ln.startswith("clinrel adjust docs/example/cases.csv") and "--bin" in ln
               for ln in run)
    assert len(run) >= 15
    for line in run:
        args = shlex.split(line, comments=True)
        if args[0] == "cp":
            shutil.copy(args[1], args[2])
            continue
        assert args[0] == "clinrel", line
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = runner.invoke(app, args[1:], terminal_width=200)
        want = 2 if "(exit 2)" in line else 0
        assert res.exit_code == want, (line, res.output[-2000:])
    for report in ("report", "example-report", "demo-report"):
        assert (example_folder / report / "appendix.pdf").stat().st_size > 0, report
    sub = pd.read_csv(example_folder / "subgroups.csv")
    assert "age_group:phase" in set(sub["group_var"])
    terms = pd.read_csv(example_folder / "terms.csv")
    assert terms["estimand"].str.startswith("age_group").any()


def test_readme_python_blocks_run_on_the_example_table(example_folder, capsys):
    """Every ```python block of README.md runs as written from the repository's folder."""
    _, python = _readme_blocks()
    assert python and any("docs/example/cases.csv" in b for b in python)
    for block in python:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    assert "sensitivity" in capsys.readouterr().out


def test_the_missing_bin_hint_is_true(example_folder):
    """The refusal of a table without age_group names the call that makes it, and that
    call works (stats.read_cases adds no bin)."""
    import stats

    cases = stats.read_cases("docs/example/cases.csv")
    assert "age_group" not in cases.columns
    with pytest.raises(stats.ContractError) as exc:
        stats.subgroup_metrics(stats.scan_level(cases, threshold=50), by=["age_group"])
    message = str(exc.value)
    assert "stats.add_bins(cases, {'age': {'name': 'age_group'" in message
    call = re.search(r"(stats\.add_bins\(cases, .*?\}\}\))", message).group(1)
    binned = eval(call, {"stats": stats, "cases": cases})   # the hint, run as written
    stats.subgroup_metrics(stats.scan_level(binned, threshold=50), by=["age_group"])
    res = runner.invoke(app, ["subgroups", "docs/example/cases.csv", "--by", "age_group",
                              "--threshold", "50", "--out", "x.csv"])
    assert res.exit_code == 2 and "--bin age=0,40,60,75,inf" in res.output
