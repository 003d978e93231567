"""The demo's metadata (inference_runner/metadata/demo.py, clinrel/demo_data/metadata.parquet):
rebuilt from the committed cases it is the committed table; every span is verbatim in its
report text or header; the review queue is resolved to the truth; the sites write in their
styles; the demo plan reads the table and the provenance analyses show the institution-style
effect of the classifier."""
from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("pydicom")
pytest.importorskip("medspacy")  # report texts: each mention's context (runner extra)

from inference_runner.metadata import EVIDENCE_COLUMNS
from inference_runner.metadata import demo as md_demo

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"


@pytest.fixture(scope="module")
def built():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return md_demo.build(pd.read_parquet(DEMO / "cases.parquet"))


def test_committed_table_is_what_the_builder_makes_from_the_committed_cases(built):
    committed = pd.read_parquet(DEMO / "metadata.parquet")
    assert tuple(committed.columns) == EVIDENCE_COLUMNS
    pd.testing.assert_frame_equal(built.evidence, committed)
    cases = pd.read_parquet(DEMO / "cases.parquet")
    assert set(committed["case_id"]) <= set(cases["case_id"])
    assert committed["extractor"].isin([*md_demo.EXTRACTORS, "review"]).all()
    assert (DEMO / "metadata.parquet").stat().st_size < 200_000  # committed small


def test_every_span_is_verbatim_in_its_report_or_header(built):
    ev = built.evidence
    text = built.reports.set_index("case_id")["text"]
    spans = ev[ev["evidence"].str.len() > 0]
    for r in spans.itertuples():
        where, _, key = r.source.partition("#")
        if where.startswith("text:"):
            assert text[r.case_id][r.start:r.end] == r.evidence, r
        else:
            assert where == f"dicom:{md_demo.HEADER_FOLDER}/{r.case_id}.dcm", r
            assert built.headers[r.case_id][key][r.start:r.end] == r.evidence, r
    # the only spanless values: a phase derived from a header (no contrast agent: non-contrast;
    # the bolus timing, whose times are identifiers the table refuses) and reviews
    bare = ev[ev["evidence"].str.len() == 0]
    assert set(bare["extractor"]) <= {"dicom_rules", "review"}
    derived = bare[bare["extractor"] == "dicom_rules"]
    assert (derived["field"] == "phase").all()
    agent = derived["source"].str.endswith("#ContrastBolusAgent")
    assert (derived.loc[agent, "value"] == "non_contrast").all()
    assert derived.loc[~agent, "source"].str.endswith("#ContrastBolusStartTime").all()


def test_review_resolves_every_queued_value_to_the_truth(built):
    ev, truth = built.evidence, built.truth.set_index(["case_id", "field"])["value"]
    review = ev[ev["extractor"] == "review"].set_index(["case_id", "field"])["value"]
    assert review.index.is_unique
    assert (review == truth.loc[review.index]).all()
    answered = built.review[built.review["reviewed_value"] != ""]
    assert set(zip(answered["case_id"], answered["field"])) == set(review.index)
    # the reviewer answers a fixed share of the queue, by case: the rest stays unreviewed
    share = answered["case_id"].nunique() / built.review["case_id"].nunique()
    assert abs(share - md_demo.REVIEW_SHARE) < 0.1 and len(answered) < len(built.review)
    # the queue holds only extractors that both ran on the case
    ran = set(zip(ev["extractor"], ev["case_id"]))
    assert all((a, c) in ran and (b, c) in ran for a, b, c in
               zip(built.review["extractor_a"], built.review["extractor_b"],
                   built.review["case_id"]))


def test_sites_write_in_their_styles_with_fields_left_out_and_headers_for_part(built):
    rep = built.reports
    assert (rep["style"] == rep["site"].map(md_demo.SITE_STYLES)).all()
    structured = rep[rep["style"] == "C"]["text"]
    assert structured.str.contains("Indication: ").all() and structured.str.contains("\n").all()
    upper = rep[rep["style"] == "E"]["text"]
    assert (upper.str.upper() == upper).all()
    has_header = rep["case_id"].isin(list(built.headers))
    share = has_header.groupby(rep["site"]).mean()
    assert ((share > 0.15) & (share < 0.95)).all()
    ev = built.evidence
    text_rules = ev[ev["extractor"] == "text_rules"]
    per_field = text_rules.groupby("field")["case_id"].nunique()
    others = per_field.drop("race")
    assert (others < len(rep)).all() and (others > 0.8 * len(rep)).all()
    # race: stated less often, and never at site_07 (a site that does not record it)
    assert 0.4 * len(rep) < per_field["race"] < 0.9 * len(rep)
    race_cases = set(ev.loc[ev["field"] == "race", "case_id"])
    site07 = set(rep.loc[rep["site"] == "site_07", "case_id"])
    assert site07 and not race_cases & site07
    site01 = rep.loc[rep["site"] == "site_01", "case_id"]
    assert site01.isin(race_cases).mean() > 0.8
    headers_race = [h for h in built.headers.values() if "EthnicGroup" in h]
    assert headers_race and not any("EthnicGroup" in built.headers[c] for c in site07
                                    if c in built.headers)


def test_the_classifier_is_trained_on_other_reports_than_the_demo(built):
    from inference_runner.metadata.synthetic import labelled_reports

    train = labelled_reports(md_demo.TRAIN_STYLES, md_demo.N_TRAIN,
                             seed="clinrel-demo-classifier-0")
    assert {r["style"] for r in train} == set(md_demo.TRAIN_STYLES)
    assert not {r["text"] for r in train} & set(built.reports["text"])


def test_demo_plan_shows_provenance_and_institution_style_effect():
    from analysis import load_plan, load_tables, run

    plan = load_plan(DEMO / "plan.yaml")
    assert plan.metadata == DEMO / "metadata.parquet"
    assert plan.metadata_options.label_error == "estimate"
    names = ["metadata_coverage", "metadata_agreement", "metadata_site_test",
             "metadata_agreement_by_site", "metadata_review", "label_error_metrics"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run(plan, load_tables(plan), only=names, errors="raise")
    cov = r["metadata_coverage"]
    anyv = cov[cov["extractor"] == "any source"].set_index("field")["coverage"]
    assert set(anyv.index) == {"age", "sex", "race", "phase"}
    assert (anyv.drop("race") > 0.9).all() and (anyv < 1).all() and 0.5 < anyv["race"] < 0.9
    assert (r["metadata_review"]["not_reviewed"] > 0).any()  # half the queue stays unreviewed
    test = r["metadata_site_test"].set_index(["field", "extractor_a", "extractor_b"])
    assert test.loc[("sex", "text_classifier", "text_rules"), "p_value"] < 0.01
    by = r["metadata_agreement_by_site"]
    sex = by[(by["field"] == "sex") & (by["extractor_a"] == "text_classifier")]
    worst = set(sex.nsmallest(2, "estimate")["site"])
    assert worst == {"site_02", "site_07"}  # the two sites writing terse style B
    m = r["label_error_metrics"]
    assert {"phase", "sex", "age_group", "race"} <= set(m["group_var"])
    # race agreement per site (site_07 records none) with the clustered kappa and Rao-Scott
    race = by[by["field"] == "race"]
    assert len(race) and "site_07" not in set(race["site"]) and "site_01" in set(race["site"])
    ag = r["metadata_agreement"]
    assert (ag.loc[ag["field"] == "race", "kappa_method"] == "linearization-cluster-t").all()
    assert (test.loc["race", "method"] == "rao-scott-f").all()


def test_clinrel_demo_copies_the_metadata_and_its_plan_loads(tmp_path):
    from typer.testing import CliRunner

    from clinrel.cli import app
    from analysis import load_plan, load_tables

    out = tmp_path / "demo"
    res = CliRunner().invoke(app, ["demo", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert (out / "metadata.parquet").read_bytes() == (DEMO / "metadata.parquet").read_bytes()
    tables = load_tables(load_plan(out / "plan.yaml"))
    assert tables.metadata is not None and len(tables.metadata) > 0


def test_write_makes_the_table_and_the_inspection_files(tmp_path, built):
    cases = pd.read_parquet(DEMO / "cases.parquet")
    few = cases[cases["case_id"].isin(cases["case_id"].drop_duplicates().head(40))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = md_demo.write(few, tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {"metadata.parquet", "metadata_reports.csv", "metadata_review.csv",
                     "metadata_headers.jsonl"}
    ev = pd.read_parquet(tmp_path / "metadata.parquet")
    assert summary["metadata_rows"] == len(ev) and set(ev["case_id"]) <= set(few["case_id"])
    # per case and seed: the same texts as in the full build
    rep = pd.read_csv(tmp_path / "metadata_reports.csv", keep_default_na=False)
    full = built.reports.set_index("case_id")["text"]
    assert (rep["text"].to_numpy() == full.loc[rep["case_id"]].to_numpy()).all()


def _demo_label_error(per_patient=None, flip_sex_of_one_scan=False):
    """label_error_metrics of the demo plan, optionally with metadata.per_patient set and
    one scan's recorded sex changed (a patient whose two scans then disagree)."""
    import dataclasses

    from analysis import load_plan, load_tables, run

    plan = load_plan(DEMO / "plan.yaml")
    if per_patient is not None:
        spec = plan.spec.model_copy(update={"metadata": plan.spec.metadata.model_copy(
            update={"per_patient": tuple(per_patient)})})
        plan = dataclasses.replace(plan, spec=spec)
    tables = load_tables(plan)
    pid = None
    if flip_sex_of_one_scan:
        cases = tables.cases.copy()
        first = cases.drop_duplicates("case_id")
        n = first.groupby("patient_id")["case_id"].transform("size")
        row = first[(n > 1) & first["sex"].isin(["F", "M"])].iloc[0]
        pid = row["patient_id"]
        cases.loc[cases["case_id"] == row["case_id"], "sex"] = {"F": "M", "M": "F"}[row["sex"]]
        tables = dataclasses.replace(tables, cases=cases)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(plan, tables, only=["label_error_metrics"], errors="raise"), pid


def test_plan_declares_the_fields_recorded_once_per_patient():
    """metadata.per_patient: the declared fields are those drawn per patient (the demo's
    age group, race and sex: the same table as auto), the rule is recorded, and a patient whose
    scans then differ in sex is an error naming the patient (auto instead imputes sex
    scan by scan and says why in a note naming the plan key)."""
    from stats.schema import ContractError

    auto, _ = _demo_label_error()
    declared, _ = _demo_label_error(per_patient=["age_group", "race", "sex"])
    pd.testing.assert_frame_equal(auto["label_error_metrics"], declared["label_error_metrics"])
    assert declared.decisions["metadata.per_patient_rule"].startswith("declared in the plan")
    assert auto.decisions["metadata.per_patient_rule"].startswith("read from the data")
    assert declared.decisions["metadata.label_error_per_patient"] == ["age_group", "race", "sex"]
    flipped, pid = _demo_label_error(flip_sex_of_one_scan=True)
    assert flipped.decisions["metadata.label_error_per_patient"] == ["age_group", "race"]
    note = [n for n in flipped.notes if n.startswith("sex differs between the scans of 1 ")]
    assert note and "metadata.per_patient" in note[0], flipped.notes
    with pytest.raises(ContractError, match=f"declares 'sex'.*{pid} \\(cases "):
        _demo_label_error(per_patient=["age_group", "race", "sex"], flip_sex_of_one_scan=True)
