"""Training: ``train(model_cfg, train_cfg) -> Run``, checkpointed and resumable (the loop itself is
``trainer.Trainer``).

Every step draws a fresh batch on the training device from a seeded generator, so a run of N steps
is a prefix of a run of 2N steps with the same seed (except a cosine schedule, whose horizon is
``schedule_steps``). What a run directory holds is described in ``runs.directory``. Resuming from the last
checkpoint ends bit-identical to an uninterrupted run on the same machine with the same thread count.
The CPU kernels a run uses are deterministic without ``torch.use_deterministic_algorithms``: a run
under that mode has the same bits (tests/runs/test_faults.py checks it); another thread count may not.
Across CPUs a run is step-identical, not bit-identical: the same seed stops at the same step, but
another CPU's kernels sum in another order, so the final weights and metrics differ in the last
bits (float32 numbers are compared at 1e-4 relative, tests/README.md).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .. import memory
from ..config import ModelConfig, TrainConfig
from ..runs.config_file import config_diffs
from ..runs.directory import RunDir
from .cpu import threads_for
from .footprint import training_estimate
from .run import Run, resolve_device
from .schedule import check_horizon
from .signals import StopRequest
from .trainer import Diverged, Trainer

__all__ = ["Diverged", "effective_configs", "resume", "train", "train_or_reuse"]


def effective_configs(
    model_cfg: ModelConfig, train_cfg: TrainConfig
) -> tuple[ModelConfig, TrainConfig, list[str]]:
    """The configurations a run actually uses (recipe values filled in, ``init``/``dtype``
    overrides applied to the model config) and notes on what was overridden."""
    if not isinstance(model_cfg, ModelConfig):
        raise ValueError(f"model_cfg must be a ModelConfig, got {type(model_cfg).__name__}")
    if not isinstance(train_cfg, TrainConfig):
        raise ValueError(f"train_cfg must be a TrainConfig, got {type(train_cfg).__name__}")
    cfg = train_cfg.resolved()
    changes, notes = {}, []
    if cfg.init is not None and cfg.init != model_cfg.init:
        changes["init"] = cfg.init
        why = "the note's recipe starts from zeros" if cfg.recipe == "paper" else "train_cfg.init"
        notes.append(f"init={cfg.init!r} instead of the model config's {model_cfg.init!r} ({why})")
    if cfg.dtype is not None and cfg.dtype != model_cfg.dtype:
        changes["dtype"] = cfg.dtype
    return replace(model_cfg, **changes), cfg, notes


def train(
    model_cfg: ModelConfig, train_cfg: TrainConfig, *, resume: bool = False,
    stop_at: int | None = None, progress: bool = True, max_memory: int | str | None = None,
    force: bool = False,
) -> Run:
    """Train a ``DisentangledTransformer`` and return the :class:`Run` (``run.model``: hooked).

    ``resume=True`` continues the run in ``train_cfg.out_dir`` from its last checkpoint (``steps``
    may be raised to extend it). ``stop_at`` stops after that many steps with a checkpoint, as an
    interruption would. A non-finite loss, evaluation MSE or weight raises ``ValueError`` naming
    the step and the last good checkpoint (non-finite weights are never checkpointed), recorded in
    the run directory's ``diverged.json`` (``RunDir.write_diverged``), as a sweep's runs are. An
    ``out_dir`` that cannot be written, or lacks room for the run's checkpoints, is a
    ``ValueError`` before any training work; a write that fails later (a full disk) is an
    ``OSError`` naming the file, the step and the last good checkpoint. A ``memory`` estimate over
    ``max_memory`` (default: what is left) is a ``ValueError`` before any work. The run directory
    is locked (``runs.lock.RunLock``); a new run's must be empty (``force``: or hold no run). SIGINT or
    SIGTERM checkpoints and raises ``signals.Interrupted``.
    """
    model_cfg, cfg, notes = effective_configs(model_cfg, train_cfg)
    end = cfg.steps if stop_at is None else stop_at
    if not isinstance(end, int) or isinstance(end, bool) or not 1 <= end <= cfg.steps:
        raise ValueError(f"stop_at must be an integer in [1, steps={cfg.steps}], got {stop_at!r}")
    if resume and cfg.out_dir is None:
        raise ValueError("resume=True needs train_cfg.out_dir, the run directory to continue")
    check_horizon(cfg)
    memory.check(training_estimate(model_cfg, cfg.optimizer, cfg.batch_size, cfg.eval_size),
                 max_memory, resolve_device(cfg.device))
    old_threads = torch.get_num_threads()
    threads = threads_for(cfg)
    if threads is not None:
        torch.set_num_threads(threads)
    trainer = None
    try:
        trainer = Trainer(model_cfg, cfg, resume, force=force)
        for note in notes if progress else ():
            tqdm.write(f"invperm train: {note}")
        with StopRequest() as stop:
            return trainer.run(end, stop, progress)
    finally:
        if trainer is not None:
            trainer.close()
        torch.set_num_threads(old_threads)


def resume(run_dir: str | Path, *, steps: int | None = None, threads: int | None = None,
           stop_at: int | None = None, progress: bool = True,
           max_memory: int | str | None = None) -> Run:
    """Continue the run in ``run_dir`` from its last checkpoint (to ``steps`` if given)."""
    model_cfg, train_cfg = RunDir(run_dir).read_config()
    changes = {"out_dir": str(run_dir)}
    if steps is not None:
        changes["steps"] = steps
    if threads is not None:
        changes["threads"] = threads
    return train(model_cfg, replace(train_cfg, **changes), resume=True, stop_at=stop_at,
                 progress=progress, max_memory=max_memory)


def train_or_reuse(model_cfg: ModelConfig, train_cfg: TrainConfig,
                   run_dir: str | Path | None = None, *, progress: bool = True,
                   max_memory: int | str | None = None) -> Run:
    """Train into ``run_dir`` (default ``train_cfg.out_dir``) once; later calls load the finished
    run, so scripts and the demo can be rerun. An unfinished run of the same configuration is
    resumed; a run of another configuration or length is a ``ValueError``."""
    run_dir = train_cfg.out_dir if run_dir is None else run_dir
    if run_dir is None:
        raise ValueError("run_dir (or train_cfg.out_dir) must name the run directory, got None")
    run_dir = RunDir(run_dir)
    cfg = replace(train_cfg, out_dir=str(run_dir))
    if not run_dir.config.is_file():
        return train(model_cfg, cfg, progress=progress, max_memory=max_memory)
    model_cfg, cfg, _ = effective_configs(model_cfg, cfg)
    stored = run_dir.read_config()
    diffs = config_diffs(stored, model_cfg, cfg)
    if stored[1].steps != cfg.steps:
        diffs.append(f"train.steps: {stored[1].steps!r} -> {cfg.steps!r}")
    if diffs:
        raise ValueError(f"{run_dir} holds another run (its {run_dir.CONFIG} differs in "
                         f"{'; '.join(diffs)}); remove it or choose another directory")
    if run_dir.is_finished:
        if progress:
            tqdm.write(f"reusing the finished run in {run_dir}")
        return Run.load(run_dir.path)
    return resume(run_dir.path, threads=cfg.threads, progress=progress, max_memory=max_memory)
