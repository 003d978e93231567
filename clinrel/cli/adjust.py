"""``clinrel adjust``: confounding-adjusted models of sensitivity or specificity."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ._common import ForceOpt, InputError, check_out_files, guarded, progress, write_table


class Method(str, Enum):
    glmm = "glmm"
    gee = "gee"
    fixed = "fixed"


class Population(str, Enum):
    positives = "positives"
    negatives = "negatives"


class MeansKind(str, Enum):
    emmeans = "emmeans"
    standardized = "standardized"


def _parse_levels(specs: list[str]) -> dict[str, list[str]]:
    out = {}
    for spec in specs:
        col, sep, levels = spec.partition("=")
        if not sep or not col.strip() or not levels.strip():
            raise InputError(f"--levels {spec!r}: write COLUMN=ref,level2,... "
                             "(e.g. --levels phase=venous,arterial,delayed,non_contrast)")
        out[col.strip()] = [v.strip() for v in levels.split(",")]
    return out


def _apply_levels(cases, levels: dict[str, list[str]]):
    import pandas as pd

    for col, lv in levels.items():
        if col not in cases.columns:
            raise InputError(f"--levels: column '{col}' is not in the cases table")
        extra = sorted(set(cases[col].dropna().astype(str)) - set(lv))
        if extra:
            raise InputError(f"--levels {col}: values {extra[:5]} are not among the levels "
                             f"{lv}; list every level")
        cases[col] = pd.Categorical(cases[col].astype(str), categories=lv)
    return cases


def register(app: typer.Typer) -> None:
    @app.command()
    @guarded
    def adjust(
        cases: Annotated[Path, typer.Argument(help="Cases table (.csv, .tsv, .parquet).")],
        formula: Annotated[str, typer.Option(help="R/patsy formula, e.g. '~ phase + age_group + "
                                             "sex + race + np.log(tumor_size_mm)'.")],
        out: Annotated[Path, typer.Option(help="Output .csv/.parquet of model terms (tidy).")],
        method: Annotated[Method, typer.Option(help="glmm, gee or fixed.")] = Method.glmm,
        population: Annotated[Population, typer.Option(
            help="positives (sensitivity) or negatives (specificity).")] = Population.positives,
        group: Annotated[str, typer.Option(help="Site (group) column.")] = "site",
        nagq: Annotated[int, typer.Option(help="glmm: 1 = Laplace, >1 = adaptive Gauss-Hermite.")] = 1,
        threshold: Annotated[float | None, typer.Option(
            help="Voxel threshold when the table has no pred column.")] = None,
        model: Annotated[str | None, typer.Option(
            help="One model, or 'pooled' (model as a term); default: one fit per model.")] = None,
        bias_reduced: Annotated[bool, typer.Option(help="gee: Mancl-DeRouen SEs.")] = False,
        levels: Annotated[list[str] | None, typer.Option(
            help="Factor levels, reference first: COLUMN=a,b,c (repeatable).")] = None,
        means: Annotated[str | None, typer.Option(help="Also write adjusted means by this factor.")] = None,
        means_kind: Annotated[MeansKind, typer.Option(help="emmeans or standardized.")] = MeansKind.emmeans,
        means_out: Annotated[Path | None, typer.Option(help="Output file of the adjusted means.")] = None,
        glance_out: Annotated[Path | None, typer.Option(help="Output file of fit statistics.")] = None,
        blocks_out: Annotated[Path | None, typer.Option(
            help="Also write likelihood-ratio tests of the protocol, demographics and tumour "
                 "blocks and of the group effect (glmm/fixed), with R2.")] = None,
        complete_case: Annotated[bool, typer.Option(
            help="Add the complete-case fit (race 'Unknown' dropped) beside the primary one "
                 "(column 'analysis' in OUT).")] = False,
        scheduler: Annotated[str | None, typer.Option(
            help="Dask scheduler address: fit the models on that cluster.")] = None,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No progress output.")] = False,
    ) -> None:
        """Fit the adjusted model of detection per model and write its terms to OUT."""
        import pandas as pd

        import stats

        if means and means_out is None:
            raise InputError("--means needs --means-out FILE")
        from stats.formula import parse_formula

        # clinrel's formula grammar, before any data is read: text outside it -> exit 2
        formula = parse_formula(formula)
        outs = [("--out", out), ("--blocks-out", blocks_out), ("--glance-out", glance_out),
                ("--means-out", means_out if means else None)]
        df = _apply_levels(stats.read_cases(cases), _parse_levels(levels or []))
        formula.check_columns(df.columns, source="cases")
        check_out_files(outs, force=force, inputs=[cases])
        kw = dict(group=group, method=method.value, population=population.value, nagq=nagq,
                  model=model, threshold=threshold, bias_reduced=bias_reduced, scheduler=scheduler)
        with progress("fitting adjusted models", quiet=quiet):
            fit = stats.fit_adjusted(df, formula, **kw)
            terms = fit.tidy()
            glance = fit.glance()
            mm = fit.marginal_means(means, kind=means_kind.value) if means else None
            if complete_case:
                from stats.models import fit_complete_case
                from stats.schema import tidy

                cc = fit_complete_case(df, formula, **kw).tidy()
                terms = tidy(pd.concat([terms.assign(analysis="unknown_as_level"),
                                        cc.assign(analysis="complete_case")], ignore_index=True),
                             group_cols=("model",))
            if blocks_out is not None:
                if method is Method.gee:
                    raise InputError("--blocks-out needs a likelihood: use --method glmm or fixed")
                blocks = stats.block_tests(df, formula, **kw)
        tables = {"--out": terms, "--glance-out": glance, "--means-out": mm}
        if blocks_out is not None:
            tables["--blocks-out"] = blocks
        for option, path in outs:
            if path is not None:
                write_table(tables[option], path, force=force, inputs=[cases], option=option)
        if not quiet:
            for _, g in glance.iterrows():
                typer.echo(f"{g['model']}: {g['method']}, n = {g['nobs']}, {g['n_groups']} groups, "
                           f"loglik = {g['loglik']:.3f}" + (f"; warnings: {g['warnings']}"
                                                          if g["warnings"] else ""))
            typer.echo(f"wrote {len(terms)} terms to {out}")
