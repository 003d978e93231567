"""The mechanism analyses of CRS-Bench: E1 specialization (matched- versus cross-domain
gain over the reference panel), E3 feature depth (the axes per layer, the best layer on a
validation criterion, best minus last), E4 confidence loss under corruption (ECE change
next to AUROC change, flagged where calibration degrades while discrimination holds) and
E6 label efficiency (learning curves with paired-seed bands, crossovers); E2 (calibration
repair) is in the calibration section and E5 (protocols) in the adaptation section
(``stats.crs_mechanisms``)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import text
from ..figures import PALETTE, ReportFigure, points_ci, theme
from ..tables import ReportTable
from . import Section, SkipSection
from .crs import AXIS_LABEL, AXES, _enc_label
from .crs_domains import _crs_result

KEY = "crs_mechanisms"
TITLE = "Mechanism analyses"
HALF = "crs"
NAMES = ("crs_specialization", "crs_depth", "crs_confidence", "crs_labels")


def applies(study) -> bool:
    return study.reference is not None and any(_crs_result(study, n) is not None for n in NAMES)


def _ci(g, e, digits=3):
    if e not in g.index:
        return text.DASH
    r = g.loc[e]
    return text.ci(r["estimate"], r["conf_low"], r["conf_high"], digits)


def _ranked_regime(df: pd.DataFrame) -> pd.DataFrame:
    """The frozen regime's rows where there are several (the ranking's; the rest in CSV)."""
    return df[df["regime"] == "frozen"] if df["regime"].nunique() > 1 and (df["regime"] == "frozen").any() else df


def _reps(df, plan, stream) -> str:
    return (f"{int(df['n_boot'].max())} paired-seed bootstrap replicates (seed "
            f"{plan.seed_for(stream)})")


def _e1(study, sec, md):
    sp = _crs_result(study, "crs_specialization")
    if sp is None or not len(sp):
        return
    sp = sp.assign(label=_enc_label(sp))
    rows = []
    for (lab, fam, lev), g in sp.groupby(["label", "family", "level"], sort=False):
        g = g.set_index("estimand")
        rows.append({"what": "Encoder" if lev == "encoder" else "Family", "encoder": lab, "family": fam,
                     "matched": _ci(g, "matched_gain"), "cross": _ci(g, "cross_gain"),
                     "spec": _ci(g, "specialization")})
    sec.add(ReportTable(
        name="crs_specialization", caption="E1 specialization: each encoder's AUROC gain over "
        "the reference panel's mean on the datasets of its own domain (matched) and on the "
        "others (cross), and their difference, with paired-seed bootstrap CIs.",
        data=sp.drop(columns="label"), display=pd.DataFrame(rows), group_col="what",
        labels={"encoder": "Encoder", "family": "Domain", "matched": "Matched gain [CI]",
                "cross": "Cross gain [CI]", "spec": "Specialization [CI]"},
        notes=(f"Gain: the encoder's seed-mean AUROC at clean, full labels minus the panel "
               f"members' mean on the same dataset. Specialization = matched minus cross gain; "
               f"a generalist (no domain in crs.encoder_domains, or one no dataset has) has "
               f"no matched datasets: its rows are not estimable. "
               f"{_reps(sp, study.plan, 'crs_specialization')}.",)))
    f = sp[(sp["estimand"].isin(["matched_gain", "cross_gain"])) & (sp["level"] == "encoder")]
    f = f[np.isfinite(f["estimate"].astype(float))].copy()
    if len(f):
        f["what"] = f["estimand"].map({"matched_gain": "matched domain", "cross_gain": "cross domain"})
        sec.add(ReportFigure(
            name="crs_specialization", caption="E1: AUROC gain over the reference panel on "
            "matched- and cross-domain datasets per encoder, with paired-seed bootstrap CIs.",
            alt="Dot plot of matched and cross-domain AUROC gains per encoder.",
            plot=points_ci(f, x="label", y="estimate", color="what", xlab="",
                           ylab="AUROC gain over the panel", hline=0.0),
            data=f[["encoder", "regime", "family", "estimand", "estimate", "conf_low", "conf_high"]],
            width=6.5, height=1.0 + 0.3 * f["label"].nunique()))
    md.append("E1 (@tbl-crs-specialization) contrasts in-domain and cross-domain performance")


def _e3(study, sec, md):
    dp = _crs_result(study, "crs_depth")
    if dp is None or not len(dp):
        return
    dp = dp.assign(label=_enc_label(dp))
    ax = dp[dp["estimand"].isin(AXES)]
    crit = dp[dp["estimand"] == "selection_criterion"].set_index(["label", "layer"])
    rows = []
    for (lab, lay), g in ax.groupby(["label", "layer"], sort=False):
        g = g.set_index("estimand")
        c = crit.loc[(lab, lay)] if (lab, lay) in crit.index else None
        rows.append({"encoder": lab, "layer": str(lay) + (" *" if c is not None and bool(c["selected"]) else ""),
                     **{a: _ci(g, a) for a in AXES},
                     "criterion": text.num(c["estimate"], 3) if c is not None else text.DASH})
    which = str(dp["criterion"].dropna().iloc[0]) if "criterion" in dp and dp["criterion"].notna().any() else "val_auroc"
    sec.add(ReportTable(
        name="crs_depth", caption="E3 feature depth: the four reliability axes per encoder and "
        "layer with paired-seed bootstrap CIs; * the best layer on the validation criterion.",
        data=dp[dp["estimand"].isin([*AXES, "selection_criterion"])].drop(columns="label"),
        display=pd.DataFrame(rows), group_col="encoder",
        labels={"layer": "Layer", **{a: AXIS_LABEL[a].split(" (")[0] for a in AXES},
                "criterion": "Criterion"}, wide=True,
        notes=(f"Criterion: {'the validation AUROC (val_auroc, a held-out part of the training split)' if which == 'val_auroc' else 'the test AUROC (the runs have no val_auroc): the selection is optimistic'}, "
               f"seed-mean at clean, full labels, mean over datasets; ties go to the last layer. "
               f"The ranking uses one layer per encoder: {text.md(study.results.decisions.crs.layer_rule or 'the last')}. "
               f"{_reps(dp, study.plan, 'crs_depth')}.",)))
    df = dp[dp["estimand"].str.startswith("difference_")].copy()
    rows = []
    for lab, g in df.groupby("label", sort=False):
        g = g.set_index("estimand")
        rows.append({"encoder": lab, "best": str(g["best_layer"].iloc[0]), "last": str(g["last_layer"].iloc[0]),
                     **{a: _ci(g, f"difference_{a}") for a in AXES}})
    sec.add(ReportTable(
        name="crs_depth_best_vs_last", caption="E3: best layer minus last layer per encoder "
        "and axis, with paired-seed bootstrap CIs (0 where the best layer is the last).",
        data=df.drop(columns="label"), display=pd.DataFrame(rows),
        labels={"encoder": "Encoder", "best": "Best layer", "last": "Last layer",
                **{a: AXIS_LABEL[a].split(" (")[0] for a in AXES}}, wide=True,
        notes=("The best layer is chosen once on the point criterion and held fixed in the "
               "replicates (the selection's own variability is not in the interval).",)))
    f = ax[ax["estimand"] == "discrimination"].copy()
    sec.add(ReportFigure(
        name="crs_depth", caption="E3: AUROC per encoder at each feature depth, with "
        "paired-seed bootstrap CIs.", alt="Dot plot of AUROC per encoder and layer.",
        plot=points_ci(f.assign(layer=f["layer"].astype(str)), x="label", y="estimate",
                       color="layer", xlab="", ylab="AUROC (mean over datasets)"),
        data=f[["encoder", "regime", "layer", "estimate", "conf_low", "conf_high"]],
        width=6.5, height=1.0 + 0.3 * f["label"].nunique()))
    md.append("E3 (@tbl-crs-depth, @tbl-crs-depth-best-vs-last) analyses depth as a factor")


def _e4(study, sec, md):
    cf = _crs_result(study, "crs_confidence")
    if cf is None or not len(cf):
        return
    cf = cf.assign(label=_enc_label(cf))
    show = _ranked_regime(cf)
    cell = show[show["estimand"].isin(["delta_auroc", "delta_ece"])]
    rows = []
    for (lab, cond, sev), g in cell.groupby(["label", "condition", "severity"], sort=False):
        g = g.set_index("estimand")
        rows.append({"encoder": lab, "cell": f"{cond} {text.count(sev)}",
                     "da": _ci(g, "delta_auroc"), "de": _ci(g, "delta_ece"),
                     "flag": "yes" if bool(g["confidence_loss"].iloc[0]) else ""})
    margin = float(cf["auroc_margin"].dropna().iloc[0]) if "auroc_margin" in cf else study.plan.crs.auroc_margin
    n_flag = int(cell.drop_duplicates(["label", "condition", "severity"])["confidence_loss"].astype(bool).sum())
    regime_note = (" Frozen regime shown; every regime is in tables/crs_confidence_loss.csv."
                   if len(show) < len(cf) else "")
    sec.add(ReportTable(
        name="crs_confidence_loss", caption="E4 confidence loss under corruption: per "
        "perturbation and severity, the change in ECE next to the change in AUROC from the "
        "clean test set, with paired-seed bootstrap CIs, flagged where calibration degrades "
        "while discrimination holds.", data=cf.drop(columns="label"), display=pd.DataFrame(rows),
        group_col="encoder", labels={"cell": "Perturbation, severity", "da": "\u0394 AUROC [CI]",
                                     "de": "\u0394 ECE [CI]", "flag": "Confidence lost"},
        notes=(f"Confidence lost: the ECE rise's CI lies above 0 while the AUROC drop is "
               f"smaller than crs.auroc_margin = {text.num(margin)} (its CI's lower limit "
               f"above \u2212{text.num(margin)}); {n_flag} cell(s) flagged. Seed-mean at full "
               f"labels, mean over datasets. The calibration-robustness companion axis (clean "
               f"over perturbed ECE, outside the CRS) is in the same file. "
               f"{_reps(cf, study.plan, 'crs_confidence')}.{regime_note}",)))
    w = cell.pivot_table(index=["label", "condition", "severity"], columns="estimand",
                         values="estimate").reset_index()
    fl = cell.drop_duplicates(["label", "condition", "severity"]).set_index(["label", "condition", "severity"])["confidence_loss"]
    w["flag"] = [("confidence lost" if bool(fl.loc[(a, b, c)]) else "not flagged")
                 for a, b, c in zip(w["label"], w["condition"], w["severity"])]
    plot = (p9_scatter(w, margin))
    sec.add(ReportFigure(
        name="crs_confidence_loss", caption="E4: change in ECE against change in AUROC per "
        "encoder, perturbation and severity; the shaded band is the AUROC margin within which "
        "discrimination counts as held.", alt="Scatter plot of ECE change against AUROC change.",
        plot=plot, data=w, width=7.0, height=4.2))
    md.append("E4 (@tbl-crs-confidence-loss, @fig-crs-confidence-loss) shows confidence "
              "degrading while AUROC holds")


def p9_scatter(w: pd.DataFrame, margin: float):
    import plotnine as p9

    return (p9.ggplot(w, p9.aes("delta_auroc", "delta_ece", color="flag"))
            + p9.annotate("rect", xmin=-margin, xmax=float(max(w["delta_auroc"].max(), 0)) + 0.005,
                          ymin=-np.inf, ymax=np.inf, alpha=0.12, fill="#8d96a3")
            + p9.geom_hline(yintercept=0, linetype="dashed", color="#8d96a3")
            + p9.geom_point(size=1.6, alpha=0.8)
            + p9.facet_wrap("~condition")
            + p9.scale_color_manual(values={"confidence lost": "#b2182b", "not flagged": PALETTE[0]}, name="")
            + p9.labs(x="\u0394 AUROC (perturbed \u2212 clean)", y="\u0394 ECE (perturbed \u2212 clean)")
            + theme())


def _e6(study, sec, md):
    import plotnine as p9

    lb = _crs_result(study, "crs_labels")
    if lb is None:
        return
    cur = lb["curves"]
    cur = cur[cur["estimand"] == "auroc"].assign(label=lambda d: d["encoder"].astype(str))
    n_enc = cur["label"].nunique()
    colors = dict(zip(sorted(cur["label"].unique()), (PALETTE * 3)[:n_enc]))
    plot = (p9.ggplot(cur, p9.aes("label_fraction", "estimate", color="label", fill="label"))
            + p9.geom_ribbon(p9.aes(ymin="conf_low", ymax="conf_high"), alpha=0.12, color=None)
            + p9.geom_line() + p9.geom_point(size=1.2)
            + p9.scale_x_log10() + p9.scale_color_manual(values=colors, name="encoder")
            + p9.scale_fill_manual(values=colors, name="encoder")
            + p9.labs(x="Label fraction (log scale)", y="AUROC (clean, mean over datasets)") + theme())
    if cur["regime"].nunique() > 1:
        plot += p9.facet_wrap("~regime")
    sec.add(ReportFigure(
        name="crs_learning_curves", caption="E6 label efficiency: AUROC against the label "
        "fraction per encoder with paired-seed bootstrap bands.",
        alt="Learning curves of AUROC against label fraction per encoder.", plot=plot,
        data=cur[["encoder", "regime", "label_fraction", "estimate", "conf_low", "conf_high"]],
        width=7.0, height=4.0))
    cx = lb["crossovers"]
    frac = _ranked_regime(cx[cx["estimand"] == "crossover_fraction"])
    pc = cx[cx["estimand"] == "p_crossover"].set_index(["regime", "encoder", "comparator"])["estimate"]
    keep = frac[np.isfinite(frac["estimate"].astype(float))]
    rows = [{"pair": f"{r['encoder']} overtakes {r['comparator']} below",
             "frac": text.ci(r["estimate"], r["conf_low"], r["conf_high"], 3),
             "p": text.num(pc.get((r["regime"], r["encoder"], r["comparator"]), np.nan))}
            for _, r in keep.sort_values("estimate").iterrows()]
    if not rows:
        rows = [{"pair": "no pair of encoders crosses", "frac": text.DASH, "p": text.DASH}]
    sec.add(ReportTable(
        name="crs_label_crossovers", caption="E6: the label fraction below which the encoder "
        "behind at full labels overtakes the other as labels shrink, with paired-seed "
        "bootstrap CIs and the probability that the curves cross.", data=cx,
        display=pd.DataFrame(rows), labels={"pair": "Encoders", "frac": "Crossover fraction [CI]",
                                            "p": "P(crossover)"},
        notes=(f"Crossover: the largest label fraction at which the encoder behind at full "
               f"labels leads, interpolated linearly in log label fraction around the sign "
               f"change; its CI over the replicates with a crossover; pairs that do not cross at "
               f"the point estimate ({int((~np.isfinite(frac['estimate'].astype(float))).sum())}) "
               f"are in tables/crs_label_crossovers.csv with their P(crossover). "
               f"{_reps(cx, study.plan, 'crs_labels')}.",)))
    md.append("E6 (@fig-crs-learning-curves, @tbl-crs-label-crossovers) gives learning "
              "curves and crossovers")


def build(study) -> Section:
    sec = Section(KEY, TITLE)
    md: list[str] = []
    for part in (_e1, _e3, _e4, _e6):
        part(study, sec, md)
    if not md:
        raise SkipSection("none of the mechanism analyses applies to these runs")
    sec.blocks.insert(0, "; ".join(md) + ". E2 (calibration repair) is in the calibration "
                      "section and E5 (protocols, adaptation) in the adaptation section. "
                      "These analyses are exploratory unless the plan's roles say otherwise.")
    return sec
