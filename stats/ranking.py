"""Agreement between rankings and stability of the CRS ranking (DESIGN.md, "Stability and
consequences").

:func:`rank_agreement` compares two scorings of the same encoders (higher is better):
pairs, inverted pairs, Kendall's tau-b, mean absolute rank displacement, top-k overlap.
:func:`ranking_stability` applies it to the CRS ranking under every leave-one-out
reference panel, under Dirichlet(1, 1, 1) weights, against the AUROC ranking and between
the frozen and adapted regimes.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from stats import limits as _limits
from . import _validate as _v
from ._quantile import percentile_interval
from ._rng import as_generator
from .crs import COMPOSITES, TIE_TOL, axes_wide, crs_from_axes, read_reference
from .schema import ContractError, tidy

__all__ = ["rank_agreement", "ranking_stability", "kendall_tau_b"]

AGREEMENT_ESTIMANDS = ("pairs", "inversions", "kendall_tau", "mean_abs_displacement",
                       "top_k_overlap")
MSG_INDEX = ("rank_agreement: score_a and score_b must score the same encoders; {detail}; "
             "subset both to the common encoders")
MSG_NAN = "rank_agreement: {which} has missing scores for {names}; drop those encoders or fill them"


def _pair_signs(x: np.ndarray) -> np.ndarray:
    """``sign(x_i - x_j)`` for every pair i < j along the last axis."""
    i, j = np.triu_indices(x.shape[-1], k=1)
    d = x[..., i] - x[..., j]
    # a difference within TIE_TOL (1e-12) is a tie: scores equal in exact arithmetic can
    # differ in their last bit
    return np.where(np.abs(d) <= TIE_TOL, 0.0, np.sign(d))


def kendall_tau_b(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall's tau-b, vectorized over the leading axes of ``b`` (or both).

    ``tau_b = sum_{i<j} s_a s_b / sqrt(sum s_a^2 * sum s_b^2)`` with
    ``s = sign(x_i - x_j)``; i.e. ``(C - D) / sqrt((n0 - n1)(n0 - n2))`` (ties in a, b
    excluded from the denominators). NaN when either ranking is constant. Validated
    against R's ``cor(x, y, method = "kendall")`` (tests/r/crs_kendall.R) and
    ``scipy.stats.kendalltau`` (variant "b") to 1e-12 (tests/test_ranking.py).
    """
    sa, sb = _pair_signs(np.asarray(a, dtype=float)), _pair_signs(np.asarray(b, dtype=float))
    den = np.sqrt((sa ** 2).sum(-1) * (sb ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (sa * sb).sum(-1) / den, np.nan)


def _as_series(x, name: str) -> pd.Series:
    s = x if isinstance(x, pd.Series) else pd.Series(dict(x) if isinstance(x, Mapping) else x)
    values = _v._floats(s.to_numpy(), func="rank_agreement", arg=name, fix="pass scores")
    return pd.Series(values, index=s.index, name=s.name if s.name is not None else name)


def _top_k(s: pd.Series, k: int) -> set:
    """The k best (ties broken by index label, for a deterministic set)."""
    order = sorted(s.index, key=lambda e: (-s[e], str(e)))
    return set(order[:k])


def rank_agreement(score_a, score_b, *, k: int = 3) -> pd.DataFrame:
    """How far two rankings of the same encoders agree (higher score = better rank).

    Parameters
    ----------
    score_a, score_b : Series (or mapping) indexed by encoder
        E.g. AUROC and CRS; the same encoders in both, no missing values.
    k : int
        Size of the top set for ``top_k_overlap``.

    Returns
    -------
    DataFrame (tidy), five rows
        ``pairs`` (n(n-1)/2), ``inversions`` (pairs ordered one way by ``a`` and the other
        way by ``b``; ties are not inversions; ``statistic`` = inversions / pairs),
        ``kendall_tau`` (tau-b; ``p_value`` from ``scipy.stats.kendalltau``),
        ``mean_abs_displacement`` (mean |rank_a - rank_b|, ranks 1 = best, ties averaged),
        ``top_k_overlap`` (|top_k(a) & top_k(b)| / k, ties broken by encoder name;
        ``statistic`` = the count). ``n`` = number of encoders; extras ``k``,
        ``score_a``, ``score_b`` (the Series names).

    Examples
    --------
    >>> import pandas as pd
    >>> auroc = pd.Series({"a": 0.91, "b": 0.89, "c": 0.85, "d": 0.80})
    >>> crs = pd.Series({"a": 0.62, "b": 0.71, "c": 0.55, "d": 0.40})
    >>> agree = rank_agreement(auroc, crs, k=2)    # a and b swap places
    >>> print(agree[["estimand", "estimate", "statistic"]].round(4).to_string(index=False))
                 estimand  estimate  statistic
                    pairs    6.0000        NaN
               inversions    1.0000     0.1667
              kendall_tau    0.6667        NaN
    mean_abs_displacement    0.5000        NaN
            top_k_overlap    1.0000     2.0000

    No encoders (empty scores) raise :class:`~stats.schema.ContractError` (no ranking
    exists), as does a ``k`` that is not a whole number >= 1.
    """
    k = _v.whole(k, func="rank_agreement", arg="k", fix="e.g. k=3")
    a, b = _as_series(score_a, "score_a"), _as_series(score_b, "score_b")
    _v.nonempty(a, func="rank_agreement", arg="score_a", unit="encoder")
    only_a, only_b = a.index.difference(b.index), b.index.difference(a.index)
    if len(only_a) or len(only_b) or a.index.has_duplicates or b.index.has_duplicates:
        detail = "; ".join(x for x in (
            f"only in score_a: {list(only_a[:5])}" if len(only_a) else "",
            f"only in score_b: {list(only_b[:5])}" if len(only_b) else "",
            "an index repeats an encoder" if a.index.has_duplicates or b.index.has_duplicates else "")
            if x)
        raise ContractError(MSG_INDEX.format(detail=detail))
    for which, s in (("score_a", a), ("score_b", b)):
        if s.isna().any():
            raise ContractError(MSG_NAN.format(which=which, names=list(s.index[s.isna()][:5])))
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    b = b.reindex(a.index)
    n = len(a)
    x, y = a.to_numpy(), b.to_numpy()
    sa, sb = _pair_signs(x), _pair_signs(y)
    pairs = n * (n - 1) // 2
    inversions = int((sa * sb < 0).sum())
    tau = float(kendall_tau_b(x, y)) if n >= 2 else np.nan
    p_tau = float(sps.kendalltau(x, y).pvalue) if n >= 2 and np.isfinite(tau) else np.nan
    disp = float(np.mean(np.abs(sps.rankdata(-x) - sps.rankdata(-y)))) if n else np.nan
    overlap = len(_top_k(a, k) & _top_k(b, k))
    df = pd.DataFrame({
        "estimand": list(AGREEMENT_ESTIMANDS),
        "estimate": [pairs, inversions, tau, disp, overlap / k],
        "statistic": [np.nan, inversions / pairs if pairs else np.nan, np.nan, np.nan, overlap],
        "p_value": [np.nan, np.nan, p_tau, np.nan, np.nan],
        "method": ["", "", "kendall-tau-b", "", ""],
        "flag": ["", "", "" if np.isfinite(tau) else "not_estimable", "",
                 "small_n" if n < k else ""]})
    df["n"] = float(n)
    df["k"] = float(k)
    df["score_a"] = str(a.name)
    df["score_b"] = str(b.name)
    return tidy(df)


# --------------------------------------------------------------------------- stability


def _crs_series(scores: pd.DataFrame, regime: str, estimand: str = "crs") -> pd.Series:
    part = scores[(scores["regime"] == regime) & (scores["estimand"] == estimand)]
    return part.set_index("encoder")["estimate"].rename(estimand)


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["estimand", "regime"])


def _agreement_rows(a: pd.Series, b: pd.Series, *, k: int, regime: str, analysis: str) -> pd.DataFrame:
    out = rank_agreement(a, b, k=k)
    out.insert(1, "regime", regime)
    out["analysis"] = analysis
    out["variant"] = f"{a.name} vs {b.name}"
    return out


def ranking_stability(runs, reference, *, n_weights: int = 1000, seed=None, k: int = 3,
                      conf_level: float = 0.95) -> pd.DataFrame:
    """Stability of the CRS ranking and its consequences (tidy).

    Parameters
    ----------
    runs : DataFrame or path
        The runs table.
    reference : path, dict or Reference
        The base reference (its panel, anchors and weights give the base ranking).
    n_weights : int
        Number of Dirichlet(1, 1, 1) weight vectors (dominance, similarity, worst_axis).
    seed : int, Generator or None
    k : int
        Top-k size for the agreement rows.
    conf_level : float
        Level of the quantile band of the Dirichlet tau distribution.

    Returns
    -------
    DataFrame (tidy) with grouping column ``regime`` and extras ``analysis``, ``variant``
        * ``analysis == "leave_one_out"``: per panel member r, ``kendall_tau`` between the
          base CRS ranking and the ranking under panel R \\ {r} (``variant`` = r; anchors
          given in the reference are kept, default anchors come from the smaller panel; a
          panel that cannot anchor an axis gives NaN with flag ``not_estimable``), plus
          ``kendall_tau_min`` over them.
        * ``"dirichlet_weights"``: tau between the base ranking and the ranking under each
          weight draw, summarized as ``kendall_tau_mean`` (CI = quantile band),
          ``kendall_tau_median``, ``kendall_tau_min``, ``p_tau_1`` (share of draws giving
          the identical ranking), ``p_same_best`` (share keeping the same top encoder).
        * ``"auroc_vs_crs"``: :func:`rank_agreement` of the discrimination (AUROC) ranking
          against the CRS ranking (pairs, inversions, kendall_tau, mean_abs_displacement,
          top_k_overlap).
        * ``"frozen_vs_adapted"`` (when both regimes are present; regime
          "frozen:adapted"): :func:`rank_agreement` of the frozen and adapted CRS rankings
          over their common encoders.

    Notes
    -----
    With weights w, CRS = w_D D + w_S S + w_W W; D, S, W do not depend on w, so every
    Dirichlet draw is one matrix product and tau-b is computed for all draws at once.
    ``n_weights`` and ``k`` must be whole numbers >= 1 and ``conf_level`` in (0, 1)
    (:class:`~stats.schema.ContractError`); the runs are read by :func:`stats.read_runs`.
    """
    from .limits import check

    func = "ranking_stability"
    n_weights = _v.whole(n_weights, func=func, arg="n_weights", fix="e.g. n_weights=1000")
    k = _v.whole(k, func=func, arg="k", fix="e.g. k=3")
    conf_level = _v.level(conf_level, func=func)
    wide = axes_wide(runs)
    ref = read_reference(reference, encoders=pd.unique(wide["encoder"]))
    check(ranking_stability_work(n_weights, wide["encoder"].nunique()))  # before any draw
    base = crs_from_axes(wide, ref)
    rng = as_generator(seed)
    frames = []
    for regime in sorted(pd.unique(base["regime"]), key=lambda r: (r != "frozen", r)):
        crs = _crs_series(base, regime)
        rows = []
        # leave one panel member out
        taus = []
        for r in ref.panel if len(ref.panel) > 1 else ():
            try:
                alt = crs_from_axes(wide[wide["regime"] == regime],
                                    ref.replace(panel=[p for p in ref.panel if p != r]))
                tau = float(kendall_tau_b(crs.to_numpy(), _crs_series(alt, regime).reindex(crs.index).to_numpy()))
            except ContractError:
                tau = np.nan
            taus.append(tau)
            rows.append({"estimand": "kendall_tau", "estimate": tau, "variant": r,
                         "flag": "" if np.isfinite(tau) else "not_estimable"})
        if taus:
            rows.append({"estimand": "kendall_tau_min", "estimate": np.nanmin(taus) if np.isfinite(taus).any() else np.nan,
                         "variant": "all"})
        loo = _frame(rows).assign(analysis="leave_one_out", regime=regime, n=float(len(crs)))
        # Dirichlet(1, 1, 1) weights
        comp = np.stack([_crs_series(base, regime, c).reindex(crs.index).to_numpy()
                         for c in COMPOSITES[:3]], axis=1)                    # (E, 3)
        w = rng.dirichlet(np.ones(3), size=int(n_weights))                       # (n_w, 3)
        alt = np.einsum("wc,ec->we", w, comp)    # (n_w, E); NumPy's loops, no BLAS kernel
        tau = kendall_tau_b(crs.to_numpy()[None, :], alt)
        c0 = crs.to_numpy()
        best = int(np.argmax(c0 >= np.nanmax(c0) - TIE_TOL))
        # the best encoder under a draw: ties within TIE_TOL go to the first (the lower
        # index), as argmax does for exact ties
        alt_best = np.argmax(alt >= alt.max(axis=1, keepdims=True) - TIE_TOL, axis=1)
        q_lo, q_hi = (float(q) for q in percentile_interval(tau, conf_level))
        diri = pd.DataFrame({
            "estimand": ["kendall_tau_mean", "kendall_tau_median", "kendall_tau_min", "p_tau_1",
                         "p_same_best"],
            "estimate": [np.nanmean(tau), np.nanmedian(tau), np.nanmin(tau),
                         np.mean(tau >= 1.0 - 1e-12), np.mean(alt_best == best)],
            "conf_low": [q_lo, np.nan, np.nan, np.nan, np.nan],
            "conf_high": [q_hi, np.nan, np.nan, np.nan, np.nan],
            "conf_level": [conf_level, np.nan, np.nan, np.nan, np.nan],
            "n": float(n_weights), "method": "dirichlet(1,1,1)-weights",
            "analysis": "dirichlet_weights", "variant": "all", "regime": regime})
        disc = _crs_series(base, regime, "discrimination").rename("auroc")
        frames += [loo, diri, _agreement_rows(disc, crs, k=k, regime=regime,
                                              analysis="auroc_vs_crs")]
    regimes = set(base["regime"])
    if {"frozen", "adapted"} <= regimes:
        fz = _crs_series(base, "frozen").rename("crs_frozen")
        ad = _crs_series(base, "adapted").rename("crs_adapted")
        common = fz.index.intersection(ad.index)
        frames.append(_agreement_rows(fz[common], ad[common], k=k, regime="frozen:adapted",
                                      analysis="frozen_vs_adapted"))
    out = pd.concat(frames, ignore_index=True)
    out["reference_hash"] = ref.hash
    keep = ["estimand", "regime", "analysis", "variant", "estimate", "conf_low", "conf_high",
            "conf_level", "n", "method", "flag", "statistic", "p_value", "k", "reference_hash"]
    out = out[[c for c in keep if c in out.columns]]
    return tidy(out, group_cols=("regime",))


# --------------------------------------------------------------------------- work
# (the engine states its own memory and time: stats.limits holds only the caps)

def ranking_stability_work(n_weights: int, n_encoders: int, *, setting: str = "n_weights",
                           what: str = "the ranking stability") -> _limits.Work:
    """Peak memory and time of the Dirichlet-weights part of
    :func:`stats.ranking.ranking_stability`, per regime: the weights (n_weights x 3) and
    the re-weighted scores (n_weights x encoders) in float64, and Kendall's tau of every
    draw at once: the pair signs (n_weights x E(E-1)/2 float64) and three temporaries of
    their size."""
    W, E = max(int(n_weights), 1), max(int(n_encoders), 1)
    pairs = E * (E - 1) / 2
    mem = 8.0 * W * (3 + 2 * E) + 4 * 8.0 * W * max(pairs, 1)
    secs = _limits.SECONDS_PER_ELEMENT * W * (3 * E + 6 * max(pairs, 1))
    return _limits.Work(what=what, setting=f"{setting} ({W:,} draws)", memory_bytes=mem,
                seconds=secs, detail=f"{W:,} weight draws x {E} encoders")
