"""The loaded study a report is built from: the plan plus its validated input tables.

Loading validates the inputs (``stats.read_cases`` / ``stats.read_runs``), refuses columns
that look like direct identifiers unless the plan allows them, pseudonymizes case and
patient ids with a salted hash when asked, and adds the plan's bins. It computes no
statistics.
"""
from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .plan import Plan, PlanError

log = logging.getLogger("clinrel.report")

#: column names that look like direct identifiers (HIPAA-style) or free text
IDENTIFIER_PATTERN = re.compile(
    r"^name$|(^|_)(first_?name|last_?name|given_?name|family_?name|full_?name|surname|"
    r"patient_?name|person_?name|mrn|medical_record(_number)?|"
    r"birth|birth_?date|date_of_birth|dob|accession(_number)?|ssn|social_security|address|"
    r"street|zip|postcode|phone|telephone|email|e_mail|free_?text|report_?text|text|notes?|"
    r"comments?|narrative)($|_)", re.IGNORECASE)

MSG_IDENTIFIER = ("{file}: column(s) {columns} look like direct identifiers or free text; "
                  "drop them from the table, or set privacy.allow_identifiers: true in {plan} "
                  "if they are not identifying")


@dataclass
class Study:
    plan: Plan
    cases: pd.DataFrame | None = None  # validated, binned, pseudonymized; every input row
    runs: pd.DataFrame | None = None
    reference: dict | None = None
    metadata: pd.DataFrame | None = None
    probe_predictions: pd.DataFrame | None = None
    input_sha256: dict = field(default_factory=dict)
    input_rows: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)  # logged notes (skipped sections, ...)
    cache: dict = field(default_factory=dict)  # shared stats results between sections

    def note(self, message: str) -> None:
        log.info(message)
        self.notes.append(message)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def identifier_columns(columns) -> list[str]:
    return [c for c in columns if IDENTIFIER_PATTERN.search(str(c))]


def pseudonymize(values: pd.Series, salt: str) -> pd.Series:
    """Salted SHA-256 pseudonyms (``"id-" + 12 hex digits``), stable for a given salt."""
    uniq = pd.unique(values.astype(str))
    mapping = {v: "id-" + hashlib.sha256(f"{salt}\x00{v}".encode()).hexdigest()[:12] for v in uniq}
    return values.astype(str).map(mapping)


def _check_identifiers(df: pd.DataFrame, file: Path, plan: Plan) -> None:
    if plan.privacy.allow_identifiers:
        return
    bad = identifier_columns(df.columns)
    if bad:
        raise PlanError(MSG_IDENTIFIER.format(file=file, columns=", ".join(f"'{c}'" for c in bad),
                                              plan=plan.path))


def add_bins(cases: pd.DataFrame, plan: Plan) -> pd.DataFrame:
    """Add the plan's binned columns (left-closed intervals), via ``stats.add_bins`` when the
    tree has it, else ``pandas.cut`` with the same convention."""
    if plan.detection is None or not plan.detection.bins:
        return cases
    for b in plan.detection.bins:
        if b.column not in cases.columns:
            raise PlanError(f"{plan.path}: key 'detection.bins.{b.column}' names a column the "
                            f"cases table ({plan.cases}) lacks; remove the bin or add the column")
    try:
        from stats import add_bins as stats_add_bins
    except ImportError:
        stats_add_bins = None
    if stats_add_bins is not None:
        return stats_add_bins(cases, {b.column: {"name": b.name, "breaks": list(b.breaks),
                                                 "labels": list(b.labels), "right": False}
                                      for b in plan.detection.bins})
    out = cases.copy()
    for b in plan.detection.bins:
        out[b.name] = pd.cut(out[b.column].astype("float64"), bins=list(b.breaks),
                             labels=list(b.labels), right=False)
    return out


def load_study(plan: Plan) -> Study:
    """Read and validate every input the plan names."""
    import stats

    study = Study(plan=plan)
    for name, path in plan.inputs.items():
        study.input_sha256[name] = sha256_file(path)
    if plan.cases is not None:
        cases = stats.read_cases(plan.cases)
        _check_identifiers(cases, plan.cases, plan)
        study.input_rows["cases"] = len(cases)
        if plan.privacy.pseudonymize_ids:
            for col in ("case_id", "patient_id"):
                cases[col] = pseudonymize(cases[col], plan.privacy.salt)
        cases = add_bins(cases, plan)
        _check_axes(cases, plan)
        study.cases = cases
    if plan.runs is not None:
        runs = stats.read_runs(plan.runs)
        _check_identifiers(runs, plan.runs, plan)
        study.input_rows["runs"] = len(runs)
        study.runs = runs
    if plan.reference is not None:
        import yaml

        ref = yaml.safe_load(plan.reference.read_text(encoding="utf-8"))
        if not isinstance(ref, dict) or "panel" not in ref:
            raise PlanError(f"{plan.reference}: a reference file is a mapping with at least "
                            "'panel: [encoders]'; see clinrel/demo_data/reference.yaml")
        study.reference = ref
    if plan.metadata is not None:
        md = stats.schema.read_table(plan.metadata, table="metadata")[0]
        if plan.privacy.pseudonymize_ids and "case_id" in md.columns:
            md["case_id"] = pseudonymize(md["case_id"], plan.privacy.salt)
        study.metadata = md
    if plan.probe_predictions is not None:
        pp = stats.schema.read_table(plan.probe_predictions, table="probe_predictions")[0]
        _check_identifiers(pp, plan.probe_predictions, plan)
        study.probe_predictions = pp
    return study


def _check_axes(cases: pd.DataFrame, plan: Plan) -> None:
    det = plan.detection
    if det is None:
        return
    needed = {c for axes in det.subgroups for c in axes}
    if det.failure_map:
        needed |= set(det.failure_map)
    missing = sorted(c for c in needed if c not in cases.columns)
    if missing:
        raise PlanError(f"{plan.path}: key 'detection' names column(s) {', '.join(missing)} "
                        f"that the cases table ({plan.cases}) lacks (columns: "
                        f"{', '.join(map(str, cases.columns[:20]))}); fix the names or add "
                        "a bin that creates them")


def level_order(values: pd.Series) -> list:
    """Levels in their categorical order (or sorted), for display."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return [str(v) for v in values.cat.categories]
    vals = pd.unique(values.dropna())
    try:
        return [str(v) for v in sorted(vals)]
    except TypeError:
        return [str(v) for v in vals]

