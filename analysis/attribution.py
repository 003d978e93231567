"""Where the gaps come from, and the performance in the intended-use population.

Decisions made here (and recorded): which contrasts are decomposed (the plan's
``detection.gaps.contrasts``, prespecified; none listed: each demographic axis's largest
gap, chosen from the data and so exploratory), their covariates (the contrast's own, else
the adjusted formula's other terms), the adjusted model (``detection.gaps.method``, else
the primary: the first of ``detection.adjusted.methods``), the replicates and their
seed; for the transport, the target's margins as shares and whether any raked weight is
extreme.
"""
from __future__ import annotations

import pandas as pd

from .core import analysis
from .detection import _wants_detection

PRESPECIFIED, EXPLORATORY = "prespecified", "exploratory"
#: the demographic columns whose largest gap is decomposed when the plan lists no contrast
DEMOGRAPHIC = ("age_group", "sex", "race")

MSG_NO_COVARIATES = ("{file}: {key} lists no covariates and the plan has no "
                     "detection.adjusted formula to take them from; list the case mix, e.g. "
                     "covariates: [phase, \"np.log(tumor_size_mm)\"]")
MSG_GROUP_COLUMN = ("{file}: {key} names {group!r}, which the cases table lacks; name a "
                    "column of the cases table")


def _wants_gaps(plan, tables) -> bool:
    return _wants_detection(plan, tables) and plan.detection.gaps is not None


def _wants_target(plan, tables) -> bool:
    return _wants_detection(plan, tables) and plan.detection.target is not None


def _rows(results) -> pd.DataFrame:
    """The evaluated rows, with the adjusted models' factor levels when the plan has them."""
    if results.plan.detection.adjusted is not None:
        return results["adjusted_rows"]
    return results["evaluation"]


def default_covariates(results, group: str) -> list[str] | None:
    """The adjusted formula's terms that do not use ``group`` (None: no formula)."""
    adj = results.plan.detection.adjusted
    if adj is None:
        return None
    from stats.formula import parse_formula

    return [t.name for t in parse_formula(adj.formula).terms
            if group not in t.columns and len(t.factors) == 1]


def _largest_gaps(results, population: str) -> list[dict]:
    """Per demographic axis of the plan (a single column): the level whose crude
    sensitivity (specificity) differs most from the reference level's (the plan's first
    level, else the level with the most scans), among levels with at least ``small_n``
    scans in the population, averaged over models."""
    from .detection import axes

    det = results.plan.detection
    metric = "sensitivity" if population == "positives" else "specificity"
    sm = results["subgroup_metrics"]
    sm = sm[sm["estimand"] == metric]
    levels = (det.adjusted.levels if det.adjusted is not None else {}) or {}
    out = []
    for axis in axes(results.plan):
        if len(axis) != 1 or axis[0] not in DEMOGRAPHIC:
            continue
        col = axis[0]
        cells = sm[(sm["group_var"] == col) & (sm["denominator"] >= det.small_n)]
        if cells["group_level"].nunique() < 2:
            continue
        mean = cells.groupby("group_level")["estimate"].mean()
        size = cells.groupby("group_level")["denominator"].max()
        ref = next((str(lv) for lv in levels.get(col, ()) if str(lv) in mean.index), None)
        if ref is None:
            ref = str(size.sort_values(ascending=False, kind="stable").index[0])
        gap = (mean - mean[ref]).drop(ref)
        comp = str(gap.abs().sort_values(ascending=False, kind="stable").index[0])
        out.append({"group": col, "levels": [comp, ref],
                    "why": f"the largest crude {metric} gap from {ref} on {col} "
                           f"({gap[comp]:+.3f}, mean over models)"})
    return out


@analysis("gap_contrasts", wanted=_wants_gaps)
def gap_contrasts(results) -> list[dict]:
    """The contrasts decomposed: ``[{group, levels, covariates, role, why}]``."""
    det = results.plan.detection
    gaps = det.gaps
    adj = det.adjusted
    population = adj.population if adj is not None else "positives"
    plan = results.plan
    out = []
    if gaps.contrasts:
        for i, c in enumerate(gaps.contrasts):
            out.append({"group": c.group, "levels": list(c.levels),
                        "covariates": list(c.covariates) if c.covariates else None,
                        "role": plan.roles.get("gaps", PRESPECIFIED),
                        "why": "prespecified in the plan",
                        "key": f"detection.gaps.contrasts[{i}]"})
    else:
        for c in _largest_gaps(results, population):
            out.append({**c, "covariates": None, "role": EXPLORATORY,
                        "key": "detection.gaps"})
    from stats.schema import ContractError

    ev = _rows(results)
    for c in out:
        if c["group"] not in ev.columns:
            raise ContractError(MSG_GROUP_COLUMN.format(file=plan.where, key=plan.key(c["key"]),
                                                        group=c["group"]))
        if c["covariates"] is None:
            cov = default_covariates(results, c["group"])
            if cov is None:
                raise ContractError(MSG_NO_COVARIATES.format(file=plan.where,
                                                             key=plan.key(c["key"])))
            c["covariates"] = cov
    results.decide("gaps.contrasts", [{k: v for k, v in c.items() if k != "key"} for c in out])
    return out


def gap_method(plan) -> str:
    """The decomposition's model: the plan's, else the primary adjusted method."""
    det = plan.detection
    if det.gaps is not None and det.gaps.method is not None:
        return det.gaps.method
    if det.adjusted is not None and det.adjusted.methods:
        return det.adjusted.methods[0]
    return "glmm"


@analysis("gap_decomposition", wanted=_wants_gaps, lane="models")
def gap_decomposition(results) -> pd.DataFrame:
    """``stats.decompose_gap`` for every contrast (``gap_contrasts``), one draw of patients
    shared by every contrast and model; extra columns ``contrast`` (its label), ``role``."""
    from stats.gaps import decompose_gap

    from .plan import from_stats

    plan = results.plan
    det = plan.detection
    adj = det.adjusted
    method = gap_method(plan)
    population = adj.population if adj is not None else "positives"
    seed = plan.seed_for("gap_bootstrap")
    results.decide("seeds.gap_bootstrap", seed)
    results.decide("gaps.method", method)
    results.decide("gaps.n_boot", det.gaps.n_boot)
    results.decide("gaps.within_site", bool(det.gaps.within_site) and method == "glmm")
    results.decide("gaps.population", population)
    ev = _rows(results)
    cluster = results["cluster"]
    # the site column of the model: a nested grouping ([site, patient_id]) gives its top
    # level (the decomposition's GLMM has the site intercept; its bootstrap resamples the
    # patients, so their repeated scans are in the intervals)
    group = adj.group if adj is not None else "site"
    site = group if isinstance(group, str) else group[0]
    parts = []
    for i, c in enumerate(results["gap_contrasts"]):
        key = plan.key(f"detection.gaps.contrasts[{i}]" if det.gaps.contrasts
                       else "detection.gaps")
        out = from_stats(plan.where, key, decompose_gap, ev, c["group"], tuple(c["levels"]),
                         covariates=list(c["covariates"]), population=population,
                         n_boot=det.gaps.n_boot, seed=seed, method=method,
                         fit_group=site,
                         cluster=cluster, nagq=adj.nagq if adj is not None else 1,
                         conf_level=det.conf_level, within_site=det.gaps.within_site)
        parts.append(out.assign(contrast=f"{c['group']}: {c['levels'][0]} vs {c['levels'][1]}",
                                role=c["role"]))
    return pd.concat(parts, ignore_index=True)


@analysis("transport", wanted=_wants_target)
def transported(results) -> pd.DataFrame:
    """``stats.transport`` of the evaluated scans to ``detection.target``; extra column
    ``role``."""
    from stats.raking import EXTREME_WEIGHT, transport

    from .plan import from_stats

    plan = results.plan
    det = plan.detection
    tg = det.target
    target = {col: dict(m) for col, m in tg.margins.items()}
    if tg.prevalence is not None:
        target["prevalence"] = tg.prevalence
    ev = results["evaluation"]
    # a scan whose margin value is missing cannot be raked: left out (complete case, as the
    # adjusted models), counted per column and stated; stats.transport itself refuses them
    cols = [c for c in tg.margins if c in ev.columns]
    missing = ev[cols].isna() if cols else pd.DataFrame(index=ev.index)
    scans = ev["case_id"] if "case_id" in ev.columns else pd.Series(ev.index, index=ev.index)
    left_out = {c: int(scans[missing[c]].nunique()) for c in cols if missing[c].any()}
    if left_out:
        ev = ev[~missing.any(axis=1)]
    results.decide("transport.left_out", left_out)
    out = from_stats(plan.where, plan.key("detection.target"), transport, ev,
                     target, conf_level=det.conf_level, cluster=results["cluster"])
    shares = {col: {k: v / sum(m.values()) for k, v in m.items()}
              for col, m in tg.margins.items()}
    if tg.prevalence is not None:
        shares["label"] = {"1": tg.prevalence, "0": 1 - tg.prevalence}
    results.decide("transport.target", shares)
    results.decide("transport.name", tg.name)
    mw = out.groupby("model")["max_weight"].first()
    results.decide("transport.max_weight", {str(k): float(v) for k, v in mw.items()})
    results.decide("transport.extreme", bool((mw > EXTREME_WEIGHT).any()))
    return out.assign(role=plan.roles.get("transport", PRESPECIFIED))
