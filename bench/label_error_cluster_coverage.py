"""Coverage of the error-aware subgroup intervals when patients have several scans
(stats.label_error with cluster=; issue 15 item 1 with issue 17 item 4).

Run from the repository root (about 5 minutes on 2 cores)::

    .venv/bin/python bench/label_error_cluster_coverage.py            # writes the .md
    .venv/bin/python bench/label_error_cluster_coverage.py --reps 50  # a quick look (no file)

Design (known truth): the design of ``bench/label_error_coverage.py`` (6 sites, their phase
and race mixes, the phase and race effects on detection, the bad site's 3x error rate)
with patients instead of independent scans. A study has ``n_patients`` patients, each at
one site with 1-4 scans (probabilities 0.4, 0.3, 0.2, 0.1), one race and one tumour status
(prevalence 0.4) per patient and a phase per scan; among positives
``P(call) = expit(a_phase + b_race + u_i)`` with a patient effect ``u_i ~ N(0, sd^2)``
(sd 1.5: a patient whose tumour is hard to see is missed on every scan). The recorded
phase of each scan is flipped to a uniformly chosen other level with probability eps (3
eps at the bad site; overall share ``rate``); race is recorded correctly. A second design
(``field="race"``) flips a patient's recorded race instead, once per patient and on every
scan of the patient alike (phase recorded correctly): a patient-level field, imputed once
per patient (``stats.label_error.impute_states(patient=)``).

Estimand: sensitivity among tumour-positive scans whose TRUE phase is L,
``sum over site, race of P(site, race | L) E_u[expit(a_L + b_race + u)]`` (Gauss-Hermite).
Analysis, per study: ``error_aware_metrics(cases, by=["phase"], label_error=TABLE,
cluster="patient_id")`` (``mi-wilson-cluster``), the same without ``cluster``
(``mi-wilson``, scans as independent) and the naive ``subgroup_metrics(cluster=
"patient_id")`` on the recorded phase (``wilson-cluster``). TABLE is the design's exact
pooled P(true | recorded) for phase. Monte Carlo SE of a 95% coverage
``sqrt(0.95 * 0.05 / reps)``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from label_error_coverage import (A_PHASE, B_RACE, PHASE_MIX, PHASES, PREVALENCE,  # noqa: E402
                                  RACE_MIX, RACES, SITE_W, SPEC, label_error_table, site_rates)

from stats import subgroups as sg  # noqa: E402
from stats.label_error import error_aware_metrics  # noqa: E402

SCANS, PROBS = (1, 2, 3, 4), (0.4, 0.3, 0.2, 0.1)
SD = 1.5


def true_sensitivity(sd: float = SD, field: str = "phase") -> pd.Series:
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()
    sens = (w * expit(A_PHASE[:, None, None] + B_RACE[None, :, None] + sd * x)).sum(-1)
    joint = np.einsum("s,sp,sr->pr", SITE_W, PHASE_MIX, RACE_MIX)  # P(phase, race)
    if field == "race":
        return pd.Series((joint * sens).sum(0) / joint.sum(0), index=list(RACES))
    return pd.Series((joint * sens).sum(1) / joint.sum(1), index=list(PHASES))


def simulate_study(rng: np.random.Generator, rate: float, n_patients: int,
                   sd: float = SD, field: str = "phase") -> pd.DataFrame:
    site_p = rng.choice(len(SITE_W), size=n_patients, p=SITE_W)
    race_p = (rng.random((n_patients, 1)) > np.cumsum(RACE_MIX[site_p], 1)).sum(1).clip(0, 3)
    lab_p = (rng.random(n_patients) < PREVALENCE).astype(int)
    u_p = rng.normal(0, sd, n_patients)
    pat = np.repeat(np.arange(n_patients), rng.choice(SCANS, size=n_patients, p=PROBS))
    n = len(pat)
    site, race, label = site_p[pat], race_p[pat], lab_p[pat]
    phase = (rng.random((n, 1)) > np.cumsum(PHASE_MIX[site], 1)).sum(1).clip(0, 3)
    p_call = np.where(label == 1, expit(A_PHASE[phase] + B_RACE[race] + u_p[pat]),
                      1 - SPEC[phase])
    pred = (rng.random(n) < p_call).astype(int)
    if field == "race":   # a patient's race is misrecorded on every scan alike
        flip_p = rng.random(n_patients) < site_rates(rate)[site_p]
        race_rec = np.where(flip_p, (race_p + rng.integers(1, 4, n_patients)) % 4, race_p)[pat]
        recorded = phase
    else:
        flip = rng.random(n) < site_rates(rate)[site]
        recorded = np.where(flip, (phase + rng.integers(1, 4, n)) % 4, phase)
        race_rec = race
    return pd.DataFrame({
        "case_id": np.arange(n).astype(str), "patient_id": pat.astype(str), "model": "m",
        "label": label, "score": pred.astype(float), "pred": pred,
        "site": np.char.add("site", (site + 1).astype(str)),
        "phase": pd.Categorical.from_codes(recorded, PHASES),
        "race": pd.Categorical.from_codes(race_rec, RACES)})


def run(rate: float, reps: int, *, n_patients: int = 1000, n_imputations: int = 100,
        seed: int = 0, field: str = "phase") -> pd.DataFrame:
    tab = label_error_table(rate)
    tab = tab[tab["field"] == field]
    truth = true_sensitivity(field=field)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(reps):  # one study per replicate: the unit of a coverage study
        cases = simulate_study(rng, rate, n_patients, field=field)
        s = int(rng.integers(2 ** 31))
        kw = dict(by=[field], label_error=tab, metrics=("sensitivity",),
                  n_imputations=n_imputations)
        for kind, res in (
                ("mi-wilson-cluster", error_aware_metrics(cases, cluster="patient_id",
                                                          seed=s, **kw)),
                ("mi-wilson", error_aware_metrics(cases, cluster=None, seed=s, **kw)),
                ("naive wilson-cluster", sg.subgroup_metrics(
                    cases, by=[field], metrics=("sensitivity",), cluster="patient_id"))):
            r = res[res["group_var"] == field]
            out.append(pd.DataFrame({"kind": kind, "level": r["group_level"].to_numpy(),
                                     "low": r["conf_low"].to_numpy(),
                                     "high": r["conf_high"].to_numpy()}))
    df = pd.concat(out, ignore_index=True)
    df["truth"] = truth.reindex(df["level"]).to_numpy()
    df["covered"] = (df["low"] <= df["truth"]) & (df["truth"] <= df["high"])
    df["width"] = df["high"] - df["low"]
    return (df.groupby(["kind", "level"], sort=False)
            .agg(truth=("truth", "first"), coverage=("covered", "mean"),
                 width=("width", "mean"), reps=("covered", "size")).reset_index()
            .assign(rate=rate, field=field))


def to_markdown(res: pd.DataFrame, meta: dict) -> str:
    kinds = list(pd.unique(res["kind"]))
    wide = res.pivot_table(index=["field", "rate", "level"], columns="kind",
                           values=["coverage", "width"], sort=False)
    truth = res.groupby(["field", "rate", "level"], sort=False)["truth"].first()
    lines = [
        "# Error-aware intervals with repeated scans: coverage", "",
        (f"Written by `.venv/bin/python bench/label_error_cluster_coverage.py` (design in its "
         f"docstring): {meta['reps']} studies of {meta['n_patients']} patients (about "
         f"{meta['n_patients'] * 2} scans) per flip rate, M = {meta['n_imputations']} "
         f"imputations, patient SD {SD}, {meta['seconds']:.0f} s. Coverage of the 95% "
         f"interval of sensitivity by TRUE phase (misrecorded per scan) and by TRUE race "
         f"(misrecorded per patient, on every scan alike); Monte Carlo SE "
         f"{np.sqrt(0.95 * 0.05 / meta['reps']):.3f}."), "",
        "| field | flipped | level | truth | " + " | ".join(f"{k} coverage" for k in kinds)
        + " | " + " | ".join(f"{k} width" for k in kinds) + " |",
        "|" + "---|" * (4 + 2 * len(kinds))]
    for key, r in wide.iterrows():
        lines.append(f"| {key[0]} | {key[1]:.0%} | {key[2]} | {truth[key]:.3f} | "
                     + " | ".join(f"{r['coverage', k]:.3f}" for k in kinds) + " | "
                     + " | ".join(f"{r['width', k]:.3f}" for k in kinds) + " |")
    summ = res.groupby(["field", "kind"], sort=False)["coverage"].agg(["min", "median", "max"])
    lines += ["", "| field | interval | min | median | max |", "|---|---|---|---|---|"]
    lines += [f"| {k[0]} | {k[1]} | {s['min']:.3f} | {s['median']:.3f} | {s['max']:.3f} |"
              for k, s in summ.iterrows()]
    lines += ["", READING]
    return "\n".join(lines) + "\n"


READING = """Reading. The error-aware interval that treats scans as independent
(`mi-wilson`) carries the metadata error but not the patient clustering, and the naive
cluster-aware interval (`wilson-cluster` on the recorded level) the clustering but not the
error (its estimate is biased toward the other levels); `mi-wilson-cluster`, the default
whenever patients repeat, carries both. Phase (misrecorded scan by scan, imputed scan by
scan): 93.7-96.5% over the 8 level x rate rows, where `mi-wilson` falls to 91.5% and the
naive interval to 91.0%. Race (misrecorded once per patient, on all of the patient's
scans): the imputation draws each patient's true race once, from the posterior given all
of the patient's scans (`impute_states(patient=)`), and the Bayesian bootstrap weighs
patients: 93.3-95.3% (median 94.6%), where `mi-wilson` stays at 90.0-91.6%. Drawing race
scan by scan instead (the earlier rule) split patients between levels and covered
93.0-94.5% in a run of the same design (1,000 studies per rate), its lowest row in the
smallest level. The naive interval does well here because race has a small effect on
detection, so misrecording biases little; it has no term for the error."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--n-patients", type=int, default=1000)
    ap.add_argument("--imputations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = pd.concat([run(rate, args.reps, n_patients=args.n_patients,
                         n_imputations=args.imputations, seed=args.seed + i + 10 * j,
                         field=field)
                     for j, field in enumerate(("phase", "race"))
                     for i, rate in enumerate((0.02, 0.10))], ignore_index=True)
    meta = {"reps": args.reps, "n_patients": args.n_patients,
            "n_imputations": args.imputations, "seconds": time.perf_counter() - t0}
    text = to_markdown(res, meta)
    print(text)
    out = args.out or (str(Path(__file__).with_suffix(".md")) if args.reps >= 300 else None)
    if out:
        Path(out).write_text(text)


if __name__ == "__main__":
    main()
