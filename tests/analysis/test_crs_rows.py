"""The rows the CRS analyses read (analysis.crs_mechanisms.crs_rows): one layer and one
protocol per regime x encoder, chosen by the plan (crs.layer_policy, crs.layers,
crs.last_layer), so that depths and protocols never compete in the ranking as encoders;
and the mechanism analyses wired to the stats functions on those rows."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import Tables, run
from analysis.plan import PlanError, plan_for_tables
from stats import simulate
from stats.crs import read_reference

B = 30


@pytest.fixture(scope="module")
def study():
    sim = simulate.crs_runs(n_encoders=6, n_datasets=2, n_seeds=3, perturbations=("blur", "noise"),
                            severities=(1, 3), label_fractions=(0.05, 0.25, 1.0),
                            regimes=("frozen", "adapted"), seed=11)
    r = sim.data
    rng = np.random.default_rng(0)
    mid = r.assign(layer="mid", auroc=np.clip(r["auroc"] - 0.03 + rng.normal(0, 0.005, len(r)), 0, 1))
    runs = pd.concat([mid, r.assign(layer="last")], ignore_index=True)
    runs["val_auroc"] = np.clip(runs["auroc"] + rng.normal(0, 0.01, len(runs)), 0, 1)
    # enc_02's middle layer validates best: the best policy must pick it
    hit = (runs["encoder"] == "enc_02") & (runs["layer"] == "mid")
    runs.loc[hit, "val_auroc"] = 0.999
    runs["protocol"] = np.where(runs["regime"] == "adapted", "lora", "probe")
    return runs, read_reference(sim.truth["reference"])


def _run(runs, ref, only, **crs):
    plan = plan_for_tables(crs={"bootstrap": {"n_boot": B}, **crs})
    return run(plan, Tables(runs=runs, reference=ref), only=only, errors="raise")


def test_last_policy_ranks_the_last_layer_only(study):
    runs, ref = study
    res = _run(runs, ref, ["crs_rows", "crs"])
    used = res["crs_rows"]["runs"]
    assert set(used["layer"]) == {"last"} and len(used) == (runs["layer"] == "last").sum()
    assert res.decisions.crs.rows == {"runs": len(runs), "used": len(used),
                                      "other_layers": len(runs) - len(used), "other_protocols": 0}
    # the same scores as the CRS of the last layer's runs alone: depths are not encoders
    alone = _run(runs[runs["layer"] == "last"].drop(columns="layer"), ref, ["crs"])
    a = res["crs"]["scores"].sort_values(["regime", "encoder"]).reset_index(drop=True)
    b = alone["crs"]["scores"].sort_values(["regime", "encoder"]).reset_index(drop=True)
    assert list(a["encoder"]) == list(b["encoder"])
    np.testing.assert_allclose(a["estimate"], b["estimate"], rtol=0, atol=1e-12)


def test_best_policy_follows_the_validation_auroc(study):
    runs, ref = study
    res = _run(runs, ref, ["crs_rows"], layer_policy="best")
    choice = res["crs_rows"]["layer_choice"].set_index(["regime", "encoder"])
    # by hand: seed-mean val_auroc at clean, full labels, mean over datasets; highest wins
    base = runs[(runs["condition"] == "clean") & (runs["label_fraction"] == 1.0)]
    crit = base.groupby(["regime", "encoder", "layer", "dataset"])["val_auroc"].mean() \
        .groupby(["regime", "encoder", "layer"]).mean().unstack("layer")
    want = crit.idxmax(axis=1)
    assert (choice.loc[want.index, "layer"] == want).all()
    assert choice.loc[("frozen", "enc_02"), "layer"] == "mid"
    assert set(choice["rule"]) == {"best val_auroc"}
    assert "best" in res.decisions.crs.layer_rule


def test_given_layers_override_and_a_wrong_one_is_refused(study):
    runs, ref = study
    res = _run(runs, ref, ["crs_rows"], layers={"enc_03": "mid"})
    ch = res["crs_rows"]["layer_choice"].set_index(["regime", "encoder"])
    assert ch.loc[("frozen", "enc_03"), "layer"] == "mid" and ch.loc[("frozen", "enc_03"), "rule"] == "given"
    assert ch.loc[("frozen", "enc_01"), "layer"] == "last"
    assert res.decisions.crs.layers["frozen"]["enc_03"] == "mid"
    with pytest.raises(PlanError, match="crs.layers"):
        _run(runs, ref, ["crs_rows"], layers={"enc_03": "deep"})["crs_rows"]


def test_the_prompt_protocol_stands_in_where_an_encoder_has_no_probe(study):
    runs, ref = study
    r = runs.copy()
    r.loc[(r["encoder"] == "enc_06") & (r["regime"] == "frozen"), "protocol"] = "prompt"
    extra = runs[(runs["encoder"] == "enc_01") & (runs["regime"] == "frozen")].assign(
        protocol="prompt", auroc=0.5)
    r = pd.concat([r, extra], ignore_index=True)
    res = _run(r, ref, ["crs_rows"])
    used = res["crs_rows"]["runs"]
    got = used.groupby(["regime", "encoder"])["protocol"].unique()
    assert list(got[("frozen", "enc_06")]) == ["prompt"]
    assert list(got[("frozen", "enc_01")]) == ["probe"]     # probe preferred to prompt
    assert res.decisions.crs.protocols["frozen"] == "probe; prompt for enc_06"
    assert res.decisions.crs.rows["other_protocols"] == len(extra)


def test_mechanism_analyses_are_the_stats_functions_on_the_chosen_rows(study):
    import stats.crs_mechanisms as m

    runs, ref = study
    names = ["crs_shift", "crs_depth", "crs_confidence", "crs_labels", "crs_specialization"]
    res = _run(runs, ref, ["crs_rows", *names], encoder_domains={"enc_01": "ds_01"})
    used = res["crs_rows"]["runs"]
    seed = res.plan.seed_for
    pd.testing.assert_frame_equal(res["crs_shift"], m.shift_drop(used, n_boot=B, seed=seed("crs_shift")))
    pd.testing.assert_frame_equal(res["crs_confidence"], m.confidence_loss(
        used, auroc_margin=0.02, n_boot=B, seed=seed("crs_confidence")))
    pd.testing.assert_frame_equal(res["crs_depth"], m.layer_comparison(
        runs, n_boot=B, seed=seed("crs_depth")))
    pd.testing.assert_frame_equal(res["crs_labels"]["curves"], m.label_efficiency_curves(
        used, n_boot=B, seed=seed("crs_labels")))
    pd.testing.assert_frame_equal(res["crs_specialization"], m.specialization(
        used, {"enc_01": "ds_01"}, baseline=list(ref.panel), n_boot=B, seed=seed("crs_specialization")))
    # one stream each: the seeds differ and are recorded
    s = {n: getattr(res.decisions.seeds, n) for n in names}
    assert len(set(s.values())) == len(names) and None not in s.values()


def test_protocols_and_adaptation_tables(study):
    runs, ref = study
    res = _run(runs, ref, ["crs", "crs_protocol"])
    pers = res["crs"]["rank_persistence"]
    assert len(pers) and pers["estimate"].notna().any()
    prot = res["crs_protocol"]
    assert set(prot["scores"]["protocol"]) == {"lora", "probe"}
    # lora - probe per encoder is adapted - frozen: the protocols are the regimes here,
    # so the point differences agree (the replicates are another stream)
    d1 = prot["differences"].sort_values("encoder")["estimate"].to_numpy()
    d2 = res["crs"]["regime_differences"].sort_values("encoder")["estimate"].to_numpy()
    assert len(d1) == len(d2) == 6
    np.testing.assert_allclose(d1, d2, rtol=0, atol=1e-12)


def test_runs_recomputed_from_probe_predictions_are_compared_and_recorded():
    from sklearn.metrics import roc_auc_score

    import stats

    sim = simulate.crs_runs(n_encoders=5, n_datasets=1, n_seeds=2, perturbations=("blur",),
                            severities=(1,), label_fractions=(0.5, 1.0), shift_datasets=0, seed=3)
    runs = sim.data.copy()
    key = ["regime", "encoder", "dataset", "seed", "label_fraction", "condition", "severity"]
    rng = np.random.default_rng(4)
    parts = []
    for i, row in enumerate(runs[key].itertuples(index=False)):   # a test's own loop
        y = rng.integers(0, 2, 40)
        p = np.clip(0.5 + 0.3 * (y - 0.5) + rng.normal(0, 0.2, 40), 0.01, 0.99)
        runs.loc[i, "auroc"] = roc_auc_score(y, p)
        runs.loc[i, "ece"] = stats.ece(y, p)
        parts.append(pd.DataFrame({**row._asdict(), "case_id": [f"c{j}" for j in range(40)],
                                   "label": y, "prob": p}))
    preds = pd.concat(parts, ignore_index=True)
    ref = read_reference(sim.truth["reference"])
    plan = plan_for_tables(crs={"bootstrap": {"n_boot": 0}})
    res = run(plan, Tables(runs=runs, reference=ref, probe_predictions=preds),
              only=["crs_recomputed"], errors="raise")
    v = res.decisions.crs.runs_vs_predictions
    assert v["runs_compared"] == len(runs) and v["runs_without_predictions"] == 0
    assert v["max_abs_auroc_difference"] <= 1e-12 and v["max_abs_ece_difference"] <= 1e-12
    assert not res.notes
    moved = runs.copy()
    moved.loc[3, "auroc"] += 0.01
    res = run(plan, Tables(runs=moved, reference=ref, probe_predictions=preds),
              only=["crs_recomputed"], errors="raise")
    assert res.decisions.crs.runs_vs_predictions["max_abs_auroc_difference"] == pytest.approx(0.01, abs=1e-12)
    assert any("differ from the runs table" in n for n in res.notes)
