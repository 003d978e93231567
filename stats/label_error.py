"""Subgroup metrics whose intervals carry metadata error (who belongs to which subgroup).

Subgroup axes such as race or contrast phase come from extracted metadata, and some of
the extracted values are wrong. Given how often (a *label-error table*, below),
:func:`error_aware_metrics` (reached as ``stats.subgroup_metrics(..., label_error=TABLE)``)
re-estimates the detection metrics of every axis built on an error-prone field by
**multiple imputation of each scan's true level** and widens their intervals by the
between-imputation variance; :func:`compare_naive` puts the naive and the error-aware rows
side by side; :func:`misclassification_from_review` estimates the table from extractor
disagreement and review outcomes in the metadata evidence table.

Label-error table: ``field, recorded_value, true_value, probability`` with probability
= P(true value | recorded value), summing to 1 over true values for each recorded value.
Any further column (e.g. ``site``; not ``n_recorded``, ``n_reviewed``) is a key that must
also be a column of the cases: its rows then apply to the cases with that key (error rates
that differ by institution), and each ``field`` x key x ``recorded_value`` sums to 1.

Estimand: for the level L of an axis, the detection metric among scans whose TRUE level
is L in the population the study's scans represent (e.g. sensitivity = P(call positive |
tumour, true phase L)), the same parameter the naive Wilson interval would target if the
metadata were error-free.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as sps

from stats import limits as _limits
from stats._linalg import clean_variance
from stats._rng import as_generator
from stats.detection import (
    GROUP_COLS,
    MISSING,
    NOT_APPLICABLE,
    OVERALL,
    CaseMatrix,
    _levels,
    _product,
    case_matrix,
    metric_fractions,
    normalize_by,
)
from stats.clustered import (FLAG_DEFF, SUFFIX, cluster_moments, design_effect,
                             metric_indicators, cluster_cases)
from stats import _validate as _v
from stats.intervals import PROPORTION_METHODS, proportion_limits
from stats.schema import ContractError, _rows_text, _values_text, tidy

__all__ = ["LABEL_ERROR_COLUMNS", "check_label_error", "compare_naive", "error_aware_metrics",
           "misclassification_from_review", "rubin_proportion"]

#: the required columns of a label-error table
LABEL_ERROR_COLUMNS = ("field", "recorded_value", "true_value", "probability")
#: columns that :func:`misclassification_from_review` adds for information (not keys)
INFO_COLUMNS = ("n_recorded", "n_reviewed")
#: flag of the rows of a level some of whose cases have a recorded value the table lacks
FLAG_UNCOVERED = "label_error_uncovered"
#: flag of AUC rows on an error-prone axis (the imputation model conditions on the calls,
#: not on the scores, so it is not congenial to an AUC analysis; no estimate is given)
FLAG_UNSUPPORTED = "label_error_unsupported"
_TOL = 1e-6  # how far a recorded value's probabilities may sum from 1
_BLOCK_ELEMENTS = 2 ** 24  # imputations x rows x states of one draw/EM block

MSG_TABLE_TYPE = ("label_error: expected a DataFrame with columns field, recorded_value, "
                  "true_value, probability; got {kind}")
MSG_TABLE_COLUMNS = ("label_error: column(s) {columns} missing (columns present: {present}); "
                     "give one row per field x recorded_value x true_value with probability = "
                     "P(true value | recorded value)")
MSG_TABLE_EMPTY = "label_error: the table has no rows; give at least one row per recorded value"
MSG_TABLE_MISSING = ("label_error: column '{column}' has missing values; rows {rows} are empty; "
                     "fill them in or drop the rows")
MSG_TABLE_PROB = ("label_error: column 'probability' must be a number in [0, 1]; rows {rows} "
                  "have {values}; write probabilities, not percentages (0.02, not 2)")
MSG_TABLE_DUP = ("label_error: rows {rows} repeat field x recorded_value x true_value {values}; "
                 "keep one row per combination")
MSG_TABLE_SUM = ("label_error: probabilities must sum to 1 over true values for each recorded "
                 "value; {details} (rows {rows}); rescale each recorded value's probabilities "
                 "so they sum to 1")
MSG_TABLE_KEY = ("label_error: key column(s) {columns} are not columns of the cases; a column "
                 "beyond field, recorded_value, true_value, probability names the cases a row "
                 "applies to; add the column to the cases or drop it from the table")
MSG_PER_PATIENT_FIELD = ("label_error: per_patient (metadata.per_patient) names {names}, which "
                         "is not a field of the label-error table (its fields: {fields}); fix "
                         "the name or remove it")
MSG_PER_PATIENT_CLUSTER = ("label_error: per_patient (metadata.per_patient) names {names}, but no "
                           "cluster column marks a patient's scans; give cluster= (in a plan: "
                           "detection.cluster) or remove per_patient")
MSG_PER_PATIENT_DISAGREE = ("label_error: per_patient (metadata.per_patient) declares {field!r} "
                            "recorded once per patient, but the scans of {n} {cluster} value(s) "
                            "differ in its recorded value or in a key of the label-error table: "
                            "{patients}{more}; correct those records in the cases file or "
                            "leave {field!r} out of per_patient (it is then imputed scan by "
                            "scan)")
MSG_NO_FIELD = ("label_error: no field of the table ({fields}) is a column of the subgroup axes "
                "{axes}; name the fields as the cases' columns (e.g. 'race', 'phase')")
MSG_CI = ("label_error: ci={ci!r} cannot carry metadata error (the bootstrap resamples scans "
          "with their recorded levels); use ci='wilson', 'clopper-pearson' or 'jeffreys'")
MSG_IMPUTATIONS = "n_imputations must be an integer >= 2; got {m!r}"
MSG_CONTEXT = ("context: column(s) {columns} are not columns of the cases; name columns the "
               "outcome model should condition on (e.g. 'site')")
MSG_EVIDENCE = ("evidence: column(s) {columns} missing from the metadata evidence table "
                "(columns present: {present}); give the table `clinrel metadata extract` wrote")
MSG_PREFER = ("prefer: extractor(s) {bad} are not in the evidence table (extractors: "
              "{present}); name extractors that ran")


# --------------------------------------------------------------------------- the table

def check_label_error(table: pd.DataFrame) -> pd.DataFrame:
    """Validate a label-error table; return a copy with text keys and float probabilities.

    Raises :class:`~stats.schema.ContractError` naming the rows and the fix when a column
    is missing, a value is empty, a probability lies outside [0, 1], a combination repeats,
    or a recorded value's probabilities do not sum to 1 (within 1e-6).
    """
    if not isinstance(table, pd.DataFrame):
        raise ContractError(MSG_TABLE_TYPE.format(kind=type(table).__name__))
    missing = [c for c in LABEL_ERROR_COLUMNS if c not in table.columns]
    if missing:
        raise ContractError(MSG_TABLE_COLUMNS.format(
            columns=", ".join(map(repr, missing)), present=", ".join(map(repr, table.columns))),
            column=missing[0])
    if not len(table):
        raise ContractError(MSG_TABLE_EMPTY)
    df = table.reset_index(drop=True).copy()
    keys = table_keys(df)
    for col in ("field", "recorded_value", "true_value", *keys, "probability"):
        bad = np.flatnonzero(df[col].isna().to_numpy())
        if len(bad):
            raise ContractError(MSG_TABLE_MISSING.format(column=col, rows=_rows_text(bad)),
                                column=col, rows=bad + 1)
    prob = pd.to_numeric(df["probability"], errors="coerce").to_numpy("float64")
    bad = np.flatnonzero(~((prob >= 0) & (prob <= 1)))
    if len(bad):
        raise ContractError(MSG_TABLE_PROB.format(
            rows=_rows_text(bad), values=_values_text(table["probability"].iloc[bad])),
            column="probability", rows=bad + 1)
    for col in ("field", "recorded_value", "true_value", *keys):
        df[col] = df[col].astype(str)
    df["probability"] = prob
    group = ["field", *keys, "recorded_value"]
    dup = np.flatnonzero(df.duplicated([*group, "true_value"], keep="first").to_numpy())
    if len(dup):
        raise ContractError(MSG_TABLE_DUP.format(rows=_rows_text(dup), values=_values_text(
            df.loc[dup[:5], [*group, "true_value"]].itertuples(index=False, name=None))),
            rows=dup + 1)
    sums = df.groupby(group, sort=False)["probability"].transform("sum").to_numpy()
    bad = np.flatnonzero(np.abs(sums - 1) > _TOL)
    if len(bad):
        first = df.loc[bad[:5], group].drop_duplicates()
        details = "; ".join(
            f"field {r['field']!r} recorded {r['recorded_value']!r}"
            + "".join(f" {k} {r[k]!r}" for k in keys) + f" sums to {sums[i]:.6g}"
            for i, r in first.iterrows())
        raise ContractError(MSG_TABLE_SUM.format(details=details, rows=_rows_text(bad)),
                            column="probability", rows=bad + 1)
    return df


def table_keys(table: pd.DataFrame) -> list[str]:
    """The key columns of a label-error table (every column beyond the four required and
    ``INFO_COLUMNS``)."""
    return [c for c in table.columns if c not in (*LABEL_ERROR_COLUMNS, *INFO_COLUMNS)]


# --------------------------------------------------------------------------- the design

@dataclass
class _Design:
    """Everything the imputation needs, at the level of distinct rows (combos).

    ``fields`` error-prone fields, ``levels[f]`` their level names (data levels, then the
    table's other values), ``radix`` (K_f + 1 per field; digit K_f = missing); joint true
    state ``s`` in mixed radix over the fields (S states). ``context`` error-free columns
    of the affected axes and the caller's ``context`` (codes ``c``, C values). Per combo ``u``:
    ``prior`` (U x S) = P(true state | recorded values, key), ``k`` = c * P + pattern,
    ``count``; per case: ``combo`` (n), ``ctx`` (n). ``pattern`` = (label, every model's
    call); ``uncovered[f]`` recorded values the table lacks.
    """

    fields: list[str]
    levels: dict[str, list[str]]
    radix: list[int]
    context_cols: list[str]
    context_levels: dict[str, list[str]]
    ctx_radix: list[int]
    prior: np.ndarray
    k: np.ndarray
    count: np.ndarray
    combo: np.ndarray
    ctx: np.ndarray
    n_patterns: int
    uncovered: dict[str, list[str]]
    field_rid: np.ndarray  # (n, fields) each case's prior row per field (recorded value x keys)

    @property
    def n_states(self) -> int:
        return int(np.prod(self.radix))

    @property
    def n_context(self) -> int:
        return int(np.prod(self.ctx_radix)) if self.ctx_radix else 1


def _affected(specs: list[tuple[str, ...]], fields: set[str]) -> list[int]:
    return [i for i, s in enumerate(specs) if fields & set(s)]


def _design(cm: CaseMatrix, specs: list[tuple[str, ...]], table: pd.DataFrame,
            context: Sequence[str] = ()) -> _Design:
    cov = cm.covariates
    keys = table_keys(table)
    lacking = [k for k in keys if k not in cov.columns]
    if lacking:
        raise ContractError(MSG_TABLE_KEY.format(columns=", ".join(map(repr, lacking))))
    lacking = [c for c in context if c not in cov.columns]
    if lacking:
        raise ContractError(MSG_CONTEXT.format(columns=", ".join(map(repr, lacking))))
    in_table = set(table["field"])
    aff = _affected(specs, in_table)
    fields = list(dict.fromkeys(c for i in aff for c in specs[i] if c in in_table))
    ctx_cols = list(dict.fromkeys([*(c for i in aff for c in specs[i] if c not in in_table),
                                   *context]))
    n = len(cov)

    levels, radix, rid, mats, uncovered = {}, [], [], [], {}
    key_text = [cov[k].astype(str).where(cov[k].notna(), None) for k in keys]
    for f in fields:
        codes, names = _levels(cov[f])
        tf = table[table["field"] == f]
        extra = sorted(set(tf["true_value"]) - set(names))
        names = names + extra
        K = len(names)
        pos = {v: i for i, v in enumerate(names)}
        rows = tf.groupby([*keys, "recorded_value"], sort=False)
        idx = pd.MultiIndex.from_tuples([g if isinstance(g, tuple) else (g,) for g in rows.groups],
                                        names=[*keys, "recorded_value"])
        P = np.zeros((len(idx), K + 1))
        g_of_row = idx.get_indexer(pd.MultiIndex.from_frame(tf[[*keys, "recorded_value"]]))
        P[g_of_row, tf["true_value"].map(pos).to_numpy()] = tf["probability"].to_numpy()
        recorded = np.where(codes >= 0, np.asarray(names, dtype=object)[np.maximum(codes, 0)], None)
        look = pd.MultiIndex.from_arrays([*(kt.to_numpy(object) for kt in key_text), recorded])
        r = idx.get_indexer(look) if len(idx) else np.full(n, -1)
        miss = codes < 0
        # "Missing" / "not applicable" stay as recorded unless the table lists them
        absent = np.isin(recorded, [MISSING, NOT_APPLICABLE]) & (r < 0)
        unc = (r < 0) & ~miss & ~absent
        uncovered[f] = sorted(set(np.asarray(names, dtype=object)[codes[unc]]))
        # row ids: table rows, then "recorded value certain" (identity) rows, then missing
        rid.append(np.where(miss, len(idx) + K, np.where(unc | absent, len(idx) + codes, r)))
        mats.append(np.vstack([P, np.eye(K + 1)]))
        levels[f], radix = names, radix + [K + 1]

    ctx_levels, ctx_radix = {}, []
    ctx = np.zeros(n, dtype=np.int64)
    for c in ctx_cols:
        codes, names = _levels(cov[c])
        codes = np.where(codes < 0, len(names), codes)
        ctx = ctx * (len(names) + 1) + codes
        ctx_levels[c], ctx_radix = names, ctx_radix + [len(names) + 1]

    pat = np.column_stack([cm.label.astype(np.int8), cm.pred.astype(np.int8)])
    _, pattern = np.unique(pat, axis=0, return_inverse=True)
    pattern = pattern.ravel()
    n_pat = int(pattern.max()) + 1 if n else 1
    key = np.column_stack([*rid, ctx, pattern]) if n else np.zeros((0, len(rid) + 2), np.int64)
    uniq, combo, count = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    prior = np.ones((len(uniq), 1))
    for j, P in enumerate(mats):  # joint prior: Kronecker product of the fields' rows
        prior = (prior[:, :, None] * P[uniq[:, j]][:, None, :]).reshape(len(uniq), -1)
    field_rid = np.column_stack(rid) if rid else np.zeros((n, 0), dtype=np.int64)
    return _Design(fields=fields, levels=levels, radix=radix, context_cols=ctx_cols,
                   context_levels=ctx_levels, ctx_radix=ctx_radix, prior=prior,
                   k=uniq[:, -2] * n_pat + uniq[:, -1], count=count.astype("float64"),
                   combo=combo.ravel(), ctx=ctx, n_patterns=n_pat, uncovered=uncovered,
                   field_rid=field_rid)


# --------------------------------------------------------------------------- imputation

def _normalise(pi: np.ndarray, d: _Design) -> np.ndarray:
    """Normalise (..., S, C * P) counts over patterns within each state x context."""
    shape = pi.shape
    p = pi.reshape(*shape[:-1], d.n_context, d.n_patterns)
    return (p / p.sum(-1, keepdims=True)).reshape(shape)


def _posterior(pi: np.ndarray, d: _Design) -> np.ndarray:
    """P(true state | combo) for outcome model(s) ``pi`` (M, S, C*P): (M, S, U)."""
    q = pi[:, :, d.k]
    q *= d.prior.T[None]
    tot = q.sum(1, keepdims=True)
    q /= np.where(tot > 0, tot, 1.0)
    if not (tot > 0).all():  # no state fits: fall back on the table's prior
        q = np.where(tot > 0, q, d.prior.T[None])
    return q


def _fit_outcome(w: np.ndarray, d: _Design, *, prior_mass: float, tol: float,
                 max_iter: int, start: np.ndarray | None = None) -> np.ndarray:
    """EM for the outcome model P(pattern | true state, context) under combo weights ``w``
    (M x U), vectorized over the M weightings, from ``start`` (S, C*P) or from the
    recorded states; returns (M, S, C*P)."""
    M, U = w.shape
    S, C, P = d.n_states, d.n_context, d.n_patterns
    KP = C * P
    # Dirichlet pseudo-counts (prior_mass per state x context), centred on the pattern mix
    # of the scans recorded in that state (pooled over contexts): sparse state x context
    # cells shrink toward their state, not toward equal patterns
    rec = np.zeros((S, P))
    np.add.at(rec, (d.prior.argmax(1), d.k % P), d.count)
    centre = (rec + 1 / P) / (rec.sum(1, keepdims=True) + 1)
    alpha = np.tile(prior_mass * centre, (1, C))  # (S, C * P)
    flat = (np.arange(M * S)[:, None] * KP + d.k[None, :]).ravel()

    def m_step(q):  # q (M, S, U): expected complete-data counts per state x context x pattern
        z = (q * w[:, None, :]).ravel()
        return _normalise(np.bincount(flat, weights=z, minlength=M * S * KP)
                          .reshape(M, S, KP) + alpha, d)

    def em(pi):
        return m_step(_posterior(pi, d))

    if start is None:
        q0 = np.zeros((M, S, U))  # recorded (most probable) state
        q0[:, d.prior.argmax(1), np.arange(U)] = 1.0
        pi = m_step(q0)
    else:
        pi = np.broadcast_to(start, (M, S, KP))
    for _ in range(max_iter):  # SQUAREM (Varadhan & Roland 2008): two EM steps, extrapolate
        p1 = em(pi)
        p2 = em(p1)
        r, v = p1 - pi, p2 - 2 * p1 + pi
        nr = np.sqrt((r ** 2).sum((1, 2), keepdims=True))
        nv = np.sqrt((v ** 2).sum((1, 2), keepdims=True))
        step = np.minimum(-1.0, -nr / np.where(nv > 0, nv, np.inf))
        jump = pi - 2 * step * r + step ** 2 * v
        bad = (jump <= 0).any((1, 2), keepdims=True)  # left the simplex: keep the EM steps
        new = em(np.where(bad, p2, jump))
        done = np.max(np.abs(new - p2)) < tol
        pi = new
        if done:
            break
    return pi


def patient_disagreement(d: _Design, patient: np.ndarray | None) -> np.ndarray | None:
    """Per error-prone field of the design (``d.fields`` order): a bool per patient code
    (fields x patients) of whether that patient's scans differ in its recorded value or
    table keys. None without ``patient`` codes or when no patient has several scans."""
    if patient is None or not len(patient):
        return None
    _, code = np.unique(np.asarray(patient, dtype=np.int64), return_inverse=True)
    code = code.ravel()
    n_pat = int(code.max()) + 1
    if n_pat == len(code):
        return None
    out = np.zeros((d.field_rid.shape[1], n_pat), dtype=bool)
    for j in range(d.field_rid.shape[1]):     # per field (a handful), vectorized over scans
        r = np.asarray(d.field_rid[:, j], dtype=np.int64)
        pairs = np.unique(code * (int(r.max()) + 1) + r)
        out[j] = np.bincount(pairs // (int(r.max()) + 1), minlength=n_pat) > 1
    return out


def patient_fields(d: _Design, patient: np.ndarray | None,
                   declared: Sequence[str] | None = None) -> np.ndarray | None:
    """Per error-prone field of the design (``d.fields`` order): whether it is recorded once
    per patient (race, sex; not a contrast phase). ``declared`` (the plan's
    ``metadata.per_patient``): exactly the fields it names; None: read from the data, the
    fields whose recorded value and table keys every patient's scans share. None without
    ``patient`` codes or when no patient has several scans."""
    dis = patient_disagreement(d, patient)
    if dis is None:
        return None
    if declared is not None:
        return np.array([f in set(declared) for f in d.fields], dtype=bool)
    return ~dis.any(axis=1)


def patient_level(d: _Design, patient: np.ndarray | None,
                  declared: Sequence[str] | None = None) -> bool:
    """Whether some error-prone field is a patient's, not a scan's
    (:func:`patient_fields`): then :func:`impute_states` draws it once per patient."""
    f = patient_fields(d, patient, declared)
    return f is not None and bool(f.any())


def _state_split(d: _Design, pmask: np.ndarray) -> np.ndarray:
    """``joint[a, b]``: the joint state whose patient-level fields' digits are the a-th
    combination and whose scan-level fields' digits are the b-th ((SP, SQ); the joint
    state is the mixed-radix number over ``d.fields`` in order, first field first)."""
    shape = tuple(d.radix)
    pa = [i for i, f in enumerate(pmask) if f]
    qa = [i for i, f in enumerate(pmask) if not f]
    sp = int(np.prod([shape[i] for i in pa])) if pa else 1
    grid = np.arange(int(np.prod(shape)) if shape else 1).reshape(shape)
    return grid.transpose(pa + qa).reshape(sp, -1)


def _patient_posterior(pi: np.ndarray, d: _Design, first: np.ndarray,
                       member: sparse.spmatrix, joint: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """P(patient-level part of the true state | all of a patient's scans) for outcome
    model(s) ``pi`` (M, S, C*P): (M, patients, SP), and each scan's prior x likelihood
    (M, SP, SQ, n) for the conditional draw of its scan-level part. ``joint``: the
    (SP, SQ) split of the states (:func:`_state_split`; default: every field patient-level).

    Scan i's joint prior is prior_P(a) prior_Q,i(b) (the table's rows; the patient-level
    factor is the same on every scan of the patient), so with
    ``m_i(a) = sum_b prior_i(a, b) P(pattern_i | a, b, context_i)``:
    ``P(a | patient) ∝ prod_i m_i(a) / prior_P(a)^(k - 1)`` over the patient's k scans
    (= prior_P(a) prod_i sum_b prior_Q,i(b) P(pattern_i | a, b)); the prior alone where no
    state fits."""
    M, n = pi.shape[0], len(d.combo)
    if joint is None:
        joint = np.arange(d.n_states)[:, None]
    SP, SQ = joint.shape
    q = d.prior[d.combo][:, joint.ravel()].reshape(n, SP, SQ)            # (n, SP, SQ)
    L = (pi[:, :, d.k][:, joint.ravel()][:, :, d.combo].reshape(M, SP, SQ, n)
         * q.transpose(1, 2, 0)[None])                                      # (M, SP, SQ, n)
    qp = q.sum(2)[first]                                                     # (patients, SP)
    with np.errstate(divide="ignore"):
        logm = np.log(L.sum(2))                                              # (M, SP, n)
        logq = np.log(qp)
    fin = np.isfinite(logm)
    tot = (np.where(fin, logm, 0.0).reshape(M * SP, n) @ member).reshape(M, SP, -1)
    dead = ((~fin).reshape(M * SP, n).astype(np.float64) @ member).reshape(M, SP, -1) > 0
    k = np.asarray(member.sum(0)).ravel()                                   # scans per patient
    lp = (tot.transpose(0, 2, 1)
          - (k - 1)[None, :, None] * np.where(np.isfinite(logq), logq, 0.0)[None])
    lp = np.where(dead.transpose(0, 2, 1), -np.inf, lp)                      # (M, patients, SP)
    top = lp.max(2, keepdims=True)
    ok = np.isfinite(top)
    post = np.exp(lp - np.where(ok, top, 0.0))
    post /= np.where(ok, post.sum(2, keepdims=True), 1.0)
    return np.where(ok, post, qp[None]), L


def _draw_by_patient(pi: np.ndarray, d: _Design, joint: np.ndarray, pcode: np.ndarray,
                     first: np.ndarray, member: sparse.spmatrix,
                     rng: np.random.Generator) -> np.ndarray:
    """Joint states (M, n): each patient's patient-level part once from its posterior
    (:func:`_patient_posterior`), then each scan's scan-level part from its prior x
    likelihood given that part (the table's prior where nothing fits)."""
    post, L = _patient_posterior(pi, d, first, member, joint)
    M, n_pat, SP = post.shape
    cdf = np.cumsum(post, axis=2)
    u = rng.random((M, n_pat, 1)) * cdf[:, :, -1:]
    a = np.minimum((u >= cdf).sum(2), SP - 1)[:, pcode]                     # (M, n)
    SQ = joint.shape[1]
    if SQ == 1:
        return joint[a, 0]
    cond = np.take_along_axis(L, a[:, None, None, :], axis=1)[:, 0]         # (M, SQ, n)
    tot = cond.sum(1, keepdims=True)
    q = d.prior[d.combo][:, joint.ravel()].reshape(len(pcode), SP, SQ)
    fall = np.take_along_axis(q[None], a[:, :, None, None], axis=2)[:, :, 0]  # (M, n, SQ)
    cond = np.where(tot > 0, cond / np.where(tot > 0, tot, 1.0),
                    fall.transpose(0, 2, 1) / fall.sum(2)[:, None, :])
    cdf = np.cumsum(cond, axis=1)
    u = rng.random((M, 1, len(pcode))) * cdf[:, -1:, :]
    b = np.minimum((u >= cdf).sum(1), SQ - 1)                                # (M, n)
    return joint[a, b]


def impute_states(d: _Design, n_imputations: int, rng: np.random.Generator, *,
                  prior_mass: float = 1.0, tol: float = 1e-6, max_iter: int = 500,
                  patient: np.ndarray | None = None,
                  per_patient: Sequence[str] | None = None) -> np.ndarray:
    """Draw ``n_imputations`` true joint states per case: an (M, n) integer array.

    Proper imputation by the Bayesian bootstrap: imputation m weights the distinct rows
    by Gamma(count, 1) (the Bayesian bootstrap of the cases, summed), fits the outcome
    model by EM under those weights, then draws every case's true state from its
    posterior given its recorded values, key, context and outcome pattern.

    With ``patient`` (a code per case) where some field is recorded once per patient
    (:func:`patient_fields`; ``per_patient`` names them, else they are read from the data),
    the unit is the patient: the Bayesian bootstrap weighs
    patients (Gamma(1, 1) each, summed over the scans of each distinct row); the
    patient-level fields' true values are drawn once per patient, from their posterior given
    all of the patient's scans with the scan-level fields summed out
    (:func:`_patient_posterior`), and each scan's scan-level fields (a contrast phase) are
    then drawn given them: one patient is never split between levels of race or sex. The
    outcome model is fitted as before (scans independent given the true state and
    context).
    """
    U, S, n = len(d.count), d.n_states, len(d.combo)
    pmask = patient_fields(d, patient, per_patient)
    by_patient = pmask is not None and bool(pmask.any())
    if by_patient:
        joint = _state_split(d, pmask)
        _, first, pcode = np.unique(np.asarray(patient, dtype=np.int64), return_index=True,
                                    return_inverse=True)
        pcode = pcode.ravel()
        n_pat = len(first)
        member = sparse.csr_matrix((np.ones(n), (np.arange(n), pcode)), shape=(n, n_pat))
        to_combo = sparse.csr_matrix((np.ones(n), (d.combo, pcode)), shape=(U, n_pat))
        w = np.asarray(to_combo @ rng.gamma(1.0, size=(n_pat, n_imputations))).T  # (M, U)
    else:
        w = rng.gamma(np.broadcast_to(d.count, (n_imputations, U)))
    out = np.empty((n_imputations, n), dtype=np.int64)
    # the full-data fit (tight), then each bootstrap fit from it: few EM steps each
    mle = _fit_outcome(d.count[None], d, prior_mass=prior_mass, tol=tol / 100,
                       max_iter=10 * max_iter)[0]
    per = max(1, _BLOCK_ELEMENTS // max(1, max(U, n) * S))
    if by_patient:   # the patient path holds a few more (M, S, n) arrays at once
        per = max(1, per // 2)
    for lo in range(0, n_imputations, per):  # blocks of imputations, vectorized inside
        hi = min(n_imputations, lo + per)
        pi = _fit_outcome(w[lo:hi], d, prior_mass=prior_mass, tol=tol, max_iter=max_iter,
                          start=mle)
        if by_patient:
            out[lo:hi] = _draw_by_patient(pi, d, joint, pcode, first, member, rng)
            continue
        post = _posterior(pi, d)
        cdf = np.cumsum(np.swapaxes(post, 1, 2), axis=2)[:, d.combo, :]  # (m, n, S)
        u = rng.random((hi - lo, n, 1)) * cdf[:, :, -1:]
        out[lo:hi] = np.minimum((u >= cdf).sum(2), S - 1)
    return out


# --------------------------------------------------------------------------- pooling

def rubin_proportion(num: np.ndarray, den: np.ndarray, *, ci: str = "wilson",
                     conf_level: float = 0.95) -> dict[str, np.ndarray]:
    """Pool per-imputation proportions ``num / den`` (M, ...) by Rubin's rules.

    Returns arrays (shape ``num.shape[1:]``): ``estimate`` (mean of the defined
    proportions), ``std_error`` (sqrt of T = U + (1 + 1/m) B), ``conf_low``, ``conf_high``,
    ``df``, ``fraction_missing_info``, ``n_imputations`` (m: imputations with den > 0),
    ``numerator``, ``denominator`` (means over all imputations).

    Notes
    -----
    Within-imputation variance U_m = p_m (1 - p_m) / n_m (binomial), B the between-
    imputation variance of p_m, r = (1 + 1/m) B / mean(U_m). Degrees of freedom of
    Barnard & Rubin (1999) with the complete-data df taken as infinite (the complete-data
    Wilson interval's reference is the normal), i.e. Rubin's (1987)
    nu = (m - 1) (1 + 1/r)^2; fraction of missing information
    (r + 2 / (nu + 3)) / (r + 1). The interval is the ``ci`` interval (Wilson by default)
    at the effective sample size n_eff = mean(n_m) / (1 + r) * (z / t_nu)^2 around the
    pooled estimate: for Wilson this is the score interval with variance inflated by
    (1 + r) and a t_nu critical value (the MI Wilson interval of Lott & Reiter 2020);
    with B = 0 (no metadata error) it is exactly the complete-data interval.
    """
    num, den = np.asarray(num, float), np.asarray(den, float)
    ok = den > 0
    m = ok.sum(0).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(ok, num / np.where(ok, den, 1), 0.0)
        pbar = np.where(m > 0, p.sum(0) / m, np.nan)
        nbar = np.where(m > 0, np.where(ok, den, 0).sum(0) / m, np.nan)
        ubar = np.where(m > 0, np.where(ok, p * (1 - p) / np.where(ok, den, 1), 0).sum(0) / m, np.nan)
        same = np.where(ok, p, np.inf).min(0) == np.where(ok, p, -np.inf).max(0)
        b = np.where((m > 1) & ~same, np.where(ok, (p - pbar) ** 2, 0).sum(0) / (m - 1), 0.0)
        # equal proportions given as scaled counts (num f / den f) differ in the last bit:
        # a between-imputation variance within 1e-12 of the within one is 0 (rule of
        # stats._linalg.clean_variance), so df is inf and fmi 0, not 1e62 and 1e-31
        b = clean_variance(b, ubar)
        ubar = np.where(ubar > 0, ubar, pbar * (1 - pbar) / nbar)  # all p_m at 0 or 1
        extra = (1 + 1 / m) * b
        r = np.where(extra > 0, extra / ubar, 0.0)
        r = np.where(np.isfinite(r), r, np.inf)
        nu = np.where(r > 0, (m - 1) * (1 + 1 / r) ** 2, np.inf)
        fmi = np.where(np.isfinite(nu), (r + 2 / (nu + 3)) / (r + 1), 0.0)
        z = sps.norm.ppf(0.5 + conf_level / 2)
        t = np.where(np.isfinite(nu), sps.t.ppf(0.5 + conf_level / 2, np.where(np.isfinite(nu), nu, 1)), z)
        n_eff = nbar / (1 + r) * (z / t) ** 2
        lo, hi = proportion_limits(np.where(m > 0, pbar * n_eff, 0), np.where(m > 0, n_eff, 0),
                               method=ci, conf_level=conf_level)
    return {"estimate": pbar, "std_error": np.sqrt(ubar + extra), "conf_low": lo,
            "conf_high": hi, "df": nu, "fraction_missing_info": np.where(m > 0, fmi, np.nan),
            "n_imputations": m, "numerator": num.mean(0), "denominator": den.mean(0)}


# --------------------------------------------------------------------------- the metrics

def _axis_cells(d: _Design, spec: tuple[str, ...]):
    """(group_var, levels, cell map S x C -> level index or -1) of one affected axis."""
    states = np.array(np.unravel_index(np.arange(d.n_states), d.radix)).T  # S x F
    ctxs = (np.array(np.unravel_index(np.arange(d.n_context), d.ctx_radix)).T
            if d.ctx_radix else np.zeros((1, 0), np.int64))
    code = np.zeros((d.n_states, d.n_context), dtype=np.int64)
    names: list[list[str]] = []
    for col in spec:
        if col in d.levels:
            K, digit = len(d.levels[col]), states[:, d.fields.index(col)][:, None]
            names.append(d.levels[col])
        else:
            K, digit = len(d.context_levels[col]), ctxs[:, d.context_cols.index(col)][None, :]
            names.append(d.context_levels[col])
        code = np.where((code < 0) | (digit >= K), -1, code * K + digit)
    levels = [":".join(t) for t in _product(names)]
    return ":".join(spec), levels, code


def error_aware_metrics(cases: pd.DataFrame, *, by, label_error: pd.DataFrame,
                        metrics: Sequence[str] = ("sensitivity", "specificity", "ppv", "npv",
                                                  "accuracy", "f1", "auc"),
                        ci: str = "wilson", conf_level: float = 0.95, n_imputations: int = 100,
                        seed=None, small_n: int = 10, context: Sequence[str] = (),
                        cluster: str | None = "auto",
                        per_patient: Sequence[str] | None = None,
                        **naive_kw) -> pd.DataFrame:
    """Detection metrics per subgroup cell with intervals that include metadata error.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred`` (see :func:`stats.scan_level`).
    by, metrics, conf_level, small_n : as :func:`stats.subgroup_metrics`.
    label_error : DataFrame ``field, recorded_value, true_value, probability`` (+ optional
        key columns such as ``site``): P(true value | recorded value) per field; see the
        module docstring and :func:`check_label_error`.
    ci : "wilson" (default), "clopper-pearson" or "jeffreys": the complete-data interval
        that is widened (:func:`rubin_proportion`); "bootstrap" is refused.
    n_imputations : int
        Number of imputations M (default 100).
    seed : int, Generator or None
        Randomness of the imputations (same seed, same result).
    context : column names
        Further columns the outcome model conditions on (saturated), e.g. ``("site",)``
        when detection differs by site beyond the true levels AND the error rates differ
        by site too. Each one splits the model's cells, and sparse cells bias the
        estimates: in 150 studies of the bench design (2,000 scans, per-site tables, 10%
        flipped) delayed-phase sensitivity was off by -0.015 with coverage 0.90 with
        ``("site",)``, by -0.003 with 0.94 without. The default is none.
    cluster : column whose repeated values mark scans of one patient; default "auto":
        ``"patient_id"`` when it repeats (:func:`stats.clustered.resolve_cluster`, the rule
        of every ``cluster`` keyword), None for scans as independent. The axes without error get ``subgroup_metrics(cluster=)``'s
        intervals; on the imputed axes each imputation's within-imputation variance is the
        cluster-aware one: the proportion at Korn & Graubard's effective size over the
        clusters of the level in that imputation (:func:`stats.clustered.design_effect`,
        degrees-of-freedom factor and rules included), so Rubin's rules pool
        ``p_m (1 - p_m) / n_eff_m`` (method "mi-wilson-cluster"). With no metadata error
        (every imputation alike) the interval is exactly ``wilson-cluster``; without a
        repeated cluster in a level it is exactly "mi-wilson". Adds ``n_clusters`` (mean
        over imputations). A field whose recorded value and table keys every patient's
        scans share (recorded once per patient: race, sex), when some patient has several
        scans, is drawn once per patient, from the posterior given all of the patient's
        scans, and the Bayesian bootstrap weighs patients (:func:`impute_states` with
        ``patient``); a scan-level field (phase) is drawn scan by scan given it. The
        imputed rows name those of their axis in ``imputed_per_patient`` (";"-joined; ""
        when none).
    per_patient : field names recorded once per patient (the plan's
        ``metadata.per_patient``): exactly these are drawn per patient, and a patient whose
        scans differ in one of them (recorded value, or a table key such as ``site``) is an
        error naming the patients and scans. None (default): read from the data, where one
        patient whose scans disagree on a field makes it scan-level for everyone and a
        field that happens to agree within every patient is drawn per patient. Needs
        ``cluster``; a name that is no field of ``label_error`` is an error.
    **naive_kw : passed to :func:`stats.subgroup_metrics` for the axes without error.

    Returns
    -------
    The tidy rows of :func:`stats.subgroup_metrics`: overall and the axes without an
    error-prone field as it computes them; every axis that uses a field of the table
    (alone or in an intersection) re-estimated, one row per metric x model x level, with
    ``method`` "mi-wilson" (or "mi-clopper-pearson", "mi-jeffreys"; "mi-none" for F1,
    which gets the pooled point estimate and no interval; "none" for AUC, flagged
    ``label_error_unsupported``), ``n``, ``n_pos``, ``n_neg``, ``numerator``,
    ``denominator`` the means over imputations, and extra columns ``n_imputations``,
    ``df``, ``fraction_missing_info`` (NaN on rows without error). ``flag`` adds
    ``label_error_uncovered`` (``;``-joined) on the levels of a field some of whose
    scans have a recorded value the table does not list (those scans are taken as
    correctly recorded). Levels that the table names as true values but no scan records
    are rows too. The "Missing" and "not applicable" levels of
    :func:`stats.detection.case_matrix` stay as they are, unflagged, unless the table
    lists them as recorded values (then their scans are imputed like any other).

    Notes
    -----
    Method: multiple imputation of each scan's true level(s) (Rubin 1987), as used for
    measurement-error correction by Cole, Chu & Greenland (2006). The imputation model is
    P(true | recorded) from the table times an outcome model P(pattern | true, context),
    where the pattern is the scan's reference label and every model's call and the
    context the error-free columns of the affected intersections (and ``context``); an
    imputation that ignored the outcome would bias subgroup differences toward zero.
    Errors of different fields are independent given the truth; the recorded values are
    non-differential: the outcome pattern depends on them (and on the table's keys) only
    through the true levels and the context. The outcome model has a Dirichlet prior of
    one pseudo-scan per state x context cell, centred on the pattern mix of the scans
    recorded in that state. Its uncertainty is propagated by the Bayesian bootstrap
    (Rubin 1981; Efron 1994): each imputation refits it by EM (SQUAREM-accelerated) under
    Gamma(count, 1) row weights, then draws each scan's true state from its posterior (all M draws as one (M, n) array, counted with
    ``np.bincount``). Per imputation the cell's proportion and binomial variance; pooled
    by Rubin's rules with the Barnard-Rubin (1999) df and widened Wilson interval
    (:func:`rubin_proportion`). The table's probabilities are taken as known. Without
    ``cluster`` scans are independent (as for the closed-form intervals); the outcome model
    always treats scans as independent given the true level and context. A probabilistic bias analysis (Lash,
    Fox & Fink 2009) would need the same outcome-aware posterior and gives no
    within-imputation variance, hence this choice.

    References
    ----------
    Rubin DB (1987) Multiple Imputation for Nonresponse in Surveys. Wiley.
    Barnard J, Rubin DB (1999) Biometrika 86:948-955.
    Cole SR, Chu H, Greenland S (2006) Int J Epidemiol 35:1074-1081.
    Efron B (1994) JASA 89:463-475. Rubin DB (1981) Ann Stat 9:130-134.
    Lott A, Reiter JP (2020) The American Statistician 74:109-115.
    Varadhan R, Roland C (2008) Scand J Stat 35:335-353 (SQUAREM, the EM acceleration).
    Lash TL, Fox MP, Fink AK (2009) Applying Quantitative Bias Analysis to Epidemiologic
    Data. Springer.

    Checked by simulation with known truth: ``bench/label_error_coverage.md``.
    """
    from stats import subgroups as sg

    if ci not in PROPORTION_METHODS:
        raise ValueError(MSG_CI.format(ci=ci))
    if isinstance(n_imputations, bool) or not isinstance(n_imputations, (int, np.integer)) \
            or n_imputations < 2:
        raise ValueError(MSG_IMPUTATIONS.format(m=n_imputations))
    table = check_label_error(label_error)
    declared = _declared(per_patient, table, cluster)
    cases, cluster = cluster_cases(cases, cluster)
    rng = as_generator(seed)
    specs = normalize_by(by)
    aff = _affected(specs, set(table["field"]))
    if not aff:
        raise ContractError(MSG_NO_FIELD.format(fields=", ".join(sorted(set(table["field"]))),
                                                axes=[":".join(s) for s in specs]))
    # overall and the axes without error, as subgroup_metrics computes them
    naive = sg.subgroup_metrics(cases, by=[s for i, s in enumerate(specs) if i not in aff],
                                metrics=metrics, ci=ci, conf_level=conf_level, seed=rng,
                                small_n=small_n, cluster=cluster, **naive_kw)
    cm = case_matrix(cases, by, cluster=cluster)
    d = _design(cm, specs, table, tuple(context))
    patient = cm.patient if cluster is not None else None
    if declared is not None:
        _check_declared(cases, cm, d, patient, declared, cluster)
    from stats.limits import check

    check(imputation_work(n_imputations, len(d.combo), n_states=d.n_states))  # before drawing
    T = impute_states(d, int(n_imputations), rng, patient=patient, per_patient=declared)
    pmask = patient_fields(d, patient, declared)
    per_patient = [f for f, p in zip(d.fields, pmask) if p] if pmask is not None else []
    frames = [naive]
    cells = []
    for i, spec in enumerate(specs):
        if i in aff:
            frames_i, cells_i = _axis_rows(cm, d, spec, T, metrics, ci, conf_level, small_n,
                                           clustered=cluster is not None)
            frames += frames_i
            cells.append(cells_i)
        else:
            cells.append(cm.cells[cm.cells["group_var"] == ":".join(spec)])
    all_cells = pd.concat([cm.cells[cm.cells["group_var"] == OVERALL], *cells], ignore_index=True)
    out = pd.concat(frames, ignore_index=True)
    for col in ("n_imputations", "df", "fraction_missing_info"):
        if col not in out:
            out[col] = np.nan
    # which fields were drawn once per patient (impute_states): on the imputed rows
    axes_ = pd.unique(out["group_var"].astype(str))            # one entry per axis
    of_axis = {a: ";".join(f for f in per_patient if f in a.split(":")) for a in axes_}
    out["imputed_per_patient"] = out["group_var"].astype(str).map(of_axis).where(
        out["n_imputations"].notna(), None)
    return tidy(sg._order(out, replace(cm, cells=all_cells)), group_cols=GROUP_COLS)


def _declared(per_patient, table: pd.DataFrame, cluster: str | None) -> tuple[str, ...] | None:
    """``per_patient`` checked against the table's fields (None: read from the data)."""
    if per_patient is None:
        return None
    names = (per_patient,) if isinstance(per_patient, str) else tuple(map(str, per_patient))
    fields = sorted(set(table["field"].astype(str)))
    unknown = [f for f in names if f not in fields]
    if unknown:
        raise ContractError(MSG_PER_PATIENT_FIELD.format(
            names=", ".join(map(repr, unknown)), fields=", ".join(fields)))
    if names and (cluster is None or str(cluster).lower() == "none"):
        # turned off explicitly; under "auto" without repeated patients it has no effect
        raise ContractError(MSG_PER_PATIENT_CLUSTER.format(names=", ".join(names)))
    return names


def _check_declared(cases: pd.DataFrame, cm: CaseMatrix, d: _Design, patient, declared,
                    cluster: str) -> None:
    """A field declared patient-level must agree within every patient (recorded value and
    table keys): otherwise an error naming the patients and their scans."""
    dis = patient_disagreement(d, patient)
    if dis is None:
        return
    _, code = np.unique(np.asarray(patient, dtype=np.int64), return_inverse=True)
    code = code.ravel()
    ids = (cases.drop_duplicates("case_id").set_index("case_id")[cluster]
           .reindex(cm.case_id).astype(str).to_numpy())
    for j, f in enumerate(d.fields):
        if f not in declared or not dis[j].any():
            continue
        bad = np.flatnonzero(dis[j])
        shown = []
        for p in bad[:5]:               # the message shows five patients at most
            scans = np.flatnonzero(code == p)
            shown.append(f"{ids[scans[0]]} (cases {', '.join(map(str, cm.case_id[scans][:4]))}"
                         f"{', ...' if len(scans) > 4 else ''})")
        raise ContractError(MSG_PER_PATIENT_DISAGREE.format(
            field=f, n=len(bad), cluster=cluster, patients="; ".join(shown),
            more=f" and {len(bad) - 5} more" if len(bad) > 5 else ""))


def _axis_rows(cm: CaseMatrix, d: _Design, spec, T, metrics, ci, conf_level, small_n,
               clustered: bool = False):
    """Rows of one affected axis: per-imputation counts by bincount, pooled per metric
    (``clustered``: at each imputation's effective counts, :func:`_effective_scale`)."""
    from stats.detection import _add_flag, _flags, _frame

    gvar, levels, code = _axis_cells(d, spec)
    G, M, J = len(levels), T.shape[0], len(cm.models)
    g = code[T, d.ctx[None, :]]  # (M, n) level of each case in each imputation
    ok = g >= 0
    flat = (np.arange(M)[:, None] * G + g)[ok]
    y = cm.label.astype(float)
    feats = np.column_stack([np.ones_like(y), y, cm.pred * y[:, None], cm.pred * (1 - y)[:, None]])
    case = np.broadcast_to(np.arange(len(y)), T.shape)[ok]
    cnt = np.stack([np.bincount(flat, weights=feats[case, j], minlength=M * G)
                    for j in range(feats.shape[1])], -1).reshape(M, G, -1)
    n, n_pos = cnt[..., 0], cnt[..., 1]
    tp, fp = cnt[..., 2:2 + J], cnt[..., 2 + J:]
    fn, tn = n_pos[..., None] - tp, (n - n_pos)[..., None] - fp
    counts = {"n": n.mean(0), "n_pos": n_pos.mean(0), "n_neg": (n - n_pos).mean(0)}
    cells = pd.DataFrame({"group_var": gvar, "group_level": levels, "axis": -1})
    cmc = replace(cm, cells=cells)
    flag_extra = _uncovered_levels(d, spec, levels)
    scale = (_effective_scale(cm, g, ok, M, G, [k for k in metrics if k not in ("auc", "f1")],
                              conf_level) if clustered else {})
    frames = []
    for k in metrics:
        if k == "auc":
            nan = np.full((G, J), np.nan)
            frames.append(_frame(cmc, k, {
                "estimate": nan, "std_error": nan, "conf_low": nan, "conf_high": nan,
                "conf_level": conf_level, "method": "none",
                "flag": np.full((G, J), FLAG_UNSUPPORTED, dtype=object),
                "numerator": nan, "denominator": nan}, counts))
            continue
        num, den = metric_fractions(tp, fp, fn, tn, (k,))[k]
        extra = {}
        if k in scale:  # Rubin's rules at each imputation's effective counts
            f, n_clusters, deff_na = scale[k]
            pooled = rubin_proportion(num * f, den * f, ci=ci, conf_level=conf_level)
            pooled.update(numerator=num.mean(0), denominator=den.mean(0))
            extra = {"n_clusters": n_clusters}
        else:
            pooled = rubin_proportion(num, den, ci=ci, conf_level=conf_level)
        if k == "f1":
            pooled.update(conf_low=np.full((G, J), np.nan), conf_high=np.full((G, J), np.nan),
                          std_error=np.full((G, J), np.nan))
        flag = _flags(counts["n"][:, None], pooled["denominator"], small_n)
        flag = np.where(flag_extra[:, None], np.char.add(np.char.add(
            flag.astype(str), np.where(flag == "", "", ";")), FLAG_UNCOVERED), flag)
        if k in scale:   # as wilson-cluster: the design effect of some imputation unknown
            flag = _add_flag(flag, deff_na, FLAG_DEFF)
        method = "mi-none" if k == "f1" else f"mi-{ci}" + (SUFFIX if k in scale else "")
        frames.append(_frame(cmc, k, {
            **pooled, "conf_level": conf_level, "method": method,
            "flag": flag.astype(object), **extra}, counts))
    return frames, cells


#: (imputations x cases) memberships x metric columns of one block of the cluster-aware
#: scaling (bounds the dense per-(level, patient) sums in memory)
_MI_CLUSTER_ELEMENTS = 2 ** 24


def _effective_scale(cm: CaseMatrix, g: np.ndarray, ok: np.ndarray, M: int, G: int,
                     metrics: Sequence[str], conf_level: float
                     ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per metric: the factor ``n_eff_m / n_m`` (M x G x models) that turns imputation
    ``m``'s counts of each level into its effective counts (Korn & Graubard over the
    clusters ``cm.patient`` of the level in that imputation; 1 where nothing repeats), the
    mean number of clusters per level (G x models) and whether the design effect could
    not be estimated in some imputation (G x models). Imputations in blocks; inside a
    block one sparse aggregation over the (imputation x level, case) memberships for every
    metric and model at once."""
    ind = metric_indicators(cm.label, cm.pred, metrics)
    num = np.hstack([ind[k][0] for k in metrics])
    den = np.hstack([ind[k][1] for k in metrics])
    n, K, J = len(cm.label), num.shape[1], len(cm.models)
    fac = np.empty((M, G, K))
    n_clusters = np.zeros((G, K))
    not_est = np.zeros((G, K), dtype=bool)
    step = max(1, _MI_CLUSTER_ELEMENTS // max(n * K, 1))
    for start in range(0, M, step):   # blocks of imputations, vectorized inside
        b = min(step, M - start)
        gb, okb = g[start:start + b], ok[start:start + b]
        case = np.broadcast_to(np.arange(n), gb.shape)[okb]
        cell = (np.arange(b)[:, None] * G + gb)[okb]
        member = sparse.csr_matrix((np.ones(len(cell)), (cell, case)), shape=(b * G, n))
        mom = cluster_moments(member, cm.patient, num, den)
        d = design_effect(mom, conf_level)
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.where(mom["n"] > 0, d["n_effective"] / np.where(mom["n"] > 0, mom["n"], 1),
                         1.0)
        fac[start:start + b] = f.reshape(b, G, K)
        n_clusters += mom["n_clusters"].reshape(b, G, K).sum(0)
        not_est |= d["not_estimable"].reshape(b, G, K).any(0)
    out = {}
    for i, k in enumerate(metrics):
        sl = slice(i * J, (i + 1) * J)
        out[k] = (fac[:, :, sl], n_clusters[:, sl] / M, not_est[:, sl])
    return out


def _uncovered_levels(d: _Design, spec, levels) -> np.ndarray:
    """Whether each level of an axis involves a recorded value the table lacks."""
    parts = [lv.split(":") for lv in levels] if len(spec) > 1 else [[lv] for lv in levels]
    return np.array([any(p[j] in d.uncovered.get(c, ()) for j, c in enumerate(spec))
                     for p in parts], dtype=bool)


# --------------------------------------------------------------------------- side by side

def compare_naive(cases: pd.DataFrame, by, label_error: pd.DataFrame, *,
                  metrics: Sequence[str] = ("sensitivity", "specificity"), **kwargs) -> pd.DataFrame:
    """Naive and error-aware rows of the axes that use an error-prone field, stacked.

    Returns the tidy rows of :func:`stats.subgroup_metrics` (``label_error=None``, kind
    "naive") and of :func:`error_aware_metrics` (kind "error_aware") for those axes only,
    with a ``kind`` column, ordered model, axis, level, metric, kind, so a report can put
    the two intervals side by side. ``kwargs`` go to both (``ci``, ``conf_level``,
    ``small_n``, ``cluster``) or to the error-aware call only (``n_imputations``, ``seed``).
    An empty ``cases`` table raises :class:`~stats.schema.ContractError`, as in
    :func:`stats.subgroup_metrics`.
    """
    from stats import subgroups as sg

    _v.table(cases, func="compare_naive")

    table = check_label_error(label_error)
    specs = normalize_by(by)
    aff = [":".join(specs[i]) for i in _affected(specs, set(table["field"]))]
    given = kwargs.get("cluster", "auto")
    cases, kwargs["cluster"] = cluster_cases(cases, given)                 # both sides
    if kwargs["cluster"] is None and given is not None and str(given).lower() == "auto":
        kwargs.pop("per_patient", None)     # no repeated patients: a declaration changes nothing
    shared = {k: v for k, v in kwargs.items() if k in ("ci", "conf_level", "small_n", "cluster")}
    naive = sg.subgroup_metrics(cases, by=by, metrics=metrics, **shared)
    aware = error_aware_metrics(cases, by=by, label_error=table, metrics=metrics, **kwargs)
    both = pd.concat([naive.assign(kind="naive"), aware.assign(kind="error_aware")],
                     ignore_index=True)
    both = both[both["group_var"].isin(aff)]
    order = {v: i for i, v in enumerate(aff)}
    key = pd.DataFrame({
        "m": both["model"].map({m: i for i, m in enumerate(pd.unique(cases["model"]))}),
        "a": both["group_var"].map(order),
        "l": both.groupby("group_var", sort=False)["group_level"].transform(
            lambda s: s.map({v: i for i, v in enumerate(pd.unique(s))})),
        "e": both["estimand"].map({k: i for i, k in enumerate(metrics)}),
        "k": (both["kind"] == "error_aware").astype(int)})
    return tidy(both.iloc[np.lexsort((key.k, key.e, key.l, key.a, key.m))], group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- from review

def misclassification_from_review(evidence: pd.DataFrame, *, fields: Sequence[str] | None = None,
                                  prefer: Sequence[str] | None = None, prior: float = 0.5,
                                  tol: float = 1e-10, max_iter: int = 1000) -> pd.DataFrame:
    """Estimate a label-error table from extractor disagreement and review outcomes.

    Parameters
    ----------
    evidence : the metadata evidence table (``case_id, field, value, extractor``; rows with
        ``extractor == "review"`` are human decisions, taken as the truth).
    fields : fields to estimate (default: every field).
    prefer : extractor order of the recorded value when no review exists (default: the
        extractors in sorted order), as the value a case is analysed with is chosen:
        a review wins, then the first extractor in ``prefer`` that gave a value.
    prior : Dirichlet pseudo-count added to every cell of each extractor's confusion
        matrix and to the prevalences.

    Returns
    -------
    DataFrame ``field, recorded_value, true_value, probability`` (the label-error table;
    every true value a recorded value can have, including probability 0 rows), plus
    ``n_recorded`` (scans analysed with that recorded value) and ``n_reviewed`` (of
    them, those settled by review). An evidence table without rows gives this table
    without rows (no recorded value, no row), with its columns.

    Raises
    ------
    ContractError
        ``evidence`` not a DataFrame or without its columns; ``prior`` not a number
        >= 0, ``tol`` not > 0, ``max_iter`` not a whole number >= 1; ``prefer`` naming
        an extractor the table lacks.

    Notes
    -----
    Dawid & Skene's (1979) latent-class model: the extractors err independently given the
    true value, with one confusion matrix each, fitted by EM over the cases with review
    outcomes as observed true values (review is triggered by the observed values only, so
    it is ignorable for the likelihood). P(true | recorded) is the mean, over the scans
    analysed with that recorded value, of each scan's posterior (a one-hot for reviewed
    scans). With a single extractor, disagreement carries no information on its errors:
    unreviewed values are taken as correct (give the table yourself). The estimate's
    own sampling error is not carried into :func:`error_aware_metrics`.

    References
    ----------
    Dawid AP, Skene AM (1979) Applied Statistics 28:20-28.
    """
    func = "misclassification_from_review"
    _v.table(evidence, func=func, arg="evidence", empty=True,
             hint=" (the evidence table clinrel metadata extract writes)")
    prior = _v.number(prior, func=func, arg="prior", lo=0.0, closed="left", fix="e.g. prior=0.5")
    tol = _v.number(tol, func=func, arg="tol", lo=0.0, fix="e.g. tol=1e-10")
    max_iter = _v.whole(max_iter, func=func, arg="max_iter", fix="e.g. max_iter=1000")
    need = ("case_id", "field", "value", "extractor")
    missing = [c for c in need if c not in evidence.columns]
    if missing:
        raise ContractError(MSG_EVIDENCE.format(columns=", ".join(map(repr, missing)),
                                                present=", ".join(map(repr, evidence.columns))))
    ev = evidence[list(need)].dropna(subset=["value"]).astype(str)
    ev = ev[ev["value"].str.strip() != ""].drop_duplicates(["case_id", "field", "extractor"],
                                                             keep="last")
    extractors = sorted(set(ev["extractor"]) - {"review"})
    order = list(prefer) if prefer is not None else extractors
    bad = [e for e in order if e not in extractors]
    if bad:
        raise ContractError(MSG_PREFER.format(bad=", ".join(map(repr, bad)),
                                              present=", ".join(map(repr, extractors))))
    order += [e for e in extractors if e not in order]
    frames = []
    for field in (fields if fields is not None else sorted(ev["field"].unique())):
        frames.append(_dawid_skene(ev[ev["field"] == field], field, order, prior, tol, max_iter))
    cols = [*LABEL_ERROR_COLUMNS, "n_recorded", "n_reviewed"]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols))[cols]


def _dawid_skene(ev: pd.DataFrame, field: str, order: list[str], prior: float, tol: float,
                 max_iter: int) -> pd.DataFrame:
    """One field: per distinct pattern of (extractor values, review) the posterior of the
    true value, then P(true | recorded) averaged over the scans."""
    wide = ev.pivot(index="case_id", columns="extractor", values="value")
    cols = [e for e in order if e in wide.columns]
    levels = sorted(pd.unique(wide.to_numpy().ravel()[pd.notna(wide.to_numpy().ravel())]))
    K = len(levels)
    pos = {v: i for i, v in enumerate(levels)}
    code = wide.apply(lambda s: s.map(pos)).fillna(-1).astype(np.int64)
    A = code[cols].to_numpy().reshape(len(code), len(cols))
    truth = code["review"].to_numpy() if "review" in code else np.full(len(code), -1)
    first = A[np.arange(len(A)), np.argmax(A >= 0, axis=1)] if cols else np.full(len(A), -1)
    recorded = np.where(truth >= 0, truth, first)
    keep = recorded >= 0
    pat, inv, cnt = np.unique(np.column_stack([A, truth])[keep], axis=0, return_inverse=True,
                              return_counts=True)
    inv, cnt = inv.ravel(), cnt.astype(float)
    Ap, tp = pat[:, :-1], pat[:, -1]
    reviewed = tp >= 0
    # start: reviewed truth, else the recorded value
    start = np.where(reviewed, tp, recorded[keep][np.unique(inv, return_index=True)[1]])
    post = np.eye(K)[start]
    prev = None
    for _ in range(max_iter if len(cols) >= 2 else 0):  # one extractor: nothing to compare
        w = post * cnt[:, None]
        rho = w.sum(0) + prior
        rho = rho / rho.sum()
        log_lik = np.tile(np.log(rho), (len(pat), 1))
        for j in range(len(cols)):  # one confusion matrix per extractor (few extractors)
            seen = Ap[:, j] >= 0
            theta = np.full((K, K), prior)
            np.add.at(theta.T, Ap[seen, j], w[seen])  # theta[t, v] += w[u, t]
            theta /= theta.sum(1, keepdims=True)
            log_lik += np.where(seen[:, None], np.log(theta[:, np.maximum(Ap[:, j], 0)].T), 0)
        new = np.exp(log_lik - log_lik.max(1, keepdims=True))
        new /= new.sum(1, keepdims=True)
        new[reviewed] = np.eye(K)[tp[reviewed]]
        post = new
        if prev is not None and np.max(np.abs(post - prev)) < tol:
            break
        prev = post
    rec = recorded[keep]
    table = np.zeros((K, K))
    np.add.at(table, rec, post[inv])
    n_rec = np.bincount(rec, minlength=K).astype(float)
    n_rev = np.bincount(rec[truth[keep] >= 0], minlength=K)
    has = n_rec > 0
    prob = table[has] / n_rec[has, None]
    r_idx = np.flatnonzero(has)
    return pd.DataFrame({
        "field": field,
        "recorded_value": np.repeat(np.asarray(levels, dtype=object)[r_idx], K),
        "true_value": np.tile(np.asarray(levels, dtype=object), len(r_idx)),
        "probability": prob.ravel(),
        "n_recorded": np.repeat(n_rec[has], K), "n_reviewed": np.repeat(n_rev[has], K).astype(float)})


# --------------------------------------------------------------------------- work
# (the engine states its own memory and time: stats.limits holds only the caps)

def imputation_work(n_imputations: int, n_rows: int, *, n_states: int = 2,
                    setting: str = "n_imputations",
                    what: str = "the label-error imputation") -> _limits.Work:
    """Peak memory and time of :func:`stats.label_error.impute_states` and the pooling
    after it: the imputed states (imputations x rows int64), the per-imputation counts
    and indicator temporaries of the same size (about three such arrays in all), and one
    block of posterior draws (``stats.label_error._BLOCK_ELEMENTS`` elements)."""
    M, n, S = max(int(n_imputations), 1), max(int(n_rows), 1), max(int(n_states), 1)
    mem = 3 * 8.0 * M * n + 8.0 * 4 * (1 << 24)
    secs = _limits.SECONDS_PER_ELEMENT * M * n * S * 20     # ~20 EM steps and draws per row
    return _limits.Work(what=what, setting=f"{setting} ({M:,} imputations)", memory_bytes=mem,
                seconds=secs, detail=f"{M:,} imputations x {n:,} rows")
