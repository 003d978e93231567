"""stats.operating against R (tests/r/operating.R -> tests/r/operating.csv) and by
independent recomputation: ROC points, values at a fixed coordinate, partial AUC, the
unpaired DeLong test, likelihood ratios, the goals tests; the bootstrap engine against a
row-level resampling.

Tolerances (asserted, and the largest gaps measured on the committed fixture):
point estimates 1e-12 absolute (ROC thresholds, sensitivities and specificities: measured
0, every value equal; values at a fixed coordinate: 0; partial AUC: 2.2e-16); likelihood
ratios and their Simel / epiR limits 1e-12 relative (measured 1.7e-13 absolute on values
up to 11); unpaired DeLong D, df, p 1e-10 relative (measured 4.9e-14, 1.7e-13 on df near
100, 3.8e-14); clustered log-LR SEs against survey 1e-10 relative (2.1e-15); the exact
goals test and its limits 1e-12 (1.1e-15); the clustered limits against svyciprop 1e-8
(7.8e-16); Farrington-Manning's closed form against R's numerical maximisation 1e-7 for
the restricted estimates and 1e-6 for z (3.6e-8: R's optimize tolerance).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stats
from stats import operating as op

R = Path(__file__).resolve().parents[1] / "r"
POINT = 1e-12


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    df = pd.read_csv(R / "operating.csv", keep_default_na=False)
    df["value"] = df["value"].map(lambda v: float({"NA": "nan"}.get(v, v)))
    return df


def _get(ref, test, id_, quantity):
    row = ref[(ref.test == test) & (ref.id == id_) & (ref.quantity == quantity)]
    assert len(row) == 1, (test, id_, quantity)
    return float(row["value"].iloc[0])


def _sim() -> pd.DataFrame:
    d = pd.read_csv(R / "data" / "detection_sim.csv", float_precision="round_trip")
    return stats.scan_level(d, threshold=50)


def _asah_cases(marker: str) -> pd.DataFrame:
    a = pd.read_csv(R / "data" / "detection_asah.csv", float_precision="round_trip")
    return pd.DataFrame({"case_id": np.arange(len(a)).astype(str), "model": marker,
                         "label": a["y"], "score": a[marker]})


def _near_cases() -> pd.DataFrame:
    a = pd.read_csv(R / "data" / "operating_near_ties.csv", float_precision="round_trip")
    return pd.DataFrame({"case_id": np.arange(len(a)).astype(str), "model": "near",
                         "label": a["y"], "score": a["s"]})


def _curves():
    """(tag, R id, cases, model, group_var, group_level) of every curve in the fixture."""
    sim = _sim()
    out = []
    for m in sim["model"].unique():
        for ph in ["overall", *sim["phase"].unique()]:
            out.append(("sim", f"{m}|{ph}", sim, m, "overall" if ph == "overall" else "phase",
                        ph))
    for nm in ("s100b", "ndka", "wfns"):
        out.append(("asah", nm, _asah_cases(nm), nm, "overall", "overall"))
    out.append(("near", "near", _near_cases(), "near", "overall", "overall"))
    return out


def _pick(df, model, gv, gl):
    return df[(df["model"] == model) & (df["group_var"] == gv) & (df["group_level"] == gl)]


def _by(gv):
    return ["phase"] if gv == "phase" else None


def _close(a, b, tol=POINT):
    a, b = np.asarray(a, float), np.asarray(b, float)
    both_nan = np.isnan(a) & np.isnan(b)
    same_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):
        gap = np.where(both_nan | same_inf, 0.0, np.abs(a - b))
    return np.nan_to_num(gap, nan=np.inf).max(initial=0.0) <= tol, np.nanmax(gap, initial=0)


def test_roc_points_equal_proc_coords_all(ref):
    worst = 0.0
    for tag, id_, cases, m, gv, gl in _curves():
        rc = _pick(op.roc_curve(cases, by=_by(gv), cluster=None), m, gv, gl)
        sub = ref[(ref.test == f"{tag}-coords") & (ref.id == id_)]
        if not len(sub):
            continue
        for col in ("threshold", "specificity", "sensitivity"):
            want = sub[sub.quantity.str.startswith(col + ":")]
            order = want.quantity.str.split(":").str[1].astype(int).to_numpy()
            assert len(want) == len(rc), (id_, col, len(want), len(rc))
            ok, gap = _close(rc[col].to_numpy()[order], want["value"].to_numpy())
            assert ok, (id_, col, gap)
            worst = max(worst, gap)
    assert worst <= POINT


@pytest.mark.parametrize("fixed", ["specificity", "sensitivity"])
def test_values_at_a_fixed_coordinate_equal_proc_coords(ref, fixed):
    tag_of = {"specificity": "at-spec", "sensitivity": "at-sens"}
    other = "sensitivity" if fixed == "specificity" else "specificity"
    values = [0, 0.5, 0.8, 0.9, 0.95, 1] if fixed == "specificity" else [0, 0.5, 0.7, 0.9, 1]
    hits = interpolated = 0
    for tag, id_, cases, m, gv, gl in _curves():
        res = op.operating_point(cases, by=_by(gv), n_boot=None, cluster=None,
                                 **{fixed: values})
        res = _pick(res[res["estimand"] == f"{other}_at_{fixed}"], m, gv, gl)
        for v in values:
            row = res[np.isclose(res["at"], v)]
            want = _get(ref, f"{tag}-{tag_of[fixed]}", id_, f"{other}@{v:g}")
            thr = _get(ref, f"{tag}-{tag_of[fixed]}", id_, f"threshold@{v:g}")
            assert abs(float(row["estimate"].iloc[0]) - want) <= POINT, (id_, v)
            got_thr = float(row["threshold"].iloc[0])
            assert (np.isnan(thr) and np.isnan(got_thr)) or got_thr == thr, (id_, v, got_thr, thr)
            hits += not np.isnan(thr)
            interpolated += np.isnan(thr)
    assert hits > 20 and interpolated > 20     # both of pROC's branches are exercised


def test_partial_auc_equals_proc(ref):
    n = 0
    for tag, id_, cases, m, gv, gl in _curves():
        sub = ref[(ref.test == f"{tag}-pauc") & (ref.id == id_)]
        for q, want in zip(sub.quantity, sub.value):
            focus, rg, corr = q.split(":")
            lo, hi = (float(x) for x in rg.split("-"))
            res = op.partial_auc(cases, by=_by(gv), n_boot=None, cluster=None,
                                 correct=corr == "TRUE", **{focus: (lo, hi)})
            got = _pick(res[~res["estimand"].str.endswith("_difference")], m, gv, gl)
            g = float(got["estimate"].iloc[0])
            if np.isnan(want):
                assert np.isnan(g) and got["flag"].iloc[0] == op.FLAG_BELOW_DIAGONAL, (id_, q)
            else:
                assert abs(g - want) <= POINT, (id_, q, g, want)
            n += 1
    assert n > 300


def test_unpaired_delong_equals_proc_roc_test(ref):
    sim = _sim()
    for m in sim["model"].unique():
        d = sim[sim["model"] == m]
        for ph in d["phase"].unique():
            a, b = d[d["phase"] == ph], d[d["phase"] != ph]
            t = stats.delong_test_unpaired(a["label"], a["score"], b["label"], b["score"])
            _check_unpaired(ref, f"{m}|{ph}", t)
    asah = pd.read_csv(R / "data" / "detection_asah.csv", float_precision="round_trip")
    half = np.arange(len(asah)) < 60
    for nm in ("s100b", "ndka", "wfns"):
        t = stats.delong_test_unpaired(asah["y"][half], asah[nm][half], asah["y"][~half],
                                       asah[nm][~half])
        _check_unpaired(ref, nm, t)


def _check_unpaired(ref, id_, t):
    for q, col in (("D", "statistic"), ("df", "df"), ("p", "p_value"), ("auc1", "auc_a"),
                   ("auc2", "auc_b")):
        want = _get(ref, "unpaired", id_, q)
        assert abs(float(t[col].iloc[0]) - want) <= 1e-10 * max(1, abs(want)), (id_, q)


def test_auc_vs_rest_equals_the_unpaired_test_cell_by_cell(ref):
    """The vectorized subgroup-versus-rest table is pROC's unpaired test of each cell."""
    sim = _sim().drop(columns=["patient_id"])
    t = op.auc_vs_rest(sim, by=["phase"])
    for _, row in t.iterrows():
        want = _get(ref, "unpaired", f"{row['model']}|{row['group_level']}", "D")
        assert abs(row["statistic"] - want) <= 1e-10
        assert abs(row["p_value"] - _get(ref, "unpaired", f"{row['model']}|{row['group_level']}",
                                         "p")) <= 1e-10


def _obuchowski_psi(y, s, c):
    """Plain loops: placements, the cluster structural components and Obuchowski's
    variance (the paper's definitions), and psi per cluster."""
    y, s = np.asarray(y, bool), np.asarray(s, float)
    X, Y = s[y], s[~y]
    v10 = np.array([np.mean([1.0 if x > yy else 0.5 if x == yy else 0.0 for yy in Y]) for x in X])
    v01 = np.array([np.mean([1.0 if x > yy else 0.5 if x == yy else 0.0 for x in X]) for yy in Y])
    A = v10.mean()
    M, N = len(X), len(Y)
    cx, cy = np.asarray(c)[y], np.asarray(c)[~y]
    ids = list(dict.fromkeys(c))
    d10 = {i: v10[cx == i].sum() - (cx == i).sum() * A for i in ids}
    d01 = {i: v01[cy == i].sum() - (cy == i).sum() * A for i in ids}
    I10 = sum((cx == i).any() for i in ids)
    I01 = sum((cy == i).any() for i in ids)
    I = len(ids)
    S10 = I10 / ((I10 - 1) * M) * sum(d10[i] ** 2 for i in ids)
    S01 = I01 / ((I01 - 1) * N) * sum(d01[i] ** 2 for i in ids)
    S11 = I / (I - 1) * sum(d10[i] * d01[i] for i in ids)
    var = S10 / M + S01 / N + 2 * S11 / (M * N)
    psi = {i: d10[i] / M + d01[i] / N for i in ids}
    return A, var, psi


def test_clustered_unpaired_test_equals_a_plain_recomputation():
    rng = np.random.default_rng(4)
    n = 60
    ya, yb = rng.integers(0, 2, n), rng.integers(0, 2, n)
    ya[:2], yb[:2] = [0, 1], [0, 1]
    sa, sb = rng.normal(ya, 1.0), rng.normal(yb * 0.5, 1.0)
    ca = [f"p{i // 2}" for i in range(n)]                # two scans per patient
    cb = [f"p{i // 3 + 10}" for i in range(n)]           # shares patients p10.. with a
    t = stats.delong_test_unpaired(ya, sa, yb, sb, cluster_a=ca, cluster_b=cb)
    A, va, pa = _obuchowski_psi(ya, sa, ca)
    B, vb, pb = _obuchowski_psi(yb, sb, cb)
    shared = set(pa) & set(pb)
    I = len(set(pa) | set(pb))
    cov = I / (I - 1) * sum(pa[i] * pb[i] for i in shared)
    se = np.sqrt(va + vb - 2 * cov)
    Ia, Ib = len(pa), len(pb)
    df = (va + vb) ** 2 / (va ** 2 / (Ia - 1) + vb ** 2 / (Ib - 1))
    assert t["method"].iloc[0] == "delong-unpaired-cluster"
    assert t["n_clusters_shared"].iloc[0] == len(shared) > 0
    assert abs(t["std_error"].iloc[0] - se) < 1e-12
    assert abs(t["statistic"].iloc[0] - (A - B) / se) < 1e-10
    assert abs(t["df"].iloc[0] - df) < 1e-9
    # one scan per cluster and none shared: pROC's test
    t1 = stats.delong_test_unpaired(ya, sa, yb, sb, cluster_a=[f"a{i}" for i in range(n)],
                                    cluster_b=[f"b{i}" for i in range(n)])
    t0 = stats.delong_test_unpaired(ya, sa, yb, sb)
    for col in ("statistic", "df", "p_value"):
        assert abs(t1[col].iloc[0] - t0[col].iloc[0]) < 1e-12


def test_likelihood_ratios_equal_epir_and_simel(ref):
    sim = _sim()
    lr = stats.likelihood_ratios(sim, by=["phase"], cluster=None)
    n = 0
    for m in sim["model"].unique():
        for ph in ["overall", *sim["phase"].unique()]:
            gv = "overall" if ph == "overall" else "phase"
            sub = _pick(lr, m, gv, ph)
            if not ((ref.test == "lr-simel") & (ref.id == f"{m}|{ph}")).any():
                assert (sub["flag"] != "").any()          # a zero cell: not estimable
                continue
            pos = sub[sub["estimand"] == "lr_positive"].iloc[0]
            neg = sub[sub["estimand"] == "lr_negative"].iloc[0]
            for test, id_ in (("lr-simel", f"{m}|{ph}"), ("lr-epir", f"{m}|{ph}@0.95")):
                for q, got in (("lr_pos", pos.estimate), ("lr_pos_low", pos.conf_low),
                               ("lr_pos_high", pos.conf_high), ("lr_neg", neg.estimate),
                               ("lr_neg_low", neg.conf_low), ("lr_neg_high", neg.conf_high)):
                    assert abs(got - _get(ref, test, id_, q)) <= POINT * max(1, got), (id_, q)
            n += 1
    assert n >= 9
    lr90 = stats.likelihood_ratios(sim, conf_level=0.9, cluster=None)
    row = _pick(lr90[lr90["estimand"] == "lr_positive"], "model_A", "overall", "overall")
    assert abs(row["conf_low"].iloc[0] - _get(ref, "lr-epir", "model_A|overall@0.9",
                                              "lr_pos_low")) <= POINT


def test_clustered_likelihood_ratios_equal_survey(ref):
    sim = _sim()
    lr = stats.likelihood_ratios(sim)                   # auto: patient_id repeats
    for m in sim["model"].unique():
        for est, q in (("lr_positive", "lr_pos"), ("lr_negative", "lr_neg")):
            row = _pick(lr[lr["estimand"] == est], m, "overall", "overall").iloc[0]
            assert row["method"] == "simel-log-cluster"
            assert abs(np.log(row["estimate"]) - _get(ref, "lr-survey", m, f"log_{q}")) < 1e-12
            want = _get(ref, "lr-survey", m, f"se_log_{q}")
            assert abs(row["std_error"] - want) <= 1e-10 * want, (m, q)


def test_zero_cell_likelihood_ratio_is_not_estimable():
    d = pd.DataFrame({"case_id": list("abcd"), "model": "m", "label": [1, 1, 0, 0],
                      "score": [9, 8, 1, 2], "pred": [1, 1, 0, 0]})
    lr = stats.likelihood_ratios(d)
    pos = lr[lr["estimand"] == "lr_positive"].iloc[0]
    assert np.isnan(pos["estimate"]) and pos["flag"] == "not_estimable"


def test_exact_goal_test_equals_binom_test(ref):
    for id_ in ref.loc[ref.test == "goal-exact", "id"].unique():
        frac, a = id_.split("@")
        xn, g = frac.split(">")
        x, n = (float(v) for v in xn.split("/"))
        a, g = float(a), float(g)
        assert abs(op.exact_greater(x, n, g) - _get(ref, "goal-exact", id_, "p")) <= POINT
        assert abs(op.cp_lower(x, n, a) - _get(ref, "goal-exact", id_, "low")) <= POINT
        assert abs(op.cp_upper(x, n, a) - _get(ref, "goal-exact", id_, "high")) <= POINT


def test_goals_clustered_limits_equal_svyciprop(ref):
    sim = _sim()
    g = stats.performance_goals(sim, [{"metric": "sensitivity", "goal": 0.5}], by=["phase"])
    for m in sim["model"].unique():
        row = _pick(g, m, "overall", "overall").iloc[0]
        assert row["method"] == "exact-binomial-cluster"
        assert abs(row["estimate"] - _get(ref, "goal-cluster", m, "estimate")) <= POINT
        assert abs(row["conf_low"] - _get(ref, "goal-cluster", m, "low")) <= 1e-8
        assert abs(row["conf_high"] - _get(ref, "goal-cluster", m, "high")) <= 1e-8


def test_farrington_manning_equals_numerical_maximum_likelihood(ref):
    for id_ in ref.loc[ref.test == "fm", "id"].unique():
        x1, n1, x2, n2, delta = (float(v) for v in id_.split("/"))
        q1, q2 = op.fm_restricted(x1 / n1, n1, x2 / n2, n2, delta)
        assert abs(q1 - _get(ref, "fm", id_, "q1")) < 1e-7
        assert abs(q2 - _get(ref, "fm", id_, "q2")) < 1e-7
        z = op.fm_z(x1 / n1, n1, x2 / n2, n2, delta)
        assert abs(z - _get(ref, "fm", id_, "z")) < 1e-6


def test_goal_verdicts_and_holm():
    """met = Holm-adjusted p < alpha; not_met = upper limit below the goal; the overall row
    is its own test; an inconclusive row names the count that would settle it."""
    sim = _sim()
    g = stats.performance_goals(sim, [{"metric": "sensitivity", "goal": 0.55}], by=["phase"],
                                cluster=None)
    from statsmodels.stats.multitest import multipletests

    for m in sim["model"].unique():
        fam = g[(g["model"] == m) & (g["group_var"] == "phase")]
        assert np.allclose(fam["p_adjusted"], multipletests(fam["p_value"], method="holm")[1])
        ov = _pick(g, m, "overall", "overall").iloc[0]
        assert np.isnan(ov["p_adjusted"])
    met = g["verdict"] == "met"
    pad = g["p_adjusted"].fillna(g["p_value"])
    assert (pad[met] < 0.05).all() and (pad[~met] >= 0.05).all()
    nm = g["verdict"] == "not_met"
    assert (g.loc[nm, "conf_high"] < 0.55).all()
    inc = g[g["verdict"] == "inconclusive"]
    assert len(inc) and inc["n_needed"].notna().all()
    # the count named would settle it at the family's Bonferroni level
    for _, r in inc.iterrows():
        lvl = 0.05 / 4 if r["group_var"] != "overall" else 0.05
        N = r["n_needed"]
        p = r["estimate"]
        if r["n_needed_for"] == "met":
            assert op.cp_lower(p * N, N, lvl) > 0.55 >= op.cp_lower(p * (N - 1), N - 1, lvl)
        else:
            assert op.cp_upper(p * N, N, lvl) < 0.55 <= op.cp_upper(p * (N - 1), N - 1, lvl)


def test_margin_goal_is_the_rest_comparison_rescaled():
    sim = _sim()
    g = stats.performance_goals(sim, [{"metric": "sensitivity", "margin": 0.1}], by=["phase"],
                                cluster=None)
    assert (g["group_var"] != "overall").all()
    pos = sim[sim["label"] == 1]
    for _, r in g.iterrows():
        d = pos[pos["model"] == r["model"]]
        s = d[d["phase"] == r["group_level"]]
        rest = d[d["phase"] != r["group_level"]]
        ps, pr, pa = s["pred"].mean(), rest["pred"].mean(), d["pred"].mean()
        assert abs(r["estimate"] - (ps - pa)) < 1e-12
        delta = -0.1 * len(d) / len(rest)
        z = op.fm_z(ps, len(s), pr, len(rest), delta)
        assert abs(r["p_value"] - (1 - __import__("scipy").stats.norm.cdf(z))) < 1e-12
        # the limit is where the score test reaches its critical value
        lo = r["conf_low"] * len(d) / len(rest)
        assert abs(op.fm_z(ps, len(s), pr, len(rest), lo) - 1.6448536269514722) < 1e-6


# --------------------------------------------------------------------------- bootstrap


def test_replicate_roc_equals_resampling_rows():
    """The replicate's ROC from run counts (W @ K) is the ROC of the resampled rows."""
    d = _sim()
    cm = stats.detection.case_matrix(d, ["phase"], need_pred=False)
    r = op.build_runs(cm)
    from stats.bootstrap import replicate_reduce, draw_indices

    rows = replicate_reduce(r.KT, r.strata, 3, lambda c: c, seed=7)
    idx = draw_indices(__import__("stats._rng", fromlist=["spawn"]).spawn(7, 1)[0], r.strata, 3)
    R = len(r.run_group)
    for b in range(3):
        w = np.bincount(idx[b], minlength=r.KT.shape[1])
        assert np.array_equal(rows[b], r.KT.T.toarray().T @ w)
        cp, cn = r.cumulative(rows[b:b + 1, :R], rows[b:b + 1, R:])
        # the resampled rows' sensitivity at specificity 0.9, by pROC's rule on them
        patients = cm.patient
        mult = w[patients]
        for j, m in enumerate(cm.models):
            y = np.repeat(cm.label, mult)
            s = np.repeat(cm.score[:, j], mult)
            one = pd.DataFrame({"case_id": np.arange(len(y)).astype(str), "model": m,
                                "label": y.astype(int), "score": s})
            want = op.operating_point(one, specificity=0.9, n_boot=None, cluster=None)
            got = op.at_specificity(r, cp, cn, 0.9)[0][0, j * cm.n_cells]
            assert abs(got - want["estimate"].iloc[0]) < 1e-12


def test_operating_point_bootstrap_is_paired_and_reproducible():
    d = _sim()
    a = stats.operating_point(d, specificity=0.9, n_boot=200, seed=3)
    b = stats.operating_point(d, specificity=0.9, n_boot=200, seed=3)
    pd.testing.assert_frame_equal(a, b)
    diff = a[a["estimand"] == "sensitivity_at_specificity_difference"]
    assert len(diff) == 3 and diff["p_value"].between(0, 1).all()
    assert (diff["conf_low"] <= diff["estimate"]).all()


@pytest.mark.parametrize("fixed, values", [("specificity", [0.8, 0.9, 0.95]),
                                           ("sensitivity", [0.7, 0.85])])
def test_linearized_replicates_equal_a_recomputation_on_resampled_rows(fixed, values):
    """A paired difference's linearized replicate (stats.operating._linearized), by hand
    from the resampled rows: both coordinates at the full sample's two anchor thresholds
    (pROC's midpoints; the fixed coordinate's value interpolated between them with the
    full sample's weight), the other one moved along the full sample's chord slope over
    ``s +- h`` (read off the public operating_point) to the fixed value; and at the
    full sample's own counts it is the estimate, points hit (ties: phase cells of the
    simulated study, whose scores repeat) and interpolated alike."""
    d = _sim()
    cm = stats.detection.case_matrix(d, ["phase"], need_pred=False)
    r = op.build_runs(cm)
    cp, cn = op._point(r)
    vals = np.array(values)
    anchors = op._anchors(r, cp, cn, fixed, vals)
    theta = op._at_values(r, cp, cn, fixed, vals)[0]
    at_full = op._linearized(r, cp, cn, fixed, anchors)[0]
    assert np.allclose(at_full, theta, rtol=0, atol=1e-12, equal_nan=True)
    from stats.bootstrap import draw_indices
    from stats._rng import spawn

    idx = draw_indices(spawn(11, 1)[0], r.strata, 2)
    thr = op.thresholds(r)
    G, GM = cm.n_cells, r.n_groups
    member = cm.member.toarray().astype(bool)          # cells x cases
    for b in range(2):
        w = np.bincount(idx[b], minlength=r.KT.shape[1]).astype(float)
        counts = (r.KT @ w)[None, :]
        R = len(r.run_group)
        bcp, bcn = r.cumulative(counts[:, :R], counts[:, R:])
        got = op._linearized(r, bcp, bcn, fixed, anchors)[0]
        mult = w[cm.patient]
        for v, (i1, i0, prop, slope, sv) in enumerate(anchors):
            for g in range(GM):
                m, cell = divmod(g, G)
                rows = member[cell]
                y, sc, wt = cm.label[rows], cm.score[rows, m], mult[rows]
                if not (y.any() and (~y).any()):
                    continue
                def coords(t):   # resampled rows' (se, sp) at threshold t (score >= t)
                    pos, neg = wt * y, wt * ~y
                    return ((pos * (sc >= t)).sum() / pos.sum(),
                            (neg * (sc < t)).sum() / neg.sum())
                se1, sp1 = coords(thr[i1[g]])
                se0, sp0 = coords(thr[i0[g]])
                se, sp = se1 + prop[g] * (se0 - se1), sp1 + prop[g] * (sp0 - sp1)
                n = (~y).sum() if fixed == "specificity" else y.sum()
                h = op.SLOPE_BANDWIDTH * n ** (-1 / 3)
                lo, hi = max(sv - h, 0.0), min(sv + h, 1.0)
                one = pd.DataFrame({"case_id": np.arange(len(y)).astype(str), "model": "m",
                                    "label": y.astype(int), "score": sc})
                ends = op.operating_point(one, n_boot=None, cluster=None,
                                          **{fixed: [lo, hi]})["estimate"].to_numpy()
                k = (ends[0] - ends[1]) / (hi - lo)
                assert abs(k - slope[g]) < 1e-12
                want = se + k * (sp - sv) if fixed == "specificity" else sp + k * (se - sv)
                assert abs(got[v * GM + g] - want) < 1e-12, (fixed, sv, g)


def test_linearized_difference_is_narrower_than_the_percentile_one():
    """Two models scored on the same scans (a shared component): the replicates read off
    each model's own ROC add each model's local-slope noise to the difference; the
    linearized replicates do not. Their SD is smaller, and the option gives back the
    percentile replicates (the point estimates identical)."""
    rng = np.random.default_rng(2)
    n = 400
    y = rng.random(n) < 0.4
    z = rng.normal(size=n)
    frames = [pd.DataFrame({"case_id": np.arange(n).astype(str), "model": m, "label":
                            y.astype(int), "score": mu * y + 0.8 * z + 0.6 * rng.normal(size=n)})
              for m, mu in (("A", 2.0), ("B", 1.6))]
    cases = pd.concat(frames, ignore_index=True)
    kw = dict(specificity=0.9, n_boot=400, seed=5, cluster=None)
    lin = stats.operating_point(cases, **kw)
    pct = stats.operating_point(cases, difference_ci="percentile", **kw)
    dl, dp = (t[t["estimand"].str.endswith("_difference")].iloc[0] for t in (lin, pct))
    assert dl["method"] == "bootstrap-linearized" and dp["method"] == "bootstrap-percentile"
    assert dl["estimate"] == dp["estimate"]
    assert dl["std_error"] < 0.9 * dp["std_error"], (dl["std_error"], dp["std_error"])
    models = lambda t: t[~t["estimand"].str.endswith("_difference")]   # noqa: E731
    pd.testing.assert_frame_equal(models(lin), models(pct))
    with pytest.raises(stats.schema.ContractError, match="difference_ci"):
        stats.operating_point(cases, difference_ci="bca", **kw)


def test_clustered_goal_p_value_is_dual_to_the_limit_at_every_level():
    """Where patients repeat, p < alpha exactly when the lower limit at alpha (Korn &
    Graubard's effective counts, df factor at that level) exceeds the goal."""
    from stats.clustered import cluster_moments, design_effect, metric_indicators

    sim = _sim()
    g = stats.performance_goals(sim, [{"metric": "sensitivity", "goal": 0.45}], by=["phase"])
    cm = stats.detection.case_matrix(sim, ["phase"], cluster="patient_id")
    mom = cluster_moments(cm.member, cm.patient,
                          *metric_indicators(cm.label, cm.pred, ["sensitivity"])["sensitivity"])
    clustered = g["method"] == "exact-binomial-cluster"
    assert clustered.sum() >= 6
    for _, r in g[clustered].iterrows():
        i = list(cm.cells["group_level"]).index(r["group_level"])
        j = cm.models.index(r["model"])
        p = r["p_value"]
        if not 1e-12 < p < 0.5:
            continue
        one = {k: v[i:i + 1, j:j + 1] for k, v in mom.items()}
        ne = design_effect(one, 1 - 2 * p)["n_effective"]
        phat = one["x"] / one["n"]
        assert abs(op.cp_lower(phat * ne, ne, p)[0, 0] - 0.45) < 1e-9
        for alpha in (0.01, 0.05, 0.2):
            ne_a = design_effect(one, 1 - 2 * alpha)["n_effective"]
            assert (p < alpha) == bool(op.cp_lower(phat * ne_a, ne_a, alpha)[0, 0] > 0.45)


@pytest.mark.parametrize("groups", [None, 7], ids=["leave-one-out", "delete-a-group"])
def test_partial_auc_bca_acceleration_equals_a_jackknife_by_hand(monkeypatch, groups):
    """The BCa acceleration is the jackknife over patients (or, with more patients than
    ``JACKKNIFE_GROUPS``, over groups of patients, code ``i mod K``), recomputed here by
    calling partial_auc on the data without each group; the limits are BCa's on the
    replicates of the same seed; the paired differences keep the percentile interval."""
    from stats.bootstrap import boot_interval

    if groups is not None:
        monkeypatch.setattr(op, "JACKKNIFE_GROUPS", groups)
    d = _sim()
    assert d.groupby("patient_id")["case_id"].nunique().max() > 1   # patients repeat
    cm = stats.detection.case_matrix(d, None, need_pred=False, cluster="patient_id")
    r = op.build_runs(cm)
    args = (0.8, 1.0, "specificity", False)
    a = op._acceleration(r, op.pauc, args, r.n_groups)[:len(cm.models)]
    K = cm.patient.max() + 1 if groups is None else groups
    est = stats.partial_auc(d, n_boot=None).query("estimand == 'partial_auc'") \
        .set_index("model")["estimate"].reindex(cm.models).to_numpy()
    jack = []
    for k in range(K):
        keep = cm.case_id[(cm.patient % K) != k]
        t = stats.partial_auc(d[d["case_id"].isin(keep)], n_boot=None)
        jack.append(t.query("estimand == 'partial_auc'").set_index("model")["estimate"]
                    .reindex(cm.models).to_numpy())
    dd = np.mean(jack, axis=0) - np.array(jack)
    want = (dd ** 3).sum(axis=0) / (6 * ((dd ** 2).sum(axis=0)) ** 1.5)
    np.testing.assert_allclose(a, want, rtol=1e-9, atol=1e-14)
    assert np.abs(want).max() > 1e-4            # a real acceleration, not 0
    got = stats.partial_auc(d, n_boot=300, seed=11)
    reps = op._replicates(r, 300, op.pauc, args, n_out=r.n_groups, seed=11)
    lo, hi = boot_interval(reps[:, :len(cm.models)], est, method="bca", accel=a)
    g = got.query("estimand == 'partial_auc'").set_index("model").reindex(cm.models)
    np.testing.assert_allclose(g["conf_low"], lo, rtol=1e-12)
    np.testing.assert_allclose(g["conf_high"], hi, rtol=1e-12)
    assert (g["method"] == "bootstrap-bca").all()
    pct = stats.partial_auc(d, n_boot=300, seed=11, boot_ci="percentile")
    p = pct.query("estimand == 'partial_auc'").set_index("model").reindex(cm.models)
    assert (p["method"] == "bootstrap-percentile").all() and not np.allclose(p["conf_low"], lo)
    diff = got.query("estimand == 'partial_auc_difference'")
    assert len(diff) and (diff["method"] == "bootstrap-percentile").all()
    pd.testing.assert_frame_equal(diff, pct.query("estimand == 'partial_auc_difference'"))
    with pytest.raises(stats.schema.ContractError, match="boot_ci='bca'"):
        stats.partial_auc(d, boot_ci="wilson")


def test_partial_auc_acceleration_is_zero_when_every_leave_out_value_is_equal():
    """Perfectly separated scores: every leave-out partial AUC is the maximum 0.2, and
    their mean differs from them only by rounding; the acceleration is 0 (a ratio of
    rounding noise gave any value), so BCa is the bias-corrected percentile interval."""
    rng = np.random.default_rng(5)
    y = rng.random(300) < 0.4
    d = pd.DataFrame({"case_id": np.arange(300).astype(str), "model": "m",
                      "label": y.astype(int), "score": np.where(y, 10.0, 0.0) + rng.random(300),
                      "patient_id": (np.arange(300) // 2).astype(str)})
    cm = stats.detection.case_matrix(d, None, need_pred=False, cluster="patient_id")
    r = op.build_runs(cm)
    a = op._acceleration(r, op.pauc, (0.8, 1.0, "specificity", False), r.n_groups)
    assert np.array_equal(a, np.zeros_like(a))
    got = stats.partial_auc(d, n_boot=200, seed=1).iloc[0]
    # every replicate is 0.2 too: BCa's bias correction is infinite, no interval, flagged
    assert got["estimate"] == pytest.approx(0.2) and np.isnan(got["conf_low"])
    assert got["flag"] == "no_interval"
    pct = stats.partial_auc(d, n_boot=200, seed=1, boot_ci="percentile").iloc[0]
    assert pct["conf_low"] == pytest.approx(0.2) and pct["conf_high"] == pytest.approx(0.2)
