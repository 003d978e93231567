"""Metadata extraction with evidence: DICOM headers and report texts -> one evidence table.

Every extracted value carries the verbatim ``evidence`` it was read from and its
``start``/``end`` offsets in ``source`` (``dicom:<file>#<Keyword>`` for a header element's
string value, ``text:<file>#<case_id>`` for a report). Columns (the metadata evidence
contract): ``case_id, field, value, extractor, evidence, start, end, source, context``.
``context`` is ``asserted`` for a value; a report mention that is negated, about a prior
study, hypothetical or about a relative (``negated``, ``historical``, ``hypothetical``,
``family``: :mod:`.context`, medspaCy's ConText) is kept with that label and is never a
value (every consumer reads ``asserted`` rows only; a table without the column is all
asserted).

Fields: ``phase`` (non_contrast, arterial, venous, delayed), ``age`` (years), ``sex``
(F, M, O), ``race`` (:data:`.race.RACE_VALUES`: Black, White, Asian, Hispanic/Latino, ...,
Declined, Unknown; the phrasings each value stands for: :mod:`.race`), and from headers also ``contrast_agent``, ``manufacturer``, ``scanner``,
``slice_thickness_mm``, ``kvp``, ``study_date``, ``modality``, ``series_description``.
Two extractors per comparable field; :mod:`.compare` reports agreement and Cohen's kappa,
writes disagreements for review and merges reviewed values back.
"""
from __future__ import annotations

EVIDENCE_COLUMNS = ("case_id", "field", "value", "extractor", "evidence", "start", "end", "source",
                    "context")
ASSERTED = "asserted"
PHASES = ("non_contrast", "arterial", "venous", "delayed")

__all__ = ["ASSERTED", "EVIDENCE_COLUMNS", "PHASES", "asserted", "extract_paths"]


def asserted(evidence):
    """The rows of an evidence table that are values (``context`` asserted, empty or
    missing; a table without the column: every row)."""
    if "context" not in evidence.columns:
        return evidence
    ctx = evidence["context"]
    return evidence[ctx.isna() | ctx.astype(str).isin(["", ASSERTED])]


def extract_paths(paths, *, llm_url: str | None = None, llm_model: str = "local",
                  advance=None):
    """Evidence table for DICOM files/folders and report-text CSVs (see module docstring)."""
    from .extract import extract_paths as _impl

    return _impl(paths, llm_url=llm_url, llm_model=llm_model, advance=advance)
