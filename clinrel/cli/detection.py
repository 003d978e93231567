"""Detection commands: ``subgroups`` (per-subgroup metrics) and ``compare`` (model pairs)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ._common import (ForceOpt, InputError, check_out_files, check_seed, guarded, plan_option,
                      progress, write_table)


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
    ``only`` through :func:`analysis.run` (the report runs the same code)."""
    from analysis import PlanError, load_tables, run
    from analysis.inputs import plan_limits
    from analysis.plan import plan_for_command

    try:   # a command's plan: its refusals name the options (analysis.plan.Plan.key)
        plan = plan_for_command(inputs=inputs, detection=detection, crs=crs,
                                scheduler=scheduler)
        with plan_limits(plan):
            tables = load_tables(plan)
    except PlanError as exc:
        raise InputError(str(exc)) from None
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
ThresholdOpt = Annotated[Optional[float], plan_option("detection.threshold.value")]
CriterionOpt = Annotated[Optional[str], plan_option("detection.threshold.criterion")]
TargetOpt = Annotated[Optional[float], plan_option("detection.threshold.target")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress output.")]
ClusterOpt = Annotated[Optional[str], plan_option("detection.cluster",
                                                  metavar="COLUMN|auto|none")]
ConfOpt = Annotated[Optional[float], plan_option("detection.conf_level")]


MSG_GOAL = ("--goal {value!r}: write METRIC>=VALUE (an absolute goal, e.g. sensitivity>=0.8) or "
            "METRIC>=overall-MARGIN (non-inferiority against overall, e.g. "
            "sensitivity>=overall-0.05); METRIC one of {metrics}")


def goals_block(values: list[str] | None, alpha: float | None) -> list[dict]:
    """``--goal sensitivity>=0.8 --goal specificity>=overall-0.05`` as the plan's
    ``detection.goals`` (the plan schema checks the metric and the numbers)."""
    from analysis.plan import GOAL_METRICS

    out = []
    for v in values or []:
        metric, sep, rhs = v.replace(" ", "").partition(">=")
        rhs_l = rhs.lower()
        try:
            if rhs_l.startswith("overall-"):
                g = {"metric": metric, "margin": float(rhs_l[len("overall-"):])}
            elif rhs_l == "overall":
                g = {"metric": metric, "margin": 0.0}
            else:
                g = {"metric": metric, "goal": float(rhs)}
        except ValueError:
            g = None
        if not sep or not metric or g is None:
            raise InputError(MSG_GOAL.format(value=v, metrics=", ".join(GOAL_METRICS)))
        out.append({**g, **({"alpha": alpha} if alpha is not None else {})})
    return out


def _given(**values) -> dict:
    """The options the user gave (None: left out, so the plan schema's default applies)."""
    return {k: v for k, v in values.items() if v is not None}


def register(app: typer.Typer) -> None:
    @app.command()
    @guarded
    def subgroups(
        cases: CasesArg, out: OutOpt,
        by: Annotated[Optional[list[str]], plan_option(
            "detection.subgroups", help="Subgroup axis (repeatable); 'a:b' for an "
                                        "intersection (plan key detection.subgroups).")] = None,
        bin: Annotated[Optional[list[str]], plan_option(
            "detection.bins", help="Cut a numeric column into a new axis, as the plan's "
                                   "detection.bins (repeatable): age=0,40,60,75 adds age_group with "
                                   "levels 0-40, 40-60, 60-75 (left-closed; inf for no upper "
                                   "bound); age=0,40,60,75:age_band names it age_band. Name it in "
                                   "--by.")] = None,
        threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        ci: Annotated[Optional[str], plan_option("detection.ci")] = None,
        n_boot: Annotated[int, plan_option("detection.bootstrap.n_boot")] = 0,
        boot_ci: Annotated[Optional[str], plan_option("detection.bootstrap.boot_ci")] = None,
        auc_scale: Annotated[Optional[str], plan_option("detection.auc_scale")] = None,
        seed: Annotated[Optional[int], plan_option("detection.bootstrap.seed")] = None,
        conf_level: ConfOpt = None,
        small_n: Annotated[Optional[int], plan_option("detection.small_n")] = None,
        cluster: ClusterOpt = None,
        scheduler: Annotated[Optional[str], plan_option("scheduler")] = None,
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
               "subgroups": by_axes(by), "bins": bins_block(bin),
               **_given(ci=ci, auc_scale=auc_scale, conf_level=conf_level, small_n=small_n,
                        cluster=None if cluster is None else cluster_setting(cluster))}
        if n_boot:
            det["bootstrap"] = {"n_boot": n_boot, **_given(boot_ci=boot_ci, seed=seed)}
        res = run_command("subgroup metrics", inputs={"cases": cases}, detection=det,
                          scheduler=scheduler, only=["subgroup_metrics"], quiet=quiet)
        _write(res["subgroup_metrics"], out, force=force, inputs=[cases], quiet=quiet)
        used = res.decisions.seeds.detection_bootstrap
        if n_boot and seed is None and used is not None:   # a file output has no manifest
            typer.echo(f"bootstrap seed {used} (derived from the command's settings: give "
                       f"--seed {used} to keep it when you change them)", err=True)

    @app.command()
    @guarded
    def compare(
        cases: CasesArg, out: OutOpt,
        by: Annotated[Optional[list[str]], plan_option("detection.compare_by")] = None,
        metric: Annotated[Optional[list[str]], plan_option(
            "detection.compare_metrics", help="Metric compared (repeatable): sensitivity, "
            "specificity, auc (closed form), ppv, npv, f1, accuracy (paired cluster "
            "bootstrap: need --n-boot). Default: sensitivity, specificity, auc (plan key "
            "detection.compare_metrics).")] = None,
        bin: Annotated[Optional[list[str]], plan_option(
            "detection.bins", help="Cut a numeric column into a new axis, as the plan's "
                                   "detection.bins (repeatable): age=0,40,60,75,inf adds "
                                   "age_group (left-closed); name it in --by.")] = None,
        threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        n_boot: Annotated[int, plan_option("detection.bootstrap.n_boot")] = 0,
        seed: Annotated[Optional[int], plan_option("detection.bootstrap.seed")] = None,
        conf_level: ConfOpt = None,
        cluster: ClusterOpt = None,
        scheduler: Annotated[Optional[str], plan_option("scheduler")] = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Every pair of models: sensitivity/specificity differences (Newcombe, exact
        McNemar) and AUC differences (paired DeLong), Holm and BH adjusted; overall and per
        --by axis, on the report's rows; clustered McNemar and Obuchowski's AUC variance
        over --cluster (default: patient_id when a patient has several scans). PPV, NPV,
        F1 and accuracy differences (--metric) come from the paired cluster bootstrap
        (--n-boot replicates of --cluster, percentile intervals)."""
        check_seed(seed)
        check_out_files([("--out", out)], force=force, inputs=[cases])
        det = {"threshold": threshold_block(threshold, criterion, target_specificity),
               "compare_by": by_axes(by), "subgroups": [], "bins": bins_block(bin),
               **_given(conf_level=conf_level, compare_metrics=metric or None,
                        cluster=None if cluster is None else cluster_setting(cluster))}
        if n_boot:
            det["bootstrap"] = {"n_boot": n_boot, **_given(seed=seed)}
        res = run_command("model comparisons", inputs={"cases": cases}, detection=det,
                          scheduler=scheduler, only=["comparisons"], quiet=quiet)
        _write(res["comparisons"], out, force=force, inputs=[cases], quiet=quiet)

    @app.command()
    @guarded
    def gaps(
        cases: CasesArg, out: OutOpt,
        gap: Annotated[Optional[list[str]], plan_option(
            "detection.subgroup_gaps", help="Metric whose best-versus-worst subgroup gap is "
            "estimated (repeatable): sensitivity, specificity, ppv, npv, accuracy, f1 "
            "(plan key detection.subgroup_gaps).")] = None,
        by: Annotated[Optional[list[str]], plan_option(
            "detection.subgroups", help="Prespecified subgroup axis (repeatable); 'a:b' for "
                                        "an intersection (plan key detection.subgroups).")] = None,
        bin: Annotated[Optional[list[str]], plan_option(
            "detection.bins", help="Cut a numeric column into a new axis, as in clinrel "
                                   "subgroups (plan key detection.bins).")] = None,
        threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        n_boot: Annotated[int, plan_option("detection.bootstrap.n_boot")] = 2000,
        seed: Annotated[Optional[int], plan_option("detection.bootstrap.seed")] = None,
        conf_level: ConfOpt = None,
        cluster: ClusterOpt = None,
        scheduler: Annotated[Optional[str], plan_option("scheduler")] = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Each model's gap between its best and worst level of every --by axis (largest
        minus smallest value, as fairlearn's difference()), with a paired cluster-bootstrap
        percentile interval (--n-boot replicates of --cluster, default: patient_id when a
        patient has several scans), on the report's rows."""
        check_seed(seed)
        check_out_files([("--out", out)], force=force, inputs=[cases])
        if not gap:
            raise InputError("gaps: give at least one --gap, e.g. --gap sensitivity")
        if not by:
            raise InputError("gaps: give at least one --by axis, e.g. --by phase: the gap is "
                             "between a model's best and worst level of an axis")
        det = {"threshold": threshold_block(threshold, criterion, target_specificity),
               "subgroups": by_axes(by), "bins": bins_block(bin), "subgroup_gaps": list(gap),
               "bootstrap": {"n_boot": n_boot, **_given(seed=seed)},
               **_given(conf_level=conf_level,
                        cluster=None if cluster is None else cluster_setting(cluster))}
        res = run_command("subgroup gaps", inputs={"cases": cases}, detection=det,
                          scheduler=scheduler, only=["subgroup_gaps"], quiet=quiet)
        _write(res["subgroup_gaps"], out, force=force, inputs=[cases], quiet=quiet)

    @app.command()
    @guarded
    def operating(
        cases: CasesArg, out: OutOpt,
        at_specificity: Annotated[Optional[list[float]], plan_option(
            "detection.operating_points.specificity",
            help="Specificity at which each model's sensitivity is read, at its own "
                 "threshold (repeatable; plan key detection.operating_points.specificity).")
        ] = None,
        at_sensitivity: Annotated[Optional[list[float]], plan_option(
            "detection.operating_points.sensitivity",
            help="Sensitivity at which each model's specificity is read (repeatable; plan "
                 "key detection.operating_points.sensitivity).")] = None,
        by: Annotated[Optional[list[str]], plan_option("detection.compare_by")] = None,
        threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        n_boot: Annotated[Optional[int], plan_option(
            "detection.operating_points.n_boot")] = None,
        seed: Annotated[Optional[int], plan_option("detection.operating_points.seed")] = None,
        conf_level: ConfOpt = None,
        cluster: ClusterOpt = None,
        scheduler: Annotated[Optional[str], plan_option("scheduler")] = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Each model at a matched operating point: sensitivity at a fixed specificity (or
        the reverse), each model at its own threshold, with paired differences between
        models (paired cluster bootstrap, Holm), overall and per --by axis.

        Values as pROC's coords() reads them (interpolated between two ROC points where no
        threshold attains the value). The rows analysed are the report's; the bootstrap
        resamples --cluster (default: patient_id when a patient has several scans). The
        report's matched-versus-fixed table and threshold-shift flag, partial AUC and ROC
        curves come from the plan's detection.operating_points block."""
        check_seed(seed)
        check_out_files([("--out", out)], force=force, inputs=[cases])
        if not at_specificity and not at_sensitivity:
            raise InputError("operating: give --at-specificity (e.g. --at-specificity 0.9) "
                             "or --at-sensitivity: the coordinate held fixed")
        det = {"threshold": threshold_block(threshold, criterion, target_specificity),
               "compare_by": by_axes(by), "subgroups": [],
               "operating_points": {"specificity": list(at_specificity or []),
                                    "sensitivity": list(at_sensitivity or []),
                                    **_given(n_boot=n_boot, seed=seed)},
               **_given(conf_level=conf_level,
                        cluster=None if cluster is None else cluster_setting(cluster))}
        res = run_command("operating points", inputs={"cases": cases}, detection=det,
                          scheduler=scheduler, only=["operating_points"], quiet=quiet)
        _write(res["operating_points"], out, force=force, inputs=[cases], quiet=quiet)

    @app.command()
    @guarded
    def goals(
        cases: CasesArg, out: OutOpt,
        goal: Annotated[Optional[list[str]], typer.Option(
            "--goal", help="A prespecified goal (repeatable): METRIC>=VALUE, e.g. "
                           "sensitivity>=0.8, or METRIC>=overall-MARGIN, e.g. "
                           "sensitivity>=overall-0.05 (plan key detection.goals).")] = None,
        alpha: Annotated[Optional[float], typer.Option(
            "--alpha", help="One-sided level of every goal's test, Holm over the subgroups "
                            "(plan key detection.goals.alpha). Default: 0.05.")] = None,
        by: Annotated[Optional[list[str]], plan_option(
            "detection.subgroups", help="Prespecified subgroup axis (repeatable); 'a:b' for "
                                        "an intersection (plan key detection.subgroups).")] = None,
        bin: Annotated[Optional[list[str]], plan_option(
            "detection.bins", help="Cut a numeric column into a new axis, as in clinrel "
                                   "subgroups (plan key detection.bins).")] = None,
        threshold: ThresholdOpt = None,
        criterion: CriterionOpt = None, target_specificity: TargetOpt = None,
        cluster: ClusterOpt = None,
        force: ForceOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Prespecified performance goals per model and subgroup: one-sided tests, Holm over
        the subgroups, and a verdict per row (met, not met, inconclusive).

        An absolute goal uses the exact binomial test, a margin against overall
        Farrington and Manning's score test; both at the effective counts where a patient
        has several scans (--cluster, default: patient_id when one repeats). An
        inconclusive row gives the count that would settle it."""
        check_out_files([("--out", out)], force=force, inputs=[cases])
        block = goals_block(goal, alpha)
        if not block:
            raise InputError("goals: give at least one --goal, e.g. --goal sensitivity>=0.8")
        det = {"threshold": threshold_block(threshold, criterion, target_specificity),
               "subgroups": by_axes(by), "bins": bins_block(bin), "goals": block,
               **_given(cluster=None if cluster is None else cluster_setting(cluster))}
        res = run_command("performance goals", inputs={"cases": cases}, detection=det,
                          only=["performance_goals"], quiet=quiet)
        _write(res["performance_goals"], out, force=force, inputs=[cases], quiet=quiet)
