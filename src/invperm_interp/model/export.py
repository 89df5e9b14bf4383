"""Export to a native TransformerLens model that computes the same function, exactly.

``to_transformer_lens(model)`` builds ``TransformerBridge.boot_native(TransformerBridgeConfig(…))``:
an attention-only transformer with no LayerNorm, ``d_model = D_L`` (the final stream width), one
``d_head = D_{L-1}`` and ``n_heads = max_l H_l``, so every TransformerLens tool runs on it
unchanged. The growing stream ``h^l = [h^{l-1}, z_1, …, z_H]`` lives in the first ``D_l`` features
of the fixed-width stream; the features after them are still zero. Per layer ``l`` and head ``k``:

- ``W_Q`` carries ``√d_head · A_{l,k}`` on the first ``D_l`` features (TransformerLens divides the
  scores by ``√d_head``; folding it into ``W_Q`` makes ``q·k/√d_head = h A hᵀ``);
- ``W_K`` and ``W_V`` are the identity on the first ``D_l`` features (keys and values are ``h^l``);
- ``W_O`` writes head ``k``'s ``z`` into the fresh block ``[D_l(1+k), D_l(2+k))``;
- all biases are zero; heads beyond ``H_l`` have ``W_O = 0`` and so write nothing.

Positions are a learned positional embedding ``W_pos[t] = e_{d+t}`` (the ``I_T`` of ``h^0``), and
the read-out is ``W_U`` (``unembed``) applied to every row, of which the read-out rows are kept.

How ``X`` is fed in. ``X`` holds real-valued rows, not token ids, so ``export.forward(X)`` feeds
``export.embed(X) = [X, 0]`` (``X W`` with ``W = [I_d, 0]``, ``(B, T, D_L)``) as TransformerLens's
``inputs_embeds`` (a float tensor given to the bridge is taken as embeddings); this works for any
``X``. On that path the bridge skips its token embedding, so ``hook_embed`` does not fire and
``cache.decompose_resid()`` has no ``embed`` term (``X`` is in ``blocks.0.hook_resid_pre[..., :d]``).
The task's rows also form a small vocabulary (:mod:`.tokens`): every binary row (``P``, ``Y_P``
and zero rows) and the scratch vector ``s``. For ``d <= 12`` the export's ``W_E`` lists them (token
``v < 2^d`` is the row whose bits, left to right, spell ``v``; token ``2^d`` is ``s`` if not binary), and
``export.to_tokens(X)`` gives ``(B, T)`` token ids: the fully native path, on which ``hook_embed``
fires, ``decompose_resid`` is complete and ``transformer_lens.patching`` reads its position axis
``T`` from the tokens' last dimension. For ``d > 12`` ``W_E`` is ``[I_d, 0]`` (token ``i`` is ``e_i``)
and ``to_tokens`` refuses.

Hook names, ours → the export's (``HOOK_MAP`` as data; ``activation`` does the conversion):

- ``hook_embed`` → ``blocks.0.hook_resid_pre[..., :d]`` (``hook_embed`` too, on the token path)
- ``hook_pos_embed`` → ``hook_pos_embed[..., d:d+T]``
- ``blocks.{l}.hook_resid_pre`` / ``hook_resid_post`` → the same name, ``[..., :D_l]`` / ``[..., :D_{l+1}]``
- ``blocks.{l}.attn.hook_pattern`` → the same name, heads ``[:, :H_l]``
- ``blocks.{l}.attn.hook_z``, ``hook_k``, ``hook_v`` → the same name, ``[:, :, :H_l, :D_l]``
- ``blocks.{l}.attn.hook_q`` → the same name, ``[:, :, :H_l, :D_l] / √d_head``
- ``blocks.{l}.hook_attn_out`` → the same name, ``[..., D_l:D_{l+1}]`` (the layer's new blocks)
- ``blocks.{l}.attn.hook_attn_scores`` → ``hook_q · hook_kᵀ / √d_head``, heads ``[:H_l]``, masked
- ``unembed.hook_readout`` → ``ln_final.hook_out[:, read-out rows]``; the output → ``logits[:, rows]``

The export's own hooks, read back: ``blocks.{l}.attn.hook_q`` is ``√d_head · h^l A`` (padded),
``hook_k`` / ``hook_v`` are ``h^l`` (padded to ``d_head``), ``blocks.{l}.hook_attn_out`` is the layer's
new blocks in place, ``[0, z_1, …, z_H, 0]``, ``hook_unembed`` is ``W_U`` on every row (keep the
read-out rows for ``model(X)``). ``blocks.{l}.attn.hook_attn_scores`` is NOT the scores: TransformerLens 4's
bridge fires it with the post-softmax pattern for a natively computed attention.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.utilities import get_act_name

from ..stream import hook_name
from . import tokens
from .causal import causal_mask
from .disentangled import DisentangledTransformer
from .hooked import HookedDisentangledTransformer

MAX_TOKEN_D = 12  # the token vocabulary lists all 2^d binary rows up to this d

#: Our hook kind (:func:`.stream.hook_name`) → the export's hook (a ``get_act_name`` kind, at the
#: same layer) and how our activation is read out of it.
HOOK_MAP: dict[str, tuple[str, str]] = {
    "embed": ("resid_pre", "layer 0, [..., :d]"),
    "pos_embed": ("pos_embed", "[..., d:d+T]"),
    "resid_pre": ("resid_pre", "[..., :D_l]"),
    "resid_post": ("resid_post", "[..., :D_{l+1}]"),
    "q": ("q", "[:, :, :H_l, :D_l] / √d_head"),
    "k": ("k", "[:, :, :H_l, :D_l]"),
    "v": ("v", "[:, :, :H_l, :D_l]"),
    "attn_scores": ("q", "hook_q · hook_kᵀ / √d_head, heads [:H_l], causal mask"),
    "pattern": ("pattern", "[:, :H_l]"),
    "z": ("z", "[:, :, :H_l, :D_l]"),
    "attn_out": ("attn_out", "[..., D_l:D_{l+1}]"),
    "readout": ("ln_final.hook_out", "[:, read-out rows]"),
}
_LAYER_FREE = ("embed", "pos_embed", "readout")
_NOT_NATIVE = ("embed", "q", "attn_scores")  # their export hooks carry more, or something else


class NativeRunner:
    """Running an export: ``tl_model`` fed ``embed(X)`` (the subclass's), its read-out rows
    ``rows`` kept; ``layout`` the task's."""

    tl_model: object
    layout: object
    rows: slice

    def embed(self, X: Tensor) -> Tensor:
        raise NotImplementedError

    def to_tokens(self, X: Float[Tensor, "batch pos d"]) -> Int[Tensor, "batch pos"]:
        """``X (B, T, d)`` → token ids ``(B, T)`` into the export's ``W_E`` (:mod:`.tokens`)."""
        if self.layout.d > MAX_TOKEN_D:
            raise ValueError(f"the export has token ids only for d <= {MAX_TOKEN_D} (a vocabulary of "
                             f"2^d rows), got d={self.layout.d}; feed export.embed(X) instead")
        return tokens.to_tokens(self.layout, X)

    def forward(self, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch rows d"]:
        """The read-out ``(B, R, d)``, equal to the source model's output."""
        return self.tl_model(self.embed(X))[:, self.rows]

    def __call__(self, X: Tensor) -> Tensor:
        return self.forward(X)

    def run_with_cache(self, X: Tensor, **kwargs):
        """``tl_model.run_with_cache`` on ``embed(X)``: ``(read-out (B, R, d), ActivationCache)``."""
        logits, cache = self.tl_model.run_with_cache(self.embed(X), **kwargs)
        return logits[:, self.rows], cache


class TransformerLensExport(NativeRunner):
    """A native TransformerLens model (``tl_model``) computing the same function as ``source``.

    ``forward(X (B, T, d)) → (B, R, d)`` equals ``source(X)``; ``embed(X)`` is what the bridge is fed
    (``inputs_embeds``, ``(B, T, D_L)``). ``tl_name`` / ``native_name`` map hook names both ways
    and ``activation(tl_cache, name)`` reads one of our activations out of the export's cache.
    """

    def __init__(self, tl_model, source: HookedDisentangledTransformer):
        cfg = source.cfg
        self.tl_model = tl_model
        self.layout = cfg.layout
        self.heads = cfg.heads
        self.widths = cfg.widths
        self.causal = cfg.causal
        self.rows = source.unembed.rows
        self.d_head = tl_model.cfg.d_head

    # -- running ----------------------------------------------------------------------------------
    def _check(self, X) -> None:
        d, T = self.layout.d, self.layout.T
        if not isinstance(X, Tensor) or X.ndim != 3 or tuple(X.shape[1:]) != (T, d):
            shape = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
            raise ValueError(f"X must be a tensor of shape (B, {T}, {d}), got {shape}")
        if not X.dtype.is_floating_point:
            raise ValueError(f"X must be a floating-point tensor, got dtype {X.dtype}")

    def embed(self, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d_model"]:
        """``X (B, T, d)`` → ``[X, 0]`` of shape ``(B, T, D_L)``: the bridge's ``inputs_embeds``."""
        self._check(X)
        W_pos = self.tl_model.W_pos
        return torch.nn.functional.pad(X.to(W_pos), (0, W_pos.shape[1] - self.layout.d))

    # -- names --------------------------------------------------------------------------------------
    def _kinds(self) -> dict[str, tuple[str, int | None]]:
        """Each of our hook names → ``(kind, layer)``."""
        kinds = {hook_name(kind): (kind, None) for kind in _LAYER_FREE}
        for layer in range(len(self.heads)):
            kinds |= {hook_name(kind, layer): (kind, layer) for kind in HOOK_MAP
                      if kind not in _LAYER_FREE}
        return kinds

    def tl_name(self, name: str) -> str:
        """Our hook name → the export's hook that carries it (see ``HOOK_MAP`` for the slicing)."""
        kinds = self._kinds()
        if name not in kinds:
            raise ValueError(f"hook name must be one of {list(kinds)}, got {name!r}")
        kind, layer = kinds[name]
        return get_act_name(HOOK_MAP[kind][0], 0 if kind == "embed" else layer)

    def native_name(self, tl_name: str) -> str | None:
        """The export's hook name → ours carrying the same activation (sliced), or ``None`` when ours
        differs (``hook_q`` carries ``√d_head`` times ours) or we have no such hook."""
        native = {self.tl_name(ours): ours for ours, (kind, _) in self._kinds().items()
                  if kind not in _NOT_NATIVE}
        return native.get(tl_name)

    def activation(self, tl_cache, name: str) -> Tensor:
        """Our activation ``name``, in our shapes, read from the export's cache ``tl_cache``."""
        theirs = self.tl_name(name)
        kind, layer = self._kinds()[name]
        d, T = self.layout.d, self.layout.T
        if kind == "embed":
            return tl_cache[theirs][..., :d]
        if kind == "pos_embed":
            return tl_cache[theirs][..., d : d + T]
        if kind == "readout":
            return tl_cache[theirs][:, self.rows]
        H, D = self.heads[layer], self.widths[layer]
        if kind == "resid_pre":
            return tl_cache[theirs][..., :D]
        if kind == "resid_post":
            return tl_cache[theirs][..., : self.widths[layer + 1]]
        if kind == "pattern":
            return tl_cache[theirs][:, :H]
        if kind in ("z", "k", "v"):
            return tl_cache[theirs][:, :, :H, :D]
        if kind == "q":
            return tl_cache[theirs][:, :, :H, :D] / math.sqrt(self.d_head)
        if kind == "attn_out":
            return tl_cache[theirs][..., D : self.widths[layer + 1]]
        # attn_scores: the bridge has no pre-softmax hook here; recompute from q and k.
        q = tl_cache[get_act_name("q", layer)][:, :, :H]  # (B, T, H, d_head)
        k = tl_cache[get_act_name("k", layer)][:, :, :H]
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(self.d_head)
        if self.causal:
            scores = scores.masked_fill(causal_mask(T, scores.device), float("-inf"))
        return scores


def to_transformer_lens(model: HookedDisentangledTransformer) -> TransformerLensExport:
    """A native TransformerLens 4 model computing ``model``'s function (see the module docstring).

    Weights are copied (later edits to ``model`` do not reach the export), in ``model``'s dtype and
    on its device; the export starts in eval mode, as TransformerLens's analysis tools require.
    ``model`` may be the plain ``DisentangledTransformer`` too (what ``Run.analysis_model`` gives).
    """
    if isinstance(model, DisentangledTransformer):
        model = HookedDisentangledTransformer.from_module(model)
    if not isinstance(model, HookedDisentangledTransformer):
        raise ValueError(f"model must be a HookedDisentangledTransformer, got {type(model).__name__}")
    # Imported here: the bridge machinery is heavy and only the export needs it.
    from transformer_lens import TransformerBridge, TransformerBridgeConfig

    cfg = model.cfg
    d, T, widths, heads = cfg.d, cfg.T, cfg.widths, cfg.heads
    D_L, d_head, n_heads = widths[-1], max(widths[:-1]), max(heads)
    # the rows token ids stand for, (V, d); past MAX_TOKEN_D the one-hot rows e_i only
    vocab = tokens.vocabulary(cfg.layout) if d <= MAX_TOKEN_D else torch.eye(d)
    dtype, device = model.pos.dtype, model.pos.device
    tl_cfg = TransformerBridgeConfig(
        d_model=D_L, d_head=d_head, n_heads=n_heads, n_layers=cfg.n_layers, n_ctx=T,
        d_vocab=vocab.shape[0], d_vocab_out=d, attn_only=True, normalization_type=None,
        attention_dir=cfg.attention_dir, positional_embedding_type="standard",
        init_weights=False, architecture="TransformerLensNative", model_name="invperm-export",
        device=str(device), dtype=dtype,
    )
    bridge = TransformerBridge.boot_native(tl_cfg, device=device, dtype=dtype)
    native = bridge.original_model  # NativeModel: tok_embed, pos, layers[l].attn.{q,k,v,o}, head
    scale = math.sqrt(d_head)
    with torch.no_grad():
        for p in native.parameters():
            p.zero_()
        native.tok_embed.weight[:, :d] = vocab
        native.pos.weight[:, d : d + T] = torch.eye(T)
        for layer, block in enumerate(model.blocks):
            A, D, attn = block.attn.A.detach(), widths[layer], native.layers[layer].attn
            eye = torch.eye(D, dtype=dtype, device=device)
            for k in range(heads[layer]):
                rows = slice(k * d_head, k * d_head + D)  # head k's slice of q, k, v and z
                # nn.Linear stores (out, in): q_j = Σ_i h_i (√d_head A)_{ij}.
                attn.q.weight[rows, :D] = (A[k].double() * scale).T.to(dtype)
                attn.k.weight[rows, :D] = eye
                attn.v.weight[rows, :D] = eye
                attn.o.weight[D * (1 + k) : D * (2 + k), rows] = eye
        native.head.weight.copy_(model.unembed.W_U.detach().T)
    bridge.eval()
    return TransformerLensExport(bridge, model)
