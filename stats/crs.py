"""Reference-anchored Clinical Reliability Score (CRS) of frozen encoders.

Per-run probe outputs (the **runs** table) become four axes per encoder and dataset, then
their mean over datasets; the axes are normalized against a fixed reference panel and
combined into dominance, similarity, worst axis and the CRS (DESIGN.md, "CRS axes" and
"Reference anchoring"). A candidate's score depends only on its own runs and the fixed
reference, so adding candidates moves no existing score (tested bit for bit).

Formulas (per regime, encoder ``k`` and dataset ``d``; "seed-mean" = mean over seeds of one
cell; AUROC_f = seed-mean AUROC at ``condition == "clean"`` and label fraction ``f``)::

    discrimination   = AUROC_1
    calibration      = seed-mean ECE at clean, label fraction 1        (lower is better)
    label_efficiency = mean_{f < 1} (AUROC_f - 0.5) / (AUROC_1 - 0.5)
    robustness       = 1 - (mean_c r_c + max_c r_c) / 2,
                       r_c = max(0, AUROC_1 - AUROC_c) / (AUROC_1 - 0.5)
                       over every (perturbation, severity) and ``shift`` at fraction 1

then ``x_j(k)`` = mean over datasets. With anchors ``(lo_j, hi_j)`` (by default the min
and max of the panel's ``x_j``)::

    a_j = clip((x_j - lo_j) / (hi_j - lo_j), 0, 1)        (1 - that for calibration)
    D   = (1 + (#{r in R: a(k) Pareto-dominates a(r)} - #{r in R: a(r) dominates a(k)}) / |R|) / 2
    S   = 1 - ||a - 1||_2 / sqrt(m)                     (m = 4 axes)
    W   = min_j a_j
    CRS = w_D D + w_S S + w_W W                          (default w = 1/3 each)

Pareto dominance is taken on the normalized axes: ``a`` dominates ``b`` when
``a_j >= b_j`` on every axis and ``a_j > b_j`` on at least one (differences below 1e-12
count as ties). When ``AUROC_1 <= 0.5``
label efficiency and robustness are not estimable (NaN, flag ``not_estimable``), and so
is every score built on them.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .limits import read_yaml
from .schema import ContractError, read_runs, tidy

__all__ = ["AXES", "SCORE_ESTIMANDS", "Reference", "read_reference", "crs_axes",
           "crs_scores", "crs_from_axes", "axes_wide", "prepare_runs", "resolve_anchors", "composite"]

AXES = ("discrimination", "calibration", "label_efficiency", "robustness")
#: axes where a lower raw value is better (flipped after normalization)
LOWER_IS_BETTER = frozenset({"calibration"})
NORM_AXES = tuple(f"norm_{a}" for a in AXES)
COMPOSITES = ("dominance", "similarity", "worst_axis", "crs")
SCORE_ESTIMANDS = (*AXES, *NORM_AXES, *COMPOSITES)
WEIGHT_KEYS = ("dominance", "similarity", "worst_axis")
DEFAULT_WEIGHTS = {k: 1.0 / 3.0 for k in WEIGHT_KEYS}
REFERENCE_KEYS = ("panel", "anchors", "weights", "version", "description")
OVERALL = "overall"
#: normalized axis values closer than this are ties in Pareto comparisons
TIE_TOL = 1e-12

MSG_REF_FILE = "{source}: reference file not found; check the path"
MSG_REF_MAPPING = ("{source}: a reference must be a mapping with keys panel, anchors, weights, "
                   "version; got {kind}")
MSG_REF_KEYS = "{source}: unknown reference key(s) {keys}; allowed keys are {allowed}"
MSG_REF_PANEL = ("{source}: 'panel' must be a non-empty list of encoder names; got {value}; "
                 "write e.g. panel: [enc_01, enc_02, enc_03]")
MSG_REF_PANEL_DUP = "{source}: 'panel' repeats encoder(s) {names}; list each encoder once"
MSG_REF_PANEL_UNKNOWN = ("{source}: the reference panel names encoder(s) {names} that have no runs "
                         "(runs have {known}); fix the panel or add their runs")
MSG_REF_PANEL_REGIME = ("{source}: panel encoder(s) {names} have no runs in regime '{regime}'; "
                        "add their runs or give anchors for every axis")
MSG_REF_ANCHOR_AXIS = "{source}: anchors for unknown axis {axis}; anchor axes are {allowed}"
MSG_REF_ANCHOR = ("{source}: anchors.{axis} must be [lo, hi] with finite lo < hi; got {value}; "
                  "write e.g. {axis}: [0.7, 0.95]")
MSG_REF_WEIGHTS_KEYS = ("{source}: weights must give exactly dominance, similarity, worst_axis; "
                        "{detail}")
MSG_REF_WEIGHTS = ("{source}: weights must be finite and >= 0 and sum to 1; got {value} "
                   "(sum {total}); rescale them")
MSG_REF_DEGENERATE = ("{source}: the reference panel's {axis} values are all equal ({value}); "
                      "normalization needs hi > lo; give anchors.{axis}: [lo, hi] in the reference")
MSG_REF_NO_VALUES = ("{source}: no reference panel encoder has an estimable {axis} axis in regime "
                     "'{regime}' (label_efficiency needs clean runs at label fractions < 1, "
                     "robustness perturbed or shift runs at fraction 1, both AUROC_1 > 0.5); add "
                     "those runs or give anchors.{axis}: [lo, hi] in the reference")
MSG_VARIANTS = ("{source}: the CRS scores one layer and one protocol per {arm} and encoder, and "
                "encoder(s) {names} have several runs with the same run key ({what}); keep one "
                "per encoder: the plan's crs.layer_policy / crs.layers choose the layer, or "
                "select the rows yourself (e.g. runs[runs.layer == 'last'])")
MSG_NO_PROTOCOL = ("{source}: comparing protocols needs a 'protocol' column (probe, prompt, "
                   "lora) in the runs table; add it, or compare regimes (arm='regime')")
MSG_BY = "crs_scores: by must be None or 'dataset'; got {value!r}"
MSG_SEVERITY_CLEAN = ("{source}: column 'severity' must be 0 for condition '{condition}'; rows "
                      "{rows} have {values}; recode them")


# --------------------------------------------------------------------------- reference


@dataclass(frozen=True)
class Reference:
    """A validated CRS reference: fixed panel, optional anchors, weights and version.

    ``hash`` is the sha256 of :meth:`canonical_json` (panel sorted, anchors as given,
    weights filled with defaults); it is recorded with every score.
    """

    panel: tuple[str, ...]
    anchors: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    version: str = "unversioned"
    source: str = "<reference dict>"

    def to_dict(self) -> dict:
        return {"panel": list(self.panel),
                "anchors": {a: [float(lo), float(hi)] for a, (lo, hi) in self.anchors.items()},
                "weights": {k: float(self.weights[k]) for k in WEIGHT_KEYS},
                "version": self.version}

    def canonical_json(self) -> str:
        d = self.to_dict()
        d["panel"] = sorted(d["panel"])
        return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    def replace(self, **changes) -> Reference:
        """A copy with ``changes`` (e.g. ``panel=...``), validated again."""
        d = self.to_dict()
        d.update(changes)
        d["panel"] = list(d["panel"])
        return read_reference(d, source=self.source)


def _ref_fail(template: str, **kw) -> None:
    raise ContractError(template.format(**kw), source=kw.get("source"))


def _load_reference_mapping(path_or_dict, source):
    if isinstance(path_or_dict, (str, os.PathLike)):
        path = Path(path_or_dict)
        source = str(path)
        if not path.is_file():
            _ref_fail(MSG_REF_FILE, source=source)
        return read_yaml(path, kind="reference"), source  # UTF-8, no aliases, size cap
    return path_or_dict, source


def _check_weights(weights, source) -> dict[str, float]:
    if not isinstance(weights, Mapping):
        _ref_fail(MSG_REF_WEIGHTS_KEYS, source=source, detail=f"got {weights!r}")
    missing = [k for k in WEIGHT_KEYS if k not in weights]
    extra = [str(k) for k in weights if k not in WEIGHT_KEYS]
    if missing or extra:
        detail = "; ".join(p for p in (f"missing {missing}" if missing else "",
                                       f"unknown {extra}" if extra else "") if p)
        _ref_fail(MSG_REF_WEIGHTS_KEYS, source=source, detail=detail)
    try:
        vals = {k: float(weights[k]) for k in WEIGHT_KEYS}
    except (TypeError, ValueError):
        _ref_fail(MSG_REF_WEIGHTS, source=source, value=dict(weights), total="n/a")
    total = sum(vals.values())
    if (not all(math.isfinite(v) and v >= 0 for v in vals.values())
            or not math.isfinite(total) or abs(total - 1.0) > 1e-6):
        _ref_fail(MSG_REF_WEIGHTS, source=source, value=vals, total=total)
    return vals


def read_reference(path_or_dict, *, encoders: Sequence[str] | None = None,
                   source: str | None = None) -> Reference:
    """Read and validate a CRS reference (a YAML file, a dict, or a :class:`Reference`).

    Parameters
    ----------
    path_or_dict : str, Path, Mapping or Reference
        Keys: ``panel`` (list of encoder names, required), ``anchors`` (optional mapping
        axis -> [lo, hi]; axes without anchors use the panel's min and max), ``weights``
        (optional mapping dominance, similarity, worst_axis summing to 1; default 1/3
        each), ``version`` (optional string), ``description`` (ignored text).
    encoders : sequence of str, optional
        Encoders that have runs; panel members outside it are an error.

    Returns
    -------
    Reference
        With ``.hash`` (sha256 of the canonical JSON) and ``.version``.

    Raises
    ------
    ContractError
        Unreadable file, unknown keys, an empty or repeated panel, panel encoders without
        runs, anchors for unknown axes or with lo >= hi, weights that are negative, not
        the three named ones, or do not sum to 1.
    """
    if isinstance(path_or_dict, Reference):
        ref = path_or_dict
    else:
        data, src = _load_reference_mapping(path_or_dict, source or "<reference dict>")
        if not isinstance(data, Mapping):
            _ref_fail(MSG_REF_MAPPING, source=src, kind=type(data).__name__)
        unknown = [str(k) for k in data if k not in REFERENCE_KEYS]
        if unknown:
            _ref_fail(MSG_REF_KEYS, source=src, keys=unknown, allowed=", ".join(REFERENCE_KEYS))
        panel = data.get("panel")
        if (not isinstance(panel, Sequence) or isinstance(panel, str) or len(panel) == 0
                or not all(isinstance(p, (str, int)) and str(p).strip() for p in panel)):
            _ref_fail(MSG_REF_PANEL, source=src, value=repr(panel))
        panel = tuple(str(p).strip() for p in panel)
        dups = sorted({p for p in panel if panel.count(p) > 1})
        if dups:
            _ref_fail(MSG_REF_PANEL_DUP, source=src, names=dups)
        anchors_in = data.get("anchors") or {}
        if not isinstance(anchors_in, Mapping):
            _ref_fail(MSG_REF_ANCHOR_AXIS, source=src, axis=repr(anchors_in), allowed=", ".join(AXES))
        anchors: dict[str, tuple[float, float]] = {}
        for axis, value in anchors_in.items():
            if axis not in AXES:
                _ref_fail(MSG_REF_ANCHOR_AXIS, source=src, axis=repr(axis), allowed=", ".join(AXES))
            ok = isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
            if ok:
                try:
                    lo, hi = float(value[0]), float(value[1])
                except (TypeError, ValueError):
                    ok = False
            if not ok or not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                _ref_fail(MSG_REF_ANCHOR, source=src, axis=axis, value=repr(value))
            anchors[axis] = (lo, hi)
        weights = data.get("weights")
        weights = dict(DEFAULT_WEIGHTS) if weights is None else _check_weights(weights, src)
        version = data.get("version")
        ref = Reference(panel=panel, anchors={a: anchors[a] for a in AXES if a in anchors},
                        weights=weights, version="unversioned" if version is None else str(version),
                        source=src)
    if encoders is not None:
        known = set(map(str, encoders))
        missing = [p for p in ref.panel if p not in known]
        if missing:
            shown = ", ".join(sorted(known)[:8]) + (" ..." if len(known) > 8 else "")
            _ref_fail(MSG_REF_PANEL_UNKNOWN, source=ref.source, names=missing, known=shown)
    return ref


# --------------------------------------------------------------------------- axes


def prepare_runs(runs, *, arm: str = "regime") -> pd.DataFrame:
    """Validate a runs table (:func:`stats.read_runs`) plus the CRS rules: ``clean`` and
    ``shift`` runs have severity 0, and one run per (arm, encoder, run key), i.e. one layer
    and one protocol per encoder. ``arm="protocol"`` scores each protocol (probe, prompt,
    lora) as its own arm: the returned copy then holds the protocol in ``regime`` (the
    column the CRS code groups by), and the original regime in ``regime_of_run``."""
    from .schema import RUNS_KEY, _rows_text, _values_text

    df = read_runs(runs)
    for cond in ("clean", "shift"):
        bad = np.flatnonzero(((df["condition"] == cond) & (df["severity"] != 0)).to_numpy())
        if len(bad):
            raise ContractError(
                MSG_SEVERITY_CLEAN.format(source="<runs>", condition=cond, rows=_rows_text(bad),
                                          values=_values_text(df["severity"].iloc[bad])),
                column="severity", rows=[int(i) + 1 for i in bad[:5]])
    if arm == "protocol":
        if "protocol" not in df.columns:
            raise ContractError(MSG_NO_PROTOCOL.format(source="<runs>"), column="protocol")
        df = df.assign(regime_of_run=df["regime"], regime=df["protocol"])
    elif arm != "regime":
        raise ContractError(f"arm must be 'regime' or 'protocol'; got {arm!r}")
    dup = df.duplicated(["regime", *RUNS_KEY], keep=False).to_numpy()
    if dup.any():
        rows = df[dup]
        what = "; ".join(f"{c}: {', '.join(sorted(map(str, pd.unique(rows[c]))))}"
                         for c in ("layer", "protocol") if c in rows and c != arm) or "repeated"
        raise ContractError(MSG_VARIANTS.format(
            source="<runs>", arm=arm, names=", ".join(sorted(map(str, pd.unique(rows["encoder"])))[:5]),
            what=what), column="layer" if "layer" in rows else "encoder",
            rows=[int(i) + 1 for i in np.flatnonzero(dup)[:5]])
    return df


_KEYS = ["regime", "encoder", "dataset"]


def _dataset_axes(runs: pd.DataFrame) -> pd.DataFrame:
    """Raw axes per regime x encoder x dataset (pandas, row-level reference implementation).

    Returns a frame with columns regime, encoder, dataset, the four axes and ``n_<axis>``
    (runs used), plus ``n_runs`` (distinct runs used by any axis).
    """
    cell = (runs.groupby([*_KEYS, "label_fraction", "condition", "severity"], sort=True)
            .agg(auroc=("auroc", "mean"), ece=("ece", "mean"), n=("auroc", "size"))
            .reset_index())
    full = cell["label_fraction"].to_numpy() == 1.0
    clean = cell["condition"].to_numpy() == "clean"
    pairs = runs[_KEYS].drop_duplicates().sort_values(_KEYS).set_index(_KEYS)
    base = cell[full & clean].set_index(_KEYS)
    out = pairs.join(base[["auroc", "ece", "n"]].rename(
        columns={"auroc": "discrimination", "ece": "calibration", "n": "n_discrimination"}))
    out["n_calibration"] = out["n_discrimination"]
    denom = out["discrimination"] - 0.5
    denom = denom.where(denom > TIE_TOL)   # AUROC_1 within TIE_TOL of 0.5: not estimable

    frac = cell[clean & ~full].join(denom.rename("denom"), on=_KEYS)
    frac["ratio"] = (frac["auroc"] - 0.5) / frac["denom"]
    g = frac.groupby(_KEYS, sort=True)
    out = out.join(g["ratio"].mean().rename("label_efficiency")).join(
        g["n"].sum().rename("n_label_efficiency"))

    cond = cell[full & ~clean].join(out["discrimination"].rename("disc"), on=_KEYS).join(
        denom.rename("denom"), on=_KEYS)
    cond["drop"] = np.maximum(0.0, cond["disc"] - cond["auroc"]) / cond["denom"]
    g = cond.groupby(_KEYS, sort=True)
    rob = 1.0 - (g["drop"].mean() + g["drop"].max()) / 2.0
    out = out.join(rob.rename("robustness")).join(g["n"].sum().rename("n_robustness"))
    for a in AXES:
        out[f"n_{a}"] = out[f"n_{a}"].fillna(0.0)
    out["n_runs"] = out["n_discrimination"] + out["n_label_efficiency"] + out["n_robustness"]
    return out.reset_index()


def _mean_over_datasets(per_ds: pd.DataFrame) -> pd.DataFrame:
    """Mean of each axis over an encoder's datasets (NaN if any dataset's axis is NaN)."""
    g = per_ds.groupby(["regime", "encoder"], sort=True)
    out = g[list(AXES)].sum(min_count=1) / g.size().to_numpy()[:, None]
    nan_any = per_ds[list(AXES)].isna().groupby([per_ds["regime"], per_ds["encoder"]], sort=True).any()
    out = out.mask(nan_any)
    counts = g[[f"n_{a}" for a in AXES] + ["n_runs"]].sum()
    return out.join(counts).reset_index()


def crs_axes(runs) -> pd.DataFrame:
    """Raw CRS axes per encoder x dataset and their mean over datasets (tidy).

    Parameters
    ----------
    runs : DataFrame or path
        A runs table (validated by :func:`stats.read_runs`).

    Returns
    -------
    DataFrame (tidy)
        ``estimand`` (discrimination, calibration, label_efficiency, robustness),
        ``encoder``, ``regime``, ``dataset`` (a dataset name, or ``"overall"`` for the mean
        over datasets), ``estimate``, ``n`` (runs used), ``method`` ("seed-mean"),
        ``flag`` ("not_estimable" where NaN); the other contract columns are NaN.

    Notes
    -----
    The formulas are in the module docstring (DESIGN.md, "CRS axes").
    """
    df = prepare_runs(runs)
    per_ds = _dataset_axes(df)
    mean = _mean_over_datasets(per_ds).assign(dataset=OVERALL)
    both = pd.concat([per_ds, mean], ignore_index=True)
    long = _melt(both, ["regime", "encoder", "dataset"], AXES)
    long["method"] = "seed-mean"
    return tidy(long, group_cols=("encoder", "regime", "dataset"))


def _melt(wide: pd.DataFrame, ids: list[str], estimands: Sequence[str]) -> pd.DataFrame:
    """Long rows (ids x estimands) with estimate, n and a not_estimable flag."""
    m = len(wide)
    cols = {c: np.repeat(wide[c].to_numpy(), len(estimands)) for c in ids}
    cols["estimand"] = np.tile(np.asarray(estimands, dtype=object), m)
    est = wide[list(estimands)].to_numpy(dtype=float).ravel()
    cols["estimate"] = est
    n_cols = [f"n_{e}" if f"n_{e}" in wide else "n_runs" for e in estimands]
    cols["n"] = wide[n_cols].to_numpy(dtype=float).ravel()
    cols["flag"] = np.where(np.isnan(est), "not_estimable", "")
    return pd.DataFrame(cols)


# --------------------------------------------------------------------------- scores


def resolve_anchors(table: pd.DataFrame, reference: Reference, *, regime: str = "") -> np.ndarray:
    """Anchors ``(4, 2)`` [lo, hi] per axis: the reference's, else the panel's min and max
    of the raw axes in ``table`` (rows = encoders of one regime)."""
    in_panel = table["encoder"].isin(reference.panel).to_numpy()
    have = set(table.loc[in_panel, "encoder"])
    out = np.empty((len(AXES), 2))
    for j, axis in enumerate(AXES):
        if axis in reference.anchors:
            out[j] = reference.anchors[axis]
            continue
        missing = [p for p in reference.panel if p not in have]
        if missing:
            _ref_fail(MSG_REF_PANEL_REGIME, source=reference.source, names=missing, regime=regime)
        vals = table.loc[in_panel, axis].to_numpy(dtype=float)
        finite = vals[np.isfinite(vals)]
        if not finite.size:
            _ref_fail(MSG_REF_NO_VALUES, source=reference.source, axis=axis, regime=regime)
        lo, hi = finite.min(), finite.max()
        if not hi - lo > TIE_TOL * max(1.0, abs(hi)):   # equal within rounding: degenerate
            _ref_fail(MSG_REF_DEGENERATE, source=reference.source, axis=axis, value=lo)
        out[j] = (lo, hi)
    return out


def normalize(x: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """``a_j = clip((x_j - lo_j) / (hi_j - lo_j), 0, 1)``, flipped (``1 - a``) for
    calibration; ``x`` has the four axes on its last dimension."""
    lo, hi = anchors[:, 0], anchors[:, 1]
    a = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
    flip = np.array([ax in LOWER_IS_BETTER for ax in AXES])
    return np.where(flip, 1.0 - a, a)


def composite(a: np.ndarray, a_panel: np.ndarray, weights: Mapping[str, float]) -> np.ndarray:
    """Dominance, similarity, worst axis and CRS from normalized axes.

    ``a``: (..., K, m) candidates; ``a_panel``: (..., P, m) panel (same leading shape).
    Returns (..., K, 4) with columns D, S, W, CRS. NaN in a candidate's axes gives NaN;
    a panel member with a NaN axis makes every dominance (and CRS) NaN, since the
    comparison set is then undefined. Normalized values closer than ``TIE_TOL`` (1e-12) count as ties in the dominance
    comparisons, so that rounding noise (e.g. a bootstrap seed-mean equal to an anchor up
    to 1e-16) cannot flip a dominance relation.
    """
    m = a.shape[-1]
    diff = a[..., :, None, :] - a_panel[..., None, :, :]  # (..., K, P, m)
    ge, le = diff >= -TIE_TOL, diff <= TIE_TOL
    dominates = ge.all(-1) & (diff > TIE_TOL).any(-1)
    dominated = le.all(-1) & (diff < -TIE_TOL).any(-1)
    n_panel = a_panel.shape[-2]
    d = (1.0 + (dominates.sum(-1) - dominated.sum(-1)) / n_panel) / 2.0
    s = 1.0 - np.sqrt(((a - 1.0) ** 2).sum(-1)) / math.sqrt(m)
    w = a.min(-1)
    bad = np.isnan(a).any(-1) | np.isnan(a_panel).any(-1).any(-1)[..., None]
    d = np.where(bad, np.nan, d)
    crs = weights["dominance"] * d + weights["similarity"] * s + weights["worst_axis"] * w
    return np.stack([d, s, w, crs], axis=-1)


def _score_part(part: pd.DataFrame, anc: np.ndarray, ref: Reference, w: Mapping[str, float],
                ids: list[str]) -> pd.DataFrame:
    """Normalized axes, composites and their long rows for the encoders of one part (one
    regime, or one regime x dataset), anchors ``anc`` fixed. The dominance compares with
    the panel members present in ``part`` (a panel member whose axis is NaN there makes
    every dominance NaN, :func:`composite`)."""
    part = part.copy()
    x = part[list(AXES)].to_numpy(dtype=float)
    a = normalize(x, anc)
    comp = composite(a, a[part["encoder"].isin(ref.panel).to_numpy()], w)
    for j, name in enumerate(NORM_AXES):
        part[name] = a[:, j]
        part[f"n_{name}"] = part[f"n_{AXES[j]}"]
    for j, name in enumerate(COMPOSITES):
        part[name] = comp[:, j]
    long = _melt(part, ids, SCORE_ESTIMANDS)
    est_ix = {e: i for i, e in enumerate(SCORE_ESTIMANDS)}
    axis_of = np.array([est_ix[e] % 4 if est_ix[e] < 8 else -1 for e in long["estimand"]])
    long["method"] = np.where(axis_of < 0, "crs-reference",
                              np.where(np.isin(long["estimand"], AXES), "seed-mean",
                                       "reference-anchored"))
    long["anchor_low"] = np.where(axis_of >= 0, anc[np.maximum(axis_of, 0), 0], np.nan)
    long["anchor_high"] = np.where(axis_of >= 0, anc[np.maximum(axis_of, 0), 1], np.nan)
    long["in_panel"] = long["encoder"].isin(ref.panel).to_numpy()
    return long


def _fill_counts(wide: pd.DataFrame) -> pd.DataFrame:
    wide = wide.copy()
    if "regime" not in wide:
        wide["regime"] = "frozen"
    for c in [f"n_{a}" for a in AXES] + ["n_runs"]:
        if c not in wide:
            wide[c] = np.nan
    return wide


def crs_from_axes(table: pd.DataFrame, reference, *, weights: Mapping[str, float] | None = None,
                  anchors: Mapping[str, np.ndarray] | None = None,
                  per_dataset: pd.DataFrame | None = None) -> pd.DataFrame:
    """CRS from raw axes already averaged over datasets.

    Parameters
    ----------
    table : DataFrame
        One row per (regime,) encoder with columns ``encoder``, the four axes, optional
        ``regime`` (default "frozen") and optional counts ``n_<axis>``, ``n_runs``.
    reference : path, dict or Reference
    weights : mapping, optional
        Overrides the reference's weights (validated the same way).
    anchors : mapping regime -> (4, 2) array, optional
        Fixed anchors (used by the bootstrap); default :func:`resolve_anchors`.
    per_dataset : DataFrame, optional
        Raw axes per (regime,) encoder and dataset (a ``dataset`` column): then the scores
        are per dataset (as ``crs_scores(by="dataset")``), with the anchors of ``table``.

    Returns
    -------
    DataFrame (tidy)
        As :func:`crs_scores`.
    """
    wide = _fill_counts(table)
    ref = read_reference(reference, encoders=pd.unique(wide["encoder"]))
    w = dict(ref.weights) if weights is None else _check_weights(weights, "weights=")
    frames = []
    for regime, part in wide.groupby("regime", sort=True):
        part = part.sort_values("encoder").reset_index(drop=True)
        anc = (np.asarray(anchors[regime], dtype=float) if anchors is not None
               else resolve_anchors(part, ref, regime=regime))
        if per_dataset is None:
            frames.append(_score_part(part, anc, ref, w, ["regime", "encoder"]))
            continue
        pd_part = _fill_counts(per_dataset)
        pd_part = pd_part[pd_part["regime"] == regime]
        for ds, sub in pd_part.groupby("dataset", sort=True):
            sub = sub.sort_values("encoder").reset_index(drop=True)
            frames.append(_score_part(sub, anc, ref, w, ["regime", "encoder", "dataset"]))
    out = pd.concat(frames, ignore_index=True)
    out["reference_hash"] = ref.hash
    out["reference_version"] = ref.version
    return tidy(out, group_cols=("encoder", "regime", *(() if per_dataset is None else ("dataset",))))


def axes_wide(runs) -> pd.DataFrame:
    """Raw axes averaged over datasets, one row per regime x encoder (wide: the four axes
    and ``n_<axis>``, ``n_runs``); the input of :func:`crs_from_axes`."""
    return _mean_over_datasets(_dataset_axes(prepare_runs(runs)))


def crs_scores(runs, reference, *, weights: Mapping[str, float] | None = None,
               by: str | None = None) -> pd.DataFrame:
    """Clinical Reliability Score per encoder, anchored to a fixed reference panel.

    Parameters
    ----------
    runs : DataFrame or path
        The runs table (DESIGN.md); validated by :func:`stats.read_runs`. Each ``regime``
        (frozen / adapted) is scored separately, with the same reference.
    reference : path, dict or Reference
        See :func:`read_reference`. Anchors not given are the panel's min and max.
    weights : mapping, optional
        ``{dominance, similarity, worst_axis}`` overriding the reference's weights.
    by : None or "dataset"
        ``"dataset"``: per-domain scores, one set per dataset (a ``dataset`` column):
        each dataset's raw axes (no mean over datasets), normalized with the **same
        anchors** as the overall score (the reference's, else the panel's min and max of
        the dataset-mean axes) and compared, for dominance, with the panel's axes on that
        dataset (a panel member without runs there makes the dataset's dominance and CRS
        not estimable). A candidate's per-domain rows depend only on its own runs and the
        panel's, as the overall ones do.

    Returns
    -------
    DataFrame (tidy), one row per regime x encoder x estimand
        ``estimand``: discrimination, calibration, label_efficiency, robustness (raw axes,
        mean over datasets), norm_<axis> (normalized, calibration flipped), dominance,
        similarity, worst_axis, crs. ``encoder``, ``regime``, ``estimate``, ``n`` (runs
        used), ``method`` (seed-mean / reference-anchored / crs-reference), ``flag``
        (not_estimable where NaN); extras ``anchor_low``, ``anchor_high`` (axis rows),
        ``in_panel``, ``reference_hash`` (sha256 of the reference's canonical JSON),
        ``reference_version``; with ``by="dataset"`` also ``dataset``.

    Notes
    -----
    Formulas in the module docstring (DESIGN.md). Insertion invariance: a candidate's rows
    depend only on its own runs and the panel's, so adding candidates leaves every other
    row bit-identical (hypothesis property test in tests/stats/test_crs_property.py).

    Examples
    --------
    >>> from stats import simulate
    >>> runs = simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=3, seed=3).data
    >>> reference = {"panel": ["enc_01", "enc_02", "enc_03"]}   # enc_04 is a candidate
    >>> scores = crs_scores(runs, reference)
    >>> print(scores.query("estimand == 'crs'")[["encoder", "estimate", "in_panel"]]
    ...       .round(3).to_string(index=False))
    encoder  estimate  in_panel
     enc_01     0.264      True
     enc_02     0.298      True
     enc_03     0.297      True
     enc_04     0.280     False
    """
    if by not in (None, "dataset"):
        raise ContractError(MSG_BY.format(value=by))
    df = prepare_runs(runs)
    per_ds = _dataset_axes(df)
    wide = _mean_over_datasets(per_ds)
    ref = read_reference(reference, encoders=pd.unique(wide["encoder"]))
    return crs_from_axes(wide, ref, weights=weights,
                         per_dataset=per_ds if by == "dataset" else None)


def scores_wide(scores: pd.DataFrame, estimand: str = "crs") -> pd.DataFrame:
    """Pivot a :func:`crs_scores` table to encoders x regimes for one estimand."""
    part = scores[scores["estimand"] == estimand]
    return part.pivot(index="encoder", columns="regime", values="estimate")
