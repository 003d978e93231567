"""Core commands: ``demo``, ``simulate``, ``validate``."""
from __future__ import annotations

import shutil
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from ._common import ForceOpt, InputError, atomic_dir, check_out_files, check_seed, guarded, write_table
from ._extras import require_runner

DEMO_FILES = ("cases.parquet", "runs.parquet", "probe_predictions.parquet", "run_manifest.json",
              "lesions.parquet",
              "metadata.parquet", "plan.yaml", "reference.yaml")


def demo_data_dir() -> Path:
    """The folder of the embedded demo study inside the installed package."""
    return Path(str(resources.files("clinrel") / "demo_data"))


class Kind(str, Enum):
    auto = "auto"
    cases = "cases"
    runs = "runs"


class Design(str, Enum):
    benchx = "benchx"
    crs = "crs"


#: a report-text table given to ``clinrel validate`` (exit 2)
MSG_REPORT_TEXT = ("{path}: this is a table of report texts (columns case_id, text), not a "
                   "cases table (case_id, model, label, score) or a runs table; extract its "
                   "metadata with: clinrel metadata extract {path} --out evidence.csv")


#: column names of report texts (a radiology report table, not a cases table)
REPORT_TEXT_COLUMNS = ("text", "report", "report_text", "reports", "findings", "impression",
                       "narrative", "note", "notes")
MSG_RENAME_TEXT = " (its text column is {column!r}: rename it 'text')"


def _long_text(col) -> bool:
    """A column of free text: strings of at least 40 characters on average, with spaces."""
    if col.dtype.kind not in "OSU" and str(col.dtype) != "string":
        return False
    v = col.dropna().astype(str).head(200)
    return bool(len(v)) and v.str.len().mean() >= 40 and bool(v.str.contains(" ").mean() > 0.5)


def _guess_kind(path: Path) -> str:
    import stats

    df, _ = stats.schema.read_table(path, table="input")
    cols = set(df.columns)
    if "case_id" in cols and not {"label", "score"} & cols:
        texts = [c for c in df.columns if c in REPORT_TEXT_COLUMNS or _long_text(df[c])]
        if "text" in cols:
            raise InputError(MSG_REPORT_TEXT.format(path=path))
        if texts:
            raise InputError(MSG_REPORT_TEXT.format(path=path) + MSG_RENAME_TEXT.format(
                column=texts[0]))
    if {"encoder", "auroc"} & cols and not {"case_id", "score"} <= cols:
        return "runs"
    if {"case_id", "score"} & cols:
        return "cases"
    raise InputError(
        f"{path}: cannot tell whether this is a cases table (case_id, model, label, score) "
        f"or a runs table (encoder, dataset, label_fraction, condition, severity, seed, auroc, ece); "
        f"columns present: {', '.join(list(df.columns)[:12])}; pass --kind cases or --kind runs"
    )


def register(app: typer.Typer) -> None:
    @app.command()
    @guarded
    def demo(
        out: Annotated[Path, typer.Option(help="Folder to write the demo study into: new, empty, "
                                               "or an earlier clinrel demo (with --force).")] = Path("clinrel-demo"),
        regenerate: Annotated[bool, typer.Option(
            help="Re-run the networks that made the demo (minutes; needs the runner extra: "
                 "pip install 'clinrel[runner]').")] = False,
        seed: Annotated[int, typer.Option(help="Seed for --regenerate.")] = 0,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Write the embedded demo study (cases, runs, plan, reference) to OUT."""
        check_seed(seed)
        if regenerate:
            require_runner("clinrel demo --regenerate")
        src = demo_data_dir()
        with atomic_dir(out, force=force, inputs=[src], command="demo") as tmp:
            for name in DEMO_FILES:
                if (src / name).exists():
                    shutil.copy2(src / name, tmp / name)
            if regenerate:
                from inference_runner.demo import regenerate as _regen

                _regen(tmp, seed=seed, quiet=quiet)
        if not quiet:
            typer.echo(f"demo study written to {out}; render it with: clinrel report --plan {out / 'plan.yaml'} --out report")

    @app.command()
    @guarded
    def simulate(
        design: Annotated[Design, typer.Argument(metavar="DESIGN", help="benchx (a cases table) or crs (a runs table).")],
        out: Annotated[Path, typer.Option(help="Output .csv or .parquet file.")],
        scale: Annotated[int, typer.Option(help="benchx: number of cases; crs: number of encoders.")] = 2000,
        models: Annotated[int, typer.Option(help="benchx: number of models.")] = 3,
        seed: Annotated[int, typer.Option(help="Random seed.")] = 1,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet")] = False,
    ) -> None:
        """Simulate a ground-truth study table (BenchX-like cases or CRS-like runs)."""
        from stats import simulate as sim

        from stats.limits import check_option

        if scale < 1:
            raise InputError(f"--scale must be >= 1; got {scale}")
        if models < 1:
            raise InputError(f"--models must be >= 1; got {models}")
        if design is Design.benchx:
            check_option(scale, command="simulate benchx", option="--scale",
                         hint="BenchX has 85,000 cases: simulate that many, or a few times it")
            check_option(models, command="simulate benchx", option="--models",
                         hint="a study compares a few models")
        else:
            check_option(scale, command="simulate crs", option="--scale",
                         hint="CRS-Bench has tens of encoders")
        check_seed(seed)
        check_out_files([("--out", out)], force=force)
        if design is Design.benchx:
            data = sim.benchx_cohort(scale, n_models=models, seed=seed).data
        else:
            data = sim.crs_runs(n_encoders=scale, seed=seed).data
        write_table(data, out, force=force)
        if not quiet:
            typer.echo(f"wrote {len(data)} rows to {out}")

    @app.command()
    @guarded
    def validate(
        file: Annotated[Path, typer.Argument(metavar="FILE", help="A cases or runs table (.csv, .tsv, .parquet).")],
        kind: Annotated[Kind, typer.Option(help="Which contract to check.")] = Kind.auto,
        quiet: Annotated[bool, typer.Option("--quiet")] = False,
    ) -> None:
        """Check FILE against its table contract; exit 2 with the reason if it breaks it."""
        import stats

        k = kind.value if kind is not Kind.auto else _guess_kind(file)
        df = stats.read_cases(file) if k == "cases" else stats.read_runs(file)
        for line in stats.schema.merge_notes(df.attrs.get("text_merged", [])):
            typer.echo(f"{file}: note: {line}", err=True)   # never merged silently
        if not quiet:
            if k == "cases":
                sites = (f"1 site (no site column: a single-site study, site "
                         f"'{stats.schema.IMPLICIT_SITE}')" if df.attrs.get("implicit_site")
                         else f"{df['site'].nunique()} sites")
                per = df.drop_duplicates("case_id").groupby("patient_id", observed=True).size()
                typer.echo(f"{file}: valid cases table: {len(df)} rows, {df['model'].nunique()} models, "
                           f"{df['case_id'].nunique()} cases (scans) of {len(per)} patients "
                           f"({int((per > 1).sum())} with more than one scan), {sites}")
            else:
                typer.echo(f"{file}: valid runs table: {len(df)} runs, {df['encoder'].nunique()} encoders, "
                           f"{df['dataset'].nunique()} datasets")
