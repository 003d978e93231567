"""Report figures (plotnine): one theme, each figure backed by a tidy table.

Each :class:`ReportFigure` is built and laid out once and saved twice:
``figures/<name>.png`` (150 dpi, for HTML and docx) and ``figures/<name>.svg`` (vector, for
the PDF; it keeps the PNG's layout). Its data frame is
written to ``tables/fig_<name>.csv``. Builders take tidy tables and return a ggplot;
they compute nothing beyond layout (ordering, labels).
"""
from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

FONT_SIZE = 9
#: characters XML 1.0 forbids; matplotlib copies label text into SVG comments verbatim,
#: and typst refuses an SVG holding one (a NUL in a bin label stopped the PDF)
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
PALETTE = ("#1b5e8a", "#d1495b", "#edae49", "#00798c", "#66a182", "#8d96a3", "#5e3c99",
           "#b35806", "#2e4057", "#e377c2")


@dataclass(frozen=True)
class ReportFigure:
    name: str
    caption: str
    alt: str
    plot: object  # plotnine.ggplot
    data: pd.DataFrame
    width: float = 7.0
    height: float = 4.0

    @property
    def id(self) -> str:
        return "fig-" + self.name.replace("_", "-")

    def save(self, folder: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        # user strings (model, site, level names) may hold "$": never parse them as math
        with matplotlib.rc_context({"text.parse_math": False, "svg.hashsalt": "clinrel"}):
            fig = self.plot.draw()
            fig.set_size_inches(self.width, self.height)
            fig.savefig(folder / f"{self.name}.png", dpi=150, metadata={"Software": None})
            # the PNG's save has laid the figure out (plotnine's layout engine, run before
            # each draw); the SVG keeps that layout: without the engine its save is one
            # draw, not a layout pass and a draw (a third of the figure's time)
            fig.set_layout_engine(None)
            svg = io.BytesIO()
            fig.savefig(svg, format="svg", metadata={"Date": None})
        clean = _XML_INVALID.sub("\ufffd", svg.getvalue().decode("utf-8"))
        (folder / f"{self.name}.svg").write_text(clean, encoding="utf-8")
        plt.close(fig)


def save_figures(figures, folder: Path, *, jobs: int = 1, advance=lambda n=1: None) -> None:
    """Draw and save every figure (:meth:`ReportFigure.save`) in up to ``jobs`` processes
    (``reports._fork``: the same files however many), the largest (by data rows) first."""
    from ._fork import run_tasks

    figures = list(figures)
    run_tasks([functools.partial(f.save, folder) for f in figures], jobs=jobs,
              order=sorted(range(len(figures)), key=lambda i: -len(figures[i].data)),
              done=advance)


@functools.cache
def _per_panel(geom):
    """``geom`` (a plotnine error-bar or segment geom) drawn once per panel and line type.

    plotnine draws these geoms one group at a time (every error bar of a discrete axis is a
    group): a pandas frame, a coordinate transform and a matplotlib collection per bar,
    about 18 ms each, so a 300-bar figure spent 5 s in ``draw_group``. Their ``draw_group``
    is vectorized over rows, and positions (dodging) are computed before drawing, so one
    call per panel and line type (one collection holds one line type) draws the same
    segments."""
    def draw_panel(self, data, panel_params, coord, ax):
        for _, part in data.groupby("linetype", sort=False):
            self.draw_group(part.reset_index(drop=True), panel_params, coord, ax, self.params)

    # a name of its own: plotnine registers geoms by class name
    return type(f"{geom.__name__}_per_panel", (geom,), {"draw_panel": draw_panel})


def errorbar(*args, **kwargs):
    """``p9.geom_errorbar``, drawn per panel (:func:`_per_panel`)."""
    import plotnine as p9

    return _per_panel(p9.geom_errorbar)(*args, **kwargs)


def errorbarh(*args, **kwargs):
    """``p9.geom_errorbarh``, drawn per panel (:func:`_per_panel`)."""
    import plotnine as p9

    return _per_panel(p9.geom_errorbarh)(*args, **kwargs)


def segment(*args, **kwargs):
    """``p9.geom_segment``, drawn per panel (:func:`_per_panel`)."""
    import plotnine as p9

    return _per_panel(p9.geom_segment)(*args, **kwargs)


def theme():
    import plotnine as p9

    return p9.theme_bw(base_size=FONT_SIZE) + p9.theme(
        panel_grid_minor=p9.element_blank(),
        strip_background=p9.element_rect(fill="#eef1f4"),
        legend_position="bottom",
        plot_background=p9.element_rect(fill="white"),
    )


def _ordered(values) -> list:
    return list(dict.fromkeys(values))


#: forest plots: where the text columns start (data units; the estimate axis runs 0..1),
#: and the width of a character of their 6.5 pt text and of the row labels, in inches
FOREST_TEXT_X = 1.08
_CHAR_IN = 6.5 * 0.6 / 72
_LABEL_CHAR_IN = 7.2 * 0.55 / 72
#: forest plots: panels per row (models side by side), and panel rows per figure
FOREST_COLUMNS = 2
FOREST_ROWS = 2
#: the shapes of a forest plot's legend, every entry always shown
FOREST_SHAPES = {"adequate n": "s", "small n (\u2020)": "o", "overall (all levels)": "D"}
FOREST_FILLS = ("white", "white", "#2e4057")
OVERALL_LABEL = "Overall"


def forest_layout(d: pd.DataFrame, *, width: float, n_panels: int,
                  head: tuple[str, str]) -> tuple[float, float, float]:
    """``(count_x, ci_x, xmax)`` in data units: the text columns right of the estimate
    axis, as wide as their longest text at the panel's actual width, so that neither
    runs into the other or out of the panel."""
    label_in = _LABEL_CHAR_IN * max((len(str(v)) for v in d["label"]), default=4) + 0.3
    panel_in = max(1.0, (width - label_in - 0.15 * n_panels) / n_panels)
    count_chars = max(len(head[0]), *(len(str(v)) for v in d["count"])) + 2
    ci_chars = max(len(head[1]), *(len(str(v)) for v in d["ci_text"])) + 1
    k = min(0.68, (count_chars + ci_chars) * _CHAR_IN / panel_in)  # text share of panel
    xmax = (FOREST_TEXT_X + 0.02 * k) / (1 - k)
    per_char = (xmax + 0.02) / panel_in * _CHAR_IN
    return FOREST_TEXT_X, FOREST_TEXT_X + count_chars * per_char, xmax


def forest_plot(df: pd.DataFrame, *, overall: pd.DataFrame, xlab: str, count_label: str,
                facet: str = "model", width: float = 7.5, ncol: int | None = None,
                facet_order=None):
    """A forest plot as in a meta-analysis, one panel per ``facet`` (the models, in
    ``facet_order``), every panel on one estimate scale (0 to 1, the same ticks) and of one
    width (``ncol`` panels per row, default ``FOREST_COLUMNS``): per row the estimate with
    its CI (open circle: small cell), and two text columns right of the axis, ``count``
    (``"TP/P"``, with a dagger for small cells) and ``ci_text`` (``"0.39 [0.33, 0.45]"``),
    placed by :func:`forest_layout`; below the rows, set apart by a rule, the overall row
    (label ``OVERALL_LABEL``): a diamond spanning its CI, its counts and CI as text, and a
    dashed line at the overall estimate through the rows. The legend always names the
    three marks (``FOREST_SHAPES``). Rows are drawn top-down in the order of ``df`` (the
    tables' order); a row without an estimate keeps its place and shows its text.

    ``df`` columns: ``label``, ``estimate``, ``conf_low``, ``conf_high``, ``small``,
    ``count``, ``ci_text``, ``facet``; ``overall``: ``facet``, ``estimate``,
    ``conf_low``, ``conf_high``, ``count``, ``ci_text``.
    """
    import plotnine as p9

    d = df.copy()
    ov = overall.copy()
    order = list(facet_order or []) + [m for m in _ordered(d[facet].astype(str))
                                       if m not in set(map(str, facet_order or []))]
    d[facet] = ordered_category(d[facet], order)
    ov[facet] = ordered_category(ov[facet], order)
    labels = _ordered(d["label"])
    n = len(labels)
    d["y"] = d["label"].map({lab: n - i for i, lab in enumerate(labels)}).astype(float)
    d["cell"] = d["small"].map({True: "small n (\u2020)", False: "adequate n"})
    drawn = d[d["estimate"].notna()]
    ncol = ncol or (1 if d[facet].nunique() == 1 else FOREST_COLUMNS)
    titles = (count_label, "Estimate [95% CI]")
    both = pd.concat([d[["label", "count", "ci_text"]],
                      ov[["count", "ci_text"]].assign(label=OVERALL_LABEL)])
    count_x, ci_x, xmax = forest_layout(both, width=width, n_panels=ncol, head=titles)
    head = pd.DataFrame({"x": [count_x, ci_x], "y": float(n + 1), "text": list(titles)})
    ov = ov.assign(y=0.0, cell="overall (all levels)")
    cols = [frame.assign(x=x, text=frame[c]) for frame in (d, ov)
            for x, c in ((count_x, "count"), (ci_x, "ci_text"))]
    shown = ov[ov["estimate"].notna()]
    h = 0.3  # half the diamond's height, in rows
    diamond = pd.concat([shown.assign(x=shown[xc], y=yv, corner=k) for k, (xc, yv) in
                         enumerate((("conf_low", 0.0), ("estimate", h), ("conf_high", 0.0),
                                    ("estimate", -h)))]).sort_values([facet, "corner"],
                                                                     kind="stable")
    rule = pd.DataFrame({"y": [0.5]})
    return (p9.ggplot(d, p9.aes(y="y"))
            + p9.geom_hline(p9.aes(yintercept="y"), data=rule, color="#8d96a3", size=0.3)
            + segment(p9.aes(x="estimate", xend="estimate", y="y", yend="yend"),
                      data=shown.assign(y=h, yend=n + 0.5), linetype="dashed",
                      color="#8d96a3")
            + p9.geom_polygon(p9.aes(x="x", y="y", group=facet), data=diamond,
                              fill="#2e4057", color="#2e4057")
            + errorbarh(p9.aes(xmin="conf_low", xmax="conf_high", y="y"),
                        data=drawn, height=0.3, color="#2e4057")
            + p9.geom_point(p9.aes(x="estimate", y="y", shape="cell", fill="cell"),
                            data=pd.concat([drawn, shown]), size=2, color="#1b5e8a")
            + p9.geom_text(p9.aes(x="x", y="y", label="text"), data=pd.concat(cols),
                           ha="left", size=6.5)
            + p9.geom_text(p9.aes(x="x", y="y", label="text"), data=head, ha="left",
                           size=6.5, fontweight="bold")
            # one legend (same title and entries), every entry shown even when absent
            + p9.scale_shape_manual(values=FOREST_SHAPES, limits=list(FOREST_SHAPES),
                                    name="Estimate [95% CI]:", drop=False)
            + p9.scale_fill_manual(values=dict(zip(FOREST_SHAPES, FOREST_FILLS)),
                                   limits=list(FOREST_SHAPES), name="Estimate [95% CI]:",
                                   drop=False)
            # free_x only so that every panel draws its own axis (a panel read alone has
            # its ticks); the limits and breaks below are fixed, so the scale is one
            + p9.facet_wrap(f"~{facet}", ncol=ncol, scales="free_x")
            + p9.scale_x_continuous(limits=(-0.02, xmax), breaks=[0, 0.25, 0.5, 0.75, 1],
                                    labels=["0", "0.25", "0.5", "0.75", "1"],
                                    expand=(0, 0))
            + p9.scale_y_continuous(breaks=[n - i for i in range(n)] + [0],
                                    labels=labels + [OVERALL_LABEL],
                                    limits=(-0.6, n + 1.6), expand=(0, 0))
            + p9.labs(x=xlab, y="")
            + theme() + p9.theme(panel_grid_major_y=p9.element_blank(),
                                 panel_grid_minor=p9.element_blank()))


#: the sequential scale of proportions: viridis (perceptually uniform, readable with every
#: common colour-vision deficiency, and printable in grey); 0 is dark, far from the white
#: background, 1 is yellow
SEQUENTIAL = "viridis"
NA_FILL = "#d9d9d9"


def ink(values, cmap: str = SEQUENTIAL, limits=(0.0, 1.0)) -> list[str]:
    """``"light"`` or ``"dark"`` text for tiles filled with ``values`` on ``cmap``: the
    ink with the larger contrast against the tile (relative luminance, WCAG)."""
    import matplotlib

    lo, hi = limits
    cm = matplotlib.colormaps[cmap]
    out = []
    for v in values:
        if v is None or pd.isna(v):  # missing: the light grey NA tile
            out.append("dark")
            continue
        r, g, b, _ = cm(min(1.0, max(0.0, (float(v) - lo) / (hi - lo))))
        lum = sum(w * (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
                  for w, c in zip((0.2126, 0.7152, 0.0722), (r, g, b)))
        out.append("light" if (1.05 / (lum + 0.05)) > ((lum + 0.05) / 0.05) else "dark")
    return out


def panels_per_row(n: int) -> int:
    """Facet columns for ``n`` panels: all in one row up to 2, then 2 or 3 per row."""
    return n if n <= 2 else (2 if n <= 4 else 3)


def heatmap(df: pd.DataFrame, *, x: str, y: str, facet: str, fill_label: str,
            facet_order=None):
    """Tiles coloured by ``estimate`` (``SEQUENTIAL``, 0 to 1; grey where missing), one
    panel per ``facet`` in ``facet_order``, with
    the text ``cell_text`` (estimate and n) in each, in the ink that reads on the tile;
    small cells (``small`` True) get a dashed outline of their own tile only, in the same
    ink (and the asterisk in their text). The colour bar is drawn as rectangles (vector in the SVG,
    so the PDF's bar matches the tiles)."""
    import plotnine as p9

    d = df.copy()
    d[x] = pd.Categorical(d[x].astype(str), categories=_ordered(d[x].astype(str)))
    d[y] = pd.Categorical(d[y].astype(str), categories=_ordered(d[y].astype(str))[::-1])
    d[facet] = ordered_category(d[facet], facet_order)  # panels in the tables' model order
    d["ink"] = ink(d["estimate"])
    small = d[d["small"].astype(bool)]
    return (p9.ggplot(d, p9.aes(x=x, y=y, fill="estimate"))
            + p9.geom_tile(color="white", size=0.6, width=1, height=1)
            # explicit width/height: on a subset, geom_tile would size tiles from the
            # subset's own spacing and outline whole rows or columns
            + p9.geom_tile(p9.aes(color="ink"), data=small, fill="none", size=0.7,
                           linetype="dashed", width=0.86, height=0.86)
            + p9.geom_text(p9.aes(label="cell_text", color="ink"), size=6.5)
            + p9.scale_color_manual(values={"light": "white", "dark": "black"}, guide=None)
            + p9.scale_fill_cmap(SEQUENTIAL, limits=(0, 1), breaks=[0, 0.25, 0.5, 0.75, 1],
                                 labels=["0", "0.25", "0.5", "0.75", "1"], name=fill_label,
                                 na_value=NA_FILL,
                                 guide=p9.guide_colorbar(display="rectangles", nbin=40))
            + p9.facet_wrap(f"~{facet}", ncol=panels_per_row(d[facet].nunique()))
            + p9.labs(x=x.replace("_", " "), y=y.replace("_", " "))
            + theme() + p9.theme(panel_grid=p9.element_blank(),
                                 panel_background=p9.element_rect(fill="white"),
                                 axis_text_x=p9.element_text(rotation=30, ha="right")))


def flow_diagram(boxes: pd.DataFrame, arrows: pd.DataFrame):
    """A STARD-style flow diagram: ``boxes`` (x, y, label, kind) and ``arrows`` (x, y, xend, yend)."""
    import plotnine as p9

    return (p9.ggplot()
            + segment(p9.aes(x="x", y="y", xend="xend", yend="yend"), data=arrows,
                              arrow=p9.arrow(length=0.08, type="closed"), color="#2e4057")
            + p9.geom_label(p9.aes(x="x", y="y", label="label", fill="kind"), data=boxes,
                            size=7, label_padding=0.4, label_size=0.4)
            + p9.scale_fill_manual(values={"flow": "#eef1f4", "excluded": "#fbe3e6",
                                           "result": "#e3f1ea"}, guide=None)
            + p9.scale_x_continuous(limits=(-0.1, 2.1))
            + p9.scale_y_continuous(limits=(boxes["y"].min() - 0.45, boxes["y"].max() + 0.4))
            + p9.theme_void() + p9.theme(plot_background=p9.element_rect(fill="white")))


def lines(df: pd.DataFrame, *, x: str, y: str, color: str, facet: str | None = None,
          ribbon: bool = False, xlab: str | None = None, ylab: str | None = None,
          vline: float | None = None, color_order=None, linetype: bool = False):
    """Lines (optionally with a CI ribbon from conf_low/conf_high) per ``color``, the
    legend in ``color_order`` (the report's model order; else order of appearance);
    ``linetype``: each ``color`` also gets its own line type and point shape."""
    import plotnine as p9

    df = df.assign(**{color: ordered_category(df[color], color_order)})
    p = p9.ggplot(df, p9.aes(x=x, y=y, color=color, group=color))
    if ribbon:
        p += p9.geom_ribbon(p9.aes(ymin="conf_low", ymax="conf_high", fill=color), alpha=0.15,
                            color="none")
        p += p9.scale_fill_manual(values=PALETTE[: df[color].nunique()], guide=None)
    if linetype:   # lines that may coincide (equal rankings) stay told apart
        p += p9.aes(linetype=color, shape=color)
        n = df[color].nunique()
        p += p9.scale_linetype_manual(values=(["solid", "dashed", "dotted", "dashdot"] * n)[:n],
                                      name=color.replace("_", " "))
        p += p9.scale_shape_manual(values=(["o", "^", "s", "D"] * n)[:n],
                                   name=color.replace("_", " "))
    p = p + p9.geom_line() + p9.geom_point(size=1.4 if linetype else 1)
    if vline is not None:
        p += p9.geom_vline(xintercept=vline, linetype="dashed", color="#8d96a3")
    if facet:
        p += p9.facet_wrap(f"~{facet}", scales="free_y")
    p += p9.scale_color_manual(values=PALETTE[: df[color].nunique()], name=color.replace("_", " "))
    return p + p9.labs(x=x if xlab is None else xlab, y=y if ylab is None else ylab) + theme()


def value_breaks(low: float, high: float, n: int = 5, *, outer: bool = False) -> list[float]:
    """Breaks of a value axis shared by every panel: 0, 0.25, ..., 1 for a range within
    [0, 1] (proportions), else mizani's extended breaks over ``[low, high]`` (at least
    three), so no panel is left with one tick; ``outer``: the breaks that cover the range
    (the first at or below ``low``, the last at or above ``high``), to extend an axis to."""
    import numpy as np
    from mizani.breaks import breaks_extended

    if low >= 0 and high <= 1 and not outer:
        return [0.0, 0.25, 0.5, 0.75, 1.0]
    if outer:
        b = sorted(float(v) for v in breaks_extended(n=n)((low, high)))
        if not b:
            return [low, high]
        step = b[1] - b[0] if len(b) > 1 else max(high - low, 1.0)
        below = [v for v in b if v <= low] or [b[0] - step * np.ceil((b[0] - low) / step)]
        above = [v for v in b if v >= high] or [b[-1] + step * np.ceil((high - b[-1]) / step)]
        return [round(v, 12) for v in [below[-1]] + [v for v in b if below[-1] < v < above[0]] + [above[0]]]
    for k in range(n, n + 6):
        b = [float(v) for v in breaks_extended(n=k)((low, high)) if low <= v <= high]
        if len(b) >= 3:
            return b
    return [float(v) for v in np.linspace(low, high, 3)]


def break_label(v: float) -> str:
    """A tick label: ``0``, ``0.25``, ``-1.5`` (no trailing zeros, no ``-0``)."""
    v = 0.0 if abs(v) < 1e-12 else v
    return f"{v:.6g}"


def ordered_category(values: pd.Series, order=None) -> pd.Categorical:
    """``values`` as text categories in ``order`` (levels missing from it after, in order
    of appearance): the one order of models every table and figure uses."""
    vals = values.astype(str)
    first = [str(v) for v in (order or []) if str(v) in set(vals)]
    rest = [v for v in _ordered(vals) if v not in first]
    return pd.Categorical(vals, categories=first + rest)


def points_ci(df: pd.DataFrame, *, x: str, y: str, color: str | None = None,
              facet: str | None = None, xlab: str | None = None, ylab: str | None = None,
              dodge: float = 0.5, hline: float | None = None, flip: bool = True,
              facet_order=None, color_order=None, limits: tuple | None = None):
    """Point estimates with CI bars (``conf_low``/``conf_high``), dodged by ``color``.

    Every panel shares one value scale (limits and breaks computed here from all panels'
    values, or ``limits``; 0..1 with breaks at quarters for proportions), so a panel can
    neither show one lone tick nor read on another scale than its neighbour. Categories
    of ``x`` keep their order of appearance, drawn top-down when ``flip``; panels follow
    ``facet_order`` and colours ``color_order`` (the report's model order)."""
    import numpy as np
    import plotnine as p9

    d = df.copy()
    cats = _ordered(d[x].astype(str))
    d[x] = pd.Categorical(d[x].astype(str), categories=cats[::-1] if flip else cats)
    if facet:
        d[facet] = ordered_category(d[facet], facet_order)
    if color:
        d[color] = ordered_category(d[color], color_order)
    vals = np.r_[d[y].to_numpy(float), d["conf_low"].to_numpy(float),
                 d["conf_high"].to_numpy(float), [] if hline is None else [hline]]
    vals = vals[np.isfinite(vals)]
    breaks = None
    if limits is None:
        lo, hi = (float(vals.min()), float(vals.max())) if len(vals) else (0.0, 1.0)
        if lo >= 0 and hi <= 1:
            lo, hi = 0.0, 1.0
        else:
            if hi - lo < 1e-9:
                lo, hi = lo - 0.5, hi + 0.5
            # the axis runs from break to break: a side that holds values (a negative
            # difference) always has a tick of its own
            breaks = value_breaks(lo, hi, outer=True)
            lo, hi = breaks[0], breaks[-1]
        limits = (lo, hi)
    breaks = breaks or value_breaks(*limits)
    aes = p9.aes(x=x, y=y, color=color) if color else p9.aes(x=x, y=y)
    pos = p9.position_dodge(width=dodge)
    p = (p9.ggplot(d, aes)
         + errorbar(p9.aes(ymin="conf_low", ymax="conf_high"), width=0.2, position=pos)
         + p9.geom_point(size=1.8, position=pos))
    if hline is not None:
        p += p9.geom_hline(yintercept=hline, linetype="dashed", color="#8d96a3")
    if color:
        p += p9.scale_color_manual(values=PALETTE[: d[color].nunique()],
                                   name=color.replace("_", " "), drop=False)
    p += p9.scale_y_continuous(limits=limits, breaks=breaks,
                               labels=[break_label(b) for b in breaks])
    if facet:
        p += p9.facet_wrap(f"~{facet}", nrow=1 if flip else None)
    if flip:
        p += p9.coord_flip()
    p = p + p9.labs(x=x if xlab is None else xlab, y=y if ylab is None else ylab) + theme()
    if facet and flip:
        p += p9.theme(panel_spacing_x=0.03)
    return p


def bars(df: pd.DataFrame, *, x: str, y: str, fill: str, xlab: str | None = None,
         ylab: str | None = None, percent: bool = True):
    """Bars of ``y`` per ``x`` (categories in their order of appearance), dodged by
    ``fill``, horizontal; a negative value (a covariance share) is drawn to the left of a
    zero line."""
    import plotnine as p9

    d = df.copy()
    d[x] = pd.Categorical(d[x].astype(str), categories=list(dict.fromkeys(
        d[x].astype(str)))[::-1])
    d[fill] = pd.Categorical(d[fill].astype(str), categories=_ordered(d[fill].astype(str)))
    p = (p9.ggplot(d, p9.aes(x=x, y=y, fill=fill))
         + p9.geom_col(position=p9.position_dodge(width=0.8), width=0.75)
         + p9.geom_hline(yintercept=0.0, color="#8d96a3")
         + p9.scale_fill_manual(values=PALETTE[: d[fill].nunique()], name=fill.replace("_", " "))
         + p9.coord_flip())
    if percent:
        from mizani.labels import percent_format

        p += p9.scale_y_continuous(labels=percent_format())
    return p + p9.labs(x=x if xlab is None else xlab, y=y if ylab is None else ylab) + theme()


def meta_forest_plot(sites: pd.DataFrame, pooled: pd.DataFrame, *, xlab: str,
                     count_label: str, facet: str = "model", width: float = 7.5):
    """A meta-analysis forest plot, one panel per ``facet`` (two per row): per study (site)
    its estimate as a square sized by its weight with its CI; below them the pooled
    estimate as a diamond (its CI) and the prediction interval for a new study as a bar;
    a dotted line at the pooled estimate; three text columns right of the axis, ``count``,
    ``weight_text`` and ``ci_text`` (the prediction interval's ``pi_text`` on its row);
    ``note`` (heterogeneity) under each panel. Rows top-down in the order of ``sites``; a
    study without an estimate keeps its row and shows its text.

    ``sites`` columns: ``facet``, ``label``, ``estimate``, ``conf_low``, ``conf_high``,
    ``weight``, ``count``, ``weight_text``, ``ci_text``; ``pooled``: ``facet``,
    ``estimate``, ``conf_low``, ``conf_high``, ``pi_low``, ``pi_high``, ``count``,
    ``ci_text``, ``pi_text``, ``note``.
    """
    import plotnine as p9

    pool_label, pi_label = "Pooled (RE)", "Prediction interval"
    labels = _ordered(sites["label"]) + [pool_label, pi_label]
    n = len(labels)
    ys = {lab: float(n - i) for i, lab in enumerate(labels)}
    s = sites.assign(y=sites["label"].map(ys))
    p = pooled.assign(y=ys[pool_label], y_pi=ys[pi_label])
    drawn = s[s["estimate"].notna()]
    # a square's area in proportion to its weight (the largest study 4.5 pt across; a
    # study of an analysis that pooled nothing, weight NaN, drawn at full size)
    w = drawn["weight"].fillna(100.0)
    drawn = drawn.assign(size=4.5 * (w / w.max()) ** 0.5 if len(w) else w)
    shown = p[p["estimate"].notna()]
    diamond = pd.concat([shown.assign(x=shown[c], y=shown["y"] + dy, corner=k)
                         for k, (c, dy) in enumerate((("conf_low", 0.0), ("estimate", 0.32),
                                                      ("conf_high", 0.0),
                                                      ("estimate", -0.32)))],
                        ignore_index=True).dropna(subset=["x"]).sort_values(
                            [facet, "corner"], kind="stable")
    pi_bar = p[p["pi_low"].notna()]
    # the text columns, as wide as their longest text at the panel's width
    heads = (count_label, "Weight", "Estimate [95% CI]")
    texts = [pd.concat([s["count"], p["count"]]).astype(str),
             pd.concat([s["weight_text"], p.assign(w="100%")["w"]]).astype(str),
             pd.concat([s["ci_text"], p["ci_text"], p["pi_text"]]).astype(str)]
    n_panels = min(2, max(1, s[facet].nunique()))
    label_in = _LABEL_CHAR_IN * max(len(str(v)) for v in labels) + 0.3
    panel_in = max(1.0, (width - label_in - 0.15 * n_panels) / n_panels)
    chars = [max(len(h), *(len(t) for t in col)) + 1 for h, col in zip(heads, texts)]
    k = min(0.7, sum(chars) * _CHAR_IN / panel_in)
    xmax = (FOREST_TEXT_X + 0.02 * k) / (1 - k)
    per_char = (xmax + 0.02) / panel_in * _CHAR_IN
    xs = [FOREST_TEXT_X + per_char * sum(chars[:i]) for i in range(3)]
    cols = [s.assign(x=xs[0], text=s["count"]), s.assign(x=xs[1], text=s["weight_text"]),
            s.assign(x=xs[2], text=s["ci_text"]), p.assign(x=xs[0], text=p["count"]),
            p.assign(x=xs[1], text="100%"), p.assign(x=xs[2], text=p["ci_text"]),
            p.assign(x=xs[2], y=p["y_pi"], text=p["pi_text"])]
    body = pd.concat([c[[facet, "x", "y", "text"]] for c in cols], ignore_index=True)
    head = pd.DataFrame({"x": xs, "y": float(n + 1), "text": list(heads)})
    note = p.assign(x=0.0, y=-0.3)
    return (p9.ggplot(s, p9.aes(y="y"))
            + p9.geom_vline(p9.aes(xintercept="estimate"), data=shown, linetype="dotted",
                            color="#8d96a3")
            + segment(p9.aes(x="pi_low", xend="pi_high", y="y_pi", yend="y_pi"),
                      data=pi_bar, size=2.2, color="#d1495b", alpha=0.55)
            + errorbarh(p9.aes(xmin="conf_low", xmax="conf_high", y="y"), data=drawn,
                        height=0.3, color="#2e4057")
            + p9.geom_point(p9.aes(x="estimate", y="y", size="size"), data=drawn,
                            shape="s", color="#1b5e8a", fill="#1b5e8a")
            + p9.geom_polygon(p9.aes(x="x", y="y", group=facet), data=diamond,
                              fill="#2e4057", color="#2e4057")
            + p9.geom_text(p9.aes(x="x", y="y", label="text"), data=body, ha="left",
                           size=6.5)
            + p9.geom_text(p9.aes(x="x", y="y", label="text"), data=head, ha="left",
                           size=6.5, fontweight="bold")
            + p9.geom_text(p9.aes(x="x", y="y", label="note"), data=note, ha="left",
                           va="bottom", size=6, color="#4a5560")
            + p9.scale_size_identity()
            + p9.facet_wrap(f"~{facet}", ncol=n_panels)
            + p9.scale_x_continuous(limits=(-0.02, xmax), breaks=[0, 0.5, 1],
                                    labels=["0", "0.5", "1"], expand=(0, 0))
            + p9.scale_y_continuous(breaks=[ys[lab] for lab in labels], labels=labels,
                                    limits=(-0.5, n + 1.6), expand=(0, 0))
            + p9.labs(x=xlab, y="")
            + theme() + p9.theme(panel_grid_major_y=p9.element_blank(),
                                 panel_grid_minor=p9.element_blank()))


def gap_bars(df: pd.DataFrame, *, xlab: str, facet: str = "model"):
    """The parts of a gap as horizontal bars from 0 with their CIs (``conf_low``/
    ``conf_high``), one panel per ``facet``: ``row`` the part's label (top to bottom in
    the frame's order), ``part`` its kind (the fill: crude gap, case mix, a covariate's
    contribution, equal case mix)."""
    import plotnine as p9

    d = df.copy()
    rows = _ordered(d["row"].astype(str))
    d["row"] = pd.Categorical(d["row"].astype(str), categories=rows[::-1])
    kinds = _ordered(d["part"].astype(str))
    d["part"] = pd.Categorical(d["part"].astype(str), categories=kinds)
    colours = dict(zip(("crude gap", "case mix", "contribution", "equal case mix"),
                       (PALETTE[5], PALETTE[0], "#9cc3dc", PALETTE[1])))
    p = (p9.ggplot(d, p9.aes(x="row", y="estimate", fill="part"))
         + p9.geom_hline(yintercept=0.0, color="#2e4057", size=0.4)
         + p9.geom_col(width=0.6)
         + errorbar(p9.aes(ymin="conf_low", ymax="conf_high"), width=0.25, color="#333333",
                    na_rm=True)
         + p9.scale_fill_manual(values=[colours.get(k, PALETTE[4]) for k in kinds],
                                name="")
         + p9.facet_wrap(f"~{facet}")
         + p9.coord_flip()
         + p9.labs(x="", y=xlab, fill="") + theme())
    return p
