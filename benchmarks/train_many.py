"""Many models: throughput of train_many against one-at-a-time train, steps and seconds to solve
against the batch size, and the `make sweep` grid's wall time. Every part measures its candidates
side by side in one run (alternating, each in its own process), on one torch thread per process.

  --part speed   model-steps/s of train_many (vectorised) at 1, 8, 64, 256 instances and of
                 one-at-a-time train, at batch 1024 and 128, d = 10 (bidirectional).
  --part solve   steps and seconds to MSE < 1e-3 (stop_at_mse, eval every 50 steps on 1024
                 samples) against the batch size, bidirectional d = 10, Adam lr 1e-2, SEEDS seeds.
  --part sweep   wall time of analyses/grids/sweep_d.toml run by `invperm sweep` (local, one
                 process per core), against the old one-at-a-time recipe (batch 1024, 3,000 steps)
                 measured on --old-runs of its runs and scaled to the grid.
The machine's load average is printed with every part: report it with the numbers.
Usage: python benchmarks/train_many.py [--part speed solve sweep] [--seeds 8] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
D = 10


def load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)"


def in_process(code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh Python with one torch thread."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


PRELUDE = """
import json, time, torch
torch.set_num_threads(1)
from invperm_interp import Layout, ModelConfig
from invperm_interp.config import TrainConfig
from invperm_interp.training.many import train_many
from invperm_interp.training.single import train
cfg = ModelConfig(Layout.plain(D), attention_dir="bidirectional")
""".replace("(D)", f"({D})")


def speed_many(n: int, batch: int, steps: int) -> float:
    code = PRELUDE + f"""
jobs = [(cfg, TrainConfig(steps={steps}, batch_size={batch}, seed=s, eval_every=10**6,
                          eval_size=64, device="cpu", threads=1)) for s in range({n})]
train_many(jobs, vectorize=True, progress=False)  # warm-up (and the vmap trace)
jobs = [(c, TrainConfig(**{{**t.to_dict(), "steps": {steps}}})) for c, t in jobs]
start = time.perf_counter()
runs = train_many(jobs, vectorize=True, progress=False)
print(json.dumps({{"rate": {n} * {steps} / (time.perf_counter() - start)}}))
"""
    return in_process(code)["rate"]


def speed_single(batch: int, steps: int) -> float:
    code = PRELUDE + f"""
tc = TrainConfig(steps=5, batch_size={batch}, eval_every=10**6, eval_size=64, device="cpu")
train(cfg, tc, progress=False)
start = time.perf_counter()
train(cfg, TrainConfig(**{{**tc.to_dict(), "steps": {steps}}}), progress=False)
print(json.dumps({{"rate": {steps} / (time.perf_counter() - start)}}))
"""
    return in_process(code)["rate"]


def part_speed(args) -> None:
    print(f"\n== model-steps/s, d = {D}, one thread; {load()}")
    print(f"{'batch':>5} {'one at a time':>14} " + " ".join(f"{f'many x{n}':>9}" for n in args.instances)
          + "   (per model, relative to one at a time)")
    for batch in (1024, 128):
        steps = max(4, args.steps * 128 // batch)
        single = speed_single(batch, steps)
        # 256 instances at batch 1024 hold ~2.5 GB per activation tensor: GPU only (gpu_check.sh).
        sizes = [n for n in args.instances if n * batch <= 64 * 1024]
        rates = [speed_many(n, batch, max(2, steps // max(1, n // 8))) for n in sizes]
        single_after = speed_single(batch, steps)  # bracket the vectorised runs
        base = (single + single_after) / 2
        skipped = len(args.instances) - len(rates)
        print(f"{batch:>5} {base:>14.1f} " + " ".join(f"{r:>9.1f}" for r in rates)
              + f"{'GPU only':>10}" * skipped
              + "   " + " ".join(f"{r / base:.2f}" for r in rates), flush=True)
    print("GPU only: over 64k samples per step (2.5 GB per activation tensor at 256 x 1024); "
          "benchmarks/gpu_check.sh measures it")
    print(load())


def solve_once(batch: int, seed: int) -> dict:
    code = PRELUDE + f"""
tc = TrainConfig(steps=6000, batch_size={batch}, seed={seed}, eval_every=50, eval_size=1024,
                 device="cpu", stop_at_mse=1e-3)
start = time.perf_counter()
run = train(cfg, tc, progress=False)
m = run.final_metrics
print(json.dumps({{"step": run.step if m.stopped else None, "seconds": time.perf_counter() - start,
                  "train_seconds": m.wall_time}}))
"""
    return in_process(code)


def part_solve(args) -> None:
    print(f"\n== steps and seconds to MSE < 1e-3 against the batch size (bidirectional d = {D}, "
          f"Adam lr 1e-2, eval every 50 steps); {load()}")
    results: dict[int, list[dict]] = {b: [] for b in args.batches}
    for seed in range(args.seeds):
        for batch in args.batches:
            if seed < (args.seeds if batch <= 256 else args.big_seeds):
                results[batch].append(solve_once(batch, seed))
                r = results[batch][-1]
                print(f"   batch {batch:>4} seed {seed}: step {r['step']}, {r['train_seconds']:.1f} s",
                      flush=True)
    print(f"{'batch':>5} {'seeds':>5} {'solved':>6} {'median steps':>12} {'steps range':>12} "
          f"{'median s':>8} {'max s':>6}")
    for batch, rows in results.items():
        solved = [r for r in rows if r["step"] is not None]
        steps = [r["step"] for r in solved]
        secs = [r["train_seconds"] for r in solved]
        if solved:
            print(f"{batch:>5} {len(rows):>5} {len(solved):>6} {statistics.median(steps):>12.0f} "
                  f"{f'{min(steps)}-{max(steps)}':>12} {statistics.median(secs):>8.1f} {max(secs):>6.1f}")
    print(load())


def part_sweep(args) -> None:
    grid = ROOT / "analyses" / "grids" / "sweep_d.toml"
    print(f"\n== the make-sweep grid ({grid.relative_to(ROOT)}); {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        # Training only: naming the mechanisms (analysis.mechanism) is timed apart below.
        training_grid = Path(tmp) / "grid.toml"
        training_grid.write_text(grid.read_text().replace("mechanism = true", "mechanism = false"))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "invperm_interp.cli", "sweep", str(training_grid),
                        "--out", str(Path(tmp) / "sweep"), "--quiet"], check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        after = time.perf_counter() - start
        lines = (Path(tmp) / "sweep" / "sweep.jsonl").read_text().splitlines()
        rows = [json.loads(x) for x in lines]
    # Before: the same 20 runs one at a time, batch 1024, 3,000 steps, no early stopping. Timed on
    # --old-runs of them (one bidirectional and one scratch model per d measured in turn) and scaled.
    per_run = []
    for kind, d in [("bidirectional", 10), ("scratch", 10)][: args.old_runs]:
        layout = f"Layout.plain({d})" if kind == "bidirectional" else f"Layout.scratch({d})"
        attn, readout = ("bidirectional", "P") if kind == "bidirectional" else ("causal", "S")
        code = PRELUDE + f"""
mc = ModelConfig({layout}, attention_dir="{attn}", readout="{readout}")
tc = TrainConfig(steps={args.old_steps}, batch_size=1024, eval_size=2048, device="cpu")
start = time.perf_counter()
train(mc, tc, progress=False)
print(json.dumps({{"seconds": (time.perf_counter() - start) * 3000 / {args.old_steps}}}))
"""
        per_run.append(in_process(code)["seconds"])
    before = statistics.mean(per_run) * 20
    print(f"after: {len(lines)} runs in {after:.0f} s ({after / 60:.1f} min) with `invperm sweep` "
          "(training only)")
    for r in rows:
        print(f"   {r['name']:24s} {r['status']:9s} step {r['step']:>5} solved at {r['steps_to_solve']}")
    print(f"before (estimated): {before:.0f} s ({before / 60:.1f} min) = 20 runs x "
          f"{statistics.mean(per_run):.0f} s, one at a time at batch 1024 for 3,000 steps "
          f"(d = 10 runs timed for {args.old_steps} steps and scaled; smaller d are cheaper)")
    print(load())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", nargs="+", default=["speed", "solve", "sweep"],
                        choices=["speed", "solve", "sweep"])
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--steps", type=int, default=30, help="steps per speed measurement at batch 128")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--big-seeds", type=int, default=3, help="seeds at batch 512 and 1024")
    parser.add_argument("--old-runs", type=int, default=2)
    parser.add_argument("--old-steps", type=int, default=200)
    args = parser.parse_args()
    for part in args.part:
        {"speed": part_speed, "solve": part_solve, "sweep": part_sweep}[part](args)


if __name__ == "__main__":
    main()
