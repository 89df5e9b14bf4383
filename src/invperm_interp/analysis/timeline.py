"""The mechanism over training: a run's checkpoints analysed step by step against its final circuit.

:func:`timeline` names the run's mechanism once, on the final weights (``analysis.mechanism``); its
*final circuit* is the named construction's cells, or the minimal circuit when the name is
``"none"``. Then, for every checkpoint, on one fixed batch:

- the model's MSE and share of rows exactly right;
- the final circuit's circuit-only model (``analysis.faithfulness``: its cells at the weights' own
  fitted β, the rest zeroed in the gauge-fixed frame), its score and whether it is faithful by the
  rule (``is_faithful``, and for a construction its templates' signs);
- each final-circuit cell's fitted β and its functional effect: the MSE rise when that cell alone
  is removed from the circuit-only model (on the batch's first quarter: one run per cell);
- the mechanism the rule names at that step: every fitting working construction is tested, at the
  placements the rule picks on the final weights (``analysis.placements``; without
  the per-cell minimality runs, which the name does not depend on); the minimal-circuit search is
  not run, since only its verdict on the final weights matters here.

``first_faithful`` is the first checkpoint at which the final circuit is faithful, ``faithful_since``
the first from which it stays faithful to the end. Both are only as fine as the checkpoints:
:func:`sparse_fall` says when the run's own evaluations place the loss's fall more finely than the
checkpoints around it can (train with ``--checkpoint-dense-every``, or use :func:`refine`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..model.build import load_analysed
from ..runs.checkpoint import model_tensors
from ..runs.directory import RunDir
from ..task import Batch, sample_batch
from ..training.progress import progress_bar
from ..training.replay import Replay, replay
from ..training.run import Run
from .faithfulness import Score, Tester
from .hypothesis import AtomCell, Hypothesis
from .mechanism import minimal_circuit, ranked
from .placements import candidate_placements
from .placements import hypothesis as placed
from .projection import fixed_weights, project
from .verdict import NONE, RULE, Rule, check_seed


@dataclass(frozen=True)
class StepAnalysis:
    """One checkpoint: the model's score, the name the rule gives it, and the final circuit there.

    ``betas`` and ``effects`` are per entry of :attr:`Timeline.cells` (entries that share a
    (query, key) cell share its effect: removing the cell removes both)."""

    step: int
    mse: float
    rows_exact: float
    mechanism: str  # a registry construction, or ``verdict.NONE``
    circuit: Score  # the final circuit's circuit-only model at this step
    faithful: bool  # by the rule (and, for a named construction, its templates' signs)
    betas: tuple[float, ...]
    effects: tuple[float, ...]  # circuit-only MSE without the cell minus with it

    def to_dict(self) -> dict:
        return {"step": self.step, "mse": self.mse, "rows_exact": self.rows_exact,
                "mechanism": self.mechanism, "circuit": self.circuit.to_dict(),
                "faithful": self.faithful, "betas": list(self.betas), "effects": list(self.effects)}

    @classmethod
    def from_dict(cls, data: dict) -> StepAnalysis:
        return cls(data["step"], data["mse"], data["rows_exact"], data["mechanism"],
                   Score(**data["circuit"]), data["faithful"], tuple(data["betas"]),
                   tuple(data["effects"]))


@dataclass(frozen=True)
class Timeline:
    """A run's checkpoints analysed against its final circuit (module docstring).

    ``curve``: the training run's evaluations ``(step, MSE)`` on its own held-out batch."""

    run: str
    final_mechanism: str
    hypothesis: Hypothesis  # the final circuit: the named construction, else the minimal circuit
    baseline: float  # MSE with everything ablated, d/4
    steps: tuple[StepAnalysis, ...]
    curve: tuple[tuple[int, float], ...]
    n: int
    seed: int

    @property
    def cells(self) -> tuple[AtomCell, ...]:
        return self.hypothesis.cells

    @property
    def first_faithful(self) -> int | None:
        """The first checkpoint step at which the final circuit is faithful (None: never)."""
        return next((s.step for s in self.steps if s.faithful), None)

    @property
    def faithful_since(self) -> int | None:
        """The first checkpoint step from which the final circuit is faithful at every later one."""
        since = None
        for s in self.steps:
            since = (since if since is not None else s.step) if s.faithful else None
        return since

    def first_named(self, name: str | None = None) -> int | None:
        """The first step at which the rule names ``name`` (default: the final mechanism)."""
        name = name or self.final_mechanism
        return next((s.step for s in self.steps if s.mechanism == name), None)

    def to_dict(self) -> dict:
        h = self.hypothesis
        return {"run": self.run, "final_mechanism": self.final_mechanism,
                "hypothesis": {"name": h.name, "cells": [list(c) for c in h.cells],
                               "read": None if h.read is None else list(h.read), "unit": h.unit},
                "baseline": self.baseline, "first_faithful": self.first_faithful,
                "faithful_since": self.faithful_since, "n": self.n, "seed": self.seed,
                "curve": [list(p) for p in self.curve], "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, data: dict) -> Timeline:
        h = data["hypothesis"]
        hyp = Hypothesis(h["name"], tuple(tuple(c) for c in h["cells"]),
                         None if h["read"] is None else tuple(h["read"]), h["unit"])
        return cls(data["run"], data["final_mechanism"], hyp, data["baseline"],
                   tuple(StepAnalysis.from_dict(s) for s in data["steps"]),
                   tuple((int(a), float(b)) for a, b in data["curve"]), data["n"], data["seed"])


def final_circuit(model, batch, tests: dict[str, Hypothesis],
                  rule: Rule = RULE) -> tuple[str, Hypothesis]:
    """The mechanism's name on ``model`` and its circuit: the named construction's hypothesis, else
    the minimal circuit's cells (``unit="cells"``). The name does not depend on the minimal
    circuit, so the search for it runs only when no construction qualifies."""
    tester = Tester(model, batch)
    good, _ = ranked([tester.test(h, minimality=False) for h in tests.values()], rule)
    if good:
        f = good[0]
        return f.hypothesis, Hypothesis(f.hypothesis, f.cells, f.read, f.unit)
    # what ``mechanism`` reports as its minimal circuit when no construction qualifies
    m = minimal_circuit(model, batch, tester=tester, rule=rule)
    return NONE, Hypothesis("minimal", m.cells, m.read or None, "cells")


class StepTester:
    """One checkpoint's runs: the full batch for scores, its first quarter (``sub``) for the cells'
    effects, and its first sixteenth (``gate``) as an exact gate: a circuit-only model with more
    wrong rows there than the rule allows on the whole batch cannot be faithful, so its full run is
    skipped."""

    def __init__(self, model, batch: Batch, rule: Rule):
        self.full = Tester(model, batch)
        self.sub = Tester(model, batch.head(max(1, len(batch) // 4)))
        self.gate = Tester(model, batch.head(max(1, len(batch) // 16)))
        self.model, self.rule = model, rule
        self.allowed = (1 - rule.rows) * len(batch) * model.cfg.d  # wrong rows the rule tolerates

    def may_be_faithful(self, hyp: Hypothesis, proj) -> bool:
        gate = self.gate.circuit(hyp, proj)
        return (1 - gate.rows_exact) * len(self.gate.batch) * self.model.cfg.d <= self.allowed

    def effects(self, hyp: Hypothesis) -> tuple[float, ...]:
        """Per entry of ``hyp``: the circuit-only MSE rise (on the quarter) without its (query,
        key) cell; entries of one cell share it."""
        base = self.sub.circuit(hyp).mse
        by_cell: dict[tuple, float] = {}
        for i, cell in enumerate(hyp.cells):
            if cell[:4] not in by_cell:
                rest = hyp.without(i)
                by_cell[cell[:4]] = (self.sub.circuit(rest).mse if rest.cells
                                     else self.sub.baseline) - base
        return tuple(by_cell[c[:4]] for c in hyp.cells)

    def named(self, tests: dict[str, Hypothesis], known: dict[str, Score]) -> str:
        """The rule's name (``mechanism.ranked``: its faithful constructions, best first); the full
        test of a construction (its templates' signs) runs only when its circuit-only model is
        faithful. ``known``: full circuit scores already computed, by name."""
        tested = []
        for name, h in tests.items():
            if name not in known:
                proj = project(self.model, h)
                if not self.may_be_faithful(h, proj):
                    continue
                known[name] = self.full.circuit(h, proj)
            if self.rule.is_faithful(known[name]):
                tested.append(self.full.test(h, minimality=False))
        good, _ = ranked(list(tested), self.rule)
        return good[0].hypothesis if good else NONE


def analyse_step(model, batch, hyp: Hypothesis, tests: dict[str, Hypothesis], named: bool,
                 step: int, rule: Rule = RULE) -> StepAnalysis:
    """One checkpoint's :class:`StepAnalysis` (``model`` holds its weights); ``tests``: the fitting
    working constructions' hypotheses, by name; ``named``: ``hyp`` is one of them."""
    tester = StepTester(model, batch, rule)
    proj = project(model, hyp)
    circuit = tester.full.circuit(hyp, proj)
    faithful = rule.is_faithful(circuit)
    if faithful and named:  # a construction's templates must also point the right way
        faithful = tester.full.test(hyp, minimality=False).signs_agree
    name = tester.named(tests, {hyp.name: circuit} if named else {})
    clean = tester.full.clean
    return StepAnalysis(step, clean.mse, clean.rows_exact, name, circuit, faithful, proj.betas,
                        tester.effects(hyp))


def _check_finite(tensors: dict[str, torch.Tensor], path: Path) -> None:
    bad = [k for k, t in tensors.items() if t.is_floating_point() and not bool(t.isfinite().all())]
    if bad:
        raise ValueError(f"checkpoint {path} holds weights that are not finite (NaN or inf) in "
                         f"{', '.join(bad)}; delete it to analyse the others")


def _final_setup(final: Run, run_dir: Path, n: int, seed: int):
    """What a timeline reads every step against: the run's analysis model at its final weights
    (a standard run: the disentangled model it maps to; checked finite), the batch of ``n``
    samples drawn with ``seed``, and the constructions' placements chosen on the final weights
    (followed through every checkpoint), by name."""
    model = final.analysis_model
    _check_finite(dict(model.named_parameters()), RunDir(run_dir).weights_path())
    batch = sample_batch(model.cfg.layout, n, torch.Generator().manual_seed(seed),
                         dtype=model.cfg.torch_dtype)
    tests = {str(p): placed(model, p) for p in candidate_placements(model, fixed_weights(model))}
    return model, batch, tests


def timeline(run: str | Path | Run, *, n: int = 512, seed: int = 0, stride: int = 1,
             rule: Rule = RULE, progress: bool = False) -> Timeline:
    """Analyse every ``stride``-th checkpoint of a run (and its final weights) on ``n`` samples
    drawn with ``seed`` (the batch ``invperm sweep`` names mechanisms on), against the circuit of
    the final weights. ``run``: a run directory or a :class:`Run` loaded from one."""
    if isinstance(run, Run):
        if run.dir is None:
            raise ValueError("run must have a directory (its checkpoints); this one was kept in "
                             "memory only (out_dir=None)")
        run_dir = Path(run.dir)
    elif isinstance(run, (str, Path)) and str(run).strip():
        run_dir = Path(run)
    else:
        raise ValueError(f"run must be a run directory or a Run, got {run!r}")
    if not (isinstance(stride, int) and not isinstance(stride, bool) and stride >= 1):
        raise ValueError(f"stride must be an integer >= 1, got {stride!r}")
    check_seed(seed)
    final = run if isinstance(run, Run) and run.dir is not None else Run.load(run_dir)
    model, batch, tests = _final_setup(final, run_dir, n, seed)
    name, hyp = final_circuit(model, batch, tests, rule)
    named = name != NONE
    found = [(s, p) for s, p in RunDir(run_dir).checkpoints() if s < final.step]
    found = found[::-1][::stride][::-1]  # every stride-th, counted back from the last
    steps = []
    # one tick per row of the timeline: every checkpoint analysed, then the final weights
    bar = progress_bar(total=len(found) + 1, desc=f"timeline {run_dir.name}", unit="ckpt",
                       disable=not progress)
    with torch.no_grad(), bar:
        final_weights = {k: v.clone() for k, v in model.state_dict().items()}
        try:
            for step, path in found:
                weights = RunDir(run_dir).read_weights(step)
                _check_finite(weights.tensors, path)
                load_analysed(model, final.model_cfg, weights.tensors, path)
                steps.append(analyse_step(model, batch, hyp, tests, named, step, rule))
                bar.update()
        finally:
            model.load_state_dict(final_weights)
        steps.append(analyse_step(model, batch, hyp, tests, named, final.step, rule))
        bar.update()
    curve = tuple((m.step, float(m.mse)) for m in RunDir(run_dir).read_metrics())
    return Timeline(run_dir.name, name, hyp, 0.25 * model.cfg.d, tuple(steps), curve, n, seed)


@dataclass(frozen=True)
class SparseFall:
    """The loss falls between the run's evaluations at ``after`` and ``by`` (MSE ``mse_after`` to
    ``mse_by``), and the nearest checkpoints around the fall are at ``checkpoint_before`` (``None``:
    no checkpoint before it) and ``checkpoint_after``, more than :data:`FINER` times further apart."""

    after: int
    by: int
    mse_after: float
    mse_by: float
    checkpoint_before: int | None
    checkpoint_after: int | None


#: The checkpoints around the fall may be this many times further apart than the evaluations that
#: place it before :func:`sparse_fall` reports them.
FINER = 4


def sparse_fall(tl: Timeline, fallen: float = 0.1) -> SparseFall | None:
    """Whether ``tl``'s checkpoints are too sparse to place the transition. The fall is the first
    pair of the run's evaluations (``tl.curve``) between which the MSE goes from at least
    ``fallen`` times the all-ablated baseline d/4 to below it; the checkpoints analysed (``tl.steps``,
    the final weights included) place it only to the gap between the last one at or before the
    fall's start and the first one at or after its end. Returns the fall when there is no checkpoint
    before it, or when that gap is more than :data:`FINER` times the evaluations' (else ``None``, as
    for a run whose loss never falls that far)."""
    threshold = fallen * tl.baseline
    fall = next(((a, b) for a, b in zip(tl.curve, tl.curve[1:])
                 if a[1] >= threshold > b[1]), None)
    if fall is None:
        return None
    (after, mse_after), (by, mse_by) = fall
    steps = [s.step for s in tl.steps]
    before = max((s for s in steps if s <= after), default=None)
    later = min((s for s in steps if s >= by), default=None)
    if before is not None and later is not None and later - before <= FINER * (by - after):
        return None
    return SparseFall(after, by, mse_after, mse_by, before, later)


def refine(tl: Timeline, run: str | Path, start: int, end: int, every: int, *,
           rule: Rule = RULE, progress: bool = False) -> tuple[Timeline, Replay]:
    """``tl`` (``run``'s timeline) with every ``every``-th step of ``(start, end]`` analysed too, on
    weights trained again from the run's checkpoint at ``start`` (``training.replay``), and the
    run's own evaluations of them added to its curve: a transition seen at the resolution it needs,
    with no checkpoint written. Steps ``tl`` holds keep its analysis of the stored weights. Also
    returns the :class:`Replay` record (how many stored checkpoints the replay met bit for bit)."""
    run_dir = Path(run)
    if tl.run != run_dir.name:
        raise ValueError(f"tl must be the timeline of {run_dir}, got one of {tl.run!r}")
    final = Run.load(run_dir)
    model, batch, tests = _final_setup(final, run_dir, tl.n, tl.seed)
    named = tl.final_mechanism != NONE
    record, new, curve = Replay(), {}, dict(tl.curve)
    bar = progress_bar(total=(end - start) // every, desc=f"refine {run_dir.name}", unit="step",
                       disable=not progress)
    with bar:
        final_weights = {k: v.clone() for k, v in model.state_dict().items()}
        try:
            for step, live, scores in replay(run_dir, start, end, every, record):
                curve.setdefault(step, scores.mse)
                with torch.no_grad():
                    load_analysed(model, final.model_cfg, model_tensors(live), f"step {step}")
                    new[step] = analyse_step(model, batch, tl.hypothesis, tests, named, step, rule)
                bar.update()
        finally:
            model.load_state_dict(final_weights)
    steps = {**new, **{s.step: s for s in tl.steps}}
    return replace(tl, steps=tuple(steps[s] for s in sorted(steps)),
                   curve=tuple(sorted(curve.items()))), record
