"""``clinrel metadata extract``: DICOM headers and report texts -> evidence table."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import InputError, guarded, progress, write_table


def register(app: typer.Typer) -> None:
    meta = typer.Typer(help="Extract phase, age, sex, ... with verbatim evidence.", no_args_is_help=True)

    @meta.command()
    @guarded
    def extract(
        paths: Annotated[list[Path], typer.Argument(help="DICOM files/folders, or CSVs with case_id, text.")],
        out: Annotated[Path, typer.Option(help="Evidence table (.csv or .parquet).")],
        review: Annotated[Path | None, typer.Option(help="Disagreements CSV (default: OUT stem + _review.csv).")] = None,
        reviewed: Annotated[Path | None, typer.Option(help="A filled-in review CSV to merge back.")] = None,
        llm_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint URL (optional extractor).")] = None,
        llm_model: Annotated[str, typer.Option(help="Model name sent to the endpoint.")] = "local",
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Write the evidence table, the extractor agreement table and the review CSV."""
        import pandas as pd

        from inference_runner.metadata.compare import agreement, disagreements, merge_reviewed
        from inference_runner.metadata.extract import extract_paths

        with progress("extracting", None, quiet=quiet) as advance:
            table, info = extract_paths(paths, llm_url=llm_url, llm_model=llm_model, advance=advance)
        if reviewed is not None:
            if not reviewed.is_file():
                raise InputError(f"--reviewed {reviewed}: file not found; give the filled-in review CSV")
            table = merge_reviewed(table, pd.read_csv(reviewed, dtype=str, keep_default_na=False),
                                   source=str(reviewed))
        stem = out.with_suffix("")
        review = review or Path(f"{stem}_review.csv")
        agree = agreement(table)
        write_table(table, out)
        write_table(agree, Path(f"{stem}_agreement.csv"))
        write_table(disagreements(table), review)
        if not quiet:
            typer.echo(f"{len(table)} evidence rows -> {out}; agreement -> {stem}_agreement.csv; "
                       f"review -> {review}" + (f"; {info['llm_rejected']} LLM answers rejected"
                                                 if llm_url else ""))
            for r in agree.itertuples():
                typer.echo(f"  {r.field}: {r.extractor_a} vs {r.extractor_b}: n={r.n_both} "
                           f"agreement={r.agreement:.3f} kappa={r.kappa:.3f}")

    app.add_typer(meta, name="metadata")
