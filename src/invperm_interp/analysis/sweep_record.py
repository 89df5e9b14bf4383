"""What ``invperm sweep`` records of a finished run (its ``mechanism.json``): the same
:class:`analysis.mechanism.Mechanism` record ``invperm analyze`` writes, measured on ``samples``
fresh samples from ``seed``, plus the rule's name on more batches (seeds ``seed + 1``, …) and under
other ablation styles of the cells outside the circuit. One format, one version
(``mechanism.VERSION``): the sweep's fields sit beside the mechanism's in one JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .mechanism import Mechanism
from .verdict import Answer

#: The ablation styles a sweep may also name each run under (the rule's own is zero ablation);
#: a grid asks for one with ``<style>_ablation = true``.
STYLES = ("mean", "resample")


@dataclass(frozen=True)
class SweepRecord:
    """A run's :class:`Mechanism` on ``samples`` samples from ``seed``; ``names_by_batch``: the
    rule's :class:`Answer` on each of the sweep's batches (the first is ``mechanism.answer``);
    ``under``: its answer under each other ablation style measured (a :data:`STYLES` entry →
    answer)."""

    mechanism: Mechanism
    samples: int
    seed: int
    names_by_batch: tuple[Answer, ...]
    under: Mapping[str, Answer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.under) - set(STYLES):
            raise ValueError(f"under: ablation styles must be among {STYLES}, got {sorted(self.under)}")
        object.__setattr__(self, "under", {s: self.under[s] for s in STYLES if s in self.under})

    @property
    def answer(self) -> Answer:
        return self.mechanism.answer

    @property
    def batches(self) -> int:
        return len(self.names_by_batch)

    def lacks(self, settings: Mapping) -> list[str] | None:
        """The ablation styles a grid's analysis ``settings`` (``samples``, ``seed``, ``batches``,
        ``<style>_ablation``) asks for that this record has no name under; None when it was measured
        otherwise (other samples, seed or batches: analyse again)."""
        if (self.samples, self.seed, self.batches) != (
                settings["samples"], settings["seed"], settings["batches"]):
            return None
        return [s for s in STYLES if settings.get(f"{s}_ablation") and s not in self.under]

    def with_names(self, names: Mapping[str, Answer]) -> SweepRecord:
        """This record with the answers under more ablation styles."""
        return replace(self, under={**self.under, **names})

    def to_dict(self) -> dict:
        return {**self.mechanism.to_dict(), "samples": self.samples, "seed": self.seed,
                "names_by_batch": list(self.names_by_batch),
                "under": dict(self.under)}

    @classmethod
    def from_dict(cls, data: dict) -> SweepRecord:
        """``ValueError`` in one line for a record this version cannot read (``Mechanism.from_dict``)."""
        mechanism = Mechanism.from_dict(data)
        answer = Answer.read if data["version"] > 3 else Answer.of_label
        return cls(mechanism, data["samples"], data["seed"],
                   tuple(answer(a) for a in data["names_by_batch"]),
                   {s: answer(a) for s, a in data.get("under", {}).items()})

    @classmethod
    def read(cls, path: str | Path) -> SweepRecord:
        """The record in ``path``; ``ValueError`` naming the file when it is not one this version
        reads (cut short, older or newer)."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: {err}") from None
