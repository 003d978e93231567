"""Partially pooled subgroup sensitivity and specificity: a binomial GLMM over the cells of
one axis or intersection, reported beside the crude cell proportions.

Model, per evaluated model and per axis (population: positives for sensitivity, outcome
``detected = pred``; negatives for specificity, outcome ``correct = 1 - pred``):

* one axis ``a``: ``detected ~ 1 + (1 | a)``;
* an intersection ``(a, b, ...)``: ``detected ~ a + b + ... + (1 | a:b:...)``: main
  effects fixed (treatment coding), a random intercept per cell.

Both are random-intercept binomial GLMMs fitted by maximum likelihood (Laplace, lme4's
``glmer`` default) with :func:`stats.models.glmm.fit_glmm` on the cells' binomial counts
(the fixed effects are constant within a cell, so the 0/1 rows of a cell and its count
give the same Laplace likelihood up to a constant; ``glmer`` on the 0/1 rows gives the same
fit). The cell prediction is on the probability scale, fixed part plus conditional mode:
``p_c = expit(eta_c)``, ``eta_c = x_c' beta + theta u_c`` (lme4's
``predict(fit, type = "response")``).

**Intervals** (on the logit scale, back-transformed; ``ci=``):

* ``"conditional"`` (method ``glmm-pooled-laplace-conditional``): Wald,
  ``eta_c +- z se_c``, ``se_c^2 = theta^2 / H_c + x_c' S^-1 x_c / H_c^2``: the conditional
  (prediction-error) variance of ``eta_c`` given ``theta``, from the joint Hessian of the
  penalised log-likelihood in ``(beta, u)``, ``H_c = 1 + theta^2 W_c``,
  ``W_c = n_c p_c (1 - p_c)``, ``S = sum_c x_c x_c' W_c / H_c``: the conditional-mode
  variance (lme4's ``condVar``) plus the fixed-effect variance, with their covariance
  (``se_logit``, checked against a dense inversion in R). It treats ``theta`` as known and
  under-covers: 81-92% in bench/pooled_coverage.md, worst when fits are singular
  (``theta = 0`` makes every cell's interval the fixed part's).
* ``"integrated"`` (the default; method ``glmm-pooled-laplace-integrated``): ``theta``
  integrated out. With a uniform prior on the cell SD over ``[0, 5]`` logits (Gelman 2006)
  and a diffuse N(0, 10^2) prior on each coefficient of ``beta`` (it keeps the integral
  proper when a level is separated), the marginal likelihood of ``theta`` (Laplace, ``u`` and
  ``beta`` integrated: ``l(beta_k, u_k) - |u_k|^2/2 - sum_c log(H_c)/2 - log det(S)/2`` at the
  joint modes) is evaluated on a 41-point grid (then refined where its mass lies); given
  each grid value, ``eta_c`` is normal with the joint-mode mean and the conditional
  variance above; the limits are the ``a/2`` and ``1 - a/2`` quantiles of that normal
  mixture. All grid values are solved at once (batched Newton), the quantiles by
  bisection for all cells at once. The point estimate stays lme4's (ML at ``theta_hat``).
  Coverage (bench/pooled_coverage.md, 1,000 replicates, cells of 5-50 positives, one axis
  of 5-12 levels or a 4 x 4 intersection, cell SD 0.25-1): 94.3-96.6% (in the 93.5-96.5%
  band but for 96.6% at SD 0.3 over 12 levels: conservative when the SD is small).

**Shrinkage weight**: ``1 / H_c = 1 / (1 + theta^2 n_c p_c (1 - p_c))``, the fraction of
the crude cell's logit deviation from the fixed-effect prediction that pooling removes
(0: the crude value stands; 1: the cell is predicted by the fixed part alone). It is the
precision-weight form of ``1 - (eta_c - x_c' beta) / (logit(crude_c) - x_c' beta)``, to
which it is equal to first order (the conditional mode solves
``theta u_c = theta^2 (y_c - n_c p_c)``); unlike that ratio it is defined for cells whose
crude value is 0 or 1.

**Repeated scans** (``cluster``, e.g. ``patient_id``; by default ``"auto"``: ``patient_id``
when a patient has several scans among the rows passed,
:func:`stats.clustered.resolve_cluster`): a design-effect inflation. The intra-patient
correlation of the outcome around the cell means is estimated per model
(one-way ANOVA, :func:`stats.precision.icc_anova`), each cell's design effect is
``1 + (m_c - 1) icc`` with ``m_c`` its Kish mean cluster size
(:func:`stats.precision.kish_cluster_size`), and the cell enters the fit with effective
counts ``y_c / deff_c`` of ``n_c / deff_c`` trials (a quasi-likelihood: the cell carries
the information of ``n_c / deff_c`` independent scans, so it is shrunk more and its
interval is wider). Coverage with patients of 1-4 scans (patient SD 1.5): 96.1% with
``cluster``, 92.5% without; with 1-8 scans (SD 2.5): 98.3% (conservative) with, 81.7%
without. A patient random intercept crossed with the cell intercept would need
a second variance component, which :mod:`stats.models.glmm` does not fit. A patient whose
scans fall in different cells counts as one cluster per cell.

Validated against R's lme4 1.1-31 ``glmer`` + ``predict(type = "response")``
(tests/r/pooled_lme4.R -> tests/r/pooled_lme4.csv; one axis and an intersection, positives
and negatives, two models): cell predictions agree to 6.3e-7 with lme4 run to convergence
and 9.3e-6 with lme4's defaults (tested: 1e-5 and 1e-3); the conditional SE agrees with a
dense inversion of the joint Hessian in R to 8.2e-7. The ``cluster`` fit (effective,
non-integer counts) is checked by a property (duplicated scans leave it unchanged), not
against R.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats as sps
from scipy.special import expit

from stats import _validate as _v
from stats._linalg import matvec, pd_inverse, pd_logdet, pd_solve_stack
from stats._threads import one_blas_thread
from stats.clustered import AUTO, clusters_per_cell, cluster_cases
from stats.detection import (GROUP_COLS, MSG_CLUSTER, MSG_CLUSTER_NA,  # noqa: F401 (re-exported)
                             _check_cluster, _levels, case_matrix, normalize_by, scan_level)
from stats.models.design import estimable_columns
from stats.models.fixed import fit_glm
from stats.models.glmm import fit_glmm
from stats.precision import icc_anova, kish_cluster_size
from stats.schema import tidy

Estimand = Literal["sensitivity", "specificity"]
ESTIMANDS = ("sensitivity", "specificity")
METHOD = "glmm-pooled-laplace"
CiMethod = Literal["integrated", "conditional"]
CI_METHODS = ("integrated", "conditional")
#: below this many non-empty cells the cell SD is poorly estimated (as stats.models)
MIN_CELLS = 5
#: the cell SD's prior for the integrated interval: uniform on [0, THETA_MAX] logits
THETA_MAX = 5.0
#: grid points over theta (two passes)
GRID = 41
#: prior SD of each fixed-effect coefficient (logits) in the integrated interval: diffuse,
#: it only keeps the integral proper when a level is separated (every cell all detected)
BETA_PRIOR_SD = 10.0

MSG_ESTIMAND = "estimand must be 'sensitivity' or 'specificity'; got {estimand!r}"
MSG_CI = "ci must be one of {allowed}; got {ci!r}"
MSG_BY = ("by: give one axis (a column name) or one intersection (a tuple of names, or "
          "'a:b'), or a list of them; got {by!r}")


def pooled_subgroup_metrics(cases: pd.DataFrame, by, estimand: Estimand = "sensitivity", *,
                            cluster: str | None = AUTO, threshold=None,
                            ci: CiMethod = "integrated", conf_level: float = 0.95,
                            small_n: int = 10) -> pd.DataFrame:
    """Partially pooled (GLMM) cell estimates of sensitivity or specificity, with the crude
    cell proportions and the shrinkage beside them.

    Parameters
    ----------
    cases : DataFrame
        A cases table with ``pred`` (or give ``threshold``); every model is fitted.
    by : str, tuple or list of them
        One axis (``"phase"``), one intersection (``("age_group", "phase")`` or
        ``"age_group:phase"``), or a list of them (one fit per entry).
    estimand : {"sensitivity", "specificity"}
        Sensitivity among reference positives, specificity among negatives.
    cluster : str or None, default "auto"
        Patient column when patients contribute several scans (design-effect inflation;
        see the module docstring). "auto": ``"patient_id"`` when that column exists and a
        patient has several scans among the rows passed, else None
        (:func:`stats.clustered.resolve_cluster`). None or "none": scans are treated as
        independent.
    threshold : float or {model: float}, optional
        Voxel threshold for ``pred`` (as :func:`stats.scan_level`).
    ci : {"integrated", "conditional"}
        Interval: the cell SD integrated out (default), or the plug-in conditional Wald
        interval (under-covers; module docstring).
    conf_level : float
    small_n : int
        Flag ``small_n`` where a cell has fewer positives (negatives) than this.

    Returns
    -------
    Tidy DataFrame, one row per model x cell (every level, or the full product of levels
    of an intersection, empty cells included): ``estimand``, ``model``, ``group_var``
    (``"a:b"`` for an intersection), ``group_level``, ``estimate`` (pooled, probability
    scale), ``std_error`` (NaN: the SE is on the logit scale, in ``se_logit``),
    ``conf_low``, ``conf_high``, ``conf_level``, ``n`` (scans in the cell), ``n_pos``,
    ``n_neg``, ``method`` ("glmm-pooled-laplace-integrated" or "-conditional"), ``flag``
    (";"-joined: ``empty``, ``small_n``, ``few_cells``, ``singular``, ``separation``,
    ``not_converged``, ``not_estimable``);
    extras ``crude_estimate``, ``numerator``, ``denominator`` (the crude counts),
    ``fixed_estimate`` (``expit(x_c' beta)``), ``shrinkage_weight`` (``1 / H_c``),
    ``se_logit``, ``group_sd`` (``theta``), ``design_effect`` (1 without ``cluster``),
    ``n_clusters`` (clusters with a scan among the cell's positives (negatives): the
    ``cluster`` column, else ``patient_id``, else every case its own, as
    :func:`stats.subgroup_metrics`).
    Empty cells keep NaN estimates; an empty ``cases`` table, a threshold that is not a
    finite number or ``conf_level`` outside (0, 1) raise :class:`~stats.schema.ContractError`.

    Notes
    -----
    Model, intervals, shrinkage weight and clustering: module docstring. Coverage of the
    intervals in simulation: bench/pooled_coverage.md. Validated against lme4 1.1-31's
    ``predict(glmer(...), type = "response")``: 6.3e-7 (converged lme4), 9.3e-6 (lme4
    defaults); tested to 1e-5 and 1e-3 (tests/r/pooled_lme4.R).
    """
    func = "pooled_subgroup_metrics"
    _v.table(cases, func=func)
    _v.threshold(threshold, func=func)
    conf_level = _v.level(conf_level, func=func)
    small_n = _v.whole(small_n, func=func, arg="small_n", minimum=0, fix="e.g. small_n=10")
    if estimand not in ESTIMANDS:
        raise ValueError(MSG_ESTIMAND.format(estimand=estimand))
    if ci not in CI_METHODS:
        raise ValueError(MSG_CI.format(allowed=CI_METHODS, ci=ci))
    specs = normalize_by(by)
    if not specs:
        raise ValueError(MSG_BY.format(by=by))
    if threshold is not None:
        cases = scan_level(cases, threshold=threshold)
    cases, cluster = cluster_cases(cases, cluster)
    if cluster is not None:
        _check_cluster(cases, cluster)
    cm = case_matrix(cases, specs, cluster=cluster)
    counts = cm.cell_counts()
    pos = estimand == "sensitivity"
    succ = counts["tp"] if pos else counts["tn"]                 # cells x models
    trials = counts["n_pos"] if pos else counts["n_neg"]         # cells
    in_pop = cm.label if pos else ~cm.label
    n_clusters = clusters_per_cell(cm.member, cm.patient, in_pop)  # cells
    deff = np.ones(succ.shape)
    if cluster is not None:
        deff = _design_effects(cm, cluster, in_pop)
    z = float(sps.norm.ppf(0.5 + conf_level / 2))
    frames = []
    for axis, cols in enumerate(specs, start=1):      # one block of cells per axis
        cells = np.flatnonzero(cm.cells["axis"].to_numpy() == axis)
        X = _cell_design(cm.covariates, cols)
        for j, model in enumerate(cm.models):         # one fit per evaluated model
            res = _fit_cells(X, succ[cells, j], trials[cells], deff[cells, j], z, ci)
            res.update(model=model, group_var=cm.cells["group_var"].to_numpy()[cells],
                       group_level=cm.cells["group_level"].to_numpy()[cells],
                       n=counts["n"][cells], n_pos=counts["n_pos"][cells],
                       n_neg=counts["n_neg"][cells], design_effect=deff[cells, j],
                       n_clusters=n_clusters[cells])
            frames.append(pd.DataFrame(res))
    out = pd.concat(frames, ignore_index=True)
    small = (out["denominator"] > 0) & (out["denominator"] < small_n)
    out["flag"] = (pd.Series(np.where(out["denominator"] == 0, "empty", ""))
                   .str.cat([pd.Series(np.where(small, "small_n", "")), out.pop("fit_flag")], sep=";")
                   .str.replace(r";{2,}", ";", regex=True).str.strip(";"))
    out.insert(0, "estimand", estimand)
    out["method"] = f"{METHOD}-{ci}"
    out["conf_level"] = conf_level
    return tidy(out, group_cols=GROUP_COLS)


def _design_effects(cm, cluster: str, in_pop: np.ndarray) -> np.ndarray:
    """cells x models design effects ``1 + (m_c - 1) icc`` (module docstring): ``m_c`` the
    Kish mean cluster size of the cell's population rows, ``icc`` one estimate per model
    and axis (``pred`` and ``1 - pred`` have the same ICC)."""
    clu = pd.factorize(cm.covariates[cluster])[0]
    coo = cm.member.tocoo()
    axis_of = cm.cells["axis"].to_numpy()
    keep = in_pop[coo.col] & (axis_of[coo.row] > 0)
    kish = kish_cluster_size(coo.row, clu[coo.col], cm.n_cells, weights=keep)
    pred = cm.pred.astype(float)
    deff = np.ones((cm.n_cells, len(cm.models)))
    for axis in np.unique(axis_of[axis_of > 0]):      # axes, not cells
        sel = keep & (axis_of[coo.row] == axis)
        icc = icc_anova(pred[coo.col[sel]], clu[coo.col[sel]], coo.row[sel])
        cells = axis_of == axis
        m = np.nan_to_num(kish[cells], nan=1.0)
        deff[cells] = 1.0 + (m[:, None] - 1.0) * icc[None, :]
    return deff


def _cell_design(covariates: pd.DataFrame, cols: tuple[str, ...]) -> np.ndarray:
    """Fixed-effect design of the cells of ``cols`` in the product order of
    :func:`stats.detection.case_matrix`: an intercept, plus for an intersection the
    treatment-coded main effects of every column (first level = reference)."""
    sizes = [len(_levels(covariates[c])[1]) for c in cols]
    G = int(np.prod(sizes))
    parts = [np.ones((G, 1))]
    if len(cols) > 1:
        codes = np.unravel_index(np.arange(G), sizes)
        parts += [np.eye(L)[code][:, 1:] for L, code in zip(sizes, codes)]
    return np.hstack(parts)


def _fit_cells(X: np.ndarray, y: np.ndarray, n: np.ndarray, deff: np.ndarray, z: float,
               ci: str = "integrated") -> dict:
    """Fit the cell GLMM on the non-empty cells and predict every cell (NaN when empty)."""
    G = len(y)
    nan = np.full(G, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        crude = np.where(n > 0, y / np.where(n > 0, n, 1.0), np.nan)
    out = {"estimate": nan.copy(), "std_error": nan, "conf_low": nan.copy(),
           "conf_high": nan.copy(), "crude_estimate": crude, "numerator": y.astype(float),
           "denominator": n.astype(float), "fixed_estimate": nan.copy(),
           "shrinkage_weight": nan.copy(), "se_logit": nan.copy(), "group_sd": nan.copy(),
           "fit_flag": np.full(G, "", dtype=object)}
    obs = np.flatnonzero(n > 0)
    if len(obs) < 2:
        out["fit_flag"][obs] = "not_estimable"
        return out
    keep, _ = estimable_columns(X[obs], [str(i) for i in range(X.shape[1])])
    Xo = X[np.ix_(obs, keep)]
    yo, no = y[obs] / deff[obs], n[obs] / deff[obs]
    # A main-effect level whose non-empty cells are all detected (or all missed), by exact
    # counts, is separated: its log-odds ratio is infinite and its cells are fitted with
    # probability 1 (0). The other parameters are fitted without its cells and column
    # (the exact limit); its cells get the limit as estimate and NaN SEs.
    sep = np.array([j > 0 and np.isin(Xo[:, j], (0.0, 1.0)).all() and (Xo[:, j] == 1).any()
                    and (np.all(y[obs][Xo[:, j] == 1] == 0)
                         or np.all(y[obs][Xo[:, j] == 1] == n[obs][Xo[:, j] == 1]))
                    for j in range(Xo.shape[1])], dtype=bool)
    free = ~np.any(Xo[:, sep] == 1, axis=1) if sep.any() else np.ones(len(obs), bool)
    if free.sum() < 2:    # (nearly) every cell separated: nothing left to pool
        out["fit_flag"][obs] = "separation;not_estimable"
        return out
    Xf = Xo[np.ix_(free, ~sep)]
    with one_blas_thread(), np.errstate(all="ignore"):
        start = fit_glm(Xf, yo[free], no[free])
        r = fit_glmm(Xf, yo[free], no[free], np.arange(int(free.sum())), int(free.sum()),
                     nagq=1, beta0=start.beta, glm=start)
        theta = r.theta
        eta_fix = np.where(free, 0.0, np.nan)
        eta = np.where(free, 0.0, np.nan)
        eta_fix[free] = matvec(Xf, r.beta)
        eta[free] = eta_fix[free] + theta * r.u_hat
        se = np.full(len(obs), np.nan)
        H = np.full(len(obs), np.nan)
        H[free], var = _conditional(Xf, no[free], theta, eta[free])
        se[free] = np.sqrt(var)
        if sep.any():   # the separated cells: the limit, probability 1 (or 0)
            limit = np.where(y[obs] == 0, -np.inf, np.inf)
            eta_fix[~free] = eta[~free] = limit[~free]
            H[~free] = np.inf
        if ci == "integrated":
            lo, hi = _integrated_interval(Xo, yo, no, _start_full(start.beta, sep), z)
        else:
            lo, hi = eta - z * se, eta + z * se
    flags = [w.split(":", 1)[0] for w in r.warnings]
    if sep.any():     # a level all detected (or all missed), by exact counts
        flags.append("separation")
    if len(obs) < MIN_CELLS:
        flags.append("few_cells")
    if not (np.all(np.isfinite(se[free])) and np.all(np.isfinite(lo))
            and np.all(np.isfinite(hi))):
        flags.append("not_estimable")
    out["estimate"][obs] = expit(eta)
    out["conf_low"][obs] = expit(lo)
    out["conf_high"][obs] = expit(hi)
    out["fixed_estimate"][obs] = expit(eta_fix)
    out["shrinkage_weight"][obs] = 1.0 / H
    out["se_logit"][obs] = se
    out["group_sd"][:] = theta
    out["fit_flag"][obs] = ";".join(dict.fromkeys(flags))
    return out


def _start_full(beta_free: np.ndarray, sep: np.ndarray) -> np.ndarray:
    """A start for the full cell design: the free fit's coefficients, 0 for separated
    columns (the integrated interval's prior keeps them finite)."""
    out = np.zeros(len(sep))
    out[~sep] = beta_free
    return out


def _conditional(X, n, theta, eta, prior_prec: float = 0.0):
    """``H_c`` and the conditional variance of ``eta_c`` given ``theta`` (module docstring),
    for one theta (1-D arrays) or a batch of thetas (``theta`` (K,), ``eta`` (K, G));
    ``prior_prec`` adds a normal prior's precision on ``beta`` to ``S``."""
    theta = np.asarray(theta, dtype=float)
    th = theta[..., None]
    p = expit(eta)
    W = n * p * (1.0 - p)
    H = 1.0 + th * th * W
    S = np.einsum("...g,gi,gj->...ij", W / H, X, X) + prior_prec * np.eye(X.shape[1])
    Sinv = pd_inverse(S)   # NaN where S is not positive definite by the stated rule
    quad = np.einsum("gi,...ij,gj->...g", X, Sinv, X)
    return H, th * th / H + quad / (H * H)


def _joint_modes(X, y, n, thetas, beta0, prior_prec, max_iter=100, tol=1e-10):
    """For every ``theta_k`` at once, the joint mode of the penalised log-likelihood
    ``sum_c [y_c eta_c - n_c log(1 + e^eta_c)] - |u|^2 / 2 - prior_prec |beta|^2 / 2`` in
    ``(beta, u)``,
    ``eta_c = x_c' beta + theta_k u_c`` (Newton with the block elimination of the module
    docstring; a step is halved where it does not increase the objective). Returns beta
    (K, p), u (K, G), the objective (K,) and eta (K, G)."""
    K, G = len(thetas), len(y)
    th = thetas[:, None]
    beta = np.tile(beta0, (K, 1))
    u = np.zeros((K, G))

    def objective(b, uu):
        e = np.einsum("kp,gp->kg", b, X) + th * uu
        return ((y * e - n * np.logaddexp(0.0, e)).sum(axis=1) - 0.5 * (uu * uu).sum(axis=1)
                - 0.5 * prior_prec * (b * b).sum(axis=1)), e

    f, eta = objective(beta, u)
    for _ in range(max_iter):
        p = expit(eta)
        W = n * p * (1.0 - p)
        r = y - n * p
        D = 1.0 + th * th * W
        gb, gu = np.einsum("kg,gp->kp", r, X) - prior_prec * beta, th * r - u
        S = np.einsum("kg,gi,gj->kij", W / D, X, X) + prior_prec * np.eye(X.shape[1])
        db, _ = pd_solve_stack(S, gb - np.einsum("kg,gp->kp", th * W * gu / D, X))
        du = (gu - th * W * np.einsum("kp,gp->kg", db, X)) / D
        t = np.ones(K)
        for _ in range(30):                       # step halving, every theta at once
            cand_b, cand_u = beta + t[:, None] * db, u + t[:, None] * du
            f_new, _ = objective(cand_b, cand_u)
            worse = f_new < f - 1e-12 * (1.0 + np.abs(f))
            if not worse.any():
                break
            t = np.where(worse, t / 2.0, t)
        step = np.maximum(np.abs(t[:, None] * db).max(axis=1), np.abs(t[:, None] * du).max(axis=1))
        beta = np.where(worse[:, None], beta, cand_b)
        u = np.where(worse[:, None], u, cand_u)
        f = np.where(worse, f, f_new)
        eta = np.einsum("kp,gp->kg", beta, X) + th * u
        if step.max() < tol:
            break
    return beta, u, f, eta


def _log_posterior(X, n, thetas, f, eta, prior_prec):
    """Laplace log marginal likelihood of ``theta`` with ``u`` and ``beta`` integrated out:
    ``f - sum_c log(H_c) / 2 - log det(S) / 2`` at the joint modes (``f`` includes the
    prior's ``-prior_prec |beta|^2 / 2``)."""
    p = expit(eta)
    W = n * p * (1.0 - p)
    H = 1.0 + thetas[:, None] ** 2 * W
    S = np.einsum("kg,gi,gj->kij", W / H, X, X) + prior_prec * np.eye(X.shape[1])
    logdet = pd_logdet(S)
    return f - 0.5 * np.log(H).sum(axis=1) - 0.5 * logdet


def _integrated_interval(X, y, n, beta0, z: float, n_grid: int = GRID):
    """Logit-scale limits of ``eta_c`` with ``theta`` integrated out: a uniform prior on
    ``[0, THETA_MAX]``, the Laplace marginal likelihood of ``theta`` on a grid (two passes:
    the whole range, then where the posterior mass is), and per grid point the normal
    conditional distribution of ``eta_c`` (joint mode, variance of :func:`_conditional`);
    the limits are the quantiles of that normal mixture, by bisection for all cells."""
    grid = np.linspace(0.0, THETA_MAX, n_grid)
    prec = 1.0 / BETA_PRIOR_SD ** 2
    beta0 = np.clip(beta0, -BETA_PRIOR_SD, BETA_PRIOR_SD)
    for _ in range(2):
        _, _, f, eta = _joint_modes(X, y, n, grid, beta0, prec)
        lp = _log_posterior(X, n, grid, f, eta, prec)
        w = np.exp(lp - lp.max())
        w /= w.sum()
        live = np.flatnonzero(w > 1e-9)
        lo_t = grid[max(live[0] - 1, 0)]
        hi_t = grid[min(live[-1] + 1, n_grid - 1)]
        if hi_t - lo_t >= 0.5 * (grid[-1] - grid[0]):
            break
        grid = np.linspace(lo_t, hi_t, n_grid)
    _, var = _conditional(X, n, grid, eta, prec)
    sd = np.sqrt(var)
    a = float(sps.norm.sf(z))                     # (1 - conf_level) / 2

    def cdf(q):
        return (w[:, None] * sps.norm.cdf((q[None, :] - eta) / sd)).sum(axis=0)

    def quantile(prob):
        lo = (eta - 10.0 * sd).min(axis=0)
        hi = (eta + 10.0 * sd).max(axis=0)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            below = cdf(mid) < prob
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return 0.5 * (lo + hi)

    return quantile(a), quantile(1.0 - a)
