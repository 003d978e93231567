"""From a cases table and an R/patsy formula to the arrays every model fitter takes.

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
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import patsy

from stats.schema import ContractError

OUTCOMES = {"positives": "detected", "negatives": "correct"}

MSG_NO_PRED = ("cases: column 'pred' is absent and no threshold was given; pass "
               "threshold=<voxels> (pred = score >= threshold) or add a 0/1 'pred' column")
MSG_NO_COLUMN = ("cases: the formula names column(s) {columns} that the table lacks "
                 "(columns present: {present}); fix the formula or add the columns")
MSG_NO_GROUP = ("cases: group column '{group}' is missing (columns present: {present}); "
                "pass group=<column>")
MSG_EMPTY_POP = ("cases: no rows left for population '{population}' of model '{model}' after "
                 "dropping {dropped} rows with missing formula variables; check label and the "
                 "formula's columns")
MSG_POPULATION = "population must be 'positives', 'negatives' or None; got {population!r}"
MSG_OUTCOME = ("cases: outcome '{outcome}' must be 0/1 (or a count with trials=); rows {rows} "
               "have {values}")


#: Names a formula may use besides its columns: ``np.*`` and R's ``log``, ``exp``,
#: ``sqrt``, ``log2``, ``log10`` (so ``log(tumor_size_mm)`` works as in R).
FORMULA_FUNCTIONS = {"np": np, "log": np.log, "exp": np.exp, "sqrt": np.sqrt,
                     "log2": np.log2, "log10": np.log10}

_RANDOM_TERM = re.compile(r"\+\s*\(\s*1\s*\|\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\)")


def split_random_term(formula: str) -> tuple[str, str | None]:
    """Remove an lme4-style ``+ (1 | group)`` from ``formula``; return it and the group."""
    m = _RANDOM_TERM.search(formula)
    if not m:
        if "|" in formula:
            raise ValueError(f"formula {formula!r}: only a random intercept '+ (1 | group)' is "
                             "supported; write the group as group='site'")
        return formula, None
    rest = formula[:m.start()] + formula[m.end():]
    if _RANDOM_TERM.search(rest) or "|" in rest:
        raise ValueError(f"formula {formula!r}: only one random intercept '(1 | group)' is supported")
    return rest, m.group(1)


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
    formula: str
    n_missing: int = 0
    warnings: list[str] = field(default_factory=list)

    # patsy's DesignInfo cannot be pickled (pydata/patsy#26), yet a fit must travel to and
    # from Dask workers: drop it on pickling and rebuild it from the same rows on arrival.
    def __getstate__(self):
        state = dict(self.__dict__)
        state["design_info"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        rhs = self.formula.partition("~")[2]  # the random term was removed before build()
        self.design_info = patsy.dmatrix(rhs, self.data, return_type="dataframe",
                                         eval_env=patsy.EvalEnvironment([FORMULA_FUNCTIONS])).design_info


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


def complete_formula(formula: str, outcome: str | None) -> str:
    """Prepend the outcome when the formula is one-sided (``"~ phase + sex"``)."""
    lhs, sep, rhs = formula.partition("~")
    if not sep:
        raise ValueError(f"formula {formula!r} needs a '~' (e.g. 'detected ~ phase + sex')")
    if lhs.strip():
        return formula
    if outcome is None:
        raise ValueError(f"formula {formula!r} has no outcome; write 'y ~ ...' when population=None")
    return f"{outcome} ~{rhs}"


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_NOT_COLUMNS = {"np", "log", "exp", "sqrt", "C", "I", "Treatment", "center", "standardize",
                "scale", "Sum", "Poly", "Diff", "Helmert"}


def formula_columns(formula: str, data: pd.DataFrame) -> list[str]:
    """Data columns a formula uses (identifiers that are columns of ``data``)."""
    names = {m.group(0) for m in _IDENT.finditer(formula)}
    return [c for c in data.columns if c in names]


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


def build(data: pd.DataFrame, formula: str, *, group: str | None, outcome: str,
          trials: str | None = None, cluster: str | None = None) -> Design:
    """Build a :class:`Design` from ``data`` (already restricted to one model/population)."""
    if group is not None and group not in data.columns:
        raise ContractError(MSG_NO_GROUP.format(group=group, present=", ".join(map(str, data.columns))),
                            column=group)
    lhs_name = formula.partition("~")[0].strip()
    missing = [n for n in {lhs_name} if n and n not in data.columns and not n.startswith("cbind")]
    if missing:
        raise ContractError(MSG_NO_COLUMN.format(columns=missing, present=", ".join(map(str, data.columns))))
    used = formula_columns(formula, data)
    extra = [c for c in (group, trials, cluster) if c]
    # the group is always a factor (a numeric site code too), as R's factor(site)
    sub = _categorical(data[list(dict.fromkeys(used + extra))], used, force=(group,))
    rhs = formula.partition("~")[2]
    complete = sub.notna().all(axis=1).to_numpy()
    n_missing = int((~complete).sum())
    sub = sub.loc[complete]
    if len(sub) == 0:
        raise ContractError(f"no complete rows for formula {formula!r} ({n_missing} rows have a "
                            "missing value); check the formula's columns")
    try:
        X_df = patsy.dmatrix(rhs, sub, return_type="dataframe", NA_action="raise",
                             eval_env=patsy.EvalEnvironment([FORMULA_FUNCTIONS]))
    except patsy.PatsyError as exc:
        raise ContractError(f"formula {formula!r}: {exc}; fix the formula (R/patsy syntax, e.g. "
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
    return Design(y=y, trials=n, X=X_all[:, keep], terms=[all_terms[i] for i in keep],
                  all_terms=all_terms, dropped=dropped, groups=gcodes.astype(np.int64),
                  group_levels=glevels, cluster=np.asarray(ccodes, dtype=np.int64),
                  data=sub, design_info=X_df.design_info, outcome=lhs_name,
                  formula=formula, n_missing=n_missing, warnings=warnings)


def estimable_columns(X: np.ndarray, names: list[str], tol: float = 1e-7) -> tuple[list[int], dict[str, str]]:
    """Indices of the columns kept (R's pivoted-QR rule: drop a column that is zero or a
    linear combination of the earlier ones) and the reasons for those dropped."""
    dropped: dict[str, str] = {}
    keep: list[int] = []
    nonzero = np.abs(X).max(axis=0) > 0
    scale = np.sqrt((X ** 2).sum(axis=0))
    scale[scale == 0] = 1.0
    gram = (X.T @ X) / np.outer(scale, scale)
    for j in range(X.shape[1]):
        if not nonzero[j]:
            dropped[names[j]] = "empty"
            continue
        cand = keep + [j]
        if np.linalg.eigvalsh(gram[np.ix_(cand, cand)])[0] < tol:
            dropped[names[j]] = "aliased"
            continue
        keep.append(j)
    return keep, dropped


def separation_warnings(d: Design) -> list[str]:
    """Levels of a 0/1 indicator column whose rows all have the same outcome (complete or
    quasi-complete separation: the ML log-odds ratio is infinite)."""
    out = []
    ybin = d.y / d.trials
    for j, t in enumerate(d.terms):
        col = d.X[:, j]
        if t == "Intercept" or not np.isin(col, (0.0, 1.0)).all():
            continue
        inside = col == 1
        rate = ybin[inside].mean() if inside.any() else np.nan
        if inside.any() and rate in (0.0, 1.0):
            out.append(f"separation: every row with {t} has outcome {int(rate)}; its log-odds "
                       "ratio is infinite (estimate unreliable; merge levels or use a penalised fit)")
    return out
