"""Safety at the boundary, code execution: a model formula is data.

Formulas are read by clinrel's own grammar (stats/formula.py) before anything is
evaluated; patsy only ever sees code written from the parse tree, in an environment with
the closed function list and no Python builtins. Before this grammar, patsy evaluated the
user's text: ``detected ~ phase + __import__('pathlib').Path('X').touch()`` created X, and
``np.log(x)`` with x = 0 ended in a LinAlgError traceback; the tests below fail on that code.
"""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import patsy
import pytest
from typer.testing import CliRunner

from clinrel.cli import app
from stats.formula import (MAX_DEPTH, MAX_LENGTH, MAX_TERMS, FormulaError, closed_environment,
                           parse_formula)
from stats.models import block_tests, design, fit_adjusted
from stats.schema import ContractError

# (formula, a fragment the message must hold); each would run code, reach a name outside
# the closed list, or mean something the grammar does not define
HOSTILE = [
    ("detected ~ phase + __import__('os').system('touch PWNED')", "unknown function '__import__'"),
    ("detected ~ phase + __import__('pathlib').Path('PWNED').touch()", "'__import__'"),
    ("~ phase + open('PWNED', 'w').close()", "unknown function 'open'"),
    ("~ eval(\"__import__('os')\")", "unknown function 'eval'"),
    ("~ exec('x = 1')", "unknown function 'exec'"),
    ("~ getattr(np, 'random')", "unknown function 'getattr'"),
    ("~ compile('1', 'f', 'eval')", "unknown function 'compile'"),
    ("~ breakpoint()", "unknown function 'breakpoint'"),
    ("~ os.system", "attribute access ('os.')"),
    ("~ phase + np.random.normal(age)", "'np.random' is not an allowed function"),
    ("~ np.log(age).__class__", "attribute access"),
    ("~ phase.__class__.__mro__", "attribute access ('phase.')"),
    ("~ np.load('x.npy')", "'np.load' is not an allowed function"),
    ("~ lambda: 1", "Python keyword 'lambda'"),
    ("~ phase if age else sex", "Python keyword 'if'"),
    ("~ None", "Python keyword 'None'"),
    ("~ age[0]", "'['"),
    ("~ [x for x in age]", "'['"),
    ("~ {1: 2}", "'{'"),
    ("~ 'phase'", "quoted text is allowed only"),
    ("~ phase + \"import os\"", "quoted text is allowed only"),
    ("~ f'{age}'", "string prefixes"),
    ("~ b'age'", "string prefixes"),
    ("~ rb'age'", "string prefixes"),
    ("~ (x := 1)", "':='"),
    ("~ __builtins__", "names starting with '__'"),
    ("~ __class__", "names starting with '__'"),
    ("~ I(__import__('os'))", "unknown function '__import__'"),
    ("~ I(age + len(sex))", "unknown function 'len'"),
    ("~ I(age / sex)", "expected a number"),
    ("~ np.log(np.log(age))", "expected a column, found np.log(...)"),
    ("~ C(phase, Treatment(__import__('os').getcwd()))", "unknown function '__import__'"),
    ("~ C(phase, Sum)", "C() takes a column"),
    ("~ C(phase, Treatment('v'), 3)", "')' closing C("),
    ("~ scale(age, ddof=__import__('os'))", "unknown function '__import__'"),
    ("~ scale(age, ddof=0)", "scale() takes a column"),
    ("~ Q(age)", "Q() takes one quoted column name"),
    ("~ Q('a' + 'b')", "Q() takes one quoted column name"),
    ("~ Q('a' 'b')", "expected ')', found more quoted text"),
    ("~ Q('a\\x00')", "backslashes"),
    ("__import__('os').system('x') ~ phase", "unknown function '__import__'"),
    ("~ phase + (1 | __import__('os'))", "unknown function '__import__'"),
    ("~ `tumor size`", "backquoted names"),
    ("~ phase # comment", "comments"),
    ("~ phase; import os", "';'"),
    ("~ age @ sex", "'@'"),
    ("~ ｐhase", "U+FF50"),
    ("~ ph\u0430se", "U+0430"),
    ("~ 0x1f", "malformed number"),
    ("~ I(age ** 1e999)", "malformed number"),
    ("~ 2", "the number 2 is not a term"),
    ("~ -phase", "'-' may only remove the intercept"),
    ("~ phase / site", "nesting"),
    ("~ (phase + sex) ** 2", "'**' is allowed only inside I()"),
    ("~ (phase + sex)^2", "'^'"),
    ("~ (age | site)", "only a random intercept"),
    ("~ phase + (1 | site) + (1 | scanner)", "only a random intercept"),
    ("~ phase ~ sex", "a second '~'"),
    ("~ phase +", "expected a term"),
    ("~ 1:phase", "intercept"),
]

VALID = [
    "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)",
    "~ phase + log(tumor_size_mm)",
    "~ phase*sex + age",
    "~ (phase + sex)*age",
    "~ phase:sex + I(age / 10)",
    "~ C(phase, Treatment('venous')) + sex",
    "~ C(phase, Treatment(reference=\"venous\")) + scale(age) + center(age)",
    "~ Q(\"tumor size\") + sqrt(tumor_size_mm) + np.log2(tumor_size_mm + 1)",
    "~ C(grade) + I(age ** 2) + I(age - 50) + I(age * 0.1) + I(age + 1)",
    "~ 0 + phase + sex",
    "~ phase + sex - 1",
    "~ np.log10(tumor_size_mm) + np.sqrt(age) + log2(age)",
    "~ phase + Q('age')",
]


@pytest.fixture(scope="module")
def small() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 240
    df = pd.DataFrame({
        "case_id": [f"c{i}" for i in range(n)], "site": rng.choice(list("ABCDEF"), n),
        "phase": rng.choice(["venous", "arterial", "delayed"], n),
        "sex": rng.choice(["F", "M"], n), "race": rng.choice(["Asian", "White", "Black"], n),
        "age_group": rng.choice(["<40", "40-65", ">65"], n), "age": rng.uniform(20, 90, n),
        "tumor_size_mm": rng.uniform(3, 60, n), "grade": rng.integers(1, 4, n)})
    df["tumor size"] = df["tumor_size_mm"]
    eta = -0.5 + 0.04 * df.tumor_size_mm + 0.5 * (df.phase == "venous") - 0.01 * (df.age - 50)
    df["detected"] = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    return df


@pytest.fixture
def no_patsy(monkeypatch):
    """patsy.dmatrix that fails the test if it is reached."""
    calls = []

    def guard(*args, **kwargs):
        calls.append(args[0])
        raise AssertionError(f"patsy reached with {args[0]!r}")

    monkeypatch.setattr(patsy, "dmatrix", guard)
    return calls


@pytest.mark.parametrize("formula,fragment", HOSTILE, ids=[f for f, _ in HOSTILE])
def test_hostile_formula_refused_before_evaluation(formula, fragment, small, no_patsy,
                                                   tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FormulaError) as exc:
        parse_formula(formula)
    msg = str(exc.value)
    assert fragment in msg, msg
    assert "allowed:" in msg and "at character" in msg and "in term" in msg
    assert isinstance(exc.value, ContractError)  # the CLI's exit 2
    with pytest.raises(FormulaError):
        fit_adjusted(small, formula, population=None, method="fixed", group=None)
    assert no_patsy == [] and list(tmp_path.iterdir()) == []


def test_message_names_term_and_position():
    with pytest.raises(FormulaError) as exc:
        parse_formula("detected ~ phase + __import__('os').system('touch X')")
    msg = str(exc.value)
    assert "in term \"__import__('os').system('touch X')\" at character 20" in msg
    assert "np.log" in msg and "Treatment('level')" in msg   # what is allowed


@pytest.mark.parametrize("formula", [
    "detected ~ phase + __import__('pathlib').Path('PWNED').touch()",
    "detected ~ phase + open('PWNED', 'w').close()",
    "detected ~ I(__import__('os').system('touch PWNED'))",
])
def test_formula_that_would_write_a_file_leaves_none(formula, small, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FormulaError):
        fit_adjusted(small, formula, population=None, method="fixed", group="site")
    with pytest.raises(FormulaError):
        block_tests(small, formula, population=None, method="fixed", group="site")
    assert not (tmp_path / "PWNED").exists()


def test_cli_refuses_code_with_exit_2_and_no_file(small, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cases = tmp_path / "cases.csv"
    small.assign(model="m", label=1, score=small.detected * 100.0,
                 patient_id=small.case_id).to_csv(cases, index=False)
    res = CliRunner().invoke(app, ["adjust", str(cases), "--formula",
                                   "~ phase + __import__('os').system('touch PWNED')",
                                   "--threshold", "50", "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 2, res.output
    assert "unknown function '__import__'" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "t.csv").exists()
    res = CliRunner().invoke(app, ["adjust", str(cases), "--formula", "~ phase + smoking",
                                   "--threshold", "50", "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 2 and "smoking" in res.output and f"{cases}: " in res.output


def test_closed_environment_has_no_builtins(small):
    env = closed_environment()
    for code in ("len(age)", "__import__('os')", "open('x')", "np.random.normal(age)"):
        with pytest.raises(patsy.PatsyError):
            patsy.dmatrix(code, small, eval_env=env)
    assert list(patsy.dmatrix("np.log(age)", small, eval_env=env).design_info.column_names) == [
        "Intercept", "np.log(age)"]


#: a column name that, written into code as Q('...') by naive quoting, is an expression
#: reaching the builtins through a closed function's __globals__
ESCAPE = ("' if C.__globals__[\"__builtins__\"][\"__import__\"](\"pathlib\")"
          ".Path(\"PWNED\").touch() else '")


def test_closed_environment_refuses_private_attributes(small, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(patsy.PatsyError, match="private attributes"):
        patsy.dmatrix(f"Q('{ESCAPE}')", small.assign(**{"": 1.0}), eval_env=closed_environment())
    assert not (tmp_path / "PWNED").exists()
    # scale() and center() are patsy's stateful transforms: its own .transform calls pass
    assert "scale(age)" in patsy.dmatrix("scale(age)", small,
                                         eval_env=closed_environment()).design_info.column_names


def test_hostile_group_column_is_not_written_into_code(small, tmp_path, monkeypatch):
    """method='fixed' adds the group as a term: a name no literal can hold is refused."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FormulaError, match="cannot be named in a formula"):
        fit_adjusted(small.assign(**{ESCAPE: small.site}), "detected ~ phase", population=None,
                     method="fixed", group=ESCAPE)
    assert not (tmp_path / "PWNED").exists()
    odd = "site 'B' or C"   # one kind of quote: a literal holds it, the name is kept
    fit = fit_adjusted(small.assign(**{odd: small.site}), "detected ~ phase", population=None,
                       method="fixed", group=odd)
    assert any(t.startswith("Q(\"site 'B' or C\")") for t in fit.fits["all"].design.terms)


def _old_patsy(rhs: str, data: pd.DataFrame):
    env = patsy.EvalEnvironment([{"np": np, "log": np.log, "sqrt": np.sqrt, "log2": np.log2}])
    return patsy.dmatrix(rhs, data, return_type="dataframe", eval_env=env)


@pytest.mark.parametrize("formula", VALID)
def test_valid_formula_same_design_and_names_as_patsy(formula, small, monkeypatch):
    """The code written from the parse gives patsy's own columns and names, to the bit."""
    seen = []
    real = patsy.dmatrix

    def spy(code, *args, **kwargs):
        seen.append(code)
        assert isinstance(kwargs["eval_env"], type(closed_environment()))
        return real(code, *args, **kwargs)

    monkeypatch.setattr(patsy, "dmatrix", spy)
    d = design.build(small, formula, group=None, outcome="detected")
    assert seen == [parse_formula(formula).patsy_rhs]
    # what patsy evaluated is itself inside the grammar and writes back unchanged
    assert parse_formula("~ " + seen[0]).patsy_rhs == seen[0]
    monkeypatch.setattr(patsy, "dmatrix", real)
    ref = _old_patsy(formula.partition("~")[2], design._categorical(
        small, [c for c in small.columns if c in ("phase", "sex", "race", "age_group")]))
    assert d.all_terms == list(ref.columns)
    np.testing.assert_array_equal(d.X, ref.to_numpy()[:, [d.all_terms.index(t) for t in d.terms]])


def test_estimates_unchanged_and_reference_level(small):
    a = fit_adjusted(small, "detected ~ phase + np.log(tumor_size_mm)", population=None,
                     method="fixed", group="site", cluster=None)
    assert {"phase[T.delayed]", "phase[T.venous]", "np.log(tumor_size_mm)"} <= set(a.tidy().estimand)
    releveled = small.assign(phase=pd.Categorical(small.phase, ["venous", "arterial", "delayed"]))
    b = fit_adjusted(releveled, "detected ~ phase + np.log(tumor_size_mm)", population=None,
                     method="fixed", group="site", cluster=None)
    c = fit_adjusted(small, "detected ~ C(phase, Treatment('venous')) + np.log(tumor_size_mm)",
                     population=None, method="fixed", group="site", cluster=None)
    assert "C(phase, Treatment('venous'))[T.arterial]" in set(c.tidy().estimand)
    np.testing.assert_allclose(c.fits["all"].beta, b.fits["all"].beta, rtol=1e-10)
    assert c.loglik == pytest.approx(a.loglik, rel=1e-12)
    q = fit_adjusted(small, "detected ~ phase + Q(\"tumor size\")", population=None,
                     method="fixed", group=None)
    r = fit_adjusted(small, "detected ~ phase + tumor_size_mm", population=None,
                     method="fixed", group=None)
    np.testing.assert_allclose(q.fits["all"].beta, r.fits["all"].beta, rtol=1e-12)
    np.testing.assert_allclose(c.marginal_means("phase").set_index("group_level").estimate
                               .loc[["venous", "arterial", "delayed"]],
                               b.marginal_means("phase").estimate, rtol=1e-9)
    with pytest.raises(FormulaError, match="reference level 'portal'.*levels: 'arterial'"):
        fit_adjusted(small, "detected ~ C(phase, Treatment('portal'))", population=None,
                     method="fixed", group=None)


@pytest.mark.parametrize("formula,value,fragment", [
    ("detected ~ phase + np.log(tumor_size_mm)", 0.0, "the log of zero or a negative"),
    ("detected ~ phase + log(tumor_size_mm)", -2.0, "log(tumor_size_mm + 1)"),
    ("detected ~ phase + sqrt(tumor_size_mm)", -1.0, "square root"),
    ("detected ~ phase + tumor_size_mm", np.inf, "infinite values"),
    ("detected ~ phase + I(tumor_size_mm ** -1)", 0.0, "infinite or undefined"),
])
def test_non_finite_term_refused_before_fit(formula, value, fragment, small):
    bad = small.copy()
    bad.loc[[3, 17], "tumor_size_mm"] = value
    with pytest.raises(ContractError) as exc:
        fit_adjusted(bad, formula, population=None, method="fixed", group="site")
    msg = str(exc.value)
    assert "rows 4, 18" in msg and "'tumor_size_mm'" in msg and fragment in msg, msg
    assert "drop or recode these rows" in msg and exc.value.column == "tumor_size_mm"
    assert exc.value.rows == [4, 18]


def test_log_zero_through_cli_is_exit_2(small, tmp_path):
    cases = tmp_path / "cases.csv"
    small.assign(model="m", label=1, score=small.detected * 100.0, patient_id=small.case_id,
                 tumor_size_mm=np.where(small.index == 7, 0.0, small.tumor_size_mm)
                 ).to_csv(cases, index=False)
    res = CliRunner().invoke(app, ["adjust", str(cases), "--formula",
                                   "~ phase + np.log(tumor_size_mm)", "--method", "fixed",
                                   "--threshold", "50", "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 2, res.output
    assert "rows 8" in res.output and "tumor_size_mm" in res.output
    assert "Traceback" not in res.output and "LinAlgError" not in res.output


def test_scale_of_constant_column_refused(small):
    with pytest.raises(ContractError, match="scale\\(age\\).*zero SD"):
        fit_adjusted(small.assign(age=50.0), "detected ~ phase + scale(age)", population=None,
                     method="fixed", group=None)


def test_unknown_column_named_with_the_data_columns(small):
    with pytest.raises(FormulaError) as exc:
        parse_formula("detected ~ phase + tumour_size_mm", columns=small.columns)
    msg = str(exc.value)
    assert "['tumour_size_mm']" in msg and "did you mean 'tumor_size_mm'" in msg
    assert "columns present: case_id, site, phase" in msg
    # the outcome is derived (detected = pred), so it is not checked against the columns
    parse_formula("detected ~ phase", columns=["phase"])


def test_parsed_formula_columns_and_terms():
    p = parse_formula("detected ~ phase*sex + C(race, Treatment('White')) + "
                      "np.log(tumor_size_mm + 1) + Q(\"age group\") + (1 | site) - 1")
    assert p.rhs_columns() == ["phase", "sex", "race", "tumor_size_mm", "age group"]
    assert p.term_names() == ["phase", "sex", "phase:sex", "C(race, Treatment('White'))",
                              "np.log(tumor_size_mm + 1)", "Q(\"age group\")"]
    assert p.random_group.name == "site" and not p.intercept and p.response.name == "detected"
    assert p.references() == {"race": "White"}
    reduced, dropped = p.without(["sex"])
    assert dropped == ["sex", "phase:sex"] and "sex" not in reduced.rhs_columns()
    assert parse_formula("y ~ 1").terms == () and parse_formula("~ a + a:b + b:a").term_names() == [
        "a", "a:b"]


def test_size_limits():
    with pytest.raises(FormulaError, match="characters long"):
        parse_formula("~ " + " + ".join(["age"] * MAX_LENGTH))
    with pytest.raises(FormulaError, match="expands to"):
        parse_formula("~ " + "*".join(f"x{i}" for i in range(12)))
    assert len(parse_formula("~ " + "*".join(f"x{i}" for i in range(8))).terms) == 255 <= MAX_TERMS
    with pytest.raises(FormulaError, match="nested parentheses"):
        parse_formula("~ " + "(" * (MAX_DEPTH + 1) + "age" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(FormulaError, match="must be text"):
        parse_formula(["~ age"])


def test_design_pickles_without_evaluating_text(small):
    fit = fit_adjusted(small, "detected ~ C(phase, Treatment('venous')) + scale(age)",
                       population=None, method="fixed", group=None)
    d = pickle.loads(pickle.dumps(fit.fits["all"].design))
    assert d.design_info.column_names == fit.fits["all"].design.all_terms


def test_transform_of_a_text_column_refused(small):
    with pytest.raises(ContractError, match="'np.log\\(phase\\)' needs a numeric column.*rows 1, 2"):
        fit_adjusted(small, "detected ~ np.log(phase)", population=None, method="fixed",
                     group=None)
