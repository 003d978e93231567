"""The core install (``pip install clinrel``) needs none of the runner's packages; the
commands that do exit 2 saying how to install ``clinrel[runner]``; every declared
dependency is imported somewhere (or is a reference implementation used by the tests)."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL_HINT = "pip install 'clinrel[runner]'"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower()


def _path() -> str:
    """PYTHONPATH for the check: this checkout first (an editable install elsewhere would
    otherwise be what the subprocess imports)."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="module")
def no_runner(tmp_path_factory):
    out = tmp_path_factory.mktemp("no_runner")
    # -P: the script's folder (tests/, which holds tests/stats/) is not put on sys.path
    proc = subprocess.run([sys.executable, "-P", str(ROOT / "tests" / "no_runner_check.py"), str(out)],
                          capture_output=True, text=True, timeout=600, cwd=out,
                          env={**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": _path()})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


def test_core_modules_import_without_the_runner(no_runner):
    imported = set(no_runner["imported"])
    for module in ("analysis.plan", "reports.render", "clinrel.cli.infer",
                   "clinrel.cli.metadata", "inference_runner.metadata.dicom"):
        assert module in imported
    assert no_runner["loaded"] == []


def test_demo_report_renders_without_the_runner(no_runner):
    assert {"methods", "subgroups", "adjusted", "crs", "checklist"} <= set(no_runner["sections"])
    assert {"appendix.qmd", "manifest.json", "tables", "figures"} <= set(no_runner["written"])


@pytest.mark.parametrize("command", ["infer segment", "infer probe", "demo --regenerate",
                                     "metadata extract dicom"])
def test_runner_commands_exit_2_with_the_install_command(no_runner, command):
    res = no_runner["exits"][command]
    assert res["exit_code"] == 2 and not res["traceback"], res
    assert INSTALL_HINT in " ".join(res["output"].split()), res["output"]
    assert "Traceback" not in res["output"]
    if command == "demo --regenerate":
        assert not no_runner["regen_written"]  # refused before anything is written


def test_report_text_metadata_needs_medspacy_from_the_runner_extra(no_runner):
    """Report texts are read in clinical context by medspaCy (runner extra): without it the
    extraction exits 2 naming medspaCy and the install command, writing nothing."""
    res = no_runner["exits"]["metadata extract csv"]
    assert res["exit_code"] == 2 and not res["traceback"], no_runner["exits"]
    assert "medspacy" in res["output"] and INSTALL_HINT in " ".join(res["output"].split())
    assert not no_runner["text_evidence"]
    assert no_runner["exits"]["subgroups --help"]["exit_code"] == 0


def test_runner_packages_are_an_extra_only():
    project = _pyproject()["project"]
    core = {_name(r) for r in project["dependencies"]}
    runner = {_name(r) for r in project["optional-dependencies"]["runner"]}
    assert {"torch", "monai", "nibabel", "pydicom", "pillow", "medspacy"} <= runner
    assert not core & {"torch", "monai", "nibabel", "pydicom", "medspacy", "spacy"}
    torch = [r for r in project["optional-dependencies"]["runner"] if _name(r) == "torch"]
    assert torch == ["torch==2.13.0"]
    makefile = (ROOT / "Makefile").read_text()
    assert "-e '.[runner,test]'" in makefile


#: import name -> distribution, where they differ
IMPORT_NAMES = {"PIL": "pillow", "sklearn": "scikit-learn", "yaml": "pyyaml",
                "pypandoc": "pypandoc-binary", "great_tables": "great-tables",
                "distributed": "dask", "jinja2": "jinja2", "pytest_xdist": "pytest-xdist",
                "docx": "python-docx"}


def _imports(folders) -> set[str]:
    found = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                found |= {IMPORT_NAMES.get(n.split(".")[0], n.split(".")[0]).lower()
                          for n in names}
    return found


def test_every_declared_dependency_is_used():
    """A dependency nothing imports is dead weight: each core and runner package is imported
    by the package code, each test tool by the tests (pytest-xdist is a pytest plugin)."""
    project = _pyproject()["project"]
    code = _imports(["stats", "analysis", "reports", "clinrel", "inference_runner"])
    tests = _imports(["tests"])
    for req in [*project["dependencies"], *project["optional-dependencies"]["runner"]]:
        name = _name(req)
        assert name in code or (name == "nibabel" and "monai" in code), \
            f"{req} is declared but never imported by clinrel"
    for req in project["optional-dependencies"]["test"]:
        name = _name(req)
        assert name in tests or name == "pytest-xdist", f"{req} is declared but no test uses it"


def test_every_third_party_import_is_declared():
    project = _pyproject()["project"]
    declared = {_name(r) for r in [*project["dependencies"],
                                   *project["optional-dependencies"]["runner"]]}
    stdlib = set(sys.stdlib_module_names)
    local = {"stats", "analysis", "reports", "clinrel", "inference_runner", "templates"}
    optional = {"threadpoolctl"}  # stats._threads: used when present (scikit-learn ships it)
    optional |= {"pydantic_core"}  # pydantic's own core (its errors), installed with it
    used = _imports(["stats", "analysis", "reports", "clinrel", "inference_runner"])
    undeclared = sorted(used - declared - stdlib - local - optional)
    assert undeclared == [], f"imported but not declared in pyproject.toml: {undeclared}"


@pytest.mark.slow
def test_fresh_core_venv_has_no_torch_and_renders_the_demo(tmp_path):
    """``pip install .`` (no extras) in a new virtual environment: no torch, MONAI or pydicom,
    and ``clinrel report --demo`` works there (minutes; needs the package index or pip's
    cache)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(ROOT)], check=True,
                   timeout=3000)
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], check=True,
                            capture_output=True, text=True).stdout
    names = {d["name"].lower() for d in json.loads(listed)}
    assert not names & {"torch", "monai", "nibabel", "pydicom"}
    out = tmp_path / "report"
    res = subprocess.run([str(venv / "bin" / "clinrel"), "report", "--demo", "--quiet", "--out",
                          str(out)], capture_output=True, text=True, timeout=1800,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / "appendix.pdf").stat().st_size > 0
    res = subprocess.run([str(venv / "bin" / "clinrel"), "infer", "probe", "--config", "x.yaml"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2 and INSTALL_HINT in " ".join(res.stderr.split())


def test_license_is_an_spdx_string_so_the_build_prints_no_deprecation():
    """setuptools 77 deprecated ``license = {text = ...}`` (a warning block at every
    install); an SPDX expression needs setuptools >= 77 in the build requirements."""
    data = _pyproject()
    assert isinstance(data["project"]["license"], str) and data["project"]["license"] == "MIT"
    req = next(r for r in data["build-system"]["requires"] if _name(r) == "setuptools")
    floor = re.search(r">=\s*(\d+)", req)
    assert floor and int(floor.group(1)) >= 77, req
