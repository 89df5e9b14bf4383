"""A sweep at a glance: steps to solve and the mechanism named at each point of the grid, and what
each group of runs reached, counted.

A run that never reached the target has no "steps to solve"; drawing it at its step budget would read
as a value. Unsolved runs go in a strip above the plot, labelled with the budget, instead. Below the
steps, a bar per grid point (one model kind at one ``d``) stacks its runs by the mechanism the rule
names, so the figure says how the runs solve the task, not only how fast.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .svg import LABEL_PT, TITLE_PT  # noqa: E402

SEED_MARKERS = "o^sDvP*Xph<>"
# The width around each d tick that its runs spread over (groups side by side, seeds within a
# group): under half the tick spacing, so every marker lies nearer its own d than the midpoint.
SPAN = 0.44
#: A run without a mechanism record (the sweep did not analyse it, or not yet).
NOT_ANALYSED = "not analysed"
#: What the medians of steps to solve are, said wherever one is shown.
MEDIAN_IS = ("the middle value of the solved runs' steps, or the mean of the two middle values "
             "when their count is even")
# Colours of the named mechanisms: apart from the steps' group colours (C0 blue, C1 orange, …),
# so a bar's colour is not read as a model.
_NAMED_COLOURS = ("#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#a6761d", "#17becf", "#bcbd22",
                  "#e6ab02", "#8c564b", "#9467bd")


def median_steps(steps: Iterable[int]) -> float | None:
    """The median of ``steps`` as :data:`MEDIAN_IS` says (None for none)."""
    steps = sorted(steps)
    return statistics.median(steps) if steps else None


def _unnamed() -> tuple[str, ...]:
    """The rule's answers that name no construction, then runs without a record: listed last."""
    from ..analysis.verdict import UNNAMED

    return (*UNNAMED, NOT_ANALYSED)


def mechanism_counts(names: Iterable[str | None]) -> list[tuple[str, int]]:
    """``(mechanism, runs)`` for each name among ``names`` (None: :data:`NOT_ANALYSED`), most runs
    first, then by name; the verdicts that name no construction and unanalysed runs last."""
    counts = Counter(NOT_ANALYSED if n is None else n for n in names)
    last = _unnamed()
    return sorted(counts.items(), key=lambda kv: (kv[0] in last, last.index(kv[0])
                                                  if kv[0] in last else 0, -kv[1], kv[0]))


def how_text(runs: list) -> str:
    """``"two_block 5, appendix_b 3, none 2"``: ``runs`` (with a ``mechanism``) per mechanism."""
    return ", ".join(f"{name} {n}" for name, n in mechanism_counts(r.mechanism for r in runs))


GROUP_HEADER = ["model", "runs", "learn the task", "median steps to learn it",
                "mechanism by the rule (runs)"]


def group_rows(rows: list) -> list[list]:
    """One row per model kind (:data:`GROUP_HEADER`) of ``rows`` (``sweep.run_rows.RunRow``: ``group``,
    ``solved``, ``steps_to_solve``, ``mechanism``): runs, how many learn the task, their median
    steps (:data:`MEDIAN_IS`) and the runs per mechanism."""
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    table = []
    for group, runs in groups.items():
        median = median_steps(r.steps_to_solve for r in runs if r.steps_to_solve is not None)
        table.append([group, len(runs), f"{sum(r.solved for r in runs)} of {len(runs)}",
                      "–" if median is None else f"{median:,g}", how_text(runs)])
    return table


def _colours(names: list[str]) -> dict[str, object]:
    """One colour per mechanism name: named ones in order, the unnamed verdicts in greys."""
    greys = dict(zip(_unnamed(), ("#bdbdbd", "#8c8c8c", "white")))
    named = [n for n in names if n not in greys]
    return {**{n: _NAMED_COLOURS[i % len(_NAMED_COLOURS)] for i, n in enumerate(named)},
            **{n: greys[n] for n in names if n in greys}}


def _draw_mechanisms(ax, rows: list[dict], ds: list, groups: list, width: float) -> list[Patch]:
    """Stacked bars of runs per mechanism at each (group, d), under that group's markers; returns
    the legend's handles."""
    order = [name for name, _ in mechanism_counts(r.get("mechanism") for r in rows)]
    colours = _colours(order)
    top = 0
    for gi, group in enumerate(groups):
        for di, d in enumerate(ds):
            here = [r for r in rows if r["group"] == group and r["d"] == d]
            x = di + (gi - (len(groups) - 1) / 2) * width
            bottom = 0
            for name, n in sorted(mechanism_counts(r.get("mechanism") for r in here),
                                  key=lambda kv: order.index(kv[0])):
                ax.bar(x, n, width * 0.8, bottom, color=colours[name], edgecolor=f"C{gi}",
                       linewidth=1.2, hatch="//" if name == NOT_ANALYSED else None)
                bottom += n
            top = max(top, bottom)
    ax.set_ylim(0, top * 1.08)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("runs by\nmechanism", fontsize=LABEL_PT)
    ax.tick_params(labelsize=LABEL_PT)
    return [Patch(facecolor=colours[n], edgecolor="#555", hatch="//" if n == NOT_ANALYSED else None,
                  label=n) for n in order]


def plot_sweep(rows: list[dict], target: float = 1e-3, title: str = "",
               x_label: str = "d (task size)") -> Figure:
    """Steps to MSE < ``target`` against ``d``, one colour per ``group`` and one marker per seed;
    below, when any row names a ``mechanism``, each grid point's runs stacked by mechanism.

    ``rows``: dicts with ``group`` (e.g. the model kind), ``d`` (or any value to place runs by,
    named by ``x_label``), ``seed``, ``steps_to_solve`` (``None``: not solved), ``steps`` (the
    run's length) and optionally ``mechanism`` (the rule's answer; None: not analysed). Groups sit
    side by side at each ``d`` and seeds are spread within a group, so no two markers overlap, all
    within ``SPAN / 2`` of their tick; only ``d`` values with runs get a tick.
    """
    if not rows:
        raise ValueError("rows must hold at least one run")
    groups = sorted({r["group"] for r in rows}, key=str)
    ds = sorted({r["d"] for r in rows}, key=lambda v: (not isinstance(v, (int, float)), v
                                                        if isinstance(v, (int, float)) else str(v)))
    seeds = sorted({r["seed"] for r in rows}, key=str)
    unsolved = [r for r in rows if r.get("steps_to_solve") is None]
    how = any(r.get("mechanism") is not None for r in rows)
    panels = [("strip", 1)] * bool(unsolved) + [("steps", 5.5)] + [("how", 2.6)] * how
    width_in = max(5.5, 1.1 * len(ds) + 2.5)
    fig, axes = plt.subplots(len(panels), 1, sharex=True, squeeze=False,
                             figsize=(width_in, 3.4 + 0.5 * bool(unsolved) + 1.6 * how),
                             gridspec_kw={"height_ratios": [h for _, h in panels], "hspace": 0.08})
    axes = dict(zip((name for name, _ in panels), axes[:, 0]))
    top, ax = axes.get("strip"), axes["steps"]
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
    bottom = axes.get("how", ax)
    bottom.set_xticks(range(len(ds)), [str(d) for d in ds], fontsize=LABEL_PT)
    bottom.set_xlim(-0.5, len(ds) - 0.5)
    bottom.set_xlabel(x_label, fontsize=LABEL_PT)
    ax.set_ylim(bottom=0)
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
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=LABEL_PT,
              frameon=False)
    if how:
        names = _draw_mechanisms(axes["how"], rows, ds, groups, width)
        axes["how"].legend(handles=names, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                           fontsize=LABEL_PT, frameon=False,
                           title="mechanism (bar edge: model)", title_fontsize=LABEL_PT)
    (top or ax).set_title(title, fontsize=TITLE_PT)
    fig.subplots_adjust(left=0.2, right=0.98)
    return fig
