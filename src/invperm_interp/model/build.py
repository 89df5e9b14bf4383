"""Which model a configuration builds: the one seam between ``ModelConfig.arch`` and the code that
trains, loads and hooks models (the trainer, ``Run``, the footprint count, the analysis).

``plain_model`` is what training updates (no TransformerLens); ``hooked_model`` the hooked model of
its weights (imports TransformerLens, on first use), ``with_hooks`` a model that has hooks;
``forward`` the loss-only forward both take; ``analysis_model`` the disentangled model the analyses
read (a standard model's through its exact map, ``note_map``).
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor, nn

from ..config import ModelConfig
from ..runs import checkpoint as ckpt
from .disentangled import DisentangledTransformer
from .standard import StandardTransformer

__all__ = ["analysis_model", "forward", "hooked_class", "hooked_model", "load_analysed",
           "plain_model", "with_hooks"]


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


def with_hooks(model: nn.Module):
    """``model`` itself when it is hooked, else the hooked model of its weights (a copy; imports
    TransformerLens): what hooks, a cache or patching need."""
    return model if hasattr(model, "run_with_hooks") else hooked_model(model)


def analysis_model(module: nn.Module):
    """The disentangled model the analyses read: a disentangled model itself (plain or hooked), or
    a standard attention-only model's map (``note_map.to_disentangled``, the same function, of the
    same kind); a standard model with LayerNorm or MLPs is a one-line ``ValueError`` (its map is
    not exact)."""
    if module.cfg.arch == "standard":
        from .note_map import to_disentangled

        return to_disentangled(module)
    return module


def load_analysed(model: nn.Module, model_cfg: ModelConfig, tensors: dict[str, Tensor],
                  path) -> None:
    """Load a run's checkpoint ``tensors`` (read from ``path``) into its ``analysis_model``: a
    standard run's through its map."""
    if model_cfg.arch != "standard":
        ckpt.load_model_tensors(model, tensors, path)
        return
    plain = plain_model(replace(model_cfg, device="cpu"), seed=0)
    ckpt.load_model_tensors(plain, tensors, path)
    model.load_state_dict(analysis_model(plain).state_dict())
