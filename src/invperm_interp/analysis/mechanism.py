"""Which mechanism a model implements, by one rule: the construction whose circuit runs on its own.

:func:`mechanism` tests every working registry construction that fits the model (layout, attention,
read-out rows) with :func:`analysis.faithfulness.faithfulness` and names the one whose
circuit-only model is **faithful** (:func:`is_faithful`), preferring the fewest atoms, then the
most loss recovered. A cell test alone cannot tell ``I`` from ``-I`` in one cell (the complement
form ``theorem3_complement`` and ``theorem3_two_block`` share their cells), so the named
construction's templates must also fit the weights with positive β
(``Faithfulness.signs_agree``). When none qualifies, the name is ``"none"`` and
:func:`minimal_circuit` says what the model does instead. ``invperm analyze``, the HTML report
and ``analyses/`` all use this rule.

The thresholds (``FAITHFUL_ROWS`` = 0.99, ``FAITHFUL_RECOVERED`` = 0.8) come from the census of
trained models (``analyses/census.py``, ``assets/census.md``, 129 runs): the constructions the rule
names get 99.35–100% of rows exact and recover 0.80–1.0 of the loss (bidirectional: at least 0.92),
while every other (construction, run) pair whose templates' signs agree gets at most 76% of rows
exact, except on the causal scratch model, where ``theorem3_two_block``'s cells get 98–99.4% of
rows with 0.74–0.79 of the loss in 6 runs: there the boundary is not sharp, and the rule calls
them "none" (``theorem3_complement``'s cells, which share its cells, reach 97–99.97% of rows
there, with templates of the wrong sign). The
circuit-only MSE sits well above the model's own (the remaining weights sharpen the same
lookups), so faithfulness is judged relative to the baseline ``d/4`` (everything ablated), not
against an absolute MSE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..maths import constructions
from ..model.hooked import HookedDisentangledTransformer
from ..task import Batch
from .compare import candidates
from .faithfulness import Faithfulness, Score, Tester
from .hypothesis import AtomCell, Hypothesis, as_hypothesis
from .templates import Circuit, explain

#: A circuit-only model is faithful when at least this share of its rows is exactly right …
FAITHFUL_ROWS = 0.99
#: … and it recovers at least this fraction of the loss, baseline ``d/4`` (0.5 everywhere).
FAITHFUL_RECOVERED = 0.8
#: ``W_U`` blocks holding at least this share of ``||W_U||²`` are candidates of a minimal circuit.
READ_SHARE = 0.01
#: Greedy search tries this many prefixes of its ranked candidates per batched forward.
PREFIX_CHUNK = 4


def is_faithful(score: Score, rows: float = FAITHFUL_ROWS, recovered: float = FAITHFUL_RECOVERED) -> bool:
    """The rule's verdict on a circuit-only model's :class:`Score`."""
    return (score.rows_exact >= rows and score.loss_recovered is not None
            and score.loss_recovered >= recovered)


def is_minimal(result: Faithfulness) -> bool:
    """Faithful, and no longer faithful with any one of its cells removed."""
    return is_faithful(result.circuit) and all(not is_faithful(s) for s in result.minimality)


@dataclass(frozen=True)
class MinimalCircuit:
    """The smallest set of cells (and read-out blocks) found whose circuit-only model is faithful.

    ``faithful`` is False when even every cell the model's atoms occupy is not: then ``cells``
    holds them all. ``weight_share``: the share of the gauge-fixed weights the cells carry."""

    cells: tuple[AtomCell, ...]
    read: tuple[str, ...]
    faithful: bool
    score: Score
    weight_share: float

    @property
    def size(self) -> int:
        return len(self.cells)

    def to_dict(self) -> dict:
        return {"cells": [list(c) for c in self.cells], "read": list(self.read),
                "faithful": self.faithful, "score": vars(self.score),
                "weight_share": self.weight_share, "size": self.size}

    @classmethod
    def from_dict(cls, data: dict) -> MinimalCircuit:
        return cls(tuple(tuple(c) for c in data["cells"]), tuple(data["read"]), data["faithful"],
                   Score(**data["score"]), data["weight_share"])


def _candidate_cells(circuit: Circuit) -> list[AtomCell]:
    """One cell per (layer, head, query, key) the atoms occupy, labelled by its largest atom."""
    best: dict[tuple, tuple[float, AtomCell]] = {}
    for a in circuit:
        key = (a.layer, a.head, a.query, a.key)
        if key not in best or a.share > best[key][0]:
            best[key] = (a.share, (a.layer, a.head, a.query, a.key, a.label))
    return [cell for _, cell in best.values()]


def _read_candidates(model: HookedDisentangledTransformer) -> list[str]:
    W = model.unembed.W_U.detach().double()
    total = float(W.pow(2).sum()) or 1.0
    blocks = model.stream.blocks(model.cfg.n_layers)
    return [b.name for b in blocks if float(W[b.slice].pow(2).sum()) / total >= READ_SHARE]


def minimal_circuit(model: HookedDisentangledTransformer, batch: Batch, *,
                    circuit: Circuit | None = None, tester: Tester | None = None,
                    rows: float = FAITHFUL_ROWS, recovered: float = FAITHFUL_RECOVERED,
                    starts: Sequence[Hypothesis] = ()) -> MinimalCircuit:
    """The fewest cells of ``A`` (and blocks of ``W_U``) whose circuit-only model is faithful.

    Candidates: the cells that the atoms of ``circuit`` (default ``explain(model)``) occupy, and the
    blocks holding at least ``READ_SHARE`` of ``W_U``. Greedy by functional effect: each candidate's
    effect is the MSE rise when it alone is removed from the circuit of all candidates; candidates
    are added in decreasing effect until the circuit is faithful, then each kept one is dropped, in
    increasing effect, if the circuit stays faithful without it (pruning). Greedy can stop at a
    larger set than needed, so each of ``starts`` (hypotheses already known to be faithful, such as
    the constructions ``mechanism`` found) is pruned the same way, and the smallest result wins.
    """
    tester = tester or Tester(model, batch)
    circuit = circuit if circuit is not None else explain(model)
    cells, reads = _candidate_cells(circuit), _read_candidates(model)
    items = [("cell", c) for c in cells] + [("read", r) for r in reads]

    def hyp(chosen) -> Hypothesis:
        return Hypothesis("minimal", tuple(v for k, v in chosen if k == "cell"),
                          tuple(v for k, v in chosen if k == "read"), "cells")

    def ok(s: Score) -> bool:
        return is_faithful(s, rows, recovered)

    def effects(chosen, score: Score) -> dict:
        less = tester.circuits([hyp([i for i in chosen if i != item]) for item in chosen])
        return {item: s.mse - score.mse for item, s in zip(chosen, less)}

    def prune(chosen, score: Score, effect: dict):
        for item in sorted(chosen, key=lambda i: effect[i]):
            rest = [i for i in chosen if i != item]
            trial = tester.circuit(hyp(rest)) if rest else None
            if trial is not None and ok(trial):
                chosen, score = rest, trial
        return chosen, score

    def first_faithful_prefix(order):
        """Greedy: the shortest faithful prefix of ``order`` (prefixes tried a few at a time)."""
        for start in range(0, len(order), PREFIX_CHUNK):
            ends = range(start + 1, min(start + PREFIX_CHUNK, len(order)) + 1)
            for end, s in zip(ends, tester.circuits([hyp(order[:end]) for end in ends])):
                if ok(s):
                    return order[:end], s
        return list(order), s

    found = []
    starts = list(starts)
    start_items = []
    for start in starts:
        unique = {c[:4]: c for c in reversed(start.cells)}  # one item per cell, its first label
        start_items.append([("cell", c) for c in unique.values()]
                           + [("read", r) for r in start.read or ()])
    full, *start_scores = tester.circuits([hyp(items)] + [hyp(c) for c in start_items])
    if items and ok(full):
        effect = effects(items, full)
        chosen, score = first_faithful_prefix(sorted(items, key=lambda i: -effect[i]))
        found.append(prune(chosen, score, effect))
    for chosen, score in zip(start_items, start_scores):
        if ok(score):
            found.append(prune(chosen, score, effects(chosen, score)))
    if not found:
        return _result(tester, hyp(items), full, False)
    chosen, score = min(found, key=lambda f: sum(k == "cell" for k, _ in f[0]))
    return _result(tester, hyp(chosen), score, True)


def _result(tester: Tester, hyp: Hypothesis, score: Score, faithful: bool) -> MinimalCircuit:
    share = tester.project(hyp, betas=False).weight_share if hyp.cells else 0.0
    return MinimalCircuit(hyp.cells, hyp.read or (), faithful, score, share)


@dataclass(frozen=True)
class Mechanism:
    """The rule's answer: ``name`` (a registry construction, or ``"none"``), its faithfulness test
    (``None`` for ``"none"``), every fitting working construction's test (best first) and the
    minimal circuit."""

    name: str
    faithfulness: Faithfulness | None
    tested: tuple[Faithfulness, ...]
    minimal: MinimalCircuit
    rows: float = FAITHFUL_ROWS
    recovered: float = FAITHFUL_RECOVERED

    def __str__(self) -> str:
        if self.faithfulness is None:
            m = self.minimal
            found = "faithful" if m.faithful else "not faithful even with every atom's cell"
            return (f"none of the registry; minimal circuit: {m.size} cells ({found}, rows exact "
                    f"{m.score.rows_exact:.1%}, loss recovered {_pct(m.score.loss_recovered)})")
        f = self.faithfulness
        return (f"{self.name}: its {f.size_text} alone get {f.circuit.rows_exact:.1%} of rows "
                f"exact, recover {_pct(f.circuit.loss_recovered)} of the loss (MSE "
                f"{f.circuit.mse:.3g} vs the model's {f.model.mse:.3g}, baseline {f.baseline:g}); "
                f"without them: MSE {f.without.mse:.3g}")

    def to_dict(self) -> dict:
        return {"name": self.name, "rows": self.rows, "recovered": self.recovered,
                "faithfulness": None if self.faithfulness is None else self.faithfulness.to_dict(),
                "tested": [t.to_dict() for t in self.tested], "minimal": self.minimal.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> Mechanism:
        f = data["faithfulness"]
        return cls(data["name"], None if f is None else Faithfulness.from_dict(f),
                   tuple(Faithfulness.from_dict(t) for t in data["tested"]),
                   MinimalCircuit.from_dict(data["minimal"]), data["rows"], data["recovered"])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def mechanism(model: HookedDisentangledTransformer, batch: Batch, *, circuit: Circuit | None = None,
              tester: Tester | None = None, rows: float = FAITHFUL_ROWS,
              recovered: float = FAITHFUL_RECOVERED) -> Mechanism:
    """Name the model's mechanism by the one rule (module docstring); ``circuit``/``tester``
    reuse an ``explain`` result and a clean run already computed."""
    if not isinstance(model, HookedDisentangledTransformer):
        raise ValueError(f"model must be a HookedDisentangledTransformer, got {type(model).__name__}")
    tester = tester or Tester(model, batch)
    names = [n for n in candidates(model) if constructions.get(n).works]
    tested = tester.test_many([as_hypothesis(model, n) for n in names])
    good = [t for t in tested if t.signs_agree and is_faithful(t.circuit, rows, recovered)]
    rank = lambda t: (t not in good, t.n_atoms, -(t.circuit.loss_recovered or -1e9))  # noqa: E731
    tested.sort(key=rank)
    starts = [Hypothesis(t.hypothesis, t.cells, t.read, t.unit) for t in good]
    minimal = minimal_circuit(model, batch, circuit=circuit, tester=tester, rows=rows,
                              recovered=recovered, starts=starts)
    best = good and min(good, key=rank)
    return Mechanism(best.hypothesis if best else "none", best or None, tuple(tested), minimal,
                     rows, recovered)
