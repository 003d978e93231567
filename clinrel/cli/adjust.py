"""``clinrel adjust``: confounding-adjusted models of sensitivity or specificity."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional, get_args

import typer

from stats.adjust import MeansKind as _MeansKind
from stats.models import Method as _Method
from stats.models import Population as _Population

from ._common import ForceOpt, InputError, check_out_files, guarded, plan_option, write_tables


def _choices(name: str, literal) -> type[Enum]:
    """A CLI choice list made from the stats Literal (one definition of the allowed values)."""
    return Enum(name, {v: v for v in get_args(literal)}, type=str)


Method = _choices("Method", _Method)
Population = _choices("Population", _Population)
MeansKind = _choices("MeansKind", _MeansKind)


def _parse_levels(specs: list[str]) -> dict[str, list[str]]:
    out = {}
    for spec in specs:
        col, sep, levels = spec.partition("=")
        if not sep or not col.strip() or not levels.strip():
            raise InputError(f"--levels {spec!r}: write COLUMN=ref,level2,... "
                             "(e.g. --levels phase=venous,arterial,delayed,non_contrast)")
        out[col.strip()] = [v.strip() for v in levels.split(",")]
    return out


def register(app: typer.Typer) -> None:
    @app.command()
    @guarded
    def adjust(
        cases: Annotated[Path, typer.Argument(metavar="CASES", help="Cases table (.csv, .tsv, .parquet).")],
        formula: Annotated[str, plan_option("detection.adjusted.formula")],
        out: Annotated[Path, typer.Option(help="Output .csv/.parquet of model terms (tidy).")],
        method: Annotated[Method, typer.Option(help="glmm, gee or fixed (plan key "
                                                    "detection.adjusted.methods).")] = Method.glmm,
        population: Annotated[Optional[Population], plan_option(
            "detection.adjusted.population", "--population")] = None,
        group: Annotated[Optional[str], plan_option("detection.adjusted.group")] = None,
        nagq: Annotated[Optional[int], plan_option("detection.adjusted.nagq")] = None,
        bin: Annotated[Optional[list[str]], plan_option(
            "detection.bins", help="Cut a numeric column into a new factor, as the plan's "
                                   "detection.bins (repeatable): age=0,40,60,75,inf adds "
                                   "age_group (levels 0-40, 40-60, 60-75, 75-inf; left-closed); "
                                   "age=0,40,60,75,inf:age_band names it age_band. Name it in "
                                   "--formula.")] = None,
        threshold: Annotated[float | None, plan_option(
            "detection.threshold.value", help="Prespecified threshold (pred = score >= "
            "THRESHOLD); without it the table's pred column is used.")] = None,
        model: Annotated[str | None, plan_option("detection.adjusted.model")] = None,
        bias_reduced: Annotated[Optional[bool], plan_option(
            "detection.adjusted.bias_reduced", "--bias-reduced/--no-bias-reduced")] = None,
        levels: Annotated[list[str] | None, plan_option(
            "detection.adjusted.levels", help="Factor levels, reference first: COLUMN=a,b,c "
            "(repeatable; plan key detection.adjusted.levels).")] = None,
        means: Annotated[str | None, plan_option(
            "detection.adjusted.means", help="Also write adjusted means by this factor "
            "(plan key detection.adjusted.means).")] = None,
        means_kind: Annotated[Optional[MeansKind], plan_option(
            "detection.adjusted.means_kind")] = None,
        means_out: Annotated[Path | None, typer.Option(help="Output file of the adjusted means.")] = None,
        glance_out: Annotated[Path | None, typer.Option(help="Output file of fit statistics.")] = None,
        blocks_out: Annotated[Path | None, typer.Option(
            help="Also write likelihood-ratio tests of the protocol, demographics and tumour "
                 "blocks and of the group effect (glmm/fixed), with R2.")] = None,
        scheduler: Annotated[str | None, typer.Option(
            help="Dask scheduler address: fit the models on that cluster.")] = None,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Fit the adjusted model of detection per model and write its terms to OUT.

        The same analysis as the report's adjusted models (analysis): the report's
        rows (test split when there is one), the complete-case GLMM beside the primary one
        when race has an Unknown level, column fit_method naming each fit."""
        from stats.formula import parse_formula

        from .detection import bins_block, run_command, threshold_block

        if means and means_out is None:
            raise InputError("--means needs --means-out FILE")
        if blocks_out is not None and method is Method.gee:
            raise InputError("--blocks-out needs a likelihood: use --method glmm or fixed")
        parse_formula(formula)  # clinrel's formula grammar, before any data is read
        outs = [("--out", out), ("--blocks-out", blocks_out), ("--glance-out", glance_out),
                ("--means-out", means_out if means else None)]
        check_out_files(outs, force=force, inputs=[cases])
        adjusted = {"formula": formula, "methods": [method.value],
                    "levels": _parse_levels(levels or [])}
        given = {"group": group, "population": population and population.value, "nagq": nagq,
                 "model": model, "bias_reduced": bias_reduced}
        adjusted.update({k: v for k, v in given.items() if v is not None})
        if means:
            adjusted["means"] = [means]
            if means_kind is not None:
                adjusted["means_kind"] = means_kind.value
        det = {"threshold": threshold_block(threshold, None, None), "subgroups": [],
               "adjusted": adjusted, "bins": bins_block(bin)}
        only = ["adjusted_terms", "adjusted_glance"]
        only += ["adjusted_blocks"] if blocks_out is not None else []
        only += ["adjusted_means"] if means else []
        res = run_command("fitting adjusted models", inputs={"cases": cases}, detection=det,
                          scheduler=scheduler, only=only, quiet=quiet)
        tables = {"--out": "adjusted_terms", "--glance-out": "adjusted_glance",
                  "--means-out": "adjusted_means", "--blocks-out": "adjusted_blocks"}
        # every output checked (suffixes too) before any is written, then all or none
        write_tables([(option, path, res[tables[option]]) for option, path in outs
                      if path is not None], force=force, inputs=[cases])
        if not quiet:
            for line in summary_lines(res["adjusted_glance"], method.value):
                typer.echo(line)
            typer.echo(f"wrote {len(res['adjusted_terms'])} terms to {out}")


def _whole(x) -> str:
    """A count as a whole number (a float column's ``888.0`` reads ``888``)."""
    import math

    return "NA" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{int(round(float(x)))}"


def summary_lines(glance, method: str) -> list[str]:
    """The console summary: per model the fit of ``--method`` (the one asked for: scans
    used, groups, log-likelihood, warnings), then one line for the complete-case GLMM
    fitted beside it (race Unknown left out), never mistaken for the primary fit."""
    main = glance[glance["fit_method"] == method]
    out = [f"{g['model']}: {g['method']}, n = {_whole(g['nobs'])} scans, "
           f"{_whole(g['n_groups'])} groups, loglik = {g['loglik']:.3f}"
           + (f"; warnings: {g['warnings']}" if g["warnings"] else "")
           for _, g in main.iterrows()]
    cc = glance[glance["fit_method"] == "glmm_cc"]
    if len(cc):
        ns = sorted({_whole(n) for n in cc["nobs"]})
        out.append(f"beside it, the complete-case GLMM (race Unknown left out; fit_method "
                   f"glmm_cc in the output): n = {' to '.join(ns[::max(1, len(ns) - 1)])} "
                   f"scans per model")
    return out
