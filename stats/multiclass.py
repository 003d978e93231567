"""Per-run discrimination and calibration recomputed from probe predictions, binary or
multiclass (the runs table's ``auroc`` and ``ece`` from ``probe_predictions``).

A binary table has ``prob`` (the probability of label 1); a multiclass one a column
``prob_<class>`` per class and ``label`` naming the class
(:func:`stats.schema.read_probe_predictions`). Per run:

* ``auroc``: binary, the Mann-Whitney AUROC of ``prob``; multiclass, the macro
  one-vs-rest AUROC, the unweighted mean over classes c of the AUROC of ``prob_c`` for
  ``label == c`` against the rest (scikit-learn's ``roc_auc_score(y, P,
  multi_class="ovr", average="macro")``). Ties count one half.
* ``ece``: 15 equal-width bins (an edge value in the lower bin, as :func:`stats.ece`) of
  the confidence: ``prob`` with outcome ``label`` (binary), the top-label confidence
  ``max_c prob_c`` with outcome ``argmax_c prob_c == label`` (multiclass, first class
  on ties; Guo et al. 2017).

Vectorised over runs and cases: ranks within runs (pandas' grouped average rank) give
every AUROC at once, and one ``bincount`` over (run, bin) gives every ECE; only the
classes are looped over.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import _validate as _v
from .schema import class_columns, read_probe_predictions, run_key, tidy

__all__ = ["probe_metrics"]


def _grouped_auc(group: np.ndarray, n_groups: int, score: np.ndarray, pos: np.ndarray):
    """AUROC per group of ``score`` for ``pos`` against the rest (NaN without both)."""
    rank = pd.Series(score).groupby(group).rank(method="average").to_numpy()
    n1 = np.bincount(group, weights=pos.astype(float), minlength=n_groups)
    n = np.bincount(group, minlength=n_groups).astype(float)
    n0 = n - n1
    r1 = np.bincount(group, weights=np.where(pos, rank, 0.0), minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n1 > 0) & (n0 > 0), (r1 - n1 * (n1 + 1) / 2) / (n1 * n0), np.nan)


def _grouped_ece(group: np.ndarray, n_groups: int, conf: np.ndarray, outcome: np.ndarray,
                 n_bins: int) -> np.ndarray:
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.searchsorted(edges[1:-1], conf, side="left")     # an edge value: lower bin
    cell = group * n_bins + idx
    size = n_groups * n_bins
    s_conf = np.bincount(cell, weights=conf, minlength=size).reshape(n_groups, n_bins)
    s_out = np.bincount(cell, weights=outcome, minlength=size).reshape(n_groups, n_bins)
    n = np.bincount(group, minlength=n_groups).astype(float)
    return np.abs(s_out - s_conf).sum(1) / n


def probe_metrics(predictions, *, n_bins: int = 15) -> pd.DataFrame:
    """AUROC (macro one-vs-rest for multiclass) and ECE (top-label for multiclass) of every
    run of a probe_predictions table (tidy).

    Parameters
    ----------
    predictions : DataFrame or path
        A probe_predictions table (:func:`stats.schema.read_probe_predictions`), binary
        (``prob``) or multiclass (``prob_<class>`` columns).
    n_bins : int
        Equal-width ECE bins (default 15, the runs contract's).

    Returns
    -------
    DataFrame (tidy), one row per run x estimand
        ``estimand`` ``auroc`` (method ``mann-whitney`` or ``macro-ovr``; NaN and flag
        ``not_estimable`` where a class has no case or every case has it) and ``ece``
        (method ``equal-width-bins`` or ``top-label-equal-width-bins``); the run key
        columns (``regime``, ``protocol`` and ``layer`` where present, ``encoder``,
        ``dataset``, ``label_fraction``, ``condition``, ``severity``, ``seed``);
        ``n`` (cases), ``n_pos`` / ``n_neg`` (binary); extras ``n_classes``, ``n_bins``.

    Notes
    -----
    Validated against scikit-learn's ``roc_auc_score`` (binary, and multiclass with
    ``multi_class="ovr", average="macro"``) and :func:`stats.ece` per run to 1e-12
    (tests/stats/test_probe_metrics.py).
    """
    n_bins = _v.whole(n_bins, func="probe_metrics", arg="n_bins", fix="e.g. n_bins=15")
    df = read_probe_predictions(predictions)
    keys = list(run_key(df))
    group = df.groupby(keys, sort=False).ngroup().to_numpy()
    G = int(group.max()) + 1
    runs = df[keys].drop_duplicates().reset_index(drop=True)   # ngroup order = first appearance
    classes = df.attrs.get("classes")
    n = np.bincount(group, minlength=G).astype(float)
    if classes:
        cols = class_columns(df)
        P = df[cols].to_numpy(dtype=float)
        label = df["label"].astype(str).to_numpy()
        aucs = np.stack([_grouped_auc(group, G, P[:, j], label == c)
                         for j, c in enumerate(classes)], axis=1)          # classes, not cases
        auc = np.where(np.isnan(aucs).any(1), np.nan, aucs.mean(1))
        top = P.argmax(1)
        conf = P[np.arange(len(P)), top]
        outcome = (np.asarray(classes, dtype=object)[top] == label).astype(float)
        methods = ("macro-ovr", "top-label-equal-width-bins")
        n_pos = n_neg = np.full(G, np.nan)
        k = len(classes)
    else:
        prob = df["prob"].to_numpy(dtype=float)
        y = df["label"].to_numpy()
        auc = _grouped_auc(group, G, prob, y == 1)
        conf, outcome = prob, y.astype(float)
        methods = ("mann-whitney", "equal-width-bins")
        n_pos = np.bincount(group, weights=(y == 1).astype(float), minlength=G)
        n_neg = n - n_pos
        k = 2
    ece = _grouped_ece(group, G, conf, outcome, n_bins)
    out = pd.concat([runs.assign(estimand="auroc", estimate=auc, method=methods[0]),
                     runs.assign(estimand="ece", estimate=ece, method=methods[1])],
                    ignore_index=True)
    out["n"] = np.tile(n, 2)
    out["n_pos"] = np.tile(n_pos, 2)
    out["n_neg"] = np.tile(n_neg, 2)
    out["flag"] = np.where(np.isnan(out["estimate"]), "not_estimable", "")
    out["n_classes"] = float(k)
    out["n_bins"] = float(n_bins)
    return tidy(out, group_cols=keys)
