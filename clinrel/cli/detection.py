"""Detection commands: ``subgroups`` (per-subgroup metrics) and ``compare`` (model pairs)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ._common import ForceOpt, InputError, check_out_files, check_seed, guarded, progress, write_table

CRITERIA = ("youden", "target_specificity")


def _called(cases, threshold, criterion, target_specificity):
    """Scan-level calls: --threshold (prespecified), else the existing ``pred`` column,
    else a threshold chosen on the validation split (then only test rows are analysed)."""
    import stats

    if threshold is not None:
        return stats.scan_level(cases, threshold=threshold)
    if "pred" in cases.columns and criterion is None:
        return cases
    crit = criterion or "youden"
    if crit not in CRITERIA:
        raise InputError(f"--criterion must be one of {', '.join(CRITERIA)}; got {crit!r}")
    called = stats.scan_level(cases, criterion=crit, target_specificity=target_specificity)
    test = called[called["split"] == "test"]
    if test.empty:
        raise InputError("no rows with split == 'test' to evaluate the validation-chosen "
                         "threshold on; give --threshold or add a test split")
    return test.reset_index(drop=True)


def _by(values: list[str] | None) -> list:
    return [tuple(v.split(":")) if ":" in v else v for v in (values or [])]


def _run(label, cases, out, threshold, criterion, target_specificity, quiet, compute,
         force=False) -> None:
    """Read, check --out, call, compute (bad options become exit 2), write atomically,
    report."""
    import stats

    with progress(label, total=2, quiet=quiet) as advance:
        raw = stats.read_cases(cases)
        check_out_files([("--out", out)], force=force, inputs=[cases])
        df = _called(raw, threshold, criterion, target_specificity)
        advance()
        try:
            table = compute(df)
        except ValueError as exc:
            if isinstance(exc, stats.ContractError):
                raise
            raise InputError(str(exc)) from exc
        advance()
    write_table(table, out, force=force, inputs=[cases])
    if not quiet:
        typer.echo(f"{len(table)} rows written to {out}")


CasesArg = Annotated[Path, typer.Argument(help="Cases table (.csv or .parquet).")]
OutOpt = Annotated[Path, typer.Option(help="Output tidy table (.csv or .parquet).")]
ByOpt = Annotated[Optional[list[str]], typer.Option(
    help="Subgroup axis (repeatable); 'a:b' for an intersection.")]
ThresholdOpt = Annotated[Optional[float], typer.Option(
    help="Prespecified threshold: pred = score >= THRESHOLD.")]
CriterionOpt = Annotated[Optional[str], typer.Option(
    help="Choose the threshold on the validation split (youden or target_specificity) "
         "and analyse the test split.")]
TargetOpt = Annotated[Optional[float], typer.Option(help="For --criterion target_specificity.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress output.")]


def register(app: typer.Typer) -> None:
    @app.command()
    @guarded
    def subgroups(
        cases: CasesArg, out: OutOpt, by: ByOpt = None, threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        ci: Annotated[str, typer.Option(help="wilson, clopper-pearson, jeffreys or bootstrap.")] = "wilson",
        bootstrap: Annotated[int, typer.Option(
            help="Cluster-bootstrap replicates for F1 (all metrics with --ci bootstrap); 0: none.")] = 0,
        boot_interval: Annotated[str, typer.Option(
            help="Bootstrap interval: percentile, bca, or wilson (Wilson at the bootstrap's "
                 "effective sample size; best coverage in small cells).")] = "percentile",
        auc_ci: Annotated[str, typer.Option(
            help="AUC interval scale: auc (as pROC) or logit (better in small cells).")] = "auc",
        seed: Annotated[Optional[int], typer.Option(help="Bootstrap seed.")] = None,
        conf_level: Annotated[float, typer.Option()] = 0.95,
        small_n: Annotated[int, typer.Option(help="Flag cells whose denominator is below this.")] = 10,
        scheduler: Annotated[Optional[str], typer.Option(help="Dask scheduler address.")] = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Sensitivity, specificity, PPV, NPV, accuracy, F1 and AUC per model x subgroup."""
        import stats

        check_seed(seed)
        _run("subgroup metrics", cases, out, threshold, criterion, target_specificity, quiet,
             lambda df: stats.subgroup_metrics(df, by=_by(by), ci=ci, conf_level=conf_level,
                                               bootstrap=bootstrap or None, seed=seed,
                                               boot_method=boot_interval, auc_scale=auc_ci,
                                               small_n=small_n, scheduler=scheduler),
             force=force)

    @app.command()
    @guarded
    def compare(
        cases: CasesArg, out: OutOpt, by: ByOpt = None, threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        conf_level: Annotated[float, typer.Option()] = 0.95, force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Every pair of models: sensitivity/specificity differences (Newcombe, exact
        McNemar) and AUC differences (paired DeLong), Holm and BH adjusted."""
        import stats

        _run("model comparisons", cases, out, threshold, criterion, target_specificity, quiet,
             lambda df: stats.compare_models(df, by=_by(by), conf_level=conf_level),
             force=force)
