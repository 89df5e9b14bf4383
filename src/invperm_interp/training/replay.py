"""A stretch of a finished run trained again from one of its checkpoints, finer than it was saved.

A run's trajectory is fixed by its configuration and seed, and a checkpoint holds the weights, the
optimizer's state and the data stream's state: training on from it makes the same steps (on the
machine that wrote it; float32 sums in another order on another CPU). :func:`replay` does that in
memory, without touching the run's directory, and hands over the weights every ``every`` steps with
the run's own evaluation of them (its held-out batch). Where the run kept a checkpoint at a step
replayed, the two weights are compared: :class:`Replay` counts those that are bit-identical.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..runs import checkpoint as ckpt
from ..runs.directory import RunDir
from .metrics import Scores
from .schedule import learning_rate
from .trainer import Trainer


@dataclass
class Replay:
    """What a replay met on its way: of the run's own checkpoints at steps it passed, how many
    held bit-identical weights, and the largest absolute difference of the others."""

    compared: int = 0
    identical: int = 0
    largest_difference: float = 0.0
    steps: list[int] = field(default_factory=list)  # the steps handed over


def replay(run_dir: str | Path, start: int, end: int, every: int,
           record: Replay | None = None) -> Iterator[tuple[int, torch.nn.Module, Scores]]:
    """Train ``run_dir``'s run again from its checkpoint at step ``start`` up to step ``end``; at
    every step that is a multiple of ``every`` (and at ``end``) yield ``(step, model, scores)``:
    the live plain model (read it, do not change it: the next steps train it) and the run's
    evaluation of it on its held-out batch. ``record``: a :class:`Replay` filled in on the way.
    The run's directory is only read."""
    run = RunDir(run_dir)
    model_cfg, train_cfg = run.read_config()
    stored = dict(run.checkpoints())  # step -> path
    if start not in stored:
        raise ValueError(f"start must be a step {run_dir} kept a checkpoint of "
                         f"({', '.join(map(str, sorted(stored)[:8]))}, ...), got {start!r}")
    if not (isinstance(end, int) and start < end <= train_cfg.steps):
        raise ValueError(f"end must be an integer step in ({start}, {train_cfg.steps}], got {end!r}")
    if not (isinstance(every, int) and not isinstance(every, bool) and every >= 1):
        raise ValueError(f"every must be an integer >= 1, got {every!r}")
    record = record if record is not None else Replay()
    trainer = Trainer(model_cfg, replace(train_cfg, out_dir=None), resume=False)
    trainer.load_state(start, stored[start])
    for step in range(start, end):
        loss = trainer.update(learning_rate(train_cfg, step))
        if not bool(torch.isfinite(loss)):
            raise ValueError(f"the replay of {run_dir} diverged at step {step + 1}")
        now = step + 1
        if now in stored:
            _compare(trainer.model, stored[now], record)
        if now % every == 0 or now == end:
            with torch.no_grad():
                scores = trainer.scores()
            record.steps.append(now)
            yield now, trainer.model, scores


def _compare(model: torch.nn.Module, path: Path, record: Replay) -> None:
    tensors, _ = ckpt.load(path)
    mine = ckpt.model_tensors(model)
    record.compared += 1
    gaps = [float((mine[k].double() - tensors[k].double()).abs().max()) for k in mine
            if not torch.equal(mine[k], tensors[k])]
    if gaps:
        record.largest_difference = max(record.largest_difference, *gaps)
    else:
        record.identical += 1
