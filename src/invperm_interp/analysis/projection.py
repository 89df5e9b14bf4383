"""The circuit-only model's weights: each head's gauge-fixed ``A`` projected on a hypothesis's cells
or template atoms (least squares in the gauge-fixed frame), and the fitted β of each template.

``analysis.faithfulness`` runs what this module fits; the gauge is ``analysis.gauge``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ..maths.cells import cell_template
from ..model.disentangled import DisentangledModel
from .gauge import gauge_fix, gauge_projectors
from .hypothesis import AtomCell, Hypothesis
from .pursuit import basis


@dataclass(frozen=True)
class Projection:
    """Per layer ``(H, D, D)``: ``gauge_fix(A)``, its part on the hypothesis ``kept`` and the same
    part before gauge fixing, ``raw`` (nonzero on the hypothesis's cells only; it differs from
    ``kept`` by gauge directions, so it gives the same attention, and a forward of it reads only
    the cells' blocks); per cell the fitted β (the template's least-squares scale in the fitted
    raw cell) and the share of the norm² kept."""

    fixed: tuple[Tensor, ...]
    kept: tuple[Tensor, ...]
    betas: tuple[float, ...]
    weight_share: float  # ||kept||² / ||fixed||², averaged over the layers
    raw: tuple[Tensor, ...] = ()


def _template_at(model: DisentangledModel, cell: AtomCell) -> Tensor:
    """The cell's template placed in a zero ``(D, D)`` matrix (float64)."""
    layer, _, query, key, label = cell
    stream = model.stream
    q, k = stream.block(query, layer), stream.block(key, layer)
    placed = torch.zeros(stream.width(layer), stream.width(layer), dtype=torch.float64)
    placed[q.slice, k.slice] = cell_template(label, q.width, k.width)
    return placed


_GAUGE_FACTORS: dict[tuple, tuple[Tensor, Tensor, Tensor]] = {}


def gauge_factors(stream, layer: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(U, W, V)``: orthonormal bases of the query null space, of its complement and of the key
    gauge. The gauge directions of ``A`` in ``vec`` form span ``u eⱼᵀ`` (``u`` in ``U``, any ``j``)
    and ``w vᵀ`` (``w`` in ``W``, ``v`` in ``V``): the range of ``1 - (1 - Π_null) ⊗ (1 - Π_key)``,
    an orthonormal ``(D², r)`` basis never formed whole (at D = 270 it would take ~0.5 GB). Cached
    per stream layout."""
    key = (stream.layout, stream.heads, layer)
    if key not in _GAUGE_FACTORS:
        P_null, P_key = gauge_projectors(stream, layer)
        W = basis(torch.eye(len(P_null), dtype=torch.float64) - P_null)
        _GAUGE_FACTORS[key] = basis(P_null), W, basis(P_key)
    return _GAUGE_FACTORS[key]


def _fit_cells(model: DisentangledModel, layer: int, F: Tensor,
               cells: list[AtomCell]) -> tuple[Tensor, Tensor]:
    """``min ||F - gauge_fix(M)||`` over ``M`` supported on ``cells``: returns ``(M, gauge_fix(M))``.

    With ``Π = 1 - G`` the gauge-fixing projector and ``F = Π F``, the normal equations on the
    cells' entries ``S`` are ``(1 - G_SS) m = F_S``, solved (minimum norm) by
    ``m = F_S + G_SS (1 - G_SS)⁺ F_S``. ``G_SS = B Bᵀ`` with ``B`` the few gauge directions the
    entries see (:func:`_gauge_rows`), so the pseudo-inverse is of ``1 - BᵀB`` or ``1 - B Bᵀ``,
    whichever is smaller. Where the cells are every (query block, key block) pair of some query
    and key blocks (one cell, or cells sharing their query or their key), ``1 - G_SS`` is a
    Kronecker product and its pseudo-inverse comes from two small eigendecompositions
    (:func:`_product_solution`).
    """
    stream, D = model.stream, F.shape[-1]
    U, W, V = gauge_factors(stream, layer)
    product = _product(stream, layer, cells)
    if product is not None:
        rows, cols = product
        M = torch.zeros(D, D, dtype=F.dtype)
        M[rows[:, None], cols[None, :]] = _product_solution(F[rows][:, cols], W[rows], V[cols])
        return M, gauge_fix(M, stream, layer)
    mask = torch.zeros(D, D, dtype=torch.bool)
    for _, _, query, key, _ in cells:
        mask[stream.slice(query, layer), stream.slice(key, layer)] = True
    idx = mask.reshape(-1).nonzero().squeeze(1)
    F_S = F.reshape(-1)[idx]
    entries = _entries(V, idx // D, idx % D)
    B = _gauge_rows(U, V, entries)
    if len(idx) < B.shape[1]:  # B (1 - BᵀB)⁺ Bᵀ = G (1 - G)⁺: the smaller pinv
        G = B @ B.T
        C = torch.eye(len(idx), dtype=F.dtype) - G
        m = F_S + G @ psd_solve(C, F_S)
    else:
        C = _gauge_gram(U, V, entries) if B.shape[1] >= CHOLESKY_FROM else B.T @ B
        C.neg_().diagonal().add_(1.0)  # 1 - BᵀB, in place
        m = F_S + B @ psd_solve(C, B.T @ F_S)
    M = torch.zeros(D * D, dtype=F.dtype)
    M[idx] = m
    M = M.reshape(D, D)
    return M, gauge_fix(M, stream, layer)


def _gauge_rows(U: Tensor, V: Tensor, entries: _Entries) -> Tensor:
    """``B (|S|, u·n_k + v·n_q)`` with ``B Bᵀ`` the gauge projector ``1 - (1 - UUᵀ) ⊗ (1 - VVᵀ)``
    on the entries ``(a, b)`` (:class:`_Entries`: query and key features, ``n_q`` and ``n_k``
    distinct ones; ``U (D, u)`` and ``V (D, v)`` orthonormal: the query null and the key gauge).
    The projector is ``UUᵀ ⊗ 1 + 1 ⊗ VVᵀ - UUᵀ ⊗ VVᵀ``; on the entries its first and last terms are
    ``E (1 ⊗ (1 - V_k V_kᵀ)) Eᵀ`` with ``E = [U[a] eⱼ(b)]`` over the entries' key features ``j``
    (``V_k``: ``V``'s rows there), its middle term ``[e_i(a) V[b]] [·]ᵀ`` over their query
    features ``i``. So ``B`` holds only the gauge directions the entries see, ~ ``n_q + n_k``
    columns (for two 10 × 10 cells 60 against the layer's ~3 D); ``analysis.budget.fit_bytes``
    counts them from the cells' blocks."""
    a, b, queries, i, root, j = entries
    u, v, n_k = U.shape[1], V.shape[1], len(root)
    B = torch.zeros(len(a), u * n_k + len(queries) * v, dtype=V.dtype)
    B[:, u * n_k:].unflatten(1, (len(queries), v))[torch.arange(len(a)), i] = V[b]
    if u:
        B[:, :u * n_k] = (U[a][:, :, None] * root[j][:, None, :]).flatten(1)
    return B


class _Entries(NamedTuple):
    """A fit's entries of ``A``: query and key features ``a``, ``b`` (one per entry), the distinct
    query features ``queries`` and each entry's index ``i`` among them, and ``root (n_k, n_k)``,
    the square root of ``1 - V_k V_kᵀ`` over the distinct key features, with each entry's index
    ``j`` among those. Formed once per fit, read by :func:`_gauge_rows` and :func:`_gauge_gram`."""

    a: Tensor
    b: Tensor
    queries: Tensor
    i: Tensor
    root: Tensor
    j: Tensor


def _entries(V: Tensor, a: Tensor, b: Tensor) -> _Entries:
    """:class:`_Entries` of the entries ``(a, b)``, ``V (D, v)`` the key gauge."""
    keys, j = torch.unique(b, return_inverse=True)
    queries, i = torch.unique(a, return_inverse=True)
    # 1 - V_k V_kᵀ = 1 - Q s² Qᵀ: its square root 1 - Q (1 - √(1 - s²)) Qᵀ
    Q, s, _ = torch.linalg.svd(V[keys], full_matrices=False)
    root = torch.eye(len(keys), dtype=V.dtype) - (Q * (1 - (1 - s * s).clamp(min=0).sqrt())) @ Q.T
    return _Entries(a, b, queries, i, root, j)


def _gauge_gram(U: Tensor, V: Tensor, entries: _Entries) -> Tensor:
    """``BᵀB`` of :func:`_gauge_rows`'s ``B`` from its structure, without the ``|S| r²`` product.
    An entry's row of ``B`` is ``[U[a] ⊗ R[j], e_i ⊗ V[b]]``, and ``U[a]`` depends on its query
    feature ``i`` only, so the blocks are sums over the entries grouped by feature:
    ``Σ_k (R_kᵀ R_k) ⊗ M_k`` with ``M_k = Σ U[a]ᵀ U[a]`` over key feature ``k``, then
    ``U_i ⊗ Σ R[j]ᵀ V[b]`` and ``Σ V[b]ᵀ V[b]`` over query feature ``i`` (block-diagonal):
    ``u² n_k³`` products for the first instead of ``|S| (u n_k)²``. On a learned 3 × 2 model's 67
    third-layer fits (``|S|`` ≈ 2,000, ``r`` ≈ 1,000) 0.011 against 0.106 CPU s (medians),
    agreeing to 1.5e-15."""
    a, b, queries, i, root, j = entries
    u, v, n_k, n_q = U.shape[1], V.shape[1], len(root), len(queries)
    Vb = V[b]
    gram = torch.zeros(u * n_k + n_q * v, u * n_k + n_q * v, dtype=V.dtype)
    per_query = torch.zeros(n_q, v, v, dtype=V.dtype).index_add_(0, i, Vb[:, :, None] * Vb[:, None, :])
    gram[u * n_k:, u * n_k:] = torch.block_diag(*per_query)
    if u:
        Ua = U[a]
        per_key = torch.zeros(n_k, u, u, dtype=V.dtype).index_add_(0, j, Ua[:, :, None] * Ua[:, None, :])
        gram[:u * n_k, :u * n_k] = torch.einsum("kpq,kj,kl->pjql", per_key, root, root).reshape(
            u * n_k, u * n_k)
        mixed = torch.zeros(n_q, n_k, v, dtype=V.dtype).index_add_(
            0, i, root[j][:, :, None] * Vb[:, None, :])
        cross = torch.einsum("ip,ijq->pjiq", U[queries], mixed).reshape(u * n_k, n_q * v)
        gram[:u * n_k, u * n_k:] = cross
        gram[u * n_k:, :u * n_k] = cross.T
    return gram


#: Eigenvalues of the normal equations' matrix below this share of the largest are dropped.
PINV_RTOL = 1e-10
#: From this many rows, :func:`psd_solve` tries Cholesky first: a learned 3 × 2 model's
#: third-layer fits are ~1,000 × 1,000.
CHOLESKY_FROM = 512


def psd_solve(C: Tensor, x: Tensor) -> Tensor:
    """``C⁺ x`` for ``C (n, n)`` symmetric positive semi-definite, as
    ``torch.linalg.pinv(C, hermitian=True, rtol=PINV_RTOL) @ x``. From ``CHOLESKY_FROM`` rows, by
    ``C = L Lᵀ`` where ``L`` shows that no eigenvalue would be cut, so that ``C⁺ = C⁻¹``:
    ``λ_max ≤ tr C`` and ``1 / λ_min = ‖C⁻¹‖₂`` is at most :func:`_inverse_bound` (two triangular
    solves) or, where that bound is too loose, ``tr C⁻¹``. A learned 3 × 2 model's third-layer
    fits (~1,000 rows, eigenvalues in [2/27, 1]: the first bound, 477 against 13.5, holds with
    room) took 0.018–0.025 CPU s against the pseudo-inverse's 0.25–0.27 (three of them). Else,
    and below that size, the pseudo-inverse."""
    if len(C) >= CHOLESKY_FROM:
        L, info = torch.linalg.cholesky_ex(C)
        if int(info) == 0:
            cut = PINV_RTOL * float(C.trace())  # nothing is cut if ‖C⁻¹‖₂ · cut ≤ 1
            if _inverse_bound(L) * cut <= 1.0:
                return torch.cholesky_solve(x.unsqueeze(-1), L).squeeze(-1)
            inverse = torch.cholesky_inverse(L)
            if float(inverse.trace()) * cut <= 1.0:
                return inverse @ x
    return torch.linalg.pinv(C, hermitian=True, rtol=PINV_RTOL) @ x


def _inverse_bound(L: Tensor) -> float:
    """An upper bound on ``‖(L Lᵀ)⁻¹‖₂ = ‖L⁻¹‖₂²`` for ``L`` lower triangular with a positive
    diagonal: ``‖L⁻¹‖₂² ≤ ‖L⁻¹‖₁ ‖L⁻¹‖_∞``, and ``|L⁻¹| ≤ M⁻¹`` entrywise for the comparison
    matrix ``M`` (``L``'s diagonal, minus the magnitudes of its other entries; forward
    substitution on ``M`` only adds what it takes away on ``L``), whose column and row sums
    are ``M⁻ᵀ 1`` and ``M⁻¹ 1``: two triangular solves without cancellation."""
    M = -L.abs()
    M.diagonal().copy_(L.diagonal())
    ones = torch.ones(len(L), 1, dtype=L.dtype, device=L.device)
    rows = torch.linalg.solve_triangular(M, ones, upper=False)
    cols = torch.linalg.solve_triangular(M.T, ones, upper=True)
    return float(rows.max()) * float(cols.max())


def _product(stream, layer: int, cells: list[AtomCell]) -> tuple[Tensor, Tensor] | None:
    """``(rows, cols)`` (sorted index tensors) when the cells' entries are exactly ``rows × cols``:
    every pair of their query blocks and key blocks is a cell; else ``None``."""
    sites = {(query, key) for _, _, query, key, _ in cells}
    queries, keys = {q for q, _ in sites}, {k for _, k in sites}
    if len(sites) != len(queries) * len(keys):
        return None
    D = stream.width(layer)
    rows, cols = (torch.zeros(D, dtype=torch.bool) for _ in range(2))
    for q in queries:
        rows[stream.slice(q, layer)] = True
    for k in keys:
        cols[stream.slice(k, layer)] = True
    return rows.nonzero().squeeze(1), cols.nonzero().squeeze(1)


def _product_solution(F: Tensor, W: Tensor, V: Tensor) -> Tensor:
    """``m = F_S + G (1 - G)⁺ F_S`` on the entries ``rows × cols`` (``F (R, K)``, ``W (R, ·)`` the
    query complement's basis rows, ``V (K, ·)`` the key gauge's): there ``1 - G`` is
    ``Q_n ⊗ Q_k`` with ``Q_n = W Wᵀ`` and ``Q_k = 1 - V Vᵀ`` (the two sides of ``gauge_fix``
    restricted to the rows and columns), so its eigenvalues are the products of theirs and its
    pseudo-inverse, cut at ``PINV_RTOL`` of the largest product as ``torch.linalg.pinv`` cuts,
    is applied as ``X₁ ((X₁ᵀ F X₂) / λμᵀ) X₂ᵀ``."""
    Qn = W @ W.T
    Qk = torch.eye(len(V), dtype=F.dtype) - V @ V.T
    lam, X1 = torch.linalg.eigh(Qn)
    mu, X2 = torch.linalg.eigh(Qk)
    prod = lam[:, None] * mu[None, :]
    keep = (prod.abs() >= PINV_RTOL * prod.abs().max()) & (prod != 0)
    inverse = torch.where(keep, 1.0 / torch.where(keep, prod, 1.0), 0.0)
    y = X1 @ ((X1.T @ F @ X2) * inverse) @ X2.T  # (1 - G)⁺ F_S
    return F + y - Qn @ y @ Qk  # F_S + (1 - (1 - G)) y


def _fit_atoms(model: DisentangledModel, layer: int, F: Tensor,
               cells: list[AtomCell]) -> tuple[Tensor, Tensor]:
    """Least squares of ``F`` on the cells' gauge-fixed templates: ``(Σ β T, Σ β gauge_fix(T))``."""
    raw = torch.stack([_template_at(model, c) for c in cells])  # (n, D, D)
    Phi = gauge_fix(raw, model.stream, layer).reshape(len(cells), -1).T  # (D², n)
    beta = torch.linalg.pinv(Phi.T @ Phi, hermitian=True) @ (Phi.T @ F.reshape(-1))
    return torch.einsum("n,nij->ij", beta, raw), (Phi @ beta).reshape(F.shape)


def fixed_weights(model: DisentangledModel) -> tuple[Tensor, ...]:
    """Per layer ``gauge_fix(A)`` of every head, ``(H, D, D)`` float64 on the CPU."""
    return tuple(gauge_fix(block.attn.A.detach().to("cpu", torch.float64), model.stream, layer)
                 for layer, block in enumerate(model.blocks))


def _head_fits(model: DisentangledModel, hyp: Hypothesis, layer: int, F: Tensor,
               fits: dict | None):
    """Per head of ``layer`` holding some of the hypothesis's cells: ``(head, indices of its cells,
    M, gauge_fix(M))``, the fit of ``F[head]`` (``fits``: as :func:`project`'s)."""
    fit = _fit_cells if hyp.unit == "cells" else _fit_atoms
    for head in range(F.shape[0]):
        mine = [i for i, c in enumerate(hyp.cells) if c[0] == layer and c[1] == head]
        if not mine:
            continue
        cells = [hyp.cells[i] for i in mine]
        # a cells fit depends on which (query, key) cells only; an atoms fit on the templates
        key = (hyp.unit, layer, head, frozenset(c[2:4] for c in cells) if hyp.unit == "cells"
               else tuple(cells))
        if fits is None:
            yield (head, mine, *fit(model, layer, F[head], cells))
            continue
        if key not in fits:
            fits[key] = fit(model, layer, F[head], cells)
        yield (head, mine, *fits[key])


def raw_weights(model: DisentangledModel, hyp: Hypothesis, fixed: Sequence[Tensor],
                fits: dict | None = None) -> tuple[Tensor, ...]:
    """:attr:`Projection.raw` of :func:`project` alone, per layer ``(H, D, D)``: what a circuit-only
    model runs, without the gauge-fixed part, the shares or the β."""
    raw = []
    for layer, F in enumerate(fixed):
        R = torch.zeros_like(F)
        for head, _, M, _ in _head_fits(model, hyp, layer, F, fits):
            R[head] = M
        raw.append(R)
    return tuple(raw)


def project(model: DisentangledModel, hyp: Hypothesis, *,
            fixed: Sequence[Tensor] | None = None, fits: dict | None = None,
            betas: bool = True) -> Projection:
    """Least-squares fit of each head's ``gauge_fix(A)`` by ``gauge_fix(M)`` with ``M`` in the span of
    the hypothesis (``hyp.unit``: its template atoms, or every entry of its cells), and the fit.

    ``fixed``: :func:`fixed_weights` already computed; ``fits``: a dict that keeps each head's fit
    by its cells, for a caller testing many hypotheses of one model; ``betas=False`` skips the
    per-cell β (zeros), which only the faithfulness record reports."""
    fixed = fixed if fixed is not None else fixed_weights(model)
    kept, raw, shares = [], [], []
    betas_out = [0.0] * len(hyp.cells)
    for layer, F in enumerate(fixed):
        K, R = torch.zeros_like(F), torch.zeros_like(F)
        for head, mine, M, fitted in _head_fits(model, hyp, layer, F, fits):
            R[head], K[head] = M, fitted
            if not betas:
                continue
            for group in {hyp.cells[i][:4] for i in mine}:  # β: the templates' least-squares
                entries = [i for i in mine if hyp.cells[i][:4] == group]  # scales in the fitted cell
                Ts = torch.stack([_template_at(model, hyp.cells[i]).reshape(-1) for i in entries], 1)
                on = Ts.abs().sum(1) > 0
                scale = torch.linalg.lstsq(Ts[on], M.reshape(-1)[on, None], driver="gelsd").solution
                for i, b in zip(entries, scale.squeeze(1).tolist()):
                    betas_out[i] = b
        total = float(F.pow(2).sum())
        kept.append(K)
        raw.append(R)
        shares.append(float(K.pow(2).sum()) / total if total > 0 else 0.0)
    return Projection(tuple(fixed), tuple(kept), tuple(betas_out), sum(shares) / len(shares),
                      tuple(raw))
