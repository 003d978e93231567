"""``clinrel crs``: reference-anchored CRS, paired-seed bootstrap and ranking stability."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from reports.csvsafe import write_csv

from ._common import ForceOpt, atomic_dir, check_out_dir, check_seed, guarded, plan_option

#: files written into --out (every one a tidy table except reference.json and the
#: manifest.json that marks the folder as clinrel's; regime_differences.csv only when the
#: runs have both the frozen and adapted regimes)
OUTPUTS = ("axes.csv", "scores.csv", "rank_probabilities.csv", "differences.csv",
           "leading_tier.csv", "seeds.csv", "regime_differences.csv", "stability.csv",
           "reference.json", "manifest.json")


def run_crs(runs_path: Path, reference_path: Path, out: Path, *, n_boot: int | None = None,
            seed: int | None = None, k: int | None = None, conf_level: float | None = None,
            n_weights: int | None = None, scheduler: str | None = None, quiet: bool = False,
            force: bool = False) -> list[str]:
    """Run the CRS analysis (``analysis``, as the report does) and write its tables
    atomically into ``out``; return the file names.

    ``out`` must be new, empty, or (with ``force``) an earlier clinrel output holding no
    input; the inputs are validated first."""
    from .detection import run_command

    check_seed(seed)
    inputs = [runs_path, reference_path]
    given = lambda **kw: {k: v for k, v in kw.items() if v is not None}  # noqa: E731
    block = {"bootstrap": given(n_boot=n_boot, seed=seed),
             **given(k=k, conf_level=conf_level, n_weights=n_weights)}
    res = run_command("CRS", inputs={"runs": runs_path, "reference": reference_path}, crs=block,
                      scheduler=scheduler, only=["crs"], quiet=quiet)
    check_out_dir(out, force=force, inputs=inputs)  # after the inputs: a bad input is named first
    tables = res["crs"]
    ref = res.tables.reference
    written = []
    with atomic_dir(out, force=force, inputs=inputs, command="crs") as tmp:
        for name, df in tables.items():
            write_csv(df, tmp / f"{name}.csv")
            written.append(f"{name}.csv")
        c = res.plan.crs
        meta = {"reference": ref.to_dict(), "reference_hash": ref.hash,
                "reference_source": str(reference_path), "runs": str(runs_path),
                "n_boot": c.bootstrap.n_boot, "seed": res.plan.seed_for("crs_bootstrap"),
                "seeds": res.plan.seeds, "k": c.k, "conf_level": c.conf_level,
                "n_weights": c.n_weights}
        (tmp / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")
        written += ["reference.json", "manifest.json"]
    return written


def register(app: typer.Typer) -> None:
    @app.command("crs")
    @guarded
    def crs(
        runs: Annotated[Path, typer.Argument(metavar="RUNS", help="Runs table (.csv, .tsv, .parquet): one row per "
                                                  "encoder x dataset x label_fraction x condition x severity x seed.")],
        reference: Annotated[Path, typer.Option(help="Reference YAML: panel, optional anchors, "
                                                     "weights, version.")],
        out: Annotated[Path, typer.Option(help="Output folder: new, empty, or an earlier clinrel "
                                               "output (with --force).")] = Path("crs"),
        n_boot: Annotated[Optional[int], plan_option("crs.bootstrap.n_boot")] = None,
        seed: Annotated[Optional[int], plan_option("crs.bootstrap.seed")] = None,
        k: Annotated[Optional[int], plan_option("crs.k")] = None,
        conf_level: Annotated[Optional[float], plan_option("crs.conf_level")] = None,
        n_weights: Annotated[Optional[int], plan_option("crs.n_weights")] = None,
        scheduler: Annotated[str | None, plan_option("scheduler")] = None,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Clinical Reliability Score: axes, reference-anchored scores with paired-seed
        bootstrap CIs, rank probabilities, pairwise differences, leading tier and ranking
        stability, written as tidy CSVs into OUT."""
        names = run_crs(runs, reference, out, n_boot=n_boot, seed=seed, k=k,
                        conf_level=conf_level, n_weights=n_weights, scheduler=scheduler, quiet=quiet,
                        force=force)
        if not quiet:
            typer.echo(f"wrote {', '.join(names)} to {out}")
