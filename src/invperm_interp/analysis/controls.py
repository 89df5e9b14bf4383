"""Negative controls: whether a test of circuit claims can reject a wrong one, on a given run.

A test that accepts any claim says nothing of the claim it accepts. Each style of removing the rest
of the model (zero, mean or resample ablation, ``analysis.faithfulness``; causal scrubbing,
``analysis.scrub``) is run here on claims known to be wrong or empty, on the run's own batch:

- **the empty claim**: no cell of any ``A`` matters, ``W_U`` kept whole. Every score term is
  removed: zeroed (uniform attention), replaced by its mean, by another input's, or by the
  partner's that scrubbing feeds (the same ``P``, another ``Y``). Where the empty claim passes the
  rule, the style cannot reject a claim on this run (:attr:`Control.testable` is False): the run is
  "cannot test" under it, never support for a name.
- **random cell sets** of the claim's size: ``draws`` sets of (layer, head, query block, key block)
  cells drawn uniformly without replacement from the model's cells, read out as the claim reads.
  Their circuit scores are judged by the rule's intervals (a random set claims no template, so no
  sign is checked).
- **the other constructions** that fit the model, each at its placement as the rule tests it.

A control is *rejected* when the rule judges it not faithful; a borderline control is not rejected
(the test cannot tell it from a faithful one). :attr:`Control.power` is the share of random sets
rejected, with its Wilson interval (:func:`wilson`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..model.disentangled import DisentangledModel
from ..task import Batch
from .faithfulness import Tester
from .hypothesis import Cell, Hypothesis, as_hypothesis
from .scrub import equivalence_of, scrub_tester
from .verdict import FAITHFUL, NOT_FAITHFUL, RULE, Rule

#: The styles a control runs under: the three ablations and causal scrubbing.
CONTROL_STYLES = ("zero", "mean", "resample", "scrub")
#: Random cell sets drawn per claim and style by default.
DRAWS = 20


def empty_claim(read: Sequence[str] | None = None) -> Hypothesis:
    """The claim that no cell of the attention weights matters, reading ``read`` (``None``: the
    whole ``W_U``)."""
    return Hypothesis("the empty claim", (), None if read is None else tuple(read), "cells")


def cannot_reject(empty, rule: Rule = RULE) -> bool:
    """Whether the empty claim's test (anything with a ``circuit`` score; ``None``: not run) is not
    rejected by ``rule``, judged faithful or borderline: then the style cannot test the run."""
    return empty is not None and rule.judge(empty.circuit) != NOT_FAITHFUL


def tester_for(model: DisentangledModel, batch: Batch, style: str, claim=None) -> Tester:
    """The tester of ``style`` (:data:`CONTROL_STYLES`) on ``batch``; scrubbing keeps what
    ``claim`` says matters (``analysis.scrub.equivalence_of``)."""
    if style not in CONTROL_STYLES:
        raise ValueError(f"style must be one of {CONTROL_STYLES}, got {style!r}")
    if style == "scrub":
        return scrub_tester(model, batch, equivalence_of(claim) if claim is not None else "P")
    return Tester(model, batch, style)


def random_sets(model: DisentangledModel, size: int, draws: int, seed: int = 0
                ) -> list[tuple[Cell, ...]]:
    """``draws`` sets of ``size`` distinct cells of the model's attention weights (every (layer,
    head, query block, key block)), each drawn uniformly without replacement, from ``seed``."""
    stream = model.stream
    sites = [Cell(layer, head, q.name, k.name, "1") for layer, heads in enumerate(model.cfg.heads)
             for head in range(heads) for q in stream.blocks(layer) for k in stream.blocks(layer)]
    if not 1 <= size <= len(sites):
        raise ValueError(f"size must be in [1, {len(sites)}] (the model's cells), got {size!r}")
    generator = torch.Generator().manual_seed(seed)
    return [tuple(sites[i] for i in sorted(torch.randperm(len(sites), generator=generator)[:size]))
            for _ in range(draws)]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% at the default ``z``) of a share ``k / n``; ``(0, 1)`` for
    ``n = 0``."""
    if n == 0:
        return 0.0, 1.0
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Control:
    """One style's negative controls for one claim on one run: the claim's own verdict, the empty
    claim's, how many of ``draws`` random sets of the claim's size were rejected, and the verdict
    on each other construction tested (``(label, verdict)``)."""

    style: str
    claim: str
    claim_verdict: str
    empty_verdict: str
    draws: int
    random_rejected: int
    others: tuple[tuple[str, str], ...] = ()

    @property
    def testable(self) -> bool:
        """False where the empty claim is not rejected: the style cannot reject a claim here."""
        return self.empty_verdict == NOT_FAITHFUL

    @property
    def power(self) -> float | None:
        """The share of random cell sets rejected (``None`` without draws)."""
        return self.random_rejected / self.draws if self.draws else None

    @property
    def power_interval(self) -> tuple[float, float]:
        return wilson(self.random_rejected, self.draws)

    @property
    def supports(self) -> bool:
        """The claim passes where the empty claim does not: a result the test could have refused."""
        return self.testable and self.claim_verdict == FAITHFUL

    def to_dict(self) -> dict:
        return {"style": self.style, "claim": self.claim, "claim_verdict": self.claim_verdict,
                "empty_verdict": self.empty_verdict, "draws": self.draws,
                "random_rejected": self.random_rejected, "others": [list(o) for o in self.others],
                "testable": self.testable}

    @classmethod
    def from_dict(cls, data: dict) -> Control:
        return cls(data["style"], data["claim"], data["claim_verdict"], data["empty_verdict"],
                   data["draws"], data["random_rejected"], tuple(tuple(o) for o in data["others"]))


def controls(model: DisentangledModel, claim, batch: Batch, *, others: Sequence = (),
             styles: Sequence[str] = CONTROL_STYLES, draws: int = DRAWS, seed: int = 0,
             rule: Rule = RULE) -> tuple[Control, ...]:
    """The negative controls of ``claim`` (anything ``as_hypothesis`` takes: a registry name, a
    :class:`Hypothesis` such as a placement's) on ``batch`` under each of ``styles``: its own
    verdict, the empty claim's, ``draws`` random cell sets of its size (from ``seed``) and each of
    ``others`` (claims, as ``claim``)."""
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 0:
        raise ValueError(f"draws must be an integer >= 0, got {draws!r}")
    hyp = as_hypothesis(model, claim)
    size = len({c.site for c in hyp.cells})
    sets = random_sets(model, size, draws, seed) if draws else []
    randoms = [Hypothesis(f"random {i}", cells, hyp.read, "cells") for i, cells in enumerate(sets)]
    other_hyps = [as_hypothesis(model, o) for o in others]
    out = []
    judge = lambda t: rule.judge(t.circuit) if t.signs_agree else NOT_FAITHFUL  # noqa: E731
    for style in styles:
        tester = tester_for(model, batch, style, hyp)
        claimed, *tests = tester.test_many([hyp, *other_hyps], minimality=False, complete=False)
        scores = tester.circuits([empty_claim(), *randoms])
        rejected = sum(rule.judge(s) == NOT_FAITHFUL for s in scores[1:])
        judged = tuple((o.name, judge(t)) for o, t in zip(other_hyps, tests))
        out.append(Control(style, hyp.name, judge(claimed), rule.judge(scores[0]), draws, rejected,
                           judged))
    return tuple(out)
