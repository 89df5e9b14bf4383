"""From a circuit's form to an exact construction: idealise, check exact, add the fewest cells.

A trained model runs its circuit with soft attention (fitted β of 1 to 3 at d = 8) and breaks the
ties of a content lookup by degrees; a construction runs the same cells with one β that grows, and
must be exact in the limit. :func:`idealise` looks for the smallest such construction near a form
(``analysis.forms``):

1. **Candidates.** Each cell of the form as its signed template, one β for all. Two starts: every
   atom of the form, and its *core* (per cell the lookup template ``I``, ``J`` or ``shift±k`` when
   the cell holds one, otherwise its ``±1``: a ``±1`` beside a lookup is how soft attention lowers
   the keys a lookup should not match). Two read-outs: the form's (every read block with its sign)
   and each of its positive blocks alone (two blocks that each hold the answer read together give
   it twice).
2. **Exact.** A candidate is built in float64 at ``SCREEN_BETA`` and run on :func:`screen_batch`
   (``SCREEN_SAMPLES`` random samples and ``constructions.edge_inputs``) at each ``d`` of
   ``SCREEN_DS``; it is exact when the largest error is below ``constructions.REGISTER_TOL`` at
   every one of them (the caller confirms over β and a range of ``d``: ``analysis.discover``). The
   search ranks candidates by their MSE at the first ``d``.
3. **The smallest additions.** When no start is exact, the candidate with the lowest MSE takes, one
   at a time and at most ``MAX_CHANGES`` times, the change that lowers its MSE most: a cell of the
   form it left out, one of its non-lookup cells dropped, or a **guard**, ``±1`` at (a query block
   the layer already uses, any key block of that layer's stream): the shape every guard of the
   note's corrected forms has (``theorem2``'s ``-1`` at (pos.P, pos.Y)). It stops when exact, or
   when no change lowers the MSE (the reason is recorded).
4. **Pruned.** An exact candidate drops every cell it stays exact without (its ``±1`` cells
   first), but keeps at least one template at each of the circuit's cells: the model needs every
   one of them (the circuit is minimal), even where the hard-attention limit would not (a second
   route that sharpens a soft lookup).
5. **The model's own signs.** With ``accept`` (what the source model says of a form: in
   ``analysis.discover``, that the rule's sign check passes on the run the circuit came from), an
   exact form is kept only when accepted: a guard the model holds with the other sign, or a
   pruning that leaves a cell's composite template fitted with the other sign, makes an exact
   construction that is not the model's. A rejected pruning is pruned again keeping only accepted
   steps; a rejected candidate gives way to the next exact one (at most ``ACCEPT_TRIES`` per step).

The search is deterministic: candidates are tried in sorted order and ties keep the first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from ..maths import constructions
from ..maths.cells import Cell, parse_label
from ..maths.registry import parse_read
from ..stream import Stream
from ..task import Batch, Layout, make_input, sample_batch
from .forms import Form

#: The β a candidate is checked at: the hard-attention limit (every registered form is exact here).
SCREEN_BETA = 1000.0
#: The sizes a candidate is checked at, and the random samples at each (beside the edge inputs).
SCREEN_DS = (5, 3, 8)  # in this order: a candidate not exact at d = 5 is not built again
SCREEN_SAMPLES = 64
#: At most this many cells added or dropped in the search for an exact form.
MAX_CHANGES = 3
#: Exact candidates offered to ``accept`` per step of the search, best first.
ACCEPT_TRIES = 8


@dataclass(frozen=True)
class Check:
    """A candidate's largest absolute error and MSE over the screen batches."""

    max_error: float
    mse: float

    @property
    def exact(self) -> bool:
        return self.max_error < constructions.REGISTER_TOL


@dataclass(frozen=True)
class Idealisation:
    """The smallest exact form found near ``source`` (or the closest tried), what it changed and
    how many candidates were built. ``reason``: why none is exact (empty when one is)."""

    source: Form
    form: Form
    check: Check
    added: tuple[Cell, ...]
    dropped: tuple[Cell, ...]
    tried: int
    reason: str = ""

    @property
    def exact(self) -> bool:
        """Whether an exact form was found (and accepted): the closest tried may be exact and
        still rejected, with its reason."""
        return self.check.exact and not self.reason

    def to_dict(self) -> dict:
        return {"exact": self.exact, "cells": [list(c) for c in self.form.cells],
                "read": self.form.read, "added": [list(c) for c in self.added],
                "dropped": [list(c) for c in self.dropped], "max_error": self.check.max_error,
                "mse": self.check.mse, "tried": self.tried, "reason": self.reason}


def is_lookup(cell: Cell) -> bool:
    """A cell whose template matches one key per query (``I``, ``J``, ``shift±k``), not ``±1``."""
    return parse_label(cell.label)[0] != "ones"


def core(cells: Iterable[Cell]) -> tuple[Cell, ...]:
    """Per (layer, head, query, key): its lookup templates when it holds one, else its ``±1``."""
    cells = sorted(set(cells))
    sites_with_lookup = {c.site for c in cells if is_lookup(c)}
    return tuple(c for c in cells if is_lookup(c) or c.site not in sites_with_lookup)


def reads(form: Form) -> list[str]:
    """The form's read-out, then each of its positive blocks alone."""
    terms = parse_read(form.read)
    singles = [block for block, sign in terms if sign > 0] if len(terms) > 1 else []
    return list(dict.fromkeys([form.read, *singles]))


def guards(form: Form, cells: Iterable[Cell]) -> list[Cell]:
    """``±1`` at (a query block a layer's cells use, any key block of that layer's stream), for
    each layer and head the cells occupy: the additions :func:`idealise` tries."""
    spec = form.spec("idealised")
    stream = Stream(spec.make_layout(3), spec.heads)
    queries: dict[tuple[int, int], set[str]] = {}
    for c in cells:
        queries.setdefault((c.layer, c.head), set()).add(c.query)
    out = []
    for (layer, head), qs in sorted(queries.items()):
        for query in sorted(qs):
            for key in stream.labels(layer):
                out += [Cell(layer, head, query, key, "1"), Cell(layer, head, query, key, "-1")]
    return out


@lru_cache(maxsize=32)
def screen_batch(layout: Layout) -> Batch:
    """``SCREEN_SAMPLES`` random samples (seed ``d``) and the edge inputs of ``layout`` (size ``d``)."""
    d = layout.d
    drawn = sample_batch(layout, SCREEN_SAMPLES, generator=torch.Generator().manual_seed(d),
                         dtype=torch.float64)
    edge = constructions.edge_inputs(layout)
    return make_input(layout, torch.cat([drawn.P, edge.P]), torch.cat([drawn.Y_P, edge.Y_P]))


class _PerCandidate:
    """Something of a candidate (cells and a read-out) worked out once each, on the form they make
    of ``form``: :meth:`_of` of it."""

    def __init__(self, form: Form):
        self.form, self.seen = form, {}

    def __call__(self, cells: Iterable[Cell], read: str):
        key = (frozenset(cells), read)
        if key not in self.seen:
            self.seen[key] = self._of(replace(self.form, cells=tuple(sorted(key[0])), read=read))
        return self.seen[key]

    def _of(self, form: Form):
        raise NotImplementedError


class _Checker(_PerCandidate):
    """Builds and checks candidates, each once."""

    @property
    def tried(self) -> int:
        return len(self.seen)

    def _of(self, form: Form) -> Check:
        """The form at each d of ``SCREEN_DS`` in turn, stopping at the first it is not exact at:
        its largest error so far, and its MSE at the first d (what the search ranks by)."""
        spec = form.spec("idealised")
        worst, first_mse = 0.0, None
        try:
            for d in SCREEN_DS:
                batch = screen_batch(spec.make_layout(d))
                model = constructions.build(spec, d, SCREEN_BETA, hooked=False)
                with torch.no_grad():
                    err = model(batch.X) - batch.Y
                if not bool(torch.isfinite(err).all()):
                    return Check(float("inf"), float("inf"))
                worst = max(worst, float(err.abs().max()))
                first_mse = float(err.pow(2).sum(-1).mean()) if first_mse is None else first_mse
                if not worst < constructions.REGISTER_TOL:
                    break
        except ValueError:  # a block the form names is not in the model of a size (d too small)
            return Check(float("inf"), float("inf"))
        return Check(worst, first_mse)


def idealise(form: Form, accept: Callable[[Form], bool] | None = None) -> Idealisation:
    """The smallest exact construction near ``form`` (module docstring), or the closest tried;
    ``accept``: what a form must also satisfy to be kept (step 5; default: nothing)."""
    checker = _Checker(form)
    judge = _Judge(form, accept)
    sites = frozenset(c.site for c in form.cells)
    starts = list(dict.fromkeys([tuple(sorted(form.cells)), core(form.cells)]))
    tried = [(checker(cells, read), len(cells), i, cells, read)
             for i, (cells, read) in enumerate((c, r) for c in starts for r in reads(form))]
    for _, _, _, cells, read in sorted((t for t in tried if t[0].exact), key=lambda t: (t[1], t[2])):
        found = _finished(cells, read, checker, sites, judge)
        if found is not None:
            return _result(form, found, read, checker)
    check, _, _, cells, read = min(tried, key=lambda t: (t[0].mse, t[1], t[2]))
    for _ in range(MAX_CHANGES):
        options = _changes(form, cells)
        scored = sorted(((checker(new, read), i, new) for i, new in enumerate(options)),
                        key=lambda t: (t[0].mse, t[1]))
        if not scored:
            break
        for _, _, new in [t for t in scored if t[0].exact][:ACCEPT_TRIES]:
            found = _finished(new, read, checker, sites, judge)
            if found is not None:
                return _result(form, found, read, checker)
        moves = [t for t in scored if not t[0].exact]  # the exact ones were offered above
        if not moves or not moves[0][0].mse < check.mse:
            why = ("every exact form found contradicts the model's own signs" if judge.rejected
                   else "no addition or removal of one cell lowers the error")
            return _result(form, cells, read, checker,
                           f"{why} (max error {check.max_error:.2g} at β = {SCREEN_BETA:g})")
        check, _, cells = moves[0]
    return _result(form, cells, read, checker,
                   f"not exact after {MAX_CHANGES} changes (max error {check.max_error:.2g} at "
                   f"β = {SCREEN_BETA:g})"
                   + ("; exact forms found contradict the model's own signs" if judge.rejected else ""))


class _Judge(_PerCandidate):
    """``accept`` of each candidate, asked once; always yes without it. ``rejected`` counts the
    candidates it refused."""

    def __init__(self, form: Form, accept: Callable[[Form], bool] | None):
        super().__init__(form)
        self.accept, self.rejected = accept, 0

    def __call__(self, cells: Iterable[Cell], read: str) -> bool:
        return True if self.accept is None else super().__call__(cells, read)

    def _of(self, form: Form) -> bool:
        held = bool(self.accept(form))
        self.rejected += not held
        return held


def _finished(cells: tuple[Cell, ...], read: str, checker: _Checker, sites: frozenset,
              judge: _Judge) -> tuple[Cell, ...] | None:
    """An exact candidate pruned (step 4) and accepted (step 5): pruned for exactness alone, and
    when that is rejected, pruned again keeping only accepted steps from an accepted candidate;
    ``None`` when the candidate itself is rejected."""
    pruned = _pruned(cells, read, checker, sites)
    if judge(pruned, read):
        return pruned
    if pruned == cells or not judge(cells, read):
        return None
    return _pruned(cells, read, checker, sites, judge)


def _changes(form: Form, cells: tuple[Cell, ...]) -> list[tuple[Cell, ...]]:
    """Every candidate one change from ``cells``: a form cell or a guard added, a non-lookup cell
    dropped (sorted, each once)."""
    have = set(cells)
    additions = [c for c in dict.fromkeys([*sorted(form.cells), *guards(form, cells)])
                 if c not in have and Cell(*c[:4], _negated(c.label)) not in have]
    removals = [c for c in cells if not is_lookup(c)]
    return ([tuple(sorted(have | {c})) for c in additions]
            + [tuple(sorted(have - {c})) for c in removals if len(have) > 1])


def _pruned(cells: tuple[Cell, ...], read: str, checker: _Checker,
            keep: frozenset, judge: _Judge | None = None) -> tuple[Cell, ...]:
    """An exact candidate less every cell it stays exact without (its ``±1`` cells first, then its
    lookups, each in sorted order), except the last cell at each site of ``keep``: the circuit's
    own cells, which the model needs (a minimal circuit has no cell to spare); with ``judge``,
    only the drops it accepts."""
    for cell in sorted(cells, key=lambda c: (is_lookup(c), c)):
        rest = tuple(c for c in cells if c != cell)
        if cell.site in keep and not any(c.site == cell.site for c in rest):
            continue
        if rest and checker(rest, read).exact and (judge is None or judge(rest, read)):
            cells = rest
    return cells


def _negated(label: str) -> str:
    return label[1:] if label.startswith("-") else f"-{label}"


def _result(form: Form, cells, read: str, checker: _Checker, reason: str = "") -> Idealisation:
    found = replace(form, cells=tuple(sorted(cells)), read=read)
    return Idealisation(form, found, checker(cells, read),
                        tuple(sorted(set(cells) - set(form.cells))),
                        tuple(sorted(set(form.cells) - set(cells))), checker.tried, reason)
