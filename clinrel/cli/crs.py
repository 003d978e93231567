"""``clinrel crs``: reference-anchored CRS, paired-seed bootstrap and ranking stability."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from clinrel._csvsafe import write_csv

from ._common import ForceOpt, InputError, atomic_dir, check_out_dir, check_seed, guarded, progress

#: files written into --out (every one a tidy table except reference.json and the
#: manifest.json that marks the folder as clinrel's; regime_differences.csv only when the
#: runs have both the frozen and adapted regimes)
OUTPUTS = ("axes.csv", "scores.csv", "rank_probabilities.csv", "differences.csv",
           "leading_tier.csv", "regime_differences.csv", "stability.csv", "reference.json",
           "manifest.json")


def _check_options(bootstrap: int, conf_level: float, k: int, n_weights: int, seed: int) -> None:
    check_seed(seed)
    if bootstrap < 0 or bootstrap == 1:
        raise InputError(f"--bootstrap must be 0 (no bootstrap) or >= 2 replicates; got {bootstrap}")
    if not 0.0 < conf_level < 1.0:
        raise InputError(f"--conf-level must lie in (0, 1), e.g. 0.95; got {conf_level}")
    if k < 1:
        raise InputError(f"--k must be >= 1; got {k}")
    if n_weights < 0:
        raise InputError(f"--n-weights must be >= 0 (0 skips the stability analysis); got {n_weights}")


def run_crs(runs_path: Path, reference_path: Path, out: Path, *, bootstrap: int = 10_000,
            seed: int = 1, k: int = 3, conf_level: float = 0.95, n_weights: int = 1000,
            scheduler: str | None = None, quiet: bool = False,
            force: bool = False) -> list[str]:
    """Compute every CRS table and write them atomically into ``out``; return the file names.

    ``out`` must be new, empty, or (with ``force``) an earlier clinrel output holding no
    input; the inputs are validated first."""
    import stats
    from stats.crs import read_reference

    _check_options(bootstrap, conf_level, k, n_weights, seed)
    runs = stats.read_runs(runs_path)
    ref = read_reference(reference_path, encoders=runs["encoder"].unique())
    inputs = [runs_path, reference_path]
    check_out_dir(out, force=force, inputs=inputs)
    steps = 2 + (bootstrap > 0) + (n_weights > 0)
    written = []
    with progress("CRS", total=steps, quiet=quiet) as advance, \
            atomic_dir(out, force=force, inputs=inputs, command="crs") as tmp:
        def put(df, name):
            write_csv(df, tmp / name)
            written.append(name)

        put(stats.crs_axes(runs), "axes.csv")
        advance()
        if bootstrap > 0:
            res = stats.crs_bootstrap(runs, ref, n_boot=bootstrap, seed=seed, conf_level=conf_level,
                                      scheduler=scheduler)
            put(res.scores(), "scores.csv")
            put(res.rank_probabilities(k), "rank_probabilities.csv")
            put(res.differences(), "differences.csv")
            put(res.leading_tier(), "leading_tier.csv")
            if {"frozen", "adapted"} <= set(res.replicates):
                put(res.regime_differences("adapted", "frozen"), "regime_differences.csv")
            advance()
        else:
            put(stats.crs_scores(runs, ref), "scores.csv")
        advance()
        if n_weights > 0:
            put(stats.ranking_stability(runs, ref, n_weights=n_weights, seed=seed, k=k,
                                        conf_level=conf_level), "stability.csv")
            advance()
        meta = {"reference": ref.to_dict(), "reference_hash": ref.hash,
                "reference_source": str(reference_path), "runs": str(runs_path),
                "bootstrap": bootstrap, "seed": seed, "k": k, "conf_level": conf_level,
                "n_weights": n_weights}
        (tmp / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")
        written += ["reference.json", "manifest.json"]
    return written


def register(app: typer.Typer) -> None:
    @app.command("crs")
    @guarded
    def crs(
        runs: Annotated[Path, typer.Argument(help="Runs table (.csv, .tsv, .parquet): one row per "
                                                  "encoder x dataset x label_fraction x condition x severity x seed.")],
        reference: Annotated[Path, typer.Option(help="Reference YAML: panel, optional anchors, "
                                                     "weights, version.")],
        out: Annotated[Path, typer.Option(help="Output folder: new, empty, or an earlier clinrel "
                                               "output (with --force).")] = Path("crs"),
        bootstrap: Annotated[int, typer.Option(help="Paired-seed bootstrap replicates (0: none).")] = 10_000,
        seed: Annotated[int, typer.Option(help="Random seed (bootstrap and Dirichlet weights).")] = 1,
        k: Annotated[int, typer.Option(help="Top-k for rank probabilities and overlap.")] = 3,
        conf_level: Annotated[float, typer.Option(help="Confidence level of the intervals.")] = 0.95,
        n_weights: Annotated[int, typer.Option(help="Dirichlet(1,1,1) weight draws for the "
                                                    "stability analysis (0: skip it).")] = 1000,
        scheduler: Annotated[str | None, typer.Option(help="Dask scheduler address for the "
                                                           "bootstrap blocks.")] = None,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Clinical Reliability Score: axes, reference-anchored scores with paired-seed
        bootstrap CIs, rank probabilities, pairwise differences, leading tier and ranking
        stability, written as tidy CSVs into OUT."""
        names = run_crs(runs, reference, out, bootstrap=bootstrap, seed=seed, k=k,
                        conf_level=conf_level, n_weights=n_weights, scheduler=scheduler, quiet=quiet,
                        force=force)
        if not quiet:
            typer.echo(f"wrote {', '.join(names)} to {out}")
