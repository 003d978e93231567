"""``clinrel infer segment`` and ``clinrel infer probe``: the MONAI runner (torch loads
only when a command runs; without the ``runner`` extra both exit 2 saying how to install
it)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import guarded, progress
from ._extras import require_runner


def register(app: typer.Typer) -> None:
    infer = typer.Typer(help="Run networks: segmentation -> cases table; frozen-encoder probes -> runs table.",
                        no_args_is_help=True)

    @infer.command()
    @guarded
    def segment(
        config: Annotated[Path, typer.Option("--config", help="Run config (YAML); see inference_runner.config.")],
        shard: Annotated[str | None, typer.Option(help="Process shard k/n of the cases (k from 1).")] = None,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Sliding-window segmentation of every case -> cases.parquet + run_manifest.json."""
        require_runner("clinrel infer segment")
        from inference_runner.config import load_segment_config, parse_shard
        from inference_runner.segment import read_case_list, run_segment

        cfg = load_segment_config(config)
        k, n = parse_shard(shard)
        total = len(read_case_list(cfg["cases"]).iloc[k - 1::n])
        with progress("segmenting", total, quiet=quiet) as advance:
            res = run_segment(cfg, shard=(k, n), advance=advance)
        if not quiet:
            done = "cases.parquet written" if res["merged"] else "cases.parquet waits for the other shards"
            typer.echo(f"shard {k}/{n}: {res['n_run']} run, {res['n_skipped']} already done, "
                       f"{res['n_failed']} failed; {done} in {res['output']}")

    @infer.command()
    @guarded
    def probe(
        config: Annotated[Path, typer.Option("--config", help="Probe config (YAML); see inference_runner.config.")],
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Frozen-encoder logistic probes -> runs.parquet + probe_predictions.parquet."""
        require_runner("clinrel infer probe")
        from inference_runner.config import load_probe_config
        from inference_runner.probe import run_from_config

        cfg = load_probe_config(config)
        with progress("probing", len(cfg["encoders"]) * len(cfg["datasets"]), quiet=quiet) as advance:
            res = run_from_config(cfg, advance=advance)
        if not quiet:
            typer.echo(f"{res['n_runs']} runs written to {res['output']}")

    app.add_typer(infer, name="infer")
