"""Shared fixtures: small simulated studies (seeded) and a temporary folder helper."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def benchx_small():
    from stats import simulate

    return simulate.benchx_cohort(400, n_models=2, n_sites=6, seed=11)


@pytest.fixture(scope="session")
def crs_small():
    from stats import simulate

    return simulate.crs_runs(n_encoders=6, n_datasets=2, n_seeds=3, seed=11)


@pytest.fixture(scope="session")
def demo_study():
    """The demo plan's study (its inputs and every analysis), loaded once per test process
    under the plan's limits: read it, never change it. Build sections from it with
    ``reports.sections.build_all(demo_study, strict=True)``."""
    import warnings

    from analysis import load_plan
    from analysis.inputs import plan_limits
    from clinrel.cli.report import demo_plan_path
    from reports.study import load_study

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_study(plan)


def run_demo(only):
    """The demo plan, its tables and the analyses ``only`` (with whatever they need), run
    quietly under the plan's limits: ``(plan, tables, results)``."""
    import warnings

    from clinrel.cli.report import demo_plan_path
    from analysis import load_plan, run
    from analysis.inputs import load_tables, plan_limits

    plan = load_plan(demo_plan_path())
    with plan_limits(plan), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tables = load_tables(plan)
        return plan, tables, run(plan, tables, only=list(only), errors="raise")


def snapshot(folder):
    """sha256 of every file (hidden ones included) and a marker for every folder below
    ``folder``: any file added, changed or removed shows up as a difference."""
    import hashlib
    import os
    from pathlib import Path

    snap = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            snap[str(Path(root, d).relative_to(folder)) + "/"] = "dir"
        for f in files:
            p = Path(root, f)
            snap[str(p.relative_to(folder))] = ("link:" + os.readlink(p) if p.is_symlink()
                                                else hashlib.sha256(p.read_bytes()).hexdigest())
    return snap


def dead_pid() -> int:
    """The id of a process that has exited."""
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ------------------------------------------------------------------ a reviewer's own study

#: the reviewer's study (issue 30): not clinrel's simulator
REVIEWER_MODELS = ("segresnet", "nnunet", "swin_unetr")   # the cases table's order, not sorted
REVIEWER_SITES = ("north", "south", "east", "west", "central")


def reviewer_cases(seed: int = 2024):
    """A study like a reviewer's own, made without ``stats.simulate``: 2,412 scans of 1,500
    patients (1 to 4 scans each), 5 sites with different contrast-phase mixes and two
    scanner vendors each, 39% of patients with race Unknown, 5% with age missing, raw age
    (no age_group), three segmentation models (listed in an order that is not
    alphabetical), ids with leading zeros. Vectorized; seeded."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n_pat, n_scans = 1500, 2412
    k = rng.choice([1, 2, 3, 4], size=n_pat, p=[0.6, 0.24, 0.1, 0.06])
    gap = n_scans - int(k.sum())          # exactly 2412: one scan more (less) for some
    room = np.flatnonzero(k < 4) if gap > 0 else np.flatnonzero(k > 1)
    k[rng.choice(room, size=abs(gap), replace=False)] += int(np.sign(gap))
    pat = np.repeat(np.arange(n_pat), k)
    site_p = rng.choice(5, size=n_pat, p=[0.3, 0.25, 0.2, 0.15, 0.1])
    mixes = np.array([[0.6, 0.2, 0.1, 0.1], [0.3, 0.5, 0.1, 0.1], [0.4, 0.1, 0.1, 0.4],
                      [0.5, 0.2, 0.25, 0.05], [0.25, 0.25, 0.25, 0.25]])
    phases = np.array(["venous", "arterial", "delayed", "non_contrast"])
    s = site_p[pat]
    ph = (rng.random(n_scans)[:, None] > np.cumsum(mixes[s], 1)).sum(1).clip(0, 3)
    vendor = np.array(["GE", "Siemens", "Philips", "Canon", "GE"])[s]
    scanner = np.where(rng.random(n_scans) < 0.7, vendor, "Siemens")
    age = np.round(rng.normal(62, 13, n_pat).clip(19, 94))
    age[rng.permutation(n_pat)[:75]] = np.nan                       # 5% of patients
    sex = np.where(rng.random(n_pat) < 0.5, "F", "M")
    race = rng.choice(["White", "Black", "Asian", "Other"], size=n_pat,
                      p=[0.66, 0.2, 0.125, 0.015]).astype(object)
    race[rng.permutation(n_pat)[:585]] = "Unknown"                  # 39% of patients
    label = (rng.random(n_scans) < 0.37).astype(int)
    size = np.where(label == 1, np.round(np.exp(rng.normal(np.log(20), 0.5, n_scans))
                                         .clip(3, 120), 1), np.nan)
    site_b = np.array([0.3, -0.2, -0.5, 0.1, 0.4])
    ph_eff = np.array([0.0, -0.8, -0.3, -1.5])
    ag = np.nan_to_num(age[pat], nan=60.0)
    logsize = np.log(np.where(label == 1, size, 20.0) / 20.0)
    frames = []
    for m, (q, spec) in enumerate(zip([0.6, 0.2, -0.3], [2.6, 2.9, 2.2])):
        eta_pos = q + ph_eff[ph] + 0.01 * (ag - 60) + site_b[s] + 0.9 * logsize
        eta_neg = spec - 0.2 * (ph == 3) + 0.5 * site_b[s]
        eta = np.where(label == 1, eta_pos, -eta_neg)
        score = np.floor(np.exp(np.log(50) + eta + rng.logistic(size=n_scans)).clip(0, 1e6))
        frames.append(pd.DataFrame({
            "case_id": np.char.zfill((np.arange(n_scans) + 1).astype(str), 7),
            "patient_id": np.char.zfill((pat + 1).astype(str), 6),
            "model": REVIEWER_MODELS[m], "label": label, "score": score,
            "site": np.asarray(REVIEWER_SITES)[s], "age": age[pat], "sex": sex[pat],
            "race": race[pat], "phase": phases[ph], "scanner": scanner,
            "tumor_size_mm": size}))
    return pd.concat(frames, ignore_index=True)


def reviewer_study(folder):
    """The reviewer's study in ``folder``: ``cases.csv``, ``reports.csv`` (free-text
    reports, column ``report_text``) and the plan ``clinrel plan init`` writes for it
    (threshold 50), with ``scanner`` moved to the exploratory axes. Returns the plan."""
    from pathlib import Path

    import pandas as pd
    from typer.testing import CliRunner

    from clinrel.cli import app

    folder = Path(folder)
    cases = reviewer_cases()
    cases.to_csv(folder / "cases.csv", index=False)
    one = cases.drop_duplicates("case_id")
    pd.DataFrame({"case_id": one["case_id"],
                  "report_text": [f"CT abdomen, {p} phase. Patient {a:g} years." for p, a in
                                  zip(one["phase"], one["age"].fillna(0))]}).to_csv(
        folder / "reports.csv", index=False)
    plan = folder / "plan.yaml"
    res = CliRunner().invoke(app, ["plan", "init", str(folder / "cases.csv"), "--threshold",
                                   "50", "--out", str(plan)])
    assert res.exit_code == 0, res.output
    text = plan.read_text(encoding="utf-8")
    assert "    - scanner\n" in text and "  subgroups:" in text
    text = text.replace("    - scanner\n", "").replace(
        "  bins:", "  exploratory_subgroups: [scanner]   # exploratory: not in the plan's "
                   "hypotheses\n  bins:", 1)
    plan.write_text(text, encoding="utf-8")
    return plan
