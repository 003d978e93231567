"""stats.compare: paired model comparisons vs pROC (fixture) and direct recomputation."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stats.compare import compare_models
from stats.detection import scan_level
from stats.intervals import mcnemar_exact, newcombe_diff_ci
from stats.schema import check_tidy

R = Path(__file__).resolve().parents[1] / "r"


@pytest.fixture(scope="module")
def sim() -> pd.DataFrame:
    return scan_level(pd.read_csv(R / "data" / "detection_sim.csv"), threshold=50)


def test_auc_difference_matches_proc(sim):
    ref = pd.read_csv(R / "intervals.csv")
    ref = ref[ref.test == "delong-sim"]
    out = compare_models(sim, cluster=None)
    check_tidy(out)
    auc = out[out.estimand == "auc_difference"].set_index("model")
    for id_ in ref.id.unique():
        a, b = id_.split("-")
        row = auc.loc[f"{a} - {b}"]
        want = ref[ref.id == id_].set_index("quantity").value.astype(float)
        assert row.statistic == pytest.approx(want["z"], abs=1e-10)
        assert row.p_value == pytest.approx(want["p"], abs=1e-10)
        assert row.conf_low == pytest.approx(want["low"], abs=1e-10)
        assert row.conf_high == pytest.approx(want["high"], abs=1e-10)


def test_paired_proportions_per_cell(sim):
    out = compare_models(sim, by=["phase"], cluster=None)
    assert len(out) == 3 * 3 * (1 + sim.phase.nunique())
    wide = sim.pivot(index="case_id", columns="model", values="pred")
    info = sim.drop_duplicates("case_id").set_index("case_id").loc[wide.index]
    for ph in info.phase.unique():
        sel = info.phase == ph
        for metric, lab, right in (("sensitivity", 1, 1), ("specificity", 0, 0)):
            k = sel & (info.label == lab)
            ra = wide.loc[k, "model_A"] == right
            rb = wide.loc[k, "model_C"] == right
            a, b, c, d = (ra & rb).sum(), (ra & ~rb).sum(), (~ra & rb).sum(), (~ra & ~rb).sum()
            est, lo, hi = newcombe_diff_ci(None, None, None, None, paired_counts=(a, b, c, d))
            row = out[(out.estimand == f"{metric}_difference") & (out.model == "model_A - model_C")
                      & (out.group_level == ph)].iloc[0]
            assert row.estimate == pytest.approx(float(est), abs=1e-14)
            assert row.conf_low == pytest.approx(float(lo), abs=1e-14)
            assert row.conf_high == pytest.approx(float(hi), abs=1e-14)
            assert row.p_value == pytest.approx(float(mcnemar_exact(b, c)), abs=1e-14)
            assert (row.discordant_a, row.discordant_b) == (b, c)
    for est, g in out.groupby("estimand"):
        ok = g.p_value.notna()
        assert (g.p_adjusted[ok] >= g.p_value[ok] - 1e-15).all()
        assert (g.p_adjusted_bh[ok] <= g.p_adjusted[ok] + 1e-15).all()


def test_needs_two_models(sim):
    with pytest.raises(ValueError, match="two models"):
        compare_models(sim[sim.model == "model_A"])
