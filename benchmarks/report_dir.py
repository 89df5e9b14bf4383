"""Cost of ``invperm report DIR`` over a directory of runs, before and after, side by side in one run.

For each source tree (this one and, with ``--before SRC``, another, e.g. a ``git archive main src``
copy) the runs of ``DIR`` are copied to a fresh folder without their ``analysis.json`` and
``report.html`` (so every run is analysed and drawn), and one ``invperm report COPY --workers N``
process runs there; the trees alternate for ``--repeats`` rounds. Reported per tree: the best wall
seconds, the best CPU seconds of the process and its workers (``os.wait4``: every reaped
descendant), and the load average before each round (wall time on a shared machine follows it).
Each tree is byte-compiled first, as an installed package is (``analyze.compile_tree``).
Usage: python benchmarks/report_dir.py DIR [--before /tmp/before/src] [--workers 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analyze import compile_tree  # benchmarks/analyze.py

SRC = Path(__file__).resolve().parent.parent / "src"
DROPPED = ("analysis.json", "report.html", "index.html", "circuitsvis.js")


def measure(src: Path, runs: Path, workers: int) -> tuple[float, float, float]:
    """``(wall s, CPU s, load average)`` of one ``invperm report`` over a fresh copy of ``runs``."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / runs.name
        shutil.copytree(runs, copy, ignore=shutil.ignore_patterns(*DROPPED))
        env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
        load = os.getloadavg()[0]
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "invperm_interp.cli", "report", str(copy),
                                  "--workers", str(workers), "--threads", "1"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        if status:
            raise RuntimeError(f"invperm report {copy} failed ({status})")
        return wall, usage.ru_utime + usage.ru_stime, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a directory of finished runs")
    parser.add_argument("--before", type=Path, help="another source tree to compare against")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    trees = {"before": args.before, "after": SRC} if args.before else {"after": SRC}
    for src in trees.values():  # as installed: no module compiled again in every timed process
        compile_tree(src)
    n = sum(1 for p in args.runs.iterdir() if (p / "config.json").is_file())
    print(f"invperm report over {n} runs of {args.runs}, {args.workers} workers, "
          f"{os.cpu_count()} cores")
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeats):
        for name, src in trees.items():
            wall, cpu, load = measure(src, args.runs, args.workers)
            print(f"  {name:7s} wall {wall:6.1f} s, CPU {cpu:6.1f} s (load average {load:.1f})")
            old = best.get(name, (float("inf"), float("inf")))
            best[name] = (min(old[0], wall), min(old[1], cpu))
    if args.before:
        (bw, bc), (aw, ac) = best["before"], best["after"]
        print(f"  before / after: wall {bw / aw:.2f}x, CPU {bc / ac:.2f}x")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
