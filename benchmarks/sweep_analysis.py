"""Cost of a census run's analysis by the sweep (``sweep.tasks.write_analysis`` with the census's
settings: 4,096 samples, three batches, mean and resample ablation), before and after, side by side.

For each source tree (this one and, with ``--before SRC``, another, e.g. a ``git worktree add
/tmp/before HEAD~1`` checkout's ``src``) a fresh process imports the package from that tree, copies
each ``--run`` directory (a finished run) to a temporary folder without its ``mechanism.json`` and
analyses it, timing the process's CPU seconds (``time.process_time``, one torch thread: on a shared
machine they move far less than wall time). The trees alternate run by run, ``--repeats`` times, so
a load change hits both; the record's names are printed beside the times (they must agree).
Usage: python benchmarks/sweep_analysis.py --run runs/census/scratch_d10_seed0 [--before SRC]
       [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

WORKER = r"""
import json, shutil, sys, tempfile, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from invperm_interp.sweep.tasks import write_analysis

run = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    copy = Path(tmp) / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("mechanism.json", "discovery.json",
                                                             "timeline.json", "checkpoints"))
    start = time.process_time()
    record = write_analysis(copy, samples=4096, seed=12345, batches=3, mean_ablation=True,
                            resample_ablation=True)
    cpu = time.process_time() - start
names = [str(a) for a in record.names_by_batch] + [str(record.under[s]) for s in ("mean", "resample")]
print(json.dumps({"cpu": cpu, "names": names}))
"""


def measure(src: Path, run: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", WORKER, run], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", nargs="+", required=True, help="finished run directories")
    parser.add_argument("--before", type=Path, help="another source tree to compare against")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    trees = {"this": SRC, **({"before": args.before} if args.before else {})}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for run in args.run:
        times: dict[str, list[float]] = {name: [] for name in trees}
        names = {}
        for _ in range(args.repeats):
            for name, src in trees.items():
                got = measure(src, run)
                times[name].append(got["cpu"])
                names[name] = got["names"]
        line = "  ".join(f"{name} {statistics.median(t):.1f} CPU s" for name, t in times.items())
        if "before" in times:
            ratio = statistics.median(times["this"]) / statistics.median(times["before"])
            line += f"  ratio this/before {ratio:.2f}"
            line += "  names agree" if names["this"] == names["before"] else "  NAMES DIFFER"
        print(f"{Path(run).name}: {line}  {names['this']}")


if __name__ == "__main__":
    main()
