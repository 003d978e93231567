"""Missing subgroup values are stated, not dropped.

Every axis has a "Missing" level when values are missing, and "not applicable" where the
scan cannot have the attribute (tumour size and location, and bins made from them, of a
reference negative), so the levels add up to the overall n in ``subgroup_metrics``,
``confusion_counts``, ``failure_map`` and intersections; ``describe`` uses the same rule.
Counts are checked against an independent pandas recomputation of the levels.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats.detection import MISSING, NOT_APPLICABLE, not_applicable_columns
from stats.schema import ContractError
from stats.simulate import benchx_cohort

BY = ["age_group", "phase", "tumor_location", "size_group", ("age_group", "phase"),
      ("phase", "tumor_location")]


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    """The simulator's cohort with the demo's gaps: tumour location and size recorded for
    positives only (a few positives lack them), age missing for some patients, phase for
    some scans; size binned by add_bins."""
    d = benchx_cohort(500, n_models=2, seed=5).data
    rng = np.random.default_rng(5)
    cases = d.drop_duplicates("case_id")["case_id"]
    neg = d.label == 0
    d["tumor_location"] = d["tumor_location"].astype(object).where(~neg, None)
    d["tumor_size_mm"] = d["tumor_size_mm"].where(~neg, np.nan)
    pos_ids = d.loc[~neg, "case_id"].unique()
    gone = rng.choice(pos_ids, 9, replace=False)
    d.loc[d.case_id.isin(gone[:5]), "tumor_location"] = None
    d.loc[d.case_id.isin(gone[4:]), "tumor_size_mm"] = np.nan
    d.loc[d.case_id.isin(rng.choice(cases, 23, replace=False)), "age"] = np.nan
    d["phase"] = d["phase"].astype(object)
    d.loc[d.case_id.isin(rng.choice(cases, 11, replace=False)), "phase"] = None
    d = d.drop(columns=["age_group"])
    d = stats.add_bins(d, {"age": {"name": "age_group", "breaks": [0, 40, 60, 75, 130],
                                   "labels": ["<40", "40-59", "60-74", "75+"]},
                           "tumor_size_mm": {"name": "size_group", "breaks": [0, 10, 20, 40, 1e9],
                                             "labels": ["<10", "10-19", "20-39", ">=40"]}})
    return stats.scan_level(d, threshold=50)


def _expected_levels(cases: pd.DataFrame, col: str) -> pd.Series:
    """The level of every case, recomputed from the definition with pandas."""
    one = cases.drop_duplicates("case_id")
    v = one[col].astype(object)
    tumour = col in ("tumor_location", "tumor_size_mm", "size_group")
    fill = np.where(tumour & (one["label"] == 0), NOT_APPLICABLE, MISSING)
    return pd.Series(np.where(v.isna(), fill, v.astype(str)), index=one["case_id"])


def test_counts_match_an_independent_recomputation(cases):
    counts = stats.confusion_counts(cases, by=BY)
    m = counts[counts.model == "model_A"].set_index(["group_var", "group_level"])
    one = cases[cases.model == "model_A"]
    for axis in BY:
        cols = [axis] if isinstance(axis, str) else list(axis)
        lv = pd.concat([_expected_levels(cases, c) for c in cols], axis=1).agg(":".join, axis=1)
        lab = one.set_index("case_id")["label"].loc[lv.index]
        want = pd.DataFrame({"n": lv.value_counts(), "n_pos": lv[lab == 1].value_counts()}
                            ).fillna(0)
        got = m.loc[":".join(cols)]
        got = got[got.n > 0]
        assert sorted(got.index) == sorted(want.index), axis
        np.testing.assert_array_equal(got.loc[want.index, "n"], want["n"], err_msg=str(axis))
        np.testing.assert_array_equal(got.loc[want.index, "n_pos"], want["n_pos"], err_msg=str(axis))


def test_levels_sum_to_the_overall(cases):
    overall_n = cases.case_id.nunique()
    metrics = stats.subgroup_metrics(cases, by=BY, metrics=["sensitivity", "specificity"])
    counts = stats.confusion_counts(cases, by=BY)
    for table, cols in ((metrics, ["n", "n_pos", "n_neg"]),
                        (counts, ["n", "n_pos", "n_neg", "tp", "fp", "tn", "fn"])):
        key = ["model", "estimand"] if "estimand" in table else ["model"]
        overall = table[table.group_var == "overall"].set_index(key)[cols]
        sums = table[table.group_var != "overall"].groupby([*key, "group_var"])[cols].sum()
        assert (overall["n"] == overall_n).all()
        for idx, row in sums.iterrows():
            np.testing.assert_array_equal(row.to_numpy(), overall.loc[idx[:-1] if len(idx) > 2
                                                                      else idx[0]].to_numpy())
        assert set(sums.index.get_level_values("group_var")) == {":".join(a) if isinstance(a, tuple)
                                                                 else a for a in BY}
    fmap = stats.failure_map(cases, "age_group", "phase")
    assert fmap.groupby("model")["n"].sum().eq(overall_n).all()
    assert {MISSING} <= set(fmap.row_level) and {MISSING} <= set(fmap.col_level)


def test_not_applicable_versus_missing(cases):
    counts = stats.confusion_counts(cases, by=["tumor_location", "size_group", "age_group"])
    a = counts[counts.model == "model_A"].set_index(["group_var", "group_level"])
    n_neg = int((cases[cases.model == "model_A"].label == 0).sum())
    for axis, missing_pos in (("tumor_location", 5), ("size_group", 5)):
        na = a.loc[(axis, NOT_APPLICABLE)]
        assert na.n == na.n_neg == n_neg and na.n_pos == 0
        miss = a.loc[(axis, MISSING)]
        assert miss.n == miss.n_pos == missing_pos
    assert (("age_group", NOT_APPLICABLE) not in a.index) and a.loc[("age_group", MISSING)].n > 0
    # order: the column's own levels, then not applicable, then Missing
    levels = list(a.loc["size_group"].index)
    assert levels == ["<10", "10-19", "20-39", ">=40", NOT_APPLICABLE, MISSING]
    # sensitivity of a "not applicable" cell is not estimable (it holds no positives)
    sens = stats.subgroup_metrics(cases, by=["tumor_location"], metrics=["sensitivity"])
    row = sens[(sens.group_level == NOT_APPLICABLE)].iloc[0]
    assert row.flag == "not_estimable" and np.isnan(row.estimate)


def test_the_rule_is_a_keyword(cases):
    # None: every missing value is "Missing"
    plain = stats.confusion_counts(cases, by=["tumor_location"], not_applicable=None)
    assert NOT_APPLICABLE not in set(plain.group_level)
    # an explicit list (a bin made elsewhere, not by add_bins, is not found by "auto")
    d = cases.copy()
    d.attrs = {}
    auto = stats.confusion_counts(d, by=["size_group"])
    assert NOT_APPLICABLE not in set(auto.group_level)
    named = stats.confusion_counts(d, by=["size_group"], not_applicable=["size_group"])
    mapped = stats.confusion_counts(d, by=["size_group"],
                                    not_applicable={"size_group": "negatives"})
    assert NOT_APPLICABLE in set(named.group_level)
    pd.testing.assert_frame_equal(named, mapped)
    assert not_applicable_columns(cases)["size_group"] == "negatives"
    for bad in ("sometimes", {"size_group": "positives"}, [3]):
        with pytest.raises(ContractError, match="not_applicable"):
            stats.confusion_counts(cases, by=["size_group"], not_applicable=bad)


def test_an_existing_missing_level_is_kept():
    d = pd.DataFrame({"case_id": list("abcd"), "model": "m", "label": [1, 1, 0, 0],
                      "score": 1.0, "pred": 1, "site": "s",
                      "race": ["Missing", None, "White", None]})
    c = stats.confusion_counts(d, by=["race"])
    assert c.set_index("group_level").loc[MISSING, "n"] == 3
    assert list(c.group_level) == ["overall", "Missing", "White"]


def test_subgroup_vs_rest_rest_is_everyone_else(cases):
    vr = stats.subgroup_vs_rest(cases, by=["age_group", "phase"])
    assert {MISSING} <= set(vr.group_level)
    one = cases[cases.model == "model_A"]
    for estimand, col, total in (("sensitivity_difference", "n_pos", (one.label == 1).sum()),
                                 ("specificity_difference", "n_neg", (one.label == 0).sum())):
        rows = vr[vr.estimand == estimand]
        np.testing.assert_array_equal(rows[col] + rows["n_rest"], total)


def test_describe_uses_the_same_rule(cases):
    one = cases[cases.model == "model_A"]
    out = stats.describe(one, by=None)
    loc = out[(out.variable == "tumor_location") & (out.estimand == "count")].set_index("level")
    assert loc.loc[NOT_APPLICABLE, "estimate"] == (one.label == 0).sum()
    assert loc.loc[MISSING, "estimate"] == 5
    assert loc["estimate"].sum() == len(one)
    none = stats.describe(one, by=None, not_applicable=None)
    loc0 = none[(none.variable == "tumor_location") & (none.estimand == "count")].set_index("level")
    assert loc0.loc[MISSING, "estimate"] == (one.label == 0).sum() + 5


def test_pooled_and_heterogeneity_see_the_same_levels(cases):
    """The shared case matrix carries the levels; the modules built on it run with gaps."""
    het = stats.heterogeneity_test(cases, ["phase"], estimand="sensitivity")
    # the test leaves the Missing scans out (R's chisq.test drops NA) and names them
    assert (het.n_levels == cases.phase.nunique()).all()
    assert het.levels_excluded.str.split(";").apply(lambda x: MISSING in x).all()
    n_known = cases.loc[cases.phase.notna() & (cases.label == 1)].drop_duplicates(
        ["case_id"]).shape[0]
    assert (het.n == n_known).all()
    pooled = stats.pooled_subgroup_metrics(cases, ["phase"])
    assert MISSING in set(pooled.group_level)


@pytest.mark.parametrize("cluster", [None, "patient_id"])
def test_heterogeneity_with_missing_equals_the_test_on_the_known_values(cases, cluster):
    """Recomputation: leaving the Missing scans out is the same test as dropping those
    rows first (R's chisq.test / svychisq on the complete cases), Pearson and Rao-Scott."""
    known = cases[cases["phase"].notna()]
    cols = ["model", "estimand", "statistic", "df", "p_value", "n", "n_levels"]
    for estimand in ("sensitivity", "specificity"):
        a = stats.heterogeneity_test(cases, ["phase"], estimand=estimand, cluster=cluster)
        b = stats.heterogeneity_test(known, ["phase"], estimand=estimand, cluster=cluster)
        assert a["levels_excluded"].str.contains(MISSING).all()
        pd.testing.assert_frame_equal(a[cols].reset_index(drop=True),
                                      b[cols].reset_index(drop=True), rtol=1e-12)
