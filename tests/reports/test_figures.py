"""Figures without the defects a reviewer sees.

Every figure of the demo study is drawn at its print size and checked as drawn: no text
leaves the figure, no label drawn in a panel is cut by the panel, no two tick labels
overlap. Then each defect of the issue against the plotnine object or the figure's data:
failure-map outlines around the flagged cells only, a colour-blind-safe scale whose zero
is visible, a vector colour bar; reliability panels share their scales; the
ranking-stability curve only from three models; threshold 0 drawn at 0; forest plots with
their text columns, a labelled overall line and the tables' row order.
"""
from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from reports import text

DEMO = Path(__file__).resolve().parents[2] / "clinrel" / "demo_data"
SECTIONS = ("forest", "failure_map", "threshold", "crs", "calibration")


def _study(plan: Path):
    from reports.study import load_study
    from analysis import load_plan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_study(load_plan(plan))


@pytest.fixture(scope="module")
def demo(demo_study):
    from reports.sections import module

    study = demo_study
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sections = {k: module(k).build(study) for k in SECTIONS}
    return study, sections


def _draw(fig):
    """The matplotlib figure of a ReportFigure, drawn at its size, and its renderer."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    with matplotlib.rc_context({"text.parse_math": False}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mfig = fig.plot.draw()
        mfig.set_size_inches(fig.width, fig.height)
        canvas = FigureCanvasAgg(mfig)
        canvas.draw()
    return mfig, canvas.get_renderer()


def _texts(artist):
    from matplotlib.text import Text

    return [t for t in artist.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _inside(inner, outer, tol=1.5) -> bool:
    return (inner.x0 >= outer.x0 - tol and inner.x1 <= outer.x1 + tol
            and inner.y0 >= outer.y0 - tol and inner.y1 <= outer.y1 + tol)


def _figures(demo):
    return [f for s in demo[1].values() for f in s.figures]


def test_no_text_is_clipped_or_overlapping(demo):
    checked = 0
    for f in _figures(demo):
        mfig, r = _draw(f)
        fig_box = mfig.bbox
        for t in _texts(mfig):
            assert _inside(t.get_window_extent(r), fig_box), (f.name, t.get_text())
        for ax in mfig.axes:
            box = ax.get_window_extent(r)
            for t in ax.texts:  # labels drawn in the panel (geom_text)
                if t.get_visible() and t.get_text().strip():
                    assert _inside(t.get_window_extent(r), box), (f.name, t.get_text())
                    checked += 1
        for which in ("x", "y"):
            boxes = [(t.get_text(), t.get_window_extent(r)) for ax in mfig.axes
                     for t in getattr(ax, f"get_{which}ticklabels")()
                     if t.get_visible() and t.get_text().strip()]
            for (a, ba), (b, bb) in itertools.combinations(boxes, 2):
                assert not ba.overlaps(bb) or ba == bb, (f.name, which, a, b)
        import matplotlib.pyplot as plt

        plt.close(mfig)
    assert checked > 100


# --------------------------------------------------------------------------- failure map

def _built_layers(fig):
    _draw(fig)
    return fig.plot.layers


def test_failure_map_outlines_only_the_flagged_cells(demo):
    (fig,) = demo[1]["failure_map"].figures
    layers = _built_layers(fig)
    tiles, outline = layers[0].data, layers[1].data
    small = fig.data[fig.data["small"].astype(bool)]
    assert 0 < len(outline) == len(small) < len(tiles)
    for d, most in ((tiles, 1.0), (outline, 0.9)):  # one cell wide and high, no more
        assert ((d["xmax"] - d["xmin"]) <= most + 1e-9).all()
        assert ((d["ymax"] - d["ymin"]) <= most + 1e-9).all()
    # the outlines sit on the flagged cells' tiles
    key = ["PANEL", "x", "y"]
    hits = outline[key].merge(tiles[key], on=key, how="left", indicator=True)
    assert (hits["_merge"] == "both").all()


def _luminance(rgb) -> float:
    return sum(w * (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
               for w, c in zip((0.2126, 0.7152, 0.0722), rgb[:3]))


def test_failure_map_scale_is_colour_blind_safe_with_a_visible_zero(demo):
    import matplotlib
    from matplotlib.colors import to_rgb

    from reports.figures import SEQUENTIAL

    (fig,) = demo[1]["failure_map"].figures
    cmap = matplotlib.colormaps[SEQUENTIAL]
    lum = [_luminance(cmap(v)) for v in np.linspace(0, 1, 21)]
    assert all(b > a for a, b in zip(lum, lum[1:]))  # monotone lightness: reads in grey too
    white = _luminance(to_rgb("white"))
    assert (white + 0.05) / (lum[0] + 0.05) > 4.5  # 0.00 is not the background's colour
    scale = fig.plot.scales.get_scales("fill")
    assert scale.limits == (0, 1)
    assert scale.guide.display == "rectangles"  # vector rectangles in the SVG (PDF)
    # the text on each tile reads: contrast >= 4.5 between its ink and the tile
    layers = _built_layers(fig)
    key = ["PANEL", "x", "y"]
    both = layers[0].data[key + ["fill"]].merge(layers[2].data[key + ["color"]], on=key)
    assert len(both) == len(fig.data)
    for fill, color in zip(both["fill"], both["color"]):
        lo, hi = sorted((_luminance(to_rgb(fill)), _luminance(to_rgb(color))))
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, (fill, color)


def test_failure_map_svg_colour_bar_is_vector(demo, tmp_path):
    (fig,) = demo[1]["failure_map"].figures
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig.save(tmp_path)
    svg = (tmp_path / "failure_map.svg").read_text(encoding="utf-8")
    assert "<image" not in svg  # a raster gradient is what typst drew as a hatched bar


# --------------------------------------------------------------------------- reliability

def test_reliability_panels_share_scales(demo):
    figs = [f for f in demo[1]["calibration"].figures if f.name == "reliability"]
    (fig,) = figs
    mfig, _ = _draw(fig)
    panels = mfig.axes
    xl = {tuple(np.round(ax.get_xlim(), 6)) for ax in panels}
    yl = {tuple(np.round(ax.get_ylim(), 6)) for ax in panels}
    assert len(panels) > 2 and len(xl) == 1 and len(yl) == 1
    assert fig.plot.facet.free == {"x": False, "y": False}


# --------------------------------------------------------------------------- threshold

def _cases_with_models(folder: Path, n_models: int) -> Path:
    from stats import simulate

    simulate.benchx_cohort(400, n_models=n_models, n_sites=3, seed=4).data.to_parquet(
        folder / "cases.parquet")
    raw = {"version": 1, "title": "t", "inputs": {"cases": "cases.parquet"},
           "detection": {"threshold": {"value": 50}, "subgroups": ["phase"]}}
    (folder / "plan.yaml").write_text(yaml.safe_dump(raw))
    return folder / "plan.yaml"


@pytest.mark.parametrize("n_models", [2, 3])
def test_ranking_stability_drawn_only_from_three_models(tmp_path, n_models):
    from reports.sections import threshold

    sec = threshold.build(_study(_cases_with_models(tmp_path, n_models)))
    names = [f.name for f in sec.figures]
    md = " ".join(b for b in sec.blocks if isinstance(b, str))
    if n_models < threshold.MIN_MODELS_RANKING:
        assert names == ["threshold_sweep"]
        assert "not drawn" in md and "@fig-ranking-stability-threshold" not in md
    else:
        assert names == ["threshold_sweep", "ranking_stability_threshold"]
        assert "@fig-ranking-stability-threshold" in md
        tau = sec.figures[1].data["estimate"]
        assert tau.min() < 1  # with three models the ranking can change: a real curve


@pytest.mark.parametrize("n_models", [3])
def test_ranking_stability_lines_that_coincide_stay_told_apart(tmp_path, n_models):
    """Sensitivity and specificity rankings often agree: their tau lines then lie on each
    other, so each metric has its own line type and point shape as well as colour."""
    from reports.sections import threshold

    sec = threshold.build(_study(_cases_with_models(tmp_path, n_models)))
    fig = sec.figures[1]
    _draw(fig)
    line = next(lay for lay in _built_layers(fig) if type(lay.geom).__name__ == "geom_line")
    per = line.data.groupby("group")["linetype"].first()
    assert per.nunique() == fig.data["ranked_by"].nunique() >= 2
    point = next(lay for lay in _built_layers(fig) if type(lay.geom).__name__ == "geom_point")
    assert point.data.groupby("group")["shape"].first().nunique() == per.nunique()


def test_a_value_axis_with_negative_values_has_a_negative_tick():
    """Model differences from -0.03 to 0.21: the axis runs from break to break, so the
    negative side has its own tick (it had none: the first tick was 0)."""
    import pandas as pd

    from reports.figures import ReportFigure, points_ci

    d = pd.DataFrame({"model": ["A - B", "A - C"] * 2, "metric": ["Se"] * 2 + ["Sp"] * 2,
                      "estimate": [0.05, 0.10, 0.0, 0.02], "conf_low": [-0.03, 0.02, -0.01, 0.0],
                      "conf_high": [0.13, 0.21, 0.01, 0.05]})
    fig = ReportFigure(name="x", caption="x", alt="x", data=d, width=6, height=2,
                       plot=points_ci(d, x="model", y="estimate", facet="metric", hline=0.0))
    _draw(fig)
    scale = fig.plot.scales.get_scales("y")
    breaks = [b for b in scale.breaks if b is not None]
    lo, hi = scale.limits
    assert min(breaks) < 0 <= max(breaks) and lo <= min(breaks) and max(breaks) <= hi
    assert lo <= -0.03 and hi >= 0.21 and min(breaks) == lo and max(breaks) == hi


def test_threshold_zero_is_drawn_at_zero(demo):
    fig = next(f for f in demo[1]["threshold"].figures if f.name == "threshold_sweep")
    assert fig.data["threshold"].min() == 0
    layers = _built_layers(fig)
    line = next(lay for lay in layers if type(lay.geom).__name__ == "geom_line")
    scale = fig.plot.scales.get_scales("x")
    xs = scale.trans.inverse(line.data["x"].to_numpy())
    assert np.isclose(np.sort(xs)[0], 0)  # not moved to 1
    assert scale.trans.transform(np.array([0.0]))[0] < scale.trans.transform(np.array([1.0]))[0]
    assert 0 in list(scale.breaks)


# --------------------------------------------------------------------------- forest

def test_forest_rows_follow_the_tables_with_text_columns(demo):
    from reports.sections import _detection as D
    from reports.sections import module

    study, sections = demo
    figs = {f.name: f for f in sections["forest"].figures}
    sub = module("subgroups").build(study)
    for estimand in ("sensitivity", "specificity"):
        f = figs[f"forest_{estimand}"]
        d = f.data
        for model, g in d.groupby("model", sort=False):
            want = []  # the subgroup tables' rows, in their order
            for t, axis in zip(sub.tables, study.plan.detection.subgroups):
                if len(axis) != 1:
                    continue
                rows = t.display[t.display["model"] == str(model)]
                levels = [lv.removesuffix(" \u2020") for lv in rows["level"]]
                if "not applicable" in levels and estimand == "specificity":
                    continue   # an attribute of reference positives: no specificity rows
                want += [D.axis_label(axis) + ": " + lv for lv in levels
                         if lv != "not applicable"]   # a row that cannot exist
            assert list(g["label"]) == want, (estimand, model)
        assert list(d["ci_text"]) == text.ci_vec(d)
        assert list(d["count"].str.replace(" \u2020", "")) == [
            text.frac(k, n) for k, n in zip(*(study.results["subgroup_metrics"].set_index(
                ["estimand", "model", "group_var", "group_level"]).loc[
                    [(estimand, m, v, lv) for m, v, lv in zip(d["model"], d["group_var"],
                                                               d["group_level"])],
                    ["numerator", "denominator"]].to_numpy().T))]
        assert (d["count"].str.endswith("\u2020") == d["small"]).all()
        labels = [t.get_text() for t in _texts(_draw(f)[0])]
        assert "Overall" in labels   # the overall row is labelled
        assert "Estimate [95% CI]" in labels
        assert set(d["ci_text"]) <= set(labels) | {text.DASH}


@pytest.mark.parametrize("n_models, count", [(1, "5/9 \u2020"), (2, "8988/10432"),
                                             (2, "123456/1234567 \u2020")])
def test_forest_text_columns_never_collide(n_models, count):
    """Counts of any length (BenchX scale: 8988/10432) neither run into the CI column nor
    out of the panel."""
    from reports.figures import ReportFigure, forest_plot

    rows = [{"model": f"m{k}", "label": f"site: site_{i:02d}", "estimate": 0.5,
             "conf_low": 0.4, "conf_high": 0.6, "small": i == 0, "count": count,
             "ci_text": "0.50 [0.40, 0.60]"} for k in range(n_models) for i in range(12)]
    d = pd.DataFrame(rows)
    overall = pd.DataFrame({"model": [f"m{k}" for k in range(n_models)], "estimate": 0.5,
                            "conf_low": 0.45, "conf_high": 0.55, "count": count,
                            "ci_text": "0.50 [0.45, 0.55]"})
    fig = ReportFigure(name="f", caption="c", alt="a", data=d, width=7.5, height=3.5,
                       plot=forest_plot(d, overall=overall, xlab="Sensitivity",
                                        count_label="TP/P", width=7.5))
    mfig, r = _draw(fig)
    for ax in mfig.axes:
        box = ax.get_window_extent(r)
        found = {t.get_text(): [] for t in ax.texts}
        for t in ax.texts:
            found[t.get_text()].append(t.get_window_extent(r))
        for c_box, ci_box in zip(found[count], found["0.50 [0.40, 0.60]"]):
            assert c_box.x1 < ci_box.x0 and _inside(ci_box, box)
        (head_c,), (head_ci,) = found["TP/P"], found["Estimate [95% CI]"]
        assert head_c.x1 < head_ci.x0 and _inside(head_ci, box)
        # the estimate axis keeps more than a quarter of the panel even for 7-digit counts
        x0, x1 = (ax.transData.transform((v, 0))[0] for v in (0, 1))
        assert (x1 - x0) > box.width * (0.28 if len(count) > 12 else 0.4)
