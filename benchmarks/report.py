"""Cost of drawing a run's HTML report (``viz.report.report_html``: its figures, tables and page),
before and after, side by side in one run.

For each source tree (this one and, with ``--before SRC``, another, e.g. a ``git worktree add
/tmp/before main`` checkout's ``src``) a fresh process imports the package from that tree, analyses
the run once on 512 samples (not timed), then times ``report_html`` (best of ``--repeats`` after
one warm-up call) and, inside it, the time spent turning figures into SVG (``viz.html.figure``:
for a matplotlib figure its drawing; a ``viz.svg`` drawing is built before, inside the report).
Times are CPU seconds of the process (``time.process_time``, one torch thread): on a shared,
loaded machine they move far less than wall time. The page's size is reported too. Runs: those
given with ``--run``, else the committed reference runs under tests/data/reference_runs (trained,
with metrics, so every figure of a trained run is drawn).
Usage: python benchmarks/report.py [--before /tmp/before/src] [--run DIR ...] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
REFERENCE_RUNS = sorted(str(p) for p in (ROOT / "tests" / "data" / "reference_runs").iterdir())

WORKER = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from invperm_interp.analysis.record import analyze
from invperm_interp.task import sample_batch
from invperm_interp.training.run import Run
from invperm_interp.viz import html, report

spent = {"figures": 0.0, "count": 0}
def timed(fn):
    def inner(*args, **kwargs):
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent["figures"] += time.process_time() - start
            spent["count"] += 1
    return inner
report.figure = timed(html.figure)

run_dir, repeats = sys.argv[1], int(sys.argv[2])
run = Run.load(run_dir)
model = run.model
batch = sample_batch(model.cfg.layout, 512, torch.Generator().manual_seed(0),
                     dtype=model.cfg.torch_dtype)
record = analyze(model, batch, run_dir)
def draw():
    return report.report_html(model, record, batch,
                              report.ReportContext(metrics=run.metrics, train_cfg=run.train_cfg))
draw()
best, figures, count, size = float("inf"), 0.0, 0, 0
for _ in range(repeats):
    spent.update(figures=0.0, count=0)
    start = time.process_time()
    page = draw()
    total = time.process_time() - start
    if total < best:
        best, figures, count, size = total, spent["figures"], spent["count"], len(page)
print(json.dumps({"total": best, "figures": figures, "count": count, "kib": size / 1024}))
"""


def measure(src: Path, run_dir: str, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", WORKER, run_dir, str(repeats)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another source tree to compare against")
    parser.add_argument("--run", nargs="*", default=[], help="trained run directories")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    trees = {"before": args.before, "after": SRC} if args.before else {"after": SRC}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; CPU seconds, "
          f"best of {args.repeats}")
    print(f"{'run':28s} {'tree':7s} {'report':>8s} {'figures':>8s} {'count':>6s} {'page KiB':>9s}")
    for run in args.run or REFERENCE_RUNS:
        results = {name: measure(src, run, args.repeats) for name, src in trees.items()}
        for name, r in results.items():
            print(f"{Path(run).name:28s} {name:7s} {r['total']:8.3f} {r['figures']:8.3f} "
                  f"{r['count']:6d} {r['kib']:9.0f}")
        if args.before:
            print(f"{'':28s} before / after, report: "
                  f"{results['before']['total'] / results['after']['total']:.2f}x")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
