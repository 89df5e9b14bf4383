"""The hooked standard transformer: :mod:`.standard`'s model with a TransformerLens ``HookPoint``
in place of every named identity (docs/standard.md).

Hook names are TransformerLens's: ``hook_embed``, ``hook_pos_embed``, ``blocks.{l}.hook_resid_pre``,
``blocks.{l}.ln1.hook_scale`` / ``hook_normalized``, ``blocks.{l}.attn.hook_q`` / ``hook_k`` /
``hook_v`` / ``hook_attn_scores`` / ``hook_pattern`` / ``hook_z``, ``blocks.{l}.hook_attn_out``,
``blocks.{l}.hook_resid_mid``, ``blocks.{l}.mlp.hook_pre`` / ``hook_post``,
``blocks.{l}.hook_mlp_out``, ``blocks.{l}.hook_resid_post``, ``ln_final.*``, and
``unembed.hook_readout`` (the read-out rows, as on the disentangled model). Shapes are
TransformerLens's: ``hook_q`` is ``(B, T, H, d_head)``, ``hook_attn_out`` ``(B, T, d_model)``.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint

from ..config import ModelConfig
from . import tokens
from .hooked import CopyingHookPoint, FromWeights, TaskForward
from .standard import StandardTransformer, validated_input

# Hooks that hand their hooks a copy: a view of a parameter or of the stream, or a tensor autograd
# saves (CopyingHookPoint).
_COPYING = ("hook_pos_embed", "hook_pattern", "hook_readout")


class HookedStandardTransformer(FromWeights, TaskForward, StandardTransformer, HookedRootModule):
    """A standard transformer with TransformerLens hooks: ``forward(X (B, T, d)) → (B, d, d)``.

    ``run_with_cache`` / ``run_with_hooks`` / ``hooks()`` work as on TransformerLens models; the
    stacked weights ``W_E``, ``W_pos``, ``W_Q``, ``W_K``, ``W_V``, ``W_O`` ``(L, H, …)`` and ``W_U``
    are read as there. ``model.to_note.to_disentangled`` maps an attention-only model without
    LayerNorm to the disentangled model computing the same function.
    """

    def __init__(self, cfg: ModelConfig, seed: int | None = None, *,
                 max_memory: int | str | None = None):
        super().__init__(replace(cfg, device="cpu"), seed, max_memory=max_memory)
        for module in list(self.modules()):
            for name in getattr(module, "identity_hooks", ()):
                setattr(module, name, CopyingHookPoint() if name in _COPYING else HookPoint())
        self.setup()
        self.cfg = cfg
        if cfg.device != "cpu":
            self.to(cfg.device)
        self.eval()  # nothing differs in training; TransformerLens's analysis tools require eval

    def predict(self, X: Tensor) -> Tensor:
        """The predicted ``Y (B, d, d)`` of a checked ``X (B, T, d)``."""
        return self.direct(X)

    def check_input(self, X: Tensor) -> Tensor:
        """Validate ``X`` against the layout; return it in the model's dtype and device."""
        return validated_input(self.cfg, X, self.pos_embed.W_pos)

    def run_with_cache(self, *model_args, return_cache_object: bool = True,
                       remove_batch_dim: bool = False, **kwargs) -> tuple[Tensor, ActivationCache]:
        """As ``HookedRootModule.run_with_cache``, the cache an ``ActivationCache`` (so that
        ``cache["pattern", 0]`` works); ``return_cache_object=False`` gives the plain dict."""
        out, cache = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim,
                                            **kwargs)
        if return_cache_object:
            cache = ActivationCache(cache, self, has_batch_dim=not remove_batch_dim)
        return out, cache

    # -- TransformerLens's stacked weights ----------------------------------------------------------
    def _stacked(self, name: str) -> Tensor:
        if len(set(self.cfg.heads)) > 1:
            raise ValueError(f"{name} is stacked over layers only when every layer has the same number "
                             f"of heads, got heads={list(self.cfg.heads)}: use blocks[l].attn.{name}")
        return torch.stack([getattr(block.attn, name) for block in self.blocks])

    @property
    def W_E(self) -> Tensor:
        """``(d, d_model)``: the read-in of the input rows."""
        return self.embed.W_E

    @property
    def W_pos(self) -> Tensor:
        """``(T, d_model)``."""
        return self.pos_embed.W_pos

    @property
    def W_Q(self) -> Tensor:
        """``(L, H, d_model, d_head)`` (every layer with the same number of heads)."""
        return self._stacked("W_Q")

    @property
    def W_K(self) -> Tensor:
        return self._stacked("W_K")

    @property
    def W_V(self) -> Tensor:
        return self._stacked("W_V")

    @property
    def W_O(self) -> Tensor:
        """``(L, H, d_head, d_model)``."""
        return self._stacked("W_O")

    @property
    def W_U(self) -> Tensor:
        """``(d_model, d)``: ``resid[:, rows] @ model.W_U`` is the output."""
        return self.unembed.W_U

    def to_tokens(self, X: Tensor) -> Tensor:
        """``X (B, T, d)`` → token ids ``(B, T)`` (:mod:`.tokens`); the model takes either."""
        return tokens.to_tokens(self.cfg.layout, X)

    @property
    def device(self) -> torch.device:
        return self.pos_embed.W_pos.device

    def _apply(self, fn, *args, **kwargs):
        """``.to`` / ``.double()`` keep ``cfg.dtype`` and ``cfg.device`` current."""
        module = super()._apply(fn, *args, **kwargs)
        W = self.pos_embed.W_pos
        dtype = {torch.float32: "float32", torch.float64: "float64"}.get(W.dtype)
        if dtype is None:
            raise ValueError(f"the model's dtype must be float32 or float64, got {W.dtype}")
        if (dtype, str(W.device)) != (self.cfg.dtype, self.cfg.device):
            self.cfg = replace(self.cfg, dtype=dtype, device=str(W.device))
        return module

    def __repr__(self) -> str:
        cfg = self.cfg
        return (f"HookedStandardTransformer(layout={cfg.layout}, n_layers={cfg.n_layers}, "
                f"heads={list(cfg.heads)}, d_model={cfg.d_model}, d_head={cfg.d_head}, "
                f"layernorm={cfg.layernorm}, d_mlp={cfg.d_mlp}, "
                f"attention_dir={cfg.attention_dir!r}, readout={cfg.readout!r})")
