"""Metadata provenance analyses (analysis/metadata.py) and their section
(reports/sections/provenance.py), recomputed independently on a small hand-made study:
coverage, verbatim spans, agreement by site and its chi-square (scipy), review outcomes
(counted by hand), Cohen's kappa and its Fleiss-Cohen-Everitt interval (an independent
delta-method recomputation and a coverage simulation), the label-error block of the plan
and the naive vs error-aware table. Evidence text must never reach a table or the text."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import chi2_contingency
from sklearn.metrics import cohen_kappa_score

from analysis import PlanError, load_plan, load_tables, run
from analysis.metadata import kappa_interval

SECRET = "SECRET-SPAN"
SITES = {f"c{i:02d}": ("s1" if i < 6 else "s2") for i in range(14)}
# sex: ex1 on every metadata case, ex2 on c00-c09, disagreeing on c01 (s1), c06 and c07 (s2)
EX1_SEX = dict(zip([f"c{i:02d}" for i in range(12)], "MFMFMFMFMFMF"))
EX2_SEX = {**{f"c{i:02d}": EX1_SEX[f"c{i:02d}"] for i in range(10)},
           "c01": "M", "c06": "F", "c07": "M"}


def _row(case, field, value, extractor, evidence=None, start=0, end=None):
    evidence = f"{SECRET}-{case}-{field}-{extractor}" if evidence is None else evidence
    return {"case_id": case, "field": field, "value": value, "extractor": extractor,
            "evidence": evidence, "start": start, "end": len(evidence) if end is None else end,
            "source": f"text:notes#{case}"}


def _evidence() -> pd.DataFrame:
    rows = [_row(c, "sex", v, "ex1") for c, v in EX1_SEX.items()]
    rows += [_row(c, "sex", v, "ex2") for c, v in EX2_SEX.items()]
    # phase: ex2 also ran on c10 (so its missing sex there is a one-sided disagreement),
    # never on c11 (not queued); c02 differs and is not reviewed
    rows += [_row("c10", "phase", "venous", "ex2"), _row("c02", "phase", "venous", "ex1"),
             _row("c02", "phase", "arterial", "ex2")]
    # one span that is not verbatim (length differs from end - start), one without a span
    rows[0] = _row("c00", "sex", "M", "ex1", end=3)
    rows[1] = _row("c01", "sex", "F", "ex1", evidence="")
    rows += [_row("c01", "sex", "F", "review"), _row("c06", "sex", "F", "review"),
             _row("c07", "sex", "O", "review"), _row("c10", "sex", "M", "review")]
    rows.append(_row("zz", "sex", "M", "ex1"))  # a case the cases table lacks
    return pd.DataFrame(rows)


def _study(folder, *, metadata=True, block=None, table=None, patients=None):
    ids = sorted(SITES)
    cases = pd.DataFrame({"case_id": ids, "patient_id": patients or ids, "model": "m",
                          "label": [1, 0] * 7, "score": np.linspace(0, 1, 14),
                          "site": [SITES[c] for c in ids], "sex": list("MMFFMMFFMMFFMM")})
    cases.to_csv(folder / "cases.csv", index=False)
    raw = {"version": 1, "inputs": {"cases": "cases.csv"},
           "detection": {"threshold": {"value": 0.5}, "subgroups": ["sex", "site"]}}
    if metadata:
        _evidence().to_csv(folder / "metadata.csv", index=False)
        raw["inputs"]["metadata"] = "metadata.csv"
    if table is not None:
        table.to_csv(folder / "label_error.csv", index=False)
    if block is not None:
        raw["metadata"] = block
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _results(folder, names, **kw):
    plan = load_plan(_study(folder, **kw))
    return run(plan, load_tables(plan), only=names, errors="raise")


def test_coverage_sources_and_verbatim_spans_by_hand(tmp_path):
    r = _results(tmp_path, ["metadata_coverage", "metadata_sources"])
    cov = r["metadata_coverage"].set_index(["field", "extractor"])
    # 14 cases in the cases table; 'zz' is not one of them
    assert cov.loc[("sex", "ex1"), ["cases_with_value", "cases"]].tolist() == [12, 14]
    assert cov.loc[("sex", "ex2"), "cases_with_value"] == 10
    assert cov.loc[("sex", "review"), "cases_with_value"] == 4
    assert cov.loc[("sex", "any source"), "coverage"] == pytest.approx(12 / 14)
    assert r.decisions["metadata.cases_not_in_cases_table"] == 1
    z = 1.959963984540054  # Wilson by its formula
    c = (12 + z * z / 2) / (14 + z * z)
    h = z * np.sqrt(12 * 2 / 14 + z * z / 4) / (14 + z * z)
    assert cov.loc[("sex", "any source"), ["conf_low", "conf_high"]].tolist() == \
        pytest.approx([c - h, c + h], abs=1e-12)
    src = r["metadata_sources"].set_index(["field", "extractor"])
    # ex1 sex: 13 values (with 'zz'), one without a span, one whose span is not verbatim
    assert src.loc[("sex", "ex1"), ["values", "with_evidence", "verbatim"]].tolist() == [13, 12, 11]


def test_agreement_by_site_and_equal_agreement_test_against_scipy(tmp_path):
    r = _results(tmp_path, ["metadata_agreement_by_site", "metadata_site_test"])
    by = r["metadata_agreement_by_site"]
    sex = by[by["field"] == "sex"].set_index("site")
    assert sex.loc["s1", ["n_both", "n_agree"]].tolist() == [6, 5]
    assert sex.loc["s2", ["n_both", "n_agree"]].tolist() == [4, 2]
    test = r["metadata_site_test"].set_index("field").loc["sex"]
    x2, p, df, _ = chi2_contingency(np.array([[5, 1], [2, 2]]), correction=False)
    assert test["statistic"] == pytest.approx(x2, rel=1e-12)
    assert test["p_value"] == pytest.approx(p, rel=1e-10) and test["df"] == df == 1
    assert test["method"] == "pearson-chisq" and "small_expected" in test["flag"]


def test_review_outcomes_by_hand(tmp_path):
    rv = _results(tmp_path, ["metadata_review"])["metadata_review"].set_index("field")
    # sex, A = ex1, B = ex2: c01 kept ex1, c06 kept ex2, c07 new value 'O', c10 one-sided
    # (ex2 ran on c10 for phase) kept ex1; c11: ex2 never ran there, not queued
    assert rv.loc["sex", ["differ", "one_sided", "queued", "reviewed", "kept_a", "kept_b",
                          "new_value", "not_reviewed"]].tolist() == [3, 1, 4, 4, 2, 1, 1, 0]
    # phase: c02 differs and c10 is one-sided (ex1 ran on c10, for sex); neither reviewed
    assert rv.loc["phase", ["differ", "one_sided", "reviewed", "not_reviewed"]].tolist() == \
        [1, 1, 0, 2]


def _kappa_of(p):
    r, c = p.sum(1), p.sum(0)
    pe = r @ c
    return (np.trace(p) - pe) / (1 - pe)


def _delta_method_se(table):
    """Independent recomputation: the multinomial delta method with a numerical gradient
    of kappa in the cell proportions (FCE's formula is this variance in closed form)."""
    n = table.sum()
    p = (table / n).ravel()
    k = table.shape[0]
    g = np.empty_like(p)
    for j in range(len(p)):
        e = np.zeros_like(p)
        e[j] = 1e-6
        g[j] = (_kappa_of((p + e).reshape(k, k)) - _kappa_of((p - e).reshape(k, k))) / 2e-6
    return np.sqrt(g @ (np.diag(p) - np.outer(p, p)) @ g / n)


def _raters(table):
    k = table.shape[0]
    counts = table.ravel().astype(int)
    return (np.repeat(np.repeat(np.arange(k), k), counts).astype(str),
            np.repeat(np.tile(np.arange(k), k), counts).astype(str))


def test_kappa_and_its_standard_error_against_independent_recomputations():
    table = np.array([[40, 5, 3], [6, 30, 4], [2, 5, 25.]])
    a, b = _raters(table)
    ki = kappa_interval(a, b, conf_level=0.9)
    assert ki["kappa"] == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert ki["std_error"] == pytest.approx(_delta_method_se(table), rel=1e-7)
    z = 1.6448536269514722
    assert [ki["conf_low"], ki["conf_high"]] == pytest.approx(
        [ki["kappa"] - z * ki["std_error"], ki["kappa"] + z * ki["std_error"]], abs=1e-12)


def test_kappa_interval_covers_the_population_kappa():
    p = np.array([[0.3, 0.05, 0.02], [0.04, 0.25, 0.04], [0.02, 0.05, 0.23]])
    truth = _kappa_of(p)
    rng = np.random.default_rng(20261201)
    hits = 0
    n_sim = 1000
    for cells in rng.multinomial(300, p.ravel(), size=n_sim):
        ki = kappa_interval(*_raters(cells.reshape(3, 3)))
        hits += ki["conf_low"] <= truth <= ki["conf_high"]
    assert 0.93 <= hits / n_sim <= 0.97  # binomial SE 0.007 around 0.95


def test_kappa_degenerate_inputs():
    assert np.isnan(kappa_interval(["M", "M", "M"], ["M", "M", "M"])["kappa"])  # one category
    assert np.isnan(kappa_interval(["M"], ["F"])["kappa"])  # one case
    # perfect agreement: SE 0, so no zero-width [1, 1] "interval": not estimable (review
    # finding: 1.000 [1.000, 1.000] on 322 cases), with or without clusters
    perfect = kappa_interval(list("MFMF"), list("MFMF"))
    assert perfect["kappa"] == 1 and perfect["std_error"] == 0
    assert np.isnan(perfect["conf_low"]) and np.isnan(perfect["conf_high"])
    clustered = kappa_interval(list("MFMFMF"), list("MFMFMF"), cluster=list("aabbcc"))
    assert clustered["kappa"] == 1 and clustered["std_error"] == 0
    assert np.isnan(clustered["conf_low"]) and np.isnan(clustered["conf_high"])


def test_agreement_table_carries_the_kappa_interval_of_each_pair(tmp_path):
    ag = _results(tmp_path, ["metadata_agreement"])["metadata_agreement"].set_index("field")
    both = [f"c{i:02d}" for i in range(10)]
    ki = kappa_interval([EX1_SEX[c] for c in both], [EX2_SEX[c] for c in both])
    row = ag.loc["sex"]
    assert (row["n_both"], row["n_agree"]) == (10, 7)
    assert [row["kappa"], row["kappa_std_error"], row["kappa_conf_low"],
            row["kappa_conf_high"]] == pytest.approx(
        [ki["kappa"], ki["std_error"], ki["conf_low"], ki["conf_high"]], abs=1e-12)


def _le_table(p_wrong):
    return pd.DataFrame({"field": "sex", "recorded_value": ["F", "F", "M", "M"],
                         "true_value": ["F", "M", "M", "F"],
                         "probability": [1 - p_wrong, p_wrong, 1 - p_wrong, p_wrong]})


def test_given_label_error_table_identity_gives_the_naive_intervals(tmp_path):
    r = _results(tmp_path, ["label_error_metrics"], table=_le_table(0.0),
                 block={"label_error": "label_error.csv", "n_imputations": 5, "seed": 3})
    m = r["label_error_metrics"]
    assert set(m["group_var"]) == {"sex"}  # the site axis has no error-prone field
    naive = m[m["kind"] == "naive"].reset_index(drop=True)
    aware = m[m["kind"] == "error_aware"].reset_index(drop=True)
    for col in ("estimate", "conf_low", "conf_high"):
        np.testing.assert_allclose(aware[col], naive[col], atol=1e-12)
    assert r.decisions["seeds.label_error_imputation"] == 3


def test_given_label_error_table_widens_the_interval(tmp_path):
    r = _results(tmp_path, ["label_error_metrics"], table=_le_table(0.2),
                 block={"label_error": "label_error.csv", "n_imputations": 20, "seed": 3})
    m = r["label_error_metrics"]
    m = m[m["estimand"] == "sensitivity"]
    width = (m["conf_high"] - m["conf_low"]).to_numpy()
    naive, aware = width[m["kind"].to_numpy() == "naive"], width[m["kind"].to_numpy() == "error_aware"]
    assert (aware > naive).all()


def test_estimated_table_bins_age_evidence_onto_the_plan_axis(tmp_path):
    from analysis.metadata import _binned_evidence

    plan = load_plan(_study(tmp_path))
    raw = yaml.safe_load(plan.path.read_text())
    raw["detection"]["bins"] = {"age": {"name": "age_group", "breaks": [0, 40, 60, float("inf")],
                                        "labels": ["<40", "40-59", "60+"]}}
    plan.path.write_text(yaml.safe_dump(raw))
    plan = load_plan(plan.path)

    class R:  # the slice of Results that _binned_evidence reads
        pass

    R.plan = plan
    ev = pd.DataFrame({"case_id": ["a", "b", "c", "d", "e"], "field": ["age"] * 4 + ["sex"],
                       "value": ["39", "40", "60", "n/a", "F"], "extractor": "x"})
    out, renamed = _binned_evidence(R, ev)
    assert renamed == {"age": "age_group"}
    assert out["field"].tolist() == ["age_group"] * 3 + ["sex"]
    assert out["value"].tolist() == ["<40", "40-59", "60+", "F"]  # left-closed; 'n/a' dropped


@pytest.mark.parametrize("block, needs", [
    ({"label_error": "estimate"}, "inputs.metadata"),
    ({"label_error": "nowhere.csv"}, "does not exist"),
    ({"n_imputations": 1}, "metadata.n_imputations"),
    ({"label_eror": "estimate"}, "unknown key"),
    ({"prefer": "ex1"}, "metadata.prefer"),
    ({"per_patient": "race"}, "metadata.per_patient.*auto or a list of field names"),
])
def test_metadata_block_is_validated(tmp_path, block, needs):
    with pytest.raises(PlanError, match=needs):
        load_plan(_study(tmp_path, metadata=False, block=block))


def test_metadata_per_patient_reads_auto_or_a_list(tmp_path):
    assert load_plan(_study(tmp_path, metadata=False, block={"seed": 1})
                     ).metadata_options.per_patient == "auto"             # default: auto
    auto = load_plan(_study(tmp_path, metadata=False, block={"per_patient": "auto"}))
    assert auto.metadata_options.per_patient == "auto"
    given = load_plan(_study(tmp_path, metadata=False, block={"per_patient": ["race", "sex"]}))
    assert given.metadata_options.per_patient == ("race", "sex")


def test_section_never_shows_evidence_text(tmp_path):
    from reports.sections import provenance
    from reports.study import load_study

    plan = load_plan(_study(tmp_path, table=_le_table(0.1),
                            block={"label_error": "label_error.csv", "n_imputations": 5,
                                   "seed": 1}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sec = provenance.build(load_study(plan))
    names = [getattr(b, "name", None) for b in sec.blocks]
    assert {"metadata_coverage", "metadata_sources", "metadata_agreement",
            "metadata_agreement_by_site", "metadata_site_test", "metadata_review",
            "label_error_table", "label_error_sensitivity"} <= set(names)
    for b in sec.blocks:
        frames = [b] if isinstance(b, str) else [getattr(b, "data", None),
                                                  getattr(b, "display", None)]
        for f in frames:
            if isinstance(f, str):
                assert SECRET not in f and "text:notes" not in f
            elif f is not None:
                assert not {"evidence", "source"} & set(f.columns)
                cells = f.astype(str).to_numpy().ravel()
                assert not any(SECRET in c or "text:notes" in c for c in cells)


def _kg_wilson(success, cluster):
    """Wilson at Korn & Graubard's effective size, by its formulas (ratio estimator over
    the clusters, C / (C - 1) factor, design effect against p (1 - p) / n, the
    degrees-of-freedom factor, at most n)."""
    from scipy import stats as sps

    d = pd.DataFrame({"y": success, "c": cluster}).groupby("c")["y"].agg(["sum", "size"])
    n, x, C = d["size"].sum(), d["sum"].sum(), len(d)
    p = x / n
    var = C / (C - 1) * ((d["sum"] - p * d["size"]) ** 2).sum() / n ** 2
    f = (sps.t.ppf(0.025, n - 1) / sps.t.ppf(0.025, C - 1)) ** 2
    m = min(n, n / (var / (p * (1 - p) / n)) * f)
    z = 1.959963984540054
    c = (p * m + z * z / 2) / (m + z * z)
    h = z * np.sqrt(p * (1 - p) * m + z * z / 4) / (m + z * z)
    return c - h, c + h


def test_repeated_scans_make_the_metadata_intervals_cluster_aware(tmp_path):
    """Cases c00/c01, c02/c03, ... are scans of one patient: coverage and agreement get
    Wilson at the effective size over the patients (by the formulas here), the by-site
    agreement too, and the site test is Rao-Scott's (as heterogeneity_test computes it)."""
    from stats.heterogeneity import heterogeneity_test

    ids = sorted(SITES)
    pats = [f"p{i // 2}" for i in range(len(ids))]
    r = _results(tmp_path, ["metadata_coverage", "metadata_agreement",
                            "metadata_agreement_by_site", "metadata_site_test"],
                 patients=pats)
    assert r.decisions["detection.cluster"] == "patient_id"
    cov = r["metadata_coverage"].set_index(["field", "extractor"])
    has = [int(c in EX2_SEX) for c in ids]            # ex2 read sex on c00-c09
    row = cov.loc[("sex", "ex2")]
    assert row["method"] == "wilson-cluster" and row["n_clusters"] == 7
    assert (row["conf_low"], row["conf_high"]) == pytest.approx(_kg_wilson(has, pats), abs=1e-12)
    ag = r["metadata_agreement"].set_index(["field", "extractor_a", "extractor_b"])
    both = [c for c in ids if c in EX1_SEX and c in EX2_SEX]
    agree = [int(EX1_SEX[c] == EX2_SEX[c]) for c in both]
    row = ag.loc[("sex", "ex1", "ex2")]
    assert row["method"] == "wilson-cluster" and row["n_clusters"] == 5
    assert (row["conf_low"], row["conf_high"]) == pytest.approx(
        _kg_wilson(agree, [pats[ids.index(c)] for c in both]), abs=1e-12)
    ki = kappa_interval([EX1_SEX[c] for c in both], [EX2_SEX[c] for c in both],
                        cluster=[pats[ids.index(c)] for c in both])
    assert row["kappa_method"] == ki["method"] == "linearization-cluster-t"
    assert row["kappa_std_error"] == pytest.approx(ki["std_error"], rel=1e-12)
    by = r["metadata_agreement_by_site"]
    assert (by["method"] == "wilson-cluster").all() and "n_clusters" in by
    test = r["metadata_site_test"].set_index("field").loc["sex"]
    pseudo = pd.DataFrame({"case_id": both, "patient_id": [pats[ids.index(c)] for c in both],
                           "model": "agreement", "label": 1, "score": agree, "pred": agree,
                           "site": [SITES[c] for c in both]})
    want = heterogeneity_test(pseudo, by=["site"], cluster="patient_id").iloc[0]
    assert test["method"] == "rao-scott-f" == want["method"]
    for col in ("statistic", "df", "df_denominator", "p_value"):
        assert test[col] == pytest.approx(want[col], rel=1e-12), col


def test_clustered_agreement_counts_the_cases_its_estimate_counts(tmp_path):
    """Cases the cases table lacks still count in the agreement (as extractor_agreement
    counts them), each its own cluster: the cluster-aware interval is the one of the
    reported share (review finding: it was computed on the cases table's cases only)."""
    ids = sorted(SITES)
    pats = [f"p{i // 2}" for i in range(len(ids))]
    path = _study(tmp_path, patients=pats)
    extra = pd.DataFrame([_row(f"zz{i}", "sex", "M", "ex1") for i in range(20)]
                         + [_row(f"zz{i}", "sex", "F", "ex2") for i in range(20)])
    md = pd.concat([pd.read_csv(tmp_path / "metadata.csv"), extra], ignore_index=True)
    md.to_csv(tmp_path / "metadata.csv", index=False)
    plan = load_plan(path)
    r = run(plan, load_tables(plan), only=["metadata_agreement"], errors="raise")
    row = r["metadata_agreement"].set_index(["field", "extractor_a", "extractor_b"]).loc[
        ("sex", "ex1", "ex2")]
    assert (row["n_both"], row["n_agree"]) == (30, 7)
    assert row["method"] == "wilson-cluster" and row["n_clusters"] == 25   # 5 + 20 alone
    assert row["conf_low"] < row["agreement"] < row["conf_high"] < 0.5   # was [0.25, 0.94]
