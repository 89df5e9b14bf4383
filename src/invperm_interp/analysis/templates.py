"""Learned weights read as block templates: "J_d at (pos.P, pos.Y)" as a sentence the code can check.

TransformerLens's ``detect_head`` scores attention *patterns* against a template; this scores the
*weights* ``A`` cell by cell (query block × key block, docs/design.md section 3) against a library
of templates (the vocabulary of ``cells``: ``I``, ``J``, all-ones, shifted identities; and
user-supplied ones).

Raw cosines mislead: softmax ignores the gauge of ``A`` (``analysis.gauge``), and learned weights are
dominated by it (docs/design.md section 4). Gauge-fixing alone does not give clean cells either: it smears
a ``-1`` cell, since ``-1`` at (pos.P, pos.Y) and ``+1`` at (pos.P, pos.P) are the same function.
So :func:`explain` writes the gauge-fixed ``A`` as a sparse sum of gauge-fixed *placed templates*
(atoms: a template in one cell, zeros elsewhere, then ``gauge_fix``), chosen by orthogonal matching
pursuit; atoms equal modulo gauge tie, and the tie goes to the atom the raw weights carry.
:func:`match_templates` reports every cell, raw and gauge-fixed side by side.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from ..maths.cells import TEMPLATES, Cell, TemplateFn, label, shifted
from ..model.disentangled import DisentangledModel
from .pursuit import Dictionary, Fit, PursuitLimits, build_dictionary, pursue

ZEROS = "zeros"  # the name reported for a cell that no atom explains


def default_templates(shifts: tuple[int, ...] = (1, -1)) -> dict[str, TemplateFn]:
    """The library: ``I`` (query i ↔ key i), ``J`` (i ↔ last - i), ``ones`` and ``shift+k``
    (query i ↔ key i + k) for each ``k`` in ``shifts``. A ``-1`` cell is ``ones`` with ``beta < 0``."""
    library = dict(TEMPLATES)
    for k in shifts:
        library[f"shift{k:+d}"] = shifted(k)
    return library


def _library(templates: Mapping[str, TemplateFn | Tensor] | None) -> dict[str, TemplateFn]:
    """Default templates plus user-supplied ones (a tensor applies to cells of its shape only)."""
    library = default_templates()
    for name, template in (templates or {}).items():
        if name == ZEROS or not isinstance(name, str):
            raise ValueError(f"template names must be strings other than {ZEROS!r}, got {name!r}")
        if isinstance(template, Tensor):
            fixed = template.detach().to(torch.float64).cpu()
            if fixed.ndim != 2:
                raise ValueError(f"template {name!r} must be a 2-d tensor, got shape {tuple(fixed.shape)}")
            library[name] = lambda r, c, t=fixed: t if tuple(t.shape) == (r, c) else None
        elif callable(template):
            library[name] = template
        else:
            raise ValueError(f"template {name!r} must be a tensor or a callable (rows, cols) -> tensor")
    return library


# -- results ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Atom:
    """One term of a circuit: ``beta`` times template ``template`` at cell (query, key) of
    ``blocks.{layer}.attn.A[head]``; ``score`` is its gauge-fixed cosine (see :class:`CellMatch`)."""

    layer: int
    head: int
    query: str
    key: str
    template: str
    beta: float
    score: float
    raw_score: float  # |cosine| of the raw cell with the same template: what the gauge hides
    share: float  # share of the layer's ||gauge_fix(A)||² this atom alone accounts for
    twins: tuple[tuple[str, str, str], ...] = ()  # (query, key, label) equal to this atom modulo gauge

    @property
    def label(self) -> str:
        """The template with the sign of ``beta``, as the constructions write cells: ``I``, ``J``,
        ``-1`` (``cells.label``)."""
        return label(self.template, self.beta)

    @property
    def placements(self) -> tuple[tuple[str, str, str], ...]:
        """``(query, key, label)`` of this atom and of its gauge twins: equally valid readings."""
        return ((self.query, self.key, self.label), *self.twins)

    @property
    def scale(self) -> float:
        """``|beta|``: the β of docs/design.md section 6 (every nonzero cell is β times its
        template)."""
        return abs(self.beta)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["label"], out["twins"] = self.label, [list(t) for t in self.twins]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Atom:
        fields = {k: data[k] for k in cls.__dataclass_fields__}
        return cls(**{**fields, "twins": tuple(tuple(t) for t in data["twins"])})

    def __str__(self) -> str:
        same = "".join(f" = {t} at ({q}, {k})" for q, k, t in self.twins)
        return (f"layer {self.layer + 1} head {self.head}: {self.label} at ({self.query}, {self.key})"
                f"{same} x {self.scale:.4g} (score {self.score:.3f}, raw {self.raw_score:.3f})")


@dataclass(frozen=True)
class Circuit:
    """The atoms of one model, in the order matching pursuit chose them per (layer, head)."""

    atoms: tuple[Atom, ...]
    residual_share: tuple[float, ...]  # per layer: share of ||gauge_fix(A)||² left unexplained

    def cells(self) -> set[Cell]:
        """The atoms as ``Cell`` values, comparable with ``ConstructionSpec.cells``."""
        return {Cell(a.layer, a.head, a.query, a.key, a.label) for a in self.atoms}

    def to_dict(self) -> dict:
        return {"atoms": [a.to_dict() for a in self.atoms], "residual_share": list(self.residual_share)}

    @classmethod
    def from_dict(cls, data: dict) -> Circuit:
        return cls(tuple(Atom.from_dict(a) for a in data["atoms"]), tuple(data["residual_share"]))

    def _matched(self, cells: set) -> set:
        """The ``cells`` that some atom is, counting its gauge twins (:attr:`Atom.placements`)."""
        return {c for c in cells for a in self.atoms if c in {(a.layer, a.head, *p) for p in a.placements}}

    def overlap(self, cells) -> float:
        """Jaccard index between the atoms and ``cells`` (``Cell`` values, or 4-tuples on head 0)."""
        cells = set(map(Cell.of, cells))
        matched = len(self._matched(cells))
        union = len(self.atoms) + len(cells) - matched
        return matched / union if union else 1.0

    def recall(self, cells) -> float:
        """Share of ``cells`` found among the atoms: 1 when a circuit contains a construction's."""
        cells = set(map(Cell.of, cells))
        return len(self._matched(cells)) / len(cells) if cells else 1.0

    def norm_share(self, cells) -> float:
        """Share of the gauge-fixed weights carried by atoms that are among ``cells`` (with sign,
        counting gauge twins), averaged over the layers of the circuit and of ``cells``: how much of
        a learned model a construction accounts for (recall alone is 1 for any superset)."""
        cells = set(map(Cell.of, cells))
        layers = {c[0] for c in cells} | {a.layer for a in self.atoms}
        if not layers:
            return 0.0
        carried = sum(a.share for a in self.atoms
                      if any((a.layer, a.head, *p) in cells for p in a.placements))
        return carried / len(layers)

    def __iter__(self):
        return iter(self.atoms)

    def __len__(self) -> int:
        return len(self.atoms)

    def __str__(self) -> str:
        return "\n".join(str(a) for a in self.atoms) or "(no atoms)"


@dataclass(frozen=True)
class CellMatch:
    """One (layer, head, query block, key block) cell of ``A``, gauge-fixed and raw side by side.

    ``score`` is a cosine similarity in ``[0, 1]`` (as ``detect_head`` documents its measures):
    1 means the cell is exactly ``beta · template``, 0 that it carries no trace of the template;
    ``beta = <cell, T> / <T, T>`` is the least-squares scale and carries the sign. Unlike
    ``detect_head``'s ``"mul"``, which rewards mass on the template's ones and so scores an all-ones
    block as highly as ``I``, the cosine counts entries off the template against it: an all-ones
    ``d × d`` cell scores ``1/√d`` against ``I``.

    Gauge-fixed fields (no prefix) come from :func:`explain`. ``template``/``beta``: the atom placed
    in this cell (``"zeros"``, with score and beta 0, where there is none); ``score``: the cosine,
    within the cell, between ``gauge_fix(A)`` less every other atom and the gauge-fixed atom, so it
    is the same whatever gauge is added; ``norm_share``: the cell's share of ``||gauge_fix(A)||²``;
    ``residual``: the share left unexplained in the cell. A cell may hold norm but no atom:
    gauge-fixing smears a ``-1`` cell over its row's other position blocks, and the atom accounts
    for it. ``raw_*``: the best library template for the raw cell, by ``|cosine|``;
    ``raw_residual = ||cell - raw_beta T||² / ||A||²``.
    """

    layer: int
    head: int
    query: str
    key: str
    norm_share: float
    template: str
    score: float
    beta: float
    residual: float
    raw_norm_share: float
    raw_template: str
    raw_score: float
    raw_beta: float
    raw_residual: float

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _weights(model: DisentangledModel, layer: int, head: int) -> Tensor:
    return model.blocks[layer].attn.A.detach()[head].to("cpu", torch.float64)


def _selection(model: DisentangledModel, layer: int | None,
               head: int | None) -> list[tuple[int, int]]:
    n_layers = model.cfg.n_layers
    if layer is not None and (type(layer) is not int or not 0 <= layer < n_layers):
        raise ValueError(f"layer must be an integer in [0, {n_layers - 1}] or None, got {layer!r}")
    out = []
    for lay in [layer] if layer is not None else range(n_layers):
        n_heads = model.cfg.heads[lay]
        if head is not None and (type(head) is not int or not 0 <= head < n_heads):
            raise ValueError(f"head must be an integer in [0, {n_heads - 1}] or None, got {head!r}")
        out += [(lay, h) for h in ([head] if head is not None else range(n_heads))]
    return out


@dataclass(frozen=True)
class _Explained:
    layer: int
    head: int
    dic: Dictionary
    fit: Fit
    atoms: tuple[Atom, ...]


#: The default library's dictionaries of the last few stream shapes, by (layout, heads, layer): a
#: timeline or a sweep report analyses many models of one shape (6,480 atoms, ~15 MB, at the last
#: layer of 3 layers × 2 heads at d = 10).
_DEFAULT_DICTIONARIES: OrderedDict[tuple, Dictionary] = OrderedDict()
DICTIONARIES_KEPT = 8


def _dictionary(stream, layer: int, library: dict[str, TemplateFn], default: bool) -> Dictionary:
    """A layer's dictionary (the same for every head of it); the default library's is kept."""
    if not default:
        return build_dictionary(stream, layer, library)
    key = (stream.layout, stream.heads, layer)
    if key in _DEFAULT_DICTIONARIES:
        _DEFAULT_DICTIONARIES.move_to_end(key)
    else:
        _DEFAULT_DICTIONARIES[key] = build_dictionary(stream, layer, library)
        while len(_DEFAULT_DICTIONARIES) > DICTIONARIES_KEPT:
            _DEFAULT_DICTIONARIES.popitem(last=False)
    return _DEFAULT_DICTIONARIES[key]


def _explain_heads(model: DisentangledModel, selection: list[tuple[int, int]],
                   library: dict[str, TemplateFn], limits: PursuitLimits,
                   default: bool = False) -> list[_Explained]:
    """:func:`_explain_head` of each selected ``(layer, head)``, a layer's dictionary built once
    (``default``: ``library`` is the default one, whose dictionaries are kept across calls)."""
    dictionaries: dict[int, Dictionary] = {}
    out = []
    for layer, head in selection:
        if layer not in dictionaries:
            dictionaries[layer] = _dictionary(model.stream, layer, library, default)
        out.append(_explain_head(model, layer, head, dictionaries[layer], limits))
    return out


def _explain_head(model: DisentangledModel, layer: int, head: int, dic: Dictionary,
                  limits: PursuitLimits) -> _Explained:
    stream = model.stream
    A = _weights(model, layer, head)
    fit = pursue(A, stream, layer, dic, limits)
    atoms = []
    total = float(fit.fixed.pow(2).sum())
    for a, beta, phi, twins in zip(fit.selected, fit.betas, fit.phis, fit.twins):
        q, k = dic.cells[a]
        own = fit.residual + beta * phi  # the weights less every other atom
        score = _abs_cosine(own[q.slice, k.slice], phi[q.slice, k.slice])
        same = tuple((dic.cells[t][0].name, dic.cells[t][1].name, label(dic.names[t], sign * beta))
                     for t, sign in twins)
        raw_score = _abs_cosine(A[q.slice, k.slice], dic.templates[a])
        share = beta**2 * float(phi.pow(2).sum()) / total
        atoms.append(Atom(layer, head, q.name, k.name, dic.names[a], beta, score, raw_score, share, same))
    return _Explained(layer, head, dic, fit, tuple(atoms))


def _abs_cosine(a: Tensor, b: Tensor) -> float:
    """``|cos(a, b)|`` in ``[0, 1]``: how much of ``a`` is a multiple of ``b``, either sign; 0 when
    either is zero."""
    na, nb = float(a.norm()), float(b.norm())
    return abs(float((a * b).sum())) / (na * nb) if na > 0 and nb > 0 else 0.0


def explain(model: DisentangledModel, layer: int | None = None, head: int | None = None, *,
            templates: Mapping[str, TemplateFn | Tensor] | None = None, min_share: float = 1e-3,
            tol: float = 1e-10, max_atoms: int = 32, significance: float = 2.0) -> Circuit:
    """The circuit: ``gauge_fix(A)`` of each (layer, head) as a sparse sum of gauge-fixed atoms.

    ``min_share``: an atom must explain at least this share of the layer's gauge-fixed norm²;
    ``significance``: every kept atom must explain this many times what the best of the atoms would
    explain of white noise as large as the residual; ``tol``: stop once the unexplained share is
    below it.
    ``templates`` adds to the default library.
    """
    library = _library(templates)
    limits = PursuitLimits(min_share, tol, max_atoms, significance)
    parts = _explain_heads(model, _selection(model, layer, head), library, limits, templates is None)
    return _circuit_of(parts)


def _circuit_of(parts: list[_Explained]) -> Circuit:
    shares = []
    for part in parts:
        total = float(part.fit.fixed.pow(2).sum())
        shares.append(float(part.fit.residual.pow(2).sum()) / total if total > 0 else 0.0)
    return Circuit(tuple(a for p in parts for a in p.atoms), tuple(shares))


def explain_and_match(model: DisentangledModel) -> tuple[Circuit, list[CellMatch]]:
    """:func:`explain` and :func:`match_templates` of every head with their defaults, from one fit."""
    library = _library(None)
    parts = _explain_heads(model, _selection(model, None, None), library, PursuitLimits(), True)
    return _circuit_of(parts), [row for part in parts for row in _cell_rows(model, part)]


def match_templates(model: DisentangledModel, layer: int | None = None,
                    head: int | None = None, *,
                    templates: Mapping[str, TemplateFn | Tensor] | None = None,
                    min_share: float = 1e-3, tol: float = 1e-10, max_atoms: int = 32,
                    significance: float = 2.0) -> list[CellMatch]:
    """One :class:`CellMatch` per (layer, head, query block, key block), gauge-fixed and raw.

    Arguments as in :func:`explain`; ``layer``/``head`` restrict the table (``None``: all).
    """
    library, limits = _library(templates), PursuitLimits(min_share, tol, max_atoms, significance)
    parts = _explain_heads(model, _selection(model, layer, head), library, limits, templates is None)
    return [row for part in parts for row in _cell_rows(model, part)]


def _block_sums(M: Tensor, blocks) -> Tensor:
    """``(n, n)``: the sum of ``M``'s entries in each (query block, key block) cell."""
    P = torch.zeros(len(blocks), M.shape[0], dtype=M.dtype)
    for i, b in enumerate(blocks):
        P[i, b.slice] = 1.0
    return P @ M @ P.T


def _cell_rows(model: DisentangledModel, part: _Explained) -> list[CellMatch]:
    A, fit, dic = _weights(model, part.layer, part.head), part.fit, part.dic
    raw_total = float(A.pow(2).sum()) or 1.0
    fixed_total = float(fit.fixed.pow(2).sum()) or 1.0
    # strongest atom per cell: the one contributing the most norm
    by_cell: dict[tuple[str, str], tuple[Atom, float]] = {}
    for atom, phi in zip(part.atoms, fit.phis):
        weight = abs(atom.beta) * float(phi.norm())
        key = (atom.query, atom.key)
        if key not in by_cell or weight > by_cell[key][1]:
            by_cell[key] = (atom, weight)
    blocks = model.stream.blocks(part.layer)
    fixed, residual, raw = (_block_sums(M.pow(2), blocks).tolist()
                            for M in (fit.fixed, fit.residual, A))
    raw_best = _raw_best(A, dic, {(q.name, k.name): raw[i][j] for i, q in enumerate(blocks)
                                  for j, k in enumerate(blocks)})
    rows = []
    for i, q in enumerate(blocks):
        for j, k in enumerate(blocks):
            name, score, beta, proj = raw_best.get((q.name, k.name), (ZEROS, 0.0, 0.0, 0.0))
            # ||A_cell - beta T||² = ||A_cell||² - beta <A_cell, T>, beta = <A_cell, T> / ||T||²
            raw_res = max(raw[i][j] - beta * proj, 0.0)
            atom = by_cell.get((q.name, k.name), (None, 0.0))[0]
            rows.append(CellMatch(
                layer=part.layer, head=part.head, query=q.name, key=k.name,
                norm_share=fixed[i][j] / fixed_total,
                template=atom.template if atom else ZEROS,
                score=atom.score if atom else 0.0,
                beta=atom.beta if atom else 0.0,
                residual=residual[i][j] / fixed_total,
                raw_norm_share=raw[i][j] / raw_total,
                raw_template=name, raw_score=score, raw_beta=beta,
                raw_residual=raw_res / raw_total,
            ))
    return rows


def _raw_best(A: Tensor, dic: Dictionary, cell_sq: dict[tuple[str, str], float]) -> dict:
    """Per nonzero raw cell ``(query, key)``: the library template of highest ``|cosine|``, its
    cosine, its beta and ``<A_cell, T>``; ``cell_sq``: each cell's ``||A_cell||²``."""
    proj = (dic.M @ A.reshape(-1, 1)).squeeze(1).tolist()  # <cell, T> per atom
    raw_norm = dic.raw_norm.tolist()
    best: dict[tuple[str, str], tuple[str, float, float, float]] = {}
    for a, (q, k) in enumerate(dic.cells):
        key = (q.name, k.name)
        cell_norm = math.sqrt(cell_sq[key])
        if cell_norm == 0.0:
            continue
        cos = abs(proj[a]) / (cell_norm * raw_norm[a])
        if key not in best or cos > best[key][1] + 1e-12:
            best[key] = (dic.names[a], cos, proj[a] / raw_norm[a] ** 2, proj[a])
    return best
