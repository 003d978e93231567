"""stats.intervals against R (tests/r/intervals.R -> tests/r/intervals.csv) and properties."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stats import intervals as iv
from stats.schema import ContractError, check_tidy

R = Path(__file__).parent / "r"
TOL = 1e-10  # closed forms: agreement with R to 1e-10 absolute


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    df = pd.read_csv(R / "intervals.csv")
    df["value"] = df["value"].astype(float)
    return df


def _get(ref, test, id_, quantity):
    row = ref[(ref.test == test) & (ref.id == id_) & (ref.quantity == quantity)]
    assert len(row) == 1, (test, id_, quantity)
    return float(row.value.iloc[0])


@pytest.mark.parametrize("method", ["wilson", "clopper-pearson", "jeffreys"])
def test_proportion_ci_matches_r(ref, method):
    sub = ref[ref.test == method]
    ids = sub.id.unique()
    parsed = [i.replace("@", "/").split("/") for i in ids]
    x = np.array([float(p[0]) for p in parsed])
    n = np.array([float(p[1]) for p in parsed])
    lvl = np.array([float(p[2]) for p in parsed])
    assert len(ids) > 60
    for level in np.unique(lvl):
        k = lvl == level
        low, high = iv.proportion_ci(x[k], n[k], method=method, conf_level=level)
        want_low = [_get(ref, method, i, "low") for i in ids[k]]
        want_high = [_get(ref, method, i, "high") for i in ids[k]]
        np.testing.assert_allclose(low, want_low, atol=TOL, rtol=0)
        np.testing.assert_allclose(high, want_high, atol=TOL, rtol=0)


def test_proportion_ci_edges_and_errors():
    low, high = iv.proportion_ci([0, 5, 0], [5, 5, 0])
    assert low[0] == 0.0 and high[1] == 1.0
    assert np.isnan(low[2]) and np.isnan(high[2])
    with pytest.raises(ContractError, match="successes must not exceed n"):
        iv.proportion_ci([6], [5])
    with pytest.raises(ValueError, match="method must be one of"):
        iv.proportion_ci(1, 2, method="wald")
    with pytest.raises(ValueError, match="conf_level"):
        iv.proportion_ci(1, 2, conf_level=95)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 500), frac=st.floats(0, 1), level=st.floats(0.5, 0.999),
       method=st.sampled_from(iv.PROPORTION_METHODS))
def test_proportion_ci_properties(n, frac, level, method):
    x = int(round(frac * n))
    low, high = iv.proportion_ci(x, n, method=method, conf_level=level)
    assert 0 <= low <= x / n <= high <= 1
    # monotone in the confidence level and in the number of successes
    low2, high2 = iv.proportion_ci(x, n, method=method, conf_level=min(level + 0.0009, 0.9999))
    assert low2 <= low + 1e-12 and high2 >= high - 1e-12
    if x < n:
        low3, high3 = iv.proportion_ci(x + 1, n, method=method, conf_level=level)
        assert low3 >= low - 1e-12 and high3 >= high - 1e-12


def test_mcnemar_matches_r(ref):
    sub = ref[ref.test == "mcnemar"]
    bc = np.array([[float(v) for v in i.split("/")] for i in sub.id])
    np.testing.assert_allclose(iv.mcnemar_exact(bc[:, 0], bc[:, 1]), sub.value, atol=1e-12, rtol=0)


def test_newcombe_matches_r(ref):
    for test, paired in (("newcombe-unpaired", False), ("newcombe-paired", True)):
        sub = ref[ref.test == test]
        for id_ in sub.id.unique():
            v = [float(t) for t in id_.split("/")]
            if paired:
                est, lo, hi = iv.newcombe_diff_ci(None, None, None, None, paired_counts=v)
            else:
                est, lo, hi = iv.newcombe_diff_ci(*v)
            for q, got in (("estimate", est), ("low", lo), ("high", hi)):
                assert abs(float(got) - _get(ref, test, id_, q)) < TOL, (test, id_, q)


def test_newcombe_published_examples():
    # Newcombe (1998a) Table II, example (a) 56/70 - 48/80, method 10: 0.0524, 0.3339
    _, lo, hi = iv.newcombe_diff_ci(56, 70, 48, 80)
    assert round(float(lo), 4) == 0.0524 and round(float(hi), 4) == 0.3339
    # paired with phi = 0 (independent margins) reduces to the unpaired square-and-add
    est, lo, hi = iv.newcombe_diff_ci(None, None, None, None, paired_counts=(4, 4, 6, 6))
    e2, l2, h2 = iv.newcombe_diff_ci(8, 20, 10, 20)
    assert abs(est - e2) < 1e-15 and abs(lo - l2) < 1e-15 and abs(hi - h2) < 1e-15


def test_auc_ci_matches_proc_asah(ref):
    d = pd.read_csv(R / "data" / "detection_asah.csv")
    for m in ("s100b", "ndka", "wfns"):
        for lvl in (0.9, 0.95):
            got = iv.auc_ci(d.y, d[m], conf_level=lvl)
            check_tidy(got)
            id_ = f"{m}@{lvl:g}"
            assert abs(got.estimate[0] - _get(ref, "auc-asah", id_, "auc")) < TOL
            assert abs(got.conf_low[0] - _get(ref, "auc-asah", id_, "low")) < TOL
            assert abs(got.conf_high[0] - _get(ref, "auc-asah", id_, "high")) < TOL
        assert abs(got.std_error[0] ** 2 - _get(ref, "auc-asah", m, "var")) < 1e-12


def test_auc_logit_interval_matches_r(ref):
    """Logit-scale DeLong interval against R's plogis(qlogis(A) +- z sqrt(V) / (A (1 - A)))
    on pROC's AUC and variance."""
    d = pd.read_csv(R / "data" / "detection_asah.csv")
    for m in ("s100b", "ndka", "wfns"):
        got = iv.auc_ci(d.y, d[m], auc_scale="logit")
        check_tidy(got)
        assert got.method[0] == "delong-logit"
        assert abs(got.conf_low[0] - _get(ref, "auc-logit-asah", m, "low")) < TOL
        assert abs(got.conf_high[0] - _get(ref, "auc-logit-asah", m, "high")) < TOL
        plain = iv.auc_ci(d.y, d[m])
        assert got.estimate[0] == plain.estimate[0] and got.std_error[0] == plain.std_error[0]


def test_auc_logit_interval_edges():
    perfect = iv.auc_ci([1, 1, 0, 0], [0.9, 0.8, 0.2, 0.3], auc_scale="logit")
    assert perfect.estimate[0] == 1.0  # logit infinite: no interval, flagged (issue 15)
    assert np.isnan(perfect.conf_low[0]) and np.isnan(perfect.conf_high[0])
    assert perfect.flag[0] == "auc_boundary"
    with pytest.raises(ValueError, match="must be one of.*logit"):
        iv.auc_ci([1, 0], [1, 0], auc_scale="log")


def test_delong_test_matches_proc(ref):
    d = pd.read_csv(R / "data" / "detection_asah.csv")
    for a, b in (("s100b", "ndka"), ("s100b", "wfns"), ("ndka", "wfns")):
        got = iv.delong_test(d.y, d[a], d[b])
        check_tidy(got)
        id_ = f"{a}-{b}"
        assert abs(got.statistic[0] - _get(ref, "delong-asah", id_, "z")) < TOL
        assert abs(got.p_value[0] - _get(ref, "delong-asah", id_, "p")) < TOL
        assert abs(got.conf_low[0] - _get(ref, "delong-asah", id_, "low")) < TOL
        assert abs(got.conf_high[0] - _get(ref, "delong-asah", id_, "high")) < TOL
    sim = pd.read_csv(R / "data" / "detection_sim.csv")
    wide = sim.pivot(index="case_id", columns="model", values="score")
    y = sim.drop_duplicates("case_id").set_index("case_id").label.loc[wide.index]
    for id_ in ref[ref.test == "delong-sim"].id.unique():
        a, b = id_.split("-")
        got = iv.delong_test(y, wide[a], wide[b])
        assert abs(got.statistic[0] - _get(ref, "delong-sim", id_, "z")) < TOL
        assert abs(got.p_value[0] - _get(ref, "delong-sim", id_, "p")) < TOL


def test_grouped_delong_matches_proc_on_simulator(ref):
    """The vectorized per-group DeLong (used per subgroup cell) equals pROC per cell."""
    sim = pd.read_csv(R / "data" / "detection_sim.csv")
    key = sim.model + "|" + sim.phase
    codes, levels = pd.factorize(key)
    d = iv.delong_placements(codes, sim.label.to_numpy() == 1, sim.score.to_numpy())
    sub = ref[ref.test == "auc-sim"]
    checked = 0
    for id_ in sub.id.unique():
        if id_.endswith("|overall"):
            got = iv.auc_ci(sim.label[sim.model == id_.split("|")[0]],
                            sim.score[sim.model == id_.split("|")[0]])
            auc, var = got.estimate[0], got.std_error[0] ** 2
        else:
            g = list(levels).index(id_)
            auc, var = d["auc"][g], d["var"][g]
        assert abs(auc - _get(ref, "auc-sim", id_, "auc")) < TOL
        assert abs(var - _get(ref, "auc-sim", id_, "var")) < 1e-12
        checked += 1
    assert checked >= 12


def test_auc_edge_cases():
    one_class = iv.auc_ci([1, 1, 1], [0.1, 0.2, 0.3])
    assert np.isnan(one_class.estimate[0]) and one_class.flag[0] == "not_estimable"
    single = iv.auc_ci([1, 0, 0], [0.9, 0.2, 0.3])
    assert single.estimate[0] == 1.0 and single.flag[0] == "small_n"
    with pytest.raises(ContractError, match="label must be 0/1"):
        iv.auc_ci([2, 0], [1, 2])
    same = iv.delong_test([1, 0, 1, 0], [1, 2, 3, 0], [1, 2, 3, 0])
    assert np.isnan(same.p_value[0]) and same.flag[0] == "not_estimable"


@settings(max_examples=200, deadline=None)
@given(a=st.integers(0, 60), b=st.integers(0, 60), c=st.integers(0, 60), d=st.integers(0, 60),
       n2=st.integers(1, 80), frac=st.floats(0, 1))
def test_newcombe_properties(a, b, c, d, n2, frac):
    assume(a + b + c + d > 0)
    est, lo, hi = iv.newcombe_diff_ci(None, None, None, None, paired_counts=(a, b, c, d))
    assert -1 - 1e-12 <= lo <= est <= hi <= 1 + 1e-12
    x2 = int(round(frac * n2))
    est, lo, hi = iv.newcombe_diff_ci(a, a + b + 1, x2, n2)
    assert -1 - 1e-12 <= lo <= est <= hi <= 1 + 1e-12
    p = iv.mcnemar_exact(b, c)
    assert 0 <= p <= 1 and p == iv.mcnemar_exact(c, b)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), min_size=4, max_size=60))
def test_auc_ci_properties(rows):
    y = np.array([r[0] for r in rows], dtype=int)
    s = np.array([r[1] for r in rows], dtype=float)
    out = iv.auc_ci(y, s)
    if y.min() == y.max():   # one class: not estimable (checked, then no AUC to compare)
        assert np.isnan(out.estimate[0])
    assume(y.min() < y.max())
    pos, neg = s[y == 1], s[y == 0]
    want = ((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean()
    assert out.estimate[0] == pytest.approx(want, abs=1e-12)  # Mann-Whitney with ties 1/2
    if not np.isnan(out.conf_low[0]):
        assert 0 <= out.conf_low[0] <= out.estimate[0] <= out.conf_high[0] <= 1
