"""Adaptation and protocols (CRS-Bench's adaptation branch, E5): does the frozen ranking
survive parameter-efficient adaptation? Frozen-versus-adapted rank persistence (top-k
overlap, displacement, Kendall tau, P(top-k kept)) and each encoder's CRS change with
paired-seed intervals (``crs`` ``rank_persistence``, ``regime_differences``); with a
``protocol`` column, the protocols scored as arms (``crs_protocol``)."""
from __future__ import annotations

import pandas as pd

from .. import text
from ..figures import ReportFigure, points_ci
from ..tables import ReportTable
from . import Section, SkipSection
from .crs_domains import _crs_result

KEY = "crs_adaptation"
TITLE = "Adaptation and protocols"
HALF = "crs"

SUMMARY = {"kendall_tau": "Kendall tau-b", "top_k_overlap": "Top-{k} overlap (share)",
           "p_top_k_kept": "P(top {k} kept)", "mean_abs_displacement": "Mean |rank change|",
           "inversions": "Inverted pairs"}


def applies(study) -> bool:
    if study.reference is None:
        return False
    crs = study.results.get("crs") or {}
    return crs.get("rank_persistence") is not None or _crs_result(study, "crs_protocol") is not None


def _persistence_rows(pers: pd.DataFrame, arm: str, base_col: str, k: int) -> list[dict]:
    rows = []
    for arm_v, g in pers.groupby(arm, sort=True):
        base = g[base_col].iloc[0]
        head = f"{arm_v} vs {base}"
        s = g[g["encoder"] == "all"].set_index("estimand")
        for e, lab in SUMMARY.items():
            if e not in s.index:
                continue
            r = s.loc[e]
            val = (text.num(r["estimate"]) if e == "p_top_k_kept" else
                   text.ci(r["estimate"], r["conf_low"], r["conf_high"]))
            rows.append({"comparison": head, "what": lab.format(k=k), "value": val})
        for _, r in g[g["estimand"] == "rank_change"].sort_values("encoder").iterrows():
            rows.append({"comparison": head, "what": f"Rank change of {r['encoder']}",
                         "value": f"{text.count(r['estimate'])} [{text.count(r['conf_low'])}, "
                                  f"{text.count(r['conf_high'])}]"})
    return rows


def build(study) -> Section:
    sec = Section(KEY, TITLE)
    crs, k = study.results["crs"], study.plan.crs.k
    md = []
    pers = crs.get("rank_persistence")
    if pers is not None and len(pers):
        sec.add(ReportTable(
            name="crs_rank_persistence", caption="Does the frozen ranking survive adaptation? "
            "Rank persistence from the frozen to the adapted regime with paired-seed bootstrap "
            "CIs.", data=pers, display=pd.DataFrame(_persistence_rows(pers, "regime", "baseline", k)),
            group_col="comparison", labels={"what": "Statistic", "value": "Estimate [CI]"},
            notes=(f"Both regimes' CRS are recomputed in every replicate from the same seed "
                   f"draws (paired); {int(pers['n_boot'].max())} replicates (seed "
                   f"{study.plan.seed_for('crs_bootstrap')}). Rank change: adapted rank minus "
                   f"frozen rank (negative = moved up). P(top {k} kept): the share of replicates "
                   f"in which the frozen top {k} is the adapted top {k}.",)))
        md.append("@tbl-crs-rank-persistence asks whether the frozen ranking survives "
                  "parameter-efficient adaptation")
    diff = crs.get("regime_differences")
    if diff is not None and len(diff):
        d = diff.assign(label=diff["encoder"].astype(str))
        sec.add(ReportFigure(
            name="crs_adaptation_change", caption="CRS change from frozen to adapted per "
            "encoder (adapted minus frozen) with paired-seed bootstrap CIs.",
            alt="Dot plot of the CRS change under adaptation per encoder.",
            plot=points_ci(d.sort_values("estimate"), x="label", y="estimate", xlab="",
                           ylab="CRS adapted \u2212 frozen", hline=0.0),
            data=diff[["encoder", "regime", "estimate", "conf_low", "conf_high", "p_value"]],
            width=6.0, height=1.0 + 0.3 * len(d)))
        md.append("and @fig-crs-adaptation-change shows each encoder's CRS change")
    prot = _crs_result(study, "crs_protocol")
    if prot is not None:
        sc = prot["scores"]
        c = sc[sc["estimand"] == "crs"]
        protos = sorted(c["protocol"].unique())
        rows = []
        for enc, g in c.groupby("encoder", sort=True):
            g = g.set_index("protocol")
            rows.append({"encoder": enc, **{p: (text.ci(g.loc[p, "estimate"], g.loc[p, "conf_low"],
                                                        g.loc[p, "conf_high"], 3)
                                                if p in g.index else text.DASH) for p in protos}})
        dd = prot.get("differences")
        if dd is not None and len(dd):
            base = dd["baseline_protocol"].iloc[0]
            for row in rows:
                for p in protos:
                    if p == base:
                        continue
                    hit = dd[(dd["encoder"] == row["encoder"]) & (dd["protocol"] == p)]
                    row[f"d_{p}"] = (text.ci(hit["estimate"].iloc[0], hit["conf_low"].iloc[0],
                                             hit["conf_high"].iloc[0], 3) if len(hit) else text.DASH)
        disp = pd.DataFrame(rows)
        dcols = [c for c in disp.columns if c.startswith("d_")]
        sec.add(ReportTable(
            name="crs_protocols", caption="Protocols (linear probe, prompting, LoRA) scored as "
            "arms against the same reference: CRS per protocol and each protocol minus the "
            "baseline protocol, with paired-seed bootstrap CIs.",
            data=pd.concat([sc, *(x for x in (dd, prot.get("persistence")) if x is not None)],
                           ignore_index=True),
            display=disp, labels={"encoder": "Encoder", **{p: p for p in protos},
                                  **{c: f"{c[2:]} \u2212 {dd['baseline_protocol'].iloc[0]}"
                                     for c in dcols}},
            spanners=(("CRS [CI]", protos),) + ((("Difference [CI]", dcols),) if dcols else ()),
            notes=(f"Each protocol is anchored to the reference panel's runs under it "
                   f"(every protocol's anchors in tables/crs_protocols.csv); "
                   f"{int(sc['n_boot'].max())} replicates (seed "
                   f"{study.plan.seed_for('crs_protocol')}); rank persistence between "
                   f"protocols is in the same file.",)))
        md.append("; @tbl-crs-protocols compares the protocols as arms")
    if not md:
        raise SkipSection("no adapted runs and no protocol column")
    sec.blocks.insert(0, " ".join(md).replace(" ;", ";") + ".")
    return sec
