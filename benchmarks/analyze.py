"""Cost of ``analyze(model, batch)`` per part, before and after, side by side in one run.

For each source tree (this one and, with ``--before SRC``, another, e.g. a ``git worktree add
/tmp/before 54c7916`` checkout's ``src``) a fresh process imports the package from that tree,
times ``analyze`` on 512 samples at d = 10 (best of ``--repeats`` after one warm-up call) and each
part it calls (every function of ``analysis.record`` it looks up, wrapped with a timer), 10
forwards of the model on the same samples, and reports its peak RSS. Times are CPU seconds of the
process (``time.process_time``, one torch thread): on a shared, loaded machine they move far less
than wall time. Models: the trained runs given with ``--run`` (a bidirectional, a causal and a
causal-scratch run), else theorem2 / theorem3 with gauge and noise added (deterministic).
With ``--shapes``, one process times ``analyze`` at d = 10 on theorem2 and theorem3 (gauge and
noise added) built on 2 layers × 1 head and placed on 3 layers × 2 heads (``maths.placement``,
layers 1 and 3, head 1), alternating the two so a load change hits both, and prints the ratio and
the peak RSS beside ``memory.analysis_estimate``, and 10 forwards of each model for scale.
With ``--cli``, each ``--run`` is also analysed by ``invperm analyze RUN`` in a fresh process,
timed against ``python -c "import torch"`` (wall and CPU seconds, peak RSS of each process),
each tree byte-compiled first.
Usage: python benchmarks/analyze.py [--before /tmp/before/src] [--run DIR ...] [--repeats 3] [--cli]
       python benchmarks/analyze.py --shapes [--repeats 3] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from fresh_clone import cpu_name  # benchmarks/fresh_clone.py

SRC = Path(__file__).resolve().parent.parent / "src"
DEFAULT_MODELS = ("theorem2", "theorem3")

WORKER = r"""
import inspect, json, resource, sys, time
import torch
torch.set_num_threads(1)
from invperm_interp.analysis import record
from invperm_interp.task import sample_batch

times = {}
def timed(name, fn):
    def inner(*args, **kwargs):
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            times[name] = times.get(name, 0.0) + time.process_time() - start
    return inner
for name, obj in list(vars(record).items()):
    if name != "analyze" and not name.startswith("_") and callable(obj) and (
            inspect.isfunction(obj) or name == "Tester") and \
            getattr(obj, "__module__", "").startswith("invperm_interp."):
        setattr(record, name, timed(name, obj))

def load(spec):
    if spec.startswith("run:"):
        from invperm_interp.training.run import Run
        return Run.load(spec[4:]).analysis_model  # the model `invperm analyze` reads
    from invperm_interp.analysis.gauge import perturb
    from invperm_interp.maths import constructions
    return perturb(constructions.build(spec, 10, 10.0), gauge=1.0, noise=0.05, seed=0)

spec, repeats = sys.argv[1], int(sys.argv[2])
model = load(spec)
batch = sample_batch(model.cfg.layout, 512, torch.Generator().manual_seed(0),
                     dtype=model.cfg.torch_dtype)
record.analyze(model, batch)
best, parts = float("inf"), {}
for _ in range(repeats):
    times.clear()
    start = time.process_time()
    record.analyze(model, batch)
    total = time.process_time() - start
    if total < best:
        best, parts = total, dict(times)
start = time.process_time()
with torch.no_grad():
    for _ in range(10):
        model(batch.X)
forwards = time.process_time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"total": best, "parts": parts, "forwards": forwards, "peak_mib": peak}))
"""


SHAPES_WORKER = r"""
import json, resource, sys, time
import torch
torch.set_num_threads(1)
from invperm_interp import memory
from invperm_interp.analysis.gauge import perturb
from invperm_interp.analysis.record import analyze
from invperm_interp.maths.placement import Placement, build
from invperm_interp.task import sample_batch

name, repeats = sys.argv[1], int(sys.argv[2])
models = {shape: perturb(build(Placement(name, layers, heads, shape), 10, 10.0), gauge=1.0,
                         noise=0.05, seed=0)
          for shape, layers, heads in (((1, 1), (0, 1), (0, 0)), ((2, 2, 2), (0, 2), (1, 1)))}
best, named = {}, {}
for round in range(repeats + 1):  # round 0 warms up
    for shape, model in models.items():
        batch = sample_batch(model.cfg.layout, 512, torch.Generator().manual_seed(0),
                             dtype=model.cfg.torch_dtype)
        start = time.process_time()
        named[shape] = analyze(model, batch).mechanism.name
        took = time.process_time() - start
        if round:
            best[shape] = min(best.get(shape, float("inf")), took)
forwards = {}
for shape, model in models.items():
    X = sample_batch(model.cfg.layout, 512, torch.Generator().manual_seed(0), dtype=model.cfg.torch_dtype).X
    start = time.process_time()
    with torch.no_grad():
        for _ in range(10):
            model(X)
    forwards[str(shape)] = time.process_time() - start
estimate = {str(s): memory.analysis_estimate(m.cfg, 512).total / 2**20 for s, m in models.items()}
print(json.dumps({"times": {str(s): t for s, t in best.items()}, "named": {str(s): n for s, n in
                  named.items()}, "estimate_mib": estimate, "forwards": forwards,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure_shapes(name: str, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SHAPES_WORKER, name, str(repeats)], env=env,
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main_shapes(repeats: int, write: Path | None = None) -> None:
    """The 2 x 1 / 3 x 2 ratio per construction; ``write``: also into ``write.{json,md}``."""
    load = os.getloadavg()[0]
    print(f"load average {load:.1f}; analyze at d = 10 on 512 samples, CPU seconds, "
          f"best of {repeats}, both shapes in one process")
    rows = []
    for name in DEFAULT_MODELS:
        r = measure_shapes(name, repeats)
        small, big = r["times"]["(1, 1)"], r["times"]["(2, 2, 2)"]
        print(f"\n{name}: 2 x 1 {small:.3f} s ({r['named']['(1, 1)']}), 3 x 2 {big:.3f} s "
              f"({r['named']['(2, 2, 2)']}): {big / small:.2f}x")
        f_small, f_big = r["forwards"]["(1, 1)"], r["forwards"]["(2, 2, 2)"]
        print(f"  10 forwards: 2 x 1 {f_small:.3f} s, 3 x 2 {f_big:.3f} s: {f_big / f_small:.1f}x")
        print(f"  peak RSS {r['peak_mib']:.0f} MiB (both); analysis_estimate 2 x 1 "
              f"{r['estimate_mib']['(1, 1)']:.0f} MiB, 3 x 2 {r['estimate_mib']['(2, 2, 2)']:.0f} MiB")
        rows.append({"construction": name, "named_2x1": r["named"]["(1, 1)"],
                     "named_3x2": r["named"]["(2, 2, 2)"], "analyze_2x1_s": round(small, 3),
                     "analyze_3x2_s": round(big, 3), "ratio": round(big / small, 2),
                     "forwards_ratio": round(f_big / f_small, 1)})
    if write is not None:
        cpu = cpu_name()
        write.with_suffix(".json").write_text(json.dumps(
            {"load_average": round(load, 2), "cores": os.cpu_count(), "cpu": cpu,
             "repeats": repeats, "rows": rows}, indent=1) + "\n")
        lines = ["# The analysis's cost at 3 layers x 2 heads against 2 x 1", "",
                 f"`python benchmarks/analyze.py --shapes --write`: `analyze` at d = 10 on 512 "
                 f"samples of a construction built on 2 layers x 1 head and placed on layers 1 and 3, "
                 f"head 1, of 3 x 2 (gauge and noise added), both in one process, CPU seconds, best of "
                 f"{repeats}, one torch thread; load average {load:.1f} on {os.cpu_count()} cores "
                 f"({cpu}). "
                 "10 forwards: the whole model run 10 times on the same samples, for scale.", "",
                 "| construction | 2 x 1 | 3 x 2 | ratio | 10 forwards, ratio | named at 3 x 2 |",
                 "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['construction']} | {r['analyze_2x1_s']:.2f} s | {r['analyze_3x2_s']:.2f} s | "
                  f"{r['ratio']:.1f}x | {r['forwards_ratio']:.0f}x | {r['named_3x2']} |" for r in rows]
        write.with_suffix(".md").write_text("\n".join(lines) + "\n")
        print(f"wrote {write.with_suffix('.json')} and {write.with_suffix('.md')}")


def measure(src: Path, spec: str, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", WORKER, spec, str(repeats)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(argv: list[str], env: dict) -> tuple[float, float, float]:
    """``(wall s, CPU s, peak RSS MiB)`` of one process (its own rusage, ``os.wait4``)."""
    import time

    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status:
        raise RuntimeError(f"{argv} failed ({status})")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def compile_tree(src: Path) -> None:
    """Byte-compile ``src`` first, as an installed package is: a tree without ``__pycache__`` (a
    fresh ``git worktree``), or one used under ``PYTHONDONTWRITEBYTECODE``, compiles its changed
    modules again in every timed process (0.27 s of an ``invperm analyze`` start, measured)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def measure_cli(src: Path, run_dir: str) -> dict:
    """One ``python -c "import torch"`` and one ``invperm analyze RUN --out TMP`` process (one
    torch thread): each one's ``(wall, CPU, peak RSS)``."""
    import tempfile

    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    torch = _child([sys.executable, "-c", "import torch"], env)
    with tempfile.TemporaryDirectory() as out:
        analyze = _child([sys.executable, "-m", "invperm_interp.cli", "analyze", run_dir, "--out",
                          out, "--threads", "1"], env)
    return {"torch": torch, "analyze": analyze}


def main_cli(runs: list[str], trees: dict, repeats: int) -> None:
    """``invperm analyze RUN`` against ``python -c "import torch"``, both trees alternating, best of
    ``repeats`` rounds each (wall and CPU apart), and the largest peak RSS of each process; each
    tree byte-compiled first (:func:`compile_tree`)."""
    for src in trees.values():
        compile_tree(src)
    for run in runs:
        best: dict = {}
        for _ in range(repeats):
            for name, src in trees.items():
                got = measure_cli(src, run)
                for what, values in got.items():
                    old = best.get((name, what), (float("inf"), float("inf"), 0.0))
                    best[(name, what)] = tuple(min(a, b) if i < 2 else max(a, b)
                                               for i, (a, b) in enumerate(zip(old, values)))
        print(f"\ninvperm analyze {run} (best of {repeats}; wall s / CPU s / peak RSS MiB)")
        for name in trees:
            (tw, tc, tm), (aw, ac, am) = best[(name, "torch")], best[(name, "analyze")]
            print(f"  {name:7s} import torch {tw:5.2f} / {tc:5.2f} / {tm:4.0f}; analyze {aw:5.2f} / "
                  f"{ac:5.2f} / {am:4.0f}; analyze - import torch: wall + {aw - tw:.2f} s, "
                  f"CPU + {ac - tc:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another source tree to compare against")
    parser.add_argument("--run", nargs="*", default=[], help="trained run directories")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cli", action="store_true", help="also time `invperm analyze RUN` against "
                        "`python -c 'import torch'` (wall, CPU, peak RSS of each process)")
    parser.add_argument("--shapes", action="store_true",
                        help="2 layers x 1 head against 3 x 2 in one process (module docstring)")
    parser.add_argument("--write", action="store_true",
                        help="with --shapes: also write assets/analysis_cost.{json,md}")
    args = parser.parse_args()
    if args.shapes:
        return main_shapes(args.repeats, SRC.parent / "assets" / "analysis_cost" if args.write else None)
    specs = [f"run:{r}" for r in args.run] or list(DEFAULT_MODELS)
    trees = {"before": args.before, "after": SRC} if args.before else {"after": SRC}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; CPU seconds, "
          f"best of {args.repeats}")
    for spec in specs:
        results = {name: measure(src, spec, args.repeats) for name, src in trees.items()}
        print(f"\n{spec}")
        parts = sorted({p for r in results.values() for p in r["parts"]})
        print(f"  {'part':24s}" + "".join(f"{name:>10s}" for name in results))
        for part in parts:
            cells = "".join(f"{r['parts'][part]:10.3f}" if part in r["parts"] else f"{'-':>10s}"
                            for r in results.values())
            print(f"  {part:24s}{cells}")
        for key, label in (("total", "analyze total"), ("forwards", "10 forwards")):
            print(f"  {label:24s}" + "".join(f"{r[key]:10.3f}" for r in results.values()))
        print(f"  {'total / 10 forwards':24s}"
              + "".join(f"{r['total'] / r['forwards']:10.1f}" for r in results.values()))
        print(f"  {'peak RSS (MiB)':24s}" + "".join(f"{r['peak_mib']:10.0f}" for r in results.values()))
        if args.before:
            print(f"  before / after, analyze: {results['before']['total'] / results['after']['total']:.2f}x")
    if args.cli:
        main_cli(args.run, trees, args.repeats)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
