"""Cluster-aware closed-form intervals for proportions: repeated scans of one patient.

A proportion ``p = x / n`` over a cell's scans (e.g. sensitivity: detected positives over
positives) treats the scans as independent; scans of one patient are not. Here each cell's
proportion is a ratio estimator over the clusters ``c`` (patients) that have scans in the
cell's denominator, with ``a_c`` successes among ``m_c`` such scans:

    p = sum a_c / sum m_c,   V = C / (C - 1) * sum (a_c - p m_c)^2 / n^2,

the with-replacement (Taylor-linearization) variance over the ``C`` clusters of the cell
(R: ``svymean(~y, svydesign(ids = ~cluster, data = <the cell's denominator scans>))``,
its SE is ``sqrt(V)``). The design effect is ``deff = V / (p (1 - p) / n)`` and the
effective sample size is Korn & Graubard's (1998), degrees-of-freedom corrected and never
above ``n`` (clustering never narrows an interval):

    n_eff = min(n, n / deff * (t_{n-1} / t_{C-1})^2),   t_k the (1 + level) / 2 quantile of t_k.

The interval is the chosen binomial interval (Wilson by default) at ``p n_eff`` successes
of ``n_eff`` trials (``method`` "wilson-cluster", "clopper-pearson-cluster",
"jeffreys-cluster"). With Clopper-Pearson this is R's ``svyciprop(method = "beta")``
wherever ``n_eff < n``.

Rules where the design effect cannot be estimated:

* no cluster repeats among the cell's denominator scans (every ``m_c <= 1``): the scans
  are independent, ``deff = 1`` and ``n_eff = n`` exactly (the plain interval; no flag);
* ``p`` of 0 or 1 with repeats (``V = 0``): ``deff`` NaN, ``n_eff = n`` (Korn & Graubard's
  rule when no variance can be estimated); flag ``deff_not_estimable``;
* a single cluster with repeats (``C = 1``, ``V`` undefined): ``deff`` NaN, ``n_eff = 1``
  (the patient counts as one observation); flag ``deff_not_estimable``.

Coverage (``bench/cluster_coverage.md``; 15, 40 and 120 positive scans from patients with
1-4 scans and a patient random effect of SD 1 or 2 on the logit scale): 94.0-96.2%, inside
the 93.5-96.5% band, in the 38 of 48 scenarios where an interval can miss the truth on
either side; 96.0-97.4% in the 10 (15-40 scans, sensitivity 0.83-0.96) where in most
studies no interval that keeps its lower tail at 2.5% can miss from below, with an
upper-tail error of 2.4-4.0% and a lower-tail error of at most 1.1% (nominal 2.5% each);
without the degrees-of-freedom factor 92.6-96.7% (below the band with 8-20 patients at SD 2); plain Wilson 87.7-95.6%.

Everything is computed for every cell x model at once from sparse sums over
(cell, cluster) pairs (``np.unique`` of combined codes, two sparse products): no loop
over cells, clusters or cases.

References
----------
Kish L (1965) Survey Sampling, sec. 8.2. Korn EL, Graubard BI (1998) Confidence intervals
for proportions with small expected number of positive counts estimated from survey data.
Survey Methodology 24:193-201. Lumley T (2004) Analysis of complex survey samples. J Stat
Softw 9(8) (R package survey: ``svymean``, ``svyciprop``).

Validated against R's ``survey::svymean`` (SE to 1e-8) and ``svyciprop(method = "beta")``
(tests/r/clustered.R).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as sps

from stats._linalg import clean_variance
from stats.intervals import group_sum as _group_sum, proportion_limits

#: the flag of a cell whose design effect could not be estimated (module docstring)
FLAG_DEFF = "deff_not_estimable"
#: the method suffix of a cluster-aware interval: "wilson" -> "wilson-cluster"
SUFFIX = "-cluster"
#: the ``cluster`` value that chooses the cluster from the data (:func:`resolve_cluster`)
AUTO = "auto"
#: the ``cluster`` value (besides None) that keeps scans independent
NONE = "none"
#: the column ``cluster="auto"`` uses when its values repeat
AUTO_COLUMN = "patient_id"


def resolve_cluster(cases: pd.DataFrame, cluster: str | None = AUTO) -> str | None:
    """The cluster column a ``cluster=`` setting means for ``cases``: the one rule behind
    the default of every public function with a ``cluster`` keyword, of the plan's
    ``detection.cluster`` and of the CLI's ``--cluster``.

    * ``"auto"``: ``"patient_id"`` when that column exists and some patient has more than
      one scan among the rows passed (per model, when there is a ``model`` column: the
      same case evaluated by two models is not a repeat; missing ids do not count), else
      None;
    * None or ``"none"`` (any case): None (scans independent);
    * any other string: that column, returned as given (the caller checks that it exists).

    >>> import pandas as pd
    >>> d = pd.DataFrame({"model": "m", "case_id": ["a", "b", "c"], "patient_id": ["p", "p", "q"]})
    >>> resolve_cluster(d), resolve_cluster(d.iloc[1:]), resolve_cluster(d, None)
    ('patient_id', None, None)
    """
    if cluster is None or (isinstance(cluster, str) and cluster.lower() == NONE):
        return None
    if not (isinstance(cluster, str) and cluster.lower() == AUTO):
        return cluster
    if AUTO_COLUMN not in cases.columns:
        return None
    keys = ["model", AUTO_COLUMN] if "model" in cases.columns else [AUTO_COLUMN]
    ids = cases[keys]
    ids = ids[ids[AUTO_COLUMN].notna()]
    return AUTO_COLUMN if bool(ids.duplicated().any()) else None


def cluster_cases(cases: pd.DataFrame, cluster: str | None = AUTO
                  ) -> tuple[pd.DataFrame, str | None]:
    """``(cases, column)``: :func:`resolve_cluster`'s column and the cases to use with it.
    Under ``"auto"`` a case whose ``patient_id`` is missing is a patient of its own (its
    ``case_id``), as ``stats.schema.read_cases`` reads it, instead of an error; a column
    named explicitly keeps the strict check (missing ids are refused with the rows)."""
    column = resolve_cluster(cases, cluster)
    if (column == AUTO_COLUMN and isinstance(cluster, str) and cluster.lower() == AUTO
            and "case_id" in cases.columns and cases[AUTO_COLUMN].isna().any()):
        ids = cases[AUTO_COLUMN].astype(object)
        cases = cases.assign(**{AUTO_COLUMN: ids.where(ids.notna(), cases["case_id"])})
    return cases, column


def pair_sums(member: sparse.spmatrix, cluster: np.ndarray, values: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sums of ``values`` (cases x K) over each (cell, cluster) pair that has a case.

    ``member`` is the cells x cases 0/1 membership matrix, ``cluster`` the cluster code
    (0..C-1) of each case. Returns the cell and the cluster of each pair (pairs,) and the
    sums (pairs x K).
    """
    coo = sparse.coo_matrix(member)
    pair, cell, clu = pair_codes(coo.row, coo.col, cluster)
    S = sparse.csr_matrix((np.ones(len(pair)), (pair, coo.col)),
                          shape=(len(cell), member.shape[1]))
    return cell, clu, np.asarray(S @ values)


def clusters_per_cell(member: sparse.spmatrix, cluster: np.ndarray,
                      in_population: np.ndarray | None = None) -> np.ndarray:
    """Per cell (row of the cells x cases 0/1 ``member`` matrix), the number of clusters
    with a case in the cell (among the cases where ``in_population`` holds, when given):
    ``n_clusters`` of the tables that report it. ``cluster``: each case's cluster code;
    a negative code (a missing id) is a cluster of its own."""
    cluster = np.asarray(cluster, dtype=np.int64)
    if len(cluster) and cluster.min() < 0:
        cluster = cluster.copy()
        miss = cluster < 0
        cluster[miss] = cluster.max(initial=-1) + 1 + np.arange(int(miss.sum()))
    coo = member.tocoo()
    keep = (np.ones(len(coo.col), dtype=bool) if in_population is None
            else np.asarray(in_population, dtype=bool)[coo.col])
    if not keep.any():
        return np.zeros(member.shape[0])
    _, cell, _ = pair_codes(coo.row[keep], coo.col[keep], cluster)
    return np.bincount(cell, minlength=member.shape[0]).astype(float)


def pair_codes(cell: np.ndarray, case: np.ndarray, cluster: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (cell, cluster) pair of each membership (``cell``, ``case`` arrays of equal
    length; ``cluster`` the cluster code of each case): the pair code of each membership
    and the cell and the cluster of each pair (pairs sorted by cell, then cluster)."""
    n_cl = int(cluster.max()) + 1 if len(cluster) else 1
    key = np.asarray(cell, dtype=np.int64) * n_cl + np.asarray(cluster)[case].astype(np.int64)
    uniq, pair = np.unique(key, return_inverse=True)
    return pair.ravel(), uniq // n_cl, uniq % n_cl


def _moments(cell: np.ndarray, a: np.ndarray, m: np.ndarray, G: int) -> dict[str, np.ndarray]:
    n, x = _group_sum(cell, G, m), _group_sum(cell, G, a)
    p = np.divide(x, n, out=np.zeros_like(x), where=n > 0)
    # a sum of squares that is mathematically 0 (every cluster at the cell's proportion)
    # is made exactly 0 by rule (stats._linalg.clean_variance, scale: sum a^2 + (p m)^2)
    ss = clean_variance(_group_sum(cell, G, (a - p[cell] * m) ** 2),
                        _group_sum(cell, G, a ** 2 + (p[cell] * m) ** 2))
    return {"n": n, "x": x, "n_clusters": _group_sum(cell, G, m > 0),
            "repeats": _group_sum(cell, G, m > 1) > 0, "ss": np.fmax(ss, 0.0)}


def _split(num, den) -> tuple[np.ndarray, int]:
    num = np.asarray(num, dtype="float64")
    return np.hstack([num, np.asarray(den, dtype="float64")]), num.shape[1]


def cluster_moments(member: sparse.spmatrix, cluster: np.ndarray, num: np.ndarray,
                    den: np.ndarray) -> dict[str, np.ndarray]:
    """Per cell x column sums behind a clustered proportion ``sum num / sum den``.

    ``num`` and ``den`` are (cases x K) weights (0/1 indicators: success, in the
    denominator). Returns (cells x K) arrays: ``n`` (sum of den), ``x`` (sum of num),
    ``n_clusters`` (clusters with a nonzero denominator), ``repeats`` (some cluster holds
    more than one denominator scan) and ``ss`` (``sum_c (a_c - p m_c)^2``).
    """
    values, K = _split(num, den)
    cell, _, sums = pair_sums(member, cluster, values)
    return _moments(cell, sums[:, :K], sums[:, K:], member.shape[0])


def complement_moments(member: sparse.spmatrix, axis_of_cell: np.ndarray, cluster: np.ndarray,
                       num: np.ndarray, den: np.ndarray
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`cluster_moments` of every cell and of its complement within its axis (the
    rest: the axis's cases outside the cell; the cells of an axis partition its cases).

    The rest's sums come from the axis totals minus the cell's, per cluster: the axis x
    cluster sums and their per-axis moments, then a correction over the (cell, cluster)
    pairs only, so no (cells x cases) complement is ever built.
    """
    values, K = _split(num, den)
    cell, clu, sums = pair_sums(member, cluster, values)
    a, m = sums[:, :K], sums[:, K:]
    G = member.shape[0]
    one = _moments(cell, a, m, G)
    axis = np.asarray(axis_of_cell, dtype=np.int64)
    n_ax = int(axis.max()) + 1 if len(axis) else 1
    n_cl = int(clu.max()) + 1 if len(clu) else 1
    ukey, inv = np.unique(axis[cell] * n_cl + clu, return_inverse=True)
    A, Mx = _group_sum(inv, len(ukey), a), _group_sum(inv, len(ukey), m)   # axis x cluster
    per_axis = {k: _group_sum(ukey // n_cl, n_ax, v)[axis] for k, v in (
        ("n", Mx), ("x", A), ("a2", A ** 2), ("am", A * Mx), ("m2", Mx ** 2),
        ("clusters", Mx > 0), ("repeats", Mx > 1))}
    A_p, M_p = A[inv], Mx[inv]                    # the axis sums of each pair's cluster
    ar, mr = A_p - a, M_p - m                     # the rest's sums of each pair's cluster
    n2, x2 = per_axis["n"] - one["n"], per_axis["x"] - one["x"]
    p2 = np.divide(x2, n2, out=np.zeros_like(x2), where=n2 > 0)
    q = p2[cell]
    ss2 = (per_axis["a2"] - 2 * p2 * per_axis["am"] + p2 ** 2 * per_axis["m2"]
           + _group_sum(cell, G, (ar - q * mr) ** 2 - (A_p - q * M_p) ** 2))
    rest = {"n": n2, "x": x2,
            "n_clusters": per_axis["clusters"] - _group_sum(cell, G, (M_p > 0) & (mr == 0)),
            "repeats": (per_axis["repeats"] - _group_sum(cell, G, M_p > 1)
                        + _group_sum(cell, G, mr > 1)) > 0,
            # the expanded square cancels to about 1e-16 of its terms: within 1e-12 of
            # them it is 0 (stats._linalg.clean_variance)
            "ss": np.fmax(np.nan_to_num(clean_variance(
                ss2, per_axis["a2"] + p2 ** 2 * per_axis["m2"]), nan=0.0), 0.0)}
    return one, rest


def design_effect(mom: dict[str, np.ndarray], conf_level: float = 0.95
                  ) -> dict[str, np.ndarray]:
    """The ratio SE, the design effect and the effective sample size (module docstring).

    Returns ``estimate`` (p; NaN where n = 0), ``std_error`` (``sqrt(V)``; NaN where n = 0
    or with a single cluster), ``design_effect`` (1 without repeats; NaN where n = 0 or
    not estimable), ``n_effective`` (NaN where n = 0) and ``not_estimable`` (bool).
    """
    n, x, C = mom["n"], mom["x"], mom["n_clusters"]
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(n > 0, x / n, np.nan)
        var = np.where(C > 1, C / (C - 1) * mom["ss"] / n ** 2, np.nan)
    out = _effective(var, p * (1 - p) / n, n, C, mom["repeats"], (p == 0) | (p == 1),
                     conf_level)
    return {"estimate": p, "std_error": np.sqrt(var), **out}


def _effective(var, srs_var, n, C, repeats, degenerate, conf_level: float
               ) -> dict[str, np.ndarray]:
    """``design_effect``, ``n_effective`` and ``not_estimable`` from the cluster variance
    ``var`` of an estimate and its variance ``srs_var`` with scans as independent, by the
    rules of the module docstring (``degenerate``: no variance can be estimated, e.g. a
    proportion of 0 or 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = var / srs_var
        q = (1 - conf_level) / 2
        df = (sps.t.ppf(q, np.maximum(n - 1, 1)) / sps.t.ppf(q, np.maximum(C - 1, 1))) ** 2
        n_est = np.fmin(n, n / raw * df)
    rep = repeats & (n > 0)
    one = rep & (C < 2)
    not_est = rep & (one | degenerate)
    est = rep & ~not_est
    empty = n == 0
    return {"design_effect": np.where(empty | not_est, np.nan, np.where(est, raw, 1.0)),
            "n_effective": np.where(empty, np.nan, np.where(est, n_est, np.where(one, 1.0, n))),
            "not_estimable": not_est}


def paired_difference(member: sparse.spmatrix, cluster: np.ndarray, right_a: np.ndarray,
                      right_b: np.ndarray, den: np.ndarray, conf_level: float = 0.95
                      ) -> dict[str, np.ndarray]:
    """Cluster-aware paired difference of two proportions on the same scans, per cell x
    column (e.g. sensitivity of model A minus model B; issue 15).

    ``right_a``, ``right_b`` (cases x K) are the success indicators of the two sides (a
    correct call), ``den`` (cases x 1 or K) the denominator indicator (a reference
    positive). Per cluster ``c`` of the cell, ``d_c = sum (right_a - right_b)`` over its
    denominator scans (its discordant pairs A-only minus B-only) and ``m_c`` their number;
    ``D = sum d_c = b - c``, ``n = sum m_c``, ``Delta = D / n``. Returns (cells x K):

    * ``std_error``: ``sqrt(C / (C - 1) sum (d_c - Delta m_c)^2) / n``, the ratio
      estimator's linearization variance of the difference over the ``C`` clusters
      (Obuchowski 1998; R: ``svycontrast(svymean(~ya + yb, svydesign(ids = ~cluster, ...)),
      c(1, -1))``); NaN with fewer than two clusters;
    * ``design_effect`` and ``n_effective``: that variance over the paired variance with
      scans as independent, ``((b + c) - (b - c)^2 / n) / n^2``, and Korn & Graubard's
      effective size, by the rules of :func:`design_effect` (no discordant pair: not
      estimable, ``n_effective = n``);
    * ``statistic``, ``p_value``: Durkalski et al.'s (2003) clustered McNemar test,
      ``X^2 = D^2 / sum d_c^2`` on 1 degree of freedom (McNemar's uncorrected statistic
      ``(b - c)^2 / (b + c)`` when every cluster holds one scan); 0 when ``D = 0``; p = 1
      without a discordant pair; NaN when a single cluster holds repeats (``X^2`` would be
      1 whatever the data);
    * ``n_clusters`` (clusters with a denominator scan), ``repeats`` (some cluster holds
      more than one), ``n`` and ``discordance`` (``D``).

    References
    ----------
    Obuchowski NA (1998) On the comparison of correlated proportions for clustered data.
    Stat Med 17:1495-1507. Durkalski VL, Palesch YY, Lipsitz SR, Rust PF (2003) Analysis
    of clustered matched-pair data. Stat Med 22:2417-2428.
    """
    ra = np.asarray(right_a, dtype="float64")
    den = np.broadcast_to(np.asarray(den, dtype="float64"), ra.shape)
    diff = (ra - np.asarray(right_b, dtype="float64")) * den
    K = ra.shape[1]
    cell, _, sums = pair_sums(member, cluster, np.hstack([diff, diff ** 2, den]))
    d_c, disc_c, m_c = sums[:, :K], sums[:, K:2 * K], sums[:, 2 * K:]
    G = member.shape[0]
    n, D, disc = (_group_sum(cell, G, v) for v in (m_c, d_c, disc_c))   # disc = b + c
    C = _group_sum(cell, G, m_c > 0)
    repeats = _group_sum(cell, G, m_c > 1) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.where(n > 0, D / n, np.nan)
        ss = _group_sum(cell, G, (d_c - np.nan_to_num(delta)[cell] * m_c) ** 2)
        var = np.where(C > 1, C / (C - 1) * ss / n ** 2, np.nan)
        srs = (disc - D ** 2 / n) / n ** 2
        x2 = np.where(D == 0, 0.0, D ** 2 / _group_sum(cell, G, d_c ** 2))
    # one cluster holding repeats: X^2 is 1 whatever the data, so no test (NaN)
    one = repeats & (C < 2)
    p = np.where(one, np.nan, np.where(disc > 0, sps.chi2.sf(x2, 1),
                                       np.where(n > 0, 1.0, np.nan)))
    out = _effective(var, srs, n, C, repeats, ~(srs > 0), conf_level)
    return {"estimate": delta, "std_error": np.sqrt(var), **out,
            "statistic": np.where((disc > 0) & ~one, x2, np.nan), "p_value": p,
            "n_clusters": C, "repeats": repeats, "n": n, "discordance": D}


def effective_counts(x: np.ndarray, n: np.ndarray, n_eff: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``p n_eff`` successes of ``n_eff`` trials, ``p = x / n`` (exactly ``x`` of ``n``
    where ``n_eff == n``; ``p n_eff <= n_eff`` holds exactly since ``p <= 1``); 0 of 0
    where ``n`` is 0 or ``n_eff`` NaN, so a binomial interval of them is NaN there."""
    x, n, n_eff = (np.asarray(a, dtype="float64") for a in (x, n, n_eff))
    ok = (n > 0) & np.isfinite(n_eff)
    p = np.divide(x, n, out=np.zeros_like(x), where=n > 0)
    return (np.where(ok & (n_eff == n), x, np.where(ok, p * n_eff, 0.0)),
            np.where(ok, n_eff, 0.0))


def effective_interval(x: np.ndarray, n: np.ndarray, n_eff: np.ndarray, *,
                       method: str = "wilson", conf_level: float = 0.95
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The binomial interval ``method`` at the effective counts (:func:`effective_counts`)."""
    return proportion_limits(*effective_counts(x, n, n_eff), method=method, conf_level=conf_level)


def clustered_proportions(member: sparse.spmatrix, cluster: np.ndarray,
                          num: np.ndarray, den: np.ndarray, *, method: str = "wilson",
                          conf_level: float = 0.95) -> dict[str, np.ndarray]:
    """Cluster-aware estimate, SE, interval and design effect per cell x column.

    Returns (cells x K) arrays ``estimate``, ``std_error``, ``conf_low``, ``conf_high``,
    ``design_effect``, ``n_effective``, ``n_clusters``, ``not_estimable``, ``numerator``,
    ``denominator``.
    """
    mom = cluster_moments(member, cluster, num, den)
    d = design_effect(mom, conf_level)
    lo, hi = effective_interval(mom["x"], mom["n"], d["n_effective"], method=method,
                                conf_level=conf_level)
    return {**d, "conf_low": lo, "conf_high": hi, "n_clusters": mom["n_clusters"],
            "numerator": mom["x"], "denominator": mom["n"]}


def metric_indicators(label: np.ndarray, pred: np.ndarray, metrics: Sequence[str]
                      ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-scan numerator and denominator indicators (cases x M) of each count metric:
    the scan-level view of :func:`stats.detection.metric_fractions` (F1 counts a true
    positive twice, as its numerator 2 TP does)."""
    y = np.asarray(label, bool)[:, None]
    c = np.asarray(pred) == 1
    tp, fp, fn, tn = c & y, c & ~y, ~c & y, ~c & ~y
    parts = {
        "sensitivity": lambda: (tp, y | np.zeros_like(c)),
        "specificity": lambda: (tn, ~y | np.zeros_like(c)),
        "ppv": lambda: (tp, c),
        "npv": lambda: (tn, ~c),
        "accuracy": lambda: (tp | tn, np.ones_like(c)),
        "f1": lambda: (2.0 * tp, 2.0 * tp + fp + fn),
    }
    return {k: tuple(np.asarray(a, dtype="float64") for a in parts[k]()) for k in metrics
            if k in parts}
