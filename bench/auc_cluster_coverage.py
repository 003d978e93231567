"""Coverage of the clustered-data AUC interval (Obuchowski 1997; issue 15).

Run from the repository root (about a minute on 2 shared cores)::

    .venv/bin/python bench/auc_cluster_coverage.py             # writes the .md beside it
    .venv/bin/python bench/auc_cluster_coverage.py --reps 500  # quicker, noisier

Design (known truth). One subgroup cell of one study: patients carry 1-4 scans
(probabilities 0.4, 0.3, 0.2, 0.1: 2 scans on average); scan ``j`` of patient ``i`` scores
``s_ij = delta * y_ij + u_i + e_ij`` with a shared patient effect ``u_i ~ N(0, sd^2)``
(sd 1 or 2) and ``e_ij ~ N(0, 1)``, so a patient's scans correlate (0.5 or 0.8). The
reference label ``y_ij`` is

* *patient-level* (a patient has the tumour or not): all of a patient's scans share one
  label, positive with probability 1/2;
* *scan-level* (e.g. a lesion seen on some of a patient's scans): each scan is positive
  with probability 1/2, so patients hold positives and negatives (the covariance S11).

``delta = sqrt(2 (sd^2 + 1)) Phi^-1(AUC)`` sets the AUC of a positive and a negative scan
of two different patients to 0.7, 0.8 or 0.9; the truth is that AUC measured on a very
large sample (400,000 positive and 400,000 negative scans, each of its own patient; it
matches the closed form to 4e-4, and a scenario's printed truth is the sampled one).
The patients per study are 15, 40 or 120: about 15, 40 and 120 positive scans.

Each replicate study is one level of a subgroup axis of one cases table, so one call of
the public ``stats.subgroup_metrics(..., metrics=["auc"], cluster="patient_id")`` computes
every replicate (the default, "delong-cluster-logit-t": logit scale, t on C - 1 df), and
one without ``cluster`` gives plain DeLong (scans as independent) on the same studies; the
other clustered intervals are formed from the same estimate and SE: the AUC scale with the
t reference ("delong-cluster-t", plan ``auc_scale: auc``) and both scales with a normal
quantile ("delong-cluster", "delong-cluster-logit": clinrel's intervals before the t
reference). Reported: coverage of each nominal 95% interval; ``SE ratio`` the mean ratio of the clustered to the DeLong SE;
``SE / SD`` the root mean square of the clustered SE over the standard deviation of the
estimates across studies (1 when the variance estimator is right); ``bias`` the mean
estimate minus the truth; the Monte Carlo SE of a coverage is ``sqrt(0.95 * 0.05 / reps)``.
``tests/stats/test_auc_cluster.py`` runs :func:`coverage` (a quick check, and a slow one at more
replicates).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import stats  # noqa: E402
from stats.intervals import _auc_ci_from, delong_placements  # noqa: E402

SCANS, PROBS = (1, 2, 3, 4), (0.4, 0.3, 0.2, 0.1)
KINDS = ("patient-level", "scan-level")
SDS = (1.0, 2.0)
AUCS = (0.7, 0.8, 0.9)
PATIENTS = (15, 40, 120)
BAND = (0.935, 0.965)
#: positive (and negative) scans of the large sample that gives the truth
TRUTH_N = 400_000


def _delta(auc: float, sd: float) -> float:
    return float(np.sqrt(2 * (sd ** 2 + 1)) * sps.norm.ppf(auc))


def truth(auc: float, sd: float, seed: int = 12345) -> float:
    """The AUC of scans of different patients, from ``TRUTH_N`` positive and negative scans
    each of its own patient (Mann-Whitney through :func:`stats.intervals.delong_placements`)."""
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(TRUTH_N, bool), np.zeros(TRUTH_N, bool)]
    s = _delta(auc, sd) * y + rng.normal(0, sd, 2 * TRUTH_N) + rng.normal(0, 1, 2 * TRUTH_N)
    return float(delong_placements(np.zeros(2 * TRUTH_N, np.int64), y, s, 1,
                                   placements=False)["auc"][0])


def cohorts(n_patients: int, auc: float, sd: float, reps: int, rng: np.random.Generator,
            kind: str = "patient-level") -> pd.DataFrame:
    """``reps`` studies as one cases table; the study is column ``rep``."""
    k = reps * n_patients
    m = rng.choice(SCANS, size=k, p=PROBS)
    pat = np.repeat(np.arange(k), m)
    y = (rng.random(k) < 0.5)[pat] if kind == "patient-level" else rng.random(len(pat)) < 0.5
    s = _delta(auc, sd) * y + rng.normal(0, sd, k)[pat] + rng.normal(0, 1, len(pat))
    return pd.DataFrame({"case_id": np.arange(len(pat)), "patient_id": pat, "model": "m",
                         "label": y.astype(int), "score": s, "pred": 0,
                         "rep": pat // n_patients})


def coverage(n_patients: int, auc: float, sd: float, reps: int = 2000, seed: int = 0,
             kind: str = "patient-level", true_auc: float | None = None) -> dict:
    """Coverage of each interval over ``reps`` studies of one scenario (module docstring)."""
    rng = np.random.default_rng(seed)
    t = truth(auc, sd) if true_auc is None else true_auc
    cases = cohorts(n_patients, auc, sd, reps, rng, kind)
    out = {}
    for name, cl in (("delong-cluster-logit-t", "patient_id"), ("delong", None)):
        r = stats.subgroup_metrics(cases, by=["rep"], metrics=["auc"], cluster=cl,
                                   not_applicable=None)
        out[name] = r[r.group_var == "rep"].reset_index(drop=True)
    c, d = out["delong-cluster-logit-t"], out["delong"]
    ok = c["std_error"].notna().to_numpy() & d["std_error"].notna().to_numpy()
    c, d = c[ok], d[ok]

    def cov(lo, hi):
        return float(np.mean((lo <= t) & (t <= hi)))

    est, var = c["estimate"].to_numpy(), c["std_error"].to_numpy() ** 2
    C = np.where(c["method"].str.startswith("delong-cluster"), c["n_clusters"], np.nan)
    # the same estimate and clustered SE, other intervals: the AUC scale with the t
    # reference, and both scales with a normal quantile (clinrel's before the t reference)
    _, lo_t, hi_t = _auc_ci_from(est, var, 0.95, "auc", clusters=C)
    _, lo_z, hi_z = _auc_ci_from(est, var, 0.95, "auc")
    _, lo_l, hi_l = _auc_ci_from(est, var, 0.95, "logit")
    return {"AUC": t, "positive scans": float(c["n_pos"].mean()),
            "patients": float(c["n_clusters"].mean()),
            "delong-cluster-logit-t": cov(c["conf_low"].to_numpy(), c["conf_high"].to_numpy()),
            "delong-cluster-t": cov(lo_t, hi_t),
            "delong-cluster": cov(lo_z, hi_z),
            "delong-cluster-logit": cov(lo_l, hi_l),
            "delong": cov(d["conf_low"].to_numpy(), d["conf_high"].to_numpy()),
            "SE ratio": float(np.mean((c["std_error"] / d["std_error"])[d["std_error"] > 0])),
            "SE / SD": float(np.sqrt(np.mean(c["std_error"] ** 2)) / np.std(c["estimate"])),
            "bias": float(np.mean(c["estimate"]) - t),
            "not estimable": float(1 - ok.mean()),
            "clustered rows": float(c["method"].str.startswith("delong-cluster").mean())}


def table(reps: int) -> pd.DataFrame:
    truths = {(a, sd): truth(a, sd) for a in AUCS for sd in SDS}
    rows = []
    for kind in KINDS:
        for sd in SDS:
            for n_patients in PATIENTS:
                for a in AUCS:
                    seed = int(1000 * sd + 10 * n_patients + 100 * a + (kind == "scan-level"))
                    rows.append({"labels": kind, "patient SD": sd, **coverage(
                        n_patients, a, sd, reps, seed=seed, kind=kind,
                        true_auc=truths[a, sd])})
    return pd.DataFrame(rows)


PCT = ("delong-cluster-logit-t", "delong-cluster-t", "delong-cluster", "delong-cluster-logit",
       "delong")


def markdown(df: pd.DataFrame, reps: int, seconds: float) -> str:
    cols = ["labels", "patient SD", "patients", "positive scans", "AUC", *PCT, "SE ratio",
            "SE / SD", "bias"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df[cols].itertuples(index=False):
        cells = []
        for c, v in zip(cols, r):
            cells.append(f"{100 * v:.1f}" if c in PCT else f"{v:.1f}" if c in (
                "positive scans", "patients", "patient SD") else f"{v:.3f}" if c in (
                "AUC", "SE ratio", "SE / SD", "bias") else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    lo, hi = BAND
    summary = [f"| {c} | {100 * df[c].min():.1f} | {100 * df[c].median():.1f} | "
               f"{100 * df[c].max():.1f} | {int(((df[c] >= lo) & (df[c] <= hi)).sum())} of "
               f"{len(df)} | {int((df[c] < lo).sum())} |" for c in PCT]
    skipped = df["not estimable"].max()
    return "\n".join([
        "# Coverage of the clustered-data AUC interval (Obuchowski 1997)",
        "",
        f"Written by `bench/auc_cluster_coverage.py` ({reps} replicate studies per row, "
        f"{seconds:.0f} s). Design and columns: the script's docstring. Coverage in %, "
        f"nominal 95%, band {100 * lo:.1f}-{100 * hi:.1f}%; Monte Carlo SE "
        f"{100 * np.sqrt(0.95 * 0.05 / reps):.2f}%. Studies without a variance "
        f"(fewer than two patients with a positive or a negative scan) are left out: at "
        f"most {100 * skipped:.2f}% of a row.",
        "",
        "| interval | min | median | max | rows in the band | rows below |",
        "|---|---|---|---|---|---|",
        *summary,
        "",
        *lines,
        "",
        READING,
        ""])


READING = """Reading. When a patient's scans share the label (patient-level), plain DeLong
under-covers at every size and more patients do not help: 77-87% at patient SD 1 and
70-81% at SD 2, its SE 1.15-1.46 times too small (`SE ratio`: the design effect). The
clustered variance is right in every row (`SE / SD` 0.97-1.02: the clustered SE matches
the spread of the estimates across studies). What it leaves is the Wald interval on the
AUC scale, which with few patients (about 7 with a positive and 7 with a negative scan at
15 positive scans) and near the ceiling under-covers whatever the variance: the clustered
AUC-scale interval covers 92-94.5% at 120 positive scans, 87-93% at 40 and 75-91% at 15
(`delong-cluster`), and a t quantile on C - 1 df adds little there (`delong-cluster-t`,
76.9-94.7%). On the logit scale with the t quantile, the default where a patient repeats
(`delong-cluster-logit-t`, plan `auc_scale: auto`), it covers 93.9-95.6% from 40 positive
scans on (24 of 24 rows in the band) and 90.4-96.8% at 15 (lowest at AUC 0.9 with every
scan of a patient sharing its label, 7 patients of each kind; highest, 96.8%, with labels
mixed within patients at AUC 0.7): 33 of 36 rows in the band, against 29 with the normal
quantile (`delong-cluster-logit`, 87.7-95.4%) and 7 on the AUC scale. Where scans are
independent `auto` keeps the AUC scale, so those intervals stay pROC's exactly. When a
patient holds positive and negative scans (scan-level labels) the shared effect raises
S10 and S01 but makes the covariance S11 negative (checked on one large study:
2 S11 / (M N) about -0.55 S10 / M), so the clustered and plain SEs are close (ratio
0.99-1.11). There the estimate carries a small positive bias (up to 0.009 at 15 patients)
from the within-patient pairs, which Obuchowski's estimator weighs like any other pair and
which rank more easily (the shared effect cancels); it vanishes as the patients grow
(0.001-0.002 at 120)."""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "auc_cluster_coverage.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = table(args.reps)
    args.out.write_text(markdown(df, args.reps, time.perf_counter() - t0))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
