"""The report's Localization section (reports/sections/localization.py) on the demo study:
it is made from the runner's own lesions table (clinrel/demo_data/lesions.parquet), its
figures and tables show the analysis layer's numbers (FROC, CPM, per-lesion sensitivity,
hidden misses), they carry roles.localization (exploratory by default), the methods text
states the hit criterion, and a plan without the block has no section."""
from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pandas as pd

from reports.sections import _roles, localization, methods
from reports.study import Study


@cache
def demo():
    from conftest import run_demo

    plan, tables, results = run_demo(["froc", "froc_curve", "lesion_metrics", "roles"])
    return Study(plan=plan, tables=tables, results=results)


def test_the_lesions_are_the_runners_own():
    """The demo plan names the runner's lesions.parquet; its rows are those analysed."""
    from pathlib import Path

    import stats

    study = demo()
    assert Path(study.plan.lesions).name == "lesions.parquet"
    shipped = stats.read_lesions(Path(__file__).parents[2] / "clinrel/demo_data/lesions.parquet")
    got = study.tables.lesions.reset_index(drop=True)
    if study.plan.privacy.pseudonymize_ids:             # the demo pseudonymizes case ids
        from analysis.inputs import pseudonymize

        shipped["case_id"] = pseudonymize(shipped["case_id"], study.plan.privacy.salt)
    pd.testing.assert_frame_equal(got, shipped.reset_index(drop=True))
    assert set(shipped["hit_rule"].dropna()) == {study.plan.detection.lesions.rule_text}
    assert localization.applies(study)


def test_section_shows_the_analysis_numbers(tmp_path):
    study = demo()
    sec = localization.build(study)
    assert {f.name for f in sec.figures} == {"froc_curves", "lesion_failure_map"}
    assert [t.name for t in sec.tables] == ["froc_summary", "lesion_failure_map",
                                            "localization_vs_scan"]
    f = study.results["froc"]
    ov = f[f["group_var"] == "overall"]
    models = list(pd.unique(study.cases["model"]))
    # the FROC figure's diamonds and curve: the analysis rows
    fig = {x.name: x for x in sec.figures}["froc_curves"]
    curve = study.results["froc_curve"]
    want = curve[curve["group_var"] == "overall"].reset_index(drop=True)
    np.testing.assert_array_equal(fig.data["estimate"], want["estimate"])
    np.testing.assert_array_equal(fig.data["conf_low"], want["conf_low"])
    assert want["conf_low"].notna().all()               # bands from the bootstrap
    # the FROC table: one row per model and per paired difference, CPM as computed
    tab = {t.name: t for t in sec.tables}
    disp = tab["froc_summary"].display
    assert list(disp["model"])[:len(models)] == [str(m) for m in models]
    assert any(" - " in m for m in disp["model"])      # paired differences shown
    from reports import text

    for m in models:
        cpm = ov[(ov["model"] == m) & (ov["estimand"] == "cpm")].iloc[0]
        shown = disp.loc[disp["model"] == str(m), "cpm"].iloc[0]
        assert shown == text.ci(cpm["estimate"], cpm["conf_low"], cpm["conf_high"])
        sens = ov[(ov["model"] == m) & (ov["estimand"] == "lesion_sensitivity")]
        assert abs(sens["estimate"].mean() - cpm["estimate"]) < 1e-12
    # the failure map: lesion size x phase cells of lesion_metrics
    lm = study.results["lesion_metrics"]
    fmap = {x.name: x for x in sec.figures}["lesion_failure_map"]
    cells = lm[(lm["estimand"] == "lesion_sensitivity")
               & (lm["group_var"] == "lesion_size:phase")]
    assert len(fmap.data) == len(cells)
    merged = fmap.data.merge(
        cells.assign(lesion_size=cells["group_level"].str.split(":").str[0],
                     phase=cells["group_level"].str.split(":").str[1]),
        on=["model", "lesion_size", "phase"], suffixes=("", "_w"))
    assert len(merged) == len(cells)
    np.testing.assert_array_equal(merged["estimate"], merged["estimate_w"])
    # scan- against lesion-level: the hidden misses as counted by lesion_metrics
    comp = tab["localization_vs_scan"].display
    hm = lm[(lm["estimand"] == "hidden_miss") & (lm["group_var"] == "overall")]
    for r in hm.itertuples():
        row = comp[(comp["model"] == str(r.model)) & (comp["cell"] == "Overall")].iloc[0]
        assert row["hidden"].startswith(text.frac(r.numerator, r.denominator))
    assert (hm["numerator"] > 0).all()                  # the demo has hidden misses
    assert f"{int(hm['numerator'].iloc[0])}/{int(hm['denominator'].iloc[0])}" in sec.blocks[0]
    for x in sec.figures:
        x.save(tmp_path)
        assert (tmp_path / f"{x.name}.png").stat().st_size > 10_000


def test_role_follows_the_plan():
    """Every table and figure carries roles.localization: exploratory by default."""
    study = demo()
    roles = dict(study.results["roles"])
    names = ("froc_curves", "froc_summary", "lesion_failure_map", "localization_vs_scan")
    assert {_roles.role_sentence(roles, n) for n in names} == {"Exploratory."}
    roles["localization"] = "prespecified"
    assert {_roles.role_sentence(roles, n) for n in names} == {"Prespecified."}


def test_methods_state_the_hit_criterion():
    study = demo()
    text = localization.methods_text(study)
    assert "intersection over union with the reference lesion is at least 0.1" in text
    assert "matched at most once" in text and "patient-cluster bootstrap" in text
    blocks = " ".join(b for b in methods.build(study).blocks if isinstance(b, str))
    assert text in blocks
    centroid = study.plan.updated({"detection.lesions.hit_rule": "centroid"})
    assert "centroid voxel lies inside" in localization.hit_sentence(centroid)


def test_no_block_no_section():
    study = demo()
    plan = study.plan.updated({"detection.lesions": None})
    assert not localization.applies(dataclasses.replace(study, plan=plan))
