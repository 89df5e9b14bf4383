"""Cost of ``invperm analyze`` on a trained d = 10 run: wall time and peak RSS, per source tree.

Each measurement is a fresh ``invperm analyze RUN --out TMP`` process (so peak RSS is its own,
read from ``getrusage(RUSAGE_CHILDREN)`` after it exits); with ``--before SRC`` the same command
runs from another source tree too, interleaved, and the ratios are printed. The run is trained
once (1,500 Adam steps, batch 1024, seed 0: the demo's bidirectional model) if missing.
Usage: python benchmarks/analyze.py [--run runs/bench_analyze] [--before /path/to/other/src]
       [--repeats 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def ensure_run(run_dir: Path, threads: int) -> None:
    if (run_dir / "final.safetensors").is_file():
        return
    from invperm_interp import Layout, ModelConfig
    from invperm_interp.config import TrainConfig
    from invperm_interp.training.single import train

    print(f"training the benchmark run into {run_dir} (once)")
    train(ModelConfig(Layout.plain(10), attention_dir="bidirectional", readout="P"),
          TrainConfig(steps=1500, seed=0, threads=threads, out_dir=str(run_dir)))


def measure(src: Path, run_dir: Path, threads: int) -> tuple[float, float]:
    """``(wall seconds, peak RSS in MiB)`` of one ``invperm analyze`` process from ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "invperm_interp.cli", "analyze", str(run_dir), "--out", out,
               "--threads", str(threads)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:  # ru_maxrss is the max over all children so far: run the biggest first
        print("  (peak RSS not above an earlier child's: read it as 'at most')")
    return wall, peak / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="runs/bench_analyze")
    parser.add_argument("--before", type=Path, help="another source tree to compare against")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    run_dir = Path(args.run)
    ensure_run(run_dir, args.threads)
    trees = {"before": args.before, "this tree": SRC} if args.before else {"this tree": SRC}
    walls: dict[str, list[float]] = {k: [] for k in trees}
    peaks: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(args.repeats):
        for name, src in trees.items():
            wall, peak = measure(src, run_dir, args.threads)
            walls[name].append(wall)
            peaks[name].append(peak)
            print(f"  {name}: {wall:.1f} s, peak RSS {peak:.0f} MiB")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name in trees:
        print(f"{name:10s} median {statistics.median(walls[name]):.1f} s, "
              f"peak RSS {max(peaks[name]):.0f} MiB")
    if args.before:
        ratio = statistics.median(walls["before"]) / statistics.median(walls["this tree"])
        print(f"before / this tree, wall time: {ratio:.2f}x")


if __name__ == "__main__":
    main()
