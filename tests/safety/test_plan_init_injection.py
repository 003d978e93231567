"""``clinrel plan init``: text from the table or the file system never becomes plan YAML.

Model names, column names and the source path went into ``#`` comment
lines as they were, so a newline (or CR, NEL, U+2028, U+2029: YAML line breaks too) ended
the comment and started live YAML; the loader lets a repeated key win silently, so a
column named ``"z\\ninputs:\\n  cases: /tmp/secret.txt\\n#"`` made the report read a local
file, and a model named ``"unet_small\\nscheduler: tcp://...\\n#"`` made it connect to a
scheduler. Values (axes, the title, the formula, the summary) were JSON strings, which
YAML folds or refuses on NEL, U+2028 and DEL. Every test here fails on that code.

Hostile names go through the CLI into each place ``render_plan`` writes data: a header
comment (model names, the source path), an unused-column comment, an identifier comment,
a subgroup axis and the prespecified summary (values), the title and ``inputs.cases``
(the file's name) and the adjusted model's formula. The plan must load, hold only the
top-level keys ``plan init`` writes, keep ``inputs`` as written and give every value back
as the same text.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from clinrel.cli import app
from analysis import load_plan

runner = CliRunner()

PLAN_KEYS = ["version", "title", "seed", "inputs", "detection", "privacy", "prespecified",
             "exploratory"]
#: YAML line breaks (PyYAML reads YAML 1.1: NEL, LS and PS end a line too)
BREAKS = re.compile("[\n\r\x85\u2028\u2029]")

#: one payload per way out of a comment or a scalar
HOSTILE = {
    "audit_inputs": "z\ninputs:\n  cases: /tmp/secret.txt\n#",
    "audit_scheduler": "unet_small\nscheduler: tcp://203.0.113.5:8786\n#",
    "carriage_return": "a\rscheduler: tcp://203.0.113.5:8786\r#",
    "line_separator": "a\u2028scheduler: tcp://203.0.113.5:8786\u2028#",
    "next_line": "a\x85scheduler: tcp://203.0.113.5:8786\x85#",
    "paragraph_separator": "a\u2029scheduler: tcp://203.0.113.5:8786",
    "flow": "x\n{scheduler: tcp://203.0.113.5:8786, inputs: {cases: /etc/passwd}}\n",
    "anchor_alias": "x\n&a [1]\nscheduler: *a\n",
    "tag": "x\n!!python/object/apply:os.system [echo pwned]\n",
    "quotes_hash_colon": 'q"\'# not: a {f: [x]} &a *a !!python/object:os.system',
    "controls": "x\x00\x1b[31m\x7f\u202e\ufeff\tend",
    "document": "x\n---\nscheduler: tcp://203.0.113.5:8786\n...\n",
}
IDS = list(HOSTILE)
PAYLOADS = [HOSTILE[k] for k in IDS]
#: the payloads with a line break (the old code was safe from quotes_hash_colon in a
#: comment and in a JSON-quoted value; it is kept for the axis test, where it broke the formula)
BREAKING = [k for k in IDS if BREAKS.search(HOSTILE[k])]


def _table(n: int = 160, seed: int = 4) -> pd.DataFrame:
    """A user's table: one model, three sites, a few covariates (as tests/cli/test_plan_init)."""
    rng = np.random.default_rng(seed)
    label = (rng.random(n) < 0.45).astype(int)
    return pd.DataFrame({
        "case_id": [f"P{i:04d}" for i in range(n)], "model": "unet",
        "label": label, "score": np.where(label == 1, rng.gamma(3, 40, n), rng.gamma(1, 5, n)),
        "age": rng.uniform(20, 90, n).round(), "sex": rng.choice(["F", "M"], n),
        "phase": rng.choice(["arterial", "venous"], n),
        "tumor_size_mm": np.where(label == 1, rng.uniform(4, 60, n), np.nan),
        "site": rng.choice(["s1", "s2", "s3"], n),
    })


def _init(tmp_path, df: pd.DataFrame, name: str = "cases.parquet"):
    cases = tmp_path / name
    df.to_parquet(cases, index=False)
    out = tmp_path / "plan.yaml"
    res = runner.invoke(app, ["plan", "init", str(cases), "--out", str(out), "--threshold",
                              "50", "--force"])
    assert res.exit_code == 0, (res.output, res.exception)
    return res, out, cases


def _visible(text: str) -> str:
    """What a comment shows of ``text``: breaks and invisible characters as escapes."""
    def one(ch: str) -> str:
        if ch.isprintable():
            return ch
        short = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
        code = ord(ch)
        return short.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
                                 if code < 0x10000 else f"\\U{code:08x}")

    return "".join(map(one, text))


def _check_structure(out, cases) -> dict:
    """The plan loads (loader and plain YAML), has plan init's keys only, nothing an
    attacker chose: no scheduler, inputs exactly the table written, no anchors or tags;
    each physical line is a comment, indented, or one of the top-level keys."""
    text = out.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert list(data) == PLAN_KEYS
    assert data["inputs"] == {"cases": cases.name}
    assert "scheduler" not in data
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        assert not isinstance(event, yaml.AliasEvent)
        assert getattr(event, "anchor", None) is None and getattr(event, "tag", None) is None
    for line in BREAKS.split(text):
        assert (not line or line.startswith(("#", " "))
                or line.split(":")[0] in PLAN_KEYS), repr(line)
    plan = load_plan(out)
    assert plan.scheduler is None
    assert plan.inputs["cases"] == cases.resolve()
    return data


@pytest.mark.parametrize("name", [HOSTILE[k] for k in BREAKING], ids=BREAKING)
def test_hostile_unused_column_name_stays_in_its_comment(tmp_path, name):
    """The audit's first reproduction: a numeric column with many values is 'not used'."""
    df = _table().assign(**{name: np.arange(160) * 0.37})
    _, out, cases = _init(tmp_path, df)
    _check_structure(out, cases)
    text = out.read_text(encoding="utf-8")
    assert f"# column not used: {_visible(name.strip())} (numeric with 160 values" in text


@pytest.mark.parametrize("name", [HOSTILE[k] for k in BREAKING], ids=BREAKING)
def test_hostile_identifier_column_name_stays_in_its_comment(tmp_path, name):
    df = _table()
    df[name + "_mrn"] = "x" + df["case_id"]
    _, out, cases = _init(tmp_path, df)
    _check_structure(out, cases)
    assert f"# column {_visible(name)}_mrn looks like a direct identifier" in \
        out.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [HOSTILE[k] for k in BREAKING], ids=BREAKING)
def test_hostile_model_name_stays_in_the_header_comment(tmp_path, name):
    """The audit's second reproduction: the model name is listed in the header comment."""
    df = pd.concat([_table(), _table().assign(model=name)], ignore_index=True)
    res, out, cases = _init(tmp_path, df)
    _check_structure(out, cases)
    header = out.read_text(encoding="utf-8").splitlines()[1]
    # read_cases strips text values: the name as the analysis sees it
    assert header.endswith(f"model(s): unet, {_visible(name.strip())}; 3 site(s)).")


@pytest.mark.parametrize("name", PAYLOADS, ids=IDS)
def test_hostile_axis_name_is_a_value_that_reads_back(tmp_path, name):
    """A two-level text column is a subgroup axis: a YAML value, the same text back (in
    detection.subgroups and the prespecified summary); in the formula only if clinrel's
    formula grammar can quote it (then exactly that column), else left out, in a comment."""
    from stats.formula import parse_formula

    df = _table()
    df[name] = np.where(np.arange(160) % 2, "u", "v")
    res, out, cases = _init(tmp_path, df)
    data = _check_structure(out, cases)
    name = name.strip()  # read_cases strips column names
    assert name in data["detection"]["subgroups"]
    assert f"subgroup axes: phase, age_group, sex, size_group, site, {name}, " in \
        data["prespecified"][0]
    plan = load_plan(out)
    assert (name,) in plan.detection.subgroups
    columns = parse_formula(plan.detection.adjusted.formula).rhs_columns()
    assert columns[:4] == ["phase", "age_group", "sex", "size_group"]
    if len(columns) == 5:
        assert columns[4] == name
    else:
        assert f"# axis {_visible(name)} is left out of the adjusted model" in \
            out.read_text(encoding="utf-8")
    assert "\n" not in res.output.strip().split("\n  edit")[0]  # the summary: one line


def test_axis_name_with_spaces_is_quoted_in_the_formula(tmp_path):
    from stats.formula import parse_formula

    df = _table()
    df["tumor grade + 1"] = np.where(np.arange(160) % 2, "low", "high")
    _, out, cases = _init(tmp_path, df)
    _check_structure(out, cases)
    formula = load_plan(out).detection.adjusted.formula
    assert 'Q("tumor grade + 1")' in formula
    assert parse_formula(formula).rhs_columns()[-1] == "tumor grade + 1"


@pytest.mark.parametrize("name", [HOSTILE[k] for k in BREAKING], ids=BREAKING)
def test_hostile_file_name_in_title_inputs_and_header(tmp_path, name):
    """The table's file name: the header comment, the title and inputs.cases."""
    fname = "c" + name.replace("/", "_").replace("\x00", "_") + ".parquet"  # a legal name
    _, out, cases = _init(tmp_path, _table(), fname)
    data = _check_structure(out, cases)
    assert data["title"] == "Reliability appendix: " + cases.stem
    assert data["inputs"]["cases"] == fname
    header = out.read_text(encoding="utf-8").splitlines()[0]
    assert header.endswith(f" for {_visible(str(cases))}")


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_scalars_and_comments_hold_any_text(text):
    """Property: a value reads back as itself from any YAML position render_plan uses,
    and a comment holds the text on one line of printable characters."""
    from clinrel.cli.plan import _c, _y

    scalar = _y(text)
    assert not BREAKS.search(scalar)
    doc = f"k: {scalar}   # c\nl:\n  - {scalar}\nm: [{scalar}, {scalar}]\n"
    assert yaml.safe_load(doc) == {"k": text, "l": [text], "m": [text, text]}
    assert yaml.safe_load(f"a:\n  {scalar}: 1\n  {_y(text + 'x')}: 2\n") == \
        {"a": {text: 1, text + "x": 2}}
    comment = _c(text)
    assert comment.isprintable() and not BREAKS.search(comment)
    assert yaml.safe_load(f"a: 1 # {comment}\nb: 2\n") == {"a": 1, "b": 2}
