"""Property tests of the CRS (hypothesis): insertion invariance and monotonicity."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import stats
from stats import crs

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_runs(rng: np.random.Generator, encoders, datasets, *, seeds=(0, 1), ragged=False):
    """A small random runs table (clean at two fractions, two perturbations, shift on the
    first dataset); AUROC may fall to chance so not-estimable rows occur too."""
    conds = [("clean", 0.25, 0), ("clean", 1.0, 0), ("blur", 1.0, 1), ("noise", 1.0, 2),
             ("noise", 0.25, 2)]
    rows = []
    for d_i, ds in enumerate(datasets):
        cells = conds + ([("shift", 1.0, 0)] if d_i == 0 else [])
        for enc in encoders:
            skill = rng.uniform(0.45, 0.98)
            for cond, frac, sev in cells:
                for s in seeds:
                    if ragged and cond != "clean" and rng.random() < 0.2:
                        continue
                    drop = 0.0 if cond == "clean" else rng.uniform(-0.05, 0.3)
                    rows.append({"encoder": enc, "dataset": ds, "label_fraction": frac,
                                 "condition": cond, "severity": sev, "seed": s,
                                 "auroc": float(np.clip(skill - drop * (skill - 0.5)
                                                        - (1 - frac) * rng.uniform(0, 0.2)
                                                        + rng.normal(0, 0.02), 0, 1)),
                                 "ece": float(rng.uniform(0.0, 0.3))})
    return pd.DataFrame(rows)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), n_base=st.integers(2, 5), n_new=st.integers(1, 4),
       n_datasets=st.integers(1, 2), anchored=st.booleans(), ragged=st.booleans(),
       shuffle=st.booleans())
def test_insertion_invariance(seed, n_base, n_new, n_datasets, anchored, ragged, shuffle):
    """Adding any candidates leaves every existing row bit-identical."""
    rng = np.random.default_rng(seed)
    datasets = [f"d{i}" for i in range(n_datasets)]
    base_enc = [f"base{i}" for i in range(n_base)]
    base = random_runs(rng, base_enc, datasets, ragged=ragged)
    new = random_runs(rng, [f"new{i}" for i in range(n_new)], datasets, ragged=ragged)
    ref = {"panel": base_enc[:2], "version": "p"}
    if anchored:
        ref["anchors"] = {"discrimination": [0.6, 0.95], "calibration": [0.0, 0.3]}
    try:
        before = stats.crs_scores(base, ref)
    except stats.ContractError:  # a panel that cannot anchor an axis: nothing to compare
        assume(False)
    both = pd.concat([base, new], ignore_index=True)
    if shuffle:  # new candidates may also come first
        both = pd.concat([new, base], ignore_index=True)
    after = stats.crs_scores(both, ref)
    after = after[after["encoder"].isin(base_enc)].reset_index(drop=True)
    pd.testing.assert_frame_equal(before.reset_index(drop=True), after, check_exact=True)
    # per domain too: the same anchors, the same panel per dataset
    before = stats.crs_scores(base, ref, by="dataset")
    after = stats.crs_scores(both, ref, by="dataset")
    after = after[after["encoder"].isin(base_enc)].reset_index(drop=True)
    assert set(before["dataset"]) == set(datasets)
    pd.testing.assert_frame_equal(before.reset_index(drop=True), after, check_exact=True)


axis_values = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=4, max_size=4)


@SETTINGS
@given(values=st.lists(axis_values, min_size=3, max_size=7), who=st.integers(0, 6),
       axis=st.integers(0, 3), step=st.floats(1e-6, 0.5), n_panel=st.integers(2, 4),
       weights=st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3).filter(lambda w: sum(w) > 0.05))
def test_improving_an_axis_never_lowers_crs(values, who, axis, step, n_panel, weights):
    """Better on one axis (higher, or lower ECE), the rest unchanged: CRS does not drop,
    for candidates and for panel members (whose move may shift the default anchors)."""
    enc = [f"e{i}" for i in range(len(values))]
    who = who % len(enc)
    table = pd.DataFrame(values, columns=list(crs.AXES)).assign(encoder=enc)
    w = np.asarray(weights) / np.sum(weights)
    ref = {"panel": enc[:min(n_panel, len(enc))],
           "weights": dict(zip(crs.WEIGHT_KEYS, w.tolist()))}
    better = table.copy()
    name = crs.AXES[axis]
    better.loc[who, name] += -step if name == "calibration" else step
    try:
        s0 = crs.crs_from_axes(table, ref)
        s1 = crs.crs_from_axes(better, ref)
    except stats.ContractError:  # degenerate panel axis (all equal): needs explicit anchors
        assume(False)
    c0 = s0[(s0["encoder"] == enc[who]) & (s0["estimand"] == "crs")]["estimate"].iloc[0]
    c1 = s1[(s1["encoder"] == enc[who]) & (s1["estimand"] == "crs")]["estimate"].iloc[0]
    assert c1 >= c0 - 1e-12
    for part in ("dominance", "worst_axis"):
        p0 = s0[(s0["encoder"] == enc[who]) & (s0["estimand"] == part)]["estimate"].iloc[0]
        p1 = s1[(s1["encoder"] == enc[who]) & (s1["estimand"] == part)]["estimate"].iloc[0]
        assert p1 >= p0 - 1e-12
