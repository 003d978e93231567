"""The report's attribution sections (reports/sections/gaps.py, transport.py): the figure
and the tables show the analysis layer's numbers, state their role, and the methods text
states each assumption in a paragraph of its own; a plan without the blocks has neither
section."""
from __future__ import annotations

import numpy as np
import pytest

from reports.sections import ORDER, _roles, gaps, methods, transport
from reports.study import Study


@pytest.fixture()
def demo(demo_study):
    """The demo study (shared by the test process; its gap decomposition and transport)."""
    return demo_study


def test_gap_section_shows_the_analysis_numbers(demo, tmp_path):
    study = demo
    gd = study.results["gap_decomposition"]
    sec = gaps.build(study)
    assert [f.name for f in sec.figures] == ["gap_1"]
    fig = sec.figures[0]
    merged = fig.data.merge(gd, on=["model", "estimand"], suffixes=("", "_w"))
    assert len(merged) == len(gd) == len(fig.data)
    for col in ("estimate", "conf_low", "conf_high"):
        np.testing.assert_array_equal(merged[col], merged[col + "_w"])
    # per model: crude gap first, equal case mix last, contributions by size between
    for _, m in fig.data.groupby("model", sort=False):
        assert m["estimand"].iloc[0] == "gap_total"
        assert m["estimand"].iloc[1] == "gap_case_mix"
        assert m["estimand"].iloc[-1] == "gap_conditional"
        c = m[m["part"] == "contribution"]
        assert list(c["order"]) == sorted(c["order"])
        # the contributions add up to the case-mix part, and the parts to the crude gap
        total, mix, cond = (m.loc[m["estimand"] == e, "estimate"].iloc[0]
                            for e in ("gap_total", "gap_case_mix", "gap_conditional"))
        assert abs(c["estimate"].sum() - mix) < 1e-12 and abs(mix + cond - total) < 1e-12
    assert fig.caption.endswith("Prespecified.")
    fig.save(tmp_path)
    assert (tmp_path / "gap_1.png").stat().st_size > 10_000
    tab = sec.tables[0]
    assert tab.name == "gap_decomposition" and len(tab.display) == len(gd)
    # the demo's 10 positive scans without a tumour size are left out, and said so
    n = int(gd.loc[gd["estimand"] == "gap_total", "n_dropped"].iloc[0])
    assert n == 10 and any(f"a missing covariate value: race: Unknown vs White, unet_large: "
                           f"{n}" in x for x in tab.notes)
    assert _roles.label(study, tab).caption.endswith("Prespecified.")
    assert "@tbl-gap-decomposition" in sec.blocks[0] and "@fig-gap-1" in sec.blocks[0]
    assert "race Unknown vs White (prespecified" in sec.blocks[0]


def test_exploratory_contrast_says_so(demo):
    study = demo
    res = study.results
    contrasts = [dict(c, role="exploratory", why="the largest crude gap") for c in
                 res["gap_contrasts"]]
    gd = res["gap_decomposition"].assign(role="exploratory")
    fig = gaps.figure(study, gd, contrasts[0], 0)
    assert fig.caption.endswith("Exploratory.")
    tab = gaps.table(study, gd, contrasts)
    assert tab.caption.endswith("Exploratory.")
    assert any("Exploratory contrasts (chosen from the data" in n for n in tab.notes)


def test_transport_table_shows_the_analysis_numbers(demo):
    study = demo
    tr = study.results["transport"]
    sec = transport.build(study)
    tab = sec.tables[0]
    assert tab.name == "transport_table"
    np.testing.assert_array_equal(tab.data["estimate"], tr["estimate"])
    assert list(tab.display["metric"].unique()) == ["Sensitivity", "Specificity", "PPV", "NPV"]
    assert _roles.label(study, tab).caption.endswith("Prespecified.")
    # the demo's target needs weights above 5 x the mean: flagged, with the largest shown
    assert study.results.decisions.transport.extreme
    assert any("extreme_weights" in n for n in tab.notes)
    assert "extreme" in sec.blocks[0] and "@tbl-transport-table" in sec.blocks[0]


def test_methods_state_each_assumption_in_its_own_paragraph(demo):
    study = demo
    paragraphs = [b for b in methods.build(study).blocks if isinstance(b, str)]
    for start in ("Assumption of the decomposition, no unmeasured confounding",
                  "Assumption of the decomposition, positivity",
                  "Assumption of the transport, no unmeasured effect modification",
                  "Assumption of the transport, positivity"):
        assert sum(p.startswith(start) for p in paragraphs) == 1
    assert any(p.startswith("Where the gaps come from") and "Shapley" in p
               for p in paragraphs)


def test_sections_left_out_without_the_blocks(demo):
    study = demo
    bare = Study(plan=study.plan.updated({"detection.gaps": None, "detection.target": None}),
                 tables=study.tables, results=study.results)
    assert not gaps.applies(bare) and not transport.applies(bare)
    assert gaps.applies(study) and transport.applies(study)
    assert ORDER.index("gaps") < ORDER.index("transport")
    paragraphs = [b for b in methods.build(bare).blocks if isinstance(b, str)]
    assert not any(p.startswith("Assumption of the") for p in paragraphs)


@pytest.mark.parametrize("term, label", [("np.log(tumor_size_mm)", "log tumor size mm"),
                                         ("np.log2(lesion_volume)", "log2 lesion volume"),
                                         ("age_group", "age group"), ("site", "site"),
                                         ("np.sqrt(size)", "np.sqrt(size)")])
def test_covariates_are_labelled_as_a_reader_names_them(term, label):
    """The gap figure's and table's rows name a log-transformed covariate "log x", not
    the formula's ``np.log(x)``; another transform keeps its term."""
    from reports.sections.gaps import covariate_label

    assert covariate_label(term) == label
