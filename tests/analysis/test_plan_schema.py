"""analysis.plan: a new plan key is one declaration plus the analysis that reads it.

The test declares a key (``detection.my_margin``) once, as a field of a model, and finds
it everywhere a key must be: validation (its constraint, its message with the key and the
fix), docs/plan.md's rows (``keys()``), the comment ``plan init`` writes (``describe``),
the command-line option (``plan_option``) and the messages of a command's own plan, which
name the option. Then an analysis registered in one place reads it through ``run``."""
from __future__ import annotations

import pandas as pd
import pytest
from pydantic import create_model

import analysis.plan as P
from analysis import Tables, run
from analysis.core import ANALYSES, analysis


@pytest.fixture
def with_new_key(monkeypatch):
    """PlanSpec with a Detection that declares one more key, as a developer would add it."""
    field = P.key(0.05, "A margin the new analysis reads.", type="a number in (0, 1)",
                  example="0.1", cli="--my-margin", hint="write e.g. my_margin: 0.1",
                  gt=0, lt=1)
    Detection2 = create_model("Detection", __base__=P.Detection, my_margin=(float, field))
    Spec2 = create_model("PlanSpec", __base__=P.PlanSpec,
                         detection=(Detection2 | None, P.key(None, type="a mapping")))
    monkeypatch.setattr(P, "PlanSpec", Spec2)
    P.keys.cache_clear()
    yield
    P.keys.cache_clear()


def test_one_declaration_reaches_validation_docs_template_and_cli(with_new_key, tmp_path):
    # docs/plan.md is written from keys(); plan init's comments from describe()
    doc = {k.path: k for k in P.keys()}["detection.my_margin"]
    assert (doc.type, doc.default, doc.example, doc.cli) == (
        "a number in (0, 1)", "`0.05`", "0.1", "--my-margin")
    assert P.describe("detection.my_margin") == "A margin the new analysis reads."
    # validation: the default, a value, a refusal naming the key and the fix
    plan = P.plan_for_tables(detection={})
    assert plan.detection.my_margin == 0.05
    assert P.plan_for_tables(detection={"my_margin": 0.2}).detection.my_margin == 0.2
    with pytest.raises(P.PlanError, match=r"key 'detection.my_margin' must be a number in "
                                          r"\(0, 1\), got 2.*write e.g. my_margin: 0.1"):
        P.plan_for_tables(detection={"my_margin": 2})
    # a command's plan names the option, from the same declaration
    (tmp_path / "c.csv").write_text("case_id,model,label,score,site\nc1,m,1,60,s\n")
    with pytest.raises(P.PlanError, match=r"option --my-margin must be a number"):
        P.plan_for_command(inputs={"cases": tmp_path / "c.csv"},
                           detection={"my_margin": 2})
    # the command's option and its help
    from clinrel.cli._common import plan_option

    import typer
    from typer.testing import CliRunner

    app = typer.Typer()

    @app.command()
    def cmd(my_margin: float = plan_option("detection.my_margin", default=0.05)):
        pass

    shown = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    assert "--my-margin" in shown and "A margin the new analysis reads" in shown


def test_the_analysis_that_reads_it_is_registered_in_one_place(with_new_key, monkeypatch):
    monkeypatch.setattr("analysis.core.ANALYSES", dict(ANALYSES))

    @analysis("my_analysis")
    def my_analysis(results):
        return pd.DataFrame({"margin": [results.plan.detection.my_margin]})

    cases = pd.DataFrame({"case_id": ["a", "b"], "model": "m", "label": [1, 0],
                          "score": [60.0, 1.0], "site": "s"})
    res = run(P.plan_for_tables(detection={"my_margin": 0.3}), Tables(cases=cases),
              only=["my_analysis"])
    assert res["my_analysis"]["margin"].iloc[0] == 0.3
