"""The mechanism analyses of CRS-Bench (E1, E3, E4, E6) and the institutional shift, from
the runs table, with paired-seed bootstrap intervals.

* :func:`specialization` (E1): an encoder's AUROC gain over a baseline set of encoders on
  the datasets of its own domain (matched) and on the others (cross), and their contrast.
* :func:`layer_comparison` (E3): the four CRS axes per encoder and feature layer, the best
  layer chosen on a validation criterion, and best-minus-last differences.
* :func:`confidence_loss` (E4): per perturbation x severity the change in ECE next to the
  change in AUROC, a flag where calibration degrades while discrimination holds, and a
  calibration-robustness companion axis (outside the CRS).
* :func:`shift_drop`: the AUROC and ECE change under the institutional shift per encoder,
  beside the corruption drop of the same datasets, with a rank of its own.
* :func:`label_efficiency_curves` and :func:`label_crossovers` (E6): AUROC against the
  label fraction with paired-seed bands, and the fraction at which an encoder that trails
  another at full labels overtakes it.

Every quantity is a function of seed-mean cells: per unit (regime x encoder, or regime x
encoder x layer), dataset, label fraction, condition and severity, the mean over seeds of
``auroc`` (or ``ece``). The bootstrap is the CRS's paired-seed bootstrap
(:mod:`stats.crs_resample`): per replicate and dataset the dataset's seeds are drawn with
replacement, shared by every unit, fraction and condition (so the regimes, layers and
encoders of a comparison are paired), in blocks of ``BLOCK_SIZE`` replicates from
``stats._rng.spawn(seed, blocks)``; a block's seed-means are one product of the seed-count
matrix ``W[b, seed]`` with the dense runs array (``W @ auroc.T / S``), and every statistic
is computed for all replicates at once. A unit without a drawn run in a cell is NaN there
(not estimable in that replicate; left out of the percentile interval and counted).
Percentile intervals; the two-sided bootstrap p of a difference is that of
:func:`stats.crs_bootstrap` (floored at ``2 / N``, N the equally likely seed draws).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import _validate as _v
from ._rng import spawn
from .crs import AXES, TIE_TOL, _dataset_axes, _mean_over_datasets, prepare_runs
from .crs_resample import (BLOCK_SIZE, METHOD, _boot_p, _draw_counts, _pack, _ranks,
                           _replicate_axes, _summary)
from .schema import RUNS_KEY, ContractError, tidy

__all__ = ["specialization", "layer_comparison", "confidence_loss", "shift_drop",
           "label_efficiency_curves", "label_crossovers"]

MSG_DOMAINS = ("specialization: encoder_domains must map encoder names to domain names; "
               "got {value!r}; write e.g. {{'derm_encoder': 'dermatology', 'resnet': "
               "'general'}}")
MSG_NO_BASELINE = ("specialization: no baseline encoder has runs ({detail}); name the "
                   "baseline encoders (e.g. the reference panel) or give encoder_domains a "
                   "generalist (a domain no dataset has)")
MSG_POLICY = "select_layers: policy must be 'last' or 'best'; got {value!r}; write policy='last'"
MSG_GIVEN_LAYER = ("select_layers: layers names {layer!r} for encoder {encoder}, whose runs "
                   "have layers {have}; name one of them")
MSG_LAST = ("layer_comparison: encoder {encoder} has layers {layers} and none is named "
            "{last!r} (the last layer); name it with last={{'{encoder}': '<layer>'}}")
MSG_NO_LAYER = ("layer_comparison: the runs table has no 'layer' column; add the layer each "
                "run's features came from")
MSG_MARGIN = ("confidence_loss: auroc_margin must be a finite number >= 0 (an AUROC drop "
              "small enough to count as held); got {value!r}; write e.g. auroc_margin=0.02")
MSG_NO_SHIFT = ("shift_drop: no dataset has runs at condition 'shift' (the institutional "
                "shift) at label fraction 1; add them or leave the shift table out")
MSG_NO_PERTURBATION = ("confidence_loss: no run at label fraction 1 has a perturbed "
                       "condition; add perturbed runs (blur, jpeg, ...)")
MSG_ONE_FRACTION = ("{func}: the curves need clean runs at two label fractions or more; "
                    "the runs have {fractions}")


# --------------------------------------------------------------------------- the dense cube


@dataclass
class _Cube:
    """Seed x cell arrays of ``auroc`` and ``ece`` per unit and dataset."""

    units: pd.DataFrame                 # one row per unit (its key columns), in array order
    datasets: list[str]
    seeds: list[np.ndarray]             # per dataset
    cells: list[pd.DataFrame]           # per dataset: label_fraction, condition, severity
    auc: list[np.ndarray]               # per dataset (U, C, S), NaN -> 0
    ece: list[np.ndarray]
    mask: list[np.ndarray]              # (U, C, S) 1.0 where a run exists

    def means(self, d: int, W: np.ndarray):
        """Seed-means (B, U, C) of auroc and ece on dataset ``d`` for counts ``W`` (B, S);
        NaN where the unit has no drawn run in the cell."""
        U, C, S = self.auc[d].shape
        den = np.einsum("bs,ks->bk", W, self.mask[d].reshape(-1, S))   # NumPy's loops
        a = np.einsum("bs,ks->bk", W, self.auc[d].reshape(-1, S))
        e = np.einsum("bs,ks->bk", W, self.ece[d].reshape(-1, S))
        with np.errstate(invalid="ignore", divide="ignore"):
            a = np.where(den > 0, a / den, np.nan).reshape(-1, U, C)
            e = np.where(den > 0, e / den, np.nan).reshape(-1, U, C)
        return a, e

    def cell(self, d: int, frac: float, cond: str, sev: int) -> int:
        """Column of a cell on dataset ``d`` (-1 when the dataset lacks it)."""
        c = self.cells[d]
        hit = np.flatnonzero((c["label_fraction"].to_numpy() == frac)
                             & (c["condition"].to_numpy() == cond)
                             & (c["severity"].to_numpy() == sev))
        return int(hit[0]) if len(hit) else -1

    @property
    def n_seed_resamples(self) -> float:
        n = 1.0
        for s in self.seeds:
            n *= float(len(s)) ** len(s)
        return n


def _pack_cube(df: pd.DataFrame, unit_cols: Sequence[str]) -> _Cube:
    units = df[list(unit_cols)].drop_duplicates().sort_values(list(unit_cols)).reset_index(drop=True)
    uidx = pd.MultiIndex.from_frame(units).get_indexer(pd.MultiIndex.from_frame(df[list(unit_cols)]))
    cube = _Cube(units, sorted(pd.unique(df["dataset"])), [], [], [], [], [])
    U = len(units)
    for ds in cube.datasets:
        sel = df["dataset"].to_numpy() == ds
        sub = df[sel]
        seeds = np.sort(pd.unique(sub["seed"]))
        cells = (sub[["label_fraction", "condition", "severity"]].drop_duplicates()
                 .sort_values(["label_fraction", "condition", "severity"]).reset_index(drop=True))
        c_idx = pd.MultiIndex.from_frame(cells).get_indexer(
            pd.MultiIndex.from_frame(sub[["label_fraction", "condition", "severity"]]))
        s_idx = np.searchsorted(seeds, sub["seed"].to_numpy())
        shape = (U, len(cells), len(seeds))
        auc, ece, mask = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        auc[uidx[sel], c_idx, s_idx] = sub["auroc"].to_numpy(dtype=float)
        ece[uidx[sel], c_idx, s_idx] = sub["ece"].to_numpy(dtype=float)
        mask[uidx[sel], c_idx, s_idx] = 1.0
        cube.seeds.append(seeds)
        cube.cells.append(cells)
        cube.auc.append(auc)
        cube.ece.append(ece)
        cube.mask.append(mask)
    return cube


def _resample(cube: _Cube, fn: Callable[[list], np.ndarray], n_boot: int, seed):
    """``fn`` on the point seed-means (every seed once) and on ``n_boot`` paired-seed
    replicates: ``fn(means) -> (B, ...)`` with ``means[d] = (auroc, ece)`` (B, U, C).
    Returns (point (...), replicates (n_boot, ...))."""
    point = fn([cube.means(d, np.ones((1, len(s)))) for d, s in enumerate(cube.seeds)])[0]
    sizes = [min(BLOCK_SIZE, n_boot - s) for s in range(0, n_boot, BLOCK_SIZE)]
    blocks = []
    for rng, n in zip(spawn(seed, len(sizes)), sizes):
        means = [cube.means(d, _draw_counts(rng, n, len(s))[1].astype(float))
                 for d, s in enumerate(cube.seeds)]
        blocks.append(fn(means))
    return point, np.concatenate(blocks, axis=0)


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    """Mean over the finite values along ``axis`` (NaN where none), without warnings."""
    ok = ~np.isnan(x)
    n = ok.sum(axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.where(ok, x, 0.0).sum(axis) / n, np.nan)


def _rows(point: np.ndarray, reps: np.ndarray, conf_level: float, n_res: float,
          p_value: bool = False) -> dict:
    """Columns estimate, std_error, conf_low, conf_high (, p_value), n_boot_not_estimable,
    flag for flat arrays of estimates ``point`` (m,) and replicates ``reps`` (B, m)."""
    lo, hi, se, n_bad = _summary(reps, conf_level)
    out = {"estimate": point, "std_error": se, "conf_low": lo, "conf_high": hi,
           "n_boot_not_estimable": n_bad,
           "flag": np.where(np.isnan(point), "not_estimable",
                            np.where(n_bad > 0, "replicates_not_estimable", ""))}
    if p_value:
        out["p_value"] = _boot_p(reps, n_res)
    return out


def _finish(frame: pd.DataFrame, *, n_boot: int, conf_level: float, n_res: float,
            group_cols: tuple[str, ...]) -> pd.DataFrame:
    frame["conf_level"] = conf_level
    frame["method"] = METHOD
    frame["n_boot"] = float(n_boot)
    frame["n_seed_resamples"] = n_res
    return tidy(frame, group_cols=group_cols)


def _check(func: str, n_boot, conf_level) -> tuple[int, float]:
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", minimum=2, fix="e.g. n_boot=2000")
    return n_boot, _v.level(conf_level, func=func)


def _crs_rows(runs) -> pd.DataFrame:
    """The runs, validated for the CRS: one layer and protocol per regime x encoder."""
    return prepare_runs(runs)


# --------------------------------------------------------------------------- E1


def specialization(runs, encoder_domains: Mapping[str, str], *,
                   dataset_domains: Mapping[str, str] | None = None,
                   baseline: Sequence[str] | None = None, n_boot: int = 2000, seed=None,
                   conf_level: float = 0.95) -> pd.DataFrame:
    """Specialization (CRS-Bench E1): matched-domain versus cross-domain AUROC gain.

    Parameters
    ----------
    runs : DataFrame or path
        The runs table (one layer and protocol per encoder).
    encoder_domains : mapping encoder -> domain
        The domain an encoder was pretrained for (its family); an encoder whose domain no
        dataset has (e.g. ``general``) is a generalist. Encoders not named are generalists.
    dataset_domains : mapping dataset -> domain, optional
        Default: each dataset is its own domain (its name).
    baseline : encoder names, optional
        The encoders the gain is measured against (e.g. the reference panel); default the
        generalists.
    n_boot, seed, conf_level
        Paired-seed bootstrap (module docstring).

    Returns
    -------
    DataFrame (tidy)
        Per regime and encoder (``level`` "encoder") and per regime and family (``level``
        "family", ``encoder`` ""; the mean over the family's encoders): ``matched_auroc``
        and ``cross_auroc`` (AUROC_1, the seed-mean clean AUROC at full labels, averaged
        over the datasets of the encoder's domain and over the others), ``matched_gain``
        and ``cross_gain`` (the same averages of AUROC_1 minus the mean AUROC_1 of the
        baseline encoders on the dataset) and ``specialization`` (matched_gain minus
        cross_gain); extras ``family``, ``level``, ``matched_datasets``, ``n_boot``,
        ``n_boot_not_estimable``, ``n_seed_resamples``. Without a matched (or cross)
        dataset the matched (cross) rows and the contrast are NaN, flag
        ``not_estimable``. ``p_value``: two-sided bootstrap p of the gains and the contrast
        being 0.

    Notes
    -----
    gain_k(d) = AUROC_1(k, d) - mean_{b in baseline} AUROC_1(b, d); matched_gain =
    mean over d in domain(k); specialization = matched_gain - cross_gain. A baseline
    encoder's gain is measured against a baseline that includes it.
    """
    func = "specialization"
    n_boot, conf_level = _check(func, n_boot, conf_level)
    if not isinstance(encoder_domains, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in encoder_domains.items()):
        raise ContractError(MSG_DOMAINS.format(value=encoder_domains))
    df = _crs_rows(runs)
    full = df[(df["condition"] == "clean") & (df["label_fraction"] == 1.0)]
    cube = _pack_cube(full, ["regime", "encoder"])
    ds_dom = {d: str((dataset_domains or {}).get(d, d)) for d in cube.datasets}
    enc = cube.units["encoder"].to_numpy(dtype=object)
    reg = cube.units["regime"].to_numpy(dtype=object)
    fam = np.array([str(encoder_domains.get(e, "general")) for e in enc], dtype=object)
    matched = np.array([[fam[u] == ds_dom[d] for d in cube.datasets] for u in range(len(enc))])
    generalist = ~matched.any(1)
    if baseline is None:
        base = generalist
    else:
        base = np.isin(enc, list(baseline))
    if not base.any():
        raise ContractError(MSG_NO_BASELINE.format(
            detail="no generalist" if baseline is None else f"baseline {list(baseline)[:5]}"))
    regimes = sorted(pd.unique(reg))
    families = sorted(pd.unique(fam))
    fam_units = [(r, f, np.flatnonzero((reg == r) & (fam == f))) for r in regimes for f in families]
    fam_units = [x for x in fam_units if len(x[2])]

    def fn(means):
        a = np.stack([m[0][:, :, cube.cell(d, 1.0, "clean", 0)] for d, m in enumerate(means)],
                     axis=-1)                                              # (B, U, D)
        gain = np.empty_like(a)
        for r in regimes:                    # regimes, not replicates
            sel = reg == r
            b = sel & base
            ref = _nanmean(a[:, b, :], axis=1) if b.any() else np.full(a.shape[::2], np.nan)
            gain[:, sel, :] = a[:, sel, :] - ref[:, None, :]
        m, c = matched[None], ~matched[None]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = np.stack([_nanmean(np.where(m, a, np.nan), 2), _nanmean(np.where(c, a, np.nan), 2),
                            _nanmean(np.where(m, gain, np.nan), 2),
                            _nanmean(np.where(c, gain, np.nan), 2)], axis=-1)    # (B, U, 4)
        out = np.concatenate([out, (out[..., 2] - out[..., 3])[..., None]], axis=-1)
        fams = np.stack([_nanmean(out[:, idx], axis=1) for _, _, idx in fam_units], axis=1) \
            if fam_units else np.empty((out.shape[0], 0, 5))
        return np.concatenate([out, fams], axis=1)                       # (B, U + F, 5)

    point, reps = _resample(cube, fn, n_boot, seed)
    # a family mean over encoders with a NaN: NaN (not a mean over fewer encoders)
    names = ("matched_auroc", "cross_auroc", "matched_gain", "cross_gain", "specialization")
    U, F = len(enc), len(fam_units)
    matched_ds = [", ".join(d for d, hit in zip(cube.datasets, matched[u]) if hit) for u in range(U)]
    frame = pd.DataFrame({
        "estimand": np.tile(names, U + F),
        "encoder": np.repeat(np.concatenate([enc, np.full(F, "", dtype=object)]), 5),
        "regime": np.repeat(np.concatenate([reg, np.array([r for r, _, _ in fam_units], dtype=object)]), 5),
        "family": np.repeat(np.concatenate([fam, np.array([f for _, f, _ in fam_units], dtype=object)]), 5),
        "level": np.repeat(["encoder"] * U + ["family"] * F, 5),
        "matched_datasets": np.repeat(matched_ds + [""] * F, 5),
        "n": np.repeat(np.concatenate([np.ones(U), [len(i) for _, _, i in fam_units]]), 5),
        **_rows(point.ravel(), reps.reshape(n_boot, -1), conf_level, cube.n_seed_resamples,
                p_value=True)})
    frame.loc[frame["estimand"].isin(["matched_auroc", "cross_auroc"]), "p_value"] = np.nan
    frame["baseline"] = ", ".join(sorted(map(str, enc[base])))
    return _finish(frame, n_boot=n_boot, conf_level=conf_level, n_res=cube.n_seed_resamples,
                   group_cols=("encoder", "regime", "family"))


# --------------------------------------------------------------------------- E3


def _last_layer(encoder: str, layers: list[str], last) -> str:
    name = last.get(encoder, "last") if isinstance(last, Mapping) else str(last)
    if len(layers) == 1:
        return layers[0]
    if name not in layers:
        raise ContractError(MSG_LAST.format(encoder=encoder, layers=layers, last=name))
    return name


def _layer_table(raw: pd.DataFrame, last, criterion: str) -> tuple[pd.DataFrame, bool]:
    """Per regime x encoder x layer: the criterion (seed-mean at clean, full labels, mean
    over datasets), the layer order (first appearance), and per regime x encoder the last
    and the best layer (highest criterion; ties to the last layer, then to the first in
    the table). Returns (table, whether the criterion is val_auroc)."""
    key = ["regime", "encoder", "layer"]
    order = {v: i for i, v in enumerate(pd.unique(raw["layer"]))}
    parts = raw[key].drop_duplicates().sort_values(key).reset_index(drop=True)
    use_val = criterion == "val_auroc" and "val_auroc" in raw.columns \
        and raw["val_auroc"].notna().any()
    col = "val_auroc" if use_val else "auroc"
    base = raw[(raw["condition"] == "clean") & (raw["label_fraction"] == 1.0)]
    crit = (base.groupby([*key, "dataset"])[col].mean().groupby(key).mean())
    parts["criterion"] = [crit.get(tuple(k), np.nan) for k in parts[key].itertuples(index=False)]
    parts["order"] = parts["layer"].map(order)
    best, lastl = {}, {}
    for (r, e), g in parts.groupby(["regime", "encoder"], sort=True):
        layers = list(g.sort_values("order")["layer"])
        lastl[(r, e)] = _last_layer(e, layers, last)
        c = g.set_index("layer")["criterion"]
        top = c.max()
        cand = [lay for lay in layers if np.isfinite(c[lay]) and c[lay] >= top - TIE_TOL]
        best[(r, e)] = lastl[(r, e)] if lastl[(r, e)] in cand else (cand[0] if cand else lastl[(r, e)])
    pairs = list(zip(parts["regime"], parts["encoder"]))
    parts["best_layer"] = [best[k] for k in pairs]
    parts["last_layer"] = [lastl[k] for k in pairs]
    return parts, use_val


def select_layers(runs, *, policy: str = "last", last: str | Mapping[str, str] = "last",
                  layers: Mapping[str, str] | None = None,
                  criterion: str = "val_auroc") -> pd.DataFrame:
    """The layer each regime x encoder is ranked on (not a statistic: a row selection).

    ``policy`` "last" (the layer named by ``last``, or an encoder's only layer) or "best"
    (the highest criterion, as :func:`layer_comparison` chooses it); ``layers`` (encoder
    -> layer) overrides the policy. Returns one row per regime x encoder: ``regime``,
    ``encoder``, ``layer``, ``rule`` (``last``, ``best val_auroc``, ``best auroc (test)``,
    ``given``, ``only layer``), ``criterion`` (the chosen layer's criterion value),
    ``n_layers``. A runs table without a ``layer`` column gives layer ``""``.
    """
    from .schema import read_runs

    raw = read_runs(runs)
    if "layer" not in raw.columns:
        t = raw[["regime", "encoder"]].drop_duplicates().sort_values(["regime", "encoder"])
        return t.assign(layer="", rule="only layer", criterion=np.nan, n_layers=1).reset_index(drop=True)
    if policy not in ("last", "best"):
        raise ContractError(MSG_POLICY.format(value=policy))
    layers = dict(layers or {})
    parts, use_val = _layer_table(raw, last, criterion)
    n = parts.groupby(["regime", "encoder"])["layer"].transform("size")
    rows = []
    for (r, e), g in parts.groupby(["regime", "encoder"], sort=True):
        have = list(g["layer"])
        if e in layers:
            if layers[e] not in have:
                raise ContractError(MSG_GIVEN_LAYER.format(layer=layers[e], encoder=e,
                                                           have=sorted(have)))
            lay, rule = layers[e], "given"
        elif len(have) == 1:
            lay, rule = have[0], "only layer"
        elif policy == "last":
            lay, rule = g["last_layer"].iloc[0], "last"
        else:
            lay, rule = g["best_layer"].iloc[0], ("best val_auroc" if use_val else "best auroc (test)")
        c = g.set_index("layer")["criterion"]
        rows.append({"regime": r, "encoder": e, "layer": lay, "rule": rule,
                     "criterion": float(c[lay]), "n_layers": int(n[g.index[0]])})
    return pd.DataFrame(rows)


def layer_comparison(runs, *, last: str | Mapping[str, str] = "last",
                     criterion: str = "val_auroc", n_boot: int = 2000, seed=None,
                     conf_level: float = 0.95) -> pd.DataFrame:
    """Feature depth as a factor (CRS-Bench E3): the CRS axes per encoder and layer, the
    best layer on a validation criterion, and best-minus-last differences (tidy).

    Parameters
    ----------
    runs : DataFrame or path
        A runs table with a ``layer`` column (several layers per encoder allowed; one
        protocol per regime and encoder).
    last : str or mapping encoder -> layer
        The name of an encoder's last (final) layer; default ``"last"``. An encoder with
        one layer needs none.
    criterion : "val_auroc" or "auroc"
        The selection criterion: the seed-mean ``val_auroc`` column (the probe's AUROC on
        a validation split of the training data) of the clean runs at full labels, mean
        over datasets; without that column (or with ``"auroc"``) the test AUROC, and the
        rows say so (flag ``selected_on_test``: optimistic).
    n_boot, seed, conf_level
        Paired-seed bootstrap; layers of an encoder share the seed draws.

    Returns
    -------
    DataFrame (tidy), grouping ``encoder, regime, layer``
        ``estimand`` discrimination, calibration, label_efficiency, robustness per layer
        (the CRS axes, mean over datasets) with CIs; ``selection_criterion`` per layer (its
        value; extra ``selected`` True for the chosen layer: the highest criterion, ties
        to the last layer, then to the first in the table); per regime and encoder with
        two or more layers ``difference_<axis>`` (best layer minus last layer; ``layer``
        "best - last") with CI and bootstrap p (0 and flag ``best_is_last`` when the best
        layer is the last). Extras ``criterion``, ``best_layer``, ``last_layer``,
        ``layer_order`` (first appearance in the table), ``n_boot``,
        ``n_boot_not_estimable``, ``n_seed_resamples``.
    """
    func = "layer_comparison"
    n_boot, conf_level = _check(func, n_boot, conf_level)
    if criterion not in ("val_auroc", "auroc"):
        raise ContractError(f"{func}: criterion must be 'val_auroc' or 'auroc'; got {criterion!r}")
    from .schema import read_runs

    raw = read_runs(runs)
    if "layer" not in raw.columns:
        raise ContractError(MSG_NO_LAYER, column="layer")
    for cond in ("clean", "shift"):     # the CRS rule on severities (prepare_runs)
        bad = raw[(raw["condition"] == cond) & (raw["severity"] != 0)]
        if len(bad):
            prepare_runs(raw)
    # one unit per regime x encoder x layer, scored by the CRS axes code
    key = ["regime", "encoder", "layer"]
    parts, use_val = _layer_table(raw, last, criterion)
    crit_col = "val_auroc" if use_val else "auroc"
    code = pd.MultiIndex.from_frame(parts[key]).get_indexer(pd.MultiIndex.from_frame(raw[key]))
    labels = [f"u{i:06d}" for i in range(len(parts))]
    df = raw.assign(encoder=np.asarray(labels, dtype=object)[code], regime="all")
    dup = df.duplicated(["encoder", *RUNS_KEY], keep=False).to_numpy()
    if dup.any():
        prepare_runs(raw)    # several protocols of one layer: the CRS's message
    dense = _pack(df, "all", labels, [], np.zeros((4, 2)), {})
    point_axes = _mean_over_datasets(_dataset_axes(df)).set_index("encoder").loc[labels, list(AXES)]
    best = {(r, e): b for r, e, b in zip(parts["regime"], parts["encoder"], parts["best_layer"])}
    lastl = {(r, e): b for r, e, b in zip(parts["regime"], parts["encoder"], parts["last_layer"])}
    idx = {tuple(k): i for i, k in enumerate(parts[key].itertuples(index=False))}
    n_layers = parts.groupby(["regime", "encoder"]).size()
    pairs = [(r, e, idx[(r, e, best[(r, e)])], idx[(r, e, lastl[(r, e)])])
             for (r, e) in best if n_layers[(r, e)] > 1]
    sizes = [min(BLOCK_SIZE, n_boot - s) for s in range(0, n_boot, BLOCK_SIZE)]
    blocks = []
    for rng, n in zip(spawn(seed, len(sizes)), sizes):
        counts = [_draw_counts(rng, n, arr.n_seeds)[1] for arr in dense.arrays]
        blocks.append(_replicate_axes(dense, counts))
    reps = np.concatenate(blocks, axis=0)                                # (B, U, 4)
    n_res = 1.0
    for arr in dense.arrays:
        n_res *= float(arr.n_seeds) ** arr.n_seeds
    pt = point_axes.to_numpy(dtype=float)
    U = len(labels)
    frames = [pd.DataFrame({
        "estimand": np.tile(AXES, U), "encoder": np.repeat(parts["encoder"], 4),
        "regime": np.repeat(parts["regime"], 4), "layer": np.repeat(parts["layer"], 4),
        "layer_order": np.repeat(parts["order"].astype(float), 4),
        **_rows(pt.ravel(), reps.reshape(n_boot, -1), conf_level, n_res)})]
    frames.append(pd.DataFrame({
        "estimand": "selection_criterion", "encoder": parts["encoder"], "regime": parts["regime"],
        "layer": parts["layer"], "layer_order": parts["order"].astype(float),
        "estimate": parts["criterion"].to_numpy(dtype=float),
        "selected": [best[(r, e)] == lay for r, e, lay in zip(parts["regime"], parts["encoder"],
                                                              parts["layer"])],
        "flag": np.where(parts["criterion"].isna(), "not_estimable", "")}))
    if pairs:
        ib = np.array([p[2] for p in pairs])
        il = np.array([p[3] for p in pairs])
        d_pt = pt[ib] - pt[il]                                           # (P, 4)
        d_rep = reps[:, ib] - reps[:, il]
        P = len(pairs)
        f = pd.DataFrame({
            "estimand": np.tile([f"difference_{a}" for a in AXES], P),
            "encoder": np.repeat([p[1] for p in pairs], 4),
            "regime": np.repeat([p[0] for p in pairs], 4), "layer": "best - last",
            **_rows(d_pt.ravel(), d_rep.reshape(n_boot, -1), conf_level, n_res, p_value=True)})
        same = np.repeat(ib == il, 4)
        f.loc[same, ["estimate", "std_error", "conf_low", "conf_high"]] = 0.0
        f.loc[same, "p_value"] = 1.0
        f.loc[same, "flag"] = "best_is_last"
        frames.append(f)
    out = pd.concat(frames, ignore_index=True)
    out["selected"] = out["selected"].map(lambda v: v is True or v is np.True_).astype(bool)
    key = list(zip(out["regime"], out["encoder"]))
    out["best_layer"] = [best[k] for k in key]
    out["last_layer"] = [lastl[k] for k in key]
    out["criterion"] = crit_col if use_val else "auroc (test)"
    if not use_val:
        sel = out["estimand"] == "selection_criterion"
        out.loc[sel & (out["flag"] == ""), "flag"] = "selected_on_test"
    out["n"] = np.nan
    return _finish(out, n_boot=n_boot, conf_level=conf_level, n_res=n_res,
                   group_cols=("encoder", "regime", "layer"))


# --------------------------------------------------------------------------- E4 and shift


def _perturbation_cells(cube: _Cube) -> pd.DataFrame:
    cells = pd.concat(cube.cells, ignore_index=True)
    cells = cells[(cells["label_fraction"] == 1.0) & ~cells["condition"].isin(["clean", "shift"])]
    return cells[["condition", "severity"]].drop_duplicates().sort_values(
        ["condition", "severity"]).reset_index(drop=True)


def confidence_loss(runs, *, auroc_margin: float = 0.02, n_boot: int = 2000, seed=None,
                    conf_level: float = 0.95) -> pd.DataFrame:
    """Confidence loss under corruption (CRS-Bench E4): the change in ECE next to the
    change in AUROC per perturbation x severity, and a calibration-robustness axis (tidy).

    Parameters
    ----------
    runs : DataFrame or path
        The runs table (one layer and protocol per encoder).
    auroc_margin : float
        An AUROC drop smaller than this counts as discrimination held (default 0.02).
    n_boot, seed, conf_level
        Paired-seed bootstrap (module docstring); a perturbed cell and the clean cell of
        the same encoder share the seed draws.

    Returns
    -------
    DataFrame (tidy), grouping ``encoder, regime, condition, severity``
        ``delta_auroc`` (AUROC_c - AUROC_clean) and ``delta_ece`` (ECE_c - ECE_clean),
        seed-means at full labels per dataset, then the mean over the datasets with that
        cell; CI and bootstrap p of 0. Extra ``confidence_loss`` True on both rows of a
        cell where calibration degrades while discrimination holds: the lower limit of
        delta_ece above 0 and the lower limit of delta_auroc above ``-auroc_margin``.
        ``calibration_robustness`` (``condition`` "all", ``severity`` NaN): per dataset
        1 - (mean_c i_c + max_c i_c) / 2 with i_c = max(0, ECE_c - ECE_clean) over every
        perturbation x severity and the shift, then the mean over datasets: the robustness
        axis's form with ECE (1 = ECE never rises); a companion axis, not part of the
        CRS. Extras ``auroc_margin``, ``n_boot``, ``n_boot_not_estimable``,
        ``n_seed_resamples``.
    """
    func = "confidence_loss"
    n_boot, conf_level = _check(func, n_boot, conf_level)
    try:
        margin = float(auroc_margin)
    except (TypeError, ValueError):
        raise ContractError(MSG_MARGIN.format(value=auroc_margin)) from None
    if isinstance(auroc_margin, bool) or not np.isfinite(margin) or margin < 0:
        raise ContractError(MSG_MARGIN.format(value=auroc_margin))
    df = _crs_rows(runs)
    df = df[df["label_fraction"] == 1.0]
    cube = _pack_cube(df, ["regime", "encoder"])
    cells = _perturbation_cells(cube)
    if not len(cells):
        raise ContractError(MSG_NO_PERTURBATION)
    K = len(cells)
    cell_cols = [[cube.cell(d, 1.0, c, s) for c, s in cells.itertuples(index=False)]
                 for d in range(len(cube.datasets))]
    other = [[j for j, (c, s) in enumerate(cube.cells[d][["condition", "severity"]].itertuples(index=False))
              if c != "clean"] for d in range(len(cube.datasets))]

    def fn(means):
        da, de, cr = [], [], []
        for d, (a, e) in enumerate(means):
            c0 = cube.cell(d, 1.0, "clean", 0)
            cols = np.array(cell_cols[d])
            take = np.where(cols >= 0, cols, 0)
            x = np.where(cols >= 0, a[:, :, take] - a[:, :, [c0]], np.nan)
            y = np.where(cols >= 0, e[:, :, take] - e[:, :, [c0]], np.nan)
            da.append(x)
            de.append(y)
            inc = np.maximum(0.0, e[:, :, other[d]] - e[:, :, [c0]])
            ok = ~np.isnan(inc)
            worst = np.where(ok.any(-1), np.where(ok, inc, -np.inf).max(-1), np.nan)
            cr.append(1.0 - (_nanmean(inc, -1) + worst) / 2.0)
        da = _nanmean(np.stack(da, -1), -1)                               # (B, U, K)
        de = _nanmean(np.stack(de, -1), -1)
        cr = _nanmean(np.stack(cr, -1), -1)[..., None]                    # (B, U, 1)
        return np.concatenate([da, de, cr], axis=-1)

    point, reps = _resample(cube, fn, n_boot, seed)
    U = len(cube.units)
    n_res = cube.n_seed_resamples
    r = _rows(point.ravel(), reps.reshape(n_boot, -1), conf_level, n_res, p_value=True)
    est = (["delta_auroc"] * K + ["delta_ece"] * K + ["calibration_robustness"])
    cond = list(cells["condition"]) * 2 + ["all"]
    sev = list(cells["severity"].astype(float)) * 2 + [np.nan]
    frame = pd.DataFrame({
        "estimand": np.tile(est, U), "encoder": np.repeat(cube.units["encoder"], 2 * K + 1),
        "regime": np.repeat(cube.units["regime"], 2 * K + 1),
        "condition": np.tile(cond, U), "severity": np.tile(sev, U), **r})
    lo = frame["conf_low"].to_numpy().reshape(U, 2 * K + 1)
    loss = (lo[:, K:2 * K] > TIE_TOL) & (lo[:, :K] > -margin)              # (U, K)
    flag = np.concatenate([loss, loss, np.zeros((U, 1), bool)], axis=1).ravel()
    frame["confidence_loss"] = flag
    frame.loc[frame["estimand"] == "calibration_robustness", "p_value"] = np.nan
    frame["auroc_margin"] = margin
    frame["n"] = np.nan
    return _finish(frame, n_boot=n_boot, conf_level=conf_level, n_res=n_res,
                   group_cols=("encoder", "regime", "condition", "severity"))


def shift_drop(runs, *, n_boot: int = 2000, seed=None, conf_level: float = 0.95) -> pd.DataFrame:
    """The institutional shift on its own (tidy): per encoder the AUROC drop and the ECE
    increase under ``condition == "shift"``, beside the corruption drop of the same
    datasets, with paired-seed intervals and a rank of its own.

    Parameters
    ----------
    runs : DataFrame or path
        The runs table (one layer and protocol per encoder); datasets with shift runs.
    n_boot, seed, conf_level
        Paired-seed bootstrap (module docstring).

    Returns
    -------
    DataFrame (tidy), grouping ``encoder, regime``
        ``shift_auroc_drop`` (AUROC_clean - AUROC_shift), ``shift_ece_increase``
        (ECE_shift - ECE_clean), ``corruption_auroc_drop`` and ``corruption_ece_increase``
        (the same changes averaged over every perturbation x severity), seed-means at full
        labels per dataset, then the mean over the datasets that have a shift; CIs and
        bootstrap p of 0; ``shift_rank`` (rank of the shift AUROC drop within the regime,
        1 = the smallest drop; ties share the better rank; CI the percentiles of the
        replicate ranks, over the replicates in which every encoder's drop is estimable).
        Extras ``datasets`` (those with a shift), ``n_boot``, ``n_boot_not_estimable``,
        ``n_seed_resamples``.
    """
    func = "shift_drop"
    n_boot, conf_level = _check(func, n_boot, conf_level)
    df = _crs_rows(runs)
    df = df[df["label_fraction"] == 1.0]
    has = sorted(pd.unique(df.loc[df["condition"] == "shift", "dataset"]))
    if not has:
        raise ContractError(MSG_NO_SHIFT)
    cube = _pack_cube(df[df["dataset"].isin(has)], ["regime", "encoder"])
    pert = [[j for j, c in enumerate(cube.cells[d]["condition"]) if c not in ("clean", "shift")]
            for d in range(len(cube.datasets))]
    regimes = cube.units["regime"].to_numpy(dtype=object)

    def fn(means):
        out = []
        for d, (a, e) in enumerate(means):
            c0, cs = cube.cell(d, 1.0, "clean", 0), cube.cell(d, 1.0, "shift", 0)
            nan = np.full(a.shape[:2], np.nan)
            sa = a[:, :, c0] - a[:, :, cs] if cs >= 0 else nan
            se = e[:, :, cs] - e[:, :, c0] if cs >= 0 else nan
            ca = _nanmean(a[:, :, [c0]] - a[:, :, pert[d]], -1) if pert[d] else nan
            ce = _nanmean(e[:, :, pert[d]] - e[:, :, [c0]], -1) if pert[d] else nan
            out.append(np.stack([sa, se, ca, ce], -1))
        x = _nanmean(np.stack(out, -1), -1)                              # (B, U, 4)
        rank = np.full(x.shape[:2], np.nan)
        for r in pd.unique(regimes):
            sel = regimes == r
            drop = x[:, sel, 0]
            bad = np.isnan(drop).any(1)
            rk = _ranks(-drop).astype(float)
            rank[:, sel] = np.where(bad[:, None], np.nan, rk)
        return np.concatenate([x, rank[..., None]], axis=-1)

    point, reps = _resample(cube, fn, n_boot, seed)
    U = len(cube.units)
    n_res = cube.n_seed_resamples
    names = ("shift_auroc_drop", "shift_ece_increase", "corruption_auroc_drop",
             "corruption_ece_increase", "shift_rank")
    frame = pd.DataFrame({
        "estimand": np.tile(names, U), "encoder": np.repeat(cube.units["encoder"], 5),
        "regime": np.repeat(cube.units["regime"], 5),
        **_rows(point.ravel(), reps.reshape(n_boot, -1), conf_level, n_res, p_value=True)})
    frame.loc[frame["estimand"] == "shift_rank", "p_value"] = np.nan
    frame["datasets"] = ", ".join(has)
    frame["n"] = np.repeat(cube.units.groupby("regime")["encoder"].transform("size").to_numpy(dtype=float), 5)
    return _finish(frame, n_boot=n_boot, conf_level=conf_level, n_res=n_res,
                   group_cols=("encoder", "regime"))


# --------------------------------------------------------------------------- E6


def _curves(runs, func: str, n_boot: int, seed):
    df = _crs_rows(runs)
    df = df[df["condition"] == "clean"]
    fracs = np.sort(pd.unique(df["label_fraction"]))[::-1]                 # 1 first
    if len(fracs) < 2:
        raise ContractError(MSG_ONE_FRACTION.format(func=func, fractions=list(fracs)))
    cube = _pack_cube(df, ["regime", "encoder"])
    cols = [[cube.cell(d, float(f), "clean", 0) for f in fracs] for d in range(len(cube.datasets))]

    def fn(means):
        per = []
        for d, (a, _) in enumerate(means):
            c = np.array(cols[d])
            per.append(np.where(c >= 0, a[:, :, np.where(c >= 0, c, 0)], np.nan))
        return _nanmean(np.stack(per, -1), -1)                             # (B, U, F)

    point, reps = _resample(cube, fn, n_boot, seed)
    return cube, fracs, point, reps


def label_efficiency_curves(runs, *, n_boot: int = 2000, seed=None,
                            conf_level: float = 0.95) -> pd.DataFrame:
    """Learning curves (CRS-Bench E6): AUROC against the label fraction with paired-seed
    bands (tidy).

    Returns
    -------
    DataFrame (tidy), grouping ``encoder, regime, label_fraction``
        ``auroc``: the seed-mean clean AUROC at each label fraction, mean over the
        encoder's datasets with that fraction; ``retention`` ((AUROC_f - 0.5) /
        (AUROC_1 - 0.5), the label-efficiency axis's term; NaN at AUROC_1 <= 0.5); CIs
        (bands) from the paired-seed bootstrap. Extras ``n_boot``,
        ``n_boot_not_estimable``, ``n_seed_resamples``.
    """
    func = "label_efficiency_curves"
    n_boot, conf_level = _check(func, n_boot, conf_level)
    cube, fracs, point, reps = _curves(runs, func, n_boot, seed)

    def retention(x):
        den = x[..., :1] - 0.5
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > TIE_TOL, (x - 0.5) / den, np.nan)

    U, F = point.shape
    n_res = cube.n_seed_resamples
    frames = []
    for name, p, r in (("auroc", point, reps), ("retention", retention(point), retention(reps))):
        frames.append(pd.DataFrame({
            "estimand": name, "encoder": np.repeat(cube.units["encoder"], F),
            "regime": np.repeat(cube.units["regime"], F), "label_fraction": np.tile(fracs, U),
            **_rows(p.ravel(), r.reshape(n_boot, -1), conf_level, n_res)}))
    out = pd.concat(frames, ignore_index=True)
    out["n"] = np.nan
    return _finish(out, n_boot=n_boot, conf_level=conf_level, n_res=n_res,
                   group_cols=("encoder", "regime", "label_fraction"))


def _crossing(d: np.ndarray, fracs: np.ndarray) -> np.ndarray:
    """Crossover fraction per row of ``d`` (..., F): AUROC of A minus B at the fractions
    ``fracs`` (descending, 1 first). 1 where A already leads at full labels; else the
    log-linear interpolation between the last fraction where A does not lead and the first
    where it leads (more than TIE_TOL); NaN where A never leads."""
    lead = d > TIE_TOL
    anyl = lead.any(-1)
    j = np.argmax(lead, axis=-1)
    jm = np.maximum(j - 1, 0)
    dj = np.take_along_axis(d, j[..., None], -1)[..., 0]
    dm = np.take_along_axis(d, jm[..., None], -1)[..., 0]
    lf = np.log(fracs)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(dj - dm != 0, -dm / (dj - dm), 0.0)
    x = np.exp(lf[jm] + np.clip(t, 0, 1) * (lf[j] - lf[jm]))
    return np.where(~anyl, np.nan, np.where(j == 0, 1.0, x))


def label_crossovers(runs, *, n_boot: int = 2000, seed=None,
                     conf_level: float = 0.95) -> pd.DataFrame:
    """Label-efficiency crossovers (CRS-Bench E6): for every pair of encoders of a regime,
    the label fraction at which the encoder behind at full labels overtakes the other as
    labels shrink, with its uncertainty (tidy).

    Returns
    -------
    DataFrame (tidy), grouping ``encoder, comparator, regime``; ``encoder`` is the one
    behind at full labels (by the point AUROC_1, mean over datasets)
        ``crossover_fraction``: the largest label fraction at which ``encoder``'s mean AUROC
        exceeds ``comparator``'s, interpolated log-linearly between the two fractions
        around the sign change (NaN: it never does, flag ``no_crossover``); CI the
        percentiles over the replicates with a crossover (a replicate where ``encoder``
        already leads at full labels counts as 1). ``p_crossover``: the share of
        replicates with a crossover (no CI). ``auroc_gap_full`` and
        ``auroc_gap_lowest``: comparator minus encoder AUROC at full labels and encoder
        minus comparator at the lowest fraction, with CIs. Extras
        ``lowest_fraction``, ``n_boot``, ``n_boot_not_estimable`` (replicates without a
        crossover, for the crossover fraction), ``n_seed_resamples``.
    """
    func = "label_crossovers"
    n_boot, conf_level = _check(func, n_boot, conf_level)
    cube, fracs, point, reps = _curves(runs, func, n_boot, seed)
    reg = cube.units["regime"].to_numpy(dtype=object)
    enc = cube.units["encoder"].to_numpy(dtype=object)
    ia, ib = [], []
    for r in pd.unique(reg):
        idx = np.flatnonzero(reg == r)
        for x in range(len(idx)):
            for y in range(x + 1, len(idx)):
                i, j = idx[x], idx[y]
                # a: behind at full labels (ties: the later name is "behind")
                if point[i, 0] > point[j, 0] + TIE_TOL or (abs(point[i, 0] - point[j, 0]) <= TIE_TOL):
                    i, j = j, i
                ia.append(i)
                ib.append(j)
    cols = ["estimand", "encoder", "comparator", "regime"]
    if not ia:
        return _finish(pd.DataFrame(columns=cols), n_boot=n_boot, conf_level=conf_level,
                       n_res=cube.n_seed_resamples, group_cols=("encoder", "comparator", "regime"))
    ia, ib = np.array(ia), np.array(ib)
    d_pt = point[ia] - point[ib]                                          # (P, F)
    d_rep = reps[:, ia] - reps[:, ib]                                     # (B, P, F)
    x_pt, x_rep = _crossing(d_pt, fracs), _crossing(d_rep, fracs)
    n_res = cube.n_seed_resamples
    P = len(ia)
    base = {"encoder": enc[ia], "comparator": enc[ib], "regime": reg[ia]}
    cross = pd.DataFrame({"estimand": "crossover_fraction", **base,
                          **_rows(x_pt, x_rep, conf_level, n_res)})
    cross.loc[np.isnan(x_pt), "flag"] = "no_crossover"
    pcross = pd.DataFrame({"estimand": "p_crossover", **base,
                           "estimate": (~np.isnan(x_rep)).mean(0)})
    gap_full = pd.DataFrame({"estimand": "auroc_gap_full", **base,
                             **_rows(-d_pt[:, 0], -d_rep[:, :, 0], conf_level, n_res, p_value=True)})
    gap_low = pd.DataFrame({"estimand": "auroc_gap_lowest", **base,
                            **_rows(d_pt[:, -1], d_rep[:, :, -1], conf_level, n_res, p_value=True)})
    out = pd.concat([cross, pcross, gap_full, gap_low], ignore_index=True)
    out["lowest_fraction"] = float(fracs[-1])
    out["n"] = float(P)
    out.loc[out["estimand"] == "p_crossover", "conf_level"] = np.nan
    out = _finish(out, n_boot=n_boot, conf_level=conf_level, n_res=n_res,
                  group_cols=("encoder", "comparator", "regime"))
    out.loc[out["estimand"] == "p_crossover", "conf_level"] = np.nan
    return out
