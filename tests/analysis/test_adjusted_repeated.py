"""Adjusted models when a patient's scans repeat within the models' groups (intervals
respect the data's design; patients nested in sites). The analysis
layer records how many patients repeat (``adjusted.repeated_scans``); when they nest in
the sites the GLMM is nested, ``(1 | site/patient_id)`` (``adjusted.glmm_group``), and is
the fit of the adjusted means; a one-level GLMM (the plan's ``group: [site]``) treats a
patient's scans as independent given site, and the means then come from the GEE clustered
on the sites that nest the patients (``adjusted.means_fit``); the report says so."""
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
    # patients repeat and nest in sites: the GLMM nests them (the default rule)
    gg = r.decisions["adjusted.glmm_group"]
    assert gg["group"] == ["site", "patient_id"] and gg["rule"] == "repeated_nested"
    fits = r["adjusted_fits"]
    assert fits["glmm"].group == ("site", "patient_id")
    # the demo's unet_small has an extreme patient SD (a degenerate Laplace optimum: its
    # patients' scans are nearly all alike), so the primary fit passes over the GLMM to the
    # GEE; the design (fewer than 20 sites) calls for the site-fixed model, named as better
    extreme = [m for m, f in fits["glmm"].fits.items()
               if any(w.startswith("extreme_sd") for w in f.warnings)]
    assert extreme == ["unet_small"]
    primary = r.decisions["adjusted.primary"]
    assert primary["fit"] == "gee" and primary["better"] == "fixed"
    assert "extreme_sd" in primary["reason"]
    assert r.decisions["adjusted.means_fit"] == primary["fit"] == "gee"


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
    # a nested GLMM carries the repeats: it stays the fit of the means (issue 32) ...
    nested = SimpleNamespace(group=("site", "patient_id"),
                             fits={"m1": SimpleNamespace(converged=True, warnings=[])})
    assert means_fit_method({"glmm": nested, "gee": 2}, {"nested": True}) == "glmm"
    # ... unless one of its fits has an extreme SD (a degenerate Laplace optimum)
    bad = SimpleNamespace(group=("site", "patient_id"), fits={"m1": SimpleNamespace(
        converged=True, warnings=["extreme_sd: the patient_id:site SD is 57"])})
    assert means_fit_method({"glmm": bad, "gee": 2}, {"nested": True}) == "gee"


def test_glmm_group_rule():
    """The default rule (plan group a column): nested when patients repeat and nest in the
    groups; one level when they do not repeat, or span groups; a plan list as given."""
    from analysis.adjusted import glmm_group

    class R(_Results):
        def __init__(self, rows, group="site"):
            super().__init__(rows, group=group)
            self.decided = {}

        def decide(self, k, v):
            self.decided[k] = v

    nested = _rows(["a", "a", "b", "c"], ["s1", "s1", "s2", "s2"])
    r = R(nested)
    assert glmm_group(r) == ("site", "patient_id")
    assert r.decided["adjusted.glmm_group"]["rule"] == "repeated_nested"
    r = R(_rows(["a", "a", "b"], ["s1", "s2", "s2"]))
    assert glmm_group(r) == "site"
    assert r.decided["adjusted.glmm_group"]["rule"] == "repeated_crossed"
    r = R(_rows(["a", "b", "c"], ["s1", "s2", "s2"]))
    assert glmm_group(r) == "site" and r.decided["adjusted.glmm_group"]["rule"] == "no_repeats"
    r = R(nested, group=["site"])
    assert glmm_group(r) == "site" and r.decided["adjusted.glmm_group"]["rule"] == "plan_one"
    r = R(_rows(["a", "b"], ["s1", "s2"]), group=["site", "patient_id"])
    assert glmm_group(r) == ("site", "patient_id")
    assert r.decided["adjusted.glmm_group"]["rule"] == "plan_nested"


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
    nested = _repeated_text(rep, {"glmm": 1, "gee": 2}, nested=True)
    assert "nests patients within site" in nested and "primary model" in nested
    assert "independent given site" not in nested


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
