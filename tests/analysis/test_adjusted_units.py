"""Continuous model terms per a stated unit: ``detection.adjusted.units``
(per k units, per k-fold change of a log term, per one SD), checked against the fitted
terms (``adjusted_terms``) recomputed independently."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from analysis import Tables, run
from analysis.plan import plan_for_tables

FORMULA = "detected ~ phase + age + np.log(tumor_size_mm)"


def _Plan(det):
    return plan_for_tables(detection=det, where="plan.yaml")


@pytest.fixture(scope="module")
def cases(benchx_small):
    df = stats.read_cases(benchx_small.data)
    return df.assign(split="test")


def _run(cases, units, methods=("glmm", "gee")):
    adjusted = {"formula": FORMULA, "methods": list(methods), "group": "site", "blocks": {},
                "population": "positives", "nagq": 1,
                "levels": {"phase": ["venous", "arterial", "delayed", "non_contrast"]},
                "model": None, "bias_reduced": None, "means": [], "means_kind": "standardized",
                "units": units}
    det = {"threshold": {"value": 50.0}, "adjusted": adjusted}
    return run(_Plan(det), Tables(cases=cases, input_rows={"cases": len(cases)}),
               only=["adjusted_table"], errors="raise")


def _pair(res, model, fit, term):
    tab, terms = res["adjusted_table"], res["adjusted_terms"]
    row = tab[(tab["model"] == model) & (tab["fit_method"] == fit) & (tab["term"] == term)]
    raw = terms[(terms["model"] == model) & (terms["fit_method"] == fit)
                & (terms["estimand"] == term)]
    assert len(row) == len(raw) == 1
    return row.iloc[0], raw.iloc[0]


def _assert_scaled(row, raw, k):
    """OR, CI limits = exp(k * log(fitted OR, limits))."""
    for got, fitted in (("odds_ratio", "odds_ratio"), ("or_conf_low", "or_conf_low"),
                        ("or_conf_high", "or_conf_high")):
        assert row[got] == pytest.approx(np.exp(k * np.log(raw[fitted])), rel=1e-12)


def test_default_units_per_one_unit_and_per_doubling(cases):
    res = _run(cases, {})
    model = res["adjusted_table"]["model"].iloc[0]
    for fit in ("glmm", "gee"):
        row, raw = _pair(res, model, fit, "age")
        assert row["unit"] == "per 1 unit" and row["label"] == "age (per 1 unit)"
        _assert_scaled(row, raw, 1.0)
        row, raw = _pair(res, model, fit, "np.log(tumor_size_mm)")
        assert row["unit"] == "per doubling" and row["label"] == "tumor size mm (per doubling)"
        _assert_scaled(row, raw, np.log(2.0))
    assert res.decisions["adjusted.units"] == {"age": "per 1 unit",
                                               "np.log(tumor_size_mm)": "per doubling"}


def test_units_per_k_and_per_sd_of_the_models_rows(cases):
    res = _run(cases, {"age": 10.0, "tumor_size_mm": "sd"})
    ev = res["adjusted_rows"]
    for model in pd.unique(res["adjusted_table"]["model"]):
        pos = ev[(ev["model"] == model) & (ev["label"] == 1)]
        sd_log = np.log(pos["tumor_size_mm"]).std()     # pandas, ddof 1
        for fit in ("glmm", "gee"):
            row, raw = _pair(res, model, fit, "age")
            assert row["unit"] == "per 10 units" and row["unit_step"] == 10
            _assert_scaled(row, raw, 10.0)
            row, raw = _pair(res, model, fit, "np.log(tumor_size_mm)")
            assert row["unit"] == "per SD of log"
            assert row["unit_step"] == pytest.approx(sd_log, rel=1e-12)
            _assert_scaled(row, raw, sd_log)
    res = _run(cases, {"age": "sd", "tumor_size_mm": 10.0}, methods=("glmm",))
    model = res["adjusted_table"]["model"].iloc[0]
    pos = ev[(ev["model"] == model) & (ev["label"] == 1)]
    row, raw = _pair(res, model, "glmm", "age")
    assert row["unit"] == "per SD" and row["label"] == "age (per SD)"
    _assert_scaled(row, raw, pos["age"].std())
    row, raw = _pair(res, model, "glmm", "np.log(tumor_size_mm)")
    assert row["unit"] == "per 10-fold change"
    _assert_scaled(row, raw, np.log(10.0))


def test_units_for_a_factor_are_refused_at_fit_time(cases):
    """phase is a plain column of the formula (the plan accepts it) but a factor in the data."""
    c = cases.copy()
    with pytest.raises(stats.ContractError, match=r"plan\.yaml: key 'detection\.adjusted\.units"
                                                  r"\.phase'.*enters the fitted model as a factor"):
        _run(c, {"phase": 2.0}, methods=("glmm",))
