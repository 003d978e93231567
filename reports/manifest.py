"""``manifest.json``: what produced a report (versions, inputs, plan, seeds, git revision).

``"generator": "clinrel"`` and ``"files"`` (the sha256 of every other file, added by
``reports.outputs.stamp`` once the folder is complete) mark the folder as clinrel's
own: only such a folder is ever replaced (with ``--force``).

Times live only here, never in ``appendix.qmd`` or ``tables/*.csv`` (those are
byte-identical for the same inputs and seeds).
"""
from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("clinrel", "numpy", "pandas", "scipy", "statsmodels", "pingouin", "arch",
            "scikit-learn", "plotnine", "matplotlib", "great-tables", "jinja2", "pyyaml",
            "pypandoc-binary", "typst", "pyarrow")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    try:
        import pypandoc

        out["pandoc"] = pypandoc.get_pandoc_version()
    except Exception:  # pandoc missing: reported, not fatal
        out["pandoc"] = "not found"
    return out


def git_revision() -> str | None:
    """The clinrel source tree's commit (``+dirty`` when it has local changes), or None."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _jsonable(value):
    """Decisions as JSON: numpy scalars and tuples become plain numbers and lists."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def build_manifest(study, *, sections, tables, figures, renderer: str, timings: dict) -> dict:
    plan = study.plan
    return {
        "generator": "clinrel",  # with "files" (added when the folder is complete): the
        "clinrel_report": 1,     # marker that lets a later run replace this folder
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "plan": {"path": str(plan.path), "sha256": plan.sha256, "title": plan.title,
                 "modified_utc": (getattr(study, "plan_file", None) or {}).get("modified_utc"),
                 "plan_init_date": (getattr(study, "plan_file", None) or {}).get(
                     "plan_init_date")},
        "inputs": {name: {"path": str(path), "sha256": study.input_sha256.get(name),
                          "rows": study.input_rows.get(name)}
                   for name, path in plan.inputs.items()},
        "seeds": {k.split(".", 1)[1]: v for k, v in study.results.decisions.items()
                  if k.startswith("seeds.")},
        "decisions": _jsonable({k: v for k, v in study.results.decisions.items()
                                if not k.startswith("seeds.")}),
        "git_revision": git_revision(),
        "versions": package_versions(),
        "renderer": renderer,
        "sections": [{"key": s.key, "title": s.title, "id": s.id} for s in sections],
        "skipped_sections": [{"key": k, "title": t, "reason": r} for k, t, r in study.skipped],
        "notes": list(study.notes),
        "tables": [{"id": t.id, "number": i + 1, "csv": f"tables/{t.name}.csv",
                    "caption": t.caption} for i, t in enumerate(tables)],
        "figures": [{"id": f.id, "number": i + 1, "png": f"figures/{f.name}.png",
                     "svg": f"figures/{f.name}.svg", "csv": f"tables/fig_{f.name}.csv",
                     "caption": f.caption} for i, f in enumerate(figures)],
        "timings_s": timings,
    }


def write_manifest(manifest: dict, path: Path) -> None:
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n",
                    encoding="utf-8")
