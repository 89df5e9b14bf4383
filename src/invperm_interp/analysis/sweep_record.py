"""What ``invperm sweep`` records of a finished run (its ``mechanism.json``): the same
:class:`analysis.mechanism.Mechanism` record ``invperm analyze`` writes, measured on ``samples``
fresh samples from ``seed``, plus the rule's name on more batches (seeds ``seed + 1``, …) and under
other ablation styles of the cells outside the circuit, with the scores behind each such name (so a
census can recount its ties and completeness under every style). One format, one version
(``mechanism.VERSION``): the sweep's fields sit beside the mechanism's in one JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .faithfulness import Faithfulness
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
    answer); ``tested_under``: the construction tests behind each such answer, as
    ``mechanism.tested`` holds them for zero ablation (each with the model less its circuit,
    ``without``, where the rule ran it), on the first ``mechanism.SCREEN_SAMPLES`` samples or, for
    one whose interval straddled a threshold there, on all ``samples``."""

    mechanism: Mechanism
    samples: int
    seed: int
    names_by_batch: tuple[Answer, ...]
    under: Mapping[str, Answer] = field(default_factory=dict)
    tested_under: Mapping[str, tuple[Faithfulness, ...]] = field(default_factory=dict)
    #: the sha256 of the weights file analysed (``runs.checkpoint.weights_digest``); None in a
    #: record written before it was kept
    weights: str | None = None
    #: per style of ``under``, the empty claim's test on the same testers (``analysis.controls``):
    #: where it is not rejected the style's answer is untestable; absent in older records
    empty_under: Mapping[str, Faithfulness] = field(default_factory=dict)
    #: the registry's working constructions fitting the model when the record was written (what
    #: the rule could name); None in a record written before it was kept
    registry: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for label, styles in (("under", self.under), ("tested_under", self.tested_under)):
            if set(styles) - set(STYLES):
                raise ValueError(f"{label}: ablation styles must be among {STYLES}, got {sorted(styles)}")
        object.__setattr__(self, "under", {s: self.under[s] for s in STYLES if s in self.under})
        object.__setattr__(self, "tested_under", {s: tuple(self.tested_under[s]) for s in STYLES
                                                  if s in self.tested_under})

    @property
    def answer(self) -> Answer:
        return self.mechanism.answer

    @property
    def batches(self) -> int:
        return len(self.names_by_batch)

    def describes(self, run_dir: str | Path) -> bool:
        """Whether this record is of the run's final weights as they are now: False once the run
        was trained on (``--resume --steps``) after it was analysed; True for a record that
        predates the digest (nothing to tell it by)."""
        from ..runs.checkpoint import weights_digest
        from ..runs.directory import RunDir

        return self.weights is None or self.weights == weights_digest(RunDir(run_dir).final)

    def lacks(self, settings: Mapping, cfg=None) -> list[str] | None:
        """The ablation styles a grid's analysis ``settings`` (``samples``, ``seed``, ``batches``,
        ``<style>_ablation``) asks for that this record has no name under, or no tests behind the
        name (a record written before they were kept); None when it was measured otherwise (other
        samples, seed or batches) or, given the run's model config ``cfg``, before a construction
        that fits it was registered (:meth:`untested`): analyse again."""
        if (self.samples, self.seed, self.batches) != (
                settings["samples"], settings["seed"], settings["batches"]):
            return None
        if cfg is not None and self.untested(cfg):
            return None
        return [s for s in STYLES if settings.get(f"{s}_ablation")
                and (s not in self.under or s not in self.tested_under)]

    def untested(self, cfg) -> list[str]:
        """The registry's working constructions that fit a model of ``cfg`` and were not in the
        registry when this record was written (registered since, e.g. by ``invperm discover
        --register``). A record that did not keep its registry is read by its tests: the rule tests
        every working construction that fits, so those it holds no test of are the ones it missed."""
        from .placements import fits, fitting_names

        known = (self.registry if self.registry is not None
                 else {t.construction for t in self.mechanism.tested})
        return [name for name in fitting_names(cfg, working=True)
                if name not in known and fits(name, cfg.heads)]

    def with_names(self, names: Mapping[str, Answer],
                   tested: Mapping[str, tuple[Faithfulness, ...]] | None = None,
                   empty: Mapping[str, Faithfulness] | None = None) -> SweepRecord:
        """This record with the answers under more ablation styles (and the tests behind them, the
        empty claim's among them)."""
        return replace(self, under={**self.under, **names},
                       tested_under={**self.tested_under, **(tested or {})},
                       empty_under={**self.empty_under, **(empty or {})})

    def answer_without(self, left_out: set[str]) -> Answer:
        """The rule's answer under zero ablation from this record's tests with the constructions
        ``left_out`` not among them (what it named before they were registered), the empty claim
        checked as the answer is."""
        from .mechanism import name_by_rule

        return name_by_rule([t for t in self.mechanism.tested if t.construction not in left_out],
                            empty=self.empty("zero"))

    def empty(self, style: str) -> Faithfulness | None:
        """The empty claim's test under ``style`` (``"zero"``: the mechanism's), None if not run."""
        return self.mechanism.empty if style == "zero" else self.empty_under.get(style)

    def named_test(self, style: str) -> Faithfulness | None:
        """The test of the construction named under ``style`` (``"zero"``: the mechanism's own),
        whose ``without`` is the model less that circuit; None when the style names none or its
        tests were not kept."""
        if style == "zero":
            return self.mechanism.faithfulness if self.mechanism.name is not None else None
        answer = self.under.get(style)
        if answer is None or answer.name is None:
            return None
        return next((t for t in self.tested_under.get(style, ()) if t.hypothesis == answer.name), None)

    def constructions(self, style: str = "zero") -> tuple[str, ...]:
        """The registry constructions the answer under ``style`` names, each once: the named one's
        and those tied with it, read from their tests' placements (a name whose test was not kept
        as it is); ``()`` when it names none."""
        answer = self.answer if style == "zero" else self.under.get(style)
        if answer is None:
            return ()
        tests = {t.hypothesis: t for t in (self.mechanism.tested if style == "zero"
                                           else self.tested_under.get(style, ()))}
        return tuple(dict.fromkeys(tests[n].construction if n in tests else n for n in answer.names))

    def to_dict(self) -> dict:
        return {**self.mechanism.to_dict(), "samples": self.samples, "seed": self.seed,
                "names_by_batch": list(self.names_by_batch),
                "under": dict(self.under),
                "tested_under": {s: [t.to_dict() for t in tests]
                                 for s, tests in self.tested_under.items()},
                **({"weights": self.weights} if self.weights is not None else {}),
                **({"empty_under": {s: t.to_dict() for s, t in self.empty_under.items()}}
                   if self.empty_under else {}),
                **({"registry": list(self.registry)} if self.registry is not None else {})}

    @classmethod
    def from_dict(cls, data: dict) -> SweepRecord:
        """``ValueError`` in one line for a record this version cannot read (``Mechanism.from_dict``)."""
        mechanism = Mechanism.from_dict(data)
        answer = Answer.read if data["version"] > 3 else Answer.of_label
        return cls(mechanism, data["samples"], data["seed"],
                   tuple(answer(a) for a in data["names_by_batch"]),
                   {s: answer(a) for s, a in data.get("under", {}).items()},
                   {s: tuple(Faithfulness.from_dict(t) for t in tests)
                    for s, tests in data.get("tested_under", {}).items()},
                   data.get("weights"),
                   {s: Faithfulness.from_dict(t) for s, t in data.get("empty_under", {}).items()},
                   tuple(data["registry"]) if "registry" in data else None)

    @classmethod
    def of_run(cls, run_dir: str | Path) -> SweepRecord | None:
        """The run's ``mechanism.json`` if it describes the run as it is now; None when there is
        none, when this version cannot read it (cut short, older or newer) or when it is of other
        weights than the run's final ones (:meth:`describes`): each a reason to analyse again."""
        from ..runs.directory import RunDir

        path = RunDir(run_dir).mechanism
        if not path.is_file():
            return None
        try:
            record = cls.read(path)
        except ValueError:
            return None
        return record if record.describes(run_dir) else None

    @classmethod
    def read(cls, path: str | Path) -> SweepRecord:
        """The record in ``path``; ``ValueError`` naming the file when it is not one this version
        reads (cut short, older or newer)."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: {err}") from None
