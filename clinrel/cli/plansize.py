"""``clinrel plan-size``: scans needed per subgroup for a target CI half-width, before any
data exists (the table of a protocol or a pre-submission meeting).

Values come from options or a YAML file (``--plan``; its top level, or its ``precision:``
section, so the analysis plan can carry them); an option given on the command line wins.
The statistics are :func:`stats.precision.precision_table` and
:func:`stats.precision.plan_summary`; this module parses, prints and writes.
"""
from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from ._common import ForceOpt, InputError, check_out_files, guarded, write_table

PLAN_KEYS = ("expected_sensitivity", "expected_specificity", "prevalence", "target_half_width",
             "conf_level", "methods", "design_effect", "icc", "scans_per_patient", "subgroups")
SUBGROUP_KEYS = ("group_var", "group_level", "share", "expected_sensitivity",
                 "expected_specificity", "prevalence", "design_effect", "icc",
                 "scans_per_patient", "target_half_width")

MSG_SUBGROUP = ("--subgroup {spec!r}: write AXIS=LEVEL:SHARE with SHARE the subgroup's fraction "
                "of all scans (e.g. --subgroup phase=arterial:0.2)")
MSG_PLAN_MISSING = "--plan {path}: file not found; check the path"
MSG_PLAN_SHAPE = ("--plan {path}: expected a mapping of planning values (keys: {keys}), "
                  "at the top level or under 'precision:'; got {kind}")
MSG_PLAN_KEYS = "--plan {path}: unknown key(s) {bad}; allowed: {keys}"
MSG_PLAN_SUBGROUP = ("--plan {path}: subgroups[{i}] must be a mapping with group_var, "
                     "group_level and share (optional: {optional}); {problem}")
MSG_REQUIRED = ("{what} is required: give {option} or '{key}:' in the --plan file "
                "(e.g. {option} {example})")
MSG_SHARES = ("subgroups of '{axis}' have shares summing to {total:.3g} (> 1); a share is the "
              "subgroup's fraction of all scans; fix the shares")
MSG_DUPLICATE = "subgroup {axis}={level} is given twice; give each subgroup once"
MSG_NOTHING = "nothing to plan: give --sensitivity and --specificity (or a --plan file)"
MSG_METHODS = "methods: {bad} not among {allowed}; choose wilson and/or clopper-pearson"

REQUIRED = (("expected_sensitivity", "--sensitivity", "expected sensitivity", "0.9"),
            ("expected_specificity", "--specificity", "expected specificity", "0.95"),
            ("prevalence", "--prevalence", "prevalence", "0.3"))


class Method(str, Enum):
    wilson = "wilson"
    clopper_pearson = "clopper-pearson"


def parse_subgroup(spec: str) -> dict[str, Any]:
    """``AXIS=LEVEL:SHARE`` -> {group_var, group_level, share} (the level may contain
    ':'; the share is after the last one)."""
    axis, sep, rest = spec.partition("=")
    level, sep2, share = rest.rpartition(":")
    if not sep or not sep2 or not axis.strip() or not level.strip():
        raise InputError(MSG_SUBGROUP.format(spec=spec))
    try:
        value = float(share)
    except ValueError:
        raise InputError(MSG_SUBGROUP.format(spec=spec)) from None
    return {"group_var": axis.strip(), "group_level": level.strip(), "share": value}


def read_plan(path: Path) -> dict[str, Any]:
    """The planning values of a YAML file (top level or its ``precision:`` section)."""
    from stats.limits import read_yaml

    if not path.is_file():
        raise InputError(MSG_PLAN_MISSING.format(path=path))
    data = read_yaml(path, kind="plan")
    if isinstance(data, dict) and isinstance(data.get("precision"), dict):
        data = data["precision"]
    if not isinstance(data, dict):
        raise InputError(MSG_PLAN_SHAPE.format(path=path, keys=", ".join(PLAN_KEYS),
                                               kind=type(data).__name__))
    bad = [str(k) for k in data if k not in PLAN_KEYS]
    if bad:
        raise InputError(MSG_PLAN_KEYS.format(path=path, bad=", ".join(bad), keys=", ".join(PLAN_KEYS)))
    subgroups = data.get("subgroups") or []
    if not isinstance(subgroups, list):
        raise InputError(MSG_PLAN_SUBGROUP.format(path=path, i=0, optional=", ".join(SUBGROUP_KEYS[3:]),
                                                  problem="'subgroups:' must be a list"))
    for i, sg in enumerate(subgroups):   # a few planned subgroups, not data rows
        problem = None
        if not isinstance(sg, dict):
            problem = f"got {type(sg).__name__}"
        elif {"group_var", "group_level", "share"} - set(sg):
            problem = f"missing {sorted({'group_var', 'group_level', 'share'} - set(sg))}"
        elif set(sg) - set(SUBGROUP_KEYS):
            problem = f"unknown key(s) {sorted(map(str, set(sg) - set(SUBGROUP_KEYS)))}"
        if problem:
            raise InputError(MSG_PLAN_SUBGROUP.format(path=path, i=i, problem=problem,
                                                      optional=", ".join(SUBGROUP_KEYS[3:])))
    methods = data.get("methods")
    if isinstance(methods, str):
        data = {**data, "methods": [methods]}
    return data


def _check_methods(methods) -> None:
    from stats.precision import PLAN_METHODS

    bad = [m for m in (methods if isinstance(methods, list) else [methods]) if m not in PLAN_METHODS]
    if bad or not methods:
        raise InputError(MSG_METHODS.format(bad=bad or methods, allowed=", ".join(PLAN_METHODS)))


def _subgroup_frame(subgroups: list[dict[str, Any]]):
    import pandas as pd

    from stats.precision import check_range

    sg = pd.DataFrame(subgroups, columns=list(dict.fromkeys(
        ["group_var", "group_level", "share", *(k for s in subgroups for k in s)])))
    sg["group_var"] = sg["group_var"].astype(str)
    sg["group_level"] = sg["group_level"].astype(str)
    dup = sg.duplicated(["group_var", "group_level"])
    if dup.any():
        r = sg[dup].iloc[0]
        raise InputError(MSG_DUPLICATE.format(axis=r["group_var"], level=r["group_level"]))
    sg["share"] = check_range("share", sg["share"].to_numpy(dtype=object))
    totals = sg.groupby("group_var")["share"].sum()
    over = totals[totals > 1 + 1e-9]
    if len(over):
        raise InputError(MSG_SHARES.format(axis=over.index[0], total=over.iloc[0]))
    return sg


def _show(summary, half_width: float, conf_level: float) -> None:
    from rich.console import Console
    from rich.table import Table

    def whole(v):
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.0f}"

    def num(v, fmt="{:.3g}"):
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)

    table = Table(title=f"Scans needed for a {conf_level:.0%} CI half-width of {half_width:g}",
                  title_justify="left")
    for col, just in (("subgroup", "left"), ("method", "left"), ("share", "right"),
                      ("sens.", "right"), ("spec.", "right"), ("prev.", "right"),
                      ("deff", "right"), ("positives", "right"), ("negatives", "right"),
                      ("scans in subgroup", "right"), ("study scans", "right")):
        table.add_column(col, justify=just)
    body = summary[summary["group_var"] != "study"]
    for r in body.itertuples(index=False):
        name = "overall" if r.group_var == "overall" else f"{r.group_var}={r.group_level}"
        table.add_row(name, r.method, num(r.share, "{:.0%}"), num(r.expected_sensitivity),
                      num(r.expected_specificity), num(r.prevalence), num(r.design_effect),
                      whole(r.positives_required), whole(r.negatives_required),
                      whole(r.scans_required), whole(r.study_scans_required))
    console = Console(width=max(200, Console().width), soft_wrap=False)  # natural width
    console.print(table)
    for r in summary[summary["group_var"] == "study"].itertuples(index=False):
        console.print(f"Study size ({r.method}): {whole(r.study_scans_required)} scans "
                      f"(set by {r.binding})")


def register(app: typer.Typer) -> None:
    @app.command("plan-size")
    @guarded
    def plan_size(
        out: Annotated[Path, typer.Option(help="Output .csv (or .parquet): scans needed per "
                                               "subgroup and for the study.")],
        sensitivity: Annotated[float | None, typer.Option(
            help="Expected sensitivity (e.g. 0.9).")] = None,
        specificity: Annotated[float | None, typer.Option(
            help="Expected specificity (e.g. 0.95).")] = None,
        prevalence: Annotated[float | None, typer.Option(
            help="Expected prevalence of positive scans (e.g. 0.3).")] = None,
        half_width: Annotated[float | None, typer.Option(
            help="Target CI half-width (default 0.05, i.e. +-5 points).")] = None,
        subgroup: Annotated[list[str] | None, typer.Option(
            help="AXIS=LEVEL:SHARE, the subgroup's fraction of all scans "
                 "(repeatable; e.g. phase=arterial:0.2).")] = None,
        method: Annotated[list[Method] | None, typer.Option(
            help="Interval: wilson and/or clopper-pearson (repeatable; default both).")] = None,
        conf_level: Annotated[float | None, typer.Option(help="Confidence level (default 0.95).")] = None,
        design_effect: Annotated[float | None, typer.Option(
            help="Design effect of repeated scans per patient (>= 1).")] = None,
        icc: Annotated[float | None, typer.Option(
            help="Intra-patient correlation; with --scans-per-patient gives the design "
                 "effect 1 + (m - 1) * icc.")] = None,
        scans_per_patient: Annotated[float | None, typer.Option(
            help="Average scans per patient (m).")] = None,
        plan: Annotated[Path | None, typer.Option(
            help="YAML with the same values (keys: expected_sensitivity, "
                 "expected_specificity, prevalence, target_half_width, conf_level, methods, "
                 "design_effect, icc, scans_per_patient, subgroups), at the top level or "
                 "under 'precision:'; options win.")] = None,
        force: ForceOpt = False,
    ) -> None:
        """Scans needed per subgroup (and for the study) so that each subgroup's
        sensitivity and specificity reach a target confidence-interval half-width."""
        from stats.precision import plan_summary, precision_table

        values = read_plan(plan) if plan is not None else {}
        given = {"expected_sensitivity": sensitivity, "expected_specificity": specificity,
                 "prevalence": prevalence, "target_half_width": half_width,
                 "conf_level": conf_level, "design_effect": design_effect, "icc": icc,
                 "scans_per_patient": scans_per_patient,
                 "methods": [m.value for m in method] if method else None}
        values.update({k: v for k, v in given.items() if v is not None})
        if subgroup:
            values["subgroups"] = [parse_subgroup(s) for s in subgroup]
        if values.get("expected_sensitivity") is None and values.get("expected_specificity") is None:
            raise InputError(MSG_NOTHING)
        for key, option, what, example in REQUIRED:
            if values.get(key) is None:
                raise InputError(MSG_REQUIRED.format(what=what, option=option, key=key,
                                                     example=example))
        if "methods" in values:
            _check_methods(values["methods"])
        check_out_files([("--out", out)], force=force, inputs=[plan] if plan else [])
        subgroups = values.pop("subgroups", None) or []
        sg = _subgroup_frame(subgroups) if subgroups else None
        kw = {k: v for k, v in values.items() if v is not None}
        table = precision_table(subgroups=sg, **kw)
        summary = plan_summary(table).drop(columns="model")   # planning: no model yet
        write_table(summary, out, force=force, inputs=[plan] if plan else [])
        _show(summary, kw.get("target_half_width", 0.05), kw.get("conf_level", 0.95))
        typer.echo(f"wrote {out}")
