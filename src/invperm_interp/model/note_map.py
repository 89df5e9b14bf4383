"""The exact map from a standard attention-only transformer to the disentangled model
(docs/standard.md).

Without LayerNorm or MLPs the standard model's residual stream after layer ``l`` is ``h^l M_l``,
where ``h^l`` is the disentangled stream (``h⁰ = [X, I_T]``, then each head's softmax-weighted copy
of the previous stream) and

    M_0 = [W_E; W_pos]                                            (D_0, d_model)
    M_l = [M_{l-1}; M_{l-1} W_OV^{l,1}; …; M_{l-1} W_OV^{l,H}]    (D_l, d_model), W_OV = W_V W_O

so layer ``l`` head ``h`` scores ``h^{l-1} A hᵀ`` with ``A = M_{l-1} W_Q W_Kᵀ M_{l-1}ᵀ / √d_head``
and the output is ``h^L[rows] (M_L W_U)``. :func:`to_disentangled` builds the disentangled model
(plain or hooked, as the standard one) with those ``A`` and ``W_U``: the same function, in the note's
named blocks, so every analysis of the disentangled model reads it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor, nn

from ..config import ModelConfig

__all__ = ["check_mappable", "disentangled_config", "map_summary", "note_weights", "ov_spectra",
           "to_disentangled"]


def check_mappable(cfg: ModelConfig) -> None:
    """A ``ValueError`` in one line unless ``cfg`` is a standard attention-only model without
    LayerNorm, the form whose map to the disentangled model is exact."""
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    if cfg.arch != "standard":
        raise ValueError(f"the map takes a standard model (arch='standard'), got arch={cfg.arch!r}")
    if cfg.layernorm:
        raise ValueError("the map to the disentangled model is exact only without LayerNorm "
                         "(layernorm=True divides each row by its own norm, which no fixed "
                         "bilinear form A reproduces)")
    if cfg.d_mlp is not None:
        raise ValueError(f"the map to the disentangled model is exact only for attention-only "
                         f"models (d_mlp={cfg.d_mlp}: an MLP is not linear in the stream)")


def disentangled_config(cfg: ModelConfig) -> ModelConfig:
    """The disentangled model's configuration with ``cfg``'s layout, layers, heads, mask,
    read-out and dtype."""
    check_mappable(cfg)
    return replace(cfg, arch="disentangled", d_model=None, d_head=None, init_scale=None)


def _shape_error(name: str, t: Tensor, expected: tuple) -> ValueError:
    return ValueError(f"{name} must have shape {expected}, got {tuple(t.shape)}")


def note_weights(W_E: Tensor, W_pos: Tensor, layers: list[tuple[Tensor, Tensor, Tensor, Tensor]],
                 W_U: Tensor) -> tuple[list[Tensor], Tensor]:
    """``([A_1, …, A_L], W_U')`` of the disentangled model computing what the standard weights
    compute: ``W_E (d, m)``, ``W_pos (T, m)``, per layer ``(W_Q, W_K, W_V (H, m, d_head),
    W_O (H, d_head, m))``, ``W_U (m, d)``; ``A_l`` is ``(H, D_l, D_l)``, ``W_U'`` is ``(D_L, d)``."""
    d, m = W_E.shape
    if W_pos.ndim != 2 or W_pos.shape[1] != m:
        raise _shape_error("W_pos", W_pos, ("T", m))
    if W_U.shape != (m, d):
        raise _shape_error("W_U", W_U, (m, d))
    M, As = torch.cat([W_E, W_pos]), []  # M_0 (D_0, m)
    for layer, (W_Q, W_K, W_V, W_O) in enumerate(layers):
        H, _, dh = W_Q.shape
        for name, W, shape in (("W_Q", W_Q, (H, m, dh)), ("W_K", W_K, (H, m, dh)),
                               ("W_V", W_V, (H, m, dh)), ("W_O", W_O, (H, dh, m))):
            if W.shape != shape or dh == 0:
                raise _shape_error(f"layer {layer} {name}", W, shape)
        As.append((M @ W_Q) @ (M @ W_K).transpose(1, 2) / math.sqrt(dh))  # (H, D, D)
        M = torch.cat([M, *(M @ W_V @ W_O)])  # [M; M W_OV^1; …; M W_OV^H]
    return As, M @ W_U


def _layers(model: nn.Module) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
    return [(b.attn.W_Q, b.attn.W_K, b.attn.W_V, b.attn.W_O) for b in model.blocks]


@torch.no_grad()
def to_disentangled(model: nn.Module):
    """The disentangled model computing the same function as the standard attention-only model
    ``model`` (no LayerNorm), on its device and dtype, of the same kind: a
    ``HookedDisentangledTransformer`` for a hooked ``model``, else the plain
    ``DisentangledTransformer`` (no TransformerLens)."""
    cfg = getattr(model, "cfg", None)
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"model must be a standard transformer, got {type(model).__name__}")
    target = disentangled_config(cfg)
    if hasattr(model, "run_with_hooks"):
        from .hooked import HookedDisentangledTransformer as kind
    else:
        from .disentangled import DisentangledTransformer as kind
    wide = [[W.double() for W in layer] for layer in _layers(model)]  # the products in float64
    As, W_U = note_weights(model.embed.W_E.double(), model.pos_embed.W_pos.double(), wide,
                           model.unembed.W_U.double())
    note = kind(replace(target, device="cpu"), seed=0)
    for block, A in zip(note.blocks, As):
        block.attn.A.copy_(A)
    note.unembed.W_U.copy_(W_U)
    return note.to(model.embed.W_E.device)


@torch.no_grad()
def ov_spectra(model: nn.Module) -> list[list[list[float]]]:
    """The singular values of every head's ``W_OV = W_V W_O`` ``(d_model, d_model)``, largest
    first, layer by layer: its rank is at most ``d_head``."""
    return [[torch.linalg.svdvals(W_V[h] @ W_O[h]).tolist() for h in range(W_V.shape[0])]
            for _, _, W_V, W_O in _layers(model)]


def map_summary(model: nn.Module) -> dict:
    """What an analysis through the map records of the standard model: its configuration and, per
    layer and head, ``W_OV``'s singular values and numerical rank (values above ``1e-6`` of the
    largest), which ``d_head`` bounds."""
    spectra = ov_spectra(model)
    return {"model": model.cfg.to_dict(), "ov_spectra": spectra, "ov_rank": numerical_ranks(spectra)}


def numerical_ranks(spectra: list[list[list[float]]]) -> list[list[int]]:
    """Per layer and head, the singular values (largest first, :func:`ov_spectra`) above ``1e-6``
    of the largest."""
    return [[sum(v > 1e-6 * max(head[0], 1e-300) for v in head) for head in layer]
            for layer in spectra]
