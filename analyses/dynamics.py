"""Beyond the note: when, and in what order, each learned circuit forms, counted over seeds.

Reads a sweep folder trained with dense checkpoints (analyses/grids/dynamics.toml: the census's
d = 10 models, a checkpoint every 25 steps until solved) and, per finished run, its timeline
(``analysis.timeline``, cached as ``timeline.json`` in the run directory): the final circuit's
circuit-only score, each cell's fitted β and the rule's name at every checkpoint. Per run it times

- **leaving the plateau**: the first evaluation with MSE < 0.8·d/4 (the baseline d/4 is predicting
  0.5 everywhere, where training sits for hundreds of steps);
- **the drop**: the first evaluation with MSE < 0.1·d/4; **solved**: MSE < 1e-3;
- **faithful**: the first checkpoint at which the final circuit alone is faithful by the rule;
- **each cell forming**: the first checkpoint at which its fitted β reaches half its final value;
- **progress measures**, each normalised to 0 at the first checkpoint and 1 at the final weights:
  the cells' mean β (``beta``) and the loss the final circuit alone recovers against d/4
  (``circuit``); their lead is the drop's step minus the first checkpoint at which the measure
  reaches 0.5 (and the plateau exit's step minus where it reaches 0.1).

Per (model, final mechanism) it writes medians, the cells' order of forming and how many seeds
share it, and a figure of every run aligned at its drop: dynamics.{json,md,png,svg} next to the
runs (the sweep folder), or into ``--out DIR``, or into the checkout's assets/ with
``--update-assets`` (as ``make dynamics`` does). ``--from-json DYNAMICS.json`` rewrites the table
(dynamics.json) and dynamics.md alone from a dynamics.json's per-run rows (the figure needs the
runs' curves), beside that JSON; the committed one in assets/ only with ``--update-assets``.

Run: python analyses/dynamics.py runs/dynamics [--stride 1] [--update-assets]
     python analyses/dynamics.py assets/dynamics.json --from-json --update-assets
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from common import add_output_arguments, output, output_folder, refuse, report_folder  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from invperm_interp.analysis.hypothesis import cell_text  # noqa: E402
from invperm_interp.analysis.timeline import Timeline, timeline  # noqa: E402
from invperm_interp.analysis.verdict import UNNAMED  # noqa: E402
from invperm_interp.runs.directory import RunDir  # noqa: E402
from invperm_interp.viz.heatmaps import save_figures  # noqa: E402

LEAVE, DROP, SOLVED = 0.8, 0.1, 1e-3  # plateau exit and drop: MSE below these times d/4
HALF = 0.5  # a cell has formed when its β reaches this share of its final β
KINDS = {"bidirectional": "bidirectional [P; Y_P], reads P", "causal": "causal scratch [P; Y_P; S], reads S"}
# The named mechanisms' colours (Okabe–Ito, its yellow, hard to see on white, replaced by Tol's
# indigo) with their CIELAB hue angles in degrees. A mechanism has one colour in every panel and the
# figure one legend: :func:`mechanism_colours` gives each name its own colour, chosen so that the
# mechanisms of one model's panel lie far apart in hue. Runs named no construction are grey.
NAMED_COLOURS = {"#D55E00": 56, "#0072B2": 266, "#009E73": 164, "#CC79A7": 345, "#E69F00": 78,
                 "#56B4E9": 251, "#332288": 305}
UNNAMED_COLOUR = "#999999"


def cached_timeline(run_dir: Path, stride: int, most: int) -> Timeline:
    """The run's timeline over every ``stride``-th checkpoint, or fewer so that at most ``most``
    are analysed (a slow run's plateau is long), from ``timeline.json`` when it was made so."""
    stride = max(stride, -(-len(RunDir(run_dir).checkpoints()) // most))
    path = RunDir(run_dir).timeline
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("stride", stride + 1) <= stride:  # as fine or finer
            return Timeline.from_dict(data)
    tl = timeline(run_dir, stride=stride)
    path.write_text(json.dumps({**tl.to_dict(), "stride": stride}) + "\n")
    return tl


def first(steps, values, test):
    return next((s for s, v in zip(steps, values) if test(v)), None)


def progress(values: list[float]) -> list[float]:
    """``values`` rescaled to 0 at the first and 1 at the last (all 0 when they do not move)."""
    span = values[-1] - values[0]
    return [(v - values[0]) / span if abs(span) > 1e-12 else 0.0 for v in values]


def summarise(tl: Timeline, kind: str) -> dict:
    """One run's times (module docstring)."""
    base = tl.baseline
    curve_steps, curve = [c[0] for c in tl.curve], [c[1] for c in tl.curve]
    leave = first(curve_steps, curve, lambda m: m < LEAVE * base)
    drop = first(curve_steps, curve, lambda m: m < DROP * base)
    solved = first(curve_steps, curve, lambda m: m < SOLVED)
    steps = [s.step for s in tl.steps]
    cells = {}
    for i, cell in enumerate(tl.cells):
        final = tl.steps[-1].betas[i]
        formed = first(steps, [s.betas[i] for s in tl.steps],
                       lambda b, f=final: f != 0 and b / f >= HALF)
        cells.setdefault(cell_text(cell), formed)
    beta = progress([statistics.fmean(abs(b) for b in s.betas) for s in tl.steps])
    circuit = progress([base - s.circuit.mse for s in tl.steps])
    out = {"run": tl.run, "kind": kind, "mechanism": tl.final_mechanism,
           "circuit_size": len({c[:4] for c in tl.cells}), "leave": leave, "drop": drop,
           "solved": solved, "faithful": tl.first_faithful, "faithful_since": tl.faithful_since,
           "named": tl.first_named(), "cells_formed": cells,
           "order": order_of(cells), "checkpoints": len(steps),
           "resolution": steps[-2] - steps[-3] if len(steps) > 2 else None}
    for name, measure in (("beta", beta), ("circuit", circuit)):
        half, tenth = first(steps, measure, lambda v: v >= HALF), first(steps, measure, lambda v: v >= 0.1)
        out[f"{name}_half_lead"] = None if drop is None or half is None else drop - half
        out[f"{name}_tenth_lead"] = None if leave is None or tenth is None else leave - tenth
    out["curves"] = {"steps": steps, "beta": beta, "circuit": circuit,
                     "eval_steps": curve_steps, "eval_mse": curve}
    return out


def order_of(formed: dict[str, int | None]) -> str:
    """The cells in the order they formed; cells formed at the same checkpoint share a group."""
    groups: dict[int, list[str]] = {}
    for cell, step in formed.items():
        groups.setdefault(step if step is not None else 10**9, []).append(cell)
    return " → ".join(" + ".join(sorted(groups[s])) for s in sorted(groups))


def faithful_after_drop(run: dict) -> int | None:
    """Steps from the drop to the first checkpoint where the final circuit is faithful."""
    return None if run["faithful"] is None or run["drop"] is None else run["faithful"] - run["drop"]


def formed(run: dict) -> list[int]:
    return [v for v in run["cells_formed"].values() if v is not None]


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def share_text(values, test) -> str:
    values = [v for v in values if v is not None]
    return f"{sum(map(test, values))}/{len(values)}" if values else "-"


def table(runs: list[dict]) -> list[dict]:
    """One row per (model, final mechanism), most runs first."""
    rows = []
    groups = Counter((r["kind"], r["mechanism"]) for r in runs)
    for (kind, name), count in sorted(groups.items(), key=lambda g: (g[0][0], -g[1])):
        mine = [r for r in runs if r["kind"] == kind and r["mechanism"] == name]
        orders = Counter(r["order"] for r in mine)
        top, top_n = orders.most_common(1)[0]
        gap = [faithful_after_drop(r) for r in mine]
        rows.append({
            "model": kind, "mechanism": name, "runs": count,
            "median cells": median(r["circuit_size"] for r in mine),
            "median leave plateau": median(r["leave"] for r in mine),
            "median drop": median(r["drop"] for r in mine),
            "median solved": median(r["solved"] for r in mine),
            "median faithful": median(r["faithful"] for r in mine),
            "first cell formed - drop (median)": median(
                None if r["drop"] is None or not formed(r) else min(formed(r)) - r["drop"] for r in mine),
            "faithful - drop (median)": median(gap),
            "faithful before drop": share_text(gap, lambda g: g < 0),
            "most common order of forming": top if name != "none" else "(circuits differ)",
            "runs with that order": f"{top_n}/{count}" if name != "none" else "-",
            "β progress 0.5: lead on drop (median)": median(r["beta_half_lead"] for r in mine),
            "β lead > 0": share_text([r["beta_half_lead"] for r in mine], lambda v: v > 0),
            "circuit progress 0.5: lead on drop (median)": median(r["circuit_half_lead"] for r in mine),
            "circuit lead > 0": share_text([r["circuit_half_lead"] for r in mine], lambda v: v > 0),
            "β progress 0.1: lead on leaving (median)": median(r["beta_tenth_lead"] for r in mine),
            "β progress 0.5 at or after leaving": share_text(
                [None if r["beta_half_lead"] is None or r["leave"] is None
                 else r["drop"] - r["beta_half_lead"] - r["leave"] for r in mine], lambda v: v >= 0),
            "cells' formation spread (median)": median(
                max(formed(r)) - min(formed(r)) if formed(r) else None for r in mine),
        })
    return rows


def _hue_gap(x: float, y: float) -> float:
    return min(abs(x - y), 360 - abs(x - y))


def mechanism_colours(runs: list[dict]) -> dict[str, str]:
    """One colour per final mechanism of ``runs`` (``kind``, ``mechanism``), the same in every
    model's panel: the unnamed verdicts grey; the named ones, most runs first (then by name), each
    the unused colour of ``NAMED_COLOURS`` farthest in hue from those already given to mechanisms
    of the same model (the first such colour on a tie), so no two names share a colour while the
    palette lasts and each panel's colours lie far apart."""
    counts = Counter(r["mechanism"] for r in runs)
    kinds = {n: {r["kind"] for r in runs if r["mechanism"] == n} for n in counts}
    colours = {n: UNNAMED_COLOUR for n in counts if n in UNNAMED}
    for name in sorted((n for n in counts if n not in UNNAMED), key=lambda n: (-counts[n], n)):
        free = [c for c in NAMED_COLOURS if c not in colours.values()] or list(NAMED_COLOURS)
        mates = [NAMED_COLOURS[c] for n, c in colours.items()
                 if c in NAMED_COLOURS and kinds[n] & kinds[name]]
        colours[name] = max(free, key=lambda c: min((_hue_gap(NAMED_COLOURS[c], h) for h in mates),
                                                    default=360))
    return colours


def model_panels(runs: list[dict], rows: int, height: float):
    """A figure of ``rows`` rows and a column per model (``KINDS``) that has runs, and per column
    ``(model, its runs with a drop, their final mechanisms named first in name order, a colour
    each)``: the colours of :func:`mechanism_colours` over all the columns' runs, so a mechanism
    has the same colour in every column."""
    kinds = [k for k in KINDS if any(r["kind"] == k for r in runs)]
    fig, axes = plt.subplots(rows, len(kinds), figsize=(5.2 * len(kinds), height), squeeze=False,
                             sharex="col")
    drawn = [r for r in runs if r["drop"] is not None]
    colours = mechanism_colours(drawn)
    columns = []
    for kind in kinds:
        mine = [r for r in drawn if r["kind"] == kind]
        names = sorted({r["mechanism"] for r in mine}, key=lambda n: (n in UNNAMED, n))
        columns.append((kind, mine, names, colours))
    return fig, axes, columns


def legend_names(columns) -> list[str]:
    """Every column's mechanisms once, named ones column by column, the unnamed verdicts last."""
    names = [n for _, _, column_names, _ in columns for n in column_names]
    names = list(dict.fromkeys(names))
    return [n for n in names if n not in UNNAMED] + [n for n in names if n in UNNAMED]


#: Under the figure: what the two progress rows' 0 and 1 are, and that a measure is not bounded by them.
PROGRESS_NOTE = ("Rows 2 and 3: each run's measure rescaled between its first checkpoint (0) and its "
                 "final weights (1), not\nbounded by them: above 1 it went past its final value (row "
                 "3: the circuit alone recovered more of the loss\nat that checkpoint than on the "
                 "final weights), below 0 below its start.")


def figure(runs: list[dict]):
    """Per model: the eval MSE, the β progress and the circuit progress of every run, each against
    its steps after its own drop; one colour per final mechanism, the same in every panel, in one
    legend below (grey: none named), dots where it turns faithful. Progress is rescaled between
    the first checkpoint (0) and the final weights (1), not bounded: a circuit that did better at a
    checkpoint than at the end passes 1, which the note under the legend says and, in a panel
    where a line does, a note at the line y = 1."""
    fig, axes, columns = model_panels(runs, 3, 8.4)
    for col, (kind, mine, _names, color) in enumerate(columns):
        for r in mine:
            c, t0 = color[r["mechanism"]], r["drop"]
            cv = r["curves"]
            axes[0, col].plot([s - t0 for s in cv["eval_steps"]], cv["eval_mse"], color=c,
                              linewidth=0.7, alpha=0.6)
            for row, key in ((1, "beta"), (2, "circuit")):
                x = [s - t0 for s in cv["steps"]]
                axes[row, col].plot(x, cv[key], color=c, linewidth=0.7, alpha=0.6)
                if r["faithful"] is not None:
                    i = cv["steps"].index(r["faithful"])
                    axes[row, col].plot(x[i], cv[key][i], "o", color=c, markersize=3)
        axes[0, col].set_yscale("log")
        axes[0, col].set_title(f"{KINDS[kind]} ({len(mine)} runs)", fontsize=10)
        axes[0, col].set_ylabel("eval MSE")
        axes[1, col].set_ylabel("cells' mean β, rescaled:\n0 = first checkpoint,\n1 = final weights")
        axes[2, col].set_ylabel("circuit alone: loss\nrecovered, rescaled:\n0 first, 1 final weights")
        axes[2, col].set_xlabel("steps after the drop (MSE < 0.1·d/4)")
        for ax in axes[:, col]:
            ax.axvline(0, color="0.4", linestyle=":", linewidth=1.0)
            ax.set_xlim(-800, 800)
        for row, key in ((1, "beta"), (2, "circuit")):  # the two ends of the rescaling
            ax = axes[row, col]
            for y in (0.0, 1.0):
                ax.axhline(y, color="0.6", linestyle="--", linewidth=0.6, zorder=0)
            top = max((v for r in mine for s, v in zip(r["curves"]["steps"], r["curves"][key])
                       if -800 <= s - r["drop"] <= 800), default=1.0)
            if top > 1.02:  # a line past its final value: said where it is
                ax.text(0.02, 1.0, "above 1: past the final value",
                        transform=ax.get_yaxis_transform(), ha="left", va="bottom", fontsize=10,
                        color="0.3")
    handles = [plt.Line2D([], [], color=columns[0][3][n], label=n) for n in legend_names(columns)]
    handles.append(plt.Line2D([], [], color="0.3", marker="o", linestyle="", label="turns faithful"))
    fig.tight_layout()
    legend = fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3,
                        fontsize=10, frameon=False, title="final mechanism (one colour in every panel)",
                        title_fontsize=10)
    fig.canvas.draw()  # the legend's height, to set the note under it
    below = legend.get_window_extent().transformed(fig.transFigure.inverted()).y0
    fig.text(0.5, below - 0.005, PROGRESS_NOTE, ha="center", va="top", fontsize=10)
    return fig


def markdown(runs: list[dict], folder_name: str) -> str:
    """dynamics.md from the per-run rows (:func:`summarise`'s, without their curves)."""
    rows = table(runs)
    columns = list(rows[0])
    counts = Counter(r["kind"] for r in runs)
    lines = ["# Dynamics: when and in what order the learned circuits form", "",
             f"Runs: {', '.join(f'{k} {n}' for k, n in sorted(counts.items()))} of the 32 seeds per "
             "model the grid plans (runs not yet trained or analysed are not counted; d = 10, the "
             "census's recipe with a checkpoint every 25 steps until solved: "
             f"analyses/grids/dynamics.toml, `python analyses/dynamics.py {folder_name}`). "
             "Every run is analysed on 512 samples (seed 0) at each checkpoint against the circuit "
             "its final weights implement (`invperm timeline`): the named construction's cells, or "
             "the minimal circuit for 'none'. Steps: leave plateau = first evaluation with MSE < "
             "0.8·d/4; drop = MSE < 0.1·d/4; faithful = the final circuit alone is faithful by the "
             "rule; a cell forms when its β reaches half its final β "
             "(the first to form: where the runs of one final mechanism part ways; spread: the last "
             "cell's step minus the first's); progress measures "
             "rescaled 0 → 1 between the first checkpoint and the final weights, lead = the drop's step "
             "minus the step the measure reaches 0.5 (0.1: against leaving the plateau); whether "
             "β progress reaches 0.5 at or after the run leaves the plateau. Resolution: "
             "evaluations every 25 steps; checkpoints every 25 steps, or every k·25 in a run with "
             "more than 40 (at most 40 analysed per run; `resolution` per run in dynamics.json), "
             "so a lead of 25–50 steps is one or two checkpoints.", "",
             "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    fmt = lambda v: "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines += ["| " + " | ".join(fmt(r[c]) for c in columns) + " |" for r in rows]
    lines += ["", "## Every run", "", "| run | mechanism | leave | drop | faithful | solved | order |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['run']} | {r['mechanism']} | {fmt(r['leave'])} | {fmt(r['drop'])} | "
              f"{fmt(r['faithful'])} | {fmt(r['solved'])} | {r['order']} |" for r in runs]
    return "\n".join(lines) + "\n"


def write(runs: list[dict], folder: Path, out: Path) -> None:
    """``out/dynamics.{json,md,png,svg}`` of the runs of the sweep ``folder``."""
    per_run = [{k: v for k, v in r.items() if k != "curves"} for r in runs]
    output(out, "dynamics.json").write_text(json.dumps({"table": table(runs), "runs": per_run},
                                                       indent=1) + "\n")
    output(out, "dynamics.md").write_text(markdown(runs, folder.name))
    save_figures(figure(runs), output(out, "dynamics.png"))
    print(f"wrote {out / 'dynamics'}.{{json,md,png,svg}}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the sweep folder (runs trained with dense checkpoints), or "
                        "a dynamics.json with --from-json")
    parser.add_argument("--from-json", action="store_true",
                        help="rewrite the table (dynamics.json) and dynamics.md from a dynamics.json")
    parser.add_argument("--stride", type=int, default=1, help="analyse every STRIDE-th checkpoint")
    parser.add_argument("--most", type=int, default=40,
                        help="at most this many checkpoints per run (a larger stride for long runs)")
    parser.add_argument("--cached", action="store_true",
                        help="only the runs whose timeline is already computed (while a sweep runs)")
    add_output_arguments(parser, "the sweep folder, or beside the JSON with --from-json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    folder = Path(args.folder)
    try:
        if args.from_json and args.out is None and not args.update_assets:
            out = report_folder(folder, True, False)  # beside the JSON, refused in assets/
        else:
            out = output_folder(args, folder)
    except ValueError as err:
        return refuse("dynamics", err)
    if args.from_json:
        if not folder.is_file():
            return refuse("dynamics", f"folder: {folder} is no file: expected a dynamics.json with "
                          "--from-json")
        runs = json.loads(folder.read_text())["runs"]
        output(out, "dynamics.json").write_text(json.dumps({"table": table(runs), "runs": runs},
                                                           indent=1) + "\n")
        output(out, "dynamics.md").write_text(markdown(runs, "dynamics"))
        print(f"wrote {out / 'dynamics'}.{{json,md}}")
        return 0
    done = sorted(p for p in folder.iterdir() if RunDir(p).is_finished
                  and (RunDir(p).timeline.is_file() or not args.cached)) if folder.is_dir() else []
    if not done:
        return refuse("dynamics", f"folder: {folder} holds no finished run: expected the sweep "
                      "folder of analyses/grids/dynamics.toml")
    runs = []
    for run_dir in tqdm(done, desc="dynamics: timelines", unit="run"):
        kind = RunDir(run_dir).read_config()[0].attention_dir
        runs.append(summarise(cached_timeline(run_dir, args.stride, args.most), kind))
    write(runs, folder, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
