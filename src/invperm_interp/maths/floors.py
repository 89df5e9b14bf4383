"""What a causal model can and cannot do: the exact Bayes floor under a causal mask (Theorem 1).

By Lemma 1, the read-out row at position ``t`` is a function of input rows ``0..t`` only. The
floor is the MSE of the Bayes-optimal predictor given exactly those rows, computed in closed form
(``causal_floor``), checked two independent ways (``bayes_mse_monte_carlo``,
``exact_floor_enumeration``); ``dependency_map`` certifies Lemma 1 for a given model.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..model.variants import forward_stacked
from ..task import Batch, Layout, make_input, sample_batch

if TYPE_CHECKING:  # training needs the floors, not TransformerLens
    from ..model.disentangled import DisentangledModel


def _row_positions(layout: Layout, kind: str) -> range:
    rows = layout.rows(layout.segment_of_kind(kind).name)
    return range(rows.start, rows.stop)


def per_entry_error(k: int, a: int) -> float:
    """Expected squared error of one entry of ``Y_r`` when its row is unidentified.

    ``Y_r`` sits in one of ``k`` candidate rows of ``Y_P`` (uniformly, independent of the data), of
    which ``a`` are visible. The Bayes prediction is the mean over candidates of (the visible value,
    or 1/2). With centred entries ``u_j = y_j - 1/2`` (variance 1/4) the error is
    ``u_J - (1/k) Σ_visible u_j``, whose variance is
    ``(a/k)·¼[(1-1/k)² + (a-1)/k²] + ((k-a)/k)·¼[1 + a/k²]``.
    """
    if k == 0:
        return 0.0
    seen = (a / k) * 0.25 * ((1 - 1 / k) ** 2 + (a - 1) / k**2) if a else 0.0
    unseen = ((k - a) / k) * 0.25 * (1 + a / k**2)
    return seen + unseen


def row_floor(layout: Layout, position: int, r: int) -> float:
    """Least expected squared error (summed over ``d`` columns) for predicting ``Y_r`` from input
    rows ``0..position``.

    ``Y_r`` is row ``J = perm⁻¹(r)`` of ``Y_P``. If ``P``'s row ``J`` is visible (probability
    ``|V_P|/d``, ``J`` then uniform on ``V_P``) the model knows ``J`` and is exact iff ``Y_P``'s row
    ``J`` is visible, else it can do no better than 1/2 (cost ``d/4``). Otherwise ``J`` is uniform on
    the ``k`` unseen rows of ``P`` and :func:`per_entry_error` applies.
    """
    d = layout.d
    visible_P = {i for i, pos in enumerate(_row_positions(layout, "P")) if pos <= position}
    visible_Y = {i for i, pos in enumerate(_row_positions(layout, "Y")) if pos <= position}
    del r  # by symmetry of the uniform permutation the floor does not depend on which row r
    known_missing = len(visible_P - visible_Y)  # J known but Y_P row J not yet visible
    unknown = set(range(d)) - visible_P
    k, a = len(unknown), len(unknown & visible_Y)
    return known_missing / d * 0.25 * d + k / d * d * per_entry_error(k, a)


def causal_floor(layout: Layout, readout: str) -> float:
    """Exact best achievable MSE (the note's loss: squared error summed over ``d`` columns, averaged
    over rows) of any causally masked model reading segment ``readout`` of ``layout``.

    Reading the P rows of ``[P; Y_P]`` it is ``d/4`` (2.5 at d = 10: the note's "random guessing");
    reading the Y_P rows it is ``(d-1)/8`` (1.125 at d = 10); reading scratch rows after ``Y_P``, 0.
    """
    rows = _readout_rows(layout, readout)
    return sum(row_floor(layout, rows.start + r, r) for r in range(layout.d)) / layout.d


def _readout_rows(layout: Layout, readout: str) -> slice:
    if not isinstance(layout, Layout):  # the project raises ValueError for every bad argument
        raise ValueError(f"layout must be a Layout, got {type(layout).__name__}")
    rows = layout.rows(layout.segment(readout).name)
    if rows.stop - rows.start != layout.d:
        raise ValueError(f"readout segment {readout!r} must have d={layout.d} rows")
    return rows


def _bayes_row_prediction(X: Tensor, layout: Layout, position: int, r: int) -> Tensor:
    """Bayes prediction of ``Y_r`` from the rows ``X[:, :position + 1]`` only: ``(B, T, d) → (B, d)``.

    The posterior over ``J`` (the ``Y_P`` row holding ``Y_r``) is read off the visible ``P`` rows: the
    one visible row equal to ``e_r`` if there is one, else uniform over the unseen ``P`` rows (every
    unseen row is equally likely under a uniform permutation). A visible ``Y_P`` row contributes its
    value, an unseen one its prior mean 1/2 (``Y_P`` is independent of the permutation).
    """
    p_pos = torch.arange(layout.T)[layout.rows(layout.segment_of_kind("P").name)]
    y_pos = torch.arange(layout.T)[layout.rows(layout.segment_of_kind("Y").name)]
    seen_P, seen_Y = p_pos <= position, y_pos <= position  # (d,)
    holds_r = (X[:, p_pos, r] == 1) & seen_P  # (B, d): visible P rows that are e_r
    known = holds_r.any(dim=1, keepdim=True)  # (B, 1)
    posterior = torch.where(known, holds_r, ~seen_P).to(X.dtype)  # (B, d), unnormalised
    posterior = posterior / posterior.sum(dim=1, keepdim=True)
    expected = torch.where(seen_Y[:, None], X[:, y_pos], torch.full_like(X[:, y_pos], 0.5))
    return torch.einsum("bj,bjc->bc", posterior, expected)  # (B, d)


def bayes_mse_monte_carlo(layout: Layout, readout: str, n_samples: int = 20_000,
                          seed: int = 0) -> tuple[float, float]:
    """Monte Carlo MSE of the Bayes-optimal causal predictor: ``(mean, standard error)``.

    Independent of :func:`causal_floor`'s closed form: each read-out row's posterior is computed
    from the sampled visible rows (:func:`_bayes_row_prediction`) and its loss averaged.
    """
    rows = _readout_rows(layout, readout)
    if not isinstance(n_samples, int) or isinstance(n_samples, bool) or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for start in range(0, n_samples, 4096):
        batch = sample_batch(layout, min(4096, n_samples - start), generator, dtype=torch.float64)
        loss = torch.zeros(len(batch), dtype=torch.float64)
        for r in range(layout.d):
            pred = _bayes_row_prediction(batch.X, layout, rows.start + r, r)
            loss += ((pred - batch.Y[:, r]) ** 2).sum(-1)
        losses.append(loss / layout.d)  # (B,): the note's loss per sample
    loss = torch.cat(losses)
    return float(loss.mean()), float(loss.std() / math.sqrt(n_samples))


def exact_floor_enumeration(layout: Layout, readout: str) -> float:
    """The causal floor by brute force, for ``d <= 3``: every permutation and every binary ``Y``.

    For each read-out row at position ``t``, inputs are grouped by their visible rows ``0..t``; the
    Bayes prediction is the group's mean target, and its squared error is summed exactly.
    """
    rows = _readout_rows(layout, readout)
    d = layout.d
    if d > 3:
        raise ValueError(f"layout.d must be <= 3 for exact enumeration (d!·2^(d²) inputs), got {d}")
    perms = torch.tensor(list(itertools.permutations(range(d))))  # (d!, d)
    bits = torch.arange(2 ** (d * d))[:, None] >> torch.arange(d * d) & 1  # (2^(d²), d²)
    eye = torch.eye(d, dtype=torch.float64)
    P = eye[perms].repeat_interleave(len(bits), dim=0)  # (N, d, d)
    Y = bits.to(torch.float64).reshape(-1, d, d).repeat(len(perms), 1, 1)  # (N, d, d)
    batch = make_input(layout, P, P @ Y)
    total = 0.0
    for r in range(d):
        seen = batch.X[:, : rows.start + r + 1].flatten(1)  # (N, visible features)
        _, group = torch.unique(seen, dim=0, return_inverse=True)  # (N,)
        n_groups = int(group.max()) + 1
        sums = torch.zeros(n_groups, d, dtype=torch.float64).index_add_(0, group, batch.Y[:, r])
        mean = sums / torch.bincount(group, minlength=n_groups)[:, None]  # Bayes prediction
        total += float(((batch.Y[:, r] - mean[group]) ** 2).sum(-1).mean())
    return total / d


@dataclass(frozen=True)
class DependencyMap:
    """Lemma 1 certificate: how much each read-out row depends on each input row.

    ``norms (n_readout, T)``: max over the batch of the Frobenius norm of
    ``∂ out[r] / ∂ X[t]``; ``positions[r]`` is read-out row ``r``'s input position; ``causal_ok``
    is True when every dependence on a later input row (``t > positions[r]``) is exactly zero.
    """

    norms: Tensor
    positions: tuple[int, ...]
    causal_ok: bool


def _later_is_zero(norms: Tensor, positions: list[int]) -> bool:
    later = torch.arange(norms.shape[-1])[None, :] > torch.tensor(positions)[:, None]
    return bool((norms[later] == 0).all())


def dependency_map(model: DisentangledModel, batch: Batch | Tensor) -> DependencyMap:
    """Jacobian norms of every read-out row w.r.t. every input row, on ``batch`` (a few samples).

    Exact and cheap: the batch is copied once per output entry (``d²`` copies of ``B`` samples),
    the hook-free forward of ``model.variants`` runs once on all the copies and one backward pass
    of copy ``c``'s entry ``c`` gives row ``c`` of every sample's Jacobian; samples and copies do
    not interact, so nothing else reaches their gradients."""
    X = model.check_input(batch.X if isinstance(batch, Batch) else batch)  # (B, T, d)
    B, T, d = X.shape
    As = [block.attn.A.detach()[None] for block in model.blocks]
    W_U = model.unembed.W_U.detach()[None]
    copies = X.detach().repeat(d * d, 1, 1).requires_grad_()  # (d²·B, T, d)
    pick = torch.eye(d * d, dtype=X.dtype, device=X.device).repeat_interleave(B, 0).view(-1, d, d)
    with torch.enable_grad():
        out = forward_stacked(model.cfg, As, W_U, copies)[0]  # (d²·B, d, d)
        (grad,) = torch.autograd.grad((out * pick).sum(), copies)
    jac = grad.view(d, d, B, T, d)  # ∂ out[b, r, c] / ∂ X[b, t, j]
    norms = jac.pow(2).sum(dim=(1, 4)).sqrt().amax(dim=1)  # (n_readout, T)
    rows = model.cfg.readout_rows
    positions = list(range(rows.start, rows.stop))
    return DependencyMap(norms.detach(), tuple(positions), _later_is_zero(norms, positions))


def stream_dependency(model: DisentangledModel,
                      batch: Batch | Tensor) -> tuple[Tensor, ...]:
    """Per layer, ``(T, T)`` norms of ``∂ blocks.{l}.hook_resid_post[i] / ∂ X[j]`` (max over batch).

    Under a causal mask every entry above the diagonal is exactly zero (Lemma 1, layer by layer).
    """
    X = model.check_input(batch.X if isinstance(batch, Batch) else batch)  # (B, T, d)

    def streams(x: Tensor) -> tuple[Tensor, ...]:  # each (T, D_{l+1})
        return tuple(h.sum(0) for h in model.residual_streams(x, check_input=False)[1:])

    jacs = torch.func.jacrev(streams)(X)  # each (T, D_{l+1}, B, T, d)
    return tuple(j.pow(2).sum(dim=(1, 4)).sqrt().amax(dim=1).detach() for j in jacs)
