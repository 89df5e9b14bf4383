"""Which mechanism a model implements, by one rule: the construction whose circuit runs on its own.

:func:`mechanism` tests every working registry construction that fits the model (layout, attention,
read-out rows) with :func:`analysis.faithfulness.faithfulness`: each construction's cells, with
their signs, at the model's own fitted per-cell β (not the construction's weights: trained cells
carry constant offsets such as ``3.6·I − 1.2·1`` that a construction's single β does not). Its
verdict (:func:`analysis.verdict.judge`) compares the confidence intervals of rows exact and loss
recovered with the thresholds. A cell test alone cannot tell ``I`` from ``-I`` in one cell
(``theorem3_superposed`` and its complement twin, or ``theorem3_complement`` and
``theorem3_two_block``, differ only in signs and in position-only cells, which mean and resample
ablation keep: ``analysis.ties``), so the construction's templates must also fit the weights with
positive β where they matter (``Faithfulness.signs_agree``).

The name is the faithful construction (signs agreeing) that recovers the most loss (to 1e-4; then
the fewest atoms); the others that pass are listed (``also_faithful``), and those the batch cannot
rank below it (their loss-recovered intervals overlap, ``analysis.ties``) are named with it, as a
tie (``tied``; ``"theorem3_two_block = theorem3_two_block_mass"``). When none passes, there is
no name (``None``) and the verdict says why: borderline when one straddles a threshold (the
candidates in ``borderline``: the batch cannot tell), else none, and :func:`minimal_circuit` says
what the model does instead. ``invperm analyze``, the HTML report and ``analyses/`` all use this rule.

On a model of another shape than a construction's own, it is tested at its best-weighted
placements on the model's layers and heads (``analysis.placements``; docs/shapes.md) and named by
its placement's label (``"two_block @ L1h0→L3h1"``), the placement kept as a value
(``Mechanism.placement``, each test's ``placement``); a faithful placement on one head comes before
one on a sum of heads.
A model no construction can fit gets no name, with the reason in ``Mechanism.untested``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ..maths import registry
from ..maths.placement import Placement, placements
from ..model.disentangled import DisentangledModel, check_disentangled
from ..task import Batch
from .controls import cannot_reject, empty_claim
from .faithfulness import Ablation, Faithfulness, Tester
from .hypothesis import Hypothesis
from .minimal import EXACT, MinimalCircuit, minimal_circuit
from .placements import candidate_placements, fits, hypothesis, untested_reason
from .templates import Circuit
from .ties import tied_with, with_paired
from .verdict import (
    BORDERLINE,
    FAITHFUL,
    FAITHFUL_RECOVERED,
    FAITHFUL_ROWS,
    NONE,
    NOT_FAITHFUL,
    RULE,
    UNTESTABLE,
    Answer,
    Rule,
    is_faithful,
    score_text,
)

__all__ = ["FAITHFUL_RECOVERED", "FAITHFUL_ROWS", "Mechanism", "MinimalCircuit", "cannot_reject",
           "is_faithful", "is_minimal", "mechanism", "minimal_circuit", "name_by_rule", "name_on",
           "test_constructions", "tested_on", "tests_on", "verdict_of"]

#: ``Mechanism.to_dict``'s format, in ``analysis.json`` and in a sweep's ``mechanism.json``
#: (``analysis.sweep_record``): 2 added the verdict's intervals, ``also_faithful``, ``borderline``
#: and the minimal circuit's ``optimal``; 3 the minimal circuit's ``candidates`` and one format for
#: both files; 4 no name (``null``) where no construction is named, the verdict saying why; 5 the
#: constructions tied with the named one (``tied``; answers ``[verdict, name, tied]``). Versions 1 to
#: 4 still read (no ties recorded). A record may hold the empty claim's test (``"empty"``), absent
#: from records written before it was run.
VERSION = 5
#: The rule's tests run on the first this many samples of the batch; a construction whose interval
#: straddles a threshold there is measured again on all of it (clear verdicts need few samples:
#: the constructions that fail get at most 76% of rows).
SCREEN_SAMPLES = 512


def is_minimal(result: Faithfulness, rule: Rule = RULE) -> bool:
    """Faithful, and no longer faithful with any one of its cells removed."""
    return rule.is_faithful(result.circuit) and not any(map(rule.is_faithful, result.minimality))


def verdict_of(test: Faithfulness, rule: Rule = RULE) -> str:
    """:meth:`Rule.judge` on the circuit-only model, ``"not faithful"`` where the signs that matter
    disagree."""
    return rule.judge(test.circuit) if test.signs_agree else NOT_FAITHFUL


@dataclass(frozen=True)
class Mechanism:
    """The rule's answer: ``name`` (a registry construction, or ``None`` when the verdict is
    borderline or none), its faithfulness test (when borderline: the best straddling
    construction's; ``None`` when none), every fitting working construction's test (best first),
    the minimal circuit, the other constructions that pass (``also_faithful``, best first),
    those whose intervals straddle a threshold (``borderline``) and those of ``also_faithful`` tied
    with the named one (``tied``: the batch cannot rank them, ``analysis.ties``)."""

    name: str | None
    faithfulness: Faithfulness | None
    tested: tuple[Faithfulness, ...]
    minimal: MinimalCircuit
    rule: Rule = RULE
    also_faithful: tuple[str, ...] = ()
    borderline: tuple[str, ...] = ()
    untested: str | None = None  # why no construction was tried (the model's shape or layout)
    placement: Placement | None = None  # where the named construction sits, beyond 2 layers × 1 head
    tied: tuple[str, ...] = ()
    #: the empty claim tested as the constructions were (``analysis.controls``): where it is not
    #: rejected the verdict is untestable; ``None`` in records written before it was run
    empty: Faithfulness | None = None

    @property
    def verdict(self) -> str:
        """``"faithful"`` (a construction is named), ``"untestable"`` (the test does not reject the
        empty claim), ``"borderline"`` or ``"none"``."""
        if self.name is not None:
            return FAITHFUL
        if cannot_reject(self.empty, self.rule):
            return UNTESTABLE
        return BORDERLINE if self.borderline else NONE

    @property
    def answer(self) -> Answer:
        return Answer(self.verdict, self.name, self.tied)

    def __str__(self) -> str:
        if self.verdict == UNTESTABLE:
            return (f"untestable: the empty claim (no cell matters) gets "
                    f"{score_text(self.empty.circuit, self.rule.z)}, which this test does not "
                    f"reject, so it cannot tell a right claim from a wrong one on this batch")
        if self.faithfulness is None:
            m = self.minimal
            found = "faithful" if m.faithful else "not faithful even with every atom's cell"
            proof = f", {m.proof}" if m.proof else ""
            why = f"{self.untested}; " if self.untested else ""
            return (f"none of the registry; {why}minimal circuit: {m.size} cells ({found}{proof}, "
                    f"{score_text(m.score, self.rule.z)})")
        f = self.faithfulness
        if self.verdict == BORDERLINE:
            return (f"borderline: {', '.join(self.borderline)}; {f.hypothesis}'s {f.size_text} "
                    f"alone get {score_text(f.circuit, self.rule.z)}, an interval that straddles "
                    f"the rule ({self.rule.rows:.1%} of rows, {self.rule.recovered:.0%} of the loss)")
        also = f"; also faithful: {', '.join(self.also_faithful)}" if self.also_faithful else ""
        tie = f" (tied with {', '.join(self.tied)}: this batch cannot rank them)" if self.tied else ""
        return (f"{self.name}{tie}: its {f.size_text} alone get {score_text(f.circuit, self.rule.z)} (MSE "
                f"{f.circuit.mse:.3g} vs the model's {f.model.mse:.3g}, baseline {f.baseline:g}); "
                f"without them: MSE {f.without.mse:.3g}{also}")

    def to_dict(self) -> dict:
        return {"version": VERSION, "name": self.name, "rows": self.rule.rows,
                "recovered": self.rule.recovered, "z": self.rule.z,
                "also_faithful": list(self.also_faithful),
                "borderline": list(self.borderline),
                "faithfulness": None if self.faithfulness is None else self.faithfulness.to_dict(),
                "tested": [t.to_dict() for t in self.tested], "minimal": self.minimal.to_dict(),
                "tied": list(self.tied),
                **({"untested": self.untested} if self.untested else {}),
                **({"placement": self.placement.to_dict()} if self.placement else {}),
                **({"empty": self.empty.to_dict()} if self.empty is not None else {})}

    @classmethod
    def from_dict(cls, data: dict) -> Mechanism:
        """The record ``to_dict`` wrote (this version or an older ``analysis.json``'s); ``ValueError``
        in one line for a newer one or a sweep's flat record of version 2, which lacks the tested
        constructions' cells and fits."""
        version = data.get("version", 1)
        if version > VERSION:
            raise ValueError(f"a mechanism record of version {version}, newer than this package's "
                             f"{VERSION}: update invperm-interp")
        if "minimal" not in data:
            raise ValueError(f"a sweep's mechanism record of version {version} (flat, without the "
                             "tested constructions' fits): run `invperm sweep GRID` again to "
                             "re-analyse the runs (no training)")
        f = data["faithfulness"]
        name = data["name"] if version > 3 else Answer.of_label(data["name"]).name
        placement = Placement.from_dict(data["placement"]) if data.get("placement") else None
        shape = placement.shape if placement is not None else None
        return cls(name, None if f is None else placed_by_label(Faithfulness.from_dict(f), shape),
                   tuple(placed_by_label(Faithfulness.from_dict(t), shape) for t in data["tested"]),
                   MinimalCircuit.from_dict(data["minimal"]),
                   Rule(data["rows"], data["recovered"], data.get("z", RULE.z)),
                   tuple(data.get("also_faithful", ())), tuple(data.get("borderline", ())),
                   data.get("untested"), placement, tuple(data.get("tied", ())),
                   Faithfulness.from_dict(data["empty"]) if data.get("empty") else None)


def placed_by_label(test: Faithfulness, shape: tuple[int, ...] | None) -> Faithfulness:
    """``test`` with its placement on a model of ``shape`` (heads per layer) where its record did
    not keep one (written before placements were kept as values): the registry placement that
    ``str()`` labels as the test was labelled and whose placed cells are the test's (the label is
    looked up among the placements' own, never taken apart). Unchanged where it has one, where
    ``shape`` is unknown or where none matches (a circuit)."""
    if test.placement is not None or shape is None:
        return test
    found = _placements_by_label(tuple(shape), tuple(registry.REGISTRY.items())).get(test.hypothesis)
    if found is None or {cell for cell, _ in found.cells} != set(test.cells):
        return test
    return replace(test, placement=found)


@functools.lru_cache(maxsize=16)
def _placements_by_label(shape: tuple[int, ...], constructions: tuple) -> dict[str, Placement]:
    """Every placement on ``shape`` of the registry's ``constructions`` (``(name, spec)`` pairs,
    the registry as it is), by its label."""
    return {str(placed): placed for name, _ in constructions if fits(name, shape)
            for placed in placements(name, shape)}


def ranked(tested: list[Faithfulness], rule: Rule = RULE
           ) -> tuple[list[Faithfulness], list[Faithfulness]]:
    """The rule's two lists, best first: the tested constructions judged faithful and those whose
    interval straddles a threshold (borderline). ``tested`` is sorted in place the same way: the
    faithful, then the borderline, then the rest; within each, the most loss recovered (equal to
    1e-4, as two exact forms are, the fewest atoms)."""
    verdicts = {t.hypothesis: verdict_of(t, rule) for t in tested}
    tested.sort(key=lambda t: _order(t, verdicts[t.hypothesis]))
    return ([t for t in tested if verdicts[t.hypothesis] == FAITHFUL],
            [t for t in tested if verdicts[t.hypothesis] == BORDERLINE])


def name_by_rule(tested: list, rule: Rule = RULE, empty=None) -> Answer:
    """The rule's answer from tested constructions (anything with ``hypothesis``, ``circuit`` (a
    :class:`Score`), ``signs_agree`` and ``n_atoms``, e.g. records read back): untestable when
    ``empty`` (the empty claim's test on the same batch, ``analysis.controls``) is not rejected,
    else the best faithful one (with those tied with it), else borderline when one straddles a
    threshold, else none."""
    if cannot_reject(empty, rule):
        return Answer(UNTESTABLE)
    good, straddle = ranked(list(tested), rule)
    if good:
        return Answer(FAITHFUL, good[0].hypothesis, tied_with(good, rule))
    return Answer(BORDERLINE if straddle else NONE)


def paired_with_best(tester: Tester, tested: list[Faithfulness], rule: Rule = RULE
                     ) -> list[Faithfulness]:
    """``tested`` in the rule's order, each faithful test after the best carrying its paired
    difference against it on ``tester``'s samples (``analysis.ties``: what decides a tie)."""
    good, _ = ranked(tested, rule)
    hypotheses = {t.hypothesis: Hypothesis(t.hypothesis, t.cells, t.read, t.unit, t.placement)
                  for t in good}
    return with_paired(tester, tested, good, hypotheses)


def test_empty(tester: Tester, resolve=None, rule: Rule = RULE) -> Faithfulness:
    """The empty claim (no cell matters, ``W_U`` whole) tested on ``tester``'s batch, and again on
    ``resolve``'s (a :class:`Tester` or a function making one) when its interval straddles a
    threshold there."""
    test = tester.test_many([empty_claim()], minimality=False, complete=False)[0]
    if rule.judge(test.circuit) == BORDERLINE and resolve is not None:
        resolve = resolve() if callable(resolve) else resolve
        test = resolve.test_many([empty_claim()], minimality=False, complete=False)[0]
    return test


def test_constructions(model: DisentangledModel, tester: Tester, *,
                       resolve=None, rule: Rule = RULE,
                       minimality: bool = True, complete: bool = True) -> list[Faithfulness]:
    """Every working registry construction that fits the model, at its best-weighted placements
    (``analysis.placements``), tested on ``tester``'s batch; ``resolve`` (a :class:`Tester` on a
    larger batch, or a function making one) measures again those whose interval straddles a
    threshold there. ``minimality``: the per-cell runs, for every test where each construction sits
    as registered (one placement per construction); elsewhere, where placements multiply, only for
    those that pass or straddle (the others' ``minimality`` is empty). Likewise the model less the
    circuit (``without``, a whole-model run: most of the cost on a wide model) is run there only
    for those that pass or straddle and for each construction's best placement
    (the others' ``without`` is ``None``). ``complete=False``: no model less a circuit at all (every
    ``without`` is ``None``; the verdicts do not read it)."""
    placed = candidate_placements(model, tester.fixed)
    hyps = [hypothesis(model, p) for p in placed]
    single = all(p.trivial for p in placed)  # one placement per construction, as registered
    tested = tester.test_many(hyps, minimality and single, complete=single and complete)
    verdicts = [verdict_of(t, rule) for t in tested]
    again = [i for i, v in enumerate(verdicts) if v == BORDERLINE]
    resolved = False
    if again and resolve is not None:
        resolve = resolve() if callable(resolve) else resolve
        if resolve is not tester:
            resolved = True
            for i, t in zip(again, resolve.test_many([hyps[i] for i in again], minimality,
                                                     complete=complete)):
                tested[i] = t
    if not single and complete:
        kept = _completed(tested, verdicts, rule)
        todo = [i for i in kept if tested[i].without is None]
        for i, without in zip(todo, tester.completeness([hyps[i] for i in todo])):
            tested[i] = replace(tested[i], without=without)
    redo = [i for i, v in enumerate(verdicts) if minimality and not single and (
        v == FAITHFUL or (v == BORDERLINE and not resolved))]
    # their circuit was run on this tester already
    for i, less in zip(redo, tester.minimality([hyps[i] for i in redo])):
        tested[i] = replace(tested[i], minimality=less)
    return tested


def _completed(tested: list[Faithfulness], verdicts: list[str], rule: Rule) -> list[int]:
    """Which tests the model less the circuit is run for, beyond one placement per construction:
    those that pass or straddle, and each construction's best placement in the rule's order."""
    best: dict[str, int] = {}
    for i, t in enumerate(tested):
        name = t.construction
        if name not in best or _order(t, verdicts[i]) < _order(tested[best[name]], verdicts[best[name]]):
            best[name] = i
    return sorted(set(best.values()) | {i for i, v in enumerate(verdicts) if v in (FAITHFUL, BORDERLINE)})


def _order(test: Faithfulness, verdict: str) -> tuple:
    """The rule's order: faithful, then borderline, then the rest; within each a placement on one
    head first, then the most loss recovered (to 1e-4), then the fewest atoms."""
    return ({FAITHFUL: 0, BORDERLINE: 1}.get(verdict, 2), getattr(test, "summed", False),
            -round(test.circuit.loss_recovered or -1e9, 4), test.n_atoms)


def _screen_and_whole(model: DisentangledModel, batch: Batch, screen: int,
                      ablation: Ablation = "zero", reference: Batch | None = None,
                      whole: Tester | None = None):
    """A tester on the first ``screen`` samples, and the whole batch's (``whole`` if given; else
    a function that builds it only when a straddling verdict asks for it)."""
    def full() -> Tester:
        return whole or Tester(model, batch, ablation, reference)

    if len(batch) <= screen:
        tester = full()
        return tester, tester
    if whole is not None:  # its style, and its fits shared
        return whole.head(screen), full
    return Tester(model, batch.head(screen), ablation, reference), full


def tests_on(model: DisentangledModel, batch: Batch, *, ablation: Ablation = "zero",
             reference: Batch | None = None, rule: Rule = RULE,
             screen: int = SCREEN_SAMPLES, complete: bool = True
             ) -> tuple[list[Faithfulness], Faithfulness]:
    """:func:`tested_on`'s tests and the empty claim's on the same testers (:func:`test_empty`)."""
    first, full = _screen_and_whole(model, batch, screen, ablation, reference)
    tested = test_constructions(model, first, resolve=full, rule=rule, minimality=False,
                                complete=complete)
    return paired_with_best(first, tested, rule), test_empty(first, full, rule)


def tested_on(model: DisentangledModel, batch: Batch, *, ablation: Ablation = "zero",
              reference: Batch | None = None, rule: Rule = RULE,
              screen: int = SCREEN_SAMPLES, complete: bool = True) -> list[Faithfulness]:
    """Every fitting construction tested on ``batch`` under ``ablation`` as the rule tests them
    (screened on the first ``screen`` samples, a straddling one again on all), without the
    minimal circuit or the per-cell runs: the scores behind :func:`name_on`'s answer, each with
    the model less its circuit (``without``) where :func:`test_constructions` runs it (none with
    ``complete=False``)."""
    first, full = _screen_and_whole(model, batch, screen, ablation, reference)
    return test_constructions(model, first, resolve=full, rule=rule, minimality=False,
                              complete=complete)


def name_on(model: DisentangledModel, batch: Batch, *, ablation: Ablation = "zero",
            reference: Batch | None = None, rule: Rule = RULE,
            screen: int = SCREEN_SAMPLES) -> Answer:
    """The rule's answer (a construction named, untestable, borderline or none) on ``batch``,
    without the minimal circuit: what a second evaluation batch or a second ablation style says."""
    tested, empty = tests_on(model, batch, ablation=ablation, reference=reference, rule=rule,
                             screen=screen, complete=False)
    return name_by_rule(tested, rule, empty)


def mechanism(model: DisentangledModel, batch: Batch, *, circuit: Circuit | None = None,
              tester: Tester | None = None, rule: Rule = RULE, exact: bool = True,
              screen: int = SCREEN_SAMPLES, ablation: Ablation = "zero") -> Mechanism:
    """Name the model's mechanism by the one rule (module docstring) on ``batch`` (for a verdict
    that resolves the thresholds, ``analysis.verdict.evaluation_batch``: 4,096 samples). The
    constructions are tested on the first ``screen`` samples and those whose interval straddles a
    threshold there again on the whole batch; the minimal circuit is searched on the first
    ``screen``. ``circuit``/``tester`` reuse an ``explain`` result and a clean run of ``batch``
    already computed (the tester's ablation style is then the one used); ``exact``: let
    :func:`minimal_circuit` search exactly; ``ablation``: how removed parts are removed
    (``analysis.faithfulness.Tester``; the rule's own is ``"zero"``)."""
    check_disentangled(model)
    if tester is not None and ablation != "zero" and tester.ablation != ablation:
        raise ValueError(f"ablation {ablation!r} differs from the tester's {tester.ablation!r}")
    first, resolve = _screen_and_whole(model, batch, screen, ablation, whole=tester)
    tested = paired_with_best(first, test_constructions(model, first, resolve=resolve, rule=rule), rule)
    empty = test_empty(first, resolve, rule)
    good, straddle = ranked(tested, rule)
    if cannot_reject(empty, rule):  # the test cannot tell a right claim from a wrong one here
        good, straddle = [], []
    faithful = [t for t in tested if rule.is_faithful(t.circuit)]
    starts, fallback = ([Hypothesis(t.hypothesis, t.cells, t.read, t.unit, t.placement) for t in faithful
                         if t.signs_agree == agree] for agree in (True, False))
    minimal = minimal_circuit(model, first.batch, circuit=circuit, tester=first, rule=rule,
                              starts=starts, fallback=fallback, exact=EXACT if exact else None)
    chosen = good[0] if good else (straddle[0] if straddle else None)
    name = chosen.hypothesis if good else None
    placed = chosen.placement if good else None
    return Mechanism(name, chosen, tuple(tested), minimal, rule,
                     tuple(t.hypothesis for t in good[1:]), tuple(t.hypothesis for t in straddle),
                     untested_reason(model.cfg), placed, tied_with(good, rule), empty)
