"""The :class:`Fit` returned by ``stats.fit_adjusted``: one fitted model per ``model``
(the evaluated imaging model), with tidy, glance and random-effect tables.

``Fit.tidy()`` follows the tidy estimate contract (stats/schema.py) with grouping column
``model``; ``estimand`` is the term name in patsy style (``Intercept``,
``phase[T.arterial]``, ``np.log(tumor_size_mm)``; for a GLMM also ``sd__(Intercept)``,
the group SD). ``estimate`` is on the log-odds scale; extras: ``term`` (= estimand),
``effect`` (``fixed`` / ``ran_pars``), ``odds_ratio``, ``or_conf_low``, ``or_conf_high``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from stats._linalg import matvec
from stats.intervals import wald_reference  # noqa: F401  (re-exported)
from stats.schema import tidy

from .design import Design, separated_terms

RE_TERM = "sd__(Intercept)"


@dataclass
class ModelFit:
    """One model's fit (internal; reach it through :class:`Fit`)."""

    model: str
    method: str                   # glmm | gee | fixed | glm
    method_label: str             # e.g. glmm-laplace-wald
    design: Design
    beta: np.ndarray
    vcov: np.ndarray              # fixed effects
    loglik: float                 # NaN for GEE
    n_params: int
    converged: bool
    warnings: list[str]
    theta: float | None = None    # group SD (GLMM; nested: the outer group's, e.g. site)
    vcov_full: np.ndarray | None = None   # (SDs, beta) for GLMM
    re: pd.DataFrame | None = None        # group_var, group, estimate, std_error, n
    extra: dict = field(default_factory=dict)
    #: the random intercepts' names and SDs, in the order of ``vcov_full``: one group
    #: (``("site",)``), or nested (``("site", "patient_id:site")``); None: no random effect
    sd_names: tuple[str, ...] | None = None
    sds: np.ndarray | None = None

    @property
    def n_sd(self) -> int:
        """The number of random-intercept SDs (0 for GEE and glm fits)."""
        if self.theta is None:
            return 0
        return 1 if self.sds is None else len(self.sds)

    def variance_components(self) -> dict[str, float]:
        """``{group_var: SD}`` of the random intercepts (empty without one)."""
        if self.theta is None:
            return {}
        if self.sds is None:
            return {(self.sd_names or ("group",))[0]: float(self.theta)}
        return {n: float(v) for n, v in zip(self.sd_names, self.sds)}

    @property
    def nobs(self) -> int:
        return int(len(self.design.y))

    def flags(self) -> str:
        """Fit-level flag codes (term-specific ones go on their term's row only)."""
        term_specific = ("separation: every row", "empty_level", "aliased", "not_estimable")
        codes = [w.split(":", 1)[0] for w in self.warnings if not w.startswith(term_specific)]
        return ";".join(dict.fromkeys(codes))

    def r2(self) -> tuple[float, float]:
        """Nakagawa & Schielzeth latent-scale R2 (marginal, conditional); logistic residual
        variance pi^2 / 3; fixed-effect variance var(X beta) with n - 1 (R's ``var``).

        Defined for the likelihood fits whose linear predictor is the covariates (+ a
        random intercept): GLMM, and a plain logistic model (no group; then marginal ==
        conditional == McKelvey & Zavoina's R2). NaN for ``method="fixed"`` with a group
        (its X beta holds the site dummies, so the "marginal" R2 would count between-site
        variance as explained by covariates) and for GEE (population-averaged coefficients
        are attenuated relative to the latent scale, so the decomposition does not apply).
        """
        if self.method in ("gee", "fixed"):
            return np.nan, np.nan
        eta = matvec(self.design.X, self.beta)
        vf = float(np.var(eta, ddof=1)) if len(eta) > 1 else 0.0
        vr = float(sum(v ** 2 for v in self.variance_components().values()))
        tot = vf + vr + np.pi ** 2 / 3
        return vf / tot, (vf + vr) / tot


def _odds_ratios(out: pd.DataFrame, fixed: pd.Series) -> pd.DataFrame:
    out["odds_ratio"] = np.where(fixed, np.exp(out["estimate"]), np.nan)
    out["or_conf_low"] = np.where(fixed, np.exp(out["conf_low"]), np.nan)
    out["or_conf_high"] = np.where(fixed, np.exp(out["conf_high"]), np.nan)
    return out


def _pos_neg(population, n) -> tuple[float, float]:
    if population == "positives":
        return float(n), 0.0
    if population == "negatives":
        return 0.0, float(n)
    return np.nan, np.nan


class Fit:
    """Fitted confounding-adjusted models, one per evaluated model.

    Attributes: ``fits`` (dict model -> ModelFit), ``method``, ``formula``,
    ``population``, ``group``, ``conf_level``. ``Fit[model]`` selects one model.
    """

    def __init__(self, fits: dict[str, ModelFit], *, method: str, formula: str,
                 population: str | None, group: str | None, conf_level: float = 0.95,
                 options: dict | None = None):
        self.fits = fits
        self.method = method
        self.formula = formula
        self.population = population
        self.group = group
        self.conf_level = conf_level
        self.options = options or {}

    def __getitem__(self, model: str) -> Fit:
        return Fit({model: self.fits[model]}, method=self.method, formula=self.formula,
                   population=self.population, group=self.group, conf_level=self.conf_level,
                   options=self.options)

    def __repr__(self) -> str:
        return (f"Fit(method={self.method!r}, formula={self.formula!r}, models={self.models}, "
                f"population={self.population!r})")

    @property
    def models(self) -> list[str]:
        return list(self.fits)

    @property
    def loglik(self) -> float:
        """Maximised log-likelihood (sum over the models' independent fits; NaN for GEE)."""
        return float(sum(f.loglik for f in self.fits.values()))

    @property
    def warnings(self) -> list[str]:
        return [f"{m}: {w}" for m, f in self.fits.items() for w in f.warnings]

    # ------------------------------------------------------------------ tables
    def tidy(self, conf_level: float | None = None) -> pd.DataFrame:
        """Terms of every model: log-odds estimates, Wald z tests and odds ratios.

        Returns the tidy estimate contract with grouping column ``model``; columns
        ``estimand`` (term), ``estimate`` (log-odds; the SD for ``sd__(Intercept)``),
        ``std_error``, ``conf_low``/``conf_high`` (Wald, log-odds), ``statistic`` (z),
        ``p_value`` (two-sided normal), ``n`` (rows), ``n_pos``/``n_neg`` (label 1 / label
        0 rows: all of ``n`` for positives / negatives), ``method``, ``flag``; extras
        ``term``, ``effect``, ``n_events`` (rows with outcome 1: detected or correct),
        ``df`` (t reference of the test and interval: GEE with Mancl-DeRouen SEs, see
        :mod:`stats.models.gee`; NaN for a normal reference), ``n_clusters`` (GEE clusters),
        ``odds_ratio``, ``or_conf_low``, ``or_conf_high``, ``group_var`` (the random
        intercept of an SD row). Terms dropped as empty or aliased stay as rows
        with NaN estimates and flag ``empty``/``aliased``. A nested GLMM
        (``group=("site", "patient_id")``) has one SD row per level,
        ``sd__(Intercept)|site`` and ``sd__(Intercept)|patient_id:site`` (lme4's
        ``patient_id:site`` term).
        """
        level = conf_level or self.conf_level
        z = sps.norm.ppf(0.5 + level / 2)
        rows = []
        for m, f in self.fits.items():
            d = f.design
            with np.errstate(invalid="ignore"):
                se = np.sqrt(np.diag(f.vcov))
            sep = separated_terms(f.warnings)
            est = dict(zip(d.terms, f.beta))
            ses = dict(zip(d.terms, se))
            npos, nneg = _pos_neg(self.population, f.nobs)
            events = float(np.sum(d.y))
            base = f.flags()
            df = float(f.extra.get("df", np.inf))  # t reference: GEE with few clusters
            q, pval = wald_reference(df, level)
            for t in d.all_terms:
                b, s = est.get(t, np.nan), ses.get(t, np.nan)
                flag = d.dropped.get(t, "")
                if t in sep:
                    flag = "separation"   # the ML log-odds ratio is infinite: +-inf, no SE
                    b, s = np.copysign(np.inf, b), np.nan
                elif not flag and not (np.isfinite(b) and np.isfinite(s)):
                    flag = "not_estimable"      # on the term it concerns, not on every term
                rows.append(dict(estimand=t, model=m, estimate=b, std_error=s,
                                 conf_low=b - q * s, conf_high=b + q * s, conf_level=level,
                                 n=f.nobs, n_pos=npos, n_neg=nneg, method=f.method_label,
                                 flag=";".join(x for x in (flag, base) if x),
                                 statistic=b / s, p_value=pval(b / s),
                                 term=t, effect="fixed", n_events=events,
                                 df=df if df != np.inf else np.nan,
                                 n_clusters=float(f.extra.get("n_clusters", np.nan))))
            for k, (gv, sd) in enumerate(f.variance_components().items()):
                s = float(np.sqrt(f.vcov_full[k, k])) if f.vcov_full is not None else np.nan
                est = RE_TERM if f.n_sd == 1 else f"{RE_TERM}|{gv}"
                rows.append(dict(estimand=est, model=m, estimate=sd, std_error=s,
                                 conf_low=max(sd - z * s, 0.0), conf_high=sd + z * s,
                                 conf_level=level, n=f.nobs, n_pos=npos, n_neg=nneg,
                                 method=f.method_label, flag=base, term=est,
                                 effect="ran_pars", n_events=events, group_var=gv))
        out = pd.DataFrame(rows)
        fixed = out["effect"] == "fixed"
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out = _odds_ratios(out, fixed)
        return tidy(out, group_cols=("model",))

    def glance(self) -> pd.DataFrame:
        """One row per model: ``model, method, nobs, n_groups, n_missing, loglik, aic, bic,
        df, converged, group_sd, nested_sd`` (the SD of the nested level, e.g. patients
        within sites; NaN without one), ``n_nested`` (its levels), ``r2_marginal, r2_conditional, gee_alpha, gee_scale,
        warnings`` (``"; "``-joined messages, each ``code: explanation``; ``""`` when none;
        codes: separation, empty_level, aliased, singular, few_groups, not_converged,
        not_estimable). GEE has no likelihood: loglik, aic, bic are NaN. r2_marginal and
        r2_conditional (latent scale) are NaN for GEE and site-fixed fits (see
        ``ModelFit.r2``). AIC/BIC as R: ``-2 loglik + 2 df`` and ``+ log(nobs) df``,
        df = fixed effects (+ 1 for the group SD)."""
        rows = []
        for m, f in self.fits.items():
            r2m, r2c = f.r2()
            rows.append(dict(model=m, method=f.method_label, nobs=f.nobs,
                             n_groups=len(f.design.group_levels), n_missing=f.design.n_missing,
                             n_nested=(len(f.design.nest_levels) if f.design.nest_levels
                                       is not None else np.nan),
                             loglik=f.loglik, aic=-2 * f.loglik + 2 * f.n_params,
                             bic=-2 * f.loglik + np.log(f.nobs) * f.n_params, df=f.n_params,
                             converged=f.converged,
                             group_sd=np.nan if f.theta is None else f.theta,
                             nested_sd=float(f.sds[1]) if f.n_sd == 2 else np.nan,
                             r2_marginal=r2m, r2_conditional=r2c,
                             gee_alpha=f.extra.get("alpha", np.nan),
                             gee_scale=f.extra.get("scale", np.nan),
                             warnings="; ".join(f.warnings)))
        return pd.DataFrame(rows)

    def random_effects(self, conf_level: float | None = None) -> pd.DataFrame:
        """The group SD and the predicted group effects (conditional modes ``b_g`` on the
        log-odds scale, lme4's ``ranef``) with conditional SEs (``sqrt(postVar)``).

        Tidy contract, grouping ``model, group_var, group_level``: estimand ``group_sd``
        (group_level ``overall``) or ``group_effect``; ``n`` rows of that group. GLMM only
        (other methods return an empty table of the same columns). A nested GLMM has the
        rows of both levels: ``group_var`` ``site`` and ``patient_id:site`` (levels
        ``P001:site_03``, as lme4's ``ranef``); the conditional SEs are the diagonal of
        the joint conditional covariance (lme4's ``condVar``).
        """
        level = conf_level or self.conf_level
        z = sps.norm.ppf(0.5 + level / 2)
        rows = []
        for m, f in self.fits.items():
            if f.re is None:
                continue
            re = f.re
            gvs = re["group_var"] if "group_var" in re else pd.Series(self.group, index=re.index)
            for k, (gv, sd) in enumerate(f.variance_components().items()):
                name = self.group if f.n_sd == 1 else gv
                sd_se = float(np.sqrt(f.vcov_full[k, k]))
                rows.append(dict(estimand="group_sd", model=m, group_var=name,
                                 group_level="overall", estimate=sd, std_error=sd_se,
                                 conf_low=max(sd - z * sd_se, 0.0), conf_high=sd + z * sd_se,
                                 n=f.nobs, method=f.method_label, flag=f.flags()))
                sel = (gvs == gv).to_numpy() if f.n_sd > 1 else np.ones(len(re), bool)
                rows.extend(dict(estimand="group_effect", model=m, group_var=name,
                                 group_level=g, estimate=e, std_error=s, conf_low=e - z * s,
                                 conf_high=e + z * s, n=k_, method=f.method_label,
                                 flag=f.flags())
                            for g, e, s, k_ in zip(re["group"][sel], re["estimate"][sel],
                                                   re["std_error"][sel], re["n"][sel]))
        cols = ("model", "group_var", "group_level")
        if not rows:
            return tidy(pd.DataFrame(columns=["estimand", *cols]), group_cols=cols)
        out = pd.DataFrame(rows)
        out["conf_level"] = level
        return tidy(out, group_cols=cols)

    def r2(self) -> pd.DataFrame:
        """Marginal and conditional R2 on the latent scale (Nakagawa & Schielzeth 2013):
        ``R2_m = s_f^2 / (s_f^2 + s_u^2 + pi^2/3)``, ``R2_c = (s_f^2 + s_u^2) / (...)``,
        ``s_f^2 = var(X beta)``, ``s_u`` the group SD. GLMM (and plain logistic) fits only:
        NaN for ``method="fixed"`` with a group and for GEE (see ``ModelFit.r2``).
        Validated against R's recomputation on the glmer fit (tests/r/models_glmer.R)."""
        rows = []
        for m, f in self.fits.items():
            r2m, r2c = f.r2()
            rows += [dict(estimand="r2_marginal", model=m, estimate=r2m, n=f.nobs,
                          method="nakagawa-latent"),
                     dict(estimand="r2_conditional", model=m, estimate=r2c, n=f.nobs,
                          method="nakagawa-latent")]
        return tidy(pd.DataFrame(rows), group_cols=("model",))

    def marginal_means(self, by, *, kind: str = "emmeans", conf_level: float | None = None,
                       n_nodes: int = 32) -> pd.DataFrame:
        """Adjusted sensitivities (positives) or specificities (negatives) per level of
        ``by``; see :func:`stats.adjust.marginal_means`."""
        from stats.adjust import marginal_means

        return marginal_means(self, by, kind=kind, conf_level=conf_level or self.conf_level,
                              n_nodes=n_nodes)

    def contrasts(self, by, *, adjust: str = "holm", strata=None,
                  conf_level: float | None = None) -> pd.DataFrame:
        """Pairwise odds ratios of the adjusted levels of ``by`` (emmeans' ``pairs(emmeans(
        fit, ~ by, type = "response"), adjust = "holm")``; with ``strata``, ``~ by |
        strata``); see :func:`stats.adjust.contrasts`."""
        from stats.adjust import contrasts

        return contrasts(self, by, strata=strata, adjust=adjust,
                         conf_level=conf_level or self.conf_level)
