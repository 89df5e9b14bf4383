"""Import of a native TransformerLens model into the standard model: the same function, our weights.

``standard_from_transformer_lens(bridge, layout, readout)`` reads a ``TransformerBridge`` built
by ``TransformerBridge.boot_native`` (TransformerLens 4's native model; ``HookedTransformer`` is
gone from it) of the form ``standard_to_transformer_lens`` produces or native training leaves:
standard positional embeddings, scores scaled by ``√d_head``, attention biases, and either no
normalization or LayerNorm (``"LN"``, or ``"LNPre"`` read as weights 1 and biases 0) at
TransformerLens's eps, with or without ReLU MLPs. It returns the ``StandardTransformer`` computing
the same function on the task's inputs; without LayerNorm and MLPs the exact map
(``note_map.to_disentangled``) and every analysis read it, with them the behavioural ones.

The standard model has no attention biases; they fold exactly (docs/standard.md, *Attention
biases*). ``b_K`` is dropped: it adds ``q · b_K`` to every score of a query row, which softmax
cancels. ``b_Q``, ``b_V`` and ``b_O`` are read through one more stream coordinate that is 1 on every
row (a column of ones in ``W_pos``, which no head writes), so the imported model is one wider than
the native one (``d_model + 1``) exactly when one of them is nonzero; in the map that coordinate is
the positional rows of ``M_0``, so the biases land on the note's positional rows. Trailing heads
with every weight and bias 0 (the export's padding of a layer with fewer heads) are dropped.

The native model embeds token ids; the standard model reads real rows, ``X W_E``. ``W_E`` is read
off the token embedding: with ``d_vocab = d`` token ``j`` is ``e_j`` (``W_E`` is the embedding, and
the native model is fed ``X W_E`` as ``inputs_embeds``); with ``d_vocab`` the task's vocabulary size
(``tokens.vocabulary``: every binary row, then the scratch vector if it is not binary) the embedding
must be ``vocabulary @ W_E``: row ``j`` of ``W_E`` is the embedding of ``e_j``'s token, and every
other token is checked against it. A free embedding (not linear in the rows) is refused, or with
``approximate=True`` read as its least-squares ``W_E`` (``embedding_residual`` says how far off it
is; ``import_error`` measures the output's error). What the standard model cannot hold is one
``ValueError`` naming it.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor, nn

from ..config import ModelConfig
from ..task import Layout
from . import tokens
from .export import MAX_TOKEN_D
from .standard import LN_EPS, StandardTransformer

__all__ = ["embedding_residual", "import_error", "native_output", "standard_from_transformer_lens"]

LINEAR_TOL = 1e-5  # a token embedding off vocabulary @ W_E by more (relative to its scale) is refused


def standard_from_transformer_lens(bridge, layout: Layout, readout: str = "P", *,
                                   approximate: bool = False) -> StandardTransformer:
    """The ``StandardTransformer`` (plain, in ``bridge``'s dtype, on the CPU) computing the native
    ``bridge``'s function on ``layout``'s inputs, reading the rows of ``readout``.

    ``bridge``'s ``head`` output width must be ``layout.d`` and its ``n_ctx`` at least
    ``layout.T`` (the first ``T`` positional rows are used); its attention direction is kept. With
    a nonzero ``b_Q``, ``b_V`` or ``b_O`` the model's ``d_model`` is the native one plus 1 (the
    coordinate that carries the biases; module docstring). ``approximate``: a token embedding that
    is not linear in the task's rows is read as its least-squares ``W_E`` instead of refused (the
    result then computes another function: measure it with :func:`import_error`)."""
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a Layout, got {type(layout).__name__}")
    native, tl_cfg = _native(bridge)
    _check_form(native, tl_cfg, layout)
    H, dh, m = tl_cfg.n_heads, tl_cfg.d_head, tl_cfg.d_model
    dtype = native.head.weight.dtype
    mlp = not tl_cfg.attn_only  # the native blocks have an MLP exactly then
    layernorm = _normalization(tl_cfg) is not None
    layers = [_attention(layer, H, dh, m) for layer in native.layers]
    fold = _check_biases(layers, layernorm)
    heads = tuple(_heads_used(w) for w in layers)
    width = m + 1 if fold else m
    cfg = ModelConfig(layout, n_layers=tl_cfg.n_layers,
                      n_heads=heads[0] if len(set(heads)) == 1 else heads,
                      attention_dir=_direction(native), readout=readout,
                      dtype=str(dtype).removeprefix("torch."), arch="standard", d_model=width,
                      d_head=dh, layernorm=layernorm, d_mlp=tl_cfg.d_mlp if mlp else None)
    model = StandardTransformer(cfg, seed=0)
    with torch.no_grad():
        for p in model.parameters():  # the fold's coordinate m is written explicitly below
            if p.ndim > 1:
                p.zero_()
        # Column m of W_pos is 1 and of W_E is 0: every stream row carries a 1 there, which no head
        # (W_O's column m is 0) or MLP (W_out's, b_out's) writes, so it stays 1 through every layer.
        model.embed.W_E[:, :m] = _read_in(native, layout, approximate)
        model.pos_embed.W_pos[:, :m] = native.pos.weight[:layout.T]
        if fold:
            model.pos_embed.W_pos[:, m] = 1
        # Our stream is [r - c, 1] with r the native stream and c the sum of the b_O so far, so a read
        # r W + b is [r - c, 1] [W; b + c W]: row m of every read-in holds the bias and c W.
        c = torch.zeros(m, dtype=torch.float64)
        for block, layer, weights, h in zip(model.blocks, native.layers, layers, heads):
            attn = block.attn
            attn.W_Q[:, :m] = weights["W_Q"][:h]
            attn.W_K[:, :m] = weights["W_K"][:h]
            attn.W_V[:, :m] = weights["W_V"][:h]
            attn.W_O[:, :, :m] = weights["W_O"][:h]
            if fold:
                attn.W_Q[:, m] = _biased(weights["b_Q"][:h], c, weights["W_Q"][:h])
                attn.W_V[:, m] = _biased(weights["b_V"][:h], c, weights["W_V"][:h])
                # Row m of W_K stays 0: b_K + c W_K adds q · (b_K + c W_K) to every score of a query
                # row, the same for every key, and softmax (masked or not) cancels a row's constant.
            c = c + weights["b_O"].double()
            if cfg.layernorm:
                _copy_norm(block.ln1, layer.ln1)
            if mlp:
                if cfg.layernorm:
                    _copy_norm(block.ln2, layer.ln2)
                fc_in, fc_out = _unwrap(layer.mlp).fc_in, _unwrap(layer.mlp).fc_out
                block.mlp.W_in[:m] = fc_in.weight.detach().T
                if fold:  # b_in stays where it is; the MLP reads r = [r - c, 1] [I; c]
                    block.mlp.W_in[m] = (c @ fc_in.weight.detach().T.double()).to(dtype)
                block.mlp.b_in.copy_(fc_in.bias.detach())
                block.mlp.W_out[:, :m] = fc_out.weight.detach().T
                block.mlp.b_out[:m] = fc_out.bias.detach()
        if cfg.layernorm:
            _copy_norm(model.ln_final, native.ln_out)
        model.unembed.W_U[:m] = native.head.weight.detach().T
        if fold:  # out = r W_U = [r - c, 1] [W_U; c W_U]
            model.unembed.W_U[m] = (c @ native.head.weight.detach().T.double()).to(dtype)
    return model


def _attention(layer: nn.Module, H: int, dh: int, m: int) -> dict[str, Tensor]:
    """One native layer's attention in our shapes: ``W_Q, W_K, W_V (H, m, d_head)``, ``W_O (H,
    d_head, m)``, ``b_Q, b_K, b_V (H, d_head)``, ``b_O (m,)`` (0 where the native has no bias)."""
    attn, out = layer.attn, {}
    for name, key in (("Q", "q"), ("K", "k"), ("V", "v")):  # (H·dh, m) → (H, m, dh)
        linear = getattr(attn, key)
        weight = linear.weight.detach()
        out[f"W_{name}"] = weight.reshape(H, dh, m).transpose(1, 2)
        bias = getattr(linear, "bias", None)
        out[f"b_{name}"] = (torch.zeros(H * dh, dtype=weight.dtype) if bias is None
                            else bias.detach()).reshape(H, dh)
    weight = attn.o.weight.detach()
    out["W_O"] = weight.T.reshape(H, dh, m)
    bias = getattr(attn.o, "bias", None)
    out["b_O"] = torch.zeros(m, dtype=weight.dtype) if bias is None else bias.detach()
    return out


def _heads_used(weights: dict[str, Tensor]) -> int:
    """The heads of a layer less its trailing heads whose weights and biases are all 0 (at least 1).

    Such a head is what the export writes for a layer with fewer heads than the most; it writes
    nothing (``W_O^h = 0``), and training leaves it 0 (every gradient to it passes through a 0)."""
    parts = [weights[k].flatten(1) for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")]
    live = torch.cat(parts, dim=1).ne(0).any(dim=1).nonzero()  # the heads with a nonzero entry
    return int(live.max().item()) + 1 if len(live) else 1


def _biased(b: Tensor, c: Tensor, W: Tensor) -> Tensor:
    """``b + c W`` ``(H, d_head)`` for ``b (H, d_head)``, ``c (m,)``, ``W (H, m, d_head)``, the
    product in float64."""
    return (b.double() + c @ W.double()).to(W.dtype)


def _check_biases(layers: list[dict[str, Tensor]], layernorm: bool) -> bool:
    """Whether a ``b_Q``, ``b_V`` or ``b_O`` is nonzero (then the import folds them); with
    LayerNorm, a ``ValueError`` naming the first."""
    for i, weights in enumerate(layers):
        for k in ("Q", "V", "O"):
            if bool(weights[f"b_{k}"].ne(0).any()):
                if layernorm:
                    raise ValueError(f"blocks.{i}.attn.b_{k} is not zero in a model with LayerNorm: "
                                     f"the fold of b_Q, b_V and b_O needs a stream coordinate that is "
                                     f"1 on every row, and LayerNorm would normalise it with the rest")
                return True
    return False


def _native(bridge) -> tuple[nn.Module, object]:
    from transformer_lens import TransformerBridge

    native = getattr(bridge, "original_model", None)
    if not isinstance(bridge, TransformerBridge) or type(native).__name__ != "NativeModel":
        raise ValueError(f"bridge must be a native TransformerBridge (TransformerBridge.boot_native), "
                         f"got {type(bridge).__name__}")
    return native, bridge.cfg


def _unwrap(module: nn.Module) -> nn.Module:
    """The native module behind the bridge's wrapper, if it wraps one."""
    return getattr(module, "original_component", module)


def _normalization(cfg) -> str | None:
    return None if cfg.normalization_type is None else cfg.normalization_type.upper()


def _copy_norm(ours: nn.Module, native: nn.Module) -> None:
    """Our LayerNorm gets the native one's weight and bias (``LNPre``: 1 and 0)."""
    native = _unwrap(native)
    ours.w.copy_(native.weight.detach() if getattr(native, "weight", None) is not None
                 else torch.ones_like(ours.w))
    ours.b.copy_(native.bias.detach() if getattr(native, "bias", None) is not None
                 else torch.zeros_like(ours.b))


def _check_form(native: nn.Module, cfg, layout: Layout) -> None:
    """One ``ValueError`` naming the first thing of the native model the standard model lacks."""
    norm = _normalization(cfg)
    if norm not in (None, "LN", "LNPRE") or cfg.final_rms:
        raise ValueError(f"the import takes no normalization or LayerNorm (normalization_type None, "
                         f"'LN' or 'LNPre', final_rms=False), got normalization_type="
                         f"{cfg.normalization_type!r}, final_rms={cfg.final_rms}: the standard model "
                         f"has no RMSNorm")
    if norm is not None and not math.isclose(cfg.eps, LN_EPS, rel_tol=1e-9):
        raise ValueError(f"the import takes LayerNorm with eps = {LN_EPS:g} (the standard model's), "
                         f"got eps={cfg.eps:g}")
    if not cfg.attn_only:
        act = (cfg.act_fn or "gelu").lower()
        if cfg.gated_mlp or act != "relu":
            raise ValueError(f"the import takes MLPs relu(x W_in + b_in) W_out + b_out (act_fn="
                             f"'relu', gated_mlp=False), got act_fn={cfg.act_fn!r}, gated_mlp="
                             f"{cfg.gated_mlp}")
    if native.pos is None or getattr(native, "rotary", None) is not None:
        raise ValueError(f"the import takes learned positional embeddings (positional_embedding_type="
                         f"'standard'), got {cfg.positional_embedding_type!r}")
    if (cfg.n_key_value_heads or cfg.n_heads) != cfg.n_heads:
        raise ValueError(f"the import takes one key and value per head, got n_key_value_heads="
                         f"{cfg.n_key_value_heads} for n_heads={cfg.n_heads}")
    for layer in native.layers:
        scale = layer.attn.original_component.scale
        if not math.isclose(scale, math.sqrt(cfg.d_head), rel_tol=1e-9):
            raise ValueError(f"the import takes scores scaled by √d_head = {math.sqrt(cfg.d_head):g} "
                             f"(attn_scale=-1), got a scale of {scale:g}")
    if cfg.attn_scores_soft_cap > 0 or cfg.output_logits_soft_cap > 0:
        raise ValueError("the import takes models without soft caps (attn_scores_soft_cap and "
                         "output_logits_soft_cap <= 0)")
    if native.head.weight.shape[0] != layout.d:
        raise ValueError(f"the model's output width (d_vocab_out) must be layout.d = {layout.d}, "
                         f"got {native.head.weight.shape[0]}")
    if cfg.n_ctx < layout.T:
        raise ValueError(f"the model's n_ctx must be at least layout.T = {layout.T}, got {cfg.n_ctx}")
    bias = getattr(native.head, "bias", None)
    if bias is not None and bool(bias.detach().ne(0).any()):
        raise ValueError("unembed.b_U is not zero: the standard model has no read-out bias")


def _direction(native: nn.Module) -> str:
    return "causal" if native.layers[0].attn.original_component.causal else "bidirectional"


def _vocabulary_fit(E: Tensor, layout: Layout) -> tuple[Tensor, float]:
    """For a token embedding ``E (V, m)`` of the task's vocabulary: ``(W_E (d, m), residual)`` in
    float64, ``residual`` the largest entry of ``vocabulary @ W_E - E`` relative to ``E``'s scale
    (at least 1). ``W_E``'s row ``j`` is the embedding of ``e_j``'s token (exact: an exported model
    comes back bit for bit) when that fits within ``LINEAR_TOL``, else the least-squares fit."""
    vocab, E = tokens.vocabulary(layout), E.double()  # vocab (V, d): row v is token v's row
    one_hot = (vocab[:, None, :] == torch.eye(layout.d, dtype=torch.float64)[None]).all(-1)
    token, row = one_hot.nonzero().unbind(1)  # the token of each e_j
    scale = max(1.0, E.abs().max().item())
    W_E = E[token[row.argsort()]]
    residual = (vocab @ W_E - E).abs().max().item() / scale
    if residual > LINEAR_TOL:
        W_E = torch.linalg.lstsq(vocab, E).solution
        residual = (vocab @ W_E - E).abs().max().item() / scale
    return W_E, residual


def _embedding(native: nn.Module, layout: Layout) -> Tensor:
    """The token embedding ``(d_vocab, d_model)``, checked to have ``d`` rows or one per token of
    the task's vocabulary."""
    E = native.tok_embed.weight.detach()
    d = layout.d
    if E.shape[0] == d:
        return E
    size = tokens.vocabulary_size(layout) if d <= MAX_TOKEN_D else None
    if E.shape[0] != size:
        raise ValueError(f"the token embedding must have d = {d} rows (token j is e_j) or, for "
                         f"d <= {MAX_TOKEN_D}, one per row of the task's vocabulary ({size}), got "
                         f"d_vocab = {E.shape[0]}")
    return E


def embedding_residual(bridge, layout: Layout) -> float:
    """How far the native ``bridge``'s token embedding is from linear in the task's rows: the
    largest entry of ``vocabulary @ W_E - E`` relative to ``E``'s scale (at least 1) for the best
    ``W_E`` (least squares); 0 for an embedding of ``d`` rows (fed ``X W_E``)."""
    E = _embedding(_native(bridge)[0], layout)
    return 0.0 if E.shape[0] == layout.d else _vocabulary_fit(E, layout)[1]


def _read_in(native: nn.Module, layout: Layout, approximate: bool = False) -> Tensor:
    """``W_E (d, d_model)`` with ``embedding(token of row x) = x W_E`` on every row of the task
    (``approximate``: the least-squares ``W_E`` of an embedding that is not linear)."""
    E = _embedding(native, layout)
    if E.shape[0] == layout.d:
        return E
    W_E, residual = _vocabulary_fit(E, layout)
    if residual > LINEAR_TOL and not approximate:
        raise ValueError(f"the token embedding is not linear in the task's rows (token v must embed "
                         f"as vocabulary[v] @ W_E; its least-squares W_E is off by {residual:.2g} of "
                         f"its scale), so no W_E reads X exactly; pass approximate=True (invperm "
                         f"import --approximate) to read that W_E and measure the error it makes")
    return W_E.to(E.dtype)


def native_output(bridge, layout: Layout, readout: str,
                  X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch rows d"]:
    """TransformerLens's own forward of the native ``bridge`` on the task's inputs ``X``, read at
    ``readout``'s rows: fed token ids when its embedding lists the task's vocabulary, else
    ``X W_E`` as ``inputs_embeds`` (an embedding of ``d`` rows)."""
    native = _native(bridge)[0]
    E = _embedding(native, layout)
    with torch.no_grad():
        fed = X.to(E) @ E if E.shape[0] == layout.d else tokens.to_tokens(layout, X)
        return bridge(fed)[:, layout.rows(readout)]


def import_error(bridge, model: StandardTransformer, X: Float[Tensor, "batch pos d"]) -> float:
    """The largest ``|model(X) - bridge's forward|`` (:func:`native_output`, at ``model``'s read-out)
    relative to the native output's scale (at least 1): how exactly ``model`` is ``bridge``."""
    cfg = model.cfg
    theirs = native_output(bridge, cfg.layout, cfg.readout, X).double()
    with torch.no_grad():
        ours = model(X.to(cfg.torch_dtype)).double()
    return (ours - theirs).abs().max().item() / max(1.0, theirs.abs().max().item())
