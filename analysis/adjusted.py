"""Confounding-adjusted models of detection among reference positives.

Decisions made here (and recorded): which methods were fitted and which failed; whether a
complete-case refit is added (when the formula uses ``race`` and race has an ``Unknown``
level: DESIGN, "Unknown race is an explicit level; a complete-case fit is reported beside
it"), decided from the parsed formula's columns, not from the formula's text; which ML
method the block likelihood-ratio tests use; which fit the adjusted-vs-crude comparison
uses; whether the site random-intercept SD is at the boundary (singular fit).
"""
from __future__ import annotations

import math
import re

import pandas as pd

from stats.models.glmm import SINGULAR_SD  # a boundary fit's SD is reported as exactly 0

from .core import AFTER, analysis
from .detection import _wants_detection, block_family, block_method
from .plan import LOG_BASES, SD, continuous_terms  # noqa: F401  (one definition)

UNKNOWN = "Unknown"


def _wants(plan, tables) -> bool:
    return _wants_detection(plan, tables) and bool(plan.detection.adjusted)


def formula_columns(formula: str, columns) -> list[str]:
    """The data columns the formula's right-hand side uses, in order (parsed, not split)."""
    try:
        from stats.formula import parse_formula
    except ImportError:  # pragma: no cover - the grammar lands with the safety work
        parse_formula = None
    if parse_formula is not None:
        parsed = parse_formula(formula, columns=list(columns))
        cols = getattr(parsed, "rhs_columns", None)
        cols = cols() if callable(cols) else cols
        if cols is not None:
            return [c for c in dict.fromkeys(cols) if c in set(columns)]
    rhs = formula.split("~", 1)[1]
    return [t.strip() for t in rhs.split("+") if t.strip() in set(columns)]


def complete_case_rows(ev: pd.DataFrame, formula: str) -> pd.DataFrame | None:
    """Rows with a known race, when race is in the model and has an Unknown level."""
    if "race" not in formula_columns(formula, ev.columns):
        return None
    known = ev["race"].astype(str) != UNKNOWN
    if known.all():
        return None
    return ev[known]


MSG_LEVELS = ("{file}: {key} lists {levels}, but the column "
              "also holds {extra}; list every level (reference first)")
MSG_LEVELS_COLUMN = ("{file}: {key} names a column the cases "
                     "table lacks; fix the name")


def _fit_kw(results) -> dict:
    """The fitting options every adjusted fit shares, from the plan (``group``: the outer
    column; the GLMM's own grouping is :func:`glmm_group`)."""
    det = results.plan.detection
    adj = det.adjusted
    return dict(group=adj.group_columns[0], population=adj.population,
                nagq=adj.nagq, model=adj.model,
                bias_reduced=adj.bias_reduced, conf_level=det.conf_level,
                scheduler=results.scheduler)


#: the rule behind the GLMM's random intercepts (decision ``adjusted.glmm_group``)
GLMM_GROUP_RULES = {
    "plan_nested": "the plan lists [outer, inner]: nested intercepts",
    "plan_one": "the plan lists [group]: one random intercept",
    "repeated_nested": "patients repeat among the modelled scans and each patient's scans "
                       "lie in one {group}: patients nested in {group}s, (1 | {group}/{cluster})",
    "repeated_crossed": "patients repeat, but some have scans in more than one {group}: one "
                        "random intercept per {group} (crossed patient effects are not fitted)",
    "no_repeats": "no patient repeats among the modelled scans: one random intercept per "
                  "{group}",
}


def glmm_group(results) -> str | tuple[str, str]:
    """The GLMM's grouping: ``(site, patient_id)`` (nested) or ``site``, and the decision
    ``adjusted.glmm_group`` recording it and its rule (:data:`GLMM_GROUP_RULES`). The
    default (the plan names one column): nested when the decided cluster's patients repeat
    among the modelled scans and nest in the groups (``repeated_scans``); a plan list is
    used as given."""
    adj = results.plan.detection.adjusted
    cols = adj.group_columns
    rep = repeated_scans(results)
    if not isinstance(adj.group, str):
        group = cols if len(cols) == 2 else cols[0]
        rule = "plan_nested" if len(cols) == 2 else "plan_one"
    elif rep and rep["nested"]:
        group, rule = (cols[0], rep["cluster"]), "repeated_nested"
    else:
        group, rule = cols[0], "repeated_crossed" if rep else "no_repeats"
    text = GLMM_GROUP_RULES[rule].format(group=cols[0], cluster=(rep or {}).get("cluster", ""))
    results.decide("adjusted.glmm_group", {
        "group": list(group) if isinstance(group, tuple) else [group], "rule": rule,
        "why": text})
    return tuple(group) if isinstance(group, tuple) else group


@analysis("adjusted_rows", wanted=_wants, lane="models")
def adjusted_rows(results) -> pd.DataFrame:
    """The evaluation rows with the plan's factor levels applied (reference level first:
    ``detection.adjusted.levels``); every other factor keeps its own order."""
    from stats.schema import ContractError

    ev = results["evaluation"]
    levels = results.plan.detection.adjusted.levels or {}
    if not levels:
        return ev
    ev = ev.copy()
    plan = results.plan
    for col, lv in levels.items():
        where = plan.key(f"detection.adjusted.levels.{col}")
        if col not in ev.columns:
            raise ContractError(MSG_LEVELS_COLUMN.format(file=plan.where, key=where))
        extra = sorted(set(ev[col].dropna().astype(str)) - set(lv))
        if extra:
            raise ContractError(MSG_LEVELS.format(file=plan.where, key=where, levels=list(lv),
                                                  extra=extra[:5]))
        ev[col] = pd.Categorical(ev[col].astype(str), categories=lv)
    results.decide("adjusted.levels", {c: list(v) for c, v in levels.items()})
    return ev


@analysis("adjusted_fits", wanted=_wants, lane="models")
def adjusted_fits(results) -> dict:
    """``{method: Fit}`` for every planned method that converged to a fit (plus
    ``glmm_cc``, the complete-case GLMM, when it applies); failures are recorded."""
    from stats.models import fit_adjusted, fit_complete_case

    det = results.plan.detection
    adj = det.adjusted
    ev = results["adjusted_rows"]
    formula = adj.formula
    kw = _fit_kw(results)
    ggroup = glmm_group(results) if "glmm" in adj.methods else kw["group"]
    fits, failed = {}, {}
    for m in adj.methods:
        try:
            fits[m] = fit_adjusted(ev, formula, method=m,
                                   **{**kw, "group": ggroup if m == "glmm" else kw["group"]})
        except ValueError as exc:
            from stats.schema import ContractError

            if isinstance(exc, ContractError):
                raise
            failed[m] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # reported; the other methods are still shown
            failed[m] = f"{type(exc).__name__}: {exc}"
    cc = complete_case_rows(ev, formula)
    results.decide("adjusted.complete_case", cc is not None and "glmm" in fits)
    if cc is not None and "glmm" in fits:
        try:
            # each model's fit starts from its primary fit's group SD (a warm start; a
            # nested fit's two SDs: the default start)
            fits["glmm_cc"] = fit_complete_case(
                ev, formula, column="race", drop=(UNKNOWN,), method="glmm",
                _sd_start={m: f.theta for m, f in fits["glmm"].fits.items()},
                **{**kw, "group": ggroup})
        except Exception as exc:
            failed["glmm_cc"] = f"{type(exc).__name__}: {exc}"
    results.decide("adjusted.fitted", list(fits))
    results.decide("adjusted.failed", dict(failed))
    if not fits:
        raise RuntimeError("every adjusted fit failed: " + "; ".join(
            f"{m}: {e}" for m, e in failed.items()))
    return fits


@analysis("adjusted_terms", wanted=_wants, lane="models")
def adjusted_terms(results) -> pd.DataFrame:
    """Tidy terms of every fit, ``fit_method`` naming the fit."""
    fits = results["adjusted_fits"]
    return pd.concat([f.tidy().assign(fit_method=m) for m, f in fits.items()],
                     ignore_index=True)


@analysis("adjusted_missing", wanted=_wants, lane="models")
def adjusted_missing(results) -> pd.DataFrame:
    """Per model: the scans of the modelled population, how many each fit used, how many it
    left out and why (a missing value in a formula variable, per variable; R's na.omit).
    The complete-case refit's exclusions (race Unknown) are its own row."""
    adj = results.plan.detection.adjusted
    rows = results["adjusted_rows"]
    positives = adj.population == "positives"
    pop = rows[rows["label"] == (1 if positives else 0)]
    cols = formula_columns(adj.formula, rows.columns)
    glance = results["adjusted_glance"]
    out = []
    for model, g in pop.groupby("model", sort=False):
        na = g[cols].isna()
        reason = "; ".join(f"{c}: {int(n)} missing" for c, n in na.sum().items() if n) or ""
        for fit in glance.loc[glance["model"] == model, "fit_method"]:
            used = int(glance.loc[(glance["model"] == model) & (glance["fit_method"] == fit),
                                  "nobs"].iloc[0])
            why = reason
            if fit == "glmm_cc":
                why = "; ".join(x for x in (reason, f"race {UNKNOWN} (complete case)") if x)
            out.append({"model": model, "fit_method": fit, "n_population": len(g),
                        "n_used": used, "n_excluded": len(g) - used, "reason": why})
    return pd.DataFrame(out)


@analysis("adjusted_glance", wanted=_wants, lane="models")
def adjusted_glance(results) -> pd.DataFrame:
    """Fit statistics per model and fit (n, groups, group SD, R2, convergence, warnings)."""
    fits = results["adjusted_fits"]
    return pd.concat([f.glance().assign(fit_method=m) for m, f in fits.items()],
                     ignore_index=True)


@analysis("adjusted_blocks", wanted=lambda p, t: _wants(p, t) and block_method(p) is not None,
          lane="models")
def adjusted_blocks(results) -> pd.DataFrame:
    """Likelihood-ratio tests of covariate blocks and of the group (``stats.block_tests``)."""
    from stats.models import block_tests

    adj = results.plan.detection.adjusted
    ml = block_method(results.plan)
    results.decide("adjusted.block_method", ml)
    kw = _fit_kw(results)
    kw.pop("conf_level")
    full = (results.get("adjusted_fits") or {}).get(ml)
    if ml == "glmm":    # the GLMM's own grouping (nested when patients repeat)
        kw["group"] = full.group if full is not None else glmm_group(results)
    # the full model is the primary fit of that method (same rows, formula and options)
    out = block_tests(results["adjusted_rows"], adj.formula, adj.blocks or None,
                      method=ml, full=full, **kw)
    # prespecified: Holm over each model's block tests (the group's test included), as the
    # multiplicity statement says for every prespecified family
    from stats.subgroups import adjust_p

    lr = out["estimand"] == "likelihood_ratio"
    if not block_family(results):   # exploratory: unadjusted, labelled
        results.decide("adjusted.block_multiplicity", "none (exploratory: plan roles.adjusted)")
        return out
    if lr.any():
        adjusted = adjust_p(out[lr].copy(), ["model"])
        out.loc[lr, "p_adjusted"] = adjusted["p_adjusted"]
    results.decide("adjusted.block_multiplicity", "Holm over each model's block tests")
    return out


def repeated_scans(results) -> dict | None:
    """Whether the decided cluster (patients) repeats among the models' rows while the
    models' group is another column (e.g. site): ``{cluster, group, patients,
    with_repeats, scans, nested}`` (``nested``: every patient's rows lie in one group, so
    a sandwich clustered on the group allows the within-patient correlation), else None.
    Counted on the scans the fits use (the first model's rows of the modelled population
    with every formula variable present; every model scores the same scans)."""
    cluster = results["cluster"]
    adj = results.plan.detection.adjusted
    group = adj.group_columns[0]
    if not cluster or cluster == group:
        return None
    ev = results["adjusted_rows"]
    if cluster not in ev.columns or "label" not in ev.columns:
        return None
    if "model" in ev.columns and len(ev):
        ev = ev[ev["model"] == ev["model"].iloc[0]]
    positives = adj.population == "positives"
    rows = ev[ev["label"].to_numpy() == (1 if positives else 0)]
    rows = rows[rows[formula_columns(adj.formula, rows.columns)].notna().all(axis=1)]
    per = rows.groupby(cluster, observed=True).size()
    if not (per > 1).any():
        return None
    nested = (group is not None and group in rows.columns
              and bool((rows.groupby(cluster, observed=True)[group].nunique() <= 1).all()))
    return {"cluster": cluster, "group": group, "patients": int(len(per)),
            "with_repeats": int((per > 1).sum()), "scans": int(len(rows)), "nested": nested}


def nested_glmm(fit) -> bool:
    """Whether ``fit`` (a ``stats.models.Fit``) is a GLMM with nested intercepts (its
    group is an (outer, inner) pair); False for anything else (tests pass placeholders)."""
    return isinstance(getattr(fit, "group", None), tuple)


#: fewer groups (sites) than this: a group-clustered sandwich (the GEE's, even with the
#: Mancl-DeRouen correction and a t reference on G - 1 df) and a random-intercept variance
#: rest on too few clusters to be the primary inference (stats.models.gee's threshold)
FEW_GROUPS = 20


def primary_fit(fits: dict, *, n_groups: int, repeated: dict | None, group: str,
                cluster: str | None = None) -> dict:
    """The fit read for inference, decided from the design (the number of groups and
    whether a patient's scans repeat), never from the estimates: ``{"fit", "reason",
    "n_groups", "repeated", "better"}`` (``better``: a method the plan did not fit that
    this design calls for, or None).

    - Fewer than ``FEW_GROUPS`` groups: the group as fixed effects with standard errors
      clustered on the patients (``fixed``: many clusters, so its sandwich holds, and the
      repeated scans are allowed for); without it, the GLMM (its intervals treat a
      patient's scans as independent given the group, said so), else the first fit.
    - ``FEW_GROUPS`` groups or more: the GEE when a patient's scans repeat within groups
      that nest the patients (its sandwich over the groups allows that correlation), else
      the GLMM, else the first fit.

    A fit that did not converge is passed over while another did."""
    ok = {m: f for m, f in fits.items() if m != "glmm_cc" and _converged(f)
          and not _extreme(f)} or \
        {m: f for m, f in fits.items() if m != "glmm_cc"} or fits
    nested = nested_glmm(ok.get("glmm"))
    # a GLMM passed over for an extreme random-effect SD (a degenerate Laplace optimum)
    extreme = ("; the GLMM is passed over: a model's fit has an extreme random-effect SD "
               "(flagged extreme_sd, a degenerate Laplace optimum)"
               if "glmm" in fits and "glmm" not in ok else "")
    rep = bool(repeated)
    c = "patient" if cluster in (None, "patient_id") else cluster
    few = n_groups < FEW_GROUPS
    better = None
    if few:
        if "fixed" in ok:
            fit = "fixed"
            reason = (f"with {n_groups} {group}s (fewer than {FEW_GROUPS}), a random "
                      f"intercept's variance and any {group}-clustered sandwich (the GEE's, "
                      f"even Mancl-DeRouen-corrected with a t reference on {n_groups - 1} "
                      f"df) rest on {n_groups} clusters, so the {group}s are fixed effects "
                      f"and the standard errors are clustered on the {c}s"
                      + (", which also allows for a patient's repeated scans" if rep else ""))
        else:
            fit = "glmm" if "glmm" in ok else next(iter(ok))
            better = "fixed"
            reason = (f"with {n_groups} {group}s (fewer than {FEW_GROUPS}) the GEE's "
                      f"{group}-clustered sandwich rests on {n_groups} clusters (its "
                      f"intervals are too wide to read), so the "
                      + {"glmm": "GLMM", "gee": "GEE"}.get(fit, fit)
                      + " is read" + (f"; its standard errors treat a patient's scans as "
                                       f"independent given the {group} (too narrow when "
                                       f"they are correlated)"
                                       if rep and fit == "glmm" and not nested else "")
                      + f"; the design calls for the {group}-fixed model with "
                      f"{c}-clustered standard errors (add fixed to "
                      f"detection.adjusted.methods)" + extreme)
    elif rep and repeated.get("nested") and "gee" in ok and not nested:
        fit = "gee"
        reason = (f"with {n_groups} {group}s the GEE's sandwich, clustered on the {group}s "
                  f"that nest every patient, allows any correlation of a patient's scans, "
                  f"which the GLMM's random intercept per {group} does not")
    else:
        fit = "glmm" if "glmm" in ok else next(iter(ok))
        reason = (f"with {n_groups} {group}s the random intercept per {group} is estimable"
                  + (f"; its random intercepts per patient within {group} allow for a "
                     f"patient's repeated scans" if rep and nested and fit == "glmm" else
                     f"; some patients have scans in several {group}s, so no fitted model "
                     f"allows for their repeated scans" if rep else "") + extreme)
    return {"fit": fit, "reason": reason, "n_groups": int(n_groups), "repeated": rep,
            "better": better}


def means_fit_method(fits: dict, repeated: dict | None = None, n_groups: int | None = None,
                     group: str = "site") -> str:
    """The fit behind the adjusted means and the contrasts: the primary fit
    (:func:`primary_fit`), read for inference; with ``n_groups`` unknown, as if there were
    many groups. A GLMM with patients nested in its groups (the default when patients
    repeat, :func:`glmm_group`) carries the repeats itself; a fit that did not converge,
    or whose random-effect SD is extreme (flag ``extreme_sd``), is passed over while
    another is neither."""
    return primary_fit(fits, n_groups=FEW_GROUPS if n_groups is None else n_groups,
                       repeated=repeated, group=group)["fit"]


def n_groups(results) -> int:
    """Groups (sites) among the modelled rows of the first model (every model scores the
    same scans)."""
    adj = results.plan.detection.adjusted
    rows = results["adjusted_rows"]
    if adj.group is None or adj.group not in rows.columns:
        return 1
    if "model" in rows.columns and len(rows):
        rows = rows[rows["model"] == rows["model"].iloc[0]]
    pop = rows[rows["label"] == (1 if adj.population == "positives" else 0)]
    return int(pop[adj.group].nunique())


def _extreme(fit) -> bool:
    """Whether a per-model fit of ``fit`` has a random-effect SD flagged ``extreme_sd``
    (``stats.models.nested.EXTREME_SD``: a degenerate Laplace optimum); False for objects
    without that record."""
    per = getattr(fit, "fits", None)
    if not isinstance(per, dict):
        return False
    return any(w.startswith("extreme_sd") for f in per.values()
               for w in getattr(f, "warnings", []))


def _converged(fit) -> bool:
    """Whether every per-model fit of ``fit`` (a ``stats.models.Fit``) converged; True for
    objects without that record (tests pass placeholders)."""
    per = getattr(fit, "fits", None)
    if not isinstance(per, dict):
        return True
    return all(bool(getattr(f, "converged", True)) for f in per.values())


@analysis("adjusted_marginal", wanted=_wants, lane="models")
def adjusted_marginal(results) -> list:
    """The adjusted sensitivity (or specificity) per level of every factor of the model:
    ``[(variable, marginal means), ...]``, standardized (g-computation over the observed
    covariate mix) unless the plan asks for ``means_kind: emmeans``. A list, not a table:
    ``adjusted_vs_crude`` joins it to the crude values."""
    fits = results["adjusted_fits"]
    rep = repeated_scans(results)
    results.decide("adjusted.repeated_scans", rep)
    adj = results.plan.detection.adjusted
    primary = primary_fit(fits, n_groups=n_groups(results), repeated=rep, group=adj.group,
                          cluster=results["cluster"])
    results.decide("adjusted.primary", primary)
    m = primary["fit"]
    results.decide("adjusted.means_fit", m)
    results.decide("adjusted.means_fit_converged", _converged(fits[m]))
    kind = results.plan.detection.adjusted.means_kind
    results.decide("adjusted.vs_crude_kind", kind)
    ev = results["evaluation"]
    out = []
    for var in formula_columns(results.plan.detection.adjusted.formula, ev.columns):
        if pd.api.types.is_numeric_dtype(ev[var]) and not isinstance(ev[var].dtype,
                                                                     pd.CategoricalDtype):
            continue
        out.append((var, fits[m].marginal_means(var, kind=kind)))
    return out


@analysis("adjusted_vs_crude", wanted=_wants, lane=AFTER)
def adjusted_vs_crude(results) -> pd.DataFrame:
    """Adjusted and crude sensitivity per level of every factor in the model. Like with like:
    the adjusted value is standardized (g-computation over the observed covariate mix, the
    crude value's own population) unless the plan asks for ``means_kind: emmeans`` (the
    equal-weight reference grid), which is then labelled so. Computed after the merge of
    the lanes: the adjusted means come from the models lane, the crude values from the
    main lane's subgroup table (not computed twice)."""
    marginal = results["adjusted_marginal"]
    kind = results.decisions.adjusted.vs_crude_kind
    det = results.plan.detection
    positives = det.adjusted.population == "positives"
    estimand = "sensitivity" if positives else "specificity"
    # like with like: where the fits left scans out (a missing formula variable), the crude
    # values are computed on the scans the fits used, not read from the subgroup table
    rows = results["adjusted_rows"]
    cols = formula_columns(det.adjusted.formula, rows.columns)
    left_out = (rows["label"] == (1 if positives else 0)) & rows[cols].isna().any(axis=1)
    if left_out.any():
        from stats.subgroups import subgroup_metrics
        from .detection import subgroup_options

        crude_all = subgroup_metrics(rows[~left_out], by=[v for v, _ in marginal],
                                     metrics=[estimand], **subgroup_options(results))
        one = rows["model"] == rows["model"].iloc[0]      # every model scores the same scans
        pop = one & (rows["label"] == (1 if positives else 0))
        results.decide("adjusted.crude_rows", {
            "rows": "the scans the fits used (complete formula variables)",
            "used": int((pop & ~left_out).sum()), "population": int(pop.sum())})
    else:
        crude_all = results["subgroup_metrics"]
        results.decide("adjusted.crude_rows", {"rows": "every scan of the population"})
    crude_all = crude_all[crude_all["estimand"] == estimand]
    parts = []
    for var, mm in marginal:
        parts.append(mm.assign(kind=f"adjusted ({kind})", variable=var))
        cr = crude_all[crude_all["group_var"] == var]
        if len(cr):   # n: the estimand's denominator, as the adjusted rows count it
            parts.append(cr.assign(kind="crude", variable=var, n=cr["denominator"]))
    if not parts:
        return pd.DataFrame(columns=["model", "variable", "group_level", "kind", "estimate",
                                     "conf_low", "conf_high", "n", "method", "flag"])
    cmp = pd.concat(parts, ignore_index=True)
    cmp = cmp[cmp["estimate"].notna()].reset_index(drop=True)
    return cmp[["model", "variable", "group_level", "kind", "estimate", "conf_low",
                "conf_high", "n", "method", "flag"]]


def _wants_means(plan, tables) -> bool:
    return _wants(plan, tables) and bool(plan.detection.adjusted.means)


@analysis("adjusted_means", wanted=_wants_means, lane="models")
def adjusted_means(results) -> pd.DataFrame:
    """Adjusted means (``Fit.marginal_means``, kind ``detection.adjusted.means_kind``) by each
    factor in ``detection.adjusted.means``, from every fit; ``fit_method`` names the fit."""
    adj = results.plan.detection.adjusted
    fits = results["adjusted_fits"]
    parts = [fit.marginal_means(var, kind=adj.means_kind).assign(fit_method=m)
             for m, fit in fits.items() for var in adj.means]
    return pd.concat(parts, ignore_index=True)


@analysis("adjusted_random_effects", wanted=_wants, lane="models")
def adjusted_random_effects(results) -> pd.DataFrame:
    """GLMM conditional modes per group, empty when there is no GLMM or the fit is singular
    (``decisions['adjusted.singular']``)."""
    fits = results["adjusted_fits"]
    cols = ["model", "group_var", "group_level", "estimate", "std_error", "conf_low",
            "conf_high", "n", "flag"]
    if "glmm" not in fits:
        return pd.DataFrame(columns=cols)
    re = fits["glmm"].random_effects()
    # the outer group's effects (site); a nested fit's patient effects stay in the CSV of
    # the fit, not in the figure (hundreds of patients)
    outer = results.plan.detection.adjusted.group_columns[0]
    re = re[re["group_var"] == outer]
    sd = re.loc[re["estimand"] == "group_sd", "estimate"]
    singular = not bool((sd > SINGULAR_SD).any())
    results.decide("adjusted.singular", singular)
    re = re[re["estimand"] == "group_effect"].reset_index(drop=True)
    if singular:
        return re.iloc[0:0][cols]
    return re[cols]


TERM_FLAGS = ("separation", "empty_level", "aliased", "not_estimable")
_FACTOR_TERM = re.compile(r"^(?:C\((?P<c>[A-Za-z_][A-Za-z0-9_]*)[^\[]*\)|Q\(\"(?P<q>[^\"]+)\"\)|"
                          r"(?P<v>[A-Za-z_][A-Za-z0-9_.]*))\[T\.(?P<level>.+)\]$")
MSG_UNITS_FACTOR = ("{file}: {key} asks for odds ratios of "
                    "{variable} per {value}, but {variable} enters the fitted model as a factor "
                    "(a text column), not as a continuous term; remove it from units, or make "
                    "the column numeric")


def _levels(rows: pd.DataFrame, var: str) -> list[str]:
    col = rows[var]
    if isinstance(col.dtype, pd.CategoricalDtype):
        return [str(v) for v in col.cat.categories]
    return sorted(str(v) for v in col.dropna().unique())


def _on_term_scale(values: pd.Series, base: float | None) -> pd.Series:
    """The variable as the term uses it (the log of its base for a log term); values the
    term cannot use (a log of a value <= 0) are left out."""
    import numpy as np

    x = pd.to_numeric(values, errors="coerce").astype(float)
    if base is not None:
        x = np.log(x.where(x > 0)) / math.log(base)
    return x.dropna()


def unit_step(value, base: float | None, values: pd.Series | None = None) -> tuple[float, str]:
    """(step on the term's scale, unit text) of a continuous term: the odds ratio is
    reported as OR^step. ``value``: the plan's ``units`` entry (None: the default, per one
    unit, or per doubling for a log term), a positive number (per that many units; for a
    log term, per that-fold change) or ``"sd"`` (per one SD, ``values.std()``: pandas,
    ddof 1, of the variable on the term's scale over the model's rows)."""
    if value == SD:
        return float(_on_term_scale(values, base).std()), ("per SD" if base is None
                                                             else "per SD of log")
    if base is None:
        k = 1.0 if value is None else float(value)
        return k, f"per {k:g} unit" + ("" if k == 1 else "s")
    k = 2.0 if value is None else float(value)
    return math.log(k) / math.log(base), ("per doubling" if k == 2 else f"per {k:g}-fold change")


@analysis("adjusted_table", wanted=_wants, lane="models")
def adjusted_table(results) -> pd.DataFrame:
    """The odds ratios as a reader uses them: one row per model x fit x variable level,
    the reference level of every factor as its own row (OR 1), a human label
    ("phase: delayed vs arterial"), continuous terms per a stated unit (``unit``; OR^step,
    ``unit_step`` the step on the term's scale): per the plan's ``detection.adjusted.units``
    (per k units, per k-fold change of a log term, or per one SD of the variable among the
    model's rows in the modelled population, the same for every fit of the model), by
    default per 1 unit and per doubling for log terms; only term-specific flags on a term
    (``term_flag``; the fit's flags are in ``fit_flag``).

    The reference of a factor is its first level (the plan's ``detection.adjusted.levels``
    sets it; otherwise the sorted first level, as R and patsy do)."""
    import numpy as np

    from stats.schema import ContractError

    terms = results["adjusted_terms"]
    rows = results["adjusted_rows"]
    adj = results.plan.detection.adjusted
    units = adj.units or {}
    continuous = continuous_terms(adj.formula)
    positives = adj.population == "positives"
    population = rows[rows["label"] == (1 if positives else 0)]
    fixed = terms[(terms["effect"] == "fixed") & (terms["estimand"] != "Intercept")]
    out, steps = [], {}
    seen_ref: set = set()
    for r in fixed.itertuples(index=False):  # display rows: one per term (few), not per case
        flags = [f for f in str(r.flag or "").split(";") if f and f != "nan"]
        term_flag = ";".join(f for f in flags if f.startswith(TERM_FLAGS))
        fit_flag = ";".join(f for f in flags if not f.startswith(TERM_FLAGS))
        base = dict(model=r.model, fit_method=r.fit_method, term=r.estimand,
                    p_value=r.p_value, n=r.n, method=r.method, term_flag=term_flag,
                    fit_flag=fit_flag, is_reference=False,
                    n_clusters=getattr(r, "n_clusters", float("nan")))
        m = _FACTOR_TERM.match(r.estimand)
        if m and (m.group("c") or m.group("q") or m.group("v")) in rows.columns:
            var = m.group("c") or m.group("q") or m.group("v")
            levels = _levels(rows, var)
            ref = levels[0] if levels else ""
            key = (r.model, r.fit_method, var)
            if key not in seen_ref:
                seen_ref.add(key)
                out.append(dict(base, term=f"{var}[reference]", variable=var, level=ref,
                                reference=ref, label=f"{var.replace('_', ' ')}: {ref}",
                                unit="reference", unit_step=np.nan, odds_ratio=1.0,
                                or_conf_low=np.nan, or_conf_high=np.nan, p_value=np.nan,
                                term_flag="", is_reference=True))
            level = m.group("level")
            out.append(dict(base, variable=var, level=level, reference=ref,
                            label=f"{var.replace('_', ' ')}: {level} vs {ref}", unit="vs reference",
                            unit_step=np.nan, odds_ratio=r.odds_ratio,
                            or_conf_low=r.or_conf_low, or_conf_high=r.or_conf_high))
            continue
        var, log_base = continuous.get(r.estimand, (r.estimand, None))
        if r.estimand in continuous:
            mine = population[population["model"] == r.model]
            step, unit = unit_step(units.get(var), log_base,
                                   (mine if len(mine) else population)[var])
        else:  # I(), sqrt(), interactions: per one unit of the term as fitted
            step, unit = unit_step(None, None)
        steps[r.estimand] = unit
        out.append(dict(base, variable=var, level="", reference="",
                        label=f"{var.replace('_', ' ')} ({unit})", unit=unit, unit_step=step,
                        odds_ratio=float(np.exp(step * np.log(r.odds_ratio))),
                        or_conf_low=float(np.exp(step * np.log(r.or_conf_low))),
                        or_conf_high=float(np.exp(step * np.log(r.or_conf_high)))))
    used = {v for t, (v, _) in continuous.items() if t in steps}
    for var in units:
        if var not in used:
            raise ContractError(MSG_UNITS_FACTOR.format(
                file=results.plan.where, key=results.plan.key(f"detection.adjusted.units.{var}"),
                variable=var, value=units[var]))
    results.decide("adjusted.units", {t: u for t, u in steps.items()})
    return pd.DataFrame(out)


# ------------------------------------------------- contrasts, variance partition, interactions

MSG_CONTRAST_FACTOR = ("{file}: {key} lists {factor!r}, which is not a factor of the adjusted "
                       "formula {formula!r} (factors: {factors}); list factors of the formula")


def _wants_contrasts(plan, tables) -> bool:
    return _wants(plan, tables) and bool(plan.detection.adjusted.contrasts)


@analysis("adjusted_contrasts", wanted=_wants_contrasts, lane="models")
def adjusted_contrasts(results) -> pd.DataFrame:
    """Pairwise odds ratios of the adjusted levels of each factor in
    ``detection.adjusted.contrasts`` (``Fit.contrasts``: emmeans' ``pairs``, Holm within
    each model and factor), from the fit of the adjusted means (``means_fit_method``: the
    nested GLMM when patients repeat)."""
    from stats.schema import ContractError

    adj = results.plan.detection.adjusted
    fits = results["adjusted_fits"]
    m = means_fit_method(fits, repeated_scans(results), n_groups(results), adj.group)
    results.decide("adjusted.contrasts_fit", m)
    ev = results["adjusted_rows"]
    factors = [c for c in formula_columns(adj.formula, ev.columns)
               if not pd.api.types.is_numeric_dtype(ev[c])
               or isinstance(ev[c].dtype, pd.CategoricalDtype)]
    parts = []
    for i, var in enumerate(adj.contrasts):
        if var not in factors:
            raise ContractError(MSG_CONTRAST_FACTOR.format(
                file=results.plan.where, key=results.plan.key(f"detection.adjusted.contrasts[{i}]"),
                factor=var, formula=adj.formula, factors=", ".join(factors) or "none"))
        parts.append(fits[m].contrasts(var, adjust="holm").assign(fit_method=m))
    return pd.concat(parts, ignore_index=True)


def _partition_method(plan) -> str | None:
    """The fit the variance partition uses: the GLMM, else the site-fixed model (GEE has
    no latent-scale decomposition)."""
    return next((m for m in ("glmm", "fixed") if m in plan.detection.adjusted.methods), None)


@analysis("adjusted_variance_partition",
          wanted=lambda p, t: _wants(p, t) and _partition_method(p) is not None, lane="models")
def adjusted_variance_partition(results) -> pd.DataFrame:
    """Latent-scale shares of the variation in detection (``stats.variance_partition``):
    each random intercept (site; patients within sites), each covariate block of the plan
    (``detection.adjusted.blocks``, else protocol, demographics, tumour), their covariance
    and the logistic residual; from the GLMM (else the site-fixed model)."""
    from stats.models import DEFAULT_BLOCKS, variance_partition

    adj = results.plan.detection.adjusted
    fits = results["adjusted_fits"]
    m = _partition_method(results.plan)
    if m not in fits:
        m = next((k for k in ("glmm", "fixed") if k in fits), None)
    if m is None:
        return pd.DataFrame(columns=["estimand", "model", "component", "estimate"])
    blocks = {k: list(v) for k, v in (adj.blocks or DEFAULT_BLOCKS).items()}
    results.decide("adjusted.partition_fit", m)
    results.decide("adjusted.partition_blocks", blocks)
    return variance_partition(fits[m], blocks).assign(fit_method=m)


def _wants_interactions(plan, tables) -> bool:
    return _wants(plan, tables) and bool(plan.detection.adjusted.interactions)


def _pooled_group(rows: pd.DataFrame, outer: str, cluster: str | None):
    """The grouping of a fit of every model's scans together: patients nested in sites
    when every patient's scans lie in one site (each scan repeats once per model, so the
    patients always repeat), else the site."""
    if cluster and cluster in rows.columns and cluster != outer and outer in rows.columns:
        if bool((rows.groupby(cluster, observed=True)[outer].nunique() <= 1).all()):
            return (outer, cluster)
    return outer


@analysis("adjusted_interactions", wanted=_wants_interactions, lane="models")
def adjusted_interactions(results) -> dict:
    """The plan's interaction terms (``detection.adjusted.interactions``), each tested by a
    likelihood-ratio test of the GLMM with the term against the GLMM without it on the same
    rows: a term with ``model`` fits every model's scans together (``model`` and the term
    added; patients nested in sites as a random effect, :func:`_pooled_group`), another
    term is added to each model's GLMM (grouped as :func:`glmm_group`). Prespecified
    (``roles.interactions``): Holm over the plan's interaction tests, and the adjusted
    sensitivities per cell (kind ``detection.adjusted.means_kind``) and, for a model term,
    the models' odds ratios within each level of the other factor (``Fit.contrasts``).

    Returns ``{"tests": ..., "means": ..., "contrasts": ...}`` (tidy; ``term`` names the
    interaction; ``means``/``contrasts`` empty when exploratory)."""
    from stats.models import fit_adjusted, likelihood_ratio_test
    from stats.subgroups import adjust_p

    adj = results.plan.detection.adjusted
    ev = results["adjusted_rows"]
    kw = _fit_kw(results)
    kw.pop("model")
    prespecified = results["roles"]["interactions"] == "prespecified"
    base = adj.formula
    tests, means, cons, record = [], [], [], {}
    for term in adj.interactions:
        a, b = (x.strip() for x in term.split(":"))
        if "model" in (a, b):
            other = b if a == "model" else a
            group = _pooled_group(ev[ev["label"] == (1 if adj.population == "positives" else 0)],
                                  kw["group"], results["cluster"])
            fkw = {**kw, "group": group, "model": "pooled"}
            full = fit_adjusted(ev, f"{base} + {other}:model", method="glmm", **fkw)
            red = fit_adjusted(ev, base, method="glmm", **fkw)
            record[term] = {"fit": "every model's scans together, model as a term",
                            "group": list(group) if isinstance(group, tuple) else [group]}
        else:
            group = glmm_group(results)
            fkw = {**kw, "group": group}
            full = fit_adjusted(ev, f"{base} + {a}:{b}", method="glmm", **fkw)
            red = fit_adjusted(ev, base, method="glmm", **fkw)
            record[term] = {"fit": "each model's GLMM with the term added",
                            "group": list(group) if isinstance(group, tuple) else [group]}
        t = likelihood_ratio_test(full, red)
        t["term"] = term
        tests.append(t)
        if prespecified:
            cells = [other, "model"] if "model" in (a, b) else [a, b]
            means.append(full.marginal_means(cells, kind=adj.means_kind).assign(term=term))
            if "model" in (a, b):
                cons.append(full.contrasts("model", strata=other).assign(term=term))
    results.decide("adjusted.interactions", record)
    out = (pd.concat(tests, ignore_index=True) if tests
           else pd.DataFrame(columns=["term", "model", "statistic", "df", "p_value"]))
    if prespecified:
        out["family"] = "interactions"
        out = adjust_p(out, ["family"]).drop(columns=["family", "p_adjusted_bh"])
        results.decide("adjusted.interaction_multiplicity",
                       "Holm over the plan's interaction tests")
    else:
        results.decide("adjusted.interaction_multiplicity",
                       "none (exploratory: plan roles.interactions)")
    empty = pd.DataFrame(columns=["estimand", "model", "group_var", "group_level", "term"])
    return {"tests": out, "means": pd.concat(means, ignore_index=True) if means else empty,
            "contrasts": pd.concat(cons, ignore_index=True) if cons else empty}
