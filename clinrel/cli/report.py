"""``clinrel report``: render a study's appendix (qmd, HTML, PDF, tables, figures, manifest)."""
from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Annotated, Optional

import typer

from ._common import ForceOpt, InputError, guarded


def demo_plan_path() -> Path:
    """The embedded demo study's plan inside the installed ``clinrel`` package."""
    return Path(str(resources.files("clinrel") / "demo_data" / "plan.yaml"))


def register(app: typer.Typer) -> None:
    @app.command()
    @guarded
    def report(
        out: Annotated[Path, typer.Option(help="Output folder: new, empty, or an earlier "
                                               "clinrel report (with --force).")],
        plan: Annotated[Optional[Path], typer.Option(help="The analysis plan (plan.yaml).")] = None,
        demo: Annotated[bool, typer.Option("--demo", help="Render the embedded demo study.")] = False,
        scheduler: Annotated[Optional[str], typer.Option(
            help="Dask scheduler address for bootstrap blocks and model fits "
                 "(overrides the plan's 'scheduler:'; results are identical).")] = None,
        strict: Annotated[bool, typer.Option(
            "--strict", help="Fail (exit 1, nothing written) when a section raises an "
                             "unexpected error, instead of leaving it out and naming it.")] = False,
        reference_docx: Annotated[Optional[Path], typer.Option(
            "--reference-docx", help="A Word .docx whose styles appendix.docx takes (fonts, "
                                     "headings, tables, captions, page); default "
                                     "templates/reference.docx.")] = None,
        jobs: Annotated[Optional[int], typer.Option(
            min=1, help="Processes that run the analyses, draw figures and render documents (default: the "
                        "CPUs available; the files are the same bytes either way).")] = None,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress or summary output.")] = False,
    ) -> None:
        """Render the reliability appendix of the study described by PLAN into OUT.

        OUT receives appendix.qmd, appendix.html, appendix.pdf, appendix.docx (styled by
        reference.docx), tables/*.csv, figures/*.png|svg and manifest.json. Nothing is written when the plan or an input
        is bad (exit 2, the message names the file, key or column and the fix).
        """
        if demo == (plan is not None):
            raise InputError("give exactly one of --plan plan.yaml or --demo")
        import warnings

        from reports.render import check_reference_docx, render_report
        from reports.sections import SectionFailed

        if reference_docx is not None:
            try:
                check_reference_docx(reference_docx)
            except ValueError as exc:
                raise InputError(str(exc)) from None

        logging.getLogger("clinrel.report").setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            target = demo_plan_path() if demo else plan
            if scheduler is not None:
                from analysis import load_plan

                target = load_plan(target).updated({"scheduler": scheduler})
            try:
                result = render_report(target, out, quiet=quiet, strict=strict, force=force,
                                       reference_docx=reference_docx, jobs=jobs)
            except SectionFailed as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(1) from None
        if not quiet:
            typer.echo(f"report written to {out} in {result.seconds:.1f} s "
                       f"({len(result.sections)} sections, {len(result.tables)} tables, "
                       f"{len(result.figures)} figures; renderer {result.renderer})")
            for _, title, reason in result.skipped:
                typer.echo(f"  skipped: {title} ({reason})")
            typer.echo(f"  open {out / 'appendix.html'}, {out / 'appendix.pdf'} or "
                       f"{out / 'appendix.docx'}")
