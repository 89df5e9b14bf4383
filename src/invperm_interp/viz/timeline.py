"""The mechanism over training as one figure: the loss curve, the final circuit's faithfulness, and
each of its cells' fitted β and functional effect against the step (``analysis.timeline``)."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..analysis.hypothesis import cell_text  # noqa: E402
from ..analysis.verdict import NONE  # noqa: E402
from .svg import LABEL_PT, TITLE_PT  # noqa: E402
from .ticks import unicode_log_labels  # noqa: E402

#: Cells' lines told apart by style as well as colour: two cells with equal curves stay visible.
STYLES = ("-", "--", ":", "-.")
MARKERS = "os^Dv"


def _shade_faithful(ax, tl, label: bool = False) -> None:
    """Shade from each checkpoint at which the final circuit is faithful to the next one (labelled
    for the legend once, when ``label``)."""
    first_span = True
    for s, after in zip(tl.steps, tl.steps[1:]):
        if s.faithful:
            ax.axvspan(s.step, after.step, color="C2", alpha=0.12, linewidth=0,
                       label="final circuit faithful" if label and first_span else None)
            first_span = False
    if tl.first_faithful is not None:
        ax.axvline(tl.first_faithful, color="C2", linestyle="--", linewidth=1.0,
                   label=f"first faithful (step {tl.first_faithful})" if label else None)


def _style(i: int) -> dict:
    return {"linestyle": STYLES[i % len(STYLES)], "marker": MARKERS[i % len(MARKERS)],
            "markersize": 3}


def cell_name(cell) -> str:
    """``"layer 1: I at (pos.Y, pos.P)"`` (``"layer 2, h1: …"`` for heads other than 0), as the
    pages name layers: ``cell_text``'s ``"L1 I at …"`` reads as the block ``L1.x``."""
    return re.sub(r"^L(\d+)(h\d+)? ", lambda m: f"layer {m[1]}" + (f", {m[2]}" if m[2] else "") + ": ",
                  cell_text(cell))


def plot_timeline(tl, title: str = "") -> Figure:
    """Four panels over the steps: the MSE (the run's eval curve, the model and the final circuit
    alone at each checkpoint, log), rows exact, each cell's fitted β, and each cell's effect (the
    circuit-only MSE rise without it), each cell in its own colour, line style and marker. Green
    (in the top legend): where the final circuit is faithful; dashed: the first such checkpoint."""
    fig, axes = plt.subplots(4, 1, figsize=(7.0, 8.6), sharex=True,
                             gridspec_kw={"height_ratios": [1.3, 0.8, 1.0, 1.0]})
    steps = [s.step for s in tl.steps]
    for ax in axes:  # first, so the top panel's legend holds the band
        _shade_faithful(ax, tl, label=ax is axes[0])
    ax = axes[0]
    if tl.curve:
        ax.plot([c[0] for c in tl.curve], [max(c[1], 1e-12) for c in tl.curve], color="C0",
                linewidth=1.0, label="eval MSE (training's batch)")
    ax.plot(steps, [s.mse for s in tl.steps], "o", color="C0", markersize=2.5,
            label="model at the checkpoint")
    ax.plot(steps, [s.circuit.mse for s in tl.steps], color="C1", marker="o", markersize=2.5,
            linewidth=1.2, label="final circuit alone")
    ax.axhline(tl.baseline, color="0.5", linestyle=":", linewidth=1.0,
               label=f"baseline d/4 = {tl.baseline:g}")
    ax.set_yscale("log")
    unicode_log_labels(ax.yaxis)
    ax.set_ylabel("MSE", fontsize=LABEL_PT)
    ax.legend(fontsize=LABEL_PT, loc="lower left")
    ax = axes[1]
    ax.plot(steps, [s.rows_exact for s in tl.steps], color="C0", label="model")
    ax.plot(steps, [s.circuit.rows_exact for s in tl.steps], color="C1", linestyle="--",
            label="final circuit alone")  # dashed: at 1.0 it lies on the model's line
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("rows exact", fontsize=LABEL_PT)
    ax.legend(fontsize=LABEL_PT, loc="upper left")
    names = [cell_name(c) for c in tl.cells]
    colors = [f"C{i % 10}" for i in range(len(names))]
    for i, name in enumerate(names):
        axes[2].plot(steps, [s.betas[i] for s in tl.steps], color=colors[i], linewidth=1.2,
                     label=name, **_style(i))
    axes[2].axhline(0.0, color="0.6", linewidth=0.6)
    axes[2].set_ylabel("fitted β", fontsize=LABEL_PT)
    if names:  # a minimal circuit may have no cell
        axes[2].legend(fontsize=LABEL_PT, loc="upper left", ncol=2 if len(names) > 4 else 1)
    seen = set()
    for i, cell in enumerate(tl.cells):
        if cell[:4] in seen:
            continue
        seen.add(cell[:4])
        axes[3].plot(steps, [s.effects[i] for s in tl.steps], color=colors[i], linewidth=1.2,
                     **_style(i))
    axes[3].axhline(0.0, color="0.6", linewidth=0.6)
    axes[3].set_ylabel("effect: MSE rise\nwithout the cell", fontsize=LABEL_PT)
    axes[3].set_xlabel("training step", fontsize=LABEL_PT)
    circuit = "its minimal circuit" if tl.final_mechanism == NONE else "its cells"
    first = "never" if tl.first_faithful is None else f"from step {tl.first_faithful}"
    fig.suptitle(title or f"{tl.run}: final mechanism {tl.final_mechanism} ({circuit}); "
                          f"faithful {first}", fontsize=TITLE_PT)
    fig.tight_layout()
    return fig
