"""A standard transformer for the task, without TransformerLens (docs/standard.md).

``resid⁰ = X W_E + W_pos``; layer ``l``: ``resid += Σ_h softmax(q_h k_hᵀ / √d_head) v_h W_O^h`` with
``q_h = x W_Q^h``, ``k_h = x W_K^h``, ``v_h = x W_V^h`` (``x`` the stream, through ``ln1`` when
``cfg.layernorm``), then, when ``cfg.d_mlp``, ``resid += relu(x W_in + b_in) W_out + b_out`` (``x``
through ``ln2``); the read-out is ``resid^L[readout rows] W_U`` (through ``ln_final``). No biases
on the attention or the read-out, so the map to the disentangled model is exact (``note_map``).

Parameters have TransformerLens's names and shapes: ``embed.W_E (d, d_model)`` (the read-in of the
input rows), ``pos_embed.W_pos (T, d_model)``, ``blocks.{l}.attn.W_Q / W_K / W_V (H, d_model,
d_head)``, ``W_O (H, d_head, d_model)``, ``blocks.{l}.ln1.w / b``, ``ln2``, ``blocks.{l}.mlp.W_in
(d_model, d_mlp)``, ``b_in``, ``W_out (d_mlp, d_model)``, ``b_out``, ``ln_final``, ``unembed.W_U
(d_model, d)``. Every intermediate passes through a named identity (``hook_q``, ``hook_pattern``,
…) that the hooked twin (``standard_hooked.py``) replaces with a ``HookPoint``: one forward, in
one place, for both.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor, nn

from ..architecture import note_is_cheaper, row_costs  # noqa: F401 (row_costs: the model's price)
from ..config import ModelConfig
from .causal import causal_mask
from .disentangled import check_model_fits, validated_input, weights_forward
from .note_map import note_weights

LN_EPS = 1e-5  # TransformerLens's LayerNorm eps


def _identity(x: Tensor) -> Tensor:
    return x


class Hooked(nn.Module):
    """A module whose ``identity_hooks`` are identities here and ``HookPoint``s in the hooked twin."""

    identity_hooks: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        for name in self.identity_hooks:
            self.__dict__[name] = _identity


class LayerNorm(Hooked):
    """TransformerLens's ``LayerNorm``: ``(x - mean) / sqrt(var + eps) · w + b`` over ``d_model``."""

    identity_hooks = ("hook_scale", "hook_normalized")

    def __init__(self, cfg: ModelConfig, device=None):
        super().__init__()
        self.w = nn.Parameter(torch.ones(cfg.d_model, dtype=cfg.torch_dtype, device=device))
        self.b = nn.Parameter(torch.zeros(cfg.d_model, dtype=cfg.torch_dtype, device=device))

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt())
        return self.hook_normalized(x / scale) * self.w + self.b


class Attention(Hooked):
    """``H`` heads with ``W_Q, W_K, W_V (H, d_model, d_head)``, ``W_O (H, d_head, d_model)``; scores
    scaled by ``1/√d_head``, ``-inf`` above the diagonal when ``cfg.causal``."""

    identity_hooks = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z")

    def __init__(self, cfg: ModelConfig, layer: int, device=None):
        super().__init__()
        H, m, dh, dtype = cfg.heads[layer], cfg.d_model, cfg.d_head, cfg.torch_dtype
        for name in ("W_Q", "W_K", "W_V"):
            setattr(self, name, nn.Parameter(torch.zeros(H, m, dh, dtype=dtype, device=device)))
        self.W_O = nn.Parameter(torch.zeros(H, dh, m, dtype=dtype, device=device))
        self.causal, self.scale = cfg.causal, 1 / math.sqrt(dh)
        self.register_buffer("mask", causal_mask(cfg.T, device), persistent=False)

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        """``x (B, T, d_model)`` → the heads' summed output ``(B, T, d_model)``."""
        B, T, m = x.shape
        H, _, dh = self.W_Q.shape

        def per_head(W: Tensor) -> Tensor:  # (B, T, H, d_head): one matmul for every head
            return (x @ W.transpose(0, 1).reshape(m, H * dh)).view(B, T, H, dh)

        q, k, v = (self.hook_q(per_head(self.W_Q)), self.hook_k(per_head(self.W_K)),
                   self.hook_v(per_head(self.W_V)))
        scores = (q.transpose(1, 2) @ k.permute(0, 2, 3, 1)) * self.scale  # (B, H, T, T)
        if self.causal:
            scores = scores.masked_fill(self.mask, float("-inf"))
        pattern = self.hook_pattern(torch.softmax(self.hook_attn_scores(scores), dim=-1))
        z = self.hook_z((pattern @ v.transpose(1, 2)).transpose(1, 2))  # (B, T, H, d_head)
        return z.reshape(B, T, H * dh) @ self.W_O.reshape(H * dh, m)


class MLP(Hooked):
    """``relu(x W_in + b_in) W_out + b_out`` (TransformerLens's ``act_fn="relu"``)."""

    identity_hooks = ("hook_pre", "hook_post")

    def __init__(self, cfg: ModelConfig, device=None):
        super().__init__()
        m, n, dtype = cfg.d_model, cfg.d_mlp, cfg.torch_dtype
        self.W_in = nn.Parameter(torch.zeros(m, n, dtype=dtype, device=device))
        self.b_in = nn.Parameter(torch.zeros(n, dtype=dtype, device=device))
        self.W_out = nn.Parameter(torch.zeros(n, m, dtype=dtype, device=device))
        self.b_out = nn.Parameter(torch.zeros(m, dtype=dtype, device=device))

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        post = self.hook_post(torch.relu(self.hook_pre(x @ self.W_in + self.b_in)))
        return post @ self.W_out + self.b_out


class Block(Hooked):
    """One layer: ``resid_mid = resid_pre + attn(ln1(resid_pre))``, then, with an MLP,
    ``resid_post = resid_mid + mlp(ln2(resid_mid))``."""

    identity_hooks = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out",
             "hook_resid_post")

    def __init__(self, cfg: ModelConfig, layer: int, device=None):
        super().__init__()
        if cfg.layernorm:
            self.ln1 = LayerNorm(cfg, device)
        self.attn = Attention(cfg, layer, device)
        if cfg.d_mlp is not None:
            if cfg.layernorm:
                self.ln2 = LayerNorm(cfg, device)
            self.mlp = MLP(cfg, device)

    def forward(self, resid: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        resid = self.hook_resid_pre(resid)
        x = self.ln1(resid) if hasattr(self, "ln1") else resid
        resid = resid + self.hook_attn_out(self.attn(x))
        if hasattr(self, "mlp"):
            resid = self.hook_resid_mid(resid)
            x = self.ln2(resid) if hasattr(self, "ln2") else resid
            resid = resid + self.hook_mlp_out(self.mlp(x))
        return self.hook_resid_post(resid)


class Embed(nn.Module):
    """``embed.W_E (d, d_model)``: the linear read-in of the input rows."""

    def __init__(self, cfg: ModelConfig, device=None):
        super().__init__()
        self.W_E = nn.Parameter(torch.zeros(cfg.d, cfg.d_model, dtype=cfg.torch_dtype, device=device))


class PosEmbed(nn.Module):
    """``pos_embed.W_pos (T, d_model)``: a learned embedding of each position."""

    def __init__(self, cfg: ModelConfig, device=None):
        super().__init__()
        self.W_pos = nn.Parameter(torch.zeros(cfg.T, cfg.d_model, dtype=cfg.torch_dtype,
                                              device=device))


class Unembed(Hooked):
    """``unembed.W_U (d_model, d)`` applied to the read-out rows ``cfg.readout_rows``."""

    identity_hooks = ("hook_readout",)

    def __init__(self, cfg: ModelConfig, device=None):
        super().__init__()
        self.rows = cfg.readout_rows
        self.W_U = nn.Parameter(torch.zeros(cfg.d_model, cfg.d, dtype=cfg.torch_dtype, device=device))

    def forward(self, resid: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch rows d"]:
        return self.hook_readout(resid[:, self.rows]) @ self.W_U


def init_standard(model: nn.Module, cfg: ModelConfig, seed: int | None = None) -> None:
    """``cfg.init``: every matrix ``N(0, init_scale²)`` (``"normal"``) or 0 (``"zeros"``), drawn in
    ``named_parameters()`` order; LayerNorm weights 1 and every bias 0 either way."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("b") or cfg.init == "zeros":
                p.fill_(1.0 if leaf == "w" else 0.0)
            elif leaf == "w":
                p.fill_(1.0)
            else:
                noise = torch.randn(p.shape, generator=generator, dtype=p.dtype)
                p.copy_(noise.to(p.device) * cfg.init_scale)


class StandardTransformer(Hooked):
    """The standard model without hooks: ``forward(X (B, T, d)) → (B, d, d)``.

    Where it is cheaper (:func:`note_is_cheaper`), ``forward`` computes the same function through
    the map (the disentangled model's forward of ``note_map.note_weights``, whose gradients reach
    ``W_Q, W_K, W_V, W_O`` exactly); :meth:`direct` is the forward in ``d_model``, which the hooked
    twin runs. The two agree to float rounding (tested in float64).
    What training updates for ``cfg.arch == "standard"``; ``HookedStandardTransformer.from_module``
    gives the hooked model of the same weights. Weights that would not fit ``max_memory`` (default:
    the memory left) are refused before they are allocated. ``device``: where the tensors are made
    (``"meta"``: shapes only, nothing allocated, checked or initialised; the memory count's).
    """

    identity_hooks = ("hook_embed", "hook_pos_embed")

    def __init__(self, cfg: ModelConfig, seed: int | None = None, *,
                 max_memory: int | str | None = None, device: str | None = None):
        super().__init__()
        if cfg.arch != "standard":
            raise ValueError(f"cfg.arch must be 'standard' for a StandardTransformer, got {cfg.arch!r}")
        shapes_only = device is not None and torch.device(device).type == "meta"
        if not shapes_only:
            check_model_fits(cfg, max_memory)
        self.cfg = cfg
        self.embed, self.pos_embed = Embed(cfg, device), PosEmbed(cfg, device)
        self.blocks = nn.ModuleList(Block(cfg, layer, device) for layer in range(cfg.n_layers))
        if cfg.layernorm:
            self.ln_final = LayerNorm(cfg, device)
        self.unembed = Unembed(cfg, device)
        self.through_note = note_is_cheaper(cfg)
        if not shapes_only:
            init_standard(self, cfg, seed)

    @classmethod
    def made_on(cls, cfg: ModelConfig, device: str) -> StandardTransformer:
        """The model of ``cfg`` with its tensors made on ``device`` (``"meta"``: shapes only,
        nothing allocated, checked or initialised): what the memory count runs."""
        return cls(cfg, device=device)

    def forward(self, X: Tensor, check_input: bool = True) -> Float[Tensor, "batch rows d"]:
        """``X (B, T, d)`` or token ids ``(B, T)`` → the predicted ``Y (B, d, d)``;
        ``check_input=False`` skips the checks (data the caller drew itself)."""
        if check_input:
            X = validated_input(self.cfg, X, self.pos_embed.W_pos)
        return self.note_forward(X) if self.through_note else self.direct(X)

    def direct(self, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch rows d"]:
        """The forward in the residual stream of width ``d_model``, through every hook."""
        return self.unembed(self.final_stream(X))

    def note_forward(self, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch rows d"]:
        """The same function through the map to the disentangled model (attention-only, no
        LayerNorm): ``A_l`` and ``M_L W_U`` from the weights, then the disentangled forward."""
        layers = [(b.attn.W_Q, b.attn.W_K, b.attn.W_V, b.attn.W_O) for b in self.blocks]
        As, W_U = note_weights(self.embed.W_E, self.pos_embed.W_pos, layers, self.unembed.W_U)
        mask = self.blocks[0].attn.mask if self.cfg.causal else None
        return weights_forward(As, W_U, X, mask, self.unembed.rows)

    def final_stream(self, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d_model"]:
        """The residual stream after the last layer (through ``ln_final``), ``(B, T, d_model)``."""
        resid = self.hook_embed(X @ self.embed.W_E)
        resid = resid + self.hook_pos_embed(self.pos_embed.W_pos.expand(X.shape[0], -1, -1))
        for block in self.blocks:
            resid = block(resid)
        return self.ln_final(resid) if hasattr(self, "ln_final") else resid
