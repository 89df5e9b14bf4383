"""Causal scrubbing of a circuit claim, cell-level path patching, and completeness under every style.

A circuit claim (``analysis.hypothesis``) says which cells of the attention weights compute the
answer. Zero, mean and resample ablation (``analysis.faithfulness.Tester``) test it by removing
the rest: zeroing it, or putting in its place its score contribution averaged over inputs or taken
on another input. **Causal scrubbing** (Chan et al. 2022) asks a sharper question: each path the
claim names is fed from an input that agrees with the sample on what the claim says the path
computes, every path it does not name from an input with nothing in common, and everything
downstream is recomputed. In this model the paths into a head are score terms (there are no value
or output matrices: a head moves the stream itself), so :class:`ScrubTester` forms every score
term from partners: each of the claim's cells ``h' K h'ᵀ`` on a partner equivalent under what the
claim says that cell reads, the rest ``h'' R h''ᵀ`` on another input, each on the partner's own
clean stream; the attention they make moves the sample's own recomputed stream. That is one level
of the recursion: a claimed cell reads its partner's clean run. ``analysis.treeify`` goes
down the recursion: each claimed cell reads its partner's run scrubbed in
turn, to clean runs ``depth`` levels down; at ``n_layers`` levels every path is fed as the claim
says (layer 1 reads the input alone), which is Chan et al.'s treeified hypothesis.

**What each claim says each cell reads** (``analysis.readings``). A registered construction's
hypothesis is derived from its cells, not fixed: built exactly, each cell's term is compared on
inputs that keep the sample's ``P`` or its ``Y``, per (query segment, key segment) of the rows,
so each (cell, segments) reads nothing, ``P``, ``Y`` or both, and is fed from another input, one
with the same ``P``, one with the same ``Y``, or the sample itself (:data:`readings.PARTNER`).
The lookups of every registered form read ``P`` where they find ``P`` rows and both where their
keys hold ``Y_P`` content (``P Y``); docs/results/scrubbing.md tabulates them. A claim that says
nothing of what its cells read (a cell list, a minimal circuit, a random control set) is fed from
one partner, :data:`CLAIM_EQUIVALENCE`'s **the same P, another Y** (``"P"``). The empty claim is
fed entirely from other inputs: resample ablation of everything, which fails, as a test that can
reject claims must (``analysis.controls``). A claim's *completeness* under scrubbing feeds the
claim's cells from the opposite partner, **another P, the same Y** (``"Y"``), the rest run on the
sample: a model whose mechanism is the circuit then loses the answer.

**Cell-level path patching** (:func:`cell_patching`) localises what a failing claim misses: each
(layer, head, query block, key block) cell outside the claim is added to it alone (under
scrubbing fed as the claim's cells are, under an ablation run on the sample), the rest still
replaced, and the loss it recovers is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

import torch

from ..config import ModelConfig
from ..errors import check_choice
from ..labels import layer_name
from ..maths import constructions
from ..model.build import analysis_model
from ..model.disentangled import DisentangledModel, check_disentangled
from ..model.variants import forward_many
from ..task import Batch
from .faithfulness import Tester, read_out
from .hypothesis import Hypothesis, as_hypothesis
from .readings import EQUIVALENCES, PARTNER, partner_input, placed_readings
from .score import Score
from .standin import Removed, StandIn

#: The partner of a claim's cells where the claim says nothing of what they read, and the
#: equivalence completeness turns round (module docstring): every registered form routes by P.
CLAIM_EQUIVALENCE = {name: "P" for name in constructions.names()}
#: The styles :func:`completeness` scores, zero, mean and resample ablation and scrubbing (not
#: silencing, ``analysis.silence``: it differs from zero ablation only where a variant leaves a head
#: no weight at all, which the model less a claim does only when the claim holds a whole head).
Style = Literal["zero", "mean", "resample", "scrub"]
STYLES = get_args(Style)
#: A cell whose gauge-fixed weights outside the claim have a smaller norm is not patched.
CELL_NORM = 1e-6


def analysed(model) -> DisentangledModel:
    """The model a claim is tested on: a disentangled model itself, or a standard attention-only
    model's exact map, as ``analyze`` reads it (``model.build.analysis_model``); one-line
    ``ValueError`` for anything else, and for weights that are not finite (naming the layer)."""
    if isinstance(getattr(model, "cfg", None), ModelConfig):
        model = analysis_model(model)
    check_disentangled(model)
    named = [(layer_name(layer), block.attn.A) for layer, block in enumerate(model.blocks)]
    for where, weights in [*named, ("the read-out (unembed.W_U)", model.unembed.W_U)]:
        if not bool(torch.isfinite(weights).all()):
            raise ValueError(f"the model's weights are not finite (NaN or inf) in {where}: a claim "
                             f"on them scores NaN")
    return model


def equivalence_of(hypothesis) -> str:
    """The equivalence a claim names: a registered construction's from :data:`CLAIM_EQUIVALENCE`,
    ``"P"`` for any other claim (a circuit of this task's lookups routes by ``P``)."""
    name = getattr(hypothesis, "name", hypothesis)
    return CLAIM_EQUIVALENCE.get(name, "P") if isinstance(name, str) else "P"


@dataclass(frozen=True)
class Fed(Removed):
    """A circuit-only variant's removed part, with where its claimed cells are fed from: per cell
    ``(layer, head, query rows, key columns, {partner: (T, T) positions})`` (:data:`readings.PARTNER`
    names the partners); a claimed cell not listed is fed from the tester's default partner."""

    fed: tuple = ()


class ScrubTester(Tester):
    """A :class:`Tester` whose circuits are scrubbed (module docstring): what a variant removed is
    scored on :func:`partner_input` ``("any", shift)``; its live weights (the claim's cells) on
    partners equivalent under the claim, each cell at each of its positions on the partner of what
    the claim says it reads there (``Hypothesis.reads``, derived from a registered construction's
    placement by ``analysis.readings``), the cells of a claim that says nothing on
    :func:`partner_input` ``(keep, shift + 1)``; nothing is scored on the sample's own stream
    except a term the claim says reads both ``P`` and ``Y`` (its only equivalent input is the
    sample), and the attention moves the sample's own recomputed stream."""

    def __init__(self, model: DisentangledModel, batch: Batch, keep: str = "P", shift: int = 1):
        super().__init__(model, batch, "resample", reference=partner_input(batch, "any", shift))
        if keep not in EQUIVALENCES:
            raise ValueError(f"keep must be one of {tuple(EQUIVALENCES)}, got {keep!r}")
        self.keep, self.shift = keep, shift
        self._fed: dict[str, StandIn] = {}  # by partner: the stand-in of its clean streams

    def _on(self, batch: Batch) -> ScrubTester:
        """A scrub tester of the same default partner and shift on ``batch`` (``head``'s: a screen
        scrubs too)."""
        return ScrubTester(self.model, batch, self.keep, self.shift)

    def partner_of(self, batch: Batch, keep: str) -> Batch:
        """``batch``'s partner that keeps ``keep`` (:data:`readings.PARTNER`'s values; ``"all"``:
        ``batch`` itself; ``"removed"``: the removed part's, another input at ``shift``), each at
        its own shift past the removed part's, so no two partners are the same input where the
        batch allows."""
        if keep == "all":
            return batch
        if keep == "removed":
            return partner_input(batch, "any", self.shift)
        B = len(batch)
        shifts = [k for k in range(self.shift + 1, self.shift + 2 * B) if k % B]
        return partner_input(batch, keep, shifts[("P", "Y", "any").index(keep) % len(shifts)])

    def partner(self, keep: str) -> StandIn:
        """The stand-in of the clean streams of the batch's partner ``keep`` (:meth:`partner_of`)."""
        if keep not in self._fed:
            X = self.partner_of(self.batch, keep).X
            with torch.no_grad():
                streams = self.model.residual_streams(X.to(self.model.device, self.model.cfg.torch_dtype),
                                                      check_input=False, last=self.model.cfg.n_layers - 1)
            self._fed[keep] = StandIn(self.model.stream, self.fixed,
                                      [h.to("cpu", torch.float64) for h in streams], per_sample=True)
        return self._fed[keep]

    def with_reads(self, hyp: Hypothesis) -> Hypothesis:
        """``hyp`` with what it says its cells read: its own ``reads``, else its placement's
        (``analysis.readings.placed_readings``), else none."""
        if hyp.reads is not None or hyp.placement is None:
            return hyp
        placed = placed_readings(hyp.placement, self.model.cfg)
        return replace(hyp, reads=tuple((site, tuple(reading.items())) for site, reading in placed))

    def _key(self, hyp: Hypothesis) -> tuple:
        return (*super()._key(hyp), self.with_reads(hyp).reads)

    def _test_group(self, hyps, minimality, complete=True):
        return super()._test_group([self.with_reads(h) for h in hyps], minimality, complete)

    def _circuit(self, hyp: Hypothesis, proj=None):
        hyp = self.with_reads(hyp)
        variant, removed = super()._circuit(hyp, proj)
        return variant, Fed(removed.whole, removed.part, self.fed_positions(hyp))

    def fed_positions(self, hyp: Hypothesis) -> tuple:
        """:attr:`Fed.fed` of a claim: per cell it says something of, its positions by partner."""
        layout, stream, T = self.model.cfg.layout, self.model.stream, self.model.cfg.layout.T
        out = []
        for (layer, head, query, key), pairs in hyp.reads or ():
            where: dict[str, torch.Tensor] = {}
            for (q_segment, k_segment), reads in pairs:
                mask = where.setdefault(PARTNER[reads], torch.zeros(T, T, dtype=torch.float64))
                mask[layout.rows(q_segment), layout.rows(k_segment)] = 1.0
            out.append((layer, head, stream.slice(query, layer), stream.slice(key, layer), where))
        return tuple(out)

    def outputs(self, variants, removed=None) -> list[torch.Tensor]:
        """Each ``(As, W_U)`` scrubbed: ``As`` scored on the partners its cells are fed from
        (:class:`Fed`), ``removed`` (per variant, as :meth:`Tester.run_many` takes it; ``None``:
        nothing) on the other input."""
        if removed is None:
            removed = [[torch.zeros_like(A) for A in As] for As, _ in variants]
        zeros = [([torch.zeros_like(A) for A in As], W_U) for As, W_U in variants]

        def offsets(i: int) -> list[torch.Tensor]:
            kept = [A.detach().to("cpu", torch.float64) for A in variants[i][0]]
            pieces, rest = carve(kept, getattr(removed[i], "fed", ()))
            out = self._standin(removed[i])
            for layer, part, where in pieces:
                for keep, positions in where.items():
                    term = self.partner(keep).through_cells(layer, part, 0.0)  # (B, H, T, T)
                    out[layer] = out[layer] + term * positions
            default = self.partner(self.keep)(Removed(0.0, tuple(rest)))
            return [a + b for a, b in zip(out, default)]

        return forward_many(self.model.cfg, zeros, self.batch.X, offsets=offsets)


def carve(weights, fed) -> tuple[list, list[torch.Tensor]]:
    """Each fed cell's part of ``weights`` (per layer ``(H, D, D)``; ``fed``: :attr:`Fed.fed`) cut
    out: ``([(layer, part (H, D, D), positions by partner), …], the rest per layer)``."""
    rest = [W.clone() for W in weights]
    pieces = []
    for layer, head, q, k, where in fed:
        part = torch.zeros_like(rest[layer])
        part[head, q, k] = rest[layer][head, q, k]
        rest[layer][head, q, k] = 0.0
        pieces.append((layer, part, where))
    return pieces, rest


def scrub_tester(model: DisentangledModel, batch: Batch, keep: str = "P",
                 shift: int = 1) -> ScrubTester:
    """A :class:`ScrubTester`: its circuit-only scores are the scrubbed model's."""
    return ScrubTester(model, batch, keep, shift)


def fed_from(model: DisentangledModel, batch: Batch, keep: str, shift: int = 1) -> Tester:
    """A resample :class:`Tester` whose removed parts are fed, sample by sample, from
    :func:`partner_input` ``(keep, shift)``, the rest run on the sample (completeness under
    scrubbing)."""
    return Tester(model, batch, "resample", reference=partner_input(batch, keep, shift))


def scrub(model: DisentangledModel, hypothesis, batch: Batch, *, keep: str | None = None,
          read=None, unit: str | None = None, shift: int = 1) -> Score:
    """The scrubbed model's :class:`Score` on ``batch``: the claim's cells run on each sample, the
    rest of ``A`` fed from its partner (``keep``: default the claim's :func:`equivalence_of`),
    read-out rows outside the claim zeroed. ``hypothesis``, ``read``, ``unit``: as in
    ``as_hypothesis``. A claim through whose cells runs every path by which what the partner
    changes reaches the output scores as the model itself (loss recovered 1). One level of the
    recursion (partners' clean runs; ``analysis.treeify`` goes down it). ``model``: any
    :func:`analysed` takes."""
    model = analysed(model)
    hyp = as_hypothesis(model, hypothesis, read, unit)
    return scrub_tester(model, batch, keep or equivalence_of(hypothesis), shift).circuit(hyp)


def completeness(model: DisentangledModel, hypothesis, batch: Batch, *,
                 read=None, unit: str | None = None, shift: int = 1) -> dict[str, Score]:
    """The model with the claim's cells removed, scored under every style (:data:`STYLES`): zero,
    mean (over ``batch``) and resample (sample ``b + shift``) ablation of those cells, and scrubbing
    them, i.e. feeding them from a partner that differs on what the claim says matters (the claim
    says ``P``: the same ``Y``, another ``P``). A complete claim leaves little of the loss
    recovered under each. ``model``: any :func:`analysed` takes."""
    model = analysed(model)
    hyp = as_hypothesis(model, hypothesis, read, unit)
    opposite = {"P": "Y", "Y": "P", "any": "any"}[equivalence_of(hypothesis)]
    testers = {style: Tester(model, batch, style) for style in STYLES if style != "scrub"}
    if shift != 1:
        testers["resample"] = Tester(model, batch, "resample", partner_input(batch, "any", shift))
    testers["scrub"] = fed_from(model, batch, opposite, shift)
    return {style: tester.test(hyp, minimality=False).without for style, tester in testers.items()}


@dataclass(frozen=True)
class CellPatch:
    """One cell outside the claim restored: ``(layer, head, query, key)``, the norm of the
    gauge-fixed weights it restores, and the score of the claim plus it, the rest replaced."""

    layer: int
    head: int
    query: str
    key: str
    norm: float
    score: Score

    @property
    def cell(self) -> tuple[int, int, str, str]:
        return self.layer, self.head, self.query, self.key

    def to_dict(self) -> dict:
        return {"cell": list(self.cell), "norm": self.norm, "score": self.score.to_dict()}


@dataclass(frozen=True)
class PathPatching:
    """What :func:`cell_patching` measures: the claim's own score with the rest replaced (``base``)
    and, per cell outside it, that score with the cell restored (largest recovery first)."""

    hypothesis: str
    style: Style
    base: Score
    cells: tuple[CellPatch, ...]

    def gain(self, patch: CellPatch) -> float:
        """The loss recovered that restoring ``patch``'s cell adds to the claim's."""
        return (patch.score.loss_recovered or 0.0) - (self.base.loss_recovered or 0.0)

    def to_dict(self) -> dict:
        return {"hypothesis": self.hypothesis, "style": self.style, "base": self.base.to_dict(),
                "cells": [{**c.to_dict(), "gain": self.gain(c)} for c in self.cells]}


def _tester(model, batch, style: Style, keep: str, shift: int) -> Tester:
    check_choice("style", style, STYLES)
    if style == "scrub":
        return scrub_tester(model, batch, keep, shift)
    if style == "resample" and shift != 1:
        return Tester(model, batch, style, partner_input(batch, "any", shift))
    return Tester(model, batch, style)


def _cell(model: DisentangledModel, cell) -> tuple[int, int, str, str]:
    """``cell`` as a tuple, or a one-line ``ValueError`` unless it is a ``(layer, head, query,
    key)`` of ``model``."""
    cfg, why = model.cfg, None
    if not (isinstance(cell, (tuple, list)) and len(cell) == 4):
        why = "a cell is (layer, head, query block, key block)"
    elif not (isinstance(cell[0], int) and 0 <= cell[0] < cfg.n_layers):
        why = f"layer must be in [0, {cfg.n_layers - 1}]"
    elif not (isinstance(cell[1], int) and 0 <= cell[1] < cfg.heads[cell[0]]):
        why = f"head must be in [0, {cfg.heads[cell[0]] - 1}]"
    elif not {cell[2], cell[3]} <= set(model.stream.labels(cell[0])):
        why = f"the blocks of {layer_name(cell[0])} are {model.stream.labels(cell[0])}"
    if why:
        raise ValueError(f"cells: {cell!r} is not a cell of this model ({why})")
    return tuple(cell)


def cell_patching(model: DisentangledModel, hypothesis, batch: Batch, *,
                  style: Style = "scrub", keep: str | None = None, shift: int = 1,
                  cells: Sequence[tuple[int, int, str, str]] | None = None) -> PathPatching:
    """Per (layer, head, query block, key block) cell outside the claim, the claim with that cell
    restored: its gauge-fixed weights outside the claim, in that cell only, added to the claim's
    (under scrubbing fed from the claim's partner, else run on the sample), the rest still
    replaced under ``style`` (``"scrub"``, or ``"zero"``, ``"mean"``,
    ``"resample"``). ``cells``: the cells to try (default every cell holding weights outside the
    claim, norm above :data:`CELL_NORM`; one the model does not have is refused). The cell that
    recovers the loss is what the claim misses. Under scrubbing every kept cell, the claim's
    and the restored one, is fed from the one partner ``keep`` (default the claim's
    :func:`equivalence_of`), not cell by cell as :func:`scrub` feeds a construction's: a restored
    cell says nothing of what it reads. ``hypothesis`` as in ``as_hypothesis`` (a
    ``Hypothesis`` from it carries its own read-out blocks and unit); ``model``: any
    :func:`analysed` takes."""
    model = analysed(model)
    wanted = None if cells is None else {_cell(model, cell) for cell in cells}
    hyp = as_hypothesis(model, hypothesis)
    tester = _tester(model, batch, style, keep or equivalence_of(hypothesis), shift)
    proj = tester.project(hyp, betas=False)
    rest = [f - k for f, k in zip(proj.fixed, proj.kept)]  # per layer (H, D, D), float64
    stream, W_U = model.stream, read_out(model, hyp.read)
    found: list[tuple[tuple[int, int, str, str], float, torch.Tensor]] = []
    for layer, R in enumerate(rest):
        for head in range(R.shape[0]):
            for (query, key), view in stream.split(R[head], layer).items():
                if wanted is not None and (layer, head, query, key) not in wanted:
                    continue
                norm = float(view.norm())
                if norm > CELL_NORM:
                    mask = torch.zeros_like(R)
                    mask[head, stream.slice(query, layer), stream.slice(key, layer)] = 1.0
                    found.append(((layer, head, query, key), norm, (layer, mask)))
    variants, removed = [(list(proj.kept), W_U)], [rest]
    for _, _, (layer, mask) in found:
        kept = [k + (r * mask if i == layer else 0) for i, (k, r) in enumerate(zip(proj.kept, rest))]
        variants.append((kept, W_U))
        removed.append([r - (r * mask if i == layer else 0) for i, r in enumerate(rest)])
    scores = tester.run_many(variants, removed)
    patches = [CellPatch(*cell, norm, s) for (cell, norm, _), s in zip(found, scores[1:])]
    patches.sort(key=lambda p: -(p.score.loss_recovered or -1e9))
    return PathPatching(hyp.name, style, scores[0], tuple(patches))

