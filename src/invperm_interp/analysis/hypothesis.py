"""A circuit claim, as data: atoms or cells of the attention weights and the blocks ``W_U`` reads.

A *hypothesis* names atoms of the attention weights — a template at a (query block, key block) cell
of one head's ``A``, as :func:`analysis.templates.explain` reports them and ``ConstructionSpec.cells``
lists them — and the blocks of the read-out stream that ``W_U`` reads. :func:`as_hypothesis` turns
a registry name, a ``ConstructionSpec``, an ``explain`` circuit or a list of cells into one, checked
against the model; ``analysis.faithfulness`` tests it by running it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..maths import constructions
from ..maths.cells import Cell, cell_template
from ..maths.placement import Placement
from ..model.disentangled import DisentangledModel
from .templates import Atom, Circuit

#: An atom's cell: the one typed cell (:class:`maths.cells.Cell`), under the name the analysis
#: modules use.
AtomCell = Cell

UNITS = ("cells", "atoms")


@dataclass(frozen=True)
class Hypothesis:
    """Cells of ``A`` and the read-out blocks of ``W_U`` (``None``: keep ``W_U`` whole).

    ``unit``: what a cell claims. ``"cells"``: whatever the model holds in that (query, key) cell
    (the claim of a construction: this lookup, by these blocks); ``"atoms"``: only the cell's
    template, at one fitted β (the claim of an ``explain`` atom)."""

    name: str
    cells: tuple[AtomCell, ...]
    read: tuple[str, ...] | None = None
    unit: str = "cells"
    #: Where a registry construction sits in the model, when the claim is one (``name`` is then
    #: ``str(placement)``, a display label nothing parses).
    placement: Placement | None = None
    #: What the claim says each of its cells reads of the input, per (query segment, key segment)
    #: of the rows (``analysis.readings``): ``((site, ((segments, reads), ...)), ...)``; ``None``:
    #: the claim says nothing of it (causal scrubbing then feeds every cell alike).
    reads: tuple | None = None

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
        object.__setattr__(self, "cells", read_cells(self.cells))

    def __len__(self) -> int:
        return len(self.cells)

    def without(self, index: int) -> Hypothesis:
        """Less cell ``index``; with ``unit="cells"``, less every entry of its (query, key) cell."""
        drop = self.cells[index]
        cells = tuple(c for i, c in enumerate(self.cells)
                      if i != index and not (self.unit == "cells" and c.site == drop.site))
        sites = {c.site for c in cells}
        reads = None if self.reads is None else tuple(r for r in self.reads if r[0] in sites)
        return Hypothesis(f"{self.name} less {cell_text(self.cells[index])}", cells, self.read,
                          self.unit, reads=reads)


def cell_text(cell: AtomCell) -> str:
    """``"L1 I at (pos.Y, pos.P)"`` (``h1`` after the layer for heads other than 0)."""
    layer, head, query, key, label = cell
    return f"L{layer + 1}{f'h{head}' if head else ''} {label} at ({query}, {key})"


def read_cells(data) -> tuple[AtomCell, ...]:
    """Cells from a record's JSON lists."""
    return tuple(Cell(*c) for c in data)


def as_hypothesis(model: DisentangledModel, hypothesis, read=None,
                  unit: str | None = None) -> Hypothesis:
    """Normalise a hypothesis and check it against the model (``ValueError`` naming the problem).

    ``hypothesis``: a registry name or ``ConstructionSpec`` (its cells and read-out blocks; its
    layout, attention and read-out rows must be the model's), a :class:`Circuit` or sequence of
    :class:`Atom` (from ``explain``), a sequence of cells ``(layer, query, key, label)`` or
    ``(layer, head, query, key, label)``, or a :class:`Hypothesis`. ``read``: the read-out blocks
    (default: the construction's; ``None`` for atoms and cells, which keeps ``W_U`` whole).
    ``unit``: ``"cells"`` or ``"atoms"`` (see :class:`Hypothesis`; default ``"atoms"`` for atoms from
    ``explain``, else ``"cells"``).
    """
    if isinstance(hypothesis, Hypothesis):
        hyp = Hypothesis(hypothesis.name, hypothesis.cells,
                         hypothesis.read if read is None else tuple(read), unit or hypothesis.unit,
                         hypothesis.placement, hypothesis.reads)
    elif isinstance(hypothesis, (str, constructions.ConstructionSpec)):
        spec = constructions.get(hypothesis) if isinstance(hypothesis, str) else hypothesis
        _check_fits(model, spec)
        blocks = tuple(block for block, _ in spec.read_terms)
        hyp = Hypothesis(spec.name, spec.cells, tuple(read) if read is not None else blocks,
                         unit or "cells", _as_registered(spec, model.cfg.heads))
    elif isinstance(hypothesis, (Circuit, Sequence)):
        cells, atoms = [], isinstance(hypothesis, Circuit)
        for item in hypothesis:
            if isinstance(item, Atom):
                atoms = True
                cells.append((item.layer, item.head, item.query, item.key, item.label))
            elif isinstance(item, (tuple, list)) and len(item) in (4, 5):
                cells.append(Cell.of(item))
            else:
                raise ValueError(f"hypothesis cells must be Atoms or (layer, [head,] query, key, "
                                 f"label) tuples, got {item!r}")
        hyp = Hypothesis("atoms" if atoms else "cells", tuple(cells),
                         None if read is None else tuple(read), unit or ("atoms" if atoms else "cells"))
    else:
        raise ValueError(f"hypothesis must be a construction name, a ConstructionSpec, a Circuit, "
                         f"or a list of atoms or cells, got {type(hypothesis).__name__}")
    _check_cells(model, hyp)
    return hyp


def _as_registered(spec: constructions.ConstructionSpec, shape: tuple[int, ...]) -> Placement | None:
    """The construction on its own layers and heads of a model of ``shape`` (``None`` where they
    are not there: the cell checks then say which)."""
    own = Placement.own(spec)
    try:
        return Placement(own.construction, own.layers, own.heads, shape, own.custom)
    except ValueError:
        return None


def _check_fits(model: DisentangledModel, spec: constructions.ConstructionSpec) -> None:
    cfg = model.cfg
    try:
        layout = spec.make_layout(cfg.d, cfg.layout.scratch_vector or None)
    except ValueError:
        layout = None
    if layout != cfg.layout or spec.attention_dir != cfg.attention_dir or spec.readout != cfg.readout:
        raise ValueError(
            f"construction {spec.name!r} is {spec.attention_dir} on a {spec.layout} layout reading "
            f"the {spec.readout} rows; the model is {cfg.attention_dir} on {cfg.layout} reading the "
            f"{cfg.readout} rows")


def _check_cells(model: DisentangledModel, hyp: Hypothesis) -> None:
    stream, cfg = model.stream, model.cfg
    for cell in hyp.cells:
        layer, head, query, key, label = cell
        if not (isinstance(layer, int) and 0 <= layer < cfg.n_layers):
            raise ValueError(f"cell {cell!r}: layer must be in [0, {cfg.n_layers - 1}]")
        if not (isinstance(head, int) and 0 <= head < cfg.heads[layer]):
            raise ValueError(f"cell {cell!r}: head must be in [0, {cfg.heads[layer] - 1}]")
        known = stream.labels(layer)
        for block in (query, key):
            if block not in known:
                raise ValueError(f"cell {cell!r}: block {block!r} is not in the stream read by "
                                 f"blocks.{layer} (known: {known})")
        if not isinstance(label, str):
            raise ValueError(f"cell {cell!r}: label must be a string")
        cell_template(label, stream.block(query, layer).width, stream.block(key, layer).width)
    for block in hyp.read or ():
        if block not in stream.labels(cfg.n_layers):
            raise ValueError(f"read-out block {block!r} is not in the final stream "
                             f"(known: {stream.labels(cfg.n_layers)})")
