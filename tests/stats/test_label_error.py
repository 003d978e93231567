"""stats.label_error: metadata error carried into subgroup intervals.

Checks: no error reproduces the naive Wilson rows exactly; the MI point estimate and
standard error agree with an independent maximum-likelihood fit (scipy.optimize on the
observed-data likelihood, delta-method SE from a finite-difference Hessian); a large
simulated study with known truth; counts conserved over levels; keyed (per-site) tables;
uncovered values flagged; the review-based table against the simulated truth; bad input.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

import stats
from stats import label_error as le
from stats import subgroups as sg
from stats.detection import case_matrix, normalize_by, scan_level
from stats.schema import ContractError, check_tidy
from stats.simulate import PHASES, RACES, benchx_cohort

BENCH = Path(__file__).resolve().parents[2] / "bench"


def flip_table(field: str, levels, eps: float) -> pd.DataFrame:
    """P(true | recorded): stay with 1 - eps, else uniform over the other levels."""
    K = len(levels)
    return pd.DataFrame([(field, r, t, 1 - eps if r == t else eps / (K - 1))
                         for r in levels for t in levels], columns=list(le.LABEL_ERROR_COLUMNS))


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    return scan_level(benchx_cohort(600, n_models=2, n_sites=6, seed=7).data, threshold=50)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return pd.concat([flip_table("phase", PHASES, 0.1), flip_table("race", RACES, 0.05)],
                     ignore_index=True)


# --------------------------------------------------------------------------- properties

def test_no_error_reproduces_naive_wilson(cases):
    ident = flip_table("phase", PHASES, 0.0)
    by = ["phase", ("age_group", "phase"), "sex"]
    aware = le.error_aware_metrics(cases, by=by, label_error=ident, n_imputations=5, seed=1,
                                   metrics=("sensitivity", "specificity", "ppv", "accuracy"),
                                   cluster=None)
    naive = sg.subgroup_metrics(cases, by=by, metrics=("sensitivity", "specificity", "ppv",
                                                       "accuracy"), cluster=None)
    check_tidy(aware)
    assert len(aware) == len(naive)
    key = ["estimand", "model", "group_var", "group_level"]
    assert (aware[key].to_numpy() == naive[key].to_numpy()).all()
    for col in ("estimate", "conf_low", "conf_high", "n", "n_pos", "numerator", "denominator"):
        np.testing.assert_allclose(aware[col], naive[col], rtol=1e-12, atol=1e-12)
    hit = aware["group_var"].isin(["phase", "age_group:phase"])
    assert set(aware.loc[hit, "method"]) == {"mi-wilson"}
    assert (aware.loc[hit & aware["estimate"].notna(), "fraction_missing_info"] == 0).all()
    assert set(aware.loc[~hit, "method"]) == {"wilson"}  # sex, overall: untouched
    assert aware.loc[~hit, "fraction_missing_info"].isna().all()


def test_error_widens_and_counts_are_conserved(cases, table):
    out = le.error_aware_metrics(cases, by=["phase", "race", ("age_group", "phase")],
                                 label_error=table, metrics=("sensitivity", "f1", "auc"),
                                 n_imputations=20, seed=3)
    naive = sg.subgroup_metrics(cases, by=["phase", "race", ("age_group", "phase")],
                                metrics=("sensitivity",), cluster=None)
    check_tidy(out)
    sens = out[(out.estimand == "sensitivity") & (out.group_var != "overall")]
    ref = naive[naive.group_var != "overall"]
    assert (sens.loc[sens.group_var.isin(["phase", "race"]), "fraction_missing_info"] > 0).all()
    width = (sens.conf_high - sens.conf_low).to_numpy()
    assert (width > (ref.conf_high - ref.conf_low).to_numpy() - 0.01).mean() > 0.9
    # imputation moves scans between levels, never in or out of an axis
    for gv in ("phase", "race", "age_group:phase"):
        for m in ("model_A", "model_B"):
            a = sens[(sens.group_var == gv) & (sens.model == m)]
            b = ref[(ref.group_var == gv) & (ref.model == m)]
            assert a["n"].sum() == pytest.approx(b["n"].sum())
            assert a["n_pos"].sum() == pytest.approx(b["n_pos"].sum())
    assert len(out[(out.group_var == "age_group:phase") & (out.estimand == "auc")]) == 2 * 16
    f1 = out[(out.estimand == "f1") & (out.group_var == "race")]
    assert set(f1.method) == {"mi-none"} and f1.conf_low.isna().all() and f1.estimate.notna().all()
    auc = out[(out.estimand == "auc") & (out.group_var == "race")]
    assert set(auc.flag) == {le.FLAG_UNSUPPORTED} and auc.estimate.isna().all()
    assert out[(out.estimand == "auc") & (out.group_var == "overall")].estimate.notna().all()


def test_seeded_and_delegated(cases, table):
    kw = {"by": ["race"], "metrics": ("sensitivity",), "label_error": table, "cluster": None}
    a = le.error_aware_metrics(cases, n_imputations=10, seed=11, **kw)
    b = le.error_aware_metrics(cases, n_imputations=10, seed=11, **kw)
    c = le.error_aware_metrics(cases, n_imputations=10, seed=12, **kw)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a.conf_low.fillna(0), c.conf_low.fillna(0))
    d = stats.subgroup_metrics(cases, seed=11, **kw)  # delegating (M = 100)
    e = le.error_aware_metrics(cases, n_imputations=100, seed=11, **kw)
    pd.testing.assert_frame_equal(d, e)


def test_mi_matches_maximum_likelihood():
    """Independent recomputation: MLE of the observed-data likelihood by BFGS (not EM),
    delta-method SE from a finite-difference Hessian; proper MI matches both."""
    rng = np.random.default_rng(5)
    n, K, eps = 3000, 3, 0.12
    true = rng.choice(K, n, p=[0.5, 0.3, 0.2])
    y = rng.random(n) < 0.5
    pred = rng.random(n) < np.where(y, np.array([0.9, 0.7, 0.5])[true], 0.1)
    rec = np.where(rng.random(n) < eps, (true + rng.integers(1, K, n)) % K, true)
    levels = ["a", "b", "c"]
    prev = np.array([0.5, 0.3, 0.2])
    conf = np.full((K, K), eps / (K - 1)) + np.eye(K) * (1 - eps - eps / (K - 1))
    post = prev[:, None] * conf / (prev[:, None] * conf).sum(0)  # P(true | recorded)
    tab = pd.DataFrame([("f", levels[r], levels[t], post[t, r]) for r in range(K) for t in range(K)],
                       columns=list(le.LABEL_ERROR_COLUMNS))
    cases = pd.DataFrame({"case_id": np.arange(n).astype(str), "model": "m", "label": y.astype(int),
                          "score": pred.astype(float), "pred": pred.astype(int), "site": "s",
                          "f": np.asarray(levels)[rec]})
    out = le.error_aware_metrics(cases, by=["f"], label_error=tab, metrics=("sensitivity",),
                                 n_imputations=300, seed=2)
    out = out[out.group_var == "f"].set_index("group_level")

    pattern = 2 * y + pred  # 0..3; sensitivity_t = pi_t[3] / (pi_t[2] + pi_t[3])
    counts = np.zeros((K, 4))
    np.add.at(counts, (rec, pattern), 1)

    def probs(theta):
        z = np.column_stack([theta.reshape(K, 3), np.zeros(K)])
        return np.exp(z - np.logaddexp.reduce(z, axis=1)[:, None])

    def nll(theta):
        mix = post.T @ probs(theta)  # recorded x pattern: sum_t P(t | r) pi_t(p)
        return -(counts * np.log(mix)).sum()

    fit = optimize.minimize(nll, np.zeros(3 * K), method="BFGS", options={"gtol": 1e-9})
    sens = lambda th: probs(th)[:, 3] / probs(th)[:, 2:].sum(1)
    h = 1e-4
    E = np.eye(3 * K) * h
    H = np.array([[(nll(fit.x + E[i] + E[j]) - nll(fit.x + E[i] - E[j])
                    - nll(fit.x - E[i] + E[j]) + nll(fit.x - E[i] - E[j])) / (4 * h * h)
                   for j in range(3 * K)] for i in range(3 * K)])
    J = np.array([(sens(fit.x + E[i]) - sens(fit.x - E[i])) / (2 * h) for i in range(3 * K)]).T
    se = np.sqrt(np.diag(J @ np.linalg.inv(H) @ J.T))
    np.testing.assert_allclose(out.loc[levels, "estimate"], sens(fit.x), atol=0.006)
    np.testing.assert_allclose(out.loc[levels, "std_error"], se, rtol=0.12)
    naive_se = np.sqrt(out["estimate"] * (1 - out["estimate"]) / out["denominator"])
    assert (out.loc[levels, "std_error"] > naive_se.loc[levels] * 1.03).all()


def test_large_study_recovers_true_sensitivity():
    """Simulation with known truth (bench design, one large study): the error-aware
    estimate is near the true-level sensitivity where the naive one is biased."""
    sys.path.insert(0, str(BENCH))
    try:
        import label_error_coverage as bench
    finally:
        sys.path.remove(str(BENCH))
    cases = bench.simulate_study(np.random.default_rng(1), 0.10, 40_000)
    truth = bench.true_sensitivity().set_index(["group_var", "group_level"])["truth"]
    aware = le.error_aware_metrics(cases, by=["phase"], label_error=bench.label_error_table(0.10),
                                   metrics=("sensitivity",), n_imputations=20, seed=1)
    naive = sg.subgroup_metrics(cases, by=["phase"], metrics=("sensitivity",))
    key = lambda df: df[df.group_var == "phase"].set_index(["group_var", "group_level"])
    a, nv = key(aware), key(naive)
    t = truth.reindex(a.index)
    assert (np.abs(a.estimate - t) < 3 * a.std_error).all()
    nc = ("phase", "non_contrast")
    assert nv.estimate[nc] - t[nc] > 0.02  # contaminated by better-detected venous scans
    assert nv.estimate[nc] - t[nc] > 4 * abs(a.estimate[nc] - t[nc])
    assert not (nv.conf_low[nc] <= t[nc] <= nv.conf_high[nc])
    assert a.conf_low[nc] <= t[nc] <= a.conf_high[nc]


@pytest.mark.slow
def test_coverage_small():
    """Small version of bench/label_error_coverage.py (10% of labels flipped)."""
    sys.path.insert(0, str(BENCH))
    try:
        import label_error_coverage as bench
    finally:
        sys.path.remove(str(BENCH))
    res = bench.run(0.10, 200, n_imputations=40, seed=3)
    aware, naive = res[res.kind == "error_aware"], res[res.kind == "naive"]
    assert 0.925 <= aware["coverage"].mean() <= 0.975
    assert aware["coverage"].min() >= 0.89
    assert naive["coverage"].min() < aware["coverage"].min()


# --------------------------------------------------------------------------- structure

def test_keyed_table_moves_only_its_rows(cases):
    sites = sorted(cases["site"].astype(str).unique())
    rows = [flip_table("phase", PHASES, 0.2 if s == sites[0] else 0.0).assign(site=s)
            for s in sites]
    tab = pd.concat(rows, ignore_index=True)
    specs = normalize_by(["phase"])
    cm = case_matrix(cases, specs)
    d = le._design(cm, specs, le.check_label_error(tab))
    T = le.impute_states(d, 30, np.random.default_rng(0))
    rec = pd.Categorical(cm.covariates["phase"], categories=d.levels["phase"]).codes
    at_first = cm.covariates["site"].astype(str).to_numpy() == sites[0]
    assert (T[:, ~at_first] == rec[~at_first]).all()
    assert (T[:, at_first] != rec[at_first]).any()


def test_uncovered_value_flagged_and_extra_level_kept(cases):
    tab = flip_table("phase", ["venous", "arterial", "delayed", "portal"], 0.1)
    out = le.error_aware_metrics(cases, by=["phase"], label_error=tab,
                                 metrics=("sensitivity",), n_imputations=10, seed=0)
    ph = out[(out.group_var == "phase") & (out.model == "model_A")].set_index("group_level")
    assert le.FLAG_UNCOVERED in ph.flag["non_contrast"]  # recorded but not in the table
    assert le.FLAG_UNCOVERED not in ph.flag["venous"]
    assert "portal" in ph.index and ph.n["portal"] > 0  # only ever a true value
    naive = sg.subgroup_metrics(cases, by=["phase"], metrics=("sensitivity",))
    nc = naive[(naive.group_var == "phase") & (naive.model == "model_A")].set_index("group_level")
    assert ph.n["non_contrast"] >= nc.n["non_contrast"]  # its scans stay (others may join)


def test_missing_recorded_values_stay_missing(cases, table):
    d = cases.copy()
    d["phase"] = d["phase"].astype(object)
    d.loc[d["case_id"].isin(d["case_id"].unique()[:50]), "phase"] = None
    out = le.error_aware_metrics(d, by=["phase"], label_error=table, metrics=("sensitivity",),
                                 n_imputations=10, seed=0)
    ph = out[(out.group_var == "phase") & (out.model == "model_A")].set_index("group_level")
    assert ph.n["Missing"] == 50 and ph.flag["Missing"] == ""  # never imputed, not flagged
    assert ph.fraction_missing_info["Missing"] == 0
    assert ph["n"].sum() == pytest.approx(d["case_id"].nunique())
    # a table that lists "Missing" as a recorded value imputes those scans too
    known = pd.DataFrame([("phase", "Missing", p, 0.25) for p in PHASES],
                         columns=list(le.LABEL_ERROR_COLUMNS))
    out = le.error_aware_metrics(d, by=["phase"], label_error=pd.concat([table, known]),
                                 metrics=("sensitivity",), n_imputations=10, seed=0)
    ph = out[(out.group_var == "phase") & (out.model == "model_A")].set_index("group_level")
    assert ph.n["Missing"] == 0 and ph["n"].sum() == pytest.approx(d["case_id"].nunique())


def test_compare_naive_side_by_side(cases, table):
    out = le.compare_naive(cases, ["phase", "sex"], table, n_imputations=10, seed=4,
                           cluster=None)
    check_tidy(out)
    assert set(out["group_var"]) == {"phase"}
    assert list(out["kind"].iloc[:2]) == ["naive", "error_aware"]
    pairs = out.groupby(["estimand", "model", "group_level"])["kind"].agg(tuple)
    assert (pairs == ("naive", "error_aware")).all()
    assert set(out.loc[out.kind == "error_aware", "method"]) == {"mi-wilson"}


# --------------------------------------------------------------------------- from review

def test_misclassification_from_review_matches_truth():
    rng = np.random.default_rng(8)
    n, levels = 6000, np.array(["arterial", "delayed", "venous"])
    true = rng.choice(3, n, p=[0.3, 0.2, 0.5])

    def extract(err):
        wrong = rng.random(n) < err
        return np.where(wrong, (true + rng.integers(1, 3, n)) % 3, true)

    a, b = extract(0.08), extract(0.15)
    reviewed = a != b
    ids = np.arange(n).astype(str)
    ev = pd.concat([
        pd.DataFrame({"case_id": ids, "field": "phase", "value": levels[a], "extractor": "rules"}),
        pd.DataFrame({"case_id": ids, "field": "phase", "value": levels[b], "extractor": "clf"}),
        pd.DataFrame({"case_id": ids[reviewed], "field": "phase", "value": levels[true[reviewed]],
                      "extractor": "review"})], ignore_index=True)
    tab = le.misclassification_from_review(ev, prefer=["rules"])
    le.check_label_error(tab[list(le.LABEL_ERROR_COLUMNS)])
    recorded = np.where(reviewed, true, a)  # review wins, then the preferred extractor
    emp = pd.crosstab(levels[recorded], levels[true], normalize="index")
    est = tab.pivot(index="recorded_value", columns="true_value", values="probability")
    np.testing.assert_allclose(est.loc[emp.index, emp.columns], emp, atol=0.006)
    assert (tab.groupby("recorded_value")["n_recorded"].first().sort_index().to_numpy()
            == np.bincount(recorded, minlength=3)).all()
    # the agreed-but-wrong scans are the only error left: well below either extractor's rate
    assert 0 < 1 - np.diag(est.loc[levels, levels]).min() < 0.03
    # the estimated table feeds the error-aware metrics as it is
    cases = pd.DataFrame({"case_id": ids, "model": "m", "label": true % 2, "score": 0.0,
                          "pred": (true == 2).astype(int), "site": "s", "phase": levels[recorded]})
    out = le.error_aware_metrics(cases, by=["phase"], label_error=tab, n_imputations=5, seed=0,
                                 metrics=("accuracy",))
    assert set(out.loc[out.group_var == "phase", "method"]) == {"mi-wilson"}


def test_misclassification_single_extractor_is_identity():
    ev = pd.DataFrame({"case_id": ["1", "2", "3"], "field": "sex", "value": ["F", "M", "F"],
                       "extractor": "rules"})
    tab = le.misclassification_from_review(ev)
    est = tab.pivot(index="recorded_value", columns="true_value", values="probability")
    np.testing.assert_allclose(est.to_numpy(), np.eye(2))


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.drop(columns="probability"), "column(s) 'probability' missing"),
    (lambda t: t.assign(probability=t.probability * 2), "in [0, 1]"),
    (lambda t: t.assign(probability=np.where(t.index == 1, 0.0, t.probability)),
     "sum to 1 over true values"),
    (lambda t: pd.concat([t, t.iloc[[0]]], ignore_index=True), "repeat field x recorded_value"),
    (lambda t: t.assign(true_value=np.where(t.index == 2, None, t.true_value)),
     "column 'true_value' has missing values"),
    (lambda t: t.assign(scanner_room=1), "key column(s) 'scanner_room'"),
    (lambda t: t.iloc[:0], "no rows"),
])
def test_bad_tables(cases, table, mutate, message):
    with pytest.raises(ContractError, match=None) as err:
        le.error_aware_metrics(cases, by=["phase"], label_error=mutate(table), seed=0,
                               n_imputations=2, metrics=("sensitivity",))
    assert message in str(err.value)


def test_sum_message_names_the_value_rows_and_fix(table):
    bad = table.copy()
    bad.loc[1, "probability"] = 0.0  # phase, recorded venous: now sums to 0.9667
    with pytest.raises(ContractError) as err:
        le.check_label_error(bad)
    msg = str(err.value)
    assert "field 'phase' recorded 'venous' sums to 0.966667" in msg
    assert "rows 1, 2, 3, 4" in msg and "rescale" in msg


def test_bad_arguments(cases, table):
    with pytest.raises(ValueError, match="cannot carry metadata error"):
        stats.subgroup_metrics(cases, by=["phase"], ci="bootstrap", n_boot=10,
                               label_error=table)
    with pytest.raises(ValueError, match="n_imputations must be an integer >= 2"):
        le.error_aware_metrics(cases, by=["phase"], label_error=table, n_imputations=1)
    with pytest.raises(ContractError, match="no field of the table"):
        le.error_aware_metrics(cases, by=["sex"], label_error=table)
    with pytest.raises(ContractError, match="extractor"):
        le.misclassification_from_review(pd.DataFrame({"case_id": ["1"], "field": ["sex"],
                                                       "value": ["F"]}))


# --------------------------------------------------------------------------- clusters

def _clustered_cases(seed: int = 3, patients: int = 300) -> pd.DataFrame:
    """Patients with 1-4 scans, a patient-level label and a strong patient effect (SD 2 on
    the logit of a correct call, shared by both models): the design effect matters."""
    rng = np.random.default_rng(seed)
    m = rng.choice([1, 2, 3, 4], size=patients, p=[0.4, 0.3, 0.2, 0.1])
    pat = np.repeat(np.arange(patients), m)
    n = len(pat)
    lab = (rng.random(patients) < 0.5)[pat].astype(int)
    u = rng.normal(0, 2, patients)[pat]
    phase = rng.choice(PHASES, size=n)
    frames = []
    for j, model in enumerate(("m1", "m2")):
        right = rng.random(n) < 1 / (1 + np.exp(-(1.0 + 0.3 * j + u)))
        pred = np.where(right, lab, 1 - lab)
        frames.append(pd.DataFrame({"case_id": np.arange(n).astype(str),
                                    "patient_id": pat.astype(str), "model": model,
                                    "label": lab, "score": pred * 100.0, "pred": pred,
                                    "site": "s", "phase": phase}))
    return pd.concat(frames, ignore_index=True)


def test_clusters_enter_each_imputation():
    """cluster="patient_id": on data where patients repeat, the error-aware interval is
    the Rubin-pooled one at each imputation's effective counts ("mi-wilson-cluster"),
    wider than the scans-as-independent "mi-wilson" where the design effect exceeds 1, with
    the same point estimate (the imputations are the same draws); on one scan per patient
    it is "mi-wilson" exactly (the scaling factors are all 1)."""
    cases = _clustered_cases()
    table = flip_table("phase", PHASES, 0.1)
    kw = dict(by=["phase"], label_error=table, n_imputations=20, seed=4,
              metrics=("sensitivity", "specificity"))
    plain = le.error_aware_metrics(cases, cluster=None, **kw)
    clus = le.error_aware_metrics(cases, cluster="patient_id", **kw)
    check_tidy(clus)
    ph = (clus["group_var"] == "phase").to_numpy()
    assert (clus.loc[ph, "method"] == "mi-wilson-cluster").all()
    assert (clus.loc[~ph, "method"] == "wilson-cluster").all()       # overall
    np.testing.assert_allclose(clus["estimate"], plain["estimate"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(clus["denominator"], plain["denominator"])
    w_c = (clus["conf_high"] - clus["conf_low"]).to_numpy()[ph]
    w_p = (plain["conf_high"] - plain["conf_low"]).to_numpy()[ph]
    assert ph.sum() == 16 and (w_c > w_p * 1.03).sum() >= 8 and (w_c / w_p).mean() > 1.03, \
        (w_c / w_p).round(3)
    assert (clus.loc[ph, "n_clusters"] < clus.loc[ph, "denominator"]).all()

    one = cases.drop_duplicates(["model", "patient_id"])
    a = le.error_aware_metrics(one, cluster="patient_id", **kw)
    b = le.error_aware_metrics(one, cluster=None, **kw)
    assert (a.loc[a.group_var == "phase", "method"] == "mi-wilson-cluster").all()
    for col in ("estimate", "conf_low", "conf_high", "df"):
        np.testing.assert_allclose(a[col], b[col], rtol=0, atol=1e-12, err_msg=col)


def _race_cases(seed: int = 5, patients: int = 200) -> pd.DataFrame:
    """``_clustered_cases`` with a race recorded once per patient (a patient-level field)
    and a race effect on a correct call, so the outcome pattern informs the true race."""
    cases = _clustered_cases(seed, patients)
    rng = np.random.default_rng(seed + 1)
    race = pd.Series(rng.choice(RACES, size=patients), index=np.arange(patients).astype(str))
    return cases.assign(race=race.reindex(cases["patient_id"]).to_numpy())


def test_patient_level_field_is_imputed_once_per_patient():
    """race recorded once per patient + cluster: each imputation gives every scan of a
    patient the same true race (a patient is never split between levels), and some
    patients do change; phase (per scan) is not patient-level, and without repeats the
    scan-level draws are kept (so "mi-wilson" stays exact, as tested above)."""
    cases = _race_cases()
    specs = normalize_by(["race"])
    cm = case_matrix(cases, specs, cluster="patient_id")
    d = le._design(cm, specs, le.check_label_error(flip_table("race", RACES, 0.2)))
    assert le.patient_level(d, cm.patient)
    T = le.impute_states(d, 25, np.random.default_rng(0), patient=cm.patient)
    frame = pd.DataFrame(T.T).assign(p=cm.patient)
    assert (frame.groupby("p").nunique() == 1).all().all()      # one state per patient
    rec = pd.Categorical(cm.covariates["race"], categories=d.levels["race"]).codes
    assert (T != rec).any()
    scan = le.impute_states(d, 25, np.random.default_rng(0))     # per scan: patients split
    assert (pd.DataFrame(scan.T).assign(p=cm.patient).groupby("p").nunique() > 1).any().any()
    dp = le._design(cm_ph := case_matrix(cases, normalize_by(["phase"]), cluster="patient_id"),
                    normalize_by(["phase"]), le.check_label_error(flip_table("phase", PHASES, 0.1)))
    assert not le.patient_level(dp, cm_ph.patient)
    single = np.arange(len(cm.patient))
    assert not le.patient_level(d, single) and not le.patient_level(d, None)


def _posterior_inputs(d, cm, seed: int):
    """A random outcome model (2 imputations) and the patient codes, first scans and
    scans x patients membership that _patient_posterior takes."""
    from scipy import sparse

    rng = np.random.default_rng(seed)
    pi = rng.dirichlet(np.ones(d.n_patterns), size=(2, d.n_states, d.n_context)).reshape(
        2, d.n_states, -1)
    codes, first, pcode = np.unique(cm.patient, return_index=True, return_inverse=True)
    member = sparse.csr_matrix((np.ones(len(pcode)), (np.arange(len(pcode)), pcode)),
                               shape=(len(pcode), len(codes)))
    return pi, codes, first, pcode, member


def test_patient_posterior_is_prior_times_the_product_over_scans():
    """Independent recomputation, by loops over patients, scans and states: P(state |
    patient) = prior(state | recorded) x prod_scans P(pattern | state, context) /
    normaliser, for a random outcome model."""
    cases = _race_cases(patients=40)
    specs = normalize_by(["race"])
    cm = case_matrix(cases, specs, cluster="patient_id")
    d = le._design(cm, specs, le.check_label_error(flip_table("race", RACES, 0.3)))
    pi, codes, first, pcode, member = _posterior_inputs(d, cm, seed=2)
    got = le._patient_posterior(pi, d, first, member)[0]
    for m in range(2):
        for j in range(len(codes)):
            scans = np.flatnonzero(pcode == j)
            w = d.prior[d.combo[scans[0]]].copy()
            for i in scans:
                w = w * pi[m, :, d.k[d.combo[i]]]
            np.testing.assert_allclose(got[m, j], w / w.sum(), rtol=1e-10, atol=1e-14)


def test_mixed_design_draws_race_per_patient_and_phase_per_scan():
    """A design of race (recorded once per patient) and phase (per scan): race is drawn
    once per patient, phase per scan (the demo's case: phase with age group and sex).
    The patient posterior of race against a brute-force sum over every combination of
    the patient's scans' phases (itertools.product), for a random outcome model."""
    import itertools

    cases = _race_cases(patients=30)
    specs = normalize_by(["race", "phase"])
    cm = case_matrix(cases, specs, cluster="patient_id")
    table = pd.concat([flip_table("race", RACES, 0.3), flip_table("phase", PHASES, 0.2)],
                      ignore_index=True)
    d = le._design(cm, specs, le.check_label_error(table))
    pmask = le.patient_fields(d, cm.patient)
    assert list(pmask) == [f == "race" for f in d.fields] and pmask.any() and not pmask.all()
    joint = le._state_split(d, pmask)
    pi, codes, first, pcode, member = _posterior_inputs(d, cm, seed=3)
    got = le._patient_posterior(pi, d, first, member, joint)[0]
    SP, SQ = joint.shape
    for m in range(2):
        for j in range(len(codes)):
            scans = np.flatnonzero(pcode == j)
            pr = [d.prior[d.combo[i]] for i in scans]
            prior_p = np.array([pr[0][joint[a]].sum() for a in range(SP)])
            prior_q = [np.array([p[joint[:, b]].sum() for b in range(SQ)]) for p in pr]
            w = np.zeros(SP)
            for a in range(SP):
                for bs in itertools.product(range(SQ), repeat=len(scans)):
                    term = prior_p[a]
                    for i, pq, b in zip(scans, prior_q, bs):
                        term *= pq[b] * pi[m, joint[a, b], d.k[d.combo[i]]]
                    w[a] += term
            np.testing.assert_allclose(got[m, j], w / w.sum(), rtol=1e-9, atol=1e-14)
    T = le.impute_states(d, 20, np.random.default_rng(1), patient=cm.patient)
    race_digit = T // int(np.prod(d.radix[1:])) if d.fields[0] == "race" else T % d.radix[1]
    frame = pd.DataFrame(race_digit.T).assign(p=cm.patient)
    assert (frame.groupby("p").nunique() == 1).all().all()          # race: one per patient
    phase_digit = T % d.radix[1] if d.fields[0] == "race" else T // d.radix[1]
    split = pd.DataFrame(phase_digit.T).assign(p=cm.patient).groupby("p").nunique()
    assert (split > 1).any().any()                                    # phase: per scan


def test_imputed_rows_name_the_per_patient_fields_of_their_axis():
    cases = _race_cases(patients=80)
    table = pd.concat([flip_table("race", RACES, 0.1), flip_table("phase", PHASES, 0.1)],
                      ignore_index=True)
    out = le.error_aware_metrics(cases, by=["race", "phase"], label_error=table,
                                 metrics=("sensitivity",), n_imputations=5, seed=1,
                                 cluster="patient_id")
    imp = out[out["n_imputations"].notna()]
    assert set(imp.loc[imp.group_var == "race", "imputed_per_patient"]) == {"race"}
    assert set(imp.loc[imp.group_var == "phase", "imputed_per_patient"]) == {""}
    assert out.loc[out["n_imputations"].isna(), "imputed_per_patient"].isna().all()


def test_declared_per_patient_fields_are_exactly_those_drawn_per_patient():
    """per_patient (the plan's metadata.per_patient) decides which fields are drawn once
    per patient: [] draws race scan by scan even though every patient agrees on it, and
    [race] gives the same imputations as reading it from the data."""
    cases = _race_cases(patients=80)
    table = pd.concat([flip_table("race", RACES, 0.1), flip_table("phase", PHASES, 0.1)],
                      ignore_index=True)
    kw = dict(by=["race", "phase"], label_error=table, metrics=("sensitivity",),
              n_imputations=5, seed=1, cluster="patient_id")
    auto = le.error_aware_metrics(cases, **kw)
    same = le.error_aware_metrics(cases, per_patient=["race"], **kw)
    pd.testing.assert_frame_equal(auto, same)
    none = le.error_aware_metrics(cases, per_patient=[], **kw)
    imp = none[none["n_imputations"].notna()]
    assert set(imp["imputed_per_patient"]) == {""}
    race = imp["group_var"] == "race"
    assert not np.allclose(imp.loc[race, "conf_low"], auto.loc[imp.index[race], "conf_low"])


def test_declared_per_patient_field_that_differs_within_a_patient_is_an_error():
    """A field declared recorded once per patient but recorded differently on two scans
    of one patient: a ContractError naming the field, the patient, its cases and the
    fix; an unknown field name or a declaration without a cluster: errors too."""
    cases = _race_cases(patients=60)
    first = cases.drop_duplicates("case_id")
    multi = first.groupby("patient_id")["case_id"].agg(list)
    pid = multi[multi.str.len() > 1].index[0]
    cid = multi[pid][1]
    other = next(r for r in RACES if r != first.loc[first.case_id == cid, "race"].iloc[0])
    cases.loc[cases["case_id"] == cid, "race"] = other
    kw = dict(by=["race"], label_error=flip_table("race", RACES, 0.1),
              metrics=("sensitivity",), n_imputations=3, seed=1)
    with pytest.raises(le.ContractError) as exc:
        le.error_aware_metrics(cases, per_patient=["race"], cluster="patient_id", **kw)
    msg = str(exc.value)
    assert "'race'" in msg and f"{pid} (cases " in msg and str(cid) in msg
    assert "metadata.per_patient" in msg and "correct those records" in msg
    out = le.error_aware_metrics(cases, cluster="patient_id", **kw)   # auto: scan by scan
    assert set(out.loc[out["n_imputations"].notna(), "imputed_per_patient"]) == {""}
    with pytest.raises(le.ContractError, match="'rase', which is not a field"):
        le.error_aware_metrics(cases, per_patient=["rase"], cluster="patient_id", **kw)
    with pytest.raises(le.ContractError, match="no cluster column"):
        le.error_aware_metrics(cases, per_patient=["race"], cluster=None, **kw)


def test_declared_per_patient_fields_with_one_scan_per_patient_have_no_effect():
    """Second review: per_patient declared while every patient has one scan (cluster
    'auto' finds no repeats) is no error; it changes nothing (scans are the patients)."""
    cases = _race_cases(patients=60).drop_duplicates(["model", "patient_id"])
    kw = dict(by=["race"], label_error=flip_table("race", RACES, 0.1),
              metrics=("sensitivity",), n_imputations=3, seed=1)
    a = le.error_aware_metrics(cases, per_patient=["race"], **kw)
    b = le.error_aware_metrics(cases, **kw)
    pd.testing.assert_frame_equal(a, b)
