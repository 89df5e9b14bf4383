"""One evaluation of a run on its fixed eval batch: a line of ``metrics.jsonl``.

:class:`Evaluation` is what training appends and ``RunDir.read_metrics`` returns, one per line,
with one ``to_dict``/``from_dict`` and one version. Version 1 lines (no ``version`` key) also
held the run's ``attention_dir``; it is read from ``config.json`` now, and such lines still read.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

__all__ = ["Evaluation", "VERSION"]

#: The line's format: 2 dropped ``attention_dir`` (the configuration holds it).
VERSION = 2
_DROPPED = {1: ("attention_dir",)}  # keys an older version wrote that are read and let go


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Evaluation:
    """The model after ``step`` updates on the run's eval batch: ``mse`` (the note's loss),
    ``entry_acc``, ``row_acc``, ``sample_acc`` (entries, rows, whole ``Y`` right after rounding),
    ``train_mse`` (the mean training loss since the last evaluation; None at step 0), ``lr``,
    ``causal_floor`` (the exact floor of the layout and read-out, whatever the attention),
    ``wall_time`` (training seconds so far) and ``stopped`` (why the run ended early, on its
    last evaluation only)."""

    step: int
    mse: float
    entry_acc: float | None = None
    row_acc: float | None = None
    sample_acc: float | None = None
    train_mse: float | None = None
    lr: float | None = None
    causal_floor: float | None = None
    wall_time: float | None = None
    stopped: str | None = None

    def __post_init__(self):
        if not (type(self.step) is int and self.step >= 0):
            raise ValueError(f"step must be an integer >= 0, got {self.step!r}")
        if not (_number(self.mse) and math.isfinite(self.mse)):
            raise ValueError(f"mse must be a finite number, got {self.mse!r}")
        for f in fields(self)[2:-1]:
            value = getattr(self, f.name)
            if value is not None and not _number(value):
                raise ValueError(f"{f.name} must be a number or None, got {value!r}")
        if self.stopped is not None and not isinstance(self.stopped, str):
            raise ValueError(f"stopped must be a reason (str) or None, got {self.stopped!r}")

    def excess(self) -> float | None:
        """``mse − causal_floor`` (None without a floor)."""
        return None if self.causal_floor is None else self.mse - self.causal_floor

    def without_wall_clock(self) -> Evaluation:
        """The record without what differs between two trainings of one run (``wall_time``)."""
        return Evaluation(**{**asdict(self), "wall_time": None})

    def to_dict(self) -> dict:
        """The fields that are set, in declaration order, then the version."""
        return {**{k: v for k, v in asdict(self).items() if v is not None}, "version": VERSION}

    @classmethod
    def from_dict(cls, data: dict) -> Evaluation:
        """A record ``to_dict`` wrote, of this version or an older one; ``ValueError`` in one line
        for anything else (a newer version, an unknown key, a missing or bad ``step``/``mse``)."""
        if not isinstance(data, dict):
            raise ValueError(f"an evaluation record is a JSON object, got {data!r}")
        version = data.get("version", 1)
        if not (type(version) is int and 1 <= version <= VERSION):
            raise ValueError(f"an evaluation record of version {version!r}; this package reads "
                             f"1 to {VERSION}: update invperm-interp")
        known = {f.name for f in fields(cls)} | {"version"} | set(_DROPPED.get(version, ()))
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"an evaluation record of version {version} has no {unknown}")
        if "step" not in data or "mse" not in data:
            raise ValueError("an evaluation record needs an integer 'step' and a finite number "
                             f"'mse', got {sorted(data)}")
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
