"""Thread count under contention: steps/s of ``train`` for each candidate, with a CPU hog beside it.

A shared machine is the normal case for this tool, so every candidate runs twice per round: alone
and with ``--hogs`` busy-looping processes started beside it (what other users' jobs do). Each run
is its own process; candidates alternate within a round so machine noise hits them alike. Reports
steps/s and the median and 95th-percentile step time (a second thread waiting on a busy core shows
up as long stalls). The machine's load average is printed first: report it with the numbers.
Usage: python benchmarks/threads.py [--threads 1 2] [--steps 200] [--rounds 2] [--hogs 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time


def hog() -> None:  # pragma: no cover - a busy loop until killed
    while True:
        pass


def worker(threads: int | None, steps: int, batch: int) -> dict:
    """Time each step of the bidirectional d = 10 model's training loop (``train``'s own step)."""
    import torch

    from invperm_interp import Layout, ModelConfig
    from invperm_interp.config import TrainConfig
    from invperm_interp.training.single import train

    if threads is not None:
        torch.set_num_threads(threads)
    cfg = ModelConfig(Layout.plain(10), attention_dir="bidirectional")
    times: list[float] = []
    import invperm_interp.training.trainer as trainer_mod

    original = trainer_mod.sample_batch

    def timed(*args, **kwargs):  # called once per step: the interval between calls is one step
        times.append(time.perf_counter())
        return original(*args, **kwargs)

    trainer_mod.sample_batch = timed
    tc = TrainConfig(steps=steps + 10, batch_size=batch, eval_every=10**6, eval_size=256,
                     device="cpu", threads=threads if threads is not None else torch.get_num_threads())
    train(cfg, tc, progress=False)
    steps_s = [b - a for a, b in zip(times[10:], times[11:])]  # after 10 warm-up steps
    return {"threads": threads, "steps_per_s": len(steps_s) / sum(steps_s),
            "median_ms": 1e3 * statistics.median(steps_s),
            "p95_ms": 1e3 * sorted(steps_s)[int(0.95 * len(steps_s))]}


def measure(threads: int, steps: int, batch: int, hogs: int) -> dict:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=hog, daemon=True) for _ in range(hogs)]
    for p in procs:
        p.start()
    try:
        out = subprocess.run([sys.executable, __file__, "--worker", str(threads), "--steps",
                              str(steps), "--batch", str(batch)], capture_output=True, text=True,
                             check=True)
    finally:
        for p in procs:
            p.kill()
            p.join()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hogs", type=int, default=1)
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.steps, args.batch)))
        return
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} before the runs; "
          f"d = 10, batch {args.batch}, {args.steps} steps per run")
    results: dict[tuple[int, int], list[dict]] = {}
    for _ in range(args.rounds):
        for hogs in (0, args.hogs):
            for threads in args.threads:
                results.setdefault((threads, hogs), []).append(
                    measure(threads, args.steps, args.batch, hogs))
    print(f"{'threads':>7} {'hogs':>4} {'steps/s (each round)':>24} {'median ms':>9} {'p95 ms':>7}")
    for (threads, hogs), rows in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rates = " ".join(f"{r['steps_per_s']:.1f}" for r in rows)
        print(f"{threads:>7} {hogs:>4} {rates:>24} {statistics.median(r['median_ms'] for r in rows):>9.1f}"
              f" {max(r['p95_ms'] for r in rows):>7.1f}")
    print(f"load average {os.getloadavg()[0]:.1f} after the runs")


if __name__ == "__main__":
    main()
