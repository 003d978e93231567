"""Table contracts: what clinrel reads (cases, runs) and what every ``stats`` function returns.

Inputs are validated by :func:`read_cases` and :func:`read_runs`; a violation raises
:class:`ContractError` whose message names the file, the column, up to five offending
rows (1-based data rows, i.e. the row numbers R's ``read.csv`` would give) and the fix.
Messages are module constants so tests can match them.

Outputs follow the *tidy estimate contract* (``ESTIMATE_COLUMNS``): one long DataFrame,
fixed columns, scalars only, the same dtypes whatever the input. ``tidy()`` builds such
a frame and ``check_tidy()`` guards it (used by one contract test over every public
function).
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from stats.errors import ContractError  # noqa: F401  (re-exported: stats.schema.ContractError)

# --------------------------------------------------------------------------- errors


MSG_MISSING_FILE = "{source}: file not found; check the path (relative paths are read from {cwd})"
MSG_ZERO_BYTE = "{source}: the file is empty (0 bytes); export the table again"
MSG_NOT_REGULAR = ("{source}: is {kind}, not a file; give the path of a table file (.csv, "
                   ".tsv or .parquet)")
MSG_UNREADABLE_FILE = "{source}: cannot be read ({detail}); check the path and its permissions"
MSG_NOT_TABULAR = ("{source}: cannot be read as a {kind} table ({detail}); "
                   "save it as CSV (UTF-8, comma-separated, header row) or parquet")
MSG_BAD_SUFFIX = ("{source}: unknown file type '{suffix}'; "
                  "give a .csv, .tsv, .txt or .parquet file")
MSG_ENCODING = ("{source}: not valid UTF-8 text ({detail}); "
                "re-save the file as UTF-8 (in R: write.csv(..., fileEncoding = 'UTF-8'))")
MSG_EMPTY = "{source}: the {table} table has no rows; it needs at least one row per {unit}"
MSG_MISSING_COLUMNS = ("{source}: required column(s) {columns} missing from the {table} table "
                       "(columns present: {present}); add or rename them")
MSG_NOT_NUMERIC = ("{source}: column '{column}' must be numeric; rows {rows} have {values}; "
                   "recode them as numbers or drop the rows")
MSG_TEMPORAL = ("{source}: column '{column}' must be numeric; it holds dates or times "
                "({dtype}; rows {rows} have {values}), which would be read as nanoseconds "
                "since 1970; give the number itself (a score, a 0/1 label, an age in years)")
MSG_NAN = ("{source}: column '{column}' has missing values; rows {rows} are empty; "
           "fill them in or drop the rows")
MSG_BINARY = ("{source}: column '{column}' must be 0/1; rows {rows} have {values}; "
              "recode them (1 = {one}, 0 = {zero}) or drop the rows")
MSG_NONFINITE = ("{source}: column '{column}' must be finite; rows {rows} have {values}; "
                 "replace infinities or drop the rows")
MSG_NEGATIVE = ("{source}: column '{column}' must be >= 0; rows {rows} have {values}; "
                "a score is a voxel count or a probability; check the export")
MSG_DUPLICATE = ("{source}: duplicate {key} pairs; rows {rows} repeat {values}; "
                 "keep one row per {key}")
MSG_UNPAIRED = ("{source}: models do not cover the same cases (paired design); {details} "
                "(rows {rows} hold them for other models); "
                "give every model a row for every case, or drop those cases from all models")
MSG_SPLIT = ("{source}: column 'split' must be 'validation' or 'test'; rows {rows} have {values}; "
             "recode them")
MSG_FRACTION = ("{source}: column 'label_fraction' must lie in (0, 1]; rows {rows} have {values}; "
                "write fractions, not percentages (0.1, not 10)")
MSG_RANGE = ("{source}: column '{column}' must lie in [{lo}, {hi}]; rows {rows} have {values}; "
             "check the export")
MSG_SEVERITY = ("{source}: column 'severity' must be a whole number (0 for clean/shift, 1-3 for "
                "perturbations); rows {rows} have {values}; recode them")
MSG_NO_CLEAN = ("{source}: every encoder x dataset needs runs at condition 'clean' with "
                "label_fraction 1 (the discrimination and calibration axes are read there); "
                "missing for {pairs}; add those runs")
MSG_REGIME = ("{source}: column 'regime' must be 'frozen' or 'adapted'; rows {rows} have {values}; "
              "recode them")
MSG_PROTOCOL = ("{source}: column 'protocol' must be 'probe', 'prompt' or 'lora'; rows {rows} "
                "have {values}; recode them")
MSG_PROTOCOL_REGIME = ("{source}: column 'protocol' does not match column 'regime': a 'lora' "
                       "run adapts the encoder (regime 'adapted'), a 'probe' or 'prompt' run "
                       "keeps it frozen (regime 'frozen'); rows {rows} have {values}; fix one "
                       "of the two columns (or drop 'regime': it follows from 'protocol')")
MSG_MULTICLASS_LABEL = ("{source}: column 'label' must name one of the classes of the "
                        "probability columns ({classes}); rows {rows} have {values}; recode "
                        "the labels or add their prob_<class> columns")
MSG_MULTICLASS_SUM = ("{source}: the class probabilities prob_<class> of a row must sum to 1 "
                      "(within 1e-6); rows {rows} sum to {values}; pass normalized "
                      "probabilities (softmax output)")
MSG_MULTICLASS_FEW = ("{source}: a multiclass probe_predictions table needs a probability "
                      "column prob_<class> for at least 2 classes; found {found}; add one "
                      "column per class, or a 'prob' column for a binary probe")
MSG_DUP_COLUMNS = ("{source}: column name(s) {columns} appear more than once; "
                   "rename or drop the copies so each column name is unique")
MSG_EMPTY_ID = ("{source}: column '{column}' has empty identifiers; rows {rows}; "
                "every row needs an identifier")
MSG_SPLIT_MODELS = ("{source}: column 'split' must be the same for every model of a case; "
                    "case_id {ids} have different splits in different models' rows (rows {rows} "
                    "have {values}); give each case one split (validation or test) in every "
                    "model's row")
MSG_WHOLE = ("{source}: column '{column}' must hold whole numbers of at most 2**53 in magnitude; "
             "rows {rows} have {values}; recode them")
INVISIBLE_HINT = ("(ids written as code points, e.g. '\\ufeff' a byte-order mark, '\\u200b' a "
                 "zero-width space, 'e\\u0301' an accent stored apart, differ from look-alike "
                 "ids; remove invisible characters and store text as Unicode NFC)")

# --------------------------------------------------------------------------- contracts

CASES_REQUIRED = ("case_id", "model", "label", "score")
CASES_OPTIONAL = ("site", "patient_id", "pred", "split", "age", "sex", "race", "phase", "scanner",
                  "tumor_size_mm", "tumor_location")
#: the one site of a table without a ``site`` column (a single-site study); read_cases adds
#: it and marks the table with ``attrs["implicit_site"] = True`` so outputs can state it
IMPLICIT_SITE = "single_site"
CASES_NUMERIC = ("label", "score", "pred", "age", "tumor_size_mm")
#: the cases columns whose look-alike values are refused when read (the ids and the
#: contract's subgroup columns; every axis a plan names is checked when the plan is run)
CASES_LOOKALIKE = ("case_id", "model", "site", "patient_id", "split", "sex", "race", "phase",
                   "scanner", "tumor_location")
SPLITS = ("validation", "test")

RUNS_REQUIRED = ("encoder", "dataset", "label_fraction", "condition", "severity", "seed",
                 "auroc", "ece")
RUNS_OPTIONAL = ("regime", "brier", "nll", "ece_after_ts", "layer", "protocol", "val_auroc")
RUNS_KEY = ("encoder", "dataset", "label_fraction", "condition", "severity", "seed")
RUNS_NUMERIC = ("label_fraction", "severity", "seed", "auroc", "ece", "brier", "nll",
                "ece_after_ts", "val_auroc")
REGIMES = ("frozen", "adapted")
#: how a run was made (optional column ``protocol``): a linear probe on frozen features, a
#: prompt (zero-shot, frozen encoder), or LoRA adapters on the encoder (regime adapted)
PROTOCOLS = ("probe", "prompt", "lora")
#: the regime each protocol implies
PROTOCOL_REGIME = {"probe": "frozen", "prompt": "frozen", "lora": "adapted"}
#: columns that, where present, are part of a run's key besides regime and RUNS_KEY
RUN_VARIANTS = ("protocol", "layer")
#: multiclass probe predictions: one probability column per class, named prob_<class>
CLASS_PREFIX = "prob_"
#: class probabilities of a row may miss 1 by this much (float32 softmax outputs)
CLASS_SUM_TOL = 1e-6

PROBE_REQUIRED = ("encoder", "dataset", "label_fraction", "condition", "severity", "seed",
                  "case_id", "label", "prob")
#: a multiclass table has prob_<class> columns instead of ``prob``
PROBE_REQUIRED_MULTICLASS = tuple(c for c in PROBE_REQUIRED if c != "prob")
PROBE_SPLITS = ("validation", "calibration", "test")
#: whole-number columns are stored as float64 while validated; beyond 2**53 they are inexact
MAX_WHOLE = 2 ** 53

# --------------------------------------------------------------------------- tidy contract

#: Columns every public ``stats`` function returns, in this order, after its grouping
#: columns (``model, group_var, group_level`` for detection; ``encoder`` ... for CRS).
ESTIMATE_COLUMNS = ("estimand", "estimate", "std_error", "conf_low", "conf_high", "conf_level",
                    "n", "n_pos", "n_neg", "method", "flag", "statistic", "p_value", "p_adjusted")
_FLOAT_COLUMNS = ("estimate", "std_error", "conf_low", "conf_high", "conf_level", "n", "n_pos",
                  "n_neg", "statistic", "p_value", "p_adjusted")
_TEXT_COLUMNS = ("estimand", "method", "flag")

#: Extra columns of the proportion and AUC rows (``stats.subgroup_metrics`` and the like).
EXTRA_GLOSSARY: dict[str, str] = {
    "numerator": "the count in the proportion's numerator (e.g. true positives)",
    "denominator": "the count in its denominator (e.g. reference positives)",
    "n_clusters": "the clusters (patients) behind the row's scans",
    "design_effect": "the ratio of the cluster-aware variance to the binomial's (NaN where "
                     "not estimable; 1 without repeated patients)",
    "n_effective": "the effective sample size the cluster-aware interval uses "
                   "(Korn & Graubard; at most n)",
}

#: The column glossary (printed in reports and the README).
GLOSSARY: dict[str, str] = {
    "estimand": "what is estimated: a metric (sensitivity, auc, ...), a model term, or an axis",
    "model": "the model (or encoder) the row describes",
    "group_var": "the subgroup axis; 'overall' for the whole cohort; 'a:b' for an intersection",
    "group_level": "the level of group_var; 'overall' for the whole cohort; 'x:y' for an intersection",
    "estimate": "point estimate (a proportion, AUC, log-odds, difference, score, ...)",
    "std_error": "standard error where one is defined (NaN otherwise)",
    "conf_low": "lower confidence limit",
    "conf_high": "upper confidence limit",
    "conf_level": "confidence level of the interval, e.g. 0.95",
    "n": "number of cases (rows) the estimate uses",
    "n_pos": "number of reference-standard positives (label 1) among them",
    "n_neg": "number of reference-standard negatives (label 0) among them",
    "method": "how the interval or test was computed (wilson, delong, bootstrap-percentile, ...)",
    "flag": "'' when fine; else ';'-joined codes such as small_n, empty, not_estimable, "
            "deff_not_estimable, no_interval, auc_boundary, separation, singular, ...",
    "statistic": "test statistic (z, chi-square, ...) for tests and model terms",
    "p_value": "unadjusted two-sided p-value",
    "p_adjusted": "multiplicity-adjusted p-value (method in the row's method or a column)",
}


def tidy(frame: pd.DataFrame | dict, *, group_cols: Sequence[str] = ()) -> pd.DataFrame:
    """Return ``frame`` in the tidy estimate contract.

    Missing contract columns are added (NaN, or ``""`` for ``flag``), numeric columns are
    cast to float64 and text columns to object, and the columns are ordered
    ``estimand, *group_cols, <contract>, <any extra columns>``.
    """
    df = pd.DataFrame(frame).copy()
    for col in ESTIMATE_COLUMNS:
        if col not in df.columns:
            df[col] = "" if col == "flag" else (np.nan if col not in _TEXT_COLUMNS else "")
    for col in _FLOAT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="raise").astype("float64")
    for col in _TEXT_COLUMNS:
        df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str).astype(object)
    for col in group_cols:
        if col not in df.columns:
            raise KeyError(f"grouping column {col!r} missing from tidy output")
    lead = ["estimand", *group_cols]
    rest = [c for c in ESTIMATE_COLUMNS if c != "estimand"]
    extra = [c for c in df.columns if c not in lead and c not in rest]
    return df[lead + rest + extra].reset_index(drop=True)


def check_tidy(df: pd.DataFrame) -> None:
    """Raise AssertionError if ``df`` breaks the tidy estimate contract."""
    if not isinstance(df, pd.DataFrame):
        raise AssertionError(f"expected a DataFrame, got {type(df).__name__}")
    missing = [c for c in ESTIMATE_COLUMNS if c not in df.columns]
    if missing:
        raise AssertionError(f"tidy output lacks columns {missing}")
    if df.columns[0] != "estimand":
        raise AssertionError("the first column of a tidy output must be 'estimand'")
    for col in _FLOAT_COLUMNS:
        if df[col].dtype != np.float64:
            raise AssertionError(f"column {col!r} must be float64, is {df[col].dtype}")
    for col in _TEXT_COLUMNS:
        if df[col].dtype != object:
            raise AssertionError(f"column {col!r} must be object (str), is {df[col].dtype}")
    for col in df.columns:
        if df[col].dtype == object and len(df):
            bad = df[col].map(lambda v: isinstance(v, (list, tuple, dict, np.ndarray, pd.Series)))
            if bad.any():
                raise AssertionError(f"column {col!r} holds arrays or containers in cells")
    if set(df.columns) - set(ESTIMATE_COLUMNS):
        snake = [c for c in df.columns if c != c.lower() or " " in c or "-" in c]
        if snake:
            raise AssertionError(f"columns must be snake_case: {snake}")


# --------------------------------------------------------------------------- helpers

def _rows_text(idx: Iterable[int], limit: int = 5) -> str:
    idx = list(idx)
    shown = ", ".join(str(int(i) + 1) for i in idx[:limit])
    return shown + (f" (and {len(idx) - limit} more)" if len(idx) > limit else "")


def _values_text(values: Iterable, limit: int = 5) -> str:
    vals = []
    for v in list(values)[:limit]:
        if isinstance(v, float) and math.isnan(v):
            vals.append("NaN")
        else:
            vals.append(repr(v.item() if isinstance(v, np.generic) else v))
    return ", ".join(vals)


def show_id(value, *, quote: bool = False) -> str:
    """An identifier as shown in a message: as written (in quotes with ``quote``) when it is
    plain printable ASCII, else in Python's ``ascii()`` form, so that ids that differ only
    invisibly (a BOM, a zero-width space, NFC vs NFD accents) show their code points:
    ``'\\ufeffP001'``."""
    text = str(value)
    if text.isascii() and text.isprintable():
        return f"'{text}'" if quote else text
    return ascii(text)


def ids_text(ids: Sequence, limit: int = 5, *, hint: bool = True) -> str:
    """Up to ``limit`` ids for a message (:func:`show_id`) and the count left out; with
    ``hint``, when some are shown as code points, what that means (``INVISIBLE_HINT``)."""
    ids = list(ids)
    text = ", ".join(show_id(i) for i in ids[:limit])
    text += f" (and {len(ids) - limit} more)" if len(ids) > limit else ""
    return text + (" " + INVISIBLE_HINT if hint and invisible(ids[:limit]) else "")


def names_text(names: Sequence, *, hint: bool = True) -> str:
    """Column names for a message, each quoted, as code points where they are not plain
    printable ASCII (:func:`show_id`), with ``INVISIBLE_HINT`` when one is."""
    names = [str(n) for n in names]
    text = ", ".join(show_id(n, quote=True) for n in names)
    return text + (" " + INVISIBLE_HINT if hint and invisible(names) else "")


def invisible(ids: Iterable) -> bool:
    """Whether any of ``ids`` is shown as code points by :func:`show_id`."""
    return any(show_id(i) != str(i) for i in ids)


def _fail(template: str, *, source: str, column: str | None = None, rows=None, **kw) -> None:
    rows = list(rows) if rows is not None else None
    shown = _rows_text(rows or [])
    msg = template.format(source=source, column=column, rows=shown, **kw)
    if rows is not None and len(rows) == 1:  # grammar: "row 7 has", not "rows 7 have"
        msg = msg.replace(f"rows {shown} have", f"row {shown} has").replace(
            f"rows {shown} repeat", f"row {shown} repeats").replace(f"rows {shown} are", f"row {shown} is")
    raise ContractError(msg, source=source, column=column,
                        rows=[int(r) + 1 for r in (rows or [])][:5])


def _source_name(path_or_df, default: str) -> str:
    if isinstance(path_or_df, (str, os.PathLike)):
        return str(path_or_df)
    return default


#: identifier and name columns of the tables' contracts, which the readers turn into text
#: whatever the file type: read from CSV as text, so ids "002" and "2" (or patients "0"
#: and "00") stay distinct instead of both becoming the number 2 (or 0). A covariate
#: (e.g. a numeric ``scanner``) is not among them: read from CSV or parquet it has the same
#: type. Other cells follow pandas' (and R's read.csv's) rules: an empty cell, "NA",
#: "N/A", "NaN", "null" and the like are missing.
TEXT_ID_COLUMNS = ("case_id", "patient_id", "model", "site", "encoder", "dataset",
                   "condition", "extractor", "field", "value")
#: the lesions table's ids (a lesion "01" is not lesion "1")
TEXT_ID_COLUMNS = TEXT_ID_COLUMNS + ("lesion_id", "matched", "duplicate_of")
#: of those, the identifiers and names whose text is kept as written: a site or model
#: called "NA" or "None" is a name, not a missing value (only an empty cell is missing)
LITERAL_ID_COLUMNS = tuple(c for c in TEXT_ID_COLUMNS if c != "value")


def _na_strings() -> frozenset:
    """The cell texts pandas reads as missing by default (R's read.csv: "NA"), from pandas
    itself, so clinrel's rule for non-id columns is pandas' own."""
    try:
        from pandas._libs.parsers import STR_NA_VALUES
        return frozenset(STR_NA_VALUES)
    except ImportError:      # pragma: no cover - a pandas that moved it
        return frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN",
                          "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN",
                          "None", "n/a", "nan", "null"})


def read_table(path_or_df, *, table: str = "table") -> tuple[pd.DataFrame, str]:
    """Read a CSV/TSV/parquet file (or take a DataFrame) and return ``(frame, source)``.

    Every failure to read becomes a :class:`ContractError` naming the file and the fix.
    The columns of :data:`TEXT_ID_COLUMNS` are read from CSV as text.
    """
    if isinstance(path_or_df, pd.DataFrame):
        df, source = path_or_df.copy(), f"<{table} DataFrame>"
        return _checked_columns(df, source), source
    if not isinstance(path_or_df, (str, os.PathLike)):
        raise TypeError(f"expected a path or a DataFrame, got {type(path_or_df).__name__}")
    path = Path(path_or_df)
    source = str(path)
    size = check_input_file(path, source=source)
    if size == 0:
        _fail(MSG_ZERO_BYTE, source=source)
    suffix = path.suffix.lower()
    if suffix == ".parquet" or suffix == ".pq":
        from stats.limits import check_columns, check_rows

        try:
            meta = _parquet_metadata(path)
        except Exception as exc:  # pyarrow raises several types for a truncated/garbage file
            _fail(MSG_NOT_TABULAR, source=source, kind="parquet",
                  detail=str(exc).splitlines()[0][:160])
        check_columns(meta.num_columns, source=source,
                      how="from the parquet schema, before loading")
        check_rows(meta.num_rows, source=source, how="from the parquet metadata, before loading")
        try:
            df = pd.read_parquet(path)
        except Exception as exc:
            _fail(MSG_NOT_TABULAR, source=source, kind="parquet",
                  detail=str(exc).splitlines()[0][:160])
    elif suffix in (".csv", ".tsv", ".txt"):
        _check_header_width(path, source=source, sep="\t" if suffix == ".tsv" else None)
        raw = path.read_bytes()
        if b"\x00" in raw:
            _fail(MSG_NOT_TABULAR, source=source, kind="CSV",
                  detail=f"it contains binary (NUL) bytes, the first at byte {raw.index(0)}")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            _fail(MSG_ENCODING, source=source, detail=f"byte {exc.start}")
        from stats.limits import check_rows

        check_rows(raw.count(b"\n") - 1, source=source, how="counted as lines, before parsing")
        sep = "\t" if suffix == ".tsv" else None
        _check_header(raw, source, "\t" if suffix == ".tsv" else None)
        try:
            kw = dict(sep=sep, engine="python", encoding="utf-8-sig", skipinitialspace=True)
            # the header as pandas reads it; names match the contract once trimmed ("site "
            # is site, as read_cases trims it later)
            names = list(pd.read_csv(path, nrows=0, **kw).columns)
            literal = [c for c in names if str(c).strip() in LITERAL_ID_COLUMNS]
            na = ({c: ([""] if c in literal else sorted(_na_strings())) for c in names}
                  if literal else None)
            df = pd.read_csv(path, dtype={c: str for c in names
                                          if str(c).strip() in TEXT_ID_COLUMNS},
                             keep_default_na=not literal, na_values=na, **kw)
        except Exception as exc:
            _fail(MSG_NOT_TABULAR, source=source, kind="CSV",
                  detail=str(exc).splitlines()[0][:160])
        if df.shape[1] <= 1 and df.shape[0] > 0 and len(df.columns) == 1 and "," not in df.columns[0]:
            # a single column is legal only if it is what the caller asked for; leave to checks
            pass
    else:
        _fail(MSG_BAD_SUFFIX, source=source, suffix=suffix or "(none)")
    return _checked_columns(df, source), source


def check_input_file(path: str | os.PathLike, *, source: str | None = None) -> int:
    """Refuse, before opening it, a path that is not a regular file (a folder, a FIFO, a
    device such as a link to /dev/zero: reading one could block or never end) or a file
    above the size cap (``stats.limits`` ``max_file_gb``); return its size in bytes.
    Symbolic links are followed: what counts is the file they name."""
    import stat

    from stats.limits import check_file_size

    source = str(path) if source is None else source
    try:
        st = os.stat(path)
    except FileNotFoundError:
        _fail(MSG_MISSING_FILE, source=source, cwd=os.getcwd())
    except OSError as exc:
        _fail(MSG_UNREADABLE_FILE, source=source, detail=exc.strerror or type(exc).__name__)
    if not stat.S_ISREG(st.st_mode):
        _fail(MSG_NOT_REGULAR, source=source, kind=_file_kind(st.st_mode))
    check_file_size(st.st_size, source=source)
    return int(st.st_size)


def _file_kind(mode: int) -> str:
    import stat

    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _parquet_metadata(path):
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata


def _check_header_width(path: Path, *, source: str, sep: str | None) -> None:
    """Read the header line alone (at most ``stats.limits.MAX_HEADER_BYTES``) and refuse a
    table wider than the ``max_columns`` cap before the rest is read: a CSV with 100,000
    extra header columns took 75 s to parse."""
    import csv
    import io

    from stats.limits import MAX_HEADER_BYTES, MSG_HEADER_LONG, check_columns, current

    try:
        with open(path, "rb") as fh:
            head = fh.read(MAX_HEADER_BYTES + 1)
    except OSError as exc:
        _fail(MSG_UNREADABLE_FILE, source=source, detail=exc.strerror or type(exc).__name__)
    end = head.find(b"\n")
    if end < 0 and len(head) > MAX_HEADER_BYTES:
        _fail(MSG_HEADER_LONG, source=source, cap=MAX_HEADER_BYTES, columns=current().max_columns)
    text = (head if end < 0 else head[:end]).decode("utf-8-sig", errors="replace")
    line = (text.splitlines() or [""])[0]     # as _check_header and pandas split lines
    if sep is None:
        try:
            sep = csv.Sniffer().sniff(line[:65536], delimiters=",;\t|").delimiter
        except csv.Error:
            sep = ","
    try:
        n = len(next(csv.reader(io.StringIO(line), delimiter=sep), []))
    except csv.Error:                         # a malformed line: an upper bound
        n = line.count(sep) + 1
    check_columns(n, source=source, how="counted in the header line, before parsing")


def _check_header(raw: bytes, source: str, sep: str | None) -> None:
    """pandas silently renames a repeated CSV header ('site', 'site.1'); refuse it instead."""
    import csv
    import io

    first = raw.decode("utf-8-sig", errors="replace").splitlines()[:1]
    if not first:
        return
    if sep is None:
        try:
            sep = csv.Sniffer().sniff(first[0], delimiters=",;\t|").delimiter
        except csv.Error:
            sep = ","
    names = [c.strip() for c in next(csv.reader(io.StringIO(first[0]), delimiter=sep), [])]
    seen, dup = set(), []
    for name in names:
        if name in seen and name and name not in dup:
            dup.append(name)
        seen.add(name)
    if dup:
        _fail(MSG_DUP_COLUMNS, source=source, column=dup[0], columns=names_text(dup))


def _checked_columns(df: pd.DataFrame, source: str) -> pd.DataFrame:
    df.columns = [str(c).strip() for c in df.columns]
    dup = pd.Index(df.columns)[pd.Index(df.columns).duplicated()].unique()
    if len(dup):
        _fail(MSG_DUP_COLUMNS, source=source, column=str(dup[0]), columns=names_text(dup))
    return df


def _require_columns(df, required, *, source, table):
    missing = [c for c in required if c not in df.columns]
    if missing:
        present = list(df.columns[:12])
        # a name shown as code points ('\ufeffcase_id': a second byte-order mark) says why
        # a column that looks present is missing
        _fail(MSG_MISSING_COLUMNS, source=source, columns=names_text(missing, hint=False),
              table=table, present=names_text(present, hint=True) or "none",
              column=missing[0])


def _require_numeric(df, column, *, source):
    if column not in df.columns:
        return
    col = df[column]
    if _is_temporal(col):   # pd.to_numeric would turn a date into nanoseconds since 1970
        bad = np.flatnonzero(col.notna().to_numpy())
        _fail(MSG_TEMPORAL, source=source, column=column, rows=bad, dtype=str(col.dtype),
              values=_values_text([str(v) for v in col.iloc[bad[:5]]]))
    if pd.api.types.is_bool_dtype(col):
        df[column] = col.astype("float64")
        return
    if pd.api.types.is_numeric_dtype(col):
        df[column] = col.astype("float64")
        return
    coerced = pd.to_numeric(col, errors="coerce")
    bad = np.flatnonzero(coerced.isna().to_numpy() & col.notna().to_numpy())
    if len(bad):
        _fail(MSG_NOT_NUMERIC, source=source, column=column, rows=bad,
              values=_values_text(col.iloc[bad]))
    df[column] = coerced.astype("float64")


def _is_temporal(col: pd.Series) -> bool:
    """Dates, times and durations (numpy, pandas tz-aware, period, or Python objects)."""
    import datetime

    dtype = col.dtype
    if (pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype)
            or isinstance(dtype, pd.PeriodDtype)):
        return True
    if dtype == object and len(col):
        first = col.dropna().head(50)
        return len(first) > 0 and all(isinstance(v, (datetime.date, datetime.time,
                                                     datetime.timedelta, pd.Period))
                                      for v in first)
    return False


def _require_complete(df, column, *, source):
    bad = np.flatnonzero(df[column].isna().to_numpy())
    if len(bad):
        _fail(MSG_NAN, source=source, column=column, rows=bad)


def _require_binary(df, column, *, source, one, zero):
    vals = df[column].to_numpy(dtype="float64")
    bad = np.flatnonzero(~np.isin(vals, (0.0, 1.0)))
    if len(bad):
        _fail(MSG_BINARY, source=source, column=column, rows=bad,
              values=_values_text(df[column].iloc[bad]), one=one, zero=zero)
    df[column] = vals.astype("int64")


def _text(col: pd.Series, *, lower: bool = False) -> pd.Series:
    """``col.astype(str).str.strip()`` (then ``.str.lower()``), each distinct value
    converted once: ids repeat once per model, so this is far fewer string operations
    than one per row (850,000 rows, 85,000 case ids at BenchX scale)."""
    codes, uniq = pd.factorize(col.astype(str))
    text = pd.Series(uniq, dtype=object).str.strip()
    if lower:
        text = text.str.lower()
    return pd.Series(text.to_numpy(dtype=object)[codes], index=col.index, name=col.name)


def _require_ids(df, column, *, source):
    col = df[column]
    codes, uniq = pd.factorize(col.astype(str))
    stripped = pd.Series(uniq, dtype=object).str.strip().to_numpy(dtype=object)
    # as ``_text``, and the empty test on the distinct values, not on every row
    text = pd.Series(stripped[codes], index=col.index, name=col.name)
    empty = col.isna().to_numpy() | (stripped == "")[codes]
    bad = np.flatnonzero(empty)
    if len(bad):
        _fail(MSG_EMPTY_ID, source=source, column=column, rows=bad)
    df[column] = text


def _require_in(df, column, allowed, template, *, source):
    if column not in df.columns:
        return
    col = df[column]
    vals = _text(col, lower=True)
    bad = np.flatnonzero(col.notna().to_numpy() & ~vals.isin(allowed).to_numpy())
    if len(bad):
        _fail(template, source=source, column=column, rows=bad, values=_values_text(col.iloc[bad]))
    df[column] = vals.where(col.notna(), None)


def _require_range(df, column, lo, hi, *, source):
    if column not in df.columns:
        return
    v = df[column].to_numpy(dtype="float64")
    bad = np.flatnonzero(~np.isnan(v) & ((v < lo) | (v > hi)))
    if len(bad):
        _fail(MSG_RANGE, source=source, column=column, rows=bad, lo=lo, hi=hi,
              values=_values_text(df[column].iloc[bad]))


def _require_unique(df, key, *, source):
    dup = df.duplicated(list(key), keep="first").to_numpy()
    bad = np.flatnonzero(dup)
    if len(bad):
        vals = ["/".join(str(df[k].iloc[i]) for k in key) for i in bad[:5]]
        _fail(MSG_DUPLICATE, source=source, column=key[-1], rows=bad,
              key="(" + ", ".join(key) + ")", values=ids_text(vals))


def _require_nonempty(df, *, source, table, unit):
    if len(df) == 0:
        _fail(MSG_EMPTY, source=source, table=table, unit=unit)


# --------------------------------------------------------------------------- Unicode

#: characters that print as nothing: format characters (Unicode category Cf: zero-width
#: space and joiners, byte-order mark, bidi marks and overrides, soft hyphen, ...), plus
#: the combining grapheme joiner, variation selectors and the Hangul fillers
_INVISIBLE_EXTRA = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0"
                             + "".join(map(chr, range(0xFE00, 0xFE10))))
#: letters of other scripts that look like Latin ones (a subset of Unicode TR39's
#: confusables: the Cyrillic and Greek letters drawn like Latin letters); NFKC maps the
#: compatibility look-alikes (fullwidth letters, ligatures, superscripts) itself
_CONFUSABLE = str.maketrans({
    # Cyrillic
    "\u0430": "a", "\u0432": "B", "\u0435": "e", "\u043a": "k", "\u043c": "M",
    "\u043d": "H", "\u043e": "o", "\u0440": "p", "\u0441": "c", "\u0442": "T",
    "\u0443": "y", "\u0445": "x", "\u0455": "s", "\u0456": "i", "\u0458": "j",
    "\u04bb": "h", "\u0501": "d", "\u051b": "q", "\u051d": "w", "\u0410": "A",
    "\u0412": "B", "\u0415": "E", "\u041a": "K", "\u041c": "M", "\u041d": "H",
    "\u041e": "O", "\u0420": "P", "\u0421": "C", "\u0422": "T", "\u0425": "X",
    "\u0405": "S", "\u0406": "I", "\u0408": "J", "\u04ae": "Y", "\u0417": "3",
    # Greek
    "\u03bf": "o", "\u03b1": "a", "\u03bd": "v", "\u03b9": "i", "\u03ba": "k",
    "\u03c1": "p", "\u03c5": "u", "\u0391": "A", "\u0392": "B", "\u0395": "E",
    "\u0396": "Z", "\u0397": "H", "\u0399": "I", "\u039a": "K", "\u039c": "M",
    "\u039d": "N", "\u039f": "O", "\u03a1": "P", "\u03a4": "T", "\u03a5": "Y",
    "\u03a7": "X",
})

MSG_LOOKALIKE = ("{source}: column '{column}' has values that look the same but are different "
                 "text: {pairs} (rows {rows}); they differ in {what}; write each value one "
                 "way (remove invisible characters, and type letters in one script)")
#: the sentence recording an NFC merge (the flow of cases, clinrel validate)
NOTE_NFC_MERGED = ("{table} column '{column}': {n} row(s) written {written} (accents stored "
                  "apart, Unicode NFD) are read as '{nfc}' (NFC), the same text by Unicode's "
                  "canonical equivalence")


def _invisible_char(ch: str) -> bool:
    import unicodedata

    return ch in _INVISIBLE_EXTRA or unicodedata.category(ch) == "Cf"


def lookalike_key(text: str) -> str:
    """What ``text`` looks like when printed: NFKC, invisible characters dropped, runs of
    white space as one space and trimmed, Cyrillic and Greek look-alikes of Latin letters
    as those letters. Two different texts with one key print (nearly) the same."""
    import unicodedata

    if text.isascii():
        return " ".join(text.split())
    t = unicodedata.normalize("NFKC", text)
    t = "".join(ch for ch in t if not _invisible_char(ch))
    return " ".join(t.translate(_CONFUSABLE).split())


def _code_points(a: str, b: str) -> str:
    """The code points in one of ``a``, ``b`` and not the other, named."""
    import unicodedata

    diff = sorted((set(a) ^ set(b)), key=ord)
    named = [f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in diff if not
             (c.isascii() and c.isprintable() and not c.isspace())]
    return ", ".join(named) or "white space"


def _text_values(col: pd.Series):
    """``(codes, uniques)`` of a text-like column (None for another dtype)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), list(col.cat.categories)
    if col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
        codes, uniq = pd.factorize(col, use_na_sentinel=True)
        return codes, list(uniq)
    return None


def check_lookalikes(df: pd.DataFrame, columns: Sequence[str], *, source: str) -> None:
    """Refuse values of ``columns`` that look alike but are different text: they differ
    only in invisible characters (zero-width space, byte-order mark, bidi marks), in
    white space, or in look-alike letters of another script (Cyrillic 'а' for Latin 'a'):
    they would print as one subgroup level, or one id, and count as two. The
    :class:`ContractError` names the column, both values as code points, the characters
    that differ and rows (``lookalike_key``; run after :func:`unify_text`, so NFC and
    NFD spellings are already one)."""
    for column in columns:
        if column not in df.columns:
            continue
        got = _text_values(df[column])
        if got is None:
            continue
        texts = [u for u in got[1] if isinstance(u, str)]
        seen: dict[str, str] = {}
        for value in texts:
            other = seen.setdefault(lookalike_key(value), value)
            if other != value:
                rows = np.flatnonzero(df[column].isin([other, value]).to_numpy())
                _fail(MSG_LOOKALIKE, source=source, column=column, rows=rows,
                      pairs=f"{show_id(other, quote=True)} and {show_id(value, quote=True)}",
                      what=_code_points(other, value))


def unify_text(df: pd.DataFrame, columns: Sequence[str], *, table: str) -> list[dict]:
    """Rewrite the text of ``columns`` as Unicode NFC (in place); return the rewrites.

    A value stored decomposed (NFD: ``'Montre\\u0301al'``) and its composed form
    (NFC: ``'Montréal'``) are the same text by Unicode's canonical equivalence, and
    print the same: as written they would be two subgroup levels (or two ids) that look
    like one. Every value is rewritten as NFC, and each rewrite is returned, to be
    recorded (the flow of cases, ``clinrel validate``: :func:`merge_notes`), as
    ``{"table", "column", "written", "nfc", "rows"}``. Look-alikes that are different
    text are :func:`check_lookalikes`'s."""
    import unicodedata

    merged: list[dict] = []
    for column in columns:
        if column not in df.columns:
            continue
        col = df[column]
        is_cat = isinstance(col.dtype, pd.CategoricalDtype)
        got = _text_values(col)
        if got is None:
            continue
        codes, uniq = got
        texts = [u for u in uniq if isinstance(u, str)]
        if not texts:
            continue
        nfc = {u: (u if u.isascii() else unicodedata.normalize("NFC", u)) for u in texts}
        changed = [u for u in texts if nfc[u] != u]
        if not changed:
            continue
        counts = np.bincount(codes[codes >= 0], minlength=len(uniq))
        where = {u: i for i, u in enumerate(uniq) if isinstance(u, str)}
        for u in changed:
            merged.append({"table": table, "column": column, "written": u, "nfc": nfc[u],
                           "rows": int(counts[where[u]])})
        values = np.asarray([nfc.get(u, u) if isinstance(u, str) else u for u in uniq],
                            dtype=object)
        if is_cat:
            new = pd.Categorical(np.where(codes >= 0, values[np.maximum(codes, 0)], None),
                                 categories=list(dict.fromkeys(values)),
                                 ordered=col.cat.ordered)
            df[column] = pd.Series(new, index=col.index, name=column)
        else:
            out = values[np.maximum(codes, 0)]
            out[codes < 0] = col.to_numpy(dtype=object)[codes < 0]
            df[column] = pd.Series(out, index=col.index, name=column, dtype=object)
    return merged


def merge_notes(merged: Iterable[dict]) -> list[str]:
    """The sentences recording :func:`unify_text`'s rewrites (``NOTE_NFC_MERGED``)."""
    return [NOTE_NFC_MERGED.format(table=m["table"], column=m["column"], n=m["rows"],
                                  written=show_id(m["written"], quote=True), nfc=m["nfc"])
            for m in merged]


def _text_columns(df: pd.DataFrame, numeric: Sequence[str]) -> list[str]:
    return [c for c in df.columns if c not in numeric]


# --------------------------------------------------------------------------- readers

def read_cases(path_or_df, *, extra_numeric: Sequence[str] = ()) -> pd.DataFrame:
    """Read and validate a **cases** table (one row per model x case).

    Parameters
    ----------
    path_or_df : str, Path or DataFrame
        A CSV/TSV/parquet file or a DataFrame with at least ``case_id, model, label,
        score``. Without a ``site`` column the study is single-site: every row gets the
        site ``IMPLICIT_SITE`` (``"single_site"``) and ``attrs["implicit_site"]`` is True.
    extra_numeric : sequence of str
        Further columns that must be numeric (e.g. a user's continuous subgroup axis).

    Returns
    -------
    DataFrame
        A copy with ``label`` (and ``pred`` when given) as int64 0/1, numeric columns as
        float64, ``patient_id`` filled from ``case_id`` when absent, ``split`` in lower
        case, and ``case_id``, ``model``, ``site``, ``patient_id`` as str; ``attrs`` holds
        ``implicit_site`` (True when the table had no ``site`` column),
        ``implicit_patient`` (True when it had no ``patient_id`` column: each case its own
        patient) and ``text_merged`` (the values rewritten as Unicode NFC, one dict per
        spelling: :func:`unify_text`; text columns are compared as NFC, and values that
        only look alike are refused: :func:`check_lookalikes`).

    Raises
    ------
    ContractError
        When the file cannot be read or the table breaks the contract
        (docs/contracts.md); the message names the file, the column, up to five rows
        (1-based) and the fix.

    Examples
    --------
    >>> import pandas as pd
    >>> raw = pd.DataFrame({"case_id": ["c1", "c2", "c3"], "model": "unet",
    ...                     "label": [1, 0, 1], "score": [120.0, 3.0, 0.0]})
    >>> cases = read_cases(raw)
    >>> print(cases[["case_id", "label", "site", "patient_id"]].to_string(index=False))
    case_id  label        site patient_id
         c1      1 single_site         c1
         c2      0 single_site         c2
         c3      1 single_site         c3
    >>> cases.attrs["implicit_site"]
    True
    >>> read_cases(raw.assign(label=[1, 2, 1]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    stats.errors.ContractError: <cases DataFrame>: column 'label' must be 0/1; row 2 has 2.0; ...
    """
    df, source = read_table(path_or_df, table="cases")
    _require_columns(df, CASES_REQUIRED, source=source, table="cases")
    _require_nonempty(df, source=source, table="cases", unit="model x case")
    implicit_site = "site" not in df.columns
    if implicit_site:  # a single-site study: one site, stated (attrs) rather than required
        df["site"] = IMPLICIT_SITE
    for col in ("case_id", "model", "site"):
        _require_ids(df, col, source=source)
    implicit_patient = "patient_id" not in df.columns
    if not implicit_patient:
        pid = df["patient_id"]
        df["patient_id"] = _text(pid).where(pid.notna(), df["case_id"])
    else:
        df["patient_id"] = df["case_id"]
    for col in (*CASES_NUMERIC, *extra_numeric):
        _require_numeric(df, col, source=source)
    _require_complete(df, "label", source=source)
    _require_binary(df, "label", source=source, one="tumour present", zero="absent")
    _require_complete(df, "score", source=source)
    score = df["score"].to_numpy()
    bad = np.flatnonzero(~np.isfinite(score))
    if len(bad):
        _fail(MSG_NONFINITE, source=source, column="score", rows=bad,
              values=_values_text(df["score"].iloc[bad]))
    bad = np.flatnonzero(score < 0)
    if len(bad):
        _fail(MSG_NEGATIVE, source=source, column="score", rows=bad,
              values=_values_text(df["score"].iloc[bad]))
    if "pred" in df.columns:
        _require_complete(df, "pred", source=source)
        _require_binary(df, "pred", source=source, one="called positive", zero="called negative")
    _require_in(df, "split", SPLITS, MSG_SPLIT, source=source)
    # ids and subgroup levels are compared as Unicode text: NFC and NFD spellings are one
    # (recorded), look-alikes that are different text are refused
    merged = unify_text(df, _text_columns(df, (*CASES_NUMERIC, *extra_numeric)), table="cases")
    check_lookalikes(df, CASES_LOOKALIKE, source=source)
    _require_range(df, "age", 0, 130, source=source)
    _require_range(df, "tumor_size_mm", 0, 1000, source=source)
    _require_unique(df, ("model", "case_id"), source=source)
    _check_paired(df, source=source)
    _check_split_per_case(df, source=source)
    # one label per case: the reference standard cannot depend on the model
    per_case = df.groupby("case_id", sort=False)["label"].nunique()
    conflict = per_case.index[per_case.to_numpy() > 1]
    if len(conflict):
        bad = np.flatnonzero(df["case_id"].isin(conflict[:5]).to_numpy())
        _fail(MSG_BINARY.replace("must be 0/1", "must be the same for every model of a case"),
              source=source, column="label", rows=bad, values=_values_text(df["label"].iloc[bad]),
              one="tumour present", zero="absent")
    # a frame already indexed 0..n-1 is returned as it is (no copy of 850,000 rows)
    if not (isinstance(df.index, pd.RangeIndex) and df.index.equals(pd.RangeIndex(len(df)))):
        df = df.reset_index(drop=True)
    df.attrs["implicit_site"] = implicit_site
    df.attrs["implicit_patient"] = implicit_patient
    df.attrs["text_merged"] = merged
    return df


def _check_split_per_case(df, *, source):
    """A case is validation or test for every model (validate and report must agree)."""
    if "split" not in df.columns:
        return
    per_case = df.groupby("case_id", sort=False)["split"].nunique(dropna=False)
    conflict = per_case.index[per_case.to_numpy() > 1]
    if len(conflict):
        bad = np.flatnonzero(df["case_id"].isin(conflict[:5]).to_numpy())
        _fail(MSG_SPLIT_MODELS, source=source, column="split", rows=bad,
              ids=ids_text(list(conflict)), values=_values_text(df["split"].iloc[bad]))


def _check_paired(df, *, source):
    models = pd.unique(df["model"])
    if len(models) < 2:
        return
    # (model, case_id) is unique (checked before): every model has every case exactly
    # when each model has as many rows as there are distinct cases; the sets below,
    # which name what is missing, are built only when that count fails
    per_model = np.bincount(pd.factorize(df["model"])[0], minlength=len(models))
    if (per_model == df["case_id"].nunique()).all():
        return
    sets = {m: set(df.loc[df["model"] == m, "case_id"]) for m in models}
    union = set().union(*sets.values())
    details = []
    first_bad = None
    for m in models:
        missing = sorted(union - sets[m])
        if missing:
            details.append(f"model {show_id(m, quote=True)} lacks case_id "
                           f"{ids_text(missing, hint=False)}")
            if first_bad is None:
                first_bad = np.flatnonzero(df["case_id"].isin(missing[:5]).to_numpy())
    if details:
        hint = f" {INVISIBLE_HINT}" if invisible(union - set.intersection(*sets.values())) else ""
        _fail(MSG_UNPAIRED, source=source, column="case_id", rows=first_bad,
              details="; ".join(details[:5]) + hint)


def read_runs(path_or_df) -> pd.DataFrame:
    """Read and validate a **runs** table (one row per encoder x dataset x label_fraction x
    condition x severity x seed).

    Returns a copy with numeric columns as float64 (``severity`` and ``seed`` as int64),
    ``condition`` in lower case and ``regime`` defaulting to ``"frozen"``.

    Raises
    ------
    ContractError
        Missing columns, non-numeric values, ``label_fraction`` outside (0, 1], a
        non-integer ``severity``, AUROC or ECE outside [0, 1], duplicate run keys, or an
        encoder x dataset without a ``clean`` run at label fraction 1.

    Examples
    --------
    >>> import pandas as pd
    >>> runs = read_runs(pd.DataFrame({
    ...     "encoder": "resnet", "dataset": "liver", "label_fraction": [1, 0.1],
    ...     "condition": "clean", "severity": 0, "seed": 0, "auroc": [0.91, 0.84],
    ...     "ece": [0.04, 0.07]}))
    >>> print(runs[["encoder", "label_fraction", "seed", "regime"]].to_string(index=False))
    encoder  label_fraction  seed regime
     resnet             1.0     0 frozen
     resnet             0.1     0 frozen
    """
    df, source = read_table(path_or_df, table="runs")
    _require_columns(df, RUNS_REQUIRED, source=source, table="runs")
    _require_nonempty(df, source=source, table="runs", unit="run")
    for col in ("encoder", "dataset", "condition"):
        _require_ids(df, col, source=source)
    df["condition"] = df["condition"].str.lower()
    merged = unify_text(df, ("encoder", "dataset", "condition"), table="runs")
    check_lookalikes(df, ("encoder", "dataset", "condition"), source=source)
    for col in RUNS_NUMERIC:
        _require_numeric(df, col, source=source)
    for col in ("auroc", "ece"):
        _require_complete(df, col, source=source)
    _check_run_keys(df, source=source)
    for col in ("auroc", "ece", "brier", "ece_after_ts", "val_auroc"):
        _require_range(df, col, 0, 1, source=source)
    _regime_protocol_layer(df, source=source)
    _require_unique(df, run_key(df), source=source)
    anchor = df[(df["condition"] == "clean") & (df["label_fraction"] == 1.0)]
    have = set(map(tuple, anchor[["encoder", "dataset"]].drop_duplicates().to_numpy()))
    need = df[["encoder", "dataset"]].drop_duplicates()
    missing = [f"{e}/{d}" for e, d in need.to_numpy() if (e, d) not in have]
    if missing:
        shown = ", ".join(missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
        _fail(MSG_NO_CLEAN, source=source, column="condition", pairs=shown)
    df = df.reset_index(drop=True)
    df.attrs["text_merged"] = merged
    return df


def run_key(df: pd.DataFrame) -> tuple[str, ...]:
    """The columns that identify a run of ``df``: ``regime``, the variant columns present
    (``protocol``, ``layer``) and ``RUNS_KEY``."""
    return ("regime", *(c for c in RUN_VARIANTS if c in df.columns), *RUNS_KEY)


def _regime_protocol_layer(df, *, source):
    """``regime`` (default ``frozen``; with a ``protocol`` column and no ``regime``, the
    regime the protocol implies), ``protocol`` checked against :data:`PROTOCOLS` and
    against the regime, ``layer`` as text (missing -> ``""``: the encoder's one layer)."""
    has_regime = "regime" in df.columns
    if "protocol" in df.columns:
        df["protocol"] = df["protocol"].fillna("probe")
        _require_in(df, "protocol", PROTOCOLS, MSG_PROTOCOL, source=source)
        implied = df["protocol"].map(PROTOCOL_REGIME)
        if has_regime:
            df["regime"] = df["regime"].where(df["regime"].notna(), implied)
    if "regime" in df.columns:
        df["regime"] = df["regime"].fillna("frozen")
        _require_in(df, "regime", REGIMES, MSG_REGIME, source=source)
    else:
        df["regime"] = implied if "protocol" in df.columns else "frozen"
    if "protocol" in df.columns:
        bad = np.flatnonzero((df["regime"] != df["protocol"].map(PROTOCOL_REGIME)).to_numpy())
        if len(bad):
            _fail(MSG_PROTOCOL_REGIME, source=source, column="protocol", rows=bad,
                  values=_values_text([f"{p}/{r}" for p, r in zip(df["protocol"].iloc[bad],
                                                                  df["regime"].iloc[bad])]))
    if "layer" in df.columns:
        col = df["layer"]
        df["layer"] = _text(col).where(col.notna(), "").astype(object)


def _check_run_keys(df, *, source):
    """The numeric run keys: ``label_fraction`` in (0, 1]; ``severity`` (>= 0) and ``seed``
    whole numbers, finite and exactly representable (an infinite or 1e300 value would
    otherwise wrap to -9223372036854775808); both stored as int64."""
    for col in ("label_fraction", "severity", "seed"):
        _require_complete(df, col, source=source)
    frac = df["label_fraction"].to_numpy()
    bad = np.flatnonzero((frac <= 0) | (frac > 1))
    if len(bad):
        _fail(MSG_FRACTION, source=source, column="label_fraction", rows=bad,
              values=_values_text(df["label_fraction"].iloc[bad]))
    for col, template, lo in (("severity", MSG_SEVERITY, 0), ("seed", MSG_WHOLE, -MAX_WHOLE)):
        v = df[col].to_numpy()
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(v) | (v != np.round(v)) | (v < lo) | (v > MAX_WHOLE))
        if len(bad):
            _fail(template, source=source, column=col, rows=bad,
                  values=_values_text(df[col].iloc[bad]))
        df[col] = v.astype("int64")


def class_columns(df: pd.DataFrame) -> list[str]:
    """The multiclass probability columns ``prob_<class>`` of a probe_predictions table, in
    table order (empty for a binary table)."""
    return [c for c in df.columns if isinstance(c, str) and c.startswith(CLASS_PREFIX)
            and len(c) > len(CLASS_PREFIX)]


def read_probe_predictions(path_or_df) -> pd.DataFrame:
    """Read and validate a **probe_predictions** table (per-case probe probabilities: one
    row per encoder x run x case).

    Required columns: the run keys ``encoder, dataset, label_fraction, condition,
    severity, seed`` and ``case_id``, ``label`` and the probabilities: for a binary probe
    ``prob`` (the probability of label 1; ``label`` 0/1), for a multiclass probe one
    column ``prob_<class>`` per class (at least 2; each in [0, 1], a row summing to 1
    within 1e-6; ``label`` the class name, e.g. ``prob_melanoma`` and label
    ``melanoma``) and no ``prob``. Optional ``regime`` (default ``"frozen"``),
    ``protocol``, ``layer`` (as in the runs table, part of the run key) and ``split``
    (validation, calibration or test). Returns a copy with ``label`` as int64 (binary) or
    text (multiclass; ``attrs["classes"]`` lists the classes in column order),
    ``severity`` and ``seed`` as int64, ``condition`` and ``split`` in lower case.

    Raises
    ------
    ContractError
        As :func:`read_runs` for the run keys; a binary ``label`` not 0/1, ``prob``
        missing or outside [0, 1], a multiclass label that names no class, class
        probabilities outside [0, 1] or not summing to 1, an unknown split, a repeated
        (run, case_id).
    """
    df, source = read_table(path_or_df, table="probe_predictions")
    classes = class_columns(df)
    multiclass = "prob" not in df.columns and bool(classes)
    _require_columns(df, PROBE_REQUIRED_MULTICLASS if multiclass else PROBE_REQUIRED,
                     source=source, table="probe_predictions")
    _require_nonempty(df, source=source, table="probe_predictions", unit="encoder x run x case")
    for col in ("encoder", "dataset", "condition", "case_id"):
        _require_ids(df, col, source=source)
    df["condition"] = df["condition"].str.lower()
    merged = unify_text(df, ("encoder", "dataset", "condition", "case_id"),
                        table="probe_predictions")
    check_lookalikes(df, ("encoder", "dataset", "condition", "case_id"), source=source)
    probs = classes if multiclass else ["prob"]
    for col in ("label_fraction", "severity", "seed", *([] if multiclass else ["label"]), *probs):
        _require_numeric(df, col, source=source)
    _check_run_keys(df, source=source)
    for col in ("label", *probs):
        _require_complete(df, col, source=source)
    if multiclass:
        names = [c[len(CLASS_PREFIX):] for c in classes]
        if len(names) < 2:
            _fail(MSG_MULTICLASS_FEW, source=source, column=classes[0], found=", ".join(classes))
        lab = _text(df["label"])
        bad = np.flatnonzero(~lab.isin(names).to_numpy())
        if len(bad):
            _fail(MSG_MULTICLASS_LABEL, source=source, column="label", rows=bad,
                  classes=", ".join(names), values=_values_text(df["label"].iloc[bad]))
        df["label"] = lab.astype(object)
        for col in classes:
            _require_range(df, col, 0, 1, source=source)
        total = df[classes].to_numpy(dtype=float).sum(1)
        bad = np.flatnonzero(np.abs(total - 1.0) > CLASS_SUM_TOL)
        if len(bad):
            _fail(MSG_MULTICLASS_SUM, source=source, column=classes[0], rows=bad,
                  values=_values_text([float(t) for t in total[bad]]))
    else:
        _require_binary(df, "label", source=source, one="positive", zero="negative")
        _require_range(df, "prob", 0, 1, source=source)
    probe_split = MSG_SPLIT.replace("'validation' or 'test'", "'validation', 'calibration' or 'test'")
    _require_in(df, "split", PROBE_SPLITS, probe_split, source=source)
    _regime_protocol_layer(df, source=source)
    _require_unique(df, (*run_key(df), "case_id"), source=source)
    df = df.reset_index(drop=True)
    df.attrs["text_merged"] = merged
    if multiclass:
        df.attrs["classes"] = [c[len(CLASS_PREFIX):] for c in classes]
    return df


# --------------------------------------------------------------------------- lesions

LESIONS_REQUIRED = ("case_id", "model", "lesion_id", "kind")
LESIONS_OPTIONAL = ("score", "volume_mm3", "centroid_i_mm", "centroid_j_mm", "centroid_k_mm",
                    "matched", "duplicate_of", "dice", "iou", "diameter_mm", "location",
                    "hit_rule")
LESIONS_NUMERIC = ("score", "volume_mm3", "centroid_i_mm", "centroid_j_mm", "centroid_k_mm",
                   "dice", "iou", "diameter_mm")
LESION_KINDS = ("reference", "prediction")
MSG_LESION_KIND = ("{source}: column 'kind' must be 'reference' or 'prediction'; rows {rows} "
                   "have {values}; recode them")
MSG_LESION_SCORE = ("{source}: column 'score' must be given for every prediction (its "
                    "confidence, e.g. the maximum probability inside it); rows {rows} are "
                    "predictions without one; fill them in or drop the rows")
MSG_LESION_MATCHED_REF = ("{source}: column '{column}' of a prediction must name a reference "
                          "lesion of the same model and case; rows {rows} name {values}, which "
                          "are not among that case's reference lesion_id values; fix the ids "
                          "or leave the cell empty (a false positive)")
MSG_LESION_TWICE = ("{source}: a reference lesion is matched at most once (the hit rule "
                    "credits one prediction per lesion; others that hit it are duplicates, "
                    "column 'duplicate_of'); rows {rows} match {values} again; keep one match "
                    "and move the others to 'duplicate_of'")
MSG_LESION_BOTH = ("{source}: a prediction is either matched (column 'matched') or a "
                   "duplicate of a matched lesion ('duplicate_of'), not both; rows {rows} give "
                   "both; empty one of them")
MSG_LESION_REF_MATCHED = ("{source}: column 'matched' of a reference lesion names the "
                          "prediction credited to it; rows {rows} have {values}, which no "
                          "prediction of that model and case matches to them; fix the ids or "
                          "leave the cells empty")
MSG_LESION_UNPAIRED = ("{source}: the reference lesions must be the same for every model "
                       "(one reference standard); {details}; give every model a row for every "
                       "reference lesion")
MSG_LESION_RULE = ("{source}: column 'hit_rule' must hold one rule for the whole table (the "
                   "matching was done once); it holds {values}; match again with one rule")
MSG_LESION_NOT_TABLE = ("{source}: the lesions table must be a file path (CSV/TSV/parquet) or "
                        "a DataFrame; got a {got}; pass pd.DataFrame(...) of it or its path")
MSG_LESION_PRED_ONLY = ("{source}: column '{column}' applies to predictions only; rows {rows} "
                        "are reference lesions with a value; empty those cells")


def _lesion_text(df, column, *, source) -> None:
    """An optional id column (``matched``, ``duplicate_of``, ``location``) as text: an
    empty cell (or a missing value) is None, other values trimmed."""
    if column not in df.columns:
        df[column] = None
        return
    col = df[column]
    text = _text(col)
    empty = col.isna().to_numpy() | (text == "").to_numpy()
    df[column] = text.where(~empty, None).astype(object)


def read_lesions(path_or_df) -> pd.DataFrame:
    """Read and validate a **lesions** table (one row per reference lesion and per
    predicted lesion, per model and case; docs/contracts.md#lesions).

    Parameters
    ----------
    path_or_df : str, Path or DataFrame
        A CSV/TSV/parquet file or a DataFrame with at least ``case_id, model, lesion_id,
        kind``; predictions need ``score``. Optional: ``volume_mm3``, the centroid
        ``centroid_i_mm, centroid_j_mm, centroid_k_mm`` (mm along the image array's
        first, second and third spatial axis), ``matched`` (a prediction: the
        ``lesion_id`` of the reference lesion the hit rule credits it with, empty for a
        false positive; a reference lesion: the prediction credited to it),
        ``duplicate_of`` (a prediction that hits only reference lesions already matched:
        that lesion; neither a hit nor a false positive, as LUNA16 and MONAI's FROC count
        it), ``dice`` and ``iou`` (overlap of the matched pair), ``diameter_mm``,
        ``location``, ``hit_rule`` (the rule the matching used, e.g. ``iou>=0.1``).

    Returns
    -------
    DataFrame
        A copy with ``kind`` in lower case, ids as text, numeric columns as float64, and
        ``matched`` / ``duplicate_of`` / ``location`` as text or None (every optional
        column present). A reference row's ``matched`` is filled from the predictions
        when the table leaves it empty.

    Raises
    ------
    ContractError
        Not a path or a DataFrame, missing columns, an unknown kind, a prediction without a score, a repeated
        (model, case_id, kind, lesion_id), a match naming no reference lesion of the
        case, a reference lesion matched twice, different reference lesions for
        different models, a ``dice`` or ``iou`` outside [0, 1], more than one hit rule.
    """
    if not isinstance(path_or_df, (pd.DataFrame, str, os.PathLike)):
        _fail(MSG_LESION_NOT_TABLE, source="lesions", got=type(path_or_df).__name__)
    df, source = read_table(path_or_df, table="lesions")
    _require_columns(df, LESIONS_REQUIRED, source=source, table="lesions")
    _require_nonempty(df, source=source, table="lesions", unit="lesion x model")
    for col in ("case_id", "model", "lesion_id"):
        _require_ids(df, col, source=source)
    _require_complete(df, "kind", source=source)
    _require_in(df, "kind", LESION_KINDS, MSG_LESION_KIND, source=source)
    for col in LESIONS_NUMERIC:
        if col not in df.columns:
            df[col] = np.nan
        _require_numeric(df, col, source=source)
    for col in ("matched", "duplicate_of", "location"):
        _lesion_text(df, col, source=source)
    merged = unify_text(df, ("case_id", "model", "lesion_id", "matched", "duplicate_of"),
                        table="lesions")
    check_lookalikes(df, ("case_id", "model", "lesion_id"), source=source)
    pred = (df["kind"] == "prediction").to_numpy()
    score = df["score"].to_numpy()
    bad = np.flatnonzero(pred & np.isnan(score))
    if len(bad):
        _fail(MSG_LESION_SCORE, source=source, column="score", rows=bad)
    bad = np.flatnonzero(~np.isnan(score) & ~np.isfinite(score))
    if len(bad):
        _fail(MSG_NONFINITE, source=source, column="score", rows=bad,
              values=_values_text(df["score"].iloc[bad]))
    for col in ("volume_mm3", "diameter_mm"):
        _require_range(df, col, 0, np.inf, source=source)
    for col in ("dice", "iou"):
        _require_range(df, col, 0, 1, source=source)
    _require_unique(df, ("model", "case_id", "kind", "lesion_id"), source=source)
    if "hit_rule" in df.columns:
        rules = pd.unique(df["hit_rule"].dropna().astype(str))
        if len(rules) > 1:
            _fail(MSG_LESION_RULE, source=source, column="hit_rule",
                  values=_values_text(list(rules)))
    else:
        df["hit_rule"] = None
    bad = np.flatnonzero(~pred & df["duplicate_of"].notna().to_numpy())
    if len(bad):
        _fail(MSG_LESION_PRED_ONLY, source=source, column="duplicate_of", rows=bad)
    bad = np.flatnonzero(pred & df["matched"].notna().to_numpy()
                         & df["duplicate_of"].notna().to_numpy())
    if len(bad):
        _fail(MSG_LESION_BOTH, source=source, column="duplicate_of", rows=bad)
    _check_lesion_matches(df, pred, source=source)
    _check_lesion_pairing(df, pred, source=source)
    df = df.reset_index(drop=True)
    df.attrs["text_merged"] = merged
    return df


def _check_lesion_matches(df: pd.DataFrame, pred: np.ndarray, *, source: str) -> None:
    """Every ``matched`` / ``duplicate_of`` of a prediction names a reference lesion of its
    model and case; a reference lesion is matched once; a reference row's own ``matched``
    agrees with the predictions' (filled in where empty)."""
    key = df["model"].astype(str) + "\x1f" + df["case_id"].astype(str) + "\x1f"
    ref_keys = set((key + df["lesion_id"].astype(str))[~pred])
    for col in ("matched", "duplicate_of"):
        has = pred & df[col].notna().to_numpy()
        target = key + df[col].astype(str)
        bad = np.flatnonzero(has & ~target.isin(ref_keys).to_numpy())
        if len(bad):
            _fail(MSG_LESION_MATCHED_REF, source=source, column=col, rows=bad,
                  values=_values_text(df[col].iloc[bad]))
    has = pred & df["matched"].notna().to_numpy()
    target = (key + df["matched"].astype(str)).where(has)
    again = np.flatnonzero(has & target.duplicated(keep="first").to_numpy())
    if len(again):
        _fail(MSG_LESION_TWICE, source=source, column="matched", rows=again,
              values=_values_text(df["matched"].iloc[again]))
    # the reference side: the prediction credited to each reference lesion
    credited = pd.Series(df["lesion_id"].to_numpy()[has], index=target[has].to_numpy())
    ref_key = (key + df["lesion_id"].astype(str)).to_numpy()
    expect = credited.reindex(ref_key[~pred]).to_numpy(dtype=object)
    given = df["matched"].to_numpy(dtype=object)[~pred]
    given_set = np.array([g is not None for g in given])
    expect_set = pd.notna(expect)
    wrong = given_set & (~expect_set | (given.astype(str) != expect.astype(str)))
    if wrong.any():
        rows = np.flatnonzero(~pred)[wrong]
        _fail(MSG_LESION_REF_MATCHED, source=source, column="matched", rows=rows,
              values=_values_text(df["matched"].iloc[rows]))
    filled = df["matched"].to_numpy(dtype=object).copy()
    filled[~pred] = np.where(expect_set, expect, None)
    df["matched"] = pd.Series(filled, index=df.index, dtype=object)


def _check_lesion_pairing(df: pd.DataFrame, pred: np.ndarray, *, source: str) -> None:
    """One reference standard: every model lists the same reference lesions."""
    ref = df.loc[~pred, ["model", "case_id", "lesion_id"]]
    models = pd.unique(df["model"])
    if len(models) < 2:
        return
    keys = ref["case_id"].astype(str) + "/" + ref["lesion_id"].astype(str)
    sets = {m: set(keys[ref["model"] == m]) for m in models}
    union = set().union(*sets.values())
    details = [f"model {show_id(m, quote=True)} lacks reference lesion(s) (case_id/lesion_id) "
               f"{ids_text(sorted(union - s), hint=False)}"
               for m, s in sets.items() if union - s]
    if details:
        _fail(MSG_LESION_UNPAIRED, source=source, column="lesion_id",
              details="; ".join(details[:5]))
