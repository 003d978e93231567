"""stats.transport: raking to a target population's margins, against R's survey.

Fixture: tests/r/transport.R (survey 4.1-1: ``rake`` to convergence, ``svymean``,
``svyciprop(method = "logit")``, ``degf`` on subsets of a design with patient clusters)
-> tests/r/transport.csv, on tests/r/data/transport_cases.csv and the target margins
tests/r/data/transport_target.csv (written by tests/r/transport_data.py). Measured gaps
(Python minus R, 40 domains: 2 models x 4 metrics x overall and 4 phases): estimates
2.7e-11, SEs 1.3e-11, logit limits 3.1e-9 against svyciprop (36 rows: where R's
svyglm converged and the proportion is not 0 or 1; svyglm's own convergence is the gap)
and 2.7e-11 against the logit interval written out in R (38 rows), df 0, Kish n_eff
5.6e-9, max weight 2.3e-9; tested to 1e-6 as the issue asks. Two domains with a
proportion of 1 have no logit interval (NaN, flag not_estimable; survey gives (1, 1)).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import stats
from stats.raking import EXTREME_WEIGHT, MSG_SUPPORT, MSG_UNLISTED, rake_weights
from stats.schema import ContractError, check_tidy

R = Path(__file__).resolve().parents[1] / "r"
TOL = 1e-6


def _data():
    cases = pd.read_csv(R / "data" / "transport_cases.csv")
    tg = pd.read_csv(R / "data" / "transport_target.csv")
    target = {m: dict(zip(g["level"], g["share"])) for m, g in tg.groupby("margin", sort=False)}
    return cases, target


@pytest.fixture(scope="module")
def matched():
    cases, target = _data()
    out = stats.transport(cases, target, by="phase")
    ref = pd.read_csv(R / "transport.csv")
    m = out.merge(ref, on=["model", "estimand", "group_var", "group_level"],
                  suffixes=("", "_r"), validate="one_to_one")
    assert len(m) == len(ref) == 40
    return out, m


def test_matches_survey(matched):
    out, m = matched
    check_tidy(out)
    for col in ("estimate", "std_error", "df", "n", "n_eff", "max_weight"):
        gap = np.nanmax(np.abs(m[col] - m[f"{col}_r"]))
        assert gap < TOL, (col, gap)
    ok = m["svyglm_converged"].astype(bool) & m["conf_low"].notna()
    assert ok.sum() >= 35
    for col in ("conf_low", "conf_high"):
        assert np.max(np.abs(m.loc[ok, col] - m.loc[ok, f"{col}_r"])) < TOL
    hand = m["conf_low"].notna()
    assert np.max(np.abs(m.loc[hand, "conf_low"] - m.loc[hand, "hand_low"])) < TOL
    assert np.max(np.abs(m.loc[hand, "conf_high"] - m.loc[hand, "hand_high"])) < TOL


def test_raked_margins_and_flags(matched):
    cases, target = _data()
    one = cases[cases["model"] == "model_A"].reset_index(drop=True)
    w, cycles, converged = rake_weights(one, target)
    assert converged and np.isclose(w.mean(), 1.0)
    for margin, shares in target.items():
        tot = sum(shares.values())
        got = pd.Series(w).groupby(one[margin].astype(str).to_numpy()).sum() / len(one)
        for level, share in shares.items():
            assert abs(got[str(level)] - share / tot) < 1e-9
    out, _ = matched
    # the target is far from the study (prevalence 10% vs 40%): weights beyond 5x
    assert (out["max_weight"] > EXTREME_WEIGHT).all()
    assert out["flag"].str.contains("extreme_weights").all()
    assert (out["n_eff"] < out["n"]).all()


def test_prevalence_shorthand_and_counts():
    cases, target = _data()
    t2 = {k: v for k, v in target.items() if k != "label"}
    t2["prevalence"] = 0.1
    t2["sex"] = {"F": 500, "M": 500}          # counts: scaled to shares
    a = stats.transport(cases, target)
    b = stats.transport(cases, t2)
    assert np.allclose(a["estimate"], b["estimate"], atol=1e-12)
    assert np.allclose(a["std_error"], b["std_error"], atol=1e-12)


def test_unraked_equals_crude():
    """A target equal to the study's own mix leaves the weights at 1: the estimates are
    the crude proportions."""
    cases, _ = _data()
    one = cases[cases["model"] == "model_A"]
    own = {"phase": one["phase"].value_counts().to_dict()}
    out = stats.transport(one, own)
    sens = out[out["estimand"] == "sensitivity"]["estimate"].iloc[0]
    assert abs(sens - one.loc[one["label"] == 1, "pred"].mean()) < 1e-12
    assert (out["max_weight"] - 1.0).abs().max() < 1e-12
    assert not out["flag"].str.contains("extreme_weights").any()


def test_outside_support_refused():
    cases, target = _data()
    t = dict(target)
    t["phase"] = {**target["phase"], "late_arterial": 0.2}
    with pytest.raises(ContractError, match="outside the study's support") as e:
        stats.transport(cases, t)
    assert "late_arterial" in str(e.value) and "phase" in str(e.value)
    assert MSG_SUPPORT.split("{")[0] in str(e.value)


def test_unlisted_level_refused():
    cases, target = _data()
    t = dict(target)
    t["phase"] = {k: v for k, v in target["phase"].items() if k != "delayed"}
    with pytest.raises(ContractError, match="does not give a positive share"):
        stats.transport(cases, t)
    assert "share, or drop those scans" in MSG_UNLISTED


@pytest.mark.parametrize("bad", [None, {}, {"phase": []}, {"phase": {"venous": -1}},
                                 {"prevalence": 1.5}, {"phase": {"venous": float("nan")}},
                                 {"no_such_column": {"a": 1}}])
def test_bad_targets(bad):
    cases, _ = _data()
    with pytest.raises(ContractError):
        stats.transport(cases, bad)
