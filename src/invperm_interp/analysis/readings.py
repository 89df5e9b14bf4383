"""What each cell of a construction reads of the input: the hypothesis causal scrubbing tests.

A causal-scrubbing hypothesis (Chan et al. 2022) is a circuit *and* what each of its paths computes:
the path may be fed from any input that agrees with the sample on that. In this model the paths
into a head are its score terms ``h_q K h_kᵀ``, one per (query block, key block) cell, and the input
is a permutation ``P`` and a target ``Y`` (``X = [P; P Y]``, scratch rows constant). So what a cell
reads is one of :data:`READS`:

- ``"nothing"``: its term is the same on every input (a positional lookup of layer 1);
- ``"P"`` or ``"Y"``: the same on every input with that sample's ``P`` (or ``Y``);
- ``"P and Y"``: it changes with both (a cell reading the content of ``Y_P`` rows).

It is **derived from the construction, not fixed**: :func:`construction_readings` builds the
construction exactly (float64, at its default β, at the model's ``d`` and scratch vector) and
compares each cell's term (its weights gauge-fixed, as a circuit holds them, ``analysis.gauge``),
per (query segment, key segment) of the rows at the positions the mask lets through, on a batch
and on partners that keep its ``P`` (another ``Y``) or its ``Y`` (another ``P``). A term equal on both
partners is equal on every input (change ``Y``, then ``P``), so it reads nothing; equal on the
``P``-keeping one only, it reads ``P``; and so on. A later layer's cell reads what the rows attended
before it carry, so the recursion through earlier layers is in the derivation: a layer-2 lookup by
``L1.pos.P`` reads ``P`` because layer 1 attends by ``P``.

:func:`placed_readings` carries them to a placement's cells, which ``analysis.scrub`` feeds each
from a partner of its own class (:data:`PARTNER`).
"""

from __future__ import annotations

import functools

import torch

from ..config import ModelConfig
from ..maths import constructions, registry
from ..maths.placement import Placement
from ..task import Batch, make_input, sample_batch
from .gauge import gauge_fix

#: What a partner input keeps of its sample: ``"P"`` the permutation (another sample's ``Y``),
#: ``"Y"`` the target (another sample's ``P``), ``"any"`` neither (plain resample ablation).
EQUIVALENCES = {"P": "the same P, another Y", "Y": "the same Y, another P",
                "any": "another input"}
#: What a cell's score term can depend on, from least to most.
READS = ("nothing", "P", "Y", "P and Y")
#: The partner a term that reads each class is fed from under scrubbing: what it keeps of the
#: sample (:data:`EQUIVALENCES`; ``"all"``: the sample itself).
PARTNER = {"nothing": "any", "P": "P", "Y": "Y", "P and Y": "all"}
#: Samples the derivation compares on, and the relative size of a term change it counts.
SAMPLES = 64
TOLERANCE = 1e-9

Site = tuple[int, int, str, str]


def join(a: str, b: str) -> str:
    """What two terms read together (a placed cell that two construction cells land on)."""
    keeps = {"nothing": set(), "P": {"P"}, "Y": {"Y"}, "P and Y": {"P", "Y"}}
    both = keeps[a] | keeps[b]
    return next(r for r in READS if keeps[r] == both)


def partner_input(batch: Batch, keep: str = "P", shift: int = 1) -> Batch:
    """Sample ``b``'s partner: what ``keep`` names taken from sample ``b``, the rest from sample
    ``(b + shift) mod B`` (:data:`EQUIVALENCES`). ``Y_P = P Y`` is rebuilt, so the partner is a
    valid input of the same layout."""
    if keep not in EQUIVALENCES:
        raise ValueError(f"keep must be one of {tuple(EQUIVALENCES)}, got {keep!r}")
    if not isinstance(shift, int) or isinstance(shift, bool) or shift % len(batch) == 0:
        raise ValueError(f"shift must be an integer that is not a multiple of the batch size "
                         f"{len(batch)} (a partner must be another sample), got {shift!r}")
    other = lambda t: t.roll(-shift, 0)  # noqa: E731 - sample b takes sample b + shift's
    P = batch.P if keep == "P" else other(batch.P)
    Y = batch.Y if keep == "Y" else other(batch.Y)
    out = make_input(batch.layout, P, P @ Y, binary=False)
    return out.to(batch.X.device, batch.X.dtype)


#: Per cell, what its term reads at each (query segment, key segment) of the input's rows.
Reading = dict[tuple[str, str], str]


@functools.lru_cache(maxsize=64)
def _readings(name: str, d: int, scratch: tuple[float, ...] | None) -> tuple:
    spec = registry.get(name)
    model = constructions.build(spec, d, dtype=torch.float64, scratch=scratch, hooked=False)
    layout = model.cfg.layout
    batch = sample_batch(layout, SAMPLES, torch.Generator().manual_seed(0), dtype=torch.float64)
    inputs = {"sample": batch.X, **{keep: partner_input(batch, keep).X for keep in ("P", "Y")}}
    with torch.no_grad():
        streams = {k: model.residual_streams(X, check_input=False, last=model.cfg.n_layers - 1)
                   for k, X in inputs.items()}
    T = layout.T
    allowed = torch.ones(T, T).tril().bool() if model.cfg.attention_dir == "causal" else \
        torch.ones(T, T, dtype=torch.bool)
    out = []
    for cell in dict.fromkeys(c.site for c in spec.cells):
        layer, head, query, key = cell
        A = model.blocks[layer].attn.A[head].detach()
        part = torch.zeros_like(A)
        part[model.stream.slice(query, layer), model.stream.slice(key, layer)] = \
            A[model.stream.slice(query, layer), model.stream.slice(key, layer)]
        fixed = gauge_fix(part, model.stream, layer)  # the cell as a circuit holds it
        terms = {which: h[layer] @ fixed @ h[layer].transpose(1, 2)
                 for which, h in streams.items()}  # (B, T, T)
        scale = float(terms["sample"][:, allowed].abs().max()) or 1.0
        pairs = []
        for qs in layout.names:
            for ks in layout.names:
                where = torch.zeros(T, T, dtype=torch.bool)
                where[layout.rows(qs), layout.rows(ks)] = True
                where &= allowed
                if not where.any():
                    continue
                base = terms["sample"][:, where]
                same = {keep: float((terms[keep][:, where] - base).abs().max()) <= TOLERANCE * scale
                        for keep in ("P", "Y")}
                reads = ("nothing" if same["P"] and same["Y"] else "P" if same["P"] else
                         "Y" if same["Y"] else "P and Y")
                pairs.append(((qs, ks), reads))
        out.append((cell, tuple(pairs)))
    return tuple(out)


def construction_readings(name: str, cfg: ModelConfig) -> dict[Site, Reading]:
    """Per (layer, head, query block, key block) cell of registry construction ``name``, what its
    score term reads (:data:`READS`) at each (query segment, key segment) of the rows (those the
    mask lets through), derived on the construction built at ``cfg``'s ``d`` and scratch vector
    (module docstring)."""
    scratch = cfg.layout.scratch_vector
    key = tuple(float(v) for v in scratch) if scratch else None
    return {site: dict(pairs) for site, pairs in _readings(registry.get(name).name, cfg.d, key)}


def cell_reads(reading: Reading) -> str:
    """What a cell reads anywhere: its segments' readings joined."""
    out = "nothing"
    for reads in reading.values():
        out = join(out, reads)
    return out


def placed_readings(placement: Placement, cfg: ModelConfig) -> tuple[tuple[Site, Reading], ...]:
    """The readings of ``placement``'s construction carried to its placed cells on a model of
    ``cfg`` (a placed cell that several construction cells land on reads, per segment pair, what
    they read together)."""
    own = construction_readings(placement.construction, cfg)
    out: dict[Site, Reading] = {}
    for cell in placement.spec.cells:
        for placed, _ in placement.place_cells([cell]):
            have = out.setdefault(placed.site, {})
            for pair, reads in own[cell.site].items():
                have[pair] = join(have.get(pair, "nothing"), reads)
    return tuple(out.items())


__all__ = ["EQUIVALENCES", "PARTNER", "READS", "Reading", "cell_reads", "construction_readings", "join",
           "partner_input", "placed_readings"]
