"""The task's input rows as tokens, and their labels.

Every row of an input ``X`` is binary (a ``P`` row ``e_j``, a ``Y_P`` row, a zero row) or the
scratch vector ``s``, so the rows form a vocabulary: token ``v < 2^d`` is the binary row whose bits,
left to right, spell ``v`` (``e_0`` is ``2^{d-1}``, ``0110`` is 6) and token ``2^d`` is ``s`` when ``s``
is not binary. ``to_tokens`` / ``from_tokens`` convert, so an input can be passed as ``(B, T)`` ids
the way TransformerLens passes tokens (its patching reads the position axis from the last one);
``row_labels`` names rows for plots (``P3→e7``, ``Y3=0110…``, ``S0``).
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..task import Layout

MAX_D = 62  # token ids are int64


def _powers(d: int, device=None) -> Tensor:
    return 2 ** torch.arange(d - 1, -1, -1, device=device)  # (d,): bit weights, left to right


def _scratch(layout: Layout) -> Tensor | None:
    """``s`` if it needs its own token (it is not binary), else ``None``."""
    s = torch.tensor(layout.scratch_vector, dtype=torch.float64)
    return s if len(s) and not bool(((s == 0) | (s == 1)).all()) else None


def vocabulary_size(layout: Layout) -> int:
    return 2**layout.d + (_scratch(layout) is not None)


def vocabulary(layout: Layout) -> Float[Tensor, "vocab d"]:
    """Every token's row, ``(V, d)`` in float64: ``2^d`` binary rows, then ``s`` if not binary."""
    d = layout.d
    rows = ((torch.arange(2**d)[:, None] // _powers(d)) % 2).double()  # (2^d, d)
    s = _scratch(layout)
    return rows if s is None else torch.cat([rows, s[None]])


def to_tokens(layout: Layout, X: Float[Tensor, "batch pos d"]) -> Int[Tensor, "batch pos"]:
    """``X (B, T, d)`` → token ids ``(B, T)``; a row that is neither binary nor ``s`` is an error."""
    d, T = layout.d, layout.T
    if not isinstance(X, Tensor) or X.ndim != 3 or tuple(X.shape[1:]) != (T, d):
        shape = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
        raise ValueError(f"X must be a tensor of shape (B, {T}, {d}), got {shape}")
    if d > MAX_D:
        raise ValueError(f"tokens need d <= {MAX_D} (int64 ids), got d={d}")
    binary = ((X == 0) | (X == 1)).all(-1)  # (B, T)
    tokens = (X.round().long() * _powers(d, X.device)).sum(-1)
    s = _scratch(layout)
    if s is not None:
        is_s = (X == s.to(X)).all(-1) & ~binary
        tokens = torch.where(is_s, 2**d, tokens)
        binary = binary | is_s
    if not bool(binary.all()):
        b, t = (~binary).nonzero()[0].tolist()
        raise ValueError(f"X[{b}, {t}] is neither a binary row nor the scratch vector, so it has no "
                         "token; pass X itself")
    return tokens


def from_tokens(layout: Layout, tokens: Int[Tensor, "batch pos"],
                dtype: torch.dtype = torch.float32) -> Float[Tensor, "batch pos d"]:
    """Token ids ``(B, T)`` → ``X (B, T, d)`` in ``dtype``."""
    d, T = layout.d, layout.T
    if not isinstance(tokens, Tensor) or tokens.dtype.is_floating_point or tokens.dtype.is_complex:
        raise ValueError(f"tokens must be an integer tensor of shape (B, {T}), got "
                         f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
    if tokens.ndim != 2 or tokens.shape[1] != T:
        raise ValueError(f"tokens must have shape (B, {T}), got {tuple(tokens.shape)}")
    V = vocabulary_size(layout)
    if bool((tokens < 0).any()) or bool((tokens >= V).any()):
        raise ValueError(f"tokens must be ids in [0, {V}) for layout {layout}, got "
                         f"{int(tokens.min())}..{int(tokens.max())}")
    ids = tokens.long()
    X = ((ids[..., None] // _powers(d, tokens.device)) % 2).to(dtype)
    s = _scratch(layout)
    if s is not None:
        X = torch.where((ids == 2**d)[..., None], s.to(X), X)
    return X


def row_labels(layout: Layout, X: Float[Tensor, "pos d"]) -> list[str]:
    """One label per row of ``X (T, d)``: ``P3→e7`` (P row 3 is ``e_7``), ``Y3=0110…`` (a ``Y_P``
    row's bits), ``S0`` / ``pad0`` (other segments by name). A ``P`` row that is not one-hot shows
    its values, ``P3=[0.5, 0.5, 0]``."""
    labels, start = [], 0
    for seg in layout.segments:
        for i in range(seg.n_rows):
            row = X[start + i]
            if seg.kind == "P":
                one_hot = bool(((row == 0) | (row == 1)).all()) and float(row.sum()) == 1
                labels.append(f"P{i}→e{int(row.argmax())}" if one_hot
                              else f"P{i}=[{', '.join(f'{v:g}' for v in row.tolist())}]")
            elif seg.kind == "Y":
                labels.append(f"Y{i}=" + "".join(str(int(v)) for v in row.round().tolist()))
            else:
                labels.append(f"{seg.name}{i}")
        start += seg.n_rows
    return labels
