"""Writers: parquet tables and ``run_manifest.json``, written atomically.

Every output folder of the runner carries a manifest (config hash, seed, package
versions, device, git revision, row counts) so a table on disk can always be traced to
the run that made it.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import tempfile
from collections.abc import Mapping
from importlib import metadata as _md
from pathlib import Path

import pandas as pd

MANIFEST_NAME = "run_manifest.json"
_PACKAGES = ("clinrel", "numpy", "pandas", "scikit-learn", "scipy", "torch", "monai", "pydicom",
             "nibabel", "pyarrow", "pillow")


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet(df: pd.DataFrame, path) -> Path:
    """Write ``df`` to ``path`` (parquet, no index) atomically; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", suffix=".parquet", dir=path.parent)
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(obj, path) -> Path:
    """Write ``obj`` as indented JSON atomically."""
    _atomic_write_bytes(Path(path), json.dumps(obj, indent=2, sort_keys=True, default=str).encode())
    return Path(path)


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = _md.version(name)
        except _md.PackageNotFoundError:
            out[name] = None
    return out


def git_revision(path=None) -> str | None:
    """The git HEAD of the checkout holding this package (None outside git)."""
    where = Path(path) if path else Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def device_description(device) -> str:
    """``"cpu"`` or ``"cuda:0 (<name>)"``."""
    dev = str(device)
    if dev.startswith("cuda"):
        import torch

        return f"{dev} ({torch.cuda.get_device_name(torch.device(dev))})"
    return dev


def write_manifest(out_dir, *, kind: str, config_hash: str, seed, device, tables: Mapping[str, pd.DataFrame] | None = None,
                   extra: Mapping | None = None) -> Path:
    """Write ``out_dir/run_manifest.json``.

    Fields: ``kind`` (segment / probe / demo), ``config_hash``, ``seed``, ``versions``,
    ``device``, ``git_revision``, ``created_utc``, ``tables`` ({name: n_rows}) and any
    ``extra`` entries.
    """
    manifest = {
        "kind": kind,
        "config_hash": config_hash,
        "seed": seed,
        "versions": package_versions(),
        "device": device_description(device),
        "git_revision": git_revision(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tables": {k: int(len(v)) for k, v in (tables or {}).items()},
    }
    manifest.update(extra or {})
    return write_json(manifest, Path(out_dir) / MANIFEST_NAME)
