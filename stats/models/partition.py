"""Variance partition of a fitted logistic model on the latent (logit) scale.

Nakagawa & Schielzeth's decomposition (2013; Nakagawa, Johnson & Schielzeth 2017) writes
the latent variance of a binomial GLMM with the logit link as::

    sigma_f^2 + sum_k sigma_k^2 + pi^2 / 3,

``sigma_f^2 = var(X beta)`` (the fixed effects' linear predictor over the fitted rows, R's
``var``, n - 1), ``sigma_k`` the SD of random intercept k (site; patients within sites),
``pi^2 / 3`` the logistic distribution's variance (the residual). Marginal R2 is
``sigma_f^2 / total``, conditional R2 ``(sigma_f^2 + sum sigma_k^2) / total``.

The fixed part is split by covariate blocks (protocol, demographics, tumour; for a
site-fixed model also the site dummies): block b's variance is ``var(X_b beta_b)``, the
variance of its own part of the linear predictor. The blocks' parts are correlated when
the covariates are (protocol confounded with site, say), so their variances do not add up
to ``sigma_f^2``; the difference, ``sigma_f^2 - sum_b var(X_b beta_b) = 2 sum_{b<c}
cov(X_b beta_b, X_c beta_c)`` (plus the terms in no block), is reported as its own
component (``between-block covariance``), so that the shares add up to 1 and the
fixed-effect shares add up to the marginal R2.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stats._linalg import matvec
from stats.schema import ContractError, tidy

RESIDUAL = np.pi ** 2 / 3
COVARIANCE = "between-block covariance"
OTHER = "other fixed effects"
RESIDUAL_NAME = "residual (logistic)"
MSG_NOT_FIT = ("variance_partition: fit must be a Fit (the result of stats.fit_adjusted); "
               "got {got}")
MSG_BLOCKS = ("variance_partition: blocks must be a mapping {{name: [variables]}} such as "
              "{{'protocol': ['phase'], 'tumour': ['np.log(tumor_size_mm)']}}; got {got}")


def _block_columns(mf, blocks: dict) -> tuple[dict[str, list[int]], list[int], dict]:
    """Columns of ``mf.design.X`` per block (a term goes to the first block that claims
    it: one of its factors uses a block variable), the columns in no block (intercept
    excluded), and the terms of each block."""
    d = mf.design
    slices = d.design_info.term_name_slices
    pos = {t: i for i, t in enumerate(d.terms)}
    claimed: set[str] = set()
    out, terms = {}, {}
    for name, variables in blocks.items():
        _, dropped = d.parsed.without(list(variables))
        mine = [t for t in dropped if t not in claimed and t in slices]
        claimed.update(mine)
        cols = [pos[d.all_terms[j]] for t in mine
                for j in range(*slices[t].indices(len(d.all_terms))) if d.all_terms[j] in pos]
        if mine:
            out[name], terms[name] = cols, mine
    rest = [pos[d.all_terms[j]] for t, sl in slices.items() if t != "Intercept"
            and t not in claimed for j in range(*sl.indices(len(d.all_terms)))
            if d.all_terms[j] in pos]
    return out, rest, terms


def _var(x: np.ndarray) -> float:
    return float(np.var(x, ddof=1)) if len(x) > 1 else 0.0


def variance_partition(fit, blocks: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """Latent-scale shares of the variation in detection: each random intercept, each
    block of fixed effects, their covariance, and the logistic residual.

    Parameters
    ----------
    fit : stats.models.Fit
        A GLMM (one or nested random intercepts), a plain logistic model, or a site-fixed
        model (its site dummies become the block ``site``). GEE fits have no latent-scale
        decomposition (population-averaged coefficients): their rows are NaN with the
        flag ``not_latent_scale``.
    blocks : mapping name -> variables, optional
        Blocks of fixed effects (default :data:`stats.models.DEFAULT_BLOCKS`: protocol,
        demographics, tumour); a block lists variables (every term using one) or term
        names; a term goes to the first block that claims it; blocks absent from the
        formula are left out.

    Returns
    -------
    DataFrame
        Tidy contract, grouping ``model, component``: estimand ``variance_share``;
        ``estimate`` the share of the latent variance (components add up to 1);
        ``n`` the fitted rows; ``method`` ``nakagawa-latent``; ``flag``; extras
        ``variance`` (latent scale, logit units squared), ``kind`` (``random``,
        ``fixed``, ``covariance``, ``residual``), ``terms`` (the block's terms, or the
        random intercept ``(1 | site)``), ``r2_marginal``, ``r2_conditional`` (of the
        model, on every row). Components: the random intercepts by their level
        (``site``, ``patient_id:site``), the blocks by name, ``other fixed effects``
        (terms in no block, e.g. ``model`` in a pooled fit; only when there are some),
        ``between-block covariance``, ``residual (logistic)``.

    Notes
    -----
    See the module notes (Nakagawa & Schielzeth 2013). Validated against R's
    performance 0.10.2 ``r2_nakagawa`` and insight 0.19.0 ``get_variance`` (fixed,
    per-group random and residual variances; marginal and conditional R2) and an R
    recomputation of the block variances on glmer fits (tests/r/variance_partition.R,
    tests/stats/test_variance_partition.py); recovers known shares in simulation
    (bench/variance_partition.md).

    References
    ----------
    Nakagawa S, Schielzeth H (2013). A general and simple method for obtaining R2 from
    generalized linear mixed-effects models. Methods Ecol Evol 4:133-142.
    """
    from . import DEFAULT_BLOCKS, Fit

    if not isinstance(fit, Fit):
        raise ContractError(MSG_NOT_FIT.format(got=type(fit).__name__))
    if blocks is not None and not (isinstance(blocks, dict) and all(
            isinstance(v, (list, tuple)) for v in blocks.values())):
        raise ContractError(MSG_BLOCKS.format(got=repr(blocks)[:80]))
    blocks = dict(DEFAULT_BLOCKS if blocks is None else blocks)
    rows = []
    for m, mf in fit.fits.items():
        base = dict(model=m, n=mf.nobs, method="nakagawa-latent")
        flags = mf.flags()
        my_blocks = dict(blocks)
        if mf.method == "fixed" and fit.group is not None:
            my_blocks = {str(fit.group): [str(fit.group)], **my_blocks}
        cols, rest, terms = _block_columns(mf, my_blocks)
        comps: list[tuple[str, str, float, str]] = []
        latent = mf.method != "gee"
        eta = matvec(mf.design.X, mf.beta) if latent else np.full(mf.nobs, np.nan)
        vf = _var(eta)
        for name, sd in mf.variance_components().items():
            comps.append((name, "random", float(sd) ** 2, f"(1 | {name})"))
        for name, c in cols.items():
            part = matvec(mf.design.X[:, c], mf.beta[c]) if latent else eta
            comps.append((name, "fixed", _var(part), " + ".join(terms[name])))
        used = vf
        if rest:
            part = matvec(mf.design.X[:, rest], mf.beta[rest]) if latent else eta
            comps.append((OTHER, "fixed", _var(part), ""))
        cov = used - sum(v for _, k, v, _ in comps if k == "fixed")
        comps.append((COVARIANCE, "covariance", cov, ""))
        comps.append((RESIDUAL_NAME, "residual", RESIDUAL, ""))
        vr = sum(v for _, k, v, _ in comps if k == "random")
        total = vf + vr + RESIDUAL
        r2m, r2c = (vf / total, (vf + vr) / total) if latent else (np.nan, np.nan)
        flag = flags if latent else ";".join(x for x in (flags, "not_latent_scale") if x)
        for name, kind, v, t in comps:
            share = v / total if latent else np.nan
            rows.append(dict(estimand="variance_share", component=name, estimate=share,
                             variance=v if latent else np.nan, kind=kind, terms=t,
                             r2_marginal=r2m, r2_conditional=r2c, flag=flag, **base))
    return tidy(pd.DataFrame(rows), group_cols=("model", "component"))
