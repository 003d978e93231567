"""Size of the cluster-aware paired model comparisons (stats.compare_models(cluster=);
issue 15).

Run from the repository root::

    .venv/bin/python bench/compare_cluster_size.py              # writes bench/compare_cluster_size.md
    .venv/bin/python bench/compare_cluster_size.py --reps 1000  # quicker, noisier

Design (known truth: the two models are equally good). Patients carry 1-4 scans
(probabilities 0.4, 0.3, 0.2, 0.1); a patient is a reference positive with probability 0.5
and all its scans share its label (a patient-level finding), or each scan has its own
label (``labels: scan``). Model ``m`` (A or B) scores scan ``j`` of patient ``i``
``s = 1.2 label + u_i + w_mi + e_mij`` with a patient effect ``u_i ~ N(0, 1)`` shared by
the models, a patient x model effect ``w_mi ~ N(0, tau^2)`` (what makes a patient's
discordances go one way: the clustering a paired comparison has to respect) and scan noise
``e ~ N(0, 1)``; a scan is called positive when ``s > 0.6``. Both models have the same
distribution, so every difference in sensitivity, specificity and AUC is 0.

Each replicate study is one level of a subgroup axis of one cases table, so one call of
``stats.compare_models(..., cluster="patient_id")`` tests every replicate. Reported:
rejection rate in % of the nominal 5% test of each estimand, clustered
(``cluster="patient_id"``: the clustered McNemar test of :func:`stats.clustered.
paired_difference`, Obuchowski's variance for the AUC) against the scans-as-independent
tests (exact McNemar, DeLong) on the same studies; the coverage of the 95% interval of
the difference (truth 0) for both; Monte Carlo SE of a 5% rate ``sqrt(0.05 * 0.95 /
reps)``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import stats  # noqa: E402

SCANS, PROBS = (1, 2, 3, 4), (0.4, 0.3, 0.2, 0.1)
PATIENTS = (20, 50, 150)
TAUS = (0.5, 1.0)
ESTIMANDS = ("sensitivity_difference", "specificity_difference", "auc_difference")


def studies(n_patients: int, tau: float, reps: int, rng: np.random.Generator,
            labels: str = "patient") -> pd.DataFrame:
    """``reps`` null studies as one cases table with two models; the study is ``rep``."""
    P = reps * n_patients
    m = rng.choice(SCANS, size=P, p=PROBS)
    pat = np.repeat(np.arange(P), m)
    n = len(pat)
    lab = (rng.random(P) < 0.5)[pat] if labels == "patient" else rng.random(n) < 0.4
    u = rng.normal(0, 1, P)[pat]
    frames = []
    for model in ("A", "B"):
        s = 1.2 * lab + u + rng.normal(0, tau, P)[pat] + rng.normal(0, 1, n)
        frames.append(pd.DataFrame({
            "case_id": np.arange(n).astype(str), "patient_id": pat.astype(str),
            "model": model, "label": lab.astype(int), "score": s, "pred": (s > 0.6).astype(int),
            "site": "s", "rep": pat // n_patients}))
    return pd.concat(frames, ignore_index=True)


def size(n_patients: int, tau: float, reps: int, seed: int, labels: str = "patient") -> list[dict]:
    cases = studies(n_patients, tau, reps, np.random.default_rng(seed), labels)
    rows = []
    for clus in ("patient_id", None):
        out = stats.compare_models(cases, by=["rep"], cluster=clus)
        out = out[(out.group_var == "rep")]
        for est in ESTIMANDS:
            o = out[(out.estimand == est) & out.p_value.notna()]
            rows.append({"labels": labels, "tau": tau, "patients": n_patients, "estimand": est,
                         "test": "clustered" if clus else "independent",
                         "reject": float(np.mean(o.p_value < 0.05)),
                         "cover": float(np.mean((o.conf_low <= 0) & (0 <= o.conf_high))),
                         "n": float(o["n_pos" if est.startswith("sens") else "n_neg"].mean()
                                    if est != "auc_difference" else o["n"].mean())})
    return rows


def table(reps: int) -> pd.DataFrame:
    rows = []
    for labels in ("patient", "scan"):
        for tau in TAUS:
            for k in PATIENTS:
                rows += size(k, tau, reps, seed=int(100 * tau + k + (labels == "scan")), labels=labels)
    return pd.DataFrame(rows)


LABEL = {"sensitivity_difference": "sens", "specificity_difference": "spec",
         "auc_difference": "AUC"}


def markdown(df: pd.DataFrame, reps: int, seconds: float) -> str:
    wide = df.assign(col=df["estimand"].map(LABEL) + " " + df["test"]).pivot_table(
        index=["labels", "tau", "patients"], columns="col", values=["reject", "cover"])
    cols = [f"{LABEL[e]} {t}" for e in ESTIMANDS for t in ("clustered", "independent")]
    n = df[df.test == "clustered"].pivot_table(index=["labels", "tau", "patients"],
                                                columns="estimand", values="n")

    def block(what: str, title: str) -> list[str]:
        lines = [f"| labels | tau | patients | positive scans | negative scans | "
                 + " | ".join(cols) + " |", "|" + "---|" * (5 + len(cols))]
        for key, r in wide[what].iterrows():
            nn = n.loc[key]
            lines.append("| " + " | ".join(map(str, key)) + f" | {nn['sensitivity_difference']:.0f}"
                         f" | {nn['specificity_difference']:.0f} | "
                         + " | ".join(f"{100 * r[c]:.1f}" for c in cols) + " |")
        return [title, ""] + lines + [""]

    rej = df[df.test == "clustered"]["reject"]
    ind = df[df.test == "independent"]["reject"]
    cov = df[df.test == "clustered"]["cover"]
    return "\n".join([
        "# Size of the cluster-aware paired model comparisons",
        "",
        f"Written by `.venv/bin/python bench/compare_cluster_size.py` (design and columns in "
        f"its docstring): {reps} replicate studies per row, {seconds:.0f} s. Both models are "
        f"equally good, so every rejection is a type I error; Monte Carlo SE of a 5% rate "
        f"{100 * np.sqrt(0.05 * 0.95 / reps):.2f}%. `clustered` is "
        f"`compare_models(..., cluster=\"patient_id\")` (clustered McNemar of Durkalski et "
        f"al. 2003 and Obuchowski's AUC variance), `independent` the same call with "
        f"`cluster=None` (exact McNemar, DeLong).",
        "",
        f"Clustered tests reject {100 * rej.min():.1f}-{100 * rej.max():.1f}% (median "
        f"{100 * rej.median():.1f}%); the scans-as-independent tests "
        f"{100 * ind.min():.1f}-{100 * ind.max():.1f}%. Coverage of the clustered 95% "
        f"intervals of the difference: {100 * cov.min():.1f}-{100 * cov.max():.1f}%.",
        "",
        *block("reject", "## Rejection rate of the 5% test (%)"),
        *block("cover", "## Coverage of the 95% interval of the difference (%)"),
        READING,
    ]) + "\n"


READING = """Reading. With patient-level labels and a patient x model effect (tau 1) the
scans-as-independent tests reject too often, increasingly with more patients (the
clustering does not average out: each patient's discordances go one way), and the
interval of the difference under-covers; the clustered forms hold the nominal level from
50 patients on (McNemar 3.3-5.0%, AUC 4.6-5.3%). The clustered McNemar p is never below
the exact McNemar p on the scans (Durkalski's asymptotic X^2 alone would reject more
often than the exact test on few discordant patients), so with 20 patients it is
conservative (1.1-2.8%) and its interval covers 96.2-97.8%; the clustered AUC test
rejects 4.2-5.6% there and its interval covers 94.4-95.8% (Obuchowski's variance with a
t reference on C - 1 df; with a normal reference, clinrel's before this table, it
rejected 5.8-7.0% and covered 93.0-94.2%; DeLong rejects 8.0-14.0%). With scan-level labels the within-patient pairing is partly cancelled, and both
forms are close to nominal."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "compare_cluster_size.md")
    args = ap.parse_args()
    t0 = time.time()
    df = table(args.reps)
    args.out.write_text(markdown(df, args.reps, time.time() - t0))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
