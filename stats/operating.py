"""Operating points and fair comparisons (pROC twins): the empirical ROC curve, sensitivity
at a fixed specificity (and the reverse), the partial AUC, the unpaired DeLong test,
likelihood ratios and prespecified performance goals.

One threshold for every model can favour some models: masks differ in calibration, blob
size and smoothness, so a model may gain sensitivity at the fixed threshold only by
moving along its ROC curve. Comparing models at a *matched operating point* (each model at
the threshold giving the same specificity) separates a better curve from a shifted
threshold.

**The ROC points (pROC's rules).** Per model and subgroup cell the scores are sorted and
grouped into runs of equal scores. The curve has one point more than runs: point ``j``
sits between run ``j`` and run ``j + 1`` (ascending), its threshold is pROC's midpoint
``(u_j + u_{j+1}) / 2`` (``u_j / 2 + u_{j+1} / 2`` beyond 1e100; the upper score where
the midpoint rounds onto the lower one; -Inf and +Inf at the ends), a scan is
test-positive when ``score >= threshold`` (pROC ``direction = "<"``), so

    sensitivity_j = (P - cp_j) / P,   specificity_j = cn_j / N,

with ``cp_j``, ``cn_j`` the positives and negatives in runs ``1..j``. Everything below is
computed from these cumulative counts, vectorized over cells, models, points and
bootstrap replicates (``np.add.reduceat`` over the points of each cell; no loop per
replicate, cell or case).

**A value at a fixed specificity** (pROC ``coords(x = s, input = "specificity", ret =
"sensitivity")``): where some point has specificity ``s`` exactly, the best sensitivity
among those points (the lowest such threshold: pROC's rule at ties); otherwise the linear
interpolation between the two neighbouring points, as pROC:
``se_next + (s - sp_next) / (sp_prev - sp_next) (se_prev - se_next)``. "Exactly" is
decided in counts, never on a rounded quotient: ``s N`` within ``1e-9 N`` of a whole
number ``k`` and a point with ``cn = k`` (pROC compares the quotient ``cn / N`` with
``s`` exactly; the two agree for every ``s`` written in decimals, e.g. 0.9 of 10, and
differ only for an ``s`` within 1e-9 of a grid value yet not on it, where pROC's own
answer jumps). The reverse, specificity at a fixed sensitivity, mirrors it (ties: the
best specificity, the highest such threshold).

**The bootstrap** is :mod:`stats.bootstrap`'s paired cluster bootstrap: one index of
patients (the cluster) per replicate, shared by every model and cell, so differences
between models are paired. A replicate's ROC points come from cluster-level counts per
run (``W @ K``, :func:`stats.bootstrap.replicate_reduce`): the weighted counts of each
run, cumulated within each cell, are exactly the ROC of the resampled rows (a run whose
patients were not drawn repeats a point). Percentile intervals (a model's partial AUC:
BCa, the acceleration from a jackknife over clusters, at most ``JACKKNIFE_GROUPS``
evaluations, a fixed cost beside the replicates; a paired difference at a matched
operating point: percentiles of linearized replicates, :func:`operating_point`'s Notes);
a paired difference's
two-sided p-value is ``min(1, 2 min((1 + #{d* <= 0}) / (B + 1), (1 + #{d* >= 0}) /
(B + 1)))`` (the replicates' sign test of the percentile interval).

References
----------
Robin X, Turck N, Hainard A, et al. (2011) pROC: an open-source package for R and S+ to
analyze and compare ROC curves. BMC Bioinformatics 12:77.
McClish DK (1989) Analyzing a portion of the ROC curve. Med Decis Making 9:190-195.
DeLong ER, DeLong DM, Clarke-Pearson DL (1988) Biometrics 44:837-845.
Obuchowski NA (1997) Biometrics 53:567-578.
Simel DL, Samsa GP, Matchar DB (1991) Likelihood ratios with confidence: sample size
estimation for diagnostic test studies. J Clin Epidemiol 44:763-770.
Farrington CP, Manning G (1990) Test statistics and sample size formulae for comparative
binomial trials with null hypothesis of non-zero risk difference or non-unity relative
risk. Stat Med 9:1447-1454.
Clopper CJ, Pearson ES (1934) Biometrika 26:404-413.
Korn EL, Graubard BI (1998) Survey Methodology 24:193-201.

Validated against R: pROC 1.18 ``coords(roc, "all")``, ``coords(x =, input =, ret =)``,
``auc(partial.auc =, partial.auc.focus =, partial.auc.correct =)`` and ``roc.test(paired
= FALSE, method = "delong")``, epiR 2.0 ``epi.tests`` and the Simel formula written out
in R, survey's ``svyratio``/``svycontrast`` for the clustered likelihood ratios, and
``binom.test(alternative = "greater")`` for the exact goals test (tests/r/operating.R ->
tests/r/operating.csv; tests/stats/test_operating.py states each tolerance).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import sparse, special
from scipy import stats as sps

from stats import _validate as _v
from stats import bootstrap as _bootstrap
from stats import limits as _limits
from stats._quantile import percentile_interval
from stats.clustered import AUTO, cluster_cases, cluster_moments, design_effect, pair_sums
from stats.detection import GROUP_COLS, OVERALL, PROPORTIONS, CaseMatrix, case_matrix, \
    unplanned_levels
from stats.intervals import _z, clustered_auc_variance, delong_placements, group_sum, \
    _cluster_codes, _labels
from stats.schema import ContractError, tidy

#: a target ``s N`` within this share of ``N`` of a whole number is attained in counts
#: (module docstring)
SNAP = 1e-9
#: a corrected partial AUC below the diagonal by more than this share of the range's
#: width is not defined (pROC: NA with a warning); within it, it is the diagonal's
BELOW_DIAGONAL = 1e-12
#: counts of one bootstrap block (replicates x ROC runs) in :func:`_replicates`
BLOCK_ELEMENTS = 2 ** 21
#: the linearized replicates of a paired difference at a matched operating point: the
#: ROC's slope there is the chord over the fixed coordinate's value +- h, h =
#: SLOPE_BANDWIDTH n^(-1/3) (n the negatives at a fixed specificity, the positives at a
#: fixed sensitivity; 0.055 at 96 negatives, 0.012 at 10,000), clipped to [0, 1]
SLOPE_BANDWIDTH = 0.25

FLAG_NO_INTERVAL = "no_interval"
FLAG_BELOW_DIAGONAL = "below_diagonal"
FLAG_ZERO_CELL = "not_estimable"
VERDICTS = ("met", "not_met", "inconclusive")

Focus = Literal["specificity", "sensitivity"]

MSG_AT = ("{func}: {arg} must be proportions in [0, 1] (one value or a list); got {value}; "
          "write e.g. {arg}=0.9 (not 90)")
MSG_ONE_OF = ("{func}: give exactly one of specificity= or sensitivity= (the coordinate "
              "held fixed); got {got}")
MSG_RANGE = ("{func}: {arg} must be two proportions lo < hi in [0, 1]; got {value}; write e.g. "
             "{arg}=(0.8, 1.0)")
MSG_GOALS = ("performance_goals: goals {problem}; give a list of mappings (or a DataFrame) "
             "with metric (one of {metrics}), goal (an absolute value in (0, 1)) or margin "
             "(a non-inferiority margin in [0, 1) against overall), and optionally alpha "
             "(one-sided level in (0, 0.5)) and name")
MSG_TWO_MODELS = ("{func}: the paired differences need two models; the cases hold one ({model})")


# --------------------------------------------------------------------------- the runs


@dataclass
class Runs:
    """Runs of tied scores of every (model, cell) group, in the points layout.

    Groups are model-major (``group = model * G + cell``, the tidy tables' row order).
    ``run_group``, ``run_score``, ``run_pos``, ``run_neg`` (R,): per run; ``pstart``
    (groups,): the first point of each group (points = runs + one leading point per
    group); ``pend``: its last point; ``pgroup`` (points,); ``run_point`` (R,): the point
    after each run; ``KT`` (2R x clusters, sparse): per run the positives (rows ``0..R-1``)
    and negatives (rows ``R..2R-1``) of each cluster; ``strata`` (clusters,) codes.
    """

    G: int
    M: int
    run_group: np.ndarray
    run_score: np.ndarray
    run_pos: np.ndarray
    run_neg: np.ndarray
    pstart: np.ndarray
    pend: np.ndarray
    pgroup: np.ndarray
    run_point: np.ndarray
    KT: sparse.csc_matrix
    strata: np.ndarray

    @property
    def n_groups(self) -> int:
        return self.G * self.M

    @property
    def n_points(self) -> int:
        return len(self.pgroup)

    def cumulative(self, pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cp``, ``cn`` (b x points) from per-run counts ``pos``, ``neg`` (b x R): the
        counts in the runs up to each point, 0 at each group's leading point."""
        out = []
        b = pos.shape[0]
        first_run = np.searchsorted(self.run_group, np.arange(self.n_groups))
        for x in (pos, neg):
            c = np.cumsum(np.asarray(x, dtype="float64"), axis=1)
            base = np.zeros((b, self.n_groups))
            has = first_run > 0
            base[:, has] = c[:, first_run[has] - 1]
            pts = np.zeros((b, self.n_points))
            pts[:, self.run_point] = c - base[:, self.run_group]
            out.append(pts)
        return out[0], out[1]


def build_runs(cm: CaseMatrix, *, strata: str | None = None) -> Runs:
    """The :class:`Runs` of a case matrix (its clusters: ``cm.patient``)."""
    coo = cm.member.tocoo()
    cell, case = coo.row.astype(np.int64), coo.col.astype(np.int64)
    G, M = cm.n_cells, len(cm.models)
    group = (np.arange(M, dtype=np.int64)[None, :] * G + cell[:, None]).ravel()
    score = cm.score[case].ravel()
    y = np.repeat(cm.label[case], M)
    clu = np.repeat(cm.patient[case], M).astype(np.int64)
    order = np.lexsort((score, group))
    g, s, y, clu = group[order], score[order], y[order], clu[order]
    new = np.r_[True, (g[1:] != g[:-1]) | (s[1:] != s[:-1])] if len(g) else np.zeros(0, bool)
    run = np.cumsum(new) - 1
    R = int(run[-1]) + 1 if len(run) else 0
    run_group = g[new]
    run_score = s[new]
    run_pos = np.bincount(run, weights=y, minlength=R)
    run_neg = np.bincount(run, weights=~y, minlength=R)
    runs_per = np.bincount(run_group, minlength=G * M)
    pstart = np.r_[0, np.cumsum(runs_per + 1)[:-1]].astype(np.int64)
    pend = pstart + runs_per
    pgroup = np.repeat(np.arange(G * M), runs_per + 1)
    local = np.arange(R) - np.searchsorted(run_group, run_group)   # run index within group
    run_point = pstart[run_group] + local + 1
    n_cl = int(cm.patient.max()) + 1 if len(cm.patient) else 1
    rows = np.where(y, run, R + run)
    KT = sparse.csc_matrix((np.ones(len(run), dtype=np.float32), (rows, clu)),
                           shape=(2 * R, n_cl))
    KT.sum_duplicates()
    if strata is None:
        codes = np.zeros(n_cl, dtype=np.int64)
    else:
        from stats.bootstrap import boot_counts

        codes = boot_counts(_with_pred(cm), strata=strata).strata
    return Runs(G, M, run_group, run_score, run_pos, run_neg, pstart, pend, pgroup, run_point,
                KT, codes)


def _with_pred(cm: CaseMatrix) -> CaseMatrix:
    from dataclasses import replace

    return cm if cm.pred is not None else replace(
        cm, pred=np.zeros(cm.score.shape, dtype=np.int8))


def thresholds(r: Runs) -> np.ndarray:
    """pROC's threshold of every point (``roc.utils.thresholds``, direction "<")."""
    lower = np.full(r.n_points, -np.inf)
    upper = np.full(r.n_points, np.inf)
    lower[r.run_point] = r.run_score
    upper[r.run_point - 1] = r.run_score
    with np.errstate(invalid="ignore", over="ignore"):
        t1 = (lower + upper) / 2
        t2 = lower / 2 + upper / 2
    t = np.where(np.abs(t1) > 1e100, t2, t1)
    # a midpoint that rounds onto the lower score (adjacent floats) is the upper one
    return np.where((t == lower) & np.isfinite(lower), upper, t)


# --------------------------------------------------------------------------- coordinates


def _snap(target: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``target`` counts, whole where within ``SNAP * total`` of a whole number."""
    k = np.rint(target)
    snap = np.abs(target - k) <= SNAP * np.maximum(total, 1.0)
    return np.where(snap, k, target), snap


def _take(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.take_along_axis(a, idx, axis=1)


def at_specificity(r: Runs, cp, cn, s) -> tuple[np.ndarray, np.ndarray]:
    """Sensitivity at specificity ``s`` per group (b x groups) from the cumulative counts
    (module docstring), and the index of the point hit (-1 where interpolated)."""
    out, hit, _ = _at(r, cp, cn, s, "specificity")
    return out, hit


def at_sensitivity(r: Runs, cp, cn, s) -> tuple[np.ndarray, np.ndarray]:
    """Specificity at sensitivity ``s`` per group (b x groups) and the point hit."""
    out, hit, _ = _at(r, cp, cn, s, "sensitivity")
    return out, hit


def _at(r: Runs, cp, cn, s, fixed: str):
    """The other coordinate at the ``fixed`` one's value ``s`` (a number, or one per
    group), the point hit (-1 where interpolated), and the anchor ``(i1, i0, prop)``
    (b x groups each): the value is ``v(i1) + prop (v(i0) - v(i1))`` of the other
    coordinate ``v`` at points ``i1``, ``i0`` (``prop`` 0 at a point hit), and the fixed
    coordinate there is ``s``."""
    P, N = cp[:, r.pend], cn[:, r.pend]
    with np.errstate(invalid="ignore", divide="ignore"):
        se = lambda i: (P - _take(cp, i)) / P            # noqa: E731
        sp = lambda i: _take(cn, i) / N                  # noqa: E731
    if fixed == "specificity":
        tgt, snap = _snap(s * N, N)
        less = cn < tgt[:, r.pgroup]
        i1 = np.minimum(r.pstart[None, :] + np.add.reduceat(less, r.pstart, axis=1,
                                                            dtype=np.int64), r.pend)
        hit = snap & (_take(cn, i1) == tgt)
        i0 = np.maximum(i1 - 1, r.pstart[None, :])
        val, fix = se, sp
    else:
        tgt, snap = _snap(P - s * P, P)
        upto = cp <= tgt[:, r.pgroup]
        i0 = r.pstart[None, :] + np.add.reduceat(upto, r.pstart, axis=1, dtype=np.int64) - 1
        i0 = np.clip(i0, r.pstart[None, :], r.pend[None, :])
        hit = snap & (_take(cp, i0) == tgt)
        i1 = np.minimum(i0 + 1, r.pend[None, :])
        # a point hit: the best specificity, the highest such threshold (point i0)
        i1 = np.where(hit, i0, i1)
        val, fix = sp, se
    with np.errstate(invalid="ignore", divide="ignore"):
        f1, f0, v1, v0 = fix(i1), fix(i0), val(i1), val(i0)
        prop = np.where(hit, 0.0, (s - f1) / (f0 - f1))
        out = np.where(hit, v1, v1 + prop * (v0 - v1))
    ok = (P > 0) & (N > 0)
    return np.where(ok, out, np.nan), np.where(ok & hit, i1, -1), (i1, i0, prop)


def pauc(r: Runs, cp, cn, lo: float, hi: float, focus: Focus, correct: bool
         ) -> np.ndarray:
    """Partial AUC per group (b x groups): the area under the linear interpolation of the
    ROC points over ``focus`` in [lo, hi] (pROC ``auc(partial.auc = c(hi, lo))``),
    McClish-corrected when ``correct`` (NaN below the diagonal, as pROC)."""
    P, N = cp[:, r.pend], cn[:, r.pend]
    with np.errstate(invalid="ignore", divide="ignore"):
        se = (P[:, r.pgroup] - cp) / P[:, r.pgroup]
        sp = cn / N[:, r.pgroup]
    x, y = (sp, se) if focus == "specificity" else (se, sp)
    # segment from point p to p + 1 (the last point of a group has none)
    x0, y0, x1, y1 = x[:, :-1], y[:, :-1], x[:, 1:], y[:, 1:]
    if focus == "sensitivity":           # sensitivity falls along the points: swap ends
        x0, x1, y0, y1 = x1, x0, y1, y0
    a, b = np.maximum(x0, lo), np.minimum(x1, hi)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = x1 - x0
        ya = y0 + (a - x0) / w * (y1 - y0)
        yb = y0 + (b - x0) / w * (y1 - y0)
        area = np.where((b > a) & (w > 0), (b - a) * (ya + yb) / 2, 0.0)
    seg = np.zeros_like(x)
    seg[:, :-1] = np.nan_to_num(area)
    seg[:, r.pend] = 0.0
    out = np.add.reduceat(seg, r.pstart, axis=1)
    if correct:
        mn = ((1 - hi) + (1 - lo)) * (hi - lo) / 2
        mx = hi - lo
        below = out < mn - BELOW_DIAGONAL * (hi - lo)
        out = np.where(below, np.nan, (1 + (out - mn) / (mx - mn)) / 2)
    return np.where((P > 0) & (N > 0), out, np.nan)


# --------------------------------------------------------------------------- bootstrap


def roc_bootstrap_work(n_boot: int, n_clusters: int, n_points: int, n_out: int | None = None,
                       *, setting: str = "n_boot", what: str = "ROC bootstrap") -> _limits.Work:
    """Peak memory and time of this module's bootstrap (ROC points, values at a fixed
    specificity, partial AUC).

    Memory: the replicate statistics (n_boot x ``n_out`` float64; default two per point:
    the pointwise bands of :func:`stats.roc_curve`), and one block of at most
    ``stats.operating.BLOCK_ELEMENTS`` run counts with about ten float64 arrays of its
    points. Time: every drawn index and the block products ``W @ K``, and the passes over
    every replicate's points.
    """
    B, C, P = (max(int(v), 1) for v in (n_boot, n_clusters, n_points))
    K = 2 * P if n_out is None else max(int(n_out), 1)
    block = max(1, min(B, BLOCK_ELEMENTS // (2 * P)))
    mem = 8.0 * B * K * 3 + 10 * 8.0 * block * P + 4.0 * block * C + 12.0 * 2 * P
    secs = _limits.SECONDS_PER_DRAW * B * C + 12 * _limits.SECONDS_PER_ELEMENT * B * P
    return _limits.Work(what=what, setting=f"{setting} ({B:,} replicates)", memory_bytes=mem,
                        seconds=secs,
                        detail=f"{B:,} replicates x {C:,} clusters x {P:,} ROC points")


def _roc_reduce(counts: np.ndarray, r: Runs, stat, stat_args) -> np.ndarray:
    """A block's replicate statistic (b x K) from its per-run counts (b x 2R)."""
    R = len(r.run_group)
    cp, cn = r.cumulative(counts[:, :R], counts[:, R:])
    return stat(r, cp, cn, *stat_args)


def _replicates(r: Runs, n_boot: int, stat, stat_args=(), *, n_out: int, seed=None,
                scheduler=None) -> np.ndarray:
    """``stat`` (b x ``n_out``) of ``n_boot`` paired cluster-bootstrap replicates of the
    runs (the work estimated and checked against the caps first)."""
    from stats.bootstrap import replicate_reduce
    _limits.check(roc_bootstrap_work(n_boot, r.KT.shape[1], r.n_points, n_out))
    return replicate_reduce(r.KT, r.strata, n_boot, _roc_reduce, (r, stat, stat_args),
                            seed=seed, scheduler=scheduler,
                            elements=BLOCK_ELEMENTS)


#: the most leave-out groups of the jackknife behind the BCa acceleration: with more
#: clusters, cluster i is left out with the clusters i + k JACKKNIFE_GROUPS (a delete-a-group
#: jackknife; the acceleration, a skewness over the groups, keeps its expectation)
JACKKNIFE_GROUPS = 400
#: leave-out values within this share of their largest size of their mean count as equal
#: to it (their differences are the mean's rounding, not the statistic's skewness): the
#: rule of stats.bootstrap, shared by every BCa acceleration
JACKKNIFE_FLAT_REL = _bootstrap.JACKKNIFE_FLAT_REL


def _acceleration(r: Runs, stat, stat_args, n_out: int) -> np.ndarray:
    """BCa acceleration per output column, ``a = sum(d^3) / (6 (sum d^2)^1.5)`` with
    ``d = mean(theta_(k)) - theta_(k)``, ``theta_(k)`` the statistic without the clusters
    of group ``k`` (cluster ``i`` in group ``i mod JACKKNIFE_GROUPS``: the leave-one-
    cluster-out jackknife up to that many clusters); undefined ``theta_(k)`` skipped, 0
    where every ``theta_(k)`` is the same (within ``JACKKNIFE_FLAT_REL`` of their size).
    In blocks of groups (``BLOCK_ELEMENTS``)."""
    C = r.KT.shape[1]
    K = max(1, min(C, JACKKNIFE_GROUPS))
    member = sparse.csr_matrix((np.ones(C), (np.arange(C), np.arange(C) % K)), shape=(C, K))
    left = (r.KT @ member).T.tocsr()                                   # K x 2R
    total = np.asarray(r.KT.sum(axis=1)).ravel()
    step = max(1, BLOCK_ELEMENTS // max(1, r.KT.shape[0]))
    jack = np.concatenate([_roc_reduce(total[None, :] - left[lo:lo + step].toarray(), r, stat,
                                       stat_args) for lo in range(0, K, step)], axis=0)
    valid = ~np.isnan(jack)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.where(valid, np.nansum(jack, axis=0) / valid.sum(axis=0) - jack, 0.0)
        # equal leave-out values differ from their mean only by its rounding: no skewness
        scale = np.fmax(np.nanmax(np.abs(jack), axis=0, initial=0.0, where=valid), 1e-300)
        d = _bootstrap.flat_deviations(d, scale)
        return _bootstrap.acceleration((d ** 2).sum(axis=0), (d ** 3).sum(axis=0))[:n_out]


def _point(r: Runs):
    """The full-sample cumulative counts (1 x points)."""
    return r.cumulative(r.run_pos[None, :], r.run_neg[None, :])


def _boot_columns(reps: np.ndarray, theta: np.ndarray, conf_level: float) -> dict:
    """SD, percentile limits and valid replicates per column of ``reps`` (B x K)."""
    from stats.bootstrap import _nan_sd

    valid = (~np.isnan(reps)).sum(axis=0)
    lo, hi = percentile_interval(reps, conf_level)
    return {"std_error": _nan_sd(reps, valid), "conf_low": lo, "conf_high": hi,
            "n_boot_valid": valid.astype(float)}


def boot_p(diff: np.ndarray) -> np.ndarray:
    """Two-sided bootstrap p-value of a difference per column (module docstring); NaN
    without a valid replicate."""
    k = (~np.isnan(diff)).sum(axis=0)
    le = (diff <= 0).sum(axis=0)
    ge = (diff >= 0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.minimum(1.0, 2 * np.minimum((1 + le) / (k + 1), (1 + ge) / (k + 1)))
    return np.where(k > 0, p, np.nan)


# --------------------------------------------------------------------------- shared


def _values(value, *, func: str, arg: str) -> np.ndarray:
    """One proportion or a list of them, each in [0, 1]."""
    arr = np.atleast_1d(np.asarray(value, dtype=object)).ravel()
    try:
        out = np.array([float(v) for v in arr if not isinstance(v, (bool, np.bool_, str))])
    except (TypeError, ValueError):
        out = np.array([])
    if len(out) != len(arr) or not len(out) or not np.all(np.isfinite(out)) \
            or (out < 0).any() or (out > 1).any():
        raise ContractError(MSG_AT.format(func=func, arg=arg, value=_v._show(value)))
    return out


def _range(value, *, func: str, arg: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
        ok = 0 <= lo < hi <= 1 and not any(isinstance(v, (bool, str)) for v in value)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ContractError(MSG_RANGE.format(func=func, arg=arg, value=_v._show(value)))
    return lo, hi


def _matrix(cases: pd.DataFrame, by, cluster, func: str) -> tuple[CaseMatrix, str | None]:
    """The case matrix with the resampling unit: the resolved cluster (``"auto"``:
    ``patient_id`` when a patient repeats), else every case its own."""
    _v.table(cases, func=func)
    cases, cluster = cluster_cases(cases, cluster)
    return case_matrix(cases, by, need_pred=False, cluster=cluster or "case_id"), cluster


def _base(cm: CaseMatrix) -> dict:
    """The grouping and count columns of one row per model x cell (model-major)."""
    counts = cm.cell_counts()
    G, M = cm.n_cells, len(cm.models)
    return {"model": np.repeat(np.array(cm.models, dtype=object), G),
            "group_var": np.tile(cm.cells["group_var"].to_numpy(), M),
            "group_level": np.tile(cm.cells["group_level"].to_numpy(), M),
            "n": np.tile(counts["n"], M), "n_pos": np.tile(counts["n_pos"], M),
            "n_neg": np.tile(counts["n_neg"], M)}


def _cell_flag(base: dict, estimate: np.ndarray) -> np.ndarray:
    return np.where(base["n"] == 0, "empty", np.where(np.isnan(estimate), "not_estimable",
                                                      "")).astype(object)


def _clusters_per_group(cm: CaseMatrix) -> np.ndarray:
    """Clusters with a scan in each cell, repeated per model (model-major)."""
    from stats.clustered import clusters_per_cell

    return np.tile(clusters_per_cell(cm.member, cm.patient), len(cm.models))


# --------------------------------------------------------------------------- ROC curve


def roc_curve(cases: pd.DataFrame, *, by=None, n_boot: int | None = None, seed=None,
              conf_level: float = 0.95, cluster: str | None = AUTO, strata: str | None = None,
              scheduler=None) -> pd.DataFrame:
    """The empirical ROC curve per model x subgroup cell, as pROC ``coords(roc, "all")``.

    Parameters
    ----------
    cases : DataFrame (cases contract; ``pred`` is not needed).
    by : subgroup axes as in :func:`stats.subgroup_metrics` (overall always included).
    n_boot : replicates of the paired cluster bootstrap for pointwise bands (None: none).
    seed, conf_level, strata, scheduler : of the bootstrap (:mod:`stats.bootstrap`).
    cluster : the resampling unit: "auto" (``patient_id`` when a patient has several
        scans), a column, or None (every scan its own).

    Returns
    -------
    Tidy DataFrame, one row per model x cell x point of the curve, in pROC's order
    (ascending threshold): ``estimand`` "roc", ``estimate`` and ``sensitivity`` (the
    sensitivity at the point), ``specificity``, ``threshold`` (pROC's: -Inf, the midpoints
    between consecutive distinct scores of the cell, +Inf; test-positive when ``score >=
    threshold``), ``conf_low``/``conf_high`` (with ``n_boot``: the pointwise percentile
    band of the sensitivity *at that threshold*), extras ``specificity_low`` /
    ``specificity_high`` (the same for the specificity), ``point`` (0, 1, ... within the
    curve), ``n``, ``n_pos``, ``n_neg``, ``method`` ("empirical" or
    "bootstrap-percentile"), ``flag`` (``empty``: one row, NaN; ``not_estimable``: one
    row per point with NaN where a class is missing), ``n_boot``.

    Notes
    -----
    See the module docstring for the points and thresholds. Validated against pROC 1.18
    ``coords(roc(label, score, direction = "<"), "all")`` to 1e-12 (every threshold,
    sensitivity and specificity; tests/r/operating.R).

    Raises
    ------
    ContractError
        An empty ``cases`` table, ``n_boot`` not a whole number >= 1, ``conf_level``
        outside (0, 1).
    """
    func = "roc_curve"
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", optional=True, fix="e.g. n_boot=2000")
    conf_level = _v.level(conf_level, func=func)
    cm, _ = _matrix(cases, by, cluster, func)
    r = build_runs(cm, strata=strata)
    cp, cn = _point(r)
    P, N = cp[0, r.pend], cn[0, r.pend]
    with np.errstate(invalid="ignore", divide="ignore"):
        sens = np.where(P[r.pgroup] > 0, (P[r.pgroup] - cp[0]) / P[r.pgroup], np.nan)
        spec = np.where(N[r.pgroup] > 0, cn[0] / N[r.pgroup], np.nan)
    base = {k: v[r.pgroup] for k, v in _base(cm).items()}
    thr = thresholds(r)
    empty = base["n"] == 0
    out = {"estimand": "roc", **base, "estimate": sens, "sensitivity": sens,
           "specificity": spec, "threshold": np.where(empty, np.nan, thr),
           "point": (np.arange(r.n_points) - r.pstart[r.pgroup]).astype(float),
           "conf_level": conf_level, "method": "empirical",
           "flag": np.where(empty, "empty", np.where(np.isnan(sens) | np.isnan(spec),
                                                     "not_estimable", "")).astype(object),
           "specificity_low": np.nan, "specificity_high": np.nan,
           "n_boot": float(n_boot or 0)}
    if n_boot:
        reps = _replicates(r, n_boot, _roc_points, n_out=2 * r.n_points, seed=seed,
                           scheduler=scheduler)
        n_pts = r.n_points
        se_lo, se_hi = percentile_interval(reps[:, :n_pts], conf_level)
        sp_lo, sp_hi = percentile_interval(reps[:, n_pts:], conf_level)
        out.update(conf_low=se_lo, conf_high=se_hi, specificity_low=sp_lo,
                   specificity_high=sp_hi, method="bootstrap-percentile")
    return tidy(out, group_cols=GROUP_COLS)


def _roc_points(r: Runs, cp, cn) -> np.ndarray:
    """Sensitivity and specificity at every point (b x 2 points)."""
    P, N = cp[:, r.pend][:, r.pgroup], cn[:, r.pend][:, r.pgroup]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.hstack([np.where(P > 0, (P - cp) / P, np.nan),
                          np.where(N > 0, cn / N, np.nan)])


# --------------------------------------------------------------------------- operating point


def _at_values(r: Runs, cp, cn, fixed: str, values: np.ndarray) -> np.ndarray:
    """The other coordinate at each fixed value (b x values * groups, value-major)."""
    fn = at_specificity if fixed == "specificity" else at_sensitivity
    return np.hstack([fn(r, cp, cn, float(s))[0] for s in values])


def _anchors(r: Runs, cp, cn, fixed: str, values: np.ndarray) -> list[tuple]:
    """Per fixed value, what a replicate's linearized value needs from the full sample:
    the anchor points ``(i1, i0, prop)`` of :func:`_at`, the ROC's slope there (the
    other coordinate's fall per unit of the fixed one: the chord over ``s +- h``,
    ``SLOPE_BANDWIDTH``) and the value ``s``."""
    n = cn[0, r.pend] if fixed == "specificity" else cp[0, r.pend]
    with np.errstate(divide="ignore"):
        h = SLOPE_BANDWIDTH * np.where(n > 0, n, 1.0) ** (-1.0 / 3.0)
    out = []
    for s in values:
        _, _, (i1, i0, prop) = _at(r, cp, cn, float(s), fixed)
        a, b = np.clip(s - h, 0.0, 1.0), np.clip(s + h, 0.0, 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            slope = (_at(r, cp, cn, a, fixed)[0] - _at(r, cp, cn, b, fixed)[0]) / (b - a)
        out.append((i1[0], i0[0], prop[0], slope[0], float(s)))
    return out


def _linearized(r: Runs, cp, cn, fixed: str, anchors) -> np.ndarray:
    """Each replicate's value at every fixed value, linearized (b x values * groups,
    value-major; :func:`operating_point`'s Notes): the replicate's two coordinates at the
    full sample's threshold (its anchor points, the same interpolation weight), the
    other one moved along the full sample's slope to where the fixed one equals ``s``."""
    P, N = cp[:, r.pend], cn[:, r.pend]
    out = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for i1, i0, prop, slope, s in anchors:
            se1, se0 = (P - cp[:, i1]) / P, (P - cp[:, i0]) / P
            sp1, sp0 = cn[:, i1] / N, cn[:, i0] / N
            se, sp = se1 + prop * (se0 - se1), sp1 + prop * (sp0 - sp1)
            v = se + slope * (sp - s) if fixed == "specificity" else sp + slope * (se - s)
            out.append(np.where((P > 0) & (N > 0), v, np.nan))
    return np.hstack(out)


def _op_values(r: Runs, cp, cn, fixed: str, values: np.ndarray, anchors) -> np.ndarray:
    """A replicate's values at the fixed values as read off its own ROC, then (with
    ``anchors``) the same linearized (:func:`_linearized`)."""
    raw = _at_values(r, cp, cn, fixed, values)
    return raw if anchors is None else np.hstack([raw, _linearized(r, cp, cn, fixed, anchors)])


def _pairs(cm: CaseMatrix) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(len(cm.models), 1)


def operating_point(cases: pd.DataFrame, *, specificity=None, sensitivity=None, by=None,
                    n_boot: int | None = 2000, seed=None, cluster: str | None = AUTO,
                    conf_level: float = 0.95, strata: str | None = None,
                    scheduler=None,
                    difference_ci: Literal["linearized", "percentile"] = "linearized"
                    ) -> pd.DataFrame:
    """Sensitivity at a fixed specificity (or specificity at a fixed sensitivity) per
    model x subgroup cell, and the paired differences between models there.

    Parameters
    ----------
    cases : DataFrame (cases contract; ``pred`` is not needed: each model is read at its
        own threshold giving the fixed value).
    specificity, sensitivity : one value in [0, 1] or a list; exactly one of the two.
    by : subgroup axes as in :func:`stats.subgroup_metrics` (overall always included).
    n_boot : replicates of the paired cluster bootstrap (None: point estimates only).
    seed, conf_level, strata, scheduler : of the bootstrap (:mod:`stats.bootstrap`).
    cluster : the resampling unit: "auto" (``patient_id`` when a patient has several
        scans), a column, or None (every scan its own).
    difference_ci : the replicates behind the paired differences' intervals and
        p-values: "linearized" (default; Notes) or "percentile" (each replicate's own
        values, pROC's ``ci.coords`` way, for comparison).

    Returns
    -------
    Tidy DataFrame. Value rows, per model x cell x fixed value: ``estimand``
    "sensitivity_at_specificity" (or "specificity_at_sensitivity"), ``at`` (the fixed
    value), ``estimate`` (pROC ``coords(x = at, input =, ret =)``: at a value the curve
    attains, the best value of the other coordinate; else interpolated), ``threshold``
    (the threshold attaining it; NaN where interpolated), ``std_error`` (SD of the
    replicates), ``conf_low``/``conf_high`` (percentile), ``n``, ``n_pos``, ``n_neg``,
    ``method`` ("bootstrap-percentile", or "none" without ``n_boot``), ``flag`` (empty,
    not_estimable, no_interval), extras ``n_boot``, ``n_boot_valid``, ``n_clusters``.
    Difference rows (two models or more), per pair x cell x value: ``estimand``
    "<estimand>_difference", ``model`` "A - B", ``model_a``, ``model_b``, ``estimate``
    (A minus B, each at its own threshold), percentile interval of the paired replicate
    differences, ``p_value`` (two-sided bootstrap: module docstring), ``p_adjusted``
    (Holm, per estimand and value over every pair and cell), ``p_adjusted_bh``.

    Notes
    -----
    Validated against pROC 1.18 ``coords(roc, x = s, input = "specificity", ret =
    "sensitivity")`` (and the reverse), ties and interpolation included, to 1e-12
    (tests/r/operating.R).

    **The paired differences' replicates are linearized.** A replicate's value read off
    its own ROC carries the noise of the few ROC points next to its own threshold: the
    local slope there rests on a few spacings, and its square inflates the replicates'
    variance (the bootstrap of an empirical quantile). For one model the inflation is
    small and the percentile interval keeps the value's skewness, but the two models'
    inflations are nearly independent and add up in the difference, whose true variance
    is small (the models are scored on the same scans): its percentile interval covered
    97.0-98.8% in simulation. A linearized replicate instead reads both coordinates at
    the full sample's threshold (the full sample's anchor points and interpolation
    weight, so the threshold's own noise is the resampled counts') and moves the value
    along the full sample's ROC slope to the fixed coordinate's value: ``se*(c) + slope
    (sp*(c) - s)`` at a fixed specificity (``sp*(c) + slope (se*(c) - s)`` at a fixed
    sensitivity), ``slope`` the chord of the full sample's ROC over ``s +- h``
    (``SLOPE_BANDWIDTH``), the delta method's expansion of the statistic with each
    replicate supplying its counts. At ``W = 1`` it is the estimate itself. Coverage of
    the 95% intervals (``bench/operating_coverage.md``; binormal scores, 80 or 200
    patients with 1-3 scans, with and without patient effects, specificity 0.8 and 0.9)
    is stated there.

    Raises
    ------
    ContractError
        An empty ``cases`` table; neither or both of ``specificity`` / ``sensitivity``, or a
        value outside [0, 1]; ``n_boot`` not a whole number >= 1; ``conf_level`` outside
        (0, 1).
    """
    func = "operating_point"
    if (specificity is None) == (sensitivity is None):
        raise ContractError(MSG_ONE_OF.format(func=func, got=f"specificity={specificity!r}, "
                                                              f"sensitivity={sensitivity!r}"))
    fixed = "specificity" if specificity is not None else "sensitivity"
    values = _values(specificity if specificity is not None else sensitivity, func=func,
                     arg=fixed)
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", optional=True, fix="e.g. n_boot=2000")
    conf_level = _v.level(conf_level, func=func)
    if difference_ci not in ("linearized", "percentile"):
        raise ContractError(f"{func}: difference_ci={difference_ci!r} is not an interval "
                            f"method; give difference_ci='linearized' (the default) or "
                            f"difference_ci='percentile'")
    other = "sensitivity" if fixed == "specificity" else "specificity"
    estimand = f"{other}_at_{fixed}"
    cm, _ = _matrix(cases, by, cluster, func)
    r = build_runs(cm, strata=strata)
    cp, cn = _point(r)
    fn = at_specificity if fixed == "specificity" else at_sensitivity
    est, hits = zip(*(fn(r, cp, cn, float(s)) for s in values))
    theta = np.hstack(est)[0]                      # value-major: value * groups + group
    thr = thresholds(r)
    hit = np.hstack(hits)[0]
    threshold = np.where(hit >= 0, thr[np.maximum(hit, 0)], np.nan)
    V, GM = len(values), r.n_groups
    base = {k: np.tile(v, V) for k, v in _base(cm).items()}
    at = np.repeat(values, GM)
    n_cl = np.tile(_clusters_per_group(cm), V)
    rows = {"estimand": estimand, **base, "at": at, "estimate": theta, "threshold": threshold,
            "conf_level": conf_level, "method": "none", "n_boot": float(n_boot or 0),
            "n_boot_valid": np.nan, "n_clusters": n_cl, "model_a": "", "model_b": ""}
    flag = _cell_flag(base, theta)
    reps = lin = None
    if n_boot:
        linear = len(cm.models) > 1 and difference_ci == "linearized"
        anchors = _anchors(r, cp, cn, fixed, values) if linear else None
        both = _replicates(r, n_boot, _op_values, (fixed, values, anchors),
                           n_out=V * GM * (2 if linear else 1), seed=seed, scheduler=scheduler)
        reps = both[:, :V * GM]
        lin = both[:, V * GM:] if linear else reps
        rows.update(_boot_columns(reps, theta, conf_level), method="bootstrap-percentile")
    else:
        flag = np.where(flag == "", FLAG_NO_INTERVAL, flag).astype(object)
    rows["flag"] = flag
    rows["p_value"] = np.nan
    frames = [pd.DataFrame(rows)]
    ia, ib = _pairs(cm)
    if len(ia):
        G = cm.n_cells
        # columns of model m in cell g at value v: v * GM + m * G + g
        col = lambda m: (np.arange(V)[:, None, None] * GM + m[None, :, None] * G    # noqa
                         + np.arange(G)[None, None, :]).ravel()
        ca, cb = col(ia), col(ib)
        d = theta[ca] - theta[cb]
        names = np.array([f"{cm.models[i]} - {cm.models[j]}" for i, j in zip(ia, ib)],
                         dtype=object)
        K = len(ia)
        pair = lambda x: np.repeat(np.tile(x, V), G) if np.ndim(x) else x   # noqa
        cellw = lambda x: np.tile(np.asarray(x)[:G], V * K)                 # noqa
        drow = {"estimand": f"{estimand}_difference", "model": pair(names),
                "group_var": cellw(base["group_var"]), "group_level": cellw(base["group_level"]),
                "n": cellw(base["n"]), "n_pos": cellw(base["n_pos"]),
                "n_neg": cellw(base["n_neg"]), "at": np.repeat(values, K * G),
                "estimate": d, "threshold": np.nan, "conf_level": conf_level,
                "model_a": pair(np.array(cm.models, dtype=object)[ia]),
                "model_b": pair(np.array(cm.models, dtype=object)[ib]),
                "n_boot": float(n_boot or 0), "n_boot_valid": np.nan,
                "n_clusters": cellw(n_cl), "method": "none"}
        dflag = np.where(drow["n"] == 0, "empty",
                         np.where(np.isnan(d), "not_estimable", "")).astype(object)
        if reps is not None:
            dr = lin[:, ca] - lin[:, cb]
            drow.update(_boot_columns(dr, d, conf_level), p_value=np.where(
                np.isnan(d), np.nan, boot_p(dr)), method="bootstrap-linearized"
                if difference_ci == "linearized" else "bootstrap-percentile")
        else:
            dflag = np.where(dflag == "", FLAG_NO_INTERVAL, dflag).astype(object)
        drow["flag"] = dflag
        frames.append(pd.DataFrame(drow))
    out = pd.concat(frames, ignore_index=True)
    from stats.subgroups import adjust_p

    out = adjust_p(out, ["estimand", "at"])
    return tidy(out, group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- partial AUC


def partial_auc(cases: pd.DataFrame, *, specificity=None, sensitivity=None,
                correct: bool = False, by=None, n_boot: int | None = 2000, seed=None,
                cluster: str | None = AUTO, conf_level: float = 0.95,
                strata: str | None = None, boot_ci: Literal["bca", "percentile"] = "bca",
                scheduler=None) -> pd.DataFrame:
    """Partial AUC over a range of specificity (default 0.8 to 1) or of sensitivity, per
    model x subgroup cell, as pROC ``auc(partial.auc = c(hi, lo), partial.auc.focus =,
    partial.auc.correct =)``, with a paired cluster-bootstrap interval.

    Parameters
    ----------
    cases : DataFrame (cases contract; ``pred`` not needed).
    specificity, sensitivity : ``(lo, hi)`` of the range on that axis, at most one of the
        two (neither: ``specificity=(0.8, 1.0)``).
    correct : McClish's standardization ``(1 + (pAUC - min) / (max - min)) / 2``: 0.5 on
        the diagonal, 1 for a perfect test; NaN (flag ``below_diagonal``) below the
        diagonal, as pROC.
    by, n_boot, seed, cluster, conf_level, strata, scheduler : as :func:`operating_point`.
    boot_ci : the interval of each model's partial AUC: "bca" (default; bias-corrected and
        accelerated, the acceleration from the jackknife over clusters, in at most
        ``JACKKNIFE_GROUPS`` leave-out groups) or "percentile". The paired differences
        always get the percentile interval (Notes).

    Returns
    -------
    Tidy DataFrame, one row per model x cell: ``estimand`` "partial_auc" (or
    "partial_auc_corrected"), ``estimate``, ``std_error``, ``conf_low``/``conf_high``
    (``method`` "bootstrap-bca" or "bootstrap-percentile"), ``n``, ``n_pos``, ``n_neg``, ``method``, ``flag``, extras ``focus``,
    ``range_low``, ``range_high``, ``n_boot``, ``n_boot_valid``, ``n_clusters``; and
    with two models or more the paired differences ("<estimand>_difference", as
    :func:`operating_point`).

    Notes
    -----
    The area under the linear interpolation of the ROC points (module docstring) over
    the range, boundary points interpolated, as pROC. Validated against pROC 1.18 to
    1e-12 (tests/r/operating.R). Coverage over specificity 0.8-1, 2,000 simulated cohorts
    per scenario of 80 or 200 patients, 300 replicates (``bench/operating_coverage.md``):
    a model's value 94.0-94.4% with BCa, each tail at most 3.5% (the percentile interval
    92.2-93.8%, missing mostly from above: a partial AUC near its ceiling is skewed); the
    paired difference 94.2-95.6% with the percentile interval (BCa was 93.2-94.3% in an
    earlier run: a difference is nearly symmetric, and estimating its bias correction
    only adds noise).

    Raises
    ------
    ContractError
        An empty table, a range that is not ``lo < hi`` in [0, 1], both ranges given,
        ``n_boot`` not a whole number >= 1, ``conf_level`` outside (0, 1).
    """
    func = "partial_auc"
    if specificity is not None and sensitivity is not None:
        raise ContractError(MSG_ONE_OF.format(func=func, got="both"))
    focus = "sensitivity" if sensitivity is not None else "specificity"
    lo, hi = _range(sensitivity if sensitivity is not None else
                    (specificity if specificity is not None else (0.8, 1.0)), func=func,
                    arg=focus)
    correct = bool(correct)
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", optional=True, fix="e.g. n_boot=2000")
    conf_level = _v.level(conf_level, func=func)
    if boot_ci not in ("bca", "percentile"):
        raise ContractError(f"{func}: boot_ci={boot_ci!r} is not an interval method; give "
                            f"boot_ci='bca' or boot_ci='percentile'")
    cm, _ = _matrix(cases, by, cluster, func)
    r = build_runs(cm, strata=strata)
    cp, cn = _point(r)
    args = (lo, hi, focus, correct)
    theta = pauc(r, cp, cn, *args)[0]
    estimand = "partial_auc_corrected" if correct else "partial_auc"
    base = _base(cm)
    flag = _cell_flag(base, theta)
    if correct:
        raw = pauc(r, cp, cn, lo, hi, focus, False)[0]
        flag = np.where(np.isnan(theta) & ~np.isnan(raw), FLAG_BELOW_DIAGONAL,
                        flag).astype(object)
    rows = {"estimand": estimand, **base, "estimate": theta, "conf_level": conf_level,
            "method": "none", "focus": focus, "range_low": lo, "range_high": hi,
            "n_boot": float(n_boot or 0), "n_boot_valid": np.nan,
            "n_clusters": _clusters_per_group(cm), "model_a": "", "model_b": ""}
    reps = None
    if n_boot:
        reps = _replicates(r, n_boot, pauc, args, n_out=r.n_groups, seed=seed,
                           scheduler=scheduler)
        rows.update(_boot_columns(reps, theta, conf_level), method="bootstrap-percentile")
        if boot_ci == "bca":
            from stats.bootstrap import boot_interval

            accel = _acceleration(r, pauc, args, r.n_groups)
            rows["conf_low"], rows["conf_high"] = boot_interval(
                reps, theta, conf_level=conf_level, method="bca", accel=accel)
            rows["method"] = "bootstrap-bca"
            # every replicate on one side of the estimate (no variation): BCa's bias
            # correction is infinite, so there is no interval; said by the flag
            none = np.isnan(rows["conf_low"]) & np.isfinite(theta)
            flag = np.where(none & (flag == ""), FLAG_NO_INTERVAL, flag).astype(object)
    else:
        flag = np.where(flag == "", FLAG_NO_INTERVAL, flag).astype(object)
    rows["flag"] = flag
    rows["p_value"] = np.nan
    frames = [pd.DataFrame(rows)]
    ia, ib = _pairs(cm)
    if len(ia):
        G = cm.n_cells
        ca = (ia[:, None] * G + np.arange(G)[None, :]).ravel()
        cb = (ib[:, None] * G + np.arange(G)[None, :]).ravel()
        d = theta[ca] - theta[cb]
        cellw = lambda x: np.tile(np.asarray(x)[:G], len(ia))                # noqa
        drow = {"estimand": f"{estimand}_difference",
                "model": np.repeat([f"{cm.models[i]} - {cm.models[j]}" for i, j in zip(ia, ib)],
                                   G).astype(object),
                "group_var": cellw(base["group_var"]), "group_level": cellw(base["group_level"]),
                "n": cellw(base["n"]), "n_pos": cellw(base["n_pos"]), "n_neg": cellw(base["n_neg"]),
                "estimate": d, "conf_level": conf_level, "method": "none", "focus": focus,
                "range_low": lo, "range_high": hi, "n_boot": float(n_boot or 0),
                "n_boot_valid": np.nan, "n_clusters": cellw(rows["n_clusters"]),
                "model_a": np.repeat(np.array(cm.models, dtype=object)[ia], G),
                "model_b": np.repeat(np.array(cm.models, dtype=object)[ib], G)}
        dflag = np.where(drow["n"] == 0, "empty",
                         np.where(np.isnan(d), "not_estimable", "")).astype(object)
        if reps is not None:
            dr = reps[:, ca] - reps[:, cb]
            drow.update(_boot_columns(dr, d, conf_level),
                        p_value=np.where(np.isnan(d), np.nan, boot_p(dr)),
                        method="bootstrap-percentile")
        else:
            dflag = np.where(dflag == "", FLAG_NO_INTERVAL, dflag).astype(object)
        drow["flag"] = dflag
        frames.append(pd.DataFrame(drow))
    from stats.subgroups import adjust_p

    out = adjust_p(pd.concat(frames, ignore_index=True), ["estimand"])
    return tidy(out, group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- unpaired DeLong


def unpaired_delong(auc_a, var_a, auc_b, var_b, n_a, n_b, cov=0.0) -> dict[str, np.ndarray]:
    """pROC's unpaired DeLong test, vectorized: ``D = (A - B) / sqrt(V_A + V_B - 2 C)``,
    ``df = (V_A + V_B)^2 / (V_A^2 / (n_A - 1) + V_B^2 / (n_B - 1))`` (Welch-Satterthwaite;
    ``n`` the observations of each side, or its clusters), two-sided p from Student's t;
    ``C`` the covariance of the two AUCs (0 for independent samples)."""
    auc_a, var_a, auc_b, var_b, n_a, n_b, cov = np.broadcast_arrays(
        *(np.asarray(x, dtype="float64") for x in (auc_a, var_a, auc_b, var_b, n_a, n_b, cov)))
    with np.errstate(invalid="ignore", divide="ignore"):
        vd = var_a + var_b - 2 * cov
        se = np.sqrt(np.where(vd > 0, vd, np.nan))
        D = (auc_a - auc_b) / se
        df = (var_a + var_b) ** 2 / (var_a ** 2 / (n_a - 1) + var_b ** 2 / (n_b - 1))
        p = 2 * sps.t.sf(np.abs(D), df)
    return {"estimate": auc_a - auc_b, "std_error": se, "statistic": D, "df": df,
            "p_value": p}


def _psi(pair_group, pair, label, v, auc, m, k) -> tuple[np.ndarray, np.ndarray]:
    """Per (group, cluster) pair the DeLong influence ``d10_i / M + d01_i / N`` (structural
    components summed over the cluster, centred), and the group of each pair."""
    y = np.asarray(label, dtype=bool)
    P = len(pair_group)
    sums10 = group_sum(pair[y], P, v[y])
    sums01 = group_sum(pair[~y], P, v[~y])
    m_i = np.bincount(pair[y], minlength=P).astype(float)[:, None]
    n_i = np.bincount(pair[~y], minlength=P).astype(float)[:, None]
    a = auc[pair_group]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (sums10 - m_i * a) / m[pair_group] + (sums01 - n_i * a) / k[pair_group]


def delong_test_unpaired(label_a, score_a, label_b, score_b, *, conf_level: float = 0.95,
                         cluster_a=None, cluster_b=None) -> pd.DataFrame:
    """DeLong's test of two AUCs from different samples, as pROC ``roc.test(roc_a, roc_b,
    paired = FALSE, method = "delong")``.

    Parameters
    ----------
    label_a, score_a, label_b, score_b : the two samples (labels 0/1, 1 = case; higher
        scores more likely a case).
    conf_level : level of the Wald interval of the difference (t on ``df``).
    cluster_a, cluster_b : optional cluster ids (e.g. patients) of each sample's scans, one
        per scan. Given, each AUC's variance is Obuchowski's clustered-data variance where a
        cluster holds several scans of the sample, and a cluster present in both samples (a
        patient with scans in both) adds the covariance of the two AUCs (below); ``df`` then
        counts clusters. With every cluster of one scan and none shared this is pROC's test.

    Returns
    -------
    Tidy one-row DataFrame: ``estimand`` "auc_difference", ``estimate`` (AUC a - b),
    ``std_error``, ``conf_low``/``conf_high``, ``statistic`` (pROC's D), ``df``,
    ``p_value`` (two-sided, Student's t on ``df``), ``n`` (both samples), ``n_pos``,
    ``n_neg``, ``method`` ("delong-unpaired", or "delong-unpaired-cluster"), ``flag``
    (not_estimable: a sample without both classes or without a variance), extras
    ``auc_a``, ``auc_b``, ``n_a``, ``n_b`` and, with clusters, ``n_clusters_a``,
    ``n_clusters_b``, ``n_clusters_shared``.

    Notes
    -----
    ``D = (A - B) / sqrt(V_A + V_B)`` with DeLong's variances ``S10 / m + S01 / n``,
    ``df = (V_A + V_B)^2 / (V_A^2 / (N_A - 1) + V_B^2 / (N_B - 1))``, ``N`` the scans of a
    sample (pROC's ``delong.unpaired.test``). With clusters: ``V`` Obuchowski's (1997)
    variance, ``N`` the clusters of the sample, and ``V_A + V_B - 2 C`` under the square
    root, ``C = I / (I - 1) sum_i psi_A,i psi_B,i`` over the clusters present in both
    (``psi_i = d10_i / M + d01_i / N``, the cluster's centred structural components;
    ``I`` the clusters in either sample): the linearization covariance, 0 when no patient
    has scans in both.

    Validated against pROC 1.18 ``roc.test(paired = FALSE)`` (D, df, p) to 1e-10
    (tests/r/operating.R); the clustered form against a double-loop recomputation
    (tests/stats/test_operating.py) and its size in ``bench/operating_coverage.md``
    (2,000 cohorts): 4.4-5.5% with 200 patients, 5.2-6.7% with 80 (about 19 positive
    scans in the subgroup): a little liberal in small samples, like pROC's own test,
    whose df it shares.

    Raises
    ------
    ContractError
        Labels that are not 0/1, scores that are not finite, lengths that differ, an empty
        sample, cluster ids of the wrong length or missing, ``conf_level`` outside (0, 1).
    """
    func = "delong_test_unpaired"
    ya, (sa,) = _labels(label_a, score_a, func=func, names=("score_a",), cluster=cluster_a)
    yb, (sb,) = _labels(label_b, score_b, func=func, names=("score_b",), cluster=cluster_b)
    conf_level = _v.level(conf_level, func=func)
    if (cluster_a is None) != (cluster_b is None):
        raise ContractError(f"{func}: give cluster ids for both samples (cluster_a and "
                            f"cluster_b) or for neither")
    da = delong_placements(np.zeros(len(ya), np.int64), ya, sa, 1)
    db = delong_placements(np.zeros(len(yb), np.int64), yb, sb, 1)
    va, vb, na, nb, cov = da["var"], db["var"], float(len(ya)), float(len(yb)), 0.0
    extra, method = {}, "delong-unpaired"
    if cluster_a is not None:
        ids = pd.factorize(pd.Series(np.r_[np.asarray(cluster_a, dtype=object).ravel(),
                                           np.asarray(cluster_b, dtype=object).ravel()]))[0]
        _cluster_codes(cluster_a, len(ya)), _cluster_codes(cluster_b, len(yb))  # checks
        res = _clustered_sides(ids[:len(ya)], ids[len(ya):], ya, yb, da, db)
        va, vb, cov = res["var_a"], res["var_b"], res["cov"]
        na, nb = res["n_clusters_a"], res["n_clusters_b"]
        extra = {k: res[k] for k in ("n_clusters_a", "n_clusters_b", "n_clusters_shared")}
        method = "delong-unpaired-cluster"
    t = unpaired_delong(da["auc"], va, db["auc"], vb, na, nb, cov)
    q = sps.t.ppf(0.5 + conf_level / 2, t["df"]) if np.isfinite(t["df"][0]) else np.nan
    flag = "not_estimable" if not np.isfinite(t["statistic"][0]) else ""
    return tidy({"estimand": ["auc_difference"], "estimate": t["estimate"],
                 "std_error": t["std_error"], "conf_low": t["estimate"] - q * t["std_error"],
                 "conf_high": t["estimate"] + q * t["std_error"], "conf_level": conf_level,
                 "statistic": t["statistic"], "df": t["df"], "p_value": t["p_value"],
                 "n": [len(ya) + len(yb)], "n_pos": da["m"] + db["m"],
                 "n_neg": da["k"] + db["k"], "method": method, "flag": flag,
                 "auc_a": da["auc"], "auc_b": db["auc"], "n_a": [float(len(ya))],
                 "n_b": [float(len(yb))], **{k: np.atleast_1d(v) for k, v in extra.items()}})


def _clustered_sides(ca, cb, ya, yb, da, db) -> dict:
    """Obuchowski's variance of each sample's AUC and their covariance through shared
    clusters (codes ``ca``, ``cb`` in one numbering)."""
    out = {}
    for side, c, y, d in (("a", ca, ya, da), ("b", cb, yb, db)):
        codes, pair = np.unique(c, return_inverse=True)
        pair = pair.ravel()
        res = clustered_auc_variance(pair, np.zeros(len(codes), np.int64), y,
                                     d["v"][:, None], np.atleast_1d(d["auc"])[:, None])
        var = res["var"][:, 0] if res["repeats"][0] else d["var"]
        psi = _psi(np.zeros(len(codes), np.int64), pair, y, d["v"][:, None],
                   np.atleast_1d(d["auc"])[:, None], np.atleast_1d(d["m"]),
                   np.atleast_1d(d["k"]))[:, 0]
        out[side] = (codes, psi)
        out[f"var_{side}"] = var
        out[f"n_clusters_{side}"] = float(len(codes))
    (ka, pa), (kb, pb) = out.pop("a"), out.pop("b")
    shared, ia, ib = np.intersect1d(ka, kb, return_indices=True)
    I = len(np.union1d(ka, kb))
    with np.errstate(invalid="ignore", divide="ignore"):
        # one cluster in all: no covariance across clusters is estimable (NaN, and so the
        # test); it was a ZeroDivisionError
        cov = (np.nan if I < 2 else I / (I - 1) * np.sum(pa[ia] * pb[ib])) if len(shared) \
            else 0.0
    out["cov"] = np.atleast_1d(cov)
    out["n_clusters_shared"] = float(len(shared))
    return out


def auc_vs_rest(cases: pd.DataFrame, *, by, cluster: str | None = AUTO,
                conf_level: float = 0.95) -> pd.DataFrame:
    """The AUC of each subgroup against the AUC of the rest of its axis, per model:
    :func:`delong_test_unpaired` of the cell's scans against the other scans, for every
    cell of every axis at once (overall excluded).

    With ``cluster`` (default "auto": ``patient_id`` when a patient has several scans) each
    side's variance is Obuchowski's and a patient with scans on both sides adds the
    covariance of the two AUCs (:func:`delong_test_unpaired`), ``df`` on clusters;
    without, pROC's unpaired test on the scans.

    Returns a tidy DataFrame, rows ``estimand`` "auc_difference_vs_rest" per model x cell:
    ``estimate`` (subgroup AUC minus the rest's), ``std_error``, ``conf_low``/
    ``conf_high`` (t on ``df``), ``statistic`` (D), ``p_value``, ``p_adjusted`` (Holm per
    model over every level of every axis), ``method``, ``flag``, extras ``df``,
    ``auc_subgroup``, ``auc_rest``, ``n_rest``, ``p_adjusted_bh``, ``n_clusters``,
    ``n_clusters_rest``, ``n_clusters_shared``.
    """
    func = "auc_vs_rest"
    _v.table(cases, func=func)
    conf_level = _v.level(conf_level, func=func)
    cases, cluster = cluster_cases(cases, cluster)
    cm = case_matrix(cases, by, need_pred=False, cluster=cluster)
    cells = np.flatnonzero(cm.cells["group_var"].to_numpy() != OVERALL)
    K, n, M = len(cells), len(cm.label), len(cm.models)
    memb = cm.member[cells].toarray().astype(bool) if K else np.zeros((0, n), bool)
    # groups 0..K-1: the cells; K..2K-1: their rests (every other scan)
    gi, ci = np.nonzero(np.vstack([memb, ~memb]))
    grp = (gi[:, None] * M + np.arange(M)[None, :]).ravel()
    y = np.repeat(cm.label[ci], M)
    d = delong_placements(grp, y, cm.score[ci].ravel(), 2 * K * M)
    auc, var = d["auc"].reshape(2 * K, M), d["var"].reshape(2 * K, M)
    m, k = d["m"].reshape(2 * K, M), d["k"].reshape(2 * K, M)
    nobs = np.bincount(gi, minlength=2 * K).astype(float)[:, None] + np.zeros((1, M))
    cov = np.zeros((K, M))
    ncl = nobs.copy()
    shared = np.full(K, np.nan)
    if cluster is not None:
        v = d["v"].reshape(-1, M)
        from stats.clustered import pair_codes

        pair, pair_group, pair_clu = pair_codes(gi, ci, cm.patient)
        c = clustered_auc_variance(pair, pair_group, cm.label[ci], v, auc)
        var = np.where(c["repeats"][:, None], c["var"], var)
        ncl = c["n_clusters"][:, None] + np.zeros((1, M))
        psi = _psi(pair_group, pair, cm.label[ci], v, auc, m, k)
        key = pair_group % K * (int(cm.patient.max()) + 1) + pair_clu
        side_a, side_b = pair_group < K, pair_group >= K
        common, ia, ib = np.intersect1d(key[side_a], key[side_b], return_indices=True)
        ia, ib = np.flatnonzero(side_a)[ia], np.flatnonzero(side_b)[ib]
        g_of = pair_group[ia]
        prod = np.zeros((K, M))
        np.add.at(prod, g_of, psi[ia] * psi[ib])
        shared = np.bincount(g_of, minlength=K).astype(float)
        I = np.bincount(pair_group, minlength=2 * K)[:K] + np.bincount(
            pair_group, minlength=2 * K)[K:] - shared
        with np.errstate(invalid="ignore", divide="ignore"):
            cov = (I / (I - 1))[:, None] * prod
        cov = np.where(shared[:, None] > 0, cov, 0.0)
    t = unpaired_delong(auc[:K], var[:K], auc[K:], var[K:], ncl[:K], ncl[K:], cov)
    q = sps.t.ppf(0.5 + conf_level / 2, t["df"])
    counts = cm.cell_counts()
    mo = lambda x: np.asarray(x).T.ravel()          # noqa: E731  (K x M -> model-major)
    rest_n = nobs[K:, 0]
    out = pd.DataFrame({
        "estimand": "auc_difference_vs_rest",
        "model": np.repeat(np.array(cm.models, dtype=object), K),
        "group_var": np.tile(cm.cells["group_var"].to_numpy()[cells], M),
        "group_level": np.tile(cm.cells["group_level"].to_numpy()[cells], M),
        "estimate": mo(t["estimate"]), "std_error": mo(t["std_error"]),
        "conf_low": mo(t["estimate"] - q * t["std_error"]),
        "conf_high": mo(t["estimate"] + q * t["std_error"]), "conf_level": conf_level,
        "n": np.tile(counts["n"][cells], M), "n_pos": np.tile(counts["n_pos"][cells], M),
        "n_neg": np.tile(counts["n_neg"][cells], M), "statistic": mo(t["statistic"]),
        "p_value": mo(t["p_value"]), "df": mo(t["df"]),
        "method": "delong-unpaired-cluster" if cluster else "delong-unpaired",
        "auc_subgroup": mo(auc[:K]), "auc_rest": mo(auc[K:]), "n_rest": np.tile(rest_n, M),
        "n_clusters": mo(ncl[:K]), "n_clusters_rest": mo(ncl[K:]),
        "n_clusters_shared": np.tile(shared, M)})
    out["flag"] = np.where(out["n"] == 0, "empty", np.where(
        ~np.isfinite(out["statistic"]), "not_estimable", ""))
    from stats.subgroups import adjust_p

    return tidy(adjust_p(out, ["model"]), group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- likelihood ratios


def likelihood_ratios(cases: pd.DataFrame, *, by=None, conf_level: float = 0.95,
                      cluster: str | None = AUTO) -> pd.DataFrame:
    """Positive and negative likelihood ratios per model x subgroup cell with log-method
    intervals (Simel, Samsa & Matchar 1991), cluster-aware where a patient repeats.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred`` (:func:`stats.scan_level`).
    by : subgroup axes as in :func:`stats.subgroup_metrics` (overall always included).
    conf_level : float
    cluster : "auto" (``patient_id`` when a patient has several scans), a column, or None.

    Returns
    -------
    Tidy DataFrame, rows ``estimand`` "lr_positive" and "lr_negative" per model x cell:
    ``estimate`` (LR+ = sensitivity / (1 - specificity); LR- = (1 - sensitivity) /
    specificity), ``std_error`` (of the log), ``conf_low``/``conf_high``
    (``exp(log LR +- z SE)``), ``n``, ``n_pos``, ``n_neg``, ``method`` ("simel-log", or
    "simel-log-cluster" in a cell where a patient has several scans), ``flag`` (empty;
    not_estimable: a zero cell, TP or FP for LR+, FN or TN for LR-), extras ``tp``, ``fp``,
    ``fn``, ``tn``, ``n_clusters``.

    Notes
    -----
    ``Var(log LR+) = 1/TP - 1/P + 1/FP - 1/N`` and ``Var(log LR-) = 1/FN - 1/P + 1/TN -
    1/N`` (Simel et al. 1991; epiR ``epi.tests``). With repeated scans the log LR is a
    difference of log ratio estimators over the patients of the cell, and its variance the
    linearization ``C / (C - 1) sum_c (z_c - w_c)^2``, with ``z_c = (tp_c - Se P_c) / TP``
    and ``w_c = (fp_c - FPR N_c) / FP`` for LR+ (``fn``, ``tn`` for LR-), over the ``C``
    patients with a scan in the cell (R: ``svycontrast`` of the log ratio of two
    ``svyratio`` estimates, ids = patient). Validated against epiR 2.0 ``epi.tests`` and
    the Simel formula in R to 1e-12, and survey 4.1 to 1e-8 (tests/r/operating.R).

    Raises
    ------
    ContractError
        An empty table or no ``pred`` column; ``conf_level`` outside (0, 1).
    """
    func = "likelihood_ratios"
    _v.table(cases, func=func)
    conf_level = _v.level(conf_level, func=func)
    cases, cluster = cluster_cases(cases, cluster)
    cm = case_matrix(cases, by, cluster=cluster)
    c = cm.cell_counts()
    z = _z(conf_level)
    tp, fp, fn, tn = c["tp"], c["fp"], c["fn"], c["tn"]
    P, N = c["n_pos"][:, None], c["n_neg"][:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        parts = {"lr_positive": ((tp / P) / (fp / N), 1 / tp - 1 / P + 1 / fp - 1 / N,
                                 (tp > 0) & (fp > 0)),
                 "lr_negative": ((fn / P) / (tn / N), 1 / fn - 1 / P + 1 / tn - 1 / N,
                                 (fn > 0) & (tn > 0))}
    method = {k: np.full(tp.shape, "simel-log", dtype=object) for k in parts}
    var = {k: v[1] for k, v in parts.items()}
    if cluster is not None:
        y = cm.label[:, None].astype(float)
        pr = cm.pred.astype(float)
        M = len(cm.models)
        vals = np.hstack([pr * y, pr * (1 - y), (1 - pr) * y, (1 - pr) * (1 - y),
                          y, 1 - y])
        cell, _, sums = pair_sums(cm.member, cm.patient, vals)
        tpc, fpc, fnc, tnc = (sums[:, i * M:(i + 1) * M] for i in range(4))
        pc, nc = sums[:, 4 * M:4 * M + 1], sums[:, 4 * M + 1:]
        G = cm.n_cells
        C = np.bincount(cell, minlength=G).astype(float)[:, None]
        repeats = np.bincount(cell, weights=(pc + nc)[:, 0] > 1, minlength=G)[:, None] > 0
        Pg, Ng = P[cell], N[cell]
        with np.errstate(invalid="ignore", divide="ignore"):
            for k, (a, b, ta, tb) in {"lr_positive": (tpc, fpc, tp, fp),
                                      "lr_negative": (fnc, tnc, fn, tn)}.items():
                zc = (a - ta[cell] / Pg * pc) / ta[cell]
                wc = (b - tb[cell] / Ng * nc) / tb[cell]
                ss = group_sum(cell, G, (zc - wc) ** 2)
                vc = np.where(C > 1, C / (C - 1) * ss, np.nan)
                var[k] = np.where(repeats, vc, var[k])
                method[k] = np.where(repeats, "simel-log-cluster", method[k]).astype(object)
    frames = []
    from stats.clustered import clusters_per_cell

    n_cl = clusters_per_cell(cm.member, cm.patient)[:, None] + 0 * tp
    for k, (est, _, ok) in parts.items():
        se = np.sqrt(np.where(ok, var[k], np.nan))
        est = np.where(ok, est, np.nan)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            lo, hi = np.exp(np.log(est) - z * se), np.exp(np.log(est) + z * se)
        n = c["n"][:, None] + 0 * tp
        flag = np.where(n == 0, "empty", np.where(~ok, FLAG_ZERO_CELL, ""))
        mo = lambda x: np.asarray(x).T.ravel()      # noqa: E731
        G, M = cm.n_cells, len(cm.models)
        frames.append(pd.DataFrame({
            "estimand": k, "model": np.repeat(np.array(cm.models, dtype=object), G),
            "group_var": np.tile(cm.cells["group_var"].to_numpy(), M),
            "group_level": np.tile(cm.cells["group_level"].to_numpy(), M),
            "estimate": mo(est), "std_error": mo(se), "conf_low": mo(lo), "conf_high": mo(hi),
            "conf_level": conf_level, "n": mo(n), "n_pos": mo(P + 0 * tp),
            "n_neg": mo(N + 0 * tp), "method": mo(method[k]), "flag": mo(flag),
            "tp": mo(tp), "fp": mo(fp), "fn": mo(fn), "tn": mo(tn), "n_clusters": mo(n_cl)}))
    return tidy(pd.concat(frames, ignore_index=True), group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- goals


@dataclass(frozen=True)
class Goal:
    """One prespecified performance goal (see :func:`performance_goals`)."""

    metric: str
    goal: float | None = None
    margin: float | None = None
    alpha: float = 0.05
    name: str = ""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.goal is not None:
            return f"{self.metric} >= {self.goal:g}"
        return f"{self.metric} >= overall - {self.margin:g}"


def read_goals(goals) -> list[Goal]:
    """Goals as :class:`Goal` objects from a list of mappings, a DataFrame or Goals."""
    if isinstance(goals, pd.DataFrame):
        goals = goals.to_dict("records")
    if isinstance(goals, (Mapping, Goal)):
        goals = [goals]
    if not isinstance(goals, Sequence) or isinstance(goals, (str, bytes)) or not len(goals):
        raise ContractError(MSG_GOALS.format(problem=f"must be a non-empty list; got "
                                             f"{_v._show(goals)}", metrics=PROPORTIONS))
    out = []
    for i, g in enumerate(goals):
        if isinstance(g, Goal):
            g = g.__dict__
        if not isinstance(g, Mapping):
            raise ContractError(MSG_GOALS.format(problem=f"[{i}] is {_v._show(g)}",
                                                 metrics=PROPORTIONS))
        clean = {k: v for k, v in g.items() if not (isinstance(v, float) and np.isnan(v))
                 and v is not None}
        bad = set(clean) - {"metric", "goal", "margin", "alpha", "name"}
        metric = clean.get("metric")
        problem = None
        if bad:
            problem = f"[{i}] has unknown key(s) {sorted(bad)}"
        elif metric not in PROPORTIONS:
            problem = f"[{i}] metric {metric!r} is not one of the proportions"
        elif ("goal" in clean) == ("margin" in clean):
            problem = f"[{i}] needs exactly one of goal and margin"
        if problem is None:
            try:
                goal = _v.number(clean["goal"], func="performance_goals", arg=f"goals[{i}].goal",
                                 lo=0, hi=1) if "goal" in clean else None
                margin = _v.number(clean["margin"], func="performance_goals",
                                   arg=f"goals[{i}].margin", lo=0, hi=1, closed="left") \
                    if "margin" in clean else None
                alpha = _v.number(clean.get("alpha", 0.05), func="performance_goals",
                                  arg=f"goals[{i}].alpha", lo=0, hi=0.5)
            except ContractError as exc:
                problem = f"[{i}]: {exc}"
        if problem is not None:
            raise ContractError(MSG_GOALS.format(problem=problem, metrics=PROPORTIONS))
        out.append(Goal(metric, goal, margin, float(alpha), str(clean.get("name", ""))))
    return out


def cp_lower(x, n, alpha):
    """One-sided (1 - alpha) Clopper-Pearson lower limit (0 at x = 0); counts may be
    fractional (effective counts); NaN at n = 0."""
    x, n = np.broadcast_arrays(np.asarray(x, float), np.asarray(n, float))
    with np.errstate(invalid="ignore"):
        lo = special.betaincinv(x, n - x + 1, alpha)
    return np.where(n > 0, np.where(x <= 0, 0.0, lo), np.nan)


def cp_upper(x, n, alpha):
    """One-sided (1 - alpha) Clopper-Pearson upper limit (1 at x = n)."""
    x, n = np.broadcast_arrays(np.asarray(x, float), np.asarray(n, float))
    with np.errstate(invalid="ignore"):
        hi = special.betaincinv(x + 1, n - x, 1 - alpha)
    return np.where(n > 0, np.where(x >= n, 1.0, hi), np.nan)


def exact_greater(x, n, goal):
    """``P(X >= x)`` for ``X ~ Bin(n, goal)`` (R ``binom.test(x, n, goal, alternative =
    "greater")``), for fractional effective counts the regularized incomplete beta
    ``I_goal(x, n - x + 1)``; 1 at x = 0; NaN at n = 0."""
    x, n = np.broadcast_arrays(np.asarray(x, float), np.asarray(n, float))
    with np.errstate(invalid="ignore"):
        p = special.betainc(np.maximum(x, 1e-300), n - x + 1, goal)
    return np.where(n > 0, np.where(x <= 0, 1.0, p), np.nan)


def kg_p_value(mom: dict, goal: float, fallback, *, steps: int = 64) -> np.ndarray:
    """The one-sided p-value of ``H0: p <= goal`` dual to the Clopper-Pearson lower limit at
    Korn & Graubard's effective counts (:mod:`stats.clustered`): the level ``a`` at which
    the one-sided ``1 - a`` limit, with the effective size's degrees-of-freedom factor at
    that level, equals the goal (bisection on ``log a``, every cell at once). At every
    ``alpha``, ``p < alpha`` exactly when the lower limit at ``alpha`` exceeds the goal.
    Where no level below 1/2 puts the limit above the goal, ``max(1/2, fallback)``."""
    n = np.asarray(mom["n"], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        phat = np.where(n > 0, np.asarray(mom["x"], float) / n, np.nan)

    def above(a):
        ne = design_effect(mom, 1 - 2 * a)["n_effective"]
        return cp_lower(phat * ne, ne, a) > goal

    lo = np.full(n.shape, np.log(1e-17))
    hi = np.full(n.shape, np.log(0.5 - 1e-12))
    top = above(np.exp(hi))
    for _ in range(steps):           # bisection steps, every cell at once
        mid = (lo + hi) / 2
        ok = above(np.exp(mid))
        lo, hi = np.where(ok, lo, mid), np.where(ok, mid, hi)
    p = np.exp(hi)
    # above the goal even at 1e-17: p below that; never above it below 1/2: p >= 1/2
    return np.where(top, np.where(above(np.exp(np.log(1e-17))), 0.0, p),
                    np.maximum(0.5, np.asarray(fallback, float)))


def fm_restricted(p1, n1, p2, n2, delta):
    """Farrington & Manning's (1990) maximum-likelihood ``(p1~, p2~)`` under
    ``p1 - p2 = delta`` (the closed form of the cubic), vectorized."""
    p1, n1, p2, n2, delta = np.broadcast_arrays(*(np.asarray(a, float)
                                                  for a in (p1, n1, p2, n2, delta)))
    with np.errstate(invalid="ignore", divide="ignore"):
        theta = n2 / n1
        a = 1 + theta
        b = -(1 + theta + p1 + theta * p2 + delta * (theta + 2))
        c = delta ** 2 + delta * (2 * p1 + theta + 1) + p1 + theta * p2
        d = -p1 * delta * (1 + delta)
        v = b ** 3 / (27 * a ** 3) - b * c / (6 * a ** 2) + d / (2 * a)
        u = np.sign(v) * np.sqrt(np.maximum(b ** 2 / (9 * a ** 2) - c / (3 * a), 0))
        ratio = np.where(u != 0, v / np.where(u != 0, u, 1) ** 3, 0.0)
        w = (np.pi + np.arccos(np.clip(ratio, -1, 1))) / 3
        q1 = 2 * u * np.cos(w) - b / (3 * a)
    q1 = np.clip(q1, np.maximum(0, delta), np.minimum(1, 1 + delta))
    return q1, q1 - delta


def fm_z(p1, n1, p2, n2, delta):
    """Farrington-Manning score statistic of ``H0: p1 - p2 = delta``."""
    q1, q2 = fm_restricted(p1, n1, p2, n2, delta)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = q1 * (1 - q1) / n1 + q2 * (1 - q2) / n2
        num = p1 - p2 - delta
        z = np.where(var > 0, num / np.sqrt(np.where(var > 0, var, 1)),
                     np.where(num > 0, np.inf, np.where(num < 0, -np.inf, 0.0)))
    return z


def fm_limit(p1, n1, p2, n2, zq, *, upper: bool, steps: int = 45):
    """The score limit of ``p1 - p2``: the ``delta`` where ``fm_z = zq`` (lower) or
    ``-zq`` (upper), by bisection over every cell at once (``fm_z`` falls in ``delta``)."""
    shape = np.broadcast(p1, n1, p2, n2).shape
    lo, hi = np.full(shape, -1.0), np.full(shape, 1.0)
    target = -zq if upper else zq
    for _ in range(steps):            # bisection steps, every cell at once
        mid = (lo + hi) / 2
        above = fm_z(p1, n1, p2, n2, mid) > target
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return (lo + hi) / 2


def needed_n(p, bound, alpha, deff=1.0, *, cap: float = 2.0 ** 40) -> np.ndarray:
    """The smallest whole number of trials ``N`` at which a proportion observed at ``p``
    (``x = p N``, not rounded: the planning convention of :mod:`stats.precision`) gives
    the verdict it points to at one-sided level ``alpha``: a Clopper-Pearson lower limit
    above ``bound`` when ``p > bound``, an upper limit below it when ``p < bound``; at the
    effective size ``N / deff`` (repeated scans). NaN where ``p`` is on the bound or
    unknown. Doubling, then bisection on whole numbers, every cell at once."""
    p, bound, alpha, deff = np.broadcast_arrays(*(np.asarray(v, float)
                                                  for v in (p, bound, alpha, deff)))
    up = p > bound
    ok = np.isfinite(p) & np.isfinite(bound) & (p != bound)

    def enough(N):
        ne = N / deff
        with np.errstate(invalid="ignore"):
            return np.where(up, cp_lower(p * ne, ne, alpha) > bound,
                            cp_upper(p * ne, ne, alpha) < bound)

    lo, hi = np.zeros(p.shape), np.ones(p.shape)
    while True:                            # doubling: every cell at once
        short = ok & ~enough(hi) & (hi < cap)
        if not short.any():
            break
        lo, hi = np.where(short, hi, lo), np.where(short, hi * 2, hi)
    while (ok & (hi - lo > 1)).any():      # bisection on whole numbers
        mid = np.floor((lo + hi) / 2)
        good = enough(mid)
        hi, lo = np.where(ok & good, mid, hi), np.where(ok & ~good, mid, lo)
    return np.where(ok & enough(hi), hi, np.nan)


def performance_goals(cases: pd.DataFrame, goals, *, by, cluster: str | None = AUTO
                      ) -> pd.DataFrame:
    """Prespecified performance goals per model x subgroup cell: one-sided tests, Holm
    over the prespecified cells, and a verdict per row.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred``.
    goals : a list of mappings (or a DataFrame) with ``metric`` (sensitivity, specificity,
        ppv, npv or accuracy), and either ``goal`` (an absolute value in (0, 1): e.g.
        sensitivity >= 0.80 in every cell) or ``margin`` (a non-inferiority margin in
        [0, 1) against the overall value: the cell's metric >= overall - margin), and
        optionally ``alpha`` (one-sided level, default 0.05) and ``name``.
    by : the prespecified subgroup axes (as :func:`stats.subgroup_metrics`); their
        "Missing" and "not applicable" levels are not prespecified cells and are left
        out.
    cluster : "auto" (``patient_id`` when a patient has several scans), a column, or None.

    Returns
    -------
    Tidy DataFrame, one row per goal x model x cell: ``estimand`` (the metric for an
    absolute goal; "<metric>_difference_vs_overall" for a margin), ``goal_name``,
    ``goal`` (the absolute goal; NaN for a margin), ``margin``, ``bound`` (what the
    estimate is tested against: the goal, or ``-margin``), ``alpha``, ``estimate`` (the
    cell's value; for a margin its value minus the overall's), ``conf_low`` /
    ``conf_high`` (one-sided ``1 - alpha`` limits, each on its own: ``conf_level`` is
    ``1 - alpha``), ``p_value`` (one-sided, H1: above the bound), ``p_adjusted`` (Holm
    per goal and model over the cells; the overall row of an absolute goal is a test of
    its own, unadjusted), ``verdict`` (``met``: adjusted p < alpha; ``not_met``: the
    upper limit below the bound; else ``inconclusive``), ``n_needed`` and
    ``n_needed_for`` (an inconclusive row: the denominator count, e.g. positives for
    sensitivity, at which the estimate would reach the verdict it points to, met or
    not_met, by the exact one-sided limit at the family's Bonferroni level (Holm's
    smallest) and the cell's design effect: :func:`needed_n`; for a margin, against
    overall - margin with the overall held fixed; NaN where the estimate sits on the
    bound),
    ``n_needed_of``, ``n``, ``n_pos``, ``n_neg``, ``method``, ``flag``, extras
    ``estimate_subgroup``, ``estimate_overall``, ``numerator``, ``denominator``,
    ``n_effective``, ``design_effect``, ``n_clusters``.

    Notes
    -----
    Absolute goal ``g``: H0 ``p <= g``; with independent scans the exact binomial test
    ``p = P(Bin(n, g) >= x)`` and the Clopper-Pearson one-sided limits (method
    "exact-binomial"; R ``binom.test(x, n, g, alternative = "greater")``); where a patient
    has several scans in the cell, the same at Korn & Graubard's effective counts ``p
    n_eff`` of ``n_eff`` (:mod:`stats.clustered`; method "exact-binomial-cluster", as R's
    ``svyciprop(method = "beta")``): p < alpha exactly when the lower limit exceeds g.
    Margin ``m``: the cell's value minus the overall's is ``(n_r / n)(p_s - p_r)``, with
    ``p_r`` the rest of the cohort (``n_r`` scans), so H0 ``p_s - p_overall <= -m`` is
    ``p_s - p_r <= -m n / n_r``, tested by Farrington & Manning's score test (at each
    side's effective size where patients repeat; method "farrington-manning" or
    "farrington-manning-cluster"), whose inverted limits, rescaled by ``n_r / n``, are
    the limits shown. Size in simulation: ``bench/goals_size.md``.

    Raises
    ------
    ContractError
        An empty table, no ``pred``, goals that break the rules above.
    """
    func = "performance_goals"
    _v.table(cases, func=func)
    goals = read_goals(goals)
    cases, cluster = cluster_cases(cases, cluster)
    cm = case_matrix(cases, by, cluster=cluster)
    counts = cm.cell_counts()
    from stats.clustered import metric_indicators
    from stats.detection import metric_fractions
    from stats.subgroups import adjust_p

    G, M = cm.n_cells, len(cm.models)
    cells = cm.cells
    planned = (cells["group_var"].to_numpy() != OVERALL) & ~unplanned_levels(
        cells["group_level"].to_numpy())
    frames = []
    metrics = list(dict.fromkeys(g.metric for g in goals))
    ind = metric_indicators(cm.label, cm.pred, metrics)
    fr = metric_fractions(counts["tp"], counts["fp"], counts["fn"], counts["tn"], metrics)
    patient = cm.patient if cluster is not None else np.arange(len(cm.label))
    for gi, goal in enumerate(goals):
        k = goal.metric
        x, n = (np.asarray(a, float) for a in fr[k])              # G x M
        mom = cluster_moments(cm.member, patient, *ind[k])
        de = design_effect(mom, 1 - 2 * goal.alpha)
        n_eff = np.where(np.isfinite(de["n_effective"]), de["n_effective"], n)
        rep = mom["repeats"]
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.where(n > 0, x / n, np.nan)
        x_eff = np.where(rep, p * n_eff, x)
        ne = np.where(rep, n_eff, n)
        deff = np.where(rep & np.isfinite(de["design_effect"]),
                        np.maximum(de["design_effect"], 1.0), 1.0)
        a = goal.alpha
        keep = planned.copy()
        if goal.goal is not None:
            keep[0] = True                                         # the overall row
            est, bound = p, goal.goal
            pval = exact_greater(x_eff, ne, bound)
            # where the design effect is estimated, the p-value dual to the one-sided limit at
            # every level (Korn & Graubard's effective size depends on the level)
            kg = rep & np.isfinite(de["design_effect"]) & np.isfinite(p)
            if kg.any():
                pval = np.where(kg, kg_p_value(mom, bound, pval), pval)
            lo, hi = cp_lower(x_eff, ne, a), cp_upper(x_eff, ne, a)
            method = np.where(rep, "exact-binomial-cluster", "exact-binomial")
            est_sub, est_all = p, np.broadcast_to(p[:1], p.shape)
            plan_p = p
            estimand = k
        else:
            xo, no = x[:1], n[:1]
            xr, nr = xo - x, no - n                                 # the rest of the cohort
            with np.errstate(invalid="ignore", divide="ignore"):
                pr = np.where(nr > 0, xr / nr, np.nan)
                po = np.where(no > 0, xo / no, np.nan)
                scale = nr / no
                delta = -goal.margin * no / nr
            # the rest's effective size from its own clusters (every axis partitions the
            # cohort, so the rest of a cell within its axis is the cohort minus the cell)
            from stats.clustered import complement_moments

            _, rest_m = complement_moments(cm.member, cells["axis"].to_numpy(), patient,
                                           *ind[k])
            de_r = design_effect(rest_m, 1 - 2 * a)
            n2 = np.where(rest_m["repeats"] & np.isfinite(de_r["n_effective"]),
                          de_r["n_effective"], nr)
            zq = sps.norm.ppf(1 - a)
            valid = (n > 0) & (nr > 0)
            z = fm_z(p, ne, pr, n2, delta)
            pval = np.where(valid, sps.norm.sf(z), np.nan)
            lo = np.where(valid, fm_limit(p, ne, pr, n2, zq, upper=False) * scale, np.nan)
            hi = np.where(valid, fm_limit(p, ne, pr, n2, zq, upper=True) * scale, np.nan)
            est = p - po
            bound = -goal.margin
            method = np.where(rep, "farrington-manning-cluster", "farrington-manning")
            est_sub, est_all = p, np.broadcast_to(po, p.shape)
            plan_p = p
            estimand = f"{k}_difference_vs_overall"
        # n needed: the verdict the estimate points to, at the family's Bonferroni level
        # (Holm's smallest; one cell's own level for the overall row), on the subgroup's
        # own interval against the bound on its scale (a margin: overall - margin)
        n_family = max(int(planned.sum()), 1)
        level = np.full(G, a / n_family)
        level[0] = a
        on_scale = bound if goal.goal is not None else est_all - goal.margin
        need = needed_n(plan_p, on_scale, level[:, None], deff)
        mo = lambda v: np.asarray(np.broadcast_to(v, (G, M))).T.ravel()  # noqa: E731
        rows = pd.DataFrame({
            "estimand": estimand, "goal_name": goal.label,
            "model": np.repeat(np.array(cm.models, dtype=object), G),
            "group_var": np.tile(cells["group_var"].to_numpy(), M),
            "group_level": np.tile(cells["group_level"].to_numpy(), M),
            "goal": np.nan if goal.goal is None else goal.goal,
            "margin": np.nan if goal.margin is None else goal.margin, "bound": bound,
            "alpha": a, "estimate": mo(est), "conf_low": mo(lo), "conf_high": mo(hi),
            "conf_level": 1 - a, "p_value": mo(pval),
            "n": np.tile(counts["n"], M), "n_pos": np.tile(counts["n_pos"], M),
            "n_neg": np.tile(counts["n_neg"], M), "method": mo(method),
            "estimate_subgroup": mo(est_sub), "estimate_overall": mo(est_all),
            "numerator": mo(x), "denominator": mo(n), "n_effective": mo(ne),
            "design_effect": mo(deff), "n_clusters": mo(mom["n_clusters"]),
            "n_needed_raw": mo(need), "n_needed_of": _denominator_name(k),
            "_keep": np.tile(keep, M), "_family": np.tile(cells["group_var"].to_numpy()
                                                        != OVERALL, M), "_goal": gi})
        frames.append(rows[rows["_keep"]])
    out = pd.concat(frames, ignore_index=True)
    fam = out[out["_family"]].copy()
    fam = adjust_p(fam, ["_goal", "model"])
    out["p_adjusted"] = fam["p_adjusted"].reindex(out.index)
    out["p_adjusted_bh"] = fam["p_adjusted_bh"].reindex(out.index)
    padj = out["p_adjusted"].where(out["_family"], out["p_value"])
    met = padj < out["alpha"]
    not_met = out["conf_high"] < out["bound"]
    out["verdict"] = np.where(met, "met", np.where(not_met, "not_met", "inconclusive"))
    inconclusive = out["verdict"] == "inconclusive"
    out["n_needed"] = out["n_needed_raw"].where(inconclusive)
    out["n_needed_for"] = np.where(inconclusive & out["n_needed"].notna(),
                                   np.where(out["estimate"] > out["bound"], "met", "not_met"),
                                   "")
    out["flag"] = np.where(out["n"] == 0, "empty", np.where(out["estimate"].isna() |
                                                           out["p_value"].isna(),
                                                           "not_estimable", ""))
    out = out.drop(columns=["_keep", "_family", "_goal", "n_needed_raw"])
    return tidy(out, group_cols=GROUP_COLS)


def _denominator_name(metric: str) -> str:
    return {"sensitivity": "positives", "specificity": "negatives",
            "ppv": "called positives", "npv": "called negatives",
            "accuracy": "scans"}[metric]
