"""Which placed constructions the mechanism rule tests on a model of any depth and width.

A registry construction is a circuit on two layers of one head (:mod:`maths.placement`); on a
model with ``L`` layers and ``H_l`` heads it can sit on every pair of layers ``l1 < l2``, on one
head of each or on the sum of a layer's heads. Testing every placement by running it would cost
``O(L² H²)`` faithfulness tests per construction; the rule tests only those where the model's
weights are: each placement is scored by the share of each of its two layers' gauge-fixed norm²
(all heads) that its cells hold, averaged over the two (equal to ``SHARE_TOLERANCE``: the one on
fewer heads first), and per construction the ``KEEP_SINGLE`` best one-head placements and the
``KEEP_SUM`` best with a sum of heads are tested
(on a two-layer one-head model: the one placement, the construction as registered).

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
    if fitting_names(cfg, working=True):
        return None
    same = [s for s in registry.REGISTRY.values() if s.works and s.attention_dir == cfg.attention_dir
            and s.readout == cfg.readout]
    if same and all(cfg.d < s.min_d for s in same):
        return (f"no construction was tried: those that read the {cfg.readout} rows of a "
                f"{cfg.attention_dir} model work from d = {min(s.min_d for s in same)}, the model "
                f"has d = {cfg.d}")
    return (f"no construction was tried: none of the registry is {cfg.attention_dir} on the "
            f"model's layout ({', '.join(cfg.layout.names)}) reading its {cfg.readout} rows")


def hypothesis(model: DisentangledModel, placement: Placement) -> Hypothesis:
    """The placed construction as a claim about ``model``: its placed cells (their whole content,
    ``unit="cells"``) and the placed read-out blocks, named ``str(placement)``."""
    cells = tuple(dict.fromkeys(c[:5] for c in placement.cells))
    read = tuple(dict.fromkeys(block for block, _ in placement.read_terms))
    return Hypothesis(str(placement), cells, read, "cells")


def weight_share(placement: Placement, fixed: Sequence[Tensor], stream) -> float:
    """The share of each of the placement's two layers' gauge-fixed norm² (every head) that its
    cells hold, averaged over the two; ``fixed``: per layer ``gauge_fix(A)`` ``(H, D, D)``."""
    shares = []
    for layer in placement.layers:
        F = fixed[layer]
        total = float(F.pow(2).sum())
        held = sum(float(F[head, stream.slice(q, layer), stream.slice(k, layer)].pow(2).sum())
                   for head, q, k in {(c[1], c[2], c[3]) for c in placement.cells if c[0] == layer})
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
        found = placements(name, model.cfg.heads)
        share = {p: weight_share(p, fixed, model.stream) for p in found}
        # to SHARE_TOLERANCE, the fewest heads first (a sum that adds an idle head adds nothing)
        best = sorted(found, key=lambda p: (-round(share[p] / SHARE_TOLERANCE), heads_used(p)))
        out += [p for p in best if not p.summed][:KEEP_SINGLE] + [p for p in best if p.summed][:KEEP_SUM]
    return out


def heads_used(placement: Placement) -> int:
    """How many heads the placement's cells sit on."""
    return len(placement.head_list(0)) + len(placement.head_list(1))


def construction_of(name: str) -> str:
    """The construction of a tested hypothesis's name: ``"two_block @ L1h0→L3h1"`` →
    ``"two_block"`` (an unplaced name as it is)."""
    return name.split(" @ ", 1)[0]


def summed(name: str) -> bool:
    """Whether a tested hypothesis's name is a placement on a sum of heads (``"L1(h0+h1)"``)."""
    return " @ " in name and "(" in name.split(" @ ", 1)[1]


__all__ = ["KEEP_SINGLE", "KEEP_SUM", "SUM", "candidate_placements", "fitting_names", "hypothesis",
           "summed", "untested_reason", "weight_share"]
