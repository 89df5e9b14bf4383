"""Orthogonal matching pursuit of a gauge-fixed ``A`` over gauge-fixed placed templates.

The machinery behind :func:`analysis.templates.explain`: a dictionary of every (cell, template)
atom of one layer, kept sparse (each atom is nonzero on one cell before gauge fixing), the forward
pursuit that breaks ties between gauge twins by the raw weights, and a noise-calibrated pruning step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..maths.cells import TemplateFn
from ..stream import Block, Stream
from .gauge import gauge_fix, gauge_projectors

#: A template maker: ``(rows, cols) → (rows, cols)`` tensor, or ``None`` where it does not apply.


# -- the dictionary of placed templates ----------------------------------------------------------------
@dataclass(frozen=True)
class Dictionary:
    """Every (cell, template) atom of one layer: raw placements ``M`` as sparse rows over
    ``vec(A)``, and what is needed to gauge-fix them without materialising them all."""

    cells: tuple[tuple[Block, Block], ...]  # per atom
    names: tuple[str, ...]  # per atom: template name
    templates: tuple[Tensor, ...]  # per atom: (rows, cols)
    M: Tensor  # sparse (n_atoms, D²)
    fixed_norm: Tensor  # (n_atoms,): ||gauge_fix(M_a)||
    raw_norm: Tensor  # (n_atoms,): ||T_a||
    D: int
    null_rank: int  # rank of the query-null projector
    key_rank: int  # rank of the key-gauge projector


def build_dictionary(stream: Stream, layer: int, library: dict[str, TemplateFn]) -> Dictionary:
    D = stream.width(layer)
    P_null, P_key = gauge_projectors(stream, layer)
    U, V = basis(P_null), basis(P_key)  # orthonormal bases of the two projectors' ranges
    made: dict[tuple[str, int, int], Tensor | None] = {}  # a template depends on the widths only
    atoms: list[tuple[Block, Block, str, Tensor]] = []
    blocks = stream.blocks(layer)
    for q in blocks:
        for k in blocks:
            for name, make in library.items():
                key = (name, q.width, k.width)
                if key not in made:
                    made[key] = _template(name, make, q.width, k.width)
                if made[key] is not None:
                    atoms.append((q, k, name, made[key]))
    index, vals = [], []
    for members in _by_template(atoms):  # each template's nonzeros placed at once, not per atom
        T = atoms[members[0]][3]
        i, j = T.nonzero(as_tuple=True)
        q, k = (torch.tensor([atoms[a][side].start for a in members])[:, None] for side in (0, 1))
        rows = torch.tensor(members)[:, None].expand(-1, len(i))
        index.append(torch.stack([rows.reshape(-1), ((q + i) * D + (k + j)).reshape(-1)]))
        vals.append(T[i, j].repeat(len(members)))
    M = torch.sparse_coo_tensor(torch.cat(index, 1), torch.cat(vals), (len(atoms), D * D),
                                check_invariants=True).coalesce()
    templates = tuple(T for *_, T in atoms)
    raw_norm = torch.tensor([float(t.norm()) for t in templates], dtype=torch.float64)
    return Dictionary(tuple((q, k) for q, k, *_ in atoms), tuple(n for _, _, n, _ in atoms),
                      templates, M, _fixed_norms(atoms, U, V), raw_norm, D, U.shape[1], V.shape[1])


def _template(name: str, make: TemplateFn, rows: int, cols: int) -> Tensor | None:
    """The template ``name`` for a ``(rows, cols)`` cell in float64, ``None`` where it does not
    apply or is zero."""
    T = make(rows, cols)
    if T is None or not bool(T.any()):
        return None
    if tuple(T.shape) != (rows, cols):
        raise ValueError(f"template {name!r} made shape {tuple(T.shape)} for a ({rows}, {cols}) cell")
    return T.to(torch.float64)


def _by_template(atoms: list[tuple[Block, Block, str, Tensor]]) -> list[list[int]]:
    """The atoms' indices grouped by template tensor (one per template and cell shape)."""
    groups: dict[int, list[int]] = {}
    for a, (*_, T) in enumerate(atoms):
        groups.setdefault(id(T), []).append(a)
    return list(groups.values())


#: Entries of ``_fixed_norms``' largest temporary, ``UᵀMV`` of a chunk of atoms (16 MiB of
#: float64): all of a template's atoms at once held 2.4 GB at the last layer of 4 layers × 3 heads
#: at d = 4 (36,864 atoms, ranks 63 and 64).
NORM_ELEMENTS = 1 << 21


def _fixed_norms(atoms: list[tuple[Block, Block, str, Tensor]], U: Tensor, V: Tensor) -> Tensor:
    """``||gauge_fix(M_a)||`` of each atom, ``M_a`` nonzero on one cell:
    ``||(1-UUᵀ) M (1-VVᵀ)||² = ||M||² - ||UᵀM||² - ||MV||² + ||UᵀMV||²``, for the atoms of one
    template and cell shape at once, in chunks of at most ``NORM_ELEMENTS`` entries of ``UᵀMV``."""
    out = torch.zeros(len(atoms), dtype=torch.float64)
    chunk = max(1, NORM_ELEMENTS // max(U.shape[1] * V.shape[1], 1))
    for members in _by_template(atoms):
        T = atoms[members[0]][3]
        for at in range(0, len(members), chunk):
            part = members[at:at + chunk]
            rows = torch.tensor([atoms[a][0].start for a in part])[:, None] + torch.arange(T.shape[0])
            cols = torch.tensor([atoms[a][1].start for a in part])[:, None] + torch.arange(T.shape[1])
            Uq, Vk = U[rows], V[cols]  # (n, q, rank_U), (n, k, rank_V)
            UM = Uq.transpose(1, 2) @ T  # (n, rank_U, k)
            MV = T @ Vk  # (n, q, rank_V)
            sq = (T.pow(2).sum() - UM.pow(2).sum((1, 2)) - MV.pow(2).sum((1, 2))
                  + (UM @ Vk).pow(2).sum((1, 2)))
            out[part] = sq.clamp_min(0).sqrt()
    return out


def basis(projector: Tensor) -> Tensor:
    """Orthonormal basis ``(D, rank)`` of a projector's range."""
    eigval, eigvec = torch.linalg.eigh(projector)
    return eigvec[:, eigval > 0.5]


def placed(dic: Dictionary, a: int) -> Tensor:
    """Atom ``a`` as a full raw ``(D, D)`` matrix."""
    q, k = dic.cells[a]
    out = torch.zeros(dic.D, dic.D, dtype=torch.float64)
    out[q.slice, k.slice] = dic.templates[a]
    return out


# -- matching pursuit ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PursuitLimits:
    """When :func:`pursue` stops adding atoms and which it keeps (``templates.explain``'s
    arguments): ``min_share`` of the norm² the next atom must explain, ``tol`` the unexplained
    share to stop at, ``max_atoms`` forward steps, ``significance`` the pruning's factor."""

    min_share: float = 1e-3
    tol: float = 1e-10
    max_atoms: int = 32
    significance: float = 2.0


@dataclass(frozen=True)
class Fit:
    selected: tuple[int, ...]
    betas: tuple[float, ...]
    phis: tuple[Tensor, ...]  # gauge-fixed atoms (D, D)
    twins: tuple[tuple[tuple[int, float], ...], ...]  # per atom: (atom, sign) equal modulo gauge
    fixed: Tensor  # gauge_fix(A) (D, D)
    residual: Tensor  # (D, D)


def pursue(A: Tensor, stream: Stream, layer: int, dic: Dictionary, limits: PursuitLimits,
           tie_tol: float = 1e-6) -> Fit:
    """Orthogonal matching pursuit of ``gauge_fix(A)`` over the gauge-fixed atoms of ``dic``.

    Each step takes the atom most correlated with the residual (``<r, gfix(M)> = <r, M>`` since the
    residual is already gauge-fixed); atoms parallel to it modulo gauge tie, and the tie goes to the
    atom whose raw cell carries the most of the raw ``A`` (so ``-1`` at (pos.P, pos.Y) is reported
    as the constructions write it, not as its twin ``+1`` at (pos.P, pos.P)); the others are kept as twins.
    Atoms equally correlated but not parallel are decided by the smaller fit (:func:`_smallest_reading`):
    ``+1`` at (x, pos.P) with ``-1`` at (x, pos.Y) spans what ``+2`` at (x, pos.P) with ``+1`` at
    (x, pos.S) spans, and the first is the reading with the smaller βs, whatever the gauge.
    Forward steps stop (``limits``) after ``max_atoms``, once the residual share is below ``tol`` or
    when the best atom would explain less than ``min_share`` of the norm²; then :func:`_prune` drops the
    atoms that do not stand out from the residual.
    """
    min_share, tol, max_atoms = limits.min_share, limits.tol, limits.max_atoms
    fixed = gauge_fix(A, stream, layer)
    f = fixed.reshape(-1)
    total = float(f @ f)
    selected: list[int] = []
    phis: list[Tensor] = []
    twins: list[tuple[tuple[int, float], ...]] = []
    r = f.clone()
    if total == 0.0:
        return Fit((), (), (), (), fixed, fixed.clone())
    raw_evidence = (dic.M @ A.reshape(-1, 1)).squeeze(1).abs() / dic.raw_norm  # (n_atoms,)
    usable = dic.fixed_norm > 1e-9 * dic.fixed_norm.max()
    safe_norm = torch.where(usable, dic.fixed_norm, torch.ones_like(dic.fixed_norm))
    for _ in range(max_atoms):
        corr = (dic.M @ r.reshape(-1, 1)).squeeze(1) / safe_norm  # normalised correlation
        corr = torch.where(usable, corr.abs(), torch.zeros_like(corr))
        if selected:
            corr[selected] = 0.0
        best = int(corr.argmax())
        near = torch.nonzero(corr >= float(corr[best]) * (1 - tie_tol)).flatten().tolist()
        if len(near) > 1:
            best = _smallest_reading(near, phis, f, dic, stream, layer, tie_tol)
        if float(corr[best]) ** 2 < min_share * total:
            break
        phi = gauge_fix(placed(dic, best), stream, layer)
        cos = (dic.M @ phi.reshape(-1, 1)).squeeze(1) / (safe_norm * dic.fixed_norm[best])
        group = [t for t in torch.nonzero(usable & (cos.abs() > 1 - tie_tol)).flatten().tolist()
                 if t not in selected] or [best]
        # the raw weights decide between gauge twins; library order (lowest index) breaks exact ties
        top = max(float(raw_evidence[t]) for t in group)
        pick = min(t for t in group if float(raw_evidence[t]) >= top * (1 - tie_tol))
        sign = 1.0 if float(cos[pick]) > 0 else -1.0  # gfix(pick) = sign * gfix(best)
        if pick != best:
            phi = gauge_fix(placed(dic, pick), stream, layer)
        selected.append(pick)
        phis.append(phi)
        twins.append(tuple((t, sign * (1.0 if float(cos[t]) > 0 else -1.0))
                           for t in group if t != pick))
        r = f - refit(phis, f)[1]
        if float(r @ r) < tol * total:
            break
    n_free = (dic.D - dic.null_rank) * (dic.D - dic.key_rank)  # dimension of the gauge-fixed space
    keep = prune(phis, f, n_free, limits.significance * 2 * math.log(max(len(dic.cells), 2)))
    phis = [phis[i] for i in keep]
    betas, fitted = refit(phis, f)
    return Fit(tuple(selected[i] for i in keep), tuple(float(b) for b in betas), tuple(phis),
                tuple(twins[i] for i in keep), fixed, (f - fitted).reshape(fixed.shape))


def _smallest_reading(near: list[int], phis: list[Tensor], f: Tensor, dic: Dictionary,
                      stream: Stream, layer: int, tie_tol: float) -> int:
    """Of atoms ``near`` equally correlated with the residual, the one whose refit with ``phis``
    has the smallest ``||β||²`` (gauge-invariant: read from gauge-fixed atoms); library order (the
    lowest index) breaks what is still tied."""
    size = {t: float(refit([*phis, gauge_fix(placed(dic, t), stream, layer)], f)[0].pow(2).sum())
            for t in near}
    least = min(size.values())
    return min(t for t in near if size[t] <= least * (1 + tie_tol))


def refit(phis: list[Tensor], f: Tensor) -> tuple[Tensor, Tensor]:
    """Least-squares ``betas`` of ``f`` on the atoms ``phis`` (normal equations: a handful of
    atoms against ``D²`` entries), and the fitted vector."""
    if not phis:
        return torch.zeros(0, dtype=f.dtype), torch.zeros_like(f)
    Phi = torch.stack([p.reshape(-1) for p in phis], dim=1)  # (D², n_atoms)
    betas = torch.linalg.pinv(Phi.T @ Phi, hermitian=True) @ (Phi.T @ f)
    return betas, Phi @ betas


def prune(phis: list[Tensor], f: Tensor, n_free: int, threshold: float) -> list[int]:
    """Indices of the atoms to keep: drop, one at a time, the atom whose removal costs the least
    residual norm² while that cost is below ``threshold`` times the noise variance per entry
    (estimated from the residual). The best of ``N`` chance correlations with white noise of
    variance ``σ²`` explains about ``2 ln N · σ²``; ``threshold`` is a multiple of that. An exact fit
    (zero residual) keeps every atom."""
    keep = list(range(len(phis)))
    while keep:
        Phi = torch.stack([phis[i].reshape(-1) for i in keep], dim=1)
        betas, fitted = refit([phis[i] for i in keep], f)
        rss = float((f - fitted).pow(2).sum())
        sigma2 = rss / max(n_free - len(keep), 1)
        gram_inv = torch.linalg.pinv(Phi.T @ Phi)
        cost = betas.pow(2) / gram_inv.diagonal().clamp_min(1e-300)  # RSS increase if dropped
        worst = int(cost.argmin())
        if float(cost[worst]) >= threshold * sigma2:
            break
        keep.pop(worst)
    return keep
