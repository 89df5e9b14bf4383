"""The learning-rate schedule of a ``TrainConfig``: constant, or the note's cosine decay to 0 over a
horizon fixed when the run starts (``schedule_steps``)."""

from __future__ import annotations

import math

from ..config import TrainConfig

__all__ = ["check_horizon", "learning_rate"]


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """The lr of update ``step`` (0-based). Cosine: decay to 0 over ``H = schedule_steps`` updates,
    ``lr·½(1 + cos(π·min(step, H)/H))``, the first update at the full lr (the note's code)."""
    if cfg.lr is None or cfg.schedule is None or cfg.schedule == "cosine" and not cfg.schedule_steps:
        cfg = cfg.resolved()
    if cfg.schedule == "constant":
        return float(cfg.lr)
    horizon = cfg.schedule_steps
    return float(cfg.lr) * 0.5 * (1.0 + math.cos(math.pi * min(step, horizon) / horizon))


def check_horizon(cfg: TrainConfig) -> None:
    """A resolved cosine run must not go past its horizon, where the lr is 0: a ``ValueError``
    (extending a finished cosine run with more steps would otherwise run them at lr 0)."""
    if cfg.schedule == "cosine" and cfg.schedule_steps is not None and cfg.steps > cfg.schedule_steps:
        raise ValueError(f"steps={cfg.steps} runs past the cosine schedule's horizon schedule_steps="
                         f"{cfg.schedule_steps}, where the lr is 0 (those steps would not change the "
                         "weights); a run's horizon is fixed when it starts: train a new run with "
                         f"schedule_steps >= {cfg.steps}")
