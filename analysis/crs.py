"""CRS analyses: axes, reference-anchored scores with paired-seed bootstrap intervals,
rank probabilities, pairwise differences, leading tier, frozen-vs-adapted differences
and ranking stability. ``clinrel crs`` and the report's CRS section both read these.

The reference is read once (``stats.read_reference``) when the inputs are loaded, so the
hash recorded with every score is the one the methods text states.
"""
from __future__ import annotations

import pandas as pd

from .core import analysis

def _wants(plan, tables) -> bool:
    return (getattr(plan, "crs", None) is not None and tables.runs is not None
            and tables.reference is not None)


def settings(plan) -> dict:
    crs = plan.crs
    return {"n_boot": crs.bootstrap.n_boot, "seed": plan.seed_for("crs_bootstrap"),
            "stability_seed": plan.seed_for("crs_stability"), "k": crs.k,
            "conf_level": crs.conf_level, "n_weights": crs.n_weights}


@analysis("crs", wanted=_wants)
def crs(results) -> dict[str, pd.DataFrame]:
    """``{axes, scores, domain_scores (two datasets or more: per-domain scores, the same
    anchors and replicates), rank_probabilities, differences, leading_tier, seeds (per
    regime and dataset the seeds a replicate redraws, and the equally likely seed draws
    they allow), regime_differences and rank_persistence (frozen and adapted runs only),
    stability (n_weights > 0)}``, on the CRS rows (``crs_rows``: one layer and protocol
    per encoder)."""
    from stats.crs import crs_axes, crs_scores
    from stats.crs_resample import crs_bootstrap
    from stats.ranking import ranking_stability

    from .crs_mechanisms import view

    s = settings(results.plan)
    runs, ref = view(results).runs, results.tables.reference
    results.decide("crs.bootstrap.n_boot", s["n_boot"])
    results.decide("seeds.crs_bootstrap", s["seed"])
    if s["n_weights"]:
        results.decide("seeds.crs_stability", s["stability_seed"])
    results.decide("crs.reference_hash", getattr(ref, "hash", None))
    out = {"axes": crs_axes(runs)}
    if s["n_boot"] > 0:
        by = "dataset" if runs["dataset"].nunique() > 1 else None
        boot = crs_bootstrap(runs, ref, n_boot=s["n_boot"], seed=s["seed"],
                             conf_level=s["conf_level"], scheduler=results.scheduler, by=by)
        if by:       # per-domain scores: the same replicates, the same anchors
            out["domain_scores"] = boot.domain_scores()
        out["scores"] = boot.scores()
        out["rank_probabilities"] = boot.rank_probabilities(s["k"])
        out["differences"] = boot.differences()
        out["leading_tier"] = boot.leading_tier()
        out["seeds"] = pd.DataFrame(
            [{"regime": r, "dataset": ds, "n_seeds": len(sd),
              "n_seed_resamples": boot.n_seed_resamples(r)}
             for r, per in boot.seeds.items() for ds, sd in per.items()])
        if {"frozen", "adapted"} <= set(boot.replicates):
            out["regime_differences"] = boot.regime_differences("adapted", "frozen")
            out["rank_persistence"] = boot.rank_persistence("adapted", "frozen", k=s["k"])
    else:
        out["scores"] = crs_scores(runs, ref)
        if runs["dataset"].nunique() > 1:
            out["domain_scores"] = crs_scores(runs, ref, by="dataset")
    if s["n_weights"] > 0:
        out["stability"] = ranking_stability(runs, ref, n_weights=s["n_weights"], seed=s["stability_seed"],
                                             k=s["k"], conf_level=s["conf_level"])
    return out
