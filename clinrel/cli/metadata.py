"""``clinrel metadata extract``: DICOM headers and report texts -> evidence table."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import ForceOpt, InputError, check_out_files, guarded, progress, write_tables
from ._extras import require_runner


def register(app: typer.Typer) -> None:
    meta = typer.Typer(help="Extract phase, age, sex, race and other fields with verbatim evidence.",
                       no_args_is_help=True)

    @meta.command()
    @guarded
    def extract(
        paths: Annotated[list[Path], typer.Argument(metavar="PATH", help="DICOM files/folders, or CSVs with case_id, text.")],
        out: Annotated[Path, typer.Option(help="Evidence table (.csv or .parquet).")],
        review: Annotated[Path | None, typer.Option(help="Disagreements CSV (default: OUT stem + _review.csv).")] = None,
        reviewed: Annotated[Path | None, typer.Option(help="A filled-in review CSV to merge back.")] = None,
        llm_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint URL (optional extractor).")] = None,
        llm_model: Annotated[str, typer.Option(help="Model name sent to the endpoint.")] = "local",
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Write the evidence table, the extractor agreement table and the review CSV."""
        from inference_runner.metadata.compare import agreement, disagreements, merge_reviewed
        from inference_runner.metadata.extract import check_paths, extract_paths
        from inference_runner.metadata.text import read_text_csv

        inputs = [*check_paths(paths), reviewed]
        check_out_files([("--out", out)], force=force, inputs=inputs)  # a file, so it has a stem
        stem = out.with_suffix("")
        review = review or Path(f"{stem}_review.csv")
        outs = [("--out", out), ("--out (agreement table)", Path(f"{stem}_agreement.csv")),
                ("--review", review)]
        check_out_files(outs, force=force, inputs=inputs)
        texts = [p.is_file() and p.suffix.lower() in (".csv", ".tsv") for p in paths]
        if not all(texts):  # headers by pydicom; a series description's phase in context
            require_runner("clinrel metadata extract of DICOM files", ("pydicom", "medspacy"))
        elif any(texts):  # each report mention's clinical context (negated, prior, family)
            require_runner("clinrel metadata extract of report texts (each mention's clinical "
                           "context by medspaCy's ConText)", ("medspacy",))
        with progress("extracting", None, quiet=quiet) as advance:
            table, info = extract_paths(paths, llm_url=llm_url, llm_model=llm_model, advance=advance)
        if reviewed is not None:
            if not reviewed.is_file():
                raise InputError(f"--reviewed {reviewed}: file not found; give the filled-in review CSV")
            table = merge_reviewed(table, read_text_csv(reviewed, dtype=str, keep_default_na=False),
                                   source=str(reviewed))
        agree = agreement(table)
        # all three checked (suffixes too) before any is written, then all or none
        write_tables([(option, path, df) for (option, path), df
                      in zip(outs, (table, agree, disagreements(table)))],
                     force=force, inputs=inputs)
        if not quiet:
            skipped = len(info.get("skipped", []))
            typer.echo(f"{len(table)} evidence rows -> {out}; agreement -> {stem}_agreement.csv; "
                       f"review -> {review}" + (f"; {info['llm_rejected']} LLM answers rejected"
                                                 if llm_url else "")
                       + (f"; {skipped} file(s) in the folders skipped (not readable DICOM)"
                          if skipped else ""))
            notes = kappa_notes(table)
            for r in agree.itertuples():
                typer.echo(f"  {r.field}: {r.extractor_a} vs {r.extractor_b}: n={r.n_both} "
                           f"agreement={r.agreement:.3f} "
                           + kappa_text(r.kappa, notes.get((r.field, r.extractor_a,
                                                           r.extractor_b))))

    app.add_typer(meta, name="metadata")


def kappa_notes(evidence) -> dict:
    """``(field, a, b) -> extractor`` where one extractor of the pair gave a single value
    over the cases both answered (counted, not read off a computed kappa): Cohen's kappa is
    then 0 whatever the agreement, since the agreement expected by chance equals the
    observed one."""
    from stats.agreement import extractor_pairs

    out = {}
    for field, a, b, wa, wb in extractor_pairs(evidence):
        both = wa.index.intersection(wb.index)
        for name, w in ((a, wa), (b, wb)):
            if len(both) >= 2 and w.loc[both, "value"].astype(str).nunique() == 1:
                out[(field, a, b)] = (name, str(w.loc[both, "value"].astype(str).iloc[0]))
                break
    return out


def kappa_text(kappa, single) -> str:
    """``kappa=0.731``, explained where it says nothing: not estimable (fewer than two
    cases, or one category between both), or 0 by construction (``single``: one
    extractor gave one value only)."""
    import math

    if kappa is None or math.isnan(kappa):
        return "kappa not estimable (fewer than two cases, or one value between both)"
    if single:
        return (f"kappa={kappa:.3f} (by construction: {single[0]} gave one value only, "
                f"{single[1]!r}, so agreement by chance equals the observed; read the agreement)")
    return f"kappa={kappa:.3f}"
