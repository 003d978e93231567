"""inference_runner.segment.lesion_table and the segment run's lesions.parquet: components,
overlaps recomputed voxel by voxel, the centroid rule against MONAI's
compute_fp_tp_probs_nd, the greedy matching's threshold invariance, and a real run with
reference masks."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inference_runner.segment import lesion_table, match_lesions
from stats.schema import read_lesions


def _ball(shape, c, r):
    z, y, x = np.indices(shape)
    return ((z - c[0]) ** 2 + (y - c[1]) ** 2 + (x - c[2]) ** 2) <= r ** 2


def _batch():
    shape = (16, 16, 16)
    ref = np.zeros((3, *shape), bool)
    prob = np.zeros((3, *shape), np.float32)
    ref[0] = _ball(shape, (5, 5, 5), 3) | _ball(shape, (12, 12, 12), 2)
    prob[0] = 0.9 * _ball(shape, (5, 5, 6), 3) + 0.7 * _ball(shape, (12, 3, 3), 2)
    prob[0][_ball(shape, (12, 12, 12), 1)] = 0.6            # a small hit of lesion 2
    ref[1] = _ball(shape, (8, 8, 8), 5)
    prob[1] = 0.8 * _ball(shape, (8, 8, 4), 3) + 0.95 * _ball(shape, (8, 8, 12), 3)  # split
    prob[2] = 0.55 * _ball(shape, (4, 4, 4), 2)              # a negative case's false positive
    return prob, ref


def test_components_overlaps_and_matches_recomputed():
    prob, ref = _batch()
    les = lesion_table(prob, ref, case_ids=["a", "b", "c"], model="m", spacing=(2, 2, 2))
    read_lesions(les)                                        # a valid lesions table
    from scipy import ndimage

    for i, cid in enumerate("abc"):
        rl, nr = ndimage.label(ref[i])
        pl, npr = ndimage.label(prob[i] >= 0.5)
        rows = les[les["case_id"] == cid]
        assert (rows["kind"] == "reference").sum() == nr
        assert (rows["kind"] == "prediction").sum() == npr
        for r in rows[rows["kind"] == "prediction"].itertuples():
            k = int(r.lesion_id[1:])
            comp = pl == k
            assert r.volume_mm3 == comp.sum() * 8
            assert r.score == pytest.approx(prob[i][comp].max())
            if r.matched is not None:
                refc = rl == int(r.matched[1:])
                inter = (comp & refc).sum()
                assert r.iou == pytest.approx(inter / (comp | refc).sum(), abs=1e-12)
                assert r.dice == pytest.approx(2 * inter / (comp.sum() + refc.sum()), abs=1e-12)
    b = les[(les["case_id"] == "b") & (les["kind"] == "prediction")].set_index("lesion_id")
    # the split prediction: the higher-scoring half is matched, the other a duplicate
    assert b["matched"].notna().sum() == 1 and b["duplicate_of"].notna().sum() == 1
    assert b.loc[b["matched"].notna(), "score"].iloc[0] == pytest.approx(0.95)
    c = les[les["case_id"] == "c"]
    assert (c["kind"] == "prediction").sum() == 1 and c["matched"].isna().all()


def test_centroid_rule_is_monais_lookup():
    """hit_rule='centroid': the hits are MONAI's compute_fp_tp_probs_nd with the labelled
    reference as evaluation mask and the components' centroid voxels as coordinates."""
    from monai.metrics.froc import compute_fp_tp_probs_nd
    from scipy import ndimage

    prob, ref = _batch()
    les = lesion_table(prob, ref, case_ids=["a", "b", "c"], model="m", hit_rule="centroid")
    for i, cid in enumerate("abc"):
        rows = les[les["case_id"] == cid]
        pr = rows[rows["kind"] == "prediction"]
        rl, _ = ndimage.label(ref[i])
        coords = np.rint(pr[["centroid_i_mm", "centroid_j_mm", "centroid_k_mm"]].to_numpy()).astype(int)
        fp, tp, n = compute_fp_tp_probs_nd(pr["score"].to_numpy(float), coords, rl)
        mine_tp = [pr[pr["matched"] == f"r{k}"]["score"].max() if (pr["matched"] == f"r{k}").any()
                   else 0.0 for k in range(1, n + 1)]
        np.testing.assert_allclose(np.sort(tp), np.sort(mine_tp), rtol=1e-6)
        hits = pr["matched"].notna() | pr["duplicate_of"].notna()
        np.testing.assert_allclose(np.sort(fp), np.sort(pr[~hits]["score"]), rtol=1e-6)


def test_greedy_matching_commutes_with_thresholds():
    """The matches among predictions scoring >= t are those of matching them alone."""
    rng = np.random.default_rng(1)
    for _ in range(50):
        n_p, n_r = 6, 4
        score = rng.choice([0.5, 0.6, 0.7, 0.8, 0.9], n_p)
        pairs = rng.random((n_p, n_r)) < 0.4
        cp, cr = np.nonzero(pairs)
        ov = rng.random(len(cp))
        full, _ = match_lesions(cp, cr, ov, score)
        for t in np.unique(score):
            keep = score >= t
            sub = keep[cp]
            idx = np.flatnonzero(keep)
            remap = -np.ones(n_p, int)
            remap[idx] = np.arange(len(idx))
            part, _ = match_lesions(remap[cp[sub]], cr[sub], ov[sub], score[idx])
            assert (part == full[idx]).all()


def test_segment_run_with_reference_masks_writes_lesions(tmp_path):
    torch = pytest.importorskip("torch")
    nib = pytest.importorskip("nibabel")
    import yaml

    from inference_runner.config import load_segment_config
    from inference_runner.segment import build_network, run_segment

    rng = np.random.default_rng(0)
    rows = []
    shape = (16, 16, 12)
    for i in range(3):
        data = rng.normal(40, 20, shape).astype(np.float32)
        data[4:9, 4:9, 3:7] += 150
        affine = np.diag([1.5, 1.5, 2.0, 1.0])
        nib.save(nib.Nifti1Image(data, affine), str(tmp_path / f"case{i}.nii.gz"))
        mask = np.zeros(shape, np.uint8)
        if i != 2:
            mask[4:9, 4:9, 3:7] = 1
            nib.save(nib.Nifti1Image(mask, affine), str(tmp_path / f"mask{i}.nii.gz"))
        rows.append({"case_id": f"c{i}", "image": f"case{i}.nii.gz", "label": int(i != 2),
                     "reference": f"mask{i}.nii.gz" if i != 2 else ""})
    pd.DataFrame(rows).to_csv(tmp_path / "cases.csv", index=False)
    kw = {"channels": [4, 8], "strides": [2], "num_res_units": 0}
    torch.manual_seed(0)
    torch.save(build_network("unet", **kw).state_dict(), tmp_path / "model.pt")
    cfg = {"cases": "cases.csv", "output": "out", "model": "tiny", "device": "cpu",
           "transforms": {"orientation": "RAS", "spacing": [2.0, 2.0, 2.0], "window": [-100, 240]},
           "network": {"name": "unet", "weights": "model.pt", "kwargs": kw},
           "inference": {"roi_size": [8, 8, 8], "threshold": 0.5, "min_component_voxels": 1}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    res = run_segment(load_segment_config(tmp_path / "run.yaml"))
    assert res["merged"] and res["n_failed"] == 0
    les = read_lesions(tmp_path / "out" / "lesions.parquet")
    cases = pd.read_parquet(tmp_path / "out" / "cases.parquet").set_index("case_id")
    ref = les[les["kind"] == "reference"]
    assert sorted(ref["case_id"]) == ["c0", "c1"]
    pred = les[les["kind"] == "prediction"].groupby("case_id")["volume_mm3"].sum()
    np.testing.assert_allclose(pred.reindex(cases.index).fillna(0) / 8.0, cases["score"])
    assert (les["hit_rule"] == "iou>=0.1").all()
    import json

    man = json.loads((tmp_path / "out" / "run_manifest.json").read_text())
    assert man["tables"]["lesions"] == len(les) and "monai_froc" in man
