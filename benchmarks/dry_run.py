"""Wall time of ``invperm sweep G --dry-run`` as a tiny grid's seed count grows, side by side.

One grid (bidirectional d = 2, 20 steps at batch 16, as tests/helpers.py's ``tiny_grid_text``) at
each of ``--seeds`` (default 10, 1,000 and 10,001), each dry run a fresh process as a user starts
it (torch's own thread count: its tiny forwards spin on busy cores; the tree byte-compiled first,
as installed); nothing trains. Prints each time and its ratio to the smallest grid's: runs that
differ only by their seed share one memory estimate, so the time should barely grow (the goal:
10,001 runs in 10 s at most; a dry run of 500 seeds took 232 s when every run counted its training
step's memory with two forwards of its own).
Usage: python benchmarks/dry_run.py [--seeds 10 1000 10001] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analyze import compile_tree  # benchmarks/analyze.py

SRC = Path(__file__).resolve().parent.parent / "src"
GRID = """name = "tiny"
seeds = {seeds}
[model]
d = 2
attention_dir = "bidirectional"
[train]
steps = 20
batch_size = 16
eval_every = 5
eval_size = 32
checkpoint_every = 10
device = "cpu"
lr = 0.05
"""


def measure(seeds: int) -> float:
    """Wall seconds of one ``invperm sweep GRID --dry-run`` process over ``seeds`` seeds."""
    with tempfile.TemporaryDirectory() as tmp:
        grid = Path(tmp) / "tiny.toml"
        grid.write_text(GRID.format(seeds=seeds))
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "invperm_interp.cli", "sweep", str(grid),
                               "--dry-run", "--out", str(Path(tmp) / "out")], env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(f"the dry run of {seeds} seeds failed: {done.stderr[-2000:]}")
        return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[10, 1000, 10001])
    parser.add_argument("--repeats", type=int, default=1, help="the best of this many")
    args = parser.parse_args()
    compile_tree(SRC)
    print(f"invperm sweep --dry-run of a tiny grid, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}")
    best = {seeds: min(measure(seeds) for _ in range(args.repeats)) for seeds in args.seeds}
    first = best[args.seeds[0]]
    for seeds, wall in best.items():
        print(f"  {seeds:>7,} seeds: {wall:6.2f} s ({wall / first:.2f}x the {args.seeds[0]:,}-seed grid)")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
