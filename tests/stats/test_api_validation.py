"""Every public ``stats`` function validates its arguments like the command line
(stats/_validate.py): a hypothesis property over ``stats.__all__``.

Each public function has a strategy here (``CALLS``) that draws a call: valid small
inputs, or inputs with one defect the function must refuse (a negative, fractional, NaN
or infinite count; an empty table or array where no result exists; a NaN threshold;
mismatched lengths; a confidence level outside (0, 1); a whole-number setting that is
not one). The property:

* a call with a defect raises :class:`~stats.schema.ContractError`, nothing else and
  never a result;
* an empty input where an empty result is meaningful returns it, with its columns;
* a valid call returns its documented type (a tidy table passes
  :func:`stats.schema.check_tidy`) or raises ContractError (e.g. a cohort that cannot be
  analysed), never another exception.

The functions are enumerated from ``stats.__all__``, so a public function added without
a strategy fails :func:`test_every_public_function_has_a_strategy` (and its own case of
the property). The file runs in about 20-35 s with ``-n 0`` on 2 busy cores (25 draws per
function).
"""
from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stats
from stats import simulate
from stats.schema import ContractError, check_tidy

PROFILE = settings(max_examples=25, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                          HealthCheck.filter_too_much])

#: public names that are not functions, and what they are (they take no arguments)
NOT_FUNCTIONS = {
    "ContractError": "exception class", "FormulaError": "exception class (a ContractError)",
    "ParsedFormula": "the parsed-formula class (built by parse_formula)",
    "ESTIMATE_COLUMNS": "constant", "GLOSSARY": "constant", "METRICS": "constant",
    "PROPORTIONS": "constant",
}

REFUSE, RESULT, EMPTY = "refuse", "result", "empty"

BAD_COUNTS = [-1, -3.0, 2.5, 0.5, math.nan, math.inf, -math.inf]
BAD_NUMBERS = [math.nan, math.inf, -math.inf]
BAD_LEVELS = [0, 1, 1.5, -0.2, 95, math.nan, math.inf]


@dataclass
class Call:
    """One drawn call: arguments, and what the call must give (REFUSE: a ContractError;
    EMPTY: a result without rows; RESULT: a result, or a ContractError for an input that
    is valid but cannot be analysed)."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expect: str = RESULT
    why: str = "valid"


def call(*args, expect: str = RESULT, why: str = "valid", **kwargs) -> Call:
    return Call(args, kwargs, expect, why)


def whole_bad(minimum: int) -> st.SearchStrategy:
    return st.sampled_from([minimum - 1, minimum - 5, 2.5, math.nan, math.inf, True])


# --------------------------------------------------------------------------- data


@st.composite
def cohorts(draw, *, models: int | None = None, min_n: int = 4) -> pd.DataFrame:
    """A small paired cases table that passes stats.read_cases, with pred (threshold 4),
    patients of one to two scans, three sites and the usual subgroup columns."""
    n = draw(st.integers(min_n, 16))
    m = models if models is not None else draw(st.integers(1, 2))
    label = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    label[:2] = [1, 0]       # both classes: most estimators need them
    patient = np.array(draw(st.lists(st.integers(0, max(1, n - 2)), min_size=n, max_size=n)))
    pick = st.lists(st.sampled_from(["arterial", "venous"]), min_size=n, max_size=n)
    phase = draw(pick)
    sex = draw(st.lists(st.sampled_from(["F", "M"]), min_size=n, max_size=n))
    race = draw(st.lists(st.sampled_from(["A", "B", "Unknown"]), min_size=n, max_size=n))
    age = np.array(draw(st.lists(st.integers(20, 90), min_size=n, max_size=n)), float)
    frames = []
    for j in range(m):
        score = np.array(draw(st.lists(st.integers(0, 8), min_size=n, max_size=n)), float)
        frames.append(pd.DataFrame({
            "case_id": [f"c{i}" for i in range(n)], "model": f"m{j}", "label": label,
            "score": score, "patient_id": [f"p{p}" for p in patient],
            "site": [f"s{i % 3}" for i in range(n)], "phase": phase, "sex": sex,
            "race": race, "age": age,
            "split": ["validation" if i % 3 == 0 else "test" for i in range(n)]}))
    raw = pd.concat(frames, ignore_index=True)
    cases = stats.read_cases(raw)
    cases = stats.add_bins(cases, {"age": {"name": "age_group", "breaks": [0, 50, 130],
                                           "labels": ["<50", "50+"]}})
    return stats.scan_level(cases, threshold=4)


@cache
def runs() -> pd.DataFrame:
    return stats.read_runs(simulate.crs_runs(n_encoders=4, n_datasets=2, n_seeds=2,
                                             label_fractions=(0.1, 1.0),
                                             perturbations=("blur",), severities=(1,),
                                             seed=3).data)


@cache
def reference() -> dict:
    return {"panel": sorted(runs()["encoder"].unique())[:3], "version": "t"}


@cache
def fits() -> tuple:
    cases = stats.scan_level(stats.read_cases(
        simulate.benchx_cohort(200, n_models=1, n_sites=4, seed=5).data), threshold=50)
    full = stats.fit_adjusted(cases, "detected ~ phase + sex", method="fixed", group=None)
    reduced = stats.fit_adjusted(cases, "detected ~ sex", method="fixed", group=None)
    return full, reduced


def label_error() -> pd.DataFrame:
    return pd.DataFrame({"field": "phase", "recorded_value": ["venous", "venous", "arterial"],
                         "true_value": ["venous", "arterial", "arterial"],
                         "probability": [0.9, 0.1, 1.0]})


@st.composite
def evidence(draw) -> pd.DataFrame:
    n = draw(st.integers(1, 8))
    rows = []
    for i in range(n):
        for ex in ("x", "y"):
            rows.append({"case_id": f"c{i}", "field": "phase", "extractor": ex,
                         "value": draw(st.sampled_from(["venous", "arterial"]))})
    return pd.DataFrame(rows)


@st.composite
def scored(draw):
    """``(label, prob)`` of one to 20 cases, both classes when there are two cases."""
    n = draw(st.integers(1, 20))
    label = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    if n >= 2:
        label[:2] = [1, 0]
    prob = np.array(draw(st.lists(st.floats(0.01, 0.99), min_size=n, max_size=n)))
    return label, prob


def arrays_with_defect(label, prob, draw):
    """One defect in ``(label, prob)``: empty, mismatched, NaN probability or label."""
    kind = draw(st.sampled_from(["empty", "length", "nan_prob", "nan_label"]))
    if kind == "empty":
        return np.array([]), np.array([]), kind
    if kind == "length":
        return label, np.r_[prob, 0.5], kind
    if kind == "nan_prob":
        return label, np.r_[prob[:-1], np.nan], kind
    return np.r_[label[:-1], np.nan], prob, kind


# --------------------------------------------------------------------------- strategies
# Each strategy draws a Call. ``hostile(draw, base)`` picks one defect for a cases table.


def _cases_defect(draw, cases: pd.DataFrame) -> tuple[Any, str]:
    kind = draw(st.sampled_from(["empty", "not_frame", "no_label"]))
    if kind == "empty":
        return cases.iloc[:0], kind
    if kind == "not_frame":
        return cases.to_dict("list"), kind
    return cases.drop(columns=["label"]), kind


def _table_fn(fn: Callable[[pd.DataFrame, Any], Call], *, models: int | None = None,
              extra_bad: Callable | None = None, empty: str = REFUSE):
    """A strategy for a function of a cases table: ``fn(cases, draw)`` builds the valid
    call; defects replace the table (empty, not a DataFrame, no label column), or
    ``extra_bad(cases, draw)`` returns a call with a bad keyword."""
    @st.composite
    def strat(draw):
        cases = draw(cohorts(models=models))
        good = fn(cases, draw)
        which = draw(st.sampled_from(["valid", "table"] + (["keyword"] if extra_bad else [])))
        if which == "valid":
            return good
        if which == "table":
            bad, kind = _cases_defect(draw, cases)
            expect = empty if kind == "empty" else REFUSE
            if kind == "no_label" and empty == EMPTY:
                expect = RESULT  # a row-wise transform without label: any outcome
            return Call((bad, *good.args[1:]), good.kwargs, expect, f"cases: {kind}")
        return extra_bad(cases, draw)
    return strat()


def _kw_bad(fn, **bad: st.SearchStrategy):
    """``extra_bad``: the valid call with one keyword replaced by a bad value."""
    def make(cases, draw):
        good = fn(cases, draw)
        key = draw(st.sampled_from(sorted(bad)))
        value = draw(bad[key])
        return Call(good.args, {**good.kwargs, key: value}, REFUSE, f"{key}={value!r}")
    return make


def _simple(fn, **bad):
    return _table_fn(fn, extra_bad=_kw_bad(fn, **bad) if bad else None)


level_bad = st.sampled_from(BAD_LEVELS)
thr_bad = st.sampled_from(BAD_NUMBERS)


def _sm(cases, draw):
    return call(cases, by=["phase", ("sex", "phase")], metrics=["sensitivity", "auc", "f1"],
                cluster=draw(st.sampled_from(["auto", None])))


def _sweep(cases, draw):
    return call(cases, [1.0, 4.0, 6.5], cluster=draw(st.sampled_from(["auto", None])))


def _sweep_bad(cases, draw):
    kind = draw(st.sampled_from(["nan", "empty", "chosen", "level"]))
    if kind == "nan":
        t = draw(st.lists(st.sampled_from([1.0, 4.0, *BAD_NUMBERS]), min_size=1, max_size=4))
        if all(np.isfinite(t)):
            t.append(math.nan)
        return call(cases, t, expect=REFUSE, why=f"thresholds {t}")
    if kind == "empty":
        return call(cases, [], expect=REFUSE, why="no thresholds")
    if kind == "chosen":
        return call(cases, [1.0, 4.0], chosen=draw(thr_bad), expect=REFUSE, why="chosen")
    return call(cases, [1.0], conf_level=draw(level_bad), expect=REFUSE, why="level")


def _boot(cases, draw):
    return call(cases, by=["phase"], n_boot=draw(st.integers(1, 6)), seed=1)


def _fit(cases, draw):
    method = draw(st.sampled_from(["fixed", "glmm", "gee"]))
    return call(cases, "detected ~ sex", method=method, model="m0",
                group="site" if method != "fixed" else None)


def _blocks(cases, draw):
    one = cases[cases["model"] == "m0"]
    return call(one, "detected ~ phase + sex", {"protocol": ["phase"]}, method="fixed",
                group=None)


def _complete(cases, draw):
    return call(cases, "detected ~ sex", method="fixed", group=None, model="m0")


def _naive(cases, draw):
    return call(cases, ["phase"], label_error(), seed=1, n_imputations=4)


def _precision(cases, draw):
    return call(cases, by=["phase"], methods=["wilson"])


def _describe(cases, draw):
    return call(cases.drop_duplicates("case_id"), by="site")


def _bins(cases, draw):
    return call(cases, {"age": {"name": "age_band", "breaks": [0, 40, 70, math.inf]}})


def _bins_bad(cases, draw):
    br = [0, draw(st.sampled_from([math.nan, 40.0])), 130]
    if not np.isnan(br[1]):
        br[1] = math.nan
    return call(cases, {"age": {"name": "age_band", "breaks": br}}, expect=REFUSE,
                why="NaN break")


def _scan(cases, draw):
    return call(cases.drop(columns=["pred", "threshold", "threshold_source"]),
                threshold=draw(st.sampled_from([2, 4.5, {"m0": 3, "m1": 5}])))


def _scan_bad(cases, draw):
    bad = draw(thr_bad)
    t = draw(st.sampled_from([bad, {m: bad for m in cases["model"].unique()}]))
    return call(cases, threshold=t, expect=REFUSE, why=f"threshold {t!r}")


def _pooled(cases, draw):
    return call(cases, "phase", cluster=None)


def _meta(cases, draw):
    return call(cases, estimand=draw(st.sampled_from(["sensitivity", "specificity", "ppv"])),
                by=draw(st.sampled_from([None, "phase", ["phase", ("sex", "phase")]])),
                cluster=draw(st.sampled_from(["auto", None])))


@st.composite
def _counts_call(draw):
    """Two arrays of counts ``(x, n)`` with x <= n, possibly with one defect: a bad
    count, shapes that do not broadcast, x above n; and what the call must give."""
    k = draw(st.integers(0, 5))
    n = np.array(draw(st.lists(st.integers(0, 30), min_size=k, max_size=k)), float)
    x = np.floor(n * draw(st.floats(0, 1)))
    values = {"x": x, "n": n}
    defect = draw(st.sampled_from(["none", "none", "count", "shape", "order"]))
    if defect == "count" and k:
        i = draw(st.integers(0, k - 1))
        which = draw(st.sampled_from(["x", "n"]))
        values[which] = values[which].copy()
        values[which][i] = draw(st.sampled_from(BAD_COUNTS))
    elif defect == "shape":   # lengths that do not broadcast (k and k + 2, never 1)
        values["n"] = np.r_[values["n"], 3.0, 4.0]
        if k == 1:
            values["x"] = np.r_[values["x"], 0.0]
    elif defect == "order" and k and n.max() > 0:
        i = int(np.argmax(n))
        values["x"] = values["x"].copy()
        values["x"][i] = n[i] + 1
    else:
        defect = "none"
    expect = REFUSE if defect != "none" else (EMPTY if k == 0 else RESULT)
    return values["x"], values["n"], expect, defect


@st.composite
def s_proportion_ci(draw):
    x, n, expect, why = draw(_counts_call())
    level = 0.95
    if expect != REFUSE and draw(st.booleans()):
        level, expect, why = draw(level_bad), REFUSE, "conf_level"
    return Call((x, n), {"method": draw(st.sampled_from(["wilson", "clopper-pearson",
                                                         "jeffreys"])),
                         "conf_level": level}, expect, why)


@st.composite
def s_newcombe(draw):
    x1, n1, expect, why = draw(_counts_call())
    if draw(st.booleans()):   # paired: (a, b, c, d) from the same draws
        abcd = (x1, n1, np.zeros(np.shape(n1)), x1) if why != "shape" else (x1, n1, x1, x1)
        if why == "order":    # a > n is fine paired: no order between a, b, c, d
            expect, why = (EMPTY if np.size(n1) == 0 else RESULT), "none"
        return Call((None, None, None, None), {"paired_counts": abcd}, expect, why)
    return Call((x1, n1, np.minimum(x1, 2.0), np.maximum(n1, 2.0)), {}, expect, why)


@st.composite
def s_mcnemar(draw):
    b, c, expect, why = draw(_counts_call())
    if why == "order":
        expect, why = (EMPTY if np.size(c) == 0 else RESULT), "none"   # b > c is fine
    return Call((b, c), {}, expect, why)


@st.composite
def s_labels_scores(draw, *, n_scores: int = 1):
    label, prob = draw(scored())
    scores = [prob] + [np.roll(prob, 1) for _ in range(n_scores - 1)]
    kw: dict = {}
    what = draw(st.sampled_from(["valid", "arrays", "level", "cluster"]))
    if what == "valid":
        if draw(st.booleans()):
            kw["cluster"] = [f"p{i // 2}" for i in range(len(label))]
        return Call((label, *scores), kw)
    if what == "arrays":
        lab, p, kind = arrays_with_defect(label, prob, draw)
        if kind == "nan_prob":
            return Call((lab, *[np.r_[s[:-1], np.nan] for s in scores]), kw, REFUSE, kind)
        if kind in ("empty",):
            return Call((lab, *[p for _ in scores]), kw, REFUSE, kind)
        return Call((lab, p, *scores[1:]), kw, REFUSE, kind)
    if what == "level":
        return Call((label, *scores), {**kw, "conf_level": draw(level_bad)}, REFUSE, "level")
    return Call((label, *scores), {**kw, "cluster": ["p"] * (len(label) + 1)}, REFUSE,
                "cluster length")


@st.composite
def s_calibration(draw, *, n_bins: bool = True, level: bool = False, boot: bool = False,
                  cluster: bool = False):
    label, prob = draw(scored())
    kw: dict = {}
    if boot:
        kw.update(n_boot=draw(st.integers(2, 8)), seed=1)
    bad = {}
    if n_bins:
        bad["n_bins"] = whole_bad(1)
    if level:
        bad["conf_level"] = level_bad
    if boot:
        bad["n_boot"] = whole_bad(2)
    what = draw(st.sampled_from(["valid", "arrays"] + (["keyword"] if bad else [])))
    if what == "valid":
        if n_bins:
            kw["n_bins"] = draw(st.integers(1, 12))
        if cluster and draw(st.booleans()):
            kw["cluster"] = [f"p{i // 2}" for i in range(len(label))]
        return Call((label, prob), kw)
    if what == "arrays":
        lab, p, kind = arrays_with_defect(label, prob, draw)
        return Call((lab, p), kw, REFUSE, kind)
    key = draw(st.sampled_from(sorted(bad)))
    return Call((label, prob), {**kw, key: draw(bad[key])}, REFUSE, key)


@st.composite
def s_temperature(draw):
    label, prob = draw(scored())
    what = draw(st.sampled_from(["valid", "arrays"]))
    if what == "valid":
        return Call((prob, label), {"kind": draw(st.sampled_from(["auto", "probs"]))})
    lab, p, kind = arrays_with_defect(label, prob, draw)
    return Call((p, lab), {}, REFUSE, kind)


@st.composite
def s_runs_fn(draw, *, ref: bool, bad: dict, good: dict):
    what = draw(st.sampled_from(["valid", "empty", "keyword"] if bad else ["valid", "empty"]))
    args = (runs(), reference()) if ref else (runs(),)
    if what == "valid":
        return Call(args, {k: draw(v) for k, v in good.items()})
    if what == "empty":
        return Call((runs().iloc[:0], *args[1:]), {k: draw(v) for k, v in good.items()},
                    REFUSE, "no runs")
    key = draw(st.sampled_from(sorted(bad)))
    kw = {k: draw(v) for k, v in good.items()}
    return Call(args, {**kw, key: draw(bad[key])}, REFUSE, key)


@st.composite
def s_rank_agreement(draw):
    n = draw(st.integers(1, 6))
    idx = [f"e{i}" for i in range(n)]
    a = pd.Series(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)), index=idx)
    b = pd.Series(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)), index=idx)
    what = draw(st.sampled_from(["valid", "empty", "k", "nan", "index"]))
    if what == "valid":
        return Call((a, b), {"k": draw(st.integers(1, 4))})
    if what == "empty":
        return Call((a.iloc[:0], b.iloc[:0]), {}, REFUSE, "empty")
    if what == "k":
        return Call((a, b), {"k": draw(whole_bad(1))}, REFUSE, "k")
    if what == "nan":
        return Call((a, b.where(b.index != idx[0])), {}, REFUSE, "NaN score")
    return Call((a, b.rename(index={idx[0]: "other"})), {}, REFUSE, "index")


@st.composite
def s_evidence_fn(draw, *, kw_bad: dict):
    ev = draw(evidence())
    what = draw(st.sampled_from(["valid", "empty", "columns", "not_frame", "keyword"]))
    if what == "valid":
        return Call((ev,), {})
    if what == "empty":
        return Call((ev.iloc[:0],), {}, EMPTY, "empty evidence")
    if what == "columns":
        return Call((ev.drop(columns=["extractor"]),), {}, REFUSE, "columns")
    if what == "not_frame":
        return Call((ev.to_dict("list"),), {}, REFUSE, "not a frame")
    key = draw(st.sampled_from(sorted(kw_bad)))
    return Call((ev,), {key: draw(kw_bad[key])}, REFUSE, key)


@st.composite
def s_seed(draw):
    seed = draw(st.sampled_from([None, 0, 7, 2 ** 40, -1, 1.5, math.nan, True, "1"]))
    ok = seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0)
    return Call((seed,), {}, RESULT if ok else REFUSE, repr(seed))


@st.composite
def s_read_cases(draw):
    cases = draw(cohorts())
    raw = cases[["case_id", "model", "label", "score", "site"]]
    what = draw(st.sampled_from(["valid", "empty", "columns", "nan_score"]))
    if what == "valid":
        return Call((raw,), {})
    if what == "empty":
        return Call((raw.iloc[:0],), {}, REFUSE, "empty")
    if what == "columns":
        return Call((raw.drop(columns=["score"]),), {}, REFUSE, "columns")
    return Call((raw.assign(score=np.nan),), {}, REFUSE, "NaN score")


@st.composite
def s_read_runs(draw):
    what = draw(st.sampled_from(["valid", "empty", "columns"]))
    raw = runs()
    if what == "valid":
        return Call((raw,), {})
    if what == "empty":
        return Call((raw.iloc[:0],), {}, REFUSE, "empty")
    return Call((raw.drop(columns=["auroc"]),), {}, REFUSE, "columns")


@st.composite
def s_read_probe(draw):
    n = draw(st.integers(1, 6))
    df = pd.DataFrame({"encoder": "e", "dataset": "d", "label_fraction": 1.0,
                       "condition": "clean", "severity": 0, "seed": 0,
                       "case_id": [f"c{i}" for i in range(n)], "label": [i % 2 for i in range(n)],
                       "prob": draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))})
    what = draw(st.sampled_from(["valid", "empty", "nan"]))
    if what == "valid":
        return Call((df,), {})
    if what == "empty":
        return Call((df.iloc[:0],), {}, REFUSE, "empty")
    return Call((df.assign(prob=np.nan),), {}, REFUSE, "NaN prob")


@st.composite
def s_formula(draw):
    text = draw(st.sampled_from(["detected ~ phase + sex", "~ phase", "", "detected ~",
                                 "y ~ np.log(age) + C(phase, Treatment('venous'))", "a ~ b ~ c"]))
    ok = text in ("detected ~ phase + sex", "~ phase",
                  "y ~ np.log(age) + C(phase, Treatment('venous'))")
    return Call((text,), {}, RESULT if ok else REFUSE, repr(text))


@st.composite
def s_reference(draw):
    what = draw(st.sampled_from(["valid", "empty", "weights", "anchor"]))
    ref = dict(reference())
    if what == "valid":
        return Call((ref,), {})
    if what == "empty":
        return Call(({},), {}, REFUSE, "no panel")
    if what == "weights":
        return Call(({**ref, "weights": {"dominance": math.nan, "similarity": 0.5,
                                         "worst_axis": 0.5}},), {}, REFUSE, "NaN weight")
    return Call(({**ref, "anchors": {"discrimination": [math.nan, 1.0]}},), {}, REFUSE,
                "NaN anchor")


@st.composite
def s_lrt(draw):
    what = draw(st.sampled_from(["valid", "junk"]))
    full, reduced = fits()
    if what == "valid":
        return Call((full, reduced), {})
    return Call((draw(st.sampled_from([None, 1, "fit", pd.DataFrame()])), reduced), {},
                REFUSE, "not a Fit")


@st.composite
def s_precision_subgroups(draw):
    """precision_table in planning mode (no cases), with a bad setting or not."""
    sg = pd.DataFrame({"group_var": ["phase"], "group_level": ["arterial"], "share": [0.3]})
    what = draw(st.sampled_from(["valid", "level", "threshold"]))
    kw = dict(subgroups=sg, expected_sensitivity=0.8, expected_specificity=0.9,
              prevalence=0.3, methods=["wilson"])
    if what == "valid":
        return Call((), kw)
    if what == "level":
        return Call((), {**kw, "conf_level": draw(level_bad)}, REFUSE, "level")
    return Call((), {**kw, "threshold": draw(thr_bad)}, REFUSE, "threshold")


CALLS: dict[str, st.SearchStrategy] = {
    # contracts
    "as_generator": s_seed(),
    "read_cases": s_read_cases(),
    "read_runs": s_read_runs(),
    "read_probe_predictions": s_read_probe(),
    "parse_formula": s_formula(),
    # intervals and tests
    "proportion_ci": s_proportion_ci(),
    "newcombe_diff_ci": s_newcombe(),
    "mcnemar_exact": s_mcnemar(),
    "auc_ci": s_labels_scores(),
    "delong_test": s_labels_scores(n_scores=2),
    # detection
    "scan_level": _table_fn(_scan, extra_bad=_scan_bad, empty=EMPTY),
    "add_bins": _table_fn(_bins, extra_bad=_bins_bad, empty=EMPTY),
    "confusion_counts": _simple(lambda c, d: call(c, ["phase"])),
    "subgroup_metrics": _simple(_sm, conf_level=level_bad, small_n=whole_bad(0),
                                n_boot=whole_bad(0)),
    "subgroup_vs_rest": _simple(lambda c, d: call(c, by=["phase"]), conf_level=level_bad,
                                alpha=st.sampled_from([0, 1, math.nan, -1, 2])),
    "failure_map": _simple(lambda c, d: call(c), conf_level=level_bad),
    "threshold_sweep": _table_fn(_sweep, extra_bad=_sweep_bad),
    "cluster_bootstrap": _simple(_boot, n_boot=whole_bad(1), conf_level=level_bad),
    "compare_models": _table_fn(lambda c, d: call(c, by=["phase"]), models=2,
                                extra_bad=_kw_bad(lambda c, d: call(c, by=["phase"]),
                                                  conf_level=level_bad, small_n=whole_bad(0))),
    "describe": _simple(_describe, max_levels=whole_bad(1)),
    "heterogeneity_test": _simple(lambda c, d: call(c, ["phase"], cluster=None)),
    "pooled_subgroup_metrics": _simple(_pooled, conf_level=level_bad, threshold=thr_bad),
    "site_meta_analysis": _simple(_meta, conf_level=level_bad, threshold=thr_bad,
                                  estimand=st.sampled_from(["auc", "f1", 3, None])),
    "precision_table": st.one_of(_simple(_precision, conf_level=level_bad, threshold=thr_bad),
                               s_precision_subgroups()),
    "extractor_agreement": s_evidence_fn(kw_bad={"conf_level": level_bad}),
    "misclassification_from_review": s_evidence_fn(kw_bad={
        "prior": st.sampled_from([-1, math.nan, math.inf]),
        "tol": st.sampled_from([0, -1, math.nan]), "max_iter": whole_bad(1)}),
    "compare_naive": _simple(_naive),
    # adjusted models
    "fit_adjusted": _simple(_fit, conf_level=level_bad, threshold=thr_bad, nagq=whole_bad(1)),
    "fit_complete_case": _simple(_complete),
    "block_tests": _simple(_blocks),
    "likelihood_ratio_test": s_lrt(),
    # calibration
    "ece": s_calibration(), "mce": s_calibration(),
    "brier": s_calibration(n_bins=False), "nll": s_calibration(n_bins=False),
    "reliability_table": s_calibration(level=True, cluster=True),
    "ece_ci": s_calibration(level=True, boot=True, cluster=True),
    "temperature_scale": s_temperature(),
    # CRS and ranking
    "calibration_repair": s_runs_fn(ref=False, bad={}, good={}),
    "crs_axes": s_runs_fn(ref=False, bad={}, good={}),
    "crs_scores": s_runs_fn(ref=True, bad={}, good={}),
    "crs_bootstrap": s_runs_fn(ref=True, bad={"n_boot": whole_bad(2), "conf_level": level_bad},
                               good={"n_boot": st.integers(2, 6), "seed": st.just(1)}),
    "ranking_stability": s_runs_fn(ref=True, bad={"n_weights": whole_bad(1), "k": whole_bad(1),
                                                  "conf_level": level_bad},
                                   good={"n_weights": st.integers(1, 8), "seed": st.just(1)}),
    "rank_agreement": s_rank_agreement(),
    "read_reference": s_reference(),
}


# --------------------------------------------------------------------------- results


def _tidy(result) -> None:
    check_tidy(result)


def _frame(result) -> None:
    assert isinstance(result, pd.DataFrame), type(result)


def _arrays(k: int):
    def check(result):
        assert isinstance(result, tuple) and len(result) == k, type(result)
        shapes = {np.shape(a) for a in result}
        assert len(shapes) == 1, shapes
        assert all(np.asarray(a).dtype == np.float64 for a in result)
    return check


def _array(result) -> None:
    assert isinstance(result, np.ndarray) and result.dtype == np.float64, type(result)


def _float(result) -> None:
    assert isinstance(result, float) and math.isfinite(result), result


def _fit_result(result) -> None:
    from stats.models.fit import Fit

    assert isinstance(result, Fit), type(result)
    check_tidy(result.tidy())


def _method(name: str):
    def check(result):
        check_tidy(getattr(result, name)())
    return check


def _type(kind):
    def check(result):
        assert isinstance(result, kind), type(result)
    return check


#: what each function returns (its documented type); a tidy table by default
RETURNS: dict[str, Callable] = {
    "as_generator": _type(np.random.Generator), "read_cases": _frame, "read_runs": _frame,
    "read_probe_predictions": _frame, "parse_formula": _type(stats.ParsedFormula),
    "proportion_ci": _arrays(2), "newcombe_diff_ci": _arrays(3), "mcnemar_exact": _array,
    "scan_level": _frame, "add_bins": _frame, "confusion_counts": _frame,
    "extractor_agreement": _frame, "misclassification_from_review": _frame,
    "fit_adjusted": _fit_result, "fit_complete_case": _fit_result,
    "ece": _float, "mce": _float, "brier": _float, "nll": _float,
    "temperature_scale": _method("tidy"), "crs_bootstrap": _method("scores"),
    "read_reference": _type(stats.crs.Reference),
}


def _is_empty(result) -> bool:
    if isinstance(result, pd.DataFrame):
        return len(result) == 0
    parts = result if isinstance(result, tuple) else (result,)
    return all(np.size(a) == 0 for a in parts)


PUBLIC = [n for n in stats.__all__ if n not in NOT_FUNCTIONS]


def test_every_public_function_has_a_strategy():
    """A public name is a function with a strategy here, or a class / constant listed in
    NOT_FUNCTIONS; a new public function without a strategy fails."""
    for name in stats.__all__:
        obj = getattr(stats, name)
        if name in NOT_FUNCTIONS:
            assert not inspect.isfunction(obj), f"{name} is a function: give it a strategy"
        else:
            assert inspect.isfunction(obj), f"{name} is not a function: list it in NOT_FUNCTIONS"
    missing = [n for n in PUBLIC if n not in CALLS]
    assert not missing, f"public functions without a strategy: {missing}"
    assert not set(CALLS) - set(stats.__all__), "strategies for names that are not public"


@pytest.mark.parametrize("name", PUBLIC)
@PROFILE
@given(data=st.data())
def test_public_function_validates_its_arguments(name, data):
    """A defect raises ContractError, an empty input with a meaningful empty result gives
    it, a valid input its documented type (or ContractError); never another exception."""
    assert name in CALLS, f"{name}: no strategy registered in CALLS"
    c = data.draw(CALLS[name], label="call")
    fn = getattr(stats, name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = fn(*c.args, **c.kwargs)
            RETURNS.get(name, _tidy)(result)
    except ContractError:
        assert c.expect in (REFUSE, RESULT), f"{name} ({c.why}): refused an empty input " \
                                            f"whose empty result is meaningful"
        return
    assert c.expect != REFUSE, f"{name} ({c.why}): accepted a defect and returned a result"
    if c.expect == EMPTY:
        assert _is_empty(result), f"{name} ({c.why}): an empty input gave rows"


def test_old_keyword_names_warn_and_still_work():
    """One name per concept (issue 29): auc_ci(scale=) -> auc_scale=, cluster_bootstrap
    (ci_method=) -> boot_ci=, ece_ci(interval=) -> boot_ci=; the old keyword works for one
    release with a DeprecationWarning naming the new one, and two that disagree are refused."""
    import warnings

    import numpy as np
    import pytest

    import stats
    from stats.calibration import ece_ci

    y, s = [1, 1, 0, 0, 1, 0], [0.9, 0.4, 0.2, 0.3, 0.8, 0.6]
    with pytest.warns(DeprecationWarning, match="auc_scale="):
        old = stats.auc_ci(y, s, scale="logit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = stats.auc_ci(y, s, auc_scale="logit")
    assert old.equals(new)
    with pytest.raises(stats.ContractError, match="disagree"), pytest.warns(DeprecationWarning):
        stats.auc_ci(y, s, scale="logit", auc_scale="auc")
    p = np.linspace(0.05, 0.95, 40)
    lab = (np.arange(40) % 2).astype(int)
    with pytest.warns(DeprecationWarning, match="boot_ci="):
        a = ece_ci(lab, p, n_boot=50, seed=1, interval="percentile")
    assert a.equals(ece_ci(lab, p, n_boot=50, seed=1, boot_ci="percentile"))
