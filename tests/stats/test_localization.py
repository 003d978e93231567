"""stats.froc and stats.lesion_metrics: the FROC against MONAI's compute_froc_curve_data /
compute_froc_score and against a recomputation written here (threshold by threshold, own
interpolation); AFROC and wAFROC against RJafroc's C++ definitions recomputed pair by pair;
the bootstrap's weighted replicate against resampling the rows; pairing across models; the
cluster ratio estimator of FP per scan; the lesions contract's refusals; and a study whose
second model finds blobs beside the tumours (high scan-level, low lesion-level
sensitivity), flagged."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats import localization as L
from stats.schema import ContractError, read_lesions

TOL = 1e-12


def fixture(seed=0, n_cases=48, n_models=2):
    """Cases with 0-2 reference lesions (label 1 has 1-2), two scans per patient, 0-3
    predictions per case and model, scores rounded to 0.05 (ties), some lesions missed."""
    rng = np.random.default_rng(seed)
    rows, cases = [], []
    for m in range(n_models):
        for i in range(n_cases):
            lab = int(i % 2 == 0)
            refs = [f"r{k}" for k in range(lab * (1 + (i % 3 == 0)))]
            cases.append({"case_id": f"c{i}", "model": f"m{m}", "label": lab,
                          "patient_id": f"p{i // 2}", "phase": ["arterial", "venous"][i % 4 < 2],
                          "site": "s"})
            for r in refs:
                rows.append({"case_id": f"c{i}", "model": f"m{m}", "lesion_id": r,
                             "kind": "reference", "volume_mm3": float(rng.uniform(50, 30000)),
                             "location": ["dome", "left"][i % 2 == 0 and r == "r0"]})
            taken = set()
            for j in range(int(rng.integers(0, 4))):
                hit = None
                if refs and rng.random() < 0.6:
                    r = refs[int(rng.integers(len(refs)))]
                    if r not in taken:
                        hit = r
                        taken.add(r)
                rows.append({"case_id": f"c{i}", "model": f"m{m}", "lesion_id": f"p{j}",
                             "kind": "prediction", "score": float(np.round(rng.uniform(0.5, 1) * 20) / 20),
                             "matched": hit, "dice": rng.uniform(0.1, 0.9) if hit else np.nan,
                             "volume_mm3": 100.0})
    c = pd.DataFrame(cases)
    c["score"] = rng.integers(0, 100, len(c)).astype(float)
    c["pred"] = (c["score"] >= 50).astype(int)
    return pd.DataFrame(rows), c


def _probs(les, cases, model, cell=None):
    """MONAI's inputs of one model (and case subset): fp_probs, tp_probs (0: missed),
    number of targets, number of images."""
    c = cases[cases["model"] == model]
    if cell is not None:
        c = c[cell(c)]
    keep = set(c["case_id"])
    lm = les[(les["model"] == model) & les["case_id"].isin(keep)]
    ref = lm[lm["kind"] == "reference"]
    pr = lm[lm["kind"] == "prediction"]
    hit = pr[pr["matched"].notna()].set_index(["case_id", "matched"])["score"]
    tp = np.array([hit.get((a, b), 0.0) for a, b in zip(ref["case_id"], ref["lesion_id"])])
    fp = pr[pr["matched"].isna()]["score"].to_numpy(float)
    return fp, tp, len(ref), len(c)


def _by_hand(fp, tp, n_targets, n_images, rates):
    """The FROC recomputed threshold by threshold (every distinct detection score, highest
    first, after the (0, 0) point) and interpolated by hand: between the last point with
    FP rate <= f and the next; beyond the last point, the last point's sensitivity."""
    found = tp[tp > 0]
    pts = [(0.0, 0.0)]
    for t in sorted(set(fp.tolist()) | set(found.tolist()), reverse=True):
        pts.append((float((fp >= t).sum()) / n_images, float((found >= t).sum()) / n_targets))
    out = []
    for f in rates:
        k = max(i for i, (x, _) in enumerate(pts) if x <= f)
        if k == len(pts) - 1:
            out.append(pts[k][1])
        else:
            (x0, y0), (x1, y1) = pts[k], pts[k + 1]
            out.append(y0 + (f - x0) * (y1 - y0) / (x1 - x0))
    return np.array(out)


def test_froc_equals_monai_and_a_recomputation_in_every_cell():
    from monai.metrics.froc import compute_froc_curve_data, compute_froc_score

    les, cases = fixture()
    rates = np.array(L.FP_PER_SCAN)
    out = stats.froc(les, cases, by=["phase"])
    cells = {("overall", "overall"): None,
             ("phase", "arterial"): lambda c: c["phase"] == "arterial",
             ("phase", "venous"): lambda c: c["phase"] == "venous"}
    gaps = []
    for m in ("m0", "m1"):
        for (var, lvl), cell in cells.items():
            fp, tp, nt, ni = _probs(les, cases, m, cell)
            assert (tp == 0).any()          # a lesion missed: MONAI's first threshold is 0
            fps, sens = compute_froc_curve_data(fp, tp, nt, ni)
            row = out[(out["model"] == m) & (out["group_var"] == var) & (out["group_level"] == lvl)]
            mine = row[row["estimand"] == "lesion_sensitivity"].sort_values("fp_per_scan")["estimate"]
            monai = np.interp(rates, fps[::-1], sens[::-1])
            gaps += [np.abs(mine.to_numpy() - monai).max(),
                     np.abs(mine.to_numpy() - _by_hand(fp, tp, nt, ni, rates)).max(),
                     abs(row[row["estimand"] == "cpm"]["estimate"].iloc[0]
                         - compute_froc_score(fps, sens, tuple(rates)))]
            assert row["n"].iloc[0] == ni and row["n_pos"].iloc[0] == nt
    assert max(gaps) <= TOL, max(gaps)      # measured: 0 (identical arithmetic)


def test_extrapolated_rates_are_flagged_and_read_as_the_last_point():
    les, cases = fixture()
    out = stats.froc(les, cases)
    s = out[(out["estimand"] == "lesion_sensitivity") & (out["model"] == "m0")]
    end = s["max_fp_per_scan"].iloc[0]
    beyond = s[s["fp_per_scan"] > end]
    assert len(beyond) and beyond["flag"].str.contains("extrapolated").all()
    assert beyond["estimate"].nunique() == 1
    assert not s[s["fp_per_scan"] <= end]["flag"].str.contains("extrapolated").any()


def _rjafroc(les, cases, model):
    """RJafroc's FOM_AFROC and FOM_wAFROC (src/MyFOM.cpp), loop for loop: the highest NL
    rating of each normal case against every lesion's LL rating (-inf when unmarked)."""
    c = cases[cases["model"] == model]
    lm = les[les["model"] == model]
    ref = lm[lm["kind"] == "reference"]
    pr = lm[lm["kind"] == "prediction"]
    hit = pr[pr["matched"].notna()].set_index(["case_id", "matched"])["score"]
    normals = [k for k in c["case_id"] if k not in set(ref["case_id"])]
    abnormal = list(dict.fromkeys(ref["case_id"]))

    def phi(a, b):
        return 1.0 if a < b else 0.5 if a == b else 0.0

    fp = {}
    for k in normals:
        nl = pr[(pr["case_id"] == k) & pr["matched"].isna()]["score"]
        fp[k] = nl.max() if len(nl) else -np.inf
    ll = {k: [hit.get((k, r), -np.inf) for r in ref[ref["case_id"] == k]["lesion_id"]]
          for k in abnormal}
    afroc = sum(phi(fp[n], y) for n in normals for k in abnormal for y in ll[k])
    afroc /= len(normals) * len(ref)
    wafroc = sum(phi(fp[n], y) / len(ll[k]) for k in abnormal for n in normals for y in ll[k])
    wafroc /= len(normals) * len(abnormal)
    return afroc, wafroc


def test_afroc_and_wafroc_follow_rjafroc():
    les, cases = fixture(seed=3)
    out = stats.froc(les, cases)
    gap = 0.0
    for m in ("m0", "m1"):
        a, w = _rjafroc(les, cases, m)
        o = out[(out["model"] == m) & (out["group_var"] == "overall")].set_index("estimand")
        gap = max(gap, abs(o.loc["afroc", "estimate"] - a), abs(o.loc["wafroc", "estimate"] - w))
        assert o.loc["afroc", "estimate"] != o.loc["wafroc", "estimate"]   # 2-lesion cases
    assert gap <= TOL, gap                  # measured: below 1e-15


def test_a_weighted_replicate_equals_the_resampled_rows():
    """The bootstrap weights patients; one replicate equals froc() of the rows of the
    drawn patients, each copied as often as drawn (new ids per copy)."""
    les, cases = fixture(seed=5)
    rng = np.random.default_rng(11)
    patients = np.array(sorted(cases["patient_id"].unique()))
    mult = np.bincount(rng.integers(0, len(patients), len(patients)), minlength=len(patients))
    d = L._Lesions(les, cases, None, "froc")
    pid = pd.factorize(d.cm.covariates["patient_id"])[1]
    w_pat = pd.Series(mult, index=patients).reindex(pid).to_numpy(float)
    w_case = w_pat[d.unit][None, :]
    cell_of_case = d.axes_of_cases()
    lays = [L._Layout(*L._model_events(d, m), cell_of_case, d.cm.n_cells) for m in range(2)]
    got, _, _ = L._froc_all(d, w_case, np.array(L.FP_PER_SCAN), cell_of_case, lays)
    copies_c, copies_l = [], []
    for p, k in zip(patients, mult):
        for j in range(k):
            ids = cases[cases["patient_id"] == p]["case_id"].unique()
            copies_c.append(cases[cases["case_id"].isin(ids)].assign(
                case_id=lambda x: x["case_id"] + f"_{j}", patient_id=f"{p}_{j}"))
            copies_l.append(les[les["case_id"].isin(ids)].assign(
                case_id=lambda x: x["case_id"] + f"_{j}"))
    ref = stats.froc(pd.concat(copies_l), pd.concat(copies_c))
    for m, name in enumerate(("m0", "m1")):
        r = ref[(ref["model"] == name)].set_index("estimand")
        assert abs(got[m]["cpm"][0, 0] - r.loc["cpm", "estimate"]) <= TOL
        assert abs(got[m]["wafroc"][0, 0] - r.loc["wafroc", "estimate"]) <= TOL
        sens = r.loc["lesion_sensitivity"].sort_values("fp_per_scan")["estimate"].to_numpy()
        assert np.abs(got[m]["sens"][0, 0] - sens).max() <= TOL


def test_bootstrap_is_paired_across_models_and_reproducible():
    les, cases = fixture(seed=2)
    twin = les[les["model"] == "m0"].assign(model="m1")
    same = pd.concat([les[les["model"] == "m0"], twin], ignore_index=True)
    out = stats.froc(same, cases, n_boot=50, seed=4)
    diff = out[out["estimand"].isin(["cpm_difference", "wafroc_difference"])]
    assert len(diff) and (diff[["estimate", "conf_low", "conf_high"]].abs().to_numpy() == 0).all()
    a = stats.froc(les, cases, n_boot=50, seed=4, by=["phase"])
    b = stats.froc(les, cases, n_boot=50, seed=4, by=["phase"])
    pd.testing.assert_frame_equal(a, b)
    cpm = a[(a["estimand"] == "cpm") & (a["group_var"] == "overall")]
    assert (cpm["conf_low"] <= cpm["estimate"]).all() and (cpm["estimate"] <= cpm["conf_high"]).all()
    assert cpm["method"].str.endswith("bootstrap-percentile").all()


def test_blocks_of_replicates_share_one_afroc_layout(monkeypatch):
    """The weight-free part of the AFROC (sorting the normals, lesion positions, cell
    matrices) is built once per model, not once per block of replicates (that made the
    bootstrap's cost grow with cases x blocks, i.e. quadratically); small blocks give the
    same intervals as one block."""
    les, cases = fixture(seed=6)
    one = stats.froc(les, cases, n_boot=40, seed=9, by=["phase"])
    built = []
    real = L._AfrocLayout.__init__

    def counting(self, *a, **k):
        built.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(L._AfrocLayout, "__init__", counting)
    monkeypatch.setattr(L, "_BLOCK_ELEMENTS", 2 ** 10)        # many blocks of few replicates
    many = stats.froc(les, cases, n_boot=40, seed=9, by=["phase"])
    assert len(built) == 2                                      # one per model
    pd.testing.assert_frame_equal(one, many, check_exact=True)


def test_lesion_metrics_counts_and_the_cluster_ratio_estimator():
    les, cases = fixture(seed=7)
    out = stats.lesion_metrics(les, cases, by=["phase", "lesion_size", "lesion_location"])
    ref = les[les["kind"] == "reference"]
    pr = les[les["kind"] == "prediction"]
    for m in ("m0", "m1"):
        o = out[(out["model"] == m) & (out["group_var"] == "overall")].set_index("estimand")
        r, p = ref[ref["model"] == m], pr[pr["model"] == m]
        hits = p["matched"].notna().sum()
        assert o.loc["lesion_sensitivity", "numerator"] == hits
        assert o.loc["lesion_sensitivity", "denominator"] == len(r)
        # FP per scan: survey::svyratio(~fp, ~one, svydesign(ids = ~patient_id)) by hand
        c = cases[cases["model"] == m]
        fp = p[p["matched"].isna()].groupby("case_id").size().reindex(c["case_id"]).fillna(0)
        y = fp.groupby(c["patient_id"].to_numpy()).sum().to_numpy()
        n_c = c.groupby("patient_id").size().to_numpy()
        R = y.sum() / n_c.sum()
        C = len(y)
        se = np.sqrt(C / (C - 1) * ((y - R * n_c) ** 2).sum()) / n_c.sum()
        assert abs(o.loc["fp_per_scan", "estimate"] - R) <= TOL
        assert abs(o.loc["fp_per_scan", "std_error"] - se) <= 1e-12   # measured ~1e-17
        # hidden misses: positives called positive with no lesion hit
        found = p[p["matched"].notna()]["case_id"].unique()
        called = c[(c["label"] == 1) & (c["pred"] == 1)]
        assert o.loc["hidden_miss", "numerator"] == (~called["case_id"].isin(found)).sum()
        assert o.loc["hidden_miss", "denominator"] == len(called)
        d = p[p["matched"].notna()]["dice"]
        assert abs(o.loc["lesion_dice", "estimate"] - d.mean()) <= TOL
    sizes = out[(out["estimand"] == "lesion_sensitivity") & (out["group_var"] == "lesion_size")]
    assert set(sizes["group_level"]) == set(L.SIZE_LABELS)
    assert sizes.groupby("model")["n"].sum().eq(len(ref) / 2).all()
    assert not out[out["group_var"] == "lesion_size"]["estimand"].isin(
        ["fp_per_scan", "hidden_miss", "scan_sensitivity"]).any()


def _sphere(shape, centre, r):
    z, y, x = np.indices(shape)
    return ((z - centre[0]) ** 2 + (y - centre[1]) ** 2 + (x - centre[2]) ** 2) <= r ** 2


def test_blobs_beside_the_tumours_are_flagged():
    """Model 'finds' sees each tumour; model 'beside' predicts a blob of the same size next
    to it (no overlap): both call every positive scan positive (scan-level sensitivity 1),
    but 'beside' localizes none of them. The runner's lesion table of the masks, then
    stats.lesion_metrics: 'beside' has lesion-level sensitivity 0, every scan-level true
    positive a hidden miss, flagged localization_gap; 'finds' none."""
    from inference_runner.segment import lesion_table

    shape, n = (20, 20, 20), 30
    rng = np.random.default_rng(0)
    ref = np.zeros((n, *shape), bool)
    finds = np.zeros((n, *shape), np.float32)
    beside = np.zeros((n, *shape), np.float32)
    label = np.arange(n) % 3 != 0
    for i in np.flatnonzero(label):
        c = rng.integers(6, 9, 3)
        ref[i] = _sphere(shape, c, 3)
        finds[i] = _sphere(shape, c + [0, 1, 0], 3) * 0.9
        beside[i] = _sphere(shape, c + [0, 0, 8], 3) * 0.9
    ids = [f"c{i}" for i in range(n)]
    les = pd.concat([lesion_table(finds, ref, case_ids=ids, model="finds"),
                     lesion_table(beside, ref, case_ids=ids, model="beside")])
    voxels = {"finds": (finds >= 0.5).reshape(n, -1).sum(1),
              "beside": (beside >= 0.5).reshape(n, -1).sum(1)}
    cases = pd.concat([pd.DataFrame({"case_id": ids, "model": m, "label": label.astype(int),
                                     "score": v.astype(float),
                                     "patient_id": [f"p{i // 2}" for i in range(n)],
                                     "phase": "venous"}) for m, v in voxels.items()])
    cases = stats.scan_level(cases, threshold=50)
    out = stats.lesion_metrics(les, cases, by=["phase"])
    o = out[out["group_var"] == "overall"].set_index(["model", "estimand"])
    for m in ("finds", "beside"):
        assert o.loc[(m, "scan_sensitivity"), "estimate"] == 1.0
    assert o.loc[("finds", "lesion_sensitivity"), "estimate"] == 1.0
    assert o.loc[("beside", "lesion_sensitivity"), "estimate"] == 0.0
    assert o.loc[("beside", "hidden_miss"), "numerator"] == label.sum()
    assert "localization_gap" in o.loc[("beside", "hidden_miss"), "flag"]
    assert "localization_gap" in o.loc[("beside", "lesion_sensitivity"), "flag"]
    assert "localization_gap" not in o.loc[("finds", "hidden_miss"), "flag"]
    assert o.loc[("beside", "fp_per_scan"), "numerator"] == label.sum()


# --------------------------------------------------------------------------- contract

def _one():
    return pd.DataFrame({"case_id": ["c1", "c1", "c1"], "model": "m", "kind":
                         ["reference", "prediction", "prediction"],
                         "lesion_id": ["r1", "p1", "p2"], "score": [np.nan, 0.9, 0.7],
                         "matched": [None, "r1", None]})


@pytest.mark.parametrize("change, message", [
    (lambda d: d.assign(kind=["reference", "prediction", "guess"]), "must be 'reference' or"),
    (lambda d: d.assign(score=[np.nan, np.nan, 0.7]), "must be given for every prediction"),
    (lambda d: d.assign(matched=[None, "r1", "r1"]), "matched at most once"),
    (lambda d: d.assign(matched=[None, "r9", None]), "not among that case's reference"),
    (lambda d: d.assign(duplicate_of=[None, None, "r1"], matched=[None, "r1", "r1"]),
     "not both"),
    (lambda d: d.assign(hit_rule=["iou>=0.1", "iou>=0.1", "centroid"]), "one rule"),
    (lambda d: pd.concat([d, d.assign(model="m2", matched=None).iloc[1:]]),
     "the same for every model"),
    (lambda d: d.assign(dice=[0.5, 1.5, np.nan]), "must lie in"),
    (lambda d: d.drop(columns="kind"), "missing"),
    (lambda d: d.to_dict("list"), "must be a file path .* or a DataFrame; got a dict"),
])
def test_read_lesions_refuses_with_the_fix(change, message):
    with pytest.raises(ContractError, match=message):
        read_lesions(change(_one()))


def test_read_lesions_fills_the_reference_side_of_a_match():
    out = read_lesions(_one())
    assert out.loc[0, "matched"] == "p1" and out.loc[2, "matched"] is None


def test_lesions_must_agree_with_the_labels():
    les, cases = fixture()
    flipped = cases.assign(label=np.where(cases["case_id"] == "c0", 0, cases["label"]))
    with pytest.raises(ContractError, match="label 0 have reference lesions"):
        stats.froc(les, flipped)
    gone = les[~((les["case_id"] == "c0") & (les["kind"] == "reference"))]
    gone = gone.assign(matched=np.where(gone["case_id"] == "c0", None, gone["matched"]))
    with pytest.raises(ContractError, match="label 1 have no reference lesion"):
        stats.froc(gone, cases)
    with pytest.raises(ContractError, match="fp_per_scan"):
        stats.froc(les, cases, fp_per_scan=(0, 1))
