"""The report's meta-analysis across sites (reports/sections/site_meta.py): the forest
figures and the table show the analysis layer's numbers, state their role, and the
methods text describes the meta-analysis; a plan without the block has no section."""
from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest

from reports.sections import _roles, methods, site_meta
from reports.study import Study


@cache
def demo():
    from conftest import run_demo

    plan, tables, results = run_demo(["site_meta_analysis", "roles"])
    return Study(plan=plan, tables=tables, results=results)


def test_section_shows_the_analysis_numbers(tmp_path):
    study = demo()
    ma = study.results["site_meta_analysis"]
    sec = site_meta.build(study)
    figs = {f.name: f for f in sec.figures}
    assert set(figs) == {"site_meta_sensitivity", "site_meta_specificity"}
    for est, fig in figs.items():
        metric = est.removeprefix("site_meta_")
        want = ma[(ma["metric"] == metric) & (ma["group_var"] == "overall")]
        sites = fig.data[fig.data["row"] == "site"].merge(
            want[want["estimand"] == "site"], on=["model", "site"], suffixes=("", "_w"))
        assert len(sites) == (want["estimand"] == "site").sum()
        np.testing.assert_array_equal(sites["weight"], sites["weight_w"])
        np.testing.assert_array_equal(sites["estimate"], sites["estimate_w"])
        pooled = fig.data[fig.data["row"] == "pooled"].merge(
            want[want["estimand"] == "pooled"], on="model", suffixes=("", "_w"))
        for col in ("estimate", "conf_low", "conf_high", "pi_low", "pi_high"):
            np.testing.assert_array_equal(pooled[col], pooled[col + "_w"])
        labelled = _roles.label(study, fig)
        assert labelled.caption.endswith("Prespecified.")
        fig.save(tmp_path)
        assert (tmp_path / f"{fig.name}.png").stat().st_size > 10_000
    tab = sec.tables[0]
    assert tab.name == "site_meta_table"
    pooled = ma[ma["estimand"] == "pooled"]
    assert len(tab.data) == len(pooled) == len(tab.display)
    assert any("under-covers" in n for n in tab.notes)
    assert any("cluster-robust variance" in n for n in tab.notes)   # the demo repeats patients
    assert "@tbl-site-meta-table" in sec.blocks[0]


def test_role_follows_the_plan():
    """The figures and the table carry roles.site_meta_analysis (prespecified by default)."""
    study = demo()
    roles = dict(study.results["roles"])
    assert _roles.role_sentence(roles, "site_meta_table") == "Prespecified."
    roles["site_meta_analysis"] = "exploratory"
    for name in ("site_meta_table", "site_meta_sensitivity", "site_meta_specificity"):
        assert _roles.role_sentence(roles, name) == "Exploratory."


def test_methods_sentence():
    study = demo()
    text = " ".join(methods._detection(study))
    assert "Meta-analysis across sites" in text and "Knapp-Hartung" in text
    assert "per level of phase" in text and "cluster-aware" in text


def test_no_block_no_section():
    study = demo()
    plan = study.plan.updated({"detection.site_meta_analysis": None})
    assert not site_meta.applies(dataclasses.replace(study, plan=plan))
    assert site_meta.applies(study)


@pytest.mark.parametrize("estimand", ["ppv", "npv", "accuracy"])
def test_every_estimand_has_a_role_and_a_label(estimand):
    assert f"site_meta_{estimand}" in _roles.BY_NAME
    assert estimand in site_meta.COUNT_LABELS and estimand in site_meta.NAMES
