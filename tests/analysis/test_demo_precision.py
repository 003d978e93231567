"""The demo with its unrecorded tumour sizes: the precision
table plans real cells only, the heterogeneity tests leave missing values out as R's
chisq.test does, the block-test table names only the fits it tests, and a fit that did
not converge shows no odds ratio."""
from __future__ import annotations

import warnings

import pandas as pd
import pytest

from analysis.inputs import plan_limits


@pytest.fixture(scope="module")
def demo():
    from conftest import run_demo

    return run_demo(["precision", "heterogeneity"])


def test_precision_table_plans_real_cells_only(demo):
    p = demo[2]["precision"]
    levels = p["group_level"].astype(str)
    assert not levels.str.contains("Missing|not applicable").any()
    size = p[p["group_var"] == "size_group"]
    assert len(size) and set(size["estimand"]) == {"sensitivity"}   # negatives have no size
    assert set(p.loc[p["group_var"] == "phase", "estimand"]) == {"sensitivity", "specificity"}
    assert "Missing" in demo[2].decisions["precision.cells"]


def test_heterogeneity_leaves_missing_values_out(demo):
    plan, tables, r = demo
    h = r["heterogeneity"]
    size = h[(h["group_var"] == "size_group") & (h["estimand"] == "sensitivity")]
    assert (size["n_levels"] == 4).all()
    assert size["levels_excluded"].str.split(";").apply(lambda x: "Missing" in x).all()
    ev = r["evaluation"]
    one = ev[(ev["model"] == ev["model"].iloc[0]) & (ev["label"] == 1)]
    assert (size["n"] == one["tumor_size_mm"].notna().sum()).all()
    from reports.sections.subgroups import heterogeneity_note
    from reports.study import Study

    note = heterogeneity_note(Study(plan=plan, tables=tables, results=r), ("size_group",))
    assert "left out of the tests" in note
    assert "left out of the tests" not in heterogeneity_note(
        Study(plan=plan, tables=tables, results=r), ("phase",))


def test_block_tests_name_their_fits_and_unconverged_ors_are_dashes(demo):
    from reports.sections import adjusted as sec
    from reports.study import Study

    plan, tables, r = demo
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = sec.build(Study(plan=plan, tables=tables, results=r))
    blocks = next(b for b in built.tables if b.name == "adjusted_block_tests")
    used = next(n for n in blocks.notes if n.startswith("Scans used"))
    # one "Scans used" note per report (the odds-ratio table's), which names every fit
    assert used == "Scans used: as in the odds-ratio table (its notes)."
    ors = next(b for b in built.tables if b.name == "adjusted_odds_ratios")
    said = next(n for n in ors.notes if n.startswith("Scans used"))
    assert "GLMM" in said and "GEE" in said
    row = pd.Series({"fit_flag": "not_converged", "fit_method": "gee", "method": "gee-md-t",
                     "n_clusters": 8.0})
    assert sec._not_converged(row)


def test_planned_cells_drop_an_estimand_an_intersection_cannot_hold():
    """Second review: specificity rows of a size x sex intersection (every negative is "not
    applicable" for size) stayed in the precision table; the rule now works per axis."""
    from analysis.detection import planned_cells

    rows = []
    for est in ("sensitivity", "specificity"):
        for lv, pos, neg in (("overall", 10, 10), ("<10 mm:F", 4, 0), ("<10 mm:M", 6, 0),
                             ("not applicable:F", 0, 5), ("Missing:M", 1, 0)):
            rows.append({"model": "m", "group_var": "overall" if lv == "overall" else
                         "size_group:sex", "group_level": lv, "estimand": est,
                         "method": "wilson", "n_pos": pos, "n_neg": neg})
    out = planned_cells(pd.DataFrame(rows))
    got = set(zip(out["estimand"], out["group_level"]))
    assert got == {("sensitivity", "overall"), ("specificity", "overall"),
                   ("sensitivity", "<10 mm:F"), ("sensitivity", "<10 mm:M")}


def test_a_bootstrap_plan_gets_its_crude_values_on_the_fits_scans(tmp_path):
    """Second review: with detection.ci bootstrap the crude values recomputed on the fits'
    scans (the demo's unrecorded sizes) crashed for want of n_boot; they now take the
    subgroup table's options, bootstrap included."""
    import yaml
    from typer.testing import CliRunner

    from clinrel.cli import app
    from analysis import load_plan, run
    from analysis.inputs import load_tables

    out = tmp_path / "demo"
    assert CliRunner().invoke(app, ["demo", "--out", str(out), "--quiet"]).exit_code == 0
    raw = yaml.safe_load((out / "plan.yaml").read_text())
    raw["detection"]["ci"] = "bootstrap"
    raw["detection"]["bootstrap"]["n_boot"] = 50
    (out / "plan.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    plan = load_plan(out / "plan.yaml")
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run(plan, load_tables(plan), only=["adjusted_vs_crude"], errors="raise")
    crude = r["adjusted_vs_crude"]
    crude = crude[crude["kind"] == "crude"]
    assert len(crude) and crude["method"].astype(str).str.contains("bootstrap").all()
    assert r.decisions["adjusted.crude_rows"]["used"] < r.decisions["adjusted.crude_rows"][
        "population"]


def test_multiplicity_statement_covers_every_p_value_shown(demo):
    """Fact-check of the rendered demo: the statement named the prespecified families but
    not the p-values shown outside them (per-term Wald p-values, the metadata site tests)
    nor the CRS differences' own Holm family."""
    from reports.sections.methods import _unadjusted
    from reports.study import Study

    plan, tables, r = demo
    said = _unadjusted(Study(plan=plan, tables=tables, results=r))
    for words in ("per-term p-values are not adjusted", "metadata agreement across sites",
                  "pairwise CRS differences are their own family"):
        assert words in said, said


def test_baseline_table_shows_the_missing_tumour_sizes(demo):
    """Fact-check: the caption says missing values are shown, but the tumour-size row hid
    its missing count (negatives have no size; the count is among the positives)."""
    from reports.sections import cohort
    from reports.study import Study

    plan, tables, r = demo
    table = cohort.build(Study(plan=plan, tables=tables, results=r)).tables[0]
    d = table.display
    rows = d[(d["variable"].str.startswith("Tumour size")) & (d["level"] == "missing")]
    ev = r["evaluation"]
    one = ev[(ev["model"] == ev["model"].iloc[0]) & (ev["label"] == 1)]
    # the overall scans column (s0; p0 is the patients'): the count, then its percentage
    assert len(rows) == 1
    assert rows.iloc[0]["s0"].split(" ")[0] == str(int(one["tumor_size_mm"].isna().sum()))
