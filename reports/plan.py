"""The analysis plan (``plan.yaml``): what the report computes, validated before any work.

A plan names the input tables and, for each half of the report (``detection`` and
``crs``), the prespecified choices: threshold, CI method, subgroup axes and bins,
bootstrap size and seed, adjusted models, CRS bootstrap. Either half may be left out;
the report then leaves out its sections. Unknown keys are rejected (a typo must not
silently fall back to a default). Relative paths are read from the plan file's folder.

``load_plan(path)`` returns a :class:`Plan`; every problem raises :class:`PlanError`
naming the file, the key and the fix. ``Plan.sha256`` is the hash of the plan file's
bytes, recorded in the manifest and the methods section.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stats.bootstrap import CI_METHODS as BOOT_INTERVALS
from stats.intervals import AUC_SCALES, PROPORTION_METHODS

CI_METHODS = PROPORTION_METHODS
CRITERIA = ("youden", "target_specificity")
ADJUST_METHODS = ("glmm", "gee", "fixed")
BLOCKS = ("site", "protocol", "demographics", "tumour")

MSG_KEY = "{file}: unknown key '{key}'{where}; allowed keys: {allowed}; {hint}"
MSG_TYPE = "{file}: key '{key}' must be {expected}, got {got!r}; {hint}"
MSG_MISSING = "{file}: required key '{key}' is missing; {hint}"


class PlanError(ValueError):
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
    auc_ci: str = "auc"
    conf_level: float = 0.95
    subgroups: tuple[tuple[str, ...], ...] = (("phase",),)
    bins: tuple[Bin, ...] = ()
    small_n: int = 10
    bootstrap_n: int = 0
    bootstrap_seed: int | None = None
    bootstrap_strata: str | None = None
    bootstrap_interval: str = "percentile"
    adjusted: dict[str, Any] | None = None
    failure_map: tuple[str, str] | None = None

    @property
    def prespecified_threshold(self) -> bool:
        return self.threshold_value is not None


@dataclass(frozen=True)
class Crs:
    bootstrap_n: int = 1000
    bootstrap_seed: int | None = None
    k: int = 3


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
    prespecified: tuple[str, ...] = ()
    exploratory: tuple[str, ...] = ()
    raw: dict = field(default_factory=dict, repr=False)
    #: Dask scheduler address for the bootstrap, per-model fits and CRS replicates
    #: (None: this process). Results are identical either way, so it is not part of the
    #: analysis: ``clinrel report --scheduler`` overrides it.
    scheduler: str | None = None

    @property
    def inputs(self) -> dict[str, Path]:
        names = ("cases", "runs", "reference", "metadata", "probe_predictions")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @property
    def seeds(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        if self.detection is not None and self.detection.bootstrap_n:
            out["detection_bootstrap"] = self.detection.bootstrap_seed
        if self.crs is not None:
            out["crs_bootstrap"] = self.crs.bootstrap_seed
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

    close = difflib.get_close_matches(key, list(allowed), n=1)
    return f"did you mean '{close[0]}'?" if close else "remove it or fix its spelling"


TOP_KEYS = {"version": "", "title": "", "inputs": "", "detection": "", "crs": "", "privacy": "",
            "prespecified": "", "exploratory": "", "scheduler": ""}
INPUT_KEYS = {"cases": "", "runs": "", "reference": "", "metadata": "", "probe_predictions": ""}
DETECTION_KEYS = {"threshold": "", "ci": "", "auc_ci": "", "conf_level": "", "subgroups": "", "bins": "",
                  "small_n": "", "bootstrap": "", "adjusted": "", "failure_map": ""}
THRESHOLD_KEYS = {"value": "", "criterion": "", "target": ""}
BIN_KEYS = {"name": "", "breaks": "", "labels": ""}
BOOT_KEYS = {"n": "", "seed": "", "strata": "", "interval": ""}
ADJ_KEYS = {"formula": "", "methods": "", "group": "", "blocks": ""}
FMAP_KEYS = {"rows": "", "cols": ""}
CRS_KEYS = {"bootstrap": "", "k": ""}
CRS_BOOT_KEYS = {"n": "", "seed": ""}
PRIVACY_KEYS = {"allow_identifiers": "", "pseudonymize_ids": "", "salt": ""}


def _notes(c: _Checker, value, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    c.typed(value, key, list, "a text or a list of texts")
    return tuple(str(v) for v in value)


def _seed(c: _Checker, value, key: str) -> int | None:
    if value is None:
        return None
    c.typed(value, key, int, "a whole number >= 0", "write an integer seed, e.g. 20261130")
    if value < 0:
        raise PlanError(MSG_TYPE.format(file=c.file, key=key, expected="a whole number >= 0",
                                        got=value, hint="use a non-negative seed"))
    return int(value)


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


def _detection(c: _Checker, d: dict) -> Detection:
    c.keys(d, DETECTION_KEYS, "detection")
    thr = c.keys(d.get("threshold") or {}, THRESHOLD_KEYS, "detection.threshold")
    value = criterion = target = None
    if "value" in thr:
        value = float(c.typed(thr["value"], "detection.threshold.value", (int, float), "a number"))
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
    auc_ci = c.choice(d.get("auc_ci", "auc"), "detection.auc_ci", AUC_SCALES)
    conf = float(c.typed(d.get("conf_level", 0.95), "detection.conf_level", (int, float),
                         "a number in (0, 1)"))
    if not 0 < conf < 1:
        raise PlanError(MSG_TYPE.format(file=c.file, key="detection.conf_level",
                                        expected="a number in (0, 1)", got=conf,
                                        hint="write e.g. 0.95, not 95"))
    subgroups = []
    for i, s in enumerate(c.typed(d.get("subgroups", ["phase"]), "detection.subgroups", list,
                                  "a list of column names or [a, b] pairs")):
        if isinstance(s, str):
            subgroups.append((s,))
        elif isinstance(s, list) and len(s) >= 2 and all(isinstance(x, str) for x in s):
            subgroups.append(tuple(s))
        else:
            raise PlanError(MSG_TYPE.format(file=c.file, key=f"detection.subgroups[{i}]",
                                            expected="a column name or a list of 2+ names",
                                            got=s, hint="write e.g. phase or [age_group, phase]"))
    bins = []
    raw_bins = c.typed(d.get("bins") or {}, "detection.bins", dict,
                       "a mapping column -> {name, breaks, labels}")
    for col, spec in raw_bins.items():
        spec = c.keys(spec, BIN_KEYS, f"detection.bins.{col}")
        key = f"detection.bins.{col}"
        breaks = c.typed(c.required(spec, "breaks", key, "give the cut points, e.g. [0, 40, 60]"),
                         f"{key}.breaks", list, "a list of increasing numbers (.inf allowed)")
        try:
            breaks = tuple(float(b) for b in breaks)
        except (TypeError, ValueError):
            raise PlanError(MSG_TYPE.format(file=c.file, key=f"{key}.breaks",
                                            expected="a list of numbers", got=breaks,
                                            hint="write numbers; use .inf for no upper bound"))
        if any(b >= a for b, a in zip(breaks, breaks[1:])) or len(breaks) < 2:
            raise PlanError(MSG_TYPE.format(file=c.file, key=f"{key}.breaks",
                                            expected="at least two strictly increasing numbers",
                                            got=list(breaks), hint="sort them and drop repeats"))
        labels = spec.get("labels")
        if labels is None:
            labels = [f"{_num(a)}-{_num(b)}" for a, b in zip(breaks, breaks[1:])]
        c.typed(labels, f"{key}.labels", list, "a list of texts")
        if len(labels) != len(breaks) - 1:
            raise PlanError(f"{c.file}: key '{key}.labels' has {len(labels)} labels for "
                            f"{len(breaks) - 1} intervals; give one label per interval")
        name = c.typed(spec.get("name", f"{col}_group"), f"{key}.name", str, "a column name")
        bins.append(Bin(column=str(col), name=name, breaks=breaks, labels=tuple(map(str, labels))))
    small_n = int(c.typed(d.get("small_n", 10), "detection.small_n", int, "a whole number"))
    boot = c.keys(d.get("bootstrap") or {}, BOOT_KEYS, "detection.bootstrap")
    bn = int(c.typed(boot.get("n", 0), "detection.bootstrap.n", int, "a whole number >= 0"))
    interval = c.choice(boot.get("interval", "percentile"), "detection.bootstrap.interval",
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
        methods = a.get("methods", ["glmm"])
        methods = [methods] if isinstance(methods, str) else methods
        for i, m in enumerate(c.typed(methods, "detection.adjusted.methods", list, "a list")):
            c.choice(m, f"detection.adjusted.methods[{i}]", ADJUST_METHODS)
        blocks = c.keys(a.get("blocks") or {}, {b: "" for b in BLOCKS}, "detection.adjusted.blocks")
        for b, terms in blocks.items():
            c.typed(terms, f"detection.adjusted.blocks.{b}", list, "a list of model terms")
        group = c.typed(a.get("group", "site"), "detection.adjusted.group", str, "a column name")
        adjusted = {"formula": formula, "methods": list(methods), "group": group,
                    "blocks": {b: list(t) for b, t in blocks.items()}}
    fmap = None
    if d.get("failure_map") is not None:
        f = c.keys(d["failure_map"], FMAP_KEYS, "detection.failure_map")
        fmap = (c.typed(c.required(f, "rows", "detection.failure_map", "name a column, e.g. age_group"),
                        "detection.failure_map.rows", str, "a column name"),
                c.typed(c.required(f, "cols", "detection.failure_map", "name a column, e.g. phase"),
                        "detection.failure_map.cols", str, "a column name"))
    return Detection(threshold_value=value, criterion=criterion, target=target, ci=ci,
                     auc_ci=auc_ci, bootstrap_interval=interval, conf_level=conf,
                     subgroups=tuple(subgroups), bins=tuple(bins),
                     small_n=small_n, bootstrap_n=bn,
                     bootstrap_seed=_seed(c, boot.get("seed"), "detection.bootstrap.seed"),
                     bootstrap_strata=strata, adjusted=adjusted, failure_map=fmap)


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
        crs = Crs(bootstrap_n=int(c.typed(boot.get("n", 1000), "crs.bootstrap.n", int, "a whole number")),
                  bootstrap_seed=_seed(c, boot.get("seed"), "crs.bootstrap.seed"),
                  k=int(c.typed(cr.get("k", 3), "crs.k", int, "a whole number")))
    if det is None and crs is None:
        raise PlanError(f"{path}: the plan has neither a 'detection' nor a 'crs' block; "
                        "add at least one (see clinrel/demo_data/plan.yaml)")
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
                privacy=privacy, prespecified=_notes(c, raw.get("prespecified"), "prespecified"),
                exploratory=_notes(c, raw.get("exploratory"), "exploratory"), raw=raw,
                scheduler=_scheduler(c, raw.get("scheduler")))


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
    data = path.read_bytes()
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PlanError(f"{path}: not valid YAML ({detail}); check the indentation and quotes")
    if not isinstance(raw, dict):
        raise PlanError(f"{path}: a plan must be a YAML mapping of keys (version, title, inputs, "
                        "detection, crs, ...); see clinrel/demo_data/plan.yaml")
    return plan_from_dict(raw, path=path.resolve(), sha256=hashlib.sha256(data).hexdigest())
