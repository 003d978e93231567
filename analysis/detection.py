"""Detection analyses: the row rule, scan-level calls, subgroup metrics, counts, flow.

**The row rule (one place).** With a ``split`` column, the test split is analysed and
every other row is excluded with its reason (validation rows choose the threshold when it
is not prespecified, and are never evaluated); without a ``split`` column every row is
analysed. A table whose ``split`` has no test rows is refused. ``clinrel subgroups``,
``clinrel compare``, ``clinrel adjust`` and ``clinrel report`` all apply this rule.

**Calls.** A prespecified threshold (``detection.threshold.value``) gives
``pred = score >= threshold``; a criterion chooses the threshold per model on the
validation split; with neither (a CLI run on a table that has ``pred``) the table's own
calls are used as given.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stats.schema import ContractError
from .core import analysis

MSG_NO_TEST = ("{file}: column 'split' has no 'test' rows ({counts}); the evaluation uses the "
               "test split only (validation rows choose the threshold); mark the held-out "
               "rows split = test, or drop the split column to evaluate every row")
MSG_NO_PRED = ("{file}: no threshold was given and the table has no 'pred' column; give a "
               "prespecified threshold (--threshold / detection.threshold.value) or a criterion "
               "to choose one on the validation split")

REASON_TEST = "test split: evaluated"
REASON_ALL = "no split column: every row evaluated"
REASON_VAL_CHOSEN = "validation split: used to choose the threshold (exploratory)"
REASON_VAL_DEV = "validation split: development data, not part of the evaluation"
REASON_OTHER = "split neither validation nor test"


def _wants_detection(plan, tables) -> bool:
    return getattr(plan, "detection", None) is not None and tables.cases is not None


def block_family(results) -> bool:
    """Whether the block likelihood-ratio tests form a prespecified Holm family (per model):
    the plan has adjusted models with an ML method and the adjusted analysis is
    prespecified. The one rule behind ``adjusted.block_multiplicity`` and the multiplicity
    statement."""
    plan = results.plan
    return (bool(plan.detection.adjusted) and block_method(plan) is not None
            and results["roles"]["adjusted"] == "prespecified")


def block_method(plan) -> str | None:
    """The ML method the block likelihood-ratio tests use (GEE has no likelihood)."""
    return next((m for m in plan.detection.adjusted.methods if m in ("glmm", "fixed")), None)


def _wants_comparisons(plan, tables) -> bool:
    """Paired comparisons need two models (one model: the section says there is nothing
    to compare, and ``stats.compare_models`` would refuse)."""
    return _wants_detection(plan, tables) and tables.cases["model"].nunique() >= 2


def _source(results) -> str:
    return str(getattr(results.plan, "cases", None) or "cases")


def has_split(cases: pd.DataFrame) -> bool:
    return "split" in cases.columns


@analysis("calls", wanted=_wants_detection)
def calls(results) -> pd.DataFrame:
    """Every input row with its scan-level call (``stats.scan_level``)."""
    from stats.detection import scan_level

    det = results.plan.detection
    cases = results.tables.cases
    thr = det.threshold
    if thr.value is not None:
        df = scan_level(cases, threshold=thr.value)
    elif not thr.given:
        df = scan_level(cases, criterion=thr.criterion or "youden",
                        target_specificity=thr.target)
    else:
        if "pred" not in cases.columns:
            raise ContractError(MSG_NO_PRED.format(file=_source(results)))
        df = cases.copy()
        df.attrs["threshold"] = {"values": {}, "source": "given", "prespecified": True}
    results.decide("detection.threshold", dict(df.attrs["threshold"]))
    return df


#: the patient counts of the flow of cases (``row_flow``), per disposition and reason
PATIENT_FLOW = ("positive_patients", "negative_patients", "patients_with_negative",
                "patients_entirely")


def _patient_counts(scans: pd.DataFrame, keys: list[str]) -> dict[str, pd.Series]:
    """Per group of ``keys`` (one row per scan): patients with a positive scan, patients
    without one (they partition the group's patients), patients with a negative scan (a
    patient with both counts in both), and patients all of whose scans of the whole table
    are in the group (``patients_entirely``: an excluded patient, not only some scans)."""
    g = scans.groupby(keys + ["patient_id"], sort=False, observed=True)["label"]
    per = pd.DataFrame({"pos": g.max() == 1, "neg": g.min() == 0, "n": g.size()})
    total = scans.groupby("patient_id", sort=False, observed=True).size()
    per["whole"] = per["n"].to_numpy() == total.reindex(
        per.index.get_level_values("patient_id")).to_numpy()
    by = per.groupby(level=list(range(len(keys))), sort=False)
    return {"positive_patients": by["pos"].sum(), "negative_patients": by["pos"].size() - by["pos"].sum(),
            "patients_with_negative": by["neg"].sum(), "patients_entirely": by["whole"].sum()}


@analysis("row_flow", wanted=_wants_detection)
def row_flow(results) -> pd.DataFrame:
    """Input rows by disposition and reason (``rows`` sums to the input row count)."""
    df = results["calls"]
    det = results.plan.detection
    if has_split(df):
        split = df["split"].astype(str)
        if not (split == "test").any():
            counts = ", ".join(f"{k}: {v}" for k, v in split.value_counts().items())
            raise ContractError(MSG_NO_TEST.format(file=_source(results), counts=counts))
    else:
        split = pd.Series("all", index=df.index)
    reason_val = REASON_VAL_DEV if det.threshold.value is not None or det.threshold.given \
        else REASON_VAL_CHOSEN
    disposition = pd.Series("excluded", index=df.index)
    reason = pd.Series(REASON_OTHER, index=df.index)
    for value, disp, why in (("validation", "excluded", reason_val),
                             ("test", "included", REASON_TEST),
                             ("all", "included", REASON_ALL)):
        hit = split == value
        disposition[hit] = disp
        reason[hit] = why
    out = df.assign(disposition=disposition.to_numpy(), reason=reason.to_numpy())
    first = out.drop_duplicates(["reason", "case_id"])
    grouped = out.groupby(["disposition", "reason"], sort=False)
    keys = ["disposition", "reason"]
    tab = pd.DataFrame({
        "rows": grouped.size(),
        "cases": grouped["case_id"].nunique(),
        "patients": grouped["patient_id"].nunique(),
        "positives": first.groupby(keys, sort=False)["label"].sum(),
        "negatives": first.assign(neg=first["label"] == 0).groupby(keys, sort=False)["neg"].sum(),
        **_patient_counts(first, keys),
    }).reset_index()
    order = {REASON_VAL_CHOSEN: 0, REASON_VAL_DEV: 0, REASON_TEST: 1, REASON_ALL: 2, REASON_OTHER: 3}
    tab = tab.assign(_o=tab["reason"].map(order)).sort_values("_o", kind="stable").drop(
        columns="_o").reset_index(drop=True)
    uniq = df.drop_duplicates("case_id")
    every = {k: int(v.iloc[0]) for k, v in _patient_counts(
        uniq.assign(_all=0), ["_all"]).items()}
    total = {"disposition": "total", "reason": "input table",
             "rows": results.tables.input_rows.get("cases", len(df)),
             "cases": df["case_id"].nunique(), "patients": df["patient_id"].nunique(),
             "positives": int(uniq["label"].sum()), "negatives": int((uniq["label"] == 0).sum()),
             **every}
    if int(tab["rows"].sum()) != total["rows"]:
        raise RuntimeError("flow of cases: dispositions do not sum to the input rows")
    tab = pd.concat([tab, pd.DataFrame([total])], ignore_index=True)
    for c in ("rows", "cases", "patients", "positives", "negatives", *PATIENT_FLOW):
        tab[c] = tab[c].astype("int64")
    results.decide("detection.rows", {r: int(n) for r, n in zip(tab["reason"], tab["rows"])})
    merged = [m for m in results.tables.text_merged if m["table"] == "cases"]
    if merged:   # NFC and NFD spellings read as one (stats.schema.unify_text): recorded
        from stats.schema import merge_notes

        results.decide("cases.unicode_nfc", [dict(m) for m in merged])
        for line in merge_notes(merged):
            results.note(f"Text normalised when read: {line}.")
    return tab


@analysis("evaluation", wanted=_wants_detection)
def evaluation(results) -> pd.DataFrame:
    """The rows the metrics use (the row rule above)."""
    df = results["calls"]
    results["row_flow"]  # checks the split, records the decision
    if has_split(df):
        df = df[df["split"].astype(str) == "test"]
    return df.reset_index(drop=True)


def closed_form_ci(results) -> str:
    """The proportion interval of the tables that have no bootstrap (sweep, failure map):
    the plan's ``ci``, or Wilson when the plan puts the subgroup table on the bootstrap."""
    ci = results.plan.detection.ci
    if ci == "bootstrap":
        results.decide("detection.closed_form_ci", "wilson")
        return "wilson"
    return ci


def axes(plan) -> list[tuple[str, ...]]:
    """The subgroup axes of the plan: prespecified, then exploratory, then the failure
    map's intersection when it is neither."""
    det = plan.detection
    out = list(det.subgroups) + [a for a in det.exploratory_subgroups if a not in det.subgroups]
    fmap = map_axis(plan)
    if fmap and fmap not in out:
        out.append(fmap)
    return out


PRESPECIFIED, EXPLORATORY = "prespecified", "exploratory"


def map_axis(plan) -> tuple[str, str] | None:
    """The failure map's (rows, cols), or None without one."""
    f = plan.detection.failure_map
    return None if f is None else (f.rows, f.cols)


def axis_role(plan, axis) -> str:
    """An axis is prespecified when the plan lists it under ``detection.subgroups``;
    every other axis (``exploratory_subgroups``, a failure map off the list) is exploratory."""
    return PRESPECIFIED if tuple(axis) in set(plan.detection.subgroups) else EXPLORATORY


@analysis("roles")
def roles(results) -> dict:
    """Prespecified or exploratory, for every axis and analysis the report shows (STARD
    12a/17): subgroup axes as the plan lists them; the threshold as the plan fixes it; the
    failure map as its axis; every other analysis as the plan's ``roles`` block says
    (the defaults of ``analysis.plan.Roles``: the threshold sweep and the partially pooled
    cells exploratory, the rest prespecified)."""
    plan = results.plan
    det = getattr(plan, "detection", None)
    out = dict(plan.roles)
    if out.get("adjusted") == EXPLORATORY:   # the interactions are part of the adjusted models
        out["interactions"] = EXPLORATORY
    if det is not None:
        out.update({"axis:" + ":".join(a): axis_role(plan, a) for a in axes(plan)})
        out["threshold"] = PRESPECIFIED if det.threshold.value is not None or det.threshold.given \
            else EXPLORATORY
        if det.failure_map:
            out["failure_map"] = axis_role(plan, map_axis(plan))
    results.decide("roles", dict(out))
    return out


#: the multiplicity rule, stated in the methods text
MULTIPLICITY = ("Holm within each family of prespecified tests, one family per model and "
                "estimand: the heterogeneity tests across the prespecified axes{vs_rest}"
                "{comparisons}{blocks}; exploratory tests are shown "
                "unadjusted and labelled exploratory; confidence intervals are not adjusted for "
                "multiplicity.")
#: the clause of MULTIPLICITY for the subgroup-versus-rest tests (sensitivity collapse)
VS_REST_CLAUSE = ("; the subgroup-versus-rest tests of every level of every single-variable "
                  "axis of the plan, together (not axis by axis)")
#: the clause of MULTIPLICITY for the paired model comparisons
COMPARISONS_CLAUSE = "; the paired model comparisons (every pair and cell), per estimand"
#: the clause of MULTIPLICITY for the adjusted models' block tests (when the plan has them)
BLOCKS_CLAUSE = ("; the adjusted models' likelihood-ratio tests of their blocks and group, "
                 "per model")


@analysis("heterogeneity", wanted=_wants_detection)
def heterogeneity(results) -> pd.DataFrame:
    """Per axis, model and estimand: a test of equal sensitivity (specificity) across the
    levels (``stats.heterogeneity_test``; Rao-Scott when scans cluster within patients), with
    Holm's adjustment over the prespecified axes (``p_adjusted``) and the axis's ``role``."""
    from stats.heterogeneity import heterogeneity_test
    from stats.subgroups import adjust_p

    plan = results.plan
    ev = results["evaluation"]
    cluster = results["cluster"]
    parts = [heterogeneity_test(ev, by=axes(plan), estimand=e, cluster=cluster)
             for e in ("sensitivity", "specificity")]
    out = pd.concat(parts, ignore_index=True)
    role = {":".join(a): axis_role(plan, a) for a in axes(plan)}
    out["role"] = out["group_var"].map(role)
    pre = out[out["role"] == PRESPECIFIED].copy()
    adjusted = adjust_p(pre, ["model", "estimand"])  # Holm per family (and BH beside it)
    out["p_adjusted"] = adjusted["p_adjusted"].reindex(out.index)
    out["p_adjusted_bh"] = adjusted["p_adjusted_bh"].reindex(out.index)
    blocks = block_family(results)
    roles = results["roles"]
    results.decide("multiplicity", MULTIPLICITY.format(
        blocks=BLOCKS_CLAUSE if blocks else "",
        vs_rest=VS_REST_CLAUSE if roles["sensitivity_collapse"] == PRESPECIFIED else "",
        comparisons=COMPARISONS_CLAUSE if roles["comparisons"] == PRESPECIFIED
        and results["evaluation"]["model"].nunique() > 1 else ""))
    return out


@analysis("cluster", wanted=_wants_detection)
def cluster(results):
    """The cluster of the intervals and tests: ``detection.cluster`` of the plan; by default
    ``patient_id`` when a patient has more than one scan among the evaluated rows of a model,
    else None (scans independent)."""
    from stats.clustered import resolve_cluster

    det = results.plan.detection
    ev = results["evaluation"]
    chosen = getattr(det, "cluster", "auto")
    cases = getattr(results.tables, "cases", None)
    implicit = bool(getattr(cases, "attrs", {}).get("implicit_patient", False))
    rep = None if implicit else patient_repeats(ev)     # no patient_id column: unknown
    results.decide("detection.patient_repeats", rep)
    chosen = resolve_cluster(ev, chosen)     # the one rule (stats.clustered)
    results.decide("detection.cluster", chosen)
    return chosen


def patient_repeats(ev: pd.DataFrame) -> dict | None:
    """``{with_repeats, patients}``: patients with several scans among the evaluated rows
    of the model with the most such patients, and that model's patients (recorded beside
    ``detection.cluster``, for the methods text); None without a ``patient_id`` column."""
    if "patient_id" not in ev.columns or not len(ev):
        return None
    per = ev.groupby(["model", "patient_id"], observed=True, sort=False).size()
    several = (per > 1).groupby(level=0, observed=True, sort=False).sum()
    patients = per.groupby(level=0, observed=True, sort=False).size()
    m = several.idxmax()
    return {"with_repeats": int(several[m]), "patients": int(patients[m])}


@analysis("subgroup_metrics", wanted=_wants_detection)
def subgroup_metrics(results) -> pd.DataFrame:
    """Tidy metrics per model x cell (``stats.subgroup_metrics``)."""
    from stats.subgroups import subgroup_metrics as compute

    det = results.plan.detection
    if det.bootstrap.n_boot:
        results.decide("seeds.detection_bootstrap", results.plan.seed_for("detection_bootstrap"))
        results.decide("detection.bootstrap.n_boot", det.bootstrap.n_boot)
    return compute(results["evaluation"], by=axes(results.plan), **subgroup_options(results))


def subgroup_options(results) -> dict:
    """The options of the subgroup table (``stats.subgroup_metrics``) as the plan sets them:
    interval, level, AUC scale, small n, cluster and, with a bootstrap, its replicates,
    seed, strata and interval; shared by every call that recomputes subgroup rows (the
    adjusted-versus-crude figure's crude values on the fits' scans)."""
    det = results.plan.detection
    kw = {"ci": det.ci, "conf_level": det.conf_level, "auc_scale": det.auc_scale,
          "small_n": det.small_n, "scheduler": results.scheduler,
          "cluster": results["cluster"]}
    b = det.bootstrap
    if b.n_boot:
        kw.update(n_boot=b.n_boot, seed=results.plan.seed_for("detection_bootstrap"),
                  strata=b.strata, boot_ci=b.boot_ci)
    return kw


@analysis("confusion_counts", wanted=_wants_detection)
def confusion_counts(results) -> pd.DataFrame:
    """2x2 counts per model x cell (``stats.confusion_counts``)."""
    from stats.detection import confusion_counts as compute

    return compute(results["evaluation"], by=axes(results.plan))


@analysis("comparisons", wanted=_wants_comparisons)
def comparisons(results) -> pd.DataFrame:
    """Every pair of models (``stats.compare_models``), overall and per planned axis;
    cluster-aware (clustered McNemar, Obuchowski's AUC variance) by the decided cluster."""
    from stats.compare import compare_models

    det = results.plan.detection
    results.decide("comparisons.metrics", list(det.compare_metrics))
    out = compare_models(results["evaluation"], by=list(det.compare_by) or None,
                         metrics=det.compare_metrics, conf_level=det.conf_level,
                         small_n=det.small_n, cluster=results["cluster"],
                         **_compare_bootstrap(results, det.compare_metrics))
    if results["roles"]["comparisons"] != PRESPECIFIED:   # exploratory: no family
        out["p_adjusted"] = out["p_adjusted_bh"] = np.nan
        results.decide("comparisons.multiplicity", "none")
    else:
        results.decide("comparisons.multiplicity", "holm")
    return out


def _compare_bootstrap(results, metrics, gaps: bool = False) -> dict:
    """The paired cluster bootstrap of ``stats.compare_models`` (the plan's
    ``detection.bootstrap``: replicates, strata, the stream ``detection_bootstrap``) when
    a metric without a closed form or a gap asks for it; else nothing."""
    from stats.compare import BOOT_COMPARE

    b = results.plan.detection.bootstrap
    if not (gaps or any(m in BOOT_COMPARE for m in metrics)):
        return {}
    seed = results.plan.seed_for("detection_bootstrap")
    results.decide("seeds.detection_bootstrap", seed)
    results.decide("detection.bootstrap.n_boot", b.n_boot)
    return {"n_boot": b.n_boot, "seed": seed, "strata": b.strata,
            "scheduler": results.scheduler}


def _wants_gaps(plan, tables) -> bool:
    return _wants_detection(plan, tables) and bool(plan.detection.subgroup_gaps) \
        and bool(plan.detection.subgroups)


@analysis("subgroup_gaps", wanted=_wants_gaps)
def subgroup_gaps(results) -> pd.DataFrame:
    """Each model's gap between its best and worst level of every prespecified subgroup
    axis (``stats.compare_models(gaps=True)``: fairlearn's ``difference()`` with a paired
    cluster-bootstrap percentile interval), for the plan's ``detection.subgroup_gaps``."""
    from stats.compare import compare_models

    det = results.plan.detection
    metrics = tuple(det.subgroup_gaps)
    results.decide("comparisons.gap_metrics", list(metrics))
    out = compare_models(results["evaluation"], by=list(det.subgroups), metrics=metrics,
                         conf_level=det.conf_level, small_n=det.small_n,
                         cluster=results["cluster"], gaps=True,
                         **_compare_bootstrap(results, metrics, gaps=True))
    return out[out["estimand"].str.endswith("_gap")].reset_index(drop=True)


#: thresholds in the sweep: quantiles of the evaluation scores (plus the operating ones)
SWEEP_POINTS = 25


@analysis("threshold_sweep", wanted=_wants_detection)
def threshold_sweep(results) -> pd.DataFrame:
    """Every metric per model across a threshold grid and the ranking's Kendall tau
    (``stats.threshold_sweep``); the grid is ``SWEEP_POINTS`` quantiles (5%-95%) of the
    evaluation scores plus each model's operating threshold."""
    import numpy as np

    from stats.detection import threshold_sweep as compute

    det = results.plan.detection
    ev = results["evaluation"]
    chosen = results["calls"].attrs["threshold"]["values"]
    score = ev["score"].to_numpy(float)
    grid = np.unique(np.round(np.quantile(score, np.linspace(0.05, 0.95, SWEEP_POINTS)), 6))
    grid = np.unique(np.concatenate([grid, list(chosen.values())]))
    results.decide("detection.threshold_grid", [float(g) for g in grid])
    out = compute(ev, grid, chosen=chosen, ci=closed_form_ci(results), conf_level=det.conf_level,
                  cluster=results["cluster"])
    out.attrs["grid"] = grid
    return out


def _wants_map(plan, tables) -> bool:
    return _wants_detection(plan, tables) and bool(plan.detection.failure_map)


@analysis("failure_map", wanted=_wants_map)
def failure_map(results) -> pd.DataFrame:
    """Sensitivity over the rows x cols grid per model (``stats.failure_map``)."""
    from stats.subgroups import failure_map as compute

    det = results.plan.detection
    rows, cols = map_axis(results.plan)
    return compute(results["evaluation"], rows, cols, metric="sensitivity",
                   ci=closed_form_ci(results), cluster=results["cluster"],
                   conf_level=det.conf_level, small_n=det.small_n)


@analysis("subgroup_vs_rest", wanted=_wants_map)
def subgroup_vs_rest(results) -> pd.DataFrame:
    """Each level against the rest of its axis (``stats.subgroup_vs_rest``), single axes;
    cluster-aware (effective counts of each side) by the decided cluster."""
    from stats.subgroups import subgroup_vs_rest as compute

    det = results.plan.detection
    single = [a for a in det.subgroups if len(a) == 1] or list(det.subgroups)
    adjust = "holm" if results["roles"]["sensitivity_collapse"] == PRESPECIFIED else "none"
    results.decide("sensitivity_collapse.multiplicity", adjust)
    return compute(results["evaluation"], by=single, conf_level=det.conf_level,
                   cluster=results["cluster"], adjust=adjust)


#: continuous variables of the cohort table
COHORT_CONTINUOUS = ("age", "tumor_size_mm")


@analysis("cohort", wanted=_wants_detection)
def cohort(results) -> pd.DataFrame:
    """Table 1 by site over the evaluated cases, one row per case (``stats.describe``)."""
    from stats.cohort_table import describe

    ev = results["evaluation"].drop_duplicates("case_id").reset_index(drop=True)
    return describe(ev, by="site", continuous=[c for c in COHORT_CONTINUOUS], smd=True)


#: characteristics of a patient (not of a scan): described per patient in Table 1
PATIENT_CHARACTERISTICS = ("age", "age_group", "sex", "race")


def patient_columns(ev: pd.DataFrame) -> list[str]:
    """The Table 1 characteristics described per patient: the demographic columns the
    table has, and any other characteristic of ``stats.cohort_table.CATEGORICAL`` that is
    the same on every scan of every patient (compared exactly; a scan attribute such as
    the contrast phase varies)."""
    from stats.cohort_table import CATEGORICAL

    cols = [c for c in PATIENT_CHARACTERISTICS if c in ev.columns]
    binned = {b for b in ("age_group",) if b in ev.columns}
    others = [c for c in CATEGORICAL if c in ev.columns and c not in cols and c not in binned]
    if others:
        same = ev.groupby("patient_id", sort=False, observed=True)[others].nunique(dropna=False)
        cols += [c for c in others if bool((same[c] <= 1).all())]
    return cols


@analysis("cohort_patients", wanted=_wants_detection)
def cohort_patients(results) -> pd.DataFrame:
    """Table 1 by site over the evaluated patients, one row per patient (``stats.describe``
    with ``unit="patient_id"``: a patient's characteristics from their first evaluated
    scan, a positive patient one with a positive scan, scans per patient), with the
    standardized differences across sites; the characteristics of :func:`patient_columns`."""
    from stats.cohort_table import describe

    ev = results["evaluation"].drop_duplicates("case_id").reset_index(drop=True)
    cols = patient_columns(ev)
    return describe(ev, by="site", unit="patient_id",
                    categorical=[c for c in cols if c != "age"],
                    continuous=[c for c in cols if c == "age"], smd=True)


def _wants_pooled(plan, tables) -> bool:
    return _wants_map(plan, tables) and plan.detection.failure_map.pooled


@analysis("pooled_failure_map", wanted=_wants_pooled)
def pooled_failure_map(results) -> pd.DataFrame:
    """Partially pooled sensitivity of the failure map's cells (``stats.pooled_subgroup_metrics``:
    main effects fixed, a random intercept per cell), beside the crude cells; clustered by
    the decided cluster (design-effect inflation)."""
    from stats.pooled import pooled_subgroup_metrics

    det = results.plan.detection
    return pooled_subgroup_metrics(results["evaluation"], [map_axis(results.plan)],
                                   "sensitivity", cluster=results["cluster"],
                                   conf_level=det.conf_level, small_n=det.small_n)


@analysis("pooled_axes", wanted=_wants_pooled)
def pooled_axes(results) -> pd.DataFrame:
    """Partially pooled sensitivity per level of each single axis of the subgroup-versus-rest
    tests (a random intercept per level), for the collapse table's "survives pooling"."""
    from stats.pooled import pooled_subgroup_metrics

    det = results.plan.detection
    single = [a for a in det.subgroups if len(a) == 1] or list(det.subgroups)
    return pooled_subgroup_metrics(results["evaluation"], single, "sensitivity",
                                   cluster=results["cluster"], conf_level=det.conf_level,
                                   small_n=det.small_n)


@analysis("precision", wanted=_wants_detection)
def precision(results) -> pd.DataFrame:
    """Achieved 95% CI half-widths of sensitivity and specificity per prespecified cell, and
    the positives (negatives, scans) a cell needs for the plan's target half-width at the
    model's overall value (``stats.precision_table``; Wilson and Clopper-Pearson; the design
    effect of repeated scans from the plan's ICC, or none)."""
    from stats.precision import precision_table

    det = results.plan.detection
    results.decide("precision.target_half_width", det.precision.target_half_width)
    icc, source = det.precision.icc, "plan"
    if icc is None and results["cluster"]:
        icc, source = estimated_icc(results), "estimated"
    results.decide("precision.icc", None if icc is None else {"value": icc, "source": source})
    out = precision_table(results["evaluation"], by=list(det.subgroups),
                          target_half_width=det.precision.target_half_width,
                          conf_level=det.conf_level,
                          icc=icc, cluster=results["cluster"] if icc is not None else None)
    results.decide("precision.cells", "the levels of the prespecified axes: not Missing, not "
                   "applicable, nor an estimand an axis does not apply to")
    return planned_cells(out)


def planned_cells(table: pd.DataFrame) -> pd.DataFrame:
    """The precision table's rows for cells a study plans: not the "Missing" and "not
    applicable" levels (of an intersection too: :func:`stats.detection.unplanned_levels`),
    and not an estimand an axis cannot hold (specificity by tumour size, alone or in an
    intersection: every negative is "not applicable", so no planned cell of the axis has
    one). Recorded as the decision ``precision.cells`` by the caller."""
    from stats.detection import unplanned_levels

    keep = ~unplanned_levels(table["group_level"])
    pop = pd.Series(np.where(table["estimand"] == "sensitivity", table["n_pos"],
                             table["n_neg"]), index=table.index).where(keep, 0.0)
    key = [table[k] for k in ("model", "group_var", "estimand", "method")]
    holds = pop.groupby(key).transform("sum") > 0
    return table[keep & (holds | (table["group_var"] == "overall"))].reset_index(drop=True)


def estimated_icc(results) -> float:
    """The intra-patient correlation for the precision table when scans repeat and the plan
    gives none: per model and estimand (whether the call is right, on positives for
    sensitivity and on negatives for specificity), the one-way ANOVA estimator over
    patients (:func:`stats.precision.icc_anova`, the estimator the partially pooled
    intervals use); the largest over models and estimands (planning errs toward more
    patients), in [0, 1]."""
    from stats.precision import icc_anova

    cluster = results["cluster"]
    ev = results["evaluation"]
    best = 0.0
    for _, g in ev.groupby("model", sort=False, observed=True):
        y = g["label"].to_numpy() == 1
        right = ((g["pred"].to_numpy() == 1) == y).astype(float)
        patient = pd.factorize(g[cluster].astype(str))[0]
        for rows in (y, ~y):
            if rows.any():
                best = max(best, float(icc_anova(right[rows], patient[rows],
                                                 np.zeros(int(rows.sum()), dtype=int))[0]))
    return best
