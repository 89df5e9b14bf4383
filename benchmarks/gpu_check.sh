#!/usr/bin/env bash
# GPU check for the training engine: one prepared script for a machine with a CUDA GPU.
#
# 1. The note's full bidirectional run on CUDA: d = 10, batch 1024, 2^16 steps, recipe "paper"
#    (zero init, SGD lr 1, gradient entries clipped to ±1, cosine over the run's 2^16 steps).
# 2. The fast default (Adam lr 1e-2, 2^13 steps) for comparison.
# 3. Resume on CUDA: 400 steps straight vs 200 + resume 200 (bit identity is only promised on the
#    CPU; this reports whether it holds here and the largest weight difference).
# 4. Many models at once: train_many of 256 (and 1, 8, 64) bidirectional d = 10 models as one
#    vectorised model at batch 1024 against one model trained alone, in model-steps/s (goal: 256
#    at >= 50% of the single model's throughput per model). Sizes: MANY="1 8 64 256".
# Prints steps/s, final MSE and exact-row accuracy per run, and writes $OUT/gpu_check.json.
#
# Needs a Python with torch (CUDA), safetensors, tqdm, jaxtyping and numpy (training imports no
# TransformerLens, and neither does this script); set PYTHON to it
# (default: .venv/bin/python if present, else python3). Runs from the repository root with
# PYTHONPATH=src, so no install is needed. Takes ~2-6 minutes on one modern GPU.
# Usage: OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh [PAPER_STEPS] [ADAM_STEPS]
# A dry run of the script itself on a CPU: DEVICE=cpu bash benchmarks/gpu_check.sh 64 64
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
OUT="${OUT:-runs/gpu_check}"
PAPER_STEPS="${1:-65536}"
ADAM_STEPS="${2:-8192}"
DEVICE="${DEVICE:-cuda}"
mkdir -p "$OUT"
rm -rf "$OUT/paper" "$OUT/adam" "$OUT/resume"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

PYTHONPATH=src "$PYTHON" - "$OUT" "$PAPER_STEPS" "$ADAM_STEPS" "$DEVICE" <<'EOF'
import json
import os
import sys
import time
from dataclasses import replace

import torch

from invperm_interp import Layout, ModelConfig
from invperm_interp.config import TrainConfig
from invperm_interp.training.single import resume, train

out, paper_steps, adam_steps, device = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cuda = device.startswith("cuda")
if cuda and not torch.cuda.is_available():
    sys.exit("gpu_check: CUDA is not available to this Python; nothing to check")
name = torch.cuda.get_device_name() if cuda else "cpu (dry run)"
print(f"torch {torch.__version__}, {name}", flush=True)
cfg = ModelConfig(Layout.plain(10), attention_dir="bidirectional")
results = {"device": name, "torch": torch.__version__}

runs = {
    "paper": TrainConfig(steps=paper_steps, recipe="paper", eval_every=1024,
                         checkpoint_every=8192, device=device, out_dir=f"{out}/paper"),
    "adam": TrainConfig(steps=adam_steps, eval_every=256, checkpoint_every=4096, device=device,
                        out_dir=f"{out}/adam"),
}
for label, tc in runs.items():
    start = time.perf_counter()
    run = train(cfg, tc, progress=False)
    wall = time.perf_counter() - start
    m = run.final_metrics
    below = next((x["step"] for x in run.metrics if x["mse"] < 1e-3), None)
    results[label] = {"steps": tc.steps, "steps_per_s": tc.steps / m["wall_time"],
                     "final_mse": m["mse"], "row_acc": m["row_acc"], "wall_s": wall,
                     "first_step_below_1e-3": below,
                     "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}
    print(f"{label:6s} {tc.steps} steps: {results[label]['steps_per_s']:.0f} steps/s, "
          f"final MSE {m['mse']:.3g}, rows exact {m['row_acc']:.1%}, MSE < 1e-3 from step "
          f"{below}, {wall:.0f} s in all", flush=True)

small = TrainConfig(steps=400, eval_every=100, device=device)
straight = train(cfg, small, progress=False)
train(cfg, replace(small, out_dir=f"{out}/resume"), stop_at=200, progress=False)
resumed = resume(f"{out}/resume", progress=False)
a, b = straight.weights.state_dict(), resumed.weights.state_dict()
diff = max((a[k] - b[k]).abs().max().item() for k in a)
same_metrics = [{k: v for k, v in x.items() if k != "wall_time"} for x in straight.metrics] == [
    {k: v for k, v in x.items() if k != "wall_time"} for x in resumed.metrics]
results["resume"] = {"bit_identical": all(torch.equal(a[k], b[k]) for k in a),
                     "max_weight_diff": diff, "metrics_identical": same_metrics}
print(f"resume on {device}: {results['resume']}")

from invperm_interp.training.many import train_many  # noqa: E402


def timed(fn):
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


many_steps = 200 if cuda else 4
quick = dict(batch_size=1024, eval_every=10**6, eval_size=256, device=device)
single = TrainConfig(steps=many_steps, **quick)
train(cfg, replace(single, steps=10), progress=False)  # warm-up
alone = many_steps / timed(lambda: train(cfg, single, progress=False))
results["many"] = {"steps": many_steps, "single_steps_per_s": alone}
print(f"one model alone: {alone:.0f} steps/s at batch 1024", flush=True)
for n in [int(x) for x in os.environ.get("MANY", "1 8 64 256").split()]:
    jobs = [(cfg, TrainConfig(steps=many_steps, seed=s, **quick)) for s in range(n)]
    train_many([(c, replace(t, steps=5)) for c, t in jobs], vectorize=True, progress=False)
    rate = n * many_steps / timed(lambda: train_many(jobs, vectorize=True, progress=False))
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    results["many"][str(n)] = {"model_steps_per_s": rate, "per_model_vs_alone": rate / n / alone,
                               "peak_gpu_mb": peak}
    print(f"train_many x{n}: {rate:.0f} model-steps/s = {rate / alone:.2f}x one model's steps/s "
          f"({rate / n / alone:.2f} of its speed per model)", flush=True)
with open(f"{out}/gpu_check.json", "w") as f:
    json.dump(results, f, indent=2)
print(f"wrote {out}/gpu_check.json")
EOF
