"""A registry construction placed on layers and heads of a deeper or wider model, as a value.

A ``ConstructionSpec`` is a circuit on its own shape (``spec.heads``: two layers of one head for the
note's forms). In a model with ``L`` layers and ``H_l`` heads in layer ``l`` it can sit on any
increasing layers (``layers``, module indices, one per construction layer) and, in each, its heads
on distinct heads of the model's layer (``heads``): a construction layer of one head on one head
or on the sum of all the layer's heads (``SUM``, every head holding the same cells), one of several
heads on as many of the model's heads, in the order given. Its block names are rewritten to the
placement through the stream's typed :class:`~invperm_interp.stream.BlockName`: the copy ``L1.x``
made by the construction's first layer becomes the copy made by its placed head (``L{l+1}.x`` or
``L{l+1}h{k}.x``); a sum of heads expands a copy into one block per head. ``str()`` shows it as
``two_block @ L1h0→L3h1`` (layers 1-based, as in block names; ``L2(h0+h1)`` for a sum of heads,
``L2[h1,h0]`` for a construction layer of two heads); nothing reads that text back: records keep
:meth:`Placement.to_dict`.

:func:`placed_weights` builds a placement as weights, every other cell zero: the layers and heads
outside it still attend (uniformly) but nothing reads what they write, so the model computes ``Y``
as the unplaced construction does. Where a sum of heads expands a cell over ``n`` copies each copy
gets ``β/n``, and the read-out ``1/n`` of each copy: the copies are equal, so the sum is the
construction's cell.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .. import memory
from ..config import ModelConfig
from ..stream import BlockName, Stream
from .cells import Cell, cell_template
from .constructions import default_beta, scratch_guard
from .registry import REGISTRY, ConstructionSpec, get

if TYPE_CHECKING:
    from ..model.hooked import HookedDisentangledTransformer

#: One placed cell and the share of β it carries (``1/n`` where a sum of heads expands it over
#: ``n`` copies).
PlacedCell = tuple[Cell, float]
SUM = None  # a one-head construction layer's placed head: an integer, or SUM for every head's sum
#: Where one construction layer sits in a model layer: its one head's model head (or ``SUM``), or
#: for a construction layer of several heads the model head of each, in order.
HeadChoice = int | None | tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """``construction`` on module layers ``layers`` (one per construction layer, increasing) of a
    model whose layers have ``shape`` heads each; ``heads``: per construction layer a
    :data:`HeadChoice` (for the note's forms ``(k1, k2)``, each a head or ``SUM``)."""

    construction: str
    layers: tuple[int, ...]
    heads: tuple[HeadChoice, ...]
    shape: tuple[int, ...]
    custom: ConstructionSpec | None = field(default=None, compare=False, repr=False)  # unregistered

    def __post_init__(self) -> None:
        if self.custom is None:
            get(self.construction)  # a registered name
        shape = tuple(self.shape)
        if len(shape) < 2 or not all(isinstance(h, int) and h >= 1 for h in shape):
            raise ValueError(f"shape must list the heads of at least 2 layers, got {self.shape!r}")
        own = self.spec.heads
        layers = tuple(self.layers)
        if not (len(layers) == len(own) and all(isinstance(x, int) for x in layers)
                and all(0 <= a < b < len(shape) for a, b in zip(layers, layers[1:]))
                and 0 <= layers[0] and layers[-1] < len(shape)):
            raise ValueError(f"layers must be {len(own)} increasing module indices in "
                             f"[0, {len(shape) - 1}] (one per layer of {self.construction!r}), "
                             f"got {self.layers!r}")
        heads = tuple(tuple(h) if isinstance(h, list) else h for h in self.heads)
        if len(heads) != len(own):
            raise ValueError(f"heads must give one choice per layer of {self.construction!r} "
                             f"({len(own)}), got {self.heads!r}")
        for layer, n_own, head in zip(layers, own, heads):
            n = shape[layer]
            if n_own > 1:
                if not (isinstance(head, tuple) and len(head) == n_own and len(set(head)) == n_own
                        and all(isinstance(k, int) and 0 <= k < n for k in head)):
                    raise ValueError(f"heads of layer {layer} must be {n_own} distinct heads in "
                                     f"[0, {n - 1}] (the construction's layer has {n_own}), got {head!r}")
            elif head is not SUM and not (isinstance(head, int) and not isinstance(head, bool)
                                          and 0 <= head < n):
                raise ValueError(f"head of layer {layer} must be in [0, {n - 1}] or None "
                                 f"(the sum of its heads), got {head!r}")
            elif head is SUM and n == 1:
                raise ValueError(f"layer {layer} has one head: place on head 0, not on a sum")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "heads", heads)

    @property
    def spec(self) -> ConstructionSpec:
        return self.custom if self.custom is not None else get(self.construction)

    @classmethod
    def own(cls, spec: ConstructionSpec | str) -> Placement:
        """The construction on a model of its own shape, as registered."""
        spec = get(spec) if isinstance(spec, str) else spec
        heads = tuple(0 if n == 1 else tuple(range(n)) for n in spec.heads)
        return cls(spec.name, tuple(range(len(spec.heads))), heads, spec.heads,
                   None if REGISTRY.get(spec.name) is spec else spec)

    @property
    def trivial(self) -> bool:
        """The construction as registered, on a model of its own shape (written as its name)."""
        own = self.spec.heads
        return (self.shape == own and self.layers == tuple(range(len(own)))
                and self.heads == tuple(0 if n == 1 else tuple(range(n)) for n in own))

    @property
    def summed(self) -> bool:
        """Whether a layer of it is the sum of several heads."""
        return SUM in self.heads

    def model_heads(self, layer: int, head: int) -> list[int]:
        """The model heads that the construction's head ``head`` of layer ``layer`` sits on."""
        choice, n = self.heads[layer], self.shape[self.layers[layer]]
        if isinstance(choice, tuple):
            return [choice[head]]
        return list(range(n)) if choice is SUM else [choice]

    def _copies(self, layer: int, head: int | None) -> list[tuple[int, int | None]]:
        """The copy-path entries that a copy by the construction's ``(layer, head)`` becomes."""
        n = self.shape[self.layers[layer]]
        return [(self.layers[layer] + 1, None if n == 1 else k)
                for k in self.model_heads(layer, 0 if head is None else head)]

    def blocks(self, name: str) -> list[str]:
        """The placed blocks a construction block stands for (one, or one per summed head)."""
        parts, own = BlockName.parse(name), self.spec.heads
        options = []
        for layer, head in parts.path:
            if not (1 <= layer <= len(own)) or (head is None) != (own[layer - 1] == 1) or (
                    head is not None and head >= own[layer - 1]):
                raise ValueError(f"block {name!r} is not a block of {self.construction!r}'s stream "
                                 f"({list(own)} heads)")
            options.append(self._copies(layer - 1, head))
        return [str(BlockName(tuple(path), parts.segment)) for path in itertools.product(*options)]

    def head_list(self, index: int) -> list[int]:
        """The model heads that the construction's layer ``index`` sits on."""
        return sorted({k for head in range(self.spec.heads[index]) for k in self.model_heads(index, head)})

    def place_cells(self, cells) -> tuple[PlacedCell, ...]:
        """Construction cells as placed cells, each with its share of β."""
        out = []
        for cell in map(Cell.of, cells):
            queries, keys = self.blocks(cell.query), self.blocks(cell.key)
            scale = 1.0 / (len(queries) * len(keys))
            for head in self.model_heads(cell.layer, cell.head):
                out += [(Cell(self.layers[cell.layer], head, q, k, cell.label), scale)
                        for q in queries for k in keys]
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
        """Layers 1-based as in block names; a head ``None`` is the sum of the layer's heads, a list
        the heads of a construction layer of several."""
        return {"construction": self.construction, "text": str(self),
                "layers": [layer + 1 for layer in self.layers],
                "heads": [list(h) if isinstance(h, tuple) else h for h in self.heads],
                "sum_of_heads": self.summed, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict) -> Placement:
        return cls(data["construction"], tuple(layer - 1 for layer in data["layers"]),
                   tuple(tuple(h) if isinstance(h, list) else h for h in data["heads"]),
                   tuple(data["shape"]))

    def __str__(self) -> str:
        if self.trivial:
            return self.construction
        return f"{self.construction} @ " + "→".join(map(self._layer_text, range(len(self.layers))))

    def _layer_text(self, index: int) -> str:
        layer, head = self.layers[index], self.heads[index]
        if self.shape[layer] == 1:
            return f"L{layer + 1}"
        if isinstance(head, tuple):
            return f"L{layer + 1}[" + ",".join(f"h{k}" for k in head) + "]"
        if head is SUM:
            return f"L{layer + 1}(" + "+".join(f"h{k}" for k in range(self.shape[layer])) + ")"
        return f"L{layer + 1}h{head}"


def unplace(cells, read: tuple[str, ...], shape: tuple[int, ...]):
    """A circuit of a model of ``shape`` as a two-layer one-head circuit: ``cells`` and ``read``
    blocks → ``((l1, l2), (k1, k2), cells (on layer 0 or 1, head 0), read)`` in the construction's
    block names, or ``None`` when
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
        out.append(Cell(index, 0, q, k, label))
    placed_read = [block(b, None) for b in read]
    if None in placed_read:
        return None
    return (l1, l2), (k1, k2), tuple(out), tuple(placed_read)


def placements(construction: str | ConstructionSpec, shape: tuple[int, ...]) -> list[Placement]:
    """Every placement of ``construction`` (a registry name, or an unregistered spec) on a model of
    ``shape`` (heads per layer): all increasing choices of layers, each construction layer of one
    head on one of the model layer's heads or on their sum, one of several heads on every ordered
    choice of as many distinct heads."""
    spec = get(construction) if isinstance(construction, str) else construction
    custom = None if isinstance(construction, str) else spec
    shape, own = tuple(shape), spec.heads

    def options(layer: int, n_own: int) -> list[HeadChoice]:
        if n_own > 1:
            return list(itertools.permutations(range(shape[layer]), n_own))
        return list(range(shape[layer])) + ([SUM] if shape[layer] > 1 else [])

    return [Placement(spec.name, layers, heads, shape, custom)
            for layers in itertools.combinations(range(len(shape)), len(own))
            for heads in itertools.product(*(options(layer, n) for layer, n in zip(layers, own)))]


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
    cells += [(placed, share * s) for cell, s in scratch_guard(spec, cfg.layout.scratch_vector)
              for placed, share in placement.place_cells([cell])]
    for (layer, head, query, key, label), scale in cells:
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
