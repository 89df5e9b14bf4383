"""The gauge of ``A``: directions of the weights that attention cannot see (DESIGN.md section 4).

Softmax is unchanged when a score row gets a constant added, so ``A`` is only defined up to:
- **key gauge** ``A + u gᵀ`` where ``h_j · g`` is the same for every key row ``j``. In ``h^0 = [X, I_T]``
  the all-ones over the position blocks is such a ``g`` (every row has one position). Each head's
  output ``z = pattern · h`` is a convex mix of rows, so it inherits the property: every copy of
  ``h^0`` inside ``h^l`` (prefixes ``""``, ``"L1."``, ``"L2.L1."`` …) carries its own ``g_p``.
- **query null** ``A + w vᵀ`` where ``h_i · w = 0`` for every query row: the differences ``g_p - g_q``
  of those vectors (``h · g_p = 1`` for every copy ``p``).
``gauge_fix`` returns the minimum-norm representative, ``(I - Π_null) A (I - Π_key)``, which gives
identical scores up to a per-row constant and so identical attention patterns.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from ..stream import Stream


def copy_prefixes(stream: Stream, layer: int) -> list[str]:
    """Prefixes of the copies of ``h^0`` inside ``h^layer`` (``""`` is the embedding itself)."""
    return [b.name[:-1] for b in stream.blocks(layer) if b.name == "x" or b.name.endswith(".x")]


def key_gauge_basis(stream: Stream, layer: int, dtype=torch.float64) -> Tensor:
    """``G (D_layer, n_copies)``: column ``p`` is 1 on copy ``p``'s position blocks, 0 elsewhere.

    For every row of ``h^layer`` on any input, ``h @ G`` is all ones.
    """
    prefixes = copy_prefixes(stream, layer)
    G = torch.zeros(stream.width(layer), len(prefixes), dtype=dtype)
    for col, prefix in enumerate(prefixes):
        for seg in stream.layout.segments:
            G[stream.slice(f"{prefix}pos.{seg.name}", layer), col] = 1.0
    return G


def _projector(basis: Tensor) -> Tensor:
    """Orthogonal projector onto the column span of ``basis (D, k)``; zeros when ``k = 0``."""
    if basis.shape[1] == 0:
        return basis.new_zeros(basis.shape[0], basis.shape[0])
    Q, _ = torch.linalg.qr(basis)
    return Q @ Q.T


def gauge_projectors(stream: Stream, layer: int, dtype=torch.float64) -> tuple[Tensor, Tensor]:
    """``(Π_null, Π_key)``, each ``(D_layer, D_layer)``: the query-null and key-gauge projectors."""
    G = key_gauge_basis(stream, layer, dtype)
    null = G[:, 1:] - G[:, :1]  # g_p - g_0: zero on every row of h^layer
    return _projector(null), _projector(G)


def gauge_fix(A: Float[Tensor, "*heads D D"], stream: Stream,
              layer: int) -> Float[Tensor, "*heads D D"]:
    """Minimum-norm representative of ``A (..., D_layer, D_layer)`` modulo the gauge."""
    P_null, P_key = (p.to(A.dtype).to(A.device) for p in gauge_projectors(stream, layer))
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return (eye - P_null) @ A @ (eye - P_key)


def gauge_component(A: Tensor, stream: Stream, layer: int) -> Tensor:
    """The part of ``A`` attention cannot see: ``A - gauge_fix(A)``."""
    return A - gauge_fix(A, stream, layer)


def random_gauge(stream: Stream, layer: int, generator: torch.Generator | None = None,
                 scale: float = 1.0, dtype=torch.float64) -> Tensor:
    """A random matrix ``(D, D)`` made only of gauge directions (for tests and demonstrations)."""
    G = key_gauge_basis(stream, layer, dtype)
    D, k = G.shape
    U = torch.randn(D, k, generator=generator, dtype=dtype) * scale  # any query mixing
    W = torch.randn(k - 1, D, generator=generator, dtype=dtype) * scale if k > 1 else None
    out = U @ G.T
    if W is not None:
        out = out + (G[:, 1:] - G[:, :1]) @ W
    return out
