"""The rule's thresholds, and a verdict as a measurement with an uncertainty.

A circuit-only model is **faithful** when at least ``FAITHFUL_ROWS`` of its rows are exactly right
and it recovers at least ``FAITHFUL_RECOVERED`` of the loss (``analysis.faithfulness``). Both are
estimates over a batch of samples, so each carries a standard error (``Score.rows_se``,
``Score.recovered_se``); :func:`judge` compares the confidence interval ``estimate ± Z·se`` with
the thresholds: ``"faithful"`` when both intervals lie above them, ``"not faithful"`` when either
lies below, and ``"borderline"`` when an interval straddles a threshold. A borderline verdict says
that this batch cannot tell; :func:`evaluation_batch` draws enough samples (``VERDICT_SAMPLES``)
that the standard error of rows exact is a fraction of a percent on trained models.

The thresholds come from the census of trained models (``analyses/grids/census.toml``,
``assets/census.md``): the constructions the rule names get 99.1–100% of rows exact and recover
0.87–1.0 of the loss; on the bidirectional model every other (construction, run) pair whose signs
agree gets at most 76% of rows but two (two_block at 93% and 98% of rows, runs the rule calls
'none'). On the causal scratch model the boundary is not sharp (pairs reach 99.4% of rows and fail
on the loss or the interval); there the interval, not one batch, decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .. import errors
from ..model.disentangled import DisentangledModel
from ..task import Batch, sample_batch
from .faithfulness import Score

FAITHFUL_ROWS = 0.99
"""A circuit-only model is faithful when at least this share of its rows is exactly right …"""
FAITHFUL_RECOVERED = 0.8
"""… and it recovers at least this fraction of the loss, baseline ``d/4`` (0.5 everywhere)."""
#: Half-width of the confidence interval in standard errors (95%, two-sided).
Z = 1.96
#: Samples the verdict is measured on: the standard error of a rows-exact share near 0.99 is
#: ``sqrt(0.99 · 0.01 / 4096) ≈ 0.16%`` (less, since a sample's rows are averaged first).
VERDICT_SAMPLES = 4096

FAITHFUL, BORDERLINE, NOT_FAITHFUL = "faithful", "borderline", "not faithful"
VERDICTS = (FAITHFUL, BORDERLINE, NOT_FAITHFUL)
#: The rule's verdict on a model when no construction of the registry is faithful.
NONE = "none"
#: The rule's verdict where the test does not reject the empty claim (``analysis.controls``): it
#: cannot tell a right claim from a wrong one on this run, so it names nothing.
UNTESTABLE = "untestable"
#: The rule's verdicts on a model that name no construction (``constructions.RESERVED``).
UNNAMED = (BORDERLINE, NONE, UNTESTABLE)


class Answer(NamedTuple):
    """The mechanism rule's answer on one batch (``analysis.mechanism``): its verdict,
    :data:`FAITHFUL` with the ``name`` of the construction it names (and those ``tied`` with it:
    faithful, and the batch cannot rank them, ``analysis.ties``), or :data:`BORDERLINE` (an
    interval straddles a threshold), :data:`NONE` (none is faithful) or :data:`UNTESTABLE` (the
    empty claim is not rejected) with no name. ``str``: the
    name, ``"a = b"`` for a tie, else the verdict (what tables show). A tuple: records store it as
    a JSON list."""

    verdict: str
    name: str | None = None
    tied: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " = ".join((self.name, *self.tied)) if self.name is not None else self.verdict

    @property
    def names(self) -> tuple[str, ...]:
        """The construction(s) named: the best and those tied with it (none when unnamed)."""
        return () if self.name is None else (self.name, *self.tied)

    @classmethod
    def read(cls, data) -> Answer:
        """From a record's ``[verdict, name, tied]`` (``[verdict, name]`` before record version 5);
        ``ValueError`` for anything else."""
        if not isinstance(data, (list, tuple)) or len(data) not in (2, 3):
            raise ValueError(f"an answer must be [verdict, name, tied], got {data!r}")
        verdict, name, tied = (*data, []) if len(data) == 2 else data
        if ((verdict == FAITHFUL) != isinstance(name, str) or verdict not in (FAITHFUL, *UNNAMED)
                or not isinstance(tied, (list, tuple)) or not all(isinstance(n, str) for n in tied)
                or (tied and name is None)):
            raise ValueError(f"an answer must be [{FAITHFUL!r}, name, [tied names]] or [verdict "
                             f"in {UNNAMED}, null, []], got {data!r}")
        return cls(verdict, name, tuple(tied))

    @classmethod
    def of_label(cls, text: str) -> Answer:
        """From the text a record of version 3 or older stored: a construction's name, or a verdict
        word in :data:`UNNAMED` (which registering a construction now refuses)."""
        return cls(text) if text in UNNAMED else cls(FAITHFUL, text)


def interval(estimate: float | None, se: float | None, z: float = Z) -> tuple[float, float] | None:
    """``(estimate - z·se, estimate + z·se)``; ``se`` ``None`` counts as 0; ``None`` for no estimate."""
    if estimate is None:
        return None
    half = z * (se or 0.0)
    return estimate - half, estimate + half


@dataclass(frozen=True)
class Rule:
    """The rule's thresholds, as one value: a circuit-only model is faithful when at least ``rows``
    of its rows are exactly right and it recovers at least ``recovered`` of the loss, judged on
    intervals ``z`` standard errors either side (module docstring). ``str``: the rule in words."""

    rows: float = FAITHFUL_ROWS
    recovered: float = FAITHFUL_RECOVERED
    z: float = Z

    def __post_init__(self) -> None:
        for name, value in (("rows", self.rows), ("recovered", self.recovered), ("z", self.z)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise ValueError(f"rule: {name} must be a number, got {value!r}")
        if not 0.0 <= self.rows <= 1.0 or self.z < 0:
            raise ValueError(f"rule: rows must be in [0, 1] and z >= 0, got rows={self.rows!r}, "
                             f"z={self.z!r}")

    def is_faithful(self, score: Score) -> bool:
        """The rule on the point estimates of a circuit-only model's :class:`Score`."""
        return (score.rows_exact >= self.rows and score.loss_recovered is not None
                and score.loss_recovered >= self.recovered)

    def judge(self, score: Score) -> str:
        """``"faithful"``, ``"borderline"`` or ``"not faithful"``: the thresholds against the
        confidence intervals of rows exact and loss recovered (``z`` standard errors either side)."""
        r = interval(score.rows_exact, score.rows_se, self.z)
        f = interval(score.loss_recovered, score.recovered_se, self.z)
        if f is None or r[1] < self.rows or f[1] < self.recovered:
            return NOT_FAITHFUL
        if r[0] >= self.rows and f[0] >= self.recovered:
            return FAITHFUL
        return BORDERLINE

    def __str__(self) -> str:
        return (f"at least {self.rows:.0%} of rows exact and {self.recovered:.0%} of the loss "
                f"recovered, both intervals (± {self.z:g} standard errors) clear of the thresholds")


RULE = Rule()
"""The rule at the thresholds the census chose (its default everywhere)."""


def is_faithful(score: Score, rule: Rule = RULE) -> bool:
    """:meth:`Rule.is_faithful`."""
    return rule.is_faithful(score)


def judge(score: Score, rule: Rule = RULE) -> str:
    """:meth:`Rule.judge`."""
    return rule.judge(score)


def check_seed(seed) -> None:
    """A generator seed: ``errors.check_seed``'s one bound for every command and grid, an integer
    in [0, 2^62) (a ``ValueError``)."""
    errors.check_seed("seed", seed)


def evaluation_batch(model: DisentangledModel, n: int = VERDICT_SAMPLES,
                     seed: int = 0) -> Batch:
    """``n`` fresh samples of the model's layout from ``seed``, in its dtype: the batch a verdict
    is measured on."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (a standard error needs two samples), got {n!r}")
    check_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    return sample_batch(model.cfg.layout, n, generator=generator, dtype=model.cfg.torch_dtype)


def score_text(score: Score, z: float = Z) -> str:
    """``"rows exact 99.2% ± 0.3%, loss recovered 88% ± 2%"`` (± ``z`` standard errors; without
    them where the record has none)."""
    def pm(se: float | None, fmt: str) -> str:
        return f" ± {z * se:{fmt}}" if se else ""

    rec = ("n/a" if score.loss_recovered is None
           else f"{score.loss_recovered:.0%}{pm(score.recovered_se, '.0%')}")
    return f"rows exact {score.rows_exact:.1%}{pm(score.rows_se, '.1%')}, loss recovered {rec}"
