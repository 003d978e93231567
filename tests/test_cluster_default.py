"""The ``cluster`` default (issue 15, item 1): every public function with a ``cluster``
keyword defaults to ``"auto"`` (:func:`stats.clustered.resolve_cluster`: ``patient_id``
when that column exists and a patient has several scans among the rows passed, else
None); ``cluster=None`` keeps scans independent; ``clinrel subgroups`` and ``clinrel
compare`` take ``--cluster COLUMN|auto|none``; ``n_clusters`` is in every row of
``subgroup_vs_rest``, ``pooled_subgroup_metrics`` and ``precision_table``."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import stats
from clinrel.cli import app
from stats.clustered import resolve_cluster
from stats.simulate import benchx_cohort

runner = CliRunner()
BY = ["phase"]
KEY = ["estimand", "model", "group_var", "group_level"]


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    """Two models, patients with several scans (patient_id repeats)."""
    d = stats.scan_level(benchx_cohort(300, n_models=2, n_sites=4, seed=5).data, threshold=50)
    assert d.duplicated(["model", "patient_id"]).any()
    return d


@pytest.fixture(scope="module")
def single(cases) -> pd.DataFrame:
    """One scan per patient: patient_id never repeats within a model."""
    first = cases.drop_duplicates("patient_id")["case_id"]
    d = cases[cases["case_id"].isin(first)].reset_index(drop=True)
    assert not d.duplicated(["model", "patient_id"]).any()
    return d


#: every public function whose default changed: name -> call(cases, **cluster)
CALLS = {
    "subgroup_metrics": lambda d, **k: stats.subgroup_metrics(
        d, by=BY, metrics=("sensitivity", "specificity", "auc"), **k),
    "subgroup_vs_rest": lambda d, **k: stats.subgroup_vs_rest(d, by=BY, **k),
    "failure_map": lambda d, **k: stats.failure_map(d, "age_group", "phase", **k),
    "compare_models": lambda d, **k: stats.compare_models(d, by=BY, **k),
    "heterogeneity_test": lambda d, **k: stats.heterogeneity_test(d, BY, **k),
    "threshold_sweep": lambda d, **k: stats.threshold_sweep(
        d, [20, 50, 80], metrics=("sensitivity", "specificity"), **k),
    "pooled_subgroup_metrics": lambda d, **k: stats.pooled_subgroup_metrics(d, "phase", **k),
    "precision_table": lambda d, **k: stats.precision_table(d, by=BY, icc=0.3, **k),
}


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))


# --------------------------------------------------------------------------- the rule

def test_resolve_cluster_rule():
    d = pd.DataFrame({"model": ["a", "a", "b", "b"], "case_id": ["c1", "c2", "c1", "c2"],
                      "patient_id": ["p1", "p2", "p1", "p2"]})
    # the same case under two models is not a repeat
    assert resolve_cluster(d) is None and resolve_cluster(d, "auto") is None
    d2 = d.assign(patient_id=["p1", "p1", "p1", "p1"])
    assert resolve_cluster(d2) == "patient_id"
    assert resolve_cluster(d2, None) is None and resolve_cluster(d2, "none") is None
    assert resolve_cluster(d2, "site") == "site"              # named: returned as given
    assert resolve_cluster(d2.drop(columns="patient_id")) is None
    # missing ids are no repeat
    d3 = d.assign(patient_id=[np.nan, np.nan, np.nan, np.nan])
    assert resolve_cluster(d3) is None
    # without a model column: repeats over the rows
    assert resolve_cluster(d2.drop(columns="model")) == "patient_id"


@pytest.mark.parametrize("name", list(CALLS))
def test_default_is_patient_id_when_it_repeats(cases, name):
    call = CALLS[name]
    default = call(cases)
    _same(default, call(cases, cluster="patient_id"))
    _same(default, call(cases, cluster="auto"))
    plain = call(cases, cluster=None)
    _same(plain, call(cases, cluster="none"))
    if name != "precision_table":  # the ICC's cluster size is patient_id's either way
        assert not default.equals(plain), name


@pytest.mark.parametrize("name", list(CALLS))
def test_default_is_none_without_repeats(cases, single, name):
    call = CALLS[name]
    _same(call(single), call(single, cluster=None))
    no_pid = cases.drop(columns="patient_id")
    _same(call(no_pid), call(no_pid, cluster=None))


def test_default_records_the_method(cases, single):
    sm = CALLS["subgroup_metrics"](cases)
    props = sm["estimand"].isin(["sensitivity", "specificity"])
    assert (sm.loc[props, "method"] == "wilson-cluster").all()
    assert (sm.loc[props, "n_clusters"] <= sm.loc[props, "denominator"]).all()
    assert (sm.loc[props, "n_clusters"] < sm.loc[props, "denominator"]).any()
    assert set(stats.subgroup_vs_rest(cases, by=BY)["method"]) == {"newcombe-z-cluster"}
    assert set(stats.heterogeneity_test(cases, BY)["method"]) == {"rao-scott-f"}
    assert "newcombe-paired-cluster/mcnemar-clustered" in set(
        stats.compare_models(cases, by=BY)["method"])
    plain = CALLS["subgroup_metrics"](single)
    assert (plain.loc[plain["estimand"] != "auc", "method"] == "wilson").all()


def test_label_error_path_resolves_the_default(cases):
    """The error-aware metrics resolve cluster="auto" as subgroup_metrics does; the old
    way in, subgroup_metrics(label_error=...), warns (deprecated) and gives the same."""
    from stats.label_error import error_aware_metrics

    tab = pd.DataFrame({"field": "phase", "recorded_value": ["venous", "venous"],
                        "true_value": ["venous", "arterial"], "probability": [0.9, 0.1]})
    kw = dict(by=BY, metrics=("sensitivity",), label_error=tab, seed=1)
    out = error_aware_metrics(cases, **kw)
    _same(out, error_aware_metrics(cases, cluster="patient_id", **kw))
    assert out["method"].str.endswith("-cluster").all()
    with pytest.warns(DeprecationWarning, match="error_aware_metrics"):
        old = stats.subgroup_metrics(cases, **kw)
    _same(old, out)


# --------------------------------------------------------------------------- n_clusters

def _patients(cases, model, group_level, label=None):
    g = cases[cases["model"] == model]
    if group_level != "overall":
        g = g[g["phase"] == group_level]
    if label is not None:
        g = g[g["label"] == label]
    return g["patient_id"].nunique()


def test_n_clusters_in_subgroup_vs_rest_without_cluster(cases):
    out = stats.subgroup_vs_rest(cases, by=BY, cluster=None)
    assert out["method"].eq("newcombe-z").all()
    assert out[["n_clusters", "n_clusters_rest"]].notna().all().all()
    for r in out.itertuples():
        lab = 1 if r.estimand == "sensitivity_difference" else 0
        assert r.n_clusters == _patients(cases, r.model, r.group_level, lab)
        g = cases[(cases["model"] == r.model) & (cases["phase"] != r.group_level)
                  & (cases["label"] == lab)]
        assert r.n_clusters_rest == g["patient_id"].nunique()
    # the clustered call reports the same counts
    clus = stats.subgroup_vs_rest(cases, by=BY, cluster="patient_id")
    np.testing.assert_array_equal(clus["n_clusters"], out["n_clusters"])
    np.testing.assert_array_equal(clus["n_clusters_rest"], out["n_clusters_rest"])


@pytest.mark.parametrize("estimand, lab", [("sensitivity", 1), ("specificity", 0)])
def test_n_clusters_in_pooled(cases, estimand, lab):
    for kw in ({}, {"cluster": None}):
        out = stats.pooled_subgroup_metrics(cases, "phase", estimand, **kw)
        assert "n_clusters" in out and out["n_clusters"].notna().all()
        for r in out.itertuples():
            assert r.n_clusters == _patients(cases, r.model, r.group_level, lab)
            assert r.n_clusters <= r.denominator


def test_n_clusters_in_precision(cases):
    for kw in ({}, {"cluster": None}, {"icc": 0.2}):
        out = stats.precision_table(cases, by=BY, **kw)
        assert out["n_clusters"].notna().all()
        for r in out.itertuples():
            lab = 1 if r.estimand == "sensitivity" else 0
            assert r.n_clusters == _patients(cases, r.model, r.group_level, lab)
    # without a table of cases (planning) there are no clusters to count
    plan = stats.precision_table(expected_sensitivity=0.9, expected_specificity=0.9)
    assert "n_clusters" in plan and plan["n_clusters"].isna().all()
    # every scan its own patient: n_clusters is the denominator
    own = stats.precision_table(cases.drop(columns="patient_id"), by=BY)
    np.testing.assert_array_equal(own["n_clusters"],
                                  np.where(own["estimand"] == "sensitivity", own["n_pos"],
                                           own["n_neg"]))


# --------------------------------------------------------------------------- CLI

@pytest.fixture(scope="module")
def files(tmp_path_factory, cases):
    d = tmp_path_factory.mktemp("cluster_cli")
    cases.drop(columns="pred").to_csv(d / "cases.csv", index=False)
    return d


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("command", ["subgroups", "compare"])
def test_cli_cluster_option(files, command):
    base = [command, files / "cases.csv", "--threshold", "50", "--by", "phase", "--quiet"]
    outs = {}
    for value in ("auto", "patient_id", "none", "NONE"):
        out = files / f"{command}_{value}.csv"
        res = _cli(*base, "--cluster", value, "--out", out, "--force")
        assert res.exit_code == 0, res.output
        outs[value] = pd.read_csv(out)
    res = _cli(*base, "--out", files / f"{command}_default.csv", "--force")
    assert res.exit_code == 0, res.output
    outs["default"] = pd.read_csv(files / f"{command}_default.csv")
    _same(outs["default"], outs["auto"])
    _same(outs["auto"], outs["patient_id"])
    _same(outs["none"], outs["NONE"])
    assert outs["auto"]["method"].str.contains("cluster").any()
    assert not outs["none"]["method"].str.contains("cluster").any()
    assert outs["auto"]["n_clusters"].notna().all()


@pytest.mark.parametrize("command", ["subgroups", "compare"])
def test_cli_cluster_bad_column_exits_2(files, command):
    out = files / f"{command}_bad.csv"
    res = _cli(command, files / "cases.csv", "--threshold", "50", "--cluster", "family",
               "--out", out, "--quiet")
    assert res.exit_code == 2
    msg = " ".join(res.output.split())
    assert "cases.csv" in msg and "--cluster 'family'" in msg and "no column 'family'" in msg
    assert "--cluster patient_id" in msg and "--cluster none" in msg and "--cluster auto" in msg
    assert "Traceback" not in res.output and not out.exists()


def test_auto_counts_a_missing_patient_id_as_its_own_patient(cases):
    """Second review: under cluster="auto" a case without a patient_id is a patient of its
    own (as read_cases reads it), not an error; a column named explicitly keeps refusing
    missing ids; the case-insensitive "None"/"AUTO" settings mean none/auto."""
    from stats.schema import ContractError

    d = cases.copy()
    d["patient_id"] = d["patient_id"].astype(object)
    gone = d["case_id"].isin(d["case_id"].drop_duplicates().iloc[:7])
    d.loc[gone, "patient_id"] = None
    filled = d.assign(patient_id=d["patient_id"].where(d["patient_id"].notna(), d["case_id"]))
    kw = dict(by=BY, metrics=["sensitivity"])
    got = stats.subgroup_metrics(d, **kw)
    pd.testing.assert_frame_equal(got, stats.subgroup_metrics(filled, cluster="patient_id", **kw))
    assert set(got["method"]) == {"wilson-cluster"}
    with pytest.raises(ContractError):
        stats.subgroup_metrics(d, cluster="patient_id", **kw)
    pd.testing.assert_frame_equal(stats.subgroup_metrics(cases, cluster="None", **kw),
                                  stats.subgroup_metrics(cases, cluster=None, **kw))
    pd.testing.assert_frame_equal(stats.subgroup_metrics(cases, cluster="AUTO", **kw),
                                  stats.subgroup_metrics(cases, **kw))
