"""Paired-seed bootstrap of the Clinical Reliability Score (DESIGN.md, "Paired-seed bootstrap").

Each replicate draws, per dataset, ``S_d`` seed indices with replacement (``S_d`` = number of
seeds of that dataset), shared by every encoder, label fraction and condition of the
dataset; the axes, CRS and ranks are recomputed with the anchors held fixed at their
point-estimate values. Nothing loops over replicates: the runs are packed once into a dense
array ``auroc[encoder, cell, seed]`` per dataset (cells = clean label fractions and the
fraction-1 conditions), a block of replicates becomes a count matrix ``W[b, seed]`` (how often
each seed was drawn) and every seed-mean of the block is one matrix product
``W @ auroc.T / S_d``. Replicate blocks are independent (``stats._rng.spawn``), so a Dask
cluster (``scheduler=``) gives the same numbers as this process.

Regimes are paired: a dataset with the same seeds in both regimes gets one draw per
replicate shared by the frozen and adapted regimes, so that ``regime_differences()``
(adapted minus frozen CRS per encoder) is a paired comparison, as the seeds are (a seed
fixes the split and the probe initialization in both regimes). A dataset whose seeds
differ between regimes is drawn separately per regime (``paired`` False).

Missing runs: as :func:`stats.crs_scores` on the resampled rows, an encoder's axes in a
replicate average over the datasets where it has at least one run among the drawn seeds.
A replicate in which a quantity is still not estimable (NaN: the encoder, or a panel
member its dominance and normalization compare with, has a seed-mean AUROC at full labels
of 0.5 or below on a dataset in that resample, where label efficiency and robustness are
undefined; or an encoder has no drawn run at all) is left
out of that quantity's percentile CI and SD and counted in the extra
``n_boot_not_estimable`` (flag ``replicates_not_estimable``).

Resolution. With ``S_d`` seeds on dataset ``d`` a replicate is one of
``N = prod_d S_d^S_d`` equally likely seed draws (729 with 3 seeds on 2 datasets), so the
bootstrap distribution is discrete however many replicates are drawn: a tail it puts any
mass on holds at least 1/N. Every table carries ``N`` (extra ``n_seed_resamples``), and a
two-sided bootstrap p-value is never below ``2 / N`` (nor ``2 / (B + 1)``): the p-values
and their Holm adjustment are floored there.

Validated against a loop that resamples the runs table with pandas and calls
:func:`stats.crs_scores` once per replicate (same seed draws; agreement to 1e-12 relative
(1e-13 absolute) on complete, ragged and missing-seed tables, including replicates that
draw only the seed an encoder lacks; tests/stats/test_crs_resample.py).
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from stats import limits as _limits
from . import _validate as _v
from ._parallel import map_blocks
from ._quantile import percentile_interval
from ._rng import spawn
from ._threads import one_blas_thread
from .crs import (AXES, SCORE_ESTIMANDS, TIE_TOL, _dataset_axes, _mean_over_datasets,
                  composite, crs_from_axes, normalize, prepare_runs, read_reference)
from .limits import check
from .schema import tidy

__all__ = ["crs_bootstrap", "CRSBootstrap", "BLOCK_SIZE"]

#: replicates per block; fixed so that results never depend on how blocks are scheduled
BLOCK_SIZE = 1000
METHOD = "paired-seed-bootstrap-percentile"


# --------------------------------------------------------------------------- dense packing


@dataclass
class _DatasetArrays:
    n_seeds: int
    seeds: np.ndarray           # seed labels, in index order
    auc: np.ndarray             # (E, C, S) with NaN -> 0
    auc_mask: np.ndarray | None  # (E, C, S) 1.0 where a run exists; None when complete
    ece: np.ndarray             # (E, S) at clean, fraction 1
    ece_mask: np.ndarray | None
    full: int                   # cell index of clean, fraction 1
    frac_cells: np.ndarray      # cells of clean, fraction < 1
    cond_cells: np.ndarray      # cells of fraction 1, condition != clean
    seed_runs: np.ndarray       # (E, S) 1.0 where the encoder has any run with that seed


@dataclass
class _Dense:
    regime: str
    encoders: list[str]
    datasets: list[str]
    panel: np.ndarray           # indices of panel encoders
    anchors: np.ndarray         # (4, 2)
    weights: dict
    arrays: list[_DatasetArrays] = field(default_factory=list)


def _pack(runs: pd.DataFrame, regime: str, encoders: list[str], panel, anchors, weights) -> _Dense:
    dense = _Dense(regime, encoders, sorted(pd.unique(runs["dataset"])),
                   np.flatnonzero(np.isin(encoders, list(panel))), anchors, weights)
    E = len(encoders)
    for ds in dense.datasets:
        sub = runs[runs["dataset"].to_numpy() == ds]
        # the dataset's seeds, and which encoder has any run (used or not) with each seed:
        # crs_scores counts an encoder in a dataset when it has any row there
        seeds = np.sort(pd.unique(sub["seed"]))
        seed_runs = np.zeros((E, len(seeds)))
        seed_runs[pd.Index(encoders).get_indexer(sub["encoder"]),
                  np.searchsorted(seeds, sub["seed"].to_numpy())] = 1.0
        clean = sub["condition"].to_numpy() == "clean"
        full = sub["label_fraction"].to_numpy() == 1.0
        use = clean | full
        sub, clean, full = sub[use], clean[use], full[use]
        keys = pd.DataFrame({"kind": np.where(clean & ~full, 0, np.where(clean, 1, 2)),
                             "frac": np.where(clean, sub["label_fraction"].to_numpy(), 1.0),
                             "cond": np.where(clean, "clean", sub["condition"].to_numpy()),
                             "sev": sub["severity"].to_numpy()})
        cells = keys.drop_duplicates().sort_values(["kind", "frac", "cond", "sev"]).reset_index(drop=True)
        cell_idx = pd.MultiIndex.from_frame(cells).get_indexer(pd.MultiIndex.from_frame(keys))
        s_idx = np.searchsorted(seeds, sub["seed"].to_numpy())
        e_idx = pd.Index(encoders).get_indexer(sub["encoder"])
        C, S = len(cells), len(seeds)
        auc = np.full((E, C, S), np.nan)
        auc[e_idx, cell_idx, s_idx] = sub["auroc"].to_numpy(dtype=float)
        kind = cells["kind"].to_numpy()
        full_cell = int(np.flatnonzero(kind == 1)[0])
        ece = np.full((E, S), np.nan)
        at_full = cell_idx == full_cell
        ece[e_idx[at_full], s_idx[at_full]] = sub["ece"].to_numpy(dtype=float)[at_full]
        present = seed_runs.any(1)
        has = ~np.isnan(auc)
        has_e = ~np.isnan(ece)
        complete = bool(has[present].all() and has_e[present].all())
        dense.arrays.append(_DatasetArrays(
            n_seeds=S, seeds=seeds, auc=np.nan_to_num(auc, nan=0.0),
            auc_mask=None if complete else has.astype(float),
            ece=np.nan_to_num(ece, nan=0.0), ece_mask=None if complete else has_e.astype(float),
            full=full_cell, frac_cells=np.flatnonzero(kind == 0),
            cond_cells=np.flatnonzero(kind == 2), seed_runs=seed_runs))
    return dense


# --------------------------------------------------------------------------- replicate math


def _masked_mean(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    n = valid.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.where(valid, x, 0.0).sum(-1) / n, np.nan)


def _seed_means(W: np.ndarray, values: np.ndarray, mask: np.ndarray | None, n_seeds: int) -> np.ndarray:
    """Weighted seed-means: ``(B, S) x (..., S) -> (B, ...)``."""
    lead = values.shape[:-1]
    flat = values.reshape(-1, n_seeds)
    num = np.einsum("bs,ks->bk", W, flat)          # NumPy's own loops: no BLAS kernel
    if mask is None:
        return (num / n_seeds).reshape(W.shape[0], *lead)
    den = np.einsum("bs,ks->bk", W, mask.reshape(-1, n_seeds).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan).reshape(W.shape[0], *lead)


def _replicate_axes(dense: _Dense, counts: list[np.ndarray], *, per_dataset: bool = False):
    """Raw axes (B, E, 4), mean over datasets, for seed-count matrices ``counts[d]`` (B, S_d).

    As :func:`stats.crs_scores` on the resampled rows, an encoder's mean runs over the
    datasets where it has at least one run among the drawn seeds (``present``, per
    replicate); an encoder with no drawn run anywhere gets NaN (not estimable).
    ``per_dataset``: also the per-dataset axes (B, E, D, 4) and ``present`` (B, E, D).
    """
    B, E, D = counts[0].shape[0], len(dense.encoders), len(dense.arrays)
    per = np.empty((B, E, D, 4))
    present = np.empty((B, E, D), dtype=bool)
    for d, arr in enumerate(dense.arrays):      # a handful of datasets, not replicates
        W = counts[d].astype(float)
        present[:, :, d] = np.einsum("bs,es->be", W, arr.seed_runs.astype(float)) > 0
        m = _seed_means(W, arr.auc, arr.auc_mask, arr.n_seeds)             # (B, E, C)
        disc = m[:, :, arr.full]
        denom = disc - 0.5
        denom = np.where(denom > TIE_TOL, denom, np.nan)   # as stats.crs_scores
        fr = m[:, :, arr.frac_cells]
        le = _masked_mean((fr - 0.5) / denom[..., None], ~np.isnan(fr))
        co = m[:, :, arr.cond_cells]
        valid = ~np.isnan(co)
        drop = np.maximum(0.0, disc[..., None] - co) / denom[..., None]
        worst = np.where(valid.any(-1), np.where(valid, drop, -np.inf).max(-1, initial=-np.inf), np.nan)
        rob = 1.0 - (_masked_mean(drop, valid) + worst) / 2.0
        per[:, :, d, 0] = disc
        per[:, :, d, 1] = _seed_means(W, arr.ece, arr.ece_mask, arr.n_seeds)
        per[:, :, d, 2] = le
        per[:, :, d, 3] = rob
    # mean over each replicate's datasets of the encoder; NaN in any of them propagates
    num = np.where(present[..., None], per, 0.0).sum(2)
    n_ds = present.sum(2)[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_ds > 0, num / n_ds, np.nan)
    if per_dataset:
        return mean, np.where(present[..., None], per, np.nan), present
    return mean


def _composite_present(a: np.ndarray, a_panel: np.ndarray, present: np.ndarray,
                       weights: Mapping[str, float]) -> np.ndarray:
    """:func:`stats.crs.composite` with a panel whose membership varies by replicate:
    ``a`` (B, E, m), ``a_panel`` (B, P, m), ``present`` (B, P) the panel members with a
    drawn run (the members :func:`stats.crs_scores` on the resampled rows compares with).
    A present member with a NaN axis makes every dominance NaN; no member present: NaN."""
    m = a.shape[-1]
    diff = a[:, :, None, :] - a_panel[:, None, :, :]                     # (B, E, P, m)
    dominates = (diff >= -TIE_TOL).all(-1) & (diff > TIE_TOL).any(-1) & present[:, None, :]
    dominated = (diff <= TIE_TOL).all(-1) & (diff < -TIE_TOL).any(-1) & present[:, None, :]
    n_panel = present.sum(-1)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        d = (1.0 + (dominates.sum(-1) - dominated.sum(-1)) / n_panel) / 2.0
    s = 1.0 - np.sqrt(((a - 1.0) ** 2).sum(-1)) / np.sqrt(m)
    w = a.min(-1)
    panel_nan = (np.isnan(a_panel).any(-1) & present).any(-1)[:, None]
    bad = np.isnan(a).any(-1) | panel_nan | (n_panel == 0)
    d = np.where(bad, np.nan, d)
    crs = weights["dominance"] * d + weights["similarity"] * s + weights["worst_axis"] * w
    return np.stack([d, s, w, crs], axis=-1)


def _replicate_scores(dense: _Dense, counts: list[np.ndarray], per_dataset: bool = False):
    """Every score estimand (B, E, 12) in the order of ``SCORE_ESTIMANDS``; with
    ``per_dataset`` also the per-dataset scores (B, E, D, 12), anchors the same."""
    if not per_dataset:
        x = _replicate_axes(dense, counts)
        a = normalize(x, dense.anchors)
        comp = composite(a, a[:, dense.panel], dense.weights)
        return np.concatenate([x, a, comp], axis=-1)
    x, per, present = _replicate_axes(dense, counts, per_dataset=True)
    a = normalize(x, dense.anchors)
    comp = composite(a, a[:, dense.panel], dense.weights)
    overall = np.concatenate([x, a, comp], axis=-1)
    dom = np.empty((*per.shape[:3], len(SCORE_ESTIMANDS)))
    for d in range(per.shape[2]):                   # datasets, not replicates
        ad = normalize(per[:, :, d], dense.anchors)
        cd = _composite_present(ad, ad[:, dense.panel], present[:, dense.panel, d],
                                dense.weights)
        dom[:, :, d] = np.concatenate([per[:, :, d], ad, cd], axis=-1)
    dom[~present] = np.nan
    return overall, dom


def _draw_counts(rng: np.random.Generator, n: int, n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Seed indices (n, S) drawn with replacement and their counts (n, S)."""
    idx = rng.integers(0, n_seeds, size=(n, n_seeds))
    flat = idx + n_seeds * np.arange(n)[:, None]
    counts = np.bincount(flat.ravel(), minlength=n * n_seeds).reshape(n, n_seeds)
    return idx, counts


def _run_block(denses: list[_Dense], rng: np.random.Generator, n: int, per_dataset: bool = False):
    """One block of ``n`` replicates for every regime. A dataset whose seed labels are the
    same in several regimes gets one draw shared by those regimes (paired regimes); a
    dataset whose seeds differ between regimes is drawn separately for each."""
    out, shared = [], {}
    with one_blas_thread():     # small products: one BLAS thread per block (stats._threads)
        for dense in denses:           # regimes
            for ds, arr in zip(dense.datasets, dense.arrays):
                key = (ds, tuple(arr.seeds.tolist()))
                if key not in shared:
                    shared[key] = _draw_counts(rng, n, arr.n_seeds)
            draws, counts = zip(*(shared[(ds, tuple(arr.seeds.tolist()))]
                                  for ds, arr in zip(dense.datasets, dense.arrays)))
            scores = _replicate_scores(dense, list(counts), per_dataset)
            if per_dataset:
                out.append((list(draws), *scores))
            else:
                out.append((list(draws), scores, None))
    return out


def _map_blocks(denses, rngs, sizes, scheduler, per_dataset=False):
    return map_blocks(_run_block, [(r, n, per_dataset) for r, n in zip(rngs, sizes)],
                      shared=(denses,), scheduler=scheduler)


# --------------------------------------------------------------------------- result


def _summary(x: np.ndarray, conf_level: float):
    """Per column of replicates ``x`` (B, ...): percentile CI, bootstrap SD and the number
    of non-estimable (NaN) replicates, which are left out of the CI and SD.

    The percentile limits come from :func:`stats._quantile.percentile_interval` (linear
    interpolation on each column's finite replicates, as ``np.nanquantile``); all-NaN
    columns give NaN.
    """
    n_bad = np.isnan(x).sum(0)
    lo, hi = percentile_interval(x, conf_level)
    se = x.std(axis=0, ddof=1) if x.shape[0] > 1 else np.full(x.shape[1:], np.nan)
    cols = np.flatnonzero((n_bad > 0).ravel())
    if cols.size:
        flat = x.reshape(x.shape[0], -1)[:, cols]
        with warnings.catch_warnings():   # all-NaN columns: NaN, without a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            sn = np.nanstd(flat, axis=0, ddof=1)
        se = se.reshape(-1)
        se[cols] = sn
        se = se.reshape(x.shape[1:])
    return lo, hi, se, n_bad.astype(float)


def _boot_p(d: np.ndarray, n_resamples: float = np.inf) -> np.ndarray:
    """Two-sided bootstrap p of H0: difference = 0, per column of replicates ``d`` (B, m):
    ``min(1, max(2 / N, 2 min((1 + #{d <= 0}) / (B + 1), (1 + #{d >= 0}) / (B + 1))))``
    (capped at 1 last: with one seed per dataset N = 1 and every p is 1),
    with B the column's number of estimable (finite) replicates (NaN when there are none)
    and N the number of equally likely seed draws (module docstring, "Resolution")."""
    B = (~np.isnan(d)).sum(0)
    # a difference within TIE_TOL of 0 (a mathematical tie that rounding moves) counts in
    # both tails
    p = 2.0 * np.minimum((1 + (d <= TIE_TOL).sum(0)) / (B + 1),
                         (1 + (d >= -TIE_TOL).sum(0)) / (B + 1))
    return np.where(B > 0, np.minimum(1.0, np.maximum(p, 2.0 / n_resamples)), np.nan)


def _flags(point: np.ndarray, n_bad: np.ndarray) -> np.ndarray:
    """``not_estimable`` where the point estimate is NaN, ``replicates_not_estimable``
    where it is finite but some replicates are NaN, else ``""``."""
    return np.where(np.isnan(point), "not_estimable",
                    np.where(n_bad > 0, "replicates_not_estimable", ""))


def _ranks(crs: np.ndarray) -> np.ndarray:
    """Rank 1 = best; ties share the better rank; NaN ranks last."""
    c = np.where(np.isnan(crs), -np.inf, crs)
    return 1 + (c[..., None, :] > c[..., :, None] + TIE_TOL).sum(-1)   # ties within TIE_TOL


@dataclass
class CRSBootstrap:
    """Result of :func:`crs_bootstrap`.

    Attributes
    ----------
    point : DataFrame
        :func:`stats.crs_scores` on the full data (anchors used by every replicate).
    replicates : dict regime -> array (n_boot, n_encoders, 12)
        Every score estimand per replicate, in the order of ``stats.crs.SCORE_ESTIMANDS``;
        NaN where a replicate is not estimable.
    draws : dict regime -> dict dataset -> int array (n_boot, n_seeds)
        The seed indices drawn (index into ``seeds[regime][dataset]``); the same array in
        every regime where the dataset has the same seeds (paired regimes).
    seeds : dict regime -> dict dataset -> array of seed labels
    encoders : dict regime -> list of encoder names (array order)

    Every table carries extras ``n_boot`` (replicates drawn), ``n_boot_not_estimable``
    (replicates left out because the quantity was NaN in them; flag
    ``replicates_not_estimable`` where that is > 0 and the point estimate is finite) and
    ``n_seed_resamples`` (the equally likely seed draws behind its regime, module
    docstring "Resolution").
    """

    point: pd.DataFrame
    replicates: dict[str, np.ndarray]
    draws: dict[str, dict[str, np.ndarray]]
    seeds: dict[str, dict[str, np.ndarray]]
    encoders: dict[str, list[str]]
    n_boot: int
    conf_level: float
    reference_hash: str
    reference_version: str
    #: "regime" (frozen / adapted) or "protocol" (probe / prompt / lora): what the arms are
    arm: str = "regime"
    #: with ``by="dataset"``: per regime the per-dataset replicates (B, E, D, 12) and the
    #: point table of ``crs_scores(by="dataset")``
    domain_replicates: dict[str, np.ndarray] | None = None
    domain_point: pd.DataFrame | None = None
    datasets: dict[str, list[str]] | None = None

    def n_seed_resamples(self, *regimes: str) -> float:
        """``prod_d S_d^S_d`` over the datasets drawn for ``regimes`` (a dataset drawn once
        for two paired regimes counts once)."""
        seen, n = [], 1.0
        for r in regimes:
            for ds, draw in self.draws[r].items():
                # the same dataset drawn once for paired regimes (the same draws and seeds);
                # two datasets never merge, however alike their draws
                if not any(ds == d and (draw is o or o.shape == draw.shape
                                        and np.array_equal(draw, o)
                                        and np.array_equal(self.seeds[r][ds], sd))
                           for d, o, sd in seen):
                    seen.append((ds, draw, self.seeds[r][ds]))
                    S = len(self.seeds[r][ds])
                    n *= float(S) ** S
        return n

    def _extras(self, df: pd.DataFrame) -> pd.DataFrame:
        if "n_seed_resamples" not in df:
            df["n_seed_resamples"] = df["regime"].map(
                {r: self.n_seed_resamples(r) for r in self.replicates}).astype(float)
        df["n_boot"] = float(self.n_boot)
        df["reference_hash"] = self.reference_hash
        df["reference_version"] = self.reference_version
        return df

    def _named(self, df: pd.DataFrame) -> pd.DataFrame:
        """The arm column under its own name: ``protocol`` when the arms are protocols
        (``regime`` otherwise)."""
        if self.arm == "regime":
            return df
        return df.rename(columns={"regime": self.arm, "baseline": f"baseline_{self.arm}"}
                         if "baseline" in df else {"regime": self.arm})

    def _crs(self, regime: str) -> np.ndarray:
        return self.replicates[regime][:, :, SCORE_ESTIMANDS.index("crs")]

    def _point_crs(self, regime: str) -> np.ndarray:
        p = self.point[(self.point["regime"] == regime) & (self.point["estimand"] == "crs")]
        return p.set_index("encoder")["estimate"].reindex(self.encoders[regime]).to_numpy()

    def scores(self) -> pd.DataFrame:
        """Every estimand of :func:`stats.crs_scores` with paired-seed bootstrap percentile
        CIs (tidy): the point table plus ``std_error`` (bootstrap SD), ``conf_low``,
        ``conf_high``, ``conf_level``, ``method``, ``flag`` and extras ``n_boot``,
        ``n_boot_not_estimable`` (NaN replicates, left out of the CI and SD)."""
        rows = []
        for regime, rep in self.replicates.items():
            lo, hi, se, n_bad = _summary(rep, self.conf_level)
            E = len(self.encoders[regime])
            rows.append(pd.DataFrame({
                "regime": regime,
                "encoder": np.repeat(self.encoders[regime], len(SCORE_ESTIMANDS)),
                "estimand": np.tile(SCORE_ESTIMANDS, E),
                "conf_low": lo.ravel(), "conf_high": hi.ravel(), "std_error": se.ravel(),
                "n_boot_not_estimable": n_bad.ravel()}))
        ci = pd.concat(rows, ignore_index=True)
        out = self.point.drop(columns=["conf_low", "conf_high", "std_error"]).merge(
            ci, on=["regime", "encoder", "estimand"], how="left", sort=False)
        out["conf_level"] = self.conf_level
        out["method"] = METHOD
        out["flag"] = _flags(out["estimate"].to_numpy(dtype=float),
                             out["n_boot_not_estimable"].to_numpy(dtype=float))
        return self._named(tidy(self._extras(out), group_cols=("encoder", "regime")))

    def rank_probabilities(self, k: int = 3) -> pd.DataFrame:
        """Rank uncertainty per encoder (tidy).

        Rows per regime x encoder: ``rank`` (point rank by CRS; CI = percentiles of the
        bootstrap ranks), ``mean_rank``, ``p_rank_1`` (share of replicates ranked first,
        ties sharing the better rank) and ``p_top_k`` (share ranked <= k; extra ``k``).

        Ranks are joint, so a replicate in which any encoder with a finite point CRS has a
        NaN CRS is left out of every encoder's rank statistics (their number is the extra
        ``n_boot_not_estimable``); encoders whose point CRS is NaN rank last throughout.
        """
        if int(k) < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        frames = []
        for regime in self.replicates:
            pt = self._point_crs(regime)
            crs = np.where(np.isnan(pt)[None, :], np.nan, self._crs(regime))
            keep = ~np.isnan(crs[:, ~np.isnan(pt)]).any(1)
            ranks = _ranks(crs[keep]).astype(float)                 # (B kept, E)
            point = _ranks(pt[None, :])[0]
            lo, hi, _, _ = _summary(ranks, self.conf_level)
            with warnings.catch_warnings():   # no replicate kept: NaN shares
                warnings.simplefilter("ignore", RuntimeWarning)
                est = {"rank": (point, lo, hi), "mean_rank": (ranks.mean(0), None, None),
                       "p_rank_1": ((ranks == 1).mean(0), None, None),
                       "p_top_k": ((ranks <= k).mean(0), None, None)}
            enc = self.encoders[regime]
            for name, (e, l, h) in est.items():
                frames.append(pd.DataFrame({
                    "estimand": name, "encoder": enc, "regime": regime,
                    "estimate": e.astype(float), "conf_low": np.nan if l is None else l,
                    "conf_high": np.nan if h is None else h, "n": float(len(enc)),
                    "n_boot_not_estimable": float((~keep).sum())}))
        out = pd.concat(frames, ignore_index=True)
        out["conf_level"] = np.where(out["estimand"] == "rank", self.conf_level, np.nan)
        out["method"] = METHOD
        out["flag"] = np.where(out["n_boot_not_estimable"] > 0, "replicates_not_estimable", "")
        out["k"] = float(k)
        order = {n: i for i, n in enumerate(("rank", "mean_rank", "p_rank_1", "p_top_k"))}
        out = out.sort_values(["regime", "encoder", "estimand"],
                              key=lambda s: s.map(order) if s.name == "estimand" else s, kind="stable")
        return self._named(tidy(self._extras(out), group_cols=("encoder", "regime")))

    def _difference_frame(self, d: np.ndarray, estimate: np.ndarray, regimes: tuple[str, ...],
                          **cols) -> pd.DataFrame:
        """Tidy rows for replicate differences ``d`` (B, m): percentile CI, bootstrap SD and
        p-value over the estimable replicates, at the resolution of the seed draws of
        ``regimes``."""
        lo, hi, se, n_bad = _summary(d, self.conf_level)
        n_res = self.n_seed_resamples(*regimes)
        return pd.DataFrame({**cols, "estimate": estimate, "std_error": se, "conf_low": lo,
                             "conf_high": hi, "p_value": _boot_p(d, n_res),
                             "n_seed_resamples": n_res, "n_boot_not_estimable": n_bad,
                             "flag": _flags(estimate, n_bad)})

    def _finish(self, frames: list[pd.DataFrame], group_cols: tuple[str, ...]) -> pd.DataFrame:
        out = pd.concat(frames, ignore_index=True)
        out["conf_level"] = self.conf_level
        out["method"] = METHOD
        return self._named(tidy(self._extras(out), group_cols=group_cols))

    def differences(self) -> pd.DataFrame:
        """Every pairwise CRS difference ``crs(encoder) - crs(comparator)`` (tidy).

        Pairs are ordered by point CRS (``encoder`` ranks above ``comparator``). Columns:
        ``estimate`` (point difference), percentile CI, ``std_error`` (bootstrap SD),
        ``p_value`` (two-sided bootstrap p, ``min(1, 2 min((1 + #{d* <= 0}) / (B + 1),
        (1 + #{d* >= 0}) / (B + 1)))`` over the B estimable replicates, never below
        ``2 / n_seed_resamples``: module docstring "Resolution"), ``p_adjusted`` (Holm over
        the regime's pairs with a p-value).
        """
        from statsmodels.stats.multitest import multipletests

        frames = []
        for regime in self.replicates:
            crs, point = self._crs(regime), self._point_crs(regime)
            order = np.argsort(-np.where(np.isnan(point), -np.inf, point), kind="stable")
            i, j = np.triu_indices(len(order), k=1)
            i, j = order[i], order[j]
            enc = np.asarray(self.encoders[regime], dtype=object)
            f = self._difference_frame(crs[:, i] - crs[:, j], point[i] - point[j], (regime,),
                                       estimand="crs_difference", encoder=enc[i],
                                       comparator=enc[j], regime=regime)
            p = f["p_value"].to_numpy()
            ok = ~np.isnan(p)
            f["p_adjusted"] = np.nan
            if ok.any():
                f.loc[ok, "p_adjusted"] = multipletests(p[ok], method="holm")[1]
            frames.append(f)
        return self._finish(frames, ("encoder", "comparator", "regime"))

    def leading_tier(self) -> pd.DataFrame:
        """The leading tier: the best encoder (highest point CRS) and every encoder whose
        CRS difference from it is not significant (its percentile CI at ``conf_level``
        contains 0).

        Rows per regime x encoder: ``estimand`` "difference_from_best", ``estimate``
        ``crs(encoder) - crs(best)`` (<= 0) with CI and bootstrap p; extras ``best`` and
        ``in_leading_tier`` (bool; False where the difference is not estimable).
        """
        frames = []
        for regime in self.replicates:
            crs, point = self._crs(regime), self._point_crs(regime)
            b = int(np.nanargmax(point))
            enc = self.encoders[regime]
            f = self._difference_frame(crs - crs[:, [b]], point - point[b], (regime,),
                                       estimand="difference_from_best", encoder=enc,
                                       regime=regime)
            f.loc[b, "p_value"] = 1.0
            f["best"] = enc[b]
            f["in_leading_tier"] = ((f["conf_high"] >= -TIE_TOL)
                                    & (f["conf_low"] <= TIE_TOL)).to_numpy()
            frames.append(f)
        return self._finish(frames, ("encoder", "regime"))

    def regime_differences(self, regime: str = "adapted", baseline: str = "frozen") -> pd.DataFrame:
        """Per encoder, ``crs(regime) - crs(baseline)`` with a percentile CI (tidy).

        Paired when every dataset has the same seeds in both regimes (then both regimes
        use the same seed draws; extra ``paired`` True), else the regimes were drawn
        independently for the datasets whose seeds differ (``paired`` False). Rows for the
        encoders scored in both regimes; columns as :meth:`differences` (no Holm), extras
        ``baseline``.
        """
        for r in (regime, baseline):
            if r not in self.replicates:
                raise ValueError(f"regime {r!r} has no runs; regimes are {sorted(self.replicates)}")
        both = [e for e in self.encoders[regime] if e in set(self.encoders[baseline])]
        ia = pd.Index(self.encoders[regime]).get_indexer(both)
        ib = pd.Index(self.encoders[baseline]).get_indexer(both)
        paired = self._paired(regime, baseline)
        f = self._difference_frame(self._crs(regime)[:, ia] - self._crs(baseline)[:, ib],
                                   self._point_crs(regime)[ia] - self._point_crs(baseline)[ib],
                                   (regime, baseline), estimand="crs_regime_difference", encoder=both, regime=regime)
        f["baseline"] = baseline
        f["paired"] = paired
        return self._finish([f], ("encoder", "regime"))


    def domain_scores(self) -> pd.DataFrame:
        """Per-domain scores (``crs_scores(by="dataset")``: each dataset's axes, the same
        anchors) with paired-seed bootstrap percentile CIs (tidy; columns as
        :meth:`scores` plus ``dataset``). Needs ``crs_bootstrap(..., by="dataset")``.

        A replicate scores a dataset's encoders against the panel members with a drawn run
        on it (as ``crs_scores(by="dataset")`` on the resampled rows); an encoder without
        a drawn run on the dataset is not estimable in that replicate.
        """
        if self.domain_replicates is None:
            raise ValueError("domain_scores needs crs_bootstrap(..., by='dataset')")
        rows = []
        for regime, rep in self.domain_replicates.items():
            lo, hi, se, n_bad = _summary(rep, self.conf_level)      # (E, D, 12)
            enc, ds = self.encoders[regime], self.datasets[regime]
            E, D, K = rep.shape[1:]
            rows.append(pd.DataFrame({
                "regime": regime,
                "encoder": np.repeat(enc, D * K),
                "dataset": np.tile(np.repeat(ds, K), E),
                "estimand": np.tile(SCORE_ESTIMANDS, E * D),
                "conf_low": lo.ravel(), "conf_high": hi.ravel(), "std_error": se.ravel(),
                "n_boot_not_estimable": n_bad.ravel()}))
        ci = pd.concat(rows, ignore_index=True)
        out = self.domain_point.drop(columns=["conf_low", "conf_high", "std_error"]).merge(
            ci, on=["regime", "encoder", "dataset", "estimand"], how="left", sort=False)
        out["conf_level"] = self.conf_level
        out["method"] = METHOD
        out["flag"] = _flags(out["estimate"].to_numpy(dtype=float),
                             out["n_boot_not_estimable"].to_numpy(dtype=float))
        return self._named(tidy(self._extras(out), group_cols=("encoder", "regime", "dataset")))

    def rank_persistence(self, regime: str = "adapted", baseline: str = "frozen", *,
                         k: int = 3) -> pd.DataFrame:
        """Whether the ``baseline`` CRS ranking persists in ``regime`` (e.g. frozen ->
        adapted), with paired-seed bootstrap intervals (tidy).

        Over the encoders scored in both arms, per replicate (the same seed draws in both
        arms where their seeds agree, as :meth:`regime_differences`): ``kendall_tau``
        (tau-b between the two CRS rankings), ``mean_abs_displacement`` (mean |rank
        change|, ranks 1 = best, ties averaged), ``inversions`` (pairs ordered oppositely),
        ``top_k_overlap`` (|top-k of both| / k, ties broken by encoder name, as
        :func:`stats.rank_agreement`) and ``p_top_k_kept`` (estimate: the share of
        replicates in which the baseline's top k are all in the arm's top k; no CI), and
        per encoder ``rank_change`` (rank in ``regime`` minus rank in ``baseline``; rank
        1 = best, ties sharing the better rank). Point estimates are those of
        :func:`stats.rank_agreement` on the point CRS; CIs are percentiles over the
        replicates in which every common encoder's CRS is estimable in both arms (the
        others are counted in ``n_boot_not_estimable``). Extras ``baseline``, ``k``,
        ``paired``.
        """
        from scipy.stats import rankdata

        from .ranking import _pair_signs, kendall_tau_b, rank_agreement

        for r in (regime, baseline):
            if r not in self.replicates:
                raise ValueError(f"{self.arm} {r!r} has no runs; {self.arm}s are {sorted(self.replicates)}")
        k = int(k)
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}")
        both = sorted(e for e in self.encoders[regime] if e in set(self.encoders[baseline]))
        ia = pd.Index(self.encoders[regime]).get_indexer(both)
        ib = pd.Index(self.encoders[baseline]).get_indexer(both)
        pa, pb = self._point_crs(regime)[ia], self._point_crs(baseline)[ib]
        ra, rb = self._crs(regime)[:, ia], self._crs(baseline)[:, ib]
        keep = ~(np.isnan(ra).any(1) | np.isnan(rb).any(1))
        ra, rb = ra[keep], rb[keep]
        E = len(both)
        kk = min(k, E)
        # replicate statistics, all replicates at once
        tau = kendall_tau_b(rb, ra)
        disp = np.abs(rankdata(-ra, axis=1) - rankdata(-rb, axis=1)).mean(1)
        inv = (_pair_signs(ra) * _pair_signs(rb) < 0).sum(1).astype(float)
        # top k with ties broken by name: encoders are in name order, a stable sort keeps it
        top_a = np.argsort(-ra, axis=1, kind="stable")[:, :kk]
        top_b = np.argsort(-rb, axis=1, kind="stable")[:, :kk]
        in_a = np.zeros(ra.shape, bool)
        np.put_along_axis(in_a, top_a, True, axis=1)
        in_b = np.zeros(rb.shape, bool)
        np.put_along_axis(in_b, top_b, True, axis=1)
        overlap = (in_a & in_b).sum(1) / k
        rank_a = 1 + (ra[:, None, :] > ra[:, :, None] + TIE_TOL).sum(-1)
        rank_b = 1 + (rb[:, None, :] > rb[:, :, None] + TIE_TOL).sum(-1)
        point_change = (_ranks(pa[None])[0] - _ranks(pb[None])[0]).astype(float)
        change = (rank_a - rank_b).astype(float)
        if not np.isfinite(pa).all() or not np.isfinite(pb).all() or E < 2:
            pt = {"kendall_tau": np.nan, "mean_abs_displacement": np.nan, "inversions": np.nan,
                  "top_k_overlap": np.nan}
        else:
            ag = rank_agreement(pd.Series(pb, index=both), pd.Series(pa, index=both), k=k)
            pt = dict(zip(ag["estimand"], ag["estimate"]))
        reps = {"kendall_tau": tau, "mean_abs_displacement": disp, "inversions": inv,
                "top_k_overlap": overlap}
        n_bad = float((~keep).sum())
        frames = []
        for name, x in reps.items():
            lo, hi, se, _ = _summary(x[:, None], self.conf_level)
            frames.append(pd.DataFrame({"estimand": [name], "encoder": ["all"],
                                        "estimate": [pt[name]], "conf_low": lo, "conf_high": hi,
                                        "std_error": se}))
        kept = (overlap >= 1.0 - 1e-12).mean() if len(overlap) else np.nan
        frames.append(pd.DataFrame({"estimand": ["p_top_k_kept"], "encoder": ["all"],
                                    "estimate": [kept]}))
        lo, hi, se, _ = _summary(change, self.conf_level)
        frames.append(pd.DataFrame({"estimand": "rank_change", "encoder": both,
                                    "estimate": point_change, "conf_low": lo, "conf_high": hi,
                                    "std_error": se}))
        out = pd.concat(frames, ignore_index=True)
        out["regime"] = regime
        out["baseline"] = baseline
        out["n"] = float(E)
        out["k"] = float(k)
        out["n_boot_not_estimable"] = n_bad
        out["n_seed_resamples"] = self.n_seed_resamples(regime, baseline)
        out["paired"] = self._paired(regime, baseline)
        out["flag"] = np.where(np.isnan(out["estimate"].to_numpy(dtype=float)), "not_estimable",
                               np.where(n_bad > 0, "replicates_not_estimable", ""))
        out["conf_level"] = np.where(out["estimand"] == "p_top_k_kept", np.nan, self.conf_level)
        out["method"] = METHOD
        return self._named(tidy(self._extras(out), group_cols=("encoder", "regime")))

    def _paired(self, regime: str, baseline: str) -> bool:
        da, db = self.draws[regime], self.draws[baseline]
        return set(da) == set(db) and all(da[ds] is db[ds] or np.array_equal(da[ds], db[ds])
                                          and np.array_equal(self.seeds[regime][ds],
                                                             self.seeds[baseline][ds])
                                          for ds in da)


# --------------------------------------------------------------------------- entry point


def crs_bootstrap(runs, reference, *, n_boot: int = 10_000, seed=None, conf_level: float = 0.95,
                  weights: Mapping[str, float] | None = None, scheduler: Any = None,
                  by: str | None = None, arm: str = "regime") -> CRSBootstrap:
    """Paired-seed bootstrap of the CRS: percentile CIs, rank probabilities, differences.

    Parameters
    ----------
    runs : DataFrame or path
        The runs table (validated by :func:`stats.read_runs`); each regime separately.
    reference : path, dict or Reference
        See :func:`stats.read_reference`. Its anchors (or, by default, the panel's min and
        max on the full data) are held fixed in every replicate.
    n_boot : int
        Number of replicates (default 10,000).
    seed : int, Generator or None
        Randomness; replicate blocks of ``BLOCK_SIZE`` use ``stats._rng.spawn(seed, ...)``.
    conf_level : float
        Level of the percentile intervals.
    weights : mapping, optional
        Overrides the reference's weights.
    scheduler : None, dask.distributed.Client or address
        Where replicate blocks run; the same numbers either way.
    by : None or "dataset"
        ``"dataset"``: also the per-domain scores of ``crs_scores(by="dataset")``, in the
        same replicates (:meth:`CRSBootstrap.domain_scores`).
    arm : "regime" or "protocol"
        What is scored separately: the regimes (frozen, adapted), or the protocols of a
        ``protocol`` column (probe, prompt, lora; E5 of CRS-Bench), compared as regimes
        are (``regime_differences("lora", "probe")``, ``rank_persistence``); the tables
        then have a ``protocol`` column instead of ``regime``.

    Returns
    -------
    CRSBootstrap
        ``.scores()``, ``.rank_probabilities(k)``, ``.differences()``, ``.leading_tier()``,
        ``.regime_differences()``, ``.rank_persistence()`` and, with ``by="dataset"``,
        ``.domain_scores()`` (all tidy), plus the raw ``replicates`` and seed ``draws``.

    Notes
    -----
    Per replicate and dataset ``d``, seed indices ``i_1..i_{S_d}`` are drawn uniformly with
    replacement from the dataset's seeds and shared by all encoders, label fractions and
    conditions (and by both regimes where the dataset has the same seeds in each); each
    cell's seed-mean becomes the mean over the drawn seeds (with multiplicity), and the
    axes and scores follow the formulas of :mod:`stats.crs`, over the datasets where the
    encoder has a drawn run. NaN (not estimable) replicates are left out of the CIs and
    counted (``n_boot_not_estimable``).

    Examples
    --------
    >>> from stats import simulate
    >>> runs = simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=3, seed=3).data
    >>> boot = crs_bootstrap(runs, {"panel": ["enc_01", "enc_02", "enc_03"]}, n_boot=200,
    ...                      seed=1)
    >>> print(boot.scores().query("estimand == 'crs'")[["encoder", "estimate", "conf_low",
    ...       "conf_high"]].round(3).to_string(index=False))
    encoder  estimate  conf_low  conf_high
     enc_01     0.264     0.263      0.283
     enc_02     0.298     0.277      0.311
     enc_03     0.297     0.295      0.323
     enc_04     0.280     0.273      0.286

    ``n_boot`` must be a whole number >= 2 and ``conf_level`` lie in (0, 1)
    (:class:`~stats.schema.ContractError`); the runs are read by :func:`stats.read_runs`.
    """
    from .crs import MSG_BY
    from .schema import ContractError

    n_boot = _v.whole(n_boot, func="crs_bootstrap", arg="n_boot", minimum=2,
                      fix="e.g. n_boot=10000")
    conf_level = _v.level(conf_level, func="crs_bootstrap")
    if by not in (None, "dataset"):
        raise ContractError(MSG_BY.format(value=by).replace("crs_scores", "crs_bootstrap"))
    df = prepare_runs(runs, arm=arm)
    ref = read_reference(reference, encoders=pd.unique(df["encoder"]))
    per_ds = _dataset_axes(df)
    wide = _mean_over_datasets(per_ds)
    point = crs_from_axes(wide, ref, weights=weights)
    domain_point = (crs_from_axes(wide, ref, weights=weights, per_dataset=per_ds)
                    if by == "dataset" else None)
    w = dict(ref.weights) if weights is None else {
        k: float(v) for k, v in weights.items()}
    denses = []
    for regime, part in df.groupby("regime", sort=True):
        encoders = sorted(pd.unique(part["encoder"]))
        p = point[(point["regime"] == regime) & point["estimand"].isin(AXES)]
        anchors = (p.drop_duplicates("estimand").set_index("estimand")
                   .loc[list(AXES), ["anchor_low", "anchor_high"]].to_numpy(dtype=float))
        denses.append(_pack(part, regime, encoders, ref.panel, anchors, w))
    check(crs_bootstrap_work(n_boot, denses, per_dataset=by == "dataset"))  # before any block
    sizes = [min(BLOCK_SIZE, n_boot - s) for s in range(0, n_boot, BLOCK_SIZE)]
    results = _map_blocks(denses, spawn(seed, len(sizes)), sizes, scheduler, by == "dataset")
    replicates, draws, seeds, encoders, domains, datasets = {}, {}, {}, {}, {}, {}
    for r, dense in enumerate(denses):
        replicates[dense.regime] = np.concatenate([blk[r][1] for blk in results], axis=0)
        if by == "dataset":
            domains[dense.regime] = np.concatenate([blk[r][2] for blk in results], axis=0)
        draws[dense.regime] = {ds: np.concatenate([blk[r][0][d] for blk in results], axis=0)
                               for d, ds in enumerate(dense.datasets)}
        seeds[dense.regime] = {ds: arr.seeds for ds, arr in zip(dense.datasets, dense.arrays)}
        encoders[dense.regime] = dense.encoders
        datasets[dense.regime] = dense.datasets
    return CRSBootstrap(point=point, replicates=replicates, draws=draws, seeds=seeds,
                        encoders=encoders, n_boot=n_boot, conf_level=float(conf_level),
                        reference_hash=ref.hash, reference_version=ref.version, arm=arm,
                        domain_replicates=domains if by == "dataset" else None,
                        domain_point=domain_point, datasets=datasets)
                        

# --------------------------------------------------------------------------- work
# (the engine states its own memory and time: stats.limits holds only the caps)

def crs_bootstrap_work(n_boot: int, regimes, *, setting: str = "n_boot",
                       what: str = "CRS paired-seed bootstrap",
                       per_dataset: bool = False) -> _limits.Work:
    """Peak memory and time of :func:`stats.crs_resample.crs_bootstrap`.

    ``regimes``: per regime ``(encoders, [seeds per dataset], [cells per dataset])``, or
    the packed arrays the bootstrap builds (objects with ``encoders`` and ``arrays``).
    Memory: per regime the replicate scores (n_boot x encoders x 12 float64, held twice:
    blocks and concatenated), the drawn seed indices (n_boot x seeds int64 per dataset,
    twice), the pairwise differences (n_boot x encoders^2 float64) and the ranks, plus
    one block's draw counts and seed-means. Time: the per-block products (draw counts x
    AUROC per encoder and cell) and the per-replicate scoring passes. ``per_dataset``
    (per-domain scores): the replicate scores once more per dataset.
    """
    B = max(int(n_boot), 1)
    mem = secs = 0.0
    E_max = 1
    for reg in regimes:
        if hasattr(reg, "arrays"):
            reg = (len(reg.encoders), [a.n_seeds for a in reg.arrays],
                   [a.auc.shape[1] for a in reg.arrays])
        E = max(int(reg[0]), 1)
        E_max = max(E, E_max)
        seeds = [max(int(v), 1) for v in reg[1]] or [1]
        cells = [max(int(v), 1) for v in reg[2]] or [1]
        mem += B * (2 * 8.0 * E * 12 + 2 * 8.0 * sum(seeds) + 8.0 * E * E + 16.0 * E)
        if per_dataset:
            mem += B * 2 * 8.0 * E * 12 * len(seeds)
            secs += _limits.SECONDS_PER_ELEMENT * B * E * len(seeds) * (24 + E)
        mem += min(B, BLOCK_SIZE) * 8.0 * E * (sum(s + c for s, c in zip(seeds, cells)) + 24)
        secs += 2.0 * B * E * sum(s * c for s, c in zip(seeds, cells)) / _limits.FLOPS_PER_SECOND
        secs += _limits.SECONDS_PER_ELEMENT * B * E * (24 + E)
    return _limits.Work(what=what, setting=f"{setting} ({B:,} replicates)", memory_bytes=mem,
                seconds=secs, detail=f"{B:,} replicates x {E_max} encoders")
