"""The gauge of ``A``: directions of the weights that attention cannot see (docs/design.md section 4).

Softmax is unchanged when a score row gets a constant added, so ``A`` is only defined up to:
- **key gauge** ``A + u gᵀ`` where ``h_j · g`` is the same for every key row ``j``. In ``h^0 = [X, I_T]``
  the all-ones over the position blocks is such a ``g`` (every row has one position). Each head's
  output ``z = pattern · h`` is a convex mix of rows, so it inherits the property: every copy of
  ``h^0`` inside ``h^l`` (prefixes ``""``, ``"L1."``, ``"L2.L1."`` …) carries its own ``g_p``.
- **query null** ``A + w vᵀ`` where ``h_i · w = 0`` for every query row: the differences ``g_p - g_q``
  of those vectors (``h · g_p = 1`` for every copy ``p``).
``gauge_fix`` returns the minimum-norm representative, ``(I - Π_null) A (I - Π_key)``, which gives
identical scores up to a per-row constant and so identical attention patterns. On whole models:
:func:`gauge_fixed` (every ``A`` gauge-fixed), :func:`gauge_check` (the patterns compared on data),
:func:`perturb` (random gauge and noise added, what a construction looks like when learned).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from ..model.disentangled import DisentangledModel
from ..model.variants import forward_many
from ..stream import Stream


def key_gauge_basis(stream: Stream, layer: int, dtype=torch.float64) -> Tensor:
    """``G (D_layer, n_copies)``: column ``p`` is 1 on copy ``p``'s position blocks, 0 elsewhere.

    For every row of ``h^layer`` on any input, ``h @ G`` is all ones.
    """
    copies = list(stream.copies(layer).values())
    G = torch.zeros(stream.width(layer), len(copies), dtype=dtype)
    for col, blocks in enumerate(copies):
        for b in blocks:
            if b.parts.is_position:
                G[b.slice, col] = 1.0
    return G


def _projector(basis: Tensor) -> Tensor:
    """Orthogonal projector onto the column span of ``basis (D, k)``; zeros when ``k = 0``."""
    if basis.shape[1] == 0:
        return basis.new_zeros(basis.shape[0], basis.shape[0])
    Q, _ = torch.linalg.qr(basis)
    return Q @ Q.T


_PROJECTORS: dict[tuple, tuple[Tensor, Tensor]] = {}


def gauge_projectors(stream: Stream, layer: int, dtype=torch.float64) -> tuple[Tensor, Tensor]:
    """``(Π_null, Π_key)``, each ``(D_layer, D_layer)``: the query-null and key-gauge projectors.
    Cached per stream layout (an analysis gauge-fixes hundreds of fits): not to be edited."""
    key = (stream.layout, stream.heads, layer, dtype)
    if key not in _PROJECTORS:
        G = key_gauge_basis(stream, layer, dtype)
        null = G[:, 1:] - G[:, :1]  # g_p - g_0: zero on every row of h^layer
        _PROJECTORS[key] = _projector(null), _projector(G)
    return _PROJECTORS[key]


def gauge_fix(A: Float[Tensor, "*heads D D"], stream: Stream,
              layer: int) -> Float[Tensor, "*heads D D"]:
    """Minimum-norm representative of ``A (..., D_layer, D_layer)`` modulo the gauge."""
    P_null, P_key = (p.to(A.dtype).to(A.device) for p in gauge_projectors(stream, layer))
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return (eye - P_null) @ A @ (eye - P_key)


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


# -- whole models ---------------------------------------------------------------------------------
def _copy(model: DisentangledModel) -> DisentangledModel:
    twin = type(model)(model.cfg).to(model.device)
    twin.load_state_dict(model.state_dict())
    return twin


def gauge_fixed(model: DisentangledModel) -> DisentangledModel:
    """A copy of ``model`` whose every ``A`` is replaced by ``gauge_fix(A)`` (the same function)."""
    twin = _copy(model)
    with torch.no_grad():
        for layer, block in enumerate(twin.blocks):
            A = block.attn.A
            A.copy_(gauge_fix(A.to(torch.float64), model.stream, layer).to(A.dtype))
    return twin


def gauge_check(model: DisentangledModel, X: Tensor, fixed: Sequence[Tensor] | None = None,
                patterns: Sequence[Tensor] | None = None) -> float:
    """Largest attention-pattern difference between ``model`` and :func:`gauge_fixed` on ``X``.

    The gauge directions come from the layout; this checks them against data:
    ~1e-15 in float64, ~1e-6 in float32; more would mean a direction was not gauge after all.
    ``fixed``: per layer ``gauge_fix(A)`` (float64) already computed; ``patterns``: the model's own
    per layer ``(B, H_l, T, T)`` on ``X`` (``model.variants.model_run``), else computed. The weights
    run as variants of one forward (``model.variants``).
    """
    As = [block.attn.A.detach() for block in model.blocks]
    if fixed is None:
        fixed = [gauge_fix(A.to(torch.float64), model.stream, layer) for layer, A in enumerate(As)]
    W_U = model.unembed.W_U.detach()
    twin = [f.to(A.device, A.dtype) for f, A in zip(fixed, As)]
    X = X.to(model.device, model.cfg.torch_dtype)
    if patterns is None:
        (_, a), (_, b) = forward_many(model.cfg, [(As, W_U), (twin, W_U)], X, patterns=True)
    else:
        a, ((_, b),) = patterns, forward_many(model.cfg, [(twin, W_U)], X, patterns=True)
    return max(float((p - q).abs().max()) for p, q in zip(a, b))


def perturb(model: DisentangledModel, gauge: float = 0.0, noise: float = 0.0,
            seed: int = 0) -> DisentangledModel:
    """A copy with random gauge directions (``gauge``: their scale) and i.i.d. noise of std ``noise``
    added to every ``A``: what a construction looks like when learned (docs/design.md section 6)."""
    if not (math.isfinite(gauge) and math.isfinite(noise) and gauge >= 0 and noise >= 0):
        raise ValueError(f"gauge and noise must be finite and >= 0, got {gauge!r}, {noise!r}")
    twin = _copy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer, block in enumerate(twin.blocks):
            A = block.attn.A
            for h in range(A.shape[0]):
                extra = random_gauge(model.stream, layer, generator, scale=gauge)
                extra += noise * torch.randn(A.shape[1:], generator=generator, dtype=torch.float64)
                A[h] += extra.to(A.dtype).to(A.device)
    return twin
