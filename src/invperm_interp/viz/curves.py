"""Training curves read against the causal floor, as the report draws them (SVG, ``viz.charts``).

A causally masked model ends at its floor (2.5 for the note's causal model at d = 10), and on a log
axis of the MSE its last thousand steps lie on the floor line at the bottom edge. So a causal run
is drawn as the excess ``MSE − floor`` (symmetric-log axis: it can dip below 0 by sampling noise of
the eval batch), a bidirectional run as the MSE itself, with the floor of its causal twin for
reference. The accuracies the run records (entries, rows, whole samples exact) sit beside it.
``viz.training`` draws the same curves with matplotlib (PNG and SVG files, the index page).
"""

from __future__ import annotations

import math

from ..runs.evaluation import Evaluation
from .charts import Axes, Level, Series, line_chart
from .scales import Scale, padded
from .svg import BLUE, RED, Drawing

ACCURACIES = (("entry_acc", "entries exact"), ("row_acc", "rows exact"),
              ("sample_acc", "samples exact (whole Y)"))  # Evaluation's fields
SOLVED_BELOW = 1e-3  # a model with MSE below this solves the task ("steps to solve": first step below)
AT_FLOOR = 0.01  # a causal run within 1% of its floor sits on it
EXCESS_LINEAR = 1e-4  # symlog: linear within ±1e-4 of the floor, logarithmic beyond


def floor_of(metrics: list[Evaluation]) -> float:
    """The run's causal floor (the last record's; 0 when it has none)."""
    return (metrics[-1].causal_floor or 0.0) if metrics else 0.0


def drawn_as_excess(metrics: list[Evaluation], causal: bool) -> bool:
    """Whether a training chart (:func:`training_chart`, ``viz.training.plot_training``) draws the
    run (``causal`` or not: its configuration's attention) as its excess over the floor: a causal
    run whose floor is above 0 (a causal model reading scratch rows has floor 0: its MSE is
    drawn)."""
    return causal and floor_of(metrics) > 0


def training_caption(metrics: list[Evaluation], causal: bool) -> str:
    """The caption of a training chart for ``metrics``: says what the axis shows."""
    if drawn_as_excess(metrics, causal):
        how = (f"drawn as its excess over the causal floor (linear within ±{EXCESS_LINEAR:g} of the "
               "floor, logarithmic beyond), so a run at its floor is visible")
    elif causal:
        how = ("on a log scale; this causal model's floor is 0 (its read-out rows come after every "
               "input row they need), so it is drawn as the MSE itself")
    elif floor_of(metrics) > 0:
        how = "on a log scale, with the causal floor of its causal twin (dotted) for reference"
    else:
        how = "on a log scale"
    return f"Eval loss on the run's fixed eval batch, {how}."


def training_chart(metrics: list[Evaluation], causal: bool) -> Drawing:
    """Eval loss against step: the excess over the floor for a ``causal`` run with a floor, else
    the MSE (log) with the causal floor (of the causal twin) for reference, and the train loss."""
    excess, floor = drawn_as_excess(metrics, causal), floor_of(metrics)
    steps = [m.step for m in metrics]
    series = [Series(steps, [m.mse - floor if excess else m.mse for m in metrics], BLUE,
                     label="eval MSE")]
    train = [(m.step, m.train_mse) for m in metrics if m.train_mse is not None]
    levels = []
    if excess:
        levels.append(Level(0.0, RED))
        values = series[0].y
        scale = padded(min(min(values), 0.0), max(max(values), 0.0), "symlog", EXCESS_LINEAR)
        axes = Axes(scale, "step", "eval MSE − causal floor",
                    f"excess over the causal floor {floor:.4g} (dotted: at the floor)", (300, 150))
        return line_chart(series, axes, levels)
    if train:
        series.append(Series(*zip(*train), BLUE, "--", 0.45, "train MSE"))
    if floor > 0 and not causal:
        levels.append(Level(floor, RED, label=f"causal floor {floor:.4g}"))
    shown = [v for s in series for v in s.y if v > 0 and math.isfinite(v)] + [lv.y for lv in levels]
    scale = padded(min(shown), max(shown), "log") if shown else Scale(1e-3, 1.0, "log")
    return line_chart(series, Axes(scale, "step", "MSE (the note's loss)", "eval MSE", (300, 150)),
                      levels)


def accuracy_chart(metrics: list[Evaluation]) -> Drawing | None:
    """The accuracies the run recorded (entries, rows, whole samples exact) against step; ``None``
    when it recorded none."""
    accuracies = [(k, name) for k, name in ACCURACIES if getattr(metrics[-1], k) is not None]
    if not accuracies:
        return None
    steps = [m.step for m in metrics]
    series = [Series(steps, [getattr(m, key) for m in metrics], "#000", dash, label=name)
              for (key, name), dash in zip(accuracies, ("-", "--", ":"))]
    axes = Axes(Scale(-0.02, 1.02), "step", "fraction exact after rounding",
                "accuracy on the eval batch", (270, 150), legend_columns=2)
    return line_chart(series, axes)
