"""Which placed constructions the mechanism rule tests on a model of any depth and width.

A registry construction is a circuit on its own layers and heads (:mod:`maths.placement`: two
layers of one head for the note's forms); on a model with ``L`` layers and ``H_l`` heads it can sit
on any increasing layers, each of its heads on a head of the model's layer (a one-head layer also on
the sum of the layer's heads). Testing every placement by running it would cost a faithfulness test
per placement; the rule tests only those where the model's weights are: each placement is scored by
the share of each of its layers' gauge-fixed norm² (all heads) that its cells hold, averaged over
its layers (equal to ``SHARE_TOLERANCE``: the one on fewer heads first), and per construction the
``KEEP_SINGLE`` best placements on single heads and the ``KEEP_SUM`` best with a sum of heads are
tested (on a model of the construction's own shape: the one placement, as registered).

A model no construction can fit (one layer; no construction with its layout, attention or
read-out rows; a ``d`` below every fitting construction's ``min_d``) gets a reason instead of
an empty list: :func:`untested_reason`.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from ..config import ModelConfig
from ..maths import registry
from ..maths.placement import SUM, Placement, placements
from ..model.disentangled import DisentangledModel
from .hypothesis import Hypothesis

#: Per construction, the one-head placements and the sum-of-heads placements tested.
KEEP_SINGLE = 2
KEEP_SUM = 1
#: Shares closer than this rank as equal (then the placement on fewer heads first).
SHARE_TOLERANCE = 0.01


def fitting_names(cfg: ModelConfig, *, working: bool = False) -> list[str]:
    """Registry constructions with the model's layout, attention direction and read-out rows that
    can be built at its ``d`` (from ``min_d``), whatever its depth and width; ``working``: only
    those that solve the task (not the note's printed forms)."""
    out = []
    for name, spec in registry.REGISTRY.items():
        if working and not spec.works:
            continue
        if spec.attention_dir != cfg.attention_dir or spec.readout != cfg.readout or cfg.d < spec.min_d:
            continue
        try:
            layout = spec.make_layout(cfg.d, cfg.layout.scratch_vector or None)
        except ValueError:
            continue
        if layout == cfg.layout:
            out.append(name)
    return out


def untested_reason(cfg: ModelConfig) -> str | None:
    """One line saying why no construction is tried on a model of ``cfg``, or ``None`` when some
    placement of a working construction fits it."""
    if cfg.n_layers < 2:
        return (f"no construction was tried: the model has {cfg.n_layers} layer and every registry "
                f"construction needs two (one that copies, one that looks up)")
    names = fitting_names(cfg, working=True)
    if any(fits(name, cfg.heads) for name in names):
        return None
    if names:
        return (f"no construction was tried: every one that fits the model's layout "
                f"({', '.join(names)}) needs more layers or heads than its {list(cfg.heads)}")
    same = [s for s in registry.REGISTRY.values() if s.works and s.attention_dir == cfg.attention_dir
            and s.readout == cfg.readout]
    if same and all(cfg.d < s.min_d for s in same):
        return (f"no construction was tried: those that read the {cfg.readout} rows of a "
                f"{cfg.attention_dir} model work from d = {min(s.min_d for s in same)}, the model "
                f"has d = {cfg.d}")
    return (f"no construction was tried: none of the registry is {cfg.attention_dir} on the "
            f"model's layout ({', '.join(cfg.layout.names)}) reading its {cfg.readout} rows")


def fits(name: str, shape: tuple[int, ...]) -> bool:
    """Whether a model of ``shape`` (heads per layer) has room for construction ``name``: as many
    layers, and for each of its layers in order a model layer with as many heads."""
    own, shape = registry.get(name).heads, list(shape)
    for need in own:  # greedily, the first model layer wide enough
        while shape and shape[0] < need:
            shape.pop(0)
        if not shape:
            return False
        shape.pop(0)
    return True


def hypothesis(model: DisentangledModel, placement: Placement) -> Hypothesis:
    """The placed construction as a claim about ``model``: its placed cells (their whole content,
    ``unit="cells"``) and the placed read-out blocks, labelled ``str(placement)``, the placement
    kept as a value."""
    cells = tuple(dict.fromkeys(cell for cell, _ in placement.cells))
    read = tuple(dict.fromkeys(block for block, _ in placement.read_terms))
    return Hypothesis(str(placement), cells, read, "cells", placement)


def weight_share(placement: Placement, fixed: Sequence[Tensor], stream) -> float:
    """The share of each of the placement's layers' gauge-fixed norm² (every head) that its cells
    hold, averaged over them; ``fixed``: per layer ``gauge_fix(A)`` ``(H, D, D)``."""
    shares = []
    for layer in placement.layers:
        F = fixed[layer]
        total = float(F.pow(2).sum())
        held = sum(float(F[head, stream.slice(q, layer), stream.slice(k, layer)].pow(2).sum())
                   for head, q, k in {(c.head, c.query, c.key) for c, _ in placement.cells
                                      if c.layer == layer})
        shares.append(held / total if total > 0 else 0.0)
    return sum(shares) / len(shares)


def candidate_placements(model: DisentangledModel, fixed: Sequence[Tensor],
                         names: Sequence[str] | None = None) -> list[Placement]:
    """Per working fitting construction (or ``names``), its best-weighted one-head and
    sum-of-heads placements (``KEEP_SINGLE``, ``KEEP_SUM``), best first; construction order kept."""
    if untested_reason(model.cfg) is not None:
        return []
    out = []
    for name in fitting_names(model.cfg, working=True) if names is None else names:
        if fits(name, model.cfg.heads):
            out += best_placements(name, model, fixed)
    return out


def best_placements(construction: str | registry.ConstructionSpec, model: DisentangledModel,
                    fixed: Sequence[Tensor]) -> list[Placement]:
    """A construction's (a registry name, or an unregistered spec) ``KEEP_SINGLE`` best-weighted
    one-head placements and ``KEEP_SUM`` sum-of-heads ones on ``model``, best first."""
    found = placements(construction, model.cfg.heads)
    share = {p: weight_share(p, fixed, model.stream) for p in found}
    # to SHARE_TOLERANCE, the fewest heads first (a sum that adds an idle head adds nothing)
    best = sorted(found, key=lambda p: (-round(share[p] / SHARE_TOLERANCE), heads_used(p)))
    return [p for p in best if not p.summed][:KEEP_SINGLE] + [p for p in best if p.summed][:KEEP_SUM]


def heads_used(placement: Placement) -> int:
    """How many model heads the placement's cells sit on."""
    return sum(len(placement.head_list(index)) for index in range(len(placement.layers)))


__all__ = ["KEEP_SINGLE", "KEEP_SUM", "SUM", "best_placements", "candidate_placements", "fits",
           "fitting_names", "hypothesis", "untested_reason", "weight_share"]
