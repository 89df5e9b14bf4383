"""Export of a standard model to a native TransformerLens model computing the same function.

``standard_to_transformer_lens(model)`` builds ``TransformerBridge.boot_native`` with the standard
model's own shapes (``d_model``, ``d_head``, ``n_heads``, ``d_mlp``, LayerNorm or none, ReLU) and
copies its weights into the native model: ``q``, ``k``, ``v`` (``nn.Linear``, ``(H·d_head,
d_model)``) carry ``W_Q^h``, ``W_K^h``, ``W_V^h`` transposed head by head, ``o`` carries ``W_O``, the
LayerNorms their ``w`` and ``b``, the MLP ``W_in``, ``b_in``, ``W_out``, ``b_out``, ``head`` the read-out
``W_U``; every bias the standard model lacks is 0. A layer with fewer heads than the most has
``W_O = 0`` for the rest, so they write nothing.

``X`` holds real-valued rows, so ``export.forward(X)`` feeds ``export.embed(X) = X W_E`` as
TransformerLens's ``inputs_embeds`` (the bridge adds ``W_pos``); for ``d <= 12`` the native token
embedding lists the task's rows (``tokens.vocabulary``, times ``W_E``) and ``export.to_tokens(X)``
gives token ids, on which ``hook_embed`` fires. Hook names are TransformerLens's and the
standard model's alike (``blocks.{l}.attn.hook_pattern``, ``blocks.{l}.hook_resid_post``, …).
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor, nn

from . import tokens
from .export import MAX_TOKEN_D, NativeRunner

__all__ = ["StandardExport", "standard_to_transformer_lens"]


class StandardExport(NativeRunner):
    """A native TransformerLens model (``tl_model``) computing the standard model's function:
    ``forward(X (B, T, d)) → (B, R, d)``, ``embed(X) = X W_E`` (the bridge's ``inputs_embeds``)."""

    def __init__(self, tl_model, source: nn.Module):
        self.tl_model, self.layout, self.rows = tl_model, source.cfg.layout, source.unembed.rows
        self.W_E = source.embed.W_E.detach().clone()

    def embed(self, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d_model"]:
        d, T = self.layout.d, self.layout.T
        if not isinstance(X, Tensor) or X.ndim != 3 or tuple(X.shape[1:]) != (T, d):
            shape = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
            raise ValueError(f"X must be a tensor of shape (B, {T}, {d}), got {shape}")
        return X.to(self.W_E) @ self.W_E


def standard_to_transformer_lens(model: nn.Module) -> StandardExport:
    """A native TransformerLens model computing the standard model ``model``'s function (plain or
    hooked; with or without LayerNorm and MLPs), its weights copied, in its dtype and on its
    device, in eval mode."""
    cfg = getattr(model, "cfg", None)
    if getattr(cfg, "arch", None) != "standard":
        raise ValueError(f"model must be a standard transformer (arch='standard'), got "
                         f"{type(model).__name__}")
    from transformer_lens import TransformerBridge, TransformerBridgeConfig

    W_E = model.embed.W_E.detach()
    dtype, device = W_E.dtype, W_E.device
    vocab = tokens.vocabulary(cfg.layout) if cfg.d <= MAX_TOKEN_D else torch.eye(cfg.d)
    m, dh, H = cfg.d_model, cfg.d_head, max(cfg.heads)
    tl_cfg = TransformerBridgeConfig(
        d_model=m, d_head=dh, n_heads=H, n_layers=cfg.n_layers, n_ctx=cfg.T,
        d_vocab=vocab.shape[0], d_vocab_out=cfg.d, attn_only=cfg.d_mlp is None,
        d_mlp=cfg.d_mlp, act_fn="relu", normalization_type="LN" if cfg.layernorm else None,
        attention_dir=cfg.attention_dir, positional_embedding_type="standard",
        init_weights=False, architecture="TransformerLensNative",
        model_name="invperm-standard-export", device=str(device), dtype=dtype)
    bridge = TransformerBridge.boot_native(tl_cfg, device=device, dtype=dtype)
    native = bridge.original_model
    with torch.no_grad():
        for p in native.parameters():
            p.zero_()
        native.tok_embed.weight.copy_(vocab.to(W_E) @ W_E)
        native.pos.weight.copy_(model.pos_embed.W_pos.detach())
        for block, layer in zip(model.blocks, native.layers):
            attn = block.attn
            for h in range(attn.W_Q.shape[0]):
                rows = slice(h * dh, (h + 1) * dh)
                layer.attn.q.weight[rows] = attn.W_Q[h].T
                layer.attn.k.weight[rows] = attn.W_K[h].T
                layer.attn.v.weight[rows] = attn.W_V[h].T
                layer.attn.o.weight[:, rows] = attn.W_O[h].T
            if cfg.layernorm:
                _copy_norm(layer.ln1, block.ln1)
            if cfg.d_mlp is not None:
                if cfg.layernorm:
                    _copy_norm(layer.ln2, block.ln2)
                layer.mlp.fc_in.weight.copy_(block.mlp.W_in.T)
                layer.mlp.fc_in.bias.copy_(block.mlp.b_in)
                layer.mlp.fc_out.weight.copy_(block.mlp.W_out.T)
                layer.mlp.fc_out.bias.copy_(block.mlp.b_out)
        if cfg.layernorm:
            _copy_norm(native.ln_out, model.ln_final)
        native.head.weight.copy_(model.unembed.W_U.T)
    bridge.eval()
    return StandardExport(bridge, model)


def _copy_norm(native: nn.Module, ours: nn.Module) -> None:
    """The native LayerNorm (behind the bridge's wrapper) gets our ``w`` and ``b``."""
    native.weight.copy_(ours.w)
    native.bias.copy_(ours.b)
