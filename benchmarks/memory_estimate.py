"""The memory budget's estimates against measured peaks, side by side, at a few sizes.

Each job runs in a fresh process on one torch thread: a tiny warm-up run (so the kernels' one-off
allocations are not counted; an analysis job also analyses a tiny model on another stream first),
then ``VmHWM`` is reset to the current RSS (``/proc/self/clear_refs``) and the job runs; measured =
peak RSS growth. This is what runs out on a real machine, allocator slack included. Linux only.
tests/test_memory.py runs the small jobs (``SMALL``, ``DEPTHS``) through ``--probe``.

  python benchmarks/memory_estimate.py            # the table (sizes up to ~2.5 GB peak)
  python benchmarks/memory_estimate.py --small    # the tests' sizes only (~50-400 MB)
  python benchmarks/memory_estimate.py --probe '{"kind": "verify", "name": "theorem2", "d": 30, "n": 256}'
"""

from __future__ import annotations

import argparse
import json
import os
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
DEPTHS = {  # the analysis of briefly trained models over depth and heads: each peaks at 0.1-0.4 GB
    f"analyze d={d}, {L} layers, {H} heads, n=256": dict(kind="analyze_trained", d=d, layers=L,
                                                          heads=H, n=256, steps=40)
    for d, L, H in ((8, 2, 2), (8, 3, 1), (4, 3, 2))
}
WIDE = {  # 3 layers of 2 heads at d = 6 (D = 270 at the last layer), trained (40 steps) and at init
    f"analyze d=6, 3 layers, 2 heads, n=512, {'trained' if steps else 'untrained'}":
        dict(kind="analyze_trained", d=6, layers=3, heads=2, n=512, steps=steps)
    for steps in (40, 0)
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

    train(ModelConfig(Layout.plain(2)), TrainConfig(steps=1, batch_size=2, eval_size=2, device="cpu"),
          progress=False)
    C.verify(C.build("theorem2", 2), n=2)
    if job["kind"].startswith("analyze"):  # the analysis's one-off allocations, on another stream
        from invperm_interp.analysis.record import analyze

        tiny = C.build("theorem2", 2)
        analyze(tiny, sample_batch(tiny.cfg.layout, 4, torch.Generator().manual_seed(1),
                                   dtype=torch.float64))
    if job["kind"] == "analyze_trained":  # made (or trained) before the peak is reset
        cfg = ModelConfig(Layout.plain(job["d"]), n_layers=job["layers"], n_heads=job["heads"],
                          attention_dir="bidirectional")
        if job["steps"]:
            model = train(cfg, TrainConfig(steps=job["steps"], batch_size=64, eval_size=64,
                                           eval_every=job["steps"], device="cpu"),
                          progress=False).model
        else:  # at initialisation
            from invperm_interp import HookedDisentangledTransformer

            model = HookedDisentangledTransformer(cfg, seed=0)
        generator = torch.Generator().manual_seed(0)
        batch = sample_batch(cfg.layout, job["n"], generator, dtype=cfg.torch_dtype)
    base = status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    if job["kind"] == "train":
        cfg = ModelConfig(Layout.plain(job["d"]), n_heads=job["heads"], attention_dir=job["attention"])
        estimate = footprint.training_estimate(cfg, "adam", job["B"], job["E"])
        train(cfg, TrainConfig(steps=3, batch_size=job["B"], eval_size=job["E"], eval_every=1,
                               device="cpu"), progress=False)
    elif job["kind"] == "analyze_trained":
        estimate = memory.analysis_estimate(cfg, job["n"])
        analyze(model, batch)
    else:
        model = C.build(job["name"], job["d"])
        estimate = (memory.evaluation_estimate(model.cfg, job["n"]) if job["kind"] == "verify"
                    else memory.analysis_estimate(model.cfg, job["n"]))
        if job["kind"] == "verify":
            C.verify(model, n=job["n"])
        else:
            generator = torch.Generator().manual_seed(0)
            analyze(model, sample_batch(model.cfg.layout, job["n"], generator, dtype=torch.float64))
    return {"estimate": estimate.total, "peak": status("VmHWM:") - base}


def measure(job: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, __file__, "--probe", json.dumps(job)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", help="run one job (JSON) here and print its numbers")
    parser.add_argument("--small", action="store_true", help="only the test's sizes")
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(json.loads(args.probe))))
        return
    jobs = {**SMALL, **DEPTHS} if args.small else {**SMALL, **DEPTHS, **WIDE, **LARGE}
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores); one job at a time")
    print(f"{'job':48s} {'estimate':>10s} {'measured':>10s} {'ratio':>6s}")
    for name, job in jobs.items():
        proc = measure(job)
        out, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(err)
        got = json.loads(out)
        print(f"{name:48s} {got['estimate'] / 1e6:8.0f} MB {got['peak'] / 1e6:8.0f} MB "
              f"{got['estimate'] / got['peak']:6.2f}")


if __name__ == "__main__":
    main()
