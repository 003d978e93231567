"""Adjusted sensitivities (or specificities) from a fitted model: emmeans-style marginal
means and standardized (g-computation) means.

``kind="emmeans"`` (Lenth's estimated marginal means): a reference grid of every level of
every factor in the formula (levels present in the fit) crossed, numeric variables at
their mean over the fitted rows (a transformed covariate such as
``np.log(tumor_size_mm)`` is evaluated at the mean of ``tumor_size_mm``, as emmeans
does). For each level of ``by`` the linear predictors of its grid rows are averaged with
equal weights, ``eta = L beta``, ``SE = sqrt(L V L')``; the estimate is ``expit(eta)``
with delta-method SE ``SE * p (1 - p)`` and the CI ``expit(eta +- z SE)`` (emmeans'
``type = "response"``, asymptotic df). For a GLMM this is conditional on a group effect
of 0 (a typical site). The covariance is the fit's: Hessian-based for a GLMM (as emmeans
on ``glmer``), the sandwich for GEE, and for ``method="fixed"`` the cluster-robust
``vcovCL(type = "HC1")`` by patient, so the SEs and CIs equal
``emmeans(glm, ~by, type = "response", vcov. = sandwich::vcovCL(glm, cluster =
~patient_id, type = "HC1"))``, NOT plain ``emmeans(glm, ~by)``, whose model-based SEs
ignore the within-patient correlation (``emmeans_from`` takes any covariance). For the
site-fixed model the ``site`` factor is in the grid, so its levels are averaged with
equal weight, as emmeans does.

Validated against R's emmeans 1.8.4 (tests/stats/test_adjust.py,
fixtures tests/r/models_glmer.R): on the same coefficients and covariance the grid and
delta method reproduce emmeans to 1e-8 (glmer, and glm with the model-based covariance);
from our own fits, probabilities, SEs and limits: glmer 2.9e-6 absolute against
converged lme4 (4.1e-4 against default lme4; tested to 1e-5), site-fixed glm with the
cluster-robust covariance 6e-15 (tested to 1e-8).

``kind="standardized"`` (g-computation over the observed cohort): every fitted row is
set to the level of ``by``, the predicted probability is averaged over the rows and, for
a GLMM, over the random-intercept distribution N(0, SD^2) by Gauss-Hermite quadrature
(``n_nodes`` nodes; nested site and patient intercepts: their sum, N(0, SD_site^2 +
SD_patient^2))::

    P(by = l) = mean_i sum_k w_k expit(x_i(l)' beta + SD z_k).

Its SE is the delta method with the gradient in (SD, beta) and the full covariance from
the Hessian (beta only for GEE/fixed fits); the CI is a Wald interval on the logit scale,
back-transformed (it stays inside (0, 1)). For ``method="fixed"`` each row keeps its own
site effect (no integration).

**Estimability.** When the fitted model matrix is rank deficient (a factor level or an
interaction cell without data, e.g. ``detected ~ phase * age_group`` with no delayed-phase
scans under 40), a mean that needs the missing cell has no unique value: emmeans reports
it "nonEst", and any number computed for it depends on which column the fit dropped,
hence on the reference levels. Such a mean is NaN (estimate, SE, limits) with flag
``not_estimable``, for both kinds: ``emmeans`` when its grid row average ``L`` has a
component in the null space of the model matrix (R's ``estimability::is.estble``, tol
1e-8), ``standardized`` when any counterfactual row's prediction does. Estimable means
do not depend on the reference levels. Validated against emmeans 1.8.4 and an R
g-computation on an empty-cell fixture under two reference choices
(tests/r/emmeans_nonest.R; tests/stats/test_estimability.py): same not-estimable levels;
estimable probabilities 2.5e-13, SEs and limits 1.8e-8 (R's glm covariance at epsilon
1e-10; tested to 1e-10 and 5e-8).
"""
from __future__ import annotations

import itertools
from typing import Literal

import numpy as np
import pandas as pd
import patsy
from scipy.special import expit, logit

from stats._linalg import clean_variance, gram, matvec, pd_solve, pivoted_solve, rmatvec
from stats.intervals import wald_reference
from stats.schema import ContractError, tidy

ESTIMANDS = {"positives": "adjusted_sensitivity", "negatives": "adjusted_specificity",
             None: "adjusted_probability"}


def _by_list(by) -> list[str]:
    return [by] if isinstance(by, str) else list(by)


def _levels(s: pd.Series) -> list:
    if isinstance(s.dtype, pd.CategoricalDtype):
        present = set(pd.unique(s.dropna()))
        return [c for c in s.cat.categories if c in present]
    return sorted(pd.unique(s.dropna()).tolist(), key=str)


def _factor_vars(mf) -> tuple[list[str], list[str]]:
    """Formula variables of a fit: (factors, numerics), from the fitted data frame."""
    d = mf.design
    data = d.data
    named = set(d.parsed.rhs_columns())   # source columns, from the parsed formula
    used = [c for c in data.columns if c != d.outcome and c in named]
    factors = [c for c in used if isinstance(data[c].dtype, pd.CategoricalDtype)]
    numerics = [c for c in used if c not in factors]
    return factors, numerics


def _design_rows(mf, frame: pd.DataFrame, *, full: bool = False) -> np.ndarray:
    """Model-matrix rows of ``frame``: the fit's columns, or with ``full`` every column
    patsy builds (``design.all_terms``, dropped ones included)."""
    d = mf.design
    X = patsy.build_design_matrices([d.design_info], frame, return_type="dataframe")[0]
    return X[d.all_terms if full else d.terms].to_numpy(dtype=float)


def null_basis(mf) -> np.ndarray:
    """Basis (columns over ``design.all_terms``) of the null space of the fitted model
    matrix, from the columns the fit dropped: an empty column j gives ``e_j``, an aliased
    one ``e_j - sum_k c_jk e_k`` with ``X_j = X_kept c_j`` (estimability::nonest.basis
    spans the same space). Empty when every column was kept."""
    d = mf.design
    dropped = [t for t in d.all_terms if t in d.dropped]
    if not dropped:
        return np.zeros((len(d.all_terms), 0))
    X_all = _design_rows(mf, d.data, full=True)
    pos = {t: i for i, t in enumerate(d.all_terms)}
    kept = [pos[t] for t in d.terms]
    cols = [pos[t] for t in dropped]
    # X_j = X_kept c_j by the normal equations (kept columns are not aliased), no LAPACK
    Xk, Xd = X_all[:, kept], X_all[:, cols]
    G, R = gram(Xk), np.einsum("ni,nj->ij", Xk, Xd)
    C = pd_solve(G, R)
    if C is None:
        C = np.column_stack([pivoted_solve(G, R[:, j]) for j in range(R.shape[1])])
    N = np.zeros((len(d.all_terms), len(cols)))
    N[cols, np.arange(len(cols))] = 1.0
    N[kept, :] = -C
    return N / np.linalg.norm(N, axis=0)


def estimable(L: np.ndarray, N: np.ndarray, tol: float = 1e-8) -> np.ndarray:
    """Rows of ``L`` (over all_terms) that are estimable: ``|N' l|^2 < tol |l|^2``, the
    rule of R's estimability::is.estble (emmeans' "nonEst")."""
    L = np.atleast_2d(L)
    if N.shape[1] == 0:
        return np.ones(len(L), dtype=bool)
    chk = L @ N
    ss = np.sum(L * L, axis=1)
    return np.sum(chk * chk, axis=1) < tol * np.where(ss < tol, 1.0, ss)


def reference_grid(mf) -> pd.DataFrame:
    """The emmeans reference grid of one model fit (factors crossed, numerics at means)."""
    data = mf.design.data
    factors, numerics = _factor_vars(mf)
    levels = [_levels(data[c]) for c in factors]
    grid = pd.DataFrame(list(itertools.product(*levels)), columns=factors)
    for c in factors:
        grid[c] = pd.Categorical(grid[c], categories=data[c].cat.categories)
    for c in numerics:
        grid[c] = float(pd.to_numeric(data[c]).mean())
    return grid


#: the kinds of adjusted means (emmeans' equal-weight grid; g-computation over the cohort)
MeansKind = Literal["emmeans", "standardized"]


def marginal_means(fit, by, *, kind: MeansKind = "emmeans",
                   conf_level: float = 0.95, n_nodes: int = 32) -> pd.DataFrame:
    """Adjusted probabilities per level of ``by`` (see the module notes).

    Parameters
    ----------
    fit : stats.models.Fit
    by : str or list of str
        Factor(s) of the formula; several give their crossed levels.
    kind : {"emmeans", "standardized"}
        With ``kind="emmeans"`` the covariance is the fit's own (for ``method="fixed"``
        the cluster-robust one: SEs differ from plain ``emmeans(glm)``, which is
        model-based; see the module notes).

    Returns
    -------
    DataFrame
        Tidy contract with grouping ``model, group_var, group_level``: ``estimand``
        ``adjusted_sensitivity`` (positives), ``adjusted_specificity`` (negatives) or
        ``adjusted_probability``; ``estimate`` (probability), ``std_error`` (delta
        method, probability scale), ``conf_low``/``conf_high``, ``n`` (fitted rows at
        that level), ``method`` (``emmeans-delta`` / ``g-computation-delta``), ``flag``
        (the fit's flags, plus ``not_estimable`` where the mean needs a cell without
        data: NaN estimate, as emmeans' "nonEst"); extras ``df`` (the t reference of
        the limits for a GEE with Mancl-DeRouen SEs, see :mod:`stats.models.gee`; NaN:
        normal), ``link_estimate``, ``link_std_error`` (logit scale).
    """
    if kind not in ("emmeans", "standardized"):
        raise ValueError(f"kind must be 'emmeans' or 'standardized'; got {kind!r}")
    cols = _by_list(by)
    rows = []
    for m, mf in fit.fits.items():
        df = float(mf.extra.get("df", np.inf))  # GEE with few clusters: t(df) limits
        z = wald_reference(df, conf_level)[0]
        data = mf.design.data
        missing = [c for c in cols if c not in data.columns or
                   not isinstance(data[c].dtype, pd.CategoricalDtype)]
        if missing:
            raise ContractError(f"marginal_means: by={missing} is not a factor of the formula "
                                f"{fit.formula!r}; choose one of its categorical variables")
        calc = _emmeans if kind == "emmeans" else _standardized
        for level, eta, se_eta, nrow in calc(mf, cols, n_nodes=n_nodes):
            p = expit(eta)
            rows.append(dict(estimand=ESTIMANDS.get(fit.population, "adjusted_probability"),
                             model=m, group_var=":".join(cols), group_level=":".join(map(str, level)),
                             estimate=p, std_error=se_eta * p * (1 - p),
                             conf_low=expit(eta - z * se_eta), conf_high=expit(eta + z * se_eta),
                             df=df if df != np.inf else np.nan,
                             conf_level=conf_level, n=nrow,
                             n_pos=nrow if fit.population == "positives" else (
                                 0 if fit.population == "negatives" else np.nan),
                             n_neg=nrow if fit.population == "negatives" else (
                                 0 if fit.population == "positives" else np.nan),
                             method="emmeans-delta" if kind == "emmeans" else "g-computation-delta",
                             flag=";".join(dict.fromkeys(x for x in (
                                 *mf.flags().split(";"), "not_estimable" if np.isnan(eta) else "")
                                 if x)),
                             link_estimate=eta, link_std_error=se_eta))
    return tidy(pd.DataFrame(rows), group_cols=("model", "group_var", "group_level"))


def _kept(mf) -> np.ndarray:
    d = mf.design
    return np.array([d.all_terms.index(t) for t in d.terms], dtype=np.int64)


def _level_counts(data: pd.DataFrame, cols: list[str]) -> dict[str, int]:
    """Fitted rows per combination of the ``cols`` values, keyed ``"\x1f".join(map(str,
    level))`` (a missing value counts as ``"nan"``): one grouped count, not a string join
    per row."""
    sizes = data.groupby(cols, observed=True, dropna=False, sort=False).size()
    keys = sizes.index if isinstance(sizes.index, pd.MultiIndex) else [(k,) for k in sizes.index]
    counts: dict[str, int] = {}
    for key, n in zip(keys, sizes.to_numpy()):   # one entry per level combination
        k = "\x1f".join(map(str, key))
        counts[k] = counts.get(k, 0) + int(n)
    return counts


def _emmeans(mf, cols, **_):
    grid = reference_grid(mf)
    Xg = _design_rows(mf, grid, full=True)
    N, kept = null_basis(mf), _kept(mf)
    data = mf.design.data
    keys = grid[cols].astype(str).agg("\x1f".join, axis=1).to_numpy()
    counts = _level_counts(data, cols)
    for level in itertools.product(*[_levels(data[c]) for c in cols]):
        key = "\x1f".join(map(str, level))
        L_all = Xg[keys == key].mean(axis=0)
        if not estimable(L_all, N)[0]:   # emmeans: "nonEst"
            yield level, np.nan, np.nan, int(counts.get(key, 0))
            continue
        L = L_all[kept]
        eta = float(np.sum(L * mf.beta))
        se = float(np.sqrt(_quad_form(L, mf.vcov)))
        yield level, eta, se, int(counts.get(key, 0))


def emmeans_from(mf, cols, beta, vcov):
    """emmeans with a given coefficient vector and covariance (e.g. R's, for validation)."""
    import dataclasses

    return list(_emmeans(dataclasses.replace(mf, beta=np.asarray(beta), vcov=np.asarray(vcov)),
                         cols))


def _quad_form(g: np.ndarray, V: np.ndarray) -> float:
    """``g' V g`` over the coefficients with ``g != 0`` (a separated term's NaN row of V
    multiplies a zero weight), without BLAS; rounding around 0 decided by rule
    (:func:`stats._linalg.clean_variance`, scale ``sum |g_i g_j V_ij|``): within 1e-12
    of it 0, clearly negative NaN."""
    idx = np.flatnonzero(np.asarray(g) != 0)
    if not len(idx):
        return 0.0
    gi, Vi = np.asarray(g, float)[idx], np.asarray(V, float)[np.ix_(idx, idx)]
    terms = gi[:, None] * Vi * gi[None, :]
    return float(clean_variance(np.sum(terms), np.sum(np.abs(terms))))


def _standardized(mf, cols, *, n_nodes=32):
    data = mf.design.data
    counts = _level_counts(data, cols)
    # nested intercepts (site + patient): their sum is normal with the summed variance
    sds = mf.variance_components() if hasattr(mf, "variance_components") else (
        {"group": mf.theta} if mf.theta is not None else {})
    theta = float(np.sqrt(sum(v ** 2 for v in sds.values()))) if len(sds) > 1 else (
        mf.theta if mf.theta is not None else 0.0)
    if mf.theta is not None and n_nodes > 1:
        x, w = np.polynomial.hermite_e.hermegauss(n_nodes)
        w = w / w.sum()
    else:
        x, w = np.zeros(1), np.ones(1)
    N, kept = null_basis(mf), _kept(mf)
    for level in itertools.product(*[_levels(data[c]) for c in cols]):
        frame = data.copy(deep=False)   # columns replaced below, never written into
        for c, v in zip(cols, level):
            cats = data[c].cat.categories
            frame[c] = pd.Categorical.from_codes(np.full(len(frame), cats.get_loc(v)), categories=cats)
        X_all = _design_rows(mf, frame, full=True)
        nrow = int(counts.get("\x1f".join(map(str, level)), 0))
        if not estimable(X_all, N).all():  # some row's prediction needs an empty cell
            yield level, np.nan, np.nan, nrow
            continue
        X = X_all[:, kept]
        eta = matvec(X, mf.beta)
        P = expit(eta[:, None] + theta * x[None, :])          # (n, K)
        dP = P * (1 - P)
        est = float(np.mean(matvec(P, w)))
        g_beta = rmatvec(X, matvec(dP, w)) / len(X)
        # the SD's row enters only where the fit estimated it (a boundary fit's SD is 0
        # with no SE: stats.models.glmm)
        if len(sds) > 1 and mf.vcov_full is not None:
            # d/d sigma_k = d/d sigma * sigma_k / sigma; a singular SD (NaN row, SD 0) has
            # weight 0 and drops out of the quadratic form
            d_sd = float(np.mean(matvec(dP, w * x)))
            vals = np.array(list(sds.values()), float)
            ok = np.isfinite(np.diag(mf.vcov_full)[:len(vals)]) & (vals > 0)
            g_sd = np.where(ok, d_sd * vals / theta if theta > 0 else 0.0, 0.0)
            var = _quad_form(np.concatenate([g_sd, g_beta]), mf.vcov_full)
        elif mf.theta is not None and mf.vcov_full is not None and np.isfinite(mf.vcov_full[0, 0]):
            g = np.concatenate([[np.mean(matvec(dP, w * x))], g_beta])
            var = _quad_form(g, mf.vcov_full)
        else:
            var = _quad_form(g_beta, mf.vcov)
        if not 0.0 < est < 1.0:   # a separated level: probability 1 (0), no logit SE
            yield level, float(logit(est)), np.nan, nrow
            continue
        yield level, float(logit(est)), float(np.sqrt(var)) / (est * (1 - est)), nrow


# ------------------------------------------------------------------------ contrasts

#: multiplicity adjustments of :func:`contrasts` (within each model and stratum)
ContrastAdjust = Literal["holm", "bonferroni", "none"]
MSG_CONTRAST_BY = ("contrasts: {arg}={cols} is not a factor of the formula {formula!r}; "
                   "choose one of its categorical variables ({factors})")
MSG_CONTRAST_ADJUST = ("contrasts: adjust must be 'holm', 'bonferroni' or 'none'; got {got!r}")


def _adjust_family(p: np.ndarray, how: str) -> np.ndarray:
    """Holm / Bonferroni adjusted p-values of one family (NaN p-values stay NaN and do not
    count), vectorised: Holm's ``max_{j <= i} min(1, (m - j + 1) p_(j))``."""
    out = np.full(len(p), np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if m == 0 or how == "none":
        return p.astype(float).copy() if how == "none" else out
    if how == "bonferroni":
        out[ok] = np.minimum(1.0, m * p[ok])
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def contrasts(fit, by, *, strata=None, adjust: ContrastAdjust = "holm",
              conf_level: float = 0.95) -> pd.DataFrame:
    """Pairwise odds ratios of the adjusted levels of ``by`` (emmeans' ``pairs``).

    The adjusted levels are emmeans' marginal means on the logit scale (the reference
    grid of :func:`reference_grid`, equal weights over the other factors, numerics at
    their means): ``eta_l = L_l beta``. For every pair ``l < m`` (levels in their order)
    the contrast is ``eta_l - eta_m`` with SE ``sqrt((L_l - L_m) V (L_l - L_m)')``, the
    fit's covariance (Hessian-based for a GLMM, the sandwich for GEE, the model-based one
    for a glm without clusters, the cluster-robust one for a site-fixed fit); the odds
    ratio ``exp(eta_l - eta_m)`` has the delta-method SE ``OR * SE`` (emmeans'
    ``type = "response"``). With ``strata`` the means and pairs are computed within each
    level of ``strata`` (emmeans ``~ by | strata``), averaging over the other factors.

    Parameters
    ----------
    fit : stats.models.Fit
    by : str or list of str
        Factor(s) whose levels are compared (several: their crossed levels).
    strata : str or list of str, optional
        Factor(s) within whose levels the pairs are formed.
    adjust : {"holm", "bonferroni", "none"}
        Multiplicity adjustment of the p-values within each model and stratum (emmeans'
        family; its default for pairs is Tukey, R users write ``adjust = "holm"``).
    conf_level : float

    Returns
    -------
    DataFrame
        Tidy contract, grouping ``model, group_var, stratum, group_level``: estimand
        ``odds_ratio``; ``group_var`` the ``by`` factor(s), ``stratum`` the ``strata``
        level (``""`` without strata), ``group_level`` the pair ``"l / m"`` (emmeans'
        label); ``estimate`` the odds ratio, ``std_error`` its delta-method SE,
        ``conf_low``/``conf_high`` ``exp(log OR +- q SE)`` (per comparison, not
        adjusted), ``statistic`` the Wald z (t for a GEE with Mancl-DeRouen SEs, with
        ``df``), ``p_value`` two-sided unadjusted, ``p_adjusted`` per ``adjust``,
        ``n`` the fitted rows at the two levels, ``method`` ``emmeans-pairs-wald``,
        ``flag`` (the fit's flags; ``not_estimable`` where a level's mean needs a cell
        without data, emmeans' nonEst); extras ``level1``, ``level2``, ``log_odds_ratio``,
        ``log_std_error``, ``df``, ``strata_var``, ``adjust``.

    Notes
    -----
    Validated against R's emmeans 1.8.4 ``pairs(emmeans(fit, ~ by, type = "response"),
    adjust = "holm")`` for glm (model-based covariance), geeglm (exchangeable, sandwich),
    glmer with one and with nested random intercepts (tests/r/contrasts_emmeans.R,
    tests/stats/test_contrasts.py).
    """
    from stats.models.fit import wald_reference

    if adjust not in ("holm", "bonferroni", "none"):
        raise ContractError(MSG_CONTRAST_ADJUST.format(got=adjust))
    cols = _by_list(by)
    scols = [] if strata is None else _by_list(strata)
    rows = []
    for m, mf in fit.fits.items():
        data = mf.design.data
        factors = [c for c in data.columns if isinstance(data[c].dtype, pd.CategoricalDtype)
                   and c in set(mf.design.parsed.rhs_columns())]
        for arg, cc in (("by", cols), ("strata", scols)):
            bad = [c for c in cc if c not in factors]
            if bad:
                raise ContractError(MSG_CONTRAST_BY.format(arg=arg, cols=bad,
                                                           formula=fit.formula,
                                                           factors=", ".join(factors)))
        df = float(mf.extra.get("df", np.inf))
        q, pfun = wald_reference(df, conf_level)
        grid = reference_grid(mf)
        Xg = _design_rows(mf, grid, full=True)
        N, kept = null_basis(mf), _kept(mf)
        counts = _level_counts(data, cols + scols) if scols else _level_counts(data, cols)
        bkeys = grid[cols].astype(str).agg("\x1f".join, axis=1).to_numpy()
        skeys = (grid[scols].astype(str).agg("\x1f".join, axis=1).to_numpy() if scols
                 else np.full(len(grid), ""))
        levels = list(itertools.product(*[_levels(data[c]) for c in cols]))
        slevels = (list(itertools.product(*[_levels(data[c]) for c in scols])) if scols
                   else [()])
        for st in slevels:
            fam = []
            sk = "\x1f".join(map(str, st))
            Ls = []
            for lv in levels:
                sel = (bkeys == "\x1f".join(map(str, lv))) & (skeys == sk)
                Ls.append(Xg[sel].mean(axis=0) if sel.any() else np.full(Xg.shape[1], np.nan))
            for i, j in itertools.combinations(range(len(levels)), 2):
                d_all = Ls[i] - Ls[j]
                ok = (np.all(np.isfinite(d_all)) and estimable(Ls[i], N)[0]
                      and estimable(Ls[j], N)[0])
                if ok:
                    dL = d_all[kept]
                    est = float(np.sum(dL * mf.beta))
                    se = float(np.sqrt(_quad_form(dL, mf.vcov)))
                else:
                    est = se = np.nan
                key = lambda lv: "\x1f".join(map(str, lv + st))   # noqa: E731
                n = counts.get(key(levels[i]), 0) + counts.get(key(levels[j]), 0)
                z = est / se if se > 0 else np.nan
                orr = float(np.exp(est))
                fam.append(dict(
                    estimand="odds_ratio", model=m, group_var=":".join(cols),
                    stratum=":".join(map(str, st)),
                    group_level=f"{':'.join(map(str, levels[i]))} / "
                                f"{':'.join(map(str, levels[j]))}",
                    estimate=orr, std_error=orr * se, conf_low=float(np.exp(est - q * se)),
                    conf_high=float(np.exp(est + q * se)), conf_level=conf_level,
                    statistic=z, p_value=float(pfun(z)), n=n,
                    method="emmeans-pairs-wald",
                    flag=";".join(dict.fromkeys(x for x in (
                        *mf.flags().split(";"), "" if ok else "not_estimable") if x)),
                    level1=":".join(map(str, levels[i])), level2=":".join(map(str, levels[j])),
                    log_odds_ratio=est, log_std_error=se,
                    df=df if df != np.inf else np.nan, strata_var=":".join(scols),
                    adjust=adjust))
            # one family per model and stratum (emmeans' "by" groups)
            adj = _adjust_family(np.array([r["p_value"] for r in fam], float), adjust)
            for r, a in zip(fam, adj):
                r["p_adjusted"] = a
            rows.extend(fam)
    cols_out = ("model", "group_var", "stratum", "group_level")
    if not rows:
        return tidy(pd.DataFrame(columns=["estimand", *cols_out]), group_cols=cols_out)
    return tidy(pd.DataFrame(rows), group_cols=cols_out)
