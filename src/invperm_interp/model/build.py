"""Which models a configuration builds and how the analyses read them: the model-stage half of
``cfg.architecture`` (the top level's ``architecture.Architecture``), whose model classes and exact
map this module loads by name, so that the trainer, ``Run``, the footprint count, the sweep's price
and the analyses never ask which architecture they hold.

``plain_model`` is what training updates (no TransformerLens); ``model_class(cfg, "hooked")`` the
hooked class of its weights (imports TransformerLens, on first use), ``with_hooks`` a model that
has hooks; ``forward`` the loss-only forward both take; ``analysis_model`` the disentangled model
the analyses read (a standard model's through its exact map, ``note_map``).
"""

from __future__ import annotations

from dataclasses import replace
from importlib import import_module
from types import ModuleType

from torch import Tensor, nn

from ..config import ModelConfig
from ..runs import checkpoint as ckpt

__all__ = ["analysis_config", "analysis_model", "check_analysable", "forward", "load_analysed",
           "made_on", "map_summary", "model_class", "plain_model", "with_hooks"]


def model_class(cfg: ModelConfig, kind: str = "plain") -> type:
    """``cfg.architecture``'s ``"plain"`` or ``"hooked"`` model class, loaded through the model
    package's public names (the hooked one imports TransformerLens)."""
    if kind not in ("plain", "hooked"):
        raise ValueError(f"kind must be 'plain' or 'hooked', got {kind!r}")
    return getattr(import_module(__package__), getattr(cfg.architecture, kind))


def _note_map(cfg: ModelConfig) -> ModuleType | None:
    """The module of ``cfg``'s exact map to the disentangled model; None for that model itself."""
    name = cfg.architecture.note_map
    return None if name is None else import_module(f".{name}", __package__)


def plain_model(cfg: ModelConfig, seed: int | None = None, *,
                max_memory: int | str | None = None) -> nn.Module:
    """The hook-free model of ``cfg`` (``cfg.arch``), initialised from ``seed``."""
    return model_class(cfg)(cfg, seed, max_memory=max_memory)


def made_on(cfg: ModelConfig, device: str) -> nn.Module:
    """The hook-free model of ``cfg`` with its tensors made on ``device`` directly, their values
    unspecified (``"meta"``: shapes only): what the memory count runs."""
    return model_class(cfg).made_on(cfg, device)


def forward(model: nn.Module, X: Tensor) -> Tensor:
    """``X (B, T, d)`` → ``(B, d, d)`` without input checks or hooks: what a training step runs."""
    return model(X, check_input=False)


def with_hooks(model: nn.Module):
    """``model`` itself when it is hooked, else the hooked model of its weights (a copy; imports
    TransformerLens): what hooks, a cache or patching need."""
    return model if hasattr(model, "run_with_hooks") else model_class(model.cfg, "hooked").from_module(model)


def check_analysable(cfg: ModelConfig) -> None:
    """A one-line ``ValueError`` unless the analyses can read a model of ``cfg``: the disentangled
    model, or one whose map to it is exact (``note_map.check_mappable``)."""
    mapping = _note_map(cfg)
    if mapping is not None:
        mapping.check_mappable(cfg)


def analysis_config(cfg: ModelConfig) -> ModelConfig:
    """The configuration of the disentangled model the analyses read a model of ``cfg`` as."""
    mapping = _note_map(cfg)
    return cfg if mapping is None else mapping.disentangled_config(cfg)


def analysis_model(module: nn.Module):
    """The disentangled model the analyses read: a disentangled model itself (plain or hooked), or
    a standard attention-only model's map (``note_map.to_disentangled``, the same function, of the
    same kind); a standard model with LayerNorm or MLPs is a one-line ``ValueError`` (its map is
    not exact)."""
    mapping = _note_map(module.cfg)
    return module if mapping is None else mapping.to_disentangled(module)


def map_summary(module: nn.Module) -> dict | None:
    """What an analysis through the map records of the model (``note_map.map_summary``); None for
    the disentangled model, read as it is."""
    mapping = _note_map(module.cfg)
    return None if mapping is None else mapping.map_summary(module)


def load_analysed(model: nn.Module, model_cfg: ModelConfig, tensors: dict[str, Tensor],
                  path) -> None:
    """Load a run's checkpoint ``tensors`` (read from ``path``) into its ``analysis_model``: a
    standard run's through its map."""
    if _note_map(model_cfg) is None:
        ckpt.load_model_tensors(model, tensors, path)
        return
    plain = plain_model(replace(model_cfg, device="cpu"), seed=0)
    ckpt.load_model_tensors(plain, tensors, path)
    model.load_state_dict(analysis_model(plain).state_dict())
