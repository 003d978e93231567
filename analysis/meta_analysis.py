"""The meta-analysis across sites (plan key ``detection.site_meta_analysis``).

Each site is a study: per model and estimand (sensitivity, specificity, ...), a
random-effects meta-analysis of the sites' logit proportions over the evaluated rows
(:func:`stats.site_meta_analysis`: REML, Knapp-Hartung interval, prediction interval for a
new site), overall and per level of the block's ``by`` axes. The per-site variances are
cluster-aware by the decided cluster (``detection.cluster``), the intervals at the plan's
``detection.conf_level``. Decisions recorded: the estimands, the models, the number of
sites, the cluster, and the analyses that could not be estimated.
"""
from __future__ import annotations

import pandas as pd

from stats.schema import ContractError

from .core import analysis
from .detection import _wants_detection

MSG_MODELS = ("{file}: {key} names {bad}, which the cases table lacks (its models: {known}); fix the names, or leave the list out to "
              "meta-analyse every model")


def _wants(plan, tables) -> bool:
    return _wants_detection(plan, tables) and plan.detection.site_meta_analysis is not None


@analysis("site_meta_analysis", wanted=_wants)
def site_meta_analysis(results) -> pd.DataFrame:
    """Per estimand, model and cell: the sites' rows (forest plot) and the pooled value,
    tau2, I2 and Q (``stats.site_meta_analysis``), stacked; the cells are overall and the
    levels of ``detection.site_meta_analysis.by``."""
    from stats.meta_analysis import site_meta_analysis as compute

    plan = results.plan
    det = plan.detection
    block = det.site_meta_analysis
    ev = results["evaluation"]
    known = list(pd.unique(ev["model"]))
    models = list(block.models) or known
    bad = [m for m in models if m not in known]
    if bad:
        raise ContractError(MSG_MODELS.format(file=plan.where or str(plan.path),
                                              key=plan.key("detection.site_meta_analysis.models"),
                                              bad=", ".join(map(repr, bad)),
                                              known=", ".join(map(str, known))))
    ev = ev[ev["model"].isin(models)]
    cluster = results["cluster"]
    out = pd.concat([compute(ev, estimand=e, by=list(block.by) or None, cluster=cluster,
                             conf_level=det.conf_level) for e in block.estimands],
                    ignore_index=True)
    results.decide("site_meta_analysis.estimands", list(block.estimands))
    results.decide("site_meta_analysis.models", [str(m) for m in models])
    results.decide("site_meta_analysis.sites", int(ev["site"].nunique()))
    results.decide("site_meta_analysis.cluster", cluster)
    pooled = out[out["estimand"] == "pooled"]
    bad_rows = pooled[pooled["flag"].str.contains("not_estimable|zero_variance", regex=True)]
    results.decide("site_meta_analysis.not_estimable", [
        f"{r.metric}, {r.model}, {r.group_var} {r.group_level}: {r.flag}"
        for r in bad_rows.itertuples()])
    return out
