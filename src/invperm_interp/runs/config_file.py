"""A run's configuration on disk: the text of ``config.json``, reading it back, the hash that ties
checkpoints to the configuration that wrote them, and what differs between two configurations
(a resume must not change what a step computes)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..config import ModelConfig, TrainConfig

__all__ = ["RESUMABLE_FIELDS", "config_diffs", "config_hash", "config_text", "configs_from_json"]

# Fields that may change between a run and its resumption without changing what it computes (the
# stopping rules only decide where a run ends, never what a step computes).
RESUMABLE_FIELDS = ("steps", "out_dir", "threads", "device", "checkpoint_every",
                    "checkpoint_dense_every", "checkpoint_dense_until", "stop_at_mse",
                    "stop_at_floor", "floor_patience")


def config_hash(model_cfg: ModelConfig, train_cfg: TrainConfig) -> str:
    """A digest of everything that fixes a run's trajectory (not steps, out_dir, threads, …)."""
    train = {k: v for k, v in train_cfg.to_dict().items() if k not in RESUMABLE_FIELDS}
    text = json.dumps({"model": model_cfg.to_dict(), "train": train}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def config_diffs(stored: tuple[ModelConfig, TrainConfig], model_cfg: ModelConfig,
                 train_cfg: TrainConfig) -> list[str]:
    """``"part.field: stored -> given"`` for every field that fixes the trajectory and differs."""
    old = {"model": stored[0].to_dict(), "train": stored[1].to_dict()}
    new = {"model": model_cfg.to_dict(), "train": train_cfg.to_dict()}
    return [f"{part}.{k}: {old[part].get(k)!r} -> {v!r}" for part in ("model", "train")
            for k, v in new[part].items() if k not in RESUMABLE_FIELDS and old[part].get(k) != v]


def configs_from_json(text: str, source: str | Path) -> tuple[ModelConfig, TrainConfig]:
    """The ``(model, train)`` configurations of a run's config text; ``source`` names it in errors."""
    try:
        data = json.loads(text)
        return ModelConfig.from_dict(data["model"]), TrainConfig.from_dict(data["train"])
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{source} is not a run's configuration: {err}") from None


def config_text(model_cfg: ModelConfig, train_cfg: TrainConfig) -> str:
    """The text of a run's ``config.json``."""
    return json.dumps({"model": model_cfg.to_dict(), "train": train_cfg.to_dict()}, indent=2) + "\n"
