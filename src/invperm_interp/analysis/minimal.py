"""The smallest faithful circuit: the fewest cells of ``A`` whose circuit-only model is faithful.

Candidates are the cells the model's atoms occupy (``explain``) and the blocks of ``W_U`` holding at
least ``READ_SHARE`` of its norm². Faithfulness is not monotone in the cells (removing a cell can
help), so no cheap bound proves a set smallest: the exact search tries *every* set of cells of
size 1, 2, … in the order of the cells' functional effect, each with every read-out option (all
candidate blocks, the strongest block alone, and the blocks of each answer found otherwise), and
stops at the first size with a faithful set. Each set is screened on the first ``SCREEN_SAMPLES``
samples of the batch: one whose interval (``SCREEN_Z`` standard errors) lies wholly below a
threshold is rejected; the rest are scored on the first ``SEARCH_SAMPLES``, and the answer on all
of it. When the search finishes, no smaller set of candidate cells, with any of those read-outs, is
faithful on the search samples (``optimal=True``). It runs when there are at most
``MAX_EXACT_CELLS`` candidates and either a faithful set is known or
all candidates together recover at least ``EXACT_GATE`` of the loss (a model they do not explain
is not searched); when the sets smaller than the greedy answer number more than
``max_evaluations``, only those of fewer than ``PARTIAL_BELOW`` cells are tried (``optimal=False``).
Without the exact search, or when it finds nothing smaller, the answer is the greedy search's:
cells added in decreasing effect until faithful, then pruned, also started from each known faithful
hypothesis (``starts``). The read-out blocks of the answer are pruned last; they do not count in its size.

Every set is scored through :func:`score_subsets`, the one place a batched evaluator plugs in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb

from ..model.disentangled import DisentangledModel
from ..task import Batch
from .faithfulness import Score, Tester, read_score
from .hypothesis import AtomCell, Hypothesis, read_cells
from .projection import project
from .templates import Circuit, explain
from .verdict import RULE, Rule

#: ``W_U`` blocks holding at least this share of ``||W_U||²`` are candidates of a minimal circuit.
READ_SHARE = 0.01
#: The exact search runs on at most this many candidate cells (its budget is the real bound) …
MAX_EXACT_CELLS = 32
#: … scores at most this many sets of cells …
MAX_EVALUATIONS = 3000
#: … on this many samples of the batch, after a screen on fewer (a set is rejected when its
#: interval of ``SCREEN_Z`` standard errors lies below a threshold). At 32 samples a set costs
#: about half what it costs at 128 (the rest is its fit), and on census runs no more sets pass it
#: to be scored on 512 …
SEARCH_SAMPLES = 512
SCREEN_SAMPLES = 32


@dataclass(frozen=True)
class ExactSearch:
    """The exact search's budget: at most ``max_cells`` candidate cells, ``max_evaluations``
    scored sets (module docstring)."""

    max_cells: int = MAX_EXACT_CELLS
    max_evaluations: int = MAX_EVALUATIONS


EXACT = ExactSearch()
SCREEN_Z = 3.0
#: When every smaller set would not fit the budget, only sets below this size are tried (a proof
#: is out of reach; a much smaller circuit than the greedy one, as 2 cells against 25, is not) …
PARTIAL_BELOW = 3
#: … and runs without a known faithful set only if all candidates recover this share of the loss.
EXACT_GATE = 0.5
#: Sets scored per call of :func:`score_subsets`.
CHUNK = 64


@dataclass(frozen=True)
class MinimalCircuit:
    """The smallest set of cells (and read-out blocks) found whose circuit-only model is faithful.

    ``faithful`` is False when even every cell the model's atoms occupy is not: then ``cells``
    holds them all. ``weight_share``: the share of the gauge-fixed weights the cells carry.
    ``optimal``: the exact search proved no smaller set of candidate cells is faithful;
    ``evaluations``: sets of cells it scored; ``candidates``: the cells it chose among;
    ``at_least``: the size every faithful set of candidate cells has at least, as far as the exact
    search proved it (every set of fewer cells tried, with each read-out option, none faithful; 1
    when it tried none): the gap to the answer is ``size - at_least`` (0 when ``optimal``)."""

    cells: tuple[AtomCell, ...]
    read: tuple[str, ...]
    faithful: bool
    score: Score
    weight_share: float
    optimal: bool = False
    evaluations: int = 0
    candidates: int = 0
    at_least: int = 1

    @property
    def size(self) -> int:
        return len(self.cells)

    @property
    def proof(self) -> str:
        """``"provably smallest"``, or how far the exact search's proof reached (``"no faithful set
        of fewer than 3 cells"``); empty when it proved nothing."""
        if self.optimal:
            return "provably smallest"
        return f"no faithful set of fewer than {self.at_least} cells" if self.at_least > 1 else ""

    @property
    def gap(self) -> int | None:
        """Cells the answer may have beyond the smallest faithful set (``None``: not faithful)."""
        return self.size - self.at_least if self.faithful else None

    def to_dict(self) -> dict:
        return {"cells": [list(c) for c in self.cells], "read": list(self.read),
                "faithful": self.faithful, "score": self.score.to_dict(),
                "weight_share": self.weight_share, "size": self.size, "optimal": self.optimal,
                "evaluations": self.evaluations, "candidates": self.candidates,
                "at_least": self.at_least}

    @classmethod
    def from_dict(cls, data: dict) -> MinimalCircuit:
        return cls(read_cells(data["cells"]), tuple(data["read"]), data["faithful"],
                   read_score(data["score"]), data["weight_share"], data.get("optimal", False),
                   data.get("evaluations", 0), data.get("candidates", 0),
                   data.get("at_least", len(data["cells"]) if data.get("optimal") else 1))


def score_subsets(tester: Tester, hypotheses: Sequence[Hypothesis]) -> list[Score]:
    """The circuit-only model's :class:`Score` for each hypothesis, on the tester's batch (run
    together as batched forwards under zero ablation: :meth:`Tester.circuits`)."""
    return tester.circuits(list(hypotheses))


def candidate_cells(circuit: Circuit) -> list[AtomCell]:
    """One cell per (layer, head, query, key) the atoms occupy, labelled by its largest atom."""
    best: dict[tuple, tuple[float, AtomCell]] = {}
    for a in circuit:
        key = (a.layer, a.head, a.query, a.key)
        if key not in best or a.share > best[key][0]:
            best[key] = (a.share, (a.layer, a.head, a.query, a.key, a.label))
    return [cell for _, cell in best.values()]


def read_candidates(model: DisentangledModel) -> list[str]:
    """Blocks of the final stream holding at least ``READ_SHARE`` of ``||W_U||²``."""
    W = model.unembed.W_U.detach().double()
    total = float(W.pow(2).sum()) or 1.0
    blocks = model.stream.blocks(model.cfg.n_layers)
    return [b.name for b in blocks if float(W[b.slice].pow(2).sum()) / total >= READ_SHARE]


def _hyp(cells, read) -> Hypothesis:
    return Hypothesis("minimal", tuple(cells), tuple(read), "cells")


class _Search:
    """The state the searches share: the tester, the rule and a count of sets scored."""

    def __init__(self, tester: Tester, reads: list[str], rule: Rule):
        self.tester, self.reads, self.evaluations = tester, reads, 0
        self.rule = rule
        self.tried_below = 1  # every set of fewer cells was tried (exact), none faithful

    def scores(self, sets: Sequence[tuple[Sequence[AtomCell], Sequence[str]]]) -> list[Score]:
        self.evaluations += len(sets)
        return score_subsets(self.tester, [_hyp(c, r) for c, r in sets])

    def ok(self, s: Score) -> bool:
        return self.rule.is_faithful(s)

    def plausible(self, s: Score) -> bool:
        """Not ruled out: neither interval of ``SCREEN_Z`` standard errors lies below its threshold."""
        return (s.rows_exact + SCREEN_Z * s.rows_se >= self.rule.rows and s.loss_recovered is not None
                and s.loss_recovered + SCREEN_Z * (s.recovered_se or 0.0) >= self.rule.recovered)

    def effects(self, cells: list[AtomCell], full: Score) -> dict[AtomCell, float]:
        """MSE rise when each cell alone leaves the circuit of all of them."""
        rest = [[c for c in cells if c != cell] for cell in cells]
        return {cell: s.mse - full.mse for cell, s in
                zip(cells, self.scores([(r, self.reads) for r in rest]))}

    def prune(self, cells: list[AtomCell], reads: list[str], score: Score, order: list):
        """Drop each item (cells in ``order``, then read blocks) that the circuit can do without."""
        for item in [*order, *reads]:
            is_cell = item in cells
            trial_cells = [c for c in cells if c != item] if is_cell else cells
            trial_reads = reads if is_cell else [r for r in reads if r != item]
            if not trial_cells or not trial_reads:
                continue
            (trial,) = self.scores([(trial_cells, trial_reads)])
            if self.ok(trial):
                cells, reads, score = trial_cells, trial_reads, trial
        return cells, reads, score

    def from_starts(self, starts: Sequence[Hypothesis], reads: list[str]) -> list:
        """Each start that is faithful (one cell per block pair, its read-out or ``reads``),
        pruned in increasing effect of its cells."""
        found = []
        for start in starts:
            unique = list({c[:4]: c for c in reversed(start.cells)}.values())
            start_reads = list(start.read) if start.read is not None else list(reads)
            (score,) = self.scores([(unique, start_reads)])
            if self.ok(score):
                rest = self.effects(unique, score)
                found.append(self.prune(unique, start_reads, score, sorted(unique, key=rest.get)))
        return found

    def greedy(self, cells: list[AtomCell], effect: dict, screen: _Search):
        """The first faithful prefix of the cells in decreasing effect, pruned. Each prefix is
        first scored by ``screen`` (fewer samples, the same fits); one it rules out
        (:meth:`plausible`) is not scored on the whole batch. Each prefix tried counts as one
        evaluation, as without the screen."""
        ranked = sorted(cells, key=lambda c: -effect[c])
        for n in range(1, len(ranked) + 1):
            chosen = ranked[:n]
            if screen.tester is not self.tester:
                (first,) = score_subsets(screen.tester, [_hyp(chosen, self.reads)])
                if not screen.plausible(first):
                    self.evaluations += 1
                    continue
            (score,) = self.scores([(chosen, self.reads)])
            if self.ok(score):
                return self.prune(chosen, list(self.reads), score,
                                  sorted(chosen, key=lambda c: effect[c]))
        return None

    def exact(self, ranked: list[AtomCell], options: list[list[str]], below: int, budget: int,
              confirm: _Search):
        """The first faithful set among all sets of ``ranked`` of size 1, 2, … ``below - 1``, each
        with each read-out of ``options`` (the best by loss recovered at that size), and whether
        every such size was exhausted. Sets are screened here and scored by ``confirm``;
        :attr:`tried_below` ends as the smallest size not tried in full."""
        self.tried_below = 1
        for k in range(1, below):
            if comb(len(ranked), k) * len(options) > budget - self.evaluations:
                return None, False
            sets = [(c, r) for c in combinations(ranked, k) for r in options]
            found = []
            for i in range(0, len(sets), CHUNK):
                chunk = sets[i:i + CHUNK]
                maybe = [c for s, c in zip(self.scores(chunk), chunk) if self.plausible(s)]
                if maybe:
                    found += [(s, c) for s, c in zip(confirm.scores(maybe), maybe) if confirm.ok(s)]
            if found:
                score, (chosen, read) = max(found, key=lambda f: f[0].loss_recovered)
                return (list(chosen), list(read), score), True
            self.tried_below = k + 1
        return None, True


def minimal_circuit(model: DisentangledModel, batch: Batch, *,
                    circuit: Circuit | None = None, tester: Tester | None = None,
                    rule: Rule = RULE,
                    starts: Sequence[Hypothesis] = (),
                    fallback: Sequence[Hypothesis] = (),
                    exact: ExactSearch | None = EXACT) -> MinimalCircuit:
    """The fewest cells of ``A`` (and blocks of ``W_U``) whose circuit-only model is faithful
    (module docstring). ``starts``: hypotheses known to be faithful, pruned as further answers of
    the greedy search; ``fallback``: more such hypotheses, pruned only when neither the greedy
    search nor ``starts`` found a faithful set (a construction's faithful circuit whose signs
    disagree with the model's: not its name, still a circuit); ``exact``: the exact search's
    budget (``None`` skips it)."""
    tester = tester or Tester(model, batch)
    circuit = circuit if circuit is not None else explain(model)
    cells, reads = candidate_cells(circuit), read_candidates(model)
    search = _Search(tester, reads, rule)
    confirm = _Search(tester.head(SEARCH_SAMPLES), reads, rule)
    screen = _Search(confirm.tester.head(SCREEN_SAMPLES), reads, rule)
    (full,) = search.scores([(cells, reads)])
    effect = search.effects(cells, full) if cells else {}
    found = []
    if cells and search.ok(full):
        found.append(search.greedy(cells, effect, screen))
    found += search.from_starts(starts, reads)
    found = [f for f in found if f is not None]
    if not found and fallback:
        found = search.from_starts(fallback, reads)
        starts = [*starts, *fallback]  # their read-outs become options of the exact search
    bound = min((len(f[0]) for f in found), default=len(cells) + 1)
    optimal, at_least = False, 1
    gate = bool(found) or (full.loss_recovered or 0.0) >= EXACT_GATE
    if exact is not None and gate and 0 < len(cells) <= exact.max_cells:
        strongest = [max(reads, key=lambda b: _read_share(model, b))] if reads else []
        options = [list(reads), strongest, *(list(f[1]) for f in found),
                   *(list(s.read) for s in starts if s.read is not None)]
        options = [list(o) for o in dict.fromkeys(tuple(o) for o in options if o)]
        ranked = sorted(cells, key=lambda c: -effect[c])
        total = sum(comb(len(ranked), k) for k in range(1, bound)) * len(options)
        # a proof out of reach: only look for a much smaller circuit than the greedy one
        below = bound if total <= exact.max_evaluations else min(bound, PARTIAL_BELOW)
        better, exhausted = screen.exact(ranked, options, below, exact.max_evaluations, confirm)
        optimal = proved_smallest(better is not None, exhausted, below, bound)
        at_least = screen.tried_below
        search.evaluations += screen.evaluations
        if better is not None:
            chosen, read, _ = better
            (score,) = search.scores([(chosen, read)])
            if search.ok(score):
                found.append(search.prune(chosen, read, score, []))
            else:  # faithful on the search samples only: no proof on the whole batch
                optimal = False
    if not found:
        return _result(model, _hyp(cells, reads), full, False, optimal, search.evaluations,
                       len(cells), at_least)
    chosen, read, score = min(found, key=lambda f: (len(f[0]), -(f[2].loss_recovered or 0.0)))
    at_least = len(chosen) if optimal else min(at_least, len(chosen))
    return _result(model, _hyp(chosen, read), score, True, optimal, search.evaluations, len(cells),
                   at_least)


def proved_smallest(found: bool, exhausted: bool, below: int, bound: int) -> bool:
    """Whether the exact search proved its answer smallest: it tried every set of each size it
    reached (``exhausted``) and either found a faithful set (every smaller size was tried first)
    or searched every size below the greedy answer's ``bound`` (not only those below ``below``)."""
    return exhausted and (found or below == bound)


def _read_share(model: DisentangledModel, block: str) -> float:
    W = model.unembed.W_U.detach().double()
    return float(W[model.stream.slice(block, model.cfg.n_layers)].pow(2).sum())


def _result(model, hyp: Hypothesis, score: Score, faithful: bool, optimal: bool,
            evaluations: int, candidates: int, at_least: int) -> MinimalCircuit:
    share = project(model, hyp).weight_share if hyp.cells else 0.0
    return MinimalCircuit(hyp.cells, hyp.read or (), faithful, score, share, optimal, evaluations,
                          candidates, at_least)
