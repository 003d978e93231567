"""The labelled metadata corpus: generated report snippets and DICOM headers, plus the
hand-written hard cases, the fixed held-out split and the accuracy measurement.

``python tests/data/make_metadata_corpus.py`` rewrites ``metadata_corpus.jsonl`` (the
generated part; deterministic: the same bytes on every run) and
``metadata_corpus_accuracy.csv`` (per-field accuracy of both extractors on the tuning
and held-out parts). ``metadata_corpus_hard.jsonl`` is written by hand and never
regenerated. ``tests/runner/test_metadata_corpus.py`` checks that both written files are what
this script makes.

Records (one JSON object a line): ``id``, ``site``, ``kind`` (``text``; ``dicom``: a
header as a dict of keyword -> string; ``dicom_file``: a file pydicom ships, ``path``
relative to its ``test_files`` folder), the input (``text`` / ``header`` / ``path``) and the
labels ``age`` (years; months etc. as a fraction of a year), ``sex`` (F, M, O), ``phase``
(non_contrast, arterial, venous, delayed), ``race`` (:data:`inference_runner.metadata.race.RACE_VALUES`;
a record without it, as the hand-written ones, states none). A ``null`` label means the
input states no value: any extraction there is an error.

The held-out institutional styles of ``make_metadata_heldout.py`` are not part of this
corpus and nothing here reads them.

Conventions decided here: spelled-out ages ("seventy-two-year-old") count; ages in
months, weeks or days are years rounded to 2 decimals; "nephrographic" is venous,
"corticomedullary" arterial, "excretory"/"urographic" delayed; oral contrast says nothing
about the IV phase; a DICOM CT/MR header without ContrastBolusAgent is non_contrast unless its
SeriesDescription names a phase (the description wins); "contrast-enhanced" without a phase
is no phase.

Split (fixed rule, :func:`split_of`): generated sites E and F are held out; a hand-written
``hard-`` case is held out when the number in its id is odd. Rules and the classifier are
tuned or trained on the rest only. The ``blind-`` cases (site ``blind``) were written after
the rules were frozen, by the same author, and measured once without any tuning: a check
of how much writing both corpus and rules flatters the held-out figure.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "metadata_corpus.jsonl"
HARD = HERE / "metadata_corpus_hard.jsonl"
ACCURACY = HERE / "metadata_corpus_accuracy.csv"
FIELDS = ("age", "sex", "phase", "race")
HELD_OUT_SITES = frozenset({"E", "F"})
SPLITS = ("tuning", "held_out", "blind")
SITES = ("A", "B", "C", "D", "E", "F")
N_TEXT = 56  # generated report snippets per site
N_DICOM = 16  # generated headers per site

def generate() -> list[dict]:
    """Every generated record (deterministic). The phrase pools and site styles live in
    :mod:`inference_runner.metadata.synthetic` (the demo study uses them too)."""
    from inference_runner.metadata.synthetic import STYLES, random_header, random_labels

    records = []
    for site in SITES:
        rng = random.Random(f"clinrel-metadata-corpus-{site}")
        for i in range(N_TEXT):
            lab = random_labels(rng)
            records.append({"id": f"gen-{site}-{i:03d}", "site": site, "kind": "text",
                            "text": STYLES[site](rng, lab), **lab})
        for i in range(N_DICOM):
            header, lab = random_header(rng, site)
            records.append({"id": f"dcm-{site}-{i:03d}", "site": site, "kind": "dicom",
                            "header": header, **lab})
    return records


def dumps(records) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_corpus() -> list[dict]:
    """Generated part (as committed) plus the hand-written hard cases."""
    return read_jsonl(GENERATED) + read_jsonl(HARD)


def split_of(record: dict) -> str:
    """'tuning', 'held_out' or 'blind' by the fixed rule in the module docstring."""
    if record["site"] == "blind":
        return "blind"
    if record["site"] == "hard":
        return "held_out" if int(record["id"].rsplit("-", 1)[1]) % 2 else "tuning"
    return "held_out" if record["site"] in HELD_OUT_SITES else "tuning"


# ---------------------------------------------------------------- measurement
def dataset_of(record: dict):
    """A pydicom Dataset for a ``dicom`` record, the file's header for a ``dicom_file`` one."""
    import pydicom
    from pydicom.dataset import Dataset

    if record["kind"] == "dicom_file":
        folder = Path(pydicom.data.__file__).parent / "test_files"
        return pydicom.dcmread(str(folder / record["path"]), stop_before_pixels=True)
    ds = Dataset()
    for keyword, value in record["header"].items():
        setattr(ds, keyword, value)
    return ds


def rule_answers(record: dict) -> dict:
    """field -> evidence row of the rule-based extractors' answer for one record."""
    from inference_runner.metadata.dicom import extract_dataset
    from inference_runner.metadata.dicom import rule_answer as dicom_rule
    from inference_runner.metadata.text import extract_text
    from inference_runner.metadata.text import rule_answer as text_rule

    if record["kind"] == "text":
        return text_rule(extract_text(record["id"], record["text"], f"text:corpus#{record['id']}"))
    return dicom_rule(extract_dataset(dataset_of(record), record.get("path", record["id"]),
                                      dates="allow"))


def correct(label, row) -> bool:
    """A missing label wants no value; otherwise the value must equal the label."""
    if row is None:
        return label is None
    if label is None:
        return False
    try:
        return abs(float(row["value"]) - float(label)) < 1e-9
    except ValueError:
        return str(row["value"]) == str(label)


def measure(records, answers_by_extractor: dict) -> list[dict]:
    """Accuracy rows: extractor, kind, split, field, n, n_correct, accuracy.

    ``answers_by_extractor``: extractor name -> (kinds it covers, function record -> answers).
    """
    rows = []
    for name, (kinds, answer) in answers_by_extractor.items():
        got = {r["id"]: answer(r) for r in records if r["kind"] in kinds}
        for kind in sorted({"text" if r["kind"] == "text" else "dicom" for r in records
                            if r["kind"] in kinds}):
            for split in SPLITS:
                sub = [r for r in records if r["kind"] in kinds and split_of(r) == split
                       and ("text" if r["kind"] == "text" else "dicom") == kind]
                for field in FIELDS if sub else ():
                    ok = sum(correct(r.get(field), got[r["id"]].get(field)) for r in sub)
                    rows.append({"extractor": name, "kind": kind, "split": split, "field": field,
                                 "n": len(sub), "n_correct": ok, "accuracy": round(ok / len(sub), 4)})
    return rows


def accuracy_table(records=None, model=None) -> list[dict]:
    """Both extractors on the whole corpus; the classifier (``model``, by default trained
    on the tuning texts)."""
    from inference_runner.metadata.classifier import classifier_answers, train_classifier

    records = load_corpus() if records is None else records
    texts = [r for r in records if r["kind"] == "text"]
    if model is None:
        model = train_classifier([r for r in texts if split_of(r) == "tuning"])
    predicted = classifier_answers([r["text"] for r in texts], model)
    by_id = dict(zip((r["id"] for r in texts), predicted))
    return measure(records, {"rules": ({"text", "dicom", "dicom_file"}, rule_answers),
                             "text_classifier": ({"text"}, lambda r: by_id[r["id"]])})


def accuracy_csv(rows) -> str:
    cols = ("extractor", "kind", "split", "field", "n", "n_correct", "accuracy")
    return "".join(",".join(map(str, line)) + "\n"
                   for line in [cols, *([r[c] for c in cols] for r in rows)])


def main(argv: list[str]) -> int:
    GENERATED.write_text(dumps(generate()), encoding="utf-8")
    rows = accuracy_table()
    ACCURACY.write_text(accuracy_csv(rows), encoding="utf-8")
    sys.stdout.write(accuracy_csv(rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1]))
    raise SystemExit(main(sys.argv[1:]))
