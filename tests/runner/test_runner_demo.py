"""inference_runner.demo: the synthetic CT physics, a tiny end-to-end regeneration, and
(slow) the full demo's BenchX pattern produced by the trained networks."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from inference_runner import demo  # noqa: E402


def test_cohort_physics_phase_sets_lesion_contrast_and_site_sets_noise():
    c = demo.make_cohort(120, seed=5)
    m = c.meta
    assert c.images.shape == (len(m), 1, *demo.SHAPE) and c.masks.shape == (len(m), *demo.SHAPE)
    assert c.images.min() >= 0 and c.images.max() <= 1
    pos = m["label"].to_numpy() == 1
    assert not c.masks[~pos].any() and c.masks[pos].reshape(pos.sum(), -1).any(1).all()
    # lesion-to-surrounding contrast measured on the images, by phase
    contrast = {}
    from scipy import ndimage

    for ph in demo.PHASES:
        sel = np.flatnonzero(pos & (m["phase"].to_numpy() == ph))
        vals = []
        for i in sel:
            les = c.masks[i].astype(bool)
            ring = ndimage.binary_dilation(les, iterations=2) & ~les
            vals.append(c.images[i, 0][ring].mean() - c.images[i, 0][les].mean())
        contrast[ph] = np.median(vals)
    assert contrast["venous"] > 2 * contrast["arterial"] and contrast["venous"] > 2 * contrast["non_contrast"]
    # phase is confounded with site: early sites are mostly venous
    share = m.assign(v=m["phase"] == "venous").groupby("site")["v"].mean()
    assert share.iloc[:2].mean() > share.iloc[-2:].mean() + 0.2
    # every patient keeps one site, age and label across scans
    assert (m.groupby("patient_id")[["site", "age", "label"]].nunique() == 1).all().all()


def test_tiny_regenerate_writes_the_contracts(tmp_path):
    import stats

    res = demo.regenerate(tmp_path, seed=1, quiet=True, n_patients=24, n_train_patients=12,
                          models={"u_a": ((4, 8), (2,), 3, 1e-2), "u_b": ((4, 8), (2,), 1, 1e-2)},
                          probe=False)
    cases = pd.read_parquet(tmp_path / "cases.parquet")
    assert tuple(cases.columns) == demo.CASE_COLUMNS
    assert set(cases["model"]) == {"u_a", "u_b"} and len(cases) == 2 * res["n_cases"]
    checked = stats.read_cases(cases)
    assert len(checked) == len(cases)
    assert (cases["score"] >= 0).all() and cases["split"].isin(["validation", "test"]).all()
    assert cases.loc[cases["label"] == 0, "tumor_size_mm"].isna().all()
    man = json.loads((tmp_path / "run_manifest.json").read_text())
    assert man["kind"] == "demo" and man["models"]["u_a"]["steps"] == 3 and man["seed"] == 1
    lesions = stats.read_lesions(tmp_path / "lesions.parquet")
    _lesions_agree_with_cases(lesions, cases)
    assert man["tables"]["lesions"] == len(lesions)


def _lesions_agree_with_cases(lesions, cases):
    """The lesions table is made from the same masks as the cases: per model and case, the
    predicted lesions' voxels add up to the score (predicted voxels, 2 mm grid) and their
    number is n_components; label-1 cases (and only they) have reference lesions."""
    for model, c in cases.groupby("model"):
        c = c.set_index("case_id")
        pred = lesions[(lesions["model"] == model) & (lesions["kind"] == "prediction")]
        vox = (pred.groupby("case_id")["volume_mm3"].sum() / demo.SPACING_MM ** 3)
        assert (vox.reindex(c.index).fillna(0) == c["score"]).all()
        assert (pred.groupby("case_id").size().reindex(c.index).fillna(0) == c["n_components"]).all()
        ref = lesions[(lesions["model"] == model) & (lesions["kind"] == "reference")]
        assert set(ref["case_id"]) == set(c.index[c["label"] == 1])


def test_committed_demo_lesions_agree_with_the_committed_cases():
    import stats
    from clinrel.cli.core import demo_data_dir

    lesions = stats.read_lesions(demo_data_dir() / "lesions.parquet")
    cases = pd.read_parquet(demo_data_dir() / "cases.parquet")
    _lesions_agree_with_cases(lesions, cases)
    assert (lesions["hit_rule"] == f"{demo.HIT_RULE}>={demo.MIN_OVERLAP:g}").all()


def test_committed_demo_cpm_equals_monai():
    """On the shipped demo lesions (every case), stats.froc's CPM per model equals MONAI's
    compute_froc_curve_data + compute_froc_score as the runner calls them (monai_froc);
    measured gap 0 for both networks (unet_large 0.4958, unet_small 0.3945)."""
    import stats
    from clinrel.cli.core import demo_data_dir
    from inference_runner.segment import monai_froc

    lesions = stats.read_lesions(demo_data_dir() / "lesions.parquet")
    cases = pd.read_parquet(demo_data_dir() / "cases.parquet")
    out = stats.froc(lesions, cases)
    for model, c in cases.groupby("model"):
        want = monai_froc(lesions[lesions["model"] == model], len(c))["cpm"]
        got = out[(out["model"] == model) & (out["estimand"] == "cpm")]["estimate"].iloc[0]
        assert abs(got - want) <= 1e-12, (model, got, want)


def test_probe_datasets_shapes_and_shift_sites():
    c = demo.make_cohort(30, seed=2)
    ds = demo.probe_datasets(c)
    assert [d["name"] for d in ds] == ["ct_axial", "ct_coronal"]
    for d in ds:
        assert d["images"].shape == (len(c.meta), demo.PROBE_SIZE, demo.PROBE_SIZE)
    shift = ds[0]["shift_mask"]
    assert (c.meta.loc[shift, "site"].isin(demo.PROBE_SHIFT_SITES)).all()


@pytest.mark.slow
def test_full_demo_shows_sensitivity_collapse_in_faint_phases(tmp_path):
    demo.regenerate(tmp_path, seed=0, quiet=True, probe=False)
    cases = pd.read_parquet(tmp_path / "cases.parquet")
    cases["pred"] = cases["score"] >= demo.DEFAULT_THRESHOLD
    for model, g in cases.groupby("model"):
        sens = g[g["label"] == 1].groupby("phase")["pred"].mean()
        spec = 1 - g[g["label"] == 0].groupby("phase")["pred"].mean()
        assert sens["venous"] > sens["non_contrast"] + 0.3 and sens["venous"] > sens["arterial"] + 0.3
        assert spec.min() > 0.8
        small = g[(g["label"] == 1) & (g["tumor_size_mm"] < 10)]["pred"].mean()
        large = g[(g["label"] == 1) & (g["tumor_size_mm"] >= 20)]["pred"].mean()
        assert large > small + 0.4


def test_committed_demo_has_the_sizes_the_generator_leaves_unrecorded():
    """clinrel/demo_data/cases.parquet is regenerate()'s output: unrecorded_sizes applied
    (idempotent) leaves it unchanged, and 3% of the reference-positive cases (both models'
    rows) have no recorded tumour size, so the demo shows a Missing level and scans left
    out of the adjusted models."""
    from pathlib import Path

    committed = pd.read_parquet(Path(demo.__file__).resolve().parents[1] / "clinrel"
                                / "demo_data" / "cases.parquet")
    pd.testing.assert_frame_equal(demo.unrecorded_sizes(committed, 0), committed)
    first = committed.drop_duplicates("case_id")
    pos = first[first["label"] == 1]
    gone = set(pos.loc[pos["tumor_size_mm"].isna(), "case_id"])
    assert len(gone) == round(demo.UNRECORDED_SIZE * len(pos)) > 0
    rows = committed[committed["case_id"].isin(gone)]
    assert rows["tumor_size_mm"].isna().all() and rows["model"].nunique() == 2
