"""Paired cluster bootstrap for count-based detection metrics.

One resampling of clusters (``patient_id``; optionally within strata such as ``site``) is
shared by every model and every subgroup cell, so differences between models and between
subgroups are paired. Each replicate is an exact cluster bootstrap: ``n_h`` cluster
indices drawn with replacement in each stratum ``h``. Because sensitivity, specificity,
PPV, NPV, accuracy and F1 are functions of cell counts, a replicate never touches rows:

    replicate counts (B x S) = cluster multiplicities W (B x clusters) @ K (clusters x S)

where ``K`` holds, per cluster, the number of positives and negatives in each cell and the
true and false positive calls of each model in each cell. ``W`` is built per block of
replicates with ``np.bincount`` on the drawn indices; the product is taken as the sparse
product ``(K' W')'`` (``K`` has about 5% nonzeros at 10 models and 57 cells: a cluster
sits in one cell per axis, and only its positive calls fill the tp/fp columns), about a
tenth of the multiply-adds of the dense product. Every entry and partial sum is an integer
below 2**24, so the float32 product is exact in any summation order: the same counts as
a dense BLAS product. The test suite shows this equals resampling the rows themselves
with the same draws, count for count (``tests/stats/test_bootstrap.py``).

Replicate blocks are independent given their child seeds (``stats._rng.spawn``) and have a
size fixed by the data, so running them on a Dask cluster (``scheduler=``) gives the
same numbers as running them here.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as sps

from stats import limits as _limits
from stats import _validate as _v
from stats._parallel import map_blocks
from stats._quantile import column_quantiles, percentile_interval
from stats._rng import spawn
from stats.detection import (GROUP_COLS, METRICS, PROPORTIONS, CaseMatrix, case_matrix,
                             metric_fractions, ratio)
from stats._linalg import clean_variance
from stats.intervals import proportion_limits
from stats.limits import check
from stats.schema import ContractError, tidy

CIMethod = Literal["percentile", "bca", "wilson"]
CI_METHODS = ("percentile", "bca", "wilson")
#: the "wilson" interval applies to the proportions (stats.detection.PROPORTIONS) only
BOOT_METRICS = METRICS
#: elements (replicates x clusters) of one block (its W is float32: 256 MiB, more only above
#: 262,144 clusters, where _MIN_BLOCK_REPLICATES takes over: 1 GiB at a million clusters);
#: about 1,260 replicates at 53,000 clusters. Block sizes fix which child generator draws
#: which replicate, so changing them changes the numbers (they were chosen for the dense
#: BLAS product that the sparse one replaced, bench/README.md)
_BLOCK_ELEMENTS = 2 ** 26
#: a block never has fewer replicates than this, however many clusters (the dense W @ K
#: product cost more per element when W had few rows; see _BLOCK_ELEMENTS)
_MIN_BLOCK_REPLICATES = 256
#: elements of one draw chunk inside a block (bounds the int64 bincount temporaries)
_DRAW_ELEMENTS = 2 ** 24

MSG_STRATA = ("strata: cluster(s) {clusters} appear in more than one '{col}' stratum; a "
              "cluster must sit in one stratum; drop strata or fix the cluster ids")
MSG_NBOOT = "n_boot must be a positive integer; got {n!r}"


@dataclass
class BootCounts:
    """Cluster-level sufficient statistics of a :class:`CaseMatrix`.

    ``K`` (clusters x S, float32): columns ``[n_pos (G), n_neg (G), tp (M x G), fp (M x G)]``
    (model-major: the tp column of model ``m`` in cell ``g`` is ``2G + m G + g``);
    ``strata`` (clusters,) codes; ``G`` cells, ``M`` models.
    """

    K: np.ndarray
    strata: np.ndarray
    G: int
    M: int

    @property
    def n_clusters(self) -> int:
        return self.K.shape[0]

    def sparse_transpose(self) -> sparse.csc_matrix:
        """``K'`` (S x clusters) as a CSC matrix: one column of counts per cluster."""
        return sparse.csr_matrix(self.K).T.tocsc()

    def block_size(self, n_boot: int) -> int:
        """Replicates per block: fixed by the data only (so Dask runs match local ones)."""
        per_block = max(_MIN_BLOCK_REPLICATES, _BLOCK_ELEMENTS // max(self.n_clusters, 1))
        return int(max(1, min(n_boot, per_block)))

    def unpack(self, R: np.ndarray) -> dict[str, np.ndarray]:
        """tp, fp, fn, tn as (..., G, M) arrays from count rows R (..., S)."""
        G, M = self.G, self.M
        lead = R.shape[:-1]
        n_pos = R[..., :G, None].astype("float64")
        n_neg = R[..., G:2 * G, None].astype("float64")
        tp = R[..., 2 * G:2 * G + G * M].reshape(*lead, M, G).swapaxes(-1, -2).astype("float64")
        fp = R[..., 2 * G + G * M:].reshape(*lead, M, G).swapaxes(-1, -2).astype("float64")
        return {"tp": tp, "fp": fp, "fn": n_pos - tp, "tn": n_neg - fp}


def boot_counts(cm: CaseMatrix, *, strata: str | None = None) -> BootCounts:
    """Aggregate a case matrix to cluster-level counts (see :class:`BootCounts`)."""
    if cm.pred is None:
        raise ContractError("cases: no 'pred' column; run stats.scan_level first")
    n = len(cm.label)
    n_cl = int(cm.patient.max()) + 1 if n else 0
    y = cm.label.astype(np.float32)
    P = cm.pred.astype(np.float32)
    feats = np.column_stack([y, 1 - y, P * y[:, None], P * (1 - y)[:, None]])  # n x (2 + 2M)
    G, M = cm.n_cells, len(cm.models)
    # K[c, f G + g] = sum of feature f over cluster c's rows in cell g: one scatter-add of
    # (membership entries x features) into K, in K's (feature-major) column order. Strided
    # column writes into K cost more than linear time at 100k clusters (bench/README.md).
    mem = cm.member.tocoo()  # cells x cases
    nf = feats.shape[1]
    data = feats[mem.col].T.ravel()  # feature-major: all entries of feature 0, then 1, ...
    cols = (np.arange(nf)[:, None] * G + mem.row[None, :]).ravel()
    rows = np.tile(cm.patient[mem.col], nf)
    keep = data != 0
    K = sparse.coo_matrix((data[keep], (rows[keep], cols[keep])),
                          shape=(n_cl, nf * G)).toarray()  # sums duplicates: exact integers
    if strata is None:
        codes = np.zeros(n_cl, dtype=np.int64)
    else:
        if strata not in cm.covariates.columns:
            raise ContractError(f"strata: column '{strata}' missing from cases; name a column "
                                f"such as 'site' or pass strata=None")
        s_codes = pd.factorize(cm.covariates[strata].astype(str))[0]
        lo = np.full(n_cl, np.iinfo(np.int64).max)
        hi = np.full(n_cl, -1)
        np.minimum.at(lo, cm.patient, s_codes)
        np.maximum.at(hi, cm.patient, s_codes)
        bad = np.flatnonzero(lo != hi)
        if len(bad):
            ids = pd.unique(cm.covariates["patient_id"].to_numpy()[np.isin(cm.patient, bad[:5])])
            raise ContractError(MSG_STRATA.format(clusters=", ".join(map(str, ids[:5])), col=strata))
        codes = lo
    return BootCounts(K=K, strata=codes, G=G, M=M)


def strata_order(strata: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The clusters sorted by stratum (stable) and the stratum boundaries in that order."""
    order = np.argsort(strata, kind="stable")
    return order, np.r_[0, np.flatnonzero(np.diff(strata[order])) + 1, len(order)]


def draw_indices(rng: np.random.Generator, strata: np.ndarray, size: int) -> np.ndarray:
    """Cluster indices of ``size`` replicates (size x clusters, uint32): in each stratum
    ``h`` with ``n_h`` clusters, ``n_h`` draws with replacement from that stratum."""
    order, bounds = strata_order(strata)
    if len(bounds) == 2:  # one stratum: order is the identity
        return rng.integers(0, len(order), size=(size, len(order)), dtype=np.uint32)
    parts = [order[a:b].astype(np.uint32)[rng.integers(0, b - a, size=(size, b - a), dtype=np.uint32)]
             for a, b in zip(bounds[:-1], bounds[1:])]
    return np.concatenate(parts, axis=1)


def block_draws(rng: np.random.Generator, strata: np.ndarray, size: int):
    """Yield the cluster indices of one block's ``size`` replicates in chunks of at most
    ``_DRAW_ELEMENTS`` elements (the order the random stream is consumed in)."""
    step = max(1, _DRAW_ELEMENTS // max(len(strata), 1))
    for start in range(0, size, step):
        yield draw_indices(rng, strata, min(step, size - start))


def _block(KT: sparse.csc_matrix, bounds: np.ndarray, rng: np.random.Generator,
           size: int) -> np.ndarray:
    """Replicate counts (size x S) of one block: W (cluster multiplicities) @ K, taken as
    ``(K' W')'`` with ``K'`` sparse (:meth:`BootCounts.sparse_transpose`), its columns in
    stratum order (:func:`strata_order`; ``bounds`` the strata there).

    The draws are :func:`block_draws`' (the same calls on ``rng``, chunk by chunk and
    stratum by stratum); with the clusters in stratum order a stratum's draws count
    straight into its own rows of W', with no index mapping or concatenation."""
    n_cl = KT.shape[1]
    WT = np.empty((n_cl, size), dtype=np.float32)   # W', one row per cluster
    step = max(1, _DRAW_ELEMENTS // max(n_cl, 1))
    for row in range(0, size, step):  # a few chunks per block, never per replicate
        b = min(step, size - row)
        for lo, hi in zip(bounds[:-1], bounds[1:]):   # each stratum, as draw_indices
            n_h = int(hi - lo)
            idx = rng.integers(0, n_h, size=(b, n_h), dtype=np.uint32)
            flat = (idx + (np.arange(b, dtype=np.int64) * n_h)[:, None]).ravel()
            WT[lo:hi, row:row + b] = np.bincount(flat, minlength=b * n_h).reshape(b, n_h).T
    # one product per block: each cluster's row of W' is read once and added, times its
    # counts, into the rows of its nonzero columns (exact integers, see the module notes)
    return np.ascontiguousarray((KT @ WT).T)


def replicate_counts(bc: BootCounts, n_boot: int, *, seed=None, scheduler=None) -> np.ndarray:
    """Counts of ``n_boot`` paired cluster-bootstrap replicates (n_boot x S, float32).

    Blocks of :meth:`BootCounts.block_size` replicates get child generators
    ``spawn(seed, n_blocks)``; with ``scheduler`` (a ``dask.distributed.Client`` or a
    scheduler address) the blocks run on that cluster and the result is identical.
    """
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(MSG_NBOOT.format(n=n_boot))
    check(cluster_bootstrap_work(n_boot, bc.n_clusters, bc.G, bc.M))  # before any block
    size = bc.block_size(n_boot)
    sizes = [size] * (n_boot // size) + ([n_boot % size] if n_boot % size else [])
    gens = spawn(seed, len(sizes))
    order, bounds = strata_order(bc.strata)
    KT = bc.sparse_transpose()
    if len(bounds) > 2:           # several strata: clusters in stratum order
        KT = KT[:, order]
    out = map_blocks(_block, [(g, s) for g, s in zip(gens, sizes)], shared=(KT, bounds),
                     scheduler=scheduler)
    return np.concatenate(out, axis=0)


def _reduced_block(KT: sparse.csc_matrix, bounds: np.ndarray, reduce, args: tuple,
                   rng: np.random.Generator, size: int) -> np.ndarray:
    """One block of :func:`replicate_reduce`: the block's counts (:func:`_block`), reduced
    to the statistic by ``reduce(counts, *args)`` before they leave the block."""
    return np.asarray(reduce(_block(KT, bounds, rng, size), *args))


def replicate_reduce(KT: sparse.spmatrix, strata: np.ndarray, n_boot: int, reduce,
                     args: tuple = (), *, seed=None, scheduler=None,
                     elements: int = 2 ** 24) -> np.ndarray:
    """A statistic of ``n_boot`` paired cluster-bootstrap replicates of any cluster-level
    counts ``K`` (given as its transpose ``KT``, S x clusters, sparse): per block of
    replicates the counts ``W @ K`` (block x S, float32, exact integers: module notes)
    are drawn as :func:`replicate_counts` draws them and handed to ``reduce(counts,
    *args)``, which returns one row per replicate (block x P); the rows of every block
    are concatenated (n_boot x P).

    The counts of a block never leave it, so a statistic of many counts per replicate
    (every point of a ROC curve: :mod:`stats.operating`) needs memory for one block only.
    Blocks hold at most ``elements`` counts (and ``_BLOCK_ELEMENTS`` multiplicities) and
    at least one replicate: fixed by the data's size, so a Dask run (``scheduler``)
    gives the same numbers as a local one. ``strata`` are the clusters' stratum codes
    (one index shared by every count: the replicates are paired)."""
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(MSG_NBOOT.format(n=n_boot))
    S, n_cl = KT.shape
    size = int(max(1, min(n_boot, _BLOCK_ELEMENTS // max(n_cl, 1), elements // max(S, 1))))
    sizes = [size] * (n_boot // size) + ([n_boot % size] if n_boot % size else [])
    gens = spawn(seed, len(sizes))
    order, bounds = strata_order(np.asarray(strata))
    KT = sparse.csc_matrix(KT, dtype=np.float32)
    if len(bounds) > 2:           # several strata: clusters in stratum order
        KT = KT[:, order]
    out = map_blocks(_reduced_block, [(g, s) for g, s in zip(gens, sizes)],
                     shared=(KT, bounds, reduce, tuple(args)), scheduler=scheduler)
    return np.concatenate(out, axis=0)


# --------------------------------------------------------------------------- intervals

def boot_interval(reps: np.ndarray, theta: np.ndarray, *, conf_level: float = 0.95,
                  method: CIMethod = "percentile", accel: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile or BCa limits per column of ``reps`` (B x P), NaN replicates dropped
    (quantiles by :func:`stats._quantile.column_quantiles`, numpy's linear rule).

    BCa: ``z0 = Phi^-1(#{theta* < theta} / B)``, acceleration ``accel`` (per column, see
    :func:`jackknife_acceleration`); limits at levels
    ``Phi(z0 + (z0 + z_q) / (1 - a (z0 + z_q)))`` (Efron 1987; DiCiccio & Efron 1996).
    """
    if method == "percentile":
        return percentile_interval(reps, conf_level)
    if method != "bca":
        raise ValueError(f"boot_ci must be 'percentile' or 'bca'; got {method!r}")
    alpha = 1 - conf_level
    k = (~np.isnan(reps)).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        prop = (reps < theta[None, :]).sum(axis=0) / k
        z0 = sps.norm.ppf(prop)
        zq = sps.norm.ppf(np.array([alpha / 2, 1 - alpha / 2]))[:, None]
        level = sps.norm.cdf(z0 + (z0 + zq) / (1 - accel * (z0 + zq)))     # (2, P)
        lim = np.where(np.isfinite(level), column_quantiles(reps, np.nan_to_num(level)), np.nan)
    return lim[0], lim[1]


def _nan_sd(flat: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Column SD (ddof=1) ignoring NaN; NaN with fewer than two valid values; exactly 0
    when every valid value is the same (B copies of p need not sum to exactly B p, which
    left an SD of 1e-16 where there is no variation)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nansum(flat, axis=0) / valid
        ss = np.nansum((flat - mean[None, :]) ** 2, axis=0)
        same = np.nanmin(flat, axis=0, initial=np.inf, where=~np.isnan(flat)) == np.nanmax(
            flat, axis=0, initial=-np.inf, where=~np.isnan(flat))
        sd = np.where(same, 0.0, np.sqrt(ss / np.maximum(valid - 1, 1)))
        return np.where(valid > 1, sd, np.nan)


#: jackknife leave-out values within this share of their largest size of their mean count
#: as equal to it: equal values differ from their mean only by its rounding (n copies of
#: 2/3 average to 2/3 + 1e-16), and a ratio of rounding noise would give an acceleration of
#: +-1/(6 sqrt(n)) decided by the summation order, not by the statistic's skewness
JACKKNIFE_FLAT_REL = 1e-12


def flat_deviations(d: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Jackknife deviations ``d`` (leave-outs x columns) with those within
    ``JACKKNIFE_FLAT_REL * scale`` (the column's largest absolute leave-out value) of 0
    set to 0; NaN kept."""
    return np.where(np.abs(d) <= JACKKNIFE_FLAT_REL * scale, 0.0, d)


def acceleration(s2: np.ndarray, s3: np.ndarray) -> np.ndarray:
    """BCa acceleration ``sum(d^3) / (6 (sum d^2)^1.5)`` from the deviations' sums of
    squares and cubes; 0 where every deviation is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s2 > 0, s3 / (6 * np.where(s2 > 0, s2, 1.0) ** 1.5), 0.0)


def jackknife_acceleration(bc: BootCounts, metrics: Sequence[str], chunk: int = 4096
                           ) -> dict[str, np.ndarray]:
    """BCa acceleration per metric (G x M) from the leave-one-cluster-out jackknife.

    ``a = sum(d^3) / (6 (sum d^2)^1.5)``, ``d = mean(theta_(i)) - theta_(i)``, where
    ``theta_(i)`` is the statistic from the total counts minus cluster ``i``'s counts;
    undefined ``theta_(i)`` are skipped; 0 where every ``theta_(i)`` is the same (within
    ``JACKKNIFE_FLAT_REL`` of their size: :func:`flat_deviations`). Two passes over chunks
    of clusters keep the memory bounded (no clusters x cells x models array).
    """
    total = bc.K.sum(axis=0, dtype=np.float64)
    n = bc.n_clusters

    def jack(lo):
        return metric_arrays(bc.unpack(total[None, :] - bc.K[lo:lo + chunk]), metrics)

    s1 = {k: 0.0 for k in metrics}
    cnt = {k: 0 for k in metrics}
    big = {k: 0.0 for k in metrics}
    for lo in range(0, n, chunk):  # chunks of clusters, vectorized inside
        for k, v in jack(lo).items():
            s1[k] = s1[k] + np.nansum(v, axis=0)
            cnt[k] = cnt[k] + (~np.isnan(v)).sum(axis=0)
            big[k] = np.fmax(big[k], np.nanmax(np.abs(v), axis=0, initial=0.0,
                                               where=~np.isnan(v)))
    mean = {k: s1[k] / np.maximum(cnt[k], 1) for k in metrics}
    s2 = {k: 0.0 for k in metrics}
    s3 = {k: 0.0 for k in metrics}
    for lo in range(0, n, chunk):
        for k, v in jack(lo).items():
            d = flat_deviations(mean[k][None] - v, big[k])
            s2[k] = s2[k] + np.nansum(d ** 2, axis=0)
            s3[k] = s3[k] + np.nansum(d ** 3, axis=0)
    return {k: acceleration(s2[k], s3[k]) for k in metrics}


def metric_arrays(counts: dict[str, np.ndarray], metrics: Sequence[str]) -> dict[str, np.ndarray]:
    fr = metric_fractions(counts["tp"], counts["fp"], counts["fn"], counts["tn"], metrics)
    return {k: ratio(*fr[k]) for k in metrics}


def cluster_counts(bc: BootCounts, metrics: Sequence[str], chunk: int = 4096
                   ) -> dict[str, np.ndarray]:
    """Clusters with a nonzero denominator, per metric (G x M): the patients behind a cell
    (for sensitivity, those with at least one reference-positive scan in the cell)."""
    out = {k: 0 for k in metrics}
    for lo in range(0, bc.n_clusters, chunk):  # chunks of clusters, vectorized inside
        c = bc.unpack(bc.K[lo:lo + chunk])
        for k, (_, den) in metric_fractions(c["tp"], c["fp"], c["fn"], c["tn"], metrics).items():
            out[k] = out[k] + (den > 0).sum(axis=0)
    return {k: np.broadcast_to(v, (bc.G, bc.M)).astype("float64") for k, v in out.items()}


def wilson_deff_interval(estimate: np.ndarray, denominator: np.ndarray, se: np.ndarray,
                         clusters: np.ndarray, conf_level: float
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval at the effective sample size ``n / deff``.

    ``deff = se^2 C / (C - 1) / (p (1 - p) / n)`` is the design effect (Kish 1965): ``se``
    the cluster-bootstrap SD of the proportion ``p`` on ``n`` trials from ``C`` clusters,
    with the usual ``C / (C - 1)`` correction of a bootstrap (plug-in) variance over ``C``
    clusters. It is taken as 1 where undefined (``p`` of 0 or 1, a zero SD): there the
    interval ignores the clustering. The effective sample size follows Korn & Graubard
    (1998), without their degrees-of-freedom factor, which over-covered here (97% at ~16
    positives from ~12 patients).

    Coverage (``tests/stats/test_coverage.py``; 2,000-4,000 cohorts each): 94.9-96.3% at ~16
    positives from ~12 patients with 1-3 scans, sensitivity 0.6-0.9; 94.4-94.6% at ~20
    positives from ~11 patients with 2-4 scans and a patient SD of 2 (plain Wilson 91%);
    94% at ~80 positives from 36 patients with 2-6 scans (plain Wilson 88%); 93.4-94.3%
    at ~15 positives from ~8 patients with 2-4 scans. With fewer patients carrying more
    scans each it under-covers: 91-92% (12 patients x 4-8 scans; 8 x 2-6), 89% (5 x 4-8).
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        correction = clusters / np.maximum(clusters - 1, 1)
        binomial = estimate * (1 - estimate) / denominator
        # a bootstrap variance within 1e-12 of 0 on the binomial's scale is 0 (rule of
        # stats._linalg.clean_variance): no design effect can be estimated from it
        var = clean_variance(se ** 2, binomial)
        deff = var * correction / binomial
    deff = np.where(np.isfinite(deff) & (deff > 0), deff, 1.0)
    n_eff = denominator / deff
    return proportion_limits(estimate * n_eff, n_eff, method="wilson", conf_level=conf_level)


def bootstrap_table(cm: CaseMatrix, bc: BootCounts, R: np.ndarray, *,
                    metrics: Sequence[str], conf_level: float, boot_ci: CIMethod
                    ) -> pd.DataFrame:
    """Tidy bootstrap rows (metric x model x cell) from replicate counts ``R``."""
    if boot_ci not in CI_METHODS:
        raise ValueError(f"boot_ci must be one of {CI_METHODS}; got {boot_ci!r}")
    total = bc.K.sum(axis=0, dtype=np.float64)
    counts_all = bc.unpack(total)
    theta = metric_arrays(counts_all, metrics)
    fractions = metric_fractions(counts_all["tp"], counts_all["fp"], counts_all["fn"],
                                 counts_all["tn"], metrics)
    reps = metric_arrays(bc.unpack(R), metrics)
    accel = jackknife_acceleration(bc, metrics) if boot_ci == "bca" else None
    clusters = cluster_counts(bc, metrics)
    G, M = bc.G, bc.M
    counts = cm.cell_counts()
    frames = []
    for k in metrics:  # model-major layout: row = model * G + cell
        flat = reps[k].transpose(0, 2, 1).reshape(len(R), M * G)
        th = theta[k].T.reshape(M * G)
        valid = (~np.isnan(flat)).sum(axis=0)
        se = _nan_sd(flat, valid)
        method = boot_ci if boot_ci != "wilson" or k in PROPORTIONS else "percentile"
        n_cl = clusters[k].T.reshape(M * G)
        if method == "wilson":
            den = fractions[k][1].T.reshape(M * G)
            lo, hi = wilson_deff_interval(th, den, se, n_cl, conf_level)
        else:
            ak = None if accel is None else accel[k].T.reshape(M * G)
            lo, hi = boot_interval(flat, th, conf_level=conf_level, method=method, accel=ak)
        n = np.tile(counts["n"], M)
        frames.append(pd.DataFrame({
            "estimand": k,
            "model": np.repeat(np.array(cm.models, dtype=object), G),
            "group_var": np.tile(cm.cells["group_var"].to_numpy(), M),
            "group_level": np.tile(cm.cells["group_level"].to_numpy(), M),
            "estimate": th, "std_error": se, "conf_low": lo, "conf_high": hi,
            "conf_level": conf_level, "n": n,
            "n_pos": np.tile(counts["n_pos"], M), "n_neg": np.tile(counts["n_neg"], M),
            "method": f"bootstrap-{method}",
            "flag": np.where(n == 0, "empty", np.where(np.isnan(th), "not_estimable", "")),
            "n_boot": float(len(R)), "n_boot_valid": valid.astype("float64"),
            "n_clusters": n_cl}))
    return pd.concat(frames, ignore_index=True)


def cluster_bootstrap(cases: pd.DataFrame, *, by=None,
                      metrics: Sequence[str] = ("sensitivity", "specificity", "ppv", "npv", "f1"),
                      n_boot: int = 2000, boot_ci: CIMethod = "percentile",
                      conf_level: float = 0.95, strata: str | None = None, seed=None,
                      scheduler=None, ci_method: CIMethod | None = None) -> pd.DataFrame:
    """Paired cluster-bootstrap intervals for count metrics per model x subgroup cell.

    Parameters
    ----------
    cases : DataFrame with ``pred`` (see :func:`stats.scan_level`) and ``patient_id``
        (the cluster; ``case_id`` when absent).
    by : subgroup specs as in :func:`stats.subgroup_metrics` (overall always included).
    metrics : subset of sensitivity, specificity, ppv, npv, accuracy, f1.
    n_boot : number of replicates.
    boot_ci : "percentile", "bca" (acceleration by the jackknife over clusters) or
        "wilson": the Wilson interval at the effective sample size implied by the
        bootstrap variance (:func:`wilson_deff_interval`; proportions only, F1 then gets
        the percentile interval). Use "wilson" for small cells: at about 15 positive
        scans the percentile interval covers 87-92% (55% at sensitivity 0.95) and BCa
        76-95%, this one 94-96%; with fewer than about 10 patients carrying several scans
        each it too under-covers (89-92%; :func:`wilson_deff_interval`).
    strata : column (e.g. "site") within which clusters are resampled; None: no strata.
    seed : int, Generator or None.
    scheduler : None (here), a ``dask.distributed.Client`` or a scheduler address.

    Returns
    -------
    Tidy DataFrame, one row per metric x model x cell: ``estimate`` (full sample),
    ``std_error`` (SD of the replicates), ``conf_low``/``conf_high``, ``n``, ``n_pos``,
    ``n_neg``, ``method`` ("bootstrap-percentile", "bootstrap-bca" or "bootstrap-wilson"), ``flag`` ("empty",
    "not_estimable"), extras ``n_boot``, ``n_boot_valid`` (replicates in which the
    metric was defined; the others are dropped) and ``n_clusters`` (clusters with a
    nonzero denominator: the patients behind the estimate).

    Notes
    -----
    Every model and every cell uses the same replicates (paired). Replicates are exact
    cluster resamples computed from cluster-level counts (module docstring). Percentile
    limits use numpy's linear interpolation.

    References
    ----------
    Davison AC, Hinkley DV (1997) Bootstrap Methods and their Application, sec. 3.8 and 5.3.
    Efron B (1987) JASA 82:171-185.
    Kish L (1965) Survey Sampling, sec. 8.2. Korn EL, Graubard BI (1998) Survey
    Methodology 24:193-201.

    Raises
    ------
    ContractError
        An empty ``cases`` table (no metric exists: the overall row always would),
        ``n_boot`` not a whole number >= 1, ``conf_level`` outside (0, 1)
        (:mod:`stats._validate`).

    ``ci_method`` is the deprecated name of ``boot_ci`` (one name per concept: the
    bootstrap interval is ``boot_ci`` in the API, the plan and the command line).
    """
    func = "cluster_bootstrap"
    boot_ci = _v.renamed(func, "ci_method", "boot_ci", ci_method, boot_ci, "percentile")
    _v.table(cases, func=func)
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", fix="e.g. n_boot=2000")
    conf_level = _v.level(conf_level, func=func)
    bad = [k for k in metrics if k not in BOOT_METRICS]
    if bad:
        raise ValueError(f"metrics: {bad} cannot be bootstrapped from counts; choose from {BOOT_METRICS}")
    cm = case_matrix(cases, by)
    bc = boot_counts(cm, strata=strata)
    R = replicate_counts(bc, n_boot, seed=seed, scheduler=scheduler)
    out = bootstrap_table(cm, bc, R, metrics=metrics, conf_level=conf_level, boot_ci=boot_ci)
    return tidy(out, group_cols=GROUP_COLS)


# --------------------------------------------------------------------------- work
# (the engine states its own memory and time: stats.limits holds only the caps)

def cluster_bootstrap_work(n_boot: int, n_clusters: int, n_cells: int, n_models: int, *,
                           n_metrics: int = 6, setting: str = "n_boot",
                           what: str = "cluster bootstrap") -> _limits.Work:
    """Peak memory and time of :func:`stats.bootstrap.cluster_bootstrap`.

    Memory: the replicate counts ``R`` (n_boot x S float32, S = (2 + 2M) G cells: held
    twice, as blocks and concatenated), the float64 tp/fp/fn/tn of every replicate and
    cell and each metric's replicates with its interval temporaries (about 14 arrays of
    n_boot x G x M float64), and one block: its multiplicities ``W`` (block x clusters
    float32) and the draw chunk's index, offset and count temporaries.
    Time: every drawn index, and the block products ``W @ K``.
    """
    B, C, G, M = (max(int(v), 1) for v in (n_boot, n_clusters, n_cells, n_models))
    S = (2 + 2 * M) * G
    block = min(B, max(_MIN_BLOCK_REPLICATES, _BLOCK_ELEMENTS // C))
    draw = min(block * C, max(_DRAW_ELEMENTS, C))
    per_metric = 8.0 * B * G * M
    mem = (2 * 4.0 * B * S + per_metric * (8 + n_metrics)
           + 4.0 * block * C + 4.0 * block * S + 20.0 * draw + 4.0 * C * S)
    secs = _limits.SECONDS_PER_DRAW * B * C + 2.0 * B * C * S / _limits.FLOPS_PER_SECOND
    return _limits.Work(what=what, setting=f"{setting} ({B:,} replicates)", memory_bytes=mem,
                seconds=secs, detail=f"{B:,} replicates x {C:,} clusters x {M} models x "
                                     f"{G} subgroup cells")
