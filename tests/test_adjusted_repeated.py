"""Adjusted models when a patient's scans repeat within the models' groups (issue 15:
intervals respect the data's design). The GLMM's random intercept per site treats a
patient's scans as independent given site; the analysis layer records how many patients
repeat (``adjusted.repeated_scans``) and, when the patients nest in the GEE's clusters,
takes the adjusted means from the GEE (``adjusted.means_fit``); the report says so."""
from __future__ import annotations

import warnings

import pandas as pd
import pytest

from analysis import load_plan, run
from analysis.adjusted import means_fit_method, repeated_scans
from analysis.inputs import load_tables, plan_limits


@pytest.fixture(scope="module")
def demo():
    from conftest import run_demo

    return run_demo(["adjusted_marginal"])


def test_demo_records_the_repeated_patients_and_uses_the_primary_fit(demo):
    plan, tables, r = demo
    rep = r.decisions["adjusted.repeated_scans"]
    ev = r["adjusted_rows"]
    pos = ev[(ev["model"] == ev["model"].iloc[0]) & (ev["label"] == 1)]
    n_all = len(pos)
    pos = pos[pos["tumor_size_mm"].notna()]       # the scans the fits use (complete cases)
    miss = r["adjusted_missing"]
    left_out = miss.loc[(miss["model"] == ev["model"].iloc[0]) & (miss["fit_method"] == "glmm"),
                        "n_excluded"]
    assert len(left_out) == 1 and n_all - len(pos) == int(left_out.iloc[0]) > 0
    per = pos.groupby("patient_id").size()
    assert rep == {"cluster": "patient_id", "group": "site", "patients": len(per),
                   "with_repeats": int((per > 1).sum()), "scans": len(pos), "nested": True}
    assert rep["with_repeats"] > 0
    # issue 30 item 10: the adjusted means use the primary fit, decided from the design
    # (the demo's sites are fewer than 20 and its plan fits GLMM and GEE: the GLMM)
    primary = r.decisions["adjusted.primary"]
    assert primary["fit"] == "glmm" and primary["better"] == "fixed"
    assert r.decisions["adjusted.means_fit"] == primary["fit"]


class _Results:
    def __init__(self, rows, cluster="patient_id", group="site"):
        self._rows, self._cluster = rows, cluster
        from analysis.plan import plan_for_tables

        adj = {"group": group, "population": "positives", "formula": "detected ~ site"}
        self.plan = plan_for_tables(detection={"adjusted": adj})

    def __getitem__(self, key):
        return {"cluster": self._cluster, "adjusted_rows": self._rows}[key]


def _rows(patients, sites, labels=None):
    n = len(patients)
    return pd.DataFrame({"model": "m", "patient_id": patients, "site": sites,
                         "label": labels if labels is not None else [1] * n})


def test_rules():
    nested = _rows(["a", "a", "b", "c"], ["s1", "s1", "s2", "s2"])
    assert repeated_scans(_Results(nested))["nested"] is True
    across = _rows(["a", "a", "b"], ["s1", "s2", "s2"])
    assert repeated_scans(_Results(across))["nested"] is False
    # repeats only among negatives: the positives' model sees none
    assert repeated_scans(_Results(_rows(["a", "a", "b"], ["s1"] * 3, [0, 0, 1]))) is None
    assert repeated_scans(_Results(nested, cluster=None)) is None
    assert repeated_scans(_Results(nested, group="patient_id")) is None
    fits = {"glmm": 1, "gee": 2}
    assert means_fit_method(fits, {"nested": True}) == "gee"
    assert means_fit_method(fits, {"nested": False}) == "glmm"
    assert means_fit_method(fits, None) == "glmm"
    assert means_fit_method({"glmm": 1}, {"nested": True}) == "glmm"
    # a fit that did not converge is passed over while another converged (re-audit)
    from types import SimpleNamespace

    def fit(ok):
        return SimpleNamespace(fits={"m1": SimpleNamespace(converged=True),
                                     "m2": SimpleNamespace(converged=ok)})

    assert means_fit_method({"glmm": fit(True), "gee": fit(False)}, {"nested": True}) == "glmm"
    assert means_fit_method({"glmm": fit(False), "gee": fit(True)}, None) == "gee"
    assert means_fit_method({"glmm": fit(False)}, None) == "glmm"


def test_report_text_names_the_inference_to_read(demo):
    from reports.sections.adjusted import _repeated_text

    rep = demo[2].decisions["adjusted.repeated_scans"]
    both = _repeated_text(rep, {"glmm": 1, "gee": 2})
    assert f"{rep['with_repeats']} of the {rep['patients']} patients" in both
    assert "independent given site" in both and "clustered on site" in both
    assert "read the GEE columns" not in both   # which fit is primary: "Reading this report"
    assert "some patients have scans in more than one site" in _repeated_text(
        {**rep, "nested": False}, {"glmm": 1, "gee": 2})
    assert _repeated_text(None, {"glmm": 1}) == ""


def test_methods_sentence_follows_the_decision(demo):
    from reports.sections.methods import _repeated_methods

    rep = demo[2].decisions["adjusted.repeated_scans"]
    s = _repeated_methods(rep)
    assert s.startswith(f" {rep['with_repeats']} of the {rep['patients']} patients")
    assert "nests each patient" in s and "inference is read from the GEE" not in s
    primary = demo[2].decisions["adjusted.primary"]
    with_primary = _repeated_methods(rep, primary)
    assert with_primary.startswith(s) and "The primary fit" in with_primary
    assert primary["reason"].split(" (")[0] in with_primary
    assert "some patients span several sites" in _repeated_methods({**rep, "nested": False})
    assert _repeated_methods(None) == ""


def test_separated_level_flags_its_term_only_in_the_report():
    """The audit's case: every delayed-phase positive of the demo detected (score 60). The
    adjusted table flags the delayed-phase term only, once ("separation", no
    "separation;separation"); the other terms carry the fit-level "fitted_0_1" at most and
    keep finite SEs in the GLMM; a fit that did not converge shows no p-values."""
    from clinrel.cli.report import demo_plan_path
    from reports.sections import adjusted as sec
    from reports.study import Study

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tables = load_tables(plan)
        cases = tables.cases.copy()
        cases.loc[(cases["label"] == 1) & (cases["phase"] == "delayed"), "score"] = 60.0
        tables = __import__("dataclasses").replace(tables, cases=cases)
        r = run(plan, tables, only=["adjusted_table"], errors="raise")
    tab = r["adjusted_table"]
    flagged = tab[tab["term_flag"].astype(str).str.len() > 0]
    assert len(flagged) and set(flagged["label"].astype(str).str.lower()) == {"phase: delayed vs venous"}
    assert (flagged["term_flag"] == "separation").all()
    assert not tab["fit_flag"].astype(str).str.contains("separation").any()
    glmm = r["adjusted_terms"]
    glmm = glmm[(glmm["fit_method"] == "glmm") & (glmm["effect"] == "fixed")
                & ~glmm["estimand"].str.contains("delayed")]
    assert glmm["std_error"].notna().all()
    row = tab.iloc[0].to_dict()
    assert sec._not_converged({**row, "fit_flag": "fitted_0_1;not_converged"})
    assert not sec._not_converged({**row, "fit_flag": "fitted_0_1"})
    study = Study(plan=plan, tables=tables, results=r)
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = sec.build(study)
    ors = next(b for b in built.blocks if getattr(b, "name", "") == "adjusted_odds_ratios")
    shown = flagged[~flagged["fit_flag"].astype(str).str.contains("not_converged")]
    assert sum("\u00a7" in str(v) for v in ors.display.to_numpy().ravel()) == len(shown)
    # a fit that did not converge shows no odds ratio or p-value at all (re-audit)
    for m in set(tab.loc[tab["fit_flag"].astype(str).str.contains("not_converged"),
                         "fit_method"]):
        col = ors.display[f"or_{m}"].astype(str)
        assert (col.isin(["\u2014", ""]) | col.str.startswith("1.00")).all(), col.tolist()
