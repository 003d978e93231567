"""stats.extractor_agreement: agreement and kappa between metadata extractors, recomputed by
hand (counts, Wilson interval from its formula, kappa from the 2x2 of observed/expected)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import stats


def _evidence():
    rows = []
    a = ["M", "F", "M", "M", "F", "F", "M"]
    b = ["M", "F", "F", "M", "F", "M", "M"]
    for i, (x, y) in enumerate(zip(a, b)):
        rows.append({"case_id": f"c{i}", "field": "sex", "value": x, "extractor": "rules"})
        rows.append({"case_id": f"c{i}", "field": "sex", "value": y, "extractor": "llm"})
    rows.append({"case_id": "c9", "field": "sex", "value": "M", "extractor": "rules"})  # one side
    rows.append({"case_id": "c2", "field": "sex", "value": "F", "extractor": "review"})
    return pd.DataFrame(rows), a, b


def test_agreement_counts_kappa_and_wilson_by_hand():
    ev, a, b = _evidence()
    out = stats.extractor_agreement(ev)
    assert len(out) == 1
    r = out.iloc[0]
    assert (r.extractor_a, r.extractor_b) == ("llm", "rules")  # sorted pair, review excluded
    n, k = 7, 5
    assert (r.n_both, r.n_agree, r.n_disagree, r.n_a, r.n_b) == (n, k, 2, 7, 8)
    po = k / n
    pa_m, pb_m = np.mean(np.array(b) == "M"), np.mean(np.array(a) == "M")
    pe = pa_m * pb_m + (1 - pa_m) * (1 - pb_m)
    assert r.kappa == pytest.approx((po - pe) / (1 - pe), abs=1e-12)
    z = 1.959963984540054
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    assert r.conf_low == pytest.approx(centre - half, abs=1e-12)
    assert r.conf_high == pytest.approx(centre + half, abs=1e-12)


def test_kappa_is_nan_with_one_category_and_runner_uses_stats():
    from inference_runner.metadata.compare import agreement

    ev = pd.DataFrame({"case_id": ["a", "a", "b", "b"], "field": "sex", "value": "M",
                       "extractor": ["x", "y", "x", "y"]})
    out = stats.extractor_agreement(ev)
    assert out.kappa.isna().all() and out.agreement.iloc[0] == 1.0
    pd.testing.assert_frame_equal(agreement(ev), out)
