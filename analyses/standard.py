"""Claims (the note's, on standard transformers): causal models sit on the exact floor; where the
note's model can solve, how often and how fast standard models do, and what they learn.

Reads two sweeps (docs/standard.md), each run by `invperm sweep` (resumable):

- analyses/grids/standard.toml (runs/standard): causal standard 2-layer, 1-head models at d = 10,
  attention-only and with LayerNorm and MLPs, d_model 32, 64, 128, reading the P rows (floor d/4)
  or the Y_P rows (floor (d-1)/8), 8 seeds each. Each final model is evaluated on 16,384 fresh
  samples: its MSE − floor, with the standard error of that MSE over samples;
- analyses/grids/standard_long.toml (runs/standard_long): the causal Y_P models of standard.toml,
  2 seeds each, for up to 4,000 steps: how long they take to reach the floor;
- analyses/grids/standard_solve.toml (runs/standard_solve): bidirectional [P; Y_P] reading P and
  causal scratch [P; Y_P; S] reading S, d_model 64, both architectures: solved (MSE < 1e-3) with
  Wilson 95% intervals, the steps to solve, and each solved attention-only run's mechanism named by
  the library's rule through the exact map.

Runs not yet trained are not counted; a floor folder without a finished run is refused. Writes
standard.{json,md,png} next to the floor runs (``--floor``), or into ``--out DIR``, or into the
checkout's assets/ with ``--update-assets`` (as ``make standard`` does). Without the solve runs at
hand, the solve part is the committed assets/standard.json's.
Usage: python analyses/standard.py [--floor runs/standard] [--long runs/standard_long]
                                   [--solve runs/standard_solve] [--out DIR | --update-assets]
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
from census_report import share_text, wilson  # noqa: E402
from common import ASSETS, add_output_arguments, output, output_folder, refuse  # noqa: E402

from invperm_interp.maths.floors import causal_floor  # noqa: E402
from invperm_interp.runs.directory import RunDir  # noqa: E402
from invperm_interp.sweep.grid import load_grid  # noqa: E402
from invperm_interp.sweep.tasks import write_analysis  # noqa: E402
from invperm_interp.task import sample_batch  # noqa: E402
from invperm_interp.training.run import Run  # noqa: E402

GRIDS = Path(__file__).resolve().parent / "grids"
FRESH, FRESH_SEED = 16384, 12345  # the fresh samples each causal run's final MSE is measured on
ANALYSIS = {"samples": 4096, "seed": 12345}  # a solved run's mechanism, as the census names it


def architecture(cfg) -> str:
    return "LayerNorm + MLP" if cfg.layernorm or cfg.d_mlp else "attention-only"


def finished_runs(grid_file: str, out: Path):
    """(job, Run) for every job of the grid whose run has finished, in the grid's order."""
    for job in load_grid(GRIDS / grid_file, allow_large=True).jobs:
        if RunDir(out / job.name).is_finished:
            yield job, Run.load(out / job.name)


@torch.no_grad()
def fresh_mse(run: Run) -> tuple[float, float]:
    """The final model's MSE on ``FRESH`` fresh samples and its standard error over samples."""
    layout = run.model_cfg.layout
    batch = sample_batch(layout, FRESH, torch.Generator().manual_seed(FRESH_SEED))
    out = torch.cat([run.weights(batch.X[i:i + 4096]) for i in range(0, FRESH, 4096)])
    per_sample = ((out.double() - batch.Y.double()) ** 2).sum(-1).mean(-1)  # (n,)
    return per_sample.mean().item(), per_sample.std().item() / FRESH ** 0.5


def floor_rows(out: Path, grid_file: str = "standard.toml") -> list[dict]:
    rows = []
    for job, run in finished_runs(grid_file, out):
        cfg = run.model_cfg
        floor = causal_floor(cfg.layout, cfg.readout)
        mse, se = fresh_mse(run)
        last = run.metrics[-1]
        rows.append({"run": job.name, "readout": cfg.readout, "architecture": architecture(cfg),
                     "d_model": cfg.d_model, "seed": run.train_cfg.seed, "steps": run.step,
                     "stopped": last.stopped, "floor": floor, "fresh_mse": mse,
                     "fresh_se": se, "excess": mse - floor, "eval_mse": last.mse,
                     "curve": [(m.step, m.mse) for m in run.metrics]})
    return rows


def floor_groups(rows: list[dict]) -> list[dict]:
    groups = {}
    for r in rows:
        groups.setdefault((r["readout"], r["architecture"], r["d_model"]), []).append(r)
    table = []
    for (readout, arch, d_model), rs in groups.items():
        excess = [r["excess"] for r in rs]
        table.append({"readout": readout, "architecture": arch, "d_model": d_model, "runs": len(rs),
                      "floor": rs[0]["floor"], "at_floor": sum(r["stopped"] == "causal_floor" for r in rs),
                      "median_steps": statistics.median(r["steps"] for r in rs),
                      "excess_min": min(excess), "excess_median": statistics.median(excess),
                      "excess_max": max(excess),
                      "below_floor": sum(e < 0 for e in excess),
                      "below_by_2se": sum(r["excess"] < -2 * r["fresh_se"] for r in rs),
                      "se_median": statistics.median(r["fresh_se"] for r in rs)})
    return table


def solve_rows(out: Path) -> list[dict]:
    rows = []
    for job, run in finished_runs("standard_solve.toml", out):
        cfg = run.model_cfg
        solved = next((m.step for m in run.metrics if m.mse < 1e-3), None)
        mechanism = None
        if solved is not None and architecture(cfg) == "attention-only":
            mechanism = str(write_analysis(run.dir, **ANALYSIS).answer)  # through the exact map
        rows.append({"run": job.name, "setting": job.variant.split("_")[0],
                     "architecture": architecture(cfg), "d_model": cfg.d_model,
                     "seed": run.train_cfg.seed, "steps": run.step, "solved_at": solved,
                     "final_mse": run.metrics[-1].mse, "mechanism": mechanism,
                     "curve": [(m.step, m.mse) for m in run.metrics]})
    return rows


def solve_groups(rows: list[dict]) -> list[dict]:
    groups = {}
    for r in rows:
        groups.setdefault((r["setting"], r["architecture"]), []).append(r)
    table = []
    for (setting, arch), rs in groups.items():
        steps = [r["solved_at"] for r in rs if r["solved_at"] is not None]
        lo, hi = wilson(len(steps), len(rs))
        names = Counter(r["mechanism"] for r in rs if r["mechanism"] is not None)
        table.append({"setting": setting, "architecture": arch, "runs": len(rs),
                      "solved": len(steps), "solved_low": lo, "solved_high": hi,
                      "solved_text": share_text(len(steps), len(rs)),
                      "steps_to_solve": sorted(steps),
                      "median_steps": statistics.median(steps) if steps else None,
                      "unsolved_final_mse": sorted(r["final_mse"] for r in rs if r["solved_at"] is None),
                      "mechanisms": dict(names.most_common())})
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor", default="runs/standard")
    parser.add_argument("--long", default="runs/standard_long")
    parser.add_argument("--solve", default="runs/standard_solve")
    add_output_arguments(parser, "the --floor folder")
    args = parser.parse_args(argv)
    try:
        out = output_folder(args, Path(args.floor))
    except ValueError as err:
        return refuse("standard", err)
    torch.set_num_threads(1)
    floors = floor_rows(Path(args.floor))
    if not floors:
        return refuse("standard", f"--floor: {args.floor} holds no finished run of "
                      "analyses/grids/standard.toml: expected its sweep folder")
    limits = {job.model_cfg.readout: job.train_cfg.steps
              for job in load_grid(GRIDS / "standard.toml", allow_large=True).jobs}
    result = {"fresh_samples": FRESH, "step_limits": limits, "floor_groups": floor_groups(floors),
              "floor_runs": [{k: v for k, v in r.items() if k != "curve"} for r in floors]}
    longs = floor_rows(Path(args.long), "standard_long.toml") if Path(args.long).is_dir() else []
    if longs:
        jobs = load_grid(GRIDS / "standard_long.toml").jobs
        result.update(long_steps=max(job.train_cfg.steps for job in jobs),
                      long_seeds=len({job.train_cfg.seed for job in jobs}), long_groups=floor_groups(longs),
                      long_runs=[{k: v for k, v in r.items() if k != "curve"} for r in longs])
    if Path(args.solve).is_dir():
        solves = solve_rows(Path(args.solve))
        result.update(solve_groups=solve_groups(solves), solve_from=None,
                      solve_runs=[{k: v for k, v in r.items() if k != "curve"} for r in solves])
    else:  # its runs are not here: the committed asset's solve part, said so on the page
        solves, old = [], json.loads((ASSETS / "standard.json").read_text())
        result.update(solve_groups=old["solve_groups"], solve_runs=old["solve_runs"],
                      solve_from=old.get("solve_from") or "an earlier run of the grid")
        print(f"{args.solve} does not exist: the solve part is the committed assets/standard.json's")
    output(out, "standard.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, out)
    plot(floors, solves, longs, out)
    return 0


def _excess(g: dict) -> str:
    """A group's final MSE above the floor: ``min / median / max``."""
    return f"{g['excess_min']:+.2g} / {g['excess_median']:+.2g} / {g['excess_max']:+.2g}"


def write_markdown(result: dict, out: Path) -> None:
    lines = ["# Standard transformers on the task: the causal floor, over seeds, and what solves", "",
             "Standard 2-layer, 1-head transformers at d = 10 (docs/standard.md), attention-only or "
             "with pre-LayerNorm and ReLU MLPs of width 128, init N(0, 0.1²), Adam lr 1e-2. Produced "
             "by `make standard` (the grids analyses/grids/standard.toml and standard_solve.toml run "
             "by `invperm sweep`, then analyses/standard.py); runs not yet trained are not counted.",
             "", "## Causal models against the exact floor", "",
             "Batch 256, evaluated every 25 steps on 4,096 held-out samples and stopped once three "
             "evaluations in a row lie within 0.1% of the floor (*at floor*; else at "
             + ", ".join(f"{steps:,} steps reading {'Y_P' if r == 'Y' else r}"
                         for r, steps in sorted(result["step_limits"].items())) + "). "
             f"**MSE − floor**: the final model's MSE on {result['fresh_samples']:,} fresh samples "
             "minus the exact floor (d/4 = 2.5 reading P, (d−1)/8 = 1.125 reading Y_P); *below*: "
             "runs under the floor, *by 2 SE*: under it by more than twice the MSE's standard "
             "error over samples.", "",
             "| reads | model | d_model | runs | at floor | median steps | MSE − floor: min / median "
             "/ max | below | by 2 SE | median SE |", "| --- | --- | --- | --- | --- | --- | --- | "
             "--- | --- | --- |"]
    for g in result["floor_groups"]:
        reads = "Y_P" if g["readout"] == "Y" else g["readout"]
        lines.append(f"| {reads} (floor {g['floor']:g}) | {g['architecture']} | {g['d_model']} | "
                     f"{g['runs']} | {g['at_floor']} | {g['median_steps']:g} | {_excess(g)} | "
                     f"{g['below_floor']} | {g['below_by_2se']} | {g['se_median']:.2g} |")
    if result.get("long_groups"):
        lines += ["", "## Reading Y_P with a longer budget", "",
                  f"The Y_P models above again, {result['long_seeds']} seeds each, for up to "
                  f"{result['long_steps']:,} "
                  "steps (evaluated every 50 steps, the same stop rule): *steps to floor* lists the "
                  "step each run stopped at the floor, else its last step and `(not at floor)`.",
                  "", "| reads | model | d_model | runs | at floor | steps to floor | MSE − floor: "
                  "min / median / max | below | median SE |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for g in result["long_groups"]:
            runs = [r for r in result["long_runs"] if r["architecture"] == g["architecture"]]
            steps = ", ".join(f"{r['steps']:,}" if r["stopped"] == "causal_floor"
                              else f"{r['steps']:,} (not at floor)"
                              for r in sorted(runs, key=lambda r: r["seed"]))
            lines.append(f"| Y_P (floor {g['floor']:g}) | {g['architecture']} | {g['d_model']} | "
                         f"{g['runs']} | {g['at_floor']} | {steps} | {_excess(g)} | "
                         f"{g['below_floor']} | {g['se_median']:.2g} |")
    lines += ["", "## Where the note's model can solve", "",
              "d_model 64, the adam recipe (batch 1024), evaluated every 50 steps on 1,024 held-out "
              "samples, stopped at the first evaluation with MSE < 1e-3 (*solved*, Wilson 95% "
              "interval) or at 800 steps. The mechanism of a solved attention-only run is named "
              "by the library's rule on the disentangled model its weights map to exactly (4,096 "
              "samples); models with LayerNorm or MLPs have no exact map."
              + (f" This part is taken from {result['solve_from']} (its runs were not at hand "
                 "when the page was written)." if result["solve_from"] else ""), "",
              "| setting | model | runs | solved | steps to solve | final MSE of the others | "
              "mechanisms |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for g in result["solve_groups"]:
        steps = ", ".join(str(s) for s in g["steps_to_solve"]) or "—"
        others = ", ".join(f"{m:.3g}" for m in g["unsolved_final_mse"]) or "—"
        names = ", ".join(f"{k}: {v}" for k, v in g["mechanisms"].items()) or "—"
        lines.append(f"| {g['setting']} | {g['architecture']} | {g['runs']} | {g['solved_text']} | "
                     f"{steps} | {others} | {names} |")
    output(out, "standard.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'standard.json'} and {out / 'standard.md'}")


def plot(floors: list[dict], solves: list[dict], longs: list[dict], out: Path) -> None:
    """Left: each causal run's final MSE above its floor; then (when their runs are at hand) the
    long Y_P runs' evaluation MSE above the floor, and the solve runs' evaluation curves."""
    panels = 1 + bool(longs) + bool(solves)
    fig, axes = plt.subplots(1, panels, figsize=(1 + 5 * panels, 4), squeeze=False)
    left = axes[0, 0]
    labels = sorted({(r["readout"], r["architecture"], r["d_model"]) for r in floors})
    colour = {"attention-only": "C0", "LayerNorm + MLP": "C1"}
    for i, key in enumerate(labels):
        ys = [r["excess"] for r in floors if (r["readout"], r["architecture"], r["d_model"]) == key]
        left.scatter([i] * len(ys), ys, s=12, color=colour[key[1]], label=key[1])
    left.axhline(0, color="k", lw=1, ls="--", label="the exact floor")
    left.set_xticks(range(len(labels)))
    left.set_xticklabels([f"{'Y_P' if r == 'Y' else r}\n{'attn' if a == 'attention-only' else 'LN+MLP'}"
                          f"\n{m}" for r, a, m in labels], fontsize=8)
    left.set_xlabel("read-out rows, model, d_model", fontsize=9)
    left.set_ylabel("final MSE − exact floor (fresh samples)")
    left.set_yscale("symlog", linthresh=1e-3)
    left.set_ylim(top=2 * max(r["excess"] for r in floors))  # the highest dots whole
    left.set_title("causal standard models: MSE above the floor", fontsize=10)
    handles = dict(zip(*reversed(left.get_legend_handles_labels())))
    left.legend(handles.values(), handles.keys(), fontsize=8)
    if longs:
        middle = axes[0, 1]
        for r in longs:
            steps, mse = zip(*r["curve"])
            middle.plot(steps, [m - r["floor"] for m in mse], color=colour[r["architecture"]],
                        alpha=0.8, label=r["architecture"] if r["seed"] == 0 else None)
        middle.axhline(1e-3 * longs[0]["floor"], color="k", lw=1, ls=":",
                       label="at floor: within 0.1%")
        middle.set_yscale("symlog", linthresh=1e-3)  # an evaluation may dip below the floor
        lowest = min(m - r["floor"] for r in longs for _, m in r["curve"])
        middle.set_ylim(bottom=min(0.0, 2 * lowest))
        middle.set_xlabel("step")
        middle.set_ylabel("eval MSE − floor")
        middle.set_title(f"reading Y_P (floor {longs[0]['floor']:g}), longer runs", fontsize=10)
        middle.legend(fontsize=8)
    if solves:
        right, colors = axes[0, panels - 1], {}
        for r in solves:
            key = f"{r['setting']}, {r['architecture']}"
            color = colors.setdefault(key, f"C{len(colors)}")
            steps, mse = zip(*r["curve"])
            right.plot(steps, mse, color=color, alpha=0.8, label=key if r["seed"] == 0 else None)
        right.axhline(1e-3, color="k", lw=1, ls=":", label="solved: MSE < 1e-3")
        right.set_yscale("log")
        right.set_xlabel("step")
        right.set_ylabel("eval MSE")
        right.set_title("bidirectional and scratch, d_model 64", fontsize=10)
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output(out, "standard.png"), dpi=120)
    print(f"wrote {out / 'standard.png'}")


if __name__ == "__main__":
    sys.exit(main())
