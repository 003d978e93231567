"""Determinism, invariance and odd-but-valid inputs.

- the same inputs and seed give identical outputs;
- shuffling rows or renaming group levels changes no estimate (hypothesis);
- intervals stay in [0, 1] and contain the estimate;
- odd but valid inputs (one site, one model, a subgroup where every positive is missed,
  one class only, unicode names, a level with one case, 1,000,000 rows) give flagged
  estimates, never a crash.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stats
from stats import simulate

KEY = ["estimand", "model", "group_var", "group_level"]
NUM = ["estimate", "conf_low", "conf_high", "n", "n_pos", "n_neg"]


@pytest.fixture(scope="module")
def cases():
    sim = simulate.benchx_cohort(500, n_models=2, n_sites=5, seed=31)
    return stats.scan_level(stats.read_cases(sim.data), threshold=50)


def _metrics(df, **kw):
    out = stats.subgroup_metrics(df, by=["phase", "sex", ("age_group", "phase")], **kw)
    return out.sort_values(KEY).reset_index(drop=True)


def test_same_seed_same_output(cases):
    a = _metrics(cases, n_boot=200, seed=7)
    b = _metrics(cases, n_boot=200, seed=7)
    pd.testing.assert_frame_equal(a, b)
    c = _metrics(cases, n_boot=200, seed=8)
    f1 = c["estimand"] == "f1"
    assert not np.allclose(a.loc[f1, "conf_low"].fillna(0), c.loc[f1, "conf_low"].fillna(0))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(perm_seed=st.integers(0, 2**32 - 1))
def test_shuffling_rows_changes_no_estimate(cases, perm_seed):
    base = _metrics(cases)
    shuffled = cases.sample(frac=1.0, random_state=np.random.RandomState(perm_seed % 2**31))
    got = _metrics(shuffled)
    pd.testing.assert_frame_equal(base[KEY + NUM], got[KEY + NUM], check_exact=False, rtol=1e-12)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(names=st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                              min_size=1, max_size=8).filter(lambda s: s.strip() == s and ":" not in s),
                      min_size=4, max_size=4, unique=True))
def test_renaming_levels_changes_no_estimate(cases, names):
    base = _metrics(cases).set_index(KEY)
    mapping = dict(zip(["venous", "arterial", "delayed", "non_contrast"], names))
    renamed = cases.copy()
    renamed["phase"] = renamed["phase"].cat.rename_categories(mapping)
    got = _metrics(renamed)
    back = {v: k for k, v in mapping.items()}

    def restore(var, level):  # map back only the phase part of the level
        if var == "phase":
            return back[level]
        if var == "age_group:phase":
            age, _, ph = level.partition(":")
            return f"{age}:{back[ph]}"
        return level

    got["group_level"] = [restore(v, lv) for v, lv in zip(got["group_var"], got["group_level"])]
    got = got.set_index(KEY).loc[base.index]
    pd.testing.assert_frame_equal(base[NUM], got[NUM], check_exact=False, rtol=1e-12)


@pytest.mark.parametrize("ci", ["wilson", "clopper-pearson", "jeffreys"])
def test_intervals_in_unit_interval_and_contain_estimate(cases, ci):
    out = _metrics(cases, ci=ci, n_boot=100, seed=1)
    ok = out["estimate"].notna() & out["conf_low"].notna()
    sub = out[ok]
    assert ((sub["conf_low"] >= 0) & (sub["conf_high"] <= 1)).all()
    assert (sub["conf_low"] <= sub["estimate"] + 1e-12).all()
    assert (sub["estimate"] <= sub["conf_high"] + 1e-12).all()


# ----------------------------------------------------------------------------- odd inputs

def _odd(cases, kind):
    d = cases.copy()
    if kind == "one_site":
        d["site"] = "only_site"
    elif kind == "one_model":
        d = d[d["model"] == "model_A"]
    elif kind == "all_positives_missed_in_phase":
        hit = (d["phase"] == "non_contrast") & (d["label"] == 1)
        d.loc[hit, "pred"] = 0
        d.loc[hit, "score"] = 0.0
    elif kind == "one_class":
        d = d[d["label"] == 1]
    elif kind == "unicode_names":
        d["site"] = d["site"].astype(str).map(lambda s: f"Zürich–{s} <&\"'>")
        d["model"] = d["model"].map({"model_A": "模型 A", "model_B": "модель B"})
    elif kind == "level_with_one_case":
        d["sex"] = d["sex"].astype(str)
        first = d["case_id"].iloc[0]
        d.loc[d["case_id"] == first, "sex"] = "X"
    return d


@pytest.mark.parametrize("kind", ["one_site", "one_model", "all_positives_missed_in_phase", "one_class",
                                  "unicode_names", "level_with_one_case"])
def test_odd_but_valid_inputs_give_flags_not_crashes(cases, kind):
    d = stats.read_cases(_odd(cases, kind))
    out = _metrics(d)
    stats.schema.check_tidy(out)
    if kind == "all_positives_missed_in_phase":
        row = out[(out["estimand"] == "sensitivity") & (out["group_var"] == "phase")
                  & (out["group_level"] == "non_contrast")]
        assert (row["estimate"] == 0).all() and (row["conf_low"] == 0).all() and (row["conf_high"] > 0).all()
    if kind == "one_class":
        spec = out[out["estimand"] == "specificity"]
        assert spec["estimate"].isna().all() and (spec["flag"] != "").all()
        auc = out[out["estimand"] == "auc"]
        assert auc["estimate"].isna().all() and (auc["flag"] != "").all()
    if kind == "level_with_one_case":
        x = out[(out["group_var"] == "sex") & (out["group_level"] == "X")]
        assert (x["n"] == 1).all() and (x["flag"] != "").all()
    if kind != "one_model":
        stats.compare_models(d, by=["phase"])


@pytest.mark.parametrize("kind", ["one_site", "all_positives_missed_in_phase", "unicode_names"])
def test_odd_inputs_adjusted_models_warn_not_crash(cases, kind):
    d = _odd(cases, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stats.fit_adjusted(d, "detected ~ phase + np.log(tumor_size_mm)", method="glmm",
                                 model=sorted(d["model"].unique())[0])
    g = fit.glance()
    stats.schema.check_tidy(fit.tidy())
    if kind in ("one_site", "all_positives_missed_in_phase"):
        assert str(g["warnings"].iloc[0]) != "", g


@pytest.mark.slow
def test_one_million_rows():
    sim = simulate.benchx_cohort(500_000, n_models=2, seed=3)
    d = stats.scan_level(sim.data, threshold=50)
    assert len(d) == 1_000_000
    out = stats.subgroup_metrics(d, by=["phase", ("age_group", "phase")], n_boot=200, seed=1)
    stats.schema.check_tidy(out)
    assert out["n"].max() == 500_000
