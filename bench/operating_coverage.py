"""Coverage of the paired cluster-bootstrap intervals of stats.operating, and the size of
the cluster-aware unpaired DeLong test (issue 31).

Run from the repository root (the committed file: ``--cohorts 2000 --n-boot 300``, about
27 minutes on 2 busy cores; ``--cohorts 100`` in three)::

    .venv/bin/python bench/operating_coverage.py --cohorts 2000 --n-boot 300

Design (known truth). A cohort has P patients with 1 to 3 scans each (uniform); each scan
is a reference positive with probability 0.4, independently. Two models score every
scan: ``s_m = mu_m y + sqrt(tau2) u_patient + sqrt(1 - tau2) (sqrt(0.5) z + sqrt(0.5)
e_m)``, with ``u``, ``z``, ``e`` standard normal (``u`` shared by a patient's scans and
both models, ``z`` by both models): each model's negatives are N(0, 1) and positives
N(mu_m, 1) marginally, so the truths are binormal, ``Se(sp) = 1 - Phi(Phi^-1(sp) - mu)``,
and the partial AUC over specificity 0.8-1 is its integral (numerical quadrature).
``mu_A = 2``, ``mu_B = 1.5``; ``tau2`` 0 (scans of a patient independent) or 0.5.

Per scenario, ``COHORTS`` cohorts are analysed in one call (each cohort a stratum of the
bootstrap and a cell of ``by``, so every cohort is resampled within itself, patients as
clusters; ``n_boot`` replicates): ``stats.operating_point(specificity=0.9)`` and
``stats.partial_auc(specificity=(0.8, 1))``, the 95% intervals of model A's value and of
the paired difference A - B as the functions give them by default (percentile; BCa for a
model's partial AUC, whose percentile interval is shown beside it). Reported: coverage,
the share of intervals entirely below / above the truth, and the Monte Carlo SE.

The unpaired test: per cohort a scan-level subgroup (probability 0.3, so a patient's scans
fall on both sides), no true AUC difference (model A's scores); the share of two-sided
5% rejections of ``stats.delong_test_unpaired`` with and without the patients as clusters.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import integrate
from scipy import stats as sps

import stats

MU = {"model_A": 2.0, "model_B": 1.5}
SPECS = (0.8, 0.9)
RANGE = (0.8, 1.0)


def truth_sens(mu: float, spec: float) -> float:
    return float(1 - sps.norm.cdf(sps.norm.ppf(spec) - mu))


def truth_pauc(mu: float) -> float:
    return float(integrate.quad(lambda x: 1 - sps.norm.cdf(sps.norm.ppf(x) - mu), *RANGE,
                                epsabs=1e-12)[0])


def cohorts(rng: np.random.Generator, n: int, patients: int, tau2: float) -> pd.DataFrame:
    """``n`` cohorts stacked (column ``sim``), one row per model x scan."""
    scans = rng.integers(1, 4, size=(n, patients))
    sim = np.repeat(np.arange(n), scans.sum(axis=1))
    pat = np.repeat(np.arange(n * patients), scans.ravel())
    k = len(pat)
    y = rng.random(k) < 0.4
    u = rng.normal(size=n * patients)[pat]
    z = rng.normal(size=k)
    frames = []
    for m, mu in MU.items():
        e = rng.normal(size=k)
        s = mu * y + np.sqrt(tau2) * u + np.sqrt(1 - tau2) * (np.sqrt(0.5) * z + np.sqrt(0.5) * e)
        frames.append(pd.DataFrame({"case_id": np.arange(k).astype(str), "model": m,
                                    "label": y.astype(int), "score": s,
                                    "patient_id": pat.astype(str), "sim": sim.astype(str),
                                    "subgroup": 0}))
    out = pd.concat(frames, ignore_index=True)
    out["subgroup"] = np.tile((rng.random(k) < 0.3).astype(int), len(MU))
    return out


def _cover(rows: pd.DataFrame, truth: float) -> dict:
    lo, hi = rows["conf_low"].to_numpy(), rows["conf_high"].to_numpy()
    below, above = (hi < truth).mean(), (lo > truth).mean()
    cov = 1 - below - above
    return {"coverage": cov, "miss_low": below, "miss_high": above,
            "mc_se": float(np.sqrt(cov * (1 - cov) / len(rows))), "cohorts": len(rows),
            "mean_estimate": float(rows["estimate"].mean()), "truth": truth}


def run(n: int, n_boot: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for patients in (80, 200):
        for tau2 in (0.0, 0.5):
            d = cohorts(rng, n, patients, tau2)
            t0 = time.perf_counter()
            op_seed = int(rng.integers(2 ** 31))
            op = stats.operating_point(d, specificity=list(SPECS), by=["sim"], n_boot=n_boot,
                                       seed=op_seed, strata="sim")
            op_pct = stats.operating_point(d, specificity=list(SPECS), by=["sim"],
                                           n_boot=n_boot, seed=op_seed, strata="sim",
                                           difference_ci="percentile")
            pa_seed = int(rng.integers(2 ** 31))
            pa = stats.partial_auc(d, specificity=RANGE, by=["sim"], n_boot=n_boot,
                                   seed=pa_seed, strata="sim")
            pct = stats.partial_auc(d, specificity=RANGE, by=["sim"], n_boot=n_boot,
                                    seed=pa_seed, strata="sim", boot_ci="percentile")
            secs = time.perf_counter() - t0
            sc = {"patients": patients, "tau2": tau2, "seconds": round(secs, 1)}
            est = "sensitivity_at_specificity"
            for spec in SPECS:
                name = f"sensitivity at specificity {spec:g}"
                ta = truth_sens(MU["model_A"], spec)
                td = ta - truth_sens(MU["model_B"], spec)
                for tab, tag in ((op, ""), (op_pct, ", percentile")):
                    c = (tab["group_var"] == "sim") & np.isclose(tab["at"], spec)
                    if not tag:
                        a = tab[c & (tab["estimand"] == est) & (tab["model"] == "model_A")]
                        out.append({**sc, "statistic": name, "target": "model A",
                                    **_cover(a, ta)})
                    df = tab[c & (tab["estimand"] == est + "_difference")]
                    out.append({**sc, "statistic": name,
                                "target": "A - B" + (tag or ", linearized"),
                                **_cover(df, td)})
            est = "partial_auc"
            name = "partial AUC, specificity 0.8-1"
            truth_a, truth_d = truth_pauc(MU["model_A"]), (truth_pauc(MU["model_A"])
                                                           - truth_pauc(MU["model_B"]))
            c = pa["group_var"] == "sim"
            a = pa[c & (pa["estimand"] == est) & (pa["model"] == "model_A")]
            df = pa[c & (pa["estimand"] == est + "_difference")]
            out.append({**sc, "statistic": name, "target": "model A", **_cover(a, truth_a)})
            out.append({**sc, "statistic": name, "target": "A - B", **_cover(df, truth_d)})
            c = pct["group_var"] == "sim"     # the percentile interval beside the default BCa
            a = pct[c & (pct["estimand"] == est) & (pct["model"] == "model_A")]
            out.append({**sc, "statistic": name, "target": "model A, percentile",
                        **_cover(a, truth_a)})
            # size of the unpaired test of a scan-level subgroup against the rest (no effect)
            rej = {"scans": [], "patients": []}
            a = d[d["model"] == "model_A"]
            for _, g in a.groupby("sim", sort=False):    # a plain loop over cohorts
                s, r = g[g["subgroup"] == 1], g[g["subgroup"] == 0]
                t = stats.delong_test_unpaired(s["label"], s["score"], r["label"], r["score"])
                tc = stats.delong_test_unpaired(s["label"], s["score"], r["label"], r["score"],
                                                cluster_a=s["patient_id"],
                                                cluster_b=r["patient_id"])
                rej["scans"].append(t["p_value"].iloc[0] < 0.05)
                rej["patients"].append(tc["p_value"].iloc[0] < 0.05)
            for k, v in rej.items():
                rate = float(np.mean(v))
                out.append({**sc, "statistic": "unpaired DeLong, subgroup vs rest",
                            "target": f"size, clusters = {k}", "coverage": rate,
                            "miss_low": np.nan, "miss_high": np.nan,
                            "mc_se": float(np.sqrt(0.05 * 0.95 / len(v))), "cohorts": len(v),
                            "mean_estimate": np.nan, "truth": 0.0})
            print(patients, tau2, round(secs, 1), flush=True)
    return out


def write(rows: list[dict], path: Path, *, n: int, n_boot: int, seed: int, secs: float) -> None:
    t = pd.DataFrame(rows)
    lines = [
        "# Operating points: coverage of the paired cluster-bootstrap intervals and size of "
        "the unpaired DeLong test",
        "",
        f"Written by `.venv/bin/python bench/operating_coverage.py` (design in its docstring): "
        f"{n} cohorts per scenario, {n_boot} bootstrap replicates, seed {seed}, "
        f"{secs:.0f} s on 2 cores. Nominal 95% intervals as the functions give them "
        f"(percentile; a paired difference at a matched operating point: linearized "
        f"replicates, their replicates' own values beside them; a model's partial AUC BCa, "
        f"its percentile interval beside it); the "
        f"unpaired rows give "
        f"the rejection rate of the two-sided 5% test under no difference (column "
        f"`coverage` holds the rate there).",
        "",
        "| patients | tau2 | statistic | target | coverage | below | above | MC SE | truth | "
        "mean estimate |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in t.iterrows():
        f = lambda v, d=3: "" if pd.isna(v) else f"{v:.{d}f}"          # noqa: E731
        lines.append(f"| {r.patients} | {r.tau2:g} | {r.statistic} | {r.target} | "
                     f"{f(r.coverage)} | {f(r.miss_low)} | {f(r.miss_high)} | {f(r.mc_se)} | "
                     f"{f(r.truth, 4)} | {f(r.mean_estimate, 4)} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cohorts", type=int, default=300)
    ap.add_argument("--n-boot", type=int, default=400)
    ap.add_argument("--seed", type=int, default=20261231)
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".md")))
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = run(a.cohorts, a.n_boot, a.seed)
    write(rows, Path(a.out), n=a.cohorts, n_boot=a.n_boot, seed=a.seed,
          secs=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
