"""What is still unnamed: the minimal circuits of the runs no construction names, made exact
constructions, tested across runs and proposed.

For every model the rule names no construction for (verdict none, ``analysis.mechanism``) with a
faithful minimal circuit, the circuit's **form** (``analysis.forms``; on a deeper or wider model a
circuit on one head of each of two layers is written as on two layers of one head, so the same
circuit at other placements is one form: ``maths.placement.unplace``) is **idealised**
(``analysis.idealise``): the smallest exact construction near it that the model holds with its
own signs (:func:`signs_held`), or the reason there is none.
Each exact form is then tested by the rule's own test (``verdict_of``: faithful, with the signs
that matter) on every unnamed model of its kind (attention, layout, read-out rows) at its
best-weighted placements (as the rule places a registered construction: ``analysis.placements``).
The proposals are chosen greedily: in decreasing order of the models not yet covered that a form
is faithful on (ties: the fewer cells), the first form that covers at least ``min_runs`` once
**grown**, while one does. A form is grown by joining it with
the other exact forms of its kind and shape, one at a time, a join kept when it is still exact and
faithful on more models (runs that hold parts of one mechanism, each minimal circuit a different
part, share the joined form). Each is checked exact once more, as
``register`` will: its largest error below ``constructions.REGISTER_TOL`` at every ``d`` in
``DISCOVER_DS`` as ``β`` grows (``exact_from``: the first such ``β``; otherwise the best error
reached).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..errors import check_choice
from ..maths import constructions
from ..maths.placement import unplace
from ..maths.registry import parse_read
from ..model.disentangled import DisentangledModel, check_disentangled
from .faithfulness import ABLATIONS, Ablation, Faithfulness, Tester
from .forms import Form, form_of, layout_name
from .hypothesis import cell_text
from .idealise import Idealisation, idealise
from .mechanism import Mechanism, mechanism, verdict_of
from .placements import best_placements
from .placements import hypothesis as placed_hypothesis
from .verdict import BORDERLINE, FAITHFUL, VERDICT_SAMPLES, check_seed, evaluation_batch

#: The sizes a proposed form is checked exact at (``register`` then checks its whole range).
DISCOVER_DS = (3, 5, 10)
#: Samples a sign check runs its circuit on (:func:`signs_held`; the signs are the weights').
SIGN_SAMPLES = 64


@dataclass(frozen=True)
class Proposal:
    """One form, its runs, its exactness as a construction and its faithfulness on its runs."""

    name: str
    form: Form
    runs: tuple[str, ...]
    errors: tuple[tuple[float, float], ...]  # (β, largest error over DISCOVER_DS), β increasing
    tests: tuple[Faithfulness, ...]  # the form tested on each run, in ``runs`` order
    verdicts: tuple[str, ...]
    sources: tuple[str, ...] = ()  # the runs whose circuit idealises to it

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
                "loss_recovered": [t.circuit.loss_recovered for t in self.tests],
                "sources": list(self.sources)}


@dataclass(frozen=True)
class Discovery:
    """Every model's form (``None``: named, borderline, or no faithful minimal circuit, with the
    reason), each unnamed model's idealisation, and the proposals, in the order they were chosen."""

    forms: dict[str, Form | None]
    reasons: dict[str, str]
    proposals: tuple[Proposal, ...]
    idealisations: dict[str, Idealisation] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"reasons": self.reasons, "proposals": [p.to_dict() for p in self.proposals],
                "idealisations": {k: i.to_dict() for k, i in self.idealisations.items()}}


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


def _kind(model: DisentangledModel) -> tuple:
    cfg = model.cfg
    return cfg.attention_dir, layout_name(cfg), cfg.readout


def discover(models: Mapping[str, DisentangledModel], *, n: int = VERDICT_SAMPLES,
             seed: int = 0, min_runs: int = 2, progress=None,
             known: Mapping[str, Mechanism] | None = None, ablation: Ablation = "zero",
             workers: int = 1) -> Discovery:
    """Idealise the unnamed models' minimal circuits into exact forms, test each form on every
    unnamed model of its kind, and propose the forms that cover the most models, each faithful on
    at least ``min_runs`` of them (module docstring); every model is judged on ``n`` samples from
    ``seed``, except those in ``known`` (mechanisms measured so already, e.g. by a sweep).
    ``progress``: an optional ``(items, description) -> iterable`` wrapping the iterations over the
    models and over the exact forms tested across them (e.g. a ``tqdm`` bar). ``ablation``: the
    style every test runs under (``known`` mechanisms, the rule's, are then measured again unless it
    is ``"zero"``; ``"silence"`` knocks out the heads a circuit leaves empty). ``workers``: processes
    the per-run work (each model's mechanism, form and idealisation) is spread over, one thread each,
    the largest models first; the result is the same as in one (a form two runs share is then
    idealised on each, the first run's kept)."""
    check_choice("ablation", ablation, ABLATIONS)
    if ablation != "zero":
        known = None
    if not isinstance(min_runs, int) or min_runs < 1:
        raise ValueError(f"min_runs must be an integer >= 1, got {min_runs!r}")
    check_seed(seed)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    for key, model in models.items():
        check_disentangled(model, f"models[{key!r}]")
    jobs = [(key, model, n, seed, (known or {}).get(key), ablation) for key, model in models.items()]
    if workers > 1 and len(jobs) > 1:
        found = dict(_in_processes(jobs, workers, progress))
    else:
        seen: dict[Form, Idealisation] = {}  # a form met again is not idealised again
        found = dict(_one_run(*job, seen=seen) for job in (progress(jobs, "runs") if progress
                                                             else jobs))
    forms, reasons, testers, ideals = {}, {}, {}, {}
    by_form: dict[Form, Idealisation] = {}
    for key, model in models.items():  # in the models' order: a form's idealisation is its first run's
        forms[key], reasons[key], ideal = found[key]
        if ideal is not None:
            testers[key] = Tester(model, evaluation_batch(model, n, seed), ablation)
            ideals[key] = by_form.setdefault(forms[key], ideal)
    exact = list(dict.fromkeys(i.form for i in ideals.values() if i.exact))
    tested = {form: _test_on(form, models, testers)
              for form in (progress(exact, "forms tested across runs") if progress else exact)}
    proposals, covered = [], set()

    def gain(form: Form) -> tuple:
        held = {k for k, (_, v) in tested[form].items() if v == FAITHFUL}
        return len(held - covered), -len(form.cells), form.text

    while True:
        chosen = {p.form for p in proposals}
        best = None
        for form in sorted((f for f in exact if f not in chosen and gain(f)[0] > 0), key=gain,
                           reverse=True):
            grown = _grown(form, exact, tested, gain, models, testers)
            if gain(grown)[0] >= min_runs and grown not in chosen:
                best = grown
                break
        if best is None:
            break
        keys = sorted(tested[best])
        name = f"discovered_{best.attention_dir}_{len(proposals) + 1}"
        tests = tuple(tested[best][k][0] for k in keys)
        sources = tuple(k for k in keys if ideals.get(k) and set(ideals[k].form.cells) <= set(best.cells))
        proposals.append(Proposal(name, best, tuple(keys), _errors(best, name), tests,
                                  tuple(tested[best][k][1] for k in keys), sources))
        covered |= {k for k in keys if tested[best][k][1] == FAITHFUL}
    return Discovery(forms, reasons, tuple(proposals), ideals)


def _one_run(key: str, model: DisentangledModel, n: int, seed: int, known: Mechanism | None,
             ablation: Ablation, seen: dict | None = None) -> tuple:
    """One model's share of :func:`discover`: ``(key, (form or None, reason, idealisation or
    None))``. ``seen``: idealisations already made, by form (reused)."""
    batch = evaluation_batch(model, n, seed)
    mech = known if known is not None else mechanism(model, batch, ablation=ablation)
    if mech.name is not None:
        return key, (None, f"named {mech.name}", None)
    if mech.verdict == BORDERLINE:
        return key, (None, BORDERLINE, None)
    if not mech.minimal.faithful:
        return key, (None, "no faithful minimal circuit", None)
    form = circuit_form(model, mech.minimal.cells, mech.minimal.read)
    if seen is not None and form in seen:
        return key, (form, "unnamed", seen[form])
    tester = Tester(model, batch, ablation)
    ideal = idealise(form, accept=lambda f: signs_held(f, model, tester))
    if seen is not None:
        seen[form] = ideal
    return key, (form, "unnamed", ideal)


def _in_processes(jobs: list, workers: int, progress) -> list:
    """:func:`_one_run` of every job in ``workers`` spawned processes (one torch thread each), the
    largest models first; results as they finish, wrapped in ``progress``. The workers leave
    Ctrl-C to this process, which ends them at once on it (or on an error)."""
    import multiprocessing

    order = sorted(jobs, key=lambda job: -job[1].cfg.T ** 2 * sum(job[1].cfg.widths))
    # spawned, not forked: a forked torch can hang in its thread pools
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(min(workers, len(jobs)), initializer=_worker_start)
    try:
        done = pool.imap_unordered(_one_job, order)
        return list(progress(done, "runs") if progress else done)
    finally:  # on Ctrl-C or an error as when done: the workers end now, their resources freed
        pool.terminate()
        pool.join()


def _worker_start() -> None:
    """A discovery worker: one torch thread, and Ctrl-C left to the process that started it."""
    import signal

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


def _one_job(job: tuple) -> tuple:
    return _one_run(*job)


def _grown(form: Form, exact: list[Form], tested: dict, gain, models, testers) -> Form:
    """``form`` joined with the other exact forms of its kind and shape one at a time, each join
    kept when it is still exact (``idealise``, the joined circuits' cells all kept) and faithful on
    more runs not yet covered: a mechanism several runs share, each run's circuit a part of it."""
    shape = form.spec("x").heads
    others = [f for f in exact if f != form and f.spec("x").heads == shape
              and (f.attention_dir, f.layout, f.readout) == (form.attention_dir, form.layout,
                                                             form.readout)]
    grown = True
    while grown:
        grown = False
        for other in sorted(others, key=gain, reverse=True):
            if set(other.cells) <= set(form.cells):
                continue
            for read in dict.fromkeys([form.read, other.read]):
                joined = idealise(replace(form, cells=tuple(sorted(set(form.cells) | set(other.cells))),
                                          read=read))
                if not joined.exact or joined.form.spec("x").heads != shape:
                    continue
                if joined.form not in tested:
                    tested[joined.form] = _test_on(joined.form, models, testers)
                if gain(joined.form) > gain(form):
                    form, grown = joined.form, True
                    break
            if grown:
                break
    return form


def signs_held(form: Form, model: DisentangledModel, tester: Tester) -> bool:
    """Whether the model holds every template of ``form`` with its sign (the rule's sign check,
    ``Faithfulness.signs_agree``) at one of its best-weighted placements: an idealised form the
    model contradicts is not the model's mechanism. The fitted βs depend on the weights only, so
    the circuit is run on the tester's first ``SIGN_SAMPLES`` samples."""
    small = tester.head(SIGN_SAMPLES)
    return any(small.test(placed_hypothesis(model, p), minimality=False).signs_agree
               for p in best_placements(form.spec("discovered"), model, tester.fixed))


def _test_on(form: Form, models: Mapping[str, DisentangledModel],
             testers: Mapping[str, Tester]) -> dict[str, tuple[Faithfulness, str]]:
    """``form`` tested on every model of ``testers`` of its kind that has room for it: at its
    best-weighted placements (on a model of its own shape, as it is), the best test kept."""
    spec = form.spec("discovered")
    out = {}
    for key, tester in testers.items():
        model = models[key]
        if _kind(model) != (form.attention_dir, form.layout, form.readout):
            continue
        chosen = best_placements(spec, model, tester.fixed)
        if not chosen:
            continue
        tests = [tester.test(placed_hypothesis(model, p), minimality=False) for p in chosen]
        verdicts = [verdict_of(t) for t in tests]
        i = min(range(len(tests)), key=lambda j: (verdicts[j] != FAITHFUL,
                                                   -(tests[j].circuit.loss_recovered or 0.0)))
        out[key] = (tests[i], verdicts[i])
    return out


def circuit_form(model: DisentangledModel, cells, read: tuple[str, ...]) -> Form:
    """The form of a circuit: one on one head of each of two layers of a deeper or wider model in a
    two-layer one-head model's block names (``maths.placement.unplace``), so that runs holding the
    same circuit on other layers or heads share a form (the rule places it again); any other
    circuit on the model's own layers and heads (a construction of that shape)."""
    form = form_of(model, cells, read)
    units = {(c.layer, c.head) for c in form.cells}
    if len(units) != 2 or len({layer for layer, _ in units}) != 2:
        return form
    terms = parse_read(form.read)
    found = unplace(form.cells, tuple(block for block, _ in terms), model.cfg.heads)
    if found is None:
        return form
    _, _, placed, blocks = found
    text = " ".join(f"{'-' if sign < 0 else '+'} {b}" for b, (_, sign) in zip(blocks, terms))
    text = text[2:] if text.startswith("+ ") else text
    return Form(form.attention_dir, form.layout, form.readout, tuple(sorted(set(placed))), text)


def table(discovery: Discovery) -> str:
    """A markdown table of the proposals (or one line saying why there are none), then one line per
    unnamed run: what its circuit idealised to, or why it has no exact form; then the count of
    models by reason."""
    ideals = discovery.idealisations
    exact = {i.form for i in ideals.values() if i.exact}
    if not discovery.proposals:
        lines = [f"nothing to propose: {len(ideals)} unnamed runs with a faithful minimal circuit, "
                 f"{sum(i.exact for i in ideals.values())} of them idealised to {len(exact)} exact "
                 "forms, none faithful on enough runs"]
    else:
        lines = ["| form | runs (faithful) | from runs | cells | exact from β | rows exact / loss "
                 "recovered on its runs |", "| --- | --- | --- | --- | --- | --- |"]
    for p in discovery.proposals:
        exact_from = (f"{p.exact_from:g}" if p.exact_from is not None
                      else f"not exact (best error {p.best_error:.2g})")
        scores = ", ".join(f"{t.circuit.rows_exact:.1%} / {_pct(t.circuit.loss_recovered)}"
                           for t in p.tests)
        lines.append(f"| `{p.name}` | {len(p.runs)} ({p.faithful_runs}) | {len(p.sources)} | "
                     f"{p.form.text} (read {p.form.read}) | {exact_from} | {scores} |")
    if ideals:
        lines += ["", "unnamed runs:"]
    for key, ideal in sorted(ideals.items()):
        changes = "; ".join([*(f"+ {cell_text(c)}" for c in ideal.added),
                             *(f"- {cell_text(c)}" for c in ideal.dropped)]) or "no change"
        what = (f"exact with {len(ideal.form.cells)} cells (read {ideal.form.read}; changes: "
                f"{changes})" if ideal.exact else f"no exact form: {ideal.reason}")
        lines.append(f"- {key}: {what}")
    counts: dict[str, int] = defaultdict(int)
    for reason in discovery.reasons.values():
        counts[reason] += 1
    lines += ["", "models: " + ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))]
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"
