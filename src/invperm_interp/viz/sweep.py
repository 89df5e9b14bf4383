"""Steps to solve across a sweep: one marker per run, seeds told apart, unsolved runs apart.

A run that never reached the target has no "steps to solve"; drawing it at its step budget would read
as a value. Unsolved runs go in a strip above the plot, labelled with the budget, instead.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from .heatmaps import LABEL_PT, TITLE_PT  # noqa: E402

SEED_MARKERS = "o^sDvP*Xph<>"
# The width around each d tick that its runs spread over (groups side by side, seeds within a
# group): under half the tick spacing, so every marker lies nearer its own d than the midpoint.
SPAN = 0.44


def plot_sweep(rows: list[dict], target: float = 1e-3, title: str = "",
               x_label: str = "d (task size)") -> Figure:
    """Steps to MSE < ``target`` against ``d``, one colour per ``group`` and one marker per seed.

    ``rows``: dicts with ``group`` (e.g. the model kind), ``d`` (or any value to place runs by,
    named by ``x_label``), ``seed``, ``steps_to_solve`` (``None``: not solved) and ``steps`` (the
    run's length). Groups sit side by side at each ``d`` and seeds are spread within a group, so no
    two markers overlap, all within ``SPAN / 2`` of their tick; only ``d`` values with runs get a
    tick.
    """
    if not rows:
        raise ValueError("rows must hold at least one run")
    groups = sorted({r["group"] for r in rows}, key=str)
    ds = sorted({r["d"] for r in rows}, key=lambda v: (not isinstance(v, (int, float)), v
                                                        if isinstance(v, (int, float)) else str(v)))
    seeds = sorted({r["seed"] for r in rows}, key=str)
    unsolved = [r for r in rows if r.get("steps_to_solve") is None]
    width_in = max(5.5, 1.1 * len(ds) + 2.5)
    if unsolved:  # a strip on top for them: they have no value to plot
        fig, (top, ax) = plt.subplots(2, 1, sharex=True, figsize=(width_in, 3.9),
                                      gridspec_kw={"height_ratios": [1, 5.5], "hspace": 0.06})
    else:
        fig, ax = plt.subplots(figsize=(width_in, 3.4))
        top = None
    width = SPAN / len(groups)
    for gi, group in enumerate(groups):
        color = f"C{gi}"
        for si, seed in enumerate(seeds):
            spread = width * 0.8 * ((si + 0.5) / len(seeds) - 0.5)
            for r in rows:
                if r["group"] != group or r["seed"] != seed:
                    continue
                x = ds.index(r["d"]) + (gi - (len(groups) - 1) / 2) * width + spread
                marker = SEED_MARKERS[si % len(SEED_MARKERS)]
                if r.get("steps_to_solve") is None:
                    top.scatter(x, 0.5, marker=marker, s=34, facecolors="none", edgecolors=color,
                                linewidths=1.2)
                else:
                    ax.scatter(x, r["steps_to_solve"], marker=marker, s=34, color=color,
                               edgecolors="white", linewidths=0.5)
    if top is not None:
        budgets = sorted({r.get("steps") for r in unsolved if r.get("steps")})
        budget = f" in {', '.join(map(str, budgets))} steps" if budgets else ""
        top.set_yticks([0.5], [f"not solved{budget}"], fontsize=LABEL_PT)
        top.set_ylim(0, 1)
        top.tick_params(axis="x", length=0)
        top.set_facecolor("#f4f4f4")
    ax.set_xticks(range(len(ds)), [str(d) for d in ds], fontsize=LABEL_PT)
    ax.set_xlim(-0.5, len(ds) - 0.5)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(x_label, fontsize=LABEL_PT)
    ax.set_ylabel(f"first eval step with MSE < {target:g}", fontsize=LABEL_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.grid(axis="y", alpha=0.3)
    handles = [Line2D([], [], linestyle="", marker="s", color=f"C{gi}", label=str(g))
               for gi, g in enumerate(groups)]
    handles += [Line2D([], [], linestyle="", marker=SEED_MARKERS[si % len(SEED_MARKERS)],
                       color="#555", label=f"seed {seed}") for si, seed in enumerate(seeds)]
    if top is not None:
        handles.append(Line2D([], [], linestyle="", marker="o", markerfacecolor="none",
                              color="#555", label="hollow: not solved"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=LABEL_PT,
               frameon=False)
    (top or ax).set_title(title, fontsize=TITLE_PT)
    fig.subplots_adjust(left=0.2, right=0.98)
    return fig
