"""Calibration: reliability diagrams before and after temperature scaling, fitted on the
validation (calibration) split and evaluated on the test split (``stats.temperature_scale``,
``stats.reliability_table``). Sources: the detection models' ``max_prob`` in the cases
table, and per-case probe probabilities (``inputs.probe_predictions``, clean runs at label
fraction 1) when given. An encoder's ECE is the one of the CRS calibration axis and the
calibration-repair table (``analysis.calibration``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import PALETTE, ReportFigure, theme
from ..tables import ReportTable
from . import Section, SkipSection

KEY = "calibration"
TITLE = "Calibration"
HALF = "any"


def applies(study) -> bool:
    from analysis.calibration import wants_probabilities, wants_repair

    return wants_probabilities(study.plan, study.tables) or wants_repair(study.plan, study.tables)


def build(study) -> Section:
    sec = Section(KEY, TITLE)
    blocks = []
    from analysis.calibration import wants_probabilities, wants_repair

    if wants_probabilities(study.plan, study.tables):
        blocks += _probabilities(study)
    if wants_repair(study.plan, study.tables):
        blocks += _repair(study)
    if not blocks:
        raise SkipSection("no probabilities with a validation/calibration and a test split, and "
                          "no ece_after_ts in the runs table")
    return sec.add(*blocks)


def _repair(study) -> list:
    rep = study.results["calibration_repair"]
    ov = rep[rep["dataset"] == "overall"]
    w = ov.pivot_table(index=["regime", "encoder"], columns="estimand", values="estimate",
                       sort=False).reset_index()
    w = w.sort_values(["regime", "ece_before"], kind="stable").reset_index(drop=True)
    multi = w["regime"].nunique() > 1
    disp = pd.DataFrame({
        "encoder": w["encoder"].astype(str) + (" (" + w["regime"].astype(str) + ")" if multi else ""),
        "before": [text.num(x, 3) for x in w["ece_before"]],
        "after": [text.num(x, 3) for x in w["ece_after"]],
        "reduction": [text.num(x) for x in w["relative_reduction"]]})
    table = ReportTable(
        name="calibration_repair", caption="Encoder probes: ECE before and after temperature "
        "scaling (clean runs, label fraction 1; seed means, averaged over datasets).",
        data=rep, display=disp,
        labels={"encoder": "Encoder", "before": "ECE before", "after": "ECE after",
                "reduction": "Relative reduction (1 \u2212 after/before)"},
        notes=("From the runs table's ece and ece_after_ts columns (clinrel's inference "
               "runner fits each run's temperature on one half of its test predictions and "
               "applies it to the other, both ways: two-fold cross-fitting); per-dataset values are in "
               "tables/calibration_repair.csv. ECE before is the encoder's ECE of the CRS "
               "calibration axis and of the calibration summary.",))
    return ["@tbl-calibration-repair shows how much of each encoder's miscalibration "
            "temperature scaling removes; the CRS calibration axis uses the ECE before "
            "scaling.", table]


def definitions(study, summ: pd.DataFrame) -> list[str]:
    """What each kind of ECE is and how its interval was drawn (the table note and the
    methods text say it alike)."""
    from analysis.calibration import DETECTION, PROBE, boot_settings

    out = []
    if ((summ["source"] == DETECTION) & (summ["estimand"] == "ece")).any():
        n_boot, seed = boot_settings(study.plan)
        cluster = study.results.decisions.detection.cluster
        kind = ("basic (reflected)" if study.results.decisions.get(
            "calibration.ece_interval") == "basic" else "percentile")
        how = (f"cluster-bootstrap {kind} interval (whole {cluster} clusters resampled; "
               if cluster else f"case-bootstrap {kind} interval (")
        out.append(f"Detection models: ECE of the test-split predictions, {how}"
                   f"{n_boot} replicates, seed {seed})"
                   + ("; the plug-in ECE is biased upward in small samples and the basic "
                      "interval subtracts the bias the bootstrap sees (its limits kept on "
                      "their sides of the estimate), covering 85-91% of the population ECE in "
                      "simulation (bench/ece_cluster_coverage.md), short of the nominal level"
                      if kind.startswith("basic") else "") + ".")
    enc = summ[(summ["source"] == PROBE) & (summ["estimand"] == "ece")]
    if len(enc):
        boot = study.results.decisions.get("calibration.encoder_bootstrap", {})
        bad = enc["n_boot_not_estimable"]
        lost = (f"; {text.count(bad.min())} to {text.count(bad.max())} of them not estimable "
                "(an encoder without a drawn run) and left out" if bad.max() > 0 else "")
        same = (", the CRS table's replicates" if boot.get("from") == "crs.bootstrap" else "")
        out.append(
            "Encoder probes: one ECE per encoder, as the CRS protocol defines it: the ECE of "
            "each clean run at label fraction 1 (held-out predictions), its mean over seeds "
            "per dataset, then the mean over datasets; the same value as the CRS calibration "
            "axis and the calibration-repair table's ECE before. Interval: paired-seed "
            f"bootstrap (seeds resampled per dataset, shared by every encoder; "
            f"{text.count(enc['n_boot'].iloc[0])} replicates drawn, seed "
            f"{boot.get('seed', '')}{same}{lost}).")
    return out


def _probabilities(study) -> list:
    import plotnine as p9

    from analysis.calibration import PROBE, RELIABILITY_BINS, wants_repair

    cal = study.results["calibration"]
    summ, rel = cal["summary"], cal["reliability"]
    cluster = study.results.decisions.detection.cluster
    if "regime" not in summ:
        summ = summ.assign(regime=None)
        rel = rel.assign(regime=None)
    regimes = summ.loc[summ["source"] == PROBE, "regime"].nunique()

    def label(unit, regime) -> str:
        return f"{unit} ({regime})" if regimes > 1 and isinstance(regime, str) else str(unit)

    rows = []
    for (source, unit, regime), g in summ.groupby(["source", "unit", "regime"], sort=False,
                                                  dropna=False):
        row = {"source": source, "unit": label(unit, regime),
               "temperature": text.num(g["temperature"].iloc[0], 3)
               if "temperature" in g and g["temperature"].notna().any() else text.DASH}
        for e in ("ece", "brier", "nll"):
            for stage in ("before", "after"):
                v = g[(g["estimand"] == e) & (g["stage"] == stage)]
                if not len(v):
                    row[f"{e}_{stage}"] = text.DASH
                elif e == "ece" and "conf_low" in v:
                    r = v.iloc[0]
                    row[f"{e}_{stage}"] = text.ci(r["estimate"], r["conf_low"], r["conf_high"], 3)
                else:
                    row[f"{e}_{stage}"] = text.num(v["estimate"].iloc[0], 3)
        rows.append(row)
    disp = pd.DataFrame(rows)
    notes = ["Temperature T minimises the validation negative log-likelihood of "
             "sigmoid(logit(p) / T); ECE with 15 equal-width bins. The reliability diagram "
             f"uses {RELIABILITY_BINS} equal-width bins (tables/fig_reliability.csv)."]
    notes += definitions(study, summ)
    probe = summ["source"] == PROBE
    probe_after = bool((probe & (summ["stage"] == "after")).any())
    if probe.any():
        notes.append("Per-run ECEs are in results/calibration_encoder_runs.csv; "
                     + ("each run is scaled by its own temperature." if probe_after else
                        "the probe predictions have no calibration split, so this table fits "
                        "no temperature for them (\u2014)"
                        + (": their ECE after scaling, from the runs table, is in the "
                           "table of encoder ECE before and after temperature scaling"
                           if wants_repair(study.plan, study.tables) else "")
                        + ". Brier score and NLL are given for the detection models; the "
                        "encoder runs' own are in the runs table."))
    table = ReportTable(
        name="calibration_summary", caption="Calibration on the test split before and after "
        "temperature scaling fitted on the validation split.", data=summ, display=disp,
        group_col="source",
        labels={"unit": "Model", "temperature": "Temperature", "ece_before": "before",
                "ece_after": "after", "brier_before": "before", "brier_after": "after",
                "nll_before": "before", "nll_after": "after"},
        spanners=(("ECE (15 bins) [95% CI]", ["ece_before", "ece_after"]),
                  ("Brier", ["brier_before", "brier_after"]), ("NLL", ["nll_before", "nll_after"])),
        notes=(" ".join(notes),))
    rel = rel.assign(unit=[label(u, r) for u, r in zip(rel["unit"], rel["regime"])])
    d = rel[rel["n"] > 0].copy()
    n_units = d["unit"].nunique()
    d["unit"] = pd.Categorical(d["unit"], categories=list(dict.fromkeys(d["unit"])))
    d["stage"] = pd.Categorical(d["stage"].map({"before": "before scaling",
                                                "after": "after scaling"}),
                                categories=["before scaling", "after scaling"])
    plot = (p9.ggplot(d, p9.aes("mean_confidence", "estimate", color="stage"))
            + p9.geom_abline(slope=1, intercept=0, linetype="dashed", color="#8d96a3")
            + p9.geom_errorbar(p9.aes(ymin="conf_low", ymax="conf_high"), width=0.02)
            + p9.geom_line() + p9.geom_point(p9.aes(size="n"))
            + p9.scale_size_continuous(range=(0.8, 3), name="predictions in bin")
            + p9.scale_color_manual(values=PALETTE[:2], name="")
            + p9.facet_wrap("~unit", ncol=min(4, n_units))
            + p9.scale_x_continuous(breaks=[0, 0.5, 1], labels=["0", "0.5", "1"])
            + p9.scale_y_continuous(breaks=[0, 0.5, 1], labels=["0", "0.5", "1"])
            + p9.coord_fixed(xlim=(0, 1), ylim=(0, 1))
            + p9.labs(x="Mean predicted probability", y="Observed frequency") + theme())
    fig = ReportFigure(
        name="reliability", caption="Reliability diagrams on the test split before and after "
        "temperature scaling, with Wilson intervals per bin ("
        + ("detection models: cluster-aware, at the bin's effective size over its "
           f"{cluster} clusters; " if cluster else "")
        + "encoder probes: the held-out "
        "predictions of their clean runs at label fraction 1, pooled over seeds and datasets"
        + ("" if probe_after or not probe.any() else ", before scaling only")
        + ("; cluster-aware over cases, as each case is scored once per seed"
           if study.results.decisions.calibration.encoder_reliability_cluster else "")
        + "); "
        "the dashed diagonal is perfect calibration.",
        alt="Reliability diagrams per model before and after temperature scaling.",
        plot=plot, data=rel[["source", "unit", "stage", "bin", "bin_low", "bin_high",
                             "mean_confidence", "estimate", "conf_low", "conf_high", "n"]],
        width=7.5, height=1.0 + 2.3 * -(-n_units // 4))
    md = ("@tbl-calibration-summary and @fig-reliability show how well predicted probabilities "
          "match observed frequencies, before and after temperature scaling (a monotone "
          "rescaling: discrimination is unchanged).")
    return [md, table, fig]
