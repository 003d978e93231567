"""The demo report's metadata section (issue 36, done-when): race agreement by site, with
the site that records no race (site_07) absent, its test across sites, and race
label-error intervals beside the other fields'."""
from __future__ import annotations

import warnings

import pytest

pytest.importorskip("medspacy")  # the demo's evidence is the runner's extraction


def test_demo_metadata_section_shows_race_by_site_and_its_label_error_intervals(demo_study):
    from reports.sections import provenance

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sec = provenance.build(demo_study)
    blocks = {getattr(b, "name", None): b for b in sec.blocks}
    by_site = blocks["metadata_agreement_by_site"].data
    race = by_site[by_site["field"].astype(str) == "race"]
    assert len(race) and "site_07" not in set(race["site"].astype(str))
    assert {"site_01", "site_02"} <= set(race["site"].astype(str))
    assert "race" in set(blocks["metadata_site_test"].data["field"].astype(str))
    le = blocks["label_error_sensitivity"].data
    assert {"race", "phase", "sex", "age_group"} <= set(le["group_var"].astype(str))
