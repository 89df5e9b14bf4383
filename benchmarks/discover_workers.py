"""`invperm discover` over a folder of runs in one process against ``--workers`` processes.

Both runs measure the same runs, each from a fresh interpreter (``--quiet``; the sweep's recorded
verdicts reused as the command does), one after the other in this script, so their ratio is
measured side by side under the same load. The table each prints is compared: the processes must
not change the result.

    python benchmarks/discover_workers.py runs/discovery_shapes [--workers 2] [--limit 16]

``--limit N``: N of the runs, spread evenly over their sorted names so that every shape is in
(copied, less their checkpoints, into a temporary folder).
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


def timed(folder: Path, workers: int) -> tuple[float, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "invperm_interp.cli", "discover", str(folder),
                           "--quiet", "--workers", str(workers), "--threads", "1"],
                          capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - start, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    runs = sorted(p for p in args.dir.iterdir() if (p / "final.safetensors").is_file())
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir
        if args.limit:
            folder = Path(tmp) / "runs"
            folder.mkdir()
            runs = [runs[i * len(runs) // args.limit] for i in range(min(args.limit, len(runs)))]
            for run in runs:
                shutil.copytree(run, folder / run.name, ignore=shutil.ignore_patterns("checkpoints"))
        one, table_one = timed(folder, 1)
        many, table_many = timed(folder, args.workers)
    print(f"{len(runs)} runs of {args.dir}, on {os.cpu_count()} cores")
    print(f"one process:            {one:7.1f} s")
    print(f"{args.workers} worker processes:   {many:7.1f} s   ({one / many:.2f}x faster)")
    print(f"the same table: {table_one == table_many}")
    return 0 if table_one == table_many else 1


if __name__ == "__main__":
    sys.exit(main())
