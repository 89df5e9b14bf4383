"""Training curves read against the causal floor, with matplotlib: a run's curve for PNG and SVG
files and several runs' curves for the index page. How a run is drawn against its floor (and why)
is ``viz.curves``'s, which draws the report's curves without matplotlib.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..runs.evaluation import Evaluation  # noqa: E402
from .curves import EXCESS_LINEAR, drawn_as_excess, floor_of  # noqa: E402
from .svg import LABEL_PT, TITLE_PT  # noqa: E402
from .ticks import unicode_log_labels  # noqa: E402


def plot_loss(ax: Axes, metrics: list[Evaluation], causal: bool, label: str = "eval MSE",
              color: str = "C0") -> None:
    """One run's eval curve on ``ax``: ``MSE − floor`` for a causal run, else the MSE (log)."""
    steps = [m.step for m in metrics]
    if drawn_as_excess(metrics, causal):
        floor = floor_of(metrics)
        ax.plot(steps, [m.mse - floor for m in metrics], color=color, label=label)
        ax.set_yscale("symlog", linthresh=EXCESS_LINEAR)
        ax.axhline(0.0, color="C3", linestyle=":", linewidth=1.2)
    else:
        ax.plot(steps, [m.mse for m in metrics], color=color, label=label)
        ax.set_yscale("log")
    unicode_log_labels(ax.yaxis)


def plot_training(metrics: list[Evaluation], causal: bool, title: str = "") -> Figure:
    """Eval loss against step: the excess over the floor for a ``causal`` run, else the MSE (log)
    with the causal floor (of the causal twin) for reference, and the train loss."""
    excess, floor = drawn_as_excess(metrics, causal), floor_of(metrics)
    fig, ax = plt.subplots(figsize=(5.0, 3.1))
    plot_loss(ax, metrics, causal)
    train = [(m.step, m.train_mse) for m in metrics if m.train_mse is not None]
    if train and not excess:
        ax.plot(*zip(*train), color="C0", alpha=0.45, linestyle="--", label="train MSE")
    if excess:
        ax.set_ylabel("eval MSE − causal floor", fontsize=LABEL_PT)
        ax.set_title(title or f"excess over the causal floor {floor:.4g} (dotted: at the floor)",
                     fontsize=TITLE_PT)
    else:
        if floor > 0 and not causal:
            ax.axhline(floor, color="C3", linestyle=":", label=f"causal floor {floor:.4g}")
        ax.set_ylabel("MSE (the note's loss)", fontsize=LABEL_PT)
        ax.set_title(title or "eval MSE", fontsize=TITLE_PT)
        ax.legend(fontsize=LABEL_PT, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3,
                  frameon=False)
    ax.set_xlabel("step", fontsize=LABEL_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(alpha=0.3, which="major")
    fig.tight_layout()
    return fig


def plot_runs(curves: dict[str, list[Evaluation]], causal_runs: set[str],
              title: str = "") -> Figure:
    """Several runs' eval curves: the MSE of every run (log, left, legend outside) and, when some
    runs (those named in ``causal_runs``) are causal with a floor, their excess over it (right),
    where a run at its floor is visible instead of lying under the floor line."""
    causal = {name: m for name, m in curves.items() if name in causal_runs and floor_of(m) > 0}
    fig, axes = plt.subplots(1, 2 if causal else 1, figsize=(11 if causal else 7.5, 3.4),
                             squeeze=False, gridspec_kw={"wspace": 0.28})
    ax = axes[0, 0]
    colors = {name: f"C{i}" for i, name in enumerate(curves)}
    for name, metrics in curves.items():
        ax.plot([m.step for m in metrics], [m.mse for m in metrics], color=colors[name],
                label=name)
    floors = sorted({floor_of(m) for m in causal.values()})
    for floor in floors:
        ax.axhline(floor, color="k", linestyle=":", linewidth=1)
        ax.annotate(f"causal floor {floor:g}", (1.0, floor), xycoords=("axes fraction", "data"),
                    xytext=(-4, 4), textcoords="offset points", ha="right", fontsize=LABEL_PT)
    ax.set_yscale("log")
    unicode_log_labels(ax.yaxis)
    ax.set_xlabel("step", fontsize=LABEL_PT)
    ax.set_ylabel("eval MSE (the note's loss)", fontsize=LABEL_PT)
    ax.set_title(title or "eval MSE", fontsize=TITLE_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(alpha=0.3)
    if causal:
        ex = axes[0, 1]
        for name, metrics in causal.items():
            plot_loss(ex, metrics, True, label=name, color=colors[name])
        ex.set_xlabel("step", fontsize=LABEL_PT)
        ex.set_ylabel("eval MSE − causal floor", fontsize=LABEL_PT)
        ex.set_title("causal runs: excess over their floor (dotted: at the floor)", fontsize=TITLE_PT)
        ex.tick_params(labelsize=LABEL_PT)
        ex.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(4, len(curves)), fontsize=LABEL_PT, frameon=False)
    return fig
