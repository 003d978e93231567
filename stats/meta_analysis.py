"""Random-effects meta-analysis of a proportion across sites: what a new site should expect.

Each site is a study. For one model, one estimand (sensitivity among reference positives,
specificity among negatives, PPV, NPV or accuracy) and one cell (overall, or a level of a
``by`` axis), site ``i`` has ``x_i`` successes of ``n_i`` scans of the estimand's
denominator. As metafor's ``escalc(measure = "PLO")``:

    y_i = log(x_i / (n_i - x_i)),   v_i = 1 / x_i + 1 / (n_i - x_i),

with 0.5 added to ``x_i`` and ``n_i - x_i`` of a site with a zero cell (``x_i`` of 0 or
``n_i``, decided on the exact counts) and to no other site (``to = "only0"``). The model
``y_i ~ N(mu, v_i + tau2)`` is fitted by REML (``rma(method = "REML")``). The REML score
(twice the derivative of the restricted log-likelihood) is ``y'PPy - tr P`` with
``P = W - w w' / sum w``, ``w_i = 1/(v_i + tau2)`` (``y'PPy = sum w_i^2 (y_i - mu)^2``,
``tr P = sum w - sum w^2 / sum w``, ``tr PP = sum w^2 - 2 sum w^3 / sum w + (sum w^2)^2 /
(sum w)^2``). Where the score at 0 is not positive the estimate is 0 (the boundary
optimum). Elsewhere it is the root of the score, found by Fisher scoring,
``tau2 <- tau2 + (y'PPy - tr P) / tr PP``, from metafor's Hedges start
``max(0, (sum (y_i - ybar)^2 - (1 - 1/k) sum v_i) / (k - 1))``, safeguarded: every score
evaluated narrows a bracket around the root, and a step that leaves the bracket is
replaced by its midpoint, until a step changes ``tau2`` by less than 1e-12 (at most 1,000
steps, else flag ``not_converged``). Fisher scoring alone (metafor's) can cycle without
converging (tests/r/data/meta_analysis_counts.csv, "overshoot"; metafor converges there
with ``control = list(stepadj = 0.5)``); where it converges, to the same root. All
analyses (models x cells) are iterated at once, one array per quantity (no loop over
sites or analyses).
``se(tau2) = sqrt(2 / tr PP)``.

* **pooled**: ``mu = sum w_i y_i / sum w_i`` with Knapp & Hartung's variance
  ``s2w / sum w_i``, ``s2w = sum w_i (y_i - mu)^2 / (k - 1)`` (``test = "knha"``; not
  truncated at 1), interval ``mu +- t_{k-1} se``; prediction interval for a new site
  ``mu +- t_{k-1} sqrt(se^2 + tau2)`` (``predict.rma``); all back-transformed by
  ``expit`` (``predict(transf = plogis)``).
* **q**: Cochran's ``Q = sum (y_i - mu_FE)^2 / v_i`` on ``k - 1`` df (``QE``, ``QEp``).
* **i2**: ``100 tau2 / (tau2 + vt)``, ``vt = (k - 1) / (sum 1/v_i - sum 1/v_i^2 / sum
  1/v_i)`` (metafor's ``I2`` for REML; ``h2 = tau2 / vt + 1`` beside it).
* **site** rows: the forest plot's studies: ``expit(y_i)`` with the Wald interval
  ``expit(y_i +- z sqrt(v_i))`` (``summary(escalc(...), transf = plogis)``) and the
  random-effects weight ``100 w_i / sum w`` (``weights(fit)``).

**Repeated scans of a patient** (``cluster``; by default ``patient_id`` when a patient has
several scans among the rows passed, :func:`stats.clustered.resolve_cluster`): each site's
proportion is a ratio estimator over its patients, with the with-replacement variance
``V`` of :mod:`stats.clustered` (R: ``svymean(~y, svydesign(ids = ~patient_id))``) and
Korn & Graubard's effective size ``n_eff = min(n, n / deff * (t_{n-1} / t_{C-1})^2)``,
``deff = V / (p (1 - p) / n)`` (the same ``n_eff`` as every cluster-aware interval of
clinrel, by the same rules where ``deff`` cannot be estimated). The site enters as
``escalc`` of the effective counts ``p n_eff`` of ``n_eff``: ``y_i`` is unchanged and

    v_i = 1 / (n_eff p (1 - p)) = V / (p (1 - p))^2 / (t_{n-1} / t_{C-1})^2,

the delta-method variance of the logit from ``V``, divided by the degrees-of-freedom
factor, and never below the binomial ``v_i`` (clustering never narrows). Without repeats
``n_eff = n`` exactly and the fit is metafor's on the raw counts. A patient with scans at
two sites is a cluster at each (correlation across sites is not modelled).

Coverage (bench/meta_analysis_coverage.md: 5-20 sites, 1-4 scans per patient, intra-patient
correlation 0.2-0.5, 2,000 replicates per row): the pooled interval covers 93.9-95.3%
with 40-160 positive patients per site and 89.4-95.0% with 10-40, where the logit of a
small site's proportion is biased and pulls the pooled value toward 0.5 (the PLO method's
own bias: one scan per patient covers 79.4-94.6% there); the prediction interval covers
94.3-96.1% when the sites agree and 81.7-93.3% when they differ (tau 0.5): metafor's
plug-in interval is too narrow with few sites, with or without repeated scans. Treating
scans as independent inflates tau2 (the within-site excess is read as heterogeneity).

Not estimable (NaN + flag): a cell with no site (``empty``) or one site (``one_site``;
metafor would report that site's value with no interval); a Knapp-Hartung variance of 0
(every site's logit equal: ``s2w`` within 1e-12 of its terms, by
:func:`stats._linalg.clean_variance`), where metafor gives a zero-width interval
(``zero_variance``: pooled interval and prediction interval NaN). Sites without a scan of
the denominator are left out (their row: ``empty``).

References
----------
Knapp G, Hartung J (2003) Improved tests for a random effects meta-regression with a
single covariate. Stat Med 22:2693-2710. Higgins JPT, Thompson SG, Spiegelhalter DJ (2009)
A re-evaluation of random-effects meta-analysis. JRSS A 172:137-159 (prediction
interval). Viechtbauer W (2005) Bias and efficiency of meta-analytic variance estimators
in the random-effects model. J Educ Behav Stat 30:261-293 (REML by Fisher scoring).
Viechtbauer W (2010) Conducting meta-analyses in R with the metafor package. J Stat Softw
36(3). Korn EL, Graubard BI (1998) Survey Methodology 24:193-201.

Validated against R's metafor 3.8-1 ``rma(escalc(measure = "PLO"), method = "REML",
test = "knha")``, ``predict(transf = plogis)`` and ``weights`` run to convergence (seven
count datasets, incl. zero cells, strong heterogeneity, k = 2 and a cycling Fisher
scoring), and survey 4.1-1 for the clustered per-site variances (patients with 1-4 scans,
overall and per phase): tested to 1e-6, measured at most 4e-12 (tests/r/meta_analysis.R;
tests/stats/test_meta_analysis.py).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as sps
from scipy.special import expit

from stats import _validate as _v
from stats._linalg import clean_variance
from stats.clustered import (AUTO, FLAG_DEFF, SUFFIX, cluster_cases, cluster_moments,
                             design_effect, effective_counts, metric_indicators)
from stats.detection import (MISSING, PROPORTIONS, _check_cluster, _levels, case_matrix,
                             normalize_by, scan_level)
from stats.schema import ContractError, tidy

Estimand = Literal["sensitivity", "specificity", "ppv", "npv", "accuracy"]
#: the estimand values of the rows, in the order each analysis lists them
ROWS = ("site", "pooled", "tau2", "i2", "q")
#: grouping columns of the output
GROUP_COLS = ("metric", "model", "group_var", "group_level", "site")
#: Fisher scoring: stop when a step changes tau2 by less than this (absolute, logit^2)
TOL = 1e-12
MAX_ITER = 1000
#: escalc's correction of a site with a zero cell
ADD = 0.5
METHOD_SITE = "logit-wald"
METHOD_POOLED = "reml-knha"
METHOD_TAU2 = "reml"
METHOD_Q = "cochran-q"
FLAG_EMPTY = "empty"
FLAG_ONE = "one_site"
FLAG_NOT_ESTIMABLE = "not_estimable"
FLAG_ZERO_VARIANCE = "zero_variance"
FLAG_ZERO_CELL = "zero_cell"
FLAG_NOT_CONVERGED = "not_converged"

MSG_ESTIMAND = ("site_meta_analysis: estimand must be one of {allowed}; got {estimand!r}; "
                "e.g. estimand='sensitivity'")
MSG_SITE_NA = ("site_meta_analysis: column {site!r} has missing values; rows {rows} are empty; "
               "every scan needs its site (the study of the meta-analysis): fill them in or "
               "drop the rows")


def site_meta_analysis(cases: pd.DataFrame, *, estimand: Estimand = "sensitivity", by=None,
                       site: str = "site", cluster: str | None = AUTO, threshold=None,
                       conf_level: float = 0.95) -> pd.DataFrame:
    """Random-effects meta-analysis of a proportion across sites (metafor's REML with
    the Knapp-Hartung interval and a prediction interval for a new site), per model and
    cell.

    Parameters
    ----------
    cases : DataFrame
        A cases table with ``pred`` (or give ``threshold``) and the ``site`` column.
    estimand : {"sensitivity", "specificity", "ppv", "npv", "accuracy"}
        The proportion pooled (its numerator and denominator as in
        :func:`stats.subgroup_metrics`).
    by : str, tuple or list of them, optional
        Subgroup axes: besides overall, one meta-analysis per level of each axis (e.g.
        ``"phase"``: the sites' sensitivity in arterial-phase scans, and so on), as the
        cells of :func:`stats.subgroup_metrics` ("Missing" levels included).
    site : str, default "site"
        The column whose levels are the studies.
    cluster : str or None, default "auto"
        The patient column of repeated scans (module docstring); "auto": ``patient_id``
        when a patient has several scans; None or "none": scans independent.
    threshold : float or {model: float}, optional
        Voxel threshold for ``pred`` (as :func:`stats.scan_level`).
    conf_level : float
        Level of the pooled interval, the prediction interval and the sites' intervals.

    Returns
    -------
    Tidy DataFrame, per model x cell: one row per site, then ``pooled``, ``tau2``,
    ``i2``, ``q`` (column ``estimand``). Grouping ``metric`` (the estimand pooled),
    ``model``, ``group_var``, ``group_level``, ``site`` (the site of a site row, "" on
    the others). Columns:

    * ``estimate``: site: ``expit(y_i)`` (the site's proportion; with the 0.5 correction
      at a zero cell); pooled: ``expit(mu)``; tau2 (logit scale); i2 (percent); q (Q);
    * ``std_error``: site NaN (its logit SE is ``logit_se``); pooled NaN (``logit_se``);
      tau2: ``se(tau2)``; i2, q: NaN;
    * ``conf_low``, ``conf_high``: site: Wald on the logit, back-transformed; pooled:
      Knapp-Hartung, t on k - 1 df, back-transformed; NaN on tau2, i2, q;
    * ``conf_level``; ``n`` (scans of the site / of the cell over the sites pooled),
      ``n_pos``, ``n_neg``; ``method`` (site ``logit-wald``, pooled ``reml-knha``, tau2
      and i2 ``reml``, q ``cochran-q``; ``-cluster`` appended where a site's variance is
      cluster-aware, on the pooled rows where any site's is); ``flag`` (";"-joined:
      ``empty``, ``zero_cell``, ``deff_not_estimable``, ``one_site``, ``not_estimable``,
      ``zero_variance``, ``not_converged``); ``statistic`` (q: Q), ``p_value`` (q: the
      upper chi-square tail on k - 1 df);
    * extras: ``k`` (sites pooled), ``df`` (k - 1; pooled and q rows), ``weight``
      (site: percent of the random-effects weight; 0 for a site left out), ``logit``
      (site ``y_i``; pooled ``mu``), ``logit_se`` (site ``sqrt(v_i)``; pooled the
      Knapp-Hartung SE), ``pi_low``, ``pi_high`` (pooled: the prediction interval,
      back-transformed), ``h2`` (i2 row), ``numerator``, ``denominator`` (the counts
      ``x``, ``n``; summed over the sites pooled on the other rows), ``n_clusters``,
      ``design_effect``, ``n_effective`` (site rows: :mod:`stats.clustered`).

    An empty table, a missing column, an unknown estimand, a missing site or a bad
    ``conf_level`` / ``threshold`` raise :class:`~stats.schema.ContractError`.

    Notes
    -----
    Model, estimator, intervals and clustering: module docstring. Validated against R's
    metafor 3.8-1 (``rma(escalc(measure = "PLO"), method = "REML", test = "knha")``,
    ``predict(transf = plogis)``, ``weights``) and survey 4.1-1 (the clustered variances);
    tests/r/meta_analysis.R.

    Examples
    --------
    >>> import stats
    >>> from stats import simulate
    >>> calls = stats.scan_level(simulate.benchx_cohort(600, n_models=1, n_sites=6,
    ...                                                 seed=1).data, threshold=50)
    >>> ma = site_meta_analysis(calls, estimand="sensitivity")   # patients repeat
    >>> cols = ["estimand", "estimate", "conf_low", "conf_high", "pi_low", "pi_high"]
    >>> print(ma.loc[ma["estimand"] != "site", cols].round(3).to_string(index=False))
    estimand  estimate  conf_low  conf_high  pi_low  pi_high
      pooled     0.828     0.713      0.903   0.542    0.952
        tau2     0.233       NaN        NaN     NaN      NaN
          i2    51.843       NaN        NaN     NaN      NaN
           q    10.248       NaN        NaN     NaN      NaN
    """
    func = "site_meta_analysis"
    _v.table(cases, func=func, columns=("case_id", "model", "label", "score", site))
    _v.threshold(threshold, func=func)
    conf_level = _v.level(conf_level, func=func)
    if not isinstance(estimand, str) or estimand not in PROPORTIONS:
        raise ContractError(MSG_ESTIMAND.format(allowed=", ".join(PROPORTIONS),
                                                estimand=estimand))
    specs = normalize_by(by)
    na = np.flatnonzero(cases[site].isna().to_numpy())
    if len(na):
        raise ContractError(MSG_SITE_NA.format(site=site, rows=", ".join(
            str(i + 1) for i in na[:5])), column=site, rows=(na[:5] + 1).tolist())
    if threshold is not None:
        cases = scan_level(cases, threshold=threshold)
    cases, cluster = cluster_cases(cases, cluster)
    if cluster is not None:
        _check_cluster(cases, cluster)
    cm = case_matrix(cases, specs, cluster=cluster)
    site_code, site_names = _levels(cm.covariates[site].astype(str))
    S, G, M = len(site_names), cm.n_cells, len(cm.models)
    n_cases = len(cm.case_id)
    num, den = metric_indicators(cm.label, cm.pred, [estimand])[estimand]
    den = np.broadcast_to(den, num.shape)
    # the (cell, site) membership: cell g, site s -> row g * S + s
    coo = cm.member.tocoo()
    member = sparse.csr_matrix((np.ones(len(coo.row)), (coo.row * S + site_code[coo.col],
                                                        coo.col)), shape=(G * S, n_cases))
    clusters = cm.patient if cluster is not None else np.arange(n_cases)
    mom = cluster_moments(member, clusters, num, den)
    d = design_effect(mom, conf_level)
    x, n = mom["x"], mom["n"]                                      # (G * S, M)
    xe, ne = effective_counts(x, n, d["n_effective"])
    present = n > 0
    zero = present & ((x == 0) | (x == n))                         # exact counts
    add = np.where(zero, ADD, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(present, np.log((xe + add) / (ne - xe + add)), np.nan)
        v = np.where(present, 1.0 / (xe + add) + 1.0 / (ne - xe + add), np.nan)
    # analyses (model, cell) x sites
    Y = y.reshape(G, S, M).transpose(2, 0, 1).reshape(M * G, S)
    V = v.reshape(G, S, M).transpose(2, 0, 1).reshape(M * G, S)
    fit = _reml_knha(Y, V, conf_level)
    scans = (np.asarray(member.sum(axis=1)).ravel(), member @ cm.label.astype(float))
    rows = _frame(cm, site_names, estimand, conf_level, mom, d, y, v, zero, fit, scans)
    return tidy(rows, group_cols=GROUP_COLS)


def _reml_knha(Y: np.ndarray, V: np.ndarray, conf_level: float) -> dict[str, np.ndarray]:
    """REML tau2 (safeguarded Fisher scoring), Knapp-Hartung pooled logit, Q and I2 for every row of
    ``Y`` (analyses x sites; NaN where a site is left out) at once (module docstring)."""
    mask = np.isfinite(Y) & np.isfinite(V)
    k = mask.sum(axis=1).astype(float)
    y = np.where(mask, Y, 0.0)
    v = np.where(mask, V, 1.0)
    ok = k >= 2
    kk = np.where(ok, k, 2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Hedges (HE) start, metafor's tau2.init
        ybar = (y * mask).sum(1) / np.maximum(k, 1)
        rss = (mask * (y - ybar[:, None]) ** 2).sum(1)
        tau2 = np.maximum(0.0, (rss - (1 - 1 / kk) * (v * mask).sum(1)) / (kk - 1))
        tau2 = np.where(ok, tau2, 0.0)
        # the REML optimum is at 0 where the score at 0 is not positive (the restricted
        # likelihood falls from its boundary); elsewhere it is a root of the score,
        # bracketed in (lo, hi): a Fisher step is taken when it stays inside the bracket,
        # else the bracket is bisected (Fisher scoring alone can cycle, as metafor's does
        # on tests/r/data/meta_analysis_counts.csv's "overshoot")
        score0, _ = _score(y, v, mask, np.zeros_like(tau2))
        boundary = ok & ~(score0 > 0)
        tau2 = np.where(boundary, 0.0, tau2)
        converged = ~ok | boundary
        lo, hi = np.zeros_like(tau2), np.full_like(tau2, np.inf)
        iters = 0
        while not converged.all() and iters < MAX_ITER:
            iters += 1
            score, adj = _score(y, v, mask, tau2)
            up = score > 0
            lo, hi = np.where(up, np.maximum(lo, tau2), lo), np.where(up, hi, np.minimum(hi, tau2))
            new = tau2 + adj
            inside = (new > lo) & (new < hi)
            new = np.where(inside, new, np.where(np.isfinite(hi), (lo + hi) / 2, 2 * tau2))
            new = np.where(converged, tau2, new)
            converged = converged | (np.abs(new - tau2) < TOL)
            tau2 = new
        w = mask / (v + tau2[:, None])
        sw, sw2, sw3 = w.sum(1), (w ** 2).sum(1), (w ** 3).sum(1)
        mu = (w * y).sum(1) / sw
        tr_pp = sw2 - 2 * sw3 / sw + sw2 ** 2 / sw ** 2
        se_tau2 = np.sqrt(2 / tr_pp)
        # Knapp-Hartung: its residual sum of squares, 0 by rule within 1e-12 of its terms
        r2 = (w * (y - mu[:, None]) ** 2).sum(1)
        r2 = clean_variance(r2, (w * (y ** 2 + mu[:, None] ** 2)).sum(1))
        s2w = r2 / (kk - 1)
        zero_var = ok & ~(s2w > 0)
        se = np.where(zero_var, np.nan, np.sqrt(s2w / sw))
        t = sps.t.ppf(0.5 + conf_level / 2, kk - 1)
        half, half_pi = t * se, t * np.sqrt(se ** 2 + tau2)
        # fixed-effect Q and metafor's I2 (its "typical" within-site variance vt)
        w0 = mask / v
        s0, s02 = w0.sum(1), (w0 ** 2).sum(1)
        mu0 = (w0 * y).sum(1) / s0
        q = (w0 * (y - mu0[:, None]) ** 2).sum(1)
        q = np.fmax(clean_variance(q, (w0 * (y ** 2 + mu0[:, None] ** 2)).sum(1)), 0.0)
        vt = (kk - 1) / (s0 - s02 / s0)
        i2 = 100 * tau2 / (vt + tau2)
        h2 = tau2 / vt + 1
        weight = 100 * w / sw[:, None]
    nan = np.where(ok, 1.0, np.nan)
    return {"k": k, "ok": ok, "mu": mu * nan, "se": se * nan, "tau2": tau2 * nan,
            "se_tau2": se_tau2 * nan, "lo": (mu - half) * nan, "hi": (mu + half) * nan,
            "pi_lo": (mu - half_pi) * nan, "pi_hi": (mu + half_pi) * nan,
            "q": q * nan, "q_p": sps.chi2.sf(q, kk - 1) * nan, "i2": i2 * nan,
            "h2": h2 * nan, "zero_var": zero_var, "weight": np.where(mask & ok[:, None],
                                                                     weight, np.where(mask, np.nan, 0.0)),
            "converged": converged}


def _score(y: np.ndarray, v: np.ndarray, mask: np.ndarray, tau2: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """The REML score ``y'PPy - tr P`` (twice the derivative of the restricted
    log-likelihood in tau2) and the Fisher step ``(y'PPy - tr P) / tr PP`` at ``tau2``, per
    row (module docstring)."""
    w = mask / (v + tau2[:, None])
    sw, sw2, sw3 = w.sum(1), (w ** 2).sum(1), (w ** 3).sum(1)
    mu = (w * y).sum(1) / sw
    score = (w ** 2 * (y - mu[:, None]) ** 2).sum(1) - (sw - sw2 / sw)
    return score, score / (sw2 - 2 * sw3 / sw + sw2 ** 2 / sw ** 2)


def _join(*parts: np.ndarray) -> np.ndarray:
    """Elementwise ";"-join of flag arrays (empty strings dropped)."""
    out = np.full(np.shape(parts[0]), "", dtype=object)
    for p in parts:
        p = np.asarray(p, dtype=object)
        out = np.where(p == "", out, np.where(out == "", p, out + ";" + p))
    return out


def _frame(cm, site_names, estimand, conf_level, mom, d, y, v, zero, fit, scans
           ) -> pd.DataFrame:
    """The output rows: per model x cell, its sites, then pooled, tau2, i2, q. ``scans``:
    (n, n_pos) per (cell, site), the scans of the site in the cell."""
    G, S, M = cm.n_cells, len(site_names), len(cm.models)
    A = M * G
    z = float(sps.norm.ppf(0.5 + conf_level / 2))
    per = lambda a: np.asarray(a, dtype=float).reshape(G, S, M).transpose(2, 0, 1)  # noqa: E731
    x, n = per(mom["x"]), per(mom["n"])                               # (M, G, S)
    yy, vv = per(y), per(v)
    present = n > 0
    clustered = present & (per(mom["repeats"]) > 0)
    weight = fit["weight"].reshape(M, G, S)
    k, ok = fit["k"].reshape(M, G), fit["ok"].reshape(M, G)
    scans_n = np.broadcast_to(scans[0].reshape(1, G, S), (M, G, S))
    scans_pos = np.broadcast_to(scans[1].reshape(1, G, S), (M, G, S))
    model = np.array(cm.models, dtype=object)
    gv = cm.cells["group_var"].to_numpy(dtype=object)
    gl = cm.cells["group_level"].to_numpy(dtype=object)
    mi, gi, si = np.meshgrid(np.arange(M), np.arange(G), np.arange(S), indexing="ij")
    sd = np.sqrt(vv)
    site_rows = {
        "estimand": "site", "metric": estimand, "model": model[mi.ravel()],
        "group_var": gv[gi.ravel()], "group_level": gl[gi.ravel()],
        "site": np.array(site_names, dtype=object)[si.ravel()],
        "estimate": expit(yy).ravel(), "conf_low": expit(yy - z * sd).ravel(),
        "conf_high": expit(yy + z * sd).ravel(), "n": scans_n.ravel(),
        "n_pos": scans_pos.ravel(), "n_neg": (scans_n - scans_pos).ravel(),
        "method": np.where(clustered, METHOD_SITE + SUFFIX, METHOD_SITE).ravel(),
        "flag": _join(np.where(present, "", FLAG_EMPTY),
                      np.where(per(zero) > 0, FLAG_ZERO_CELL, ""),
                      np.where(per(d["not_estimable"]) > 0, FLAG_DEFF, "")).ravel(),
        "k": np.repeat(k.ravel(), S), "weight": weight.ravel(), "logit": yy.ravel(),
        "logit_se": sd.ravel(), "numerator": x.ravel(), "denominator": n.ravel(),
        "n_clusters": per(mom["n_clusters"]).ravel(),
        "design_effect": per(d["design_effect"]).ravel(),
        "n_effective": per(d["n_effective"]).ravel(),
        "_a": (mi * G + gi).ravel(), "_r": 0, "_s": si.ravel()}
    # per (model, cell): sums over the sites pooled
    used = present & ok[:, :, None]
    kf, okf = k.ravel(), ok.ravel()
    suffix = np.where((clustered & used).any(axis=2).ravel(), SUFFIX, "").astype(object)
    het_flags = (np.where(kf == 0, FLAG_EMPTY, ""), np.where(kf == 1, FLAG_ONE, ""),
                 np.where(~okf, FLAG_NOT_ESTIMABLE, ""),
                 np.where(okf & ~fit["converged"], FLAG_NOT_CONVERGED, ""))
    am, ag = np.divmod(np.arange(A), G)
    sn = np.where(used, scans_n, 0).sum(2).ravel()
    sp = np.where(used, scans_pos, 0).sum(2).ravel()
    base = {"metric": estimand, "model": model[am], "group_var": gv[ag], "group_level": gl[ag],
            "site": "", "n": sn, "n_pos": sp, "n_neg": sn - sp, "k": kf,
            "numerator": np.where(used, x, 0).sum(2).ravel(),
            "denominator": np.where(used, n, 0).sum(2).ravel(), "flag": _join(*het_flags),
            "_a": np.arange(A), "_s": 0}
    df = np.where(okf, kf - 1, np.nan)
    pooled = {**base, "estimand": "pooled", "estimate": expit(fit["mu"]),
              "conf_low": expit(fit["lo"]), "conf_high": expit(fit["hi"]),
              "method": METHOD_POOLED + suffix,
              "flag": _join(*het_flags, np.where(fit["zero_var"], FLAG_ZERO_VARIANCE, "")),
              "df": df, "logit": fit["mu"], "logit_se": fit["se"],
              "pi_low": expit(fit["pi_lo"]), "pi_high": expit(fit["pi_hi"]), "_r": 1}
    tau2 = {**base, "estimand": "tau2", "estimate": fit["tau2"], "std_error": fit["se_tau2"],
            "method": METHOD_TAU2 + suffix, "_r": 2}
    i2 = {**base, "estimand": "i2", "estimate": fit["i2"], "h2": fit["h2"],
          "method": METHOD_TAU2 + suffix, "_r": 3}
    q = {**base, "estimand": "q", "estimate": fit["q"], "statistic": fit["q"],
         "p_value": fit["q_p"], "df": df, "method": METHOD_Q + suffix, "_r": 4}
    out = pd.concat([pd.DataFrame(p) for p in (site_rows, pooled, tau2, i2, q)],
                    ignore_index=True)
    out = out.sort_values(["_a", "_r", "_s"], kind="stable").drop(columns=["_a", "_r", "_s"])
    out["conf_level"] = conf_level
    return out.reset_index(drop=True)
