"""Peak RSS of an ``invperm train`` process at d = 10, and what its parts cost, side by side.

Each row is its own process (peak RSS includes the interpreter and every import), rows alternate
within each round, and the largest peak over the rounds is printed. ``invperm train`` runs the
command line's own ``main``; "as before" is the same run with TransformerLens imported and
``torch.optim``'s optimizer (whose first step imports ``torch._dynamo``), which is what a training
process carried until the hook-free model and ``optim.py``.
Usage: python benchmarks/train_memory.py [--steps 300] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

GOAL_MB = 400

# What each row runs; the last line prints this process's peak RSS in MB.
PROBES = {
    "python + import torch": "import torch",
    "python + import torch, transformer_lens": "import torch, transformer_lens",
    "invperm train": """
from invperm_interp.cli import main
main(ARGV)""",
    "invperm train, as before": """
import torch, transformer_lens
import invperm_interp.training.trainer as trainer_mod
trainer_mod.make_optimizer = lambda kind, params, lr: (
    torch.optim.Adam if kind == "adam" else torch.optim.SGD)(params, lr=lr)
from invperm_interp.cli import main
main(ARGV)""",
}
REPORT = "\nimport resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"


def measure(name: str, argv: list[str]) -> float:
    code = PROBES[name].replace("ARGV", json.dumps(argv)) + REPORT
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--attention", default="causal", choices=["causal", "bidirectional"])
    args = parser.parse_args()
    peaks: dict[str, float] = {}
    for _ in range(args.rounds):
        for name in PROBES:
            with tempfile.TemporaryDirectory() as tmp:
                argv = ["train", "--d=10", f"--steps={args.steps}", f"--attention={args.attention}",
                        f"--out={tmp}/run", "--no-progress", "--threads=1", "--device=cpu"]
                peaks[name] = max(peaks.get(name, 0.0), measure(name, argv))
    print(f"d=10, {args.attention}, batch 1024 (the default recipe), {args.steps} steps, one "
          f"thread; largest peak RSS of {args.rounds} rounds, each row its own process")
    base = peaks["invperm train"]
    for name, mb in peaks.items():
        print(f"{name:42s} {mb:6.0f} MB  {mb / base:5.2f}x invperm train")
    verdict = "meets" if base <= GOAL_MB else "misses"
    print(f"invperm train {verdict} the {GOAL_MB} MB goal ({base:.0f} MB)")


if __name__ == "__main__":
    main()
