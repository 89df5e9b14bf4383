"""Many variants of one model's weights run as batched forward passes, computing only what they read.

A *variant* replaces every layer's ``A`` and the read-out ``W_U`` (a circuit-only model, a model
less some cells, a construction at some β). :func:`forward_stacked` runs variants stacked along a
leading axis on the same inputs with the model's own maths (``model.disentangled``:
``scores = h A hᵀ``, causal mask, softmax, the stream grown by concatenation), without hooks and
without building a model per variant. It first works backwards from ``W_U`` to the stream
columns each layer must produce (:func:`_plan`): a head none of whose output columns is read is
skipped, scores use only the rows and columns of ``A`` that hold a nonzero entry, and a head's
output is formed only for the columns read later; the embedding's ``I_T`` columns are never
multiplied (a query's position adds a row of ``A``, a key's a column of the queries, and
``p I_T = p``). The terms left out are exact zeros, so the
result is the full forward's up to rounding; a circuit-only model keeping a few cells costs a
fraction of a forward. :func:`forward_many` splits many variants into chunks of bounded memory. A
variant may also add a term to its scores (a mean or resample ablation's stand-in for removed cells).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ..config import ModelConfig
from ..memory import MAX_ELEMENTS
from .causal import causal_mask, mask_term
from .disentangled import embedding


@dataclass(frozen=True)
class _Head:
    """One head's work in a layer: ``A``'s support rows ``Q`` and columns ``K`` and the source
    columns ``src`` of ``h^l`` whose mix the later layers read (all index tensors into ``h^l``)."""

    index: int
    Q: Tensor
    K: Tensor
    src: Tensor


class _Columns(NamedTuple):
    """A layer's stream columns: ``inp`` those ``h`` holds, ``out`` those it forms (sorted index
    tensors into ``h^l`` and ``h^{l+1}``), and ``eye``: where ``I_T`` starts when ``h`` is the
    embedding ``[X, I_T]`` itself (stream columns ``eye … eye + T - 1`` hold the identity, so
    their products are taken without multiplying), else None."""

    inp: Tensor
    out: Tensor
    eye: int | None = None


def _support(A: Tensor) -> tuple[Tensor, Tensor]:
    """``(D,)`` bool each, on the CPU: the rows and the columns of ``A (V, D, D)`` holding a
    nonzero entry in some variant (one pass over ``A``)."""
    nonzero = (A != 0).any(0).cpu()  # (D, D)
    return nonzero.any(1), nonzero.any(0)


def _plan(cfg: ModelConfig, As: Sequence[Tensor], need: Tensor,
          every_head: bool) -> tuple[list[Tensor], list[list[_Head]]]:
    """Per stream ``h^0..h^L`` the columns needed (sorted index tensors), and per layer its heads'
    work, for the columns ``need (D_L,)`` (bool) of the last stream; ``every_head``: every head's
    attention, read or not (for attention patterns)."""
    widths = cfg.widths
    needs, layers = [need], []
    for layer in reversed(range(len(As))):
        D, A = widths[layer], As[layer]
        prev, heads = need[:D].clone(), []
        for k in range(A.shape[1]):
            src = need[D * (k + 1): D * (k + 2)]
            if every_head or bool(src.any()):
                Q, K = _support(A[:, k])
                prev |= src | Q | K
                heads.append(_Head(k, *(m.nonzero().squeeze(1) for m in (Q, K, src))))
        needs.append(prev)
        layers.append(heads)
        need = prev
    return [n.nonzero().squeeze(1) for n in reversed(needs)], layers[::-1]


def kept_widths(cfg: ModelConfig, As: Sequence[Tensor], W_U: Tensor, patterns: bool = False
                ) -> list[int]:
    """Columns of each stream ``h^0..h^L`` that a forward of weights ``As[l] (H_l, D_l, D_l)`` and
    ``W_U (D_L, d)`` computes (``patterns``: every head's attention too): what its memory scales
    with (``memory.kept_variant_bytes``)."""
    cols, _ = _plan(cfg, [A.unsqueeze(0) for A in As], _read(W_U.unsqueeze(0)), patterns)
    return [len(c) for c in cols]


def _read(W_U: Tensor) -> Tensor:
    """``(D_L,)`` bool: the rows of ``W_U (V, D_L, d)`` some variant reads."""
    return (W_U != 0).any(-1).any(0).cpu()


def _cols(h: Tensor, index: Tensor) -> Tensor:
    """``h[..., index]``: a view when ``index`` is a run of consecutive columns, else a gather.
    ``torch.gather`` on an expanded index, not ``index_select``: on the last axis of a CPU tensor
    it ran 3–10× faster (``benchmarks/gather.py``), and the scratch analysis spent a third of its
    time in these gathers."""
    n = len(index)
    if n and int(index[-1]) - int(index[0]) == n - 1:
        return h[..., int(index[0]): int(index[0]) + n]
    return torch.gather(h, -1, index.to(h.device).expand(*h.shape[:-1], n))


@dataclass(frozen=True)
class FirstLayer:
    """The stream after a first layer that many variants share: its columns ``columns`` (a
    sorted index tensor into ``h^1``) as ``stream (B, T, len(columns))``."""

    stream: Tensor
    columns: Tensor

    def take(self, cols: Tensor) -> Tensor:
        """``h^1[..., cols]`` ``(B, T, len(cols))``; ``cols`` (sorted) must be among :attr:`columns`."""
        index = torch.searchsorted(self.columns, cols).clamp(max=max(len(self.columns) - 1, 0))
        if len(cols) and (not len(self.columns) or bool((self.columns[index] != cols).any())):
            raise ValueError("a variant reads a column of h^1 the shared first layer did not form")
        return _cols(self.stream, index)


def _embedded(X: Tensor, dtype: torch.dtype) -> Tensor:
    """``h^0 = [X, I_T]`` ``(B, T, d + T)`` of ``X (B, T, d)``, in ``dtype``."""
    T = X.shape[1]
    return embedding(X.to(dtype), torch.eye(T, dtype=dtype, device=X.device))


def first_layer(cfg: ModelConfig, A: Tensor, X: Tensor, columns: Tensor) -> FirstLayer:
    """The stream after the first layer of weights ``A (H_0, D_0, D_0)`` on ``X (B, T, d)``:
    the columns ``columns`` (a sorted index tensor) of ``h^1``, in ``A``'s dtype, formed as
    :func:`forward_stacked` forms them."""
    need = torch.zeros(cfg.widths[1], dtype=torch.bool)
    need[columns] = True
    cols, layers = _plan(cfg, [A[None]], need, False)
    h0 = _embedded(X, A.dtype)
    h, _ = _layer(cfg, A[None], layers[0], _Columns(cols[0], cols[1], cfg.d),
                  _cols(h0, cols[0])[None], final=False)
    return FirstLayer(h[0], cols[1])


def _layer(cfg: ModelConfig, A: Tensor, heads: list[_Head], cols: _Columns,
           h: Tensor, *, final: bool, patterns: bool = False,
           offset: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """One layer of stacked variants: the columns ``cols.out`` of the next stream from those
    ``cols.inp`` of ``h (V, B, T, n)``, ``A (V, H, D, D)``; the final layer forms them on the
    read-out rows only (its scores too, unless ``patterns``: then every head's attention
    ``(V, B, H, T, T)`` is returned beside). ``offset``: ``None`` or a term added to every head's
    scores, ``(V, H, T, T)`` or ``(V, B, H, T, T)``."""
    V, B, T, _ = h.shape
    dtype, device = h.dtype, h.device
    cols_in, cols_out = cols.inp, cols.out
    D, rows = A.shape[-1], cfg.readout_rows
    last = final and not patterns
    # the causal mask as a term (adding it, ~8x faster than masked_fill_ with a broadcast mask on
    # a CPU, leaves every finite score's bits unchanged)
    mask = mask_term(causal_mask(T, device), dtype) if cfg.causal else None
    where = torch.full((D,), -1, dtype=torch.long)
    where[cols_in] = torch.arange(len(cols_in))  # stream column → position in h
    R = len(range(T)[rows]) if last else T
    out_h = h[:, :, rows] if final else h  # the rows this layer's output is formed on
    hq = out_h if last else h  # (V, B, R, n)
    parts = [_cols(out_h, where[cols_out[cols_out < D]])]
    layer_pats = (torch.zeros(V, B, A.shape[1], T, T, dtype=dtype, device=device)
                  if patterns else None)
    for head in heads:
        # a support covering most of the stream is widened to all of it: a view, no gather
        rows_q, cols_k = (cols_in if 2 * len(part) >= len(cols_in) else part
                          for part in (head.Q, head.K))
        W = _cols(_cols(A[:, head.index].transpose(1, 2), rows_q).transpose(1, 2), cols_k)
        scores = _scores(W, (hq, h), (rows_q, cols_k), where, cols.eye,
                         rows if last else slice(None)).reshape(V, B, R, T)
        if offset is not None:
            extra = offset[..., head.index, :, :]  # (V, T, T) or (V, B, T, T)
            extra = extra[..., rows, :] if last else extra
            scores += extra.unsqueeze(1) if extra.dim() == 3 else extra  # scores: bmm's own output
        if mask is not None:
            scores += mask[rows] if last else mask
        pattern = torch.softmax(scores, dim=-1)  # (V, B, R, T)
        if patterns:
            layer_pats[:, :, head.index] = pattern
        mixing = pattern[:, :, rows] if final and not last else pattern
        kept, positions = _identity_split(head.src, cols.eye, T)
        if len(kept):
            values = _cols(h, where[kept]).reshape(V * B, T, len(kept))
            parts.append(torch.bmm(mixing.reshape(V * B, -1, T), values)
                         .reshape(V, B, mixing.shape[2], -1))
        if len(positions):
            parts.append(_cols(mixing, positions))  # p I_T: the pattern's own columns
    return torch.cat(parts, dim=-1), layer_pats  # (V, B, R, |cols_out|)


def _identity_split(index: Tensor, eye: int | None, T: int) -> tuple[Tensor, Tensor]:
    """Sorted stream columns ``index`` as those held in the stream and the positions ``j`` of
    those that are ``I_T``'s column ``eye + j`` (none when ``eye`` is None). In ``h^0 = [X, I_T]``
    every column from ``eye`` on is ``I_T``'s, so the two keep ``index``'s order one after the
    other."""
    if eye is None:
        return index, index[:0]
    n = int((index < eye).sum())
    return index[:n], index[n:] - eye


def _scores(W: Tensor, streams: tuple[Tensor, Tensor], support: tuple[Tensor, Tensor],
            where: Tensor, eye: int | None, rows: slice) -> Tensor:
    """``h_Q W h_Kᵀ`` ``(V·B, R, T)`` for ``W (V, |Q|, |K|)`` on the stream columns ``support =
    (Q, K)`` of the query rows ``rows`` and the key stream, ``(V, B, R, n)`` and ``(V, B, T, n)``
    (``where``: stream column → place in them). Columns of ``I_T`` (``eye``) are not multiplied:
    a query row's position column adds its row of ``W``, a key's adds its column of the queries."""
    hq, h = streams
    V, B, R, _ = hq.shape
    T = h.shape[2]
    (q_kept, q_pos), (k_kept, k_pos) = (_identity_split(s, eye, T) for s in support)
    nq, nk = len(q_kept), len(k_kept)
    if nq:
        q = _cols(hq, where[q_kept]).reshape(V, B * R, nq) @ W[:, :nq]  # (V, B·R, |K|)
    else:
        q = W.new_zeros(V, B * R, W.shape[2])
    if len(q_pos):
        by_row = W.new_zeros(V, T, W.shape[2]).index_copy(1, q_pos.to(W.device), W[:, nq:])
        q = (q.reshape(V, B, R, -1) + by_row[:, rows].unsqueeze(1)).reshape(V, B * R, -1)
    q = q.reshape(V * B, R, -1)
    if nk:
        keys = _cols(h, where[k_kept]).reshape(V * B, T, nk)
        scores = torch.bmm(q[..., :nk], keys.transpose(1, 2))
    else:
        scores = q.new_zeros(V * B, R, T)
    if len(k_pos):
        scores = scores.index_add(-1, k_pos.to(scores.device), q[..., nk:])
    return scores


def forward_stacked(cfg: ModelConfig, As: Sequence[Tensor], W_U: Tensor, X: Tensor, *,
                    patterns: bool = False, offsets: Sequence[Tensor | None] | None = None,
                    h0: Tensor | FirstLayer | None = None,
                    readout: bool = True) -> Tensor | tuple[Tensor, list[Tensor]]:
    """``As[l] (V, H_l, D_l, D_l)``, ``W_U (V, D_L, d)``, ``X (B, T, d)`` → the outputs
    ``(V, B, d, d)``; with ``patterns``, also each layer's attention ``(V, B, H_l, T, T)`` (then
    every head's attention is computed, for every query row). ``offsets``: per layer ``None`` or
    a term added to every head's scores, ``(V, H_l, T, T)`` or, per sample,
    ``(V, B, H_l, T, T)`` (what a mean or resample ablation puts in place of removed cells).
    ``h0``: the stream ``h^0 (B, T, D_0)`` to start from instead of ``[X, I_T]`` (an ablation's
    edited embedding), or the stream after the first layer, a :class:`FirstLayer` shared by every
    variant (:func:`first_layer` of their common ``As[0]``, which is then not run again; not with
    ``patterns`` or a first-layer offset). ``readout=False``: instead of the outputs, the
    read-out rows of the columns of ``h^L`` that ``W_U`` reads, ``(V, B, d, n)`` (``W_U`` nonzero
    on every row: all of them). Differentiable in ``X`` (``torch.func`` works through it)."""
    V = W_U.shape[0]
    dtype, device = W_U.dtype, X.device
    cols, layers = _plan(cfg, As, _read(W_U), patterns)
    n_layers, pats = len(As), []
    first = h0 if isinstance(h0, FirstLayer) else None
    eye = cfg.d if h0 is None else None  # where h^0's I_T starts (an edited embedding: its own)
    if first is not None:
        if patterns or len(As) < 2 or (offsets is not None and offsets[0] is not None):
            raise ValueError("h0: a shared first layer takes no patterns or first-layer offset, "
                             "and a model of at least two layers")
        h = first.take(cols[1]).to(device, dtype).unsqueeze(0).expand(V, -1, -1, -1)
    else:
        if h0 is None:
            h0 = _embedded(X, dtype)
        h = _cols(h0.to(device, dtype), cols[0]).unsqueeze(0).expand(V, -1, -1, -1)  # (V, B, T, n)
    start = 0 if first is None else 1
    if first is None and not patterns and n_layers > 1 and V > 1 and (
            offsets is None or offsets[0] is None):
        # variants sharing their first layer's weights: it is formed once for each distinct one
        unique, inverse = torch.unique(As[0].reshape(V, -1), dim=0, return_inverse=True)
        if len(unique) < V:
            h, _ = _layer(cfg, unique.reshape(-1, *As[0].shape[1:]), layers[0],
                          _Columns(cols[0], cols[1], eye), h[:len(unique)], final=False)
            h, start = h[inverse.to(h.device)], 1
    for layer in range(start, n_layers):
        columns = _Columns(cols[layer], cols[layer + 1], eye if layer == 0 else None)
        h, layer_pats = _layer(cfg, As[layer], layers[layer], columns, h,
                               final=layer == n_layers - 1, patterns=patterns,
                               offset=None if offsets is None else offsets[layer])
        if patterns:
            pats.append(layer_pats)
    read = h if n_layers else h[:, :, cfg.readout_rows]
    if not readout:
        return (read, pats) if patterns else read
    out = read @ _cols(W_U.transpose(1, 2), cols[-1]).transpose(1, 2).unsqueeze(1)  # (V, B, d, d)
    return (out, pats) if patterns else out


def stack_weights(variants: Sequence[tuple[Sequence[Tensor], Tensor]], dtype: torch.dtype,
                  device) -> tuple[list[Tensor], Tensor]:
    """``[(As, W_U), …]`` (``As[l] (H_l, D_l, D_l)``, ``W_U (D_L, d)``) → per layer
    ``(V, H_l, D_l, D_l)`` and ``(V, D_L, d)``, in ``dtype`` on ``device``."""
    n_layers = len(variants[0][0])
    As = [torch.stack([v[0][layer] for v in variants]).to(device, dtype) for layer in range(n_layers)]
    return As, torch.stack([v[1] for v in variants]).to(device, dtype)


def forward_many(cfg: ModelConfig, variants: Sequence[tuple[Sequence[Tensor], Tensor]], X: Tensor,
                 *, dtype: torch.dtype | None = None, patterns: bool = False,
                 offsets: Callable[[int], Sequence[Tensor]] | None = None,
                 max_elements: int = MAX_ELEMENTS) -> list:
    """Each variant ``(As, W_U)`` of a model with config ``cfg`` run on ``X (B, T, d)``, in chunks:
    one output ``(B, d, d)`` per variant, in order (with ``patterns``, ``(output, [(B, H_l, T, T)
    per layer])`` per variant). ``dtype``: the arithmetic's (default ``cfg.torch_dtype``).
    ``offsets(i)``: variant ``i``'s per-layer term added to its scores, ``(H_l, T, T)`` or
    ``(B, H_l, T, T)`` (:func:`forward_stacked`), asked for when its chunk runs (per-sample terms
    of many variants would not fit in memory together). Without ``offsets`` or ``patterns``, the
    first layer of variants whose first-layer weights are equal (a circuit and that circuit less
    a later cell) is formed once: within a chunk (:func:`forward_stacked`), and across chunks
    when each variant is a chunk of its own (:func:`first_layer`). On two layers it is most of a
    forward's cost: the first layer computes every row, the last the read-out rows only."""
    if not variants:
        return []
    dtype = dtype or cfg.torch_dtype
    per_variant = X.shape[0] * cfg.T * cfg.widths[-1]
    first_terms = offsets(0) if offsets is not None else None
    if first_terms is not None:
        per_variant += sum(o.numel() for o in first_terms)
    size = max(1, max_elements // max(per_variant, 1))
    # one variant per chunk: those sharing a first layer run from one formed for them all
    if size == 1 and offsets is None and not patterns and len(cfg.heads) > 1:
        groups, alone = _by_first_layer(variants)
    else:
        groups, alone = [], list(range(len(variants)))
    results: list = [None] * len(variants)

    def run(chunk: list[int], shared: FirstLayer | None) -> None:
        As, W_U = stack_weights([variants[i] for i in chunk], dtype, X.device)
        extra = None
        if offsets is not None:
            terms = [first_terms if i == 0 else offsets(i) for i in chunk]
            extra = [torch.stack([t[layer] for t in terms]).to(X.device, dtype)
                     for layer in range(len(As))]
        got = forward_stacked(cfg, As, W_U, X, patterns=patterns, offsets=extra, h0=shared)
        if patterns:
            out, pats = got
            got = [(out[v], [p[v] for p in pats]) for v in range(len(out))]
        for i, result in zip(chunk, got):
            results[i] = result

    with torch.no_grad():
        for group in groups:
            As, W_U = _union_support([variants[i] for i in group])
            need = _plan(cfg, As, _read(W_U), False)[0][1]  # the h^1 columns any of them reads
            shared = first_layer(cfg, variants[group[0]][0][0].to(X.device, dtype), X, need)
            for i in group:
                run([i], shared)
        for begin in range(0, len(alone), size):
            run(alone[begin:begin + size], None)
    return results


def _by_first_layer(variants: Sequence[tuple[Sequence[Tensor], Tensor]]) -> tuple[list[list[int]], list[int]]:
    """The variants' indices grouped by their first layer's weights (equal entries): the groups
    of more than one, and the rest."""
    groups: dict[tuple, list[int]] = {}
    for i, (As, _) in enumerate(variants):
        A = As[0].detach().cpu().contiguous()
        groups.setdefault((A.dtype, tuple(A.shape), A.numpy().tobytes()), []).append(i)
    return ([g for g in groups.values() if len(g) > 1],
            sorted(g[0] for g in groups.values() if len(g) == 1))


def _union_support(variants: Sequence[tuple[Sequence[Tensor], Tensor]]) -> tuple[list[Tensor], Tensor]:
    """Per layer ``(1, H_l, D_l, D_l)`` and ``(1, D_L, d)`` bool: the entries nonzero in some
    variant (what :func:`_plan` reads of stacked weights), or-ed one variant at a time (a stack of
    64 variants' masks held 0.23 GB at 4 layers × 3 heads, d = 4)."""
    def union(weights) -> Tensor:
        out = None
        for W in weights:
            nonzero = W.detach().cpu() != 0
            out = nonzero if out is None else out.logical_or_(nonzero)
        return out[None]

    n_layers = len(variants[0][0])
    return ([union(v[0][layer] for v in variants) for layer in range(n_layers)],
            union(v[1] for v in variants))


def model_run(model, X: Tensor) -> tuple[Tensor, list[Tensor]]:
    """A disentangled model's (plain or hooked) read-out rows of ``h^L`` ``(B, d, D_L)`` (zero in
    the columns ``W_U`` does not read) and every layer's attention ``(B, H_l, T, T)`` on
    ``X (B, T, d)``: one plain forward (no hooks), in its dtype. Its output is the first times
    ``model.unembed.W_U``; an analysis shares this run between the clean scores, the gauge check and
    the read-out ablations."""
    As = [block.attn.A.detach()[None] for block in model.blocks]
    W_U = model.unembed.W_U.detach()
    X = X.to(model.device, model.cfg.torch_dtype)
    with torch.no_grad():
        read, patterns = forward_stacked(model.cfg, As, W_U[None], X, patterns=True, readout=False)
    final = read.new_zeros(*read.shape[1:-1], W_U.shape[0])
    final[..., (W_U != 0).any(-1)] = read[0]
    return final, [p[0] for p in patterns]


def model_patterns(model, X: Tensor) -> tuple[Tensor, list[Tensor]]:
    """A disentangled model's (plain or hooked) own output ``(B, d, d)`` and every layer's
    attention ``(B, H_l, T, T)`` on ``X (B, T, d)``: one plain forward (no hooks), in its dtype."""
    final, patterns = model_run(model, X)
    return final @ model.unembed.W_U.detach(), patterns
