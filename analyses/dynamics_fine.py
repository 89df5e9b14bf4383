"""The dynamics at 5 steps: each run's transition trained again from its checkpoints and analysed
every 5 steps, so that leads of one or two 25-step checkpoints are measured, not guessed.

Reads the runs of analyses/grids/dynamics.toml (``runs/dynamics``) and their timelines
(``analyses/dynamics.py``, cached as ``timeline.json``). Per run, the window from 100 steps before
it leaves the plateau to 50 steps after its drop (both as the 25-step evaluations saw them) is
trained again from the checkpoint at its start (``training.replay``: on the machine that trained
it, bit for bit; the record counts the stored checkpoints met identically) and, every 5 steps
(every 10 or more in a window longer than 400 steps), evaluated on the run's held-out batch and
analysed against the final circuit (``analysis.timeline.refine``, cached as ``timeline_fine.json``).
Every time of ``analyses/dynamics.py`` (leaving the plateau, the drop, a cell forming, the progress
measures' leads) is then read again on the finer timeline, with a 95% interval for each median
over runs (order statistics), and set beside its 25-step value: dynamics_fine.{json,md,png,svg}
next to the runs (the sweep folder), or into ``--out DIR``, or into the checkout's assets/ with
``--update-assets`` (as ``make dynamics`` does).

Run: python analyses/dynamics_fine.py runs/dynamics [--every 5] [--update-assets]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from common import add_output_arguments, output, output_folder, refuse  # noqa: E402
from dynamics import (  # noqa: E402
    KINDS,
    cached_timeline,
    faithful_after_drop,
    formed,
    legend_names,
    model_panels,
    summarise,
)
from tqdm.auto import tqdm  # noqa: E402

from invperm_interp.analysis.timeline import Timeline, refine  # noqa: E402
from invperm_interp.runs.checkpoint import atomic_write  # noqa: E402
from invperm_interp.runs.directory import RunDir  # noqa: E402
from invperm_interp.viz.heatmaps import save_figures  # noqa: E402

BEFORE, AFTER = 100, 50  # the window: steps before leaving the plateau and after the drop
LONGEST = 400  # a longer window is analysed every k·5 steps, at most 80 steps per run
MIN_RUNS = 3  # a (model, mechanism) group with fewer runs is listed per run only


def window(run: dict, stored: list[int], final: int, every: int) -> tuple[int, int, int] | None:
    """``(start, end, every)`` of one run's replay: from its last stored checkpoint at or before
    ``leave - BEFORE`` to ``drop + AFTER`` (at most its final step)."""
    if run["leave"] is None or run["drop"] is None:
        return None
    before = [s for s in stored if s <= run["leave"] - BEFORE] or stored[:1]
    start, end = before[-1], min(run["drop"] + AFTER, final)
    if end <= start:
        return None
    return start, end, every * max(1, math.ceil((end - start) / LONGEST))


def fine_timeline(run_dir: Path, tl: Timeline, span: tuple[int, int, int]) -> tuple[Timeline, dict]:
    """The refined timeline and its replay's record, from ``timeline_fine.json`` when it was made
    over the same window."""
    path = run_dir / "timeline_fine.json"
    start, end, every = span
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("window") == [start, end, every]:
            return Timeline.from_dict(data), data["replay"]
    fine, record = refine(tl, run_dir, start, end, every)
    replay = {"compared": record.compared, "identical": record.identical,
              "largest_difference": record.largest_difference}
    # atomic: a run stopped while writing keeps no torn cache
    atomic_write(path, (json.dumps({**fine.to_dict(), "window": [start, end, every],
                                    "replay": replay}) + "\n").encode())
    return fine, replay


def median_interval(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """The median and a distribution-free 95% interval for it: the order statistics ``x_(k)`` and
    ``x_(n+1-k)`` with ``P(Binomial(n, 1/2) < k) <= 0.025`` (no interval below 6 values)."""
    values = sorted(v for v in values if v is not None)
    n = len(values)
    if not n:
        return None, None, None
    middle = statistics.median(values)
    k, below = 0, 0.0
    while True:  # the largest k with P(B < k) <= 0.025
        below_next = below + math.comb(n, k) / 2 ** n
        if below_next > 0.025:
            break
        below, k = below_next, k + 1
    if k == 0:
        return middle, None, None
    return middle, values[k - 1], values[n - k]


MEASURES = {  # name → per run, from a summarise() row
    "leave plateau": lambda r: r["leave"],
    "drop": lambda r: r["drop"],
    "β progress 0.5: lead on drop": lambda r: r["beta_half_lead"],
    "circuit progress 0.5: lead on drop": lambda r: r["circuit_half_lead"],
    "β progress 0.5 - leave plateau": lambda r: None if r["beta_half_lead"] is None or r["leave"] is None
    else r["drop"] - r["beta_half_lead"] - r["leave"],
    "β progress 0.1: lead on leaving": lambda r: r["beta_tenth_lead"],
    "first cell formed - drop": lambda r: min(formed(r)) - r["drop"] if formed(r) and r["drop"] is not None
    else None,
    "cells' formation spread": lambda r: max(formed(r)) - min(formed(r)) if formed(r) else None,
    "turns faithful - drop": faithful_after_drop,
}


def table(coarse: list[dict], fine: list[dict]) -> list[dict]:
    """Per (model, mechanism) with ``MIN_RUNS`` runs or more and per measure: the 25-step median,
    the 5-step median with its interval, and the runs where the measure is > 0 and = 0 at 5 steps."""
    rows = []
    groups = Counter((r["kind"], r["mechanism"]) for r in fine)
    for (kind, name), count in sorted(groups.items(), key=lambda g: (g[0][0], -g[1])):
        if count < MIN_RUNS:
            continue
        mine = [(c, f) for c, f in zip(coarse, fine) if f["kind"] == kind and f["mechanism"] == name]
        for measure, get in MEASURES.items():
            at25 = [get(c) for c, _ in mine]
            at5 = [v for v in (get(f) for _, f in mine) if v is not None]
            middle, low, high = median_interval(at5)
            rows.append({"model": kind, "mechanism": name, "runs": count, "measure": measure,
                         "median at 25 steps": median_interval(at25)[0], "median at 5 steps": middle,
                         "95% interval": None if low is None else [low, high],
                         "> 0": f"{sum(v > 0 for v in at5)}/{len(at5)}",
                         "= 0": f"{sum(v == 0 for v in at5)}/{len(at5)}"})
    return rows


def figure(fine: list[dict]):
    """Per model: the eval MSE and the cells' mean β (rescaled) of every run against its steps
    after its drop, at 5-step resolution in the window, one colour per final mechanism (grey: none
    named) as in assets/dynamics.png; a vertical line per mechanism of ``MIN_RUNS`` runs or more at
    the median step where β is half-way."""
    fig, axes, columns = model_panels(fine, 2, 6.4)
    for col, (kind, mine, names, color) in enumerate(columns):
        for r in mine:
            cv, t0, c = r["curves"], r["drop"], color[r["mechanism"]]
            axes[0, col].plot([s - t0 for s in cv["eval_steps"]], cv["eval_mse"], color=c,
                              linewidth=0.6, alpha=0.6)
            axes[1, col].plot([s - t0 for s in cv["steps"]], cv["beta"], color=c, linewidth=0.6,
                              alpha=0.6)
        for name in names:
            leads = [r["beta_half_lead"] for r in mine
                     if r["mechanism"] == name and r["beta_half_lead"] is not None]
            if len(leads) >= MIN_RUNS:
                axes[1, col].axvline(-statistics.median(leads), color=color[name], linestyle="--",
                                     linewidth=1.2)
        axes[0, col].set_yscale("log")
        axes[0, col].set_title(f"{KINDS[kind]} ({len(mine)} runs)", fontsize=10)
        axes[0, col].set_ylabel("eval MSE (every 5 steps)")
        axes[1, col].set_ylabel("cells' mean β, rescaled:\n0 first checkpoint, 1 final")
        axes[1, col].set_xlabel("steps after the drop (MSE < 0.1·d/4), 5-step resolution")
        for ax in axes[:, col]:
            ax.axvline(0, color="0.4", linestyle=":", linewidth=1.0)
            ax.set_xlim(-250, 60)
    handles = [plt.Line2D([], [], color=columns[0][3][n], label=n) for n in legend_names(columns)]
    handles.append(plt.Line2D([], [], color="0.3", linestyle="--",
                              label=f"β half-way, median ({MIN_RUNS}+ runs)"))
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=10,
               frameon=False, title="final mechanism (one colour in every panel)", title_fontsize=10)
    return fig


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return f"[{fmt(v[0])}, {fmt(v[1])}]"
    return f"{v:g}" if isinstance(v, float) else str(v)


def markdown(rows: list[dict], runs: list[dict], replays: list[dict]) -> str:
    compared = sum(r["compared"] for r in replays)
    identical = sum(r["identical"] for r in replays)
    every = Counter(r["window"][2] for r in runs)
    lines = ["# The dynamics at 5 steps", "",
             f"`python analyses/dynamics_fine.py runs/dynamics`: {len(runs)} runs of "
             "analyses/grids/dynamics.toml, each trained again from a stored checkpoint through its "
             f"transition (from {BEFORE} steps before leaving the plateau to {AFTER} after the drop, "
             "as the 25-step evaluations saw them) and, at every step of the window's resolution, "
             "evaluated on the run's held-out batch and analysed against its final circuit on 512 "
             "samples; the rest of each timeline is the 25-step one. Resolution: "
             + ", ".join(f"every {k} steps in {n} runs" for k, n in sorted(every.items()))
             + f". The replays met {identical} of {compared} stored checkpoints in their windows "
             "bit for bit (on the machine that trained them). Times as in assets/dynamics.md; "
             "a median's 95% interval is distribution-free (order statistics; none below 6 runs). "
             "Groups of fewer than 3 runs are left out of the table.", "",
             "| model | mechanism | runs | measure | median at 25 steps | median at 5 steps | "
             "95% interval | > 0 | = 0 |", "|" + " --- |" * 9]
    lines += [f"| {r['model']} | {r['mechanism']} | {r['runs']} | {r['measure']} | "
              f"{fmt(r['median at 25 steps'])} | {fmt(r['median at 5 steps'])} | "
              f"{fmt(r['95% interval'])} | {r['> 0']} | {r['= 0']} |" for r in rows]
    lines += ["", "## Every run", "", "| run | mechanism | window | leave | drop | β 0.5 lead on drop | "
              "β 0.5 - leave | spread |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    spread, after_leave = MEASURES["cells' formation spread"], MEASURES["β progress 0.5 - leave plateau"]
    for r in runs:
        start, end, k = r["window"]
        lines.append(f"| {r['run']} | {r['mechanism']} | {start}–{end} every {k} | {fmt(r['leave'])} "
                     f"| {fmt(r['drop'])} | {fmt(r['beta_half_lead'])} | "
                     f"{fmt(after_leave(r))} | {fmt(spread(r))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the dynamics sweep folder (runs/dynamics)")
    parser.add_argument("--every", type=int, default=5, help="the finest resolution, in steps")
    add_output_arguments(parser, "the sweep folder")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    folder = Path(args.folder)
    try:
        out = output_folder(args, folder)
    except ValueError as err:
        return refuse("dynamics_fine", err)
    done = sorted(p for p in folder.iterdir() if RunDir(p).is_finished
                  and RunDir(p).timeline.is_file()) if folder.is_dir() else []
    if not done:
        return refuse("dynamics_fine", f"folder: {folder} holds no finished run with a timeline: "
                      "expected the sweep folder of analyses/grids/dynamics.toml after "
                      "analyses/dynamics.py")
    coarse, fine, replays = [], [], []
    try:
        for run_dir in tqdm(done, desc="dynamics at 5 steps", unit="run"):
            kind = RunDir(run_dir).read_config()[0].attention_dir
            tl = cached_timeline(run_dir, 1, 40)
            row = summarise(tl, kind)
            stored = [s for s, _ in RunDir(run_dir).checkpoints()]
            span = window(row, stored, tl.steps[-1].step, args.every)
            if span is None:
                continue
            fine_tl, replay = fine_timeline(run_dir, tl, span)
            coarse.append(row)
            fine.append({**summarise(fine_tl, kind), "window": list(span), "replay": replay})
            replays.append(replay)
    except KeyboardInterrupt:
        print(f"interrupted after {len(fine)} of {len(done)} runs; each finished run's timeline "
              "is kept (timeline_fine.json): run the same command to resume", file=sys.stderr)
        raise SystemExit(130) from None
    rows = table(coarse, fine)
    per_run = [{k: v for k, v in r.items() if k != "curves"} for r in fine]
    output(out, "dynamics_fine.json").write_text(json.dumps({"table": rows, "runs": per_run},
                                                            indent=1) + "\n")
    output(out, "dynamics_fine.md").write_text(markdown(rows, fine, replays))
    save_figures(figure(fine), output(out, "dynamics_fine.png"))
    print(f"wrote {out / 'dynamics_fine'}.{{json,md,png,svg}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
