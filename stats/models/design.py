"""From a cases table and a formula to the arrays every model fitter takes.

The formula is read by clinrel's own grammar (:mod:`stats.formula`), never evaluated;
patsy builds the design from the code the parse writes (patsy-style term names), in an
environment with the closed function list and no Python builtins. A numeric term with a
non-finite value (``np.log`` of 0, an infinite entry) is refused before the fit, naming
the term, the column and the rows.

The outcome depends on ``population``: among reference-standard positives
(``label == 1``) it is ``detected = pred``; among negatives (``label == 0``) it is
``correct = 1 - pred``. With ``population=None`` the data are used as given (any
binomial data set, e.g. lme4's ``cbpp`` with ``trials="size"``).

Factor coding follows R: treatment contrasts, the first level is the reference; a
pandas categorical keeps its category order, a text column is sorted (as R's
``factor()`` does). Rows with a missing value in a formula variable are dropped (R's
``na.omit``) and counted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import patsy

from stats.formula import FormulaError, ParsedFormula, closed_environment, parse_formula
from stats.schema import ContractError

OUTCOMES = {"positives": "detected", "negatives": "correct"}

MSG_NO_PRED = ("cases: column 'pred' is absent and no threshold was given; pass "
               "threshold=<voxels> (pred = score >= threshold) or add a 0/1 'pred' column")
MSG_NO_GROUP = ("cases: group column '{group}' is missing (columns present: {present}); "
                "pass group=<column>")
MSG_EMPTY_POP = ("cases: no rows left for population '{population}' of model '{model}' after "
                 "dropping {dropped} rows with missing formula variables; check label and the "
                 "formula's columns")
MSG_POPULATION = "population must be 'positives', 'negatives' or None; got {population!r}"
MSG_OUTCOME = ("cases: outcome '{outcome}' must be 0/1 (or a count with trials=); rows {rows} "
               "have {values}")
MSG_NO_OUTCOME = ("formula {formula!r} has no outcome; write 'y ~ ...' when population=None")
MSG_NOT_FINITE = ("cases: formula term {term!r} is not finite in rows {rows} (column {column!r}: "
                  "{values}): {why}; drop or recode these rows{fix}")
MSG_NOT_NUMERIC_TERM = ("cases: formula term {term!r} needs a numeric column, but {column!r} "
                        "holds text (rows {rows}: {values}); use the column as a factor "
                        "({column}) or recode it as numbers")
MSG_NOT_FINITE_DESIGN = ("cases: design column {term!r} of formula {formula!r} is not finite in "
                         "rows {rows}; drop or recode these rows")
MSG_REFERENCE = ("cases: formula term {term!r} sets the reference level {level!r}, which column "
                 "{column!r} does not have (levels: {levels}); use one of its levels")


@dataclass
class Design:
    """Model arrays for one fit (one model's rows)."""

    y: np.ndarray                 # successes (0/1, or counts with trials)
    trials: np.ndarray            # binomial trials per row (1 for 0/1 data)
    X: np.ndarray                 # fixed-effect design, estimable columns only
    terms: list[str]              # names of X's columns (patsy style)
    all_terms: list[str]          # every column patsy built (incl. dropped ones)
    dropped: dict[str, str]       # term -> reason ("empty" or "aliased")
    groups: np.ndarray            # int codes 0..G-1
    group_levels: list[str]
    cluster: np.ndarray           # int codes of the robust-SE cluster (patient)
    data: pd.DataFrame            # the rows used (after NA dropping): formula, group, cluster columns
    design_info: patsy.DesignInfo
    outcome: str
    formula: str                  # canonical fixed-effect formula (written from the parse)
    n_missing: int = 0
    warnings: list[str] = field(default_factory=list)
    parsed: ParsedFormula | None = None
    # nested random intercept (patients within sites): codes 0..K-1 of the inner:outer
    # pairs and their labels ``inner:outer`` (lme4's ``patient_id:site`` levels)
    nest_groups: np.ndarray | None = None
    nest_levels: list[str] | None = None
    nest_name: str | None = None   # e.g. ``patient_id:site``

    # patsy's DesignInfo cannot be pickled (pydata/patsy#26), yet a fit must travel to and
    # from Dask workers: drop it on pickling and rebuild it from the same rows on arrival.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["design_info"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.design_info = patsy.dmatrix(self.parsed.patsy_rhs, self.data, return_type="dataframe",
                                         eval_env=closed_environment()).design_info


def with_outcome(cases: pd.DataFrame, *, population: str | None,
                 threshold: float | None) -> tuple[pd.DataFrame, str | None]:
    """Return the rows of ``population`` with the outcome column added, and its name."""
    if population is None:
        return cases, None
    if population not in OUTCOMES:
        raise ValueError(MSG_POPULATION.format(population=population))
    df = cases
    if "pred" not in df.columns or threshold is not None:
        if threshold is None:
            raise ContractError(MSG_NO_PRED, column="pred")
        df = df.assign(pred=(df["score"].to_numpy() >= threshold).astype("int64"))
    keep = df["label"].to_numpy() == (1 if population == "positives" else 0)
    df = df.loc[keep].copy()
    name = OUTCOMES[population]
    pred = df["pred"].to_numpy().astype("int64")
    df[name] = pred if population == "positives" else 1 - pred
    return df, name


def complete_formula(formula: ParsedFormula, outcome: str | None) -> ParsedFormula:
    """Give a one-sided formula (``"~ phase + sex"``) the population's outcome."""
    if formula.response is not None:
        return formula
    if outcome is None:
        raise FormulaError(MSG_NO_OUTCOME.format(formula=formula.text))
    return formula.with_response(outcome)


def _row_numbers(index: pd.Index, mask: np.ndarray) -> list:
    """Up to five rows where ``mask`` holds: 1-based row numbers of the cases table (its
    default integer index), or the index labels otherwise."""
    idx = index[np.asarray(mask)][:5]
    return [int(i) + 1 for i in idx] if pd.api.types.is_integer_dtype(idx) else list(idx)


def _rows_text(rows: list) -> str:
    return ", ".join(map(str, rows))


def _values_text(values) -> str:
    return ", ".join(repr(v) if isinstance(v, str) else f"{v:g}" if isinstance(v, float) else
                     str(v) for v in list(values)[:5])


def _check_references(sub: pd.DataFrame, parsed: ParsedFormula) -> None:
    """Each ``Treatment(level)`` must name a level of its column (checked before patsy)."""
    for f in {f for t in parsed.terms for f in t.factors if f.reference is not None}:
        col = f.arg.name
        levels = list(sub[col].cat.categories)
        if not any(f.reference == lv for lv in levels):
            raise FormulaError(MSG_REFERENCE.format(term=f.code, level=f.reference, column=col,
                                                    levels=", ".join(map(repr, levels[:20]))),
                               column=col)


def _check_finite(sub: pd.DataFrame, original: pd.DataFrame, parsed: ParsedFormula) -> None:
    """Refuse, before patsy and the fit, a numeric factor with a non-finite value (the log
    of 0, a square root of a negative value, an infinite entry): the message names the
    term, its column, the rows and the fix. Each factor is computed from the parse tree."""
    for f in parsed.numeric_factors():
        col = f.columns[0]
        src = original[col]
        if not pd.api.types.is_numeric_dtype(src) or pd.api.types.is_bool_dtype(src):
            if f.kind == "column":
                continue   # a text or boolean column is a factor
            text = pd.to_numeric(sub[col].astype(object), errors="coerce").isna().to_numpy()
            text = text if text.any() else np.ones(len(sub), dtype=bool)
            rows = _row_numbers(sub.index, text)
            raise ContractError(MSG_NOT_NUMERIC_TERM.format(
                term=f.code, column=col, rows=_rows_text(rows),
                values=_values_text(sub[col][text])), column=col, rows=rows)
        with np.errstate(all="ignore"):
            bad = ~np.isfinite(f.values(sub))
        if bad.any():
            why, fix = f.why_not_finite()
            rows = _row_numbers(sub.index, bad)
            raise ContractError(MSG_NOT_FINITE.format(
                term=f.code, column=col, rows=_rows_text(rows),
                values=_values_text(sub[col].to_numpy()[bad]), why=why,
                fix=f", {fix}" if fix else ""), column=col, rows=rows)


def _categorical(data: pd.DataFrame, cols: list[str], force: tuple = ()) -> pd.DataFrame:
    out = data
    for c in cols:
        s = data[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            continue
        if (c in force or s.dtype == object or pd.api.types.is_string_dtype(s)
                or pd.api.types.is_bool_dtype(s)):
            if out is data:
                out = data.copy()
            levels = sorted(pd.unique(s.dropna()).tolist(),
                            key=(lambda v: v) if pd.api.types.is_numeric_dtype(s) else str)
            out[c] = pd.Categorical(s, categories=levels)
    return out


def build(data: pd.DataFrame, formula: ParsedFormula | str, *, group: str | None,
          outcome: str | None = None, trials: str | None = None,
          cluster: str | None = None, nest: str | None = None) -> Design:
    """Build a :class:`Design` from ``data`` (already restricted to one model/population).

    ``formula`` is parsed by :mod:`stats.formula` (a string is parsed here); the design
    matrix comes from the code the parse writes, evaluated in the closed environment,
    so no user text is ever evaluated. Non-finite values of a numeric term are refused
    before the fit (:data:`MSG_NOT_FINITE`). ``nest``: a column nested in ``group`` (a
    second random intercept, ``(1 | group/nest)``); its levels are the ``nest:group``
    pairs, as lme4 codes them."""
    for g in (group, nest):
        if g is not None and g not in data.columns:
            raise ContractError(MSG_NO_GROUP.format(group=g, present=", ".join(map(str, data.columns))),
                                column=g)
    parsed = complete_formula(parse_formula(formula) if isinstance(formula, str) else formula,
                              outcome).fixed_only()
    parsed.check_columns(data.columns, source="cases", include_response=True)
    lhs_name = parsed.response.name
    named = set(parsed.columns())
    used = [c for c in data.columns if c in named]
    extra = [c for c in (group, nest, trials, cluster) if c]
    # the group is always a factor (a numeric site code too), as R's factor(site); so is
    # a column used through C(...)
    numeric = {c for f in parsed.numeric_factors() for c in f.columns}
    as_factor = [c for c in parsed.categorical_columns() if c not in numeric]
    sub = _categorical(data[list(dict.fromkeys(used + extra))], used, force=(group, *as_factor))
    complete = sub.notna().all(axis=1).to_numpy()
    n_missing = int((~complete).sum())
    sub = sub.loc[complete]
    if len(sub) == 0:
        raise ContractError(f"no complete rows for formula {parsed.text!r} ({n_missing} rows have a "
                            "missing value); check the formula's columns")
    _check_references(sub, parsed)
    _check_finite(sub, data, parsed)
    try:
        X_df = patsy.dmatrix(parsed.patsy_rhs, sub, return_type="dataframe", NA_action="raise",
                             eval_env=closed_environment())
    except patsy.PatsyError as exc:
        raise FormulaError(f"formula {parsed.text!r}: {exc}; fix the formula (e.g. "
                           "'detected ~ phase + age_group + np.log(tumor_size_mm)')") from exc
    y = pd.to_numeric(sub[lhs_name], errors="coerce").to_numpy(dtype=float)
    n = (np.ones_like(y) if trials is None
         else pd.to_numeric(sub[trials], errors="coerce").to_numpy(dtype=float))
    bad = np.flatnonzero(~np.isfinite(y) | (y < 0) | (y > n) | (y != np.round(y)))
    if len(bad):
        raise ContractError(MSG_OUTCOME.format(outcome=lhs_name, rows=list(bad[:5] + 1),
                                               values=list(y[bad[:5]])), column=lhs_name)
    X_all = X_df.to_numpy(dtype=float)
    all_terms = list(X_df.columns)
    nonfinite = ~np.isfinite(X_all)
    if nonfinite.any():
        j = int(np.flatnonzero(nonfinite.any(axis=0))[0])
        raise ContractError(MSG_NOT_FINITE_DESIGN.format(
            term=all_terms[j], formula=parsed.text,
            rows=_rows_text(_row_numbers(sub.index, nonfinite[:, j]))))
    keep, dropped = estimable_columns(X_all, all_terms)
    warnings = [f"empty_level: {t} has no rows; its coefficient is not estimable"
                for t, why in dropped.items() if why == "empty"]
    warnings += [f"aliased: {t} is a linear combination of other terms; dropped"
                 for t, why in dropped.items() if why == "aliased"]
    if group is not None:
        gcodes, glevels = pd.factorize(sub[group], sort=True)
        glevels = [str(v) for v in glevels]
    else:
        gcodes, glevels = np.zeros(len(sub), dtype=np.int64), ["all"]
    ccodes = (pd.factorize(sub[cluster])[0] if cluster is not None and cluster in sub.columns
              else np.arange(len(sub)))
    nest_kw = {}
    if nest is not None and group is not None:
        pairs = sub[nest].astype(str).to_numpy(dtype=object) + ":" + np.asarray(glevels, dtype=object)[gcodes]
        ncodes, nlevels = pd.factorize(pairs, sort=True)
        nest_kw = dict(nest_groups=ncodes.astype(np.int64), nest_levels=[str(v) for v in nlevels],
                       nest_name=f"{nest}:{group}")
    return Design(y=y, trials=n, X=X_all[:, keep], terms=[all_terms[i] for i in keep],
                  all_terms=all_terms, dropped=dropped, groups=gcodes.astype(np.int64),
                  group_levels=glevels, cluster=np.asarray(ccodes, dtype=np.int64),
                  data=sub, design_info=X_df.design_info, outcome=lhs_name,
                  formula=parsed.formula, n_missing=n_missing, warnings=warnings,
                  parsed=parsed, **nest_kw)


#: R's tolerance for aliased columns (``lm.fit``/``glm.fit``: ``qr(tol = 1e-7)``)
ALIAS_TOL = 1e-7


def estimable_columns(X: np.ndarray, names: list[str], tol: float = ALIAS_TOL
                      ) -> tuple[list[int], dict[str, str]]:
    """Indices of the columns kept and the reasons for those dropped: a column of zeros
    is ``empty``; a column whose residual on the columns before it, relative to its own
    length, is below ``tol`` (R's QR rule: ``|R_jj| < 1e-7 ||x_j||``, on the columns as
    given, uncentred) is ``aliased``. The residuals are the diagonal of the QR
    factorisation of the length-normalised columns in their order (a dropped column lies
    in the span of the earlier ones, so keeping it in the factorisation changes no later
    residual). Rounding moves them by about 1e-16; an uncentred calendar year spanning
    two years sits near 3e-4, so the margin decides nothing by rounding."""
    dropped: dict[str, str] = {}
    nonzero = np.abs(X).max(axis=0) > 0 if X.size else np.zeros(X.shape[1], bool)
    for j in np.flatnonzero(~nonzero):
        dropped[names[j]] = "empty"
    cols = np.flatnonzero(nonzero)
    keep: list[int] = []
    if len(cols):
        Z = X[:, cols] / np.sqrt((X[:, cols] ** 2).sum(axis=0))
        if Z.shape[0] < Z.shape[1]:   # fewer rows than columns: pad, residuals stay 0
            Z = np.vstack([Z, np.zeros((Z.shape[1] - Z.shape[0], Z.shape[1]))])
        resid = np.abs(np.diag(np.linalg.qr(Z, mode="r")))
        for j, r in zip(cols, resid):
            if r < tol:
                dropped[names[j]] = "aliased"
            else:
                keep.append(int(j))
    return keep, dropped


def separation_warnings(d: Design) -> list[str]:
    """Levels of a 0/1 indicator column whose rows all have the same outcome (complete or
    quasi-complete separation: the ML log-odds ratio is infinite)."""
    out = []
    for j, t in enumerate(d.terms):
        col = d.X[:, j]
        if t == "Intercept" or not np.isin(col, (0.0, 1.0)).all():
            continue
        inside = col == 1
        if not inside.any():
            continue
        # exact counts: no successes, or successes equal to trials, in every row
        if np.all(d.y[inside] == 0) or np.all(d.y[inside] == d.trials[inside]):
            rate = 0 if np.all(d.y[inside] == 0) else 1
            out.append(f"separation: every row with {t} has outcome {rate}; its log-odds "
                       "ratio is infinite (estimate unreliable; merge levels or use a penalised fit)")
    return out


def separated_terms(warnings: list[str]) -> set[str]:
    """The terms :func:`separation_warnings` named (a level name may hold spaces:
    "late arterial", "<10 mm")."""
    out = set()
    for w in warnings:
        m = _SEPARATED.match(w)
        if m:
            out.add(m.group(1))
    return out


_SEPARATED = re.compile(r"separation: every row with (.+) has outcome [01]; ", re.DOTALL)


def without_separated(d: Design, sep: np.ndarray) -> tuple[Design, np.ndarray]:
    """The design without the separated columns ``sep`` and without the rows of their
    levels (where the separated terms' fitted probabilities are 1 or 0), and the bool
    mask of the rows kept. Groups and clusters are coded again over the rows kept."""
    rows = ~np.any(d.X[:, sep] == 1, axis=1)
    gcodes, glevels = pd.factorize(np.asarray(d.group_levels, dtype=object)[d.groups[rows]],
                                   sort=True)
    ccodes = pd.factorize(d.cluster[rows])[0]
    terms = [t for t, s in zip(d.terms, sep) if not s]
    nest_kw = {}
    if d.nest_groups is not None:
        ncodes, nlevels = pd.factorize(np.asarray(d.nest_levels, dtype=object)[d.nest_groups[rows]],
                                       sort=True)
        nest_kw = dict(nest_groups=ncodes.astype(np.int64), nest_levels=[str(v) for v in nlevels])
    return replace(d, **nest_kw, y=d.y[rows], trials=d.trials[rows], X=d.X[rows][:, ~sep], terms=terms,
                   groups=gcodes.astype(np.int64), group_levels=[str(g) for g in glevels],
                   cluster=np.asarray(ccodes, dtype=np.int64), data=d.data.loc[rows]), rows


def separated_columns(d: Design, warnings: list[str]) -> np.ndarray:
    """Bool per column of ``d.X``: the terms :func:`separation_warnings` named."""
    named = separated_terms(warnings)
    return np.array([t in named for t in d.terms], dtype=bool)
