"""Train a sweep's unsolved runs on for more steps, each in a copy of its own, and name what the
ones that solve learned.

Copies the runs of the sweep folder SWEEP whose names start with ``--prefix`` and that did not
reach its solve MSE (``sweep.jsonl``), the first ``--limit`` of them in grid order, into OUT (with
their checkpoints; the sweep's own folders are not touched) and trains each on to ``--steps``
steps (``invperm train --resume DIR --steps N``, ``--workers`` at a time; with a constant learning
rate, the adam recipe's, that is the run trained that long from the start). Every copy that
reaches the solve MSE is analysed as the sweep analyses its runs (the ``mechanism`` settings
recorded in ``sweep.jsonl``'s analyses: samples, seed, batches, ablation styles). Writes
``OUT/continued.json``: per run, the step it solved at (or none) and its final MSE, and the
mechanism named. Resumable: a copy already trained to ``--steps`` or analysed is not redone. OUT
is never in the checkout's assets/ (``make census-standard`` copies continued.json there).

    python analyses/continue_unsolved.py runs/census_standard runs/standard_scratch_long \\
        --prefix scratch_d10_n_heads1_ --steps 5000 --limit 8
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import in_assets
from tqdm import tqdm

from invperm_interp.runs.directory import RunDir
from invperm_interp.sweep.collect import read_sweep

DROPPED = ("mechanism.json", "analysis.json", "report.html")  # analyses of the weights copied


def unsolved(records: list[dict], prefix: str, limit: int) -> list[dict]:
    """The first ``limit`` of a sweep's ``records``, in grid order, of finished runs named
    ``prefix…`` that did not reach the sweep's solve MSE."""
    return [r for r in records if r["name"].startswith(prefix)
            and r["status"] in ("finished", "stopped") and r["steps_to_solve"] is None][:limit]


def settings_of(records: list[dict]) -> dict:
    """The sweep's analysis settings, read off its records (every analysed run has the same)."""
    from invperm_interp.analysis.sweep_record import STYLES, SweepRecord

    analysed = [r["analysis"] for r in records if r.get("analysis")]
    if not analysed:
        raise ValueError("the sweep's runs carry no mechanism records: nothing says how to analyse")
    a = SweepRecord.from_dict(analysed[0])
    return {"samples": a.samples, "seed": a.seed, "batches": a.batches,
            **{f"{style}_ablation": style in a.under for style in STYLES}}


def copy_run(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` (once), without the analyses of its old weights."""
    if target.exists():
        return
    shutil.copytree(source, target)
    for name in DROPPED:
        (target / name).unlink(missing_ok=True)


def train_on(run: Path, steps: int) -> None:
    metrics = RunDir(run).read_metrics()
    if metrics and (metrics[-1].step >= steps or metrics[-1].stopped):
        return  # trained to the end already, or stopped early (solved) on the way
    subprocess.run([sys.executable, "-m", "invperm_interp.cli", "train", "--resume", str(run),
                    "--steps", str(steps), "--no-progress"], check=True,
                   stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path, help="a sweep folder (holds sweep.jsonl)")
    parser.add_argument("out", type=Path, help="the folder the copies train in")
    parser.add_argument("--prefix", default="", help="only runs whose names start with this")
    parser.add_argument("--steps", type=int, required=True, help="train each copy on to this step")
    parser.add_argument("--limit", type=int, default=8, help="at most this many runs")
    parser.add_argument("--workers", type=int, default=2, help="runs trained at a time")
    args = parser.parse_args(argv)
    from invperm_interp.sweep.tasks import write_analysis

    try:
        if in_assets(args.out):
            raise ValueError(f"out: {args.out} is in assets/: the copies train elsewhere (copy "
                             "OUT/continued.json into assets/ after)")
        records = [r for _, r in read_sweep(args.sweep)]
        settings = settings_of(records)
        chosen = unsolved(records, args.prefix, args.limit)
        if not chosen:
            raise ValueError(f"no unsolved finished run named {args.prefix!r}… in {args.sweep}")
        short = [r for r in chosen if r["train"]["steps"] >= args.steps]
        if short:
            raise ValueError(f"--steps must exceed the runs' own steps, got {args.steps} for "
                             f"{short[0]['name']} (trained to {short[0]['train']['steps']})")
    except ValueError as err:
        print(f"continue_unsolved: {err}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for r in chosen:
        copy_run(args.sweep / r["name"], args.out / r["name"])
    progress = tqdm(total=len(chosen), desc="runs trained on", unit="run")
    try:
        with ThreadPoolExecutor(args.workers) as pool:  # each train checkpoints on Ctrl-C
            for _ in pool.map(lambda r: train_on(args.out / r["name"], args.steps), chosen):
                progress.update()
    except (KeyboardInterrupt, subprocess.CalledProcessError) as err:
        progress.close()
        print(f"continue_unsolved: stopped ({type(err).__name__}) after {progress.n} of "
              f"{len(chosen)} runs; the copies keep their checkpoints: rerun the same command to "
              "resume", file=sys.stderr)
        return 130 if isinstance(err, KeyboardInterrupt) else 1
    progress.close()
    rows = []
    for r in chosen:
        run = RunDir(args.out / r["name"])
        metrics = run.read_metrics()
        solved = next((m.step for m in metrics if m.mse < r["solve_mse"]), None)
        record = write_analysis(run.path, **settings) if solved is not None else None
        rows.append({"run": r["name"], "seed": r["train"]["seed"], "steps": metrics[-1].step,
                     "solved_at": solved, "final_mse": metrics[-1].mse,
                     "mechanism": str(record.answer) if record else None,
                     "minimal_faithful": record.mechanism.minimal.faithful if record else None,
                     "minimal_size": record.mechanism.minimal.size if record else None})
        print(f"{r['name']}: " + (f"solved at step {solved}, named {rows[-1]['mechanism']}"
                                  if solved is not None else
                                  f"not solved by step {metrics[-1].step} (MSE {metrics[-1].mse:.3g})"))
    summary = {"sweep": str(args.sweep), "prefix": args.prefix, "steps": args.steps,
               "first_steps": chosen[0]["train"]["steps"], "settings": settings, "runs": rows,
               "solved": sum(r["solved_at"] is not None for r in rows)}
    (args.out / "continued.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{summary['solved']} of {len(rows)} solved by step {args.steps}; wrote "
          f"{args.out / 'continued.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
