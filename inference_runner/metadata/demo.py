"""The demo study's metadata: report texts and headers for every demo case, two
extractors, a review queue resolved against the known truth, and the evidence table.

The demo knows each case's true age, sex, race and contrast phase (``cases.parquet``). From
them, with no network and no randomness outside this module:

1. **Report texts.** Every case gets a radiology report written in its site's style
   (:data:`SITE_STYLES`: the six styles of :mod:`.synthetic`, sites 07 and 08 sharing the
   styles of 02 and 05 as hospitals of one network would); each field is left out of the
   text with the site's probability (:data:`P_ABSENT`), race with its own
   (:data:`P_RACE_TEXT`: site_07 records no race at all), written as the site records it
   (:data:`RACE_RECORDED`).
2. **Headers.** A share of each site's cases (:data:`P_HEADER`) also has DICOM-like
   header values (``PatientAge``, ``PatientSex``, ``EthnicGroup`` with the site's
   probability :data:`P_RACE_HEADER`, ``SeriesDescription``, ``ContrastBolusAgent``;
   :func:`.synthetic.header_for`), with a few agents missing
   (:data:`P_AGENT_MISSING`: a header that reads as non-contrast on a contrast scan).
3. **Extractors.** ``text_rules`` (:func:`.text.extract_rules`, regular expressions),
   ``text_classifier`` (:mod:`.classifier`, character n-grams and logistic regression)
   trained on :data:`N_TRAIN` labelled reports per style of the styles of sites 01-04
   only (:data:`TRAIN_STYLES`, generated apart from the demo cases), so on sites 05-08 it
   meets styles it never saw; and ``dicom_rules`` (the rule answer of
   :func:`.dicom.extract_dataset`) where a header exists.
4. **Review.** Every case x field where two extractors that ran on the case differ, or
   only one of them answered (:func:`.compare.disagreements`), goes to the review queue; the demo's reviewer
   answers a fixed share of it (:data:`REVIEW_SHARE`, by case) with the truth, the rest stays
   unreviewed, and :func:`.compare.merge_reviewed` adds the ``review`` rows.

:func:`build` returns the evidence table (columns of the metadata evidence contract,
:data:`~inference_runner.metadata.EVIDENCE_COLUMNS`) with the texts, headers and queue;
:func:`write` writes ``metadata.parquet`` (and, for inspection, ``metadata_reports.csv``,
``metadata_headers.jsonl`` and ``metadata_review.csv``, which the demo does not commit;
their texts stay out of the package).
``clinrel demo --regenerate`` calls it after the networks; without them::

    python -m inference_runner.metadata.demo clinrel/demo_data   # or: make demo-metadata

rebuilds ``metadata.parquet`` from the committed ``cases.parquet`` (seconds, the same
table every time).
"""
from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import EVIDENCE_COLUMNS

FIELDS = ("age", "sex", "race", "phase")
SITE_STYLES = {"site_01": "A", "site_02": "B", "site_03": "C", "site_04": "D",
               "site_05": "E", "site_06": "F", "site_07": "B", "site_08": "E"}
#: probability that a report leaves a field out, by style
P_ABSENT = {"A": 0.06, "B": 0.15, "C": 0.04, "D": 0.10, "E": 0.08, "F": 0.15}
#: share of a site's cases with header values
P_HEADER = {"site_01": 0.8, "site_02": 0.7, "site_03": 0.75, "site_04": 0.6,
            "site_05": 0.5, "site_06": 0.4, "site_07": 0.3, "site_08": 0.35}
P_AGENT_MISSING = 0.04
#: probability that a report states the patient's race, by site: site_07 never records it
#: (nor does its headers' EthnicGroup); site_01 nearly always does
P_RACE_TEXT = {"site_01": 0.9, "site_02": 0.6, "site_03": 0.5, "site_04": 0.7,
               "site_05": 0.8, "site_06": 0.6, "site_07": 0.0, "site_08": 0.75}
#: probability that a header carries EthnicGroup, by site
P_RACE_HEADER = {"site_01": 0.9, "site_02": 0.5, "site_03": 0.3, "site_04": 0.6,
                 "site_05": 0.8, "site_06": 0.5, "site_07": 0.0, "site_08": 0.7}
#: how a site's records write a true race level (the extractors' vocabulary): "Other" is
#: sometimes recorded as Hispanic/Latino, "Unknown" sometimes as declined; the demo plan's
#: metadata.race_levels puts them back on the study's levels
RACE_RECORDED = {"White": ("White",), "Black": ("Black",), "Asian": ("Asian",),
                 "Other": ("Other", "Hispanic/Latino"), "Unknown": ("Unknown", "Declined")}
TRAIN_STYLES = ("A", "B", "C", "D")
N_TRAIN = 60
EXTRACTORS = ("dicom_rules", "text_classifier", "text_rules")
TEXT_SOURCE = "text:demo_reports"
HEADER_FOLDER = "demo_headers"
MSG_CASES = ("demo metadata: the cases table needs columns case_id, site, age, sex, race, phase "
             "(missing {missing}); give the demo's cases.parquet")
MSG_SITE = ("demo metadata: site(s) {sites} have no reporting style; the demo's sites are "
            "{known}")


@dataclass(frozen=True)
class DemoMetadata:
    """``evidence`` (the table the report reads), ``reports`` (case_id, site, style, text),
    ``headers`` ({case_id: header}), ``review`` (the queue with ``reviewed_value``) and
    ``truth`` (case_id, field, value)."""

    evidence: pd.DataFrame
    reports: pd.DataFrame
    headers: dict
    review: pd.DataFrame
    truth: pd.DataFrame


def truth_table(cases: pd.DataFrame) -> pd.DataFrame:
    """One row per case: ``case_id, site, age`` (whole years), ``sex``, ``race``, ``phase``."""
    missing = [c for c in ("case_id", "site", *FIELDS) if c not in cases.columns]
    if missing:
        raise ValueError(MSG_CASES.format(missing=", ".join(missing)))
    t = cases.drop_duplicates("case_id")[["case_id", "site", *FIELDS]].reset_index(drop=True)
    unknown = sorted(set(t["site"]) - set(SITE_STYLES))
    if unknown:
        raise ValueError(MSG_SITE.format(sites=", ".join(unknown), known=", ".join(SITE_STYLES)))
    t["age"] = t["age"].round().astype("int64")
    return t


def _value(field: str, v) -> str:
    """A truth value as the extractors write it (ages as whole years)."""
    return str(int(v)) if field == "age" else str(v)


def write_texts(truth: pd.DataFrame, *, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """Report texts (one per case) and headers (for part of the cases), deterministic per
    case and ``seed``."""
    from .synthetic import STYLES, header_for

    texts, styles, headers = [], [], {}
    for rec in truth.to_dict("records"):
        rng = random.Random(f"clinrel-demo-metadata-{seed}-{rec['case_id']}")
        style = SITE_STYLES[rec["site"]]
        lab = {f: (None if rng.random() < P_ABSENT[style] else
                   (int(rec[f]) if f == "age" else rec[f])) for f in ("age", "sex", "phase")}
        recorded = rng.choice(RACE_RECORDED[rec["race"]]) if pd.notna(rec["race"]) else None
        lab["race"] = recorded if rng.random() < P_RACE_TEXT[rec["site"]] else None
        texts.append(STYLES[style](rng, lab))
        styles.append(style)
        if rng.random() < P_HEADER[rec["site"]]:
            headers[rec["case_id"]] = header_for(
                rng, {**{f: rec[f] for f in ("age", "sex", "phase")}, "race": recorded},
                p_agent_missing=P_AGENT_MISSING, p_race=P_RACE_HEADER[rec["site"]])
    reports = pd.DataFrame({"case_id": truth["case_id"], "site": truth["site"],
                            "style": styles, "text": texts})
    return reports, headers


def _header_rows(headers: dict) -> list[dict]:
    """The DICOM rule answer per header and field (extractor ``dicom_rules``)."""
    import warnings

    from pydicom.dataset import Dataset

    from .dicom import extract_dataset, rule_answer

    rows = []
    for case_id, header in headers.items():
        ds = Dataset()
        with warnings.catch_warnings():  # lower-case 'f'/'m' sexes: non-conforming on purpose
            warnings.simplefilter("ignore", UserWarning)
            for keyword, value in header.items():
                setattr(ds, keyword, value)
        answer = rule_answer(extract_dataset(ds, f"{HEADER_FOLDER}/{case_id}.dcm"))
        rows += [{**answer[f], "extractor": "dicom_rules"} for f in FIELDS if f in answer]
    return rows


#: share of the review queue the demo's reviewer answers (the rest stays unreviewed)
REVIEW_SHARE = 0.5


def _queue(pairs: pd.DataFrame, evidence: pd.DataFrame) -> pd.DataFrame:
    """The review queue: the disagreements between two extractors that both ran on the
    case (gave a value for some field; a case without a header has no header extractor
    to disagree with)."""
    ran = set(zip(evidence["extractor"], evidence["case_id"]))
    both = [(a, c) in ran and (b, c) in ran
            for a, b, c in zip(pairs["extractor_a"], pairs["extractor_b"], pairs["case_id"])]
    return pairs[np.asarray(both, dtype=bool)].reset_index(drop=True)


def build(cases: pd.DataFrame, *, seed: int = 0) -> DemoMetadata:
    """The demo's metadata from its cases table (module docstring)."""
    from .classifier import extract_with_classifier, train_classifier
    from .compare import disagreements, merge_reviewed
    from .synthetic import labelled_reports
    from .text import extract_rules

    truth = truth_table(cases)
    reports, headers = write_texts(truth, seed=seed)
    model = train_classifier(labelled_reports(TRAIN_STYLES, N_TRAIN,
                                              seed=f"clinrel-demo-classifier-{seed}"))
    rows = (_header_rows(headers) + extract_rules(reports, source_prefix=TEXT_SOURCE)
            + extract_with_classifier(reports, model, source_prefix=TEXT_SOURCE))
    evidence = pd.DataFrame(rows, columns=list(EVIDENCE_COLUMNS))
    long_truth = truth.melt(id_vars="case_id", value_vars=list(FIELDS), var_name="field")
    long_truth["value"] = [_value(f, v) for f, v in zip(long_truth["field"], long_truth["value"])]
    queue = _queue(disagreements(evidence), evidence)
    answer = queue.merge(long_truth, on=["case_id", "field"], how="left")["value"].to_numpy()
    # the reviewer's time is limited: a fixed share of the queue (by case) is answered, the
    # rest stays unreviewed, so extraction error remains for the error-aware intervals
    reviewed = (pd.util.hash_array(queue["case_id"].astype(str).to_numpy()) % 100
                < round(100 * REVIEW_SHARE))
    queue["reviewed_value"] = np.where(reviewed, answer, "")
    evidence = merge_reviewed(evidence, queue, source="demo review (truth)")
    order = {e: i for i, e in enumerate((*EXTRACTORS, "review"))}
    evidence = (evidence.assign(_f=evidence["field"].map({f: i for i, f in enumerate(FIELDS)}),
                                _e=evidence["extractor"].map(order))
                .sort_values(["case_id", "_f", "_e"], kind="stable")
                .drop(columns=["_f", "_e"]).reset_index(drop=True))
    evidence["start"] = evidence["start"].astype("int64")
    evidence["end"] = evidence["end"].astype("int64")
    return DemoMetadata(evidence=evidence[list(EVIDENCE_COLUMNS)], reports=reports,
                        headers=headers, review=queue,
                        truth=long_truth.sort_values(["case_id", "field"]).reset_index(drop=True))


def write(cases: pd.DataFrame, out_dir, *, seed: int = 0, inspect: bool = True) -> dict:
    """Build the demo metadata and write ``metadata.parquet`` into ``out_dir`` (with
    ``inspect``, also the texts, headers and review queue); returns a summary."""
    from ..writers import write_parquet

    out = Path(out_dir)
    md = build(cases, seed=seed)
    write_parquet(md.evidence, out / "metadata.parquet")
    if not inspect:
        return _summary(md)
    md.reports.to_csv(out / "metadata_reports.csv", index=False)
    md.review.to_csv(out / "metadata_review.csv", index=False)
    (out / "metadata_headers.jsonl").write_text(
        "".join(json.dumps({"case_id": k, "header": v}, sort_keys=True) + "\n"
                for k, v in md.headers.items()), encoding="utf-8")
    return _summary(md)


def _summary(md: DemoMetadata) -> dict:
    return {"metadata_rows": len(md.evidence), "headers": len(md.headers),
            "reviewed": int((md.evidence["extractor"] == "review").sum())}


def main(argv: list[str]) -> int:
    """``python -m inference_runner.metadata.demo [DIR]``: rebuild DIR/metadata.parquet
    from DIR/cases.parquet (DIR defaults to the package's demo_data)."""
    folder = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"
    summary = write(pd.read_parquet(folder / "cases.parquet"), folder, inspect=False)
    print(f"[demo] metadata: {summary} -> {folder / 'metadata.parquet'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
