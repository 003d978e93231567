"""Shared helpers of the detection sections: read the analysis layer's results
(``study.results``, from :func:`analysis.run`) and lay them out. Nothing here
computes a statistic or selects rows."""
from __future__ import annotations

import numpy as np
import pandas as pd

from stats.detection import PROPORTIONS  # noqa: F401  (one list, in stats)

from ..study import level_order

#: how each proportion interval is named in the text
CI_NAMES = {"wilson": "Wilson score", "clopper-pearson": "Clopper-Pearson exact",
            "jeffreys": "Jeffreys", "bootstrap": "paired cluster-bootstrap"}


def calls(study) -> pd.DataFrame:
    """Every input row with its scan-level call (``Results['calls']``)."""
    return study.results["calls"]


def evaluation(study) -> pd.DataFrame:
    """The rows the metrics use (the analysis layer's row rule)."""
    return study.results["evaluation"]


def axes(study) -> list[tuple[str, ...]]:
    from analysis.detection import axes as plan_axes

    return plan_axes(study.plan)


def role(study, axis) -> str:
    """"prespecified" or "exploratory" (``Results['roles']``)."""
    return study.results["roles"]["axis:" + ":".join(axis)]


def analysis_role(study, key: str) -> str:
    return study.results["roles"][key]


def axis_name(axis: tuple[str, ...]) -> str:
    return ":".join(axis)


def axis_label(axis: tuple[str, ...] | str) -> str:
    parts = axis.split(":") if isinstance(axis, str) else axis
    return " \u00d7 ".join(p.replace("_", " ") for p in parts)


def metrics(study) -> pd.DataFrame:
    """Tidy metrics per model x cell (``Results['subgroup_metrics']``)."""
    return study.results["subgroup_metrics"]


def with_counts(study, m: pd.DataFrame) -> pd.DataFrame:
    """``m`` (tidy metrics) with the cell's 2x2 counts ``tp, fp, fn, tn`` appended, so that
    a table's CSV holds every number its display shows."""
    keys = ["model", "group_var", "group_level"]
    c = counts(study)[keys + ["tp", "fp", "fn", "tn"]]
    out = m.drop(columns=[k for k in ("tp", "fp", "fn", "tn") if k in m.columns])
    return out.merge(c, on=keys, how="left", sort=False)


def counts(study) -> pd.DataFrame:
    """2x2 counts per model x cell (``Results['confusion_counts']``)."""
    return study.results["confusion_counts"]


def wide(m: pd.DataFrame, estimands=("sensitivity", "specificity")) -> pd.DataFrame:
    """One row per model x cell with ``<estimand>_{estimate,conf_low,conf_high}`` columns."""
    keys = ["model", "group_var", "group_level"]
    base = m[m["estimand"] == estimands[0]][keys + ["n", "n_pos", "n_neg"]].reset_index(drop=True)
    for e in estimands:
        part = m[m["estimand"] == e][keys + ["estimate", "conf_low", "conf_high", "flag"]]
        part = part.rename(columns={c: f"{e}_{c}" for c in ("estimate", "conf_low", "conf_high",
                                                           "flag")})
        base = base.merge(part, on=keys, how="left", sort=False)
    return base


def ordered_levels(study, axis: tuple[str, ...]) -> list[str]:
    """Display order of an axis's levels (categorical order; intersections as products)."""
    levels = [level_order(study.cases[a]) for a in axis]
    out = [""]
    for lv in levels:
        out = [f"{o}:{v}" if o else v for o in out for v in lv]
    return out


def sort_cells(df: pd.DataFrame, study, axis: tuple[str, ...]) -> pd.DataFrame:
    order = {lv: i for i, lv in enumerate(ordered_levels(study, axis))}
    from ..study import model_order

    models = model_order(study)
    key = df["group_level"].map(lambda v: order.get(str(v), len(order)))
    mkey = df["model"].map(lambda v: models.index(v) if v in models else len(models))
    return df.assign(_m=mkey, _k=key).sort_values(["_m", "_k"], kind="stable").drop(
        columns=["_m", "_k"]).reset_index(drop=True)


def auc_interval_text(scale: str, cluster: str | None) -> str:
    """How the AUC's interval was formed (``detection.auc_scale`` and the decided cluster):
    one wording for the methods text and the overall table's note."""
    from .. import text

    indep = ("a Wald interval on the logit scale, back-transformed" if scale == "logit"
             else "a Wald interval on the AUC scale (as pROC)")
    out = f"DeLong's variance with {indep}"
    if cluster:
        where = ("the logit scale, back-transformed" if scale in ("auto", "logit")
                 else "the AUC scale")
        out += (f"; where a {text.md(cluster)} has several scans, Obuchowski's clustered-"
                f"data variance with a Student t quantile on the number of {text.md(cluster)} "
                f"clusters minus one degrees of freedom, on {where}"
                + (" (it covers far better there than the AUC scale: "
                   "bench/auc_cluster_coverage.md)" if scale == "auto" else ""))
    return out


def methods_note(study) -> str:
    """The interval sentence under a table: the method, and the clustering it respects."""
    det = study.plan.detection
    cluster = study.results.decisions.detection.cluster
    how = (f", cluster-aware: at the effective sample size of the {cluster} clusters (Korn & "
           f"Graubard design effect)" if cluster else "")
    return (f"Intervals: {CI_NAMES[det.ci]} {int(round(det.conf_level * 100))}% "
            f"confidence intervals{how}. Sensitivity = TP / reference positives; specificity = "
            f"TN / reference negatives.")


def small_mark(n, small_n) -> str:
    return " \u2020" if (np.isfinite(n) and n < small_n) else ""


__all__ = ["calls", "evaluation", "metrics", "counts", "wide", "axes", "axis_label"]
