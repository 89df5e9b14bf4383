"""What stands in for a removed part of ``A`` under mean and resample ablation (``analysis.faithfulness``).

A variant that removes ``R`` from a layer's ``A`` gets, added to its scores, ``h R hᵀ`` computed on
the clean run's streams ``h`` of a reference batch: its mean over that batch (mean ablation,
``(H, T, T)``) or each sample's value on its own reference sample (resample ablation,
``(B, H, T, T)``). Computed as written, that is ``B·T·D·(D + T)`` per head and variant.

A circuit's removed part has structure: it is everything but its fit ``M``, a matrix nonzero on a
few cells, ``R = gauge_fix(A) − gauge_fix(M)``; the model less a circuit removes ``gauge_fix(M)``
(:class:`Removed`). ``gauge_fix(A)``'s stand-in is the same for every variant: computed once. And
``gauge_fix(M) = (1 − Π_null) M (1 − Π_key)``, so ``h gauge_fix(M) hᵀ = h_q M_QK h_kᵀ`` on ``M``'s
rows ``Q`` and columns ``K`` only, with ``h_q = h (1 − Π_null)`` and ``h_k = h (1 − Π_key)``; both
projectors have the rank of the stream's copies of ``h^0``, so they are applied through their
bases, never formed as ``(B, T, D)``. The result equals the dense sum up to rounding
(``tests/analysis/test_batched_circuits.py`` checks it against numpy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..stream import Stream
from .gauge import gauge_fix
from .projection import gauge_factors


@dataclass(frozen=True)
class Removed:
    """What a variant removed from each layer's ``A``: ``R_l = whole · gauge_fix(A_l) +
    gauge_fix(part_l)``, ``part_l (H, D, D)`` nonzero on a few cells (a circuit: ``whole=1``,
    ``part=−M``; the model less a circuit: ``whole=0``, ``part=M``)."""

    whole: float
    part: tuple[Tensor, ...]


class StandIn:
    """The stand-in terms of one reference: ``streams`` ``h^0 … h^{L-1}`` ``(B, T, D_l)`` float64
    (for resample ablation each sample's reference sample already paired), ``fixed`` each layer's
    ``gauge_fix(A)`` ``(H, D_l, D_l)``; ``per_sample``: resample ablation's terms, not the mean."""

    def __init__(self, stream: Stream, fixed: Sequence[Tensor], streams: Sequence[Tensor],
                 per_sample: bool):
        self.stream, self.fixed, self.streams = stream, fixed, list(streams)
        self.per_sample = per_sample
        self._whole: dict[int, Tensor] = {}  # per layer, gauge_fix(A)'s term, heads first
        self._gauge_rows: dict[int, tuple[Tensor, Tensor]] = {}  # per layer, h N and h G

    def __call__(self, removed: Removed | Sequence[Tensor]) -> list[Tensor]:
        """Per layer, the term standing in for ``removed`` (a :class:`Removed`, or per layer ``R
        (H, D, D)`` as it is): ``(H, T, T)``, or ``(B, H, T, T)`` per sample."""
        if not isinstance(removed, Removed):
            return [self.dense(h, R) for h, R in zip(self.streams, removed)]
        out = []
        for layer, (h, part) in enumerate(zip(self.streams, removed.part)):
            if few_cells(part, h.shape[1]):
                out.append(self.through_cells(layer, part, removed.whole))
            else:  # formed whole, as a plain R is
                R = gauge_fix(part, self.stream, layer)
                out.append(self.dense(h, removed.whole * self.fixed[layer] + R
                                      if removed.whole else R))
        return out

    def dense(self, h: Tensor, R: Tensor) -> Tensor:
        """``h R hᵀ`` for ``h (B, T, D)``, ``R (H, D, D)``, its batch mean ``(H, T, T)`` or per
        sample ``(B, H, T, T)``: ``(h R)`` first, then the contraction with ``h``."""
        hR = torch.einsum("btd,hde->bhte", h, R)
        if self.per_sample:
            return torch.einsum("bhte,bse->bhts", hR, h)
        return torch.einsum("bhte,bse->hts", hR, h) / len(h)

    def through_cells(self, layer: int, part: Tensor, whole: float) -> Tensor:
        """``whole`` times :meth:`whole`'s term plus ``gauge_fix(part)``'s, read through
        ``part``'s rows ``Q`` and columns ``K`` (module docstring): ``B·T·|K|·(|Q| + T)`` per
        head."""
        h = self.streams[layer]
        null, _, key = gauge_factors(self.stream, layer)  # (D, k - 1), _, (D, k)
        if layer not in self._gauge_rows:  # the rows' gauge coordinates (B, T, k - 1), (B, T, k)
            self._gauge_rows[layer] = h @ null, h @ key
        hn, hk = self._gauge_rows[layer]
        B, T = h.shape[:2]
        shape = (part.shape[0], B, T, T) if self.per_sample else (part.shape[0], T, T)
        out = whole * self.whole(layer) if whole else h.new_zeros(shape)  # heads first
        for head, P in enumerate(part):
            Q, K = ((P != 0).any(dim).nonzero().squeeze(1) for dim in (1, 0))
            if not len(Q):
                continue
            h_q = h[..., Q] - hn @ null[Q].T  # (B, T, |Q|)
            h_k = h[..., K] - hk @ key[K].T  # (B, T, |K|)
            a = h_q @ P[Q][:, K]  # (B, T, |K|)
            if self.per_sample:
                out[head].baddbmm_(a, h_k.transpose(1, 2))
            else:
                out[head] += torch.einsum("btk,bsk->ts", a, h_k) / B
        return out.transpose(0, 1) if self.per_sample else out  # (B, H, T, T) or (H, T, T)

    def whole(self, layer: int) -> Tensor:
        """``gauge_fix(A)``'s term at ``layer``, heads first (``(H, T, T)`` or ``(H, B, T, T)``),
        computed once."""
        if layer not in self._whole:
            found = self.dense(self.streams[layer], self.fixed[layer])
            self._whole[layer] = found.transpose(0, 1).contiguous() if self.per_sample else found
        return self._whole[layer]


def few_cells(part: Tensor, T: int) -> bool:
    """Whether ``part (H, D, D)``'s cells are few enough that :meth:`StandIn.through_cells` costs
    less than the dense sum: its products ``|K|·(|Q| + T)`` per head, with a margin for the picking
    of rows and columns it does, under a quarter of ``D·(D + T)``."""
    D, nonzero = part.shape[-1], part != 0
    cost = sum(int(n.any(0).sum()) * (int(n.any(1).sum()) + T) for n in nonzero)
    return 4 * cost < part.shape[0] * D * (D + T)
