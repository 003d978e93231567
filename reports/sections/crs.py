"""Clinical Reliability Score: axes, normalized profiles, dominance/similarity, CRS with
paired-seed bootstrap CIs, rank probabilities, stability and AUROC-vs-CRS inversions
(``stats.crs_scores``, ``stats.crs_bootstrap``, ``stats.ranking_stability``)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import text
from ..figures import PALETTE, ReportFigure, points_ci, theme
from ..tables import ReportTable
from . import Section, SkipSection

KEY = "crs"
TITLE = "Clinical Reliability Score"
HALF = "crs"
AXES = ("discrimination", "calibration", "label_efficiency", "robustness")
AXIS_LABEL = {"discrimination": "Discrimination (AUROC)", "calibration": "Calibration (ECE)",
              "label_efficiency": "Label efficiency", "robustness": "Robustness"}


def _enc_label(df: pd.DataFrame) -> pd.Series:
    if df["regime"].nunique() > 1:
        return df["encoder"].astype(str) + " (" + df["regime"].astype(str) + ")"
    return df["encoder"].astype(str)


def p_floor(df: pd.DataFrame) -> pd.Series:
    """The resolution of a two-sided bootstrap p-value: 2 / (usable replicates + 1), and
    never finer than 2 / N with N the equally likely seed draws (``n_seed_resamples``;
    ``stats.crs_resample``, "Resolution")."""
    usable = df["n_boot"] - df["n_boot_not_estimable"].fillna(0)
    floor = 2.0 / (usable + 1.0)
    if "n_seed_resamples" in df:
        floor = np.fmax(floor, 2.0 / df["n_seed_resamples"].astype(float))
    return floor


def seeds_text(seeds: pd.DataFrame | None) -> str:
    """'3 seeds per encoder and dataset (2 datasets), so a replicate is one of 729 equally
    likely seed draws' from the analysis layer's ``seeds`` table ("" without it)."""
    if seeds is None or not len(seeds):
        return ""
    s = seeds.drop_duplicates("dataset")["n_seeds"].astype(int)
    n_ds = len(s)
    per = (f"{s.iloc[0]} seeds per encoder and dataset" if s.nunique() == 1
           else f"{s.min()} to {s.max()} seeds per encoder and dataset")
    N = float(seeds["n_seed_resamples"].max())
    return (f"{per} ({text.count(n_ds)} dataset{'s' if n_ds != 1 else ''}), so a replicate is "
            f"one of {text.count(N) if N < 1e9 else f'{N:.3g}'} equally likely seed draws and "
            f"the bootstrap distribution is that coarse however many replicates are drawn")


def replicates_text(df: pd.DataFrame, plan, ranks: pd.DataFrame | None = None,
                    seeds: pd.DataFrame | None = None) -> str:
    """'B paired-seed bootstrap replicates (seed s)', with the replicates that could not be
    estimated counted wherever B is stated: over the CRS rows when ``df`` has an
    ``estimand`` column (the axes' own counts are in the CSV), per encoder or pair, and,
    with ``ranks``, the replicates the rank probabilities use (those in which every
    encoder's CRS could be estimated)."""
    n = int(df["n_boot"].max()) if "n_boot" in df and df["n_boot"].notna().any() else plan.crs.bootstrap.n_boot
    if "estimand" in df and (df["estimand"] == "crs").any():
        df = df[df["estimand"] == "crs"]
    bad = (df["n_boot_not_estimable"].fillna(0) if "n_boot_not_estimable" in df
           else pd.Series([0.0]))
    lo, hi = int(bad.min()), int(bad.max())
    out = f"{n} paired-seed bootstrap replicates drawn (seed {plan.seed_for('crs_bootstrap')})"
    if seeds_text(seeds):
        out += f"; {seeds_text(seeds)}"
    if hi > 0:
        span = f"{hi} of them" if lo == hi else f"{lo} to {hi} of them (by encoder or pair)"
        out += (f"; {span} could not be estimated (in them the mean AUROC at full labels "
                f"of the encoder, or of a reference panel member its scores compare with, fell "
                f"to 0.5 or below on a dataset, where label efficiency and robustness, "
                f"relative to AUROC - 0.5, are undefined; or none of its runs was drawn) and "
                f"are left out of the intervals and p-values")
    if ranks is not None and "n_boot_not_estimable" in ranks and len(ranks):
        used = n - int(ranks["n_boot_not_estimable"].fillna(0).max())
        out += (f"; the rank probabilities use the {used} replicates in which every "
                f"encoder's CRS could be estimated")
    return out


def applies(study) -> bool:
    return study.reference is not None


def build(study) -> Section:
    import plotnine as p9

    plan = study.plan
    if study.reference is None:
        raise SkipSection("the plan names no inputs.reference (the CRS reference panel)")
    ref, crs = study.reference, plan.crs
    res = study.results["crs"]
    scores = res["scores"]
    scores = scores.assign(label=_enc_label(scores))
    wide = scores.pivot_table(index=["regime", "encoder", "label"], columns="estimand",
                              values="estimate", sort=False).reset_index()
    crs_rows = scores[scores["estimand"] == "crs"].assign(
        _r=lambda d: d["regime"].map({"frozen": 0, "adapted": 1}).fillna(2))
    crs_rows = crs_rows.sort_values(["_r", "estimate"], ascending=[True, False]).drop(
        columns="_r")  # within each regime, best first
    order = list(crs_rows["label"])
    panel = set(ref.panel)
    # ---- axes table
    wide["_o"] = wide["label"].map({v: i for i, v in enumerate(order)})
    wide = wide.sort_values("_o").drop(columns="_o").reset_index(drop=True)
    dagger = " \u2021"
    disp_axes = pd.DataFrame({"encoder": [lab + (dagger if e in panel else "")
                                          for lab, e in zip(wide["label"], wide["encoder"])]})
    for a in AXES:
        disp_axes[a] = [text.num(x, 3) for x in wide[a]]
    for a in AXES:
        disp_axes[f"norm_{a}"] = [text.num(x) for x in wide[f"norm_{a}"]]
    axes_data = scores[scores["estimand"].isin([*AXES, *[f"norm_{a}" for a in AXES]])]
    t_axes = ReportTable(
        name="crs_axes", caption="Reliability axes per encoder (mean over datasets) and their "
        "reference-anchored normalization.", data=axes_data, display=disp_axes,
        labels={"encoder": "Encoder", **{a: AXIS_LABEL[a].split(" (")[0] for a in AXES},
                **{f"norm_{a}": AXIS_LABEL[a].split(" (")[0] for a in AXES}},
        spanners=(("Raw axis", list(AXES)), ("Normalized (0-1, higher better)",
                                             [f"norm_{a}" for a in AXES])),
        notes=("\u2021 reference panel member. Calibration is the encoder's ECE: per run "
               "(clean, label fraction 1) with 15 equal-width bins, the mean over seeds, then "
               "over datasets; the same value as in the calibration tables (lower is better; "
               "its normalization is flipped). Anchors (lo, hi) per axis are in "
               "tables/crs_axes.csv.",))
    # ---- scores table with CIs and ranks
    rp = res["rank_probabilities"]
    rp = rp.assign(label=_enc_label(rp))
    rpw = rp.pivot_table(index="label", columns="estimand", values="estimate", sort=False)
    rank_ci = rp[rp["estimand"] == "rank"].set_index("label")
    tier = res.get("leading_tier")
    if tier is not None:
        tier = tier.assign(label=_enc_label(tier))
        in_tier = dict(zip(tier["label"], tier["in_leading_tier"].astype(bool)))
    s_ci = scores[scores["estimand"].isin(["dominance", "similarity", "worst_axis", "crs"])]
    disp_s = []
    for lab in order:
        row = {"encoder": lab}
        for e in ("dominance", "similarity", "worst_axis"):
            r = s_ci[(s_ci["label"] == lab) & (s_ci["estimand"] == e)].iloc[0]
            row[e] = text.num(r["estimate"])
        r = s_ci[(s_ci["label"] == lab) & (s_ci["estimand"] == "crs")].iloc[0]
        row["crs"] = text.ci(r["estimate"], r["conf_low"], r["conf_high"], 3)
        rk = rank_ci.loc[lab]
        row["rank"] = f"{text.count(rk['estimate'])} [{text.count(rk['conf_low'])}, {text.count(rk['conf_high'])}]"
        row["p1"] = text.num(rpw.loc[lab, "p_rank_1"])
        row["pk"] = text.num(rpw.loc[lab, "p_top_k"])
        if tier is not None:
            row["tier"] = "yes" if in_tier.get(lab) else ""
        disp_s.append(row)
    t_scores = ReportTable(
        name="crs_scores", caption=f"CRS components and CRS with paired-seed bootstrap "
        f"{int(round(100 * float(s_ci['conf_level'].dropna().iloc[0] if s_ci['conf_level'].notna().any() else 0.95)))}% CIs, rank "
        f"[CI], P(rank 1) and P(rank \u2264 {crs.k}).",
        data=pd.concat([s_ci, rp] + ([tier] if tier is not None else []), ignore_index=True),
        display=pd.DataFrame(disp_s),
        labels={"encoder": "Encoder", "dominance": "Dominance", "similarity": "Similarity",
                "worst_axis": "Worst axis", "crs": "CRS [CI]", "rank": "Rank [CI]",
                "p1": "P(rank 1)", "pk": f"P(top {crs.k})", "tier": "Leading tier"},
        spanners=(("Components", ["dominance", "similarity", "worst_axis"]),),
        notes=(f"{replicates_text(res['scores'], study.plan, res['rank_probabilities'], res.get('seeds'))}; anchors held fixed. CRS = weighted sum of dominance, "
               f"similarity and worst axis (weights in the reference file). Leading tier: "
               f"the best encoder and every encoder whose CRS difference from it has a "
               f"bootstrap CI containing 0.",))
    # ---- differences
    diff = res["differences"]
    disp_d = pd.DataFrame({
        "pair": diff["encoder"].astype(str) + " \u2212 " + diff["comparator"].astype(str),
        "diff": text.ci_vec(diff, 3),
        "p": [text.pvalue(p, floor=f) for p, f in zip(diff["p_value"], p_floor(diff))],
        "p_adj": [text.pvalue(p) for p in diff["p_adjusted"]]})
    t_diff = ReportTable(
        name="crs_differences", caption="Pairwise CRS differences (higher-ranked minus lower-"
        "ranked encoder) with bootstrap percentile CIs.", data=diff, display=disp_d,
        labels={"pair": "Encoders", "diff": "Difference [CI]", "p": "Bootstrap p",
                "p_adj": "Holm p"},
        notes=(f"Two-sided bootstrap p-values; with B usable replicates a bootstrap p-value "
               f"cannot go below 2/(B + 1), nor below 2/N with N the equally likely seed "
               f"draws (here at most {float(p_floor(diff).max()):.2g}): "
               f"none is shown below it, a p-value "
               f"at it reads \u2264 that resolution, or < 0.001 when the resolution is finer, "
               f"and Holm's adjustment over all pairs is bounded by it "
               f"({replicates_text(diff, study.plan, seeds=res.get('seeds'))}).",))
    # ---- stability
    st = res["stability"]
    names = {"kendall_tau": "Kendall tau", "kendall_tau_min": "Kendall tau, minimum",
             "kendall_tau_mean": "Kendall tau, mean [95% band]",
             "kendall_tau_median": "Kendall tau, median", "p_tau_1": "P(identical ranking)",
             "p_same_best": "P(same best encoder)", "pairs": "Encoder pairs",
             "inversions": "Inverted pairs", "mean_abs_displacement": "Mean |rank shift|",
             "top_k_overlap": f"Top-{crs.k} overlap"}
    analyses = {"leave_one_out": "Leave one panel member out",
                "dirichlet_weights": "Dirichlet(1,1,1) weights",
                "auroc_vs_crs": "AUROC ranking vs CRS ranking",
                "frozen_vs_adapted": "Frozen vs adapted"}
    disp_st = pd.DataFrame({
        "analysis": st["analysis"].map(analyses).fillna(st["analysis"]),
        "what": [names.get(e, e) + (f" (without {v})" if a == "leave_one_out" and v != "all" else "")
                 for e, a, v in zip(st["estimand"], st["analysis"], st["variant"])],
        "value": [text.ci(e, lo, hi) if e_name == "kendall_tau_mean" else
                  (text.count(e) if e_name in ("pairs", "inversions") else text.num(e))
                  for e, lo, hi, e_name in zip(st["estimate"], st["conf_low"], st["conf_high"],
                                               st["estimand"])]})
    t_stab = ReportTable(
        name="crs_stability", caption="Stability of the CRS ranking and its consequences: "
        "leave-one-out reference panels, random weights, and ranking by AUROC instead.",
        data=st, display=disp_st, group_col="analysis",
        labels={"what": "Statistic", "value": "Value"},
        notes=(f"Kendall tau-b against the base CRS ranking. Random weights: "
               f"{crs.n_weights} Dirichlet(1, 1, 1) draws of the three weights (seed "
               f"{study.plan.seed_for('crs_stability')}); the band is the central {round(100 * crs.conf_level):g}% of tau "
               f"over the draws. Inversions: encoder pairs ordered oppositely by AUROC and CRS, "
               f"out of all pairs; any AUROC difference counts, however small (full-precision "
               f"AUROCs in tables/crs_axes.csv).",))
    # ---- figures
    prof = scores[scores["estimand"].isin([f"norm_{a}" for a in AXES])].copy()
    prof["axis"] = pd.Categorical(prof["estimand"].str.replace("norm_", "").map(
        lambda a: AXIS_LABEL[a].split(" (")[0]), categories=[AXIS_LABEL[a].split(" (")[0] for a in AXES])
    prof["label"] = pd.Categorical(prof["label"], categories=order)
    colors = dict(zip(order, (PALETTE * 3)[:len(order)]))
    fig_prof = ReportFigure(
        name="crs_profiles", caption="Normalized reliability profiles: each encoder's four "
        "axes after anchoring to the reference panel (0 = the worst panel value or worse, "
        "1 = the best panel value or better: values are clipped to [0, 1]).",
        alt="Line plot of normalized axis values for each encoder.",
        plot=(p9.ggplot(prof, p9.aes("axis", "estimate", color="label", group="label"))
              + p9.geom_line() + p9.geom_point(size=1.5)
              + p9.scale_color_manual(values=colors, name="encoder")
              # the legend below in rows of 3 (one entry per encoder and regime: a single
              # row is wider than the figure)
              + p9.guides(color=p9.guide_legend(ncol=3))
              + p9.labs(x="", y="Normalized axis") + theme()),
        data=prof[["encoder", "regime", "estimand", "estimate"]], width=7.0,
        height=3.6 + 0.18 * max(0, -(-len(order) // 3) - 1))
    dom = wide[["label", "encoder", "dominance", "similarity", "worst_axis", "crs",
                "discrimination"]].copy()
    dom["panel"] = dom["encoder"].isin(panel).map({True: "reference panel", False: "candidate"})
    dom = _spread_labels(dom)
    fig_dom = ReportFigure(
        name="crs_dominance", caption="Dominance against the reference panel versus similarity "
        "to the ideal profile; point size is the worst normalized axis.",
        alt="Scatter plot of dominance versus similarity per encoder.",
        plot=(p9.ggplot(dom, p9.aes("dominance", "similarity", label="label", shape="panel"))
              + p9.geom_point(p9.aes(size="worst_axis"), color="#1b5e8a")
              + p9.geom_segment(p9.aes(x="dominance", y="similarity", xend="label_x",
                                       yend="label_y"), color="#b0b8c1", size=0.3)
              + p9.geom_text(p9.aes(x="label_x", y="label_y"), data=dom[dom["side"] == "right"],
                             ha="left", size=7)
              + p9.geom_text(p9.aes(x="label_x", y="label_y"), data=dom[dom["side"] == "left"],
                             ha="right", size=7)
              + p9.scale_size_continuous(range=(1.5, 5), name="worst axis")
              + p9.scale_x_continuous(expand=(0.08, 0, 0.08, 0))
              + p9.labs(x="Dominance D", y="Similarity S", shape="") + theme()),
        data=dom, width=6.5, height=4.0)
    cr = crs_rows.copy()
    cr["label"] = pd.Categorical(cr["label"], categories=order[::-1])
    fig_crs = ReportFigure(
        name="crs_scores", caption="CRS per encoder with paired-seed bootstrap confidence "
        "intervals, best first.", alt="Dot plot of CRS with intervals per encoder.",
        plot=points_ci(cr.assign(label=cr["label"].astype(str)).iloc[::-1], x="label",
                       y="estimate", xlab="", ylab="CRS"),
        data=crs_rows[["encoder", "regime", "estimate", "conf_low", "conf_high"]],
        width=6.0, height=0.8 + 0.28 * len(order))
    rpp = rp[rp["estimand"].isin(["p_rank_1", "p_top_k"])].copy()
    rpp["what"] = rpp["estimand"].map({"p_rank_1": "P(rank 1)", "p_top_k": f"P(rank \u2264 {crs.k})"})
    rpp["label"] = pd.Categorical(rpp["label"], categories=order)
    fig_rank = ReportFigure(
        name="crs_rank_probabilities", caption=f"Rank probabilities from the paired-seed "
        f"bootstrap: probability of ranking first and of ranking in the top {crs.k}.",
        alt="Bar chart of rank probabilities per encoder.",
        plot=(p9.ggplot(rpp, p9.aes("label", "estimate", fill="what"))
              + p9.geom_col(position="dodge", width=0.7)
              + p9.scale_fill_manual(values=PALETTE[:2], name="")
              + p9.scale_y_continuous(limits=(0, 1))
              + p9.labs(x="", y="Probability", fill="") + theme()
              # encoders on the vertical axis: their labels never overlap, however many
              + p9.coord_flip()),
        data=rpp[["encoder", "regime", "estimand", "estimate"]], width=7.0,
        height=1.4 + 0.28 * rpp["label"].nunique())
    fig_inv = _rank_shift(wide)
    inv = st[(st["analysis"] == "auroc_vs_crs") & (st["estimand"] == "inversions")]
    n_inv = text.count(inv["estimate"].iloc[0]) if len(inv) else text.DASH
    pairs = st[(st["analysis"] == "auroc_vs_crs") & (st["estimand"] == "pairs")]
    n_pairs = text.count(pairs["estimate"].iloc[0]) if len(pairs) else text.DASH
    md = (f"The reference panel ({text.md(text.human_list(sorted(panel)))}) anchors every axis "
          f"(@tbl-crs-axes, @fig-crs-profiles). @tbl-crs-scores and @fig-crs-scores give the CRS "
          f"with its uncertainty, @fig-crs-rank-probabilities the rank probabilities and "
          f"@fig-crs-dominance the dominance/similarity trade-off. Ranking by AUROC instead of "
          f"CRS inverts {n_inv} of {n_pairs} encoder pairs (@tbl-crs-stability, "
          f"@fig-crs-rank-shift); "
          f"@tbl-crs-differences lists every pairwise difference.")
    return Section(KEY, TITLE).add(md, t_axes, fig_prof, t_scores, fig_crs, fig_rank, fig_dom,
                                   t_stab, fig_inv, t_diff)


def _spread_labels(dom: pd.DataFrame) -> pd.DataFrame:
    """Label positions beside each point, pushed apart vertically where points crowd:
    right of the point in the left half of the panel, left of it in the right half, so
    that no name runs out of the panel."""
    d = dom.sort_values("similarity").reset_index(drop=True)
    lo, hi = float(d["dominance"].min()), float(d["dominance"].max())
    xr = (hi - lo) or 1.0
    yr = float(d["similarity"].max() - d["similarity"].min()) or 1.0
    d["side"] = np.where(d["dominance"] > lo + xr / 2, "left", "right")
    d["label_x"] = d["dominance"] + np.where(d["side"] == "right", 0.03, -0.03) * xr
    ys: list[float] = []
    for x, y, side in zip(d["label_x"], d["similarity"], d["side"]):
        near = [yy for xx, yy, ss in zip(d["label_x"][:len(ys)], ys, d["side"][:len(ys)])
                if ss == side and abs(xx - x) < 0.15 * xr]
        ys.append(max([y, *[yy + 0.06 * yr for yy in near]]))
    d["label_y"] = ys
    return d


def _rank_shift(wide: pd.DataFrame) -> ReportFigure:
    """Slope chart: each encoder's position when ordered by AUROC and by CRS (display
    order only; the agreement statistics come from stats.ranking_stability)."""
    import plotnine as p9

    def rank(col):
        return wide.groupby("regime")[col].rank(ascending=False, method="min")

    d = pd.concat([wide.assign(ranking="by AUROC", position=rank("discrimination")),
                   wide.assign(ranking="by CRS", position=rank("crs"))], ignore_index=True)
    d["ranking"] = pd.Categorical(d["ranking"], categories=["by AUROC", "by CRS"])
    n = int(wide.groupby("regime").size().max()) if len(wide) else 0   # ranks per regime
    regimes = wide["regime"].nunique() if len(wide) else 1
    # beside the points: the encoder (its regime is the panel's) or the full label
    d["text"] = d["encoder"].astype(str) if regimes > 1 else d["label"]
    left = d[d["ranking"] == "by AUROC"]
    right = d[d["ranking"] == "by CRS"]
    plot = (p9.ggplot(d, p9.aes("ranking", "position", group="label"))
            + p9.geom_line(color="#8d96a3") + p9.geom_point(size=2, color="#1b5e8a")
            + p9.geom_text(p9.aes(label="text"), data=left, ha="right", nudge_x=-0.06, size=7)
            + p9.geom_text(p9.aes(label="text"), data=right, ha="left", nudge_x=0.06, size=7)
            + p9.scale_y_reverse(breaks=list(range(1, n + 1)))
            # room for the labels beside both columns
            + p9.scale_x_discrete(expand=(0, 1.6))
            + p9.labs(x="", y="Rank (1 = best)") + theme())
    if regimes > 1:   # each regime ranked on its own: one panel each, named by encoder
        plot = plot + p9.facet_wrap("~regime", ncol=regimes)
    return ReportFigure(
        name="crs_rank_shift", caption="Ranking by AUROC versus ranking by CRS: crossing "
        "lines are inverted encoder pairs.", alt="Slope chart of encoder ranks by AUROC and by CRS.",
        plot=plot, data=d[["encoder", "regime", "ranking", "position", "discrimination", "crs"]],
        width=5.0 if regimes == 1 else 7.5, height=1.2 + 0.3 * n)
