"""The decisions an analysis run takes, declared once: name, type and meaning.

Every decision the analysis layer makes (rows analysed and why, the threshold, the
cluster, seeds, replicate counts, the multiplicity families, fits that failed...) is a
field of :class:`Decisions`, grouped as the analyses are. ``Results.decide("adjusted.fitted",
[...])`` sets one (a name that is not declared here, or a value of the wrong type, is an
error: a typo cannot create a new decision unseen); the report reads them by attribute
(``results.decisions.adjusted.fitted``) and the manifest writes them
(:meth:`Decisions.flat`: dotted name -> value, the decisions taken only).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class _Boot(_Group):
    n_boot: int | None = Field(None, description="bootstrap replicates")


class DetectionDecisions(_Group):
    threshold: dict | None = Field(None, description="how the threshold was set and its values")
    rows: dict[str, int] | None = Field(None, description="rows analysed and left out, by reason")
    closed_form_ci: str | None = Field(None, description="the closed-form proportion interval")
    patient_repeats: dict | None = Field(None, description="patients with several scans")
    cluster: str | None = Field(None, description="the cluster of every interval and test")
    threshold_grid: list[float] | None = Field(None, description="the sweep's thresholds")
    bootstrap: _Boot = Field(default_factory=_Boot)


class AdjustedDecisions(_Group):
    levels: dict[str, list[str]] | None = Field(None, description="factor levels, reference first")
    complete_case: bool | None = Field(None, description="a complete-case GLMM beside the primary")
    fitted: list[str] | None = Field(None, description="the methods fitted")
    failed: dict[str, str] | None = Field(None, description="methods that failed, and why")
    block_method: str | None = Field(None, description="the method of the block tests")
    block_multiplicity: str | None = Field(None, description="the block tests' family")
    repeated_scans: dict | None = Field(None, description="patients repeating within groups")
    means_fit: str | None = Field(None, description="the fit the adjusted means come from")
    means_fit_converged: bool | None = Field(None, description="whether that fit converged")
    vs_crude_kind: str | None = Field(None, description="the kind of adjusted means")
    crude_rows: dict | None = Field(None, description="the rows of the crude values")
    singular: bool | None = Field(None, description="the group SD at the boundary")
    units: dict[str, str] | None = Field(None, description="the unit of each odds ratio")
    glmm_group: dict | None = Field(None, description="the GLMM's random intercepts and why")
    contrasts_fit: str | None = Field(None, description="the fit the pairwise contrasts use")
    partition_fit: str | None = Field(None, description="the fit the variance partition uses")
    partition_blocks: dict[str, list[str]] | None = Field(
        None, description="the blocks of fixed effects of the variance partition")
    interactions: dict | None = Field(None, description="each interaction's fit and rows")
    interaction_multiplicity: str | None = Field(None, description="the interaction tests' "
                                                 "family")
    primary: dict | None = Field(None, description="the primary fit for inference, and why")


class CalibrationDecisions(_Group):
    encoder_ece: str | None = Field(None, description="how the encoders' ECE is computed")
    encoder_bootstrap: dict | None = Field(None, description="the encoders' ECE bootstrap")
    encoder_ece_vs_runs: dict | None = Field(None, description="recomputed vs the runs' ECE")
    encoder_reliability_cluster: str | None = Field(None, description="cluster of the bins")
    ece_interval: str | None = Field(None, description="the ECE interval")
    bootstrap: _Boot = Field(default_factory=_Boot)


class CrsDecisions(_Group):
    reference_hash: str | None = Field(None, description="sha256 of the reference panel")
    bootstrap: _Boot = Field(default_factory=_Boot)
    layers: dict[str, dict[str, str]] | None = Field(
        None, description="per regime, the layer each encoder's ranking uses")
    layer_rule: str | None = Field(None, description="how those layers were chosen")
    protocols: dict[str, str] | None = Field(
        None, description="per regime, the protocol the ranking uses")
    rows: dict[str, int] | None = Field(None, description="runs used and set aside, by reason")
    runs_vs_predictions: dict | None = Field(
        None, description="the runs' AUROC and ECE recomputed from the probe predictions")


class MetadataDecisions(_Group):
    coverage_cases: str | None = Field(None, description="the cases the coverage counts")
    cases_not_in_cases_table: Any = Field(None, description="evidence cases outside the study")
    agreement: str | None = Field(None, description="how agreement is estimated")
    site_test: str | None = Field(None, description="the by-site test")
    label_error: Any = Field(None, description="where the label-error table comes from")
    label_error_axes: list[str] | None = Field(None, description="axes with error-aware CIs")
    n_imputations: int | None = Field(None, description="imputations of the true level")
    per_patient_rule: str | None = Field(None, description="how per-patient fields are chosen")
    label_error_per_patient: list[str] | None = Field(None, description="fields imputed per patient")
    race_levels: dict | None = Field(None, description="extracted race value -> the study's level")
    context_excluded: int | None = Field(None, description="mentions set aside by their context")


class PrecisionDecisions(_Group):
    target_half_width: float | None = Field(None, description="target CI half-width")
    icc: dict | None = Field(None, description="the ICC used and its source")
    cells: str | None = Field(None, description="the cells the table covers")


class OperatingDecisions(_Group):
    specificity: list[float] | None = Field(None, description="the prespecified specificities")
    sensitivity: list[float] | None = Field(None, description="the prespecified sensitivities")
    partial_auc: dict | None = Field(None, description="the partial AUC's range and correction")
    by: list[str] | None = Field(None, description="the axes of the matched comparisons")
    roc_axes: list[str] | None = Field(None, description="the axes of the ROC figures")
    roc_bands: bool | None = Field(None, description="whether the ROC curves carry pointwise "
                                   "bootstrap bands")
    multiplicity: str | None = Field(None, description="the matched comparisons' family")
    difference_ci: str | None = Field(None, description="the replicates behind a paired "
                                      "difference's interval at a matched operating point")
    threshold_shift_rule: str | None = Field(None, description="when a gain is flagged a "
                                             "threshold shift")
    bootstrap: _Boot = Field(default_factory=_Boot)


class GoalsDecisions(_Group):
    goals: list[dict] | None = Field(None, description="the prespecified goals")
    cells: str | None = Field(None, description="the cells the goals are tested in")
    multiplicity: str | None = Field(None, description="the goals' families")


class SiteMetaDecisions(_Group):
    estimands: list[str] | None = Field(None, description="the proportions pooled across sites")
    models: list[str] | None = Field(None, description="the models meta-analysed")
    sites: int | None = Field(None, description="the sites (studies) of the cohort")
    cluster: str | None = Field(None, description="the cluster of the per-site variances")
    not_estimable: list[str] | None = Field(None, description="analyses with fewer than two "
                                            "sites or a zero variance")


class MultiplicityOf(_Group):
    multiplicity: str | None = Field(None, description="the family's adjustment")


class ComparisonsDecisions(MultiplicityOf):
    metrics: list[str] | None = Field(None, description="the metrics of the paired "
                                      "comparisons")
    gap_metrics: list[str] | None = Field(None, description="the metrics of the subgroup "
                                          "gaps (best minus worst level, per axis)")
class LocalizationDecisions(_Group):
    hit_rule: str | None = Field(None, description="the lesion hit rule, and where it is stated")
    lesions: dict[str, int] | None = Field(None, description="lesion rows analysed and left out")
    axes: list[str] | None = Field(None, description="the case axes of the lesion tables")
    bootstrap: _Boot = Field(default_factory=_Boot)


class SeedDecisions(_Group):
    """The seed of each random stream (``analysis.plan.Plan.seed_for``) and the root."""

    root: int | None = None
    detection_bootstrap: int | None = None
    calibration_bootstrap: int | None = None
    calibration_encoder_bootstrap: int | None = None
    crs_bootstrap: int | None = None
    crs_stability: int | None = None
    crs_shift: int | None = None
    crs_specialization: int | None = None
    crs_depth: int | None = None
    crs_confidence: int | None = None
    crs_protocol: int | None = None
    crs_labels: int | None = None
    label_error_imputation: int | None = None
    gap_bootstrap: int | None = None
    operating_bootstrap: int | None = None
    lesion_bootstrap: int | None = None


class GapsDecisions(_Group):
    contrasts: list[dict] | None = Field(None, description="the decomposed contrasts, their "
                                         "covariates and role, and why each was chosen")
    method: str | None = Field(None, description="the adjusted model of the decomposition")
    within_site: bool | None = Field(None, description="the GLMM holds each site's share of "
                                     "the comparison level (within-site group effect)")
    n_boot: int | None = Field(None, description="cluster-bootstrap replicates (refits)")
    population: str | None = Field(None, description="positives (sensitivity) or negatives")


class TransportDecisions(_Group):
    target: dict | None = Field(None, description="the target margins (shares) raked to")
    name: str | None = Field(None, description="the target population's name")
    max_weight: dict[str, float] | None = Field(None, description="largest raked weight over "
                                                "the mean, per model")
    extreme: bool | None = Field(None, description="whether any weight is extreme")
    left_out: dict[str, int] | None = Field(None, description="scans left out of the "
                                            "raking for a missing margin value, per column")


class CasesDecisions(_Group):
    unicode_nfc: list[dict] | None = Field(None, description="spellings merged to Unicode NFC")


class Decisions(_Group):
    """Every decision of a run (module docstring)."""

    roles: dict[str, str] | None = Field(None, description="prespecified or exploratory, "
                                         "per analysis and axis")
    multiplicity: str | None = Field(None, description="the prespecified test families")
    cases: CasesDecisions = Field(default_factory=CasesDecisions)
    detection: DetectionDecisions = Field(default_factory=DetectionDecisions)
    comparisons: ComparisonsDecisions = Field(default_factory=ComparisonsDecisions)
    sensitivity_collapse: MultiplicityOf = Field(default_factory=MultiplicityOf)
    precision: PrecisionDecisions = Field(default_factory=PrecisionDecisions)
    adjusted: AdjustedDecisions = Field(default_factory=AdjustedDecisions)
    calibration: CalibrationDecisions = Field(default_factory=CalibrationDecisions)
    crs: CrsDecisions = Field(default_factory=CrsDecisions)
    metadata: MetadataDecisions = Field(default_factory=MetadataDecisions)
    localization: LocalizationDecisions = Field(default_factory=LocalizationDecisions)
    site_meta_analysis: SiteMetaDecisions = Field(default_factory=SiteMetaDecisions)
    gaps: GapsDecisions = Field(default_factory=GapsDecisions)
    transport: TransportDecisions = Field(default_factory=TransportDecisions)
    seeds: SeedDecisions = Field(default_factory=SeedDecisions)
    operating: OperatingDecisions = Field(default_factory=OperatingDecisions)
    goals: GoalsDecisions = Field(default_factory=GoalsDecisions)
    #: the names decided, in order (a decision may be None: "no cluster" is a decision)
    _taken: list = PrivateAttr(default_factory=list)

    # ------------------------------------------------------------------ by dotted name
    def set(self, name: str, value) -> None:
        """Record decision ``name`` (dotted: ``"adjusted.fitted"``); an undeclared name or
        a value of the wrong type raises (pydantic validation)."""
        *path, last = name.split(".")
        node: BaseModel = self
        for part in path:
            if part not in type(node).model_fields:
                raise KeyError(f"no decision named {name!r} (analysis/decisions.py)")
            node = getattr(node, part)
        if last not in type(node).model_fields:
            raise KeyError(f"no decision named {name!r} (analysis/decisions.py)")
        setattr(node, last, value)
        if name not in self._taken:
            self._taken.append(name)

    def __getitem__(self, name: str):
        flat = self.flat()
        if name not in flat:
            raise KeyError(name)
        return flat[name]

    def get(self, name: str, default=None):
        return self.flat().get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.flat()

    def items(self):
        return self.flat().items()

    def flat(self) -> dict[str, Any]:
        """The decisions taken, by dotted name, in the order they were taken (what the
        manifest records; a decision of None included)."""
        out: dict[str, Any] = {}
        for name in self._taken:
            node: Any = self
            for part in name.split("."):
                node = getattr(node, part)
            out[name] = node
        return out

    def update(self, other: "Decisions | dict") -> None:
        """Take every decision ``other`` holds (a forked lane's)."""
        items = other.flat().items() if isinstance(other, Decisions) else other.items()
        for name, value in items:
            self.set(name, value)
