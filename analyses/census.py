"""Beyond the note: a census of what training learns, counted over many seeds.

Trains, with the fast CPU recipe (Adam lr 1e-2, N(0, 0.01²) init, batch 128) and early stopping at
the first evaluation (every 100 steps, 1,024 held-out samples) with MSE < 1e-3:
- the note's bidirectional model on [P; Y_P] reading the P rows,
- the causal model on [P; Y_P; S] reading the scratch rows (Theorem 3's setting),
64 seeds each at d = 10 and 16 seeds each at d = 6, 8, 12. For every run it records the steps to
MSE < 1e-3, the final MSE, the mechanism by the library's one rule (``analysis.mechanism``), that
construction's faithfulness, completeness and minimality, and the minimal circuit's size.
Writes assets/census.{json,md,png}. Resumable: finished runs and analyses are skipped, so a rerun
only redoes what is missing (``--phase analyze`` recomputes nothing but the analyses).
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch
from tqdm.auto import tqdm

from invperm_interp import Layout, ModelConfig
from invperm_interp.config import TrainConfig

TARGET = 1e-3  # the MSE a run must reach
BATCH = 128
EVAL_EVERY = 100
MAX_STEPS = {6: 4000, 8: 5000, 10: 6000, 12: 8000}  # a run that has not reached TARGET stops here
SEEDS = {6: 16, 8: 16, 10: 64, 12: 16}
KINDS = ("bidirectional", "scratch")


def model_config(kind: str, d: int) -> ModelConfig:
    if kind == "bidirectional":
        return ModelConfig(Layout.plain(d), attention_dir="bidirectional", readout="P")
    return ModelConfig(Layout.scratch(d), attention_dir="causal", readout="S")


def jobs(seeds: dict[int, int]) -> list[tuple[str, int, int]]:
    """``(kind, d, seed)``, the first seeds of every configuration before the later seeds of any,
    so that an interrupted census is still balanced."""
    out = []
    for seed in range(max(seeds.values())):
        for d in sorted(seeds):
            if seed < seeds[d]:
                out += [(kind, d, seed) for kind in KINDS]
    return out


def run_name(kind: str, d: int, seed: int) -> str:
    return f"{kind}_d{d}_seed{seed:03d}"


def train_job(job: tuple[str, int, int], root: Path) -> dict:
    """Train one run to ``TARGET`` (or ``MAX_STEPS``) in chunks of one evaluation, resuming from the
    last checkpoint; resuming is bit-identical to an uninterrupted run, so the chunks change nothing
    but where training stops. Returns (and stores as ``census_train.json``) the outcome."""
    from invperm_interp.training.single import resume, train

    kind, d, seed = job
    run_dir = root / run_name(kind, d, seed)
    done = run_dir / "census_train.json"
    if done.is_file():
        return json.loads(done.read_text())
    torch.set_num_threads(1)
    cfg = TrainConfig(steps=MAX_STEPS[d], batch_size=BATCH, seed=seed, threads=1,
                      eval_every=EVAL_EVERY, eval_size=1024, checkpoint_every=MAX_STEPS[d],
                      out_dir=str(run_dir))
    if (run_dir / "config.json").is_file():
        run = resume(run_dir, progress=False, stop_at=_next_stop(run_dir, cfg))
    else:
        run = train(model_config(kind, d), cfg, progress=False, stop_at=EVAL_EVERY)
    while run.final_metrics["mse"] >= TARGET and run.step < cfg.steps:
        _prune_checkpoints(run_dir)
        run = resume(run_dir, progress=False, stop_at=min(run.step + EVAL_EVERY, cfg.steps))
    _prune_checkpoints(run_dir)
    hit = [m["step"] for m in run.metrics if m["mse"] < TARGET]
    out = {"run": run_dir.name, "kind": kind, "d": d, "seed": seed, "step": run.step,
           "steps_to_target": hit[0] if hit else None, "final_mse": run.final_metrics["mse"],
           "rows_exact": run.final_metrics["row_acc"], "wall_time": run.final_metrics["wall_time"]}
    done.write_text(json.dumps(out))
    return out


def _prune_checkpoints(run_dir: Path) -> None:
    """Keep the last checkpoint (the census resumes from it and analyses it) and those on the run's
    schedule (dense ones until solved, when the config asks for them); drop the chunks' ends."""
    from invperm_interp.runs.directory import RunDir
    from invperm_interp.training.trainer import on_schedule

    run = RunDir(run_dir)
    keep = on_schedule(run, run.read_config()[1])
    for step, path in run.checkpoints()[:-1]:
        if step not in keep:
            path.unlink()


def _next_stop(run_dir: Path, cfg: TrainConfig) -> int:
    from invperm_interp.runs.directory import RunDir

    found = RunDir(run_dir).checkpoints()
    last = found[-1][0] if found else 0
    return min(last + EVAL_EVERY, cfg.steps)


def _worker_init() -> None:
    os.nice(10)
    torch.set_num_threads(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs/census", help="where the training runs go")
    parser.add_argument("--workers", type=int, default=2, help="training processes (1 thread each)")
    parser.add_argument("--phase", choices=["all", "train", "analyze"], default="all")
    parser.add_argument("--seeds", default="", help="override seeds per d, e.g. '10:8,6:4'")
    args = parser.parse_args()
    seeds = dict(SEEDS)
    for item in filter(None, args.seeds.split(",")):
        d, n = item.split(":")
        seeds[int(d)] = int(n)
    root = Path(args.runs)
    root.mkdir(parents=True, exist_ok=True)
    todo = jobs(seeds)
    if args.phase in ("all", "train"):
        with ProcessPoolExecutor(args.workers, initializer=_worker_init) as pool:
            futures = [pool.submit(train_job, job, root) for job in todo]
            for f in tqdm(futures, desc="census: training", unit="run"):
                f.result()
    if args.phase in ("all", "analyze"):
        from census_report import analyze_all, write_assets

        write_assets(analyze_all(todo, root, args.workers), seeds)


if __name__ == "__main__":
    main()
