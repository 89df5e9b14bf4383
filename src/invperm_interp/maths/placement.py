"""A registry construction placed on any two layers and heads of a deeper or wider model.

A ``ConstructionSpec`` is a circuit on module layers 0 and 1 of a one-head model. In a model with
``L`` layers and ``H_l`` heads in layer ``l`` it can sit on any layers ``l1 < l2`` (module indices)
and, in each, on one head or on the sum of all the layer's heads (every head holding the same
cells). Its block names are rewritten to the placement through the stream's typed
:class:`~invperm_interp.stream.BlockName`: the copy ``L1.x`` made by the construction's first layer
becomes the copy made by layer ``l1``'s head (``L{l1+1}.x`` or ``L{l1+1}h{k}.x``), ``L2`` likewise
for ``l2``; a sum of heads expands a copy into one block per head. Written as
``two_block @ L1h0→L3h1`` (layers 1-based, as in block names; ``L2(h0+h1)`` for a sum of heads).

:func:`placed_weights` builds a placement as weights, every other cell zero: the layers and heads
outside it still attend (uniformly) but nothing reads what they write, so the model computes ``Y``
as the unplaced construction does. Where a sum of heads expands a cell over ``n`` copies each copy
gets ``β/n``, and the read-out ``1/n`` of each copy: the copies are equal, so the sum is the
construction's cell.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .. import memory
from ..config import ModelConfig
from ..stream import BlockName, Stream
from .cells import cell_template
from .constructions import default_beta, scratch_guard
from .registry import ConstructionSpec, get

if TYPE_CHECKING:
    from ..model.hooked import HookedDisentangledTransformer

#: ``(layer, head, query block, key block, label, scale)``: one placed cell; ``scale`` is the share
#: of β it carries (``1/n`` where a sum of heads expands it over ``n`` copies).
PlacedCell = tuple[int, int, str, str, str, float]
SUM = None  # a placement's head: an integer, or SUM for the sum of every head of the layer


@dataclass(frozen=True)
class Placement:
    """``construction`` on module layers ``layers = (l1, l2)``, ``l1 < l2``, of a model whose
    layers have ``shape`` heads each; ``heads = (k1, k2)``: a head of each layer, or ``SUM``
    (``None``) for the sum of all its heads."""

    construction: str
    layers: tuple[int, int]
    heads: tuple[int | None, int | None]
    shape: tuple[int, ...]
    custom: ConstructionSpec | None = field(default=None, compare=False, repr=False)  # unregistered

    def __post_init__(self) -> None:
        if self.custom is None:
            get(self.construction)  # a registered name
        shape = tuple(self.shape)
        if len(shape) < 2 or not all(isinstance(h, int) and h >= 1 for h in shape):
            raise ValueError(f"shape must list the heads of at least 2 layers, got {self.shape!r}")
        l1, l2 = self.layers
        if not (isinstance(l1, int) and isinstance(l2, int) and 0 <= l1 < l2 < len(shape)):
            raise ValueError(f"layers must be two module indices l1 < l2 in [0, {len(shape) - 1}], "
                             f"got {self.layers!r}")
        for layer, head in zip(self.layers, self.heads):
            if head is not SUM and not (isinstance(head, int) and 0 <= head < shape[layer]):
                raise ValueError(f"head of layer {layer} must be in [0, {shape[layer] - 1}] or None "
                                 f"(the sum of its heads), got {head!r}")
            if head is SUM and shape[layer] == 1:
                raise ValueError(f"layer {layer} has one head: place on head 0, not on a sum")
        object.__setattr__(self, "shape", shape)

    @property
    def spec(self) -> ConstructionSpec:
        return self.custom if self.custom is not None else get(self.construction)

    @property
    def trivial(self) -> bool:
        """The construction as registered: a two-layer, one-head model (written as its name)."""
        return self.shape == (1, 1)

    @property
    def summed(self) -> bool:
        """Whether a layer of it is the sum of several heads."""
        return SUM in self.heads

    def _copies(self, index: int) -> list[tuple[int, int | None]]:
        """The copy-path entries that the construction's layer ``index + 1`` becomes."""
        layer, head = self.layers[index], self.heads[index]
        n = self.shape[layer]
        if n == 1:
            return [(layer + 1, None)]
        return [(layer + 1, k) for k in (range(n) if head is SUM else (head,))]

    def blocks(self, name: str) -> list[str]:
        """The placed blocks a construction block stands for (one, or one per summed head)."""
        parts = BlockName.parse(name)
        options = []
        for layer, head in parts.path:
            if head is not None or layer not in (1, 2):
                raise ValueError(f"block {name!r} is not a block of a two-layer one-head stream")
            options.append(self._copies(layer - 1))
        return [str(BlockName(tuple(path), parts.segment)) for path in itertools.product(*options)]

    def head_list(self, index: int) -> list[int]:
        """The heads of the construction's layer ``index`` (0 or 1) in the model."""
        n = self.shape[self.layers[index]]
        return list(range(n)) if self.heads[index] is SUM else [self.heads[index]]

    def place_cells(self, cells) -> tuple[PlacedCell, ...]:
        """Construction cells ``(layer, query, key, label)`` as placed cells, scaled."""
        out = []
        for layer, query, key, label in cells:
            queries, keys = self.blocks(query), self.blocks(key)
            scale = 1.0 / (len(queries) * len(keys))
            for head in self.head_list(layer):
                out += [(self.layers[layer], head, q, k, label, scale) for q in queries for k in keys]
        return tuple(out)

    @property
    def cells(self) -> tuple[PlacedCell, ...]:
        """The construction's cells, placed (see :meth:`place_cells`)."""
        return self.place_cells(self.spec.cells)

    @property
    def read_terms(self) -> tuple[tuple[str, float], ...]:
        """The read-out blocks with their weights: ``sign / n`` for ``n`` summed copies."""
        out = []
        for block, sign in self.spec.read_terms:
            placed = self.blocks(block)
            out += [(b, sign / len(placed)) for b in placed]
        return tuple(out)

    def to_dict(self) -> dict:
        """Layers 1-based as in block names; a head ``None`` is the sum of the layer's heads."""
        return {"construction": self.construction, "text": str(self),
                "layers": [layer + 1 for layer in self.layers], "heads": list(self.heads),
                "sum_of_heads": self.summed, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict) -> Placement:
        return cls(data["construction"], tuple(layer - 1 for layer in data["layers"]),
                   tuple(data["heads"]), tuple(data["shape"]))

    def __str__(self) -> str:
        if self.trivial:
            return self.construction
        return f"{self.construction} @ {self._layer_text(0)}→{self._layer_text(1)}"

    def _layer_text(self, index: int) -> str:
        layer, head = self.layers[index], self.heads[index]
        if self.shape[layer] == 1:
            return f"L{layer + 1}"
        if head is SUM:
            return f"L{layer + 1}(" + "+".join(f"h{k}" for k in range(self.shape[layer])) + ")"
        return f"L{layer + 1}h{head}"


_TEXT = re.compile(r"^(\w+) @ (L\d+(?:h\d+|\(h[\d+h]+\))?)→(L\d+(?:h\d+|\(h[\d+h]+\))?)$")
_LAYER = re.compile(r"^L(\d+)(?:h(\d+)|(\(.*\)))?$")


def parse(text: str, shape: tuple[int, ...]) -> Placement:
    """The inverse of ``str(placement)`` for a model of ``shape`` (a bare name: the construction
    on a two-layer one-head model)."""
    found = _TEXT.match(str(text).strip())
    if not found:
        if tuple(shape) == (1, 1):
            return Placement(str(text).strip(), (0, 1), (0, 0), (1, 1))
        raise ValueError(f"placement must look like 'two_block @ L1h0→L3h1', got {text!r}")
    layers, heads = [], []
    for part in found.groups()[1:]:
        layer, head, summed = _LAYER.match(part).groups()
        layers.append(int(layer) - 1)
        heads.append(SUM if summed else int(head or 0))
    return Placement(found.group(1), tuple(layers), tuple(heads), tuple(shape))


def unplace(cells, read: tuple[str, ...], shape: tuple[int, ...]):
    """A circuit of a model of ``shape`` as a two-layer one-head circuit: ``cells``
    ``(layer, head, query, key, label)`` and ``read`` blocks → ``((l1, l2), (k1, k2), cells
    (layer 0 or 1, query, key, label), read)`` in the construction's block names, or ``None`` when
    the circuit is not on one head of each of two layers (or reads copies made elsewhere)."""
    units = sorted({(c[0], c[1]) for c in cells})
    if len(units) != 2 or units[0][0] == units[1][0]:
        return None
    (l1, k1), (l2, k2) = units
    names = {(l1 + 1, k1 if shape[l1] > 1 else None): 1, (l2 + 1, k2 if shape[l2] > 1 else None): 2}

    def block(name: str, reader: int | None) -> str | None:
        parts = BlockName.parse(name)
        path = [names.get(step) for step in parts.path]
        if None in path or (reader is not None and any(step > reader for step in path)):
            return None
        return str(BlockName(tuple((step, None) for step in path), parts.segment))

    out = []
    for layer, _, query, key, label in cells:
        index = 0 if layer == l1 else 1
        q, k = block(query, index), block(key, index)
        if q is None or k is None:
            return None
        out.append((index, q, k, label))
    placed_read = [block(b, None) for b in read]
    if None in placed_read:
        return None
    return (l1, l2), (k1, k2), tuple(out), tuple(placed_read)


def placements(construction: str, shape: tuple[int, ...]) -> list[Placement]:
    """Every placement of ``construction`` on a model of ``shape`` (heads per layer): all layer
    pairs ``l1 < l2``, each layer on one of its heads or on their sum."""
    shape = tuple(shape)

    def options(layer: int) -> list[int | None]:
        return list(range(shape[layer])) + ([SUM] if shape[layer] > 1 else [])

    return [Placement(construction, (l1, l2), (k1, k2), shape)
            for l1, l2 in itertools.combinations(range(len(shape)), 2)
            for k1 in options(l1) for k2 in options(l2)]


def placed_weights(placement: Placement, d: int, beta: float | None = None, *,
                   dtype: torch.dtype = torch.float64, scratch=None
                   ) -> tuple[ModelConfig, list, torch.Tensor]:
    """``(cfg, [A (H_l, D_l, D_l) per layer], W_U (D_L, d))`` of ``placement`` at size ``d``, every
    placed cell ``β · scale · template`` (``beta``: default as ``constructions.build``), the scratch
    guard placed the same way, every other cell zero."""
    spec = placement.spec
    beta = default_beta(spec.name) if beta is None else beta
    cfg = ModelConfig(spec.make_layout(d, scratch), n_layers=len(placement.shape),
                      n_heads=placement.shape, attention_dir=spec.attention_dir,
                      readout=spec.readout, dtype="float64" if dtype == torch.float64 else "float32",
                      init="zeros")
    stream = Stream(cfg.layout, cfg.heads)
    As = [torch.zeros(h, w, w, dtype=dtype) for h, w in zip(cfg.heads, cfg.widths[:-1])]
    cells = list(placement.cells)
    cells += [(*p[:5], p[5] * s) for cell, s in scratch_guard(spec, cfg.layout.scratch_vector)
              for p in placement.place_cells([cell])]
    for layer, head, query, key, label, scale in cells:
        view = stream.split(As[layer][head], layer)[(query, key)]
        view += beta * scale * cell_template(label, *view.shape, dtype=dtype)
    W_U = torch.zeros(cfg.widths[-1], cfg.d, dtype=dtype)
    for block, weight in placement.read_terms:
        W_U[stream.slice(block, cfg.n_layers)] += weight * torch.eye(cfg.d, dtype=dtype)
    return cfg, As, W_U


def build(placement: Placement, d: int, beta: float | None = None, *,
          dtype: torch.dtype = torch.float64, scratch=None) -> HookedDisentangledTransformer:
    """The hooked model of :func:`placed_weights` (``constructions.build`` for a placement)."""
    from ..model.hooked import HookedDisentangledTransformer

    cfg, As, W_U = placed_weights(placement, d, beta, dtype=dtype, scratch=scratch)
    memory.check(memory.model_estimate(cfg, f"placement {placement} at d={d}"))
    model = HookedDisentangledTransformer(cfg)
    with torch.no_grad():
        for block, A in zip(model.blocks, As):
            block.attn.A.copy_(A)
        model.unembed.W_U.copy_(W_U)
    return model
