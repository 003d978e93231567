"""Detection commands: ``subgroups`` (per-subgroup metrics) and ``compare`` (model pairs)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ._common import ForceOpt, InputError, check_out_files, check_seed, guarded, progress, write_table


def threshold_block(threshold, criterion, target_specificity) -> dict:
    """The plan's ``detection.threshold`` block from the options: --threshold
    (prespecified), else --criterion (chosen on the validation split), else the table's own
    ``pred`` column."""
    if threshold is not None:
        return {"value": threshold}
    if criterion is not None:
        block = {"criterion": criterion}
        if target_specificity is not None:
            block["target"] = target_specificity
        return block
    return {"given": True}


def by_axes(values: list[str] | None) -> list:
    """``--by a --by b:c`` as plan axes: ``["a", ["b", "c"]]``."""
    return [v.split(":") if ":" in v else v for v in (values or [])]


def bins_block(values: list[str] | None) -> dict:
    """``--bin age=0,40,60,75[:name]`` as the plan's ``detection.bins``: ``{"age": {"breaks":
    [0, 40, 60, 75]}}`` (the new column is ``age_group`` unless named; left-closed
    intervals; ``inf`` allowed)."""
    out: dict = {}
    for v in values or []:
        column, _, rest = v.partition("=")
        cuts, _, name = rest.partition(":")
        try:
            breaks = [float(x) for x in cuts.split(",")] if cuts.strip() else []
        except ValueError:
            breaks = []
        if not column.strip() or not breaks or (":" in rest and not name.strip()):
            raise InputError(f"--bin {v!r}: write COLUMN=BREAK,BREAK,...[:NAME], e.g. "
                             "--bin age=0,40,60,75 or --bin age=0,40,60,75:age_band "
                             "(left-closed intervals; inf for no upper bound)")
        out[column.strip()] = {"breaks": breaks, **({"name": name.strip()} if name else {})}
    return out


#: plan keys as the commands' options name them (a command's plan error names the option)
OPTION_OF_KEY = {
    "detection.threshold.value": "--threshold", "detection.threshold.criterion": "--criterion",
    "detection.threshold.target": "--target-specificity", "detection.ci": "--ci",
    "detection.auc_scale": "--auc-scale", "detection.conf_level": "--conf-level",
    "detection.small_n": "--small-n", "detection.subgroups": "--by", "detection.bins": "--bin",
    "detection.cluster": "--cluster",
    "detection.compare_by": "--by", "detection.bootstrap.n_boot": "--n-boot",
    "detection.bootstrap.seed": "--seed", "detection.bootstrap.boot_ci": "--boot-ci",
    "detection.adjusted.formula": "--formula", "detection.adjusted.group": "--group",
    "detection.adjusted.nagq": "--nagq", "detection.adjusted.levels": "--levels",
    "detection.adjusted.model": "--model", "detection.adjusted.means": "--means",
    "crs.bootstrap.n_boot": "--n-boot", "crs.bootstrap.seed": "--seed", "crs.k": "--k",
    "crs.conf_level": "--conf-level", "crs.n_weights": "--n-weights", "scheduler": "--scheduler",
}


def _as_options(message: str, source: str) -> str:
    """A plan message about ``source`` (the command's own plan) in the options' words."""
    import re

    if not message.startswith(source):
        return message
    body = message[len(source):].lstrip(": ")

    def option(m):
        key = m.group(1)
        if key == "detection":  # a message about the axes the command named
            return "option --by"
        base = next((k for k in sorted(OPTION_OF_KEY, key=len, reverse=True)
                     if key == k or key.startswith(k + ".") or key.startswith(k + "[")), None)
        return f"option {OPTION_OF_KEY[base]}" if base else m.group(0)

    return re.sub(r"key '([^']+)'", option, body)


#: --cluster naming a column the cases table lacks (exit 2)
MSG_CLUSTER_COLUMN = ("{file}: --cluster {cluster!r}: the cases table has no column '{cluster}' "
                      "(columns: {present}); name the column whose repeated values mark scans "
                      "of one patient (e.g. --cluster patient_id), or use --cluster auto "
                      "(patient_id when a patient has several scans) or --cluster none (scans "
                      "independent)")


def cluster_setting(value: str) -> str:
    """``--cluster``: "auto", "none" (any case) or a column name, as the plan's
    ``detection.cluster``; the rule "auto" follows is
    :func:`stats.clustered.resolve_cluster`."""
    v = value.strip()
    return v.lower() if v.lower() in ("auto", "none") else v


def check_cluster_column(tables, cluster, path) -> None:
    """Refuse a ``--cluster`` column the (binned) cases table lacks, naming the file, the
    column and the fix, before any analysis."""
    if cluster in (None, "auto", "none") or tables.cases is None:
        return
    if cluster not in tables.cases.columns:
        raise InputError(MSG_CLUSTER_COLUMN.format(
            file=path, cluster=cluster,
            present=", ".join(map(str, tables.cases.columns[:20]))))


def run_command(label: str, *, inputs: dict, detection: dict | None = None,
                crs: dict | None = None, scheduler=None, only: list[str], quiet: bool):
    """Build the plan of a command, load and check its inputs, and run the analyses
    ``only`` through :func:`stats.analysis.run` (the report runs the same code)."""
    from stats.analysis import PlanError, load_tables, run
    from stats.analysis.inputs import plan_limits
    from stats.analysis.plan import plan_for_command

    from stats.analysis.plan import COMMAND_LINE

    try:
        plan = plan_for_command(inputs=inputs, detection=detection, crs=crs,
                                scheduler=scheduler)
        with plan_limits(plan):
            tables = load_tables(plan)
    except PlanError as exc:
        message = _as_options(str(exc), str(Path.cwd() / COMMAND_LINE))
        first = next(str(p) for p in inputs.values() if p is not None)
        raise InputError(message if message.startswith(first) else f"{first}: {message}") \
            from None
    check_cluster_column(tables, (detection or {}).get("cluster"), inputs.get("cases"))
    from stats.schema import merge_notes

    for line in merge_notes(tables.text_merged):   # a file output has no flow section
        typer.echo(f"note: {line}", err=True)
    with progress(label, total=1, quiet=quiet) as advance, plan_limits(plan):
        results = run(plan, tables, only=only, errors="raise")
        advance()
    return results


def _write(table, out, *, force, inputs, quiet) -> None:
    write_table(table, out, force=force, inputs=inputs)
    if not quiet:
        typer.echo(f"{len(table)} rows written to {out}")


CasesArg = Annotated[Path, typer.Argument(metavar="CASES", help="Cases table (.csv or .parquet).")]
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
ClusterOpt = Annotated[str, typer.Option(
    metavar="COLUMN|auto|none",
    help="Scans of one patient: every interval and test is cluster-aware over this column. "
         "auto (default): patient_id when a patient has several scans among the rows "
         "analysed, else none; none: scans independent.")]


def register(app: typer.Typer) -> None:
    @app.command()
    @guarded
    def subgroups(
        cases: CasesArg, out: OutOpt, by: ByOpt = None,
        bin: Annotated[Optional[list[str]], typer.Option(
            "--bin", help="Cut a numeric column into a new axis, as the plan's "
                          "detection.bins (repeatable): age=0,40,60,75 adds age_group with "
                          "levels 0-40, 40-60, 60-75 (left-closed; inf for no upper bound); "
                          "age=0,40,60,75:age_band names it age_band. Name it in --by.")] = None,
        threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        ci: Annotated[str, typer.Option(help="Proportion intervals: wilson, clopper-pearson, "
                                             "jeffreys, or bootstrap (needs --n-boot).")] = "wilson",
        n_boot: Annotated[int, typer.Option(
            help="Cluster-bootstrap replicates (F1 intervals); 0: none.")] = 0,
        boot_ci: Annotated[str, typer.Option(
            help="Bootstrap interval: percentile, bca, or wilson (Wilson at the bootstrap's "
                 "effective sample size; best coverage in small cells).")] = "percentile",
        auc_scale: Annotated[str, typer.Option(
            help="AUC interval scale: auto (as pROC for independent scans, logit where a "
                 "patient's scans are clustered), auc (as pROC) or logit (better in small "
                 "cells).")] = "auto",
        seed: Annotated[Optional[int], typer.Option(help="Bootstrap seed.")] = None,
        conf_level: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
        small_n: Annotated[int, typer.Option(help="Flag cells whose denominator is below this.")] = 10,
        cluster: ClusterOpt = "auto",
        scheduler: Annotated[Optional[str], typer.Option(help="Dask scheduler address.")] = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Sensitivity, specificity, PPV, NPV, accuracy, F1 and AUC per model x subgroup.

        The rows analysed are the report's: the test split when the table has a split
        column, every row otherwise. Intervals are cluster-aware over --cluster (default:
        patient_id when a patient has several scans)."""
        check_seed(seed)
        check_out_files([("--out", out)], force=force, inputs=[cases])
        det = {"threshold": threshold_block(threshold, criterion, target_specificity),
               "ci": ci, "auc_scale": auc_scale, "conf_level": conf_level,
               "subgroups": by_axes(by), "small_n": small_n, "bins": bins_block(bin),
               "cluster": cluster_setting(cluster)}
        if n_boot:
            det["bootstrap"] = {"n_boot": n_boot, "boot_ci": boot_ci,
                                **({"seed": seed} if seed is not None else {})}
        res = run_command("subgroup metrics", inputs={"cases": cases}, detection=det,
                          scheduler=scheduler, only=["subgroup_metrics"], quiet=quiet)
        _write(res["subgroup_metrics"], out, force=force, inputs=[cases], quiet=quiet)
        drawn = res.decisions.get("seeds.detection_bootstrap")
        if n_boot and seed is None and drawn is not None:   # a file output has no manifest
            typer.echo(f"bootstrap seed {drawn} (drawn: give --seed {drawn} to repeat this "
                       f"run)", err=True)

    @app.command()
    @guarded
    def compare(
        cases: CasesArg, out: OutOpt, by: ByOpt = None, threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        conf_level: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
        cluster: ClusterOpt = "auto",
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Every pair of models: sensitivity/specificity differences (Newcombe, exact
        McNemar) and AUC differences (paired DeLong), Holm and BH adjusted; overall and per
        --by axis, on the report's rows; clustered McNemar and Obuchowski's AUC variance
        over --cluster (default: patient_id when a patient has several scans)."""
        check_out_files([("--out", out)], force=force, inputs=[cases])
        det = {"threshold": threshold_block(threshold, criterion, target_specificity),
               "conf_level": conf_level, "compare_by": by_axes(by), "subgroups": [],
               "cluster": cluster_setting(cluster)}
        res = run_command("model comparisons", inputs={"cases": cases}, detection=det,
                          only=["comparisons"], quiet=quiet)
        _write(res["comparisons"], out, force=force, inputs=[cases], quiet=quiet)
