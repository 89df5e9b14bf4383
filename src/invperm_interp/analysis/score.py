"""The score of one model's output on a batch: MSE, rows exactly right and loss recovered, with
standard errors over the batch's samples (definitions: ``analysis.faithfulness``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..task import Batch


@dataclass(frozen=True)
class Score:
    """One model's output on the batch: the note's MSE, rows exactly right and loss recovered, with
    the standard errors of the last two over the batch's samples (``n``; 0 and ``None`` in records
    written before they were measured). ``rows_se``: of the per-sample share of exact rows;
    ``recovered_se``: the delta-method error of the ratio, paired with the model's own errors on
    the same samples."""

    mse: float
    rows_exact: float
    loss_recovered: float | None  # None when the model itself does no better than the baseline
    rows_se: float = 0.0
    recovered_se: float | None = None
    n: int = 0

    def to_dict(self) -> dict:
        """A new dict of the fields (``vars`` would hand out the frozen record's own)."""
        return dict(vars(self))


def score(out: Tensor, batch: Batch, baseline: float, model_mse: float,
          model_errors: Tensor | None = None) -> Score:
    """Score ``out`` ``(B, rows, d)``; ``model_errors`` ``(B,)``: the model's own per-sample MSE
    (default: ``model_mse`` for every sample, i.e. the model's error counted as known)."""
    return scores([out], batch, baseline, model_mse, model_errors)[0]


def read_score(data: dict) -> Score:
    """A :class:`Score` from its dict, older records (without standard errors) included."""
    return Score(**{k: v for k, v in data.items() if k in Score.__dataclass_fields__})


#: Entries of the outputs scored together (``V × B × rows × d``): bounds the float64 temporaries
#: of one chunk of variants (4 MiB each) whatever the number of variants or samples.
SCORE_ELEMENTS = 1 << 19


def scores(outs: Sequence[Tensor], batch: Batch, baseline: float, model_mse: float,
           model_errors: Tensor | None = None) -> list[Score]:
    """:func:`score` of each output ``(B, rows, d)`` of ``outs``, the variants in chunks of at most
    ``SCORE_ELEMENTS`` entries: each chunk's sums and means taken together (one pass instead of one
    per variant, each over the output's own contiguous entries) and their standard deviations one
    variant at a time (torch's along a dimension rounds otherwise), so that a variant's score does
    not depend on the others run beside it (tested bit for bit against each output scored alone)."""
    if not len(outs):
        return []
    k = max(1, SCORE_ELEMENTS // outs[0].numel())
    return [s for i in range(0, len(outs), k)
            for s in _stacked(torch.stack(list(outs[i:i + k])), batch, baseline, model_mse,
                              model_errors)]


def _stacked(outs: Tensor, batch: Batch, baseline: float, model_mse: float,
             model_errors: Tensor | None) -> list[Score]:
    """:func:`scores` of one chunk of stacked outputs ``(V, B, rows, d)``."""
    V, n = outs.shape[0], outs.shape[1]
    Y = batch.Y.to(outs)
    per = (outs.double() - Y.double()).pow_(2).sum(-1).mean(-1)  # (V, B) per-sample MSE
    err = (outs - Y).pow_(2).sum(-1).reshape(V, -1).mean(-1)  # (V,): task.mse of each
    exact = (outs.round() == Y).all(-1).double()  # (V, B, rows)
    rows = exact.reshape(V, -1).mean(-1)
    # torch's std along a dimension rounds otherwise than over a whole tensor: one per variant
    rows_se_l = [float(x.std(unbiased=True)) / n ** 0.5 if n > 1 else 0.0 for x in exact.mean(-1)]
    err_l, rows_l = err.tolist(), rows.tolist()
    gap = baseline - model_mse
    if gap <= 1e-12:
        return [Score(e, r, None, s, None, n) for e, r, s in zip(err_l, rows_l, rows_se_l)]
    recovered = (baseline - torch.tensor(err_l, dtype=torch.float64)) / gap  # (V,), as floats
    m = model_errors.to(per) if model_errors is not None else torch.full_like(per[0], model_mse)
    # R = (b - mean e_c) / (b - mean e_m): Var R ~ Var(e_c - R e_m) / (n gap²)
    spread = per - recovered[:, None] * m  # (V, B)
    se = [float(x.std(unbiased=True)) / (n ** 0.5 * gap) if n > 1 else 0.0 for x in spread]
    return [Score(e, r, rec, s, c, n)
            for e, r, rec, s, c in zip(err_l, rows_l, recovered.tolist(), rows_se_l, se)]
