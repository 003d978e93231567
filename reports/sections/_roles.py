"""Which analysis each table and figure shows, so that its caption says whether that
analysis is prespecified or exploratory (issue 15 item 4: every table and figure).

The roles themselves are decided once, in the analysis layer (``Results['roles']``: the
plan's subgroup axes and ``roles`` block); this module only maps a table or figure to the
analysis it shows and appends the sentence. A caption that already states its role (the
subgroup tables, per axis) is left as it is; the checklist map, a map of this document,
shows no analysis and gets none."""
from __future__ import annotations

import dataclasses

#: table or figure name -> the analysis key of Results['roles'] (DESCRIPTIVE: counts that
#: the reporting guidelines prespecify, no inference)
DESCRIPTIVE = "descriptive"
BY_NAME = {
    "flow_accountability": DESCRIPTIVE, "flow_diagram": DESCRIPTIVE,
    "cohort_by_site": DESCRIPTIVE, "two_by_two": DESCRIPTIVE,
    "overall_metrics": "overall", "precision": "precision",
    "failure_map": "failure_map", "failure_map_pooled": "pooled",
    "sensitivity_collapse": "sensitivity_collapse",
    "threshold_sweep": "threshold_sweep", "ranking_stability_threshold": "threshold_sweep",
    "adjusted_odds_ratios": "adjusted", "adjusted_block_tests": "adjusted",
    "adjusted_variance": "adjusted", "adjusted_vs_crude": "adjusted",
    "adjusted_site_effects": "adjusted",
    "model_comparisons": "comparisons",
    "crs_axes": "crs", "crs_profiles": "crs", "crs_scores": "crs",
    "crs_rank_probabilities": "crs", "crs_dominance": "crs", "crs_differences": "crs",
    "crs_stability": "crs_stability", "crs_rank_shift": "crs_stability",
    "calibration_summary": "calibration", "calibration_repair": "calibration",
    "reliability": "calibration",
    "metadata_coverage": "metadata", "metadata_sources": "metadata",
    "metadata_agreement": "metadata", "metadata_agreement_by_site": "metadata",
    "metadata_site_test": "metadata", "metadata_review": "metadata",
    "label_error_table": "label_error", "label_error_sensitivity": "label_error",
}
#: names that carry no role (not an analysis)
NO_ROLE = ("checklist_map",)
#: names whose role is that of the subgroup axes they draw (one figure, several axes)
BY_AXES = ("forest_",)
SENTENCES = ("Prespecified.", "Exploratory.", "Prespecified (descriptive).")


def _axes_sentence(roles: dict, data) -> str:
    axes = [str(a) for a in dict.fromkeys(getattr(data, "get", lambda *_: None)("group_var")
                                         if data is not None else [])
            if str(a) != "overall" and f"axis:{a}" in roles]
    if not axes:
        return "Prespecified."
    kinds = {roles[f"axis:{a}"] for a in axes}
    if len(kinds) == 1:
        return f"{kinds.pop().capitalize()}."
    exp = [a.replace("_", " ").replace(":", " \u00d7 ") for a in axes
           if roles[f"axis:{a}"] == "exploratory"]
    return "Prespecified axes, except exploratory " + ", ".join(exp) + "."


def role_sentence(roles: dict, name: str, data=None) -> str | None:
    """The caption's role sentence for the table or figure ``name`` (None: it carries
    none). A name that is neither mapped nor exempt is an error: every new table or figure
    must say which analysis it shows."""
    if name in NO_ROLE:
        return None
    if name.startswith(BY_AXES):
        return _axes_sentence(roles, data)
    key = BY_NAME.get(name)
    if key is None:
        raise KeyError(f"table or figure {name!r} is not mapped to an analysis in "
                       f"reports/sections/_roles.py (BY_NAME)")
    if key == DESCRIPTIVE:
        return "Prespecified (descriptive)."
    return f"{roles.get(key, 'prespecified').capitalize()}."


def label(study, block):
    """``block`` with its role sentence appended to the caption (tables and figures whose
    caption does not state one yet); other blocks unchanged."""
    name = getattr(block, "name", None)
    caption = getattr(block, "caption", None)
    if name is None or caption is None or name.startswith("subgroup_"):
        return block
    if caption.rstrip().endswith(SENTENCES) or "Prespecified axes" in caption:
        return block
    sentence = role_sentence(study.results["roles"], name, getattr(block, "data", None))
    if sentence is None:
        return block
    return dataclasses.replace(block, caption=caption.rstrip() + " " + sentence)
