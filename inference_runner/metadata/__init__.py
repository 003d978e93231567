"""Metadata extraction with evidence: DICOM headers and report texts -> one evidence table.

Every extracted value carries the verbatim ``evidence`` it was read from and its
``start``/``end`` offsets in ``source`` (``dicom:<file>#<Keyword>`` for a header element's
string value, ``text:<file>#<case_id>`` for a report). Columns (the metadata evidence
contract): ``case_id, field, value, extractor, evidence, start, end, source``.

Fields: ``phase`` (non_contrast, arterial, venous, delayed), ``age`` (years), ``sex``
(F, M, O), and from headers also ``contrast_agent``, ``manufacturer``, ``scanner``,
``slice_thickness_mm``, ``kvp``, ``study_date``, ``modality``, ``series_description``.
Two extractors per comparable field; :mod:`.compare` reports agreement and Cohen's kappa,
writes disagreements for review and merges reviewed values back.
"""
from __future__ import annotations

EVIDENCE_COLUMNS = ("case_id", "field", "value", "extractor", "evidence", "start", "end", "source")
PHASES = ("non_contrast", "arterial", "venous", "delayed")

__all__ = ["EVIDENCE_COLUMNS", "PHASES", "extract_paths"]


def extract_paths(paths, *, llm_url: str | None = None, llm_model: str = "local",
                  advance=None):
    """Evidence table for DICOM files/folders and report-text CSVs (see module docstring)."""
    from .extract import extract_paths as _impl

    return _impl(paths, llm_url=llm_url, llm_model=llm_model, advance=advance)
