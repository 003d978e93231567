"""End-to-end report: the demo study rendered once per session (module fixture), then the
outputs checked: files, headings in HTML and PDF, table/figure counts, numbers traceable
to tables/*.csv, determinism, escaping, privacy, CLI exit codes, a browser screenshot."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from reports import text
from analysis.plan import PlanError, load_plan
from reports.render import render_report
from analysis import load_tables

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"
#: a number as shown; not a bound ("<0.001", "< 0.001", "\u2264 0.02": no CSV value)
NUMBER = re.compile(r"(?<![\w.<>\u2264])(?<![<>\u2264] )-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "demo"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = render_report(DEMO / "plan.yaml", out, strict=True)  # no section may fail
    return out, result


@pytest.fixture(scope="module")
def pdf_text(demo):
    from pypdf import PdfReader

    reader = PdfReader(str(demo[0] / "appendix.pdf"))
    return " ".join(" ".join((p.extract_text() or "").split()) for p in reader.pages)


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _qmd_text(qmd: str) -> str:
    """The text a reader of the .qmd sees, one line per paragraph and per table cell
    (grid-table cells wrap over several source lines)."""
    import pypandoc

    out: list[str] = []

    def walk(node):
        if isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, dict):
            t = node.get("t")
            if t == "Str":
                out.append(node["c"])
            elif t in ("Space", "SoftBreak", "LineBreak"):
                out.append(" ")
            else:
                walk(node.get("c"))
                if t in ("Para", "Plain", "Header"):
                    out.append("\n")

    walk(json.loads(pypandoc.convert_text(qmd, "json", format="markdown"))["blocks"])
    return "".join(out)


def test_every_output_is_written(demo):
    out, result = demo
    for name in ("appendix.qmd", "appendix.html", "appendix.pdf", "appendix.docx",
                 "reference.docx", "manifest.json", "_quarto.yml"):
        assert (out / name).stat().st_size > 0, name
    man = json.loads((out / "manifest.json").read_text())
    assert man["plan"]["sha256"] == load_plan(DEMO / "plan.yaml").sha256
    assert set(man["inputs"]) >= {"cases", "runs", "reference"}
    assert all(len(v["sha256"]) == 64 for v in man["inputs"].values())
    assert man["seeds"]["crs_bootstrap"] == 7
    assert man["versions"]["numpy"] and man["versions"]["pandoc"]
    for t in man["tables"]:
        assert (out / t["csv"]).is_file()
    for f in man["figures"]:
        assert (out / f["png"]).stat().st_size > 5000 and (out / f["svg"]).is_file()
        assert (out / f["csv"]).is_file()
    assert not list(out.parent.glob(".demo.tmp-*")), "temporary folder left behind"


def test_skeleton_sections_are_present(demo):
    keys = {s.key for s in demo[1].sections}
    assert {"methods", "flow", "twobytwo", "overall", "subgroups", "forest", "checklist"} <= keys


def test_every_section_heading_in_html_and_pdf(demo, pdf_text):
    out, result = demo
    html = (out / "appendix.html").read_text(encoding="utf-8")
    for s in result.sections:
        assert re.search(rf'<h1[^>]*id="{s.id}"', html), s.id
        assert text.html(s.title) in html
        assert _squash(s.title) in pdf_text, s.title


def test_table_and_figure_counts_agree_everywhere(demo, pdf_text):
    out, result = demo
    man = json.loads((out / "manifest.json").read_text())
    qmd = (out / "appendix.qmd").read_text(encoding="utf-8")
    html = (out / "appendix.html").read_text(encoding="utf-8")
    n_tab, n_fig = len(result.tables), len(result.figures)
    assert n_tab == len(man["tables"]) >= 8 and n_fig == len(man["figures"]) >= 3
    # one grid table per table, its caption line carrying the id; no raw block at all
    assert len(re.findall(r"^: .+ \{#tbl-[\w-]+\}$", qmd, flags=re.M)) == n_tab
    assert not re.search(r"^`{3,}\{=", qmd, flags=re.M)
    assert len(re.findall(r"^!\[.+\]\(figures/[^)]+\.png\)\{#fig-[^ ]+ fig-alt=", qmd, flags=re.M)) == n_fig
    assert html.count('class="gt_table"') == n_tab
    imgs = re.findall(r"<img [^>]*src=\"data:image/png[^>]*>", html)
    assert len(imgs) == n_fig
    alts = [re.search(r'alt="([^"]*)"', i).group(1) for i in imgs]
    assert alts == [text.html(f.alt).replace("&#x27;", "'") for f in result.figures]
    assert f"Table {n_tab}:" in pdf_text and f"Table {n_tab + 1}:" not in pdf_text
    assert f"Figure {n_fig}:" in pdf_text and f"Figure {n_fig + 1}:" not in pdf_text


def test_docx_tables_equal_the_html(demo):
    """Every table of the demo: a Word table whose rows read as the HTML table's."""
    docx = pytest.importorskip("docx")
    from test_docx import _docx_tables, _html_tables

    out, result = demo
    word = _docx_tables(docx.Document(str(out / "appendix.docx")))
    html = _html_tables(out)
    assert len(word) == len(html) == len(result.tables)
    for t, w, h in zip(result.tables, word, html):
        assert w["rows"] == h["rows"], t.name


def test_qmd_is_quarto_markdown_with_resolved_crossrefs(demo):
    out, result = demo
    qmd = (out / "appendix.qmd").read_text(encoding="utf-8")
    assert qmd.startswith("---\n")
    header = yaml.safe_load(qmd.split("---\n")[1])
    assert header["title"] and "html" in header["format"] and "typst" in header["format"]
    ids = set(re.findall(r"\{#((?:tbl|fig|sec)-[\w-]+)", qmd))
    refs = set(re.findall(r"(?<!\\)@((?:tbl|fig|sec)-[\w-]*\w)", qmd))
    assert refs and refs <= ids, refs - ids
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", qmd), "timestamp in the qmd"
    html = (out / "appendix.html").read_text(encoding="utf-8")
    assert "@tbl-" not in html and "@fig-" not in html
    assert re.search(r'<a href="#tbl-[\w-]+">Table \d+</a>', html)


def test_qmd_parses_into_the_expected_pandoc_structure(demo):
    """Quarto reads .qmd with Pandoc: the tables must be Tables #tbl-* (grid tables, one
    source for every format), the figures Figures #fig-* with alt text, the sections
    Headers #sec-*, the cross-references citations; no raw HTML or typst block."""
    import pypandoc

    out, result = demo
    ast = json.loads(pypandoc.convert_file(str(out / "appendix.qmd"), "json", format="markdown"))
    found = {"Div": [], "Figure": [], "Header": [], "Cite": [], "RawBlock": [], "Table": []}

    def walk(node):
        if isinstance(node, dict):
            t = node.get("t")
            if t in ("Div", "Figure", "Table"):
                found[t].append(node["c"][0][0])
            elif t == "Header":
                found[t].append(node["c"][1][0])
            elif t == "Cite":
                found[t].extend(c["citationId"] for c in node["c"][0])
            elif t == "RawBlock":
                found[t].append(node["c"][0])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(ast["blocks"])
    assert sorted(found["Table"]) == sorted(t.id for t in result.tables)
    assert set(found["Div"]) <= {""}  # only the unnamed "Table Note" divs
    assert sorted(found["Figure"]) == sorted(f.id for f in result.figures)
    assert found["Header"] == [s.id for s in result.sections]
    assert set(found["Cite"]) <= set(found["Table"]) | set(found["Figure"]) | set(found["Header"])
    assert found["RawBlock"] == []


def _numbers_in(values) -> list[str]:
    return [tok for v in values for tok in NUMBER.findall(str(v))]


def test_numbers_shown_are_traceable_to_the_csv(demo):
    """Every number in a numeric display column equals a CSV value rounded as shown."""
    out, result = demo
    from reports.tables import _numeric

    checked = 0
    for t in result.tables:
        csv = pd.read_csv(out / "tables" / f"{t.name}.csv")
        vals = pd.to_numeric(csv.select_dtypes("number").to_numpy().ravel(), errors="coerce")
        vals = vals[np.isfinite(vals)]
        shown: dict[int, set] = {}
        for col in t.columns[1:]:  # the first column holds row labels ("<40", "40-59")
            if not _numeric(t.display[col]):
                continue
            for tok in _numbers_in(t.display[col]):
                if "e" in tok:  # scientific: 2 significant digits
                    hit = np.isclose(vals, float(tok), rtol=0.05).any()
                    assert hit, f"{t.name}.{col}: {tok} not in tables/{t.name}.csv"
                    continue
                dec = len(tok.split(".")[1]) if "." in tok else 0
                if dec not in shown:  # the CSV values formatted as reports.text does
                    shown[dec] = {f"{v:.{dec}f}" for v in vals} | {f"{-v:.{dec}f}" for v in vals}
                hit = tok in shown[dec] or tok.lstrip("-") in shown[dec]
                assert hit, f"{t.name}.{col}: {tok} not in tables/{t.name}.csv"
                checked += 1
    assert checked > 500


def test_each_subgroup_cell_is_its_own_csv_row(demo):
    """Cell by cell (not 'some CSV value'): every displayed "estimate [low, high]" and n/N of a
    subgroup table is the formatting of the CSV row of that model, level and estimand."""
    from reports import text

    out, result = demo
    checked, marks = 0, [0, 0]
    for t in result.tables:
        if not t.name.startswith("subgroup_"):
            continue
        csv = pd.read_csv(out / "tables" / f"{t.name}.csv", keep_default_na=False,
                          na_values=[""])
        csv["group_level"] = csv["group_level"].astype(str)
        idx = csv.set_index(["model", "group_level", "estimand"])
        for r in t.display.itertuples(index=False):
            level = str(r.level).replace(" \u00d7 ", ":")
            for est, shown, shown_n, num in (("sensitivity", r.sens, r.sens_n, "tp"),
                                              ("specificity", r.spec, r.spec_n, "tn")):
                row = idx.loc[(r.model, level, est)]
                den = row["n_pos"] if est == "sensitivity" else row["n_neg"]
                value = shown.replace(" \u2020", "").replace(" \u2021", "")
                assert value == text.ci(row["estimate"], row["conf_low"], row["conf_high"]), \
                    (t.name, r.model, level, est)
                if value != text.DASH:   # the marks: small n, design effect not estimable
                    marks[0] += (" \u2020" in shown)
                    marks[1] += (" \u2021" in shown)
                    assert (" \u2020" in shown) == (den < 10), (t.name, r.model, level, est)
                    assert (" \u2021" in shown) == ("deff_not_estimable" in str(row["flag"])), \
                        (t.name, r.model, level, est)
                assert shown_n == text.frac(row[num], den), (t.name, r.model, level, est)
                checked += 1
    assert checked > 100 and min(marks) > 0


def test_figure_tables_hold_the_plotted_estimates(demo):
    out, result = demo
    for f in result.figures:
        csv = pd.read_csv(out / "tables" / f"fig_{f.name}.csv")
        assert len(csv) == len(f.data)
        if "estimate" in f.data.columns:
            np.testing.assert_allclose(csv["estimate"], f.data["estimate"], rtol=1e-11)  # 12 digits


@pytest.mark.slow   # make test keeps byte-identity of two runs: tests/reports/test_determinism.py
def test_deterministic_qmd_and_tables(demo, tmp_path):
    out, _ = demo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_report(DEMO / "plan.yaml", tmp_path / "again", formats=(), draw=False)
    again = tmp_path / "again"
    assert (again / "appendix.qmd").read_bytes() == (out / "appendix.qmd").read_bytes()
    names = sorted(p.name for p in (out / "tables").glob("*.csv"))
    assert names == sorted(p.name for p in (again / "tables").glob("*.csv"))
    for name in names:
        assert (again / "tables" / name).read_bytes() == (out / "tables" / name).read_bytes(), name
    assert not (again / "appendix.html").exists()


# --------------------------------------------------------------------------- small studies


def test_a_plan_may_leave_out_the_detection_half(tmp_path):
    """A CRS-only plan, with frozen and adapted regimes."""
    from stats import simulate

    simulate.crs_runs(n_encoders=6, n_datasets=2, n_seeds=3, regimes=("frozen", "adapted"),
                      seed=3).data.to_parquet(tmp_path / "runs.parquet")
    (tmp_path / "reference.yaml").write_text("panel: [enc_01, enc_02, enc_03]\n")
    raw = yaml.safe_load((DEMO / "plan.yaml").read_text())
    raw.pop("detection")
    raw["inputs"].pop("cases")
    raw["inputs"].pop("probe_predictions", None)
    raw["inputs"].pop("metadata", None)  # not copied: the demo's metadata evidence table
    raw["inputs"].pop("lesions", None)  # not copied: the demo lesions table
    (raw.get("detection") or {}).pop("lesions", None)  # and the localization it feeds
    raw.pop("metadata", None)  # and its label-error block, which reads it
    raw["crs"]["bootstrap"]["n_boot"] = 200
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = render_report(tmp_path / "plan.yaml", tmp_path / "out", formats=(), draw=False)
    keys = [s.key for s in res.sections]
    assert keys[0] == "methods" and keys[-1] == "checklist" and {"crs", "calibration"} <= set(keys)
    assert set(keys) <= {"methods", "crs", "crs_domains", "crs_adaptation", "crs_mechanisms",
                         "calibration", "checklist"}, keys   # no detection section
    qmd = (tmp_path / "out" / "appendix.qmd").read_text()
    assert "Flow of cases" not in qmd and "Clinical Reliability Score" in qmd
    assert "**Detection.**" not in qmd
    scores = pd.read_csv(tmp_path / "out" / "tables" / "crs_scores.csv")
    assert set(scores["regime"]) == {"frozen", "adapted"}
    stab = pd.read_csv(tmp_path / "out" / "tables" / "crs_stability.csv")
    assert "frozen_vs_adapted" in set(stab["analysis"])

HOSTILE_SITE = 'S<b>&amp; "1" #2 $x @y *z* _w_ [a] $\\q$'
HOSTILE_MODEL = "m<1>&'q'"


def _small_study(folder: Path, *, detection_only=True, extra_cols=None, privacy=None) -> Path:
    from stats import simulate

    cases = simulate.benchx_cohort(240, n_models=2, n_sites=3, seed=3).data
    cases["site"] = cases["site"].astype(str).replace({"site_01": HOSTILE_SITE})
    cases["model"] = cases["model"].replace({"model_A": HOSTILE_MODEL})
    for k, v in (extra_cols or {}).items():
        cases[k] = v
    cases.to_csv(folder / "cases.csv", index=False)
    raw = {"version": 1, "title": "Escaping <test> & \"quotes\" #1 $5",
           "inputs": {"cases": "cases.csv"},
           "detection": {"threshold": {"value": 50}, "subgroups": ["site", "phase"]}}
    if privacy:
        raw["privacy"] = privacy
    p = folder / "plan.yaml"
    p.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return p


def test_user_strings_are_escaped_in_html_and_typst(tmp_path):
    from pypdf import PdfReader

    plan = _small_study(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_report(plan, tmp_path / "out",
                      only=("methods", "flow", "twobytwo", "subgroups", "forest"))
    html = (tmp_path / "out" / "appendix.html").read_text(encoding="utf-8")
    assert "S<b>" not in html and "m<1>" not in html
    assert "S&lt;b&gt;&amp;amp; &quot;1&quot; #2 $x @y *z* _w_ [a] $\\q$" in html
    assert re.search(r'<th class="gt_group_heading"[^>]*>m&lt;1&gt;&amp;&#(39|x27);q&#(39|x27);</th>', html)
    assert "Escaping &lt;test&gt; &amp;" in html
    pdf = " ".join((p.extract_text() or "") for p in PdfReader(str(tmp_path / "out" / "appendix.pdf")).pages)
    pdf = _squash(pdf)
    assert 'S<b>&amp; "1" #2 $x @y *z* _w_ [a] $\\q$' in pdf.replace("“", '"').replace("”", '"')
    assert "m<1>&" in pdf


@pytest.mark.parametrize("variant", ["youden", "no_split", "one_model"])
def test_other_study_shapes_render(tmp_path, variant):
    from stats import simulate

    cases = simulate.benchx_cohort(300, n_models=1 if variant == "one_model" else 2,
                                   n_sites=4, seed=5).data
    if variant == "no_split":
        cases = cases.drop(columns="split")
    cases.to_parquet(tmp_path / "cases.parquet", index=False)
    thr = {"criterion": "youden"} if variant == "youden" else {"value": 50}
    raw = {"version": 1, "title": variant, "inputs": {"cases": "cases.parquet"},
           "detection": {"threshold": thr, "subgroups": ["phase", ["age_group", "phase"]],
                         "failure_map": {"rows": "age_group", "cols": "phase"}}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = render_report(tmp_path / "plan.yaml", tmp_path / "out", formats=(), draw=False,
                            only=("methods", "flow", "twobytwo", "overall", "subgroups",
                                  "failure_map", "threshold", "comparisons", "calibration"))
    keys = {s.key for s in res.sections}
    assert {"methods", "flow", "twobytwo", "overall", "subgroups", "failure_map",
            "threshold"} <= keys, res.skipped
    acc = pd.read_csv(tmp_path / "out" / "tables" / "flow_accountability.csv")
    assert acc.loc[acc["disposition"] == "total", "rows"].item() == len(cases)
    assert acc.loc[acc["disposition"] != "total", "rows"].sum() == len(cases)
    qmd = (tmp_path / "out" / "appendix.qmd").read_text()
    if variant == "youden":
        assert "**exploratory**" in qmd
        assert "validation split: used to choose the threshold" in _qmd_text(qmd)
    if variant == "no_split":
        assert "no split column" in _qmd_text(qmd) and "calibration" not in keys
    if variant == "one_model":
        assert "comparisons" not in keys and not res.skipped


def test_calibration_with_probe_predictions(tmp_path):
    for name in ("cases.parquet", "runs.parquet", "reference.yaml"):
        shutil.copy(DEMO / name, tmp_path / name)
    rng = np.random.default_rng(1)
    rows = []
    for enc in ("enc_01", "enc_02"):
        for seed in (0, 1):
            y = rng.integers(0, 2, 150)
            p = np.clip(0.5 + (y - 0.5) * rng.uniform(0.1, 0.8, 150), 0.01, 0.99)
            rows.append(pd.DataFrame({"encoder": enc, "dataset": "d1", "label_fraction": 1.0,
                                      "condition": "clean", "severity": 0, "seed": seed,
                                      "case_id": [f"c{i}" for i in range(150)], "label": y,
                                      "prob": p}))
    pd.concat(rows).to_parquet(tmp_path / "probe_predictions.parquet")
    raw = yaml.safe_load((DEMO / "plan.yaml").read_text())
    raw["inputs"]["probe_predictions"] = "probe_predictions.parquet"
    raw["inputs"].pop("metadata", None)  # not copied: the demo's metadata evidence table
    raw["inputs"].pop("lesions", None)  # not copied: the demo lesions table
    (raw.get("detection") or {}).pop("lesions", None)  # and the localization it feeds
    raw.pop("metadata", None)  # and its label-error block, which reads it
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = render_report(tmp_path / "plan.yaml", tmp_path / "out", only=("calibration",),
                            formats=(), draw=False)
    summ = pd.read_csv(tmp_path / "out" / "tables" / "calibration_summary.csv")
    models = set(pd.read_parquet(DEMO / "cases.parquet")["model"])
    assert set(summ["unit"]) == models | {"enc_01", "enc_02"}
    probe = summ[summ["source"] == "encoder probe"]
    assert set(probe["stage"]) == {"before"} and probe["n"].eq(300).all()
    rel = pd.read_csv(tmp_path / "out" / "tables" / "fig_reliability.csv")
    assert set(rel.loc[rel["unit"] == "enc_01", "stage"]) == {"before"}
    assert res.tables[0].display.set_index("unit").loc["enc_01", "temperature"] == text.DASH


def test_metadata_provenance_section(tmp_path):
    plan_path = _small_study(tmp_path)
    cases = pd.read_csv(tmp_path / "cases.csv")
    ids = cases["case_id"].drop_duplicates().to_numpy()[:40]
    rng = np.random.default_rng(0)
    dicom = rng.choice(["venous", "arterial"], size=len(ids))
    report = np.where(rng.random(len(ids)) < 0.8, dicom, "delayed")
    rows = [{"case_id": c, "field": "phase", "value": v, "extractor": e,
             "evidence": f"{v} phase" if e == "report" else "(0018,0010)", "start": 0, "end": 5,
             "source": f"{c}.txt"}
            for e, vals in (("dicom", dicom), ("report", report)) for c, v in zip(ids, vals)]
    rows.append({"case_id": ids[0], "field": "phase", "value": "venous", "extractor": "review",
                 "evidence": "", "start": None, "end": None, "source": ""})
    pd.DataFrame(rows).to_csv(tmp_path / "metadata.csv", index=False)
    raw = yaml.safe_load(plan_path.read_text())
    raw["inputs"]["metadata"] = "metadata.csv"
    plan_path.write_text(yaml.safe_dump(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = render_report(plan_path, tmp_path / "out", only=("provenance",), formats=(),
                            draw=False)
    assert [s.key for s in res.sections] == ["provenance"]
    ag = pd.read_csv(tmp_path / "out" / "tables" / "metadata_agreement.csv")
    row = ag.iloc[0]
    agree = int((dicom == report).sum())
    assert row["n_both"] == len(ids) and row["n_agree"] == agree
    assert row["conf_low"] < agree / len(ids) < row["conf_high"] and row["reviewed"] == 1
    src = pd.read_csv(tmp_path / "out" / "tables" / "metadata_sources.csv")
    assert set(src["extractor"]) == {"dicom", "report", "review"}
    qmd = (tmp_path / "out" / "appendix.qmd").read_text()
    for shown in (qmd, _qmd_text(qmd)):  # the source and its text (cells wrap in the source)
        assert "(0018,0010)" not in shown and "phase.txt" not in shown


@pytest.mark.parametrize("raw", [HOSTILE_SITE, HOSTILE_MODEL, "a_b*c* [x](y) <!-- z --> `q`",
                                 "#1 @ref $5$ ~sub~ ^sup^ | pipe \\ back"])
def test_markdown_and_typst_escapers_round_trip(raw, tmp_path):
    import pypandoc
    import typst

    assert pypandoc.convert_text(text.md(raw), "plain", format="markdown").strip() == raw
    src = tmp_path / "t.typ"
    src.write_text(f"#set page(width: 30cm, height: auto)\n#text({text.typst_str(raw)})\n")
    typst.compile(str(src), output=str(tmp_path / "t.pdf"))
    from pypdf import PdfReader

    got = " ".join(PdfReader(str(tmp_path / "t.pdf")).pages[0].extract_text().split())
    assert got == " ".join(raw.split())


def test_identifier_patterns():
    from analysis.inputs import identifier_columns

    cols = ["name", "Patient_Name", "MRN", "birth_date", "DOB", "accession_number",
            "report_text", "free_text", "notes", "email",
            "site_name", "model_name", "scanner", "tumor_location", "case_id", "patient_id"]
    assert identifier_columns(cols) == cols[:10]


def test_identifier_columns_are_refused_unless_allowed(tmp_path):
    plan = _small_study(tmp_path, extra_cols={"patient_name": "x", "MRN": "123"})
    with pytest.raises(PlanError, match=r"'patient_name', 'MRN' look like direct identifiers.*allow_identifiers"):
        load_tables(load_plan(plan))
    plan = _small_study(tmp_path, extra_cols={"patient_name": "x"},
                        privacy={"allow_identifiers": True})
    assert "patient_name" in load_tables(load_plan(plan)).cases.columns


def test_ids_are_pseudonymized_with_the_salt(tmp_path):
    plan = _small_study(tmp_path, privacy={"pseudonymize_ids": True, "salt": "s1"})
    a = load_tables(load_plan(plan)).cases
    assert a["case_id"].str.match(r"^id-[0-9a-f]{12}$").all()
    assert not a["case_id"].str.startswith("C0").any()
    plan = _small_study(tmp_path, privacy={"pseudonymize_ids": True, "salt": "s2"})
    b = load_tables(load_plan(plan)).cases
    assert (a["case_id"] != b["case_id"]).all()
    assert a["case_id"].nunique() == b["case_id"].nunique()


def _cli(*args):
    # this checkout's code in this interpreter (an installed clinrel script may be another's)
    cmd = [sys.executable, "-c", "from clinrel.cli import main; main()"]
    return subprocess.run([*cmd, "report", *args], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])


def test_cli_bad_plan_exits_2_and_leaves_out_untouched(tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text("version: 1\ninputs: {cases: nope.csv}\ndetection: {}\n")
    r = _cli("--plan", str(bad), "--out", str(tmp_path / "new"), "--quiet")
    assert r.returncode == 2 and "inputs.cases" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "new").exists()
    old = tmp_path / "old"
    old.mkdir()
    (old / "keep.txt").write_text("x")
    r = _cli("--plan", str(bad), "--out", str(old), "--quiet")
    assert r.returncode == 2 and sorted(p.name for p in old.iterdir()) == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    r = _cli("--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "exactly one of --plan" in r.stderr


# --------------------------------------------------------------------------- browser

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.browser
def test_html_screenshot_is_not_blank(demo, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} missing: install Debian's chromium (make install does)")
    from PIL import Image

    shot = tmp_path / "shot.png"
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--screenshot={shot}",
                        "--window-size=1200,2000", (demo[0] / "appendix.html").as_uri()],
                       capture_output=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert shot.is_file(), "chromium wrote no screenshot"
    img = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert img.shape[0] >= 1000 and img.std() > 10
    dark = (img < 128).mean()
    assert 0.005 < dark < 0.5, f"screenshot looks blank or black ({dark:.3f} dark pixels)"


@pytest.mark.slow  # a whole report (about 45 s on 2 cores): make test-all
def test_a_failing_section_is_named_or_with_strict_stops_everything(tmp_path, monkeypatch):
    """Lenient (default): the failing section is left out and named (CLI, methods,
    manifest). Strict: nothing is written and the CLI exits 1."""
    from typer.testing import CliRunner

    from clinrel.cli import app
    from reports.sections import SectionFailed
    from reports.sections import overall as overall_section

    def broken(study):
        raise RuntimeError("boom in a statistic")

    monkeypatch.setattr(overall_section, "build", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = render_report(DEMO / "plan.yaml", tmp_path / "lenient", formats=(), draw=False,
                            only=("methods", "overall", "twobytwo"))
        assert [k for k, _, _ in res.skipped] == ["overall"]
        assert "failed with RuntimeError: boom" in res.skipped[0][2]
        man = json.loads((tmp_path / "lenient" / "manifest.json").read_text())
        assert man["skipped_sections"][0]["key"] == "overall"
        with pytest.raises(SectionFailed, match="boom in a statistic"):
            render_report(DEMO / "plan.yaml", tmp_path / "strict", formats=(), draw=False,
                          only=("methods", "overall", "twobytwo"), strict=True)
    assert not (tmp_path / "strict").exists()
    cli = CliRunner().invoke(app, ["report", "--demo", "--strict", "--quiet",
                                   "--out", str(tmp_path / "cli")])
    assert cli.exit_code == 1 and "boom in a statistic" in cli.output
    assert not (tmp_path / "cli").exists()


def test_small_cell_interval_options_reach_tables_and_methods(tmp_path):
    """detection.auc_scale: logit and detection.bootstrap.boot_ci: wilson flow into the
    metrics (method column), the methods text and the overall table's notes."""
    for name in ("cases.parquet", "runs.parquet", "reference.yaml"):
        shutil.copy(DEMO / name, tmp_path / name)
    raw = yaml.safe_load((DEMO / "plan.yaml").read_text())
    raw["inputs"].pop("probe_predictions", None)
    raw["inputs"].pop("metadata", None)  # not copied: the demo's metadata evidence table
    raw["inputs"].pop("lesions", None)  # not copied: the demo lesions table
    (raw.get("detection") or {}).pop("lesions", None)  # and the localization it feeds
    raw.pop("metadata", None)  # and its label-error block, which reads it
    raw["detection"]["auc_scale"] = "logit"
    raw["detection"]["ci"] = "wilson"
    raw["detection"]["bootstrap"]["boot_ci"] = "wilson"
    raw["detection"]["bootstrap"]["n_boot"] = 200
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        render_report(tmp_path / "plan.yaml", tmp_path / "out", only=("methods", "overall"),
                      formats=(), draw=False, strict=True)
    qmd = _squash((tmp_path / "out" / "appendix.qmd").read_text())
    assert "logit scale, back-transformed" in qmd
    assert "Wilson intervals at the effective sample size" in qmd
    overall = pd.read_csv(tmp_path / "out" / "tables" / "overall_metrics.csv")
    methods = overall.groupby("estimand")["method"].agg(set)
    # patients repeat in the demo: the AUC interval is clustered too (Obuchowski)
    assert methods["auc"] == {"delong-cluster-logit-t"}
    assert methods["sensitivity"] == {"wilson-cluster"}
    assert methods["f1"] == {"bootstrap-percentile"}  # F1 is no proportion: percentile
