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
#: the analysis key of Results['roles'] -> the tables and figures that show it
SHOWN_BY = {
    DESCRIPTIVE: ("flow_accountability", "flow_diagram", "cohort_by_site", "two_by_two"),
    "overall": ("overall_metrics",),
    "precision": ("precision",),
    "failure_map": ("failure_map",),
    "pooled": ("failure_map_pooled",),
    "sensitivity_collapse": ("sensitivity_collapse",),
    "threshold_sweep": ("threshold_sweep", "ranking_stability_threshold"),
    "adjusted": ("adjusted_odds_ratios", "adjusted_block_tests", "adjusted_variance",
                 "adjusted_vs_crude", "adjusted_site_effects", "adjusted_contrasts",
                 "adjusted_variance_partition"),
    "interactions": ("adjusted_interactions", "adjusted_interaction_means",
                     "adjusted_interaction_contrasts"),
    "comparisons": ("model_comparisons",),
    "crs": ("crs_axes", "crs_profiles", "crs_scores", "crs_rank_probabilities",
            "crs_dominance", "crs_differences"),
    "crs_stability": ("crs_stability", "crs_rank_shift"),
    "crs_domains": ("crs_domain_scores", "crs_specialist_generalist", "crs_shift",
                    "crs_shift_vs_corruption"),
    "crs_mechanisms": ("crs_rank_persistence", "crs_adaptation_change", "crs_protocols",
                       "crs_specialization", "crs_depth", "crs_depth_best_vs_last",
                       "crs_confidence_loss", "crs_learning_curves", "crs_label_crossovers"),
    "calibration": ("calibration_summary", "calibration_repair", "reliability"),
    "metadata": ("metadata_coverage", "metadata_sources", "metadata_agreement",
                 "metadata_agreement_by_site", "metadata_site_test", "metadata_review",
                 "metadata_context"),
    "label_error": ("label_error_table", "label_error_sensitivity"),
    "operating_points": ("roc_overall", "operating_points", "matched_operating_points",
                         "partial_auc", "likelihood_ratios", "auc_vs_rest"),
    "goals": ("performance_goals",),
    # on the prespecified axes (detection.subgroups) only: prespecified by construction
    "subgroup_gaps": ("gaps_best_worst",),
    "localization": ("froc_curves", "froc_summary", "lesion_failure_map",
                     "localization_vs_scan"),
    "site_meta_analysis": ("site_meta_table", "site_meta_sensitivity", "site_meta_specificity",
                           "site_meta_ppv", "site_meta_npv", "site_meta_accuracy"),
    "gaps": ("gap_decomposition",) + tuple(f"gap_{i}" for i in range(1, 21)),
    "transport": ("transport_table",),
}
#: table or figure name -> its analysis key
BY_NAME = {name: key for key, names in SHOWN_BY.items() for name in names}
#: names that carry no role (not an analysis)
NO_ROLE = ("checklist_map",)
#: names whose role is that of the subgroup axes they draw (one figure, several axes)
BY_AXES = ("forest_", "roc_axis_")
#: names of the further parts of a descriptive table split over several tables
DESCRIPTIVE_PARTS = ("cohort_by_site_",)
SENTENCES = ("Prespecified.", "Exploratory.", "Prespecified (descriptive).")


def _axes_sentence(roles: dict, data) -> str:
    """The role of a figure that draws several subgroup axes (its data's ``group_var``)."""
    from ._detection import axis_label

    drawn = data["group_var"] if data is not None and "group_var" in data else []
    axes = [str(a) for a in dict.fromkeys(drawn) if f"axis:{a}" in roles]
    kinds = {roles[f"axis:{a}"] for a in axes}
    if len(kinds) <= 1:
        return f"{(kinds.pop() if kinds else 'prespecified').capitalize()}."
    exp = [axis_label(a) for a in axes if roles[f"axis:{a}"] == "exploratory"]
    return "Prespecified axes, except exploratory " + ", ".join(exp) + "."


def role_sentence(roles: dict, name: str, data=None) -> str | None:
    """The caption's role sentence for the table or figure ``name`` (None: it carries
    none). A name that is neither mapped nor exempt is an error: every new table or figure
    must say which analysis it shows."""
    if name in NO_ROLE:
        return None
    if name.startswith(BY_AXES):
        return _axes_sentence(roles, data)
    key = BY_NAME.get(name, DESCRIPTIVE if name.startswith(DESCRIPTIVE_PARTS) else None)
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
