"""A study's inputs: the plan's tables, read, validated and checked against the plan.

Loading validates the inputs (``stats.read_cases`` / ``stats.read_runs`` /
``stats.schema.read_probe_predictions``, the reference file), refuses columns that look
like direct identifiers unless the plan allows them, pseudonymizes case and patient ids
with a salted hash when asked, and adds the plan's bins. It then checks what the plan asks
of these tables before any statistic runs: every column a plan key names exists, a bin
adds a new column, the test split exists, the planned bootstraps fit the resource caps of
:mod:`stats.limits` (the plan's ``limits`` apply while loading, and while the report runs:
:func:`plan_limits`), the Dask scheduler answers. Every refusal names the plan file and
key. It computes no statistics.
"""
from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import pandas as pd

from .core import Tables
from .plan import Plan, PlanError, from_stats

log = logging.getLogger("clinrel.analysis")

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
MSG_BIN_EXISTS = ("{plan}: {key} is {name!r}, a column the cases "
                  "table ({cases}) already has, which the bin would replace; give the bin a new "
                  "name, e.g. {suggest!r}")
MSG_NO_TEST = ("{cases}: column 'split' has no 'test' rows ({counts}), and the report analyses "
               "the test split (plan {plan}, key 'detection'); mark the held-out cases "
               "split: test, or drop the split column to analyse every row")
MSG_K_ENCODERS = ("{plan}: {key} is {k}, but the runs table ({runs}) has {n} encoder(s) "
                  "in a regime; P(rank <= k) and the top-k overlap need k at most the number "
                  "of encoders (and below it to say anything): lower k")
MSG_PLAN_COLUMN = ("{plan}: {key} names column {column!r}, which the cases table ({cases}) "
                   "lacks (columns: {columns}); {fix}")


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


def bin_hint(missing, columns, plan: Plan) -> str:
    """``" (age_group: detection.bins.age, e.g. breaks [0, 40, 60, 75, .inf])"``: for each
    missing column that is a standard binned axis of a column the table has
    (``stats.detection.STANDARD_BINS``), the bin that makes it, named as the plan or the
    command sets it (a command's plan names its ``--bin`` option)."""
    from stats.detection import STANDARD_BINS

    cols = set(map(str, columns))
    hints = []
    for m in missing:
        if m in STANDARD_BINS and STANDARD_BINS[m][0] in cols:
            src, breaks, _ = STANDARD_BINS[m]
            key = plan.key(f"detection.bins.{src}")
            cuts = ",".join("inf" if b == float("inf") else f"{b:g}" for b in breaks)
            option = key.split()[-1] if "--" in key else None
            hints.append(f"{m}: {option} {src}={cuts}" if option else
                         f"{m}: {key} with name {m} and breaks [{cuts.replace('inf', '.inf')}]")
    return f" ({'; '.join(hints)})" if hints else ""


def add_bins(cases: pd.DataFrame, plan: Plan) -> pd.DataFrame:
    """Add the plan's binned columns (left-closed intervals), via ``stats.add_bins`` when the
    tree has it, else ``pandas.cut`` with the same convention."""
    if plan.detection is None or not plan.detection.bins:
        return cases
    bins = list(plan.detection.bins.values())
    for b in bins:
        if b.column not in cases.columns:
            raise PlanError(f"{plan.where}: {plan.key('detection.bins.' + b.column)} names a column the "
                            f"cases table ({plan.cases}) lacks; remove the bin or add the column")
        if b.name in cases.columns:
            raise PlanError(MSG_BIN_EXISTS.format(plan=plan.where, name=b.name,
                                                  key=plan.key(f"detection.bins.{b.column}.name"),
                                                  cases=plan.cases, suggest=f"{b.name}_group"))
    try:
        from stats import add_bins as stats_add_bins
    except ImportError:
        stats_add_bins = None
    if stats_add_bins is not None:
        from stats.schema import ContractError

        try:
            return stats_add_bins(cases, {b.column: {"name": b.name, "breaks": list(b.breaks),
                                                     "labels": list(b.labels), "right": False}
                                          for b in bins})
        except ContractError as exc:   # name the plan key and the file, as the charter asks
            # (a PlanError: a command's own plan names its option, --bin, instead)
            raise PlanError(f"{plan.where}: {plan.key(f'detection.bins.{exc.column}.breaks')} does not "
                            f"cover the cases table {plan.cases}: {exc}") from None
    out = cases.copy()
    for b in bins:
        out[b.name] = pd.cut(out[b.column].astype("float64"), bins=list(b.breaks),
                             labels=list(b.labels), right=False)
    return out


def plan_limits(plan: Plan):
    """The plan's resource caps in force (``with plan_limits(plan): ...``)."""
    from stats.limits import using

    return using(plan.limits, str(plan.path))


def load_tables(plan: Plan) -> Tables:
    """Read and validate every input the plan names, then check what the plan asks of
    them (module docstring); raises PlanError or ContractError naming file and key."""
    with plan_limits(plan):
        tables = _load(plan)
        _check_plan_against_data(plan, tables)
    return tables


def _load(plan: Plan) -> Tables:
    import stats

    study = Tables()
    for name, path in plan.inputs.items():
        study.input_sha256[name] = sha256_file(path)
    if plan.cases is not None:
        cases = stats.read_cases(plan.cases)
        study.text_merged += cases.attrs.get("text_merged", [])
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
        study.text_merged += runs.attrs.get("text_merged", [])
        _check_identifiers(runs, plan.runs, plan)
        study.input_rows["runs"] = len(runs)
        study.runs = runs
    if plan.reference is not None:
        # the file's own errors (syntax, encoding, aliases, panel, anchors, weights) name it
        encoders = None if study.runs is None else pd.unique(study.runs["encoder"])
        study.reference = stats.read_reference(plan.reference, encoders=encoders)
    if plan.metadata is not None:
        md = stats.schema.read_table(plan.metadata, table="metadata")[0]
        if plan.privacy.pseudonymize_ids and "case_id" in md.columns:
            md["case_id"] = pseudonymize(md["case_id"], plan.privacy.salt)
        study.metadata = md
    opts = plan.metadata_options
    if opts is not None and opts.label_error not in (None, "estimate"):
        study.input_sha256["label_error"] = sha256_file(Path(opts.label_error))
        study.label_error = stats.schema.read_table(Path(opts.label_error),
                                                    table="label_error")[0]
    if plan.lesions is not None:
        les = stats.read_lesions(plan.lesions)
        study.text_merged += les.attrs.get("text_merged", [])
        study.input_rows["lesions"] = len(les)
        if plan.privacy.pseudonymize_ids:
            les["case_id"] = pseudonymize(les["case_id"], plan.privacy.salt)
        _check_hit_rule(les, plan)
        study.lesions = les
    if plan.probe_predictions is not None:
        pp = stats.schema.read_probe_predictions(plan.probe_predictions)
        study.text_merged += pp.attrs.get("text_merged", [])
        _check_identifiers(pp, plan.probe_predictions, plan)
        study.probe_predictions = pp
    return study


MSG_HIT_RULE = ("{plan}: {key} is {rule!r}, but the lesions table ({lesions}) was matched "
                "with {table!r} (its hit_rule column); match the lesions again with the plan's "
                "rule, or state the table's rule in the plan")


def _check_hit_rule(lesions: pd.DataFrame, plan: Plan) -> None:
    """A lesions table that states its hit rule must have the plan's (the methods text
    states the plan's)."""
    det = plan.detection
    if det is None or det.lesions is None or "hit_rule" not in lesions.columns:
        return
    rules = pd.unique(lesions["hit_rule"].dropna().astype(str))
    if len(rules) and rules[0] != det.lesions.rule_text:
        raise PlanError(MSG_HIT_RULE.format(plan=plan.where, key=plan.key("detection.lesions.hit_rule"),
                                            rule=det.lesions.rule_text, table=rules[0],
                                            lesions=plan.lesions))


def _check_axes(cases: pd.DataFrame, plan: Plan) -> None:
    det = plan.detection
    if det is None:
        return
    needed = {c for axes in det.subgroups for c in axes}
    if det.failure_map:
        needed |= {det.failure_map.rows, det.failure_map.cols}
    needed |= {c for axes in (*det.exploratory_subgroups, *det.compare_by) for c in axes}
    if det.lesions is not None:
        needed |= {c for axes in det.lesions.subgroups for c in axes} | {det.lesions.map_cols}
    missing = sorted(c for c in needed if c not in cases.columns)
    if missing:
        raise PlanError(f"{plan.where}: {plan.key('detection')} names column(s) {', '.join(missing)} "
                        f"that the cases table ({plan.cases}) lacks (columns: "
                        f"{', '.join(map(str, cases.columns[:20]))}); fix the names or add "
                        "a bin that creates them" + bin_hint(missing, cases.columns, plan))
    # every axis's levels compared as Unicode text (read_cases checked the contract's
    # columns; an axis may be any column)
    from stats.schema import check_lookalikes

    check_lookalikes(cases, sorted(needed), source=str(plan.cases))
    named = []
    if det.bootstrap.n_boot and det.bootstrap.strata is not None:
        named.append(("detection.bootstrap.strata", det.bootstrap.strata,
                      "name a column such as site, or leave strata out"))
    if det.adjusted is not None:
        for column in det.adjusted.group_columns:
            named.append(("detection.adjusted.group", column,
                          "name the clustering column, e.g. site"))
        for term in det.adjusted.interactions:
            for column in term.split(":"):
                named.append(("detection.adjusted.interactions", column.strip(),
                              "name factor columns of the cases table, e.g. phase:model"))
    for key, column, fix in named:
        if column not in cases.columns:
            raise PlanError(MSG_PLAN_COLUMN.format(
                plan=plan.where, key=plan.key(key), column=column, cases=plan.cases, fix=fix,
                columns=", ".join(map(str, cases.columns[:20]))))
    if det.adjusted is not None:
        from stats.formula import parse_formula

        parsed = from_stats(plan.where, plan.key("detection.adjusted.formula"),
                            lambda: parse_formula(det.adjusted.formula))
        try:
            from_stats(plan.where, plan.key("detection.adjusted.formula"),
                       lambda: parsed.check_columns(cases.columns,
                                                    source=f"the cases table ({plan.cases})"))
        except PlanError as exc:
            hint = bin_hint([c for c in parsed.rhs_columns() if c not in cases.columns],
                            cases.columns, plan)
            if not hint:
                raise
            raise PlanError(f"{exc}; or add a bin{hint}") from None
    _check_test_split(cases, plan)


def _check_test_split(cases: pd.DataFrame, plan: Plan) -> None:
    """The report analyses the test split when the table has a split column: a column
    without test rows would have the validation rows analysed as if they were test data."""
    if "split" not in cases.columns or (cases["split"] == "test").any():
        return
    counts = cases["split"].fillna("(empty)").value_counts()
    shown = ", ".join(f"{n} {v}" for v, n in counts.items())
    raise PlanError(MSG_NO_TEST.format(cases=plan.cases, counts=shown, plan=plan.path))


def _check_plan_against_data(plan: Plan, study: Tables) -> None:
    """Before any statistic: the planned bootstraps against the caps, with the data's real
    sizes (``stats.limits``), and the scheduler's address."""
    from stats import limits
    from stats.bootstrap import cluster_bootstrap_work
    from stats.crs_resample import crs_bootstrap_work
    from stats.label_error import imputation_work
    from stats.ranking import ranking_stability_work

    c = plan.where
    det, crs = plan.detection, plan.crs
    if det is not None and det.bootstrap.n_boot and study.cases is not None:
        rows = study.cases
        if "split" in rows.columns:
            rows = rows[rows["split"] == "test"]
        axes = list(det.subgroups) + ([(det.failure_map.rows, det.failure_map.cols)]
                                      if det.failure_map else [])
        cells = 1 + sum(_n_levels(rows, axis) for axis in axes)
        work = cluster_bootstrap_work(
            det.bootstrap.n_boot, rows["patient_id"].nunique(), cells, rows["model"].nunique(),
            setting="detection.bootstrap.n_boot", what="the bootstrap")
        from_stats(c, plan.key("detection.bootstrap.n_boot"), limits.check, work)
    if crs is not None and study.runs is not None:
        n_enc = int(study.runs.groupby("regime")["encoder"].nunique().max())
        if crs.k > n_enc:
            raise PlanError(MSG_K_ENCODERS.format(plan=plan.where, key=plan.key("crs.k"), k=crs.k,
                                                  n=n_enc,
                                                  runs=plan.runs))
        if crs.n_weights:
            work = ranking_stability_work(crs.n_weights, n_enc, setting="crs.n_weights")
            from_stats(c, plan.key("crs.n_weights"), limits.check, work)
        regimes = []
        for _, part in study.runs.groupby("regime", sort=True):
            by_ds = part.groupby("dataset", sort=True)
            regimes.append((part["encoder"].nunique(), list(by_ds["seed"].nunique()),
                            list(by_ds[["label_fraction", "condition", "severity"]]
                                 .apply(lambda d: len(d.drop_duplicates())))))
        work = crs_bootstrap_work(crs.bootstrap.n_boot, regimes, setting="crs.bootstrap.n_boot",
                                         what="the CRS bootstrap")
        from_stats(c, plan.key("crs.bootstrap.n_boot"), limits.check, work)
    if det is not None and study.cases is not None:
        _check_detection_extras(plan, study)
    opts = plan.metadata_options
    if (opts is not None and opts.label_error is not None and det is not None
            and study.cases is not None):
        work = imputation_work(opts.n_imputations, len(study.cases),
                                      setting="metadata.n_imputations")
        from_stats(c, plan.key("metadata.n_imputations"), limits.check, work)
    if plan.scheduler is not None:
        from stats._parallel import connect

        from_stats(c, plan.key("scheduler"), lambda: connect(plan.scheduler).close())


def _check_detection_extras(plan: Plan, study: Tables) -> None:
    """The operating points', the lesions' and the gap decomposition's bootstraps against
    the caps, sized by the data (each estimate stated beside its engine)."""
    from stats import limits
    from stats.gaps import gap_bootstrap_work
    from stats.localization import froc_bootstrap_work
    from stats.operating import roc_bootstrap_work

    c, det, rows = plan.where, plan.detection, study.cases
    if "split" in rows.columns:
        rows = rows[rows["split"] == "test"]
    patients = rows["patient_id"].nunique() if "patient_id" in rows.columns else len(rows)
    op = det.operating_points
    if op is not None and op.n_boot:
        points = int(rows.groupby("model")["score"].nunique().max()) + 1 if len(rows) else 1
        work = roc_bootstrap_work(op.n_boot, patients, points,
                                  setting="detection.operating_points.n_boot")
        from_stats(c, plan.key("detection.operating_points.n_boot"), limits.check, work)
    les = det.lesions
    if les is not None and les.n_boot and getattr(study, "lesions", None) is not None:
        work = froc_bootstrap_work(les.n_boot, patients, len(study.lesions),
                                   len(les.fp_per_scan), setting="detection.lesions.n_boot")
        from_stats(c, plan.key("detection.lesions.n_boot"), limits.check, work)
    gaps = det.gaps
    if gaps is not None and gaps.n_boot:
        n_models = rows["model"].nunique() if "model" in rows.columns else 1
        n_fits = max(len(gaps.contrasts), 1) * n_models
        n_params = 2 + 10 * max((len(ct.covariates or ()) for ct in gaps.contrasts), default=1)
        work = gap_bootstrap_work(gaps.n_boot, len(rows) // max(n_models, 1), n_params, n_fits,
                                  setting="detection.gaps.n_boot")
        from_stats(c, plan.key("detection.gaps.n_boot"), limits.check, work)


def _n_levels(rows: pd.DataFrame, axis: tuple[str, ...]) -> int:
    """Cells of one subgroup axis: the product of its columns' level counts."""
    n = 1
    for col in axis:
        values = rows[col]
        n *= (len(values.cat.categories) if isinstance(values.dtype, pd.CategoricalDtype)
              else max(values.nunique(), 1))
    return n
