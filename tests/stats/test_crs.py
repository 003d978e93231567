"""CRS axes, reference anchoring and scores.

The hand-built test recomputes every number with the formulas of DESIGN.md written out
below in plain Python, independently of stats/crs.py.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import stats
from stats import crs
from stats.schema import ContractError, check_tidy

# --------------------------------------------------------------------------- hand example
# dataset d1 (seeds 1, 2; has the institutional shift), dataset d2 (seed 7 only)
# cell -> {encoder: per-seed AUROC}; ECE only at clean, fraction 1
D1 = {
    ("clean", 1.0, 0): {"A": [0.90, 0.92], "B": [0.80, 0.80], "C": [0.95, 0.93]},
    ("clean", 0.1, 0): {"A": [0.80, 0.82], "B": [0.75, 0.77], "C": [0.60, 0.62]},
    ("blur", 1.0, 1): {"A": [0.85, 0.87], "B": [0.79, 0.81], "C": [0.90, 0.90]},
    ("shift", 1.0, 0): {"A": [0.70, 0.72], "B": [0.85, 0.85], "C": [0.80, 0.82]},
}
D1_ECE = {"A": [0.05, 0.07], "B": [0.02, 0.04], "C": [0.10, 0.12]}
D2 = {
    ("clean", 1.0, 0): {"A": [0.85], "B": [0.88], "C": [0.90]},
    ("clean", 0.1, 0): {"A": [0.70], "B": [0.80], "C": [0.82]},
    ("blur", 1.0, 1): {"A": [0.80], "B": [0.88], "C": [0.88]},
}
D2_ECE = {"A": [0.08], "B": [0.05], "C": [0.01]}


def hand_runs() -> pd.DataFrame:
    rows = []
    for ds, cells, eces, seeds in (("d1", D1, D1_ECE, [1, 2]), ("d2", D2, D2_ECE, [7])):
        for (cond, frac, sev), per_enc in cells.items():
            for enc, values in per_enc.items():
                for i, (s, v) in enumerate(zip(seeds, values)):
                    e = eces[enc][i] if (cond, frac) == ("clean", 1.0) else 0.5
                    rows.append({"encoder": enc, "dataset": ds, "label_fraction": frac,
                                 "condition": cond, "severity": sev, "seed": s, "auroc": v, "ece": e})
    return pd.DataFrame(rows)


def mean(x):
    return sum(x) / len(x)


def hand_axes(cells, eces, enc):
    disc = mean(cells[("clean", 1.0, 0)][enc])
    cal = mean(eces[enc])
    le = mean([(mean(cells[c][enc]) - 0.5) / (disc - 0.5)
               for c in cells if c[0] == "clean" and c[1] < 1])
    drops = [max(0.0, disc - mean(cells[c][enc])) / (disc - 0.5)
             for c in cells if c[0] != "clean" and c[1] == 1.0]
    rob = 1 - (mean(drops) + max(drops)) / 2
    return [disc, cal, le, rob]


def hand_scores(panel=("A", "B"), weights=(1 / 3, 1 / 3, 1 / 3)):
    x = {e: [(a + b) / 2 for a, b in zip(hand_axes(D1, D1_ECE, e), hand_axes(D2, D2_ECE, e))]
         for e in "ABC"}
    lo = [min(x[p][j] for p in panel) for j in range(4)]
    hi = [max(x[p][j] for p in panel) for j in range(4)]
    a = {}
    for e in "ABC":
        v = [min(1.0, max(0.0, (x[e][j] - lo[j]) / (hi[j] - lo[j]))) for j in range(4)]
        v[1] = 1 - v[1]  # calibration: lower is better
        a[e] = v
    out = {}
    for e in "ABC":
        dom = sum(all(a[e][j] >= a[r][j] for j in range(4)) and any(a[e][j] > a[r][j] for j in range(4))
                  for r in panel)
        sub = sum(all(a[r][j] >= a[e][j] for j in range(4)) and any(a[r][j] > a[e][j] for j in range(4))
                  for r in panel)
        D = (1 + (dom - sub) / len(panel)) / 2
        S = 1 - math.sqrt(sum((v - 1) ** 2 for v in a[e])) / math.sqrt(4)
        W = min(a[e])
        out[e] = dict(zip(crs.SCORE_ESTIMANDS,
                          [*x[e], *a[e], D, S, W, weights[0] * D + weights[1] * S + weights[2] * W]))
    return out


def test_hand_example_matches_formulas():
    got = stats.crs_scores(hand_runs(), {"panel": ["A", "B"], "version": "t1"})
    check_tidy(got)
    want = hand_scores()
    for e in "ABC":
        g = got[got["encoder"] == e].set_index("estimand")["estimate"]
        for name in crs.SCORE_ESTIMANDS:
            assert g[name] == pytest.approx(want[e][name], abs=1e-12), (e, name)
    # C lies outside the panel's range on two axes (clipped to 1 and 0) and Pareto-dominates
    # A (ties on the clipped label-efficiency axis) but not B: D = (1 + 1/2) / 2
    c = got[got["encoder"] == "C"].set_index("estimand")["estimate"]
    assert c["norm_discrimination"] == 1.0 and c["norm_label_efficiency"] == 0.0
    assert c["dominance"] == 0.75
    assert set(got["in_panel"][got["encoder"] == "C"]) == {False}
    assert (got["reference_version"] == "t1").all()
    assert got["reference_hash"].str.fullmatch(r"[0-9a-f]{64}").all()


def test_hand_example_with_weights():
    w = {"dominance": 0.5, "similarity": 0.3, "worst_axis": 0.2}
    got = stats.crs_scores(hand_runs(), {"panel": ["A", "B"], "weights": w})
    want = hand_scores(weights=(0.5, 0.3, 0.2))
    crs_rows = got[got["estimand"] == "crs"].set_index("encoder")["estimate"]
    for e in "ABC":
        assert crs_rows[e] == pytest.approx(want[e]["crs"], abs=1e-12)
    # the weights keyword overrides the reference's weights
    over = stats.crs_scores(hand_runs(), {"panel": ["A", "B"]}, weights=w)
    assert np.array_equal(over["estimate"].to_numpy(), got["estimate"].to_numpy(), equal_nan=True)


def test_crs_axes_tidy_per_dataset_and_overall():
    ax = stats.crs_axes(hand_runs())
    check_tidy(ax)
    assert set(ax["dataset"]) == {"d1", "d2", "overall"}
    a_d1 = ax[(ax["encoder"] == "A") & (ax["dataset"] == "d1")].set_index("estimand")["estimate"]
    assert a_d1.to_list() == pytest.approx(hand_axes(D1, D1_ECE, "A"), abs=1e-12)
    n = ax[(ax["encoder"] == "A") & (ax["dataset"] == "d1")].set_index("estimand")["n"]
    assert n["discrimination"] == 2 and n["label_efficiency"] == 2 and n["robustness"] == 4


def test_axes_match_simulator_truth_without_noise():
    from stats import simulate

    sim = simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=2, run_sd=0.0, seed_sd=0.0, seed=5)
    ax = stats.crs_axes(sim.data)
    got = ax[ax["dataset"] != "overall"].merge(
        sim.truth["axes"], left_on=["regime", "encoder", "dataset", "estimand"],
        right_on=["regime", "encoder", "dataset", "axis"])
    assert len(got) == 4 * 2 * 4
    exact = got[got["estimand"] != "calibration"]
    np.testing.assert_allclose(exact["estimate"], exact["value"], atol=1e-12)
    cal = got[got["estimand"] == "calibration"]          # ECE keeps its own run noise
    np.testing.assert_allclose(cal["estimate"], cal["value"], atol=0.01)


def test_not_estimable_when_auroc_at_chance():
    runs = hand_runs()
    low = (runs["encoder"] == "C") & (runs["dataset"] == "d1") & (runs["condition"] == "clean") \
        & (runs["label_fraction"] == 1.0)
    runs.loc[low, "auroc"] = 0.45
    got = stats.crs_scores(runs, {"panel": ["A", "B"]})
    c = got[got["encoder"] == "C"].set_index("estimand")
    assert np.isnan(c.loc["label_efficiency", "estimate"]) and np.isnan(c.loc["crs", "estimate"])
    assert c.loc["crs", "flag"] == "not_estimable"
    a = got[got["encoder"] == "A"].set_index("estimand")
    assert np.isfinite(a.loc["crs", "estimate"])


def test_regimes_scored_separately():
    runs = hand_runs()
    adapted = runs.assign(regime="adapted", auroc=np.minimum(runs["auroc"] + 0.01, 1.0))
    both = pd.concat([runs.assign(regime="frozen"), adapted], ignore_index=True)
    got = stats.crs_scores(both, {"panel": ["A", "B"]})
    assert set(got["regime"]) == {"frozen", "adapted"}
    frozen = got[got["regime"] == "frozen"].reset_index(drop=True)
    alone = stats.crs_scores(runs, {"panel": ["A", "B"]})
    np.testing.assert_array_equal(frozen["estimate"].to_numpy(), alone["estimate"].to_numpy())


def test_explicit_anchors_used_and_reported():
    anchors = {"discrimination": [0.7, 0.95], "robustness": [0.5, 1.0]}
    got = stats.crs_scores(hand_runs(), {"panel": ["A", "B"], "anchors": anchors})
    a = got[(got["encoder"] == "A") & (got["estimand"] == "norm_discrimination")].iloc[0]
    x = got[(got["encoder"] == "A") & (got["estimand"] == "discrimination")]["estimate"].iloc[0]
    assert a["anchor_low"] == 0.7 and a["anchor_high"] == 0.95
    assert a["estimate"] == pytest.approx((x - 0.7) / 0.25, abs=1e-12)


# --------------------------------------------------------------------------- reference file


def test_reference_yaml_roundtrip_and_hash(tmp_path):
    p = tmp_path / "ref.yaml"
    p.write_text("panel: [B, A]\nversion: 2\nweights: {dominance: 0.5, similarity: 0.25, "
                 "worst_axis: 0.25}\nanchors:\n  calibration: [0.0, 0.2]\n")
    ref = stats.read_reference(p)
    same = stats.read_reference({"version": "2", "anchors": {"calibration": (0, 0.2)}, "panel": ["A", "B"],
                                 "weights": {"worst_axis": 0.25, "similarity": 0.25, "dominance": 0.5}})
    assert ref.hash == same.hash and len(ref.hash) == 64
    assert ref.version == "2" and ref.panel == ("B", "A")
    other = stats.read_reference({"panel": ["A", "B"], "version": "3"})
    assert other.hash != ref.hash
    # default weights are part of the canonical form
    explicit = stats.read_reference({"panel": ["A"], "weights": {k: 1 / 3 for k in crs.WEIGHT_KEYS}})
    assert explicit.hash == stats.read_reference({"panel": ["A"]}).hash


@pytest.mark.parametrize("ref, words", [
    ({"panel": ["A", "Z"]}, "names encoder(s) ['Z'] that have no runs"),
    ({"panel": []}, "'panel' must be a non-empty list"),
    ({"panel": "A"}, "'panel' must be a non-empty list"),
    ({"panel": ["A", "A"]}, "repeats encoder(s) ['A']"),
    ({"panel": ["A", "B"], "anchors": {"speed": [0, 1]}}, "anchors for unknown axis 'speed'"),
    ({"panel": ["A", "B"], "anchors": {"robustness": [1, 0.5]}}, "anchors.robustness must be [lo, hi]"),
    ({"panel": ["A", "B"], "anchors": {"robustness": [0.5]}}, "anchors.robustness must be [lo, hi]"),
    ({"panel": ["A", "B"], "weights": {"dominance": 0.5, "similarity": 0.5, "worst_axis": 0.5}},
     "sum to 1"),
    ({"panel": ["A", "B"], "weights": {"dominance": 1.2, "similarity": -0.2, "worst_axis": 0.0}},
     ">= 0"),
    ({"panel": ["A", "B"], "weights": {"dominance": 1.0}}, "missing ['similarity', 'worst_axis']"),
    ({"panel": ["A", "B"], "colour": "red"}, "unknown reference key(s) ['colour']"),
    (["A", "B"], "a reference must be a mapping"),
])
def test_reference_errors(ref, words):
    with pytest.raises(ContractError) as info:
        stats.crs_scores(hand_runs(), ref)
    assert words in str(info.value)


def test_reference_file_errors(tmp_path):
    with pytest.raises(ContractError, match="reference file not found"):
        stats.read_reference(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("panel: [A, B\n")
    with pytest.raises(ContractError, match="not valid YAML"):
        stats.read_reference(bad)


def test_degenerate_panel_needs_anchors():
    with pytest.raises(ContractError, match="values are all equal"):
        stats.crs_scores(hand_runs(), {"panel": ["A"]})
    anchors = {a: [0.0, 1.0] for a in crs.AXES}
    got = stats.crs_scores(hand_runs(), {"panel": ["A"], "anchors": anchors})
    assert np.isfinite(got["estimate"]).all()


def test_clean_severity_must_be_zero():
    runs = hand_runs()
    runs.loc[0, "severity"] = 2
    with pytest.raises(ContractError, match="must be 0 for condition 'clean'"):
        stats.crs_scores(runs, {"panel": ["A", "B"]})


def test_panel_without_estimable_axis_names_the_fix():
    runs = hand_runs()
    runs = runs[~((runs["condition"] == "clean") & (runs["label_fraction"] < 1))]
    with pytest.raises(ContractError, match="no reference panel encoder has an estimable "
                                            "label_efficiency axis"):
        stats.crs_scores(runs, {"panel": ["A", "B"]})
    got = stats.crs_scores(runs, {"panel": ["A", "B"], "anchors": {"label_efficiency": [0, 1]}})
    assert got.loc[got["estimand"] == "crs", "flag"].eq("not_estimable").all()
