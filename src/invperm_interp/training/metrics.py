"""Evaluation metrics: the note's MSE and how exactly a model reproduces ``Y``."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from ..task import Batch

#: Evaluations run in chunks of the training batch, of at least this many samples (small
#: training batches: fewer, larger chunks).
MIN_EVAL_CHUNK = 1024


def evaluation_chunk(batch_size: int, eval_size: int) -> int:
    """Samples per chunk of a run's evaluations: the training batch, at least
    :data:`MIN_EVAL_CHUNK`, at most the evaluation batch."""
    return min(eval_size, max(batch_size, MIN_EVAL_CHUNK))


class Scores(NamedTuple):
    """What :func:`evaluate` measures (the fields of a run's ``runs.evaluation.Evaluation``)."""

    mse: float
    entry_acc: float
    row_acc: float
    sample_acc: float


@torch.no_grad()
def evaluate(model: nn.Module, batch: Batch, chunk: int = 1024) -> Scores:
    """The note's MSE and exactness of ``model`` (either model; hooks attached to a hooked one
    run) on ``batch``: ``mse`` (squared error summed over
    columns, averaged over rows and samples), ``entry_acc`` (entries right after rounding),
    ``row_acc`` (rows all right), ``sample_acc`` (whole ``Y`` right)."""
    n, d = len(batch), model.cfg.d
    if n == 0:
        raise ValueError("batch must hold at least one sample, got an empty batch")
    totals = torch.zeros(4, dtype=torch.float64, device=batch.X.device)
    for i in range(0, n, chunk):
        out = model(batch.X[i : i + chunk], check_input=False)
        Y = batch.Y[i : i + chunk]
        hit = out.round() == Y  # (b, d, d)
        rows_right = hit.all(-1)  # (b, d)
        totals += torch.stack([((out - Y) ** 2).sum(), hit.sum(), rows_right.sum(),
                               rows_right.all(-1).sum()]).double()
    sq, entries, rows, samples = totals.tolist()
    return Scores(sq / (n * d), entries / (n * d * d), rows / (n * d), samples / n)
