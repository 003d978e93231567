"""stats.describe (Table 1) against a plain pandas recomputation, group by group."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import stats
from stats.schema import ContractError, check_tidy
from stats.simulate import benchx_cohort


@pytest.fixture(scope="module")
def cases() -> pd.DataFrame:
    d = benchx_cohort(700, n_models=1, n_sites=5, seed=11).data.reset_index(drop=True)
    rng = np.random.default_rng(0)
    d.loc[rng.choice(len(d), 25, replace=False), "sex"] = None  # missing becomes a level
    d.loc[rng.choice(len(d), 9, replace=False), "age"] = np.nan
    d["phase"] = pd.Categorical(d["phase"], categories=["venous", "arterial", "delayed",
                                                        "non_contrast", "never_seen"])
    d.loc[rng.choice(len(d), 4, replace=False), "site"] = None  # counted in overall only
    return d


def _get(out, estimand, group, variable, level=""):
    gv = "overall" if group == "overall" else "site"
    row = out[(out.estimand == estimand) & (out.group_var == gv) & (out.group_level == group)
              & (out.variable == variable) & (out.level == level)]
    assert len(row) == 1, (estimand, group, variable, level)
    return row.iloc[0]


def test_describe_matches_pandas_per_group(cases):
    out = stats.describe(cases, by="site", categorical=("sex", "phase", "split"))
    check_tidy(out)
    sites = sorted(cases.site.dropna().unique())
    assert list(out[(out.variable == "cases")].group_level) == ["overall", *sites]
    checked = 0
    for g in ["overall", *sites]:
        sub = cases if g == "overall" else cases[cases.site == g]
        assert _get(out, "count", g, "cases").estimate == len(sub)
        pos = _get(out, "count", g, "label", "1")
        assert pos.estimate == (sub.label == 1).sum() and pos.n == len(sub)
        assert _get(out, "percent", g, "label", "1").estimate == pytest.approx(
            100 * (sub.label == 1).mean(), abs=1e-12)
        for col in ("sex", "phase", "split"):
            vc = sub[col].astype(object).fillna("Missing").astype(str).value_counts()
            for level, k in vc.items():
                assert _get(out, "count", g, col, level).estimate == k
                assert _get(out, "percent", g, col, level).estimate == pytest.approx(
                    100 * k / len(sub), abs=1e-12)
                checked += 1
        never = _get(out, "count", g, "phase", "never_seen")  # empty category kept, as 0
        assert never.estimate == 0
        age = sub.age.dropna().to_numpy()
        for est, q in (("median", 0.5), ("q1", 0.25), ("q3", 0.75)):
            assert _get(out, est, g, "age").estimate == pytest.approx(np.quantile(age, q), abs=1e-12)
        assert _get(out, "missing", g, "age").estimate == sub.age.isna().sum()
        size = sub.loc[sub.label == 1, "tumor_size_mm"]
        assert _get(out, "median", g, "tumor_size_mm").estimate == pytest.approx(size.median(), abs=1e-12)
        assert _get(out, "median", g, "tumor_size_mm").n == len(size)
    assert checked > 40
    # the categorical order is kept, Missing last
    assert list(out[(out.variable == "sex") & (out.group_var == "overall") & (out.estimand == "count")].level)[-1] == "Missing"
    assert list(out[(out.variable == "phase") & (out.group_var == "overall")
                    & (out.estimand == "count")].level) == list(cases.phase.cat.categories)


def test_describe_skips_and_errors(cases):
    out = stats.describe(cases, by=None, categorical=("case_id", "sex"))
    assert set(out.group_var) == {"overall"}
    assert "case_id" not in set(out.variable)  # 700 levels > max_levels: never tabulated
    assert "sex" in set(out.variable)
    one = stats.describe(cases.assign(const="a"), by="site", categorical=("const", "sex"))
    assert "const" not in set(out.variable) and "const" not in set(one.variable)
    with pytest.raises(ContractError, match="no column 'hospital'"):
        stats.describe(cases, by="hospital")
    with pytest.raises(ContractError, match="'label'"):
        stats.describe(cases.drop(columns="label"))
    long = pd.concat([cases, cases.iloc[[3]]], ignore_index=True)
    with pytest.raises(ContractError, match=r"case_id repeats \(rows 4, 701\).*drop_duplicates"):
        stats.describe(long)
