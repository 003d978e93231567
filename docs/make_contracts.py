"""Write docs/contracts.md, the input table contracts, from stats/schema.py.

Which columns each table has, which are required and the allowed values come from the
constants the readers use (``stats.schema.CASES_REQUIRED``, ``SPLITS``, ``REGIMES``, ...,
``inference_runner.metadata.EVIDENCE_COLUMNS``); the meaning of each column is written
here. ``tests/test_docs.py`` fails when a column of those constants has no row here or when
docs/contracts.md is not what this script writes, so after changing a contract run

    python docs/make_contracts.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inference_runner.metadata import EVIDENCE_COLUMNS, PHASES  # noqa: E402
from stats import schema as S  # noqa: E402
from analysis.metadata import NEEDED as EVIDENCE_NEEDED  # noqa: E402
from analysis.plan import NOT_AXES  # noqa: E402

#: how text is compared (ids and subgroup levels), and what a file must be
TEXT_RULES = [
    "Ids and text columns (subgroup levels) are compared as Unicode text. A value stored "
    "decomposed (NFD, `'Montre\\u0301al'`: the accent stored apart) and its composed form "
    "(NFC, `'Montréal'`) are the same text by Unicode's canonical equivalence, and print "
    "the same: clinrel reads every value as NFC and records each rewrite, never silently "
    "(a note of `clinrel validate` and of the commands, and a note under the report's "
    "flow of cases: \"" + S.NOTE_NFC_MERGED.split(":")[0].replace("{table}", "cases")
    .replace("{column}", "site") + ": ... are read as ...\").",
    "Values that look alike but are different text are refused, naming both values as code "
    "points and the characters that differ: values differing only in invisible characters "
    "(zero-width space U+200B, byte-order mark U+FEFF, bidi marks, other format "
    "characters), in white space, or in letters of another script drawn like Latin ones "
    "(Cyrillic `а` U+0430 for `a`; NFKC compatibility forms such as fullwidth letters). "
    "Checked for the ids and the contract's text columns when a table is read, and for "
    "every column a plan names as an axis when the plan is run. They would print as one "
    "level and count as two.",
    "Column names that are not plain ASCII are shown as code points in messages (a second "
    "byte-order mark makes `'\\ufeffcase_id'`, which looks like `case_id`).",
    "An input must be a regular file (a folder, a FIFO or a device such as a link to "
    "/dev/zero is refused before it is opened), at most `limits.max_file_gb`, with at most "
    "`limits.max_columns` columns (a CSV's header line is read alone first) and "
    "`limits.max_rows` rows: docs/plan.md#caps. Dates and times in a numeric column "
    "(`score`, `label`, `age`, ... typed datetime in parquet) are refused, not read as "
    "nanoseconds.",
]


def _one_of(values) -> str:
    return ", ".join(f"`{v}`" for v in values)


#: column -> (type, allowed values, meaning), per table
CASES = {
    "case_id": ("text", "non-empty", "The scan (case). Its ids must be the same set for "
                "every model (paired design)."),
    "model": ("text", "non-empty", "The model that scored the case."),
    "label": ("0/1", "`0`, `1`", "Reference standard: 1 = tumour present. The same for "
              "every model of a case."),
    "score": ("number", ">= 0, finite", "Continuous model output, e.g. predicted tumour "
              "voxels or the maximum probability; `pred = score >= threshold`."),
    "site": ("text", "non-empty", "Site or cohort. Without the column the study is "
             f"single-site: every row gets the site `{S.IMPLICIT_SITE}` (stated by "
             "`clinrel validate` and `clinrel plan init`)."),
    "patient_id": ("text", "", "The patient (the bootstrap's cluster); defaults to "
                   "`case_id`. A patient sits in one site when the bootstrap is "
                   "stratified by site."),
    "pred": ("0/1", "`0`, `1`", "The model's own call; used as given with "
             "`detection.threshold.given: true`."),
    "split": ("text", _one_of(S.SPLITS), "Where a chosen threshold is fitted "
              "(validation) and analysed (test). The same for every model of a case."),
    "age": ("number (years)", "0 .. 130", "Age; bin it with `detection.bins.age`."),
    "sex": ("text", "any, e.g. `F`, `M`", "Sex (a subgroup axis)."),
    "race": ("text", "any; `Unknown` is a level", "Race or ethnicity (a subgroup axis; a "
             "complete-case fit is reported beside an adjusted model with Unknown)."),
    "phase": ("text", _one_of(PHASES) + " (any text accepted)",
              "Contrast phase (a subgroup axis)."),
    "scanner": ("text", "any", "Scanner model or vendor (a subgroup axis)."),
    "tumor_size_mm": ("number (mm)", "0 .. 1000; empty for negatives",
                      "Tumour size; bin it with `detection.bins.tumor_size_mm`."),
    "tumor_location": ("text", "any; empty for negatives", "Tumour location (a subgroup "
                       "axis)."),
}
RUNS = {
    "encoder": ("text", "non-empty", "The frozen encoder."),
    "dataset": ("text", "non-empty", "The dataset the probe was trained and tested on."),
    "label_fraction": ("number", "(0, 1]", "Share of the training labels used (1 = all; "
                       "write 0.1, not 10)."),
    "condition": ("text", "`clean`, a perturbation name, or `shift`", "Test condition "
                  "(lower-cased when read)."),
    "severity": ("whole number", ">= 0 (0 for clean and shift; 1-3 for perturbations)",
                 "Perturbation severity."),
    "seed": ("whole number", "|seed| <= 2**53", "Training seed; the paired-seed bootstrap "
             "resamples seeds."),
    "auroc": ("number", "0 .. 1", "AUROC of the run."),
    "ece": ("number", "0 .. 1", "Expected calibration error (15 equal-width bins)."),
    "regime": ("text", _one_of(S.REGIMES) + "; default `frozen`", "Frozen encoder or "
               "adapted (fine-tuned)."),
    "brier": ("number", "0 .. 1", "Brier score."),
    "nll": ("number", "", "Negative log-likelihood."),
    "ece_after_ts": ("number", "0 .. 1", "ECE after temperature scaling."),
    "layer": ("any", "read as text", "Encoder layer the features came from (e.g. `mid`, "
              "`last`); part of the run key: an encoder may have runs at several layers, "
              "analysed by layer (feature depth), and the CRS ranking uses one layer per "
              "encoder (the plan's `crs.layer_policy`)."),
    "protocol": ("text", _one_of(S.PROTOCOLS), "How the run was made: a linear probe on "
                 "frozen features, a prompt (zero-shot), or LoRA adapters on the encoder; "
                 "part of the run key; implies the regime (`lora`: adapted, the others: "
                 "frozen), and a `regime` column given beside it must agree."),
    "val_auroc": ("number", "0 .. 1", "AUROC on a validation split of the training data "
                  "(the criterion that chooses an encoder's best layer)."),
}
PROBE = {
    **{k: RUNS[k] for k in S.RUNS_KEY},
    "case_id": ("text", "non-empty", "The case the probability is for."),
    "label": ("0/1", "`0`, `1`", "The case's label."),
    "prob": ("number", "0 .. 1", "The probe's probability of label 1 (binary probes; a "
             "multiclass probe has `prob_<class>` columns instead)."),
    "prob_<class>": ("number", "0 .. 1; a row sums to 1 (within 1e-6)", "Multiclass probes: "
                     "one column per class (at least 2), `label` then names the class; "
                     "macro one-vs-rest AUROC and top-label ECE are recomputed from them "
                     "(`stats.probe_metrics`)."),
    "regime": RUNS["regime"],
    "protocol": RUNS["protocol"],
    "layer": RUNS["layer"],
    "split": ("text", _one_of(S.PROBE_SPLITS), "Probe split (temperature scaling is "
              "fitted on calibration)."),
}
PROBE_OPTIONAL = ("regime", "protocol", "layer", "split", "prob_<class>")
EVIDENCE = {
    "case_id": ("text", "", "The case the value is about."),
    "field": ("text", "`phase`, `age`, `sex`, `race`, `contrast_agent`, `manufacturer`, `scanner`, "
              "`slice_thickness_mm`, `kvp`, `study_date`, `modality`, "
              "`series_description`", "What was extracted."),
    "value": ("text", f"phase: {_one_of(PHASES)}; sex: `F`, `M`, `O`; age: years; race: "
              "`Black`, `White`, `Asian`, `Hispanic/Latino`, `American Indian/Alaska Native`, "
              "`Native Hawaiian/Pacific Islander`, `Other`, `Declined`, `Unknown` (the "
              "study's levels: plan key `metadata.race_levels`)", "The extracted value."),
    "extractor": ("text", "e.g. `dicom_rules`, `dicom_description`, `text_rules`, "
                  "`text_classifier`, `llm`, `review`", "Who extracted it; `review` rows "
                  "are human decisions, not an extractor."),
    "evidence": ("text", "", "The verbatim substring of the source the value was read "
                 "from (never copied into a report table)."),
    "start": ("whole number", ">= 0", "Offset of `evidence` in the source text."),
    "end": ("whole number", "> start", "End offset (exclusive)."),
    "source": ("text", "`dicom:<file>#<Keyword>` or `text:<file>#<case_id>`",
               "Where the evidence is."),
    "context": ("text", "`asserted`, `negated`, `historical`, `hypothetical`, `family`",
                "The mention's clinical context (medspaCy's ConText): only `asserted` rows "
                "are values; the others are mentions kept as evidence (a table without the "
                "column: every row asserted)."),
}

LESIONS = {
    "case_id": ("text", "non-empty", "The scan; lesions of cases the analysis does not "
                "evaluate (the validation split) are left out and counted."),
    "model": ("text", "non-empty", "The model whose prediction the row is (reference rows: "
              "repeated for every model)."),
    "lesion_id": ("text", "non-empty", "The lesion within its case and kind (the runner: "
                  "`r1, r2, ...` and `p1, p2, ...` in raster order)."),
    "kind": ("text", _one_of(S.LESION_KINDS), "A reference lesion (a connected component of "
             "the reference mask) or a predicted lesion (a component of the model's mask)."),
    "score": ("number", "finite; required for predictions", "A predicted lesion's confidence: "
              "the runner writes the maximum tumour probability inside the component; the "
              "FROC thresholds it. Empty for references."),
    "volume_mm3": ("number", ">= 0", "Volume (voxels x voxel volume); a reference lesion's "
                   "size bin (`lesion_size`) is that of the sphere of this volume."),
    "centroid_i_mm": ("number", "", "Centroid in mm along the image array's first spatial "
                      "axis (from the first voxel's centre)."),
    "centroid_j_mm": ("number", "", "... second spatial axis."),
    "centroid_k_mm": ("number", "", "... third spatial axis."),
    "matched": ("text", "a reference `lesion_id` of the same model and case, or empty",
                "A prediction: the reference lesion the hit rule credits it with (empty: a "
                "false positive). A reference lesion: the prediction credited to it (filled "
                "in when empty)."),
    "duplicate_of": ("text", "a matched reference `lesion_id`, or empty", "A prediction that "
                     "hits only reference lesions already matched: neither a hit nor a false "
                     "positive (LUNA16, MONAI's FROC)."),
    "dice": ("number", "0 .. 1", "Dice overlap of the matched pair (the Dice of detected "
             "lesions)."),
    "iou": ("number", "0 .. 1", "Intersection over union of the matched pair."),
    "diameter_mm": ("number", ">= 0", "A reference lesion's diameter, when known (else the "
                    "equivalent-sphere diameter of `volume_mm3`)."),
    "location": ("text", "any", "A reference lesion's location (the `lesion_location` "
                 "axis)."),
    "hit_rule": ("text", "`iou>=x`, `dice>=x` or `centroid`; one value", "The rule the "
                 "matching used; it must be the plan's `detection.lesions` rule."),
}

RULES = {
    "cases": [
        "One row per model x case: a (`model`, `case_id`) pair appears once.",
        "Paired design: every model has a row for every case; a mismatch names the missing "
        "case ids.",
        "`label` (and `split`) are the same in every model's row of a case.",
        "Any other column can be named as a subgroup axis (`detection.subgroups`, `--by`), "
        "except what does not group cases: "
        + ", ".join(f"`{c}`" for c in NOT_AXES) + " (refused, with the fix: bin the score to "
        "study ranges of it). An intersection crosses different columns (`phase:phase` is "
        "refused).",
    ],
    "runs": [
        "One row per (regime, [protocol], [layer], encoder, dataset, label_fraction, "
        "condition, severity, seed).",
        "Every encoder x dataset has a `clean` run at `label_fraction` 1 (the discrimination "
        "and calibration axes are read there).",
    ],
    "probe_predictions": [
        "One row per (regime, [protocol], [layer], run key, case_id); runs can be recomputed "
        "from it with CIs (`stats.probe_metrics`).",
    ],
    "lesions": [
        "One row per (model, case_id, kind, lesion_id); every model lists the same "
        "reference lesions (one reference standard).",
        "Each reference lesion is matched at most once (`matched`); the runner matches "
        "greedily by score (then overlap), so the matches among the predictions scoring at "
        "least t are the same for every t and one table serves the whole FROC.",
        "A case with label 1 in the cases table has at least one reference lesion, a case "
        "with label 0 none.",
        "Written by `clinrel infer segment` when the cases CSV has a `reference` mask column, "
        "and by the demo's networks; tables from other tools (nnDetection, MONAI detection) "
        "can be given directly.",
    ],
    "metadata evidence": [
        "Written by `clinrel metadata extract`; the report needs "
        + ", ".join(f"`{c}`" for c in EVIDENCE_NEEDED) + ".",
    ],
}

TABLES = (
    ("cases", "cases", "per-case predictions: one row per model x case", CASES,
     S.CASES_REQUIRED, "`stats.read_cases`, `clinrel validate`"),
    ("runs", "runs", "per-run probe outputs: one row per encoder x dataset x "
     "label_fraction x condition x severity x seed", RUNS, S.RUNS_REQUIRED,
     "`stats.read_runs`, `clinrel validate`"),
    ("probe_predictions", "probe-predictions", "per-case probe probabilities (optional)",
     PROBE, S.PROBE_REQUIRED, "`stats.schema.read_probe_predictions`"),
    ("lesions", "lesions", "one row per reference lesion and per predicted lesion, per model "
     "and case (optional)", LESIONS, S.LESIONS_REQUIRED,
     "`stats.read_lesions`, `stats.froc`, `stats.lesion_metrics`"),
    ("metadata evidence", "metadata-evidence", "metadata extracted with evidence",
     EVIDENCE, EVIDENCE_COLUMNS, "the report's metadata section (`clinrel metadata extract` "
     "writes it)"),
)


def render() -> str:
    lines = [
        "<!-- Generated by docs/make_contracts.py from stats/schema.py; do not edit by hand. -->",
        "# Table contracts",
        "",
        "clinrel reads long tables: one row per unit, snake_case column names, CSV (UTF-8, "
        "comma-separated, header row), TSV or parquet. A table that breaks its contract is "
        "refused with a message naming the file, the column, up to five rows (1-based, as "
        "R's `read.csv` counts them) and the fix; `clinrel validate FILE` checks a table "
        "alone (exit 2 when broken). Numbers are read as float64, 0/1 columns as integers, "
        "ids as text.",
        "",
        "## Text and files",
        "",
        *[f"- {r}" for r in TEXT_RULES],
        "",
    ]
    for title, anchor, what, columns, required, reader in TABLES:
        lines += [f"## {title}", "", f"{what[0].upper()}{what[1:]}. Read by {reader}.", "",
                  "| column | required | type | allowed values | meaning |",
                  "|---|---|---|---|---|"]
        for col, (kind, allowed, meaning) in columns.items():
            req = "**required**" if col in required else "optional"
            lines.append(f"| `{col}` | {req} | {kind} | {allowed} | {meaning} |")
        lines += [""] + [f"- {r}" for r in RULES[title]] + [""]
    lines += ["## Outputs", "",
              "Every table clinrel writes follows the tidy estimate contract: `estimand`, "
              "grouping columns (`model`, `group_var`, `group_level`; overall is "
              "`group_var == \"overall\"`), then:", "",
              "| column | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in S.GLOSSARY.items()
              if k not in ("model", "group_var", "group_level", "estimand")]
    lines += ["", "Extra columns where they apply (each documented in the producing "
              "function's docstring), e.g. in subgroup tables:", "",
              "| column | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in S.EXTRA_GLOSSARY.items()]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "docs"))
    from make_plan_reference import write

    write("contracts.md", render())
