"""The analysis plan (``plan.yaml``): what the report computes, validated before any work.

A plan names the input tables and, for each half of the report (``detection`` and
``crs``), the prespecified choices: threshold, CI method, subgroup axes and bins,
bootstrap size and seed, adjusted models, CRS bootstrap. Either half may be left out;
the report then leaves out its sections. Unknown keys are rejected (a typo must not
silently fall back to a default). Relative paths are read from the plan file's folder.

``load_plan(path)`` returns a :class:`Plan`; every problem raises :class:`PlanError`
naming the file, the key and the fix. ``Plan.sha256`` is the hash of the plan file's
bytes, recorded in the manifest and the methods section.

The file is read by ``stats.limits.read_yaml`` (UTF-8, at most 1 MiB, YAML aliases
refused: no "billion laughs"). Values that would be reported on instead of refused are
refused here: a NaN or infinite threshold, replicate counts below 2, ``small_n`` or ``k``
below 1, seeds outside ``stats._rng.check_seed``'s rule, a bin named after a column
clinrel reads or writes, NaN breaks, repeated bin labels, formulas outside
``stats.formula``'s grammar, a subgroup axis that does not group cases (``NOT_AXES``: the
score, the label, an id), an intersection naming a column twice, lists longer than their
fixed caps (``stats.limits.COUNT_CAPS``: bin breaks, axes). The optional ``limits`` block
(``stats.limits.CAPS``: ``max_memory_gb``, ``max_rows``, ``max_hours``, ``max_file_gb``,
``max_columns``) raises or lowers the caps of :mod:`stats.limits`; a planned count that
sizes an allocation (``stats.limits.ESTIMATED``: replicates, weight draws, imputations)
whose smallest possible work is already above them is refused at load time.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, get_args


from stats.adjust import MeansKind
from stats.bootstrap import CI_METHODS as BOOT_INTERVALS
from stats.detection import Criterion
from stats.models import Method, Population
from stats.schema import ContractError
from stats.intervals import AUC_SCALES, PROPORTION_METHODS

#: proportion intervals; "bootstrap" puts every count metric on the cluster bootstrap
CI_METHODS = (*PROPORTION_METHODS, "bootstrap")
# choice lists come from the stats signatures (one definition: the Literal types)
CRITERIA = get_args(Criterion)
ADJUST_METHODS = get_args(Method)
BLOCKS = ("site", "protocol", "demographics", "tumour")

MSG_KEY = "{file}: unknown key '{key}'{where}; allowed keys: {allowed}; {hint}"
MSG_TYPE = "{file}: key '{key}' must be {expected}, got {got!r}; {hint}"
MSG_MISSING = "{file}: required key '{key}' is missing; {hint}"
MSG_FROM_STATS = "{file}: key '{key}': {message}"
MSG_BIN_NAME = ("{file}: key '{key}' is {name!r}, a column clinrel reads or writes itself; a bin "
                "adds a new column, so give it a new name, e.g. {suggest!r}")
MSG_BIN_NAME_TWICE = ("{file}: keys '{key}' and '{other}' both create the column {name!r}; give "
                      "each bin its own name")
MSG_BIN_LABELS_DUP = ("{file}: key '{key}' repeats the label(s) {labels}; each interval needs its "
                      "own label")
MSG_COUNT = ("{file}: key '{key}' must be a whole number >= {low} ({what}); got {got!r}; {hint}")

MSG_AXIS_TWICE = ("{file}: key '{key}' is the intersection {axis!r}, which names column "
                  "{column!r} twice; an intersection crosses different columns, e.g. "
                  "[age_group, phase]")
MSG_AXIS_REPEATED = ("{file}: key '{key}' lists the axis {axis!r} twice; list each axis once")
MSG_NOT_AXIS = ("{file}: key '{key}' names {column!r} as a subgroup axis, but it is {why}; "
                "name a column that groups cases (site, phase, sex, a bin, ...)")
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


class PlanError(ContractError):
    """The plan file is unreadable or breaks the plan schema; the message says how to fix it."""


@dataclass(frozen=True)
class Bin:
    """Cut a numeric column into a categorical one: ``pd.cut(column, breaks, labels)``."""

    column: str
    name: str
    breaks: tuple[float, ...]
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Detection:
    threshold_value: float | None = None
    criterion: str | None = None
    target: float | None = None
    ci: str = "wilson"
    auc_scale: str = "auto"
    conf_level: float = 0.95
    subgroups: tuple[tuple[str, ...], ...] = (("phase",),)
    bins: tuple[Bin, ...] = ()
    small_n: int = 10
    n_boot: int = 0
    seed: int | None = None
    #: the seed was drawn when the plan was read (the plan gave none): recorded, but
    #: other analyses do not borrow it in place of their own fixed default
    seed_drawn: bool = False
    strata: str | None = None
    boot_ci: str = "percentile"
    #: calls come from the table's own ``pred`` column (no threshold applied)
    given_calls: bool = False
    #: axes of the paired model comparisons besides overall (the report: overall only)
    compare_by: tuple[tuple[str, ...], ...] = ()
    #: subgroup axes analysed as exploratory (labelled so, outside the multiplicity family)
    exploratory_subgroups: tuple[tuple[str, ...], ...] = ()
    #: the failure map shows partially pooled (GLMM) cell estimates beside the crude ones
    pooled: bool = True
    #: precision section: target CI half-width and the ICC of repeated scans (None: from data)
    target_half_width: float = 0.05
    icc: float | None = None
    #: cluster of the intervals and tests: "auto" (patient_id when a patient has several
    #: scans), a column name, or None (scans independent)
    cluster: str | None = "auto"
    adjusted: dict[str, Any] | None = None
    failure_map: tuple[str, str] | None = None

    @property
    def prespecified_threshold(self) -> bool:
        return self.threshold_value is not None


@dataclass(frozen=True)
class Crs:
    n_boot: int = 10_000
    seed: int | None = None
    #: the seed was drawn when the plan was read (the plan gave none): recorded, but
    #: other analyses do not borrow it in place of their own fixed default
    seed_drawn: bool = False
    k: int = 3
    n_weights: int = 1000
    conf_level: float = 0.95


@dataclass(frozen=True)
class Calibration:
    n_boot: int = 1000
    seed: int | None = None


@dataclass(frozen=True)
class MetadataOptions:
    """The plan's ``metadata`` block: how extraction error reaches the subgroup intervals.

    ``label_error``: None (naive intervals only), ``"estimate"`` (a label-error table
    estimated from the evidence: ``stats.label_error.misclassification_from_review``) or
    the Path of a given table (``field, recorded_value, true_value, probability``);
    ``prefer``: extractor order of the recorded value where no review exists;
    ``n_imputations`` and ``seed`` of the multiple imputation; ``per_patient``: the
    fields recorded once per patient (None: ``auto``, read from the data)."""

    label_error: str | Path | None = None
    prefer: tuple[str, ...] = ()
    n_imputations: int = 50
    seed: int | None = None
    per_patient: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Privacy:
    allow_identifiers: bool = False
    pseudonymize_ids: bool = False
    salt: str | None = None


@dataclass(frozen=True)
class Plan:
    path: Path
    sha256: str
    version: int
    title: str
    cases: Path | None
    runs: Path | None
    reference: Path | None
    metadata: Path | None
    probe_predictions: Path | None
    detection: Detection | None
    crs: Crs | None
    privacy: Privacy = field(default_factory=Privacy)
    calibration: Calibration = field(default_factory=Calibration)
    #: the ``metadata`` block (None: no error-aware intervals)
    metadata_options: MetadataOptions | None = None
    prespecified: tuple[str, ...] = ()
    exploratory: tuple[str, ...] = ()
    #: the ``roles`` block: analysis -> "prespecified" or "exploratory" (ROLE_DEFAULTS)
    roles: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False)
    #: Dask scheduler address for the bootstrap, per-model fits and CRS replicates
    #: (None: this process). Results are identical either way, so it is not part of the
    #: analysis: ``clinrel report --scheduler`` overrides it.
    scheduler: str | None = None
    #: the plan's ``limits`` block (validated caps that override the environment and the
    #: defaults of :mod:`stats.limits`; empty: none given)
    limits: dict = field(default_factory=dict)

    @property
    def inputs(self) -> dict[str, Path]:
        names = ("cases", "runs", "reference", "metadata", "probe_predictions")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @property
    def seeds(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        if self.detection is not None and self.detection.n_boot:
            out["detection_bootstrap"] = self.detection.seed
        if self.crs is not None:
            out["crs_bootstrap"] = self.crs.seed
        if self.metadata_options is not None and self.metadata_options.label_error is not None:
            out["label_error_imputation"] = self.metadata_options.seed
        return out


# --------------------------------------------------------------------------- validation


class _Checker:
    def __init__(self, file: str):
        self.file = file

    def keys(self, mapping: Any, allowed: dict[str, str], where: str) -> dict:
        if mapping is None:
            return {}
        if not isinstance(mapping, dict):
            raise PlanError(MSG_TYPE.format(file=self.file, key=where or "(top level)",
                                            expected="a mapping (key: value lines)", got=mapping,
                                            hint="indent its keys under it"))
        for key in mapping:
            if key not in allowed:
                raise PlanError(MSG_KEY.format(
                    file=self.file, key=key, where=f" under '{where}'" if where else "",
                    allowed=", ".join(allowed), hint=_closest_hint(str(key), allowed)))
        return mapping

    def typed(self, value: Any, key: str, kinds, expected: str, hint: str = "fix the value"):
        kinds_t = kinds if isinstance(kinds, tuple) else (kinds,)
        if isinstance(value, bool) and bool not in kinds_t:
            ok = False
        else:
            ok = isinstance(value, kinds)
        if not ok:
            raise PlanError(MSG_TYPE.format(file=self.file, key=key, expected=expected, got=value,
                                            hint=hint))
        return value

    def choice(self, value: Any, key: str, choices) -> str:
        if value not in choices:
            raise PlanError(MSG_TYPE.format(file=self.file, key=key,
                                            expected="one of " + ", ".join(choices), got=value,
                                            hint="use one of the listed names"))
        return value

    def required(self, mapping: dict, key: str, where: str, hint: str):
        if key not in mapping or mapping[key] is None:
            raise PlanError(MSG_MISSING.format(file=self.file, key=f"{where}.{key}" if where else key,
                                               hint=hint))
        return mapping[key]


def _closest_hint(key: str, allowed) -> str:
    import difflib

    if RENAMED.get(key) in allowed:
        return f"the key is now called '{RENAMED[key]}' (one name per option; README glossary)"
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return f"did you mean '{close[0]}'?" if close else "remove it or fix its spelling"


#: keys renamed when the vocabulary was unified (the plan error says the new name)
RENAMED = {"n": "n_boot", "interval": "boot_ci", "auc_ci": "auc_scale"}


TOP_KEYS = {"version": "", "title": "", "inputs": "", "detection": "", "crs": "", "privacy": "",
            "prespecified": "", "exploratory": "", "scheduler": "", "limits": "",
            "calibration": "", "metadata": "", "roles": ""}
#: analyses whose role (prespecified or exploratory) the plan's ``roles`` block may set,
#: with their default; subgroup axes take theirs from detection.subgroups /
#: exploratory_subgroups, the failure map from its axis
ROLE_DEFAULTS = {"overall": "prespecified", "precision": "prespecified",
                 "sensitivity_collapse": "prespecified", "threshold_sweep": "exploratory",
                 "pooled": "exploratory", "adjusted": "prespecified",
                 "comparisons": "prespecified", "calibration": "prespecified",
                 "crs": "prespecified", "crs_stability": "prespecified",
                 "metadata": "prespecified", "label_error": "prespecified"}
ROLE_VALUES = ("prespecified", "exploratory")
INPUT_KEYS = {"cases": "", "runs": "", "reference": "", "metadata": "", "probe_predictions": ""}
DETECTION_KEYS = {"threshold": "", "ci": "", "auc_scale": "", "compare_by": "",
                  "exploratory_subgroups": "", "cluster": "", "precision": "", "conf_level": "", "subgroups": "", "bins": "",
                  "small_n": "", "bootstrap": "", "adjusted": "", "failure_map": ""}
THRESHOLD_KEYS = {"value": "", "criterion": "", "target": "", "given": ""}
BIN_KEYS = {"name": "", "breaks": "", "labels": ""}
BOOT_KEYS = {"n_boot": "", "seed": "", "strata": "", "boot_ci": ""}
ADJ_KEYS = {"formula": "", "methods": "", "group": "", "blocks": "", "population": "",
            "nagq": "", "levels": "", "model": "", "bias_reduced": "", "means": "",
            "means_kind": "", "units": ""}
MEANS_KINDS = get_args(MeansKind)
FMAP_KEYS = {"rows": "", "cols": "", "pooled": ""}
PRECISION_KEYS = {"target_half_width": "", "icc": ""}
CRS_KEYS = {"bootstrap": "", "k": "", "n_weights": "", "conf_level": ""}
CRS_BOOT_KEYS = {"n_boot": "", "seed": ""}
CAL_KEYS = {"bootstrap": ""}
CAL_BOOT_KEYS = {"n_boot": "", "seed": ""}
POPULATIONS = get_args(Population)
PRIVACY_KEYS = {"allow_identifiers": "", "pseudonymize_ids": "", "salt": ""}
METADATA_KEYS = {"label_error": "", "prefer": "", "n_imputations": "", "seed": "",
                 "per_patient": ""}


def _notes(c: _Checker, value, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    c.typed(value, key, list, "a text or a list of texts")
    return tuple(str(v) for v in value)


def _seed(c: _Checker, value, key: str) -> int | None:
    """A seed by the one rule of :func:`stats._rng.check_seed` (a whole number 0..2**63-1)."""
    from stats._rng import check_seed

    return _from_stats(c, key, lambda: check_seed(value, key=key))


def _drawn_if_none(seed: int | None, n_boot) -> int | None:
    """The plan's bootstrap seed, or, when the plan asks for replicates without one, a seed
    drawn once here, when the plan is read, so every analysis of the run uses the same one
    and the manifest records it (``seeds.detection_bootstrap``): a run is repeatable."""
    if seed is None and n_boot:
        import secrets

        return secrets.randbits(63)
    return seed


def _from_stats(c: _Checker, where: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; a ContractError it raises becomes a PlanError naming the
    plan file and the key ``where`` (each once: a message starting with them is trimmed)."""
    from stats.schema import ContractError

    try:
        return fn(*args, **kwargs)
    except ContractError as exc:
        message = str(exc)
        for prefix in (f"{c.file}: ", f"{where}: "):
            message = message[len(prefix):] if message.startswith(prefix) else message
        raise PlanError(MSG_FROM_STATS.format(file=c.file, key=where, message=message)) from None


def _count(c: _Checker, value, key: str, low: int, what: str, hint: str) -> int:
    """A whole number >= ``low`` (replicates, small_n, k): bools, floats, NaN and smaller
    numbers are refused, and so is a count above its fixed cap
    (``stats.limits.COUNT_CAPS``: a count that sizes an allocation)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PlanError(MSG_COUNT.format(file=c.file, key=key, low=low, what=what, got=value,
                                         hint=hint))
    return _capped(c, int(value), key, hint)


def _capped(c: _Checker, value: int, key: str, hint: str = "") -> int:
    """``value``, refused above its fixed cap (``stats.limits.check_count``)."""
    from stats import limits

    try:
        return limits.check_count(value, key=key, file=c.file, hint=hint.replace("write ", ""))
    except ContractError as exc:
        raise PlanError(str(exc)) from None


def _short(c: _Checker, items, key: str):
    """``items``, refused when longer than the fixed cap of ``key``
    (``stats.limits.check_length``): a list that sets how much work is done."""
    from stats import limits

    try:
        return limits.check_length(items, key=key, file=c.file)
    except ContractError as exc:
        raise PlanError(str(exc)) from None


def _finite(c: _Checker, value, key: str, expected: str, hint: str) -> float:
    """A finite number (NaN and infinities are refused: a NaN threshold calls every case
    negative)."""
    c.typed(value, key, (int, float), expected, hint)
    if not math.isfinite(value):
        raise PlanError(MSG_TYPE.format(file=c.file, key=key, expected=expected, got=value,
                                        hint=hint))
    return float(value)


def _path(c: _Checker, base: Path, value, key: str) -> Path | None:
    if value is None:
        return None
    c.typed(value, key, str, "a file path (relative to the plan file)")
    p = Path(value)
    p = p if p.is_absolute() else (base / p)
    if not p.is_file():
        raise PlanError(f"{c.file}: key '{key}' names {p}, which does not exist; "
                        f"paths are read relative to the plan file's folder ({base})")
    return p


def _axes(c: _Checker, value, key: str) -> list[tuple[str, ...]]:
    """Subgroup axes: column names, or lists of 2+ names for intersections. Refused: more
    axes, or an intersection of more columns, than the caps of ``stats.limits``; an
    intersection naming a column twice (``phase:phase``); an axis given twice; a column
    that is not a grouping of cases (``NOT_AXES``: the score, the label, an id)."""
    out = []
    value = _short(c, c.typed(value, key, list, "a list of column names or [a, b] pairs"), key)
    for i, s in enumerate(value):
        if isinstance(s, str):
            axis = (s,)
        elif isinstance(s, list) and len(s) >= 2 and all(isinstance(x, str) for x in s):
            axis = tuple(_short(c, s, f"{key}[{i}]"))
        else:
            raise PlanError(MSG_TYPE.format(file=c.file, key=f"{key}[{i}]",
                                            expected="a column name or a list of 2+ names",
                                            got=s, hint="write e.g. phase or [age_group, phase]"))
        twice = sorted({x for x in axis if axis.count(x) > 1})
        if twice:
            raise PlanError(MSG_AXIS_TWICE.format(file=c.file, key=f"{key}[{i}]",
                                                  axis=":".join(axis), column=twice[0]))
        for col in axis:
            _not_an_axis(c, col, f"{key}[{i}]")
        if axis in out:
            raise PlanError(MSG_AXIS_REPEATED.format(file=c.file, key=key, axis=":".join(axis)))
        out.append(axis)
    return out


def _not_an_axis(c: _Checker, column: str, key: str) -> None:
    """Refuse a column of ``NOT_AXES`` named as a subgroup axis."""
    if column in NOT_AXES:
        raise PlanError(MSG_NOT_AXIS.format(file=c.file, key=key, column=column,
                                            why=NOT_AXES[column]))


def _conf_level(c: _Checker, value, key: str) -> float:
    """A confidence level: a number strictly between 0 and 1."""
    conf = float(c.typed(value, key, (int, float), "a number in (0, 1)"))
    if not 0 < conf < 1:
        raise PlanError(MSG_TYPE.format(file=c.file, key=key, expected="a number in (0, 1)",
                                        got=conf, hint="write e.g. 0.95, not 95"))
    return conf


def _cluster(c: _Checker, value):
    """``detection.cluster``: auto, a column name, or none."""
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    value = c.typed(value, "detection.cluster", str,
                    "auto, a column name such as patient_id, or none", "write e.g. cluster: auto")
    return "auto" if value.lower() == "auto" else value


def _detection(c: _Checker, d: dict) -> Detection:
    c.keys(d, DETECTION_KEYS, "detection")
    thr = c.keys(d.get("threshold") or {}, THRESHOLD_KEYS, "detection.threshold")
    value = criterion = target = None
    given = bool(c.typed(thr.get("given", False), "detection.threshold.given", bool,
                         "true (use the table's pred column) or false"))
    if given:
        if len(thr) > 1:
            raise PlanError(f"{c.file}: key 'detection.threshold.given' uses the table's own "
                            "pred column, so 'value', 'criterion' and 'target' do not apply; "
                            "remove them or 'given'")
    elif "value" in thr:
        value = _finite(c, thr["value"], "detection.threshold.value", "a finite number",
                        "write the prespecified threshold, e.g. value: 50")
        if "criterion" in thr:
            raise PlanError(f"{c.file}: key 'detection.threshold' gives both 'value' and "
                            "'criterion'; keep 'value' for a prespecified threshold or "
                            "'criterion' to choose one on the validation split")
    else:
        criterion = c.choice(thr.get("criterion", "youden"), "detection.threshold.criterion", CRITERIA)
        if criterion == "target_specificity":
            target = float(c.typed(c.required(thr, "target", "detection.threshold",
                                              "give the target specificity, e.g. target: 0.9"),
                                   "detection.threshold.target", (int, float), "a number in (0, 1)"))
            if not 0 < target < 1:
                raise PlanError(MSG_TYPE.format(file=c.file, key="detection.threshold.target",
                                                expected="a number in (0, 1)", got=target,
                                                hint="write a proportion, e.g. 0.9"))
    ci = c.choice(d.get("ci", "wilson"), "detection.ci", CI_METHODS)
    auc_scale = c.choice(d.get("auc_scale", "auto"), "detection.auc_scale", AUC_SCALES)
    conf = _conf_level(c, d.get("conf_level", 0.95), "detection.conf_level")
    subgroups = _axes(c, d.get("subgroups", ["phase"]), "detection.subgroups")
    compare_by = _axes(c, d.get("compare_by", []), "detection.compare_by")
    exploratory_axes = _axes(c, d.get("exploratory_subgroups", []),
                             "detection.exploratory_subgroups")
    twice = sorted(set(subgroups) & set(exploratory_axes))
    if twice:
        raise PlanError(f"{c.file}: key 'detection.exploratory_subgroups' repeats "
                        f"{', '.join(':'.join(a) for a in twice)} from 'detection.subgroups'; an "
                        "axis is either prespecified (subgroups) or exploratory, not both")
    bins = []
    raw_bins = _short(c, c.typed(d.get("bins") or {}, "detection.bins", dict,
                                 "a mapping column -> {name, breaks, labels}"), "detection.bins")
    for col, spec in raw_bins.items():
        spec = c.keys(spec, BIN_KEYS, f"detection.bins.{col}")
        key = f"detection.bins.{col}"
        breaks = c.typed(c.required(spec, "breaks", key, "give the cut points, e.g. [0, 40, 60]"),
                         f"{key}.breaks", list, "a list of increasing numbers (.inf allowed)")
        _short(c, breaks, f"{key}.breaks")
        try:
            breaks = tuple(float(b) for b in breaks)
        except (TypeError, ValueError):
            breaks = (math.nan,)
        if any(math.isnan(b) for b in breaks):
            raise PlanError(MSG_TYPE.format(file=c.file, key=f"{key}.breaks",
                                            expected="a list of numbers",
                                            got=spec.get("breaks"),
                                            hint="write numbers (no .nan); use .inf for no "
                                                 "upper bound"))
        if any(b >= a for b, a in zip(breaks, breaks[1:])) or len(breaks) < 2:
            raise PlanError(MSG_TYPE.format(file=c.file, key=f"{key}.breaks",
                                            expected="at least two strictly increasing numbers",
                                            got=list(breaks), hint="sort them and drop repeats"))
        labels = spec.get("labels")
        if labels is None:
            labels = [f"{_num(a)}-{_num(b)}" for a, b in zip(breaks, breaks[1:])]
        c.typed(labels, f"{key}.labels", list, "a list of texts")
        for i, lab in enumerate(labels):
            c.typed(lab, f"{key}.labels[{i}]", (str, int, float), "a text")
        if len(labels) != len(breaks) - 1:
            raise PlanError(f"{c.file}: key '{key}.labels' has {len(labels)} labels for "
                            f"{len(breaks) - 1} intervals; give one label per interval")
        labels = tuple(map(str, labels))
        dup = sorted({lab for lab in labels if labels.count(lab) > 1})
        if dup:
            raise PlanError(MSG_BIN_LABELS_DUP.format(file=c.file, key=f"{key}.labels",
                                                      labels=", ".join(map(repr, dup))))
        name = c.typed(spec.get("name", f"{col}_group"), f"{key}.name", str, "a column name")
        _bin_name(c, name, f"{key}.name", bins)
        bins.append(Bin(column=str(col), name=name, breaks=breaks, labels=labels))
    small_n = _count(c, d.get("small_n", 10), "detection.small_n", 1, "the smallest denominator "
                     "not flagged small_n", "write e.g. small_n: 10")
    boot = c.keys(d.get("bootstrap") or {}, BOOT_KEYS, "detection.bootstrap")
    bn = 0
    if "n_boot" in boot:
        bn = _count(c, boot["n_boot"], "detection.bootstrap.n_boot", 2, "bootstrap replicates",
                    "write e.g. n_boot: 2000, or leave the bootstrap block out for no bootstrap")
    interval = c.choice(boot.get("boot_ci", "percentile"), "detection.bootstrap.boot_ci",
                        BOOT_INTERVALS)
    strata = boot.get("strata")
    if strata is not None:
        c.typed(strata, "detection.bootstrap.strata", str, "a column name, e.g. site")
    adjusted = None
    if d.get("adjusted") is not None:
        a = c.keys(d["adjusted"], ADJ_KEYS, "detection.adjusted")
        formula = c.typed(c.required(a, "formula", "detection.adjusted",
                                     "write e.g. detected ~ phase + age_group"),
                          "detection.adjusted.formula", str, "a model formula")
        if "~" not in formula:
            raise PlanError(MSG_TYPE.format(file=c.file, key="detection.adjusted.formula",
                                            expected="a formula 'outcome ~ terms'", got=formula,
                                            hint="write e.g. detected ~ phase + age_group"))
        _check_formula(c, formula, "detection.adjusted.formula")
        methods = a.get("methods", ["glmm"])
        methods = [methods] if isinstance(methods, str) else methods
        for i, m in enumerate(c.typed(methods, "detection.adjusted.methods", list, "a list")):
            c.choice(m, f"detection.adjusted.methods[{i}]", ADJUST_METHODS)
        blocks = c.keys(a.get("blocks") or {}, {b: "" for b in BLOCKS}, "detection.adjusted.blocks")
        for b, terms in blocks.items():
            c.typed(terms, f"detection.adjusted.blocks.{b}", list, "a list of model terms")
            _short(c, terms, f"detection.adjusted.blocks.{b}")
            for i, term in enumerate(terms):
                key = f"detection.adjusted.blocks.{b}[{i}]"
                c.typed(term, key, str, "a model term, e.g. np.log(tumor_size_mm)")
                _check_formula(c, f"detected ~ {term}", key)
        group = c.typed(a.get("group", "site"), "detection.adjusted.group", str, "a column name")
        population = c.choice(a.get("population", "positives"), "detection.adjusted.population",
                              POPULATIONS)
        nagq = _count(c, a.get("nagq", 1), "detection.adjusted.nagq", 1,
                      "quadrature points (1 = Laplace)", "write e.g. nagq: 1")
        levels = c.typed(a.get("levels") or {}, "detection.adjusted.levels", dict,
                         "a mapping column -> [reference level, other levels...]")
        for col, lv in levels.items():
            c.typed(lv, f"detection.adjusted.levels.{col}", list,
                    "a list of levels, reference first")
        model = a.get("model")
        if model is not None:
            c.typed(model, "detection.adjusted.model", str, "a model name, or 'pooled'")
        bias_reduced = a.get("bias_reduced")
        if bias_reduced is not None:
            c.typed(bias_reduced, "detection.adjusted.bias_reduced", bool,
                    "true, false, or leave it out (Mancl-DeRouen below 20 groups)")
        means = a.get("means") or []
        means = [means] if isinstance(means, str) else means
        for i, m in enumerate(c.typed(means, "detection.adjusted.means", list, "a list of factors")):
            c.typed(m, f"detection.adjusted.means[{i}]", str, "a factor of the model")
        means_kind = c.choice(a.get("means_kind", "standardized"), "detection.adjusted.means_kind",
                              MEANS_KINDS)
        units = _units(c, a.get("units"), formula)
        adjusted = {"formula": formula, "methods": list(methods), "group": group,
                    "blocks": {b: list(t) for b, t in blocks.items()},
                    "population": population, "nagq": nagq,
                    "levels": {str(k): [str(x) for x in v] for k, v in levels.items()},
                    "model": model, "bias_reduced": bias_reduced, "means": list(means),
                    "means_kind": means_kind, "units": units}
    if ci == "bootstrap" and not bn:
        raise PlanError(f"{c.file}: key 'detection.ci' is bootstrap, which needs "
                        "key 'detection.bootstrap.n_boot' (e.g. 2000 replicates); add it or "
                        "choose wilson, clopper-pearson or jeffreys")
    fmap = None
    pooled = True
    prec = c.keys(d.get("precision") or {}, PRECISION_KEYS, "detection.precision")
    target_hw = float(c.typed(prec.get("target_half_width", 0.05),
                              "detection.precision.target_half_width", (int, float),
                              "a number in (0, 0.5), e.g. 0.05"))
    if not 0 < target_hw < 0.5:
        raise PlanError(MSG_TYPE.format(file=c.file, key="detection.precision.target_half_width",
                                        expected="a number in (0, 0.5)", got=target_hw,
                                        hint="write e.g. 0.05 for +-5 percentage points"))
    icc = prec.get("icc")
    if icc is not None:
        icc = float(c.typed(icc, "detection.precision.icc", (int, float), "a number in [0, 1)"))
        if not 0 <= icc < 1:
            raise PlanError(MSG_TYPE.format(file=c.file, key="detection.precision.icc",
                                            expected="a number in [0, 1)", got=icc,
                                            hint="write e.g. 0.2, or leave it out"))
    if d.get("failure_map") is not None:
        f = c.keys(d["failure_map"], FMAP_KEYS, "detection.failure_map")
        pooled = bool(c.typed(f.get("pooled", True), "detection.failure_map.pooled", bool,
                              "true or false"))
        fmap = (c.typed(c.required(f, "rows", "detection.failure_map", "name a column, e.g. age_group"),
                        "detection.failure_map.rows", str, "a column name"),
                c.typed(c.required(f, "cols", "detection.failure_map", "name a column, e.g. phase"),
                        "detection.failure_map.cols", str, "a column name"))
        for part, col in zip(("rows", "cols"), fmap):
            _not_an_axis(c, col, f"detection.failure_map.{part}")
        if fmap[0] == fmap[1]:
            raise PlanError(MSG_AXIS_TWICE.format(file=c.file, key="detection.failure_map",
                                                  axis=":".join(fmap), column=fmap[0]))
    return Detection(threshold_value=value, criterion=None if given else criterion,
                     target=target, ci=ci, auc_scale=auc_scale, boot_ci=interval,
                     conf_level=conf, subgroups=tuple(subgroups), bins=tuple(bins),
                     small_n=small_n, n_boot=bn,
                     seed=_drawn_if_none(_seed(c, boot.get("seed"), "detection.bootstrap.seed"),
                                         bn),
                     seed_drawn=bool(bn) and boot.get("seed") is None,
                     strata=strata, adjusted=adjusted, failure_map=fmap, given_calls=given,
                     compare_by=tuple(compare_by),
                     exploratory_subgroups=tuple(exploratory_axes),
                     cluster=_cluster(c, d.get("cluster", "auto")), pooled=pooled,
                     target_half_width=target_hw, icc=icc)


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else (str(int(x)) if float(x).is_integer() else str(x))


def plan_from_dict(raw: dict, *, path: Path, sha256: str = "") -> Plan:
    """Validate a parsed plan (``raw``) read from ``path`` and return a :class:`Plan`."""
    path = Path(path)
    c = _Checker(str(path))
    c.keys(raw, TOP_KEYS, "")
    version = c.typed(raw.get("version", 1), "version", int, "a whole number (1)")
    if version != 1:
        raise PlanError(f"{path}: key 'version' is {version}; this clinrel reads plan version 1")
    title = str(c.typed(raw.get("title", "Reliability appendix"), "title", str, "a text"))
    inputs = c.keys(c.required(raw, "inputs", "", "add an 'inputs' block naming cases and/or runs"),
                    INPUT_KEYS, "inputs")
    base = path.parent
    paths = {k: _path(c, base, inputs.get(k), f"inputs.{k}") for k in INPUT_KEYS}
    det = crs = None
    if raw.get("detection") is not None:
        if paths["cases"] is None:
            raise PlanError(f"{path}: the plan has a 'detection' block but no 'inputs.cases'; "
                            "name the cases table or remove the block")
        det = _detection(c, raw["detection"])
    if raw.get("crs") is not None:
        if paths["runs"] is None:
            raise PlanError(f"{path}: the plan has a 'crs' block but no 'inputs.runs'; "
                            "name the runs table or remove the block")
        if paths["reference"] is None:
            raise PlanError(f"{path}: the plan has a 'crs' block but no 'inputs.reference'; "
                            "name the reference panel file (see clinrel/demo_data/reference.yaml)")
        cr = c.keys(raw["crs"], CRS_KEYS, "crs")
        boot = c.keys(cr.get("bootstrap") or {}, CRS_BOOT_KEYS, "crs.bootstrap")
        conf_crs = _conf_level(c, cr.get("conf_level", 0.95), "crs.conf_level")
        n_boot = boot.get("n_boot", Crs.n_boot)
        if n_boot != 0 or isinstance(n_boot, bool):  # 0: point scores, no bootstrap
            n_boot = _count(c, n_boot, "crs.bootstrap.n_boot", 2,
                            "paired-seed bootstrap replicates (or 0 for none)",
                            "write e.g. n_boot: 10000")
        crs = Crs(n_boot=n_boot,
                  seed=_drawn_if_none(_seed(c, boot.get("seed"), "crs.bootstrap.seed"),
                                      n_boot or cr.get("n_weights", Crs.n_weights)),
                  seed_drawn=bool(n_boot or cr.get("n_weights", Crs.n_weights))
                  and boot.get("seed") is None,
                  n_weights=_count(c, cr.get("n_weights", Crs.n_weights), "crs.n_weights", 0,
                                   "Dirichlet weight draws (0 skips the stability analysis)",
                                   "write e.g. n_weights: 1000"),
                  conf_level=conf_crs,
                  k=_count(c, cr.get("k", 3), "crs.k", 1, "the k of P(rank <= k)",
                           "write e.g. k: 3"))
    if det is None and crs is None:
        raise PlanError(f"{path}: the plan has neither a 'detection' nor a 'crs' block; "
                        "add at least one (see clinrel/demo_data/plan.yaml)")
    cal = c.keys(raw.get("calibration") or {}, CAL_KEYS, "calibration")
    cal_boot = c.keys(cal.get("bootstrap") or {}, CAL_BOOT_KEYS, "calibration.bootstrap")
    calibration = Calibration(
        n_boot=_count(c, cal_boot.get("n_boot", Calibration.n_boot),
                      "calibration.bootstrap.n_boot", 2, "ECE bootstrap replicates",
                      "write e.g. n_boot: 1000"),
        seed=_seed(c, cal_boot.get("seed"), "calibration.bootstrap.seed"))
    md_options = _metadata_options(c, raw.get("metadata"), base, paths)
    limits = _limits(c, raw.get("limits"), det, crs, calibration, md_options)
    pv = c.keys(raw.get("privacy") or {}, PRIVACY_KEYS, "privacy")
    privacy = Privacy(
        allow_identifiers=bool(c.typed(pv.get("allow_identifiers", False),
                                       "privacy.allow_identifiers", bool, "true or false")),
        pseudonymize_ids=bool(c.typed(pv.get("pseudonymize_ids", False),
                                      "privacy.pseudonymize_ids", bool, "true or false")),
        salt=None if pv.get("salt") is None else str(pv["salt"]))
    if privacy.pseudonymize_ids and not privacy.salt:
        raise PlanError(f"{path}: key 'privacy.salt' is missing; pseudonymize_ids needs a secret "
                        "salt (a long random text kept out of the report)")
    return Plan(path=path, sha256=sha256, version=version, title=title, cases=paths["cases"],
                runs=paths["runs"], reference=paths["reference"], metadata=paths["metadata"],
                probe_predictions=paths["probe_predictions"], detection=det, crs=crs,
                privacy=privacy, calibration=calibration, metadata_options=md_options,
                prespecified=_notes(c, raw.get("prespecified"), "prespecified"),
                exploratory=_notes(c, raw.get("exploratory"), "exploratory"), raw=raw,
                roles=_roles(c, raw.get("roles")),
                scheduler=_scheduler(c, raw.get("scheduler")), limits=limits)


def _roles(c: _Checker, raw) -> dict:
    """The ``roles`` block: which analyses are prespecified and which exploratory
    (ROLE_DEFAULTS for the ones it leaves out)."""
    given = c.keys(raw, {k: "" for k in ROLE_DEFAULTS}, "roles")
    out = dict(ROLE_DEFAULTS)
    for key, value in given.items():
        out[key] = c.choice(value, f"roles.{key}", ROLE_VALUES)
    return out


def _metadata_options(c: _Checker, raw, base: Path, paths: dict) -> MetadataOptions | None:
    """The ``metadata`` block (:class:`MetadataOptions`); ``estimate`` needs
    ``inputs.metadata``. ``label_error`` widens the detection half's subgroup intervals: a
    plan without a ``detection`` block has none, and the key has nothing to act on."""
    if raw is None:
        return None
    m = c.keys(raw, METADATA_KEYS, "metadata")
    value = m.get("label_error")
    if value == "estimate":
        if paths["metadata"] is None:
            raise PlanError(f"{c.file}: key 'metadata.label_error' is 'estimate', which reads "
                            "the metadata evidence table; name it under 'inputs.metadata' or give "
                            "a label-error table's path")
    elif value is not None:
        value = _path(c, base, value, "metadata.label_error")
    prefer = m.get("prefer") or []
    c.typed(prefer, "metadata.prefer", list, "a list of extractor names",
            "write e.g. prefer: [dicom_rules, text_rules]")
    _short(c, prefer, "metadata.prefer")
    per_patient = m.get("per_patient", "auto")
    if per_patient != "auto":
        c.typed(per_patient, "metadata.per_patient", list, "auto or a list of field names",
                "write e.g. per_patient: [race, sex], or per_patient: auto")
        per_patient = tuple(str(f) for f in per_patient)
    return MetadataOptions(
        per_patient=None if per_patient == "auto" else per_patient,
        label_error=value, prefer=tuple(str(e) for e in prefer),
        n_imputations=_count(c, m.get("n_imputations", MetadataOptions.n_imputations),
                             "metadata.n_imputations", 2, "imputations of the true subgroup",
                             "write e.g. n_imputations: 50"),
        seed=_seed(c, m.get("seed"), "metadata.seed"))


def _bin_name(c: _Checker, name: str, key: str, earlier: list[Bin]) -> None:
    """A bin adds a column: it must not replace one clinrel reads or writes (``split``,
    ``site``, ...) or another bin's."""
    if name in RESERVED_COLUMNS:
        raise PlanError(MSG_BIN_NAME.format(file=c.file, key=key, name=name,
                                            suggest=f"{name}_group"))
    for b in earlier:
        if name in (b.name, b.column):
            raise PlanError(MSG_BIN_NAME_TWICE.format(file=c.file, key=key, name=name,
                                                      other=f"detection.bins.{b.column}"))


MSG_UNITS_VARIABLE = ("{file}: key 'detection.adjusted.units.{variable}' names {variable!r}, "
                      "which is not a continuous term of detection.adjusted.formula ({formula}); "
                      "units apply to a numeric column, or a log of one, entering as a main "
                      "effect (candidates in this formula: {known}); fix the name or remove it")
UNITS_EXPECTED = ("a positive number (odds ratios per that many units; for a log term, per "
                  "that-fold change) or sd (per one SD)")


def _units(c: _Checker, value, formula: str) -> dict[str, float | str]:
    """``detection.adjusted.units``: variable -> a positive number or ``sd``, for the
    formula's continuous terms (``stats.analysis.adjusted.continuous_terms``)."""
    from .adjusted import SD, continuous_terms

    key = "detection.adjusted.units"
    units = c.typed(value or {}, key, dict, "a mapping variable -> " + UNITS_EXPECTED,
                    "write e.g. units: {age: 10, tumor_size_mm: sd}")
    terms = continuous_terms(formula)
    bases: dict[str, list] = {}
    for col, base in terms.values():
        bases.setdefault(col, []).append(base)
    out: dict[str, float | str] = {}
    for var, v in units.items():
        var = str(var)
        if var not in bases:
            raise PlanError(MSG_UNITS_VARIABLE.format(
                file=c.file, variable=var, formula=formula,
                known=", ".join(bases) or "the formula has none"))
        where = f"{key}.{var}"
        if isinstance(v, str) and v.strip().lower() == SD:
            out[var] = SD
            continue
        log = any(b is not None for b in bases[var])
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
              and v > 0 and not (log and v == 1))
        if not ok:
            raise PlanError(MSG_TYPE.format(
                file=c.file, key=where, expected=UNITS_EXPECTED, got=v,
                hint=("a log term changes by a k-fold change of its variable, k != 1; write "
                      "e.g. 2 (per doubling) or 10" if log else "write e.g. 10 or sd")))
        out[var] = float(v)
    return out


def _check_formula(c: _Checker, text: str, key: str) -> None:
    """Parse a plan formula with clinrel's grammar (``stats.formula``): a term outside it is
    refused here, at load time, before anything is evaluated."""
    from stats.formula import parse_formula

    _from_stats(c, key, parse_formula, text)


def _limits(c: _Checker, raw, det: Detection | None, crs: Crs | None,
            calibration: Calibration | None = None,
            md: MetadataOptions | None = None) -> dict:
    """The ``limits`` block, then a first, data-free check of every planned count that
    sizes an allocation (``stats.limits.ESTIMATED``: the bootstraps, the weight draws,
    the imputations): the smallest data (one cluster, cell, model, encoder or row)
    already needs this much, so an absurd count is refused here before any input is
    read, naming the key, the estimate and the cap to raise."""
    from stats import limits

    caps = _from_stats(c, "limits", limits.parse_limits, raw, file=c.file)
    floor = "a lower bound, before the data are read"
    works = []
    if det is not None and det.n_boot:
        works.append(("detection.bootstrap.n_boot", limits.cluster_bootstrap_work(
            det.n_boot, 1, 1, 1, setting="detection.bootstrap.n_boot", what="the bootstrap")))
    if crs is not None:
        works.append(("crs.bootstrap.n_boot", limits.crs_bootstrap_work(
            crs.n_boot, [(1, [1], [1])], setting="crs.bootstrap.n_boot",
            what="the CRS bootstrap")))
        if crs.n_weights:
            works.append(("crs.n_weights", limits.ranking_stability_work(
                crs.n_weights, 1, setting="crs.n_weights")))
    if calibration is not None:
        works.append(("calibration.bootstrap.n_boot", limits.ece_bootstrap_work(
            calibration.n_boot, 1, 1, "uniform", setting="calibration.bootstrap.n_boot",
            what="the ECE bootstrap")))
    if md is not None and md.label_error is not None:
        works.append(("metadata.n_imputations", limits.imputation_work(
            md.n_imputations, 1, setting="metadata.n_imputations")))
    with limits.using(caps, c.file):
        for key, work in works:
            _from_stats(c, key, limits.check, replace(work, detail=floor))
    return caps


def _scheduler(c, value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"{c.file}: key 'scheduler' must be a Dask scheduler address such as "
                        f"'tcp://10.0.0.5:8786' (or left out to run here); got {value!r}")
    return value.strip()


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
    from stats.schema import ContractError

    try:  # at most MAX_YAML_BYTES, UTF-8, no aliases (a 455-byte alias bomb is refused)
        raw = read_yaml(path, kind="plan")
    except ContractError as exc:
        raise PlanError(str(exc)) from None
    data = path.read_bytes()
    if not isinstance(raw, dict):
        raise PlanError(f"{path}: a plan must be a YAML mapping of keys (version, title, inputs, "
                        "detection, crs, ...); see clinrel/demo_data/plan.yaml")
    return plan_from_dict(raw, path=path.resolve(), sha256=hashlib.sha256(data).hexdigest())


#: the name a plan built from command-line options carries in its messages
COMMAND_LINE = "<command line>"


def plan_for_command(*, inputs: dict, detection: dict | None = None, crs: dict | None = None,
                     scheduler: str | None = None) -> Plan:
    """A plan built from a command's options (the CLI's way into :func:`stats.analysis.run`).

    ``inputs`` maps input names to paths; ``detection`` and ``crs`` are plan blocks with the
    plan's own keys, so a command and a plan file with the same settings give the same
    Plan, the same analysis and the same tables. Identifier columns are allowed: a command
    writes tidy tables only.
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
    return plan_from_dict(raw, path=Path.cwd() / COMMAND_LINE)
