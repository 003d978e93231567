"""Performance in the intended-use population: the study reweighted to target margins.

:func:`transport` rakes the study's scans to the margins of a target population (site or
region mix, contrast-phase mix, age and sex distribution, disease prevalence) and reports
sensitivity, specificity, PPV and NPV under the raked weights, with design-based
standard errors (patients as clusters) and the effective sample size.

**Raking** (iterative proportional fitting; Deming & Stephan 1940). Every scan starts at
weight 1; each margin ``m`` in turn rescales the weights of each of its levels ``l`` to
the target total ``T_ml = N s_ml`` (``s_ml`` the target share, ``N`` the number of
scans, so the weights average 1; a margin given as counts is first divided by its own
sum), until every margin matches its target to :data:`RAKE_TOL` relative (at most
``max_iter`` cycles; otherwise flag ``raking_not_converged``). This is R survey's
``rake()`` run to convergence (R's default stops at an absolute change of 1 in the
joint table, or after 10 cycles).

**Estimates and SEs.** A metric is a weighted proportion in its domain (sensitivity:
``pred`` among ``label == 1``; specificity: ``1 - pred`` among 0; PPV: ``label`` among
``pred == 1``; NPV: ``1 - label`` among ``pred == 0``; with ``by``, also within each
level): ``p = sum_D w y / sum_D w``. Its variance is the linearisation of a domain mean
under raking, as survey's ``svymean`` on a subset of a raked design computes it: the
influence ``z_i = 1{i in D} w_i (y_i - p) / sum_D w`` is replaced by its residual after
raking, ten cycles of ``z <- z - w * mean_l(z / w)`` over the margins (``mean_l`` the
unweighted mean over the scans of the margin's level ``l``; survey's ``svyrecvar`` for a
``raking`` object), then ``V = C / (C - 1) sum_c (Z_c - Zbar)^2`` over the C patients of
the study (``Z_c`` a patient's sum; survey's one-stage cluster variance with
replacement). The interval is survey's ``svyciprop(method = "logit")``:
``expit(logit(p) +- t_{df} SE / (p (1 - p)))``, ``df`` = the patients with a scan in the
domain minus 1 (survey's ``degf`` of the subset). The effective sample size is Kish's
``(sum_D w)^2 / sum_D w^2``.

Validated against R's survey 4.1-1 ``rake()`` (``control = list(maxit = 1000, epsilon =
1e-12)``) + ``svymean()`` / ``svyciprop(method = "logit")`` on ``svydesign(ids =
~patient_id, weights = ~1)`` (tests/r/transport.R -> tests/r/transport.csv; tests in
tests/stats/test_raking.py): estimates 2.7e-11, SEs 1.3e-11, limits 3.1e-9 (svyglm's
own convergence; 2.7e-11 against the logit interval written out in R), Kish n_eff
5.6e-9; tested to 1e-6.

**Refusals and flags.** A target level with a positive share and no scans in the study
is outside the study's support: no weighting can represent it, and the call is refused
naming the margin and the level. A study level the target does not list (or lists with
share 0) is refused too (its scans would need weight 0: drop them from ``cases`` first,
as R's ``postStratify`` refuses them). Weights more than :data:`EXTREME_WEIGHT` times
their mean are flagged ``extreme_weights`` on every row (``max_weight`` shows the
largest, ``n_eff`` the effective size): the transported numbers then rest on few
scans.

References: Deming WE, Stephan FF (1940) Ann Math Stat 11:427-444; Lumley T (2010)
Complex Surveys (Wiley), ch. 7; Kish L (1965) Survey Sampling.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.special import expit, logit

from stats import _validate as _v
from stats.schema import ContractError, tidy

__all__ = ["transport", "rake_weights", "EXTREME_WEIGHT", "RAKE_TOL"]

#: a weight above this multiple of the mean weight is extreme (flag extreme_weights)
EXTREME_WEIGHT = 5.0
#: raking has converged when every margin total is within this of its target (relative)
RAKE_TOL = 1e-10
#: survey's svyrecvar cycles of the raking residuals (a fixed count, as R)
RESIDUAL_CYCLES = 10
#: effective sample size below this: flag small_n
SMALL_EFFECTIVE_N = 10

METRICS = ("sensitivity", "specificity", "ppv", "npv")

MSG_TARGET = ("transport: target must be a mapping of margins {{column: {{level: share or "
              "count}}}} (and optionally prevalence: a number in (0, 1)), e.g. {{'phase': "
              "{{'venous': 0.6, 'arterial': 0.4}}, 'prevalence': 0.1}}; got {got}")
MSG_MARGIN = ("transport: target[{margin!r}] must map each level to a share or count "
              "(a finite number >= 0, not all 0); got {got}")
MSG_PREVALENCE = ("transport: target['prevalence'] must be a number strictly between 0 and "
                  "1 (the intended-use population's disease prevalence); got {got}")
MSG_COLUMN = ("transport: target margin {margin!r} names no column of cases (columns: "
              "{present}); use a column of the cases table, e.g. site or phase")
MSG_SUPPORT = ("transport: target margin {margin!r} gives level(s) {levels} a positive share, "
               "but the study has no scans there (levels with scans: {present}): the target "
               "lies outside the study's support and no reweighting can represent it; drop "
               "those levels from the target (and say so), or merge them with a level the "
               "study has")
MSG_UNLISTED = ("transport: cases hold {margin!r} level(s) {levels} that the target does not "
                "give a positive share (target levels: {target}); give every study level a "
                "share, or drop those scans from cases first")
MSG_MISSING = ("transport: column {margin!r} is missing in rows {rows}; a raking margin must "
               "be known for every scan: fill it in or drop those rows")
MSG_BY = "transport: by must be None, a column name or a list of column names; got {got}"


def transport(cases: pd.DataFrame, target: Mapping, *, by=None, conf_level: float = 0.95,
              cluster: str | None = "patient_id", threshold: float | None = None,
              max_iter: int = 1000) -> pd.DataFrame:
    """Sensitivity, specificity, PPV and NPV transported to the target population's
    margins by raking (module notes: formulas, R equivalence, refusals).

    Parameters
    ----------
    cases : DataFrame
        A cases table with ``label``, ``pred`` (or ``score`` and ``threshold``), the
        margin columns and ``patient_id``; one analysis per ``model`` (each model's
        scans raked on their own: the same scans give the same weights).
    target : mapping
        ``{column: {level: share or count}}`` per margin (shares or counts; each margin
        is scaled to the study's number of scans), and optionally ``prevalence``: the
        target's disease prevalence (the margin of ``label``; ``label`` may also be given
        as a margin ``{1: ..., 0: ...}``).
    by : str, list of str or None
        Domains besides overall (each column's levels, on the same raked weights).
    conf_level : float
    cluster : str or None
        The design's clusters (patients; ``case_id`` or each scan where absent).
    threshold : float or None
        Voxel threshold when ``pred`` is absent.
    max_iter : int
        Most raking cycles.

    Returns
    -------
    DataFrame
        Tidy contract, grouping ``model, group_var, group_level`` (``overall`` and the
        ``by`` levels): ``estimand`` sensitivity / specificity / ppv / npv, ``estimate``
        (raked), ``std_error`` (linearisation under raking, patient clusters),
        ``conf_low``/``conf_high`` (logit, t on ``df``), ``n`` (scans in the domain),
        ``n_pos``/``n_neg`` (label 1 / 0 scans in it), ``method``
        (``raking-linearization-logit-t``), ``flag`` (``extreme_weights``, ``small_n``:
        effective n below 10, ``empty``, ``not_estimable``: a proportion of 0 or 1 has
        no logit interval, ``raking_not_converged``). Extras: ``df``, ``n_eff`` (Kish),
        ``max_weight`` (largest weight over the mean weight, the whole study),
        ``estimate_study`` (unweighted), ``n_clusters``, ``raking_cycles``.

    Raises
    ------
    ContractError
        A target outside the study's support (a positive share where the study has no
        scans), a study level without a positive share, a malformed target, a margin
        column that is missing or has missing values, bad ``conf_level``, ``threshold``
        or ``max_iter``.

    Notes
    -----
    Validated against R's survey 4.1-1 (``rake`` + ``svymean`` / ``svyciprop(method =
    "logit")``) with patient clusters: tests/r/transport.R; measured gaps in
    tests/stats/test_raking.py (tested to 1e-6). The transported values hold under the
    assumption that, within the cells the margins define, the study's scans are
    exchangeable with the target's (performance depends on the target only through the
    raked variables), and positivity (the study has scans in every target level).
    """
    func = "transport"
    margins = _margins(target)
    _v.table(cases, func=func, columns=["label"])
    _v.threshold(threshold, func=func)
    conf_level = _v.level(conf_level, func=func)
    max_iter = _v.whole(max_iter, func=func, arg="max_iter", fix="e.g. max_iter=1000")
    by_cols = _by(by)
    for col in list(margins) + by_cols:
        if col not in cases.columns:
            raise ContractError(MSG_COLUMN.format(margin=col, present=", ".join(
                map(str, list(cases.columns)[:20]))), column=col)
    df = cases
    if "pred" not in df.columns or threshold is not None:
        if threshold is None:
            raise ContractError("transport: cases has no 'pred' column and no threshold was "
                                "given; pass threshold=<voxels> or run stats.scan_level first",
                                column="pred")
        df = df.assign(pred=(pd.to_numeric(df["score"]).to_numpy() >= threshold).astype("int64"))
    parts = []
    models = [("all", df)] if "model" not in df.columns else [
        (str(m), df[df["model"].astype(str) == str(m)]) for m in pd.unique(df["model"].astype(str))]
    for m, g in models:
        parts.append(_one_model(g, margins, by_cols, conf_level, cluster, max_iter, model=m))
    return tidy(pd.concat(parts, ignore_index=True), group_cols=("model", "group_var",
                                                                 "group_level"))


def rake_weights(cases: pd.DataFrame, target: Mapping, *, max_iter: int = 1000
                 ) -> tuple[np.ndarray, int, bool]:
    """Raked weights of ``cases``' rows (one model's scans), mean 1: ``(weights, cycles,
    converged)``; the margins and refusals of :func:`transport`."""
    margins = _margins(target)
    codes, totals = _margin_codes(cases, margins)
    return _rake(codes, totals, len(cases), max_iter)


# --------------------------------------------------------------------------- inputs

def _margins(target) -> dict[str, dict[str, float]]:
    """``{column: {level (text): share}}``, each margin's shares summing to 1."""
    if not isinstance(target, Mapping) or not target:
        raise ContractError(MSG_TARGET.format(got=repr(target)[:80]))
    out: dict[str, dict[str, float]] = {}
    for name, spec in target.items():
        if name == "prevalence":
            ok = isinstance(spec, (int, float, np.number)) and not isinstance(spec, bool)
            if not ok or not (math.isfinite(float(spec)) and 0 < float(spec) < 1):
                raise ContractError(MSG_PREVALENCE.format(got=repr(spec)))
            spec = {"1": float(spec), "0": 1.0 - float(spec)}
            name = "label"
        if not isinstance(name, str) or not isinstance(spec, Mapping) or not spec:
            raise ContractError(MSG_MARGIN.format(margin=name, got=repr(spec)[:80]))
        vals = {}
        for lv, x in spec.items():
            ok = isinstance(x, (int, float, np.number)) and not isinstance(x, bool)
            if not ok or not math.isfinite(float(x)) or float(x) < 0:
                raise ContractError(MSG_MARGIN.format(margin=name, got=repr(dict(spec))[:80]))
            vals[_key(lv)] = vals.get(_key(lv), 0.0) + float(x)
        total = sum(vals.values())
        if not total > 0:
            raise ContractError(MSG_MARGIN.format(margin=name, got=repr(dict(spec))[:80]))
        if name in out:
            raise ContractError(MSG_TARGET.format(got=f"the margin {name!r} twice (label "
                                                  "and prevalence)"))
        out[name] = {k: v / total for k, v in vals.items()}
    return out


def _key(level) -> str:
    """A level as text: ``1``, ``1.0`` and ``True`` of a 0/1 column are ``"1"``."""
    if isinstance(level, (bool, np.bool_)):
        return str(int(level))
    if isinstance(level, (float, np.floating)) and float(level).is_integer():
        return str(int(level))
    return str(level)


def _by(by) -> list[str]:
    if by is None:
        return []
    if isinstance(by, str):
        return [by]
    if isinstance(by, (list, tuple)) and all(isinstance(b, str) for b in by):
        return list(by)
    raise ContractError(MSG_BY.format(got=repr(by)[:80]))


def _margin_codes(g: pd.DataFrame, margins) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per margin: each row's level code and the level's target share (support checked)."""
    codes, totals = [], []
    for name, shares in margins.items():
        col = g[name]
        miss = col.isna().to_numpy()
        if miss.any():
            rows = list(g.index[miss][:5])
            raise ContractError(MSG_MISSING.format(margin=name, rows=rows), column=name,
                                rows=rows)
        text = np.array([_key(v) for v in col.to_numpy()], dtype=object)
        present = sorted(set(text))
        outside = [lv for lv, s in shares.items() if s > 0 and lv not in set(present)]
        if outside:
            raise ContractError(MSG_SUPPORT.format(margin=name, levels=outside,
                                                   present=present[:20]), column=name)
        unlisted = [lv for lv in present if shares.get(lv, 0.0) <= 0]
        if unlisted:
            raise ContractError(MSG_UNLISTED.format(
                margin=name, levels=unlisted[:10],
                target=[k for k, v in shares.items() if v > 0][:20]), column=name)
        levels = present
        code = pd.Index(levels).get_indexer(text)
        codes.append(code.astype(np.int64))
        totals.append(np.array([shares[lv] for lv in levels]))
    return codes, totals


# --------------------------------------------------------------------------- raking

def _rake(codes, shares, n: int, max_iter: int) -> tuple[np.ndarray, int, bool]:
    """Iterative proportional fitting from weights 1 to totals ``n * share``."""
    w = np.ones(n)
    targets = [n * s for s in shares]
    cycles, converged = 0, False
    for cycles in range(1, max_iter + 1):
        for code, tgt in zip(codes, targets):
            cur = np.bincount(code, weights=w, minlength=len(tgt))
            w = w * (tgt / cur)[code]
        worst = max(float(np.max(np.abs(np.bincount(code, weights=w, minlength=len(tgt))
                                        - tgt) / tgt)) for code, tgt in zip(codes, targets))
        if worst < RAKE_TOL:
            converged = True
            break
    return w, cycles, converged


def _residuals(z: np.ndarray, w: np.ndarray, codes) -> np.ndarray:
    """survey's raking residuals of influence values ``z`` (n, k): RESIDUAL_CYCLES cycles of
    ``z - w * mean_level(z / w)`` over the margins."""
    for _ in range(RESIDUAL_CYCLES):
        for code in codes:
            cnt = np.bincount(code)
            r = z / w[:, None]
            means = np.stack([np.bincount(code, weights=r[:, j], minlength=len(cnt))
                              for j in range(z.shape[1])], axis=1) / cnt[:, None]
            z = z - w[:, None] * means[code]
    return z


def _one_model(g: pd.DataFrame, margins, by_cols, conf_level, cluster, max_iter, *, model):
    g = g.reset_index(drop=True)
    codes, shares = _margin_codes(g, margins)
    n = len(g)
    w, cycles, converged = _rake(codes, shares, n, max_iter)
    label = pd.to_numeric(g["label"], errors="coerce").to_numpy()
    pred = pd.to_numeric(g["pred"], errors="coerce").to_numpy()
    bad = ~(np.isin(label, (0, 1)) & np.isin(pred, (0, 1)))
    if bad.any():
        rows = list(g.index[bad][:5])
        raise ContractError(f"transport: label and pred must be 0/1; rows {rows} are not; "
                            "fix them (stats.read_cases, stats.scan_level)", rows=rows)
    if cluster is not None and cluster in g.columns:
        cl = g[cluster].astype(str).to_numpy()
    elif "case_id" in g.columns:
        cl = g["case_id"].astype(str).to_numpy()
    else:
        cl = np.arange(n).astype(str)
    ccode, cuniq = pd.factorize(cl, sort=True)
    C = len(cuniq)
    max_w = float(np.max(w) / np.mean(w))
    # domains: (estimand, group_var, level, mask, outcome)
    outcome = {"sensitivity": (label == 1, pred), "specificity": (label == 0, 1 - pred),
               "ppv": (pred == 1, label), "npv": (pred == 0, 1 - label)}
    cells = [("overall", "overall", np.ones(n, dtype=bool))]
    for col in by_cols:
        vals = g[col]
        levels = (list(vals.cat.categories) if isinstance(vals.dtype, pd.CategoricalDtype)
                  else sorted(pd.unique(vals.dropna()), key=str))
        for lv in levels:
            cells.append((col, str(lv), (vals == lv).to_numpy()))
    specs = [(est, gv, gl, cell & outcome[est][0], outcome[est][1])
             for gv, gl, cell in cells for est in METRICS]
    D = np.column_stack([s[3] for s in specs]).astype(float)       # (n, k) domains
    Y = np.column_stack([s[4] for s in specs]).astype(float)
    WD = (w[:, None] * D).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = (w[:, None] * D * Y).sum(axis=0) / WD
        z = D * w[:, None] * (Y - p[None, :]) / WD[None, :]
    z = np.where(np.isfinite(z), z, 0.0)
    z = _residuals(z, w, codes)
    Z = np.zeros((C, z.shape[1]))
    np.add.at(Z, ccode, z)
    Z = Z - Z.mean(axis=0)
    var = (Z * Z).sum(axis=0) * (C / (C - 1)) if C > 1 else np.full(z.shape[1], np.nan)
    se = np.sqrt(np.maximum(var, 0.0))
    rows = []
    q = 0.5 + conf_level / 2
    for j, (est, gv, gl, dom, y) in enumerate(specs):
        nd = int(dom.sum())
        flags = []
        if not converged:
            flags.append("raking_not_converged")
        if max_w > EXTREME_WEIGHT:
            flags.append("extreme_weights")
        df = float(len(np.unique(ccode[dom])) - 1) if nd else np.nan
        n_eff = float(WD[j] ** 2 / np.sum((w * dom) ** 2)) if nd else 0.0
        lo = hi = np.nan
        pj, sej = (float(p[j]), float(se[j])) if nd else (np.nan, np.nan)
        if not nd:
            flags.append("empty")
        elif not 0.0 < pj < 1.0 or not df >= 1:
            flags.append("not_estimable")
        else:
            t = sps.t.ppf(q, df)
            half = t * sej / (pj * (1 - pj))
            lo, hi = float(expit(logit(pj) - half)), float(expit(logit(pj) + half))
        if nd and n_eff < SMALL_EFFECTIVE_N:
            flags.append("small_n")
        raw = float(y[dom].mean()) if nd else np.nan
        rows.append(dict(estimand=est, model=model, group_var=gv, group_level=gl,
                         estimate=pj, std_error=sej, conf_low=lo, conf_high=hi,
                         conf_level=conf_level, n=nd, n_pos=int((dom & (label == 1)).sum()),
                         n_neg=int((dom & (label == 0)).sum()),
                         method="raking-linearization-logit-t", flag=";".join(flags),
                         df=df, n_eff=n_eff, max_weight=max_w, estimate_study=raw,
                         n_clusters=C, raking_cycles=cycles))
    return pd.DataFrame(rows)
