"""Operating-point analyses: ROC curves, matched operating points beside the
fixed-threshold comparison (and the threshold-shift flag), partial AUC, likelihood
ratios, each subgroup's AUC against the rest, and the prespecified performance goals.

All of them run on the evaluation rows (:mod:`analysis.detection`'s row rule) with the
decided cluster, when the plan has a ``detection.operating_points`` block (the goals:
``detection.goals``). The bootstrap draws from the stream ``operating_bootstrap`` (the
block's ``seed`` overrides it).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .core import analysis
from .detection import PRESPECIFIED, _wants_detection, axis_role

#: the rule of the threshold-shift flag, recorded and printed in the methods text
SHIFT_RULE = ("a pair and cell whose sensitivity difference at the fixed threshold is "
              "significant (Holm-adjusted p below 1 - conf_level) and bought with "
              "specificity (the specificity difference has the opposite sign), while at "
              "every prespecified matched specificity the sensitivity difference is not "
              "significant (its Holm-adjusted p at least 1 - conf_level)")


def _wants_operating(plan, tables) -> bool:
    return _wants_detection(plan, tables) and plan.detection.operating_points is not None


def _wants_matched(plan, tables) -> bool:
    op = getattr(plan.detection, "operating_points", None) if plan.detection else None
    return (_wants_operating(plan, tables) and bool(op.specificity)
            and tables.cases["model"].nunique() >= 2)


def _wants_pauc(plan, tables) -> bool:
    return _wants_operating(plan, tables) and plan.detection.operating_points.partial_auc \
        is not None


def _wants_goals(plan, tables) -> bool:
    return _wants_detection(plan, tables) and bool(plan.detection.goals)


def roc_axes(plan) -> list[tuple[str, ...]]:
    """The axes of the ROC figures: the prespecified single-variable subgroup axes."""
    return [a for a in plan.detection.subgroups if len(a) == 1]


#: the replicates behind a paired difference's interval at a matched operating point
#: (stats.operating_point's Notes): passed and recorded here, the one place it is decided
DIFFERENCE_CI = "linearized"


def _boot(results) -> dict:
    op = results.plan.detection.operating_points
    seed = results.plan.seed_for("operating_bootstrap")
    results.decide("seeds.operating_bootstrap", seed)
    results.decide("operating.bootstrap.n_boot", op.n_boot)
    return {"n_boot": op.n_boot, "seed": seed, "scheduler": results.scheduler,
            "cluster": results["cluster"], "conf_level": results.plan.detection.conf_level}


@analysis("roc_curves", wanted=_wants_operating)
def roc_curves(results) -> pd.DataFrame:
    """The empirical ROC curve per model, overall and per level of each prespecified
    single-variable axis (``stats.roc_curve``), with pointwise bootstrap bands when the
    plan's ``detection.operating_points.bands`` asks for them (else none: the figures mark
    the operating points with their intervals)."""
    from stats.operating import roc_curve

    axes = roc_axes(results.plan)
    results.decide("operating.roc_axes", [":".join(a) for a in axes])
    op = results.plan.detection.operating_points
    results.decide("operating.roc_bands", bool(op.bands))
    if op.bands:
        return roc_curve(results["evaluation"], by=axes or None, **_boot(results))
    return roc_curve(results["evaluation"], by=axes or None, cluster=results["cluster"])


@analysis("operating_points", wanted=_wants_operating)
def operating_points(results) -> pd.DataFrame:
    """Each model's sensitivity at the prespecified specificities (and specificity at the
    prespecified sensitivities), overall and per ``detection.compare_by`` axis, with the
    paired differences between models (``stats.operating_point``: paired cluster
    bootstrap, Holm per estimand and value)."""
    from stats.operating import operating_point

    det = results.plan.detection
    op = det.operating_points
    by = list(det.compare_by) or None
    results.decide("operating.specificity", [float(v) for v in op.specificity])
    results.decide("operating.sensitivity", [float(v) for v in op.sensitivity])
    results.decide("operating.by", [":".join(a) for a in det.compare_by])
    results.decide("operating.difference_ci", DIFFERENCE_CI)
    kw = {**_boot(results), "difference_ci": DIFFERENCE_CI}
    parts = []
    ev = results["evaluation"]
    if op.specificity:
        parts.append(operating_point(ev, specificity=list(op.specificity), by=by, **kw))
    if op.sensitivity:
        parts.append(operating_point(ev, sensitivity=list(op.sensitivity), by=by, **kw))
    if not parts:                   # the block alone: the ROC figures, nothing to read off
        return pd.DataFrame(columns=["estimand", "model", "group_var", "group_level"])
    out = pd.concat(parts, ignore_index=True)
    exploratory = results["roles"]["operating_points"] != PRESPECIFIED
    if exploratory:
        out["p_adjusted"] = out["p_adjusted_bh"] = np.nan
    results.decide("operating.multiplicity", "none" if exploratory else
                   "holm per estimand and value over every pair and cell")
    return out


@analysis("matched_comparisons", wanted=_wants_matched)
def matched_comparisons(results) -> pd.DataFrame:
    """The matched operating point beside the fixed threshold, per pair and cell: the
    sensitivity difference at each prespecified specificity (each model at its own
    threshold) and, beside it, the sensitivity and specificity differences at the fixed
    threshold (``stats.compare_models``); flag ``threshold_shift`` by ``SHIFT_RULE``."""
    from stats.schema import tidy

    det = results.plan.detection
    alpha = 1 - det.conf_level
    fixed = results["comparisons"]
    op = results["operating_points"]
    matched = op[op["estimand"] == "sensitivity_at_specificity_difference"].copy()
    keys = ["model", "group_var", "group_level"]
    pick = lambda e, c: fixed[fixed["estimand"] == e][keys + c]    # noqa: E731
    sens = pick("sensitivity_difference", ["estimate", "conf_low", "conf_high", "p_value",
                                           "p_adjusted"]).rename(columns=lambda c: c if c in keys
                                                                 else f"fixed_{c}")
    spec = pick("specificity_difference", ["estimate", "p_adjusted"]).rename(
        columns={"estimate": "fixed_specificity_estimate",
                 "p_adjusted": "fixed_specificity_p_adjusted"})
    out = matched.merge(sens, on=keys, how="left").merge(spec, on=keys, how="left")
    out = out.rename(columns={"estimate": "matched_estimate", "p_adjusted": "matched_p_adjusted"})
    out["estimate"] = out["matched_estimate"]
    out["p_adjusted"] = out["matched_p_adjusted"]
    m_p = out["matched_p_adjusted"].fillna(out["p_value"])
    f_p = out["fixed_p_adjusted"].fillna(out["fixed_p_value"])
    fixed_gain = (f_p < alpha) & (np.sign(out["fixed_estimate"])
                                  == -np.sign(out["fixed_specificity_estimate"]))
    not_matched = (m_p >= alpha) | out["matched_estimate"].isna()
    # at every prespecified specificity
    nm_all = not_matched.groupby([out[k] for k in keys]).transform("all")
    out["threshold_shift"] = (fixed_gain & nm_all).astype(bool)
    out["flag"] = np.where(out["threshold_shift"], np.where(
        out["flag"].astype(str) == "", "threshold_shift", out["flag"].astype(str)
        + ";threshold_shift"), out["flag"].astype(str))
    results.decide("operating.threshold_shift_rule", SHIFT_RULE)
    return tidy(out, group_cols=keys)


@analysis("partial_auc", wanted=_wants_pauc)
def partial_auc(results) -> pd.DataFrame:
    """The partial AUC per model (overall and per ``compare_by`` axis) and its paired
    differences (``stats.partial_auc``)."""
    from stats.operating import partial_auc as compute

    det = results.plan.detection
    pa = det.operating_points.partial_auc
    focus = "sensitivity" if pa.sensitivity is not None else "specificity"
    rng = tuple(pa.sensitivity if pa.sensitivity is not None else pa.specificity)
    results.decide("operating.partial_auc", {"focus": focus, "range": list(rng),
                                             "correct": pa.correct, "boot_ci": pa.boot_ci})
    out = compute(results["evaluation"], **{focus: rng}, correct=pa.correct,
                  by=list(det.compare_by) or None, boot_ci=pa.boot_ci, **_boot(results))
    if results["roles"]["operating_points"] != PRESPECIFIED:
        out["p_adjusted"] = out["p_adjusted_bh"] = np.nan
    return out


@analysis("likelihood_ratios", wanted=_wants_operating)
def likelihood_ratios(results) -> pd.DataFrame:
    """LR+ and LR- per model at the operating threshold, overall and per prespecified
    axis (``stats.likelihood_ratios``; Simel's log method, cluster-aware)."""
    from stats.operating import likelihood_ratios as compute

    det = results.plan.detection
    return compute(results["evaluation"], by=list(det.subgroups) or None,
                   conf_level=det.conf_level, cluster=results["cluster"])


@analysis("auc_vs_rest", wanted=_wants_operating)
def auc_vs_rest(results) -> pd.DataFrame:
    """Each level's AUC against the rest of its axis, per model, over the prespecified
    single-variable axes (``stats.operating.auc_vs_rest``: pROC's unpaired DeLong test,
    cluster-aware), Holm per model; the axis's ``role``."""
    from stats.operating import auc_vs_rest as compute

    plan = results.plan
    axes = roc_axes(plan)
    if not axes:
        return pd.DataFrame(columns=["estimand", "model", "group_var", "group_level"])
    out = compute(results["evaluation"], by=axes, cluster=results["cluster"],
                  conf_level=plan.detection.conf_level)
    out["role"] = out["group_var"].map({":".join(a): axis_role(plan, a) for a in axes})
    if results["roles"]["operating_points"] != PRESPECIFIED:
        out["p_adjusted"] = out["p_adjusted_bh"] = np.nan
    return out


@analysis("performance_goals", wanted=_wants_goals)
def performance_goals(results) -> pd.DataFrame:
    """Every prespecified goal in every level of the prespecified axes
    (``stats.performance_goals``: one-sided exact or score tests, cluster-aware, Holm per
    goal and model over the cells; verdicts met / not_met / inconclusive)."""
    from stats.operating import performance_goals as compute

    det = results.plan.detection
    goals = [{k: v for k, v in g.model_dump().items() if v is not None} for g in det.goals]
    results.decide("goals.goals", goals)
    results.decide("goals.cells", "the levels of the prespecified axes (detection.subgroups), "
                   "not Missing, not applicable; an absolute goal also overall (a test of "
                   "its own)")
    exploratory = results["roles"]["goals"] != PRESPECIFIED
    results.decide("goals.multiplicity", "none" if exploratory else
                   "holm per goal and model over the cells")
    out = compute(results["evaluation"], goals, by=list(det.subgroups),
                  cluster=results["cluster"])
    if exploratory:   # no family: the verdict reads the unadjusted p
        out["p_adjusted"] = out["p_adjusted_bh"] = np.nan
        met = out["p_value"] < out["alpha"]
        out["verdict"] = np.where(met, "met", np.where(out["conf_high"] < out["bound"],
                                                       "not_met", "inconclusive"))
    return out
