"""Paired comparisons of models on the same cases, per subgroup cell."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import sparse

from stats.detection import GROUP_COLS, case_matrix
from stats.intervals import _paired_auc_frame, delong_covariance, mcnemar_exact, newcombe_diff_ci
from stats.schema import tidy
from stats.subgroups import adjust_p, grouped_auc

COMPARE_METRICS = ("sensitivity", "specificity", "auc")


def compare_models(cases: pd.DataFrame, *, by=None,
                   metrics: Sequence[str] = COMPARE_METRICS, conf_level: float = 0.95,
                   small_n: int = 10) -> pd.DataFrame:
    """Every pair of models, per subgroup cell: paired differences with tests.

    Parameters
    ----------
    cases : DataFrame (cases contract) with ``pred``; every model scores every case.
    by : subgroup axes as in :func:`stats.subgroup_metrics` (overall always included).
    metrics : any of "sensitivity", "specificity", "auc".
    conf_level : float
    small_n : flag "small_n" when the cell's positives (sensitivity, AUC) or negatives
        (specificity, AUC) are fewer.

    Returns
    -------
    Tidy DataFrame, one row per metric x model pair x cell: ``estimand``
    ("sensitivity_difference", "specificity_difference", "auc_difference"), ``model``
    ("A - B"), ``group_var``, ``group_level``, ``estimate`` (A minus B),
    ``std_error`` (DeLong, AUC only), ``conf_low``/``conf_high`` (Newcombe paired hybrid
    score for proportions, Wald with the DeLong covariance for AUC), ``n``, ``n_pos``,
    ``n_neg``, ``statistic`` (z for AUC; NaN for McNemar), ``p_value`` (exact McNemar on
    the discordant pairs; paired DeLong), ``p_adjusted`` (Holm), ``method``, ``flag``,
    extras ``model_a``, ``model_b``, ``p_adjusted_bh`` (Benjamini-Hochberg),
    ``discordant_a`` (A right, B wrong), ``discordant_b`` (B right, A wrong).

    Notes
    -----
    Among positives (sensitivity) a "success" is a detection; among negatives
    (specificity) a correct negative call. With a = both right, b = A only, c = B only,
    d = both wrong: difference (b - c)/n, Newcombe (1998b) method 10 interval, McNemar
    exact p = min(1, 2 P(Bin(b + c, 1/2) <= min(b, c))). Adjustment families: each
    estimand over all pairs and cells.

    Validated against pROC ``roc.test(paired = TRUE)`` and ``binom.test`` (via
    ``tests/r/intervals.csv``) to 1e-10.

    Examples
    --------
    >>> import stats
    >>> from stats import simulate
    >>> cases = simulate.benchx_cohort(400, n_models=2, n_sites=4, seed=2).data
    >>> cmp = compare_models(stats.scan_level(cases, threshold=50))
    >>> print(cmp.query("group_var == 'overall'")[["estimand", "model_a", "model_b",
    ...       "estimate", "p_value"]].round(3).to_string(index=False))
                  estimand model_a model_b  estimate  p_value
    sensitivity_difference model_A model_B     0.222    0.000
    specificity_difference model_A model_B     0.046    0.027
            auc_difference model_A model_B     0.092    0.000
    """
    bad = [k for k in metrics if k not in COMPARE_METRICS]
    if bad:
        raise ValueError(f"metrics: unknown {bad}; choose from {COMPARE_METRICS}")
    cm = case_matrix(cases, by)
    M, G = len(cm.models), cm.n_cells
    ia, ib = np.triu_indices(M, 1)
    if len(ia) == 0:
        raise ValueError("compare_models needs at least two models in cases['model']")
    counts = cm.cell_counts()
    A: sparse.csr_matrix = cm.member
    P = cm.pred.astype(bool)
    y = cm.label
    names = np.array([f"{cm.models[i]} - {cm.models[j]}" for i, j in zip(ia, ib)], dtype=object)
    base = {
        "model": np.repeat(names, G),
        "group_var": np.tile(cm.cells["group_var"].to_numpy(), len(ia)),
        "group_level": np.tile(cm.cells["group_level"].to_numpy(), len(ia)),
        "model_a": np.repeat(np.array(cm.models, dtype=object)[ia], G),
        "model_b": np.repeat(np.array(cm.models, dtype=object)[ib], G),
        "n": np.tile(counts["n"], len(ia)), "n_pos": np.tile(counts["n_pos"], len(ia)),
        "n_neg": np.tile(counts["n_neg"], len(ia)),
    }
    frames = []
    for metric, mask, right in (("sensitivity", y, P), ("specificity", ~y, ~P)):
        if metric not in metrics:
            continue
        ra, rb = right[:, ia] & mask[:, None], right[:, ib] & mask[:, None]
        a = A @ (ra & rb).astype("float64")
        b = A @ (ra & ~rb).astype("float64")
        c = A @ (~ra & rb).astype("float64")
        n = (counts["n_pos"] if metric == "sensitivity" else counts["n_neg"])[:, None]
        d = n - a - b - c
        est, lo, hi = newcombe_diff_ci(None, None, None, None, paired_counts=(a, b, c, d),
                                       conf_level=conf_level)
        p = np.where(n > 0, mcnemar_exact(b, c), np.nan)
        flag = np.where(base["n"].reshape(len(ia), G).T == 0, "empty",
                        np.where(n == 0, "not_estimable", np.where(n < small_n, "small_n", "")))
        frames.append(pd.DataFrame({
            "estimand": f"{metric}_difference", **base, "estimate": _mo(est),
            "conf_low": _mo(lo), "conf_high": _mo(hi), "conf_level": conf_level,
            "p_value": _mo(p), "method": "newcombe-paired/mcnemar-exact", "flag": _mo(flag),
            "discordant_a": _mo(b), "discordant_b": _mo(c)}))
    if "auc" in metrics:
        g = grouped_auc(cm)
        lab = cm.label[g["case"]]
        cols = {}
        for pa, pb in zip(ia, ib):  # one vectorized pass over all cells per model pair
            da = {k: g[k][:, pa] for k in ("auc", "var", "m", "k")}
            db = {k: g[k][:, pb] for k in ("auc", "var", "m", "k")}
            cov = delong_covariance(g["cell"], lab, g["v"][:, pa], g["v"][:, pb],
                                    da["auc"], db["auc"], da["m"], da["k"])
            for key, val in _paired_auc_frame(da, db, cov, conf_level).items():
                cols.setdefault(key, []).append(np.broadcast_to(val, (G,)))
        cat = {k: np.concatenate(v) for k, v in cols.items()}
        nmin = np.minimum(base["n_pos"], base["n_neg"])
        cat["flag"] = np.where(base["n"] == 0, "empty",
                               np.where(np.isnan(cat["estimate"]), "not_estimable",
                                        np.where(nmin < small_n, "small_n", "")))
        for k in ("n", "n_pos", "n_neg"):
            cat.pop(k)
        frames.append(pd.DataFrame({**base, **cat}))
    out = adjust_p(pd.concat(frames, ignore_index=True), ["estimand"])
    return tidy(out, group_cols=GROUP_COLS)


def _mo(x: np.ndarray) -> np.ndarray:
    """(G x pairs) -> pair-major flat vector."""
    return np.asarray(x).T.ravel()
