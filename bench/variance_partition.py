"""Does stats.variance_partition recover known latent-scale shares? (issue 32, item 3)

Run from the repository root (a few minutes on 2 shared cores)::

    .venv/bin/python bench/variance_partition.py       # writes bench/variance_partition.md

Design (known truth). Per replicate: 40 sites of 50 patients with 5 positive scans each
(10,000 scans). Latent logit of detection::

    eta = b0 + phase_effect[phase] + age_effect[age_group] + sex_effect * male
          + b_size * log(size) + s_site + t_patient,

phase drawn per scan (venous .5, arterial .2, delayed .1, non-contrast .2), age group and
sex per patient, log tumour size per scan N(log 22, 0.55^2), site and patient intercepts
N(0, 0.5^2) and N(0, 0.7^2) (patients nested in sites). The covariates are independent,
so the blocks' linear predictors are uncorrelated and the true shares are
``V_b / (sum_b V_b + sigma_site^2 + sigma_patient^2 + pi^2 / 3)`` with ``V_b`` the
population variance of block b's part of eta (computed from the level probabilities and
effects). Each replicate fits ``detected ~ phase + age_group + sex + np.log(tumor_size_mm)
+ (1 | site/patient_id)`` by Laplace and partitions it (blocks protocol: phase;
demographics: age_group, sex; tumour: np.log(tumor_size_mm)). Reported per component:
the true share, the mean estimate over the replicates, bias, SD and RMSE, and the Monte
Carlo SE of the mean. The residual's share moves only through the other components.

The Laplace approximation is known to underestimate variance components of binary data
with few observations per cluster (Breslow & Lin 1995; lme4 shares it): the patient
level, 5 binary scans per patient, is where the table shows it.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

PHASES = ["venous", "arterial", "delayed", "non_contrast"]
P_PHASE = np.array([0.5, 0.2, 0.1, 0.2])
E_PHASE = np.array([0.0, -1.0, -0.3, -1.6])
AGES = ["<40", "40-59", "60-74", "75+"]
P_AGE = np.array([0.15, 0.35, 0.3, 0.2])
E_AGE = np.array([0.0, 0.5, 0.7, 0.4])
P_MALE, E_MALE = 0.5, -0.3
B_SIZE, SD_LOGSIZE = 1.0, 0.55
SD_SITE, SD_PATIENT = 0.5, 0.7
B0 = 1.2 - B_SIZE * np.log(22.0)
BLOCKS = {"protocol": ["phase"], "demographics": ["age_group", "sex"],
          "tumour": ["np.log(tumor_size_mm)"]}


def _var_factor(p, e) -> float:
    return float(np.sum(p * e ** 2) - np.sum(p * e) ** 2)


def truth() -> dict[str, float]:
    v = {"protocol": _var_factor(P_PHASE, E_PHASE),
         "demographics": _var_factor(P_AGE, E_AGE) + E_MALE ** 2 * P_MALE * (1 - P_MALE),
         "tumour": B_SIZE ** 2 * SD_LOGSIZE ** 2,
         "site": SD_SITE ** 2, "patient_id:site": SD_PATIENT ** 2,
         "between-block covariance": 0.0, "residual (logistic)": np.pi ** 2 / 3}
    total = sum(v.values())
    return {k: x / total for k, x in v.items()}


def simulate(rng: np.random.Generator, n_sites=40, n_pat=50, n_scans=5) -> pd.DataFrame:
    P = n_sites * n_pat
    site_p = np.repeat(np.arange(n_sites), n_pat)
    age_p = rng.choice(4, P, p=P_AGE)
    male_p = rng.random(P) < P_MALE
    t = rng.normal(0, SD_PATIENT, P)
    s = rng.normal(0, SD_SITE, n_sites)
    pat = np.repeat(np.arange(P), n_scans)
    n = len(pat)
    phase = rng.choice(4, n, p=P_PHASE)
    logsize = rng.normal(np.log(22.0), SD_LOGSIZE, n)
    eta = (B0 + E_PHASE[phase] + E_AGE[age_p[pat]] + E_MALE * male_p[pat] + B_SIZE * logsize
           + s[site_p[pat]] + t[pat])
    y = (rng.random(n) < expit(eta)).astype(int)
    return pd.DataFrame({
        "detected": y, "site": [f"s{i:02d}" for i in site_p[pat]],
        "patient_id": [f"p{i:05d}" for i in pat],
        "phase": pd.Categorical.from_codes(phase, PHASES),
        "age_group": pd.Categorical.from_codes(age_p[pat], AGES),
        "sex": pd.Categorical.from_codes(male_p[pat].astype(int), ["F", "M"]),
        "tumor_size_mm": np.exp(logsize)})


def run(reps: int, seed: int) -> pd.DataFrame:
    import stats

    rng = np.random.default_rng(seed)
    est = []
    for _ in range(reps):
        d = simulate(rng)
        fit = stats.fit_adjusted(d, "detected ~ phase + age_group + sex + np.log(tumor_size_mm)",
                                 group=("site", "patient_id"), population=None)
        vp = stats.variance_partition(fit, BLOCKS)
        est.append(vp.set_index("component")["estimate"])
    e = pd.DataFrame(est)
    tr = truth()
    out = pd.DataFrame({"true_share": pd.Series(tr)})
    out["mean_estimate"] = e.mean()
    out["bias"] = out["mean_estimate"] - out["true_share"]
    out["sd"] = e.std(ddof=1)
    out["rmse"] = np.sqrt(((e - pd.Series(tr)) ** 2).mean())
    out["mc_se_mean"] = out["sd"] / np.sqrt(len(e))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--seed", type=int, default=20261306)
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".md")))
    args = ap.parse_args()
    t0 = time.perf_counter()
    tab = run(args.reps, args.seed)
    wall = time.perf_counter() - t0
    lines = [
        "# Variance partition: recovery of known latent-scale shares",
        "",
        f"Written by `.venv/bin/python bench/variance_partition.py` (design in its docstring): "
        f"{args.reps} replicates of 10,000 positive scans (40 sites x 50 patients x 5 scans), "
        f"seed {args.seed}, {wall:.0f} s on 2 shared cores. Nested GLMM by Laplace, "
        "`stats.variance_partition` with blocks protocol (phase), demographics (age group, "
        "sex), tumour (log size). Shares of the latent variance "
        "(sum of the block variances, the site and patient variances and pi^2/3).",
        "",
        "| component | true share | mean estimate | bias | SD | RMSE | MC SE of mean |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {k} | {r.true_share:.4f} | {r.mean_estimate:.4f} | {r.bias:+.4f} | "
              f"{r.sd:.4f} | {r.rmse:.4f} | {r.mc_se_mean:.4f} |" for k, r in tab.iterrows()]
    pb = tab.loc["patient_id:site"]
    lines += ["", f"The fixed-effect blocks and the site share are recovered within about two "
              f"Monte Carlo SEs. The patient share is low by {-pb.bias:.4f} "
              f"({-pb.bias / pb.mc_se_mean:.1f} MC SEs), and the residual's share higher by "
              "as much: the Laplace approximation underestimates a variance component of "
              "binary data with few observations per cluster (here 5 scans per patient; "
              "Breslow & Lin 1995), a property of the Laplace likelihood that lme4's glmer shares "
              "(ours equals it: tests/r/glmer_nested.R)."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
