"""What is still unnamed: the minimal circuits of runs no construction names, grouped into forms,
each proposed as a construction and checked.

For every model the rule names no construction for (verdict none, ``analysis.mechanism``) with a
faithful minimal circuit (on a deeper or wider model: one on one head of each of two layers,
written as on two layers of one head, so the same circuit at other placements is one form;
``maths.placement.unplace``), the circuit's **form** is its cells, each with the templates its atoms
hold (``explain``; atoms of at least ``ATOM_SHARE`` of the cell's largest ``|β|``), with their
signs, the read-out blocks with theirs, and the model's kind (attention, layout, read-out rows).
The gauge is factored out: an atom equal to another placement modulo the gauge (a ``-1`` at (pos.P,
pos.Y) is a ``+1`` at (pos.P, pos.P)) is written at the first of its placements in sorted order, so
the same function gives the same form whatever gauge a run learned. The scratch rows are not
relabelled: scratch row ``i`` is read out as ``Y_i``, which fixes their order.

Each form held by at least ``min_runs`` runs is proposed as a construction (``ConstructionSpec``,
every cell ``β`` times its template, one ``β``) and checked twice: **exact** when the largest error
of the built model falls below ``constructions.REGISTER_TOL`` at every ``d`` in
``DISCOVER_DS`` as ``β`` grows (``exact_from``: the first such ``β``; otherwise the
best error reached), and **faithful** on each of its runs by the rule's own test.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..config import AttentionDir
from ..maths import constructions
from ..maths.cells import Cell
from ..maths.placement import Placement, unplace
from ..maths.registry import parse_read
from ..model.disentangled import DisentangledModel, check_disentangled
from .faithfulness import Faithfulness, Tester
from .hypothesis import cell_text
from .mechanism import Mechanism, mechanism, verdict_of
from .placements import hypothesis as placed_hypothesis
from .templates import explain
from .verdict import BORDERLINE, FAITHFUL, VERDICT_SAMPLES, check_seed, evaluation_batch

#: An atom belongs to a form when its ``|β|`` is at least this share of its cell's largest.
ATOM_SHARE = 0.25



#: The sizes a proposed form is checked exact at (``register`` then checks its whole range).
DISCOVER_DS = (3, 5, 10)

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


@dataclass(frozen=True)
class Proposal:
    """One form, its runs, its exactness as a construction and its faithfulness on its runs."""

    name: str
    form: Form
    runs: tuple[str, ...]
    errors: tuple[tuple[float, float], ...]  # (β, largest error over DISCOVER_DS), β increasing
    tests: tuple[Faithfulness, ...]  # the form tested on each run, in ``runs`` order
    verdicts: tuple[str, ...]

    @property
    def exact_from(self) -> float | None:
        """The first β from which every larger β tried is exact; None when it is not exact."""
        first = None
        for beta, err in self.errors:
            first = (first or beta) if err < constructions.REGISTER_TOL else None
        return first

    @property
    def best_error(self) -> float:
        return min(err for _, err in self.errors)

    @property
    def faithful_runs(self) -> int:
        return sum(v == FAITHFUL for v in self.verdicts)

    def to_dict(self) -> dict:
        return {"name": self.name, "cells": [list(c) for c in self.form.cells],
                "read": self.form.read, "attention_dir": self.form.attention_dir,
                "layout": self.form.layout, "readout": self.form.readout, "runs": list(self.runs),
                "errors": [list(e) for e in self.errors], "exact_from": self.exact_from,
                "best_error": self.best_error, "verdicts": list(self.verdicts),
                "rows_exact": [t.circuit.rows_exact for t in self.tests],
                "loss_recovered": [t.circuit.loss_recovered for t in self.tests]}


@dataclass(frozen=True)
class Discovery:
    """Every model's form (``None``: named, borderline, or no faithful minimal circuit, with the
    reason) and the proposals, most runs first."""

    forms: dict[str, Form | None]
    reasons: dict[str, str]
    proposals: tuple[Proposal, ...]

    def to_dict(self) -> dict:
        return {"reasons": self.reasons, "proposals": [p.to_dict() for p in self.proposals]}


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
    layout = "scratch" if any(s.kind == "S" for s in cfg.layout.segments) else "plain"
    return Form(cfg.attention_dir, layout, cfg.readout, tuple(sorted(kept)), _read_text(model, read))


def _errors(form: Form, name: str) -> tuple[tuple[float, float], ...]:
    spec = form.spec(name)
    out = []
    for beta in constructions.REGISTER_BETAS:
        try:
            err = max(constructions.max_error(spec, d, beta) for d in DISCOVER_DS)
        except ValueError:
            err = float("inf")
        out.append((beta, err))
    return tuple(out)


def discover(models: Mapping[str, DisentangledModel], *, n: int = VERDICT_SAMPLES,
             seed: int = 0, min_runs: int = 2, progress=None,
             known: Mapping[str, Mechanism] | None = None) -> Discovery:
    """Group the unnamed models' minimal circuits into forms and propose each form held by at least
    ``min_runs`` models (module docstring); every model is judged on ``n`` samples from ``seed``,
    except those in ``known`` (mechanisms measured so already, e.g. by a sweep). ``progress``: an
    optional callable wrapping the iteration (e.g. ``tqdm``)."""
    if not isinstance(min_runs, int) or min_runs < 1:
        raise ValueError(f"min_runs must be an integer >= 1, got {min_runs!r}")
    check_seed(seed)
    forms, reasons, batches, where = {}, {}, {}, {}
    items = list(models.items())
    for key, model in (progress(items) if progress else items):
        check_disentangled(model, f"models[{key!r}]")
        batches[key] = evaluation_batch(model, n, seed)
        if known is not None and key in known:
            mech = known[key]
        else:
            mech = mechanism(model, batches[key])
        forms[key] = None
        if mech.name is not None:
            reasons[key] = f"named {mech.name}"
        elif mech.verdict == BORDERLINE:
            reasons[key] = BORDERLINE
        elif not mech.minimal.faithful:
            reasons[key] = "no faithful minimal circuit"
        elif model.cfg.heads != (1, 1):
            forms[key], where[key] = _unplaced_form(model, mech.minimal.cells, mech.minimal.read)
            reasons[key] = "unnamed"
        else:
            forms[key] = form_of(model, mech.minimal.cells, mech.minimal.read)
            reasons[key] = "unnamed"
    groups: dict[Form, list[str]] = defaultdict(list)
    for key, form in forms.items():
        if form is not None:
            groups[form].append(key)
    proposals = []
    ranked = sorted(groups.items(), key=lambda g: (-len(g[1]), g[0].text))
    for i, (form, keys) in enumerate([g for g in ranked if len(g[1]) >= min_runs]):
        name = f"discovered_{form.attention_dir}_{i + 1}"
        tests = tuple(Tester(models[k], batches[k]).test(
            _hypothesis(models[k], form, name, where.get(k)), minimality=False) for k in keys)
        proposals.append(Proposal(name, form, tuple(keys), _errors(form, name), tests,
                                  tuple(verdict_of(t) for t in tests)))
    return Discovery(forms, reasons, tuple(proposals))


def _hypothesis(model, form: Form, name: str, where=None):
    """The form as a claim about ``model``: as registered, or at the run's placement ``where``
    (``(layers, heads)``)."""
    from .hypothesis import as_hypothesis

    if where is None:
        return as_hypothesis(model, form.spec(name))
    layers, heads = where
    return placed_hypothesis(model, Placement(name, layers, heads, model.cfg.heads,
                                              custom=form.spec(name)))


def _unplaced_form(model: DisentangledModel, cells, read: tuple[str, ...]):
    """``(form, (layers, heads))``: the form of a circuit on one head of each of two layers of a
    deeper or wider model, in a two-layer one-head model's block names (``maths.placement.unplace``),
    so that runs holding the same circuit on other layers or heads share a form; ``(form, None)``
    for any other circuit, written on the model's own layers and heads (a construction of that
    shape)."""
    form = form_of(model, cells, read)
    units = {(c.layer, c.head) for c in form.cells}
    if len(units) != 2 or len({layer for layer, _ in units}) != 2:
        return form, None
    terms = parse_read(form.read)
    found = unplace(form.cells, tuple(block for block, _ in terms), model.cfg.heads)
    if found is None:
        return form, None
    layers, chosen, placed, blocks = found
    text = " ".join(f"{'-' if sign < 0 else '+'} {b}" for b, (_, sign) in zip(blocks, terms))
    text = text[2:] if text.startswith("+ ") else text
    return (Form(form.attention_dir, form.layout, form.readout, tuple(sorted(set(placed))), text),
            (layers, chosen))


def table(discovery: Discovery) -> str:
    """A markdown table of the proposals (or, when there are none, one line saying how the unnamed
    circuits fell apart and by what grouping), then a line per reason models were left out."""
    forms = [f for f in discovery.forms.values() if f is not None]
    if not discovery.proposals:
        lines = [f"nothing to propose: the {len(forms)} unnamed runs with a faithful minimal circuit "
                 f"hold {len(set(forms))} forms when grouped by every cell, template, sign and "
                 "read-out (up to the gauge), and no form is held by enough runs; a coarser grouping "
                 "may join them"]
    else:
        lines = ["| form | runs | cells | exact from β | rows exact / loss recovered on its runs |",
                 "| --- | --- | --- | --- | --- |"]
    for p in discovery.proposals:
        exact = (f"{p.exact_from:g}" if p.exact_from is not None
                 else f"not exact (best error {p.best_error:.2g})")
        scores = ", ".join(f"{t.circuit.rows_exact:.1%} / {_pct(t.circuit.loss_recovered)}"
                           for t in p.tests)
        lines.append(f"| `{p.name}` | {len(p.runs)} ({p.faithful_runs} faithful) | {p.form.text} "
                     f"(read {p.form.read}) | {exact} | {scores} |")
    counts: dict[str, int] = defaultdict(int)
    for reason in discovery.reasons.values():
        counts[reason] += 1
    lines += ["", "models: " + ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))]
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"
