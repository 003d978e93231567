"""The rows the CRS analyses use, and the mechanism analyses of CRS-Bench.

``crs_rows`` decides, once, which runs the CRS and every analysis built on it read: one
protocol per regime and encoder (frozen: ``probe``, or ``prompt`` for an encoder without
probe runs; adapted: ``lora``) and one layer per regime and encoder (the plan's
``crs.layer_policy``, ``crs.layers``, ``crs.last_layer``: ``stats.crs_mechanisms
.select_layers``); the probe predictions of the same runs. The depth analysis reads every
layer (at the chosen protocols), the protocol analysis every protocol (at the chosen
layers). The decisions are recorded (``crs.layers``, ``crs.layer_rule``,
``crs.protocols``, ``crs.rows``).

The mechanism analyses (``stats.crs_mechanisms``) use the CRS bootstrap's replicate count
(``crs.bootstrap.n_boot``) and one random stream each (``crs_shift``,
``crs_specialization``, ``crs_depth``, ``crs_confidence``, ``crs_protocol``,
``crs_labels``; the crs block's seed overrides them). ``crs_recomputed`` recomputes every
run's AUROC and ECE from the probe predictions (``stats.probe_metrics``: macro one-vs-rest
and top-label for multiclass probes) and records the largest difference from the runs
table.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .core import analysis

#: the protocol the ranking uses per regime, in order of preference
PROTOCOL_PREFERENCE = {"frozen": ("probe", "prompt"), "adapted": ("lora",)}
#: per-run AUROCs / ECEs closer than this to the runs table's count as the same number
SAME_METRIC = 1e-12


def _crs(plan):
    from .plan import Crs

    return plan.crs if getattr(plan, "crs", None) is not None else Crs()


def _has_crs(plan, tables) -> bool:
    return getattr(plan, "crs", None) is not None and tables.runs is not None \
        and tables.reference is not None


def _n_boot(plan) -> int:
    return int(plan.crs.bootstrap.n_boot)


def _boots(plan, tables) -> bool:
    return _has_crs(plan, tables) and _n_boot(plan) >= 2


def _protocol_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """Per regime x encoder the preferred protocol's rows (PROTOCOL_PREFERENCE)."""
    if df is None or "protocol" not in df.columns:
        return df, {}
    rank = {(r, p): i for r, prefs in PROTOCOL_PREFERENCE.items() for i, p in enumerate(prefs)}
    pr = pd.Series([rank.get((r, p), 99) for r, p in zip(df["regime"], df["protocol"])],
                   index=df.index)
    best = pr.groupby([df["regime"], df["encoder"]]).transform("min")
    keep = df[(pr == best).to_numpy() & (pr < 99).to_numpy()]
    used = keep.groupby(["regime", "encoder"])["protocol"].first()
    rule = {}
    for regime, per in used.groupby(level=0):
        first = PROTOCOL_PREFERENCE.get(regime, ("?",))[0]
        others = sorted(e for (_, e), p in per.items() if p != first)
        rule[regime] = first + (f"; {', '.join(set(per[per != first]))} for "
                                f"{', '.join(others)}" if others else "")
    return keep, rule


def _select(df: pd.DataFrame | None, choice: pd.DataFrame) -> pd.DataFrame | None:
    if df is None or "layer" not in df.columns:
        return df
    key = pd.MultiIndex.from_frame(choice[["regime", "encoder", "layer"]])
    hit = key.get_indexer(pd.MultiIndex.from_frame(df[["regime", "encoder", "layer"]])) >= 0
    return df[hit]


@analysis("crs_rows", wanted=lambda plan, tables: tables.runs is not None
          or tables.probe_predictions is not None)
def crs_rows(results) -> dict:
    """``{runs, probe_predictions, runs_layers, runs_protocols, layer_choice}``: the rows
    of the CRS (one protocol and one layer per regime x encoder), every layer at those
    protocols, every protocol at those layers, and the layer chosen per regime x encoder."""
    from stats.crs_mechanisms import select_layers
    from stats.schema import ContractError

    from .plan import PlanError

    crs = _crs(results.plan)
    runs, pp = results.tables.runs, results.tables.probe_predictions
    runs_p, rule = _protocol_rows(runs)
    pp_p, _ = _protocol_rows(pp)
    if rule:
        results.decide("crs.protocols", rule)
    out = {"runs": runs_p, "probe_predictions": pp_p, "runs_layers": runs_p,
           "runs_protocols": runs, "layer_choice": None}
    base = runs_p if runs_p is not None else pp_p
    if base is None or "layer" not in base.columns:
        return out
    try:
        src = runs_p if runs_p is not None else pp_p.assign(auroc=np.nan, ece=np.nan)
        choice = select_layers(src, policy=crs.layer_policy, last=crs.last_layer,
                               layers=dict(crs.layers))
    except ContractError as exc:
        key = "crs.layers" if "layers names" in str(exc) else "crs.last_layer"
        raise PlanError(f"{results.plan.where}: {results.plan.key(key)}: {exc}") from None
    several = choice["n_layers"] > 1
    results.decide("crs.layers", {r: dict(zip(g["encoder"], g["layer"]))
                                  for r, g in choice.groupby("regime")})
    policy = crs.layer_policy
    what = (f"the layer named {crs.last_layer!r}" if policy == "last" else
            "the layer with the highest seed-mean validation AUROC (val_auroc; test AUROC "
            "where the runs have none) at full labels, mean over datasets")
    results.decide("crs.layer_rule", (f"{policy}: {what}" if several.any() else "one layer per "
                                      "encoder") + (f"; given for {', '.join(sorted(crs.layers))}"
                                                    if crs.layers else ""))
    out["layer_choice"] = choice
    out["runs"] = _select(runs_p, choice)
    out["probe_predictions"] = _select(pp_p, choice)
    if runs is not None and "protocol" in runs.columns:
        parts = []
        for proto, g in runs.groupby("protocol", sort=True):   # the layer per protocol
            try:
                ch = select_layers(g, policy=crs.layer_policy, last=crs.last_layer,
                                   layers=dict(crs.layers))
            except ContractError:
                continue
            parts.append(_select(g, ch))
        out["runs_protocols"] = pd.concat(parts) if parts else None
    else:
        out["runs_protocols"] = out["runs"]
    if runs is not None:
        results.decide("crs.rows", {"runs": int(len(runs)), "used": int(len(out["runs"])),
                                    "other_layers": int(len(runs_p) - len(out["runs"])),
                                    "other_protocols": int(len(runs) - len(runs_p))})
    return out


def view(results):
    """``results.tables`` with the CRS rows (``crs_rows``) in place of the runs and the
    probe predictions: what every analysis of the CRS half reads."""
    import dataclasses

    rows = results["crs_rows"]
    return dataclasses.replace(results.tables, runs=rows["runs"],
                               probe_predictions=rows["probe_predictions"])


# --------------------------------------------------------------------------- analyses


def _wants_shift(plan, tables) -> bool:
    return _boots(plan, tables) and (tables.runs["condition"] == "shift").any()


@analysis("crs_shift", wanted=_wants_shift)
def crs_shift(results) -> pd.DataFrame:
    """The institutional shift per encoder beside the corruption drop (``shift_drop``)."""
    from stats.crs_mechanisms import shift_drop

    seed = results.plan.seed_for("crs_shift")
    results.decide("seeds.crs_shift", seed)
    return shift_drop(view(results).runs, n_boot=_n_boot(results.plan), seed=seed,
                      conf_level=results.plan.crs.conf_level)


def _wants_specialization(plan, tables) -> bool:
    return _boots(plan, tables) and bool(plan.crs.encoder_domains)


@analysis("crs_specialization", wanted=_wants_specialization)
def crs_specialization(results) -> pd.DataFrame:
    """Matched- versus cross-domain gains over the reference panel (E1)."""
    from stats.crs_mechanisms import specialization

    crs = results.plan.crs
    seed = results.plan.seed_for("crs_specialization")
    results.decide("seeds.crs_specialization", seed)
    return specialization(view(results).runs, dict(crs.encoder_domains),
                          dataset_domains=dict(crs.dataset_domains) or None,
                          baseline=list(results.tables.reference.panel), n_boot=_n_boot(results.plan),
                          seed=seed, conf_level=crs.conf_level)


def _wants_depth(plan, tables) -> bool:
    r = tables.runs
    return (_boots(plan, tables) and "layer" in r.columns
            and bool((r.groupby(["regime", "encoder"])["layer"].nunique() > 1).any()))


@analysis("crs_depth", wanted=_wants_depth)
def crs_depth(results) -> pd.DataFrame:
    """The CRS axes per encoder and layer, the best layer and best-minus-last (E3)."""
    from stats.crs_mechanisms import layer_comparison

    crs = results.plan.crs
    seed = results.plan.seed_for("crs_depth")
    results.decide("seeds.crs_depth", seed)
    return layer_comparison(results["crs_rows"]["runs_layers"], last=crs.last_layer,
                            n_boot=_n_boot(results.plan), seed=seed, conf_level=crs.conf_level)


def _wants_confidence(plan, tables) -> bool:
    r = tables.runs
    return _boots(plan, tables) and bool(((r["label_fraction"] == 1.0)
                                          & ~r["condition"].isin(["clean", "shift"])).any())


@analysis("crs_confidence", wanted=_wants_confidence)
def crs_confidence(results) -> pd.DataFrame:
    """ECE change next to AUROC change per perturbation x severity (E4)."""
    from stats.crs_mechanisms import confidence_loss

    crs = results.plan.crs
    seed = results.plan.seed_for("crs_confidence")
    results.decide("seeds.crs_confidence", seed)
    return confidence_loss(view(results).runs, auroc_margin=crs.auroc_margin,
                           n_boot=_n_boot(results.plan), seed=seed, conf_level=crs.conf_level)


def _wants_protocol(plan, tables) -> bool:
    r = tables.runs
    return _boots(plan, tables) and "protocol" in r.columns and r["protocol"].nunique() > 1


@analysis("crs_protocol", wanted=_wants_protocol)
def crs_protocol(results) -> dict[str, pd.DataFrame]:
    """Protocols (probe, prompt, lora) scored as arms with the same reference (E5):
    ``{scores, differences (each protocol minus probe), persistence}``."""
    from stats.crs_resample import crs_bootstrap
    from stats.schema import ContractError

    crs = results.plan.crs
    seed = results.plan.seed_for("crs_protocol")
    results.decide("seeds.crs_protocol", seed)
    runs = results["crs_rows"]["runs_protocols"]
    protos = sorted(pd.unique(runs["protocol"]))
    ref = results.tables.reference
    # a protocol whose panel members lack runs cannot be anchored: left out, said so
    keep = []
    for p in protos:
        have = set(runs.loc[runs["protocol"] == p, "encoder"])
        if set(ref.panel) <= have or len(ref.anchors) == 4:
            keep.append(p)
        else:
            results.note(f"Protocol {p} is left out of the protocol comparison: reference panel "
                         f"members {', '.join(sorted(set(ref.panel) - have))} have no {p} runs.")
    runs = runs[runs["protocol"].isin(keep)]
    try:
        boot = crs_bootstrap(runs, ref, n_boot=_n_boot(results.plan), seed=seed,
                             conf_level=crs.conf_level, arm="protocol")
    except ContractError:
        raise
    base = "probe" if "probe" in keep else keep[0]
    diffs = [boot.regime_differences(p, base) for p in keep if p != base]
    pers = [boot.rank_persistence(p, base, k=crs.k) for p in keep if p != base]
    return {"scores": boot.scores(),
            "differences": pd.concat(diffs, ignore_index=True) if diffs else None,
            "persistence": pd.concat(pers, ignore_index=True) if pers else None}


def _wants_labels(plan, tables) -> bool:
    r = tables.runs
    return _boots(plan, tables) and r.loc[r["condition"] == "clean", "label_fraction"].nunique() > 1


@analysis("crs_labels", wanted=_wants_labels)
def crs_labels(results) -> dict[str, pd.DataFrame]:
    """Learning curves with paired-seed bands and label-efficiency crossovers (E6)."""
    from stats.crs_mechanisms import label_crossovers, label_efficiency_curves

    crs = results.plan.crs
    seed = results.plan.seed_for("crs_labels")
    results.decide("seeds.crs_labels", seed)
    runs = view(results).runs
    n = _n_boot(results.plan)
    return {"curves": label_efficiency_curves(runs, n_boot=n, seed=seed, conf_level=crs.conf_level),
            "crossovers": label_crossovers(runs, n_boot=n, seed=seed, conf_level=crs.conf_level)}


@analysis("crs_recomputed", wanted=lambda plan, tables: _has_crs(plan, tables)
          and tables.probe_predictions is not None)
def crs_recomputed(results) -> pd.DataFrame:
    """Every run's AUROC and ECE recomputed from the probe predictions beside the runs
    table's (``stats.probe_metrics``); the largest differences are recorded."""
    from stats.multiclass import probe_metrics
    from stats.schema import run_key

    v = view(results)
    got = probe_metrics(v.probe_predictions)
    keys = [c for c in run_key(got) if c in got.columns]
    wide = got.pivot_table(index=keys, columns="estimand", values="estimate").reset_index()
    runs = v.runs[[*keys, "auroc", "ece"]]
    m = wide.merge(runs, on=keys, how="outer", suffixes=("_recomputed", "_runs"), indicator=True)
    both = m["_merge"] == "both"
    da = (m.loc[both, "auroc_recomputed"] - m.loc[both, "auroc_runs"]).abs()
    de = (m.loc[both, "ece_recomputed"] - m.loc[both, "ece_runs"]).abs()
    results.decide("crs.runs_vs_predictions", {
        "runs_compared": int(both.sum()), "runs_without_predictions": int((m["_merge"] == "right_only").sum()),
        "max_abs_auroc_difference": float(da.max()) if len(da) else None,
        "max_abs_ece_difference": float(de.max()) if len(de) else None,
        "multiclass": bool((got["n_classes"] > 2).any())})
    if len(da) and (da.max() > SAME_METRIC or de.max() > SAME_METRIC):
        results.note("Some runs' AUROC or ECE recomputed from the probe predictions differ from "
                     "the runs table's (crs_recomputed.csv); the CRS uses the runs table.")
    return got
