"""The analysis plan (``plan.yaml``): one declarative schema, validated before any work.

Every key is declared once, below, as a field of a frozen pydantic model (``extra =
"forbid"``: an unknown key is refused, with "did you mean"): its type, default,
constraint (ranges; the ``Literal`` method names of the ``stats`` signatures), its
meaning, an example, the command-line option that sets it (``cli``) and the fix a refusal
suggests (``hint``). From these declarations come

* validation, and its messages (file, key, value, fix): :func:`load_plan`;
* ``docs/plan.md`` (``docs/make_plan_reference.py``, :func:`keys`);
* the comments of ``clinrel plan init`` (:func:`describe`);
* the commands' options and their help (``clinrel.cli._common.plan_option``), and a
  command's refusals, which name the option instead of the key (the same declaration).

So a new plan key is one field here plus the analysis that reads it
(``tests/analysis/test_plan.py`` adds one and finds it everywhere).

A plan names the input tables and, for each half of the report (``detection`` and
``crs``), the prespecified choices. Either half may be left out. Relative paths are read
from the plan file's folder. ``Plan.sha256`` is the hash of the plan file's bytes.

**Seeds.** A run has one root seed: the plan's ``seed``, or, without one, a seed derived
from the plan file's SHA-256 when it is loaded (:func:`derived_seed`; recorded in the
manifest as ``seeds.root``): the same plan file always gives the same numbers. Every analysis that draws random
numbers gets its own stream, derived from the root and the stream's name
(:meth:`Plan.seed_for`: ``numpy.random.SeedSequence(root, spawn_key=crc32(name))``); a
block's own seed (``detection.bootstrap.seed``, ``crs.bootstrap.seed``,
``calibration.bootstrap.seed``, ``metadata.seed``) overrides its streams. Nothing borrows
another analysis's seed.

The file is read by ``stats.limits.read_yaml`` (UTF-8, at most 1 MiB, aliases, merge keys
and repeated keys refused). Counts that size an allocation are checked against the caps
of :mod:`stats.limits` when the plan is read (``_planned_work``); list lengths against
the ``cap`` of their declaration.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

import numpy as np
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      ValidationInfo, field_validator, model_validator)
from pydantic_core import PydanticCustomError

from stats.adjust import MeansKind
from stats.bootstrap import CI_METHODS as BOOT_INTERVALS
from stats.compare import BOOT_COMPARE, COMPARE_METRICS
from stats.detection import PROPORTIONS, Criterion
from stats.intervals import AUC_SCALES, PROPORTION_METHODS
from stats.models import Method, Population
from stats.schema import ContractError

#: proportion intervals; "bootstrap" puts every count metric on the cluster bootstrap
CI_METHODS = (*PROPORTION_METHODS, "bootstrap")
CRITERIA = get_args(Criterion)
ADJUST_METHODS = get_args(Method)
POPULATIONS = get_args(Population)
MEANS_KINDS = get_args(MeansKind)
BLOCKS = ("site", "protocol", "demographics", "tumour")
ROLE_VALUES = ("prespecified", "exploratory")
#: the proportions a site meta-analysis pools
META_ESTIMANDS = PROPORTIONS

MSG_KEY = "{file}: unknown key '{key}'{where}; allowed keys: {allowed}; {hint}"
MSG_TYPE = "{file}: {key} must be {expected}, got {got!r}; {hint}"
MSG_MISSING = "{file}: required {key} is missing; {hint}"
MSG_FROM_STATS = "{file}: {key}: {message}"
MSG_BIN_NAME = ("{file}: {key} is {name!r}, a column clinrel reads or writes itself; a bin "
                "adds a new column, so give it a new name, e.g. {suggest!r}")
MSG_BIN_NAME_TWICE = ("{file}: {key} and '{other}' both create the column {name!r}; give "
                      "each bin its own name")
MSG_BIN_LABELS_DUP = ("{file}: {key} repeats the label(s) {labels}; each interval needs its "
                      "own label")
MSG_AXIS_TWICE = ("{file}: {key} is the intersection {axis!r}, which names column "
                  "{column!r} twice; an intersection crosses different columns, e.g. "
                  "[age_group, phase]")
MSG_AXIS_REPEATED = ("{file}: {key} lists the axis {axis!r} twice; list each axis once")
MSG_NOT_AXIS = ("{file}: {key} names {column!r} as a subgroup axis, but it is {why}; "
                "name a column that groups cases (site, phase, sex, a bin, ...)")
MSG_LIST_CAP = ("{file}: {key} lists {n:,} {what}, above the cap of {cap:,}; a study has far "
                "fewer: shorten the list (docs/plan.md#caps)")
MSG_UNITS_VARIABLE = ("{file}: key 'detection.adjusted.units.{variable}' names {variable!r}, "
                      "which is not a continuous term of detection.adjusted.formula ({formula}); "
                      "units apply to a numeric column, or a log of one, entering as a main "
                      "effect (candidates in this formula: {known}); fix the name or remove it")
UNITS_EXPECTED = ("a positive number (odds ratios per that many units; for a log term, per "
                  "that-fold change) or sd (per one SD)")
#: columns that are not subgroups of cases, and why (refused as axes, with the fix)
NOT_AXES = {
    "score": "the model's score (every distinct score would be a subgroup); to study ranges "
             "of it, bin it (detection.bins.score, or --bin score=0,50,100) and name the bin",
    "label": "the reference standard: sensitivity and specificity are already computed "
             "within label 1 and label 0",
    "pred": "the model's call, which the metrics compare with the label",
    "case_id": "an identifier (every case would be its own subgroup)",
    "patient_id": "an identifier (every patient would be its own subgroup)",
    "model": "the model: every metric is already computed per model",
    "threshold": "a column clinrel adds (the threshold applied)",
    "threshold_source": "a column clinrel adds (where the threshold came from)",
    "detected": "a column clinrel adds (the call at the threshold)",
    "correct": "a column clinrel adds (whether the call is right)",
}
#: columns a bin must not be named after: the cases contract and the columns clinrel adds
RESERVED_COLUMNS = ("case_id", "model", "label", "score", "site", "patient_id", "pred", "split",
                    "threshold", "threshold_source", "detected", "correct")
#: the unit keyword of ``detection.adjusted.units``, and the log functions with their base
SD = "sd"
LOG_BASES = {"np.log": math.e, "log": math.e, "np.log2": 2.0, "log2": 2.0, "np.log10": 10.0,
             "log10": 10.0}


class PlanError(ContractError):
    """The plan file is unreadable or breaks the plan schema; the message says how to fix it."""


# --------------------------------------------------------------------------- declaring keys

def key(default: Any = ..., doc: str = "", *, type: str, example: str = "",
        cli: str | None = None, hint: str = "fix the value", default_text: str | None = None,
        cap: tuple[int, str] | None = None, **constraints) -> Any:
    """One plan key: a pydantic ``Field`` carrying what the docs, the template, the CLI and
    the messages need (``type``: the type in words; ``cli``: the option that sets it;
    ``hint``: the fix a refusal suggests; ``cap``: (most items, what they are) of a list)."""
    extra = {"type_text": type, "example": example, "cli": cli, "hint": hint,
             "default_text": default_text, "cap": cap}
    if cap is not None and "max_length" not in constraints:
        constraints["max_length"] = cap[0]     # checked before the items are validated
    return Field(default, description=doc, json_schema_extra=extra, **constraints)


def _as_tuple(value):
    return tuple(value) if isinstance(value, list) else value


def _axis(value):
    """A subgroup axis as written: a column name, or a list of 2+ names."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and len(value) >= 2 and all(isinstance(x, str) for x in value):
        return tuple(value)
    return value


Seq = Annotated[tuple[str, ...], BeforeValidator(_as_tuple)]
Axis = Annotated[tuple[str, ...], BeforeValidator(_axis)]
Axes = Annotated[tuple[Axis, ...], BeforeValidator(_as_tuple)]
def _seed_rule(value):
    """The one seed rule (``stats._rng.check_seed``: a whole number 0 .. 2**63 - 1)."""
    from stats._rng import check_seed

    try:
        return check_seed(value, key="{at}")
    except ContractError as exc:
        raise _fail(None, "{file}: " + str(exc)) from None


Seed = Annotated[int, BeforeValidator(_seed_rule)]
Level = Annotated[float, Field(gt=0, lt=1)]

_SEED_TYPE = "a whole number 0 .. 2**63-1"
_SEED_DEFAULT = "none (a stream of the root seed)"
_AXES_TYPE = "a list of column names or [a, b] pairs"


def _fail(info: ValidationInfo, template: str, **fields) -> PydanticCustomError:
    """A refusal whose text is written here: ``fields`` are filled in now (``{name}`` or
    ``{name:spec}``); ``{file}``, ``{at...}`` and ``{root...}`` later, by :func:`_fill`,
    once the key path and the reader (plan file or command line) are known."""
    import re

    def sub(m):
        name, conv, spec = m.group(1), m.group(2), m.group(3) or ""
        if name not in fields:
            return m.group(0)
        value = repr(fields[name]) if conv == "!r" else fields[name]
        return format(value, spec)

    text = re.sub(r"\{(\w+)(![rs])?(?::([^{}]*))?\}", sub, template)
    return PydanticCustomError("plan", text, {})   # no context: pydantic substitutes nothing


class Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


# --------------------------------------------------------------------------- detection

class Threshold(Block):
    """How scans become positive calls. Give exactly one of `value`, `criterion` or
    `given`."""

    value: float | None = key(None, "Prespecified threshold: `pred = score >= value` "
                              "(STARD 12a).", type="a finite number", example="50",
                              cli="--threshold", default_text="none",
                              hint="write the prespecified threshold, e.g. value: 50")
    criterion: Literal[CRITERIA] | None = key(
        None, "Choose the threshold on `split == validation`, then analyse `split == test`.",
        type="text", example="youden", cli="--criterion",
        default_text="`youden` (when no `value`)", hint="use one of the listed names")
    target: Level | None = key(None, "The specificity the chosen threshold must reach.",
                               type="a number in (0, 1)", example="0.9",
                               cli="--target-specificity",
                               default_text="required with `target_specificity`",
                               hint="write a proportion, e.g. 0.9")
    given: bool = key(False, "Use the table's own `pred` column; no threshold.",
                      type="true (use the table's pred column) or false", example="true")

    @model_validator(mode="after")
    def _one_rule(self):
        if not (self.value is None or math.isfinite(self.value)):
            raise _fail(None, "{file}: {at.value} must be a finite number, got "
                        "{got}; write the prespecified threshold, e.g. value: 50",
                        got=repr(self.value))
        if self.given and (self.value is not None or self.criterion or self.target):
            raise _fail(None, "{file}: {at.given} uses the table's own pred column, so "
                        "'value', 'criterion' and 'target' do not apply; remove them or "
                        "'given'")
        if self.value is not None and self.criterion is not None:
            raise _fail(None, "{file}: {at} gives both 'value' and 'criterion'; keep "
                        "'value' for a prespecified threshold or 'criterion' to choose one "
                        "on the validation split")
        if self.value is None and not self.given:
            crit = self.criterion or "youden"
            if crit == "target_specificity" and self.target is None:
                raise _fail(None, "{file}: required {at.target} is missing; give the "
                            "target specificity, e.g. target: 0.9")
            if crit != self.criterion:
                object.__setattr__(self, "criterion", crit)
        return self


class Bin(Block):
    """One bin of a numeric column: `pd.cut(column, breaks, labels, right=False)`."""

    name: str | None = key(None, "Name of the new column; not a column clinrel reads or "
                           "writes (" + ", ".join(RESERVED_COLUMNS) + ").", type="a column name",
                           example="age_group", default_text="`<column>_group`")
    breaks: Annotated[tuple[float, ...], BeforeValidator(_as_tuple)] = key(
        ..., "Cut points.", type="a list of 2+ strictly increasing numbers (.inf allowed)",
        example="[0, 40, 60, 75, .inf]", default_text="required",
        hint="give the cut points, e.g. [0, 40, 60, 75]", cap=(1_000, "cut points of one bin"))
    labels: Annotated[tuple[str, ...], BeforeValidator(
        lambda v: tuple(str(x) if isinstance(x, (int, float)) and not isinstance(x, bool)
                        else x for x in v) if isinstance(v, list) else v)] | None = key(
        None, "Level names, all different.", type="a list of texts, one per interval",
        example='["<40", "40-59", "60-74", "75+"]', default_text="`a-b` per interval")
    #: the column binned (the mapping's key; filled in by Detection)
    column: str = Field("", exclude=True, json_schema_extra={"internal": True})

    @field_validator("breaks")
    @classmethod
    def _increasing(cls, b):
        if any(math.isnan(x) for x in b):
            raise _fail(None, "{file}: {at} must be a list of numbers, got {got}; write "
                        "numbers (no .nan); use .inf for no upper bound", got=list(b))
        if len(b) < 2 or any(x >= y for x, y in zip(b, b[1:])):
            raise _fail(None, "{file}: {at} must be at least two strictly increasing "
                        "numbers, got {got}; sort them and drop repeats", got=list(b))
        return b

    @model_validator(mode="after")
    def _labels(self):
        b = self.breaks
        labels = self.labels or tuple(f"{_num(x)}-{_num(y)}" for x, y in zip(b, b[1:]))
        if len(labels) != len(b) - 1:
            raise _fail(None, "{file}: {at.labels} has {n} labels for {m} intervals; give "
                        "one label per interval", n=len(labels), m=len(b) - 1)
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise _fail(None, MSG_BIN_LABELS_DUP.replace("{key}", "{at.labels}"),
                        labels=", ".join(map(repr, dup)))
        object.__setattr__(self, "labels", labels)
        return self


class Bootstrap(Block):
    """The paired cluster bootstrap (F1 intervals, or every metric with `ci: bootstrap`)."""

    n_boot: int = key(0, "Replicates.", type="a whole number >= 2 (bootstrap replicates)",
                      example="2000", cli="--n-boot", default_text="`0` (no bootstrap)",
                      hint="write e.g. n_boot: 2000, or leave the bootstrap block out for no "
                           "bootstrap")
    seed: Seed | None = key(None, "Seed of the replicates (overrides the root seed's "
                            "stream `detection_bootstrap`).", type=_SEED_TYPE,
                            example="20261130", cli="--seed", default_text=_SEED_DEFAULT,
                            hint="write an integer seed, e.g. 20261130")
    strata: str | None = key(None, "Resample patients within the levels of this column.",
                             type="a column name, e.g. site", example="site")
    boot_ci: Literal[BOOT_INTERVALS] = key(
        "percentile", "Bootstrap interval (`wilson`: Wilson at the bootstrap's effective "
        "sample size, small cells).", type="text", example="percentile", cli="--boot-ci",
        hint="use one of the listed names")

    @field_validator("n_boot")
    @classmethod
    def _replicates(cls, n):   # runs on a value the plan gives (the default 0: none)
        if n < 2:
            raise _fail(None, "{file}: {at} must be a whole number >= 2 (bootstrap "
                        "replicates); got {got}; write e.g. n_boot: 2000, or leave the "
                        "bootstrap block out for no bootstrap", got=n)
        return n


class Adjusted(Block):
    """Confounding-adjusted models of detection."""

    formula: str = key(..., "The model; `detected` among positives, `correct` among "
                       "negatives.", type="a formula 'outcome ~ terms' (clinrel's grammar: "
                       "columns, `C()`, `np.log()`, `:`, `*`)",
                       example='"detected ~ phase + age_group + np.log(tumor_size_mm)"',
                       cli="--formula", default_text="required",
                       hint="write e.g. detected ~ phase + age_group")
    methods: Annotated[tuple[Literal[ADJUST_METHODS], ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v))] = key(
        ("glmm",), "`glmm`: random site intercept (Laplace / AGQ, as lme4); `gee`: "
        "exchangeable, robust SE (as geepack); `fixed`: site fixed effect, cluster-robust SE.",
        type="a list of texts", example="[glmm, gee]", default_text="`[glmm]`",
        hint="use one of the listed names")
    group: Annotated[Union[str, Annotated[tuple[str, ...], Field(min_length=1, max_length=2)]],
                     BeforeValidator(_as_tuple)] = key(
        "site", "The grouping column (random intercept, GEE cluster, fixed effect). A column "
        "name: the GLMM's random intercept is per group, and nested, `(1 | site/patient_id)`, "
        "when the patients (the decided cluster) repeat among the modelled scans and each "
        "patient's scans lie in one group (the default rule: a patient's repeated scans are "
        "correlated, and the patient level carries it). A list `[site, patient_id]`: nested "
        "intercepts whatever the design; `[site]`: one level whatever the design. GEE and the "
        "fixed-effect model use the first column.", type="a column name, or a list [outer, "
        "inner] of two", example="[site, patient_id]", cli="--group",
        hint="write a column name such as site, or [site, patient_id]")
    interactions: Annotated[tuple[str, ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v)), Field(max_length=20)] = key(
        (), "Interaction terms `a:b` tested by a likelihood-ratio test (the model with the "
        "term against the model without it, same rows, ML). A term with `model` (e.g. "
        "`phase:model`) fits every model's scans of the population together, with `model` "
        "and the term added and the patients as a random effect nested in the group; "
        "another (e.g. `phase:age_group`) is added to each model's GLMM. With the role "
        "`roles.interactions` prespecified, the report also gives the adjusted "
        "sensitivities per cell and, for a `model` term, the models' odds ratios within "
        "each level.", type="a list of terms a:b (two factor columns)",
        example="[phase:model, phase:age_group]", default_text="`[]`",
        cap=(20, "interaction terms"), hint="write e.g. [phase:model]")
    contrasts: Annotated[tuple[str, ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v))] = key(
        (), "Factors whose adjusted levels are compared pairwise (odds ratios, emmeans "
        "`pairs`, Holm within each model and factor), from the fit of the adjusted means.",
        type="a list of factors of the formula", example="[phase]", default_text="`[]`")
    blocks: dict[Literal[BLOCKS], Annotated[tuple[str, ...], BeforeValidator(_as_tuple),
                                            Field(max_length=100)]] = key(
        {}, "Covariate blocks, each tested by a likelihood-ratio test.",
        type="a mapping block -> list of terms", example="{protocol: [phase]}",
        default_text="`{}`", cap=(100, "terms of one block of the adjusted model"),
        max_length=len(BLOCKS))
    population: Literal[POPULATIONS] = key(
        "positives", "`positives`: sensitivity (detected among label 1); `negatives`: "
        "specificity (correct among label 0).", type="text", example="positives",
        hint="use one of the listed names")
    nagq: int = key(1, "Adaptive Gauss-Hermite points of the GLMM.",
                    type="a whole number >= 1 (quadrature points, 1 = Laplace)", example="1",
                    cli="--nagq", default_text="`1` (Laplace)", hint="write e.g. nagq: 1",
                    ge=1)

    @field_validator("nagq")
    @classmethod
    def _nagq_cap(cls, n):
        if n > 25:
            raise _fail(None, "{file}: {at} is {n:,}, above the cap of 25 adaptive "
                        "Gauss-Hermite quadrature points (lme4's own limit for nAGQ); lower it",
                        n=n)
        return n
    levels: dict[str, Seq] = key({}, "Factor levels, reference level first.",
                                 type="a mapping column -> [reference level, other levels...]",
                                 example="{phase: [venous, arterial, delayed, non_contrast]}",
                                 cli="--levels", default_text="`{}`")
    model: str | None = key(None, "Fit one model's rows only, or all models in one fit with "
                            "`model` as a term.", type="a model name, or 'pooled'",
                            example="pooled", cli="--model",
                            default_text="none (one fit per model)")
    bias_reduced: bool | None = key(None, "GEE small-sample correction.",
                                    type="true, false, or leave it out (Mancl-DeRouen below 20 "
                                         "groups)", example="true",
                                    default_text="none (Mancl-DeRouen below 20 groups)")
    means: Annotated[tuple[str, ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v))] = key(
        (), "Factors whose adjusted sensitivities are reported.", type="a list of factors",
        example="[phase]", cli="--means", default_text="`[]`")
    means_kind: Literal[MEANS_KINDS] = key(
        "standardized", "Adjusted sensitivities (and the adjusted-vs-crude figure): "
        "`standardized`, g-computation over the observed cohort (like with like against the "
        "crude values); `emmeans`, equal-weight reference grid (as R's emmeans).",
        type="text", example="standardized", cli="--means-kind",
        hint="use one of the listed names")
    units: dict[str, Union[bool, int, float, str]] = key(
        {}, "The unit of each continuous term's odds ratio (a numeric column, or "
        "`np.log`/`log2`/`log10` of one, as a main effect); stated in the table's label and "
        "`unit` column. A number k: odds ratio per k units of the variable (a log term: per "
        "k-fold change, k != 1; 2 is per doubling). `sd`: per one standard deviation (pandas, "
        "ddof 1) of the variable as the term uses it (its log for a log term) among the "
        "model's rows in the modelled population.",
        type="a mapping variable -> " + UNITS_EXPECTED, example="{age: 10, tumor_size_mm: sd}",
        default_text="`{}` (per 1 unit; log terms per doubling)",
        hint="write e.g. units: {age: 10, tumor_size_mm: sd}")

    @field_validator("formula")
    @classmethod
    def _formula(cls, text):
        if "~" not in text:
            raise _fail(None, "{file}: {at} must be a formula 'outcome ~ terms', got "
                        "{got}; write e.g. detected ~ phase + age_group", got=repr(text))
        _parse(text)
        return text

    @field_validator("group")
    @classmethod
    def _group(cls, g):
        if isinstance(g, tuple) and len(set(g)) != len(g):
            raise _fail(None, "{file}: {at} lists {got}; the outer and inner columns must "
                        "differ; write e.g. [site, patient_id]", got=list(g))
        return g

    @field_validator("interactions")
    @classmethod
    def _interactions(cls, terms):
        for i, term in enumerate(terms):
            where = "{at." + f"interactions[{i}]" + "}"
            parsed = _parse(f"detected ~ {term}", where=where)
            names = [t.name for t in parsed.terms]
            inter = [t for t in parsed.terms if len(t.factors) == 2]
            if (len(inter) != 1 or names != [inter[0].name]
                    or any(f.kind != "column" for f in inter[0].factors)):
                raise _fail(None, "{file}: " + where + " is {got}; write one interaction "
                            "of two factor columns, a:b (e.g. phase:model)", got=repr(term))
        return terms

    @property
    def group_columns(self) -> tuple[str, ...]:
        """``group`` as a tuple of columns (one or two)."""
        return (self.group,) if isinstance(self.group, str) else tuple(self.group)

    @field_validator("blocks")
    @classmethod
    def _block_terms(cls, blocks):
        for name, terms in blocks.items():
            for i, term in enumerate(terms):
                _parse(f"detected ~ {term}", where="{at.blocks." + f"{name}[{i}]" + "}")
        return blocks

    @model_validator(mode="after")
    def _units(self):
        terms = continuous_terms(self.formula)
        bases: dict[str, list] = {}
        for col, base in terms.values():
            bases.setdefault(col, []).append(base)
        out: dict[str, float | str] = {}
        for var, v in self.units.items():
            if var not in bases:
                raise _fail(None, MSG_UNITS_VARIABLE, variable=var, formula=self.formula,
                            known=", ".join(bases) or "the formula has none")
            if isinstance(v, str) and v.strip().lower() == SD:
                out[var] = SD
                continue
            log = any(b is not None for b in bases[var])
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  and v > 0 and not (log and v == 1))
            if not ok:
                hint = ("a log term changes by a k-fold change of its variable, k != 1; write "
                        "e.g. 2 (per doubling) or 10" if log else "write e.g. 10 or sd")
                raise _fail(None, "{file}: {at.units.{var}} must be {expected}, got "
                            "{got}; {hint}", var=var, expected=UNITS_EXPECTED, got=repr(v),
                            hint=hint)
            out[var] = float(v)
        object.__setattr__(self, "units", out)
        return self


class FailureMap(Block):
    """Sensitivity over two axes (a heat map)."""

    rows: str = key(..., "Rows of the map.", type="a column name", example="age_group",
                    default_text="required", hint="name a column, e.g. age_group")
    cols: str = key(..., "Columns of the map.", type="a column name", example="phase",
                    default_text="required", hint="name a column, e.g. phase")
    pooled: bool = key(True, "Show partially pooled (GLMM) cell estimates beside the crude "
                       "ones (exploratory).", type="true or false", example="true")

    @model_validator(mode="after")
    def _two_axes(self):
        for part in ("rows", "cols"):
            _check_axis_column(getattr(self, part), "{at." + part + "}")
        if self.rows == self.cols:
            raise _fail(None, MSG_AXIS_TWICE.replace("{key}", "{at}"),
                        axis=f"{self.rows}:{self.cols}", column=self.rows)
        return self


class Precision(Block):
    """The precision section: each prespecified cell's achieved Wilson half-width and the
    scans it needs."""

    target_half_width: float = key(0.05, "Target half-width of a cell's interval.",
                                   type="a number in (0, 0.5)", example="0.05",
                                   hint="write e.g. 0.05 for +-5 percentage points",
                                   gt=0, lt=0.5)
    icc: float | None = key(None, "Intra-patient correlation of repeated scans (design "
                            "effect).", type="a number in [0, 1)", example="0.2",
                            default_text="none (from the data)",
                            hint="write e.g. 0.2, or leave it out", ge=0, lt=1)


Proportion = Annotated[float, Field(ge=0, le=1)]
Range = Annotated[tuple[Proportion, Proportion], BeforeValidator(_as_tuple)]
#: the proportions a goal may name (stats.detection.PROPORTIONS)
GOAL_METRICS = ("sensitivity", "specificity", "ppv", "npv", "accuracy")
#: the metrics of the paired comparisons (stats.compare_models) and of the subgroup gaps
COMPARE_ALL = (*COMPARE_METRICS, *BOOT_COMPARE)
GAP_METRICS = ("sensitivity", "specificity", "ppv", "npv", "accuracy", "f1")


class PartialAuc(Block):
    """The partial AUC (pROC's `auc(partial.auc=, partial.auc.focus=, partial.auc.correct=)`):
    the area over a range of specificity, or of sensitivity; give one range."""

    specificity: Range | None = key(None, "The range of specificity (`lo`, `hi`).",
                                    type="two proportions [lo, hi], lo < hi",
                                    example="[0.8, 1.0]",
                                    default_text="`[0.8, 1.0]` (when no sensitivity)",
                                    hint="write e.g. specificity: [0.8, 1.0]")
    sensitivity: Range | None = key(None, "The range of sensitivity instead.",
                                    type="two proportions [lo, hi], lo < hi",
                                    example="[0.9, 1.0]", default_text="none",
                                    hint="write e.g. sensitivity: [0.9, 1.0]")
    correct: bool = key(False, "McClish's standardization: 0.5 on the diagonal, 1 for a "
                        "perfect test.", type="true or false", example="false")
    boot_ci: Literal["bca", "percentile"] = key(
        "bca", "Interval of each model's partial AUC: `bca` (bias-corrected and accelerated, "
        "the acceleration from a jackknife over patients) or `percentile`; the paired "
        "differences always get the percentile interval (bench/operating_coverage.md).",
        type="text", example="bca", hint="use bca or percentile")

    @model_validator(mode="after")
    def _one_range(self):
        if self.specificity is not None and self.sensitivity is not None:
            raise _fail(None, "{file}: {at} gives both 'specificity' and 'sensitivity'; the "
                        "partial AUC is over one axis: keep one range")
        for name in ("specificity", "sensitivity"):
            rg = getattr(self, name)
            if rg is not None and not rg[0] < rg[1]:
                raise _fail(None, "{file}: {at." + name + "} must be [lo, hi] with lo < hi, "
                            "got {got}; write e.g. [0.8, 1.0]", got=list(rg))
        if self.specificity is None and self.sensitivity is None:
            object.__setattr__(self, "specificity", (0.8, 1.0))
        return self


class OperatingPoints(Block):
    """Matched operating points: each model read at its own threshold giving a fixed
    specificity (or sensitivity), compared between models beside the fixed-threshold
    comparison (a gain that vanishes there is a threshold shift), with ROC curves, partial
    AUC, likelihood ratios and each subgroup's AUC against the rest; all prespecified."""

    specificity: Annotated[tuple[Proportion, ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, (int, float)) and not isinstance(v, bool)
        else _as_tuple(v))] = key(
        (), "Specificities at which each model's sensitivity is read and compared.",
        type="a list of proportions", example="[0.9]", cli="--at-specificity",
        default_text="`[]`", hint="write e.g. specificity: [0.9]",
        cap=(20, "operating points"))
    sensitivity: Annotated[tuple[Proportion, ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, (int, float)) and not isinstance(v, bool)
        else _as_tuple(v))] = key(
        (), "Sensitivities at which each model's specificity is read and compared.",
        type="a list of proportions", example="[0.8]", cli="--at-sensitivity",
        default_text="`[]`", hint="write e.g. sensitivity: [0.8]",
        cap=(20, "operating points"))
    partial_auc: PartialAuc | None = key(None, type="a mapping",
                                         default_text="none (no partial AUC)")
    n_boot: int = key(2000, "Replicates of the paired cluster bootstrap of the operating "
                      "points and the partial AUC.", type="a whole number >= 2 (bootstrap "
                      "replicates)", example="2000", cli="--n-boot",
                      hint="write e.g. n_boot: 2000", ge=2)
    seed: Seed | None = key(None, "Seed of the replicates (overrides the root seed's "
                            "stream `operating_bootstrap`).", type=_SEED_TYPE,
                            example="20261203", cli="--seed", default_text=_SEED_DEFAULT,
                            hint="write an integer seed, e.g. 20261203")
    bands: bool = key(False, "Pointwise bands on the ROC curves: the percentile interval of "
                      "the sensitivity and the specificity at each threshold, from the same "
                      "paired cluster bootstrap (`n_boot` replicates).", type="true or false",
                      example="true", default_text="`false` (curves without bands)",
                      hint="write bands: true or bands: false")


class Goal(Block):
    """One prespecified performance goal, tested in every prespecified subgroup (one-sided,
    Holm over the subgroups): an absolute `goal`, or a non-inferiority `margin` against
    the overall value; give one."""

    metric: Literal[GOAL_METRICS] = key(..., "The metric.", type="text",
                                        example="sensitivity", default_text="required",
                                        hint="use one of the listed names")
    goal: float | None = key(None, "The value every subgroup must exceed (H1: metric > "
                             "goal).", type="a number in (0, 1)", example="0.8",
                             default_text="none", hint="write a proportion, e.g. goal: 0.8",
                             gt=0, lt=1)
    margin: float | None = key(None, "The non-inferiority margin against overall (H1: "
                               "metric > overall - margin).", type="a number in [0, 1)",
                               example="0.05", default_text="none",
                               hint="write a proportion, e.g. margin: 0.05", ge=0, lt=1)
    alpha: float = key(0.05, "One-sided level of each test (Holm over the subgroups).",
                       type="a number in (0, 0.5)", example="0.05",
                       hint="write e.g. alpha: 0.05", gt=0, lt=0.5)
    name: str | None = key(None, "How the report names the goal.", type="a text",
                           example='"Sensitivity >= 0.80 in every subgroup"',
                           default_text="`<metric> >= <goal>`")

    @model_validator(mode="after")
    def _one_bound(self):
        if (self.goal is None) == (self.margin is None):
            raise _fail(None, "{file}: {at} needs exactly one of 'goal' (an absolute value) "
                        "and 'margin' (non-inferiority against overall); e.g. goal: 0.8")
        return self
class Lesions(Block):
    """Lesion-level localization (needs `inputs.lesions`): FROC, CPM, AFROC / wAFROC,
    per-lesion sensitivity by size and subgroup, hidden misses."""

    hit_rule: Literal["iou", "dice", "centroid"] = key(
        "iou", "How a predicted lesion hits a reference lesion: overlap `iou` or `dice` of "
        "the two components at least `min_overlap`, or the prediction's `centroid` inside "
        "the reference (MONAI / CAMELYON16); each reference lesion matched at most once. A "
        "lesions table that states its rule (column `hit_rule`) must agree.", type="text",
        example="iou", hint="use one of the listed names")
    min_overlap: float = key(0.1, "The least overlap of a hit (`iou` and `dice`).",
                             type="a number in (0, 1]", example="0.1",
                             hint="write e.g. min_overlap: 0.1", gt=0, le=1)
    fp_per_scan: Annotated[tuple[float, ...], BeforeValidator(_as_tuple)] = key(
        (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0), "Mean false positives per scan at which the "
        "FROC's lesion sensitivity is read; the CPM is their mean (LUNA16).",
        type="a list of numbers > 0", example="[0.125, 0.25, 0.5, 1, 2, 4, 8]",
        default_text="`[0.125, 0.25, 0.5, 1, 2, 4, 8]`",
        hint="write e.g. [0.25, 0.5, 1, 2, 4, 8]", cap=(100, "false-positive rates"))
    n_boot: int = key(1000, "Patient-cluster bootstrap replicates of the FROC, CPM and "
                      "wAFROC intervals (one draw shared by every model: paired); 0: none.",
                      type="a whole number >= 2, or 0 for none", example="1000",
                      hint="write e.g. n_boot: 1000")
    seed: Seed | None = key(None, "Seed of the replicates (overrides the root seed's stream "
                            "`lesion_bootstrap`).", type=_SEED_TYPE, example="17",
                            default_text=_SEED_DEFAULT, hint="write an integer seed, e.g. 17")
    subgroups: Axes = key((), "Case axes of the lesion-level versus scan-level table and the "
                          "per-lesion rows.", type=_AXES_TYPE, example="[phase, site]",
                          default_text="the single-column axes of `detection.subgroups`",
                          hint="write e.g. [phase, site]", cap=(100, "lesion subgroup axes"))
    map_cols: str = key("phase", "Columns of the lesion-size failure map (rows: the lesion's "
                        "size).", type="a column name", example="phase",
                        hint="name a column, e.g. phase")
    hidden_miss_margin: float = key(
        0.05, "A cell whose hidden misses (scans called positive with every tumour missed, "
        "over the scan-level true positives) have a lower confidence limit above this is "
        "flagged `localization_gap`.", type="a number in [0, 1)", example="0.05",
        hint="write e.g. 0.05", ge=0, lt=1)

    @field_validator("fp_per_scan")
    @classmethod
    def _rates(cls, r):
        if not r or any(not (isinstance(x, (int, float)) and not isinstance(x, bool)
                             and math.isfinite(x) and x > 0) for x in r):
            raise _fail(None, "{file}: {at} must be one or more numbers > 0 (mean false "
                        "positives per scan), got {got}; write e.g. [0.25, 0.5, 1, 2, 4, 8]",
                        got=list(r))
        return tuple(float(x) for x in r)

    @field_validator("n_boot")
    @classmethod
    def _replicates(cls, n):
        if n != 0 and n < 2:
            raise _fail(None, "{file}: {at} must be a whole number >= 2, or 0 for none "
                        "(bootstrap replicates); got {got}; write e.g. n_boot: 1000", got=n)
        return n

    @property
    def rule_text(self) -> str:
        """The rule as the lesions table's `hit_rule` column writes it (``iou>=0.1``)."""
        return "centroid" if self.hit_rule == "centroid" else f"{self.hit_rule}>={self.min_overlap:g}"


class SiteMetaAnalysis(Block):
    """A random-effects meta-analysis across sites (each site a study): per model and
    estimand, the pooled value, heterogeneity (tau2, I2, Q) and a prediction interval for a
    new site (`stats.site_meta_analysis`: metafor's REML with the Knapp-Hartung interval),
    and a forest plot of the sites. Give the block (e.g. `site_meta_analysis: {}`) to turn
    it on."""

    estimands: Annotated[tuple[Literal[META_ESTIMANDS], ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v)), Field(min_length=1)] = key(
        ("sensitivity", "specificity"), "The proportions pooled across sites, one forest plot "
        "each.", type="a list of texts", example="[sensitivity, specificity]",
        default_text="`[sensitivity, specificity]`", hint="use one of the listed names")
    models: Annotated[tuple[str, ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v))] = key(
        (), "The evaluated models meta-analysed.", type="a list of model names",
                      example="[unet_large]", default_text="`[]` (every model)",
                      hint="name models of the cases table", cap=(100, "models"))
    by: Axes = key((), "Axes whose levels get a meta-analysis of their own (in the table "
                   "beside overall).", type=_AXES_TYPE, example="[phase]", default_text="`[]`",
                   hint="write e.g. [phase]", cap=(20, "axes of the site meta-analysis"))

    @field_validator("by")
    @classmethod
    def _by(cls, axes):
        for i, axis in enumerate(axes):
            if len(axis) > 5:
                raise _fail(None, MSG_LIST_CAP.replace("{key}", "{at[" + str(i) + "]}"), i=i,
                            n=len(axis), cap=5, what="columns of one intersection axis")
            for col in axis:
                _check_axis_column(col, "{at[" + str(i) + "]}")
                if col == "site":
                    raise _fail(None, "{file}: {at[" + str(i) + "]} names 'site', the study "
                                "of the meta-analysis: each level would hold one site; name "
                                "another axis, e.g. phase")
        return axes


def _margin_levels(value):
    """A target margin as written: level names (numbers allowed) -> share or count."""
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        name = (str(int(k)) if isinstance(k, float) and k.is_integer() else str(k)) \
            if isinstance(k, (int, float)) and not isinstance(k, bool) else k
        out[name] = float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    return out


Margin = Annotated[dict[str, Annotated[float, Field(ge=0)]], BeforeValidator(_margin_levels),
                   Field(max_length=1_000)]


class Contrast(Block):
    """One prespecified contrast: where the gap between two levels of a column comes from
    (`stats.decompose_gap`)."""

    group: str = key(..., "The column the gap is between.", type="a column name",
                     example="race", default_text="required", hint="name a column, e.g. race")
    levels: Annotated[tuple[str, ...], BeforeValidator(
        lambda v: tuple(str(x) if isinstance(x, (int, float)) and not isinstance(x, bool)
                        else x for x in v) if isinstance(v, list) else v)] = key(
        ..., "The comparison level, then the reference level (gap = comparison minus "
        "reference; the case-mix part gives the reference the comparison's covariates).",
        type="a list of two levels", example="[Unknown, White]", default_text="required",
        hint="write e.g. levels: [Unknown, White]")
    covariates: Seq | None = key(
        None, "The case mix: columns or one-column terms (with a GLMM or site-fixed model the "
        "site is one of them whether listed or not).", type="a list of terms",
        example='[phase, age_group, "np.log(tumor_size_mm)"]',
        default_text="the adjusted formula's other terms",
        hint='write e.g. covariates: [phase, "np.log(tumor_size_mm)"]',
        cap=(10, "covariates of one contrast"))

    @model_validator(mode="after")
    def _two_levels(self):
        if len(self.levels) != 2 or self.levels[0] == self.levels[1]:
            raise _fail(None, "{file}: {at.levels} must be two different levels, the "
                        "comparison first and the reference second, got {got}; write e.g. "
                        "levels: [Unknown, White]", got=list(self.levels))
        for i, term in enumerate(self.covariates or ()):
            _parse(f"detected ~ {term}", where="{at.covariates[" + str(i) + "]}")
        _check_axis_column(self.group, "{at.group}")
        return self


class Gaps(Block):
    """Where the gaps come from: the crude gap of each contrast split into its case-mix part
    and the part at equal case mix, with each covariate's contribution (`stats.decompose_gap`;
    needs `detection.adjusted` unless every contrast lists its covariates)."""

    contrasts: Annotated[tuple[Contrast, ...], BeforeValidator(_as_tuple)] = key(
        (), "Prespecified contrasts; none listed: each demographic axis's largest gap, "
        "labelled exploratory.", type="a list of {group, levels, covariates}",
        example="[{group: race, levels: [Unknown, White]}]",
        default_text="`[]` (each demographic axis's largest gap, exploratory)",
        cap=(20, "contrasts"))
    method: Literal[ADJUST_METHODS] | None = key(
        None, "The adjusted model of the decomposition.", type="text", example="glmm",
        default_text="the primary model (the first of `detection.adjusted.methods`, else glmm)",
        hint="use one of the listed names")
    within_site: bool = key(
        True, "With the GLMM: each site's share of the comparison level as a site-level "
        "covariate (Mundlak's within-site group effect), so that the group term does not "
        "take up site effects confounded with the group; false: the plain random-intercept "
        "model (its case-mix part is then biased toward 0 when the group's share differs "
        "between sites).", type="true or false", example="true",
        hint="write true or false")
    n_boot: int = key(2000, "Paired cluster-bootstrap replicates (each refits the model).",
                      type="a whole number >= 2 (bootstrap replicates)", example="2000",
                      hint="write e.g. n_boot: 2000", ge=2)
    seed: Seed | None = key(None, "Seed of the replicates (overrides the root seed's stream "
                            "`gap_bootstrap`).", type=_SEED_TYPE, example="5",
                            default_text=_SEED_DEFAULT, hint="write an integer seed, e.g. 5")


class Target(Block):
    """The intended-use population: margins the study is raked to (`stats.transport`);
    adds the table of performance in that population."""

    name: str = key("the intended-use population", "How the report names it.", type="a text",
                    example='"community hospitals, non-contrast heavy"')
    margins: dict[str, Margin] = key(
        {}, "Target margins: column -> {level: share or count} (site or region, phase, age "
        "group, sex, ...); every level the study has needs a positive share, and a level the "
        "study has no scans of is refused (outside its support).",
        type="a mapping column -> {level: share}",
        example="{phase: {venous: 0.5, arterial: 0.3, non_contrast: 0.2}}",
        default_text="`{}`", hint="write e.g. margins: {sex: {F: 0.5, M: 0.5}}",
        cap=(20, "target margins"))
    prevalence: Level | None = key(None, "Disease prevalence of the target population (the "
                                   "margin of `label`; PPV and NPV depend on it).",
                                   type="a number in (0, 1)", example="0.1",
                                   default_text="none (the study's)",
                                   hint="write a proportion, e.g. 0.1")

    @model_validator(mode="after")
    def _something(self):
        if not self.margins and self.prevalence is None:
            raise _fail(None, "{file}: {at} gives neither margins nor a prevalence; give "
                        "at least one, e.g. prevalence: 0.1")
        if "label" in self.margins and self.prevalence is not None:
            raise _fail(None, "{file}: {at} gives the label margin twice (margins.label and "
                        "prevalence); keep one")
        for col, m in self.margins.items():
            if not sum(m.values()) > 0:
                raise _fail(None, "{file}: {at.margins} gives every level of {col!r} a share "
                            "of 0; give positive shares", col=col)
        return self


class Detection(Block):
    """The detection half of the report (needs `inputs.cases`)."""

    threshold: Threshold = key(Threshold(criterion="youden"), type="a mapping",
                               default_text="`{criterion: youden}`")
    ci: Literal[CI_METHODS] = key(
        "wilson", "Interval for sensitivity, specificity, PPV, NPV and accuracy; `bootstrap` "
        "puts them on the cluster bootstrap (needs `detection.bootstrap.n_boot`).",
        type="text", example="wilson", cli="--ci", hint="use one of the listed names")
    auc_scale: Literal[AUC_SCALES] = key(
        "auto", "DeLong AUC interval: `auto` puts it on the AUC scale (as pROC) where scans are "
        "independent and on the logit scale where a patient's scans are clustered "
        "(Obuchowski's variance, t on C - 1 df); `auc` or `logit` force one scale.",
        type="text", example="auto", cli="--auc-scale", hint="use one of the listed names")
    compare_by: Axes = key((), "Axes of the paired model comparisons besides overall.",
                           type=_AXES_TYPE, example="[phase]", cli="--by",
                           default_text="`[]` (overall only)",
                           hint="write e.g. phase or [age_group, phase]",
                           cap=(100, "axes of the model comparisons"))
    compare_metrics: Annotated[tuple[Literal[COMPARE_ALL], ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v)), Field(min_length=1)] = key(
        COMPARE_METRICS, "Metrics of the paired model comparisons: `sensitivity` and "
        "`specificity` (exact McNemar, Newcombe), `auc` (paired DeLong) in closed form; "
        "`ppv`, `npv`, `f1` and `accuracy` as paired cluster-bootstrap differences (need "
        "`detection.bootstrap.n_boot`).", type="a list of texts",
        example="[sensitivity, specificity, auc, f1]", cli="--metric",
        default_text="`[sensitivity, specificity, auc]`", hint="use one of the listed names")
    subgroup_gaps: Annotated[tuple[Literal[GAP_METRICS], ...], BeforeValidator(
        lambda v: (v,) if isinstance(v, str) else _as_tuple(v))] = key(
        (), "Metrics whose gap between each model's best and worst level of every "
        "prespecified subgroup axis (`subgroups`) is reported, with a paired "
        "cluster-bootstrap interval (fairlearn's `difference()`; needs "
        "`detection.bootstrap.n_boot`).", type="a list of texts", example="[sensitivity]",
        cli="--gap", default_text="`[]` (none)", hint="use one of the listed names")
    exploratory_subgroups: Axes = key(
        (), "Axes analysed as exploratory: labelled so and kept out of the multiplicity "
        "family of `subgroups`.", type=_AXES_TYPE, example="[scanner]", default_text="`[]`",
        hint="write e.g. phase or [age_group, phase]",
        cap=(100, "exploratory subgroup axes"))
    cluster: str | None = key(
        "auto", "Cluster of the intervals and tests: `auto` uses `patient_id` when a patient "
        "has several scans; `none`: scans independent.",
        type="auto, a column name such as patient_id, or none", example="auto",
        cli="--cluster", hint="write e.g. cluster: auto")
    precision: Precision = key(Precision(), type="a mapping", default_text="")
    conf_level: Level = key(0.95, "Confidence level of every detection interval.",
                            type="a number in (0, 1)", example="0.95", cli="--conf-level",
                            hint="write e.g. 0.95, not 95")
    subgroups: Axes = key((("phase",),), "Subgroup axes of the metric tables, forest plots and "
                          "subgroup-vs-rest tests.", type=_AXES_TYPE,
                          example="[phase, age_group, [age_group, phase]]", cli="--by",
                          default_text="`[phase]`", hint="write e.g. phase or [age_group, phase]",
                          cap=(100, "subgroup axes"))
    bins: dict[str, Bin] = key({}, "Cut numeric columns into categorical ones (left-closed "
                               "intervals, `[a, b)`).", type="a mapping column -> {name, "
                               "breaks, labels}", example="{age: {breaks: [0, 40, 60, 75, .inf]}}",
                               cli="--bin", default_text="`{}`", cap=(100, "binned columns"))
    small_n: int = key(10, "Cells whose denominator is below this are flagged `small_n`.",
                       type="a whole number >= 1 (the smallest denominator not flagged "
                            "small_n)", example="10", cli="--small-n",
                       hint="write e.g. small_n: 10", ge=1)
    bootstrap: Bootstrap = key(Bootstrap(), type="a mapping", default_text="none (no bootstrap)")
    adjusted: Adjusted | None = key(None, type="a mapping",
                                    default_text="none (no adjusted models)")
    failure_map: FailureMap | None = key(None, type="a mapping", default_text="none")
    operating_points: OperatingPoints | None = key(
        None, type="a mapping", default_text="none (no matched operating points)")
    goals: Annotated[tuple[Goal, ...], BeforeValidator(_as_tuple)] = key(
        (), "Prespecified performance goals, tested in every level of the prespecified "
        "subgroup axes (`subgroups`).", type="a list of mappings", default_text="`[]`",
        example="[{metric: sensitivity, goal: 0.8}]", cap=(50, "performance goals"))
    lesions: Lesions | None = key(None, type="a mapping",
                                  default_text="none (no localization section)")
    site_meta_analysis: SiteMetaAnalysis | None = key(
        None, type="a mapping", default_text="none (no meta-analysis across sites)")
    gaps: Gaps | None = key(None, type="a mapping", default_text="none (no decomposition)")
    target: Target | None = key(None, type="a mapping",
                                default_text="none (no transported performance)")

    @field_validator("cluster", mode="before")
    @classmethod
    def _cluster(cls, v):
        if v is None or (isinstance(v, str) and v.strip().lower() == "none"):
            return None
        if isinstance(v, str) and v.strip().lower() == "auto":
            return "auto"
        return v

    @field_validator("subgroups", "compare_by", "exploratory_subgroups")
    @classmethod
    def _axes(cls, axes, info: ValidationInfo):
        seen = []
        for i, axis in enumerate(axes):
            if len(axis) > 5:
                raise _fail(None, MSG_LIST_CAP.replace("{key}", "{at[" + str(i) + "]}"), i=i, n=len(axis),
                            cap=5, what="columns of one intersection axis")
            twice = sorted({x for x in axis if axis.count(x) > 1})
            if twice:
                raise _fail(None, MSG_AXIS_TWICE.replace("{key}", "{at[" + str(i) + "]}"), i=i,
                            axis=":".join(axis), column=twice[0])
            for col in axis:
                _check_axis_column(col, "{at[" + str(i) + "]}")
            if axis in seen:
                raise _fail(None, MSG_AXIS_REPEATED.replace("{key}", "{at}"),
                            axis=":".join(axis))
            seen.append(axis)
        return axes

    @field_validator("bins")
    @classmethod
    def _bins(cls, bins):
        out, made = {}, {}
        for col, b in bins.items():
            name = b.name or f"{col}_group"
            where = "{root.detection.bins." + col + ".name}"
            if name in RESERVED_COLUMNS:
                raise _fail(None, MSG_BIN_NAME.replace("{key}", where), name=name,
                            suggest=f"{name}_group")
            for other_col, other in made.items():
                if name in (other, other_col):
                    raise _fail(None, MSG_BIN_NAME_TWICE.replace("{key}", where),
                                other=f"detection.bins.{other_col}", name=name)
            made[col] = name
            out[col] = b.model_copy(update={"name": name, "column": col})
        return out

    @model_validator(mode="after")
    def _consistent(self):
        twice = sorted(set(self.subgroups) & set(self.exploratory_subgroups))
        if twice:
            raise _fail(None, "{file}: {at.exploratory_subgroups} repeats {axes} from "
                        "{at.subgroups}; an axis is either prespecified (subgroups) or "
                        "exploratory, not both", axes=", ".join(":".join(a) for a in twice))
        boot = [m for m in self.compare_metrics if m in BOOT_COMPARE]
        for what, at in ((boot, "{at.compare_metrics}"), (self.subgroup_gaps,
                                                          "{at.subgroup_gaps}")):
            if what and not self.bootstrap.n_boot:
                raise _fail(None, "{file}: " + at + " names " + ", ".join(what) + ", which "
                            "need(s) the paired cluster bootstrap: add {at.bootstrap.n_boot} "
                            "(e.g. 2000 replicates) or leave them out")
        if self.ci == "bootstrap" and not self.bootstrap.n_boot:
            raise _fail(None, "{file}: {at.ci} is bootstrap, which needs "
                        "{at.bootstrap.n_boot} (e.g. 2000 replicates); add it or choose "
                        "wilson, clopper-pearson or jeffreys")
        return self

    @property
    def prespecified_threshold(self) -> bool:
        return self.threshold.value is not None


# --------------------------------------------------------------------------- the rest

#: the random streams of the CRS mechanism analyses (one per analysis; the crs block's
#: bootstrap seed overrides them as it overrides crs_bootstrap)
CRS_STREAMS = ("crs_shift", "crs_specialization", "crs_depth", "crs_confidence",
               "crs_protocol", "crs_labels")


class CrsBootstrap(Block):
    """The paired-seed bootstrap of CRS and ranks."""

    n_boot: int = key(10_000, "Replicates (0: point scores, no bootstrap).",
                      type="a whole number >= 2, or 0 for none (paired-seed bootstrap "
                           "replicates)", example="10000", cli="--n-boot",
                      hint="write e.g. n_boot: 10000")
    seed: Seed | None = key(None, "Seed of the replicates and of the stability draws "
                            "(overrides the root seed's streams `crs_bootstrap` and "
                            "`crs_stability`).", type=_SEED_TYPE, example="7", cli="--seed",
                            default_text=_SEED_DEFAULT, hint="write an integer seed, e.g. 7")

    @field_validator("n_boot")
    @classmethod
    def _replicates(cls, n):   # 0: point scores only
        if n != 0 and n < 2:
            raise _fail(None, "{file}: {at} must be a whole number >= 2, or 0 for none "
                        "(paired-seed bootstrap replicates); got {got}; write e.g. n_boot: "
                        "10000", got=n)
        return n


class Crs(Block):
    """The CRS half of the report (needs `inputs.runs` and `inputs.reference`)."""

    bootstrap: CrsBootstrap = key(CrsBootstrap(), type="a mapping", default_text="")
    k: int = key(3, "The k of P(rank <= k).", type="a whole number >= 1 (the k of P(rank <= "
                 "k))", example="3", cli="--k", hint="write e.g. k: 3", ge=1)
    n_weights: int = key(1000, "Dirichlet(1,1,1) weight draws of the stability analysis (0 "
                         "skips it).", type="a whole number >= 0 (Dirichlet weight draws, 0 "
                         "skips the stability analysis)", example="1000", cli="--n-weights",
                         hint="write e.g. n_weights: 1000", ge=0)
    conf_level: Level = key(0.95, "Confidence level of the CRS intervals.",
                            type="a number in (0, 1)", example="0.95", cli="--conf-level",
                            hint="write e.g. 0.95, not 95")
    layer_policy: Literal["last", "best"] = key(
        "last", "The feature layer the CRS ranking (and every analysis but the depth "
        "analysis) uses per encoder, when the runs have a `layer` column: `last` (the layer "
        "named by `crs.last_layer`) or `best` (the highest validation AUROC, the runs' "
        "`val_auroc`, seed-mean at full labels, mean over datasets; the test AUROC, said "
        "so, without it). `crs.layers` overrides it per encoder.",
        type="last or best", example="last", hint="write last or best")
    layers: dict[str, str] = key({}, "Per encoder, the layer the ranking uses (overrides "
                                 "`crs.layer_policy`).", type="a mapping encoder -> layer",
                                 example="{resnet18_rand: mid}", default_text="`{}`",
                                 hint="write encoder: layer pairs")
    last_layer: str = key("last", "The name of an encoder's last (final) layer in the runs' "
                          "`layer` column.", type="a layer name", example="last",
                          hint="write the name the runs use for the final layer")
    encoder_domains: dict[str, str] = key(
        {}, "The domain each encoder was pretrained for (the specialization analysis E1: "
        "its gain on the datasets of its own domain versus the others); an encoder not named, "
        "or named with a domain no dataset has (e.g. general), is a generalist.",
        type="a mapping encoder -> domain", example="{derm_encoder: dermatology}",
        default_text="`{}` (no specialization analysis)", hint="write encoder: domain pairs")
    dataset_domains: dict[str, str] = key(
        {}, "The domain of each dataset (default: its own name).",
        type="a mapping dataset -> domain", example="{isic2019: dermatology}",
        default_text="`{}`", hint="write dataset: domain pairs")
    auroc_margin: float = key(0.02, "An AUROC drop under a perturbation smaller than this "
                              "counts as discrimination held (the confidence-loss flag: ECE "
                              "rises while AUROC holds).", type="a number >= 0",
                              example="0.02", hint="write e.g. 0.02", ge=0)


class CalBootstrap(Block):
    """Bootstrap of the ECE intervals: the detection models' case bootstrap, and the
    encoders' paired-seed bootstrap (with a `crs` block, the encoders' ECE intervals use the
    CRS bootstrap's replicates, as the CRS calibration axis)."""

    n_boot: int = key(1000, "Replicates.", type="a whole number >= 2 (ECE bootstrap "
                      "replicates)", example="1000", hint="write e.g. n_boot: 1000", ge=2)
    seed: Seed | None = key(None, "Seed of the replicates (overrides the root seed's stream "
                            "`calibration_bootstrap`).", type=_SEED_TYPE, example="11",
                            default_text=_SEED_DEFAULT, hint="write an integer seed, e.g. 11")


class Calibration(Block):
    """The calibration section (needs `inputs.probe_predictions`)."""

    bootstrap: CalBootstrap = key(CalBootstrap(), type="a mapping", default_text="")


#: the race values the metadata extractors write (inference_runner/metadata/race.py,
#: RACE_VALUES; a test checks the two agree)
RACE_VALUES = ("Black", "White", "Asian", "Hispanic/Latino", "American Indian/Alaska Native",
               "Native Hawaiian/Pacific Islander", "Other", "Declined", "Unknown")
#: extracted race value -> the study's level where metadata.race_levels names none
DEFAULT_RACE_LEVELS = {v: v for v in RACE_VALUES} | {"Declined": "Unknown"}


class Metadata(Block):
    """How metadata extraction error reaches the subgroup intervals (needs
    `inputs.metadata` for `estimate`)."""

    label_error: str | None = key(
        None, "`estimate`: a label-error table estimated from the evidence and its reviews; a "
        "path: a given table (`field, recorded_value, true_value, probability`). Adds "
        "error-aware subgroup intervals (multiple imputation) beside the naive ones.",
        type="estimate, or a file path", example="estimate",
        default_text="none (naive intervals only)")
    prefer: Seq = key((), "Extractor order of the recorded value where no review exists.",
                      type="a list of extractor names", example="[dicom_rules, text_rules]",
                      default_text="`[]`", hint="write e.g. prefer: [dicom_rules, text_rules]",
                      cap=(100, "extractor names"))
    n_imputations: int = key(50, "Imputations of the true subgroup.",
                             type="a whole number >= 2 (imputations of the true subgroup)",
                             example="50", hint="write e.g. n_imputations: 50", ge=2)
    seed: Seed | None = key(None, "Seed of the imputations (overrides the root seed's stream "
                            "`label_error_imputation`).", type=_SEED_TYPE, example="3",
                            default_text=_SEED_DEFAULT, hint="write an integer seed, e.g. 3")
    @field_validator("label_error")
    @classmethod
    def _table(cls, value, info: ValidationInfo):
        if value is None or value == "estimate":
            return value
        base = Path((info.context or {}).get("base", "."))
        p = Path(value) if Path(value).is_absolute() else base / value
        if not p.is_file():
            raise _fail(None, "{file}: {at} names {p}, which does not exist; paths are "
                        "read relative to the plan file's folder ({base})", p=str(p),
                        base=str(base))
        return str(p)

    race_levels: dict[str, str] = key(
        {}, "The study's race level of each extracted race value (the extractors' vocabulary: "
        + ", ".join(RACE_VALUES) + "; the phrasings each stands for are listed in "
        "inference_runner/metadata/race.py: African American and AA are Black, Caucasian is "
        "White, Hispanic or Latino is Hispanic/Latino, a declined answer is Declined). A value "
        "not named keeps the default: Declined -> Unknown, every other value as itself.",
        type="a mapping extracted race value -> the study's level",
        example="{Hispanic/Latino: Other, Declined: Unknown}", default_text="`{}`",
        hint="write e.g. race_levels: {Hispanic/Latino: Other}",
        cap=(len(RACE_VALUES), "race values"))

    @field_validator("race_levels")
    @classmethod
    def _race_values(cls, value):
        bad = sorted(k for k in value if k not in RACE_VALUES)
        if bad:
            raise _fail(None, "{file}: {at} names {bad}, which the extractors never write; "
                        "name values of: {known}", bad=", ".join(map(repr, bad)),
                        known=", ".join(RACE_VALUES))
        empty = sorted(k for k, v in value.items() if not str(v).strip())
        if empty:
            raise _fail(None, "{file}: {at} maps {bad} to an empty level; give a level name",
                        bad=", ".join(map(repr, empty)))
        return value

    per_patient: Union[Literal["auto"], Seq] = key(
        "auto", "Fields recorded once per patient (race, sex): each is imputed once per "
        "patient, and a patient whose scans differ in one is an error naming them. `auto`: the "
        "fields on which every patient's scans agree.", type="auto or a list of field names",
        example="[race, sex]", hint="write e.g. per_patient: [race, sex], or per_patient: auto")


class Privacy(Block):
    """Identifier handling."""

    allow_identifiers: bool = key(False, "Accept columns that look like direct identifiers "
                                  "or free text (name, mrn, birth date, text, ...).",
                                  type="true or false", example="false")
    pseudonymize_ids: bool = key(False, "Replace case and patient ids by salted SHA-256 "
                                 "pseudonyms in every output.", type="true or false",
                                 example="true")
    salt: str | None = key(None, "The secret salt (kept out of the report).", type="a text",
                           example='"a long random text"',
                           default_text="required with `pseudonymize_ids`")

    @model_validator(mode="after")
    def _salted(self):
        if self.pseudonymize_ids and not self.salt:
            raise _fail(None, "{file}: {at.salt} is missing; pseudonymize_ids needs a "
                        "secret salt (a long random text kept out of the report)")
        return self


_ROLE = dict(type="prespecified or exploratory", hint="use one of the listed names")


class Roles(Block):
    """Whether each analysis is prespecified or exploratory; every table and figure caption
    says which. Subgroup axes take theirs from `detection.subgroups` /
    `detection.exploratory_subgroups`, the failure map from its axis. Exploratory tests are
    not adjusted for multiplicity."""

    overall: Literal[ROLE_VALUES] = key("prespecified", "The overall accuracy table.", **_ROLE)
    precision: Literal[ROLE_VALUES] = key("prespecified", "The achieved-precision table of the "
                                          "prespecified cells.", **_ROLE)
    sensitivity_collapse: Literal[ROLE_VALUES] = key(
        "prespecified", "The sensitivity-collapse table (subgroup-versus-rest tests).", **_ROLE)
    threshold_sweep: Literal[ROLE_VALUES] = key(
        "exploratory", "The threshold sweep (figure, table, ranking stability).", **_ROLE)
    pooled: Literal[ROLE_VALUES] = key("exploratory", "The partially pooled failure-map cells.",
                                       **_ROLE)
    adjusted: Literal[ROLE_VALUES] = key(
        "prespecified", "The adjusted models (odds ratios, block tests, variance, adjusted "
        "versus crude); exploratory: block tests not Holm-adjusted.", **_ROLE)
    interactions: Literal[ROLE_VALUES] = key(
        "prespecified", "The interaction tests of `detection.adjusted.interactions`; "
        "prespecified: Holm over them and the adjusted sensitivities per cell; exploratory "
        "(also whenever `adjusted` is): the tests only, unadjusted.", **_ROLE)
    comparisons: Literal[ROLE_VALUES] = key("prespecified", "The paired model comparisons.",
                                            **_ROLE)
    calibration: Literal[ROLE_VALUES] = key(
        "prespecified", "The calibration tables and reliability diagrams.", **_ROLE)
    crs: Literal[ROLE_VALUES] = key("prespecified", "The CRS axes, scores, rank probabilities, "
                                    "dominance and differences.", **_ROLE)
    crs_stability: Literal[ROLE_VALUES] = key(
        "prespecified", "The CRS stability analyses (leave-one-out panels, random weights, "
        "ranking by AUROC).", **_ROLE)
    crs_domains: Literal[ROLE_VALUES] = key(
        "prespecified", "The per-domain CRS and the institutional-shift table.", **_ROLE)
    crs_mechanisms: Literal[ROLE_VALUES] = key(
        "exploratory", "The mechanism analyses: specialization (E1), feature depth (E3), "
        "confidence loss under corruption (E4), protocols and adaptation (E5), label "
        "efficiency (E6).", **_ROLE)
    metadata: Literal[ROLE_VALUES] = key(
        "prespecified", "The metadata coverage, agreement, site test and review tables.",
        **_ROLE)
    label_error: Literal[ROLE_VALUES] = key(
        "prespecified", "The label-error table and the error-aware intervals.", **_ROLE)
    operating_points: Literal[ROLE_VALUES] = key(
        "prespecified", "The ROC curves, matched operating points, partial AUC, likelihood "
        "ratios and subgroup-versus-rest AUC tests.", **_ROLE)
    goals: Literal[ROLE_VALUES] = key("prespecified", "The performance-goals table.", **_ROLE)
    localization: Literal[ROLE_VALUES] = key(
        "exploratory", "The lesion-level localization (FROC curves, CPM and wAFROC, the "
        "lesion-size failure map, lesion- versus scan-level sensitivity).", **_ROLE)
    site_meta_analysis: Literal[ROLE_VALUES] = key(
        "prespecified", "The meta-analysis across sites (forest plots, pooled values, "
        "heterogeneity, prediction intervals).", **_ROLE)
    gaps: Literal[ROLE_VALUES] = key(
        "prespecified", "The decompositions of the plan's contrasts (`detection.gaps`); the "
        "default contrasts, chosen from the data, are always exploratory.", **_ROLE)
    transport: Literal[ROLE_VALUES] = key(
        "prespecified", "The performance in the intended-use population "
        "(`detection.target`).", **_ROLE)


class Inputs(Block):
    """The input tables. Relative paths are read from the plan file's folder."""

    cases: Path | None = key(None, "The cases table (docs/contracts.md#cases); required by "
                             "`detection`.", type="a file path (relative to the plan file)",
                             example="cases.csv", default_text="none")
    runs: Path | None = key(None, "The runs table (docs/contracts.md#runs); required by "
                            "`crs`.", type="a file path (relative to the plan file)",
                            example="runs.parquet", default_text="none")
    reference: Path | None = key(None, "The CRS reference panel: `panel`, optional `anchors`, "
                                 "`weights`, `version` (see clinrel/demo_data/reference.yaml); "
                                 "required by `crs`.", type="a file path (relative to the "
                                 "plan file)", example="reference.yaml", default_text="none")
    metadata: Path | None = key(None, "The metadata evidence table "
                                "(docs/contracts.md#metadata-evidence); adds the extractor "
                                "agreement section.", type="a file path (relative to the plan "
                                "file)", example="evidence.csv", default_text="none")
    probe_predictions: Path | None = key(None, "Per-case probe probabilities "
                                         "(docs/contracts.md#probe-predictions); adds the "
                                         "calibration section.", type="a file path (relative "
                                         "to the plan file)",
                                         example="probe_predictions.parquet", default_text="none")
    lesions: Path | None = key(None, "The lesions table (docs/contracts.md#lesions); with "
                               "`detection.lesions`, adds the localization section.",
                               type="a file path (relative to the plan file)",
                               example="lesions.parquet", default_text="none")

    @field_validator("*", mode="before")
    @classmethod
    def _path(cls, value, info: ValidationInfo):
        if value is None:
            return None
        if not isinstance(value, str):
            raise _fail(None, MSG_TYPE.replace("{key}", "{at}"),
                        expected="a file path (relative to the plan file)", got=value,
                        hint="fix the value")
        base = Path((info.context or {}).get("base", "."))
        p = Path(value)
        p = p if p.is_absolute() else base / p
        if not p.is_file():
            raise _fail(None, "{file}: {at} names {p}, which does not exist; paths are "
                        "read relative to the plan file's folder ({base})", p=str(p),
                        base=str(base))
        return p


class Limits(Block):
    """Resource caps: a step estimated above them is refused before it runs (the
    environment variables of :mod:`stats.limits` set them too; the plan wins)."""

    max_memory_gb: float | None = key(None, "Memory cap of one step.", type="a positive "
                                      "number", example="64",
                                      default_text="80% of physical memory "
                                                   "(env CLINREL_MAX_MEMORY_GB)", gt=0)
    max_rows: int | None = key(None, "Rows of one input table.", type="a positive whole "
                               "number", example="100000000",
                               default_text="`50,000,000` (env CLINREL_MAX_ROWS)", gt=0)
    max_hours: float | None = key(None, "Estimated single-core hours of one step.",
                                  type="a positive number", example="48",
                                  default_text="`24` (env CLINREL_MAX_HOURS)", gt=0)
    max_file_gb: float | None = key(None, "Size in GB of one input table file, checked before "
                                    "it is opened.", type="a positive number", example="8",
                                    default_text="`2` (env CLINREL_MAX_FILE_GB)", gt=0)
    max_columns: int | None = key(None, "Columns of one input table, counted on the CSV header "
                                  "line or the parquet schema before the table is parsed.",
                                  type="a positive whole number", example="20000",
                                  default_text="`10,000` (env CLINREL_MAX_COLUMNS)", gt=0)


_NOTES = Annotated[tuple[str, ...], BeforeValidator(
    lambda v: () if v is None else (v,) if isinstance(v, str) else _as_tuple(v))]


class PlanSpec(Block):
    """A plan file, as written (the top level)."""

    version: Literal[1] = key(1, "Plan format version; this clinrel reads 1.",
                              type="a whole number (1)", example="1",
                              hint="this clinrel reads plan version 1")
    title: str = key("Reliability appendix", "Title of the report.", type="a text",
                     example='"Liver lesion detection: subgroup reliability"')
    seed: Seed | None = key(None, "Root seed of the run: every analysis that draws random "
                            "numbers gets its own stream of it (a block's own seed overrides "
                            "its streams). Left out: derived from the plan file's SHA-256 when "
                            "it is read (the same file gives the same numbers) and recorded in "
                            "the manifest (`seeds.root`).", type=_SEED_TYPE,
                            example="20261201",
                            default_text="derived from the plan's SHA-256 (recorded)",
                            hint="write an integer seed, e.g. 20261201")
    inputs: Inputs = key(..., type="a mapping", default_text="required",
                         hint="add an 'inputs' block naming cases and/or runs")
    detection: Detection | None = key(None, type="a mapping",
                                      default_text="none (no detection sections)")
    crs: Crs | None = key(None, type="a mapping", default_text="none (no CRS sections)")
    calibration: Calibration = key(Calibration(), type="a mapping", default_text="")
    metadata: Metadata | None = key(None, type="a mapping", default_text="none")
    privacy: Privacy = key(Privacy(), type="a mapping", default_text="")
    prespecified: _NOTES = key((), "What was fixed before the data were seen (printed in the "
                               "methods as the plan author's declaration; STARD 12a, 17).",
                               type="a text or a list of texts",
                               example='["Threshold 50 voxels; Wilson intervals"]',
                               default_text="none")
    exploratory: _NOTES = key((), "What was not prespecified.", type="a text or a list of "
                              "texts", example='["Threshold sweep"]', default_text="none")
    roles: Roles = key(Roles(), type="a mapping", default_text="the defaults below")
    scheduler: str | None = key(None, "Run bootstrap blocks and model fits on a Dask cluster; "
                                "results are identical.", type="a Dask scheduler address",
                                example='"tcp://10.0.0.5:8786"', cli="--scheduler",
                                default_text="none (this process)")
    limits: Limits = key(Limits(), type="a mapping", default_text="`{}`")

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, v):
        if v is not None and not v.strip():
            raise _fail(None, "{file}: key 'scheduler' must be a Dask scheduler address such "
                        "as 'tcp://10.0.0.5:8786' (or left out to run here); got {got}",
                        got=repr(v))
        return None if v is None else v.strip()

    @model_validator(mode="after")
    def _halves(self, info: ValidationInfo):
        if (info.context or {}).get("tables_given"):   # plan_for_tables: no input files
            return self
        i = self.inputs
        if self.detection is not None and i.cases is None:
            raise _fail(None, "{file}: the plan has a 'detection' block but no 'inputs.cases'; "
                        "name the cases table or remove the block")
        if self.crs is not None and i.runs is None:
            raise _fail(None, "{file}: the plan has a 'crs' block but no 'inputs.runs'; name "
                        "the runs table or remove the block")
        if self.crs is not None and i.reference is None:
            raise _fail(None, "{file}: the plan has a 'crs' block but no 'inputs.reference'; "
                        "name the reference panel file (see clinrel/demo_data/reference.yaml)")
        if self.detection is None and self.crs is None:
            raise _fail(None, "{file}: the plan has neither a 'detection' nor a 'crs' block; "
                        "add at least one (see clinrel/demo_data/plan.yaml)")
        if self.detection is not None and self.detection.lesions is not None \
                and i.lesions is None:
            raise _fail(None, "{file}: the plan has a 'detection.lesions' block but no "
                        "'inputs.lesions'; name the lesions table (the runner writes "
                        "lesions.parquet) or remove the block")
        md = self.metadata
        if md is not None and md.label_error == "estimate" and i.metadata is None:
            raise _fail(None, "{file}: key 'metadata.label_error' is 'estimate', which reads "
                        "the metadata evidence table; name it under 'inputs.metadata' or give "
                        "a label-error table's path")
        return self


# --------------------------------------------------------------------------- helpers

def _num(x: float) -> str:
    return "inf" if math.isinf(x) else (str(int(x)) if float(x).is_integer() else str(x))


def _check_axis_column(column: str, where: str) -> None:
    if column in NOT_AXES:
        raise _fail(None, MSG_NOT_AXIS.replace("{key}", where), column=column,
                    why=NOT_AXES[column])


def _parse(text: str, where: str = "{at}"):
    """Parse a plan formula with clinrel's grammar (``stats.formula``): a term outside it is
    refused here, at load time, before anything is evaluated."""
    from stats.formula import parse_formula

    try:
        return parse_formula(text)
    except ContractError as exc:
        raise _fail(None, "{file}: " + where + ": {message}", message=str(exc)) from None


def continuous_terms(formula: str) -> dict[str, tuple[str, float | None]]:
    """The main-effect continuous terms of ``formula`` that ``detection.adjusted.units`` can
    rescale: term name -> (column, log base or None). A plain column or a log of one
    (``np.log``, ``log2``, ``log10``); ``I()``, ``sqrt``, ``scale`` and interactions stay
    per one unit of the term as fitted."""
    from stats.formula import parse_formula

    out = {}
    for t in parse_formula(formula).terms:
        if len(t.factors) != 1 or type(t.factors[0].arg).__name__ != "Column":
            continue
        f = t.factors[0]
        if f.kind == "column":
            out[t.name] = (f.arg.name, None)
        elif f.kind == "transform" and f.function in LOG_BASES:
            out[t.name] = (f.arg.name, LOG_BASES[f.function])
    return out


# --------------------------------------------------------------------------- the walk

def _fields(model: type[BaseModel]):
    for name, f in model.model_fields.items():
        extra = f.json_schema_extra or {}
        if extra.get("internal"):
            continue
        yield name, f, extra


def _model_of(annotation) -> type[BaseModel] | None:
    """The Block a field holds (directly, optionally, or as the values of a mapping)."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, Block):
            return arg
        for sub in get_args(arg):
            if isinstance(sub, type) and issubclass(sub, Block):
                return sub
    return None


#: keys whose children are named by the user (a column, a variable, a block)
USER_KEYED = {"detection.bins": "<column>", "detection.adjusted.levels": "<column>",
              "detection.adjusted.units": "<variable>"}


@dataclass(frozen=True)
class KeyDoc:
    """One plan key as declared: path, type, default, allowed values, example, meaning, the
    option that sets it, its cap."""

    path: str
    type: str
    default: str
    allowed: str
    example: str
    meaning: str
    cli: str | None
    cap: tuple[int, str] | None
    hint: str


def _default_text(f, extra) -> str:
    if extra.get("default_text") is not None:
        return extra["default_text"]
    d = f.default
    if d is None:
        return "none"
    if isinstance(d, BaseModel):
        return ""
    if isinstance(d, tuple):
        d = [list(x) if isinstance(x, tuple) and len(x) > 1 else (x[0] if isinstance(x, tuple)
             else x) for x in d]
        return "`[" + ", ".join(map(str, d)) + "]`"
    if isinstance(d, bool):
        return f"`{str(d).lower()}`"
    return f"`{d}`"


def _allowed(annotation) -> str:
    lits = []

    def walk(a):
        if getattr(a, "__origin__", None) is Literal:
            lits.extend(get_args(a))
        for sub in get_args(a):
            walk(sub)
    walk(annotation)
    return ", ".join(f"`{v}`" for v in lits if v is not None)


@functools.lru_cache(maxsize=None)
def keys(model: type[BaseModel] = None, prefix: str = "") -> tuple[KeyDoc, ...]:
    """Every plan key, in declaration order (``docs/plan.md`` is written from this)."""
    model = model or PlanSpec
    out = []
    for name, f, extra in _fields(model):
        path = f"{prefix}.{name}" if prefix else name
        sub = _model_of(f.annotation)
        doc = f.description or (sub.__doc__ or "").strip().replace("\n    ", " ")
        doc = " ".join(doc.split())
        out.append(KeyDoc(path, extra.get("type_text", ""), _default_text(f, extra),
                          _allowed(f.annotation) if sub is None else "", extra.get("example", ""),
                          doc, extra.get("cli"), extra.get("cap"), extra.get("hint", "")))
        if sub is not None:
            mapping = getattr(f.annotation, "__origin__", None) is dict or any(
                getattr(a, "__origin__", None) is dict for a in get_args(f.annotation))
            if mapping:
                child = f"{path}.<column>"
                out.append(KeyDoc(child, "a mapping", "", "", "", " ".join(
                    (sub.__doc__ or "").split()), None, None, ""))
                out.extend(keys(sub, child))
            else:
                out.extend(keys(sub, path))
        elif path in USER_KEYED:
            out.append(KeyDoc(f"{path}.{USER_KEYED[path]}", "", "", "", "",
                              f"One entry of `{path}`.", None, None, ""))
    return tuple(out)


def declared(path: str) -> KeyDoc:
    """The declaration of one key (``detection.bins.age.breaks`` finds
    ``detection.bins.<column>.breaks``)."""
    import re

    generic = re.sub(r"^(detection\.bins)\.[^.]+", r"\1.<column>", path)
    generic = re.sub(r"\[\d+\]", "", generic)
    found = {k.path: k for k in keys()}
    for candidate in (path, generic):
        if candidate in found:
            return found[candidate]
    parent = generic.rsplit(".", 1)[0]   # an entry of a user-keyed mapping (blocks.protocol)
    if "." in generic and parent in found and parent.split(".")[-1] in ("blocks", "levels",
                                                                         "units"):
        return found[parent]
    raise KeyError(path)


def describe(path: str) -> str:
    """The meaning of a key, for the comments of ``clinrel plan init``."""
    return declared(path).meaning


def option_of(path: str) -> str | None:
    """The command-line option that sets a key (None: only a plan sets it)."""
    try:
        return declared(path).cli
    except KeyError:
        return None


# --------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Plan:
    """A validated plan: the file's keys (``spec``), where it came from, and the run's root
    seed. Attributes of the spec read through (``plan.detection``, ``plan.crs``...)."""

    spec: PlanSpec
    path: Path
    sha256: str
    seed: int
    #: where the root seed came from: "plan" (its ``seed`` key) or "plan sha256" (derived
    #: from the plan's bytes: the same file gives the same numbers)
    seed_source: str
    raw: dict
    #: "plan" (a plan file) or "command" (a command's options: messages name the options)
    source: str = "plan"
    #: the name messages start with: the plan file, or a command's first input
    where: str = ""

    def updated(self, changes: dict[str, Any]) -> "Plan":
        """This plan with some keys set anew (``{"crs.n_weights": 0, "scheduler": addr}``;
        dotted paths of the schema): the API's and the tests' way to vary one setting."""
        spec = self.spec
        for path, value in changes.items():
            spec = _set_path(spec, path.split("."), value)
        return replace(self, spec=spec)

    def key(self, path: str) -> str:
        """A key as this plan's reader knows it: ``key 'detection.ci'`` in a plan file,
        ``option --ci`` on a command line."""
        return _key_text(path, self.source)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.spec, name)

    # inputs, for the readers
    @property
    def cases(self) -> Path | None:
        return self.spec.inputs.cases

    @property
    def runs(self) -> Path | None:
        return self.spec.inputs.runs

    @property
    def reference(self) -> Path | None:
        return self.spec.inputs.reference

    @property
    def metadata(self) -> Path | None:
        return self.spec.inputs.metadata

    @property
    def probe_predictions(self) -> Path | None:
        return self.spec.inputs.probe_predictions

    @property
    def lesions(self) -> Path | None:
        return self.spec.inputs.lesions

    @property
    def metadata_options(self) -> Metadata | None:
        return self.spec.metadata

    @property
    def inputs(self) -> dict[str, Path]:
        return {k: v for k, v in self.spec.inputs.model_dump().items() if v is not None}

    @property
    def limits(self) -> dict:
        return {k: v for k, v in self.spec.limits.model_dump().items() if v is not None}

    @property
    def roles(self) -> dict:
        return self.spec.roles.model_dump()

    # seeds: one root, one stream per name, a block's seed overrides its streams
    def _override(self, stream: str) -> int | None:
        s = self.spec
        return {"detection_bootstrap": s.detection and s.detection.bootstrap.seed,
                "crs_bootstrap": s.crs and s.crs.bootstrap.seed,
                "crs_stability": s.crs and s.crs.bootstrap.seed,
                **{stream: s.crs and s.crs.bootstrap.seed for stream in CRS_STREAMS},
                "calibration_bootstrap": s.calibration.bootstrap.seed,
                "label_error_imputation": s.metadata and s.metadata.seed,
                "gap_bootstrap": s.detection and s.detection.gaps and s.detection.gaps.seed,
                "operating_bootstrap": s.detection and s.detection.operating_points
                and s.detection.operating_points.seed,
                "lesion_bootstrap": s.detection and s.detection.lesions
                and s.detection.lesions.seed}.get(stream)

    def seed_for(self, stream: str) -> int:
        """The seed of one random stream: the block's own seed where the plan gives one,
        else ``SeedSequence(root, spawn_key=(crc32(stream),))``'s first 63 bits."""
        given = self._override(stream)
        if given is not None:
            return int(given)
        ss = np.random.SeedSequence(self.seed, spawn_key=(zlib.crc32(stream.encode()),))
        return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))

    @property
    def seeds(self) -> dict[str, int]:
        """The root seed and every stream this plan's analyses draw from."""
        s = self.spec
        out = {"root": self.seed}
        if s.detection is not None and s.detection.bootstrap.n_boot:
            out["detection_bootstrap"] = self.seed_for("detection_bootstrap")
        if s.crs is not None:
            out["crs_bootstrap"] = self.seed_for("crs_bootstrap")
            out["crs_stability"] = self.seed_for("crs_stability")
            out.update({stream: self.seed_for(stream) for stream in CRS_STREAMS})
        if s.metadata is not None and s.metadata.label_error is not None:
            out["label_error_imputation"] = self.seed_for("label_error_imputation")
        if s.detection is not None and s.detection.gaps is not None:
            out["gap_bootstrap"] = self.seed_for("gap_bootstrap")
        if s.detection is not None and s.detection.operating_points is not None:
            out["operating_bootstrap"] = self.seed_for("operating_bootstrap")
        if s.detection is not None and s.detection.lesions is not None \
                and s.detection.lesions.n_boot:
            out["lesion_bootstrap"] = self.seed_for("lesion_bootstrap")
        return out


def _set_path(model: BaseModel, parts: list[str], value) -> BaseModel:
    head, rest = parts[0], parts[1:]
    if not rest:
        return model.model_copy(update={head: value})
    return model.model_copy(update={head: _set_path(getattr(model, head), rest, value)})


def _translate(exc: ValidationError, file: str, source: str = "plan") -> PlanError:
    """The first refusal of a validation, in the plan's words: the file, the key (or, for a
    command's own plan, the option that sets it), the value and the fix."""
    err = exc.errors(include_url=False)[0]
    loc = [x for x in err["loc"] if not (isinstance(x, str) and (
        x.startswith("function-") or x in ("str", "float", "int", "bool", "tuple",
                                            "literal['auto']", "none", "Threshold")))]
    parts: list[str] = []
    for x in loc:
        if isinstance(x, int):
            parts[-1:] = [f"{parts[-1]}[{x}]"] if parts else [f"[{x}]"]
        elif isinstance(x, str) and not x.startswith(("literal[", "tuple[", "union[")):
            parts.append(x)
    path = ".".join(parts)
    where = path.rsplit(".", 1)[0] if err["type"] == "extra_forbidden" else path
    value = err.get("input")

    def name(k: str) -> str:
        return _key_text(k, source)

    if err["type"] == "plan":
        return PlanError(_fill(err["msg"], path, file, source))
    try:
        decl = declared(path if err["type"] != "extra_forbidden" else where)
    except KeyError:
        decl = None
    hint = decl.hint if decl else "fix the value"
    if err["type"] == "extra_forbidden":
        bad = str(loc[-1])
        model = _model_at(where)
        allowed = [n for n, _, _ in _fields(model)] if model else []
        close = difflib.get_close_matches(bad, allowed, n=1)
        return PlanError(MSG_KEY.format(file=file, key=bad,
                                        where=f" under '{where}'" if where and where != bad else "",
                                        allowed=", ".join(allowed),
                                        hint=f"did you mean '{close[0]}'?" if close
                                        else "remove it or fix its spelling"))
    if err["type"] == "missing":
        return PlanError(MSG_MISSING.format(file=file, key=name(path), hint=hint))
    if err["type"] == "literal_error" and decl is not None and decl.allowed and decl.type in (
            "text", "prespecified or exploratory", "a list of texts"):
        expected = "one of " + decl.allowed.replace("`", "")
    else:
        expected = (decl.type if decl else "") or err["msg"]
    if err["type"] in ("too_long",) and decl is not None and decl.cap:
        return PlanError(MSG_LIST_CAP.format(file=file, key=name(path), n=len(value),
                                             cap=decl.cap[0], what=decl.cap[1]))
    if value is not None and isinstance(value, dict) and err["type"] == "model_type":
        expected = "a mapping (key: value lines)"
    return PlanError(MSG_TYPE.format(file=file, key=name(path), expected=expected, got=value,
                                     hint=hint))


def _option_name(path: str, source: str) -> str | None:
    """The option that sets ``path`` on a command line (a key inside a user-named mapping
    or a list finds its declaration's option); None for a plan file, or no option."""
    if source != "command":
        return None
    opt = option_of(path)
    if opt is None and path in ("detection", "detection.subgroups"):
        return "--by"
    if opt is None and path.startswith("detection.bins"):
        return "--bin"
    if opt is None and "." in path and path.count(".") > 1:
        return _option_name(path.rsplit(".", 1)[0], source)
    return opt


def _key_text(path: str, source: str) -> str:
    """A key as its reader knows it: ``key 'detection.ci'`` in a plan file, ``option --ci``
    for a command's own plan."""
    import re

    opt = _option_name(re.sub(r"\[\d+\]$", "", path), source)
    return f"option {opt}" if opt else f"key '{path}'"


def _fill(template: str, path: str, file: str, source: str) -> str:
    """A refusal written in a rule (``_fail``): ``{file}``; ``{at}`` the key the error is
    about; ``{at.NAME}`` a key inside the model the rule belongs to (the model itself for a
    model rule, the field's parent otherwise); ``{at[i]}`` an item of the key's list;
    ``{root.PATH}`` a key by its whole path. Each becomes ``key '...'`` or, for a
    command's own plan, the option that sets it."""
    import re

    model_rule = path != "" and _model_at(path) is not None
    prefix = path if model_rule else (path.rsplit(".", 1)[0] if "." in path else "")

    def sub(m):
        kind, rest = m.group(1), m.group(2) or ""
        if kind == "root":
            return _key_text(rest.lstrip("."), source)
        if rest.startswith("["):
            return _key_text(path + rest, source)
        if rest:
            return _key_text((f"{prefix}." if prefix else "") + rest.lstrip("."), source)
        return _key_text(path, source)

    text = re.sub(r"\{(at|root)((?:\.[\w.<>\[\]]+)|(?:\[\d+\]))?\}", sub, template)
    return text.replace("{file}", file)


def _model_at(path: str):
    model = PlanSpec
    for part in [p for p in path.split(".") if p]:
        f = model.model_fields.get(part)
        if f is None:
            if part and model is not None:   # a user-named key (a bin's column)
                continue
            return None
        model = _model_of(f.annotation)
        if model is None:
            return None
    return model


def from_stats(file: str, key: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a ContractError it raises becomes a PlanError naming the
    plan file and the key (``key``: the text, :meth:`Plan.key`; each once: a message
    starting with them is trimmed)."""
    try:
        return fn(*args, **kwargs)
    except ContractError as exc:
        message = str(exc)
        for prefix in (f"{file}: ", f"{key}: "):
            message = message[len(prefix):] if message.startswith(prefix) else message
        raise PlanError(MSG_FROM_STATS.format(file=file, key=key, message=message)) from None


def _caps(spec: PlanSpec, file: str, source: str) -> None:
    """The declared caps of the plan's lists (``cap`` of :func:`key`)."""
    def walk(model: BaseModel, prefix: str):
        for name, f, extra in _fields(type(model)):
            value = getattr(model, name)
            path = f"{prefix}.{name}" if prefix else name
            cap = extra.get("cap")
            if cap and isinstance(value, (tuple, dict)) and len(value) > cap[0]:
                raise PlanError(MSG_LIST_CAP.format(file=file, key=_key_text(path, source),
                                                    n=len(value), cap=cap[0], what=cap[1]))
            if isinstance(value, BaseModel):
                walk(value, path)
            elif isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(v, BaseModel):
                        walk(v, f"{path}.{k}")
                    elif cap and isinstance(v, tuple) and len(v) > cap[0]:
                        raise PlanError(MSG_LIST_CAP.format(file=file,
                                                            key=_key_text(f"{path}.{k}", source),
                                                            n=len(v), cap=cap[0], what=cap[1]))
    walk(spec, "")


def _planned_work(plan: Plan, file: str) -> None:
    """A first, data-free check of every planned count that sizes an allocation
    (``stats.limits.ESTIMATED``): the smallest data (one cluster, cell, model, encoder or
    row) already needs this much, so an absurd count is refused before any input is read,
    naming the key, the estimate and the cap to raise."""
    from stats import limits
    from stats.bootstrap import cluster_bootstrap_work
    from stats.calibration import ece_bootstrap_work
    from stats.crs_resample import crs_bootstrap_work
    from stats.label_error import imputation_work
    from stats.operating import roc_bootstrap_work
    from stats.ranking import ranking_stability_work

    s = plan.spec
    floor = "a lower bound, before the data are read"
    works = []
    if s.detection is not None and s.detection.bootstrap.n_boot:
        n = s.detection.bootstrap.n_boot
        works.append(("detection.bootstrap.n_boot", cluster_bootstrap_work(
            n, 1, 1, 1, setting="detection.bootstrap.n_boot", what="the bootstrap")))
    if s.crs is not None:
        works.append(("crs.bootstrap.n_boot", crs_bootstrap_work(
            s.crs.bootstrap.n_boot, [(1, [1], [1])], setting="crs.bootstrap.n_boot",
            what="the CRS bootstrap")))
        if s.crs.n_weights:
            works.append(("crs.n_weights", ranking_stability_work(
                s.crs.n_weights, 1, setting="crs.n_weights")))
    if s.detection is not None and s.detection.operating_points is not None:
        works.append(("detection.operating_points.n_boot", roc_bootstrap_work(
            s.detection.operating_points.n_boot, 1, 1, 1,
            setting="detection.operating_points.n_boot", what="the ROC bootstrap")))
    works.append(("calibration.bootstrap.n_boot", ece_bootstrap_work(
        s.calibration.bootstrap.n_boot, 1, 1, "uniform", setting="calibration.bootstrap.n_boot",
        what="the ECE bootstrap")))
    if s.metadata is not None and s.metadata.label_error is not None:
        works.append(("metadata.n_imputations", imputation_work(
            s.metadata.n_imputations, 1, setting="metadata.n_imputations")))
    with limits.using(plan.limits, file):
        for k, work in works:
            try:
                limits.check(replace(work, detail=floor))
            except ContractError as exc:
                raise PlanError(MSG_FROM_STATS.format(file=file, key=plan.key(k),
                                                      message=exc)) from None


def derived_seed(sha256_hex: str) -> int:
    """The root seed of a plan without a ``seed`` key: the first 63 bits of
    ``sha256("clinrel root seed" + the plan's sha256)``; recorded as ``seeds.root``."""
    digest = hashlib.sha256(b"clinrel root seed\0" + sha256_hex.encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def plan_from_dict(raw: dict, *, path: Path, sha256: str = "", source: str = "plan",
                   where: str | None = None) -> Plan:
    """Validate a parsed plan (``raw``) read from ``path`` and return a :class:`Plan`.
    ``source="command"``: the plan of a command's options, whose refusals name the option
    and start with ``where`` (the command's first input)."""
    path = Path(path)
    file = where or str(path)
    if not isinstance(raw, dict):
        raise PlanError(f"{file}: a plan must be a YAML mapping of keys (version, title, inputs, "
                        "detection, crs, ...); see clinrel/demo_data/plan.yaml")
    try:
        spec = PlanSpec.model_validate(raw, context={"base": str(path.parent)}, strict=True)
    except ValidationError as exc:
        raise _translate(exc, file, source) from None
    _caps(spec, file, source)
    if spec.seed is not None:
        seed, seed_source = int(spec.seed), "plan"
    else:   # derived from the plan itself: the same plan gives the same numbers
        content = sha256 or hashlib.sha256(json.dumps(raw, sort_keys=True, default=str)
                                           .encode()).hexdigest()
        seed, seed_source = derived_seed(content), "plan sha256"
    plan = Plan(spec=spec, path=path, sha256=sha256, seed=seed, seed_source=seed_source, raw=raw,
                source=source, where=file)
    if "limits" in raw:
        from stats import limits

        try:
            limits.parse_limits(raw.get("limits"), file=file)
        except ContractError as exc:
            raise PlanError(str(exc)) from None
    _planned_work(plan, file)
    return plan


def load_plan(path) -> Plan:
    """Read and validate ``plan.yaml``.

    Raises
    ------
    PlanError
        The file is missing or not YAML, a key is unknown or mistyped, a path does not
        exist; the message names the file, the key and the fix.
    """
    path = Path(path)
    if not path.is_file():
        raise PlanError(f"{path}: plan file not found; give the path of a plan.yaml "
                        "(clinrel report --demo writes the demo's)")
    from stats.limits import read_yaml

    try:  # at most MAX_YAML_BYTES, UTF-8, no aliases (a 455-byte alias bomb is refused)
        raw = read_yaml(path, kind="plan")
    except ContractError as exc:
        raise PlanError(str(exc)) from None
    return plan_from_dict(raw, path=path.resolve(),
                          sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def plan_for_tables(*, detection: dict | None = None, crs: dict | None = None,
                    seed: int = 0, where: str = "<tables>", **top) -> Plan:
    """A plan for tables already in memory (``analysis.run(plan, Tables(...))`` from Python,
    and the tests): the same schema and defaults as a plan file, without ``inputs``."""
    raw = {"inputs": {}, **top}
    if detection is not None:
        raw["detection"] = detection
    if crs is not None:
        raw["crs"] = crs
    raw.setdefault("seed", seed)
    try:
        spec = PlanSpec.model_validate(raw, context={"tables_given": True}, strict=True)
    except ValidationError as exc:
        raise _translate(exc, where) from None
    return Plan(spec=spec, path=Path(where), sha256="", seed=int(spec.seed),
                seed_source="plan", raw=raw, where=where)


#: the name a plan built from command-line options carries in its messages
COMMAND_LINE = "<command line>"


def plan_for_command(*, inputs: dict, detection: dict | None = None, crs: dict | None = None,
                     scheduler: str | None = None, seed: int | None = None) -> Plan:
    """A plan built from a command's options (the CLI's way into :func:`analysis.run`).

    ``inputs`` maps input names to paths; ``detection`` and ``crs`` are plan blocks with the
    plan's own keys, so a command and a plan file with the same settings give the same
    Plan, the same analysis and the same tables; refusals name the options. Identifier
    columns are allowed: a command writes tidy tables only.
    """
    raw: dict = {"inputs": {k: str(Path(v).absolute()) for k, v in inputs.items()
                            if v is not None},
                 "privacy": {"allow_identifiers": True}}
    if detection is not None:
        raw["detection"] = detection
    if crs is not None:
        raw["crs"] = crs
    if scheduler is not None:
        raw["scheduler"] = scheduler
    if seed is not None:
        raw["seed"] = seed
    first = next((str(v) for v in inputs.values() if v is not None), COMMAND_LINE)
    return plan_from_dict(raw, path=Path.cwd() / COMMAND_LINE, source="command", where=first)
