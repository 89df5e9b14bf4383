"""A circuit claim tested by running it: faithfulness, completeness and minimality.

A hypothesis (``analysis.hypothesis``: atoms or cells of ``A`` and the blocks ``W_U`` reads) is
tested on a batch as circuit-discovery work tests one (Wang et al. 2022, "Interpretability in the wild"):

- **faithfulness**: the *circuit-only model* keeps, in each head's gauge-fixed ``A``, the
  hypothesis's atoms at the model's own fitted β (the least-squares fit of the gauge-fixed atoms to
  ``gauge_fix(A)``, i.e. its orthogonal projection on their span) and zeroes the rest; ``W_U`` keeps
  the model's own rows of the read blocks and zeroes the others. It is scored by its MSE, the share
  of rows it gets exactly right (every entry right after rounding) and the **fraction of the loss
  recovered**, ``(baseline - MSE_circuit) / (baseline - MSE_model)`` against the baseline of
  everything ablated: predicting 0.5 everywhere, MSE ``d/4`` (2.5 at d = 10).
- **completeness**: the model with the hypothesis's atoms removed from ``A`` (``W_U`` kept whole):
  a complete hypothesis leaves a model that recovers little of the loss.
- **minimality**: the circuit-only model less one atom (the others at their fitted β), per atom:
  the MSE rise says what each atom is needed for.

Removed parts are zeroed *in the gauge-fixed frame*: softmax cannot see the gauge
(``analysis.gauge``), so ``gauge_fix(A)`` is the function's own coordinates and "zero" there removes
a cell's effect without inventing a gauge the model never chose (a raw cell holds gauge as well as
function). ``ablation="mean"`` replaces a removed part's score contribution by its mean over a
reference batch, ``"resample"`` by its value on another input; ``"silence"`` zeroes and knocks out
each head a variant leaves empty (``analysis.silence``). Verdicts: ``analysis.mechanism``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import torch
from torch import Tensor

from ..errors import check_choice
from ..maths.placement import Placement
from ..memory import keep_freed_memory
from ..model.disentangled import DisentangledModel, check_disentangled, readout_forward
from ..model.variants import forward_many
from ..task import Batch, mse
from ..training.progress import progress_bar
from .fit_cache import FitCache, fits_kept_bytes
from .hypothesis import AtomCell, Hypothesis, as_hypothesis, read_cells
from .projection import Projection, fixed_weights, project, raw_weights
from .score import Score, read_score, score, scores
from .silence import silence
from .standin import Removed, StandIn

#: A fitted template β below this share of the largest ``|β|`` named in its own cell has no sign
#: worth checking (``Faithfulness.signs_agree``: ``1 - I`` in one cell, each part's sign).
SIGN_RELATIVE = 0.1
#: Circuit variants built and run together at most (each holds its kept and removed weights, per
#: layer ``(H_l, D_l, D_l)``): bounds the analysis's memory whatever the number of cells searched
#: or placements tested (``memory.analysis_estimate`` counts this many).
CIRCUITS_HELD = 64
#: Circuits still being fitted after this many seconds show a progress bar (up to ~0.2 s each).
PROGRESS_AFTER_S = 2.0
def read_out(model: DisentangledModel, read: tuple[str, ...] | None) -> Tensor:
    """``W_U`` with the rows outside the ``read`` blocks zeroed (all kept for ``None``)."""
    W = model.unembed.W_U.detach().clone()
    if read is None:
        return W
    keep = torch.zeros(W.shape[0], dtype=torch.bool, device=W.device)
    for block in read:
        keep[model.stream.slice(block, model.cfg.n_layers)] = True
    return W * keep[:, None].to(W.dtype)


@dataclass(frozen=True)
class Faithfulness:
    """What :func:`faithfulness` measures (see the module docstring for the definitions)."""

    hypothesis: str
    unit: str
    cells: tuple[AtomCell, ...]
    read: tuple[str, ...] | None
    betas: tuple[float, ...]  # fitted β per cell, in ``cells`` order
    template_betas: tuple[float, ...]  # β of each cell's template alone, fitted jointly (atoms)
    weight_share: float  # share of the gauge-fixed weights the fitted atoms carry
    baseline: float  # MSE with everything ablated: 0.5 everywhere, d/4
    model: Score
    circuit: Score  # the circuit-only model: faithfulness
    without: Score | None  # the model less the atoms: completeness (None: not run, see Tester)
    minimality: tuple[Score, ...] = field(default=())  # circuit less each cell, in ``cells`` order
    #: Where the tested construction sits (the hypothesis's); ``None`` for a circuit, and for a
    #: construction on its own shape, as registered (``hypothesis`` is then its bare name).
    placement: Placement | None = None
    #: ``(name, difference, se)``: this test's loss recovered less that of the rule's best, ``name``,
    #: measured on the same samples (``analysis.ties.paired``); ``None`` when not compared
    versus: tuple[str, float, float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cells", read_cells(self.cells))
        if self.placement is not None and self.placement.trivial:
            object.__setattr__(self, "placement", None)

    @property
    def construction(self) -> str:
        """The registry construction tested (its placement's), else the hypothesis's name."""
        return self.placement.construction if self.placement is not None else self.hypothesis

    @property
    def summed(self) -> bool:
        """Whether the construction sits on a sum of a layer's heads. A record written before
        placements were kept (every construction then one head per layer) says so by its cells:
        some layer's cells on several heads."""
        if self.placement is not None:
            return self.placement.summed
        heads: dict[int, set[int]] = {}
        for cell in self.cells:
            heads.setdefault(cell.layer, set()).add(cell.head)
        return any(len(h) > 1 for h in heads.values())

    @property
    def n_atoms(self) -> int:
        return len(self.cells)

    @property
    def n_cells(self) -> int:
        """Distinct (layer, head, query, key) cells: a cell holding ``1 - I`` is one cell, two atoms."""
        return len({cell[:4] for cell in self.cells})

    @property
    def size_text(self) -> str:
        """``"9 cells (10 atoms)"``, or ``"3 cells"`` when every cell holds one atom."""
        text = f"{self.n_cells} cells"
        return text if self.n_cells == self.n_atoms else f"{text} ({self.n_atoms} atoms)"

    @property
    def signs_agree(self) -> bool:
        """Every template the hypothesis names has a positive fitted β where it matters: the
        weights point the way the hypothesis says (a cell test alone cannot tell ``I`` from ``-I``
        in the same cell). Judged cell by cell: a template matters unless its ``|β|`` is below
        ``SIGN_RELATIVE`` of the largest among the templates named in its own (layer, head, query,
        key) cell, so a cell holding one template always has its sign checked, however small its
        weights against the layer's largest cell (the content-mass guard's cells hold 4-8% of it)."""
        largest: dict[tuple[int, int, str, str], float] = {}
        for cell, b in zip(self.cells, self.template_betas):
            largest[cell.site] = max(largest.get(cell.site, 0.0), abs(b))
        return all(b > 0 or abs(b) < SIGN_RELATIVE * largest[cell.site]
                   for cell, b in zip(self.cells, self.template_betas))

    def to_dict(self) -> dict:
        return {"hypothesis": self.hypothesis, "unit": self.unit, "cells": [list(c) for c in self.cells],
                "read": None if self.read is None else list(self.read), "betas": list(self.betas),
                "template_betas": list(self.template_betas),
                "weight_share": self.weight_share, "baseline": self.baseline,
                "model": self.model.to_dict(), "circuit": self.circuit.to_dict(),
                "without": None if self.without is None else self.without.to_dict(),
                "minimality": [s.to_dict() for s in self.minimality],
                **({"placement": self.placement.to_dict()} if self.placement is not None else {}),
                **({"versus": list(self.versus)} if self.versus is not None else {})}

    @classmethod
    def from_dict(cls, data: dict) -> Faithfulness:
        return cls(data["hypothesis"], data["unit"], read_cells(data["cells"]),
                   None if data["read"] is None else tuple(data["read"]), tuple(data["betas"]),
                   tuple(data["template_betas"]),
                   data["weight_share"], data["baseline"], read_score(data["model"]),
                   read_score(data["circuit"]),
                   None if data["without"] is None else read_score(data["without"]),
                   tuple(read_score(s) for s in data["minimality"]),
                   Placement.from_dict(data["placement"]) if data.get("placement") else None,
                   tuple(data["versus"]) if data.get("versus") else None)


Ablation = Literal["zero", "mean", "resample", "silence"]  # how a removed part is removed (Tester)
ABLATIONS = get_args(Ablation)


def check_batch(model: DisentangledModel, batch) -> None:
    """``batch`` must be a :class:`Batch` of the model's layout (one line saying which it is not)."""
    if not isinstance(batch, Batch):
        raise ValueError(f"batch must be a Batch, got {type(batch).__name__}")
    if batch.layout != model.cfg.layout:
        raise ValueError(f"batch layout {batch.layout} differs from the model's {model.cfg.layout}")


class Tester:
    """Runs circuit-only and ablated variants of one model on one batch. The model's own output
    (the clean run), its gauge-fixed weights and each head's fit to a set of cells are computed
    once; variants run together (``model.variants.forward_many``), under every ablation style.

    ``ablation``: how a removed part of ``A`` is removed. ``"zero"``: zeroed in the gauge-fixed
    frame. ``"mean"``: its score contribution ``h_i R h_jᵀ`` (``R`` the removed part, ``h`` the
    clean run's stream) is replaced by its mean over the ``reference`` batch (default: the batch
    itself), per head and (query, key) position. ``"resample"``: replaced by its value on another
    input, sample ``b`` taking the ``reference`` batch's sample ``b`` (by default the batch's own
    next sample, ``b + 1``). ``"silence"``: as ``"zero"``, and a head left with no weight is
    knocked out instead of attending uniformly (``analysis.silence``). Removed read-out rows are
    zeroed either way. ``output``: the model's own output on ``batch`` ``(B, d, d)``, when already
    computed (``model.variants.model_run``)."""

    def __init__(self, model: DisentangledModel, batch: Batch, ablation: Ablation = "zero",
                 reference: Batch | None = None, output: Tensor | None = None):
        check_batch(model, batch)
        check_choice("ablation", ablation, ABLATIONS)
        if model.device.type == "cpu":
            keep_freed_memory()  # circuits free and re-allocate their tensors, run after run
        self.model, self.ablation, self.reference = model, ablation, reference
        self.batch = batch.to(model.device, model.cfg.torch_dtype)
        self.baseline = 0.25 * model.cfg.d
        if output is None:
            with torch.no_grad():
                output = readout_forward(model, self.batch.X)  # (B, d, d), the read-out rows only
        elif output.shape != (len(batch), model.cfg.d, model.cfg.d):
            raise ValueError(f"output must be the model's output on the batch, shape "
                             f"{(len(batch), model.cfg.d, model.cfg.d)}, got {tuple(output.shape)}")
        self.output = output
        Y = self.batch.Y.to(self.output)
        self.clean_errors = (self.output.double() - Y.double()).pow(2).sum(-1).mean(-1)  # (B,)
        self.clean = score(self.output, self.batch, self.baseline, float(mse(self.output, Y)),
                           self.clean_errors)
        self.fixed = fixed_weights(model)
        self._fits = FitCache(fits_kept_bytes(model.cfg))
        self._scores: dict[tuple, Score] = {}  # each circuit's score on this batch, by its weights
        self._reads: dict[frozenset | None, Tensor] = {}  # read_out by the blocks read
        self._standin = None
        if ablation in ("mean", "resample"):
            ref = (reference or batch).X  # (B_ref, T, d)
            if ablation == "resample":  # each sample's own reference sample, paired before the
                # streams are formed: a screen on the batch's first samples forms theirs only
                ref = ref[(torch.arange(len(batch)) + (1 if reference is None else 0)) % len(ref)]
            with torch.no_grad():
                streams = model.residual_streams(ref.to(model.device, model.cfg.torch_dtype),
                                                 check_input=False, last=model.cfg.n_layers - 1)
            streams = [h.to("cpu", torch.float64) for h in streams]  # h^0 … h^{L-1} (B_ref, T, D_l)
            self._standin = StandIn(model.stream, self.fixed, streams, per_sample=ablation == "resample")

    def head(self, n: int) -> Tester:
        """A tester of the same model, ablation and reference on the first ``n`` samples of the
        batch (itself when it has no more), sharing the gauge-fixed weights and each head's fits,
        which depend on the weights only."""
        if len(self.batch) <= n:
            return self
        first = self._on(self.batch.head(n))
        first.fixed, first._fits, first._reads = self.fixed, self._fits, self._reads
        return first

    def _on(self, batch: Batch) -> Tester:  # head's: a tester of the same kind on ``batch``
        return Tester(self.model, batch, self.ablation, self.reference)

    def _key(self, hyp: Hypothesis) -> tuple:
        """What a circuit's score depends on: its sites (``unit="cells"``) or atoms, and read."""
        cells = frozenset(c[:4] for c in hyp.cells) if hyp.unit == "cells" else tuple(hyp.cells)
        return hyp.unit, cells, None if hyp.read is None else frozenset(hyp.read)

    def project(self, hyp: Hypothesis, betas: bool = True) -> Projection:
        return project(self.model, hyp, fixed=self.fixed, fits=self._fits, betas=betas)

    def run_many(self, variants: Sequence[tuple[Sequence[Tensor], Tensor]],
                 removed: Sequence[Removed | Sequence[Tensor]] | None = None) -> list[Score]:
        """Each ``(As, W_U)`` (per layer ``(H, D, D)``, and ``(D_L, d)``) run on the batch, scored,
        as batched forwards; ``removed``: per variant, the parts of ``A`` it removed (under mean or
        resample ablation what stands in for their scores, ``analysis.standin``, is added to the
        variant's)."""
        outs = self.outputs(variants, removed)
        return scores(outs, self.batch, self.baseline, self.clean.mse, self.clean_errors)

    def outputs(self, variants: Sequence[tuple[Sequence[Tensor], Tensor]],
                removed: Sequence[Removed | Sequence[Tensor]] | None = None) -> list[Tensor]:
        """:meth:`run_many`'s outputs ``(B, d, d)`` before they are scored."""
        offsets = None
        if self._standin is not None and removed is not None:
            offsets = lambda i: self._standin(removed[i])  # noqa: E731 - one chunk at a time
        if self.ablation == "silence":
            variants = [silence(self.model.cfg, As, W_U) for As, W_U in variants]
        return forward_many(self.model.cfg, variants, self.batch.X, offsets=offsets)

    def errors(self, hyps: Sequence[Hypothesis]) -> list[Tensor]:
        """Each hypothesis's circuit-only model's per-sample MSE ``(B,)`` float64 on the batch: what
        a paired comparison of two claims on the same samples reads (``analysis.ties.paired``)."""
        pairs = [self._circuit(h) for h in hyps]
        Y = self.batch.Y.double()
        return [(out.double() - Y).pow(2).sum(-1).mean(-1)
                for out in self.outputs([v for v, _ in pairs], [r for _, r in pairs])]

    def run(self, As: Sequence[Tensor], W_U: Tensor,
            removed: Removed | Sequence[Tensor] | None = None) -> Score:
        return self.run_many([(As, W_U)], None if removed is None else [removed])[0]

    def _circuit(self, hyp: Hypothesis, proj: Projection | None = None):
        """``((kept, W_U read), removed)``: the circuit-only variant and what it removed."""
        raw = proj.raw if proj is not None else raw_weights(self.model, hyp, self.fixed, self._fits)
        read = None if hyp.read is None else frozenset(hyp.read)
        if read not in self._reads:
            self._reads[read] = read_out(self.model, hyp.read)
        return (raw, self._reads[read]), Removed(1.0, tuple(-r for r in raw))

    def circuits(self, hyps: Sequence[Hypothesis],
                 projs: Sequence[Projection | None] | None = None) -> list[Score]:
        """The circuit-only model of each hypothesis, run together (``projs``: their projections,
        when already fitted). A circuit this tester has scored before is not run again: the
        construction tests meet one circuit under several constructions, and the minimal search
        meets them again (its start is a construction's circuit, its first pruning trials that
        test's per-cell runs)."""
        keys = [self._key(h) for h in hyps]
        first: dict[tuple, int] = {}  # each circuit not scored yet: its first index
        for i, k in enumerate(keys):
            if k not in self._scores:
                first.setdefault(k, i)
        todo = list(first.values())
        with progress_bar(total=len(todo), desc="circuits fitted and run", unit="circuit",
                          delay=PROGRESS_AFTER_S, leave=False, disable=len(todo) < 2) as bar:
            for start in range(0, len(todo), CIRCUITS_HELD):
                chunk, pairs = todo[start:start + CIRCUITS_HELD], []
                for i in chunk:
                    pairs.append(self._circuit(hyps[i], projs[i] if projs else None))
                    bar.update(0.5)  # the fit: about half a circuit's time in a wide model
                for i, s in zip(chunk, self.run_many([v for v, _ in pairs], [r for _, r in pairs])):
                    self._scores[keys[i]] = s
                bar.update(0.5 * len(chunk))
        return [self._scores[k] for k in keys]

    def circuit(self, hyp: Hypothesis, proj: Projection | None = None) -> Score:
        variant, removed = self._circuit(hyp, proj)
        return self.run(*variant, removed)

    def test_many(self, hyps: Sequence[Hypothesis], minimality: bool = True,
                  complete: bool = True) -> list[Faithfulness]:
        """:meth:`test` of every hypothesis, their variants run together (zero ablation), in
        groups of at most ``CIRCUITS_HELD`` variants (one larger hypothesis alone).
        ``complete=False``: without the whole-model run less each circuit (``without`` is
        ``None``; :meth:`completeness` runs it for those that need it)."""
        out, group, held = [], [], 0
        for hyp in hyps:
            n = 1 + complete + (len(hyp) if minimality else 0)
            if group and held + n > CIRCUITS_HELD:
                out += self._test_group(group, minimality, complete)
                group, held = [], 0
            group.append(hyp)
            held += n
        return out + (self._test_group(group, minimality, complete) if group else [])

    def _without(self, hyp: Hypothesis, proj: Projection):
        """``((the model less the circuit), removed)``: the completeness variant."""
        rest = [f - k for f, k in zip(proj.fixed, proj.kept)]
        return (rest, self.model.unembed.W_U.detach()), Removed(0.0, proj.raw)

    def completeness(self, hyps: Sequence[Hypothesis],
                     projs: Sequence[Projection] | None = None) -> list[Score]:
        """Per hypothesis, the whole model less its circuit (:attr:`Faithfulness.without`), all run
        together: what a test with ``complete=False`` lacks (``projs``: their projections, when
        already fitted)."""
        projs = projs or [self.project(h, betas=False) for h in hyps]
        pairs = [self._without(h, p) for h, p in zip(hyps, projs)]
        return self.run_many([v for v, _ in pairs], [r for _, r in pairs])

    def _test_group(self, hyps: Sequence[Hypothesis], minimality: bool,
                    complete: bool = True) -> list[Faithfulness]:
        projs = [self.project(h) for h in hyps]
        less = [[h.without(i) for i in range(len(h))] if minimality else [] for h in hyps]
        circuits = self.circuits([*hyps, *(x for group in less for x in group)],
                                 [*projs, *(None for group in less for _ in group)])
        withouts = iter(self.completeness(hyps, projs) if complete else [])
        minimal = iter(circuits[len(hyps):])
        out = []
        for hyp, proj, circuit, group in zip(hyps, projs, circuits, less):
            atoms = proj if hyp.unit == "atoms" else self.project(
                Hypothesis(hyp.name, hyp.cells, hyp.read, "atoms"))
            out.append(Faithfulness(hyp.name, hyp.unit, hyp.cells, hyp.read, proj.betas,
                                    atoms.betas, proj.weight_share, self.baseline, self.clean,
                                    circuit, next(withouts) if complete else None,
                                    tuple(next(minimal) for _ in group), hyp.placement))
        return out

    def minimality(self, hyps: Sequence[Hypothesis]) -> list[tuple[Score, ...]]:
        """Per hypothesis, its circuit less each atom (:attr:`Faithfulness.minimality`), all run
        together: what a test without minimality lacks."""
        scores = iter(self.circuits([h.without(i) for h in hyps for i in range(len(h))]))
        return [tuple(next(scores) for _ in range(len(h))) for h in hyps]

    def test(self, hyp: Hypothesis, minimality: bool = True) -> Faithfulness:
        """Faithfulness (the circuit alone), completeness (the model without it) and minimality
        (the circuit less each cell) of one hypothesis."""
        return self.test_many([hyp], minimality)[0]


def evaluate_many(model: DisentangledModel, hypotheses: Sequence, batch: Batch, *,
                  tester: Tester | None = None) -> list[Score]:
    """The circuit-only model of each hypothesis (anything :func:`as_hypothesis` takes) scored on
    ``batch``: one :class:`Score` each, as ``faithfulness(...).circuit``. ``tester``: a
    :class:`Tester` of ``model`` on ``batch`` already built (default: a new one, zero ablation)."""
    tester = tester or Tester(model, batch)
    return tester.circuits([as_hypothesis(model, h) for h in hypotheses])


def faithfulness(model: DisentangledModel, hypothesis, batch: Batch, *,
                 read=None, unit: str | None = None, minimality: bool = True,
                 ablation: Ablation = "zero", reference: Batch | None = None) -> Faithfulness:
    """Run the hypothesis's circuit on its own, the model without it, and the circuit less each atom.

    ``hypothesis``, ``read`` and ``unit`` as in :func:`as_hypothesis`; ``batch``: the inputs scored (a few
    hundred samples separate the mechanisms sharply); ``ablation``/``reference``: how removed
    cells are removed (:class:`Tester`: ``"zero"``, the rule's, ``"mean"`` or ``"resample"``). Verdicts:
    ``analysis.verdict``.
    """
    check_disentangled(model)
    tester = Tester(model, batch, ablation, reference)
    return tester.test(as_hypothesis(model, hypothesis, read, unit), minimality)
