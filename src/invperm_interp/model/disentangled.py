"""The disentangled transformer's weights and maths, without hooks (docs/design.md section 1).

``h^0 = [X, I_T]``; layer ``l`` head ``k``: ``scores = h A_{l,k} hᵀ`` (no scaling, no value or output
matrices), optionally causally masked, ``z_k = softmax(scores) h``; the stream grows by
concatenation, ``h^{l+1} = [h^l, z_1, …, z_H]``; the read-out is ``h^L[readout rows] W_U``.

:class:`DisentangledTransformer` is what training updates and the analyses read: plain torch, so
a training or analysis process imports neither TransformerLens nor anything it pulls in
(``benchmarks/train_memory.py``); :class:`DisentangledModel` is what it shares with the hooked model. Its
parameters have the names of the hooked model's (``blocks.{l}.attn.A``, ``unembed.W_U``): the two
share checkpoints, and ``HookedDisentangledTransformer`` (``hooked.py``) is built from the same
parameter modules, adding a ``HookPoint`` at every intermediate. :func:`queries` and :func:`scores_of`
(:func:`attention_scores` is the two in one) form the scores of the whole stream (the hooked
forward, :meth:`DisentangledModel.residual_streams`); :func:`readout_forward` is the loss-only
forward both models can run, on the stream kept without its ``I_T`` block (:func:`weights_forward`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.nn import functional as F

from .. import memory
from ..config import ModelConfig
from ..stream import Stream
from . import tokens
from .causal import causal_mask, mask_term


def queries(h: Float[Tensor, "batch pos D"], A: Float[Tensor, "head D D"],
            rows: slice | None = None) -> Float[Tensor, "batch query head D"]:
    """``q[b, i, k] = h_i A_k`` for the rows ``rows`` (default all): what each query row compares
    with every key row ``h_j``."""
    B, T, D = h.shape
    H = A.shape[0]
    hq = h if rows is None else h[:, rows]  # (B, R, D)
    # one (D, H·D) matmul for every head's queries: faster on the CPU than an einsum over heads
    return (hq @ A.transpose(0, 1).reshape(D, H * D)).view(B, hq.shape[1], H, D)


def scores_of(q: Float[Tensor, "batch query head D"], keys: Tensor, mask: Tensor | None = None,
              rows: slice | None = None) -> Float[Tensor, "batch head query pos"]:
    """``scores[b, k, i, j] = q[b, i, k] · keys[b, j]``; ``keys`` is ``h (B, T, D)``, shared by every
    head, or per head ``(B, T, H, D)``. ``-inf`` where ``mask[i, j]`` (``(T, T)`` bool, True: key
    hidden; its rows ``rows`` when the queries are those rows) is set."""
    k = keys.unsqueeze(1) if keys.ndim == 3 else keys.transpose(1, 2)  # (B, 1 or H, T, D)
    scores = q.transpose(1, 2) @ k.transpose(-1, -2)  # (B, H, R, T)
    if mask is not None:
        scores = scores.masked_fill(mask if rows is None else mask[rows], float("-inf"))
    return scores


def attention_scores(h: Float[Tensor, "batch pos D"], A: Float[Tensor, "head D D"],
                     mask: Tensor | None = None,
                     rows: slice | None = None) -> Float[Tensor, "batch head query pos"]:
    """``scores[b, k, i, j] = h_i A_k h_jᵀ`` for query rows ``rows`` (default all) against every key
    row, ``-inf`` where ``mask[i, j]`` (``(T, T)`` bool, True: key hidden) is set."""
    return scores_of(queries(h, A, rows), h, mask, rows)


class AttentionWeights(nn.Module):
    """Layer ``layer``'s ``A (H, D_l, D_l)`` (``A[k, i, j]``: query feature ``i``, key feature ``j``
    of head ``k``) and its causal mask ``(T, T)`` (True: key after query; used when ``cfg.causal``)."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.causal = cfg.causal
        n_heads, width = cfg.heads[layer], cfg.widths[layer]
        self.A = nn.Parameter(torch.zeros(n_heads, width, width, dtype=cfg.torch_dtype))
        self.register_buffer("mask", causal_mask(cfg.T), persistent=False)


class UnembedWeights(nn.Module):
    """The read-out ``W_U (D_L, d)`` and the rows it reads, ``cfg.readout_rows``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.rows = cfg.readout_rows
        self.W_U = nn.Parameter(torch.zeros(cfg.widths[-1], cfg.d, dtype=cfg.torch_dtype))


class _Block(nn.Module):
    """A layer's weights, under the hooked model's name ``blocks.{l}.attn``."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attn = AttentionWeights(cfg, layer)


def init_weights(model: nn.Module, cfg: ModelConfig, seed: int | None = None) -> None:
    """``cfg.init``: zeros (the note's code) or i.i.d. ``N(0, init_scale²)``, drawn parameter by
    parameter in ``model.parameters()`` order (the same for both models: the same seed, the same
    weights)."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if cfg.init == "zeros":
                p.zero_()
            else:
                noise = torch.randn(p.shape, generator=generator, dtype=p.dtype)
                p.copy_(noise.to(p.device) * cfg.init_scale)


def check_model_fits(cfg: ModelConfig, max_memory: int | str | None = None) -> None:
    """``cfg`` as a ``ModelConfig`` whose weights fit ``max_memory`` (default: the memory this
    process can still get), checked by arithmetic before anything is allocated; ``ValueError``
    (``MemoryBudgetError``, naming the estimate and the limit) otherwise."""
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
    memory.check(memory.model_estimate(cfg, f"a {cfg.n_layers}-layer model at d={cfg.d}"), max_memory)


def validated_input(cfg: ModelConfig, X: Tensor, pos: Tensor) -> Tensor:
    """Validate ``X (B, T, d)`` (or token ids ``(B, T)``, :mod:`.tokens`) against ``cfg.layout``;
    return it in the dtype and on the device of ``pos`` (the model's ``I_T``)."""
    if not isinstance(X, Tensor):
        raise ValueError(f"X must be a torch.Tensor of shape (B, {cfg.T}, {cfg.d}), "
                         f"got {type(X).__name__}")
    if X.ndim == 2 and not (X.is_floating_point() or X.is_complex() or X.dtype == torch.bool):
        X = tokens.from_tokens(cfg.layout, X.to(pos.device), pos.dtype)
    if not X.dtype.is_floating_point:
        raise ValueError(f"X must be a floating-point tensor, got dtype {X.dtype}")
    if X.ndim != 3 or X.shape[1:] != (cfg.T, cfg.d):
        raise ValueError(
            f"X must have shape (B, {cfg.T}, {cfg.d}) for layout {cfg.layout}, "
            f"got {tuple(X.shape)}"
        )
    if X.shape[0] == 0:  # every use reduces over the batch (an MSE, a max, a Jacobian norm)
        raise ValueError(f"X must hold at least one sample, got shape {tuple(X.shape)}")
    # One reduction instead of an elementwise pass (40x cheaper): NaN and ±inf survive a sum;
    # only a finite X whose sum overflows needs the full check.
    if not bool(torch.isfinite(X.sum())) and not bool(torch.isfinite(X).all()):
        raise ValueError("X must be finite (no NaN or inf)")
    return X.to(device=pos.device, dtype=pos.dtype)


class DisentangledModel:
    """What every disentangled model has, plain or hooked, and all the analyses read: ``cfg``, the
    named blocks ``stream``, ``blocks[l].attn.A (H, D_l, D_l)`` with its ``mask``,
    ``unembed.W_U (D_L, d)`` and ``rows``, the ``pos`` buffer (``I_T``); with these, plain forwards
    (no hooks, no TransformerLens). ``isinstance(model, DisentangledModel)`` accepts either model."""

    if TYPE_CHECKING:  # what each model defines
        cfg: ModelConfig
        stream: Stream
        pos: Tensor
        blocks: nn.ModuleList
        unembed: UnembedWeights

    @property
    def device(self) -> torch.device:
        return self.pos.device

    @property
    def W_U(self) -> Float[Tensor, "d_L d"]:
        """The read-out ``(D_L, d)``: ``resid[:, rows] @ model.W_U`` is the output."""
        return self.unembed.W_U

    def check_input(self, X: Tensor) -> Tensor:
        """Validate ``X`` against the layout; return it in the model's dtype and device."""
        return validated_input(self.cfg, X, self.pos)

    def residual_streams(self, X: Tensor, check_input: bool = True,
                         last: int | None = None) -> list[Tensor]:
        """``[h^0, …, h^last]`` for ``X (B, T, d)`` (``last``: default ``L``, every stream);
        ``h^l`` has shape ``(B, T, D_l)``."""
        if check_input:
            X = self.check_input(X)
        mask = self.blocks[0].attn.mask if self.cfg.causal else None
        streams = [embedding(X, self.pos)]
        for block in self.blocks[:check_last(self.cfg, last)]:
            streams.append(grown(streams[-1], block.attn.A, mask))
        return streams


def check_last(cfg: ModelConfig, last: int | None) -> int:
    """``last`` of ``residual_streams``, checked: an integer in ``[0, L]`` (None: ``L``)."""
    if last is None:
        return cfg.n_layers
    if not isinstance(last, int) or isinstance(last, bool) or not 0 <= last <= cfg.n_layers:
        raise ValueError(f"last must be an integer in [0, {cfg.n_layers}] (the last stream's "
                         f"index), got {last!r}")
    return last


def embedding(X: Float[Tensor, "batch pos d"], pos: Float[Tensor, "pos pos"]
              ) -> Float[Tensor, "batch pos d_0"]:
    """``h^0 = [X, I_T]`` ``(B, T, d + T)``, a new tensor, with ``pos`` the model's ``I_T`` buffer."""
    return torch.cat([X, pos.expand(X.shape[0], -1, -1)], dim=-1)


def grown(h: Float[Tensor, "batch pos D"], A: Float[Tensor, "head D D"],
          mask: Tensor | None) -> Float[Tensor, "batch pos D_next"]:
    """One layer: ``h^{l+1} = [h, z_1, …, z_H]`` with ``z_k = softmax(h A_k hᵀ) h``."""
    pattern = torch.softmax(attention_scores(h, A, mask), dim=-1)  # (B, H, T, T)
    z = (pattern @ h.unsqueeze(1)).transpose(1, 2)  # (B, T, H, D)
    return torch.cat([h, z.flatten(start_dim=2)], dim=-1)


class DisentangledTransformer(DisentangledModel, nn.Module):
    """The model without hooks: ``forward(X (B, T, d)) → (B, d, d)``, :func:`readout_forward`.

    What ``train`` and ``train_many`` update, and what the analyses read (:class:`DisentangledModel`);
    ``HookedDisentangledTransformer.from_module`` gives the hooked model of the same weights
    (``Run.model`` does it on first use). Weights that would not fit ``max_memory`` (default: the
    memory left) are refused before they are allocated.
    """

    def __init__(self, cfg: ModelConfig, seed: int | None = None, *,
                 max_memory: int | str | None = None):
        super().__init__()
        check_model_fits(cfg, max_memory)
        self.cfg = cfg
        self.stream = Stream(cfg.layout, cfg.heads)
        self.register_buffer("pos", torch.eye(cfg.T, dtype=cfg.torch_dtype), persistent=False)
        self.blocks = nn.ModuleList(_Block(cfg, layer) for layer in range(cfg.n_layers))
        self.unembed = UnembedWeights(cfg)
        init_weights(self, cfg, seed)

    @classmethod
    def made_on(cls, cfg: ModelConfig, device: str) -> DisentangledTransformer:
        """The model of ``cfg`` with zero tensors made on ``device`` directly (``"meta"``: shapes
        only, nothing allocated), unchecked: what the memory count runs. No ``torch.device``
        context, which would import ``torch._dynamo`` (training processes keep it out)."""
        model = cls.__new__(cls)
        nn.Module.__init__(model)
        model.cfg = cfg
        model.register_buffer("pos", torch.zeros(cfg.T, cfg.T, dtype=cfg.torch_dtype, device=device))
        model.blocks = nn.ModuleList()
        for H, D in zip(cfg.heads, cfg.widths):
            block, attn = nn.Module(), nn.Module()
            attn.A = nn.Parameter(torch.zeros(H, D, D, dtype=cfg.torch_dtype, device=device))
            attn.register_buffer("mask", torch.ones(cfg.T, cfg.T, dtype=torch.bool, device=device))
            block.attn = attn
            model.blocks.append(block)
        model.unembed = nn.Module()
        model.unembed.rows = cfg.readout_rows
        model.unembed.W_U = nn.Parameter(torch.zeros(cfg.widths[-1], cfg.d, dtype=cfg.torch_dtype,
                                                     device=device))
        return model

    def forward(self, X: Tensor, check_input: bool = True) -> Float[Tensor, "batch rows d"]:
        """``X (B, T, d)`` or token ids ``(B, T)`` → the predicted ``Y (B, d, d)``;
        ``check_input=False`` skips the checks (data the caller drew itself)."""
        if check_input:
            X = validated_input(self.cfg, X, self.pos)
        return readout_forward(self, X)


def readout_forward(model: nn.Module, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch d d"]:
    """The output of ``model`` (either model) without hooks, computing only what the read-out needs:
    ``X (B, T, d)`` → ``(B, d, d)``, equal to the hooked ``model(X)`` up to float rounding
    (:func:`weights_forward`)."""
    mask = model.blocks[0].attn.mask if model.cfg.causal else None
    return weights_forward([block.attn.A for block in model.blocks], model.unembed.W_U, X, mask,
                           model.unembed.rows)


def weights_forward(As: list[Tensor], W: Tensor, X: Float[Tensor, "batch pos d"],
                    mask: Tensor | None, rows: slice) -> Float[Tensor, "batch d d"]:
    """:func:`readout_forward` of the weights ``As[l] (H_l, D_l, D_l)`` and ``W_U (D_L, d)``: what
    training steps and a standard model's map computes (``standard.py``).

    Three savings, the same function. The stream ``h = [X, I_T, Z]`` is kept without its position
    block ``I_T``, whose products are free: ``h M = [X, Z] M_kept + M_pos`` (``T`` rows, one per
    position), a score's position part is the query's ``T`` position columns, and ``p h`` is
    ``p [X, Z]`` beside ``p`` itself (:func:`stream_order` says where each kept column sits in
    ``h``). The last layer's other rows never reach ``W_U``, so only the read-out rows' queries are
    formed there, and the head part of ``W_U`` is applied before the attention average,
    ``(p h) W = p (h W)``. At d = 10 a training step is 1.25-1.4× (causal scratch) and about 1.2×
    (bidirectional) as fast as with the whole stream; at d = 6, about 0.9× (``benchmarks/kept_stream.py``).
    """
    B, T, _ = X.shape
    kept = X  # (B, T, D_l - T): h^l without its I_T block
    hidden = None if mask is None else mask_term(mask, X.dtype)
    for layer, A in enumerate(As):
        order = stream_order(X.shape[-1], T, As, layer, X.device)
        if layer > 0:  # h^0 = [X, I_T] is already in that order
            A = A.index_select(1, order).index_select(2, order)  # kept features, then positions
        last = layer == len(As) - 1
        p = _pattern(kept, A, hidden, rows if last else None)  # (B, H, R, T)
        if last:
            H, D, d = A.shape[0], A.shape[1], W.shape[1]
            W_kept, W_pos = W.view(1 + H, D, d).index_select(1, order).split([D - T, T], dim=1)
            u = (kept @ W_kept[1:].transpose(0, 1).reshape(D - T, H * d)).view(B, T, H, d)
            u = u + W_pos[1:].transpose(0, 1)  # (B, T, H, d): h W for each head's part of W_U
            return kept[:, rows] @ W_kept[0] + W_pos[0, rows] + (p @ u.transpose(1, 2)).sum(1)
        z = torch.cat([p @ kept.unsqueeze(1), p], dim=-1)  # (B, H, T, D_l): p h, kept then I_T
        kept = torch.cat([kept, z.transpose(1, 2).flatten(start_dim=2)], dim=-1)
    raise ValueError("As must hold at least one layer's A, got none")


def _pattern(kept: Float[Tensor, "batch pos K"], A: Float[Tensor, "head D D"],
             hidden: Float[Tensor, "pos pos"] | None,
             rows: slice | None) -> Float[Tensor, "batch head query pos"]:
    """``softmax(h A hᵀ)`` for the query rows ``rows`` (None: all), with ``h = [kept, I_T]`` and
    ``A`` in that order (``K = D - T`` kept features first). ``hidden``: the causal mask as a term
    (``causal.mask_term``), added to each query position's row of ``A`` at the key positions'
    columns: a query's scores hold that row once, so a hidden key's score is ``-inf`` with no pass
    over the ``(B, H, R, T)`` scores (``masked_fill`` there, with its backward, made a causal
    training step 1.02-1.16× as slow: ``benchmarks/mask_term.py``)."""
    B, T, K = kept.shape
    H, D = A.shape[0], A.shape[1]
    A_kept, A_pos = A.split([K, T], dim=1)  # query features: kept, positions
    hq = kept if rows is None else kept[:, rows]
    A_pos = (A_pos if rows is None else A_pos[:, rows]).transpose(0, 1)  # (R, H, D)
    if hidden is not None:
        A_pos = A_pos + F.pad(hidden if rows is None else hidden[rows], (K, 0)).unsqueeze(1)
    q = (hq @ A_kept.transpose(0, 1).reshape(K, H * D)).view(B, hq.shape[1], H, D)
    q_kept, q_pos = (q + A_pos).split([K, T], dim=-1)  # h_i A, split by key
    scores = q_kept.transpose(1, 2) @ kept.transpose(1, 2).unsqueeze(1) + q_pos.transpose(1, 2)
    return torch.softmax(scores, dim=-1)


@functools.lru_cache(maxsize=64)
def _stream_order(d: int, T: int, heads: tuple[int, ...], layer: int, device: torch.device) -> Tensor:
    kept, positions, D = torch.arange(d), torch.arange(d, d + T), d + T
    for H in heads[:layer]:
        order = torch.cat([kept, positions])
        kept = torch.cat([kept] + [D * (1 + k) + order for k in range(H)])
        D *= 1 + H
    return torch.cat([kept, positions]).to(device)


def stream_order(d: int, T: int, As: list[Tensor], layer: int, device: torch.device) -> Tensor:
    """``(D_l,)``: the column of ``h^l`` held at each place of ``[kept, I_T]``, the stream as
    :func:`weights_forward` keeps it (``h^0``'s ``X``, then each head's ``p h``, each without
    ``I_T``), followed by the columns of ``I_T`` (``d … d + T - 1``)."""
    return _stream_order(d, T, tuple(A.shape[0] for A in As), layer, torch.device(device))


def check_disentangled(model, name: str = "model") -> None:
    """A one-line ``ValueError`` unless ``model`` is a disentangled model, plain or hooked."""
    if not isinstance(model, DisentangledModel):
        hint = ""
        if type(model).__module__.split(".")[0] == "transformer_lens":
            hint = ("; a TransformerLens model is imported first: "
                    "model.standard_import.standard_from_transformer_lens(bridge, layout), or "
                    "invperm import for a saved one (docs/guide/bring_your_own.md)")
        raise ValueError(f"{name} must be a disentangled model (DisentangledTransformer or "
                         f"HookedDisentangledTransformer), got {type(model).__name__}{hint}")
