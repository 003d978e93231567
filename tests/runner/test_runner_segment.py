"""inference_runner.segment: config validation, sliding-window inference on real NIfTI and
DICOM files, shards, resume, failed cases; summaries checked by independent recomputation."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
nib = pytest.importorskip("nibabel")

from inference_runner.config import ConfigError, load_segment_config, parse_shard  # noqa: E402
from inference_runner.segment import (build_network, merge_parts, predict_probability,  # noqa: E402
                                      run_segment, summarize_masks)

NET_KW = {"channels": [4, 8], "strides": [2], "num_res_units": 0}


def _write_case(path: Path, rng, shape=(16, 16, 12), spacing=(1.5, 1.5, 2.0)):
    data = rng.normal(40, 20, shape).astype(np.float32)
    data[4:9, 4:9, 3:7] += 150  # a bright blob
    affine = np.diag([*spacing, 1.0])
    nib.save(nib.Nifti1Image(data, affine), str(path))


@pytest.fixture()
def study(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(5):
        f = tmp_path / f"case{i}.nii.gz"
        _write_case(f, rng)
        rows.append({"case_id": f"c{i}", "image": f.name, "label": i % 2, "site": f"s{i % 2}", "age": 50 + i})
    rows.append({"case_id": "broken", "image": "missing.nii.gz", "label": 0, "site": "s0", "age": 70})
    pd.DataFrame(rows).to_csv(tmp_path / "cases.csv", index=False)
    torch.manual_seed(0)
    net = build_network("unet", **NET_KW)
    torch.save(net.state_dict(), tmp_path / "model.pt")
    cfg = {
        "cases": "cases.csv", "output": "out", "model": "tiny_unet", "seed": 0, "device": "cpu",
        "transforms": {"orientation": "RAS", "spacing": [2.0, 2.0, 2.0], "window": [-100, 240]},
        "network": {"name": "unet", "weights": "model.pt", "kwargs": NET_KW},
        "inference": {"roi_size": [8, 8, 8], "sw_batch_size": 4, "overlap": 0.25, "threshold": 0.5,
                      "min_component_voxels": 2},
    }
    import yaml

    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    return tmp_path


def test_run_writes_cases_and_manifest_and_records_failures(study):
    cfg = load_segment_config(study / "run.yaml")
    res = run_segment(cfg)
    assert res["merged"] and res["n_run"] == 6 and res["n_failed"] == 1
    table = pd.read_parquet(study / "out" / "cases.parquet")
    assert list(table["case_id"]) == ["c0", "c1", "c2", "c3", "c4", "broken"]
    assert list(table.columns[:5]) == ["case_id", "model", "label", "score", "site"]
    assert (table["model"] == "tiny_unet").all()
    ok = table[table["status"] == "ok"]
    assert len(ok) == 5 and (ok["score"] == ok["pred_voxels"]).all()
    np.testing.assert_allclose(ok["volume_mm3"], ok["pred_voxels"] * 8.0)  # 2 mm grid
    assert ((ok["max_prob"] >= 0) & (ok["max_prob"] <= 1)).all()
    bad = table.set_index("case_id").loc["broken"]
    assert bad["status"] == "failed" and "missing.nii.gz" in bad["reason"] and np.isnan(bad["score"])
    man = json.loads((study / "out" / "run_manifest.json").read_text())
    for key in ("config_hash", "seed", "versions", "device", "git_revision", "tables"):
        assert key in man
    assert man["device"] == "cpu" and man["versions"]["monai"] and man["tables"]["cases"] == 6


def test_rerun_resumes_and_shards_match_single_run(study):
    cfg = load_segment_config(study / "run.yaml")
    run_segment(cfg)
    again = run_segment(cfg)
    assert again["n_run"] == 0 and again["n_skipped"] == 6 and again["merged"]
    single = pd.read_parquet(study / "out" / "cases.parquet")
    cfg2 = load_segment_config(study / "run.yaml", overrides={"output": "sharded"})
    first = run_segment(cfg2, shard=(1, 2))
    assert first["n_run"] == 3 and not first["merged"]
    assert not (study / "sharded" / "cases.parquet").exists()
    second = run_segment(cfg2, shard=(2, 2))
    assert second["merged"]
    sharded = pd.read_parquet(study / "sharded" / "cases.parquet")
    pd.testing.assert_frame_equal(single, sharded)


def test_stale_parts_from_another_config_are_rerun(study):
    cfg = load_segment_config(study / "run.yaml")
    run_segment(cfg)
    cfg2 = load_segment_config(study / "run.yaml", overrides={"inference": {"threshold": 0.9}})
    res = run_segment(cfg2)
    assert res["n_run"] == 6
    assert merge_parts(cfg2) is not None


def test_dicom_series_folder_is_read(study):
    pydicom = pytest.importorskip("pydicom")
    src = Path(pydicom.data.__file__).parent / "test_files" / "CT_small.dcm"
    series = study / "dicom_series"
    series.mkdir()
    shutil.copy(src, series / "slice1.dcm")
    five_slices = Path(pydicom.data.__file__).parent / "test_files" / "dicomdirtests" / "98892001" / "CT5N"
    pd.DataFrame({"case_id": ["ct", "ct5"], "image": ["dicom_series", str(five_slices)], "label": [0, 1],
                  "site": ["s", "s"]}).to_csv(study / "dicom.csv", index=False)
    cfg = load_segment_config(study / "run.yaml", overrides={"cases": "dicom.csv", "output": "dout",
                                                              "transforms": {"spacing": None}})
    run_segment(cfg)
    rows = pd.read_parquet(study / "dout" / "cases.parquet")
    assert (rows["status"] == "ok").all(), rows["reason"].tolist()
    from inference_runner.segment import load_case

    img, voxel_volume = load_case(five_slices, cfg["transforms"])
    assert img.shape[-1] == 5 and voxel_volume > 0  # a real five-slice CT series


def test_summaries_match_independent_recomputation():
    from scipy import ndimage

    rng = np.random.default_rng(3)
    prob = ndimage.gaussian_filter(rng.random((4, 10, 10, 10)), sigma=(0, 1, 1, 1)).astype(np.float32)
    prob = (prob - prob.min()) / (prob.max() - prob.min())
    got = summarize_masks(prob, threshold=0.6, min_component_voxels=3, voxel_volume_mm3=2.5)
    for i in range(4):
        lab, n = ndimage.label(prob[i] >= 0.6)
        sizes = np.bincount(lab.ravel())[1:]
        keep = np.isin(lab, np.flatnonzero(sizes >= 3) + 1)
        assert got.loc[i, "pred_voxels"] == keep.sum()
        assert got.loc[i, "n_components"] == (sizes >= 3).sum()
        assert got.loc[i, "volume_mm3"] == pytest.approx(keep.sum() * 2.5)
        assert got.loc[i, "max_prob"] == pytest.approx(prob[i].max())
        if keep.any():
            assert got.loc[i, "mean_prob"] == pytest.approx(prob[i][keep].mean(), rel=1e-5)
    # components never join across cases even when masks touch at the batch boundary
    ones = np.ones((2, 4, 4, 4), np.float32)
    assert list(summarize_masks(ones, threshold=0.5)["n_components"]) == [1, 1]


@pytest.mark.parametrize("change, key", [
    ({"bogus": 1}, "bogus"),
    ({"network": {"name": "vnet"}}, "network.name"),
    ({"network": {"kwargs": {"nonsense": 3}}}, "network.kwargs.nonsense"),
    ({"inference": {"threshold": 1.5}}, "inference.threshold"),
    ({"transforms": {"window": [240, -100]}}, "transforms.window"),
    ({"inference": {"tumour_channel": 2}}, "inference.tumour_channel"),
    ({"cases": "nope.csv"}, "cases"),
])
def test_config_errors_name_file_key_and_fix(study, change, key):
    with pytest.raises(ConfigError) as exc:
        load_segment_config(study / "run.yaml", overrides=change)
    msg = str(exc.value)
    assert "run.yaml" in msg and f"'{key}'" in msg and ";" in msg


def test_weights_that_do_not_fit_are_a_config_error(study):
    cfg = load_segment_config(study / "run.yaml", overrides={"network": {"kwargs": {"channels": [8, 16]}}})
    with pytest.raises(ConfigError, match="does not fit"):
        run_segment(cfg)


def test_parse_shard():
    assert parse_shard("2/3") == (2, 3) and parse_shard(None) == (1, 1)
    for bad in ("0/2", "3/2", "a/b", "1"):
        with pytest.raises(ConfigError):
            parse_shard(bad)


def test_cli_segment_runs_and_bad_config_exits_2(study):
    from typer.testing import CliRunner

    from clinrel.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["infer", "segment", "--config", str(study / "run.yaml"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert (study / "out" / "cases.parquet").exists()
    (study / "bad.yaml").write_text("cases: cases.csv\noutput: o\nfoo: 1\n")
    res = runner.invoke(app, ["infer", "segment", "--config", str(study / "bad.yaml")])
    assert res.exit_code == 2 and "foo" in res.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_mixed_precision_matches_cpu():
    torch.manual_seed(0)
    net = build_network("unet", **NET_KW)
    x = np.random.default_rng(0).random((2, 1, 16, 16, 16)).astype(np.float32)
    cpu = predict_probability(net, x, roi_size=(8, 8, 8), device=torch.device("cpu"))
    gpu = predict_probability(net, x, roi_size=(8, 8, 8), device=torch.device("cuda:0"), amp=True)
    np.testing.assert_allclose(cpu, gpu, atol=5e-3)


def test_weights_from_a_bundle_folder_give_the_same_rows(study):
    bundle = study / "bundle" / "models"
    bundle.mkdir(parents=True)
    shutil.copy(study / "model.pt", bundle / "model.pt")
    a = run_segment(load_segment_config(study / "run.yaml"))
    b = run_segment(load_segment_config(study / "run.yaml", overrides={"output": "out_bundle",
                                                                       "network": {"weights": "bundle"}}))
    assert a["merged"] and b["merged"]
    ta = pd.read_parquet(study / "out" / "cases.parquet")
    tb = pd.read_parquet(study / "out_bundle" / "cases.parquet")
    pd.testing.assert_frame_equal(ta, tb)
    with pytest.raises(ConfigError, match="models/model.pt"):
        (study / "empty_bundle").mkdir()
        run_segment(load_segment_config(study / "run.yaml", overrides={"output": "o3",
                                                                       "network": {"weights": "empty_bundle"}}))
