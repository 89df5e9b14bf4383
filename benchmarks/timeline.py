"""Cost of ``analysis.timeline`` on a run's checkpoints, against the plain way of getting the same
answers: ``mechanism`` and ``faithfulness`` (with minimality) of the final circuit at every
checkpoint. CPU seconds of this process (one torch thread), so other load on the machine changes
them little; both are measured in this run, side by side, on the same checkpoints.

The run: RUN if given (a run trained with dense checkpoints, e.g. one of analyses/grids/
dynamics.toml), else a d = 10 construction whose attention grows linearly from 0 over
``--checkpoints`` checkpoints (tests/test_timeline.py's interpolation).
Usage: python benchmarks/timeline.py [RUN] [--checkpoints 30] [--name two_block] [--plain 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from invperm_interp.analysis.faithfulness import faithfulness
from invperm_interp.analysis.mechanism import mechanism
from invperm_interp.analysis.timeline import timeline
from invperm_interp.config import TrainConfig
from invperm_interp.maths.constructions import build
from invperm_interp.runs import checkpoint as ckpt
from invperm_interp.runs.config_file import config_hash
from invperm_interp.runs.directory import RunDir
from invperm_interp.task import sample_batch
from invperm_interp.training.run import Run


def interpolated(run_dir: Path, name: str, n_steps: int, d: int = 10, beta: float = 12.0) -> None:
    model = build(name, d, beta, dtype=torch.float32)
    cfg = TrainConfig(steps=n_steps, checkpoint_every=1, out_dir=str(run_dir))
    run = RunDir(run_dir)
    run.write_config(model.cfg, cfg)
    tensors, digest = ckpt.model_tensors(model), config_hash(model.cfg, cfg)
    for k in range(1, n_steps + 1):
        scaled = {key: v * (k / n_steps) if key.endswith("attn.A") else v for key, v in tensors.items()}
        path = run.checkpoint(k) if k < n_steps else run.final
        ckpt.save(path, scaled, {"step": k, "config_hash": digest})


def plain(run_dir: Path, steps: list[int], hyp) -> None:
    """The plain way: the full rule and the final circuit's test, checkpoint by checkpoint."""
    for step in steps:
        model = Run.load(run_dir, step=step).model
        batch = sample_batch(model.cfg.layout, 512, torch.Generator().manual_seed(0),
                             dtype=model.cfg.torch_dtype)
        mechanism(model, batch)
        faithfulness(model, hyp, batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", help="a run with checkpoints (default: an interpolation)")
    parser.add_argument("--checkpoints", type=int, default=30)
    parser.add_argument("--name", default="two_block", help="the interpolated construction")
    parser.add_argument("--plain", type=int, default=5,
                        help="checkpoints the plain way is timed on (its cost is per checkpoint)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(args.run) if args.run else Path(tmp) / "run"
        if not args.run:
            interpolated(run_dir, args.name, args.checkpoints)
        found = [s for s, _ in RunDir(run_dir).checkpoints()]
        stride = max(1, len(found) // args.checkpoints)
        cpu, wall = time.process_time(), time.perf_counter()
        tl = timeline(run_dir, stride=stride)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        n = len(tl.steps)
        print(f"{run_dir.name}: final mechanism {tl.final_mechanism}, {len(tl.cells)} cells, "
              f"{n} checkpoints analysed")
        print(f"timeline: {cpu:.1f} CPU s ({cpu / n:.2f} per checkpoint; wall {wall:.1f} s)")
        picked = [s.step for s in tl.steps][:: max(1, n // args.plain)][: args.plain]
        cpu2 = time.process_time()
        plain(run_dir, picked, tl.hypothesis)
        per = (time.process_time() - cpu2) / len(picked)
        print(f"plain mechanism + faithfulness: {per:.2f} CPU s per checkpoint "
              f"({len(picked)} timed), {per * n:.1f} CPU s for {n}: timeline is "
              f"{per * n / cpu:.1f}x cheaper")


if __name__ == "__main__":
    main()
