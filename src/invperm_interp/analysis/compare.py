"""Learned against analytic: are two models the same circuit, and which construction is a model?

Two readings side by side (docs/design.md section 4): the **weights**, cell by cell on the gauge-fixed
``A`` (only when both models share a stream layout), and the **function**: attention patterns,
outputs and MSE on the same batch. :func:`closest_construction` ranks the registry's constructions
that fit a model's layout, mask and read-out by how far their attention patterns are from the
model's, each at the β that brings it closest; on a model of another shape than a construction's
own, at its best-weighted placement (``analysis.placements``), compared on the placed heads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..maths import constructions
from ..maths.placement import Placement, placed_weights
from ..model.disentangled import DisentangledModel, check_disentangled
from ..model.variants import forward_many, model_patterns
from ..task import Batch, mse
from .gauge import gauge_fix
from .placements import candidate_placements, fits, fitting_names
from .projection import fixed_weights
from .templates import Circuit, explain

#: β values tried when matching a construction to a model (its patterns sharpen as β grows).
BETAS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)


@dataclass(frozen=True)
class CellSimilarity:
    """Cosine between the two models' gauge-fixed cells (1: equal up to a positive scale)."""

    layer: int
    head: int
    query: str
    key: str
    cosine: float
    norm_share_a: float  # the cell's share of model a's ||gauge_fix(A)||² (this layer and head)
    norm_share_b: float


@dataclass(frozen=True)
class HeadComparison:
    """One (layer, head): gauge-fixed and raw weight cosines (``None`` when the streams differ) and
    the mean total-variation distance between the attention patterns, over all query rows and
    over the read-out rows only (0: identical, 1: disjoint)."""

    layer: int
    head: int
    weight_cosine: float | None
    raw_cosine: float | None
    pattern_tv: float
    readout_tv: float


@dataclass(frozen=True)
class ConstructionMatch:
    """A registry construction at the β closest to a model, by attention patterns."""

    name: str  # the construction, or its placement's label beyond its own shape
    works: bool
    beta: float
    pattern_tv: float  # mean over its layers (placed heads) of the mean total-variation distance
    weight_cosine: float  # mean over its layers (placed heads) of the gauge-fixed weight cosine
    circuit_overlap: float  # Jaccard index of the explained cells (layer, query, key, label)
    cells_found: float  # share of the construction's cells among the model's atoms
    norm_share: float  # share of the model's gauge-fixed weights its cells carry (Circuit.norm_share)


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` measures. ``same_stream``: the weights could be compared cell by cell."""

    same_stream: bool
    heads: tuple[HeadComparison, ...]
    cells: tuple[CellSimilarity, ...]  # cells holding at least 1e-6 of either model's norm
    max_abs_diff: float  # largest |out_a - out_b|
    rounded_agreement: float  # fraction of output entries with equal rounding to {0, 1}
    mse_a: float
    mse_b: float
    closest_a: str | None  # the best ConstructionMatch of each model (None: not asked or none fits)
    closest_b: str | None

    @property
    def identical(self) -> bool:
        """Same function on the batch and, where comparable, the same gauge-fixed weights."""
        weights = all(h.weight_cosine is None or h.weight_cosine > 1 - 1e-9 for h in self.heads)
        return weights and self.max_abs_diff < 1e-9 and all(h.pattern_tv < 1e-9 for h in self.heads)

    def to_dict(self) -> dict:
        return {
            "same_stream": self.same_stream,
            "heads": [h.__dict__ for h in self.heads],
            "cells": [c.__dict__ for c in self.cells],
            "max_abs_diff": self.max_abs_diff, "rounded_agreement": self.rounded_agreement,
            "mse_a": self.mse_a, "mse_b": self.mse_b,
            "closest_a": self.closest_a, "closest_b": self.closest_b,
        }


def _patterns(model: DisentangledModel, X: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Output and per-layer patterns ``(B, H, T, T)`` in float64 (a plain forward)."""
    out, pats = model_patterns(model, X)
    return out.double().cpu(), [p.double().cpu() for p in pats]


def _tv(p: Tensor, q: Tensor) -> Tensor:
    """Total-variation distance per query row: ``(..., T, T) → (..., T)``."""
    return 0.5 * (p - q).abs().sum(-1)


def _signed_cosine(a: Tensor, b: Tensor) -> float:
    """``cos(a, b)`` in ``[-1, 1]``, the sign kept (opposite weights are not alike); 1 when both
    are zero (two empty cells agree), 0 when only one is."""
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 and nb == 0.0:
        return 1.0
    return float((a * b).sum()) / (na * nb) if na > 0 and nb > 0 else 0.0


def _same_stream(a: DisentangledModel, b: DisentangledModel) -> bool:
    return a.cfg.layout == b.cfg.layout and a.cfg.heads == b.cfg.heads


def _fixed(model: DisentangledModel, layer: int) -> Tensor:
    """``gauge_fix(A)`` of every head of a layer, ``(H, D, D)`` float64."""
    A = model.blocks[layer].attn.A.detach().to("cpu", torch.float64)
    return gauge_fix(A, model.stream, layer)


def _check_pair(model_a, model_b, batch) -> Tensor:
    for name, m in (("model_a", model_a), ("model_b", model_b)):
        check_disentangled(m, name)
    if model_a.cfg.layout != model_b.cfg.layout:
        raise ValueError(f"the models must read the same layout to be compared on one batch, got "
                         f"{model_a.cfg.layout} and {model_b.cfg.layout}")
    if not isinstance(batch, Batch):
        raise ValueError(f"batch must be a Batch, got {type(batch).__name__}")
    if batch.layout != model_a.cfg.layout:
        raise ValueError(f"batch layout {batch.layout} differs from the models' {model_a.cfg.layout}")
    return batch.X


def compare(model_a: DisentangledModel, model_b: DisentangledModel,
            batch: Batch, *, closest: bool = True) -> Comparison:
    """Weight similarity (gauge-fixed, per layer, head and cell), functional similarity (pattern
    distance per layer, output agreement, each model's MSE) and, with ``closest``, the registry
    construction each model is closest to."""
    X = _check_pair(model_a, model_b, batch)
    out_a, pats_a = _patterns(model_a, X)
    out_b, pats_b = _patterns(model_b, X)
    same = _same_stream(model_a, model_b)
    rows, rows_b = model_a.cfg.readout_rows, model_b.cfg.readout_rows
    heads, cells = [], []
    for layer in range(min(model_a.cfg.n_layers, model_b.cfg.n_layers)):
        fixed_a = _fixed(model_a, layer) if same else None
        fixed_b = _fixed(model_b, layer) if same else None
        raw_a = model_a.blocks[layer].attn.A.detach().to("cpu", torch.float64)
        raw_b = model_b.blocks[layer].attn.A.detach().to("cpu", torch.float64)
        for head in range(min(model_a.cfg.heads[layer], model_b.cfg.heads[layer])):
            tv = _tv(pats_a[layer][:, head], pats_b[layer][:, head])  # (B, T)
            read = torch.cat([tv[:, rows], tv[:, rows_b]], dim=1) if rows != rows_b else tv[:, rows]
            heads.append(HeadComparison(
                layer, head,
                _signed_cosine(fixed_a[head], fixed_b[head]) if same else None,
                _signed_cosine(raw_a[head], raw_b[head]) if same else None,
                float(tv.mean()), float(read.mean())))
            if same:
                cells += _cell_similarity(model_a, layer, head, fixed_a[head], fixed_b[head])
    pred_a, pred_b = out_a.round(), out_b.round()
    return Comparison(
        same_stream=same, heads=tuple(heads), cells=tuple(cells),
        max_abs_diff=float((out_a - out_b).abs().max()),
        rounded_agreement=float((pred_a == pred_b).double().mean()),
        mse_a=float(mse(out_a, batch.Y)), mse_b=float(mse(out_b, batch.Y)),
        closest_a=_best_name(model_a, batch) if closest else None,
        closest_b=_best_name(model_b, batch) if closest else None,
    )


def _cell_similarity(model, layer: int, head: int, fa: Tensor, fb: Tensor) -> list[CellSimilarity]:
    total_a, total_b = float(fa.pow(2).sum()) or 1.0, float(fb.pow(2).sum()) or 1.0
    out = []
    for (q, k), ca in model.stream.split(fa, layer).items():
        cb = fb[model.stream.slice(q, layer), model.stream.slice(k, layer)]
        share_a, share_b = float(ca.pow(2).sum()) / total_a, float(cb.pow(2).sum()) / total_b
        if max(share_a, share_b) >= 1e-6:
            out.append(CellSimilarity(layer, head, q, k, _signed_cosine(ca, cb), share_a, share_b))
    return out


def _best_name(model: DisentangledModel, batch: Batch) -> str | None:
    ranked = closest_construction(model, batch)
    return ranked[0].name if ranked else None


def candidates(model: DisentangledModel, fixed: Sequence[Tensor] | None = None) -> list[Placement]:
    """Registry constructions (the printed forms too) with the model's layout, attention direction
    and read-out that can be built at its ``d`` (from ``min_d``) and fit its layers and heads: on
    the model's own shape as registered, else at the placement whose cells hold the largest share
    of the model's gauge-fixed weights (``fixed``: per layer ``gauge_fix(A)``, computed if not
    given)."""
    shape, out = model.cfg.heads, []
    for name in fitting_names(model.cfg):
        if not fits(name, shape):
            continue
        own = Placement.own(name)
        if own.shape == shape:
            out.append(own)
            continue
        if fixed is None:
            fixed = fixed_weights(model)
        out += candidate_placements(model, fixed, [name])[:1]
    return out


def closest_construction(model: DisentangledModel, batch: Batch,
                         betas: tuple[float, ...] = BETAS, max_samples: int = 128, *,
                         circuit: Circuit | None = None,
                         fixed: Sequence[Tensor] | None = None) -> tuple[ConstructionMatch, ...]:
    """Constructions fitting ``model`` (see :func:`candidates`), closest first by attention patterns.

    Each is built at every β in ``betas`` and kept at the one with the least pattern distance on
    the first ``max_samples`` samples of ``batch``; the gauge-fixed weight cosine and the overlap of
    the explained circuits (both β-free) are reported with it, and break ties. The constructions
    run as variants of one batched forward (``model.variants``), no model built for each.
    ``circuit``, ``fixed``: the model's ``explain`` and per-layer ``gauge_fix(A)``, when already
    computed.
    """
    _check_pair(model, model, batch)
    fixed = fixed if fixed is not None else fixed_weights(model)
    found = candidates(model, fixed)
    if not found:
        return ()
    X = batch.X[:max_samples]
    own = ([b.attn.A.detach() for b in model.blocks], model.unembed.W_U.detach())
    (_, pats), = forward_many(model.cfg, [own], X, patterns=True)
    pats = [p.double().cpu() for p in pats]
    circuit = circuit if circuit is not None else explain(model)
    scratch = model.cfg.layout.scratch_vector or None
    matches = []
    for placed in found:
        if not placed.trivial:
            matches.append(_placed_match(model, placed, pats, fixed, circuit, betas, X))
            continue
        name = placed.construction
        spec = constructions.REGISTRY[name]
        # every cell is β times its template: built once at β = 1 and scaled
        cfg, unit, W_U = constructions.weights(name, model.cfg.d, 1.0, scratch=scratch)
        built = [[beta * A for A in unit] for beta in betas]
        runs = forward_many(cfg, [(As, W_U) for As in built], X, patterns=True,
                            dtype=model.cfg.torch_dtype)
        best_tv, best = float("inf"), 0
        for i, (_, cpats) in enumerate(runs):
            tv = sum(float(_tv(p, c.double().cpu()).mean()) for p, c in zip(pats, cpats)) / len(pats)
            if tv < best_tv:
                best_tv, best = tv, i
        As = built[best]
        cos = sum(_signed_cosine(f, gauge_fix(As[layer], model.stream, layer))
                  for layer, f in enumerate(fixed)) / len(fixed)
        matches.append(ConstructionMatch(name, spec.works, betas[best], best_tv, cos,
                                         circuit.overlap(spec.cells), circuit.recall(spec.cells),
                                         circuit.norm_share(spec.cells)))
    return tuple(sorted(matches, key=lambda m: (round(m.pattern_tv, 9), -m.weight_cosine)))


def _placed_match(model: DisentangledModel, placed: Placement, pats: list[Tensor],
                  fixed: Sequence[Tensor], circuit: Circuit, betas: tuple[float, ...],
                  X: Tensor) -> ConstructionMatch:
    """:func:`closest_construction`'s match of a construction at a placement: patterns and
    gauge-fixed weights compared on the placed heads only (the others, zero in the placed weights,
    attend uniformly there, which says nothing of the model's)."""
    scratch = model.cfg.layout.scratch_vector or None
    cfg, unit, W_U = placed_weights(placed, model.cfg.d, 1.0, scratch=scratch)
    units = sorted({(cell.layer, cell.head) for cell, _ in placed.cells})
    built = [[beta * A for A in unit] for beta in betas]
    runs = forward_many(cfg, [(As, W_U) for As in built], X, patterns=True, dtype=model.cfg.torch_dtype)
    best_tv, best = float("inf"), 0
    for i, (_, cpats) in enumerate(runs):
        tv = sum(float(_tv(pats[layer][:, head], cpats[layer][:, head].double().cpu()).mean())
                 for layer, head in units) / len(units)
        if tv < best_tv:
            best_tv, best = tv, i
    As = built[best]
    cos = sum(_signed_cosine(fixed[layer][head], gauge_fix(As[layer], model.stream, layer)[head])
              for layer, head in units) / len(units)
    cells = [cell for cell, _ in placed.cells]
    return ConstructionMatch(str(placed), placed.spec.works, betas[best], best_tv, cos,
                             circuit.overlap(cells), circuit.recall(cells), circuit.norm_share(cells))
