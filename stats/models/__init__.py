"""Confounding-adjusted models of detection: GLMM (Laplace / adaptive Gauss-Hermite),
GEE (exchangeable, robust SE) and site-fixed-effect logistic regression.

Public: :func:`fit_adjusted`, :func:`likelihood_ratio_test`, :func:`block_tests`,
:func:`fit_complete_case`, :func:`compare_complete_case`, :class:`Fit`.

Modules: ``design`` (cases + formula -> arrays, R's factor coding), ``glmm`` (Laplace /
adaptive Gauss-Hermite ML), ``gee`` (geepack's exchangeable GEE, sandwich and
Mancl-DeRouen SEs), ``fixed`` (IRLS logistic, cluster-robust SEs), ``fit`` (the Fit
object and its tidy tables); adjusted means live in ``stats.adjust``.

Validated against R (tests/r/models_glmer.R -> tests/r/models_glmer.csv; tests in
tests/stats/test_models_glmm.py and r_models.py), on simulator data (positives and negatives), lme4::cbpp,
geepack::ohio and lme4::VerbAgg. Each R fit is run twice: at R's default controls and
converged (glmer ``glmerControl(tolPwrss = 1e-12, optimizer = "bobyqa", optCtrl =
list(rhoend = 1e-10))``, glm ``epsilon = 1e-14``, geeglm ``epsilon = 1e-12``). Largest
gaps measured, vs converged R | vs default R:

* lme4 1.1-31 ``glmer``, Laplace and nAGQ = 10: fixed effects 3.1e-5 relative and
  7.6e-5 SE | 1.3e-3 relative (a term of -0.15) and 1.0e-2 SE; SEs 2.2e-4 | 1.3e-2
  (cbpp Laplace: default lme4's PIRLS tolerance 1e-7 makes the deviance it
  differentiates noisy); group SD 8.6e-6 | 4.4e-4, its SE 1.7e-4 | 1.04e-2 (VerbAgg);
  log-likelihood: ours minus R's in [-8e-9, 3.4e-5] | [-1.3e-4, 5.8e-3] (default lme4
  is above ours by 1.3e-4 on ohio nAGQ = 10, below ours by up to 5.8e-3 elsewhere). The
  one converged gap is ohio Laplace, where lme4's Laplace deviance itself is 6.7e-5 above
  the exact one (ours; checked by an independent computation in test_ohio).
* geepack 1.3.9 ``geeglm`` (exchangeable): estimates, SEs, alpha and scale 1.1e-10 |
  4.2e-5 (geepack's default epsilon = 1e-4 stops early).
* ``glm`` + ``sandwich::vcovCL(type = "HC1")``: estimates 4e-14, SEs 7e-9 | 4.5e-8 (the
  default glm epsilon = 1e-8 can leave SEs ~3e-5 off on other data).
* ``anova`` LRT statistics: 5e-7 | 1.2e-2 absolute; latent R2 1.3e-7 relative.
* emmeans 1.8.4: 1e-8 on the same coefficients and covariance; from our fits 2.9e-6 |
  4.1e-4 (glmer) and 6e-15 | 3e-9 (site-fixed glm, cluster-robust covariance).
At 85,034 positives (bench/bench_glmm.py --with-r, default lme4) estimates agree to 3e-6,
SEs to 3e-3.
"""
from __future__ import annotations

import functools
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats as sps

from stats import _validate as _v
from stats._linalg import matvec
from stats._parallel import map_blocks
from stats._threads import one_blas_thread
from stats.formula import ParsedFormula, parse_formula
from stats.schema import ContractError, tidy

from . import design as _design
from .fit import Fit, ModelFit
from .fixed import FITTED_0_1, fit_glm
from .gee import fit_gee
from .glmm import fit_glmm
from .nested import fit_nested_glmm
from .partition import variance_partition

__all__ = ["fit_adjusted", "likelihood_ratio_test", "block_tests", "fit_complete_case",
           "compare_complete_case", "Fit", "DEFAULT_BLOCKS", "variance_partition"]

Method = Literal["glmm", "gee", "fixed"]
Population = Literal["positives", "negatives"]

#: Covariate blocks of the analysis plan (variables; a term is in a block when one of
#: its factors uses one of them).
DEFAULT_BLOCKS: dict[str, list[str]] = {
    "protocol": ["phase", "scanner"],
    "demographics": ["age_group", "age", "sex", "race"],
    "tumour": ["tumor_size_mm", "tumor_location"],
}

MIN_GROUPS = 5
#: a likelihood-ratio statistic below this (deviance units) is reported as exactly 0
LRT_ZERO = 1e-8
#: a statistic below ``-LRT_WORSE`` (deviance units) means the full fit's log-likelihood is
#: below the reduced fit's, which nested ML fits cannot be at their optima: the full fit
#: missed its optimum (a degenerate Laplace fit, flag extreme_sd) and the test is NaN,
#: flag ``full_below_reduced``. 1e-4 is far above the fits' convergence (about 1e-10) and
#: far below any statistic that could matter.
LRT_WORSE = 1e-4


MSG_FORMULA = ("{func}: formula must be a formula text such as 'detected ~ phase + sex' (or "
               "a stats.parse_formula result); got {got}")
MSG_NO_POPULATION = ("{func}: cases holds no {population} (label == {label}), so there is "
                     "nothing to fit; pass cases with reference {population}, or "
                     "population=None for the table as given")
MSG_GROUP = ("fit_adjusted: group must be a column name, two column names (outer, inner) "
             "for nested random intercepts such as ('site', 'patient_id'), or None; got {got}")
MSG_NESTED_AGQ = ("fit_adjusted: nested random intercepts are fitted by Laplace only (as lme4, "
                  "which allows nAGQ > 1 for one scalar random effect); got nagq={nagq}; "
                  "use nagq=1")
MSG_NOT_FIT = ("likelihood_ratio_test: {arg} must be a Fit (the result of stats.fit_adjusted); "
               "got {got}")


def fit_adjusted(cases: pd.DataFrame, formula: str | ParsedFormula, *,
                 group: str | tuple[str, str] | None = "site",
                 method: Method = "glmm", population: Population | None = "positives",
                 nagq: int = 1, model: str | None = None, threshold: float | None = None,
                 bias_reduced: bool | None = None, cluster: str | None = "patient_id",
                 trials: str | None = None, conf_level: float = 0.95,
                 scheduler=None, _sd_start: dict | None = None) -> Fit:
    """Fit a confounding-adjusted logistic model of detection, once per evaluated model.

    Parameters
    ----------
    cases : DataFrame
        A cases table (stats.read_cases); with ``population=None`` any binomial data.
    formula : str or stats.formula.ParsedFormula
        R/patsy-style formula in clinrel's grammar (:mod:`stats.formula`; parsed, never
        evaluated), e.g. ``"detected ~ phase + age_group + sex + race +
        log(tumor_size_mm)"`` (``np.log`` works too); the left side may be omitted
        (``"~ phase"``); an lme4-style ``+ (1 | site)`` sets ``group``. Factor levels
        follow a categorical's order (first = reference; ``C(phase, Treatment('venous'))``
        sets it), else sorted, as R. Text outside the grammar raises
        :class:`stats.formula.FormulaError` before anything is evaluated; a numeric term
        that is not finite (``np.log`` of 0) raises ``ContractError`` naming its rows.
    group : str, (str, str) or None
        Random-intercept group (glmm), working-correlation cluster (gee) or fixed-effect
        factor (fixed). ``method="fixed", group=None`` is a plain logistic regression.
        Two columns, ``("site", "patient_id")``: nested random intercepts (glmm; lme4's
        ``(1 | site/patient_id)``, Laplace only: :mod:`stats.models.nested`); the inner
        level is the ``patient_id:site`` pairs, so a patient code reused in two sites is
        two patients. For gee and fixed the outer column is the group (patients nest in
        sites: site clusters hold every patient's scans).
    method : {"glmm", "gee", "fixed"}
        ``glmm``: ML with a random intercept (Laplace; ``nagq > 1``: adaptive
        Gauss-Hermite), Wald SEs from the Hessian in (SD, beta) as lme4.
        ``gee``: exchangeable working correlation, sandwich SE; with fewer than 20
        groups (``bias_reduced=None``, the default) or ``bias_reduced=True``:
        Mancl-DeRouen SEs with t(G - cluster-level parameters) tests (``gee-md-t``; see
        :mod:`stats.models.gee`); ``bias_reduced=False``: the plain sandwich with z tests
        (flag ``few_clusters`` below 20 groups). ``fixed``: group as a fixed effect,
        cluster-robust SE by ``cluster`` (patients).
    population : {"positives", "negatives"} or None
        ``positives``: outcome ``detected = pred`` among ``label == 1`` (sensitivity);
        ``negatives``: ``correct = 1 - pred`` among ``label == 0`` (specificity); None:
        the table as given.
    model : str or None
        One model's rows; ``"pooled"``: all models in one fit with ``model`` as a term;
        None: one fit per model (or one fit when there is no ``model`` column).
    threshold : float or None
        Voxel threshold when ``pred`` is absent (pred = score >= threshold); given, it
        overrides ``pred``.
    trials : str or None
        Column of binomial trials (outcome then counts successes; lme4's ``cbind``).
    scheduler : None, dask Client or address
        Where the per-model fits run (identical results either way).

    Returns
    -------
    Fit
        ``.tidy()``, ``.glance()``, ``.random_effects()``, ``.r2()``, ``.loglik``,
        ``.marginal_means(by, kind=...)``. Problems (separation, empty levels, singular
        fit, non-convergence, fewer than 5 groups) become warnings in ``glance()`` and
        flags in ``tidy()``; they never raise.

    Raises
    ------
    ContractError
        An empty ``cases`` table, or one without rows in ``population`` (nothing to
        fit), a ``threshold`` that is not a finite number, ``conf_level`` outside (0, 1),
        ``nagq`` not a whole number >= 1 (:mod:`stats._validate`); FormulaError for a
        formula outside the grammar.

    Notes
    -----
    Validated against R: lme4 1.1-31 ``glmer`` (Laplace, nAGQ = 10), geepack 1.3.9
    ``geeglm``, ``glm`` + ``sandwich::vcovCL``; fixtures tests/r/models_glmer.R, measured
    gaps in this module's docstring (tested: fixed effects 1e-3 relative + 1e-3 SE, SEs
    1e-2, group SD 2e-2, log-likelihood 1e-2 for glmer; 1e-6 for geeglm and glm).

    ``r2()`` (latent-scale, Nakagawa) is defined for ``glmm`` (and a plain logistic
    model); it is NaN for ``method="fixed"`` with a group and for ``gee``. Adjusted means
    (``marginal_means``) use the fit's covariance: cluster-robust for ``method="fixed"``,
    so their SEs differ from plain ``emmeans(glm)`` (model-based).

    Examples
    --------
    >>> import stats
    >>> from stats import simulate
    >>> cases = simulate.benchx_cohort(600, n_models=1, n_sites=6, seed=1).data
    >>> calls = stats.scan_level(cases, threshold=50)
    >>> fit = fit_adjusted(calls, "detected ~ phase + sex", group="site", method="glmm")
    >>> print(fit.tidy()[["estimand", "estimate", "std_error"]].round(2).to_string(index=False))
                 estimand  estimate  std_error
                Intercept      3.59       0.62
        phase[T.arterial]     -1.75       0.59
         phase[T.delayed]     -0.04       1.14
    phase[T.non_contrast]     -2.53       0.57
                 sex[T.M]     -0.62       0.39
          sd__(Intercept)      0.53       0.26
    """
    func = "fit_adjusted"
    _v.table(cases, func=func, columns=["label"] if population is not None else [],
             fix="add the reference standard 'label' (stats.read_cases), or pass "
                 "population=None for a table with its own outcome")
    _v.threshold(threshold, func=func)
    conf_level = _v.level(conf_level, func=func)
    nagq = _v.whole(nagq, func=func, arg="nagq", fix="e.g. nagq=1 (Laplace) or 10")
    if not isinstance(formula, (str, ParsedFormula)):
        raise ContractError(MSG_FORMULA.format(func=func, got=type(formula).__name__))
    if method not in ("glmm", "gee", "fixed"):
        raise ValueError(f"method must be 'glmm', 'gee' or 'fixed'; got {method!r}")
    if method in ("glmm", "gee") and group is None:
        raise ValueError(f"method={method!r} needs a group column (group='site')")
    group = _group_arg(group)
    parsed = parse_formula(formula) if isinstance(formula, str) else formula
    if parsed.random_group is not None:
        if method != "glmm":
            raise ValueError(f"the formula's '(1 | {parsed.random_group.name})' needs method='glmm'")
        group = parsed.random_group.name
        if getattr(parsed, "random_nested", None) is not None:
            group = (group, parsed.random_nested.name)
    if isinstance(group, tuple):
        if method == "glmm" and nagq > 1:
            raise ValueError(MSG_NESTED_AGQ.format(nagq=nagq))
        if method != "glmm":
            group = group[0]     # patients nest in sites: the site is the group
    data, outcome = _design.with_outcome(cases, population=population, threshold=threshold)
    if data.empty:
        raise ContractError(MSG_NO_POPULATION.format(func=func, population=population,
                                                     label=int(population == "positives")),
                            column="label")
    parsed = _design.complete_formula(parsed, outcome).fixed_only()
    parsed.check_columns(data.columns, source="cases")
    base = parsed
    outcome = parsed.response.name
    if method == "fixed" and group is not None:
        parsed = parsed.with_columns(group)
    if cluster is not None and cluster not in data.columns:
        cluster = "case_id" if "case_id" in data.columns else None
    jobs: list[tuple[str, pd.DataFrame, ParsedFormula]] = []
    formula = parsed
    if "model" not in data.columns or population is None and model is None:
        jobs.append(("all", data, formula))
    elif model == "pooled":
        formula = parsed.with_columns("model")
        jobs.append(("pooled", data, formula))
    elif model is not None:
        sub = data[data["model"].astype(str) == str(model)]
        if sub.empty:
            raise ContractError(f"cases: no rows for model {model!r} (models: "
                                f"{sorted(map(str, pd.unique(cases['model'])))}); check model=",
                                column="model")
        jobs.append((str(model), sub, formula))
    else:
        for m in pd.unique(data["model"]):
            jobs.append((str(m), data[data["model"] == m], formula))
    kw = dict(group=group, method=method, nagq=nagq, bias_reduced=bias_reduced,
              cluster=cluster, trials=trials, outcome=outcome, sd_start=_sd_start or {})
    fits = map_blocks(functools.partial(_fit_one, **kw), jobs, scheduler=scheduler)
    return Fit({f.model: f for f in fits}, method=method, formula=formula.formula,
               population=population, group=group, conf_level=conf_level,
               options=dict(nagq=nagq, bias_reduced=bias_reduced, cluster=cluster,
                            trials=trials, threshold=threshold, model=model,
                            parsed=formula, base=base))


def _group_arg(group):
    """``group`` as a column name, an (outer, inner) tuple (a one-element list or tuple:
    its column), or None; anything else is refused (:data:`MSG_GROUP`)."""
    if group is None or isinstance(group, str):
        return group
    if isinstance(group, (list, tuple)) and all(isinstance(g, str) for g in group) and (
            1 <= len(group) <= 2) and len(set(group)) == len(group):
        return group[0] if len(group) == 1 else tuple(group)
    raise ContractError(MSG_GROUP.format(got=repr(group)))


def _fit_one(name, data, formula, *, sd_start, **kw) -> ModelFit:
    # matrix-vector sized products: one BLAS thread (2-3x faster on a shared machine)
    with one_blas_thread(), np.errstate(all="ignore"):
        mf = _fit_one_inner(name, data, formula, theta0=_start_sd(sd_start.get(name)), **kw)
        eta = matvec(mf.design.X, mf.beta)
    if np.all(np.isfinite(eta)) and np.max(np.abs(eta), initial=0.0) > 30 and not any(
            w.startswith(FITTED_0_1) for w in mf.warnings):
        mf.warnings.append(f"{FITTED_0_1}: fitted probabilities of 0 or 1 occurred (|linear "
                           "predictor| > 30: complete or quasi-complete separation somewhere "
                           "in the data); some log-odds ratios are not finite")
    if not np.all(np.isfinite(mf.beta)):
        mf.warnings.append("not_estimable: the fit produced non-finite estimates")
    return mf


#: the log-odds ratio kept internally for a separated term (its ML estimate is infinite):
#: expit(40) is 1 in double precision, so the term's rows are fitted as certain; tables
#: show the estimate as +-inf with a NaN SE (``Fit.tidy``)
SEPARATED_LOGIT = 40.0


#: a related fit's group SD starts the optimiser only from this SD up: at SD 0 the
#: deviance's derivative in the SD is 0 (it is even in the SD), so a start there or near
#: it would stall; below it the default start (1) is used
SD_START_MIN = 0.05


def _start_sd(sd) -> float | None:
    """The optimiser's starting SD from a related fit's SD (the full fit's, for the block
    refits and the complete-case fit: a warm start), or None (the default start)."""
    if sd is None or np.ndim(sd) != 0 or not np.isfinite(sd) or sd < SD_START_MIN:
        return None
    return float(sd)


def _fit_one_inner(name, data, formula, *, group, method, nagq, bias_reduced, cluster, trials,
                   outcome, theta0=None) -> ModelFit:
    """Build the design and fit it. A separated term (a 0/1 column whose rows all have one
    outcome, found by exact counts: ``design.separation_warnings``) has an infinite ML
    log-odds ratio; in that limit its rows are fitted with probability 1 (or 0) and carry
    no information on the other parameters. So the other parameters are fitted, by every
    method alike, on the rows outside the separated levels without the separated columns
    (the exact limit of the full fit, whatever the optimiser or the CPU); the separated
    terms get NaN variances and the flag ``separation``."""
    outer, nest = group if isinstance(group, tuple) else (group, None)
    d = _design.build(data, formula, group=outer, outcome=outcome, trials=trials,
                      cluster=cluster, nest=nest)
    warnings = list(d.warnings) + _design.separation_warnings(d)
    G = len(d.group_levels)
    if method in ("glmm", "gee") and G < MIN_GROUPS:
        warnings.append(f"few_groups: only {G} levels of '{outer}'; the group variance is "
                        f"poorly estimated with fewer than {MIN_GROUPS} (consider method='fixed')")
    sep = _design.separated_columns(d, warnings)
    if not sep.any():
        return _fit_design(name, d, warnings, method=method, nagq=nagq,
                           bias_reduced=bias_reduced, cluster=cluster, group=group,
                           theta0=theta0)
    fd, rows = _design.without_separated(d, sep)
    if len(fd.y) <= fd.X.shape[1]:
        return _all_separated(name, d, sep, warnings, method, group)
    mf = _fit_design(name, fd, warnings, method=method, nagq=nagq,
                     bias_reduced=bias_reduced, cluster=cluster, group=group, theta0=theta0)
    return _with_separated(mf, d, sep, rows)


def _all_separated(name, d, sep: np.ndarray, warnings: list[str], method: str,
                   group=None) -> ModelFit:
    """Every row (or all but as many as there are other terms) lies in a separated level:
    the limit fits every row with certainty (log-likelihood: the binomial constants, 0
    for 0/1 data) and nothing is left to estimate the other terms from (NaN, flag
    not_estimable)."""
    p = len(d.terms)
    ybin = d.y / d.trials
    beta = np.full(p, np.nan)
    for j in np.flatnonzero(sep):
        beta[j] = SEPARATED_LOGIT if np.all(ybin[d.X[:, j] == 1] == 1) else -SEPARATED_LOGIT
    from scipy.special import gammaln
    const = float(np.sum(gammaln(d.trials + 1) - gammaln(d.y + 1) - gammaln(d.trials - d.y + 1)))
    msg = ("not_estimable: every row lies in a separated level (or too few rows are left "
           "outside them); the other terms cannot be estimated; merge levels")
    glmm = method == "glmm"
    k = 2 if glmm and d.nest_groups is not None else 1
    outer = group[0] if isinstance(group, tuple) else group
    names = ((outer, d.nest_name) if k == 2 else (outer,)) if glmm else None
    return ModelFit(model=name, method=method if method != "fixed" or d.group_levels != ["all"]
                    else "glm", method_label=(NESTED_LABEL if k == 2 else {
                        "glmm": "glmm-laplace-wald", "gee": "gee-md-t"}.get(method, "glm-wald")),
                    design=d, beta=beta, vcov=np.full((p, p), np.nan),
                    loglik=np.nan if method == "gee" else const,
                    n_params=p + (k if glmm else 0), converged=False,
                    warnings=warnings + [msg], theta=np.nan if glmm else None,
                    vcov_full=np.full((p + k, p + k), np.nan) if glmm else None,
                    re=None, extra={}, sd_names=names,
                    sds=np.full(k, np.nan) if glmm else None)


def _with_separated(mf: ModelFit, d, sep: np.ndarray, rows: np.ndarray) -> ModelFit:
    """The fit of the free design ``mf`` expressed in the full design ``d``: separated terms
    at +-SEPARATED_LOGIT with NaN (co)variances, group effects of groups without free rows
    NaN."""
    p = len(d.terms)
    ybin = d.y / d.trials
    sign = np.array([1.0 if np.all(ybin[d.X[:, j] == 1] == 1) else -1.0 for j in range(p)])
    beta = np.full(p, np.nan)
    beta[~sep] = mf.beta
    beta[sep] = sign[sep] * SEPARATED_LOGIT
    vcov = np.full((p, p), np.nan)
    vcov[np.ix_(~sep, ~sep)] = mf.vcov
    vcov_full = None
    if mf.vcov_full is not None:
        k = mf.n_sd
        keep = np.concatenate([np.ones(k, bool), ~sep])
        vcov_full = np.full((p + k, p + k), np.nan)
        vcov_full[np.ix_(keep, keep)] = mf.vcov_full
    re = mf.re
    if re is not None:
        full = _re_frame(d, {}, mf.sd_names)
        re = full[["group_var", "group", "n"]].merge(re.drop(columns="n"),
                                                     on=["group_var", "group"], how="left")
    extra = dict(mf.extra)
    if "vcov_model" in extra and extra["vcov_model"] is not None:
        vm = np.full((p, p), np.nan)
        vm[np.ix_(~sep, ~sep)] = extra["vcov_model"]
        extra["vcov_model"] = vm
    extra["separated_rows"] = int((~rows).sum())
    return ModelFit(model=mf.model, method=mf.method, method_label=mf.method_label, design=d,
                    beta=beta, vcov=vcov, loglik=mf.loglik,
                    n_params=mf.n_params + int(sep.sum()), converged=mf.converged,
                    warnings=mf.warnings, theta=mf.theta, vcov_full=vcov_full, re=re,
                    extra=extra, sd_names=mf.sd_names, sds=mf.sds)


#: the method label of a nested GLMM's rows
NESTED_LABEL = "glmm-nested-laplace-wald"


def _re_frame(d, levels: dict, names) -> pd.DataFrame:
    """The random-effect table of a design: one row per level of each random intercept
    (``group_var``, ``group``, ``n`` rows), with the columns of ``levels`` (``{group_var:
    {"estimate": array, "std_error": array}}``; NaN where absent)."""
    parts = []
    specs = [(names[0], d.group_levels, d.groups)]
    if d.nest_groups is not None and len(names) > 1:
        specs.append((names[1], d.nest_levels, d.nest_groups))
    for gv, lv, codes in specs:
        est = levels.get(gv, {})
        parts.append(pd.DataFrame({
            "group_var": gv, "group": lv,
            "estimate": est.get("estimate", np.full(len(lv), np.nan)),
            "std_error": est.get("std_error", np.full(len(lv), np.nan)),
            "n": np.bincount(codes, minlength=len(lv))}))
    return pd.concat(parts, ignore_index=True)


def _fit_design(name, d, warnings, *, method, nagq, bias_reduced, cluster, group,
                theta0=None) -> ModelFit:
    G = len(d.group_levels)
    start = fit_glm(d.X, d.y, d.trials)
    if method == "glmm" and d.nest_groups is not None:
        outer = group[0]
        names = (outer, d.nest_name)
        r = fit_nested_glmm(d.X, d.y, d.trials, d.groups, d.nest_groups, G,
                            len(d.nest_levels), glm=start, names=names)
        levels = {names[0]: dict(estimate=r.sds[0] * r.u_site,
                                 std_error=r.sds[0] * np.sqrt(r.var_site)),
                  names[1]: dict(estimate=r.sds[1] * r.u_patient,
                                 std_error=r.sds[1] * np.sqrt(r.var_patient))}
        return ModelFit(model=name, method="glmm", method_label=NESTED_LABEL, design=d,
                        beta=r.beta, vcov=r.vcov_full[2:, 2:], loglik=r.loglik,
                        n_params=len(r.beta) + 2, converged=r.converged,
                        warnings=warnings + r.warnings, theta=float(r.sds[0]),
                        vcov_full=r.vcov_full, re=_re_frame(d, levels, names),
                        extra=dict(nagq=1, singular=r.singular), sd_names=names,
                        sds=np.asarray(r.sds, float))
    if method == "glmm":
        r = fit_glmm(d.X, d.y, d.trials, d.groups, G, nagq=nagq, beta0=start.beta,
                     theta0=theta0, glm=start)
        label = "glmm-laplace-wald" if nagq <= 1 else f"glmm-agq{nagq}-wald"
        b = r.theta * r.u_hat
        re = pd.DataFrame({"group_var": group, "group": d.group_levels, "estimate": b,
                           "std_error": r.theta / np.sqrt(r.h_curv),
                           "n": np.bincount(d.groups, minlength=G)})
        return ModelFit(model=name, method="glmm", method_label=label, design=d, beta=r.beta,
                        vcov=r.vcov_full[1:, 1:], loglik=r.loglik, n_params=len(r.beta) + 1,
                        converged=r.converged, warnings=warnings + r.warnings, theta=r.theta,
                        vcov_full=r.vcov_full, re=re, extra=dict(nagq=nagq),
                        sd_names=(group,), sds=np.array([r.theta]))
    if method == "gee":
        r = fit_gee(d.X, d.y, d.groups, bias_reduced=bias_reduced, beta0=start.beta)
        return ModelFit(model=name, method="gee", method_label=r.method_label, design=d,
                        beta=r.beta, vcov=r.vcov, loglik=np.nan, n_params=len(r.beta),
                        converged=r.converged, warnings=warnings + r.warnings,
                        extra=dict(alpha=r.alpha, scale=r.scale, df=r.df,
                                   n_clusters=r.n_clusters))
    r = fit_glm(d.X, d.y, d.trials, cluster=d.cluster if cluster else None)
    label = ("glm-fixed-cluster-robust" if group is not None else "glm-wald") if cluster else "glm-wald"
    return ModelFit(model=name, method="fixed" if group is not None else "glm", method_label=label,
                    design=d, beta=r.beta, vcov=r.vcov, loglik=r.loglik, n_params=len(r.beta),
                    converged=r.converged, warnings=warnings + r.warnings,
                    extra=dict(vcov_model=r.vcov_model))


# ---------------------------------------------------------------------------- tests

def likelihood_ratio_test(full: Fit, reduced: Fit) -> pd.DataFrame:
    """Likelihood-ratio test of nested ML fits, one row per model.

    ``statistic = 2 (loglik_full - loglik_reduced)``, set to 0 below :data:`LRT_ZERO`
    (1e-8: the fits' convergence is about 1e-10 in deviance, so a smaller value is
    rounding, e.g. a boundary fit against the same model without its random intercept);
    below ``-LRT_WORSE`` (1e-4) the full fit missed its optimum and the statistic and p
    are NaN, flag ``full_below_reduced``,
    ``df`` = difference in parameters,
    p from chi-square(df). When ``full`` has one random intercept more than ``reduced``
    (a GLMM against the logistic model, a nested GLMM against the one-level GLMM) and
    they differ by that SD only, the SD is on the boundary under H0 and the p-value is
    the 50:50 mixture of chi-square(0) and chi-square(1): ``p = P(chi2_1 > stat) / 2``
    (Self & Liang 1987), method ``lrt-chibar2``.

    Returns the tidy contract (grouping ``model``): estimand ``likelihood_ratio``,
    ``statistic``, ``p_value``, ``n``; extras ``df``, ``loglik_full``, ``loglik_reduced``.
    Matches R's ``anova(full, reduced)`` (tests/r/models_glmer.R).

    Examples
    --------
    >>> import stats
    >>> from stats import simulate
    >>> calls = stats.scan_level(simulate.benchx_cohort(600, n_models=1, n_sites=6,
    ...                                                 seed=1).data, threshold=50)
    >>> full = stats.fit_adjusted(calls, "detected ~ phase + sex", group="site")
    >>> reduced = stats.fit_adjusted(calls, "detected ~ sex", group="site")
    >>> lrt = likelihood_ratio_test(full, reduced)    # the phase block: 3 df
    >>> print(lrt[["estimand", "statistic", "df", "method"]].round(2).to_string(index=False))
            estimand  statistic  df    method
    likelihood_ratio      31.53 3.0 lrt-chisq
    """
    for arg, fit in (("full", full), ("reduced", reduced)):
        if not isinstance(fit, Fit):
            raise ContractError(MSG_NOT_FIT.format(arg=arg, got=type(fit).__name__))
    rows = []
    for m, f in full.fits.items():
        if m not in reduced.fits:
            continue
        r = reduced.fits[m]
        if np.isnan(f.loglik) or np.isnan(r.loglik):
            raise ValueError("likelihood_ratio_test needs likelihood fits (glmm or fixed); "
                             "GEE has no likelihood: use the Wald tests of Fit.tidy()")
        if f.nobs != r.nobs:
            raise ContractError(f"model {m!r}: the fits use different rows ({f.nobs} vs "
                                f"{r.nobs}); refit on the same complete cases")
        df = f.n_params - r.n_params
        stat = 2.0 * (f.loglik - r.loglik)
        worse = stat < -LRT_WORSE
        # the fits converge to about 1e-10 in deviance: a statistic within LRT_ZERO of 0
        # (or below it) is 0, so that a boundary fit compared with its own reduced model
        # gives exactly 0 whatever the rounding
        stat = 0.0 if stat < LRT_ZERO else stat
        # one variance component fewer and the same fixed effects: that SD is 0 under H0
        boundary = f.n_sd - r.n_sd == 1 and df == 1 and len(f.beta) == len(r.beta)
        if boundary:
            p, method = 0.5 * sps.chi2.sf(stat, 1), "lrt-chibar2"
        else:
            p, method = (sps.chi2.sf(stat, df) if df > 0 else np.nan), "lrt-chisq"
        if worse:
            stat, p = np.nan, np.nan
        rows.append(dict(estimand="likelihood_ratio", model=m, estimate=stat, statistic=stat,
                         p_value=p, n=f.nobs, method=method,
                         flag=";".join(x for x in (f.flags(), r.flags(),
                                                   "full_below_reduced" if worse else "") if x),
                         df=float(df), loglik_full=f.loglik, loglik_reduced=r.loglik))
    return tidy(pd.DataFrame(rows), group_cols=("model",))


def block_tests(cases: pd.DataFrame, formula: str, blocks: dict[str, list[str]] | None = None,
                *, group: str | None = "site", method: Method = "glmm", full: Fit | None = None,
                **fit_kw) -> pd.DataFrame:
    """Likelihood-ratio test of each covariate block, and of the group random effect.

    For each block (default :data:`DEFAULT_BLOCKS`: protocol, demographics, tumour; a
    block lists variables (``"phase"``: every term using it) or term names
    (``"np.log(tumor_size_mm)"``); entries not in the formula are ignored, an empty block
    is skipped) the
    model without the block's terms is refitted on the same rows and compared with the
    full model. With ``method="glmm"`` the row ``block == group`` tests the random
    intercept against the logistic model without it (50:50 chi-square mixture); with
    nested groups (``group=("site", "patient_id")``) the rows ``site`` and
    ``patient_id:site`` test each level against the one-level GLMM without it (same
    mixture).

    Returns the tidy contract with grouping ``model, block``: estimand
    ``likelihood_ratio``; extras ``df``, ``terms`` (the dropped terms, ``" + "``-joined),
    ``loglik_full``, ``loglik_reduced``; plus rows ``r2_marginal``/``r2_conditional``
    (block ``""``) of the full model (Nakagawa latent-scale R2; NaN for
    ``method="fixed"``, whose linear predictor holds the site dummies). The reduced
    models are refitted on the full fit's own rows, whatever the cases index.
    Validated against R's ``anova(glmer, update(glmer, ...))`` (statistics to 5e-7 vs
    converged lme4, 1.2e-2 vs default lme4; tests/stats/test_models_fit.py).

    ``full``: the full model already fitted (``fit_adjusted(cases, formula, group=group,
    method=method, **fit_kw)``, e.g. the report's primary fit), so it is not fitted twice.
    Without ``full``, an empty ``cases`` table raises :class:`~stats.schema.ContractError`
    (nothing to fit), as in :func:`fit_adjusted`.
    """
    if full is None:
        _v.table(cases, func="block_tests")
    elif not isinstance(full, Fit):
        raise ContractError(MSG_NOT_FIT.format(arg="full", got=type(full).__name__))
    if blocks is not None and not isinstance(blocks, dict):
        raise ContractError(f"block_tests: blocks must be a mapping {{name: [variables]}}; "
                            f"got {type(blocks).__name__}")
    if method == "gee":
        raise ValueError("block_tests needs a likelihood: use method='glmm' or 'fixed'")
    blocks = DEFAULT_BLOCKS if blocks is None else blocks
    group = _group_arg(group)
    if isinstance(group, tuple) and method != "glmm":
        group = group[0]
    if full is None:
        full = fit_adjusted(cases, formula, group=group, method=method, **fit_kw)
    elif full.method != method or full.group != group:
        raise ValueError(f"block_tests: full= is a {full.method!r} fit by {full.group!r}; "
                         f"the tests need method={method!r}, group={group!r}")
    base: ParsedFormula = full.options["base"]   # parsed, outcome set, group not appended
    out = []
    for name, variables in blocks.items():
        reduced_formula, dropped = base.without(list(variables))
        if not dropped:
            continue
        # refit on exactly the full model's rows
        red = _refit_same_rows(full, reduced_formula, group=group, method=method, **fit_kw)
        t = likelihood_ratio_test(full, red)
        t["block"] = name
        t["terms"] = " + ".join(dropped)
        out.append(t)
    if method == "glmm" and isinstance(group, tuple):
        # nested: each level against the one-level GLMM without it (boundary mixture)
        inner = f"{group[1]}:{group[0]}"
        for level, other in ((group[0], inner), (inner, group[0])):
            red = _refit_same_rows(full, base, group=other, method="glmm", **fit_kw)
            t = likelihood_ratio_test(full, red)
            t["block"] = level
            t["terms"] = f"(1 | {level})"
            out.append(t)
    elif method == "glmm":
        red = _refit_same_rows(full, base, group=None, method="fixed", **fit_kw)
        t = likelihood_ratio_test(full, red)
        t["block"] = group
        t["terms"] = f"(1 | {group})"
        out.append(t)
    r2 = full.r2()
    r2["block"] = ""
    out.append(r2)
    res = pd.concat(out, ignore_index=True)
    return tidy(res, group_cols=("model", "block"))


def _refit_same_rows(full: Fit, formula: ParsedFormula, *, group, method, **fit_kw) -> Fit:
    """Refit ``formula`` on exactly the rows each of ``full``'s fits used.

    The rows are taken from the fit itself (``design.data``: the model's population rows
    with the outcome, complete for the full formula), never looked up by index label in
    the cases table, whose index may repeat labels (per-model frames concatenated without
    ``reset_index``)."""
    kw = {k: v for k, v in fit_kw.items() if k not in ("model", "population", "threshold")}
    kw["cluster"] = full.options.get("cluster")
    if full.options.get("model") == "pooled":
        formula = formula.with_columns("model")
    fits = {}
    for m, f in full.fits.items():
        data = f.design.data
        d = f.design
        if d.nest_name is not None and group == d.nest_name:
            # the one-level GLMM of the nested level: its inner:outer pairs as a column
            data = data.assign(**{d.nest_name: np.asarray(d.nest_levels, dtype=object)[
                d.nest_groups]})
        # a GLMM refit starts from the full fit's group SD (``_start_sd``); the fixed
        # effects start, as always, from the refit's own GLM. population=None, model=None:
        # one fit, named "all"
        g = fit_adjusted(data, formula, group=group, method=method, population=None,
                         model=None, _sd_start={"all": f.theta} if d.nest_groups is None
                         else None, **kw)
        fits[m] = next(iter(g.fits.values()))
        fits[m].model = m
    return Fit(fits, method=method, formula=formula.formula, population=full.population,
               group=group)


# ---------------------------------------------------------------------- complete case

def fit_complete_case(cases: pd.DataFrame, formula: str, *, column: str = "race",
                      drop=("Unknown",), **fit_kw) -> Fit:
    """The same fit on the cases whose ``column`` is known (rows with a value in ``drop``
    removed and the level dropped): the complete-case analysis reported beside the
    primary one, where Unknown is an explicit level. An empty ``cases`` table, or one
    without ``column``, raises :class:`~stats.schema.ContractError`; so does one whose
    every row is dropped (nothing to fit)."""
    _v.table(cases, func="fit_complete_case", columns=[column],
             fix="name the column whose unknown values are dropped (column=)")
    keep = ~cases[column].astype(str).isin([str(v) for v in drop])
    sub = cases.loc[keep].copy()
    _v.table(sub, func="fit_complete_case", arg=f"cases with a known {column}")
    if isinstance(sub[column].dtype, pd.CategoricalDtype):
        # set_categories keeps the order (the first level is the reference);
        # remove_categories sorts what is left (pandas' Index.difference)
        sub[column] = sub[column].cat.set_categories(
            [c for c in sub[column].cat.categories if str(c) not in {str(v) for v in drop}])
    return fit_adjusted(sub, formula, **fit_kw)


def compare_complete_case(cases: pd.DataFrame, formula: str, *, column: str = "race",
                          drop=("Unknown",), **fit_kw) -> pd.DataFrame:
    """``Fit.tidy()`` of the primary fit (Unknown as a level) and of the complete-case fit,
    stacked, with an extra column ``analysis`` (``unknown_as_level`` / ``complete_case``)."""
    a = fit_adjusted(cases, formula, **fit_kw).tidy()
    a["analysis"] = "unknown_as_level"
    b = fit_complete_case(cases, formula, column=column, drop=drop, **fit_kw).tidy()
    b["analysis"] = "complete_case"
    return tidy(pd.concat([a, b], ignore_index=True), group_cols=("model",))
