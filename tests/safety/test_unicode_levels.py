"""Ids and subgroup levels compared as Unicode text.

The rule (docs/contracts.md, "Text and files"): a value stored NFD ('Montre\\u0301al') and
its NFC form ('Montréal') are the same text by Unicode's canonical equivalence; they are
merged into the NFC form and the merge is recorded (the reader's attrs, ``clinrel
validate``, the commands' stderr, the report's flow of cases). Values that only look
alike (invisible characters, white space, Cyrillic or Greek letters drawn like Latin
ones) are different text: refused, naming the code points. Nothing is silent."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import stats
from clinrel.cli import app
from analysis.plan import load_plan
from stats.schema import ContractError

runner = CliRunner()
NFC, NFD = "Montr\u00e9al", "Montre\u0301al"


def cohort(n: int = 200, seed: int = 3) -> pd.DataFrame:
    return stats.simulate.benchx_cohort(n, n_models=2, n_sites=4, seed=seed).data


def with_sites(df: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """Sites site_01 and site_02 renamed ``first`` and ``second``."""
    df = df.copy()
    site = df["site"].astype(str).to_numpy(dtype=object)
    site[site == "site_01"] = first
    site[site == "site_02"] = second
    df["site"] = site
    return df


def message(fn, *args) -> str:
    with pytest.raises(ContractError) as info:
        fn(*args)
    return str(info.value)


# --------------------------------------------------------------------------- NFC merge


def test_an_nfd_site_is_one_level_with_its_nfc_spelling_and_the_merge_is_recorded(tmp_path):
    df = with_sites(cohort(), NFC, NFD)
    n_nfc, n_nfd = int((df["site"] == NFC).sum()), int((df["site"] == NFD).sum())
    assert n_nfc and n_nfd
    p = tmp_path / "cases.csv"
    df.to_csv(p, index=False)
    cases = stats.read_cases(p)
    assert (cases["site"] == NFC).sum() == n_nfc + n_nfd and not (cases["site"] == NFD).any()
    assert cases.attrs["text_merged"] == [{"table": "cases", "column": "site", "written": NFD,
                                           "nfc": NFC, "rows": n_nfd}]


def test_validate_and_subgroups_say_so_and_count_one_level(tmp_path):
    df = with_sites(cohort(), NFC, NFD)
    # test-split cases (two models) at the merged site
    n = int((df["site"].isin([NFC, NFD]) & (df["split"] == "test")).sum()) // 2
    p = tmp_path / "cases.csv"
    df.to_csv(p, index=False)
    res = runner.invoke(app, ["validate", str(p)])
    assert res.exit_code == 0, res.output
    assert "3 sites" in res.output
    assert r"written 'Montre\u0301al'" in res.output and "read as 'Montréal' (NFC)" in res.output
    out = tmp_path / "sub.csv"
    res = runner.invoke(app, ["subgroups", str(p), "--by", "site", "--threshold", "50",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert r"'Montre\u0301al'" in res.output                  # the note, on stderr
    table = pd.read_csv(out)
    rows = table[(table["group_var"] == "site") & (table["estimand"] == "sensitivity")]
    assert set(rows["group_level"]) == {NFC, "site_03", "site_04"}
    acc = table[(table["group_var"] == "site") & (table["estimand"] == "accuracy")]
    assert set(acc.loc[acc["group_level"] == NFC, "n"]) == {float(n)}


def test_the_flow_of_cases_records_the_merge(tmp_path):
    from analysis import load_tables, run

    df = with_sites(cohort(), NFC, NFD)
    df.to_csv(tmp_path / "cases.csv", index=False)
    raw = {"inputs": {"cases": "cases.csv"},
           "detection": {"threshold": {"value": 50}, "subgroups": ["site"]}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    plan = load_plan(tmp_path / "plan.yaml")
    res = run(plan, load_tables(plan), only=["row_flow"], errors="raise")
    assert res.decisions["cases.unicode_nfc"][0]["written"] == NFD
    assert any("Text normalised when read: cases column 'site'" in n for n in res.notes)

    from reports.sections import flow

    class Study:
        results = res
    notes = flow.normalised(Study())
    assert len(notes) == 1 and r"'Montre\u0301al'" in notes[0] and "'Montréal'" in notes[0]


def test_a_categorical_column_keeps_its_order_when_spellings_merge():
    df = cohort()
    phase = df["phase"].astype(str).replace({"venous": "ve\u0301nous", "arterial": "v\u00e9nous"})
    df["phase"] = pd.Categorical(phase, categories=["ve\u0301nous", "delayed", "v\u00e9nous",
                                                    "non_contrast"], ordered=True)
    out = stats.read_cases(df)
    assert list(out["phase"].cat.categories) == ["v\u00e9nous", "delayed", "non_contrast"]
    assert out["phase"].cat.ordered


def test_case_ids_in_nfd_pair_with_their_nfc_spelling():
    df = pd.DataFrame({"case_id": ["c1", "caf\u00e9", "c1", "cafe\u0301"],
                       "model": ["a", "a", "b", "b"], "label": [1, 0, 1, 0],
                       "score": [80.0, 10.0, 70.0, 5.0]})
    out = stats.read_cases(df)        # was refused as unpaired: two ids that print the same
    assert out["case_id"].nunique() == 2
    assert out.attrs["text_merged"][0]["column"] == "case_id"


# --------------------------------------------------------------------------- look-alikes


LOOKALIKES = [
    ("zero-width-space", NFC, NFC + "\u200b", "U+200B ZERO WIDTH SPACE", r"'Montr\xe9al\u200b'"),
    ("byte-order-mark", NFC, "\ufeff" + NFC, "U+FEFF ZERO WIDTH NO-BREAK SPACE", r"'\ufeffMontr"),
    ("bidi-mark", NFC, NFC + "\u200e", "U+200E LEFT-TO-RIGHT MARK", r"\u200e'"),
    ("cyrillic-o", NFC, "M\u043entr\u00e9al", "U+043E CYRILLIC SMALL LETTER O", r"'M\u043entr"),
    ("greek-omicron", NFC, "M\u03bfntr\u00e9al", "U+03BF GREEK SMALL LETTER OMICRON",
     r"'M\u03bfntr"),
    ("fullwidth", NFC, "\uff2dontr\u00e9al", "U+FF2D FULLWIDTH LATIN CAPITAL LETTER M",
     r"'\uff2dontr"),
    ("no-break-space", "St Mary", "St\u00a0Mary", "U+00A0 NO-BREAK SPACE", r"'St\xa0Mary'"),
    ("double-space", "St Mary", "St  Mary", "white space", "'St  Mary'"),
]


@pytest.mark.parametrize("kind, first, other, named, shown", LOOKALIKES,
                         ids=[c[0] for c in LOOKALIKES])
def test_levels_that_only_look_alike_are_refused_naming_the_code_points(kind, first, other,
                                                                          named, shown):
    msg = message(stats.read_cases, with_sites(cohort(), first, other))
    assert "column 'site' has values that look the same but are different text" in msg
    assert named in msg and shown in msg and "rows " in msg and "write each value one way" in msg


def test_trailing_white_space_in_a_level_is_refused(tmp_path):
    df = cohort()
    df["phase"] = df["phase"].astype(str)
    df.loc[df.index[:7], "phase"] = df.loc[df.index[:7], "phase"] + " "
    p = tmp_path / "cases.csv"
    df.to_csv(p, index=False)
    msg = message(stats.read_cases, p)
    assert msg.startswith(str(p)) and "column 'phase'" in msg and "U+0020 SPACE" in msg


def test_an_axis_outside_the_contract_is_checked_when_the_plan_runs(tmp_path):
    from analysis import load_tables

    df = cohort()
    df["hospital"] = ["St Mary" if i % 2 else "St M\u0430ry" for i in range(len(df))]
    df.to_csv(tmp_path / "cases.csv", index=False)
    assert len(stats.read_cases(tmp_path / "cases.csv")) == len(df)  # not an axis yet
    raw = {"inputs": {"cases": "cases.csv"},
           "detection": {"threshold": {"value": 50}, "subgroups": ["hospital"]}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    msg = message(load_tables, load_plan(tmp_path / "plan.yaml"))
    assert "column 'hospital'" in msg and "U+0430 CYRILLIC SMALL LETTER A" in msg


def test_runs_encoders_that_only_look_alike_are_refused():
    runs = stats.simulate.crs_runs(n_encoders=3, n_datasets=1, n_seeds=2, seed=1).data
    runs["encoder"] = runs["encoder"].astype(str).replace({"enc_02": "enc_01\u200b"})
    msg = message(stats.read_runs, runs)
    assert "column 'encoder'" in msg and "U+200B ZERO WIDTH SPACE" in msg


def test_plain_ascii_levels_are_left_as_they_are():
    df = cohort()
    out = stats.read_cases(df)
    assert out.attrs["text_merged"] == []
    assert list(out["phase"]) == list(df["phase"].astype(str)) or \
        list(out["phase"].astype(str)) == list(df["phase"].astype(str))


def test_the_rule_is_stated_in_the_contracts():
    text = (Path(__file__).resolve().parents[2] / "docs" / "contracts.md").read_text()
    assert "## Text and files" in text and "NFC" in text and "look alike" in text


def test_the_report_flow_section_notes_the_merge(tmp_path):
    import warnings

    from reports.render import render_report

    with_sites(cohort(), NFC, NFD).to_csv(tmp_path / "cases.csv", index=False)
    raw = {"inputs": {"cases": "cases.csv"},
           "detection": {"threshold": {"value": 50}, "subgroups": ["site"]}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = render_report(tmp_path / "plan.yaml", tmp_path / "out", formats=(), draw=False,
                            only=("methods", "flow"))
    assert "flow" in {s.key for s in res.sections}, res.skipped
    qmd = " ".join((tmp_path / "out" / "appendix.qmd").read_text(encoding="utf-8").split())
    assert "Text normalised when read: cases column" in qmd and "Montréal" in qmd
