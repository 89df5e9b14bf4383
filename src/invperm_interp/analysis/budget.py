"""The analysis's memory estimate from the model itself: what its searches will hold depends on
the weights, not only on the configuration (``memory.analysis_estimate`` adds it up).

A model whose atoms occupy no cell (one at initialisation, typically) is never searched: only the
placed constructions are tested, a few circuit variants each, on a few cells of the stream. A model
with candidate cells is (``analysis.minimal``): ``faithfulness.CIRCUITS_HELD`` variants at once
(one per cell and one more beyond ``MAX_EXACT_CELLS`` cells, where only the greedy search runs),
the tester and those it hands the search (``Tester.head``) sharing one cache of
``fit_cache.fits_kept_bytes`` of fits, alive for the whole analysis. The gauge factors the fits use are
made here, before the check, so they are not counted again. The largest single fit is the one on
every candidate cell of a head: its ``|S|`` entries against the ``r`` gauge directions they see
(``projection._fit_cells``).
"""

from __future__ import annotations

import inspect

import torch

from .. import memory
from ..maths.placement import placed_weights
from ..memory import Estimate
from ..model.disentangled import DisentangledModel
from ..model.variants import kept_widths
from .compare import BETAS, candidates, closest_construction
from .faithfulness import CIRCUITS_HELD
from .fit_cache import fits_kept_bytes
from .mechanism import SCREEN_SAMPLES
from .minimal import MAX_EXACT_CELLS, candidate_cells
from .placements import candidate_placements, hypothesis
from .projection import fixed_weights, gauge_factors
from .templates import Circuit, explain

#: Samples ``compare.closest_construction`` runs its constructions on (its default).
COMPARED_SAMPLES = inspect.signature(closest_construction).parameters["max_samples"].default

#: float64 ``|S| × |S|`` matrices alive at once in a cells fit of ``|S|`` entries fewer than the
#: ``r`` gauge directions they see: the Gram matrix and its factors, the pseudo-inverse's input,
#: workspace and result (measured: 8.4 at ``|S|`` = 1,152; more where the allocator cannot reuse
#: them) …
FIT_MATRICES = 12
#: … and with ``|S| ≥ r``, ``(|S|, r)`` basis rows (the basis and its query-null part as formed)
#: and ``r × r`` matrices (measured 9.0 GiB against 12.4 estimated for every cell but one of a
#: third-layer head of a 3 × 2 model at d = 10: ``|S|`` = 129,500, ``r`` = 6,120).
FIT_ROWS, FIT_SQUARES = 2, 2


def fit_bytes(model: DisentangledModel, cells) -> int:
    """Peak bytes of the largest per-head cells fit of ``cells`` (``(layer, head, query, key, …)``,
    ``projection._fit_cells``: ``|S|`` entries against ``r = u·n_k + v·n_q`` gauge directions,
    ``n_q`` and ``n_k`` the query and key features the cells cover, the columns of
    ``projection._gauge_rows``)."""
    sites: dict[tuple[int, int], set] = {}
    for layer, head, query, key, *_ in cells:
        sites.setdefault((layer, head), set()).add((query, key))
    worst = 0
    for (layer, _), pairs in sites.items():
        width = {name: model.stream.block(name, layer).width for pair in pairs for name in pair}
        n = sum(width[q] * width[k] for q, k in pairs)
        U, _, V = gauge_factors(model.stream, layer)
        r = (U.shape[1] * sum(width[k] for k in {k for _, k in pairs})
             + V.shape[1] * sum(width[q] for q in {q for q, _ in pairs}))
        worst = max(worst, 8 * (FIT_MATRICES * n * n if n < r else FIT_ROWS * n * r
                                + FIT_SQUARES * r * r))
    return worst


def analysis_estimate(model: DisentangledModel, n: int,
                      circuit: Circuit | None = None) -> Estimate:
    """``invperm analyze``'s peak on ``n`` samples of ``model`` (``circuit``: its ``explain``,
    computed here when not given)."""
    circuit = circuit if circuit is not None else explain(model)
    cfg, cells = model.cfg, candidate_cells(circuit)
    with torch.no_grad():
        fixed = fixed_weights(model)
        hyps = [hypothesis(model, p) for p in candidate_placements(model, fixed)]
    # on two layers of one head every placement runs its circuit, the model less it and its
    # per-cell runs in groups of CIRCUITS_HELD; beyond, its circuit alone in such groups, then the
    # model less the circuit of those that pass or lead, all of them at once at most
    every = cfg.heads == (1, 1)
    tests = min(CIRCUITS_HELD, sum(2 + len(h) for h in hyps)) if every else len(hyps)
    per_fit = 2 * 8 * max(D * D for D in cfg.widths[:-1])  # one head's (M, gauge_fix(M))
    if cells:  # the exact search scores sets in chunks; beyond its size, each cell left out once
        exact = len(cells) <= MAX_EXACT_CELLS
        circuits = max(CIRCUITS_HELD if exact else min(CIRCUITS_HELD, len(cells) + 1), tests)
        # one cache: the search's testers share it (Tester.head); beyond SCREEN_SAMPLES the
        # mechanism searches on a screen tester of its own, beside the whole batch's
        kept = (1 if n <= SCREEN_SAMPLES else 2) * fits_kept_bytes(cfg)
    else:
        circuits = tests
        kept = min(fits_kept_bytes(cfg), sum(len({c[:2] for c in h.cells}) for h in hyps) * per_fit)
    largest = max([fit_bytes(model, cells), *(fit_bytes(model, h.cells) for h in hyps)])
    for layer in range(cfg.n_layers):  # the fits' gauge factors, now made (and cached) once
        gauge_factors(model.stream, layer)
    return memory.analysis_estimate(cfg, n, circuits=max(circuits, 1), fits=largest, kept=kept,
                                    dense=bool(cells), gauge=False, compared=compared_bytes(model, fixed))


def compared_bytes(model: DisentangledModel, fixed=None) -> tuple[int, int]:
    """``(activations, held)`` of ``compare.closest_construction``: every registry construction
    fitting the model, built at each of ``BETAS`` and run on ``COMPARED_SAMPLES`` samples as
    chunks of variants with their attention patterns; each construction's runs hold every β's
    patterns ``(b, H_l, T, T)`` per layer (and the model's own) and its float64 weights. ``fixed``:
    per layer ``gauge_fix(A)``, when already made (it picks the placements beyond a construction's
    own shape)."""
    found, cfg = candidates(model, fixed), model.cfg
    if not found:
        return 0, 0
    b, betas = COMPARED_SAMPLES, len(BETAS)
    if all(p.trivial for p in found):
        activations = memory.forward_bytes(cfg, b * min(betas, memory.chunk_variants(cfg, b)))
    else:  # placed in a larger model: only the columns the placed heads read are formed
        scratch = cfg.layout.scratch_vector or None
        activations = max(kept_variant_bytes(cfg, b, betas, kept_widths(
            cfg, *placed_weights(p, cfg.d, 1.0, scratch=scratch)[1:], patterns=True)) for p in found)
    patterns = (betas + 1) * b * sum(H * cfg.T * cfg.T for H in cfg.heads) * memory.elem(cfg)
    weights = betas * 8 * (sum(D * D for D in cfg.widths[:-1]) + cfg.widths[-1] * cfg.d)
    return activations, patterns + weights


def kept_variant_bytes(cfg: memory.ModelConfig, n: int, variants: int, kept: list[int]) -> int:
    """``memory.variant_bytes`` of variants that compute only ``kept`` columns of each stream
    ``h^0..h^L`` (``model.variants.kept_widths``: a placed construction's zero heads read nothing),
    every head's pattern formed."""
    b, e, T, peak = n * min(variants, memory.chunk_variants(cfg, n)), memory.elem(cfg), cfg.T, 0
    last = len(cfg.heads) - 1
    for layer, H in enumerate(cfg.heads):
        R = cfg.layout.segment(cfg.readout).n_rows if layer == last else T
        D, nxt = kept[layer], 2 * b * R * kept[layer + 1]
        peak = max(peak, b * T * D + nxt + 3 * b * R * D + 2 * b * T * D + 2 * b * H * R * T)
    return peak * e
