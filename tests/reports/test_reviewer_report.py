"""Issue 30: the report of a reviewer's own study, as a regulatory reviewer reads it.

The study is made by ``conftest.reviewer_cases`` (not clinrel's simulator): 2,412 scans
of 1,500 patients with 1-4 scans each, 5 sites with different phase mixes, 39% race
Unknown, 5% age missing, raw age, three models in an order that is not alphabetical,
ids with leading zeros; its plan is the one ``clinrel plan init`` writes (scanner moved to
the exploratory axes). The report is rendered once (PDF and Word) and read as a reviewer
reads it: figures from their SVG files (tick labels and positions per panel, order of
panels and legend entries), Table 1 and the flow of cases against a plain pandas
recount, the PDF page by page (pypdf text, pdftotext word boxes) and the Word file part
by part (python-docx). Each test names the defect of the issue it guards.
"""
from __future__ import annotations

import html
import itertools
import json
import re
import shutil
import subprocess
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REVIEWER_MODELS, REVIEWER_SITES, reviewer_study

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"
_TRANSLATE = re.compile(r"translate\(\s*([-\d.e]+)[ ,]+([-\d.e]+)\s*\)")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from reports.render import render_report

    folder = tmp_path_factory.mktemp("reviewer")
    plan = reviewer_study(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = render_report(plan, folder / "report", formats=("pdf", "docx"), strict=True,
                               jobs=2)
    return folder, result


# --------------------------------------------------------------------------- SVG reading

def _comment(el) -> str | None:
    for c in el.iter():
        if c.tag is ET.Comment:
            return html.unescape(c.text.strip())
    return None


def _text_xy(el):
    for c in el.iter(SVG + "g"):
        m = _TRANSLATE.search(c.get("transform", ""))
        if m:
            return float(m.group(1)), float(m.group(2))
    return None


def _tick_at(tick, axis: str):
    for u in tick.iter(SVG + "use"):
        if u.get(axis) is not None and not u.get(XLINK, "").startswith("#DejaVu"):
            return float(u.get(axis))
    return None


def read_svg(path: Path) -> tuple[list[dict], list[tuple[str, float, float]]]:
    """The panels of a figure as drawn: per axes, its x and y ticks as ``(label,
    position)`` and the texts drawn in it; and the texts drawn outside the panels (strip
    labels, axis titles, legend) as ``(text, x, y)``. matplotlib writes each text's string
    as an XML comment beside its glyphs, which is what is read here."""
    root = ET.parse(path, parser=ET.XMLParser(
        target=ET.TreeBuilder(insert_comments=True))).getroot()
    fig = root.find(f".//{SVG}g[@id='figure_1']")
    panels, outside = [], []
    for child in fig:
        if child.get("id", "").startswith("axes_"):
            p = {"x": [], "y": [], "texts": []}
            for g in child.iter(SVG + "g"):
                gid = g.get("id", "")
                for axis in ("x", "y"):
                    if gid.startswith(f"{axis}tick_"):
                        label, at = _comment(g), _tick_at(g, axis)
                        if label is not None and at is not None:
                            p[axis].append((label, at))
                if gid.startswith("text_") and _comment(g) is not None and _text_xy(g):
                    p["texts"].append((_comment(g), *_text_xy(g)))
            panels.append(p)
        else:
            for g in dict.fromkeys([child, *child.iter(SVG + "g")]):
                if g.get("id", "").startswith("text_") and _comment(g) and _text_xy(g):
                    outside.append((_comment(g), *_text_xy(g)))
    return panels, list(dict.fromkeys(outside))


def _svg(report, name):
    return read_svg(report[0] / "report" / "figures" / f"{name}.svg")


def _scale(ticks) -> tuple[float, float]:
    """``(slope, intercept)`` of position against value for numeric tick labels; asserts
    they lie on one straight line (a broken or relabelled axis does not)."""
    v = np.array([float(lab) for lab, _ in ticks])
    x = np.array([at for _, at in ticks])
    slope, icpt = np.polyfit(v, x, 1)
    assert np.allclose(v * slope + icpt, x, atol=0.05), ticks
    return float(slope), float(icpt)


def _value_ticks(panel) -> list:
    """The numeric axis of a panel (x in the flipped dot plots and forest plots)."""
    return [t for t in panel["x"] if re.fullmatch(r"-?\d+(\.\d+)?", t[0])]


def _legend(outside, title: str) -> list[str]:
    """Legend entries right of ``title`` on its line, left to right."""
    (_, tx, ty), = [t for t in outside if t[0] == title]
    return [lab for lab, x, y in sorted(outside, key=lambda t: t[1])
            if abs(y - ty) < 3 and x > tx]


def _strips(outside, names) -> list[str]:
    """Strip labels (panel titles) in reading order: by row, then left to right."""
    hits = [t for t in outside if t[0] in set(names)]
    return [lab for lab, _, _ in sorted(hits, key=lambda t: (round(t[2] / 20), t[1]))]


# --------------------------------------------------------------------------- item 1

def test_adjusted_vs_crude_panels_share_one_scale_with_readable_ticks(report):
    """Item 1: every model's panel has the same five ticks 0, 0.25, ..., 1 on one linear
    scale (the old free x-scales left one panel a lone tick '0' among 0.38-0.82)."""
    panels, _ = _svg(report, "adjusted_vs_crude")
    assert len(panels) == len(REVIEWER_MODELS)
    scales = []
    for p in panels:
        ticks = _value_ticks(p)
        assert [lab for lab, _ in ticks] == ["0", "0.25", "0.5", "0.75", "1"], ticks
        scales.append(_scale(ticks)[0])
    assert max(scales) - min(scales) < 0.05   # one scale: the same length per unit


def test_every_dot_plot_panel_has_three_ticks_on_a_shared_scale(report):
    """Item 1 for every faceted dot plot: at least three numeric ticks per panel, the
    same labels in every panel, one scale."""
    checked = 0
    for name in ("adjusted_vs_crude", "adjusted_site_effects", "model_comparisons"):
        path = report[0] / "report" / "figures" / f"{name}.svg"
        if not path.exists():
            continue
        panels, _ = read_svg(path)
        labels = {tuple(lab for lab, _ in _value_ticks(p)) for p in panels}
        assert len(labels) == 1 and len(next(iter(labels))) >= 3, (name, labels)
        slopes = [_scale(_value_ticks(p))[0] for p in panels]
        assert max(slopes) - min(slopes) < 0.05, name
        checked += 1
    assert checked == 3


# --------------------------------------------------------------------------- item 4

def test_forest_plots_are_one_figure_per_metric_on_one_scale(report):
    """Item 4: one figure per metric holds every model (no second figure at another
    scale), every panel the same ticks and length per unit; no row that cannot exist
    ("not applicable 0/0"); an Overall row below the others with its own counts and CI;
    a legend naming its three marks; exploratory axes in figures of their own, captioned
    exploratory."""
    folder, result = report
    names = [f.name for f in result.figures if f.name.startswith("forest_")]
    assert names == ["forest_sensitivity", "forest_specificity",
                     "forest_sensitivity_exploratory", "forest_specificity_exploratory"]
    figs = {f.name: f for f in result.figures}
    for name in names:
        panels, outside = _svg(report, name)
        assert _strips(outside, REVIEWER_MODELS) == list(REVIEWER_MODELS), name
        ticked = [p for p in panels if _value_ticks(p)]
        assert len(ticked) == len(panels) == len(REVIEWER_MODELS)   # every panel read alone
        slopes = [_scale(_value_ticks(p))[0] for p in ticked]
        assert max(slopes) - min(slopes) < 0.05, name
        for p in panels:
            assert [lab for lab, _ in _value_ticks(p)] == ["0", "0.25", "0.5", "0.75", "1"]
        rows = [p["y"] for p in panels if p["y"]]
        assert rows, name
        for ylabels in rows:
            labels = [lab for lab, _ in ylabels]
            assert not any("not applicable" in lab for lab in labels), name
            assert labels[-1] == "Overall"
            assert ylabels[-1][1] == max(at for _, at in ylabels)   # lowest row on the page
        assert _legend(outside, "Estimate [95% CI]:") == [
            "adequate n", "small n (\u2020)", "overall (all levels)"], name
        # the overall row's own texts: counts and "estimate [CI]" of each model's overall
        d = figs[name].data
        estimand = name.split("_")[1]
        m = pd.read_csv(folder / "report" / "results" / "subgroup_metrics.csv")
        ov = m[(m["estimand"] == estimand) & (m["group_var"] == "overall")]
        texts = {t for p in panels for t, _, _ in p["texts"]}
        for r in ov.itertuples():
            assert f"{int(r.numerator)}/{int(r.denominator)}" in texts, (name, r.model)
        assert not any(str(t).startswith("overall ") for t in texts)
        caption = figs[name].caption
        assert ("Exploratory" in caption) == name.endswith("_exploratory"), caption
        if name.endswith("_exploratory"):
            assert set(d["group_var"]) == {"scanner"}
    spec = figs["forest_specificity"].data
    assert "size_group" not in set(spec["group_var"])   # an attribute of positives only
    assert "not applicable" not in set(figs["forest_sensitivity"].data["group_level"])


def test_forest_text_columns_fit_inside_their_panels(report):
    """Item 4: the text columns of a forest plot (counts, "estimate [CI]" and their bold
    heads) are drawn inside their panel at the figure's size (the bold head "Estimate [95%
    CI]" ran past the panel's edge and lost its bracket)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    _, result = report
    checked = 0
    for f in (f for f in result.figures if f.name.startswith("forest_")):
        with matplotlib.rc_context({"text.parse_math": False}):
            fig = f.plot.draw()
            fig.set_size_inches(f.width, f.height)
            renderer = FigureCanvasAgg(fig).get_renderer()
            for ax in fig.axes:
                right = ax.get_window_extent(renderer).x1
                for t in ax.texts:
                    if t.get_text():
                        assert t.get_window_extent(renderer).x1 <= right + 0.5, (
                            f.name, t.get_text())
                        checked += 1
        plt.close(fig)
    assert checked > 100


# --------------------------------------------------------------------------- item 5

def test_one_model_order_in_every_figure_and_table(report):
    """Item 5: the cases table's model order (segresnet, nnunet, swin_unetr: not sorted)
    in every figure's panels or legend and every table's rows."""
    folder, result = report
    seen = 0
    for f in result.figures:
        panels, outside = _svg(report, f.name)
        strips = _strips(outside, REVIEWER_MODELS)
        if len(strips) > 1:
            assert strips == list(REVIEWER_MODELS), f.name
            seen += 1
        labels = [t[0] for t in outside]
        if "model" in labels:   # a legend titled model
            assert _legend(outside, "model") == list(REVIEWER_MODELS), f.name
            seen += 1
    assert seen >= 6
    tables = 0
    for t in result.tables:
        col = next((c for c in ("model",) if c in t.display.columns), None)
        if col is None:
            continue
        order = [m for m in dict.fromkeys(t.display[col].astype(str)) if m in REVIEWER_MODELS]
        assert order == list(REVIEWER_MODELS), t.name
        tables += 1
    assert tables >= 8


# --------------------------------------------------------------------------- item 2

def _pairwise_smd_categorical(groups: list[pd.Series]) -> float:
    """tableone's SMD for a categorical variable, written out independently: per pair
    the Mahalanobis distance of the level proportions (first level dropped) under the
    mean of the two multinomial covariances (numpy's pseudo-inverse, as MASS::ginv), the
    mean over pairs."""
    levels = sorted(set().union(*(set(g) for g in groups)))
    out = []
    for a, b in itertools.combinations(groups, 2):
        pa = np.array([(a == lv).mean() for lv in levels])[1:]
        pb = np.array([(b == lv).mean() for lv in levels])[1:]
        S = (np.diag(pa) - np.outer(pa, pa) + np.diag(pb) - np.outer(pb, pb)) / 2
        t = pa - pb
        out.append(float(np.sqrt(t @ np.linalg.pinv(S) @ t)))
    return float(np.mean(out))


def _pairwise_smd_continuous(groups: list[pd.Series]) -> float:
    out = [abs(a.mean() - b.mean()) / np.sqrt((a.var() + b.var()) / 2)
           for a, b in itertools.combinations([g.dropna() for g in groups], 2)]
    return float(np.mean(out))


def test_table1_counts_patients_and_scans_as_gtsummary_would(report):
    """Item 2: Table 1 by site gives patients (once each, characteristics of their first
    scan; positive with any positive scan) beside scans, as gtsummary's tbl_summary by
    site on one row per patient and one per scan, and an SMD column across sites (R
    tableone's definition), recounted here with pandas and numpy."""
    folder, result = report
    cases = pd.read_csv(folder / "cases.csv", dtype={"case_id": str, "patient_id": str})
    scans = cases.drop_duplicates("case_id")
    first = scans.drop_duplicates("patient_id")
    pos = scans.groupby("patient_id")["label"].max()
    data = pd.read_csv(folder / "report" / "tables" / "cohort_by_site.csv")

    def cell(unit, estimand, site, variable, level=""):
        gv = "overall" if site == "overall" else "site"
        row = data[(data["unit"] == unit) & (data["estimand"] == estimand)
                   & (data["group_var"] == gv) & (data["group_level"] == site)
                   & (data["variable"] == variable) & (data["level"].fillna("") == level)]
        assert len(row) == 1, (unit, estimand, site, variable, level)
        return float(row["estimate"].iloc[0])

    for site in ("overall", *REVIEWER_SITES):
        p = first if site == "overall" else first[first["site"] == site]
        s = scans if site == "overall" else scans[scans["site"] == site]
        assert cell("patients", "count", site, "units") == len(p)
        assert cell("scans", "count", site, "cases") == len(s)
        assert cell("patients", "count", site, "label", "1") == pos[p["patient_id"]].sum()
        assert cell("scans", "count", site, "label", "1") == s["label"].sum()
        for level, k in p["race"].value_counts().items():
            assert cell("patients", "count", site, "race", level) == k
        for level, k in s["race"].value_counts().items():
            assert cell("scans", "count", site, "race", level) == k
        assert cell("patients", "median", site, "age") == pytest.approx(p["age"].median())
        per = s.groupby("patient_id").size().clip(upper=4)
        for k in (1, 2, 3):
            assert cell("patients", "count", site, "rows_per_unit", str(k)) == (per == k).sum()
        assert cell("patients", "count", site, "rows_per_unit", "4+") == (per == 4).sum()
    by_site = [first[first["site"] == x] for x in REVIEWER_SITES]
    smd = data[(data["estimand"] == "smd")]
    got = {(r.unit, r.variable): r.estimate for r in smd.itertuples()}
    assert got[("patients", "race")] == pytest.approx(
        _pairwise_smd_categorical([g["race"] for g in by_site]), rel=1e-9)
    assert got[("patients", "sex")] == pytest.approx(
        _pairwise_smd_categorical([g["sex"] for g in by_site]), rel=1e-9)
    assert got[("patients", "age")] == pytest.approx(
        _pairwise_smd_continuous([g["age"] for g in by_site]), rel=1e-9)
    assert got[("scans", "phase")] == pytest.approx(_pairwise_smd_categorical(
        [scans.loc[scans["site"] == x, "phase"] for x in REVIEWER_SITES]), rel=1e-9)
    t1 = next(t for t in result.tables if t.name == "cohort_by_site")
    assert t1.label("p0") == f"Patients, N = {len(first)}"
    assert t1.label("s0") == f"Scans, N = {len(scans)}"
    assert [lab for lab, _ in t1.spanners] == ["Overall", *sorted(REVIEWER_SITES)]
    shown = " ".join(t1.display.astype(str).to_numpy().ravel())
    assert not re.search(r"\b[1-9]\d* \(0%\)", shown)      # "Other 1 (0%)" reads 1 (<1%)
    assert "(<1%)" in shown
    assert t1.display["smd"].replace("", np.nan).notna().sum() >= 6


# --------------------------------------------------------------------------- item 3

def test_flow_counts_patients_and_scans_at_every_step(report):
    """Item 3 (STARD 19): patients with and without a positive scan, scans per patient,
    exclusions in both units, in the table and the diagram, recounted with pandas."""
    folder, result = report
    cases = pd.read_csv(folder / "cases.csv", dtype={"case_id": str, "patient_id": str})
    scans = cases.drop_duplicates("case_id")
    pos = scans.groupby("patient_id")["label"].max()
    neg = scans.groupby("patient_id")["label"].min() == 0
    acc = pd.read_csv(folder / "report" / "tables" / "flow_accountability.csv")
    total = acc[acc["disposition"] == "total"].iloc[0]
    assert total["patients"] == scans["patient_id"].nunique() == 1500
    assert total["positive_patients"] == pos.sum()
    assert total["negative_patients"] == (pos == 0).sum()
    assert total["patients_with_negative"] == neg.sum()
    fig = next(f for f in result.figures if f.name == "flow_diagram")
    labels = " | ".join(fig.data["label"])
    per = scans.groupby("patient_id").size().clip(upper=4).value_counts().sort_index()
    want = ", ".join(f"{k if k < 4 else '4+'}: {n}" for k, n in per.items())
    assert f"scans per patient: {want}" in labels
    assert f"{int(pos.sum())} with a positive scan" in labels
    assert f"Reference positive: {int(scans['label'].sum())} scans of {int(pos.sum())} patients" \
        in labels
    assert "Excluded | 0 scans, 0 patients" in labels
    table = next(t for t in result.tables if t.name == "flow_accountability")
    assert [lab for lab, _ in table.spanners] == ["Scans", "Patients"]


# --------------------------------------------------------------------------- item 6

def _pdf_pages(folder) -> list[str]:
    from pypdf import PdfReader

    return [p.extract_text() for p in PdfReader(folder / "report" / "appendix.pdf").pages]


def test_long_tables_continue_with_their_label_and_notes_once_in_the_pdf(report):
    """Item 6 (PDF): a long table's continued page starts "Table N (continued)" and the
    model it continues, "(continued)"; its notes are printed once, not under every page
    nor under the next tables."""
    folder, result = report
    pages = _pdf_pages(folder)
    numbers = {t.name: i + 1 for i, t in enumerate(result.tables)}
    n = numbers["adjusted_odds_ratios"]
    cont = [p for p in pages if f"Table {n} (continued)" in p]
    assert cont, f"Table {n} never continues"
    for page in cont:
        lines = [ln.strip() for ln in page.splitlines() if ln.strip()]
        assert lines[0] == f"Table {n} (continued)"
        body = lines[1:8]
        assert any(ln.split(" (continued)")[0] in REVIEWER_MODELS for ln in body), body
    everything = "\n".join(pages)
    assert everything.count("Model: detected ~") == 1
    assert everything.count("Scans used: GLMM") == 1
    # every long table that breaks says so on each continued page
    long_tables = [t for t in result.tables if not t.keep]
    assert any(f"Table {numbers[t.name]} (continued)" in everything for t in long_tables)


def test_long_tables_continue_in_word_parts_with_their_label(report):
    """Item 6 (Word): a long table is cut into parts that Word keeps whole, each after the
    first captioned "Table N (continued)" and starting with its model; notes once, after
    the last part."""
    import docx
    from docx.oxml.ns import qn

    folder, result = report
    d = docx.Document(folder / "report" / "appendix.docx")
    numbers = {t.name: i + 1 for i, t in enumerate(result.tables)}
    n = numbers["adjusted_odds_ratios"]
    body = list(d.element.body.iterchildren())
    text = lambda el: "".join(t.text or "" for t in el.iter(qn("w:t")))  # noqa: E731
    caps = [i for i, el in enumerate(body) if el.tag == qn("w:p")
            and re.match(rf"Table {n}(\.| \(continued\))", text(el))]
    assert len(caps) >= 2, "the odds-ratio table of three models is cut into parts"
    assert text(body[caps[0]]).startswith(f"Table {n}. ")
    assert all(text(body[i]).startswith(f"Table {n} (continued)") for i in caps[1:])
    for i in caps:
        tbl = next(el for el in body[i:] if el.tag == qn("w:tbl"))
        rows = tbl.findall(qn("w:tr"))
        header = [r for r in rows if r.find(qn("w:trPr")) is not None
                  and r.find(qn("w:trPr")).find(qn("w:tblHeader")) is not None]
        first_body = text(rows[len(header)])
        assert first_body.split(" (continued)")[0] in REVIEWER_MODELS, first_body
        assert len(rows) - len(header) <= 25 + 1
    notes = [el for el in body if el.tag == qn("w:p") and "Model: detected ~" in text(el)]
    assert len(notes) == 1 and body.index(notes[0]) > caps[-1]


def _word_boxes(pdf: Path) -> list[tuple[float, float, list[float]]]:
    """``(width, height, [yMax of each word])`` per page (poppler's ``pdftotext -bbox``)."""
    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True,
                         text=True, check=True).stdout
    pages = []
    for m in re.finditer(r'<page width="([\d.]+)" height="([\d.]+)">(.*?)</page>', out, re.S):
        words = re.findall(r'<word xMin="[\d.]+" yMin="[\d.]+" xMax="[\d.]+" yMax="([\d.]+)">'
                           r'([^<]*)</word>', m.group(3))
        pages.append((float(m.group(1)), float(m.group(2)),
                      [float(y) for y, w in words]))
    return pages


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler's pdftotext needed")
def test_no_mostly_blank_page_before_a_landscape_table(report):
    """Item 6: the page before a landscape page is not left mostly blank (the reviewer
    found one 80% blank): only tables that cannot be read upright turn the page, and a
    section turns it at its heading. Each portrait page before a landscape one is filled
    to at least 40% of its height (its page number aside)."""
    folder, _ = report
    pages = _word_boxes(folder / "report" / "appendix.pdf")
    turned = [i for i, (w, h, _) in enumerate(pages) if w > h]
    assert turned, "the study's Table 1 (12 site columns) is set landscape"
    assert len(turned) <= 2
    for i in turned:
        w, h, ys = pages[i - 1]
        if w > h:
            continue
        body = sorted(ys)[:-1]   # the last word is the page number
        assert body and max(body) / h >= 0.40, (i, max(body) / h if body else 0)


# --------------------------------------------------------------------------- item 7, 10

def _qmd(folder) -> str:
    return (folder / "report" / "appendix.qmd").read_text(encoding="utf-8")


def test_written_before_the_analysis_is_the_authors_declaration(report):
    """Item 7: the report does not assert that the plan preceded the analysis; it states
    it as the plan author's declaration, with the plan's SHA-256 and the time the file
    records (its modification time and the date plan init wrote in it)."""
    folder, _ = report
    qmd = _qmd(folder)
    manifest = json.loads((folder / "report" / "manifest.json").read_text())
    assert "written before the analysis. Plan SHA-256" not in qmd
    assert "is the declaration of its author" in qmd
    assert manifest["plan"]["sha256"] in qmd
    assert f"file modified {manifest['plan']['modified_utc']}" in qmd
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", manifest["plan"]["modified_utc"])
    assert f"clinrel plan init wrote it on {manifest['plan']['plan_init_date']}" in qmd


def test_reading_this_report_names_the_primary_fit_from_the_design(report):
    """Item 10: with 5 sites the GEE's Mancl-DeRouen intervals are too wide to read; the
    primary model table follows from the design (5 sites, repeated patients: the
    site-fixed model with patient-clustered SEs), said with the reason in "Reading this
    report", marked in the odds-ratio table, used for the adjusted-vs-crude figure; no
    fixed advice to read the GEE columns."""
    folder, result = report
    qmd = _qmd(folder)
    manifest = json.loads((folder / "report" / "manifest.json").read_text())
    primary = manifest["decisions"]["adjusted.primary"]
    assert primary["fit"] == "fixed" and primary["n_groups"] == 5 and primary["repeated"]
    reading = next(p for p in qmd.split("\n\n") if p.startswith("**Reading this report.**"))
    assert "site-fixed model" in reading and "with 5 sites (fewer than 20)" in reading
    assert "\u201cGEE\u201d" in reading and "not for inference" in reading
    assert "read the GEE columns" not in qmd
    table = next(t for t in result.tables if t.name == "adjusted_odds_ratios")
    assert ("Fixed site (primary)", ["or_fixed", "p_fixed"]) in [
        (lab, list(c)) for lab, c in table.spanners]
    assert manifest["decisions"]["adjusted.means_fit"] == "fixed"


# --------------------------------------------------------------------------- item 9

INTEGER_COLUMNS = {"n", "n_pos", "n_neg", "tp", "fp", "fn", "tn", "rows", "cases", "patients",
                   "positives", "negatives", "positive_patients", "negative_patients",
                   "patients_with_negative", "patients_entirely", "nobs", "n_groups",
                   "n_used", "n_population", "n_excluded", "numerator", "denominator"}


def test_counts_are_whole_numbers_in_every_csv(report):
    """Item 9: counts are written as integers (``n = 888``, never ``888.0``)."""
    folder, _ = report
    checked = 0
    for path in sorted([*(folder / "report" / "tables").glob("*.csv"),
                        *(folder / "report" / "results").glob("*.csv")]):
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        for col in INTEGER_COLUMNS & set(df.columns):
            values = df[col][df[col] != ""]
            assert values.str.fullmatch(r"-?\d+").all(), (path.name, col, values.head())
            checked += 1
    assert checked > 40


def test_ids_with_leading_zeros_stay_text(report):
    import stats

    folder, _ = report
    cases = stats.read_cases(folder / "cases.csv")
    assert cases["case_id"].iloc[0] == "0000001" and cases["patient_id"].iloc[0] == "000001"
    assert cases["patient_id"].nunique() == 1500
