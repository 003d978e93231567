"""CRS per domain (dataset) against the overall anchors, the specialist-versus-generalist
figure, and the institutional shift with its own intervals and rank beside the
corruption drop (``crs`` ``domain_scores``; ``crs_shift``: ``stats.crs_mechanisms
.shift_drop``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import PALETTE, ReportFigure, points_ci, theme
from ..tables import ReportTable
from . import Section, SkipSection
from .crs import _enc_label

KEY = "crs_domains"
TITLE = "CRS per domain and institutional shift"
HALF = "crs"

SHIFT = {"shift_auroc_drop": "AUROC drop under shift", "shift_ece_increase": "ECE rise under shift",
         "corruption_auroc_drop": "AUROC drop under corruption",
         "corruption_ece_increase": "ECE rise under corruption"}


def _crs_result(study, key):
    from analysis.core import ANALYSES

    a = ANALYSES.get(key)
    if a is None or not a.wanted(study.plan, study.tables):
        return None
    return study.results[key]


def applies(study) -> bool:
    if study.reference is None:
        return False
    crs = study.results.get("crs") or {}
    return crs.get("domain_scores") is not None or _crs_result(study, "crs_shift") is not None


def _specialists(study) -> dict:
    return dict(study.plan.crs.encoder_domains)


def build(study) -> Section:
    import plotnine as p9

    sec = Section(KEY, TITLE)
    crs = study.results["crs"]
    dom = crs.get("domain_scores")
    spec = _specialists(study)
    md = []
    if dom is not None:
        d = dom[dom["estimand"] == "crs"].copy()
        d["label"] = _enc_label(d)
        datasets = sorted(d["dataset"].unique())
        overall = crs["scores"]
        overall = overall[overall["estimand"] == "crs"].assign(label=lambda x: _enc_label(x))
        order = list(overall.sort_values(["regime", "estimate"], ascending=[True, False])["label"])
        rows = []
        for lab in order:
            g = d[d["label"] == lab].set_index("dataset")
            enc = g["encoder"].iloc[0] if len(g) else lab
            row = {"encoder": lab, "domain": spec.get(enc, "general")}
            for ds in datasets:
                row[ds] = (text.ci(g.loc[ds, "estimate"], g.loc[ds, "conf_low"], g.loc[ds, "conf_high"], 3)
                           if ds in g.index else text.DASH)
            o = overall[overall["label"] == lab].iloc[0]
            row["overall"] = text.ci(o["estimate"], o["conf_low"], o["conf_high"], 3)
            rows.append(row)
        n_boot = int(d["n_boot"].max()) if "n_boot" in d else study.plan.crs.bootstrap.n_boot
        sec.add(ReportTable(
            name="crs_domain_scores", caption="CRS per dataset (domain) with paired-seed "
            "bootstrap CIs, each dataset's axes normalized with the overall reference anchors, "
            "beside the overall CRS.",
            data=pd.concat([dom, overall.drop(columns="label").assign(dataset="(overall)")],
                           ignore_index=True),   # the Overall column's numbers too
            display=pd.DataFrame(rows),
            labels={"encoder": "Encoder", "domain": "Pretrained for", "overall": "Overall",
                    **{ds: ds for ds in datasets}},
            spanners=(("CRS [CI] per dataset", datasets),),
            notes=(f"{n_boot} paired-seed bootstrap replicates, the same as the overall CRS "
                   f"(seed {study.plan.seed_for('crs_bootstrap')}); dominance is counted "
                   f"against the reference panel on the same dataset. Pretrained for: the "
                   f"plan's crs.encoder_domains (general where not named). Every axis per "
                   f"dataset is in tables/crs_domain_scores.csv.",)))
        fd = d.assign(kind=[("specialist (" + spec[e] + ")") if e in spec else "generalist"
                            for e in d["encoder"]])
        fd["label"] = pd.Categorical(fd["label"], categories=order[::-1])
        plot = (p9.ggplot(fd, p9.aes("label", "estimate", color="dataset", shape="kind"))
                + p9.geom_errorbar(p9.aes(ymin="conf_low", ymax="conf_high"), width=0.2,
                                   position=p9.position_dodge(width=0.5))
                + p9.geom_point(size=2, position=p9.position_dodge(width=0.5))
                + p9.scale_color_manual(values=PALETTE[:len(datasets)], name="Dataset")
                + p9.coord_flip() + p9.labs(x="", y="CRS on the dataset", shape="") + theme())
        sec.add(ReportFigure(
            name="crs_specialist_generalist", caption="Specialists versus generalists: each "
            "encoder's CRS on each dataset with paired-seed bootstrap CIs; a specialist's "
            "advantage is a higher CRS on the datasets of its own domain.",
            alt="Dot plot of CRS per dataset and encoder, specialists marked.", plot=plot,
            data=fd[["encoder", "regime", "dataset", "kind", "estimate", "conf_low", "conf_high"]],
            width=6.5, height=1.0 + 0.32 * len(order)))
        md.append("@tbl-crs-domain-scores gives the CRS per dataset against the same anchors "
                  "and @fig-crs-specialist-generalist sets specialists beside generalists.")
    sh = _crs_result(study, "crs_shift")
    if sh is not None and len(sh):
        sh = sh.assign(label=_enc_label(sh))
        rank = sh[sh["estimand"] == "shift_rank"].set_index("label")
        order = list(rank.sort_values("estimate").index) if len(rank) else list(dict.fromkeys(sh["label"]))
        rows = []
        for lab in order:
            g = sh[sh["label"] == lab].set_index("estimand")
            row = {"encoder": lab}
            for e in SHIFT:
                row[e] = (text.ci(g.loc[e, "estimate"], g.loc[e, "conf_low"], g.loc[e, "conf_high"], 3)
                          if e in g.index else text.DASH)
            row["rank"] = (f"{text.count(g.loc['shift_rank', 'estimate'])} "
                           f"[{text.count(g.loc['shift_rank', 'conf_low'])}, "
                           f"{text.count(g.loc['shift_rank', 'conf_high'])}]"
                           if "shift_rank" in g.index else text.DASH)
            rows.append(row)
        ds = ", ".join(sorted({str(x) for x in sh["datasets"].dropna()})) if "datasets" in sh else ""
        sec.add(ReportTable(
            name="crs_shift", caption="Institutional shift per encoder: the AUROC drop and ECE "
            "rise from the clean test set to the held-out institutions, with paired-seed "
            "bootstrap CIs and the encoder's rank by shift drop, beside the drop under "
            "corruption.", data=sh.drop(columns="label"),
            # columns in the spanners' order (every renderer keeps a table's column order)
            display=pd.DataFrame(rows)[["encoder", "shift_auroc_drop", "shift_ece_increase",
                                        "rank", "corruption_auroc_drop",
                                        "corruption_ece_increase"]],
            labels={"encoder": "Encoder", **{k: v[0].upper() + v[1:] for k, v in SHIFT.items()},
                    "rank": "Shift rank [CI]"},
            spanners=(("Institutional shift", ["shift_auroc_drop", "shift_ece_increase", "rank"]),
                      ("Corruption (mean over perturbations and severities)",
                       ["corruption_auroc_drop", "corruption_ece_increase"])),
            notes=(f"Drops at full labels, seed-mean, on the datasets with a shift condition "
                   f"({text.md(ds) or text.DASH}); rank 1 = the smallest AUROC drop under shift, "
                   f"ranked within each regime. {int(sh['n_boot'].max())} paired-seed bootstrap "
                   f"replicates (seed {study.plan.seed_for('crs_shift')}).",)))
        fig = sh[sh["estimand"].isin(["shift_auroc_drop", "corruption_auroc_drop"])].copy()
        fig["what"] = fig["estimand"].map({"shift_auroc_drop": "institutional shift",
                                           "corruption_auroc_drop": "corruption"})
        sec.add(ReportFigure(
            name="crs_shift_vs_corruption", caption="AUROC drop under institutional shift and "
            "under corruption per encoder, with paired-seed bootstrap CIs.",
            alt="Dot plot of AUROC drops under shift and corruption per encoder.",
            plot=points_ci(fig, x="label", y="estimate", color="what", xlab="",
                           ylab="AUROC drop (clean minus condition)", hline=0.0),
            data=fig[["encoder", "regime", "estimand", "estimate", "conf_low", "conf_high"]],
            width=6.5, height=1.0 + 0.3 * fig["label"].nunique()))
        md.append("@tbl-crs-shift gives the institutional shift its own intervals and rank, "
                  "beside the corruption drop (@fig-crs-shift-vs-corruption).")
    if not md:
        raise SkipSection("no per-domain scores (one dataset) and no shift condition")
    sec.blocks.insert(0, " ".join(md))
    return sec
