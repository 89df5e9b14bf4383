"""The report's two kinds of figure as SVG drawings (``viz.svg``): a heatmap with labelled block
ticks and a colour bar, and a line chart on a linear, log or symmetric-log axis with a legend
below. Sizes are in points; margins are made from the labels' estimated widths, so nothing is
cropped afterwards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .scales import Scale, nice_ticks, number_label, padded
from .svg import GRID, LABEL_PT, TITLE_PT, Drawing, colour_map, text_width

TICK = 3.5  # tick length, and the gap from a tick to its label (points)
LINE_H = 1.25  # a line of text is this many times its size high
PAD = 4.0
DASHES = {"-": None, "--": "5.55,2.4", ":": "1.5,2.48"}  # matplotlib's at a 1.5 pt line


@dataclass(frozen=True)
class Ticks:
    """A heatmap axis: labelled positions ``at`` in cell units (0: the first cell's leading edge;
    a block's ticks at its centre), thin ``lines`` between blocks, the axis ``label``, and whether
    the labels are turned upright (``rotate``: x labels reading upwards)."""

    at: tuple[tuple[float, str], ...]
    lines: tuple[float, ...] = ()
    label: str = ""
    rotate: bool = False


def block_ticks(blocks, label: str = "", rotate: bool = False) -> Ticks:
    """:class:`Ticks` naming each ``stream.Block`` at its centre, lines where the next begins."""
    return Ticks(tuple(((b.start + b.stop) / 2, b.name) for b in blocks),
                 tuple(float(b.start) for b in blocks[1:]), label, rotate)


@dataclass(frozen=True)
class Colours:
    """A heatmap's colour scale: ``anchors`` (``viz.svg.DIVERGING``, ``MAGMA``) from ``lo`` to
    ``hi``."""

    anchors: tuple[str, ...]
    lo: float
    hi: float

    def rgba(self, values: np.ndarray) -> np.ndarray:
        """``values (rows, cols)`` → ``(rows, cols, 4)`` uint8; NaN transparent."""
        span = (self.hi - self.lo) or 1.0
        return colour_map((np.asarray(values, np.float64) - self.lo) / span, self.anchors)


def heatmap(values: np.ndarray, rows: Ticks, cols: Ticks, colours: Colours, *,
            size: tuple[float, float], title: str = "", hatch_label: str | None = None) -> Drawing:
    """``values (rows, cols)`` as cells over a ``size`` (width, height) points plot, with a colour
    bar; NaN cells show a grey hatch, named in a legend below when ``hatch_label`` is given."""
    values = np.asarray(values, np.float64)
    if values.ndim != 2 or 0 in values.shape:
        raise ValueError(f"values must be a non-empty (rows, cols) array, got shape {values.shape}")
    pw, ph = size
    levels = nice_ticks(colours.lo, colours.hi)
    step = levels[1] - levels[0] if len(levels) > 1 else 1.0
    bar_ticks = [(t, number_label(t, step)) for t in levels]
    y_width = max((text_width(s, LABEL_PT) for _, s in rows.at), default=0)
    x_extent = (max((text_width(s, LABEL_PT) for _, s in cols.at), default=0) if cols.rotate
                else LABEL_PT * LINE_H)
    left = PAD + (LABEL_PT * LINE_H + PAD if rows.label else 0) + y_width + 2 * TICK
    top = PAD + (TITLE_PT * LINE_H + PAD if title else 0)
    legend = LABEL_PT * LINE_H + PAD if hatch_label else 0
    bottom = 2 * TICK + x_extent + (PAD + LABEL_PT * LINE_H if cols.label else 0) + legend + PAD
    bar_x = left + pw + 8
    right = 8 + 10 + 2 * TICK + max((text_width(s, LABEL_PT) for _, s in bar_ticks), default=0) + PAD
    x_half = text_width(cols.at[-1][1], LABEL_PT) / 2 if cols.at and not cols.rotate else 0
    title_half = text_width(title, TITLE_PT) / 2 + PAD
    title_x = max(left + pw / 2, title_half)  # over the plot, unless that cuts it off at the left
    draw = Drawing(max(left + pw + max(right, x_half + PAD), title_x + title_half), top + ph + bottom)
    n_rows, n_cols = values.shape
    cw, ch = pw / n_cols, ph / n_rows
    if np.isnan(values).any():
        draw.hatched(left, top, pw, ph)
    draw.image(left, top, pw, ph, colours.rgba(values))
    for at in rows.lines:
        draw.line(left, top + at * ch, left + pw, top + at * ch, colour="#999", width=0.5)
    for at in cols.lines:
        draw.line(left + at * cw, top, left + at * cw, top + ph, colour="#999", width=0.5)
    draw.rect(left, top, pw, ph, stroke="#000")
    for at, label in rows.at:
        y = top + at * ch
        draw.line(left - TICK, y, left, y)
        draw.text(left - 2 * TICK, y, label, anchor="end")
    for at, label in cols.at:
        x = left + at * cw
        draw.line(x, top + ph, x, top + ph + TICK)
        if cols.rotate:
            draw.text(x, top + ph + 2 * TICK, label, anchor="end", rotate=-90)
        else:
            draw.text(x, top + ph + 2 * TICK + LABEL_PT * LINE_H / 2, label, anchor="middle")
    below = top + ph + 2 * TICK + x_extent + PAD
    if cols.label:
        draw.text(left + pw / 2, below + LABEL_PT * LINE_H / 2, cols.label, anchor="middle")
        below += LABEL_PT * LINE_H + PAD
    if rows.label:
        draw.text(PAD + LABEL_PT * LINE_H / 2, top + ph / 2, rows.label, anchor="middle", rotate=-90)
    if title:
        draw.text(title_x, PAD + TITLE_PT * LINE_H / 2, title, size=TITLE_PT, anchor="middle")
    if hatch_label:
        draw.hatched(left, below, 16, LABEL_PT * 0.8, stroke="#9a9a9a")
        draw.text(left + 16 + PAD, below + LABEL_PT * 0.4, hatch_label)
    _colour_bar(draw, (bar_x, top, 10, ph), colours, bar_ticks)
    return draw


def _colour_bar(draw: Drawing, box: tuple[float, float, float, float], colours: Colours,
                ticks: list[tuple[float, str]]) -> None:
    x, y, w, h = box
    levels = np.linspace(0, 1, 2 * len(colours.anchors) - 1)  # the anchors and midway between
    stops = colour_map(levels, colours.anchors)
    draw.gradient(x, y, w, h, [f"#{r:02x}{g:02x}{b:02x}" for r, g, b, _ in stops], "bar")
    span = (colours.hi - colours.lo) or 1.0
    for value, label in ticks:
        at = y + h - (value - colours.lo) / span * h
        draw.line(x + w, at, x + w + TICK, at)
        draw.text(x + w + 2 * TICK, at, label)


@dataclass(frozen=True)
class Series:
    """A line of a chart: ``y`` against ``x``; ``dash`` "-", "--" or ":"; ``label`` in the legend
    (none when empty)."""

    x: Sequence[float]
    y: Sequence[float]
    colour: str = "#000"
    dash: str = "-"
    opacity: float = 1.0
    label: str = ""

    def __post_init__(self):
        if len(self.x) != len(self.y):
            raise ValueError(f"a series needs as many x as y values, got {len(self.x)} and "
                             f"{len(self.y)}")


@dataclass(frozen=True)
class Level:
    """A horizontal line across a chart at ``y`` (a floor), with its legend ``label``."""

    y: float
    colour: str
    dash: str = ":"
    label: str = ""


@dataclass(frozen=True)
class Axes:
    """A chart's axes: its y ``scale``, the labels, the title, the plot's ``size`` (width, height)
    in points and how many legend entries a row of the legend below holds."""

    scale: Scale
    x_label: str = ""
    y_label: str = ""
    title: str = ""
    size: tuple[float, float] = (300.0, 170.0)
    legend_columns: int = 3


def line_chart(series: Sequence[Series], axes: Axes, levels: Sequence[Level] = ()) -> Drawing:
    """``series`` and ``levels`` on ``axes`` (x linear over the series' steps with matplotlib's 5%
    margins), a light grid at the major ticks, and a legend below of those with a label."""
    xs = [float(v) for s in series for v in s.x]
    x_scale = padded(min(xs), max(xs)) if xs else Scale(0.0, 1.0)
    pw, ph = axes.size
    y_ticks = [(v, s) for v, s in axes.scale.ticks() if 0 <= axes.scale.fraction(v) <= 1]
    x_ticks = [(v, s) for v, s in x_scale.ticks() if 0 <= x_scale.fraction(v) <= 1]
    entries = [e for e in (*series, *levels) if e.label]
    columns = max(1, min(axes.legend_columns, len(entries)))
    legend_rows = -(-len(entries) // columns) if entries else 0
    left = (PAD + (LABEL_PT * LINE_H + PAD if axes.y_label else 0)
            + max((text_width(s, LABEL_PT) for _, s in y_ticks), default=0) + 2 * TICK)
    top = PAD + (TITLE_PT * LINE_H + PAD if axes.title else 0)
    bottom = (2 * TICK + LABEL_PT * LINE_H + (PAD + LABEL_PT * LINE_H if axes.x_label else 0)
              + (PAD + legend_rows * LABEL_PT * 1.6 if legend_rows else 0) + PAD)
    entry_w = max((text_width(e.label, LABEL_PT) for e in entries), default=0) + 24 + 2 * PAD
    right = max(PAD + text_width(x_ticks[-1][1], LABEL_PT) / 2 if x_ticks else PAD, PAD)
    width = max(left + pw + right, columns * entry_w + 2 * PAD)
    draw = Drawing(width, top + ph + bottom)

    def at_x(v):
        return left + x_scale.fraction(v) * pw

    def at_y(v):
        return top + ph - axes.scale.fraction(v) * ph

    for value, label in y_ticks:
        y = float(at_y(value))
        draw.line(left, y, left + pw, y, colour=GRID, opacity=0.3)
        draw.line(left - TICK, y, left, y)
        draw.text(left - 2 * TICK, y, label, anchor="end")
    for value in axes.scale.minor():
        if 0 <= axes.scale.fraction(value) <= 1:
            y = float(at_y(value))
            draw.line(left - TICK * 0.6, y, left, y, width=0.6)
    for value, label in x_ticks:
        x = float(at_x(value))
        draw.line(x, top, x, top + ph, colour=GRID, opacity=0.3)
        draw.line(x, top + ph, x, top + ph + TICK)
        draw.text(x, top + ph + 2 * TICK + LABEL_PT * LINE_H / 2, label, anchor="middle")
    clip = draw.clip(left, top, pw, ph)
    for level in levels:
        y = float(at_y(level.y))
        draw.polyline([(left, y), (left + pw, y)], colour=level.colour, dash=DASHES[level.dash],
                      width=1.2, clip=clip)
    for s in series:
        points = list(zip(at_x(np.asarray(s.x, np.float64)).tolist(),
                          at_y(np.asarray(s.y, np.float64)).tolist()))
        draw.polyline(points, colour=s.colour, dash=DASHES[s.dash], opacity=s.opacity, clip=clip)
    draw.rect(left, top, pw, ph, stroke="#000")
    below = top + ph + 2 * TICK + LABEL_PT * LINE_H + PAD
    if axes.x_label:
        draw.text(left + pw / 2, below + LABEL_PT * LINE_H / 2, axes.x_label, anchor="middle")
        below += LABEL_PT * LINE_H + PAD
    if axes.y_label:
        draw.text(PAD + LABEL_PT * LINE_H / 2, top + ph / 2, axes.y_label, anchor="middle",
                  rotate=-90)
    if axes.title:
        draw.text(left + pw / 2, PAD + TITLE_PT * LINE_H / 2, axes.title, size=TITLE_PT,
                  anchor="middle")
    _legend(draw, entries, columns, (left + pw / 2 - columns * entry_w / 2, below, entry_w))
    return draw


def _legend(draw: Drawing, entries, columns: int, where: tuple[float, float, float]) -> None:
    """``entries`` (series or levels) in rows of ``columns``: a line sample and the label each;
    ``where``: the legend's left, top and one entry's width."""
    x0, y0, entry_w = where
    for i, entry in enumerate(entries):
        x, y = x0 + (i % columns) * entry_w + PAD, y0 + (i // columns) * LABEL_PT * 1.6 + LABEL_PT * 0.8
        draw.polyline([(x, y), (x + 20, y)], colour=entry.colour, dash=DASHES[entry.dash],
                      opacity=getattr(entry, "opacity", 1.0))
        draw.text(x + 24, y, entry.label)
