"""The memory budget's estimates against measured peaks, side by side, at a few sizes.

Each job runs in a fresh process on one torch thread: a tiny warm-up run (so the kernels' one-off
allocations are not counted), then ``VmHWM`` is reset to the current RSS (``/proc/self/clear_refs``)
and the job runs; measured = peak RSS growth. This is what runs out on a real machine, allocator
slack included. Linux only. An analysis job is measured as ``invperm analyze`` runs it on a saved
run: its warm-up analyses a tiny model on another stream, nothing is trained in the process
(training tunes malloc to keep freed memory, which a later analysis would reuse unseen), and the
span starts after the atoms are fitted and the estimate made, where ``invperm analyze`` checks.
tests/test_memory.py runs the small jobs (``SMALL``, ``DEPTHS``) through ``--probe``. One
analysis's peak spreads up to 1.5x over fresh processes (glibc's moving mmap threshold: how much
freed memory stays resident depends on the order of allocations, which moves with address-space
randomisation and the string hash seed), so ``--repeats`` measures each job several times and
compares the estimate with the median.

  python benchmarks/memory_estimate.py            # the table (sizes up to ~2.5 GB peak)
  python benchmarks/memory_estimate.py --small    # the tests' sizes only (~50-400 MB)
  python benchmarks/memory_estimate.py --repeats 5  # each job in 5 fresh processes
  python benchmarks/memory_estimate.py --probe '{"kind": "verify", "name": "theorem2", "d": 30, "n": 256}'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SMALL = {  # each peaks at 50-300 MB
    "train d=20 causal, batch 1024": dict(kind="train", d=20, heads=1, attention="causal", B=1024,
                                          E=1024),
    "train d=12 bidirectional, 2 heads, batch 512": dict(kind="train", d=12, heads=2,
                                                         attention="bidirectional", B=512, E=512),
    "construct theorem2 d=30, n=256 (float64)": dict(kind="verify", name="theorem2", d=30, n=256),
    "construct theorem3 d=30, n=128 (float64)": dict(kind="verify", name="theorem3", d=30, n=128),
    "analyze theorem3 d=8, n=512 (float64)": dict(kind="analyze", name="theorem3", d=8, n=512),
}
DEPTHS = {  # the analysis of briefly trained models over depth and heads (3 layers of 2 heads at
    # initialisation too, where no circuit search runs): each peaks at 40-100 MB
    f"analyze d={d}, {L} layers, {H} heads, n=256{'' if steps else ', untrained'}":
        dict(kind="analyze_trained", d=d, layers=L, heads=H, n=256, steps=steps)
    for d, L, H, steps in ((8, 2, 2, 40), (8, 3, 1, 40), (4, 3, 2, 40), (4, 3, 2, 0))
}
WIDE = {  # 3 layers of 2 heads at d = 6 (D = 270 at the last layer), trained (40 steps) and at init
    f"analyze d=6, 3 layers, 2 heads, n=512, {'trained' if steps else 'untrained'}":
        dict(kind="analyze_trained", d=6, layers=3, heads=2, n=512, steps=steps)
    for steps in (40, 0)
}
DEEP = {  # 4 layers of 3 heads at d = 4 (D = 768 at the last A, 3,072 read out), trained: 2.0 GB
    # live; its atoms' fit once held 2.9 GB (a template's 36,864 atoms' gauge norms at once)
    "analyze d=4, 4 layers, 3 heads, n=512": dict(kind="analyze_trained", d=4, layers=4, heads=3,
                                                  n=512, steps=40),
}
LARGE = {
    "train d=40 causal, batch 1024": dict(kind="train", d=40, heads=1, attention="causal", B=1024,
                                          E=1024),
    "train d=60 causal, batch 1024": dict(kind="train", d=60, heads=1, attention="causal", B=1024,
                                          E=1024),
    "construct theorem2 d=60, n=256 (float64)": dict(kind="verify", name="theorem2", d=60, n=256),
    "construct theorem2 d=120, n=256 (float64)": dict(kind="verify", name="theorem2", d=120, n=256),
}


def probe(job: dict) -> dict:
    """Run ``job`` in this (fresh) process; ``{"estimate", "peak"}`` in bytes."""
    import torch

    torch.set_num_threads(1)
    from invperm_interp import Layout, ModelConfig, memory, sample_batch
    from invperm_interp.config import TrainConfig
    from invperm_interp.maths import constructions as C
    from invperm_interp.training import footprint
    from invperm_interp.training.single import train

    def status(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

    if job["kind"].startswith("analyze"):  # as `invperm analyze` on a saved run: nothing trained
        from invperm_interp.analysis.budget import analysis_estimate  # in this process (training
        from invperm_interp.analysis.record import analyze  # tunes malloc to keep freed memory)
        from invperm_interp.analysis.templates import explain_and_match

        tiny = C.build("theorem2", 2)  # the analysis's one-off allocations, on another stream
        analyze(tiny, sample_batch(tiny.cfg.layout, 4, torch.Generator().manual_seed(1),
                                   dtype=torch.float64))
        model = saved_model(job) if job["kind"] == "analyze_trained" else C.build(job["name"], job["d"])
        generator = torch.Generator().manual_seed(0)
        batch = sample_batch(model.cfg.layout, job["n"], generator, dtype=model.cfg.torch_dtype)
        explained = explain_and_match(model)  # the atoms, then the estimate: where the CLI checks
        estimate = analysis_estimate(model, job["n"], explained[0])
    else:
        train(ModelConfig(Layout.plain(2)), TrainConfig(steps=1, batch_size=2, eval_size=2,
                                                        device="cpu"), progress=False)
        C.verify(C.build("theorem2", 2), n=2)
    base = status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    if job["kind"] == "train":
        cfg = ModelConfig(Layout.plain(job["d"]), n_heads=job["heads"], attention_dir=job["attention"])
        estimate = footprint.training_estimate(cfg, "adam", job["B"], job["E"])
        train(cfg, TrainConfig(steps=3, batch_size=job["B"], eval_size=job["E"], eval_every=1,
                               device="cpu"), progress=False)
    elif job["kind"].startswith("analyze"):
        analyze(model, batch, explained=explained)
    else:
        model = C.build(job["name"], job["d"])
        estimate = memory.evaluation_estimate(model.cfg, job["n"])
        C.verify(model, n=job["n"])
    return {"estimate": estimate.total, "peak": status("VmHWM:") - base}


def saved_model(job: dict):
    """``job``'s model: trained for ``steps`` in another process and loaded from its run
    directory, or at initialisation (``steps`` = 0)."""
    import tempfile

    from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig

    cfg = ModelConfig(Layout.plain(job["d"]), n_layers=job["layers"], n_heads=job["heads"],
                      attention_dir="bidirectional")
    if not job["steps"]:
        return HookedDisentangledTransformer(cfg, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        return _trained(job, Path(tmp) / "run")


def _trained(job: dict, out: Path):
    from invperm_interp.training.run import Run

    script = ("import sys, json\n"
              "from invperm_interp import Layout, ModelConfig\n"
              "from invperm_interp.config import TrainConfig\n"
              "from invperm_interp.training.single import train\n"
              "job = json.loads(sys.argv[1])\n"
              "cfg = ModelConfig(Layout.plain(job['d']), n_layers=job['layers'], "
              "n_heads=job['heads'], attention_dir='bidirectional')\n"
              "train(cfg, TrainConfig(steps=job['steps'], batch_size=64, eval_size=64, "
              "eval_every=job['steps'], device='cpu', out_dir=sys.argv[2]), progress=False)\n")
    subprocess.run([sys.executable, "-c", script, json.dumps(job), str(out)], check=True,
                   capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return Run.load(out).model


#: glibc's mmap threshold fixed (its default initial value, 128 KiB): every block above it is mapped
#: and unmapped on free, so the peak RSS is the live high-water mark, the same in every fresh
#: process, instead of what the moving threshold happens to keep resident (the same analysis peaked
#: at 47-97 MB over six default-malloc processes, at 40 MB in three with the threshold fixed).
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def measure(job: dict, fixed_malloc: bool = False) -> subprocess.Popen:
    """``job`` probed in a fresh process (``--probe``); ``fixed_malloc``: with :data:`FIXED_MALLOC`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           **(FIXED_MALLOC if fixed_malloc else {})}
    return subprocess.Popen([sys.executable, __file__, "--probe", json.dumps(job)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", help="run one job (JSON) here and print its numbers")
    parser.add_argument("--small", action="store_true", help="only the test's sizes")
    parser.add_argument("--repeats", type=int, default=1,
                        help="fresh processes per job; the ratio is to their median peak")
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(json.loads(args.probe))))
        return
    jobs = {**SMALL, **DEPTHS} if args.small else {**SMALL, **DEPTHS, **WIDE, **DEEP, **LARGE}
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores); one job at a time")
    print(f"{'job':58s} {'estimate':>10s} {'measured':>10s} {'range':>13s} {'ratio':>6s}")
    for name, job in jobs.items():
        runs = []
        for _ in range(args.repeats):
            proc = measure(job)
            out, err = proc.communicate()
            if proc.returncode:
                raise SystemExit(err)
            runs.append(json.loads(out))
        estimate, peaks = runs[0]["estimate"], sorted(r["peak"] for r in runs)
        peak = statistics.median(peaks)
        print(f"{name:58s} {estimate / 1e6:7.0f} MB {peak / 1e6:7.0f} MB "
              f"{peaks[0] / 1e6:5.0f}-{peaks[-1] / 1e6:.0f} MB {estimate / peak:6.2f}")


if __name__ == "__main__":
    main()
