"""Metadata provenance analyses: how each metadata field was obtained and how far the
extractors can be trusted, and the subgroup intervals that carry the remaining error.

Input: the metadata evidence table (``case_id, field, value, extractor, evidence, start,
end, source, context``; ``review`` rows are human decisions, not an extractor). Only rows
whose ``context`` is asserted (or empty, or a table without the column) are values; the
mentions the extractors set aside as negated, about a prior study, hypothetical or about a
relative are counted by ``metadata_context`` and nowhere else. Race values are put on the
study's levels by the plan's ``metadata.race_levels`` (:func:`race_levels`; default:
Declined -> Unknown) before anything is counted. Per field:

- ``metadata_sources``: values, cases, values with an evidence span and with a verbatim
  one (``len(evidence) == end - start``), distinct values, per extractor;
- ``metadata_coverage``: cases with a value / cases, per extractor and for any source
  (Wilson CI); the cases are those of the cases table when the plan has one (both splits:
  the metadata describe every case), else those of the evidence table;
- ``metadata_agreement``: per extractor pair, the share of cases (with both values) that
  agree with its Wilson CI (``stats.extractor_agreement``), and Cohen's kappa with the
  large-sample standard error of Fleiss, Cohen & Everitt (1969) and a Wald interval
  (``statsmodels.stats.inter_rater.cohens_kappa``); categories are nominal (an age of 63
  against 64 is a disagreement);
- ``metadata_agreement_by_site`` and ``metadata_site_test``: the same agreement per site
  (Wilson CIs), and a test of equal agreement across sites: Pearson's X^2 without
  continuity correction on the sites x (agree, disagree) table (``stats.heterogeneity_test``
  with agreement as the "detected" outcome; R's ``chisq.test(correct = FALSE)``);
- ``metadata_review``: per extractor pair, the cases sent to review (values differ, or
  only one of two extractors that ran on the case answered) and the outcomes: the
  reviewer kept extractor A's value, B's, or wrote a new value, or no review exists;
- ``label_error_table`` and ``label_error_metrics`` (when the plan's ``metadata.label_error``
  asks): P(true | recorded) per field, given or estimated from disagreement and review
  (``stats.label_error.misclassification_from_review``), and naive beside error-aware
  sensitivity and specificity on the subgroup axes built on those fields
  (``stats.label_error.compare_naive``: multiple imputation of the true subgroup, Rubin's
  rules). An evidence field that a plan bin reads (``age`` -> ``age_group``) is binned
  first, so the table speaks of the axis the report shows.

Units are cases (scans). When the study's scans cluster within patients (the decided
``detection.cluster``), every proportion's interval here is cluster-aware (Wilson at Korn
& Graubard's effective size over the patients of its row, method "wilson-cluster", with
``n_clusters``; :func:`stats.clustered.clustered_proportions`) and the test of equal
agreement across sites is Rao-Scott's (``rao-scott-f``); kappa's standard error is the
linearization over patients with a t reference on C - 1 degrees of freedom
(``linearization-cluster-t``, :func:`kappa_interval`). Evidence text never leaves this layer in a table (it may
identify).

References: Fleiss JL, Cohen J, Everitt BS (1969) Large sample standard errors of kappa
and weighted kappa. Psychol Bull 72:323-327. Cohen J (1960) Educ Psychol Meas 20:37-46.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from stats.schema import ContractError
from .core import analysis

NEEDED = ("case_id", "field", "value", "extractor")
CONTEXT = "context"
ASSERTED = "asserted"
#: the context labels of mentions that are kept as evidence but are no value
CONTEXT_LABELS = ("negated", "historical", "hypothetical", "family")
REVIEW = "review"
ANY = "any source"
MSG_COLUMNS = ("{file}: metadata evidence table lacks column(s) {missing}; write it with "
               "clinrel metadata extract")
KAPPA_METHOD = "fleiss-cohen-everitt-wald"
#: kappa's interval on its linearization SE over clusters with a t(C - 1) reference
#: (:func:`kappa_interval`)
KAPPA_CLUSTER_METHOD = "linearization-cluster-t"
PAIR = ["field", "extractor_a", "extractor_b"]


def _wants(plan, tables) -> bool:
    return tables.metadata is not None


def _wants_label_error(plan, tables) -> bool:
    opts = getattr(plan, "metadata_options", None)
    return (opts is not None and opts.label_error is not None
            and getattr(plan, "detection", None) is not None and tables.cases is not None)


def _all_rows(results) -> pd.DataFrame:
    """The evidence table as read, ids and names as text (every context)."""
    md = results.tables.metadata
    missing = [c for c in NEEDED if c not in md.columns]
    if missing:
        raise ContractError(MSG_COLUMNS.format(file=getattr(results.plan, "metadata", "metadata"),
                                               missing=", ".join(missing)))
    # ids and names as text, from CSV (read as text) and parquet (maybe numbers) alike, so
    # case ids match the cases table's (text) ids
    ids = {c: md[c].astype(object).where(md[c].isna(), md[c].astype(str))
           for c in ("case_id", "field", "extractor") if md[c].dtype != object}
    return md.assign(**ids) if ids else md


def _asserted(md: pd.DataFrame) -> np.ndarray:
    """Which rows are values: ``context`` asserted, empty or missing (a table without the
    column: every row)."""
    if CONTEXT not in md.columns:
        return np.ones(len(md), dtype=bool)
    ctx = md[CONTEXT]
    return (ctx.isna() | ctx.astype(str).str.strip().isin(["", ASSERTED])).to_numpy()


def race_levels(plan) -> dict[str, str]:
    """Extracted race value -> the study's level: :data:`analysis.plan.DEFAULT_RACE_LEVELS`
    updated by the plan's ``metadata.race_levels``."""
    from .plan import DEFAULT_RACE_LEVELS

    opts = getattr(plan, "metadata_options", None)
    return {**DEFAULT_RACE_LEVELS, **(dict(opts.race_levels) if opts is not None else {})}


def _checked(results) -> pd.DataFrame:
    """The values of the evidence table: asserted rows only (a negated, prior-study,
    hypothetical or family mention is no value), race values on the study's levels
    (:func:`race_levels`; a value outside the extractors' vocabulary, such as a
    reviewer's level, as written)."""
    md = _all_rows(results)
    md = md[_asserted(md)]
    race = (md["field"] == "race").to_numpy()
    if race.any():
        levels = race_levels(results.plan)
        v = md.loc[race, "value"]
        md = md.copy()
        md.loc[race, "value"] = v.map(lambda x: levels.get(str(x), x) if pd.notna(x) else x)
    return md


def _values(results) -> pd.DataFrame:
    """Evidence rows with a value (empty or missing values dropped), values as text."""
    ev = _checked(results)
    ev = ev[ev["value"].notna()]
    ev = ev.assign(value=ev["value"].astype(str))
    return ev[ev["value"].str.strip() != ""]


def _conf_level(results) -> float:
    det = getattr(results.plan, "detection", None)
    return det.conf_level if det is not None else 0.95


def _cluster_of(results) -> pd.Series | None:
    """The cluster (patient) of each case_id of the cases table, when the decided
    ``detection.cluster`` names one; else None (cases independent)."""
    from .detection import _wants_detection

    if not _wants_detection(results.plan, results.tables):
        return None
    cluster = results["cluster"]
    if not cluster:
        return None
    c = results.tables.cases.drop_duplicates("case_id")
    # a case without a patient id (e.g. in a split the detection analyses do not read) is
    # its own cluster, as is a case the cases table lacks (see _agreement_by_case)
    ids = c[cluster].astype(object).where(c[cluster].notna(), "case:" + c["case_id"].astype(str))
    return pd.Series(ids.astype(str).to_numpy(), index=c["case_id"].to_numpy())


def _clustered_wilson(rows: pd.DataFrame, keys: list[str], conf_level: float,
                      k: str, n: str) -> pd.DataFrame:
    """One row per ``keys`` group of ``rows`` (one row per case: ``success`` 0/1 and
    ``cluster``): ``k`` successes of ``n`` cases with the cluster-aware Wilson interval
    (:func:`stats.clustered.clustered_proportions`), ``n_clusters``, ``design_effect``."""
    from scipy import sparse

    from stats.clustered import clustered_proportions

    grouped = rows.groupby(keys, sort=True, observed=True)
    g = grouped.ngroup().to_numpy()          # group codes in the sorted key order
    G = grouped.ngroups
    member = sparse.csr_matrix((np.ones(len(rows)), (g, np.arange(len(rows)))),
                               shape=(G, len(rows)))
    codes = pd.factorize(rows["cluster"])[0]
    c = clustered_proportions(member, codes, rows[["success"]].to_numpy(float),
                              np.ones((len(rows), 1)), conf_level=conf_level)
    out = grouped.size().reset_index()[keys]
    return out.assign(**{k: c["numerator"][:, 0].astype(np.int64),
                         n: c["denominator"][:, 0].astype(np.int64)},
                      estimate=c["estimate"][:, 0], conf_low=c["conf_low"][:, 0],
                      conf_high=c["conf_high"][:, 0], conf_level=conf_level,
                      method="wilson-cluster", n_clusters=c["n_clusters"][:, 0],
                      design_effect=c["design_effect"][:, 0])


def _wilson(frame: pd.DataFrame, k: str, n: str, conf_level: float) -> pd.DataFrame:
    from stats.intervals import proportion_limits

    kk, nn = frame[k].to_numpy(float), frame[n].to_numpy(float)
    lo, hi = proportion_limits(kk, nn, conf_level=conf_level)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(nn > 0, kk / np.where(nn > 0, nn, 1), np.nan)
    return frame.assign(estimate=est, conf_low=lo, conf_high=hi, conf_level=conf_level,
                        method="wilson")


@analysis("metadata_sources", wanted=_wants)
def metadata_sources(results) -> pd.DataFrame:
    """Values, cases, values with evidence (and verbatim spans) and distinct values per
    field x extractor."""
    ev = _checked(results)
    n = len(ev)
    span = ev["evidence"].fillna("").astype(str) if "evidence" in ev else pd.Series("", index=ev.index)
    has_span = span.str.len() > 0
    if {"start", "end"} <= set(ev.columns):
        width = (pd.to_numeric(ev["end"], errors="coerce")
                 - pd.to_numeric(ev["start"], errors="coerce")).to_numpy()
        verbatim = has_span.to_numpy() & (width == span.str.len().to_numpy())
    else:
        verbatim = np.zeros(n, dtype=bool)
    ev = ev.assign(with_evidence=has_span.astype(int).to_numpy(), verbatim=verbatim.astype(int))
    counts = (ev.groupby(["field", "extractor"], sort=True)
              .agg(values=("case_id", "size"), cases=("case_id", "nunique"),
                   with_evidence=("with_evidence", "sum"), verbatim=("verbatim", "sum"),
                   distinct=("value", "nunique"))
              .reset_index())
    counts["evidence_percent"] = 100 * counts["with_evidence"] / counts["values"]
    counts["verbatim_percent"] = 100 * counts["verbatim"] / counts["values"]
    return counts


@analysis("metadata_context", wanted=_wants)
def metadata_context(results) -> pd.DataFrame:
    """Mentions the extractors set aside by their clinical context, per field x extractor
    x context (negated, historical, hypothetical, family): ``mentions`` (rows), ``cases``
    (distinct cases). They are evidence, never values (medspaCy's ConText; see
    inference_runner/metadata/context.py)."""
    md = _all_rows(results)
    results.decide("metadata.race_levels", race_levels(results.plan))
    cols = ["field", "extractor", "context", "mentions", "cases"]
    aside = md[~_asserted(md)]
    results.decide("metadata.context_excluded", int(len(aside)))
    if not len(aside):
        return pd.DataFrame(columns=cols)
    aside = aside.assign(context=aside[CONTEXT].astype(str))
    out = (aside.groupby(["field", "extractor", "context"], sort=True)
           .agg(mentions=("case_id", "size"), cases=("case_id", "nunique")).reset_index())
    rank = {c: i for i, c in enumerate(CONTEXT_LABELS)}
    out = out.assign(_r=out["context"].map(rank).fillna(len(rank)))
    return out.sort_values(["field", "extractor", "_r", "context"]).drop(columns="_r")[cols] \
        .reset_index(drop=True)


@analysis("metadata_coverage", wanted=_wants)
def metadata_coverage(results) -> pd.DataFrame:
    """Per field and extractor (each extractor, review, and "any source"): cases with a
    value / cases, with a Wilson CI."""
    ev = _values(results)
    cases = results.tables.cases
    if cases is not None:
        universe = pd.unique(cases["case_id"])
        results.decide("metadata.coverage_cases", "every case of the cases table "
                       f"({len(universe)}, all splits)")
    else:
        universe = pd.unique(ev["case_id"])
        results.decide("metadata.coverage_cases", "the cases of the evidence table "
                       f"({len(universe)}): the plan has no cases table")
    outside = int((~pd.Series(pd.unique(ev["case_id"])).isin(universe)).sum())
    results.decide("metadata.cases_not_in_cases_table", outside)
    inside = ev[ev["case_id"].isin(universe)]
    per = inside.groupby(["field", "extractor"], sort=True)["case_id"].nunique()
    anyv = inside.groupby("field", sort=True)["case_id"].nunique()
    out = pd.concat([per.rename("cases_with_value").reset_index(),
                     anyv.rename("cases_with_value").reset_index().assign(extractor=ANY)],
                    ignore_index=True)
    rank = {s: i for i, s in enumerate(sorted(set(out["extractor"]) - {REVIEW, ANY}))}
    rank |= {REVIEW: len(rank), ANY: len(rank) + 1}
    out = out.assign(_r=out["extractor"].map(rank)).sort_values(["field", "_r"]).drop(columns="_r")
    out["cases"] = len(universe)
    out = out.reset_index(drop=True)
    patient = _cluster_of(results)
    if patient is None or cases is None:
        out = _wilson(out, "cases_with_value", "cases", _conf_level(results))
        return out.rename(columns={"estimate": "coverage"})
    # per (field, source): the moments of the ratio over patients from the cases WITH a
    # value (a_c per patient) and the universe's cases per patient (m_c), without a
    # (field, source) x case grid: ss = sum a_c^2 - 2 p sum a_c m_c + p^2 sum m_c^2
    from stats.clustered import design_effect, effective_interval

    has = pd.concat([inside[["field", "extractor", "case_id"]],
                     inside[["field", "case_id"]].assign(extractor=ANY)]).drop_duplicates()
    pc, _ = pd.factorize(patient.reindex(universe).to_numpy())
    m = np.bincount(pc).astype(float)
    C = len(m)
    g = pd.MultiIndex.from_frame(out[["field", "extractor"]]).get_indexer(
        pd.MultiIndex.from_frame(has[["field", "extractor"]]))
    pair, a = np.unique(g * C + pc[pd.Index(universe).get_indexer(has["case_id"])],
                        return_counts=True)
    G, a = len(out), a.astype(float)
    gp, cp = pair // C, pair % C
    x = np.bincount(gp, weights=a, minlength=G)
    n = float(len(universe))
    p = x / n
    ss = (np.bincount(gp, weights=a ** 2, minlength=G)
          - 2 * p * np.bincount(gp, weights=a * m[cp], minlength=G) + p ** 2 * (m ** 2).sum())
    conf = _conf_level(results)
    d = design_effect({"n": np.full(G, n), "x": x, "n_clusters": np.full(G, float(C)),
                       "repeats": np.full(G, bool((m > 1).any())), "ss": np.fmax(ss, 0.0)},
                      conf)
    lo, hi = effective_interval(x, np.full(G, n), d["n_effective"], conf_level=conf)
    c = out[["field", "extractor"]].assign(
        cases_with_value=x.astype(np.int64), cases=int(n), estimate=d["estimate"],
        conf_low=lo, conf_high=hi, conf_level=conf, method="wilson-cluster",
        n_clusters=C, design_effect=d["design_effect"])
    out = out[["field", "extractor"]].merge(c, on=["field", "extractor"], how="left")
    return out.rename(columns={"estimate": "coverage"})


def kappa_interval(a, b, *, cluster=None, conf_level: float = 0.95) -> dict:
    """Cohen's kappa of two raters' nominal values (same cases, same order), its standard
    error and the Wald interval, clipped to [-1, 1]. NaN with fewer than 2 cases, one
    category, or chance agreement 1.

    Cases as independent (``cluster`` None, or no cluster holding two cases): the
    large-sample SE of Fleiss, Cohen & Everitt (1969), as
    ``statsmodels.stats.inter_rater.cohens_kappa`` (method ``KAPPA_METHOD``). With repeated
    cases of one cluster (``cluster``: the patient of each case): the linearization
    (delta-method) SE over clusters, ``V = C / (C - 1) sum_c (sum_{i in c} z_i)^2 / n^2``
    with kappa's influence value
    ``z_i = (o_i - p_o) / (1 - p_e) + (p_o - 1) (pB[a_i] + pA[b_i] - 2 p_e) / (1 - p_e)^2``
    (``o_i`` the case agrees, ``pA``, ``pB`` the raters' category shares, ``p_e`` chance
    agreement), as R's ``svycontrast`` of the kappa expression over
    ``svymean(~o + A_k + B_k, svydesign(ids = ~cluster))`` (tests/r/kappa_cluster.R), and
    the interval ``kappa +- t_{C-1} SE`` on the design's C - 1 degrees of freedom, as
    ``confint(svycontrast(...), df = degf(design))``: with 10 patients a normal quantile
    covered 86.5%, the t quantile about 90% (``bench/kappa_cluster_coverage.md``); method
    ``KAPPA_CLUSTER_METHOD``. Returns ``kappa, std_error, conf_low, conf_high, method,
    n_clusters`` (NaN without ``cluster``). The interval is NaN (not estimable) where the SE
    is 0 (below 1e-12: rounding), e.g. perfect agreement: the delta method then gives a
    zero-width interval."""
    from scipy.stats import norm, t
    from statsmodels.stats.inter_rater import cohens_kappa

    a, b = np.asarray(a, dtype=str), np.asarray(b, dtype=str)
    cats = np.union1d(a, b)
    if cluster is not None and len(cluster) != len(a):
        raise ValueError(f"kappa_interval: cluster has {len(cluster)} ids for {len(a)} cases; "
                         "give one cluster id (e.g. the patient) per case, in the cases' order")
    clus = None if cluster is None else pd.factorize(np.asarray(cluster, dtype=str))[0]
    n_cl = np.nan if clus is None else float(clus.max() + 1 if len(clus) else 0)
    repeats = clus is not None and n_cl < len(clus)
    method = KAPPA_CLUSTER_METHOD if repeats else KAPPA_METHOD
    nan = {"kappa": np.nan, "std_error": np.nan, "conf_low": np.nan, "conf_high": np.nan,
           "method": method, "n_clusters": n_cl}
    if len(a) < 2 or len(cats) < 2:
        return nan
    ia, ib = np.searchsorted(cats, a), np.searchsorted(cats, b)
    table = np.zeros((len(cats), len(cats)))
    np.add.at(table, (ia, ib), 1)
    n = len(a)
    pa, pb = table.sum(1) / n, table.sum(0) / n
    pe = float(pa @ pb)
    if pe >= 1:
        return nan
    res = cohens_kappa(table, return_results=True)
    k = float(res.kappa)
    if repeats:
        po = float(np.trace(table)) / n
        z = ((ia == ib) - po) / (1 - pe) + (po - 1) * (pb[ia] + pa[ib] - 2 * pe) / (1 - pe) ** 2
        zc = np.bincount(clus, weights=z)
        se = (float(np.sqrt(n_cl / (n_cl - 1) * (zc ** 2).sum())) / n if n_cl > 1
              else np.nan)
    else:
        se = float(np.sqrt(max(res.var_kappa, 0.0)))
    q = (t.ppf(0.5 + conf_level / 2, n_cl - 1) if repeats and n_cl > 1
         else norm.ppf(0.5 + conf_level / 2))
    if not np.isfinite(se) or se < 1e-12:
        # one cluster: no interval (max(-1, nan) would give -1); a zero SE (every case
        # agrees, or one category per rater) gives a zero-width "interval" no reviewer
        # accepts: not estimable, the agreement share's interval gives the precision
        return {**nan, "kappa": k, "std_error": se}
    return {"kappa": k, "std_error": se, "conf_low": float(max(-1.0, k - q * se)),
            "conf_high": float(min(1.0, k + q * se)), "method": method, "n_clusters": n_cl}


def _pairs(ev: pd.DataFrame):
    """``(field, a, b, values_a, values_b)`` per field and extractor pair (first value of
    each case x field x extractor), values as Series indexed by case_id."""
    from stats.agreement import extractor_pairs

    for field, a, b, wa, wb in extractor_pairs(ev):
        yield field, a, b, wa["value"], wb["value"]


@analysis("metadata_agreement", wanted=_wants)
def metadata_agreement(results) -> pd.DataFrame:
    """Agreement between extractors per field: Wilson CI, Cohen's kappa with its
    Fleiss-Cohen-Everitt CI, and the cases reviewed."""
    from stats.agreement import extractor_agreement

    ev = _values(results)
    conf = _conf_level(results)
    ag = extractor_agreement(ev, conf_level=conf).reset_index(drop=True)
    patient = _cluster_of(results)
    rows = []
    for field, a, b, va, vb in _pairs(ev):
        both = va.index.intersection(vb.index)
        # a case the cases table lacks is its own cluster (as in _agreement_by_case)
        clus = (None if patient is None else patient.reindex(both).fillna(
            pd.Series("case:" + pd.Index(both).astype(str), index=both)).to_numpy())
        ki = kappa_interval(va.loc[both], vb.loc[both], cluster=clus, conf_level=conf)
        rows.append({"field": field, "extractor_a": a, "extractor_b": b,
                     **{f"kappa_{k}": v for k, v in ki.items()
                        if k not in ("kappa", "n_clusters")},
                     "kappa_flag": ("not_estimable" if np.isfinite(ki["kappa"])
                                    and not np.isfinite(ki["conf_low"]) else "")})
    kap = pd.DataFrame(rows, columns=[*PAIR, "kappa_std_error", "kappa_conf_low",
                                      "kappa_conf_high", "kappa_method", "kappa_flag"])
    ag = ag.merge(kap, on=PAIR, how="left")
    ag["kappa_method"] = ag["kappa_method"].fillna(KAPPA_METHOD)
    ag["conf_level"] = conf
    reviewed = ev[ev["extractor"] == REVIEW].groupby("field")["case_id"].nunique()
    ag["reviewed"] = ag["field"].map(reviewed).fillna(0).astype(int)
    ag["method"] = "wilson"
    per = _agreement_by_case(results, need_site=False)
    if per and "cluster" in per[0][1]:
        rows = pd.concat([d.assign(field=k[0], extractor_a=k[1], extractor_b=k[2])
                          for k, d in per if len(d)], ignore_index=True)
        c = _clustered_wilson(rows.rename(columns={"agree": "success"}), PAIR, conf,
                              "n_agree", "n_both")
        order = list(ag.columns)
        ag = ag.drop(columns=["conf_low", "conf_high", "method"]).merge(
            c[[*PAIR, "conf_low", "conf_high", "method", "n_clusters"]], on=PAIR, how="left")
        ag = ag[[*order, "n_clusters"]]
    results.decide("metadata.agreement", "cases with both values; Wilson CI; Cohen's kappa "
                   "(nominal) with the Fleiss-Cohen-Everitt (1969) large-sample SE, Wald CI"
                   + ("" if patient is None else "; with repeated scans the interval is "
                      "cluster-aware (wilson-cluster), and kappa's SE the linearization over "
                      "patients in the pairs whose cases repeat a patient (kappa_method "
                      f"{KAPPA_CLUSTER_METHOD})"))
    return ag


def _agreement_by_case(results, need_site: bool = True):
    """Per field x pair: a frame ``case_id, site, agree`` (and ``cluster``, the case's
    patient, when scans cluster) of the cases with both values: those of the cases table
    with a site (``need_site``, for the by-site analyses), else every case with both
    values, as ``stats.extractor_agreement`` counts them (a case the cases table lacks is
    its own cluster). None without a cases table (or, with ``need_site``, one without
    ``site``)."""
    cases = results.tables.cases
    if cases is None or (need_site and "site" not in cases.columns):
        return None
    c = cases.drop_duplicates("case_id").set_index("case_id")
    site = c["site"].astype(str) if "site" in c.columns else pd.Series("", index=c.index)
    patient = _cluster_of(results)
    out = []
    for field, a, b, va, vb in _pairs(_values(results)):
        both = va.index.intersection(vb.index)
        if need_site:
            both = both.intersection(site.index)
        frame = pd.DataFrame({
            "case_id": both, "site": site.reindex(both).fillna("").to_numpy(),
            "agree": (va.loc[both].to_numpy() == vb.loc[both].to_numpy()).astype(int)})
        if patient is not None:
            alone = pd.Series("case:" + pd.Index(both).astype(str), index=both)
            frame["cluster"] = patient.reindex(both).fillna(alone).to_numpy()
        out.append(((field, a, b), frame))
    return out


@analysis("metadata_agreement_by_site", wanted=_wants)
def metadata_agreement_by_site(results) -> pd.DataFrame:
    """Agreement per field x extractor pair x site, with Wilson CIs (empty without a
    cases table that names each case's site)."""
    cols = [*PAIR, "site", "n_both", "n_agree", "estimate", "conf_low", "conf_high",
            "conf_level", "method"]
    per = _agreement_by_case(results)
    if not per:
        return pd.DataFrame(columns=cols)
    if "cluster" in per[0][1]:
        rows = [d.assign(field=k[0], extractor_a=k[1], extractor_b=k[2]) for k, d in per
                if len(d)]
        if not rows:
            return pd.DataFrame(columns=cols)
        out = _clustered_wilson(pd.concat(rows, ignore_index=True).rename(
            columns={"agree": "success"}), [*PAIR, "site"], _conf_level(results),
            "n_agree", "n_both")
        return out[[*cols, "n_clusters"]]
    frames = [d.groupby("site", sort=True)["agree"].agg(n_both="size", n_agree="sum")
              .reset_index().assign(field=k[0], extractor_a=k[1], extractor_b=k[2])
              for k, d in per if len(d)]
    if not frames:
        return pd.DataFrame(columns=cols)
    out = _wilson(pd.concat(frames, ignore_index=True), "n_agree", "n_both",
                  _conf_level(results))
    return out[cols]


@analysis("metadata_site_test", wanted=_wants)
def metadata_site_test(results) -> pd.DataFrame:
    """Per field x extractor pair: Pearson's X^2 (no continuity correction) of equal
    agreement across sites (``stats.heterogeneity_test``)."""
    from stats.heterogeneity import heterogeneity_test

    cols = [*PAIR, "statistic", "df", "df_denominator", "p_value", "n", "n_levels",
            "min_expected", "method", "flag"]
    per = _agreement_by_case(results)
    rows = []
    for (field, a, b), d in per or ():
        if not len(d):
            continue
        pseudo = pd.DataFrame({"case_id": d["case_id"], "model": "agreement", "label": 1,
                               "score": d["agree"], "pred": d["agree"], "site": d["site"]})
        clustered = "cluster" in d
        if clustered:
            pseudo["patient_id"] = d["cluster"].to_numpy()
        t = heterogeneity_test(pseudo, by=["site"], estimand="sensitivity",
                               cluster="patient_id" if clustered else None)
        rows.append(t.iloc[0].reindex(cols[3:]).to_dict()
                    | {"field": field, "extractor_a": a, "extractor_b": b})
    methods = {r["method"] for r in rows}
    results.decide("metadata.site_test", "; ".join(
        text for m, text in (
            ("rao-scott-f", "Rao-Scott second-order F test (survey::svychisq default), sites "
                            "x (agree, disagree), cases clustered within patients (pairs "
                            "whose cases repeat a patient)"),
            ("pearson-chisq", "Pearson chi-square without continuity correction, sites x "
                              "(agree, disagree), cases independent (pairs whose cases are "
                              "one per patient, or no patient clustering)"))
        if m in methods) or "no test")
    return pd.DataFrame(rows, columns=cols)


@analysis("metadata_review", wanted=_wants)
def metadata_review(results) -> pd.DataFrame:
    """Per field x extractor pair: cases sent to review and the review outcomes."""
    ev = _values(results)
    ran = {e: set(g) for e, g in ev[ev["extractor"] != REVIEW].groupby("extractor")["case_id"]}
    review = (ev[ev["extractor"] == REVIEW].drop_duplicates(["case_id", "field"], keep="last")
              .set_index(["field", "case_id"])["value"])
    rows = []
    for field, a, b, va, vb in _pairs(ev):
        seen = ran[a] & ran[b]  # an extractor that gave no value for any field did not run
        idx = pd.Index(sorted((set(va.index) | set(vb.index)) & seen))
        xa, xb = va.reindex(idx), vb.reindex(idx)
        rv = review.loc[field].reindex(idx) if field in review.index.get_level_values(0) \
            else pd.Series(np.nan, index=idx, dtype=object)
        one = xa.isna() ^ xb.isna()
        differ = xa.notna() & xb.notna() & (xa != xb)
        queued = one | differ
        done = queued & rv.notna()
        kept_a = done & (rv == xa)
        kept_b = done & (rv == xb) & ~kept_a
        rows.append({"field": field, "extractor_a": a, "extractor_b": b,
                     "differ": int(differ.sum()), "one_sided": int(one.sum()),
                     "queued": int(queued.sum()), "reviewed": int(done.sum()),
                     "kept_a": int(kept_a.sum()), "kept_b": int(kept_b.sum()),
                     "new_value": int((done & ~kept_a & ~kept_b).sum()),
                     "not_reviewed": int((queued & ~done).sum())})
    return pd.DataFrame(rows, columns=[*PAIR, "differ", "one_sided", "queued", "reviewed",
                                       "kept_a", "kept_b", "new_value", "not_reviewed"])


# --------------------------------------------------------------------------- label error

def _binned_evidence(results, ev: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Evidence whose field a plan bin reads, re-expressed on the bin's levels (the
    axis the report shows); returns the evidence and {field: bin name}."""
    from stats.subgroups import add_bins

    det = results.plan.detection
    renamed = {}
    out = ev
    for b in (det.bins.values() if det is not None else ()):
        hit = (out["field"] == b.column).to_numpy()
        if not hit.any():
            continue
        num = pd.DataFrame({b.column: pd.to_numeric(out.loc[hit, "value"], errors="coerce")})
        # an extracted value outside the bins is an unusable extraction: left out, as an
        # unreadable one is (strict=False), while the cases table's own values must bin
        binned = add_bins(num, {b.column: {"name": b.name, "breaks": list(b.breaks),
                                           "labels": list(b.labels), "right": False}},
                          strict=False)[b.name]
        out = out.copy()
        out.loc[hit, "value"] = binned.astype(object).where(binned.notna(), None).to_numpy()
        out.loc[hit, "field"] = b.name
        renamed[b.column] = b.name
    return out[out["value"].notna()], renamed


@analysis("label_error_table", wanted=_wants_label_error)
def label_error_table(results) -> pd.DataFrame:
    """P(true | recorded) per field on the subgroup axes' columns: the plan's table, or
    estimated from extractor disagreement and review (Dawid-Skene)."""
    from stats.label_error import check_label_error, misclassification_from_review
    from .detection import axes

    opts = results.plan.metadata_options
    columns = {c for a in axes(results.plan) for c in a}
    if opts.label_error != "estimate":
        table = check_label_error(results.tables.label_error)
        results.decide("metadata.label_error", f"given: {opts.label_error}")
        return table[table["field"].isin(columns)].reset_index(drop=True)
    ev, renamed = _binned_evidence(results, _values(results))
    fields = sorted(set(ev["field"]) & columns)
    prefer = [e for e in opts.prefer if e in set(ev["extractor"])] or None
    table = misclassification_from_review(ev, fields=fields, prefer=prefer)
    results.decide("metadata.label_error", {
        "source": "estimated from the evidence table (Dawid-Skene; review outcomes as truth)",
        "fields": fields, "binned": renamed, "prefer": prefer})
    return table


#: a field that differs within at most this share of the patients with several scans reads
#: as one recorded once per patient with a few inconsistent records (note in auto mode)
NEAR_PATIENT_LEVEL = 0.10


def _note_near_patient_level(results, fields: list[str]) -> None:
    """``metadata.per_patient: auto`` makes a field scan-level when any patient's scans
    differ in it; where only a few patients' do (at most :data:`NEAR_PATIENT_LEVEL` of
    those with several scans), say so, with the plan key that declares it."""
    cases = results["evaluation"].drop_duplicates("case_id")
    cluster = results["cluster"]
    multi = cases.groupby(cluster, observed=True)["case_id"].size()
    multi = multi[multi > 1].index
    sub = cases[cases[cluster].isin(multi)]
    if not len(multi):
        return
    for f in fields:
        n_dis = int((sub.groupby(cluster, observed=True)[f].nunique(dropna=False) > 1).sum())
        if 0 < n_dis <= NEAR_PATIENT_LEVEL * len(multi):
            results.note(f"{f} differs between the scans of {n_dis} of the {len(multi)} "
                         f"patients with several scans, so its error was imputed scan by "
                         f"scan; if it is recorded once per patient, correct those records "
                         f"or declare it under metadata.per_patient (then a disagreeing "
                         f"patient is an error naming the scans)")


@analysis("label_error_metrics", wanted=_wants_label_error)
def label_error_metrics(results) -> pd.DataFrame:
    """Naive and error-aware sensitivity and specificity on the subgroup axes built on a
    field of the label-error table (``stats.label_error.compare_naive``)."""
    from stats.label_error import LABEL_ERROR_COLUMNS, compare_naive
    from .detection import axes, closed_form_ci

    opts = results.plan.metadata_options
    det = results.plan.detection
    table = results["label_error_table"]
    fields = set(table["field"])
    by = [a for a in axes(results.plan) if fields & set(a)]
    if not by:
        results.decide("metadata.label_error_axes", [])
        return pd.DataFrame()
    results.decide("metadata.label_error_axes", [":".join(a) for a in by])
    seed = results.plan.seed_for("label_error_imputation")
    per_patient = None if opts.per_patient == "auto" else tuple(opts.per_patient)
    results.decide("seeds.label_error_imputation", seed)
    results.decide("metadata.n_imputations", opts.n_imputations)
    out = compare_naive(results["evaluation"], by, table[list(LABEL_ERROR_COLUMNS)],
                        metrics=("sensitivity", "specificity"), ci=closed_form_ci(results),
                        conf_level=det.conf_level, small_n=det.small_n,
                        n_imputations=opts.n_imputations, seed=seed,
                        cluster=results["cluster"], per_patient=per_patient)
    results.decide("metadata.per_patient_rule",
                   "declared in the plan (metadata.per_patient)" if per_patient is not None
                   else "read from the data: the fields on which every patient's scans agree")
    if per_patient is None and results["cluster"]:
        _note_near_patient_level(results, sorted(fields & {c for a in by for c in a}))
    per = (out.loc[out["kind"] == "error_aware", "imputed_per_patient"].dropna()
           if "imputed_per_patient" in out else pd.Series(dtype=object))
    results.decide("metadata.label_error_per_patient",
                   sorted({f for v in per for f in str(v).split(";") if f}))
    return out
