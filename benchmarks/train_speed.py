"""Training speed and memory: ``train`` against a plain torch loop, 1 vs 2 threads, side by side.

Also a standard 2-layer attention-only transformer (d_model 64, docs/standard.md) trained by
``train`` beside the disentangled model, through the map (its default where that is cheaper) and
with its direct forward in d_model. Each measurement runs in its own process (so its peak RSS,
imports included, is its own); the variants alternate within every round so machine noise hits
them alike. Also prints the machine's matmul GFLOP/s, the step's FLOP count and how close each
step is to that arithmetic floor, and (unless --skip-converge) the wall time for the
bidirectional d = 10 run to reach MSE < 1e-3.
Usage: python benchmarks/train_speed.py [--steps 150] [--rounds 2] [--threads 1 2]
       [--variants ...] [--skip-speed] [--skip-converge] [--converge-threads 1]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import resource
import subprocess
import sys
import time

import torch

# A reference measured elsewhere, not in this run: the note's JAX code on a quiet 2-core machine.
# Printed as such, never divided into this run's numbers (machine load differs between the two).
NOTE_STEPS_PER_S = (13, 18)
D, BATCH = 10, 1024
D_MODEL = 64
VARIANTS = ["train", "reference", "train, default malloc", "standard", "standard, direct"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# -- workers (one per process) ------------------------------------------------------------------
def worker(variant: str, threads: int, steps: int) -> dict:
    """Train ``steps`` steps of the bidirectional d = 10 model one way; steps/s and peak RSS."""
    torch.set_num_threads(threads)
    from invperm_interp import Layout, ModelConfig, sample_batch
    from invperm_interp.config import TrainConfig

    train_mod = importlib.import_module("invperm_interp.training.single")  # the module, even if re-exported
    memory_mod = importlib.import_module("invperm_interp.memory")

    cfg = ModelConfig(Layout.plain(D), attention_dir="bidirectional")
    if variant.startswith("standard"):
        cfg = ModelConfig(cfg.layout, attention_dir="bidirectional", arch="standard",
                          d_model=D_MODEL)
        if variant == "standard, direct":  # the forward in d_model instead of through the map
            importlib.import_module("invperm_interp.model.standard").note_is_cheaper = \
                lambda cfg: False
    if variant == "reference":  # what one would write by hand: hooked forward, Adam, fresh data
        from invperm_interp import HookedDisentangledTransformer  # train's path imports no TL

        model = HookedDisentangledTransformer(cfg, seed=0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(1)

        def step() -> None:
            batch = sample_batch(cfg.layout, BATCH, gen)
            loss = ((model(batch.X) - batch.Y) ** 2).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

        for _ in range(10):
            step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        rate = steps / (time.perf_counter() - start)
    else:  # train() itself, evaluating only at the start and the end (1024 samples)
        memory_mod.KEEP_FREED_MEMORY = variant != "train, default malloc"
        run = train_mod.train(cfg, TrainConfig(steps=steps, batch_size=BATCH, eval_every=steps,
                                               eval_size=1024, device="cpu"), progress=False)
        rate = steps / run.metrics[-1].wall_time
    return {"steps_per_s": rate, "peak_rss_mb": peak_rss_mb()}


def spawn(variant: str, threads: int, steps: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", variant, "--threads", str(threads),
           "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# -- arithmetic -----------------------------------------------------------------------------------
def step_flops(d: int = D, batch: int = BATCH, readout_only: bool = False) -> float:
    """FLOPs of one training step (forward ×3 for forward + backward), 2-layer 1-head [P; Y_P].

    ``readout_only``: as ``train`` computes it (last layer on the read-out rows, W_U reassociated).
    """
    T, R = 2 * d, d
    widths = [d + T, 2 * (d + T), 4 * (d + T)]
    fwd = 0.0
    for layer, Dl in enumerate(widths[:-1]):
        if readout_only and layer == len(widths) - 2:
            fwd += 2 * batch * (R * Dl * Dl + R * T * Dl + T * Dl * d + R * T * d + R * Dl * d)
        else:
            fwd += 2 * batch * (T * Dl * Dl + 2 * T * T * Dl)
    if not readout_only:
        fwd += 2 * batch * R * widths[-1] * d
    return 3 * fwd


def matmul_gflops(threads: int, n: int = 1024, seconds: float = 1.0) -> float:
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = 0.0
    for _ in range(3):
        start, k = time.perf_counter(), 0
        while time.perf_counter() - start < seconds / 3:
            a @ b
            k += 1
        best = max(best, 2 * n**3 * k / (time.perf_counter() - start) / 1e9)
    return best


def converge(threads: int, steps: int) -> tuple[int | None, float | None, float]:
    """Bidirectional d = 10, batch 1024, Adam: first eval step with MSE < 1e-3 and its time."""
    from invperm_interp import Layout, ModelConfig
    from invperm_interp.config import TrainConfig
    from invperm_interp.training.single import train

    cfg = ModelConfig(Layout.plain(D), attention_dir="bidirectional")
    run = train(cfg, TrainConfig(steps=steps, batch_size=BATCH, eval_every=50, eval_size=4096,
                                 device="cpu", threads=threads), progress=False)
    hit = next((m for m in run.metrics if m.mse < 1e-3), None)
    final = run.metrics[-1].mse
    return (hit.step, hit.wall_time, final) if hit else (None, None, final)


def speed(args: argparse.Namespace) -> None:
    """Steps/s and peak RSS of each variant and thread count, and the arithmetic floor."""
    variants = args.variants
    results: dict[tuple[str, int], list[dict]] = {}
    for _ in range(args.rounds):
        for threads in args.threads:
            for variant in variants:
                results.setdefault((variant, threads), []).append(
                    spawn(variant, threads, args.steps))
    peak = {t: matmul_gflops(t) for t in args.threads}
    full, fast = step_flops(), step_flops(readout_only=True)

    print(f"d={D}, batch {BATCH}, 2 layers, bidirectional, Adam; {args.steps} steps per "
          f"measurement, best of {args.rounds} interleaved rounds, each in its own process")
    print(f"step FLOPs (fwd+bwd = 3x fwd): hooked model {full / 1e9:.3f} GFLOP, train's read-out "
          f"path {fast / 1e9:.3f} GFLOP")
    for t in args.threads:
        print(f"matmul 1024^3, {t} thread(s): {peak[t]:.0f} GFLOP/s -> floor "
              f"{full / peak[t] / 1e6:.1f} ms/step (hooked FLOPs), {fast / peak[t] / 1e6:.1f} "
              f"ms/step (read-out path)")
    print(f"{'variant':24s} {'threads':>7s} {'steps/s':>8s} {'vs ref':>7s} "
          f"{'floor %':>8s} {'peak RSS':>9s}")
    for t in args.threads:
        ref = max((r["steps_per_s"] for r in results.get(("reference", t), [])), default=math.nan)
        for variant in variants:
            rs = results[(variant, t)]
            rate = max(r["steps_per_s"] for r in rs)
            flops = full if variant == "reference" else fast
            if variant.startswith("standard"):
                flops = float("nan")  # not the disentangled model's count
            floor = flops / (peak[t] * 1e9) * rate * 100  # % of the step that is arithmetic
            print(f"{variant:24s} {t:7d} {rate:8.1f} {rate / ref:6.2f}x {floor:7.0f}% "
                  f"{max(r['peak_rss_mb'] for r in rs):6.0f} MB")
        if ("standard", t) in results and ("train", t) in results:
            ratio = {v: max(r["steps_per_s"] for r in results[(v, t)])
                     / max(r["steps_per_s"] for r in results[("train", t)])
                     for v in variants if v.startswith("standard")}
            print(f"{t} thread(s): standard (d_model {D_MODEL}) / disentangled steps/s: "
                  + ", ".join(f"{v} {x:.2f}x" for v, x in ratio.items()))
    print(f"reference measured elsewhere, not in this run: the note's JAX code, "
          f"{NOTE_STEPS_PER_S[0]}-{NOTE_STEPS_PER_S[1]} steps/s on a quiet 2-core machine")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--converge-steps", type=int, default=1500)
    parser.add_argument("--converge-threads", type=int, default=1,
                        help="threads for the convergence run (1: robust on busy shared cores)")
    parser.add_argument("--skip-converge", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.threads[0], args.steps)))
        return

    if not args.skip_speed:
        speed(args)
    if not args.skip_converge:
        step, seconds, final = converge(args.converge_threads, args.converge_steps)
        reached = (f"MSE < 1e-3 at step {step}, {seconds:.1f} s of training" if step
                   else f"MSE < 1e-3 not reached in {args.converge_steps} steps")
        print(f"bidirectional, Adam lr 1e-2, {args.converge_threads} thread(s): {reached}; "
              f"final MSE {final:.2e}")


if __name__ == "__main__":
    main()
