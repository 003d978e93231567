"""Lesion-level localization: FROC, CPM, AFROC / wAFROC, and per-lesion sensitivity.

A scan-level call (``score >= threshold``) says a scan holds a tumour; it does not say the
model found it. A scan counted as detected may rest on a false-positive blob beside a
missed tumour. The **lesions table** (``stats.schema.read_lesions``; docs/contracts.md)
keeps one row per reference lesion and per predicted lesion, per model and case, matched
by a hit rule (each reference lesion matched at most once; predictions that hit only
already-matched lesions are duplicates, counted neither as hits nor as false positives,
as LUNA16 and MONAI's FROC count them). From it:

**FROC** (:func:`froc`). Over every threshold ``t`` on the predicted lesions' scores, a
reference lesion is found when its matched prediction scores ``>= t``; the false
positives are the unmatched, non-duplicate predictions scoring ``>= t``. The curve's
points are ``(FP(t) / S, TP(t) / L)`` for every distinct score ``t`` (from the highest
down), preceded by ``(0, 0)``; ``S`` scans, ``L`` reference lesions. The lesion
sensitivity at a mean number ``f`` of false positives per scan is the curve linearly
interpolated in ``f`` (``numpy.interp`` over the points in order, as MONAI's
``compute_froc_score``: between the last point with ``FP / S <= f`` and the next one;
beyond the last point, its sensitivity: flag ``extrapolated``). The CPM (competition
performance metric of LUNA16; MONAI's ``compute_froc_score``) is the mean over the
``fp_per_scan`` rates. It equals MONAI's ``compute_froc_curve_data`` +
``compute_froc_score`` on ``fp_probs`` = the false positives' scores, ``tp_probs`` = the
matched score of each reference lesion (0 when missed), whenever some lesion is missed
and no score is 0 (MONAI drops the lowest of all scores as a threshold, meant to drop
the 0 of missed lesions; with every lesion found it drops the most lenient operating
point as well; here every score is an operating point).

**AFROC and wAFROC figures of merit**, RJafroc's definitions (``UtilFigureOfMerit``,
``FOM = "AFROC"`` and ``"wAFROC"``; Chakraborty 2017): the highest-rated false positive
of each normal scan (a scan without reference lesions; ``-inf`` when it has none) against
each reference lesion's rating (its matched score; ``-inf`` when missed), with
``psi(x, y) = 1`` if ``y > x``, ``1/2`` if equal, ``0`` else:

    AFROC  = sum_{normal n} sum_{lesion l} psi(FP_n, LL_l) / (K1 L)
    wAFROC = sum_{normal n} sum_{abnormal k} sum_{l in k} psi(FP_n, LL_l) / L_k / (K1 K2)

(K1 normal scans, K2 abnormal scans, ``L_k`` lesions of scan ``k``: equal lesion weights,
RJafroc's default). Computed by ranks (sorted false-positive maxima and binary search):
linear in lesions and scans, no loop over pairs.

**Intervals.** A patient-cluster bootstrap: each replicate draws patients with
replacement (``patient_id``; every lesion and scan of a patient moves together) and one
draw serves every model, so differences between models are paired (rows
``cpm_difference`` and ``wafroc_difference``, ``model`` = ``"A - B"``). Replicates are
computed in blocks of several at once (weights, cumulative sums, binary searches over
all events of a block): no loop over replicates, cells or lesions. Percentile intervals;
``std_error`` the replicates' SD.

**Per-lesion metrics** (:func:`lesion_metrics`): lesion sensitivity (reference lesions
hit by a predicted lesion of the table, i.e. at the runner's operating point), by case
subgroups and by the lesion's own size (``lesion_size``: ``diameter_mm``, else the
equivalent-sphere diameter of ``volume_mm3``) and location (``lesion_location``);
false positives per scan; the Dice of detected lesions; scan-level sensitivity beside
it; and the hidden misses: scans called positive (``pred == 1``) whose reference lesions
were all missed, the error the scan-level view hides. Cluster-aware throughout
(:mod:`stats.clustered`: ratio estimators over patients).

References
----------
Chakraborty DP (2017) Observer Performance Methods for Diagnostic Imaging. CRC Press
(RJafroc). Setio AAA et al. (2017) Validation, comparison, and combination of algorithms
for automatic detection of pulmonary nodules in CT images: the LUNA16 challenge. Med Image
Anal 42:1-13. MONAI ``monai.metrics.froc`` (from the CAMELYON16 evaluation code).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as sps

from stats import _validate as _v
from stats._quantile import percentile_interval
from stats._rng import as_generator
from stats.clustered import AUTO, FLAG_DEFF, cluster_cases, clustered_proportions, \
    cluster_moments, design_effect
from stats.detection import GROUP_COLS, case_matrix, normalize_by
from stats.schema import ContractError, read_lesions, tidy

#: the hit rules of the lesion matching (a plan and runner setting): overlap (IoU or Dice)
#: of a predicted and a reference component at least ``min_overlap``, or the predicted
#: component's centroid inside the reference component (MONAI / CAMELYON16)
HIT_RULES = ("iou", "dice", "centroid")
DEFAULT_HIT_RULE = "iou"
DEFAULT_MIN_OVERLAP = 0.1
#: the FROC's false-positive rates (LUNA16's CPM rates, plus 1/8)
FP_PER_SCAN = (0.125, 0.25, 0.5, 1, 2, 4, 8)
#: lesion size bins (equivalent diameter, mm; left-closed) of ``lesion_size``
SIZE_BREAKS = (0.0, 10.0, 20.0, 40.0, math.inf)
SIZE_LABELS = ("<10 mm", "10-19 mm", "20-39 mm", ">=40 mm")
#: the lesion-level axes: derived from the lesions table, not from the cases
LESION_SIZE = "lesion_size"
LESION_LOCATION = "lesion_location"
LESION_AXES = (LESION_SIZE, LESION_LOCATION)
#: hidden misses above this share of the scan-level true positives (lower confidence
#: limit) flag the cell: ``localization_gap``
HIDDEN_MISS_MARGIN = 0.05
FLAG_EXTRAPOLATED = "extrapolated"
FLAG_GAP = "localization_gap"
#: elements (replicates x event positions) of one bootstrap block
_BLOCK_ELEMENTS = 2 ** 22
_KEY_SEP = "\x1f"
#: the cluster column of the lesion-level pseudo-cases
_UNIT = "clinrel_lesion_cluster"

def froc_bootstrap_work(n_boot: int, n_clusters: int, n_lesions: int, n_rates: int = 7, *,
                        setting: str = "n_boot", what: str = "the FROC bootstrap"):
    """Peak memory and time of :func:`froc`'s paired patient-cluster bootstrap: every
    replicate draws the clusters and weights every lesion (the FROC and wAFROC passes run
    over the lesions, sorted once per model), and keeps its statistics per rate.

    Memory: one block of replicate weights over the lesions (about six float64 arrays of
    ``n_boot`` x ``n_lesions`` at most 2**23 elements a block) and the replicate
    statistics. Time: the draws and about ten passes over every replicate's lesions."""
    from stats import limits as _limits

    B, C, L, R = (max(int(v), 1) for v in (n_boot, n_clusters, n_lesions, n_rates))
    block = max(1, min(B, 2 ** 23 // L))
    mem = 6 * 8.0 * block * L + 8.0 * B * (R + 3) * 3
    secs = _limits.SECONDS_PER_DRAW * B * C + 10 * _limits.SECONDS_PER_ELEMENT * B * L
    return _limits.Work(what=what, setting=f"{setting} ({B:,} replicates)", memory_bytes=mem,
                        seconds=secs, detail=f"{B:,} replicates x {C:,} patients x {L:,} lesions")


MSG_NO_MODEL = ("{func}: lesions has no rows for model(s) {models} of cases; give every "
                "model's reference and predicted lesions (the runner writes them: "
                "lesions.parquet)")
MSG_UNLOCALIZED = ("{func}: {n} case(s) with label 1 have no reference lesion in lesions "
                   "(case_id {ids}); every tumour needs its reference lesion (check the "
                   "reference masks), or relabel the case")
MSG_NEGATIVE_LESION = ("{func}: {n} case(s) with label 0 have reference lesions in lesions "
                       "(case_id {ids}); a case with a reference lesion is a positive: fix "
                       "the label or the lesion rows")
MSG_RATES = ("{func}: fp_per_scan must be one or more finite rates > 0 (mean false positives "
             "per scan); got {value}; e.g. (0.125, 0.25, 0.5, 1, 2, 4, 8)")
MSG_LESION_AXIS = ("{func}: by names {column!r}, a lesion-level axis, which needs the lesions "
                   "column {needs!r}; add it or drop the axis")
MSG_PRED = ("{func}: cases needs 'pred' (the scan-level call) for the scan-level and "
            "hidden-miss rows; run stats.scan_level first")


# --------------------------------------------------------------------------- helpers


def hit_rule_text(rule: str = DEFAULT_HIT_RULE, min_overlap: float = DEFAULT_MIN_OVERLAP) -> str:
    """The rule as the lesions table's ``hit_rule`` column writes it: ``"iou>=0.1"``,
    ``"dice>=0.1"`` or ``"centroid"``."""
    if rule not in HIT_RULES:
        raise ContractError(f"hit rule must be one of {', '.join(HIT_RULES)}; got {rule!r}")
    return "centroid" if rule == "centroid" else f"{rule}>={min_overlap:g}"


def equivalent_diameter(volume_mm3) -> np.ndarray:
    """The diameter (mm) of the sphere of that volume: ``(6 V / pi)^(1/3)``."""
    v = np.asarray(volume_mm3, dtype="float64")
    return np.cbrt(6.0 * v / np.pi)


def _size_levels(diameter: np.ndarray) -> pd.Categorical:
    cut = pd.cut(diameter, bins=list(SIZE_BREAKS), labels=list(SIZE_LABELS), right=False)
    return pd.Categorical(cut, categories=list(SIZE_LABELS))


def _rates(fp_per_scan, func: str) -> np.ndarray:
    try:
        r = np.atleast_1d(np.asarray(fp_per_scan, dtype="float64"))
    except (TypeError, ValueError):
        raise ContractError(MSG_RATES.format(func=func, value=repr(fp_per_scan))) from None
    if r.ndim != 1 or not len(r) or not np.isfinite(r).all() or (r <= 0).any():
        raise ContractError(MSG_RATES.format(func=func, value=repr(fp_per_scan)))
    return r


class _Lesions:
    """The lesions of the cases analysed, as arrays aligned with a case matrix.

    ``cm``: :func:`stats.detection.case_matrix` of the cases (case axes of ``by``);
    ``ref_case`` (L,): each reference lesion's case index; ``ref_key`` its
    ``case_id/lesion_id``; ``hit`` (L x M) bool; ``ref_score`` (L x M; NaN when
    missed); ``dice`` (L x M); ``fp_case``, ``fp_score``, ``fp_model`` (false
    positives); ``ref`` the reference rows (one per lesion, first model's) with the
    lesion-level columns.
    """

    def __init__(self, lesions, cases, by, func: str, *, cluster=AUTO, need_pred=False):
        cases = _v.table(cases, func=func, arg="cases", columns=("case_id", "model", "label",
                                                                 "score"))
        if not isinstance(lesions, pd.DataFrame) and not isinstance(lesions, (str, bytes)) \
                and not hasattr(lesions, "__fspath__"):
            _v.table(lesions, func=func, arg="lesions", hint=" or stats.schema.read_lesions(path)")
        lesions = read_lesions(lesions)
        if need_pred and "pred" not in cases.columns:
            raise ContractError(MSG_PRED.format(func=func))
        specs = normalize_by(by)
        self.case_specs = [s for s in specs if not set(s) & set(LESION_AXES)]
        cases, self.cluster = cluster_cases(cases, cluster)
        self.cm = cm = case_matrix(cases, self.case_specs, need_pred=False, cluster=self.cluster)
        # the resampling / variance unit: the patient (the scan when scans are independent)
        self.unit = cm.patient if self.cluster else np.arange(len(cm.case_id))
        models = list(cm.models)
        present = set(lesions["model"].astype(str))
        missing = [m for m in models if str(m) not in present]
        if missing:
            raise ContractError(MSG_NO_MODEL.format(func=func, models=", ".join(map(str, missing))))
        case_index = pd.Series(np.arange(len(cm.case_id)), index=pd.Index(cm.case_id.astype(str)))
        cid = lesions["case_id"].astype(str)
        keep = cid.isin(case_index.index).to_numpy() & lesions["model"].astype(str).isin(
            [str(m) for m in models]).to_numpy()
        les = lesions[keep].reset_index(drop=True)
        les_case = case_index.reindex(les["case_id"].astype(str)).to_numpy()
        model_code = pd.Series(np.arange(len(models)), index=[str(m) for m in models]) \
            .reindex(les["model"].astype(str)).to_numpy()
        is_ref = (les["kind"] == "reference").to_numpy()
        # reference lesions: one per (case, lesion_id), the same for every model
        rkey = (les["case_id"].astype(str) + _KEY_SEP + les["lesion_id"].astype(str)).to_numpy()
        ref_keys, ref_first = np.unique(rkey[is_ref], return_index=True)
        ref_rows = np.flatnonzero(is_ref)[ref_first]
        self.ref = les.iloc[ref_rows].reset_index(drop=True)
        self.ref_case = les_case[ref_rows].astype(np.int64)
        self.ref_key = ref_keys
        L, M = len(ref_keys), len(models)
        label = cm.label
        has_lesion = np.bincount(self.ref_case, minlength=len(label)) > 0
        bad = np.flatnonzero(label & ~has_lesion)
        if len(bad):
            raise ContractError(MSG_UNLOCALIZED.format(func=func, n=len(bad), ids=", ".join(
                map(str, cm.case_id[bad[:5]]))))
        bad = np.flatnonzero(~label & has_lesion)
        if len(bad):
            raise ContractError(MSG_NEGATIVE_LESION.format(func=func, n=len(bad), ids=", ".join(
                map(str, cm.case_id[bad[:5]]))))
        self.has_lesion = has_lesion
        self.n_lesions_of_case = np.bincount(self.ref_case, minlength=len(label)).astype(float)
        # matched predictions: the hit of each reference lesion per model
        pred = ~is_ref
        matched = les["matched"].to_numpy(dtype=object)
        has = pred & pd.notna(matched)
        mkey = (les["case_id"].astype(str) + _KEY_SEP + les["matched"].astype(str)).to_numpy()
        ref_pos = np.searchsorted(ref_keys, mkey[has])
        self.hit = np.zeros((L, M), dtype=bool)
        self.ref_score = np.full((L, M), np.nan)
        self.dice = np.full((L, M), np.nan)
        mc = model_code[has].astype(np.int64)
        self.hit[ref_pos, mc] = True
        self.ref_score[ref_pos, mc] = les["score"].to_numpy()[has]
        self.dice[ref_pos, mc] = les["dice"].to_numpy()[has]
        fp = pred & ~pd.notna(matched) & ~pd.notna(les["duplicate_of"].to_numpy(dtype=object))
        self.fp_case = les_case[fp].astype(np.int64)
        self.fp_score = les["score"].to_numpy()[fp].astype(float)
        self.fp_model = model_code[fp].astype(np.int64)
        self.models = models
        rule = pd.unique(lesions["hit_rule"].dropna().astype(str))
        self.hit_rule = str(rule[0]) if len(rule) else None
        self.specs = specs
        self.func = func

    # ---------------------------------------------------------------- cells
    def axes_of_cases(self) -> np.ndarray:
        """(A x n) the cell of every case on every axis of the case matrix (axis 0:
        overall; each case is in exactly one cell of each axis)."""
        cm = self.cm
        coo = cm.member.tocoo()
        axis = cm.cells["axis"].to_numpy()[coo.row]
        A = int(cm.cells["axis"].max()) + 1
        out = np.zeros((A, len(cm.case_id)), dtype=np.int64)
        out[axis, coo.col] = coo.row
        return out


# --------------------------------------------------------------------------- FROC


def _weights(rng, n_patients: int, size: int) -> np.ndarray:
    """Patient multiplicities of ``size`` cluster-bootstrap replicates (size x P)."""
    idx = rng.integers(0, n_patients, size=(size, n_patients))
    flat = (idx + (np.arange(size, dtype=np.int64) * n_patients)[:, None]).ravel()
    return np.bincount(flat, minlength=size * n_patients).reshape(size, n_patients).astype(
        "float64")


class _Layout:
    """The events of one model laid out per axis: sorted by (cell, score descending), with
    the positions that end a group of tied scores (the curve's points)."""

    def __init__(self, ev_case, ev_score, ev_tp, cell_of_case, G):
        A = cell_of_case.shape[0]
        E = len(ev_case)
        perms, cells = [], []
        for a in range(A):      # a few axes; every event of an axis at once
            cell = cell_of_case[a, ev_case]
            order = np.lexsort((-ev_score, cell))
            perms.append(order)
            cells.append(cell[order])
        self.perm = np.concatenate(perms) if A else np.zeros(0, np.int64)
        cell = np.concatenate(cells) if A else np.zeros(0, np.int64)
        score = ev_score[self.perm]
        nxt_diff = np.ones(len(self.perm), dtype=bool)
        if len(self.perm) > 1:
            nxt_diff[:-1] = (cell[1:] != cell[:-1]) | (score[1:] != score[:-1])
        # a segment: one cell (cells of different axes have different ids)
        seg_start = np.zeros(len(self.perm), dtype=np.int64)
        if len(self.perm):
            new = np.ones(len(self.perm), dtype=bool)
            new[1:] = cell[1:] != cell[:-1]
            starts = np.flatnonzero(new)
            seg_start = starts[np.cumsum(new) - 1]
        self.seg_start = seg_start
        self.case = ev_case[self.perm]
        self.tp = ev_tp[self.perm]
        self.ge = np.flatnonzero(nxt_diff)                 # the points (group ends)
        self.ge_cell = cell[self.ge]
        counts = np.bincount(self.ge_cell, minlength=G)
        self.first_pt = np.r_[0, np.cumsum(counts)[:-1]]   # points of a cell are contiguous
        self.n_pt = counts
        self.G = G
        #: the model's AFROC layout (:class:`_AfrocLayout`), built by the first call
        self.afroc = None


def _curve_at(lay: _Layout, w_case: np.ndarray, n_scan: np.ndarray, n_les: np.ndarray,
              rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lesion sensitivity at each rate (R x G x X) and the curve's last FP rate (R x G)
    for replicate case weights ``w_case`` (R x n); ``n_scan``, ``n_les`` (R x G)."""
    R = w_case.shape[0]
    w = w_case[:, lay.case]                                 # R x positions
    tp = np.where(lay.tp, w, 0.0)
    fp = w - tp
    ctp, cfp = np.cumsum(tp, axis=1), np.cumsum(fp, axis=1)
    base = lay.seg_start - 1
    has = base >= 0
    if len(base):
        ctp = ctp - np.where(has, ctp[:, np.maximum(base, 0)], 0.0)
        cfp = cfp - np.where(has, cfp[:, np.maximum(base, 0)], 0.0)
    Tg, Fg = ctp[:, lay.ge], cfp[:, lay.ge]                 # R x points
    G, X = lay.G, len(rates)
    first, npt = lay.first_pt, lay.n_pt
    last = np.where(npt > 0, first + npt - 1, 0)
    f_end = np.where(npt[None, :] > 0, Fg[:, last] if Fg.shape[1] else 0.0, 0.0)   # R x G
    out = np.full((R, G, X), np.nan)
    Fstar_all = rates[None, None, :] * n_scan[:, :, None]                           # R x G x X
    zero = np.zeros((R, 1))
    for j in range(X):          # a handful of rates
        Fstar = Fstar_all[:, :, j]
        le = Fg <= Fstar[:, lay.ge_cell]                    # R x points
        C = np.concatenate([zero, np.cumsum(le, axis=1)], axis=1)
        k = C[:, first + npt] - C[:, first]                 # points with F <= F*, R x G
        k = k.astype(np.int64)
        lo_idx = np.clip(first[None, :] + k - 1, 0, max(Fg.shape[1] - 1, 0))
        hi_idx = np.clip(first[None, :] + k, 0, max(Fg.shape[1] - 1, 0))
        if Fg.shape[1]:
            T_lo = np.where(k > 0, np.take_along_axis(Tg, lo_idx, axis=1), 0.0)
            F_lo = np.where(k > 0, np.take_along_axis(Fg, lo_idx, axis=1), 0.0)
            T_hi = np.take_along_axis(Tg, hi_idx, axis=1)
            F_hi = np.take_along_axis(Fg, hi_idx, axis=1)
        else:
            T_lo = F_lo = T_hi = F_hi = np.zeros((R, G))
        inside = k < npt[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            s_lo, s_hi = T_lo / n_les, T_hi / n_les
            f_lo, f_hi = F_lo / n_scan, F_hi / n_scan
            val = np.where(inside, s_lo + (rates[j] - f_lo) * ((s_hi - s_lo) / (f_hi - f_lo)),
                           s_lo)
        out[:, :, j] = np.where((n_les > 0) & (n_scan > 0), val, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        f_end = np.where(n_scan > 0, f_end / n_scan, np.nan)
    return out, f_end


class _AfrocLayout:
    """What the AFROC / wAFROC of one model needs that does not depend on the replicate
    weights, built once (not per block of replicates): per axis, the normal cases sorted by
    (cell, rank of their highest false positive), each lesion's positions in that order
    (first of its cell, first tied, first above) and the cell indicator matrices.
    ``normal_fp`` the highest false-positive score of each normal case (-inf: none),
    ``ll`` each reference lesion's rating (-inf: missed)."""

    def __init__(self, normal_fp: np.ndarray, ll: np.ndarray, ref_case: np.ndarray,
                 normal_case: np.ndarray, cell_of_case: np.ndarray, n_les_case: np.ndarray,
                 G: int):
        vals, inv = np.unique(np.r_[normal_fp, ll], return_inverse=True)
        K = len(vals) + 1
        rn, rl = inv[:len(normal_fp)], inv[len(normal_fp):]
        self.normal_case, self.ref_case = normal_case, ref_case
        self.inv_lk = 1.0 / np.maximum(n_les_case[ref_case], 1)
        self.abn = abn = np.flatnonzero(n_les_case > 0)
        self.axes = []
        for a in range(cell_of_case.shape[0]):       # a few axes
            cn = cell_of_case[a, normal_case]
            cl = cell_of_case[a, ref_case]
            key_n = cn.astype(np.int64) * K + rn
            order = np.argsort(key_n, kind="stable")
            keys = key_n[order]
            key_l = cl.astype(np.int64) * K + rl
            lo = np.searchsorted(keys, key_l, "left")
            hi = np.searchsorted(keys, key_l, "right")
            st = np.searchsorted(keys, cl.astype(np.int64) * K, "left")
            S_l = sparse.csr_matrix((np.ones(len(cl)), (np.arange(len(cl)), cl)),
                                    shape=(len(cl), G))
            S_n = sparse.csr_matrix((np.ones(len(cn)), (np.arange(len(cn)), cn)),
                                    shape=(len(cn), G))
            S_k = sparse.csr_matrix((np.ones(len(abn)), (np.arange(len(abn)),
                                                         cell_of_case[a, abn])),
                                    shape=(len(abn), G))
            self.axes.append((order, lo, hi, st, S_l, S_n, S_k))
        self.G = G


def _afroc(lay: _AfrocLayout, w_case: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AFROC and wAFROC figures of merit (R x G) for replicate case weights ``w_case``
    (R x n): per lesion, the weight of the normal cases of its cell whose highest false
    positive is rated below it plus half of those tied (cumulative sums over the sorted
    normals), summed per cell."""
    R, G = w_case.shape[0], lay.G
    w_n_all = w_case[:, lay.normal_case]                    # R x normals
    w_l_all = w_case[:, lay.ref_case]                       # R x lesions
    num_a = np.zeros((R, G))
    num_w = np.zeros((R, G))
    den_n = np.zeros((R, G))
    den_l = np.zeros((R, G))
    den_k = np.zeros((R, G))
    for order, lo, hi, st, S_l, S_n, S_k in lay.axes:       # a few axes
        Cw = np.concatenate([np.zeros((R, 1)), np.cumsum(w_n_all[:, order], axis=1)], axis=1)
        less = Cw[:, lo] - Cw[:, st]
        eq = Cw[:, hi] - Cw[:, lo]
        A_l = less + 0.5 * eq                              # R x lesions
        num_a += np.asarray((w_l_all * A_l) @ S_l)
        num_w += np.asarray((w_l_all * A_l * lay.inv_lk[None, :]) @ S_l)
        den_n += np.asarray(w_n_all @ S_n)
        den_l += np.asarray(w_l_all @ S_l)
        den_k += np.asarray(w_case[:, lay.abn] @ S_k)
    with np.errstate(invalid="ignore", divide="ignore"):
        afroc = np.where((den_n > 0) & (den_l > 0), num_a / (den_n * den_l), np.nan)
        wafroc = np.where((den_n > 0) & (den_k > 0), num_w / (den_n * den_k), np.nan)
    return afroc, wafroc


def _model_events(d: _Lesions, m: int):
    """Events of model ``m``: the hits (reference lesions found: their matched score) and
    the false positives, as (case, score, is_tp) arrays."""
    hit = d.hit[:, m]
    fpm = d.fp_model == m
    ev_case = np.r_[d.ref_case[hit], d.fp_case[fpm]]
    ev_score = np.r_[d.ref_score[hit, m], d.fp_score[fpm]]
    ev_tp = np.r_[np.ones(int(hit.sum()), bool), np.zeros(int(fpm.sum()), bool)]
    return ev_case, ev_score, ev_tp


def _normal_maxima(d: _Lesions, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The normal cases and the highest false-positive score on each (-inf: none)."""
    normal = np.flatnonzero(~d.has_lesion)
    best = np.full(len(d.has_lesion), -np.inf)
    fpm = d.fp_model == m
    np.maximum.at(best, d.fp_case[fpm], d.fp_score[fpm])
    return normal, best[normal]


def _froc_all(d: _Lesions, w_case: np.ndarray, rates: np.ndarray, cell_of_case, layouts):
    """Every model's curve, CPM, AFROC, wAFROC (each R x G (x X)) for case weights."""
    cm = d.cm
    G = cm.n_cells
    member = cm.member                                       # G x n
    n_scan = np.asarray(member @ w_case.T).T                 # R x G
    les_w = np.zeros_like(w_case)
    les_w += w_case * d.n_lesions_of_case[None, :]
    n_les = np.asarray(member @ les_w.T).T                   # R x G
    out = []
    for m in range(len(d.models)):
        lay = layouts[m]
        sens, f_end = _curve_at(lay, w_case, n_scan, n_les, rates)
        if lay.afroc is None:           # once per model, not per block of replicates
            normal, fpmax = _normal_maxima(d, m)
            ll = np.where(d.hit[:, m], d.ref_score[:, m], -np.inf)
            lay.afroc = _AfrocLayout(fpmax, ll, d.ref_case, normal, cell_of_case,
                                     d.n_lesions_of_case, G)
        af, waf = _afroc(lay.afroc, w_case)
        out.append({"sens": sens, "cpm": sens.mean(axis=2), "afroc": af, "wafroc": waf,
                    "f_end": f_end})
    return out, n_scan, n_les


def froc(lesions, cases, *, fp_per_scan: Sequence[float] = FP_PER_SCAN, by=None,
         n_boot: int | None = None, seed=None, conf_level: float = 0.95,
         cluster: str | None = AUTO) -> pd.DataFrame:
    """Free-response ROC: lesion sensitivity at mean false positives per scan, the CPM,
    and RJafroc's AFROC and wAFROC figures of merit, per model and case subgroup.

    Parameters
    ----------
    lesions : DataFrame or path
        The lesions table (``stats.schema.read_lesions``; docs/contracts.md#lesions).
        Lesions of cases not in ``cases`` (e.g. the validation split) are left out.
    cases : DataFrame
        The cases analysed (``case_id, model, label, score``; ``patient_id`` the
        cluster). A case with label 1 needs a reference lesion, one with label 0 none.
    fp_per_scan : sequence of float
        The false-positive rates (> 0) of the curve; the CPM is the mean over them.
    by : column names or tuples of names, optional
        Case subgroup axes (cells of scans: false positives per scan and lesions within
        the cell's scans); overall always.
    n_boot : int, optional
        Patient-cluster bootstrap replicates (module docstring); None: point estimates.
    seed : int or Generator, optional
        Seed of the replicates (``stats._rng.as_generator``).
    conf_level : float
        Level of the percentile intervals.
    cluster : str or None
        The resampling unit: ``"auto"`` (``patient_id`` when a patient has several scans,
        else the scan), a column, or None (scans).

    Returns
    -------
    DataFrame
        Tidy (``stats.schema.tidy``), ``estimand``, ``model``, ``group_var``,
        ``group_level``: ``lesion_sensitivity`` (one row per rate, column
        ``fp_per_scan``), ``cpm``, ``afroc``, ``wafroc``; with ``n_boot`` also
        ``cpm_difference`` and ``wafroc_difference`` per model pair (``model`` "A - B",
        paired replicates). ``n`` scans, ``n_pos`` reference lesions, ``n_neg`` normal
        scans of the cell; ``estimate``; ``std_error`` (bootstrap SD), ``conf_low``,
        ``conf_high`` (percentile; NaN without ``n_boot``); ``method``
        (``froc-monai`` / ``rjafroc`` with ``;bootstrap-percentile``); ``flag``
        (``empty``: no scans; ``not_estimable``: no lesions, or no normal scans for the
        AFROC; ``extrapolated``: the rate lies beyond the curve's last point, the
        sensitivity is the last point's); extra ``fp_per_scan`` (NaN off the curve),
        ``max_fp_per_scan`` (the curve's last rate: every predicted lesion counted),
        ``n_clusters`` (patients).

    Notes
    -----
    Formulas in the module docstring. The curve equals MONAI's
    ``compute_froc_curve_data`` / ``compute_froc_score`` (tests/stats/test_localization.py,
    1e-12) and the figures of merit RJafroc's ``FOM_AFROC`` / ``FOM_wAFROC`` C++ code
    recomputed pair by pair in the test (1e-12).
    """
    func = "froc"
    rates = _rates(fp_per_scan, func)
    level = _v.level(conf_level, func=func)
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", minimum=1, optional=True)
    d = _Lesions(lesions, cases, by, func, cluster=cluster)
    cm = d.cm
    G, M, n = cm.n_cells, len(d.models), len(cm.case_id)
    cell_of_case = d.axes_of_cases()
    layouts = [_Layout(*_model_events(d, m), cell_of_case, G) for m in range(M)]
    point, n_scan, n_les = _froc_all(d, np.ones((1, n)), rates, cell_of_case, layouts)
    reps = None
    if n_boot:
        rng = as_generator(seed)
        P = int(d.unit.max()) + 1 if n else 0
        width = max(1, max(len(lay.perm) for lay in layouts) + n)
        size = max(1, min(n_boot, _BLOCK_ELEMENTS // width))
        parts = []
        for start in range(0, n_boot, size):        # blocks of replicates, not replicates
            b = min(size, n_boot - start)
            w_case = _weights(rng, P, b)[:, d.unit]
            parts.append(_froc_all(d, w_case, rates, cell_of_case, layouts)[0])
        reps = [{k: np.concatenate([p[m][k] for p in parts], axis=0) for k in parts[0][m]}
                for m in range(M)]
    return _froc_table(d, point, reps, rates, n_scan[0], n_les[0], level, n_boot)


def _froc_table(d: _Lesions, point, reps, rates, n_scan, n_les, level, n_boot) -> pd.DataFrame:
    cm = d.cm
    G, M, X = cm.n_cells, len(d.models), len(rates)
    n_neg = np.asarray(cm.member @ (~d.has_lesion).astype(float)).ravel()
    clusters = _clusters(cm, d.unit)
    frames = []
    cells = cm.cells
    boot = "bootstrap-percentile"

    def block(estimand, model, est, rep, method, extra):
        lo = hi = se = np.full(est.shape, np.nan)
        if rep is not None:
            lo, hi = percentile_interval(rep, level)
            with np.errstate(invalid="ignore"):
                se = np.nanstd(rep, axis=0, ddof=1) if rep.shape[0] > 1 else np.full(est.shape, np.nan)
        flag = np.where(n_scan == 0, "empty", np.where(np.isnan(est), "not_estimable", ""))
        flag = flag.astype(object)
        for k, v in extra.pop("_flags", {}).items():
            flag = np.where(v & (flag == ""), k, np.where(v, flag + ";" + k, flag)).astype(object)
        frames.append(pd.DataFrame({
            "estimand": estimand, "model": model,
            "group_var": cells["group_var"].to_numpy(), "group_level": cells["group_level"].to_numpy(),
            "estimate": est, "std_error": se, "conf_low": lo, "conf_high": hi,
            "conf_level": level, "n": n_scan, "n_pos": n_les, "n_neg": n_neg,
            "method": method + (f";{boot}" if rep is not None else ""), "flag": flag,
            "n_clusters": clusters, **extra}))

    for m, name in enumerate(d.models):
        p = point[m]
        r = reps[m] if reps is not None else None
        f_end = p["f_end"][0]
        for j, x in enumerate(rates):
            block("lesion_sensitivity", name, p["sens"][0, :, j],
                  None if r is None else r["sens"][:, :, j], "froc-monai",
                  {"fp_per_scan": x, "max_fp_per_scan": f_end,
                   "_flags": {FLAG_EXTRAPOLATED: (x > f_end) & (n_les > 0)}})
        block("cpm", name, p["cpm"][0], None if r is None else r["cpm"], "froc-monai",
              {"fp_per_scan": np.nan, "max_fp_per_scan": f_end,
               "_flags": {FLAG_EXTRAPOLATED: (rates.max() > f_end) & (n_les > 0)}})
        for e in ("afroc", "wafroc"):
            block(e, name, p[e][0], None if r is None else r[e], "rjafroc",
                  {"fp_per_scan": np.nan, "max_fp_per_scan": np.nan})
    if reps is not None and M > 1:
        for a in range(M):
            for b in range(a + 1, M):
                for e in ("cpm", "wafroc"):
                    block(f"{e}_difference", f"{d.models[a]} - {d.models[b]}",
                          point[a][e][0] - point[b][e][0], reps[a][e] - reps[b][e],
                          "froc-monai" if e == "cpm" else "rjafroc",
                          {"fp_per_scan": np.nan, "max_fp_per_scan": np.nan})
    out = pd.concat(frames, ignore_index=True)
    out["hit_rule"] = d.hit_rule if d.hit_rule is not None else ""
    return tidy(out, group_cols=GROUP_COLS)


def _clusters(cm, unit) -> np.ndarray:
    """Clusters (patients) with a scan in each cell."""
    from stats.clustered import clusters_per_cell

    return clusters_per_cell(cm.member, unit)


# --------------------------------------------------------------------------- per lesion


def _lesion_matrix(d: _Lesions, specs) -> tuple:
    """The case matrix of the reference lesions (one pseudo-case per lesion, label 1, the
    case's columns and the lesion-level axes), for the lesion-level rows."""
    cm = d.cm
    cov = cm.covariates.iloc[d.ref_case].reset_index(drop=True)
    ref = d.ref
    diam = ref["diameter_mm"].to_numpy(dtype=float)
    vol = ref["volume_mm3"].to_numpy(dtype=float)
    diam = np.where(np.isnan(diam), equivalent_diameter(vol), diam)
    cov[LESION_SIZE] = _size_levels(diam)
    cov[LESION_LOCATION] = ref["location"].to_numpy(dtype=object)
    for s in specs:
        for c in s:
            if c == LESION_SIZE and np.isnan(diam).all() and len(diam):
                raise ContractError(MSG_LESION_AXIS.format(func=d.func, column=c,
                                                           needs="volume_mm3 or diameter_mm"))
            if c == LESION_LOCATION and ref["location"].isna().all() and len(ref):
                raise ContractError(MSG_LESION_AXIS.format(func=d.func, column=c, needs="location"))
    M = len(d.models)
    key = np.asarray(d.ref_key, dtype=object)
    # the cluster of a lesion: its patient (its scan when scans are independent)
    unit = np.asarray([f"u{u}" for u in d.unit[d.ref_case]], dtype=object)
    frame = pd.concat([cov.assign(case_id=key, model=m, label=1,
                                  score=d.hit[:, j].astype(float), **{_UNIT: unit})
                       for j, m in enumerate(d.models)], ignore_index=True)
    for col in ("pred", "threshold", "threshold_source"):
        if col in frame.columns:
            frame = frame.drop(columns=col)
    lm = case_matrix(frame, specs, need_pred=False, cluster=_UNIT, not_applicable=None)
    # pseudo-cases come back in the frame's first-model order: the lesions' order
    return lm


def _ratio_rows(mom_member, cluster, num, den, level):
    """A mean ``sum num / sum den`` per cell x model with the cluster ratio SE and a
    log-scale interval (t on clusters - 1 df; for non-negative means)."""
    mom = cluster_moments(mom_member, cluster, num, den)
    de = design_effect(mom, level)
    est, se = de["estimate"], de["std_error"]
    C = mom["n_clusters"]
    q = sps.t.ppf((1 + level) / 2, np.maximum(C - 1, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = q * se / est
        lo, hi = est * np.exp(-half), est * np.exp(half)
    ok = (est > 0) & np.isfinite(se) & (C > 1)
    return {"estimate": est, "std_error": np.where(C > 1, se, np.nan),
            "conf_low": np.where(ok, lo, np.nan), "conf_high": np.where(ok, hi, np.nan),
            "numerator": mom["x"], "denominator": mom["n"], "n_clusters": C}


def _logit_rows(member, cluster, num, den, level):
    """A mean of values in [0, 1] (Dice) per cell x model: the cluster ratio SE and a
    logit-scale interval (t on clusters - 1 df)."""
    mom = cluster_moments(member, cluster, num, den)
    de = design_effect(mom, level)
    est, se = de["estimate"], de["std_error"]
    C = mom["n_clusters"]
    q = sps.t.ppf((1 + level) / 2, np.maximum(C - 1, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        lg = np.log(est / (1 - est))
        half = q * se / (est * (1 - est))
        lo, hi = 1 / (1 + np.exp(-(lg - half))), 1 / (1 + np.exp(-(lg + half)))
    ok = (est > 0) & (est < 1) & np.isfinite(se) & (C > 1)
    return {"estimate": est, "std_error": np.where(C > 1, se, np.nan),
            "conf_low": np.where(ok, lo, np.nan), "conf_high": np.where(ok, hi, np.nan),
            "numerator": mom["x"], "denominator": mom["n"], "n_clusters": C}


def lesion_metrics(lesions, cases, *, by=None, ci: str = "wilson", conf_level: float = 0.95,
                   small_n: int = 10, hidden_miss_margin: float = HIDDEN_MISS_MARGIN,
                   cluster: str | None = AUTO) -> pd.DataFrame:
    """Per-lesion sensitivity by lesion size, location and case subgroup; false positives
    per scan; the Dice of detected lesions; scan-level sensitivity beside it; and the
    hidden misses (scans called positive whose tumour was missed).

    Parameters
    ----------
    lesions : DataFrame or path
        The lesions table (``stats.schema.read_lesions``). A reference lesion is detected
        when a prediction of the table is matched to it (the runner's operating point).
    cases : DataFrame
        The cases analysed, with ``pred`` (the scan-level call: ``stats.scan_level``).
    by : column names or tuples of names
        Axes: case columns (``phase``, ``site``, a bin...) and the lesion-level axes
        ``lesion_size`` (``SIZE_LABELS`` of ``diameter_mm``, else of the
        equivalent-sphere diameter of ``volume_mm3``) and ``lesion_location`` (the
        lesions' ``location``), alone or crossed (``("lesion_size", "phase")``).
        Scan-level rows (``scan_sensitivity``, ``fp_per_scan``, ``hidden_miss``) exist for
        the case axes only.
    ci : str
        The proportion interval (``wilson``, ``clopper-pearson``, ``jeffreys``), at the
        effective sample size of the patient clusters (Korn & Graubard).
    conf_level, small_n : float, int
        Interval level; denominators below ``small_n`` are flagged ``small_n``.
    hidden_miss_margin : float
        A case cell whose hidden-miss share's lower confidence limit exceeds this margin is
        flagged ``localization_gap`` (its hidden-miss and lesion-sensitivity rows).
    cluster : str or None
        ``"auto"``: ``patient_id`` when a patient has several scans (lesions of one
        patient are clustered then too); a column; None.

    Returns
    -------
    DataFrame
        Tidy, ``estimand``, ``model``, ``group_var``, ``group_level``:

        * ``lesion_sensitivity``: reference lesions detected / reference lesions
          (``n``, ``n_pos`` lesions; ``numerator`` detected);
        * ``lesion_dice``: mean Dice of the detected lesions' matched pairs (``n``
          detected lesions); ratio SE over clusters, logit-scale t interval;
        * ``scan_sensitivity``: scans called positive / positive scans (as
          ``stats.subgroup_metrics``);
        * ``hidden_miss``: scans called positive with every reference lesion missed /
          scans called positive among the positives (``numerator`` the count);
        * ``fp_per_scan``: false-positive lesions / scans (``n`` scans); ratio SE over
          clusters, log-scale t interval.

        ``method`` (``wilson`` or ``wilson-cluster``, ``ratio-log-t``,
        ``ratio-logit-t``); ``flag`` (``empty``, ``not_estimable``, ``small_n``,
        ``deff_not_estimable``, ``localization_gap``); extra ``numerator``,
        ``denominator``, ``n_clusters``, ``design_effect``, ``n_effective`` (proportions).

    Notes
    -----
    Proportions: :func:`stats.clustered.clustered_proportions` (validated against R's
    survey). Means: the ratio estimator ``sum y / sum m`` over clusters with
    ``V = C / (C - 1) sum (y_c - R m_c)^2 / (sum m)^2`` (R: ``survey::svyratio`` with
    ``ids = ~patient_id``; tests/stats/test_localization.py recomputes it).
    """
    func = "lesion_metrics"
    level = _v.level(conf_level, func=func)
    small_n = _v.whole(small_n, func=func, arg="small_n", minimum=0)
    margin = _v.number(hidden_miss_margin, func=func, arg="hidden_miss_margin", lo=0, hi=1,
                       closed="left")
    from stats.intervals import PROPORTION_METHODS

    if ci not in PROPORTION_METHODS:
        raise ContractError(f"{func}: ci must be one of {', '.join(PROPORTION_METHODS)}; got {ci!r}")
    d = _Lesions(lesions, cases, by, func, cluster=cluster, need_pred=True)
    cm = d.cm
    M = len(d.models)
    cases_df = cases
    # scan-level: pred per case x model
    pred = np.zeros((len(cm.case_id), M))
    ci_idx = pd.Series(np.arange(len(cm.case_id)), index=pd.Index(cm.case_id.astype(str)))
    mi = pd.Series(np.arange(M), index=[str(m) for m in d.models])
    rows = ci_idx.reindex(cases_df["case_id"].astype(str)).to_numpy()
    cols = mi.reindex(cases_df["model"].astype(str)).to_numpy()
    pred[rows, cols] = cases_df["pred"].to_numpy(dtype=float)
    y = cm.label.astype(float)[:, None] * np.ones((1, M))
    found_case = np.zeros((len(cm.case_id), M))
    np.add.at(found_case, d.ref_case, d.hit.astype(float))
    hidden = (pred == 1) & (y == 1) & (found_case == 0)
    tp_scan = (pred == 1) & (y == 1)
    n_fp = np.zeros((len(cm.case_id), M))
    np.add.at(n_fp, (d.fp_case, d.fp_model), 1.0)
    method_p = ci + ("-cluster" if d.cluster else "")
    counts_cases = {"n": np.asarray(cm.member.sum(axis=1)).ravel(),
                    "n_pos": cm.member @ cm.label.astype(float)}
    counts_cases["n_neg"] = counts_cases["n"] - counts_cases["n_pos"]
    frames = []

    def emit(estimand, matrix, values, counts, method, extra=None):
        G = matrix.n_cells
        cols = {}
        for k, v in values.items():
            cols[k] = np.asarray(v, dtype=float).T.ravel()
        den = cols["denominator"]
        flag = np.where(np.tile(counts["n"], M) == 0, "empty",
                        np.where(den == 0, "not_estimable",
                                 np.where(den < small_n, "small_n", ""))).astype(object)
        if "not_estimable" in values:
            ne = np.asarray(values["not_estimable"], bool).T.ravel()
            flag = np.where(ne, np.where(flag == "", FLAG_DEFF, flag + ";" + FLAG_DEFF), flag)
            cols.pop("not_estimable")
        frames.append(pd.DataFrame({
            "estimand": estimand,
            "model": np.repeat(np.array(d.models, dtype=object), G),
            "group_var": np.tile(matrix.cells["group_var"].to_numpy(), M),
            "group_level": np.tile(matrix.cells["group_level"].to_numpy(), M),
            "n": np.tile(counts["n"], M), "n_pos": np.tile(counts["n_pos"], M),
            "n_neg": np.tile(counts["n_neg"], M), "conf_level": level,
            "method": method, "flag": flag, **cols, **(extra or {})}))

    # lesion-level rows (every axis: case columns carried to the lesions, lesion axes)
    lm = _lesion_matrix(d, d.specs)
    L = len(d.ref_key)
    # the lesion matrix's pseudo-cases are in d.ref_key order (first-model rows)
    order = pd.Series(np.arange(L), index=pd.Index(np.asarray(d.ref_key, dtype=object))) \
        .reindex(lm.case_id).to_numpy()
    hit = d.hit[order].astype(float)
    dice = np.nan_to_num(d.dice[order]) * hit
    ones = np.ones((L, M))
    lcounts = {"n": np.asarray(lm.member.sum(axis=1)).ravel()}
    lcounts["n_pos"], lcounts["n_neg"] = lcounts["n"], np.zeros_like(lcounts["n"])
    sens = clustered_proportions(lm.member, lm.patient, hit, ones, method=ci, conf_level=level)
    emit("lesion_sensitivity", lm, {k: sens[k] for k in (
        "estimate", "std_error", "conf_low", "conf_high", "numerator", "denominator",
        "n_clusters", "design_effect", "n_effective", "not_estimable")}, lcounts, method_p)
    dr = _logit_rows(lm.member, lm.patient, dice, hit, level)
    emit("lesion_dice", lm, dr, lcounts, "ratio-logit-t")
    # scan-level rows (case axes)
    sc = clustered_proportions(cm.member, d.unit, pred * y, y, method=ci, conf_level=level)
    emit("scan_sensitivity", cm, {k: sc[k] for k in (
        "estimate", "std_error", "conf_low", "conf_high", "numerator", "denominator",
        "n_clusters", "design_effect", "n_effective", "not_estimable")}, counts_cases, method_p)
    hm = clustered_proportions(cm.member, d.unit, hidden.astype(float),
                               tp_scan.astype(float), method=ci, conf_level=level)
    emit("hidden_miss", cm, {k: hm[k] for k in (
        "estimate", "std_error", "conf_low", "conf_high", "numerator", "denominator",
        "n_clusters", "design_effect", "n_effective", "not_estimable")}, counts_cases, method_p)
    fr = _ratio_rows(cm.member, d.unit, n_fp, np.ones_like(n_fp), level)
    emit("fp_per_scan", cm, fr, counts_cases, "ratio-log-t")
    out = pd.concat(frames, ignore_index=True)
    # the localization gap: hidden misses above the margin (lower limit), on the cell's
    # hidden-miss and lesion-sensitivity rows
    keys = ["model", "group_var", "group_level"]
    hmr = out[out["estimand"] == "hidden_miss"]
    gap = hmr.loc[hmr["conf_low"] > margin, keys]
    if len(gap):
        k = out[keys].astype(str).agg(_KEY_SEP.join, axis=1)
        gk = set(gap.astype(str).agg(_KEY_SEP.join, axis=1))
        on = k.isin(gk).to_numpy() & out["estimand"].isin(["hidden_miss",
                                                           "lesion_sensitivity"]).to_numpy()
        f = out["flag"].to_numpy(dtype=object)
        out["flag"] = np.where(on, np.where(f == "", FLAG_GAP, f + ";" + FLAG_GAP), f)
    out["hit_rule"] = d.hit_rule if d.hit_rule is not None else ""
    return tidy(out, group_cols=GROUP_COLS)
