"""Shared command line of the bench scripts: --quick | --full, --repeats, --json OUT."""
from __future__ import annotations

import argparse
import json


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--full", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    return ap


def emit(figures: dict, path: str | None) -> None:
    """Write ``figures`` to ``path`` (bench/run.py reads it) when given."""
    if path:
        with open(path, "w") as fh:
            json.dump(figures, fh, indent=2, default=str)


def flat(figures: dict, prefix: str = "") -> dict:
    """Nested figures (e.g. a report's timings per analysis) as ``outer.inner`` keys."""
    out = {}
    for k, v in figures.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def md_table(df, fmt) -> list[str]:
    """A Markdown table of ``df``: header, rule and one line per row, each cell written by
    ``fmt(column, value)``."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(c, v) for c, v in zip(cols, r)) + " |")
    return lines
