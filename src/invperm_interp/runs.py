"""A training run and its directory.

A run directory holds ``config.json`` (model + train, :func:`write_config` / :func:`read_config`),
``metrics.jsonl`` (one evaluation per line, appended and flushed: :func:`append_metrics` /
:func:`read_metrics`), ``checkpoints/step_N.safetensors`` (weights, optimizer and generator state)
and ``final.safetensors`` (the trained weights); ``checkpoint.choose`` picks the weights file to
read. :class:`Run` is a trained model with its configurations and metrics. Nothing here trains:
``train.train`` and ``train.train_or_reuse`` write runs.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from . import checkpoint as ckpt
from .config import ModelConfig, TrainConfig, config_hash, config_text, read_config
from .model import HookedDisentangledTransformer

__all__ = ["Run", "append_metrics", "check_out_dir", "checkpoint_bytes", "config_hash",
           "read_config", "read_metrics", "resolve_device", "write_config", "write_metrics"]


def resolve_device(spec: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; anything else as given (and checked)."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={spec!r} was asked for but CUDA is not available; use 'auto'")
    return device


@dataclass
class Run:
    """A trained model with its configurations and metrics; ``dir`` is None for a run kept in
    memory only (``out_dir=None``)."""

    model_cfg: ModelConfig
    train_cfg: TrainConfig
    model: HookedDisentangledTransformer
    metrics: list[dict]
    step: int
    dir: Path | None = None

    @property
    def final_metrics(self) -> dict:
        return self.metrics[-1] if self.metrics else {}

    @classmethod
    def load(cls, run_dir: str | Path, step: int | None = None, device: str = "cpu") -> Run:
        """A run from disk: the final weights, or checkpoint ``step``; safetensors only."""
        run_dir = Path(run_dir)
        weights = ckpt.read_run(run_dir, step)
        model = HookedDisentangledTransformer.from_weights(weights).to(resolve_device(device))
        metrics = [m for m in read_metrics(run_dir) if m["step"] <= weights.step]
        return cls(weights.model_cfg, weights.train_cfg, model, metrics, weights.step, run_dir)


# -- files ----------------------------------------------------------------------------------------
def write_config(run_dir: str | Path, model_cfg: ModelConfig, train_cfg: TrainConfig) -> None:
    """``run_dir/config.json``, written atomically."""
    ckpt.atomic_write(Path(run_dir) / "config.json", config_text(model_cfg, train_cfg).encode())


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of ``run_dir/metrics.jsonl`` (none when it does not exist); a torn last line
    (a crash while appending) is skipped, a bad line elsewhere is a ``ValueError``."""
    path = Path(run_dir) / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    metrics = []
    for i, line in enumerate(lines):
        try:
            metrics.append(json.loads(line))
        except json.JSONDecodeError:
            if i < len(lines) - 1:  # only the last line can be torn by a crash
                raise ValueError(f"{path} line {i + 1} is not JSON") from None
    return metrics


def write_metrics(run_dir: str | Path, records: list[dict]) -> None:
    """Replace ``run_dir/metrics.jsonl`` by ``records``, atomically."""
    lines = "".join(json.dumps(m) + "\n" for m in records)
    ckpt.atomic_write(Path(run_dir) / "metrics.jsonl", lines.encode())


def append_metrics(run_dir: str | Path, record: dict) -> None:
    """Append one record to ``run_dir/metrics.jsonl`` and flush it."""
    with open(Path(run_dir) / "metrics.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


# -- room for a run -------------------------------------------------------------------------------
def checkpoint_bytes(model_cfg: ModelConfig, cfg: TrainConfig) -> int:
    """About the size of one checkpoint: weights, Adam's two moments, generator state, header."""
    widths, heads = model_cfg.widths, model_cfg.heads
    n = sum(h * w * w for h, w in zip(heads, widths)) + widths[-1] * model_cfg.d  # A's and W_U
    copies = 3 if cfg.optimizer == "adam" else 1
    return n * copies * torch.empty((), dtype=model_cfg.torch_dtype).element_size() + 16384


def check_out_dir(run_dir: Path, model_cfg: ModelConfig, cfg: TrainConfig, resume: bool) -> None:
    """Fail before any training work when ``run_dir`` cannot hold the run: it cannot be created
    or written (a path under a file, a read-only mount, no permission) or lacks the room for
    every checkpoint the run will write."""
    try:
        if not resume:  # a missing run to resume is read_config's error, not created here
            run_dir.mkdir(parents=True, exist_ok=True)
        if not run_dir.is_dir():
            return
        probe = run_dir / f".invperm-write-test{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                f.write(bytes(4096))
                f.flush()
                os.fsync(f.fileno())
        finally:
            probe.unlink(missing_ok=True)
        free = shutil.disk_usage(run_dir).free
    except OSError as err:
        raise ValueError(f"out_dir {run_dir} cannot be written ({err.strerror or err}); "
                         "choose another out_dir") from None
    need = (cfg.steps // cfg.checkpoint_every + 2) * checkpoint_bytes(model_cfg, cfg)
    if free < need:
        raise ValueError(f"out_dir {run_dir} has {free} bytes free; this run's checkpoints need "
                         f"about {need} (steps={cfg.steps}, checkpoint_every={cfg.checkpoint_every})")
