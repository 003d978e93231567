"""Every table and figure caption says whether its analysis is prespecified or exploratory,
the plan's ``roles`` block sets the role of each analysis, and an
exploratory analysis is neither adjusted for multiplicity nor counted in its statement."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import yaml

from reports.sections import _roles, build_all
from reports.study import load_study
from analysis import load_plan
from analysis.plan import PlanError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "clinrel" / "demo_data"


def _study(tmp_path, roles=None, sections=None):
    from typer.testing import CliRunner

    from clinrel.cli import app

    out = tmp_path / "demo"
    assert CliRunner().invoke(app, ["demo", "--out", str(out), "--quiet"]).exit_code == 0
    if roles is not None:
        plan = yaml.safe_load((out / "plan.yaml").read_text())
        plan["roles"] = roles
        (out / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = load_study(load_plan(out / "plan.yaml"))
        return study, build_all(study, only=sections, strict=True)


@pytest.fixture(scope="module")
def demo_sections(demo_study):
    """Every section of the demo report, from the demo study shared by the test process."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_all(demo_study, strict=True)


@pytest.fixture(scope="module")
def exploratory(tmp_path_factory):
    """The demo with comparisons, sensitivity collapse and the adjusted models made
    exploratory by the plan's roles (one study for the three families' checks)."""
    return _study(tmp_path_factory.mktemp("roles"),
                  roles={"comparisons": "exploratory", "sensitivity_collapse": "exploratory",
                         "adjusted": "exploratory"},
                  sections=["comparisons", "failure_map", "adjusted", "subgroups"])


def test_every_demo_table_and_figure_states_its_role(demo_sections):
    sections = demo_sections
    blocks = [b for s in sections for b in s.blocks if hasattr(b, "caption")]
    assert len(blocks) > 40
    for b in blocks:
        if b.name in _roles.NO_ROLE:
            continue
        assert re.search(r"(Prespecified|Exploratory)[^.]*\.$", b.caption.rstrip()), \
            (b.name, b.caption[-80:])
    names = {b.name for b in blocks}
    assert "threshold_sweep" in names
    sweep = next(b for b in blocks if b.name == "threshold_sweep")
    assert sweep.caption.endswith("Exploratory.")


def test_every_table_and_figure_name_in_the_sections_is_mapped():
    """A new table or figure must say which analysis it shows (else its caption would
    carry no role): every literal name in reports/sections is in BY_NAME or exempt."""
    src = "\n".join(p.read_text() for p in (ROOT / "reports" / "sections").glob("*.py"))
    names = set(re.findall(r'name="([a-z_]+)"', src)) - {"encoder"}
    assert names, "no names found"
    for n in sorted(names):
        assert n in _roles.BY_NAME or n in _roles.NO_ROLE, n
    with pytest.raises(KeyError, match="not mapped"):
        _roles.role_sentence({}, "a_new_table")


def test_exploratory_comparisons_and_collapse_have_no_family(exploratory):
    """roles: comparisons and sensitivity_collapse exploratory: their tests carry no Holm
    p-value, the collapse flag reads the raw p, the multiplicity statement leaves both
    families out, and the tables say so (the second review found the methods claiming
    unadjusted tests that were adjusted)."""
    study, sections = exploratory
    res = study.results
    assert res["comparisons"]["p_adjusted"].isna().all()
    vr = res["subgroup_vs_rest"]
    assert vr["p_adjusted"].isna().all()
    sig = (vr["estimate"] < 0) & (vr["p_value"] < 0.05)
    sens = vr["estimand"] == "sensitivity_difference"
    assert (vr.loc[vr["collapse"] & sens, "p_value"] < 0.05).all() and sig[sens].any()
    said = res.decisions["multiplicity"]
    assert "subgroup-versus-rest" not in said and "model comparisons" not in said
    cmp = next(b for s in sections for b in s.tables if b.name == "model_comparisons")
    assert "p_adj" not in cmp.display.columns
    assert any("not adjusted for multiplicity" in n for n in cmp.notes)
    coll = next(b for s in sections for b in s.tables if b.name == "sensitivity_collapse")
    assert "unadjusted" in coll.caption and coll.caption.endswith("Exploratory.")


def test_default_multiplicity_names_every_prespecified_family(demo_study):
    study = demo_study
    said = study.results.decisions["multiplicity"]
    assert "subgroup-versus-rest" in said and "model comparisons" in said
    assert not study.results["comparisons"]["p_adjusted"].isna().all()


def test_plan_roles_make_the_adjusted_models_exploratory(exploratory):
    study, sections = exploratory
    res = study.results
    assert res["roles"]["adjusted"] == "exploratory"
    adj = next(s for s in sections if s.key == "adjusted")
    for b in adj.tables + adj.figures:
        assert b.caption.endswith("Exploratory."), b.name
    blocks = next(b for b in adj.tables if b.name == "adjusted_block_tests")
    assert "p_adj" not in blocks.display.columns
    assert any("not adjusted for multiplicity" in n for n in blocks.notes)
    assert res.decisions["adjusted.block_multiplicity"].startswith("none")
    assert "likelihood-ratio tests" not in res.decisions["multiplicity"]
    from reports.sections.methods import _roles_sentence

    said = _roles_sentence(study)
    listed = said.split("Exploratory analyses: ", 1)[1].split(".")[0]
    for name in ("threshold sweep", "partially pooled cells", "adjusted models"):
        assert name in listed, said


@pytest.mark.parametrize("roles, needs", [
    ({"adjusted": "maybe"}, "roles.adjusted"),
    ({"sweep": "exploratory"}, "unknown key"),
])
def test_plan_roles_are_validated(tmp_path, roles, needs):
    from typer.testing import CliRunner

    from clinrel.cli import app

    out = tmp_path / "demo"
    assert CliRunner().invoke(app, ["demo", "--out", str(out), "--quiet"]).exit_code == 0
    plan = yaml.safe_load((out / "plan.yaml").read_text())
    plan["roles"] = roles
    (out / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    with pytest.raises(PlanError, match=needs):
        load_plan(out / "plan.yaml")


def test_a_figure_of_several_axes_names_the_exploratory_ones():
    import pandas as pd

    roles = {"axis:phase": "prespecified", "axis:scanner": "exploratory",
             "axis:age_group:phase": "exploratory"}
    data = pd.DataFrame({"group_var": ["overall", "phase", "scanner", "age_group:phase"]})
    assert _roles.role_sentence(roles, "forest_sensitivity", data) == (
        "Prespecified axes, except exploratory scanner, age group \u00d7 phase.")
    assert _roles.role_sentence(roles, "forest_specificity",
                                data[data.group_var != "scanner"].iloc[:2]) == "Prespecified."
    # a figure whose data has no group_var (or none) is prespecified, not a traceback
    assert _roles.role_sentence(roles, "forest_x", pd.DataFrame({"a": [1]})) == "Prespecified."
    assert _roles.role_sentence(roles, "forest_x", None) == "Prespecified."
