"""Where a subgroup's gap comes from: case mix versus what remains at equal case mix.

:func:`decompose_gap` splits the crude difference in sensitivity (among reference
positives; specificity among negatives) between two levels of a grouping column, the
*comparison* ``c = levels[0]`` and the *reference* ``r = levels[1]``, on an adjusted
logistic model ``outcome ~ group + covariates`` (any method of :func:`stats.fit_adjusted`;
default the primary model, the site GLMM).

**The parts** (g-computation on the fitted model; the binary-outcome decomposition of
Fairlie 1999/2005 with one pooled model whose group term is the only coefficient that
differs between the levels). Write ``F_l(x)`` for the model's predicted probability of a
row with covariates ``x`` and group level ``l``, ``Y_l`` for the observed proportion of
level ``l`` and ``mean_l`` for an average over the rows of level ``l``::

    gap_total       = Y_c - Y_r                              (crude; no model)
    gap_case_mix    = mean_c F_r(x) - mean_r F_r(x)          (the reference level given
                                                              the comparison's covariates)
    gap_conditional = gap_total - gap_case_mix
                    = [mean_c F_c(x) - mean_c F_r(x)]  +  residual

The bracket is the gap at equal case mix (the comparison's); ``residual = (Y_c - mean_c
F_c) - (Y_r - mean_r F_r)`` is the model's misfit of the two levels' proportions, exactly
0 for ``method="fixed"`` and a plain logistic model (the score equations of the group's
columns), small for the GLMM (Laplace) and GEE; it is reported (``model_residual``).
The covariates' distribution includes the site: with ``method="glmm"`` a row's
prediction includes its site's predicted effect (the conditional mode, lme4's
``ranef``), with ``method="fixed"`` its site's fixed effect, so the site is always one of
the covariates of the decomposition (named by ``fit_group``); a GEE is population
averaged, so the site is a covariate there only when listed (then as a fixed factor).

**Within-site group effect** (``within_site=True``, the default with ``method="glmm"``).
A random site intercept is shrunken toward 0; when the group's share differs between
sites (race by hospital), the group term then takes up the part of the site effects
correlated with the group, and the case-mix part is biased toward 0 (in simulation with
6 sites and a case-mix-only gap, 88.5% coverage and a bias of +0.029 without, in 200
studies; the fixed-site model has none: bench/gap_decomposition.md). The GLMM therefore
holds each site's share of the comparison (and of the reference, when the group has
other levels) as site-level covariates, the within-between ("hybrid") model of Mundlak
(1978) and Neuhaus & Kalbfleisch (1998): the group coefficient is the within-site
effect, as with fixed site effects, and a site's effect is its conditional mode plus its
shares' terms, both in the site's piece of the decomposition. A share collinear with the
intercept and the group (a group constant within sites, or the same share at every site)
is left out (``SHARE_ALIASED``). The shares are a function of the data, so each
bootstrap replicate recomputes them from its own rows (a site's share among the
replicate's rows of that site) before its refit, and its site piece uses them: held at
the full data's values, the replicates missed the variation of the shares' term (in 2,000
studies of a conditional-only gap the case-mix part, true value 0, covered 93.7% with an
upper tail of 3.85%; recomputed, 96.5% in 1,000 studies, tails 1.0% and 2.5%:
bench/gap_decomposition.md).

**Per-covariate contributions** (Shapley values, averaged over all orderings of the
covariates, enumerated exactly: 2**k coalitions for k covariates, at most
:data:`MAX_COVARIATES`). The value of a coalition S of covariates is the reference
level's mean prediction when the covariates in S take the comparison's distribution and
the others keep the reference's, the two drawn independently::

    v(S) = mean_{i in r} mean_{j in c} F_r(x_j[S], x_i[not S]),

so ``v(empty) = mean_r F_r`` and ``v(all) = mean_c F_r`` (both margins' own joint
distributions), and ``contribution:k = sum_{S not containing k} |S|! (k - |S| - 1)! / k!
[v(S + k) - v(S)]``; the contributions add up to ``gap_case_mix`` exactly. ``v(S)`` is
the mean over every (reference, comparison) pair of rows, i.e. Fairlie's sequential
replacement with a random one-to-one matching averaged over all matchings (Fairlie
matches on ranked predictions instead, and averages random orderings by simulation; here
both averages are exact). The independent coupling shares the contribution of two
correlated covariates (site and phase) between them; the total case-mix part keeps the
comparison's joint distribution. The model must be additive on the logit scale in the
covariates (each covariate one main-effect term: a column or a one-column transform such
as ``np.log(tumor_size_mm)``), so that a covariate's part of the linear predictor depends
on its own value only. Rows are grouped into distinct covariate patterns per coalition,
so the pair sums cost (patterns of the reference) x (patterns of the comparison), not
rows x rows.

**Intervals.** Paired cluster bootstrap: ``n_boot`` replicates of patients (``cluster``)
drawn with replacement, one draw shared by every model and every estimand; in each the
model is refitted on the replicate (a replicate is the data with each row weighted by
its patient's multiplicity; weighted ML equals ML on the duplicated rows) and every part
recomputed; percentile limits, ``std_error`` the replicates' SD. Refits are vectorised
over replicates, warm-started at the full-data fit, by a chord (fixed-Hessian) Newton
iteration on the exact weighted score: for ``method="fixed"`` and a plain logistic
model the logistic score, for ``method="glmm"`` (Laplace, ``nagq=1``) the analytic
gradient of the Laplace deviance in (SD, beta) with every replicate's conditional modes
found at once (the formulas of :mod:`stats.models.glmm`), the Hessian being the
full-data one (finite differences of that gradient). Each replicate iterates until its
largest step is below 1e-9 on the standardised parameters (about 10-30 iterations); a
replicate that does not converge in :data:`CHORD_MAX_ITER` iterations is refitted alone
by :func:`stats.fit_adjusted` on its duplicated rows (counted: ``n_refit``), and so is
every replicate of a GEE, of an adaptive Gauss-Hermite GLMM (``nagq > 1``), or of a
fit whose Hessian is not positive definite. A boundary GLMM fit (group SD 0) is
refitted as the logistic model it is (SD held at 0). Cost: the chord refits take about
1-3 s per 1,000 replicates at 400 rows and 20 coefficients; a per-replicate refit
(GEE) about 0.05-0.1 s each.

References: Fairlie RW (1999) J Labor Econ 17:80-108; Fairlie RW (2005) J Econ Soc Meas
30:305-316; Shorrocks AF (2013) J Econ Inequal 11:99-126 (Shapley decompositions);
Robins J (1986) Math Model 7:1393-1512 (g-computation); Mundlak Y (1978) Econometrica
46:69-85; Neuhaus JM, Kalbfleisch JD (1998) Biometrics 54:638-645.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.special import expit

from stats import _validate as _v
from stats._linalg import pd_solve_stack, sym_eigh
from stats._quantile import percentile_interval
from stats._rng import as_generator
from stats.formula import FormulaError, parse_formula
from stats.schema import ContractError, tidy

__all__ = ["decompose_gap", "MAX_COVARIATES"]

#: most covariates of one decomposition (exact Shapley enumeration: 2**k coalitions)
MAX_COVARIATES = 10
#: Newton iterations of a replicate's refit before it is refitted alone
NEWTON_MAX_ITER = 150
#: a replicate's refit has converged when its largest step is below this (relative to
#: 1 + |parameter|)
NEWTON_TOL = 1e-9
#: a replicate's fitted probabilities have settled when they move less than this in one
#: Newton step (quasi-complete separation: the coefficients diverge, the fit does not)
SETTLED = 1e-10
#: the saddle-free step's floor on an eigenvalue of the information, relative to the
#: largest: a nearly flat direction (quasi-complete separation of a combination of
#: columns, such as a reference level whose rows all have one outcome) then moves by the
#: step cap (1 per iteration) and the fitted probabilities settle; at 1e-8 the step along
#: it shrank a hundredfold and the replicate ran out of iterations
FLAT_EIG = 1e-13
#: a level with fewer rows than this is flagged small_n
SMALL_LEVEL = 10
#: elements of one pattern-pair block (replicates x reference x comparison patterns)
_PAIR_ELEMENTS = 2 ** 22
#: elements of one replicate block (replicates x rows x columns)
_BLOCK_ELEMENTS = 2 ** 23
#: log-odds of a separated term (stats.models.SEPARATED_LOGIT): held fixed in refits
_SEPARATED = 40.0

Method = Literal["glmm", "gee", "fixed"]
Population = Literal["positives", "negatives"]

def gap_bootstrap_work(n_boot: int, n_rows: int, n_params: int, n_fits: int = 1, *,
                       setting: str = "n_boot", what: str = "the gap decomposition's bootstrap"):
    """Peak memory and time of :func:`decompose_gap`'s bootstrap: every replicate refits the
    model (batched Newton, at most ``NEWTON_MAX_ITER`` steps; about 20 in practice) on
    ``n_rows`` rows with ``n_params`` coefficients, ``n_fits`` times (contrasts x models).

    Memory: one block of at most ``_BLOCK_ELEMENTS`` replicate-row weights with about ten
    float64 arrays of its size, its p x p information matrices, and the replicate
    statistics. Time: 20 Newton steps of every replicate's rows x coefficients."""
    from stats import limits as _limits

    B, N, P, F = (max(int(v), 1) for v in (n_boot, n_rows, n_params, n_fits))
    block = max(1, min(B, _BLOCK_ELEMENTS // N))
    mem = 10 * 8.0 * block * N + 8.0 * block * P * P * 2 + 8.0 * B * 16 * F
    secs = 20 * _limits.SECONDS_PER_ELEMENT * B * N * (P + 2) * F
    return _limits.Work(what=what, setting=f"{setting} ({B:,} replicates)", memory_bytes=mem,
                        seconds=secs, detail=f"{B:,} replicates x {F:,} refits of {N:,} rows "
                                             f"x {P:,} coefficients")


MSG_LEVELS = ("decompose_gap: levels must be two different levels of {group!r}, the "
              "comparison first and the reference second, e.g. levels=('Unknown', "
              "'White'); got {got}")
MSG_LEVEL_ABSENT = ("decompose_gap: level {level!r} of {group!r} has no {population} with "
                    "every covariate present{model} (levels there: {present}); choose a "
                    "level the data hold")
MSG_NO_COVARIATES = ("decompose_gap: covariates is empty; name at least one covariate of "
                     "the case mix, e.g. covariates=['phase', 'np.log(tumor_size_mm)']")
MSG_TOO_MANY = ("decompose_gap: {n} covariates given; at most {cap} (the contributions "
                "enumerate all 2**k coalitions); merge or drop some")
MSG_COVARIATE = ("decompose_gap: covariates[{i}] = {cov!r} is not one main-effect term "
                 "({why}); give a column name or a one-column term such as "
                 "'np.log(tumor_size_mm)' (an interaction cannot be split between "
                 "covariates)")
MSG_COVARIATE_TYPE = ("decompose_gap: covariates must be a list of texts (column names or "
                      "terms); got {got}")
MSG_COVARIATE_GROUP = ("decompose_gap: covariates[{i}] = {cov!r} uses the group column "
                       "{group!r}; the group is what the gap is between, not case mix; "
                       "remove it")
MSG_COVARIATE_TWICE = ("decompose_gap: covariates list {cov!r} twice; give each once")
MSG_GROUP = ("decompose_gap: group must be the name of a column of cases, e.g. "
             "group='race'; got {got}")
MSG_METHOD = "decompose_gap: method must be 'glmm', 'gee' or 'fixed'; got {got!r}"
MSG_WITHIN = ("decompose_gap: within_site must be True or False; got {got} (True: the "
              "GLMM holds each site's share of the comparison level)")
MSG_POPULATION = "decompose_gap: population must be 'positives' or 'negatives'; got {got!r}"
MSG_FIT_GROUP = ("decompose_gap: method={method!r} needs fit_group, the site column of the "
                 "model (random intercept / GEE cluster), e.g. fit_group='site'")


# ============================================================================ API

def decompose_gap(cases: pd.DataFrame, group: str, levels, *, covariates,
                  population: Population = "positives", n_boot: int | None = 2000,
                  seed=None, method: Method = "glmm", fit_group: str | None = "site",
                  cluster: str | None = "patient_id", threshold: float | None = None,
                  nagq: int = 1, conf_level: float = 0.95, within_site: bool = True
                  ) -> pd.DataFrame:
    """Decompose the gap in sensitivity (specificity) between two levels of ``group`` into
    its case-mix part, the part at equal case mix, and each covariate's contribution
    (see the module notes for the formulas).

    Parameters
    ----------
    cases : DataFrame
        A cases table (stats.read_cases) with ``pred`` (or ``score`` and ``threshold``),
        ``label``, the group and covariate columns; one decomposition per ``model``.
    group : str
        The column the gap is between (e.g. ``race``, ``site``).
    levels : (comparison, reference)
        ``gap_total = P(comparison) - P(reference)``; the case-mix part gives the
        reference level the comparison's covariate distribution.
    covariates : list of str
        The case mix: column names or one-column terms of clinrel's formula grammar
        (``"np.log(tumor_size_mm)"``), each a main effect. With ``method`` ``glmm`` or
        ``fixed`` the site (``fit_group``) is one of them whether listed or not.
    population : {"positives", "negatives"}
        Sensitivity (``detected`` among label 1) or specificity (``correct`` among 0).
    n_boot : int or None
        Cluster-bootstrap replicates (None: point estimates only, NaN limits).
    seed : int, Generator or None
    method : {"glmm", "gee", "fixed"}
        The adjusted model (:func:`stats.fit_adjusted`); default the primary model.
    fit_group : str or None
        The model's site column (random intercept, GEE cluster, fixed effect);
        ``method="fixed", fit_group=None`` is a plain logistic model.
    cluster : str or None
        The bootstrap cluster (patients; ``case_id`` where absent, or None: each row).
    threshold, nagq, conf_level
        As :func:`stats.fit_adjusted`.
    within_site : bool
        With ``method="glmm"``: add each site's share of the comparison (and, when the
        group has other levels, of the reference) as site-level covariates (Mundlak
        1978), so that the group term is the within-site effect and the site's share is
        part of the site's effect (module notes). Default True; False fits the plain
        random-intercept model (the group term then takes part of a site effect that is
        confounded with the group: the case-mix part is biased toward 0).

    Returns
    -------
    DataFrame
        Tidy contract, grouping ``model, group_var, group_level`` (group_level
        ``"<comparison> vs <reference>"``). ``estimand``: ``gap_total``, ``gap_case_mix``,
        ``gap_conditional``, then ``contribution:<covariate>`` ordered by size (largest
        absolute first); ``estimate`` (difference of proportions), ``std_error`` (SD of
        the replicates), ``conf_low``/``conf_high`` (percentile), ``n`` (rows of the two
        levels), ``n_pos``/``n_neg``, ``method`` (``gcomp-<fit method>-bootstrap``),
        ``flag`` (the fit's flags; ``not_estimable``: the counterfactual needs a
        coefficient the data cannot estimate, NaN; ``small_n``: a level with fewer than
        10 rows). Extras: ``comparison``, ``reference``, ``covariate`` (contribution
        rows), ``order`` (1 = largest contribution), ``p_comparison``, ``p_reference``
        (observed), ``p_counterfactual`` (mean_c F_r), ``model_residual``,
        ``n_comparison``, ``n_reference``, ``n_clusters``, ``within_site`` (the model
        holds the site shares: ``within_site`` above), ``n_boot`` (replicates with
        a finite value), ``n_refit`` (replicates refitted alone), ``n_dropped`` (rows
        of the population left out for a missing covariate).

    Raises
    ------
    ContractError
        A table without the columns, levels that are not two levels present in the data,
        covariates that are not main-effect terms (or more than 10), a bad ``n_boot``,
        ``seed``, ``threshold`` or ``conf_level``.

    Notes
    -----
    Assumptions: the decomposition is causal only under no unmeasured confounding of the
    group-outcome relation given the covariates, and positivity (every covariate pattern
    of the comparison possible for the reference); otherwise it describes the model.
    Validated by simulation with known truth (bench/gap_decomposition.md, 6 sites, about
    350 positive scans, 1,000 studies per scenario): with the default GLMM (within-site
    terms) every part's percentile interval covers 94.8-96.5%, the part whose truth is 0
    (the conditional part of a gap made only by case mix, the case-mix part of a gap made
    only by a conditional effect) 95.2% and 96.5%; with ``method="fixed"`` 94.8-96.6%;
    the plain GLMM (``within_site=False``) biases the case-mix part of a case-mix gap
    toward 0 (+0.029, 88.5% in 200 studies). The chord refits equal
    ``stats.fit_adjusted`` on the duplicated rows (tests/stats/test_gaps.py).
    """
    func = "decompose_gap"
    if method not in ("glmm", "gee", "fixed"):
        raise ContractError(MSG_METHOD.format(got=method))
    if population not in ("positives", "negatives"):
        raise ContractError(MSG_POPULATION.format(got=population))
    if not isinstance(group, str):
        raise ContractError(MSG_GROUP.format(got=repr(group)))
    if method in ("glmm", "gee") and fit_group is None:
        raise ContractError(MSG_FIT_GROUP.format(method=method))
    if not isinstance(within_site, (bool, np.bool_)):
        raise ContractError(MSG_WITHIN.format(got=repr(within_site)[:40]))
    terms = _covariate_terms(covariates, group)
    _v.table(cases, func=func, columns=["label", group] + [c for t in terms for c in t[1]]
             + ([fit_group] if fit_group else []))
    _v.threshold(threshold, func=func)
    conf_level = _v.level(conf_level, func=func)
    nagq = _v.whole(nagq, func=func, arg="nagq", fix="e.g. nagq=1 (Laplace)")
    n_boot = _v.whole(n_boot, func=func, arg="n_boot", minimum=2, optional=True,
                      fix="e.g. n_boot=2000, or None for point estimates only")
    rng = as_generator(seed)
    comp, ref = _levels(levels, group)
    if "pred" not in cases.columns and threshold is None:
        raise ContractError("decompose_gap: cases has no 'pred' column and no threshold was "
                            "given; pass threshold=<voxels> or run stats.scan_level first",
                            column="pred")

    rows, n_dropped, outcome = _rows(cases, group, terms, fit_group, cluster, population,
                                     threshold)
    models = [m for m, _ in _by_model(rows)]
    for lv in (comp, ref):
        for m, g in _by_model(rows):
            if not (g[group].astype(str) == str(lv)).any():
                present = sorted(map(str, pd.unique(g[group].dropna())))[:10]
                raise ContractError(MSG_LEVEL_ABSENT.format(
                    level=lv, group=group, population=population,
                    model=f" for model {m!r}" if m != "all" else "", present=present),
                    column=group)
    pieces = _pieces(terms, method, fit_group)
    site_terms: list[str] = []
    if method == "glmm" and within_site and fit_group is not None:
        rows, shares = _site_shares(rows, group, comp, ref, fit_group)
        site_terms = [name for name, _ in shares]
    formula = f"{outcome} ~ " + " + ".join(
        [group] + [term for _, kind, term, _ in pieces if kind == "slice"
                   and not (method == "fixed" and term == fit_group)] + site_terms)
    from stats.models import fit_adjusted   # the models floor of stats

    clusters, n_clusters = _cluster_codes(rows)
    setups = {}
    for m, g in _by_model(rows):
        # population=None: the rows as given (one model's), outcome already computed
        fit = fit_adjusted(g, formula, group=fit_group, method=method, population=None,
                           cluster=None, nagq=nagq, conf_level=conf_level)
        setups[m] = _Setup.build(fit, g, group, comp, ref, pieces, method, outcome,
                                 clusters[_model_mask(rows, m)], nagq,
                                 shares if method == "glmm" and within_site else ())
    W_all = _cluster_weights(rng, n_clusters, n_boot) if n_boot else None
    parts = []
    for m in models:
        s = setups[m]
        point = s.point()
        reps, n_refit = s.replicates(W_all) if n_boot else (
            np.full((0, s.n_estimands), np.nan), 0)
        parts.append(s.table(point, reps, conf_level=conf_level,
                             n_dropped=int(n_dropped.get(m, 0)), n_clusters=n_clusters,
                             n_refit=n_refit, population=population, model=m))
    out = pd.concat(parts, ignore_index=True)
    return tidy(out, group_cols=("model", "group_var", "group_level"))


# ============================================================================ inputs

def _covariate_terms(covariates, group: str) -> list[tuple[str, tuple[str, ...], str]]:
    """``[(patsy term name, source columns, name as given)]``, one main-effect term each."""
    if isinstance(covariates, str) or not isinstance(covariates, (list, tuple)) or not all(
            isinstance(c, str) for c in covariates):
        raise ContractError(MSG_COVARIATE_TYPE.format(got=repr(covariates)[:80]))
    if not covariates:
        raise ContractError(MSG_NO_COVARIATES)
    if len(covariates) > MAX_COVARIATES:
        raise ContractError(MSG_TOO_MANY.format(n=len(covariates), cap=MAX_COVARIATES))
    out, seen = [], set()
    for i, cov in enumerate(covariates):
        try:
            parsed = parse_formula(f"y ~ {cov}")
        except FormulaError as exc:
            raise ContractError(MSG_COVARIATE.format(i=i, cov=cov, why=str(exc)[:120])) from None
        if len(parsed.terms) != 1 or len(parsed.terms[0].factors) != 1 or not parsed.intercept \
                or parsed.random_group is not None:
            raise ContractError(MSG_COVARIATE.format(
                i=i, cov=cov, why=f"it expands to {len(parsed.terms)} term(s): "
                f"{', '.join(parsed.term_names()) or 'none'}"))
        term = parsed.terms[0]
        if len(term.columns) != 1:
            raise ContractError(MSG_COVARIATE.format(i=i, cov=cov, why="it uses "
                                                     f"{len(term.columns)} columns"))
        if group in term.columns:
            raise ContractError(MSG_COVARIATE_GROUP.format(i=i, cov=cov, group=group))
        if term.name in seen:
            raise ContractError(MSG_COVARIATE_TWICE.format(cov=cov))
        seen.add(term.name)
        out.append((term.name, tuple(term.columns), cov))
    return out


def _levels(levels, group: str):
    ok = isinstance(levels, (list, tuple)) and len(levels) == 2 and all(
        isinstance(x, (str, int, np.integer)) and not isinstance(x, bool) for x in levels)
    if not ok or str(levels[0]) == str(levels[1]):
        raise ContractError(MSG_LEVELS.format(group=group, got=repr(levels)[:80]))
    return levels[0], levels[1]


def _pieces(terms, method: str, fit_group: str | None) -> list[tuple[str, str, str, str]]:
    """The covariates of the decomposition: ``(name, kind, term, column)``; kind
    ``slice`` (a term of the design) or ``random`` (the GLMM's site effect). With
    ``glmm`` or ``fixed`` the site is one of them, listed or not."""
    out = []
    for term, cols, given in terms:
        if method == "glmm" and fit_group is not None and term == fit_group:
            out.append((given, "random", term, cols[0]))
        else:
            out.append((given, "slice", term, cols[0]))
    if method in ("glmm", "fixed") and fit_group is not None and fit_group not in [
            t[2] for t in out]:
        out.append((fit_group, "random" if method == "glmm" else "slice", fit_group,
                    fit_group))
    return out


def _rows(cases, group, terms, fit_group, cluster, population, threshold):
    """The population's rows with the outcome, complete in every model variable; and the
    rows dropped per model."""
    df = cases
    if "pred" not in df.columns or threshold is not None:
        df = df.assign(pred=(pd.to_numeric(df["score"]).to_numpy() >= threshold).astype("int64"))
    lab = pd.to_numeric(df["label"], errors="coerce").to_numpy()
    keep = lab == (1 if population == "positives" else 0)
    df = df.loc[keep].copy()
    outcome = "detected" if population == "positives" else "correct"
    pred = pd.to_numeric(df["pred"], errors="coerce").to_numpy()
    df[outcome] = pred if population == "positives" else 1 - pred
    cols = [group, *[c for t in terms for c in t[1]], *([fit_group] if fit_group else [])]
    if cluster is not None and cluster not in df.columns:
        cluster = "case_id" if "case_id" in df.columns else None
    if cluster is not None:
        cols.append(cluster)
    miss = df[list(dict.fromkeys(cols))].isna().any(axis=1).to_numpy()
    dropped = {}
    if "model" in df.columns:
        dropped = {str(m): int(n) for m, n in
                   pd.Series(miss).groupby(df["model"].astype(str).to_numpy()).sum().items()}
    else:
        dropped = {"all": int(miss.sum())}
    df = df.loc[~miss].reset_index(drop=True)
    if df.empty:
        raise ContractError(f"decompose_gap: cases holds no {population} with every model "
                            f"variable present ({', '.join(dict.fromkeys(cols))}); pass "
                            "cases with reference "
                            f"{population} and complete covariates", column="label")
    bad = ~np.isin(df[outcome].to_numpy(), (0, 1))
    if bad.any():
        raise ContractError("decompose_gap: cases column 'pred' must be 0/1; rows "
                            f"{list(df.index[bad][:5])} hold {list(df['pred'][bad][:5])}; "
                            "recompute it with stats.scan_level", column="pred")
    if not isinstance(df[group].dtype, pd.CategoricalDtype):   # the group is a factor
        df[group] = pd.Categorical(df[group].astype(str),
                                   categories=sorted(pd.unique(df[group].astype(str))))
    df.attrs["cluster"] = cluster
    return df, dropped, outcome


#: a site share whose largest residual on the intercept, the group's indicators and the
#: shares before it is below this is collinear with them (the share of a site-level group,
#: or the same share everywhere) and is left out; shares are in [0, 1] and a real
#: difference is at least 1/rows of a site, far above this and above rounding
SHARE_ALIASED = 1e-8


def _site_shares(rows, group, comp, ref, site):
    """The rows with each site's share of the comparison (and of the reference, when the
    group has other levels) among the model's rows of its site, as columns, and ``[(column,
    level)]``: the within-site (Mundlak) terms of a GLMM decomposition. A share collinear
    with the intercept, the group's indicators and the shares before it is left out."""
    out = rows.copy()
    gl = out[group].astype(str).to_numpy()
    levels = [comp] + ([ref] if len(set(gl) - {str(comp), str(ref)}) else [])
    keys = [out["model"].astype(str).to_numpy()] if "model" in out.columns else []
    keys.append(out[site].astype(str).to_numpy())
    names, of = [], {}
    for j, lv in enumerate(levels):
        name = ("share_comparison" if j == 0 else "share_reference") + "__"
        while name in out.columns:
            name += "_"
        ind = pd.Series((gl == str(lv)).astype(float), index=out.index)
        out[name] = ind.groupby(keys).transform("mean").to_numpy()
        names.append(name)
        of[name] = str(lv)
    kept = []
    for m, g in _by_model(out):
        gg = g[group].astype(str).to_numpy()
        base = [np.ones(len(g)), (gg == str(comp)).astype(float), (gg == str(ref)).astype(float)]
        for name in names:
            col = g[name].to_numpy()
            A = np.column_stack(base + [g[k].to_numpy() for k in kept if k != name])
            coef = np.linalg.lstsq(A, col, rcond=None)[0]
            if np.max(np.abs(col - A @ coef)) > SHARE_ALIASED and name not in kept:
                kept.append(name)
    drop = [n for n in names if n not in kept]
    return out.drop(columns=drop), [(n, of[n]) for n in kept]


def _model_mask(rows, m) -> np.ndarray:
    if "model" not in rows.columns:
        return np.ones(len(rows), dtype=bool)
    return (rows["model"].astype(str) == m).to_numpy()


def _by_model(rows):
    if "model" not in rows.columns:
        return [("all", rows)]
    return [(str(m), rows[rows["model"].astype(str) == str(m)])
            for m in pd.unique(rows["model"].astype(str))]


def _cluster_codes(rows) -> tuple[np.ndarray, int]:
    """Cluster codes shared by every model's rows (the paired resampling): the cluster
    column's values, else each scan (``case_id``, else its position within its model)."""
    col = rows.attrs.get("cluster")
    if col is not None and col in rows.columns:
        ids = rows[col].astype(str).to_numpy()
    elif "case_id" in rows.columns:
        ids = rows["case_id"].astype(str).to_numpy()
    elif "model" in rows.columns:
        ids = rows.groupby(rows["model"].astype(str)).cumcount().astype(str).to_numpy()
    else:
        ids = np.arange(len(rows)).astype(str)
    codes, uniq = pd.factorize(ids, sort=True)
    return codes.astype(np.int64), len(uniq)


def _cluster_weights(rng, n_clusters: int, n_boot: int) -> np.ndarray:
    """(B, C) multiplicities of each cluster in each replicate: C indices drawn with
    replacement per replicate (rows of draws, then one offset bincount)."""
    out = np.empty((n_boot, n_clusters), dtype=np.float64)
    per = max(1, (2 ** 24) // max(n_clusters, 1))
    for s in range(0, n_boot, per):
        b = min(per, n_boot - s)
        idx = rng.integers(0, n_clusters, size=(b, n_clusters))
        flat = (idx + n_clusters * np.arange(b)[:, None]).ravel()
        out[s:s + b] = np.bincount(flat, minlength=b * n_clusters).reshape(b, n_clusters)
    return out


# ============================================================================ one model

class _Setup:
    """One model's fit and what the decomposition needs from it."""

    @classmethod
    def build(cls, fit, rows, group, comp, ref, pieces, method, outcome, clusters, nagq,
              shares=()):
        from stats.adjust import _design_rows, estimable, null_basis

        self = cls()
        ((self.key, mf),) = fit.fits.items()
        self.fit, self.mf, self.method, self.nagq = fit, mf, method, nagq
        self.group, self.comp, self.ref, self.outcome = group, comp, ref, outcome
        data = mf.design.data
        # the rows the fit used (every one: complete cases were taken before), by index
        pos = pd.Index(rows.index).get_indexer(data.index)
        self.clusters = clusters[pos]
        self.data = data
        d = mf.design
        self.X_all = _design_rows(mf, data, full=True)
        self.all_terms = list(d.all_terms)
        self.kept = np.array([self.all_terms.index(t) for t in d.terms], dtype=np.int64)
        slices = d.design_info.term_name_slices
        self.slices = [slices["Intercept"], slices[group]]
        self.codes, self.names = [], []
        self.site_piece = None
        for name, kind, term, col in pieces:
            if kind == "random":
                self.site_piece = 2 + len(self.codes)
                self.slices.append(None)
                self.site_column = col
            else:
                self.slices.append(slices[term])
            self.codes.append(_codes(data[col]))
            self.names.append(name)
        # the site shares (within_site) belong to the site's piece
        self.shares = list(shares)
        self.site_slices = [slices[t] for t, _ in self.shares]
        self.within_site = bool(self.shares)
        covered = sorted(i for sl in self.slices + self.site_slices if sl is not None
                         for i in range(len(self.all_terms))[sl])
        if covered != list(range(len(self.all_terms))):   # pragma: no cover - by construction
            raise RuntimeError("decompose_gap: the design has columns outside the pieces")
        self.random_site = self.site_piece is not None
        self.y = data[outcome].to_numpy(dtype=float)
        gl = data[group].astype(str).to_numpy()
        self.R = np.flatnonzero(gl == str(ref))
        self.C = np.flatnonzero(gl == str(comp))
        self.k = len(self.codes)
        self.n_estimands = 3 + self.k + 2      # + mean_c F_r, the model residual
        self.flags = [f for f in mf.flags().split(";") if f]
        self.label = mf.method_label
        if self.random_site:   # the site codes, in the fit's random_effects() levels
            self.site_levels = sorted(map(str, pd.unique(data[self.site_column].astype(str))))
            self.site_code = pd.Index(self.site_levels).get_indexer(
                data[self.site_column].astype(str).to_numpy())
        if self.shares:   # what a replicate's shares are recomputed from
            n = len(self.y)
            self.share_site = sparse.csr_matrix(
                (np.ones(n), (np.arange(n), self.site_code)), shape=(n, len(self.site_levels)))
            self.share_ind = np.column_stack([(gl == lv).astype(float) for _, lv in self.shares])
            self.share_full = np.column_stack([data[t].to_numpy(float) for t, _ in self.shares])
            # each share's column among the fitted coefficients (absent: aliased by the fit)
            self.share_cols = [int(np.flatnonzero(self.kept == j)[0])
                               if np.any(self.kept == j) else -1
                               for sl in self.site_slices for j in range(len(self.all_terms))[sl]]
        # estimability of the counterfactual rows (the comparison at the reference level)
        cf = data.iloc[self.C].copy()
        cats = data[group].cat.categories
        cf[group] = pd.Categorical.from_codes(np.full(len(cf), cats.get_loc(
            next(c for c in cats if str(c) == str(ref)))), categories=cats)
        Xcf = _design_rows(mf, cf, full=True)
        self.beta = np.asarray(mf.beta, float)
        self.estimable = bool(estimable(Xcf, null_basis(mf)).all()) and bool(
            np.all(np.isfinite(self.beta)))
        if not self.estimable:
            self.flags.append("not_estimable")
        if min(len(self.R), len(self.C)) < SMALL_LEVEL:
            self.flags.append("small_n")
        self.site_effects = self._site_effects(fit) if self.random_site else None
        return self

    def _site_effects(self, fit) -> np.ndarray:
        re = fit.random_effects()
        eff = re[re["estimand"] == "group_effect"]
        mine = eff["group_var"].astype(str) == str(self.site_column)
        eff = eff[mine] if mine.any() else eff
        out = np.zeros(len(self.site_levels))
        if len(eff):
            ix = pd.Index(self.site_levels).get_indexer(eff["group_level"].astype(str))
            ok = ix >= 0
            out[ix[ok]] = np.nan_to_num(eff["estimate"].to_numpy(float)[ok])
        return out

    # ------------------------------------------------------------------ pieces
    def share_values(self, W: np.ndarray) -> np.ndarray:
        """(b, n, q) each row's site share in each replicate (weights ``W`` (b, n), data
        order): the share of the level among the replicate's rows of the site; a site
        without rows in a replicate keeps the full data's share (its rows weigh 0)."""
        den = np.asarray((self.share_site.T @ W.T).T)                 # (b, G)
        out = np.empty((len(W), len(self.y), len(self.shares)))
        for j in range(len(self.shares)):
            num = np.asarray((self.share_site.T @ (W * self.share_ind[:, j]).T).T)
            with np.errstate(invalid="ignore", divide="ignore"):
                sh = num / den
            full = self.share_full[:, j]
            out[:, :, j] = np.where(den[:, self.site_code] > 0, sh[:, self.site_code],
                                    full[None, :])
        return out

    def pieces(self, betas: np.ndarray, sites: np.ndarray | None,
               shares: np.ndarray | None = None) -> np.ndarray:
        """(b, n, 2 + k) parts of the linear predictor: intercept, group, covariates
        (``shares``: each replicate's site shares, else the full data's)."""
        b = len(betas)
        full = np.zeros((b, len(self.all_terms)))
        full[:, self.kept] = np.nan_to_num(betas, nan=0.0)
        n = len(self.y)
        P = np.empty((b, n, 2 + self.k))
        for j, sl in enumerate(self.slices):
            if sl is not None:
                P[:, :, j] = np.einsum("np,bp->bn", self.X_all[:, sl], full[:, sl])
        if self.site_piece is not None:
            P[:, :, self.site_piece] = sites[:, self.site_code]
            for j, sl in enumerate(self.site_slices):   # the site's shares: part of its effect
                if shares is None:
                    P[:, :, self.site_piece] += np.einsum("np,bp->bn", self.X_all[:, sl],
                                                          full[:, sl])
                else:
                    P[:, :, self.site_piece] += shares[:, :, j] * full[:, sl][:, :1]
        return P

    def _crude_only(self, W: np.ndarray) -> np.ndarray:
        """The crude gap alone (the model's parts not estimable: NaN)."""
        out = np.full((len(W), self.n_estimands), np.nan)
        wR, wC = W[:, self.R], W[:, self.C]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, 0] = ((wC * self.y[self.C]).sum(axis=1) / wC.sum(axis=1)
                         - (wR * self.y[self.R]).sum(axis=1) / wR.sum(axis=1))
        return out

    def point(self) -> np.ndarray:
        if not self.estimable:
            return self._crude_only(np.ones((1, len(self.y))))[0]
        P = self.pieces(self.beta[None], None if self.site_effects is None
                        else self.site_effects[None])
        return _decompose(P, self.y, np.ones((1, len(self.y))), self.R, self.C,
                          self.codes)[0]

    # ------------------------------------------------------------------ bootstrap
    def replicates(self, W_all: np.ndarray) -> tuple[np.ndarray, int]:
        B = len(W_all)
        out = np.full((B, self.n_estimands), np.nan)
        if not self.estimable:
            return self._crude_only(W_all[:, self.clusters]), 0
        solver = _BatchNewton.for_setup(self)
        n, p = len(self.y), len(self.kept)
        per = max(1, _BLOCK_ELEMENTS // max(n * (p + self.k + 2), 1))
        n_refit = 0
        for s in range(0, B, per):
            Wb = W_all[s:s + per][:, self.clusters]
            V = self.share_values(Wb) if self.shares else None
            if solver is not None:
                betas, sites, bad = solver.fit(Wb, V)
            else:
                betas = np.full((len(Wb), p), np.nan)
                sites = np.zeros((len(Wb), len(self.site_levels))) if self.random_site else None
                bad = np.ones(len(Wb), dtype=bool)
            for i in np.flatnonzero(bad):   # per-replicate refits (GEE, AGQ, failures)
                betas[i], site_i = self._refit(Wb[i])
                if sites is not None:
                    sites[i] = site_i
                n_refit += 1
            P = self.pieces(betas, sites, V)
            out[s:s + len(Wb)] = _decompose(P, self.y, Wb, self.R, self.C, self.codes)
        return out, n_refit

    def _refit(self, w: np.ndarray):
        """One replicate refitted by stats.fit_adjusted on its duplicated rows."""
        from stats.models import fit_adjusted

        idx = np.repeat(np.arange(len(w)), w.astype(np.int64))
        frame = self.data.iloc[idx].reset_index(drop=True)
        for name, lv in self.shares:   # the replicate's own site shares
            ind = (frame[self.group].astype(str) == lv).astype(float)
            frame[name] = ind.groupby(frame[self.site_column].astype(str).to_numpy()).transform(
                "mean").to_numpy()
        f = self.fit
        # a boundary GLMM (SD 0) is the logistic model: its replicates keep SD 0
        boundary = self.random_site and not (self.mf.theta is not None and self.mf.theta > 0)
        try:
            if boundary:
                rf = fit_adjusted(frame, f.options.get("parsed", f.formula), group=None,
                                  method="fixed", population=None, cluster=None)
            else:
                rf = fit_adjusted(frame, f.options.get("parsed", f.formula), group=f.group,
                                  method=f.method, population=None, cluster=None,
                                  nagq=self.nagq)
        except Exception:   # a replicate that cannot be fitted: left out (NaN)
            return np.full(len(self.kept), np.nan), (
                np.zeros(len(self.site_levels)) if self.random_site else None)
        (rmf,) = rf.fits.values()
        est = dict(zip(rmf.design.terms, rmf.beta))
        beta = np.array([est.get(self.all_terms[j], 0.0) for j in self.kept], float)
        sites = None
        if self.random_site:
            sites = np.zeros(len(self.site_levels)) if boundary else self._site_effects(rf)
        return beta, sites

    # ------------------------------------------------------------------ output
    def table(self, point, reps, *, conf_level, n_dropped, n_clusters, n_refit,
              population, model) -> pd.DataFrame:
        k, names = self.k, self.names
        est_names = ["gap_total", "gap_case_mix", "gap_conditional"] + [
            f"contribution:{c}" for c in names[:k]]
        B = len(reps)
        vals = reps[:, :3 + k]
        finite = np.isfinite(vals)
        nb = finite.sum(axis=0)
        if B:
            lo, hi = percentile_interval(np.where(finite, vals, np.nan), conf_level)
            with np.errstate(invalid="ignore"):
                sd = np.array([np.std(vals[finite[:, j], j], ddof=1) if nb[j] > 1 else np.nan
                               for j in range(vals.shape[1])])
        else:
            lo = hi = sd = np.full(3 + k, np.nan)
        contrib = point[3:3 + k]
        order = np.argsort(-np.abs(np.nan_to_num(contrib)), kind="stable")
        rank = np.empty(k, dtype=np.int64)
        rank[order] = np.arange(1, k + 1)
        n_c, n_r = len(self.C), len(self.R)
        wR, wC = self.y[self.R], self.y[self.C]
        base = dict(model=model, group_var=self.group, group_level=f"{self.comp} vs {self.ref}",
                    conf_level=conf_level, n=n_c + n_r,
                    n_pos=n_c + n_r if population == "positives" else 0,
                    n_neg=n_c + n_r if population == "negatives" else 0,
                    method=f"gcomp-{self.label}-bootstrap" if B else f"gcomp-{self.label}",
                    flag=";".join(dict.fromkeys(self.flags)),
                    comparison=str(self.comp), reference=str(self.ref),
                    p_comparison=float(wC.mean()), p_reference=float(wR.mean()),
                    p_counterfactual=point[3 + k], model_residual=point[4 + k],
                    n_comparison=n_c, n_reference=n_r, n_clusters=n_clusters,
                    within_site=self.within_site,
                    n_refit=n_refit, n_dropped=n_dropped)
        rows = []
        for j in list(range(3)) + [3 + int(i) for i in order]:
            c = j - 3
            rows.append(dict(base, estimand=est_names[j], estimate=point[j],
                             std_error=sd[j], conf_low=lo[j], conf_high=hi[j],
                             n_boot=int(nb[j]) if B else 0,
                             covariate=names[c] if c >= 0 else "",
                             order=int(rank[c]) if c >= 0 else 0))
        return pd.DataFrame(rows)


def _codes(s: pd.Series) -> np.ndarray:
    codes, _ = pd.factorize(s.astype(object).to_numpy(), sort=False)
    return codes.astype(np.int64)


# ============================================================================ the parts

def _decompose(P: np.ndarray, y: np.ndarray, W: np.ndarray, R: np.ndarray, C: np.ndarray,
               codes: list[np.ndarray]) -> np.ndarray:
    """Per replicate (row of ``W``): gap_total, gap_case_mix, gap_conditional, the k
    Shapley contributions, mean_c F_r and the model residual."""
    b = len(W)
    k = len(codes)
    wR, wC = W[:, R], W[:, C]
    sR, sC = wR.sum(axis=1), wC.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        yR = (wR * y[R]).sum(axis=1) / sR
        yC = (wC * y[C]).sum(axis=1) / sC
        total = yC - yR
        gamma_r = P[:, R[0], 1]
        eta = P.sum(axis=2)                                       # (b, n) own level
        F_cc = (wC * expit(eta[:, C])).sum(axis=1) / sC
        F_rr = (wR * expit(eta[:, R])).sum(axis=1) / sR
        eta_rc = eta[:, C] - P[:, C, 1] + gamma_r[:, None]        # comparison at level r
        F_rc = (wC * expit(eta_rc)).sum(axis=1) / sC
    case_mix = F_rc - F_rr
    cond = total - case_mix
    resid = (yC - F_cc) - (yR - F_rr)
    v = np.empty((b, 2 ** k))
    v[:, 0], v[:, -1] = F_rr, F_rc
    base = P[:, R, 0] + gamma_r[:, None]                          # (b, N_r)
    eR, eC = P[:, R, 2:], P[:, C, 2:]
    codesR = np.column_stack([c[R] for c in codes]) if k else np.zeros((len(R), 0), np.int64)
    codesC = np.column_stack([c[C] for c in codes]) if k else np.zeros((len(C), 0), np.int64)
    for mask in range(1, 2 ** k - 1):
        inS = np.array([(mask >> j) & 1 for j in range(k)], dtype=bool)
        v[:, mask] = _coalition(base, eR, eC, wR, wC, sR, sC, codesR, codesC, inS)
    contrib = _shapley(v, k)
    return np.column_stack([total, case_mix, cond, contrib, F_rc, resid])


def _patterns(codes: np.ndarray):
    """Distinct rows of ``codes``: (inverse, first row of each pattern, count)."""
    if codes.shape[1] == 0:
        return np.zeros(len(codes), np.int64), np.zeros(1, np.int64), 1
    _, first, inv = np.unique(codes, axis=0, return_index=True, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    return inv, first, len(first)


def _coalition(base, eR, eC, wR, wC, sR, sC, codesR, codesC, inS) -> np.ndarray:
    """v(S) for every replicate: the reference rows' covariates outside S, the comparison
    rows' covariates in S, over every pair (as distinct patterns, weighted)."""
    invA, repA, UA = _patterns(codesR[:, ~inS])
    invC, repC, UC = _patterns(codesC[:, inS])
    oneA = sparse.csr_matrix((np.ones(len(invA)), (np.arange(len(invA)), invA)),
                             shape=(len(invA), UA))
    oneC = sparse.csr_matrix((np.ones(len(invC)), (np.arange(len(invC)), invC)),
                             shape=(len(invC), UC))
    WA = np.asarray((oneA.T @ wR.T).T)                            # (b, UA)
    WC = np.asarray((oneC.T @ wC.T).T)                            # (b, UC)
    a = base[:, repA] + eR[:, repA][:, :, ~inS].sum(axis=2)       # (b, UA)
    c = eC[:, repC][:, :, inS].sum(axis=2)                        # (b, UC)
    b = len(a)
    out = np.empty(b)
    per = max(1, _PAIR_ELEMENTS // max(UA * UC, 1))
    for s in range(0, b, per):
        sl = slice(s, s + per)
        F = expit(a[sl, :, None] + c[sl, None, :])
        out[sl] = np.einsum("bu,bv,buv->b", WA[sl], WC[sl], F)
    with np.errstate(invalid="ignore", divide="ignore"):
        return out / (sR * sC)


def _shapley(v: np.ndarray, k: int) -> np.ndarray:
    """Shapley values from coalition values ``v`` (b, 2**k), bit j of a coalition's index
    = covariate j in it."""
    out = np.zeros((len(v), k))
    fact = [math.factorial(i) for i in range(k + 1)]
    for j in range(k):
        bit = 1 << j
        for mask in range(2 ** k):
            if mask & bit:
                continue
            s = bin(mask).count("1")
            out[:, j] += fact[s] * fact[k - s - 1] / fact[k] * (v[:, mask | bit] - v[:, mask])
    return out


# ============================================================================ refits

class _BatchNewton:
    """Weighted refits of one model for many replicates at once (module notes): Newton
    steps on the exact weighted score, warm-started at the full-data fit, every
    replicate's system solved at once (:func:`stats._linalg.pd_solve_stack`)."""

    @classmethod
    def for_setup(cls, s: _Setup) -> _BatchNewton | None:
        mf = s.mf
        if s.method == "gee" or (s.method == "glmm" and s.nagq > 1):
            return None
        self = cls()
        self.X = np.ascontiguousarray(s.X_all[:, s.kept])
        self.y = s.y
        self.beta0 = s.beta.copy()
        # 0/1 indicator columns (not the intercept): the separation rule of stats.models
        binary = np.all(np.isin(self.X, (0.0, 1.0)), axis=0) & ~np.all(self.X == 1.0, axis=0)
        self.binary = np.flatnonzero(binary)
        self.Xbin = self.X[:, binary]
        self.absX = np.abs(self.X)
        self.random = bool(s.random_site and mf.theta is not None and mf.theta > 0)
        self.site_levels = getattr(s, "site_levels", None)
        self.zero_sites = s.random_site
        # the site shares' columns (within_site): each replicate has its own values, held
        # as deviations D (b, n, q) from the full data's, threaded through every product
        self.share_x = np.array([c for c in getattr(s, "share_cols", []) if c >= 0], np.int64)
        self.share_of = np.array([j for j, c in enumerate(getattr(s, "share_cols", []))
                                  if c >= 0], np.int64)
        self.order = None
        if self.random:
            g = s.site_code
            order = np.argsort(g, kind="stable")
            self.order = order
            self.g = g[order]
            self.G = len(s.site_levels)
            counts = np.bincount(self.g, minlength=self.G)
            self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            self.X, self.y = self.X[order], self.y[order]
            self.absX = self.absX[order]
            self.Xbin = self.Xbin[order]
            self.theta0 = float(mf.theta)
            self.u0 = s.site_effects / self.theta0
            self.phi0 = np.concatenate([[self.theta0], self.beta0])
        else:
            self.phi0 = self.beta0
        return self

    # -------------------------------------------------------------- the score
    def _lin(self, b, D):
        """(b, n) linear predictors ``X b`` of every replicate (its own shares: ``D``)."""
        eta = np.einsum("np,bp->bn", self.X, b)
        if D is not None:
            eta = eta + np.einsum("bnq,bq->bn", D, b[:, self.share_x])
        return eta

    def _xt(self, w, D):
        """(b, p) ``X' w`` of every replicate (its own shares: ``D``)."""
        out = np.einsum("bn,np->bp", w, self.X)
        if D is not None:
            out[:, self.share_x] += np.einsum("bn,bnq->bq", w, D)
        return out

    def _seg(self, a):
        return np.add.reduceat(a, self.starts, axis=1)

    def _modes(self, eta0, theta, W, u):
        """Conditional modes of every replicate's groups at once (Newton with a capped
        step, halved where it does not increase ``l_g(u) - u^2 / 2``: stats.models.glmm)."""
        y, g = self.y, self.g
        th = theta[:, None]

        def pen(uu):
            eta = eta0 + th * uu[:, g]
            return self._seg(W * (y * eta - np.logaddexp(0.0, eta))) - 0.5 * uu * uu

        f = None
        for _ in range(100):
            p = expit(eta0 + th * u[:, g])
            R = self._seg(W * (y - p))
            S = self._seg(W * p * (1.0 - p))
            step = np.clip((th * R - u) / (1.0 + th * th * S), -3.0, 3.0)
            step = np.where(np.isfinite(step), step, 0.0)   # a failed replicate: left
            big = np.max(np.abs(step), initial=0.0)
            if big < 1e-11:
                break
            if big < 0.1:   # close to the mode: plain Newton (the warm-started case)
                u = u + step
                f = None
                continue
            f = pen(u) if f is None else f
            t = np.ones_like(u)
            for _ in range(40):
                cand = u + t * step
                fc = pen(cand)
                worse = fc < f - 1e-13 * (1.0 + np.abs(f))
                if not worse.any():
                    break
                t[worse] *= 0.5
            u, f = np.where(worse, u, cand), np.where(worse, f, fc)
        return u

    def score(self, phi, W, u=None, D=None):
        """Gradient of each replicate's weighted log-likelihood (Laplace for the GLMM, in
        (SD, beta): the formulas of stats.models.glmm with trials = weights), and the
        conditional modes."""
        if not self.random:
            eta = self._lin(phi, D)
            return self._xt(W * (self.y - expit(eta)), D), None
        theta, b = phi[:, 0], phi[:, 1:]
        eta0 = self._lin(b, D)
        u = self._modes(eta0, theta, W, np.tile(self.u0, (len(phi), 1)) if u is None else u)
        g, y = self.g, self.y
        th = theta[:, None]
        p = expit(eta0 + th * u[:, g])
        v = W * p * (1.0 - p)
        r = W * (y - p)
        v1 = v * (1.0 - 2.0 * p)
        S, R, S1 = self._seg(v), self._seg(r), self._seg(v1)
        th2 = th * th
        H = 1.0 + th2 * S
        w = r - 0.5 * th2 * v1 / H[:, g] + 0.5 * th2 * th2 * v * (S1 / (H * H))[:, g]
        grad_b = self._xt(w, D)
        du_dt = (R - th * u * S) / H
        dH_dt = 2.0 * th * S + th2 * S1 * (u + th * du_dt)
        grad_t = np.sum(R * u - 0.5 * dH_dt / H, axis=1)
        return np.column_stack([grad_t, grad_b]), u

    def information(self, phi, W, u, D=None) -> np.ndarray:
        """Minus the Hessian of each replicate's log-likelihood, (b, k, k): analytic for
        the logistic model, central differences of the analytic gradient (step 1e-4
        relative) for the GLMM, symmetrised."""
        if not self.random:
            p = expit(self._lin(phi, D))
            if D is None:
                return np.einsum("bnp,nq->bpq", (W * p * (1.0 - p))[:, :, None] * self.X,
                                 self.X)
            Xb = np.repeat(self.X[None], len(phi), axis=0)
            Xb[:, :, self.share_x] += D
            return np.einsum("bnp,bnq->bpq", (W * p * (1.0 - p))[:, :, None] * Xb, Xb)
        b, k = phi.shape
        out = np.empty((b, k, k))
        for j in range(k):   # parameters (k ~ 20), not replicates
            h = 1e-4 * np.maximum(np.abs(phi[:, j]), 1.0)
            e = np.zeros_like(phi)
            e[:, j] = h
            up, _ = self.score(phi + e, W, u, D)
            dn, _ = self.score(phi - e, W, u, D)
            out[:, :, j] = -(up - dn) / (2.0 * h[:, None])
        return 0.5 * (out + np.swapaxes(out, 1, 2))

    # -------------------------------------------------------------- the refits
    def fit(self, W: np.ndarray, shares: np.ndarray | None = None):
        """``(betas (b, p), site effects (b, G) or None, failed (b,))`` for replicate
        weights ``W`` (b, n) in the design's row order (``shares`` (b, n, q): each
        replicate's site shares, :meth:`_Setup.share_values`)."""
        D = None
        if shares is not None and len(self.share_x):
            V = shares if self.order is None else shares[:, self.order]   # X's row order
            D = V[:, :, self.share_of] - self.X[None][:, :, self.share_x]
        # separation in a replicate (stats.models' rule, by exact weighted counts): a 0/1
        # column whose rows of positive weight all have one outcome has an infinite ML
        # log-odds ratio; its rows are fitted with certainty and the other parameters on
        # the rest (weight 0 here), the column's coefficient +-40
        if self.random:
            W = W[:, self.order]
        yb = self.y[:, None]
        n1 = W @ (self.Xbin * yb)
        n0 = W @ (self.Xbin * (1.0 - yb))
        sep_b = ((n1 + n0) > 0) & ((n1 == 0) | (n0 == 0))           # (b, binary)
        sign = np.where(n0 == 0, 1.0, -1.0)
        if sep_b.any():
            W = np.where((sep_b.astype(float) @ self.Xbin.T) > 0, 0.0, W)
        b = len(W)
        # columns without a row of positive weight (an empty level): held at their start
        empty = (W @ self.absX) == 0
        sites = None
        if self.random:
            phi, u, done, boundary = self._newton(W, empty, random=True, D=D)
            if boundary.any():   # SD at 0 (lme4's boundary): the logistic model's fit
                sub = np.flatnonzero(boundary)
                pg, _, dg, _ = self._newton(W[sub], empty[sub], random=False,
                                            D=None if D is None else D[sub])
                phi[sub, 1:], phi[sub, 0], done[sub] = pg, 0.0, dg
                u[sub] = 0.0
        else:
            phi, u, done, _ = self._newton(W, empty, random=False, D=D)
        failed = ~done | ~np.all(np.isfinite(phi), axis=1)
        off = 1 if self.random else 0
        betas = phi[:, off:].copy()
        rr, cc = np.nonzero(sep_b)
        betas[rr, self.binary[cc]] = sign[rr, cc] * _SEPARATED
        if self.random:
            theta = phi[:, 0]
            ok = ~failed & (theta > 0)
            u_fin = np.zeros_like(u)
            if ok.any():
                eta0 = self._lin(phi[ok, 1:], None if D is None else D[ok])
                u_fin[ok] = self._modes(eta0, theta[ok], W[ok], u[ok])
            sites = theta[:, None] * u_fin
        elif self.zero_sites:
            sites = np.zeros((b, len(self.site_levels)))
        betas[failed] = np.nan
        return betas, sites, failed

    def _newton(self, W, empty, *, random: bool, D=None):
        """Newton iterations for every replicate at once (``random``: the GLMM in (SD,
        beta), else the logistic model in beta). Where a replicate's information is not
        positive definite (the GLMM's deviance is not convex in the SD near 0), the step
        uses its absolute eigenvalues (a saddle-free Newton step). A GLMM replicate whose
        SD falls below stats.models.glmm.SINGULAR_SD is on the boundary (returned
        ``boundary``: refitted as the logistic model by the caller)."""
        from stats.models.glmm import SINGULAR_SD

        b = len(W)
        was = self.random
        self.random = random
        try:
            phi0 = self.phi0 if random else (self.phi0[1:] if was else self.phi0)
            off = 1 if random else 0
            ea_all = np.concatenate([np.zeros((b, off), bool), empty], axis=1)
            phi = np.tile(phi0, (b, 1))
            u = np.tile(self.u0, (b, 1)) if random else None
            active = np.arange(b)
            done = np.zeros(b, dtype=bool)
            boundary = np.zeros(b, dtype=bool)
            info, reuse, p_prev = None, False, None
            for it in range(NEWTON_MAX_ITER):
                if not len(active):
                    break
                Wa, ua = W[active], None if u is None else u[active]
                Da = None if D is None else D[active]
                g, ua = self.score(phi[active], Wa, ua, Da)
                # the GLMM's finite-difference information costs 2k gradients: taken at
                # the first two iterations and after any large step, else the last one's
                # (a chord step; the fixed point is the exact score's root either way)
                if not (random and reuse and it >= 2 and info is not None):
                    info = self.information(phi[active], Wa, ua, Da)
                ea = ea_all[active]
                g = np.where(ea, 0.0, g)
                eye = np.eye(g.shape[1], dtype=bool)[None]
                info = np.where(ea[:, :, None] | ea[:, None, :], np.where(eye, 1.0, 0.0), info)
                step, good = pd_solve_stack(info, g)
                if not good.all():   # saddle-free: |eigenvalues| (floored)
                    bad = np.flatnonzero(~good & np.all(np.isfinite(info), axis=(1, 2)))
                    if len(bad):
                        lam, V = sym_eigh(info[bad])
                        lam = np.maximum(np.abs(lam), FLAT_EIG * np.max(np.abs(lam), axis=1,
                                                                    keepdims=True))
                        with np.errstate(all="ignore"):
                            sf = np.einsum("bij,bj->bi", V, np.einsum("bji,bj->bi", V,
                                                                      g[bad]) / lam)
                        # a step along a nearly flat direction: at most 1 per parameter
                        scale = np.maximum(1.0, np.max(np.abs(sf), axis=1))
                        step[bad] = sf / scale[:, None]
                        good[bad] = True
                good &= np.all(np.isfinite(step), axis=1)
                step = np.where(good[:, None], step, 0.0)
                # a trust region: the SD moves by at most half its value (at least 0.05),
                # a coefficient by at most 1 (a warm start is close; a full Newton step
                # from a concave-in-SD region can jump far)
                lim = np.full(step.shape, 1.0)
                if random:
                    lim[:, 0] = np.maximum(0.5 * phi[active, 0], 0.05)
                shrink = np.min(np.minimum(1.0, lim / np.maximum(np.abs(step), 1e-300)),
                                axis=1)
                step = step * shrink[:, None]
                new = phi[active] + step
                if random:   # the deviance is even in the SD: keep it >= 0 (modes flip)
                    neg = new[:, 0] < 0
                    new[neg, 0] = -new[neg, 0]
                    ua[neg] = -ua[neg]
                phi[active] = new
                if u is not None:
                    u[active] = ua
                big = np.max(np.abs(step) / (1.0 + np.abs(new)), axis=1)
                # quasi-complete separation (no finite ML estimate: coefficients diverge
                # while the fitted probabilities of the replicate's rows settle at 0 or 1):
                # stopped once those probabilities move less than SETTLED
                eta = self._lin(new[:, off:], Da)
                if random:
                    eta = eta + new[:, :1] * ua[:, self.g]
                p_new = np.where(Wa > 0, expit(eta), 0.0)
                settled = np.zeros(len(new), dtype=bool)
                if p_prev is not None and len(p_prev) == len(p_new):
                    settled = np.max(np.abs(p_new - p_prev), axis=1) < SETTLED
                fin = good & ((big < NEWTON_TOL) | settled)
                bnd = good & ~fin & (new[:, 0] < SINGULAR_SD) if random else np.zeros_like(fin)
                done[active[fin]] = True
                boundary[active[bnd]] = True
                keep = good & ~fin & ~bnd
                active = active[keep]
                p_prev = p_new[keep]
                if random:
                    info = info[keep]
                    reuse = bool(np.max(big[keep], initial=0.0) < 1e-3)
            return phi, u, done, boundary
        finally:
            self.random = was
