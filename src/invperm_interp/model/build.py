"""Which model a configuration builds: the one seam between ``ModelConfig.arch`` and the code that
trains, loads and hooks models (the trainer, ``Run``, the footprint count, the analysis).

``plain_model`` is what training updates (no TransformerLens); ``hooked_model`` the hooked model of
its weights (imports TransformerLens, on first use); ``forward`` the loss-only forward both take.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ModelConfig
from .disentangled import DisentangledTransformer
from .standard import StandardTransformer

__all__ = ["forward", "hooked_class", "hooked_model", "plain_model"]


def plain_model(cfg: ModelConfig, seed: int | None = None, *,
                max_memory: int | str | None = None) -> DisentangledTransformer | StandardTransformer:
    """The hook-free model of ``cfg`` (``cfg.arch``), initialised from ``seed``."""
    if cfg.arch == "standard":
        return StandardTransformer(cfg, seed, max_memory=max_memory)
    return DisentangledTransformer(cfg, seed, max_memory=max_memory)


def forward(model: nn.Module, X: Tensor) -> Tensor:
    """``X (B, T, d)`` → ``(B, d, d)`` without input checks or hooks: what a training step runs."""
    return model(X, check_input=False)


def hooked_class(cfg: ModelConfig) -> type:
    """The hooked model class of ``cfg.arch`` (imports TransformerLens)."""
    if cfg.arch == "standard":
        from .standard_hooked import HookedStandardTransformer

        return HookedStandardTransformer
    from .hooked import HookedDisentangledTransformer

    return HookedDisentangledTransformer


def hooked_model(module: nn.Module):
    """The hooked model of a plain (or hooked) model's weights, copied, on its device."""
    return hooked_class(module.cfg).from_module(module)
