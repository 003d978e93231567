"""Cluster-aware paired model comparisons (stats.compare_models(cluster=)).

Against R (tests/r/compare_cluster.R -> tests/r/compare_cluster.csv, on
tests/r/data/compare_cluster.csv: 120 patients with 1-4 scans, a patient effect and a
patient x model effect, axes phase (per scan) and age_group (per patient), edge cells built
on purpose), per cell (overall, every phase, every age_group), model_A - model_B:

* sensitivity and specificity differences: the counts (exact), the number of patients,
  ``survey::svycontrast(svymean(~ya + yb, svydesign(ids = ~patient_id)), c(1, -1))``'s SE,
  the design effect and Korn & Graubard's effective size, Durkalski et al.'s clustered
  McNemar statistic and p, Newcombe's paired interval (method 10, written in R from the
  paper) at the effective counts, the exact McNemar p (``binom.test``) where no patient
  repeats; the method of each row and the ``deff_not_estimable`` flag (no discordant pair
  with repeats: age_group 75+; one patient holding all the positives: phase delayed);
* AUC differences: Obuchowski's (1997) clustered variance of AUC_A - AUC_B computed in R as
  V(A) + V(B) - 2 Cov(A, B) from per-patient placement-value sums (double loop over
  patients), not by clinrel's difference-of-placements shortcut; z, p, Wald interval;
* singleton clusters (each patient's first scan): compare_models(cluster=) is the
  unclustered result exactly; delong_test(cluster=) is delong_test() and pROC's
  ``roc.test(paired = TRUE, method = "delong")``; with real clusters delong_test(cluster=)
  is compare_models' overall AUC row; paired_difference's Durkalski statistic is McNemar's
  uncorrected (b - c)^2 / (b + c).

Tolerances: 1e-8 absolute for SEs, intervals, statistics and p-values; counts exact.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from stats.clustered import FLAG_DEFF, paired_difference
from stats.compare import compare_models
from stats.detection import case_matrix
from stats.intervals import delong_test, mcnemar_exact, newcombe_diff_ci
from stats.schema import check_tidy

R = Path(__file__).resolve().parents[1] / "r"
BY = ["phase", "age_group"]
KEY = ["estimand", "group_var", "group_level"]
PROPS = ("sensitivity_difference", "specificity_difference")
CLUSTER_PROP = "newcombe-paired-cluster/mcnemar-clustered"
PLAIN_PROP = "newcombe-paired/mcnemar-exact"
ATOL = 1e-8


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    return pd.read_csv(R / "data" / "compare_cluster.csv", dtype={"case_id": str})


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    """One row per R metric x cell, the quantities as ``r_<name>`` columns."""
    r = pd.read_csv(R / "compare_cluster.csv").rename(columns={"metric": "estimand"})
    wide = r.set_index([*KEY, "quantity"])["value"].unstack("quantity")
    return wide.add_prefix("r_").reset_index()


@pytest.fixture(scope="module")
def out(cases) -> pd.DataFrame:
    got = compare_models(cases, by=BY, cluster="patient_id")
    check_tidy(got)
    return got


def _joined(ref, out, estimands) -> pd.DataFrame:
    r = ref[ref.estimand.isin(estimands)]
    j = r.merge(out, on=KEY, how="left", validate="one_to_one")
    assert j["model"].eq("model_A - model_B").all()   # every R cell found
    return j


def _close(got, want, what, atol=ATOL):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN pattern")
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=atol, err_msg=what)


def test_proportion_differences_match_r(ref, out):
    j = _joined(ref, out, PROPS)
    assert len(j) == 2 * 9
    n = np.where(j.estimand == "sensitivity_difference", j.n_pos, j.n_neg)
    np.testing.assert_array_equal(n, j.r_n)
    np.testing.assert_array_equal(j.discordant_a, j.r_b)
    np.testing.assert_array_equal(j.discordant_b, j.r_c)
    np.testing.assert_array_equal(j.n_clusters, j.r_n_clusters)
    for col in ("estimate", "conf_low", "conf_high", "p_value", "design_effect", "n_effective"):
        _close(j[col], j[f"r_{col}"], col)
    rep = j.r_repeats == 1
    np.testing.assert_array_equal(j.method, np.where(rep, CLUSTER_PROP, PLAIN_PROP))
    # the reported p is max(Durkalski, exact McNemar) where patients repeat, exact McNemar
    # elsewhere; both kinds occur (Durkalski above the exact p where the design effect is
    # large, below it on few discordant patients)
    want = np.where(np.isnan(j.r_p_durkalski), np.nan, np.fmax(j.r_p_durkalski, j.r_p_exact))
    _close(j.p_value[rep], want[rep], "p max(durkalski, exact)")
    _close(j.p_value[~rep], j.r_p_exact[~rep], "p exact")
    assert ((j.r_p_durkalski > j.r_p_exact + 0.01) & rep).sum() >= 2
    assert ((j.r_p_durkalski < j.r_p_exact - 0.01) & rep).sum() >= 2
    # the fixture exercises every rule, and the clustering matters
    assert rep.sum() >= 12 and (~rep).sum() >= 3
    est = rep & (j.r_not_estimable == 0)
    assert (j.design_effect[est] > 1.3).sum() >= 4
    assert (j.n_effective[est] < n[est] - 1).sum() >= 6
    assert (np.abs(j.p_value - j.r_p_exact) > 0.02)[est].sum() >= 2
    assert (j.n_effective <= n).all()


def test_clustered_interval_is_newcombe_at_effective_counts(ref, out):
    """The cluster rows: Newcombe at (a, b, c, d) n_eff / n, wider than the plain one where
    n_eff < n; without repeats the plain interval (same function, k = 1)."""
    j = _joined(ref, out, PROPS)
    k = j.n_effective / j.r_n
    est, lo, hi = newcombe_diff_ci(None, None, None, None, paired_counts=tuple(
        j[f"r_{x}"] * k for x in "abcd"), effective=True)
    _close(lo, j.conf_low, "low", atol=1e-12)
    _close(hi, j.conf_high, "high", atol=1e-12)
    _, plo, phi = newcombe_diff_ci(None, None, None, None,
                                   paired_counts=tuple(j[f"r_{x}"] for x in "abcd"))
    shrunk = (k < 1).to_numpy()
    assert shrunk.sum() >= 6
    assert ((j.conf_high - j.conf_low).to_numpy()[shrunk] > (phi - plo)[shrunk]).all()
    np.testing.assert_array_equal(j.conf_low[~shrunk], plo[~shrunk])


def test_paired_difference_matches_svycontrast_and_durkalski(cases, ref):
    """stats.clustered.paired_difference on the case matrix compare_models builds: the
    SE (survey::svycontrast), design effect, n_eff, Durkalski statistic and p."""
    cm = case_matrix(cases, BY, cluster="patient_id")
    P = cm.pred.astype(bool)
    ia, ib = cm.models.index("model_A"), cm.models.index("model_B")
    cells = cm.cells[["group_var", "group_level"]]
    checked = 0
    for estimand, mask, right in (("sensitivity_difference", cm.label, P),
                                  ("specificity_difference", ~cm.label, ~P)):
        ra = (right[:, [ia]] & mask[:, None]).astype(float)
        rb = (right[:, [ib]] & mask[:, None]).astype(float)
        d = paired_difference(cm.member, cm.patient, ra, rb, mask[:, None].astype(float))
        got = cells.assign(estimand=estimand, **{k: d[k][:, 0] for k in (
            "estimate", "std_error", "design_effect", "n_effective", "statistic", "p_value",
            "n_clusters", "n", "discordance", "repeats", "not_estimable")})
        j = ref[ref.estimand == estimand].merge(got, on=KEY, validate="one_to_one")
        assert len(j) == 9
        np.testing.assert_array_equal(j.n, j.r_n)
        np.testing.assert_array_equal(j.n_clusters, j.r_n_clusters)
        np.testing.assert_array_equal(j.discordance, j.r_b - j.r_c)
        np.testing.assert_array_equal(j.repeats, j.r_repeats == 1)
        np.testing.assert_array_equal(j.not_estimable, j.r_not_estimable == 1)
        _close(j.std_error, j.r_se, "svycontrast SE")
        for col in ("estimate", "design_effect", "n_effective", "statistic"):
            _close(j[col], j[f"r_{col}"], col)
        _close(j.p_value, j.r_p_durkalski, "p durkalski")
        checked += int(np.isfinite(j.r_se).sum())
    assert checked >= 14


def test_auc_differences_match_obuchowski_in_r(ref, out, cases):
    j = _joined(ref, out, ["auc_difference"])
    assert len(j) == 9
    for col in ("auc_a", "auc_b", "estimate"):
        _close(j[col], j[f"r_{col}"], col, atol=1e-12)
    _close(j.std_error, j.r_se, "se")
    for col in ("statistic", "p_value", "conf_low", "conf_high"):
        _close(j[col], j[f"r_{col}"], col)
    np.testing.assert_array_equal(j.n_clusters, j.r_n_clusters)
    rep = j.r_repeats == 1
    np.testing.assert_array_equal(j.method, np.where(rep, "delong-paired-cluster-t",
                                                     "delong-paired"))
    assert rep.sum() >= 7 and (~rep).sum() >= 1 and j.r_se.isna().sum() == 1
    # the clustering matters: the clustered SE is not DeLong's
    plain = compare_models(cases, by=BY, cluster=None)
    pj = j[KEY].merge(plain, on=KEY, how="left")
    ratio = j.std_error / pj.std_error
    assert (np.abs(ratio[rep] - 1) > 0.03).sum() >= 4
    assert (ratio[~rep] == 1).all()


def test_flags_of_the_rules(ref, out):
    j = _joined(ref, out, PROPS)
    want = j.r_not_estimable == 1
    got = j.flag.str.split(";").map(lambda f: FLAG_DEFF in f)
    # flagged only where there are discordant pairs (without them nothing is estimated)
    np.testing.assert_array_equal(got, want & (j.r_b + j.r_c > 0))
    single = want & (j.r_n_clusters == 1)
    no_disc = want & (j.r_b + j.r_c == 0)
    assert single.sum() >= 1 and no_disc.sum() >= 2 and (single | no_disc).equals(want)
    assert (single & (j.r_b + j.r_c > 0)).any()
    assert j.design_effect[want].isna().all() and j.design_effect[~want].notna().all()
    np.testing.assert_array_equal(j.n_effective[single], 1.0)
    np.testing.assert_array_equal(j.n_effective[no_disc], j.r_n[no_disc])
    np.testing.assert_array_equal(j.p_value[no_disc], 1.0)
    # a cell without discordant pairs and without repeats: exact McNemar, no flag
    plain_nd = (j.r_repeats == 0) & (j.r_b + j.r_c == 0)
    assert plain_nd.sum() >= 1 and (j.method[plain_nd] == PLAIN_PROP).all()
    assert not got[plain_nd].any()
    # AUC: deff_not_estimable exactly where Obuchowski's variance is not defined (fewer
    # than two patients hold a label) while the cell has scans of both labels
    auc = _joined(ref, out, ["auc_difference"])
    want_auc = (auc.r_repeats == 1) & auc.r_var.isna() & auc.r_estimate.notna()
    assert want_auc.sum() >= 1
    np.testing.assert_array_equal(auc.flag.str.contains(FLAG_DEFF), want_auc)


def test_singleton_clusters_give_the_unclustered_result(cases):
    """Every patient with one scan: cluster="patient_id" changes nothing but the method's
    provenance columns; on the full data it does change the numbers."""
    first = cases[cases.first_scan == 1]
    assert first.groupby("model").patient_id.nunique().eq(120).all()
    clus = compare_models(first, by=BY, cluster="patient_id")
    plain = compare_models(first, by=BY)
    assert len(clus) == len(plain) == 3 * 9
    for col in ("estimand", "group_var", "group_level", "estimate", "conf_low", "conf_high",
                "p_value", "std_error", "statistic", "method"):
        np.testing.assert_array_equal(clus[col], plain[col], err_msg=col)
    assert set(clus.method) == {PLAIN_PROP, "delong-paired"}
    props = clus.estimand.isin(PROPS)
    assert (clus.design_effect[props] == 1).all() and not clus.flag.str.contains(FLAG_DEFF).any()
    full_c = compare_models(cases, by=BY, cluster="patient_id")
    full_p = compare_models(cases, by=BY, cluster=None)
    np.testing.assert_array_equal(full_c.estimate, full_p.estimate)
    differ = (full_c.conf_low != full_p.conf_low) | (full_c.p_value != full_p.p_value)
    assert differ.sum() >= 15


def test_delong_test_cluster(cases, ref, out):
    a = cases[cases.model == "model_A"].reset_index(drop=True)
    b = cases[cases.model == "model_B"].set_index("case_id").loc[a.case_id].reset_index()
    # singleton clusters: DeLong's test, pROC's roc.test
    s = (a.first_scan == 1).to_numpy()
    one = delong_test(a.label[s], a.score[s], b.score[s], cluster=a.patient_id[s])
    base = delong_test(a.label[s], a.score[s], b.score[s])
    for col in ("estimate", "std_error", "statistic", "p_value", "conf_low", "conf_high",
                "method"):
        assert one[col][0] == base[col][0], col
    assert one.method[0] == "delong-paired" and one.n_clusters[0] == 120
    r = ref[ref.estimand == "auc_singletons"].iloc[0]
    assert r.r_repeats == 0 and r.r_n_clusters == 120
    assert one.statistic[0] == pytest.approx(r.r_proc_z, abs=ATOL)
    assert one.p_value[0] == pytest.approx(r.r_proc_p, abs=ATOL)
    assert one.conf_low[0] == pytest.approx(r.r_proc_low, abs=ATOL)
    assert one.conf_high[0] == pytest.approx(r.r_proc_high, abs=ATOL)
    assert one.std_error[0] ** 2 == pytest.approx(r.r_var, abs=1e-12)  # Obuchowski = DeLong
    # real clusters: compare_models' overall AUC row
    got = delong_test(a.label, a.score, b.score, cluster=a.patient_id)
    check_tidy(got)
    row = out[(out.estimand == "auc_difference") & (out.group_var == "overall")].iloc[0]
    assert got.method[0] == row.method == "delong-paired-cluster-t"
    assert got.n_clusters[0] == row.n_clusters == 120
    for col in ("estimate", "std_error", "statistic", "p_value", "conf_low", "conf_high"):
        assert got[col][0] == pytest.approx(row[col], abs=1e-14), col
    plain = delong_test(a.label, a.score, b.score)
    assert abs(got.std_error[0] / plain.std_error[0] - 1) > 0.03


def test_durkalski_is_mcnemar_with_singleton_clusters(cases):
    """paired_difference with every scan its own cluster: X^2 = (b - c)^2 / (b + c), no
    repeats, design effect 1, SE^2 = n / (n - 1) times the paired variance."""
    cm = case_matrix(cases, BY, cluster="case_id")
    P = cm.pred.astype(bool)
    y = cm.label[:, None]
    ia, ib = cm.models.index("model_A"), cm.models.index("model_B")
    for mask, right in ((y, P), (~y, ~P)):
        ra, rb = right[:, [ia]] & mask, right[:, [ib]] & mask
        d = paired_difference(cm.member, np.arange(len(cm.label)), ra, rb, mask)
        b = (cm.member @ (ra & ~rb).astype(float))[:, 0]
        c = (cm.member @ (~ra & rb).astype(float))[:, 0]
        n = d["n"][:, 0]
        disc = b + c > 0
        assert disc.sum() >= 6 and not d["repeats"].any()
        with np.errstate(invalid="ignore", divide="ignore"):
            mcn = (b - c) ** 2 / (b + c)
        np.testing.assert_allclose(d["statistic"][disc, 0], mcn[disc], rtol=1e-12, atol=0)
        assert np.isnan(d["statistic"][~disc, 0]).all()
        np.testing.assert_allclose(d["p_value"][disc, 0], sps.chi2.sf(mcn[disc], 1),
                                   rtol=1e-12, atol=0)
        np.testing.assert_array_equal(d["p_value"][~disc, 0], 1.0)
        np.testing.assert_array_equal(d["design_effect"][:, 0], 1.0)
        np.testing.assert_array_equal(d["n_effective"][:, 0], n)
        np.testing.assert_array_equal(d["n_clusters"][:, 0], n)
        srs = ((b + c) - (b - c) ** 2 / n) / n ** 2
        np.testing.assert_allclose(d["std_error"][:, 0] ** 2, n / (n - 1) * srs,
                                   rtol=1e-12, atol=1e-15)
        # Durkalski uncorrected vs the exact McNemar compare_models keeps here
        assert not np.allclose(d["p_value"][disc, 0], mcnemar_exact(b, c)[disc])


def _edge_cases() -> pd.DataFrame:
    """Cell x: patient p1's two positives, A right on one, B on the other (b = c = 1, every
    patient's d_c = 0) among 12 concordant singletons. Cell y: 12 positives of patient q1,
    12 negatives of singletons (no between-patient variance of the positives)."""
    rows = []

    def add(pid, lab, pa, pb, cell):
        cid = f"c{len(rows)}"
        rows.extend([dict(case_id=cid, patient_id=pid, model="A", label=lab, pred=pa, cell=cell),
                     dict(case_id=cid, patient_id=pid, model="B", label=lab, pred=pb, cell=cell)])

    add("p1", 1, 1, 0, "x")
    add("p1", 1, 0, 1, "x")
    for i in range(12):
        add(f"s{i}", 1, 1, 1, "x")
        add(f"t{i}", 0, 0, 0, "x")
        add("q1", 1, i % 2, (i + 1) % 2, "y")
        add(f"u{i}", 0, 0, int(i % 3 == 0), "y")
    df = pd.DataFrame(rows)
    df["score"] = np.random.default_rng(0).random(len(df))
    return df


def test_durkalski_with_balanced_discordance():
    out = compare_models(_edge_cases(), by=["cell"], metrics=["sensitivity"],
                         cluster="patient_id")
    x = out[out.group_level == "x"].iloc[0]
    assert (x.discordant_a, x.discordant_b) == (1, 1) and x.method == CLUSTER_PROP
    assert x.p_value == 1.0


def test_auc_difference_not_estimable_is_flagged():
    out = compare_models(_edge_cases(), by=["cell"], metrics=["auc"], cluster="patient_id")
    y = out[out.group_level == "y"].iloc[0]
    assert y.method == "delong-paired-cluster-t" and np.isnan(y.std_error)
    assert y.n_pos >= 10 and y.n_neg >= 10           # not small_n: the flag is only this
    assert y.flag == "deff_not_estimable"


def test_size_against_the_scans_as_independent_tests():
    """bench/compare_cluster_size.py at 2,000 null studies of 50 patients (patient-level
    labels, patient x model SD 1): the clustered tests keep the 5% level, the
    scans-as-independent ones exceed it (McNemar 7%, DeLong 13% in the full study)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from compare_cluster_size import size

    rows = pd.DataFrame(size(50, 1.0, 2000, seed=5))
    rej = rows.set_index(["estimand", "test"])["reject"]
    for est in ("sensitivity_difference", "specificity_difference", "auc_difference"):
        assert 0.03 <= rej[est, "clustered"] <= 0.065, (est, rej[est, "clustered"])
    assert rej["auc_difference", "independent"] > 0.10, rej
    assert rej["sensitivity_difference", "independent"] > rej["sensitivity_difference",
                                                              "clustered"], rej
