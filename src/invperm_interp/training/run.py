"""A trained run in memory: its configurations, the plain model training updated, its metrics.

``Run.load`` reads one from a run directory (``runs.RunDir``); ``train`` and ``train_many`` return
one. ``Run.model``, the hooked model of its weights, is built (importing TransformerLens) on first
use, so training never imports it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..config import ModelConfig, TrainConfig
from ..model.build import check_analysable, plain_model
from ..model.disentangled import DisentangledTransformer
from ..model.standard import StandardTransformer
from ..runs import checkpoint as ckpt
from ..runs.directory import RunDir, RunWarning
from ..runs.evaluation import Evaluation

if TYPE_CHECKING:
    from ..model.hooked import HookedDisentangledTransformer
    from ..model.standard_hooked import HookedStandardTransformer

__all__ = ["Run", "resolve_device", "unanalysable"]


def resolve_device(spec: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; anything else as given (and checked)."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={spec!r} was asked for but CUDA is not available; use 'auto'")
    return device


def unanalysable(cfg: ModelConfig) -> str | None:
    """Why the mechanism analyses cannot read a model of ``cfg``, in one line (a standard model with
    LayerNorm or MLPs: its map to the disentangled model is not exact, ``model.note_map``), or
    None when they can (``Run.analysis_model``). Its behaviour can still be measured."""
    try:
        check_analysable(cfg)
    except ValueError as err:
        return str(err)
    return None


@dataclass
class Run:
    """A trained model with its configurations and metrics; ``dir`` is None for a run kept in
    memory only (``out_dir=None``). ``weights`` is the hook-free model training updated (disentangled
    or standard, ``model_cfg.arch``);
    ``model``, the hooked model of its weights, is built (importing TransformerLens) on first use;
    the analyses read ``analysis_model``, which needs no TransformerLens."""

    model_cfg: ModelConfig
    train_cfg: TrainConfig
    weights: DisentangledTransformer | StandardTransformer
    metrics: list[Evaluation]
    step: int
    dir: Path | None = None

    @property
    def final_metrics(self) -> Evaluation | None:
        """The last evaluation (None for a run without one)."""
        return self.metrics[-1] if self.metrics else None

    @cached_property
    def model(self) -> HookedDisentangledTransformer | HookedStandardTransformer:
        """The hooked model of ``weights`` (a copy, on the same device)."""
        from ..model.hooked import hooked_model

        return hooked_model(self.weights)

    @cached_property
    def analysis_model(self) -> DisentangledTransformer:
        """The plain disentangled model the analyses read (no TransformerLens): ``weights``
        itself, or for a standard run the disentangled model its weights map to exactly
        (``model.note_map``; attention-only, no LayerNorm: else a one-line ``ValueError``)."""
        from ..model.build import analysis_model

        return analysis_model(self.weights)

    @classmethod
    def load(cls, run_dir: str | Path, step: int | None = None, device: str = "cpu") -> Run:
        """A run from disk: the final weights, or checkpoint ``step``; safetensors only."""
        run = RunDir(run_dir)
        weights = run.read_weights(step)
        model = plain_model(weights.model_cfg, seed=0)
        ckpt.load_model_tensors(model, weights.tensors, weights.path)
        model = model.to(resolve_device(device))
        metrics = [m for m in run.read_metrics() if m.step <= weights.step]
        last = weights.meta.evaluation  # the final weights file keeps the last record
        if last is not None and (not metrics or metrics[-1].step < last.step):
            warnings.warn(f"{run.metrics} lacks the records up to step {weights.step} "
                          "(deleted or replaced?): only the final record, kept in "
                          "the final weights, is known", RunWarning, stacklevel=2)
            metrics = [last]
        return cls(weights.model_cfg, weights.train_cfg, model, metrics, weights.step, run.path)

