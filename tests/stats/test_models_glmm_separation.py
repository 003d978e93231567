"""A GLMM with one separated factor level, against R (tests/r/glmer_separation.R).

Every arterial-phase positive of the simulator's model_A detected: the arterial log-odds
ratio is infinite. glmer stops it at a large finite value, its finite-difference Hessian
is not positive definite, and R falls back to a covariance from RX. clinrel flags the
separated term only (``separation``, once; the fit-level code of fitted 0/1 probabilities
is ``fitted_0_1``) and gives the other terms the covariance of the Hessian without the
separated row and column (``stats.models.glmm.fit_glmm(separated=)``); R's same
sub-Hessian inverse is the reference.

Measured: the other terms' estimates within 2.7e-6 (R's arterial coefficient stops at 30,
clinrel's at 37), their SEs within 6.8e-5 relative of R's sub-Hessian inverse (R's Hessian
is by finite differences), the site SD 2.8e-7 relative; tolerances 1e-5, 5e-4, 1e-5.
R's own RX fallback is within 3.4% of both (written for information).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from stats.models import fit_adjusted

R_DIR = Path(__file__).resolve().parents[1] / "r"
LEVELS = {"phase": ["venous", "arterial", "delayed", "non_contrast"],
          "age_group": ["<40", "40-59", "60-74", "75+"], "sex": ["F", "M"],
          "race": ["White", "Black", "Asian", "Other", "Unknown"]}
SEP = "phase[T.arterial]"


def _fit():
    d = pd.read_csv(R_DIR / "data" / "models_benchx.csv")
    d = d[(d["model"] == "model_A") & (d["label"] == 1)].copy()
    d.loc[d["phase"] == "arterial", "pred"] = 1
    for c, lv in LEVELS.items():
        d[c] = pd.Categorical(d[c], categories=lv)
    return fit_adjusted(d, "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)",
                        method="glmm", population="positives")


def test_separated_glmm_flags_one_term_and_keeps_the_others_ses():
    ref = pd.read_csv(R_DIR / "glmer_separation.csv", keep_default_na=False)
    ref["value"] = pd.to_numeric(ref["value"], errors="coerce")
    r = {q: g.set_index("term")["value"] for q, g in ref.groupby("quantity")}
    td = _fit().tidy().set_index("estimand")
    fixed = [t for t in r["estimate"].index if t != SEP]
    np.testing.assert_allclose(td.loc[fixed, "estimate"], r["estimate"][fixed], rtol=0, atol=1e-5)
    np.testing.assert_allclose(td.loc[fixed, "std_error"], r["se_sub"][fixed], rtol=5e-4)
    np.testing.assert_allclose(td.loc[fixed, "std_error"], r["se_rx"][fixed], rtol=0.035)
    sd = td.loc[td["effect"] != "fixed", "estimate"].iloc[0]
    np.testing.assert_allclose(sd, r["theta"].iloc[0], rtol=1e-5)
    assert td.loc[SEP, "estimate"] > r["estimate"][SEP] - 1 and np.isnan(td.loc[SEP, "std_error"])
    flags = td["flag"].fillna("").str.split(";")
    assert flags[SEP].count("separation") == 1
    assert [t for t, f in flags.items() if "separation" in f] == [SEP]
    assert not any("not_estimable" in f for f in flags)
    assert all("fitted_0_1" in f for t, f in flags.items() if td.loc[t, "effect"] == "fixed")


def test_a_separated_level_with_spaces_in_its_name_is_found():
    """The separated term is read from the warning whatever its level name holds ("late
    arterial"): same flags and SEs as with "arterial" (a split on spaces lost it)."""
    d = pd.read_csv(R_DIR / "data" / "models_benchx.csv")
    d = d[(d["model"] == "model_A") & (d["label"] == 1)].copy()
    d.loc[d["phase"] == "arterial", "pred"] = 1
    d["phase"] = d["phase"].replace({"arterial": "late arterial"})
    lv = {**LEVELS, "phase": ["venous", "late arterial", "delayed", "non_contrast"]}
    for c, levels in lv.items():
        d[c] = pd.Categorical(d[c], categories=levels)
    td = fit_adjusted(d, "detected ~ phase + age_group + sex + race + np.log(tumor_size_mm)",
                      method="glmm", population="positives").tidy().set_index("estimand")
    base = _fit().tidy().set_index("estimand")
    sep = "phase[T.late arterial]"
    assert td.loc[sep, "flag"].split(";").count("separation") == 1
    others = [t for t in base.index if t != SEP and base.loc[t, "effect"] == "fixed"]
    np.testing.assert_allclose(td.loc[others, "std_error"], base.loc[others, "std_error"],
                               rtol=1e-6)
