"""``clinrel plan init CASES --out plan.yaml``: a commented analysis plan for a user's table.

The table is validated (``stats.read_cases``), its columns are sorted into what the plan
can use, and a plan is written whose every choice is a proposal marked *prespecified*:
subgroup axes from the categorical columns, bins for ``age`` and ``tumor_size_mm``, the
threshold rule, intervals, a seeded bootstrap, an adjusted model when there are several
sites. The user edits it before seeing any result; ``clinrel report --plan`` renders it.
Nothing here looks at the outcomes (label x call): proposals come from column names, types
and level counts only, so the plan stays prespecified.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

from analysis.plan import Detection, describe

from ._common import ForceOpt, InputError, guarded

#: numeric columns binned by default: column -> (new name, breaks, labels); the demo's
BIN_PRESETS = {
    "age": ("age_group", (0, 40, 60, 75, math.inf), ("<40", "40-59", "60-74", "75+")),
    "tumor_size_mm": ("size_group", (0, 10, 20, 40, math.inf),
                      ("<10 mm", "10-19 mm", "20-39 mm", ">=40 mm")),
}
#: axes listed first, in this order (DESIGN.md's subgroups)
AXIS_ORDER = ("phase", "age_group", "sex", "race", "size_group", "site", "scanner",
              "tumor_location")
#: columns of the cases contract that are never subgroup axes
NOT_AXES = ("case_id", "model", "label", "score", "pred", "split", "patient_id")
#: a text column with more levels than this is not proposed as an axis
MAX_LEVELS = 20
#: a numeric column with at most this many values is proposed as a categorical axis
MAX_NUMERIC_LEVELS = 6
N_BOOT = 2000
SEED = 20260101
#: sites needed before a random site intercept (GLMM) and GEE are proposed
MIN_SITES_GLMM = 5
#: fewer sites than this: the site-fixed model is proposed beside the GLMM and GEE (the
#: primary fit there: analysis.adjusted.primary_fit; the same number as its FEW_GROUPS)
FEW_GROUPS = 20

MSG_PLAN_SUFFIX = "--out {out}: a plan is a YAML file; give a path ending in .yaml or .yml"


@dataclass
class Proposal:
    """What ``plan init`` proposes for a table (and why each column is or is not used)."""

    n_rows: int
    n_cases: int
    models: list[str]
    sites: list[str]
    implicit_site: bool
    threshold: dict
    threshold_note: str
    axes: list = field(default_factory=list)
    bins: dict = field(default_factory=dict)
    unused: dict[str, str] = field(default_factory=dict)
    identifiers: list[str] = field(default_factory=list)
    strata: str | None = None
    adjusted: dict | None = None
    failure_map: tuple[str, str] | None = None
    #: axes left out of the adjusted model: their names cannot be written in a formula
    not_in_formula: list[str] = field(default_factory=list)


def _threshold(cases, threshold: float | None) -> tuple[dict, str]:
    """The threshold rule: given, else the table's pred, else a validation split (Youden),
    else a conventional value by the score's scale (never chosen from the outcomes)."""
    if threshold is not None:
        return {"value": threshold}, "given with --threshold"
    if "pred" in cases.columns:
        return {"given": True}, "the table has a pred column: its calls are used as they are"
    if "split" in cases.columns and (cases["split"] == "validation").any() \
            and (cases["split"] == "test").any():
        return ({"criterion": "youden"},
                "the table has validation and test splits: the threshold is chosen on "
                "validation (Youden) and frozen for test")
    if cases["score"].max() <= 1:
        return {"value": 0.5}, ("conventional value for probabilities (scores lie in [0, 1]); "
                                "replace it by your prespecified threshold")
    return {"value": 1}, ("conventional value for voxel counts: any predicted tumour voxel "
                          "is a positive call; replace it by your prespecified threshold")


def propose(cases, *, threshold: float | None = None) -> Proposal:
    """Sort the columns of a validated cases table into axes, bins and unused columns."""
    from analysis.inputs import identifier_columns

    per_case = cases.drop_duplicates("case_id")
    thr, note = _threshold(cases, threshold)
    p = Proposal(n_rows=len(cases), n_cases=len(per_case),
                 models=[str(m) for m in cases["model"].unique()],
                 sites=sorted(map(str, per_case["site"].unique())),
                 implicit_site=bool(cases.attrs.get("implicit_site")), threshold=thr,
                 threshold_note=note)
    p.identifiers = identifier_columns(cases.columns)
    axes = []
    for col in cases.columns:
        if col in NOT_AXES or col in p.identifiers:
            continue
        values = per_case[col].dropna()
        n_levels = values.nunique()
        numeric = values.dtype.kind in "fiu" and values.dtype.kind != "b"
        if col in BIN_PRESETS and numeric:
            name, breaks, labels = BIN_PRESETS[col]
            if name in cases.columns:
                p.unused[col] = f"the table already has {name}, used instead"
                continue
            p.bins[col] = {"name": name, "breaks": list(breaks), "labels": list(labels)}
            axes.append(name)
        elif col == "site" and n_levels < 2:
            p.unused[col] = "one site (implicit)" if p.implicit_site else "one site"
        elif n_levels < 2:
            p.unused[col] = "a single level"
        elif numeric and n_levels > MAX_NUMERIC_LEVELS:
            p.unused[col] = (f"numeric with {n_levels} values: add a bin under "
                             "detection.bins to use it as an axis")
        elif n_levels > min(MAX_LEVELS, max(2, p.n_cases // 5)):
            p.unused[col] = f"{n_levels} levels: too many for a subgroup axis"
        else:
            axes.append(col)
    known = [a for a in AXIS_ORDER if a in axes]
    p.axes = known + [a for a in axes if a not in known]
    if "age_group" in p.axes and "phase" in p.axes:
        p.axes.append(["age_group", "phase"])
        p.failure_map = ("age_group", "phase")
    if len(p.sites) > 1:
        one_site = per_case.groupby("patient_id")["site"].nunique().max() <= 1
        p.strata = "site" if one_site else None
        terms = [a for a in p.axes if isinstance(a, str) and a != "site"]
        p.not_in_formula = [t for t in terms if _formula_term(t) is None]
        terms = [t for t in terms if t not in p.not_in_formula]
        if terms:
            blocks = {"protocol": [t for t in terms if t in ("phase", "scanner")],
                      "demographics": [t for t in terms if t in ("age_group", "sex", "race")],
                      "tumour": [t for t in terms if t in ("size_group", "tumor_location")]}
            p.adjusted = {"formula": _formula(terms),
                          "methods": (["glmm", "gee"] + (["fixed"] if len(p.sites) < FEW_GROUPS
                                                         else []))
                          if len(p.sites) >= MIN_SITES_GLMM else ["fixed"],
                          "group": "site", "blocks": {k: v for k, v in blocks.items() if v}}
    return p


def _formula_term(column: str) -> str | None:
    """``column`` as a term of clinrel's formula grammar (``Q("odd name")`` when it is not
    a plain name), or None when no term names exactly this column (a name with both
    quotes, a backslash or a control character cannot be quoted): data never becomes
    formula syntax."""
    from stats.formula import Column, parse_formula
    from stats.schema import ContractError

    try:
        code = Column(column).code
        parsed = parse_formula("detected ~ " + code)
    except ContractError:
        return None
    return code if parsed.rhs_columns() == [column] else None


def _formula(terms: list[str]) -> str:
    """The adjusted model's formula of ``terms`` (each one :func:`_formula_term` can
    write), checked by parsing it back: it names exactly these columns."""
    from stats.formula import parse_formula

    text = "detected ~ " + " + ".join(_formula_term(t) for t in terms)
    if parse_formula(text).rhs_columns() != list(terms):
        raise RuntimeError("internal error: plan init wrote a formula that does not name "
                           "its columns; please report this")
    return text


#: texts written without quotes (YAML reads them back as the same text)
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_YAML_WORDS = ("true", "false", "yes", "no", "on", "off", "null", "y", "n")
#: the top-level keys :func:`render_plan` writes, in order
PLAN_KEYS = ("version", "title", "seed", "inputs", "detection", "privacy", "prespecified",
             "exploratory")
#: short escapes of :func:`_c` (the rest are \\xNN, \\uNNNN, \\UNNNNNNNN)
_COMMENT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _c(text) -> str:
    """Data text for a ``#`` comment (or a terminal line): one line, nothing invisible.

    Line breaks (``\\n``, ``\\r``, NEL, U+2028, U+2029), other control, format (bidi,
    zero-width), separator and unassigned characters are written as visible escapes as
    Python's ``repr`` does (``\\n``, ``\\x85``, ``\\u2028``), so no text from the table
    or the file system can end a comment and start live YAML. A backslash is kept as it
    is (Windows paths stay readable); it cannot end a comment.
    """
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch in _COMMENT_ESCAPES:
            out.append(_COMMENT_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def _y(value) -> str:
    """A YAML scalar or flow list, on one line, that YAML reads back as ``value``.

    Numbers are written by hand (integer-valued floats as integers, infinities as .inf);
    a text is plain only when it is an identifier YAML reads back unchanged, else it is
    a double-quoted scalar written by the YAML serializer (every line break, control and
    non-printing character escaped), so a text from the data can never become structure.
    """
    import yaml

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_y(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    if isinstance(value, (int, float)):
        if float(value).is_integer():
            return str(int(value))
        # the serializer's form: YAML 1.1 reads repr's "1e-05" back as a text
        return yaml.safe_dump(float(value)).splitlines()[0]
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS \
            and yaml.safe_load(text) == text:
        return text
    out = yaml.safe_dump(text, default_style='"', allow_unicode=True, width=math.inf)
    out = out.rstrip("\n")
    if out.endswith("\n...") or "\n" in out or yaml.safe_load(out) != text:
        raise RuntimeError(f"internal error: plan init could not quote {_c(text)!s} as a "
                           "one-line YAML scalar")
    return out


def _k(key) -> str:
    """A block-mapping key (a short one-line scalar, see :func:`_y`)."""
    out = _y(str(key))
    if len(out) > 1000:  # YAML's implicit keys are at most 1024 characters
        raise RuntimeError(f"internal error: plan init key too long: {_c(key)[:80]}...")
    return out


def _check_rendered(text: str, *, expected: dict) -> None:
    """Parse the plan :func:`render_plan` wrote and check it is what was meant.

    No anchor, alias or explicit tag; no mapping key twice (the loader would let the
    last one win silently); the top-level keys are :data:`PLAN_KEYS`; and each value
    written from the data (``expected``: dotted key -> value) reads back as itself.
    A difference is a bug here, so it is an internal error, not a message about input.
    """
    import yaml

    def bad(why: str):
        raise RuntimeError(f"internal error: plan init wrote a plan that does not read back "
                           f"as meant ({why}); please report this")

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) \
                    or getattr(event, "tag", None):
                bad("an anchor, alias or tag")
        stack = [yaml.compose(text, Loader=yaml.SafeLoader)]
        while stack:
            node = stack.pop()
            if isinstance(node, yaml.MappingNode):
                keys = [k.value for k, _ in node.value]
                if len(keys) != len(set(keys)):
                    bad("a repeated key")
                stack += [n for pair in node.value for n in pair]
            elif isinstance(node, yaml.SequenceNode):
                stack += node.value
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        bad(f"not YAML: {_c(exc)}")
    if not isinstance(data, dict) or tuple(data) != PLAN_KEYS:
        bad("top-level keys " + _c(list(data) if isinstance(data, dict) else type(data)))
    for dotted, value in expected.items():
        got = data
        for part in dotted.split("."):
            got = got.get(part) if isinstance(got, dict) else None
        if got != value:
            bad(f"key {dotted}")


def _doc(key: str) -> str:
    """The first clause of a key's meaning, from the plan schema (one declaration)."""
    text = describe(key).replace("`", "")
    first = text.split(". ")[0].split("; ")[0].rstrip(".")
    word = first.split(" ")[0]
    if word[1:].islower():   # "Interval ..." -> "interval ...", "DeLong ..." stays
        first = first[0].lower() + first[1:]
    return _c(f"prespecified: {first}")


def render_plan(p: Proposal, *, cases_path: str, source: str) -> str:
    """The commented plan.yaml of a :class:`Proposal`."""
    # Data text (paths, model and column names) goes into comments through _c (one line,
    # every break and invisible character escaped) and into values and keys through _y/_k
    # (YAML scalars from the serializer); never interpolated as it is.
    today = _dt.date.today().isoformat()
    L = [f"# Analysis plan written by `clinrel plan init` on {today} for {_c(source)}",
         f"# ({p.n_rows} rows: {p.n_cases} cases x {len(p.models)} model(s): "
         f"{', '.join(_c(m) for m in p.models)}; {len(p.sites)} site(s)).",
         "#",
         "# Every choice below is a PROPOSAL made from the column names, types and level",
         "# counts only (no outcome was looked at). Edit it BEFORE you look at any result;",
         "# then it is your prespecified analysis (STARD 2015 items 12a and 17), recorded",
         "# by its SHA-256 in the report's manifest. Keys: docs/plan.md.",
         "# Render: clinrel report --plan THIS_FILE --out report",
         "version: 1",
         f"title: {_y('Reliability appendix: ' + Path(source).stem)}",
         f"seed: {SEED}                  # {_doc('seed')}",
         "inputs:",
         f"  cases: {_y(cases_path)}       # relative to this file's folder",
         "detection:"]
    if p.implicit_site:
        L.insert(5, "# The table has no site column: a single-site study (one implicit site, "
                    "'single_site').")
    L += ["  threshold:                      # prespecified: " + _c(p.threshold_note)]
    L += [f"    {_k(k)}: {_y(v)}" for k, v in p.threshold.items()]
    d = Detection()   # the schema's defaults, stated in the plan so they are prespecified
    L += [f"  ci: {d.ci:<28}# {_doc('detection.ci')}",
          f"  auc_scale: {d.auc_scale:<21}# {_doc('detection.auc_scale')}",
          f"  conf_level: {d.conf_level:<20}# {_doc('detection.conf_level')}",
          f"  small_n: {d.small_n:<23}# {_doc('detection.small_n')}"]
    if p.axes:
        L += ["  subgroups:                      # prespecified axes (categorical columns)"]
        L += [f"    - {_y(a)}" for a in p.axes]
    else:
        L += ["  subgroups: []                   # no categorical column found: overall only"]
    if p.bins:
        L += ["  bins:                           # prespecified cut points (left-closed)"]
        for col, b in p.bins.items():
            L += [f"    {_k(col)}:", f"      name: {_y(b['name'])}",
                  f"      breaks: {_y(b['breaks'])}", f"      labels: {_y(b['labels'])}"]
    L += [f"  bootstrap:                      # {_doc('detection.bootstrap')}",
          f"    n_boot: {N_BOOT}"]
    if p.strata:
        L += [f"    strata: {_y(p.strata):<22}# resample patients within sites"]
    L += [f"    boot_ci: {d.bootstrap.boot_ci}"]
    if p.adjusted:
        a = p.adjusted
        L += ["  adjusted:                       # prespecified confounding-adjusted model of "
              "sensitivity",
              f"    formula: {_y(a['formula'])}",
              f"    methods: {_y(a['methods'])}"
              + (f"   # fewer than {MIN_SITES_GLMM} sites: site as a fixed effect"
                 if "glmm" not in a["methods"] else
                 f"   # fewer than {FEW_GROUPS} sites: the site-fixed fit (patient-clustered "
                 f"SEs) is read for inference" if "fixed" in a["methods"] else ""),
              f"    group: {_y(a['group'])}"]
        if a["blocks"]:
            L += ["    blocks:                       # each block gets a likelihood-ratio test"]
            L += [f"      {_k(k)}: {_y(v)}" for k, v in a["blocks"].items()]
    else:
        why = "a single site" if len(p.sites) < 2 else "no covariate axis"
        L += [f"  # adjusted: left out ({_c(why)}); see docs/plan.md to add one"]
    for col in p.not_in_formula:
        L += [f"  # axis {_c(col)} is left out of the adjusted model: its name cannot be "
              "written in a formula (rename the column to use it there)"]
    if p.failure_map:
        L += ["  failure_map:                    # sensitivity over age group x phase",
              f"    rows: {_y(p.failure_map[0])}", f"    cols: {_y(p.failure_map[1])}"]
    L += ["privacy:",
          "  allow_identifiers: false        # columns that look like identifiers are refused"]
    for col, why in p.unused.items():
        L.append(f"# column not used: {_c(col)} ({_c(why)})")
    for col in p.identifiers:
        L.append(f"# column {_c(col)} looks like a direct identifier: drop it from the table "
                 "before the report (or set privacy.allow_identifiers: true)")
    axes = ", ".join(":".join(a) if isinstance(a, list) else a for a in p.axes) or "none"
    summary = (f"Threshold: {', '.join(f'{k} {_y(v)}' for k, v in p.threshold.items())}; Wilson "
               f"intervals, DeLong AUC; subgroup axes: {axes}; bootstrap {N_BOOT} replicates, "
               f"seed {SEED}" + (f"; adjusted model {p.adjusted['formula']}"
                                 if p.adjusted else "") + ".")
    L += ["prespecified:", f"  - {_y(summary)}",
          "exploratory:", f"  - {_y('Threshold sweep, and any subgroup not listed above.')}",
          ""]
    text = "\n".join(L)
    expected = {"title": "Reliability appendix: " + Path(source).stem,
                "inputs": {"cases": cases_path},
                "detection.subgroups": [list(a) if isinstance(a, (list, tuple)) else a
                                        for a in p.axes] if p.axes else [],
                "prespecified": [summary]}
    if p.adjusted:
        expected["detection.adjusted.formula"] = p.adjusted["formula"]
    _check_rendered(text, expected=expected)
    return text


def register(app: typer.Typer) -> None:
    plan_app = typer.Typer(help="Write an analysis plan for your own table.",
                           no_args_is_help=True)

    @plan_app.command("init")
    @guarded
    def init(
        cases: Annotated[Path, typer.Argument(metavar="CASES", help="Your cases table (.csv, .tsv or "
                                                   ".parquet).")],
        out: Annotated[Path, typer.Option(help="The plan file to write (.yaml).")] = Path(
            "plan.yaml"),
        threshold: Annotated[Optional[float], typer.Option(
            help="Your prespecified threshold (pred = score >= THRESHOLD); without it the "
                 "table's pred column, a validation split (Youden) or a conventional value "
                 "is proposed.")] = None,
        force: ForceOpt = False,
        quiet: Annotated[bool, typer.Option("--quiet", help="No summary output.")] = False,
    ) -> None:
        """Write a commented plan.yaml for CASES: columns detected, axes and bins proposed,
        every choice marked prespecified. Edit it, then run clinrel report --plan."""
        import stats
        from reports.outputs import atomic_file, check_out_file

        if out.suffix.lower() not in (".yaml", ".yml"):
            raise InputError(MSG_PLAN_SUFFIX.format(out=out))
        table = stats.read_cases(cases)
        check_out_file(out, force=force, inputs=[cases], suffixes=(".yaml", ".yml"))
        p = propose(table, threshold=threshold)
        rel = os.path.relpath(Path(cases).absolute(), Path(out).absolute().parent)
        text = render_plan(p, cases_path=Path(rel).as_posix(), source=str(cases))
        with atomic_file(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
        if not quiet:  # column names and paths shown on one line, nothing invisible (_c)
            axes = ", ".join(":".join(a) if isinstance(a, list) else a for a in p.axes)
            typer.echo(f"plan written to {_c(out)}: axes {_c(axes) or 'none'}; "
                       f"bins {_c(', '.join(b['name'] for b in p.bins.values())) or 'none'}; "
                       f"threshold {_c(p.threshold_note)}")
            if p.implicit_site:
                typer.echo("  no site column: a single-site study (one implicit site)")
            for col in p.identifiers:
                typer.echo(f"  warning: column {_c(col)} looks like an identifier; drop it "
                           "before the report", err=True)
            typer.echo(f"  edit it before looking at results, then: clinrel report --plan "
                       f"{_c(out)} --out report")

    app.add_typer(plan_app, name="plan")
