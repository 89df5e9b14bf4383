"""A circuit up to the gauge, as a construction could be written: its **form**.

The form of a circuit (cells and the read-out blocks of a model) is the model's kind (attention,
layout, read-out rows), each cell with the templates its atoms hold (``explain``; atoms of at least
``ATOM_SHARE`` of the cell's largest ``|β|``) with their signs, and the read-out blocks with the
signs of their diagonals in ``W_U``. The gauge is factored out: an atom equal to another placement
modulo the gauge (a ``-1`` at (pos.P, pos.Y) is a ``+1`` at (pos.P, pos.P)) is written at the first
of its placements in sorted order, so the same function gives the same form whatever gauge a run
learned.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from ..config import AttentionDir
from ..maths import constructions
from ..maths.cells import Cell
from ..model.disentangled import DisentangledModel
from .hypothesis import cell_text
from .templates import explain

#: An atom belongs to a form when its ``|β|`` is at least this share of its cell's largest.
ATOM_SHARE = 0.25


@dataclass(frozen=True)
class Form:
    """A circuit up to the gauge: the model's kind, its cells and what ``W_U`` reads."""

    attention_dir: AttentionDir
    layout: str  # "plain" or "scratch"
    readout: str
    cells: tuple[Cell, ...]  # sorted; on the heads of the model they were found in
    read: str  # "L2.x" or "L2.x - L1.x"

    def spec(self, name: str, description: str = "") -> constructions.ConstructionSpec:
        return constructions.ConstructionSpec(
            name, description or f"discovered: {self.text}", self.attention_dir, self.layout,
            self.readout, self.read, True, self.cells)

    @property
    def text(self) -> str:
        return "; ".join(cell_text(c) for c in self.cells)

    def snippet(self, name: str) -> str:
        """Python that registers the form (``constructions.register`` checks it again), at any
        number of layers and heads."""
        cells = ",\n    ".join(repr(tuple(c)) for c in self.cells)
        return ("from invperm_interp.maths import constructions\n\n"
                f"constructions.register(\n    {name!r},\n    [{cells}],\n"
                f"    constructions.Wiring(layout={self.layout!r}, "
                f"attention_dir={self.attention_dir!r}, readout={self.readout!r}, "
                f"read={self.read!r}),\n"
                f"    description={('discovered: ' + self.text)!r},\n)\n")


def _canonical(atom) -> tuple[str, str, str]:
    """The first of the atom's gauge-equivalent placements ``(query, key, label)``."""
    return min(atom.placements)


def _read_text(model: DisentangledModel, blocks: tuple[str, ...]) -> str:
    """``"L2.x - L1.x"``: each read block with the sign of its diagonal in ``W_U``."""
    W = model.unembed.W_U.detach().double().cpu()
    terms = []
    for block in blocks:
        part = W[model.stream.slice(block, model.cfg.n_layers)]
        sign = "-" if float(torch.diagonal(part).sum()) < 0 else "+"
        terms.append((sign, block))
    text = " ".join(f"{s} {b}" for s, b in terms).strip()
    return text[2:] if text.startswith("+ ") else text


def layout_name(cfg) -> str:
    """``"scratch"`` for a layout with scratch rows, else ``"plain"``: a construction's layout."""
    return "scratch" if any(s.kind == "S" for s in cfg.layout.segments) else "plain"


def form_of(model: DisentangledModel, cells, read: tuple[str, ...]) -> Form:
    """The form of a circuit of ``cells`` ``(layer, head, query, key, label)`` reading ``read``."""
    cfg = model.cfg
    keys = {c[:4] for c in cells}
    atoms = [a for a in explain(model) if (a.layer, a.head, a.query, a.key) in keys]
    largest: dict[tuple, float] = defaultdict(float)
    for a in atoms:
        largest[(a.layer, a.head, a.query, a.key)] = max(largest[(a.layer, a.head, a.query, a.key)],
                                                          a.scale)
    kept = {Cell(a.layer, a.head, *_canonical(a)) for a in atoms
            if a.scale >= ATOM_SHARE * largest[(a.layer, a.head, a.query, a.key)]}
    layout = layout_name(cfg)
    return Form(cfg.attention_dir, layout, cfg.readout, tuple(sorted(kept)), _read_text(model, read))
