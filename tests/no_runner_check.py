"""Run by tests/test_install.py in a fresh interpreter: the core install without the
``runner`` extra, simulated by refusing every import of its packages.

A meta-path finder makes ``import torch`` (monai, nibabel, pydicom, medspacy, spacy) raise
ModuleNotFoundError, as in an environment where they are not installed. Then every module
of ``stats``, ``analysis``, ``reports``, ``clinrel`` and ``inference_runner.metadata`` is imported, the demo
report is built through the Python API (no HTML/PDF, figures drawn), and the commands that
need the runner must exit 2 naming ``pip install 'clinrel[runner]'``, report-text
metadata extraction among them (it reads each mention's context with medspaCy). Prints one JSON line for the test to read.

Usage: python tests/no_runner_check.py OUT_DIR
"""
from __future__ import annotations

import importlib
import importlib.abc
import json
import os
import pkgutil
import sys
from pathlib import Path

BLOCKED = ("torch", "monai", "nibabel", "pydicom", "medspacy", "spacy")


class Blocker(importlib.abc.MetaPathFinder):
    """Refuses the runner's packages, recording who asked."""

    attempts: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in BLOCKED:
            self.attempts.append(fullname)
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked: core install)",
                                      name=fullname)
        return None


def main(out: Path) -> dict:
    sys.meta_path.insert(0, Blocker())
    for name in BLOCKED:
        assert name not in sys.modules, name
    imported = []
    for pkg_name in ("stats", "analysis", "reports", "clinrel", "inference_runner.metadata"):
        pkg = importlib.import_module(pkg_name)
        imported.append(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg_name + "."):
            if info.name.startswith("clinrel.demo_data"):
                continue  # data and its generator script, not code clinrel imports
            importlib.import_module(info.name)
            imported.append(info.name)

    from reports.render import render_report

    from clinrel.cli.report import demo_plan_path

    result = render_report(demo_plan_path(), out / "report", formats=(), quiet=True, strict=True)
    written = sorted(p.name for p in (out / "report").iterdir())

    from typer.testing import CliRunner

    from clinrel.cli import app

    runner = CliRunner()
    config = out / "run.yaml"
    config.write_text("cases: cases.csv\n")
    dicom_dir = out / "dicom"
    dicom_dir.mkdir()
    (dicom_dir / "image.dcm").write_bytes(b"\0" * 132 + b"DICM")
    reports_csv = out / "reports.csv"
    reports_csv.write_text("case_id,text\nc1,CT abdomen with contrast in portal venous phase. "
                           "62-year-old woman.\n")
    calls = {
        "infer segment": ["infer", "segment", "--config", str(config)],
        "infer probe": ["infer", "probe", "--config", str(config)],
        "demo --regenerate": ["demo", "--regenerate", "--out", str(out / "regen")],
        "metadata extract dicom": ["metadata", "extract", str(dicom_dir), "--out",
                                   str(out / "dicom_evidence.csv")],
        "metadata extract csv": ["metadata", "extract", str(reports_csv), "--out",
                                 str(out / "text_evidence.csv"), "--quiet"],
        "subgroups --help": ["subgroups", "--help"],
    }
    exits = {}
    for label, args in calls.items():
        res = runner.invoke(app, args)
        exits[label] = {"exit_code": res.exit_code, "output": res.output,
                        "traceback": res.exc_info is not None and res.exit_code not in (0, 2)}
    return {"imported": imported, "sections": [s.key for s in result.sections],
            "written": written, "exits": exits,
            "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
            "attempts": sorted(set(Blocker.attempts)),
            "regen_written": (out / "regen").exists(),
            "text_evidence": (out / "text_evidence.csv").is_file()}


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))))
