"""inference_runner.metadata: evidence extraction from the real DICOM files pydicom ships
and from report texts; extractor agreement, review round trip, LLM extractor against a
local OpenAI-compatible server on 127.0.0.1."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pydicom = pytest.importorskip("pydicom")
pytest.importorskip("medspacy")  # report texts: each mention's context (runner extra)

from inference_runner.metadata import EVIDENCE_COLUMNS  # noqa: E402
from inference_runner.metadata.compare import agreement, disagreements, merge_reviewed, resolve  # noqa: E402
from inference_runner.metadata.extract import extract_paths  # noqa: E402

# never get_testdata_files('*'): it may try the network
TEST_FILES = Path(pydicom.data.__file__).parent / "test_files"

REPORTS = [
    ("r1", "CT abdomen, portal venous phase, 70 seconds after contrast injection. 63-year-old male. "
           "He has a 2 cm hypodense lesion."),
    ("r2", "Unenhanced CT without contrast. Age: 71. The patient is a woman; she reports pain."),
    ("r3", "Late arterial phase images acquired 30 s after bolus injection. 45 yo female, her liver is normal."),
    ("r4", "Delayed phase at 100 seconds after contrast. 58-year-old man. His history: none."),
    ("r5", "Non-contrast CT. Age 39. No focal lesion."),
]


@pytest.fixture(scope="module")
def dicom_table():
    table, info = extract_paths([TEST_FILES])
    return table


@pytest.fixture()
def reports_csv(tmp_path):
    p = tmp_path / "reports.csv"
    pd.DataFrame(REPORTS, columns=["case_id", "text"]).to_csv(p, index=False)
    return p


def _source_text(source: str) -> str:
    kind, rest = source.split(":", 1)
    path, key = rest.rsplit("#", 1)
    if kind == "dicom":
        return str(pydicom.dcmread(path, stop_before_pixels=True).get(key)).strip()
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    return df.set_index("case_id").loc[key, "text"]


def test_dicom_headers_give_values_with_verbatim_evidence(dicom_table):
    t = dicom_table
    assert tuple(t.columns) == EVIDENCE_COLUMNS
    assert len(t) > 50
    by = t.set_index(["source"])
    ct = t[t["source"].str.contains("CT_small.dcm")]
    got = dict(zip(ct["field"], ct["value"]))
    assert got["sex"] == "O" and got["age"] == "0" and got["contrast_agent"] == "ISOVUE300/100"
    assert got["manufacturer"] == "GE MEDICAL SYSTEMS" and got["kvp"] == "120"
    assert "phase" not in got  # contrast given but no timing: the header rule abstains
    ov = t[t["source"].str.contains("examples_overlay.dcm")]
    assert dict(zip(ov["field"], ov["value"]))["age"] == "58"
    plain = t[t["source"].str.contains("693_J2KI.dcm") & (t["field"] == "phase")]
    assert set(plain["value"]) == {"non_contrast"} and set(plain["extractor"]) == {"dicom_header", "dicom_description"}
    assert "Plain" in set(plain["evidence"])
    # every evidence string is the verbatim slice of its source
    for r in t.itertuples():
        assert _source_text(r.source)[r.start:r.end] == r.evidence, r
    assert len(by) == len(t)


def test_report_text_extractors_and_agreement(reports_csv):
    t, _ = extract_paths([reports_csv])
    for r in t.itertuples():
        assert _source_text(r.source)[r.start:r.end] == r.evidence
    res = resolve(t, prefer=("text_phase_regex", "text_age_yearold", "text_sex_noun"))
    val = {(c, f): v for c, f, v in zip(res["case_id"], res["field"], res["value"])}
    assert val[("r1", "phase")] == "venous" and val[("r2", "phase")] == "non_contrast"
    assert val[("r3", "phase")] == "arterial" and val[("r4", "phase")] == "delayed"
    assert val[("r1", "age")] == "63" and val[("r2", "age")] == "71" and val[("r5", "age")] == "39"
    assert val[("r1", "sex")] == "M" and val[("r2", "sex")] == "F" and val[("r3", "sex")] == "F"
    agree = agreement(t).set_index("field")
    ph = agree.loc["phase"]
    # the timing rule abstains on r5 ("Non-contrast" states no timing and no "without
    # contrast"); on r4 its 100 s says venous while the text says delayed
    assert ph["n_both"] == 4 and ph["n_agree"] == 3 and ph["agreement"] == pytest.approx(0.75)
    from sklearn.metrics import cohen_kappa_score

    a = ["venous", "non_contrast", "arterial", "delayed"]
    b = ["venous", "non_contrast", "arterial", "venous"]
    assert ph["kappa"] == pytest.approx(cohen_kappa_score(a, b))


def test_review_round_trip(reports_csv):
    t, _ = extract_paths([reports_csv])
    rev = disagreements(t)
    row = rev[(rev["case_id"] == "r4") & (rev["field"] == "phase")]
    assert len(row) == 1 and {row["value_a"].iloc[0], row["value_b"].iloc[0]} == {"delayed", "venous"}
    rev.loc[row.index, "reviewed_value"] = "delayed"
    merged = merge_reviewed(t, rev)
    r = merged[(merged["extractor"] == "review")]
    assert len(r) == 1 and r["value"].iloc[0] == "delayed" and r["evidence"].iloc[0] == "Delayed phase"
    out = resolve(merged, prefer=("text_contrast_timing",))
    assert out.set_index(["case_id", "field"]).loc[("r4", "phase"), "value"] == "delayed"
    # merging again replaces, never duplicates
    assert (merge_reviewed(merged, rev)["extractor"] == "review").sum() == 1


class _FakeLLM(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = body["messages"][0]["content"]
        items = [{"field": "phase", "value": "portal venous", "evidence": "portal venous phase"},
                 {"field": "age", "value": "63", "evidence": "sixty-three years"},  # not verbatim
                 {"field": "sex", "value": "M", "evidence": "male"}]
        if "portal venous" not in text:
            items = [{"field": "phase", "value": "arterial", "evidence": "made up"}]
        payload = {"choices": [{"message": {"content": "```json\n" + json.dumps(items) + "\n```"}}]}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_llm_extractor_counts_only_verbatim_evidence(reports_csv):
    server = HTTPServer(("127.0.0.1", 0), _FakeLLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        t, info = extract_paths([reports_csv], llm_url=url)
    finally:
        server.shutdown()
    llm = t[t["extractor"] == "llm"]
    assert set(zip(llm["case_id"], llm["field"], llm["value"])) == {("r1", "phase", "venous"), ("r1", "sex", "M")}
    assert info["llm_rejected"] == 1 + 4  # r1's paraphrased age, one invented phase per other report
    text = dict(REPORTS)["r1"]
    for r in llm.itertuples():
        assert text[r.start:r.end] == r.evidence


def test_cli_extract_writes_tables(tmp_path, reports_csv):
    from typer.testing import CliRunner

    from clinrel.cli import app

    out = tmp_path / "ev.csv"
    res = CliRunner().invoke(app, ["metadata", "extract", str(TEST_FILES / "CT_small.dcm"),
                                   str(TEST_FILES / "693_J2KI.dcm"), str(reports_csv), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    ev = pd.read_csv(out)
    assert {"CT_small.dcm" in s for s in ev["source"]} >= {True}
    assert (tmp_path / "ev_agreement.csv").exists() and (tmp_path / "ev_review.csv").exists()
    rev = pd.read_csv(tmp_path / "ev_review.csv", dtype=str, keep_default_na=False)
    rev.loc[(rev["case_id"] == "r4") & (rev["field"] == "phase"), "reviewed_value"] = "delayed"
    rev.to_csv(tmp_path / "filled.csv", index=False)
    res = CliRunner().invoke(app, ["metadata", "extract", str(reports_csv), "--out", str(out), "--force",
                                   "--reviewed", str(tmp_path / "filled.csv"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert (pd.read_csv(out)["extractor"] == "review").sum() == 1
    res = CliRunner().invoke(app, ["metadata", "extract", str(tmp_path / "nope"), "--out", str(out)])
    assert res.exit_code == 2 and "not found" in res.output


def test_text_without_phase_gives_no_phase():
    from inference_runner.metadata.text import extract_text

    rows = extract_text("x", "Liver appears normal. 50 year old.", "text:x#x")
    assert {r["field"] for r in rows} == {"age"}
    assert np.all([r["evidence"] == "Liver appears normal. 50 year old."[r["start"]:r["end"]] for r in rows])
