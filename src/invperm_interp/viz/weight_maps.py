"""The report's heatmaps as SVG drawings (``viz.charts``): each head's ``A`` gauge-fixed and raw,
``W_U``, and the Lemma 1 dependency map. Every axis tick names a stream block, as in the note's
Figure 2; ``viz.heatmaps`` draws the same weights with matplotlib for PNG and SVG files."""

from __future__ import annotations

import numpy as np
import torch

from ..analysis.gauge import gauge_fix
from ..labels import head_name
from ..model.disentangled import DisentangledModel
from ..stream import Block, input_blocks
from .charts import Colours, Ticks, block_ticks, heatmap
from .svg import BLOCK_IN, DIVERGING, MAGMA, Drawing

LEAST_PT = 205.0  # the shortest axis (2.85 in)


def _axis(n_blocks: int) -> float:
    return max(LEAST_PT, 72 * BLOCK_IN * n_blocks)


def _symmetric(values: np.ndarray) -> Colours:
    """Red positive, blue negative, white 0, the largest magnitude at either end."""
    top = float(np.abs(values).max()) or 1.0
    return Colours(DIVERGING, -top, top)


def head_maps(model: DisentangledModel, layer: int, head: int = 0) -> tuple[Drawing, Drawing]:
    """``A (D_l, D_l)`` of ``blocks.{layer}`` head ``head``, gauge-fixed (``analysis.gauge``) and
    raw: query blocks in rows, key blocks in columns."""
    A = model.blocks[layer].attn.A[head].detach().cpu()
    blocks = model.stream.blocks(layer)
    side = _axis(len(blocks))
    drawings = []
    for which, values in (("gauge-fixed", gauge_fix(A.double(), model.stream, layer)), ("raw", A)):
        values = values.double().numpy()
        drawings.append(heatmap(values, block_ticks(blocks, "query block"),
                                block_ticks(blocks, "key block", rotate=True), _symmetric(values),
                                size=(side, side), title=f"{which} A, {head_name(layer, head)}"))
    return drawings[0], drawings[1]


def unembed_map(model: DisentangledModel) -> Drawing:
    """``W_U (D_L, d)``: which blocks of the final stream the read-out copies."""
    W = model.unembed.W_U.detach().cpu().double().numpy()
    blocks = model.stream.blocks(model.cfg.n_layers)
    cols = block_ticks((Block("Y column", 0, model.cfg.d),))
    return heatmap(W, block_ticks(blocks), cols, _symmetric(W), size=(72.0, _axis(len(blocks))),
                   title=f"W_U: read-out stream → {model.cfg.readout} rows")


def certificate_map(norms: torch.Tensor, row_positions, layout) -> Drawing:
    """The Lemma 1 certificate: ``norms (n_readout, T)`` of ∂ read-out row / ∂ input row on a log
    colour scale; exactly-zero dependences hatched and named in a legend, so "exactly 0" is never
    confused with "small"."""
    values = norms.detach().cpu().double().numpy()
    positive = values > 0
    shown = np.where(positive, np.log10(np.where(positive, values, 1.0)), np.nan)
    lo, hi = ((float(np.nanmin(shown)), float(np.nanmax(shown))) if positive.any() else (0.0, 1.0))
    rows = Ticks(tuple((i + 0.5, f"row {p}") for i, p in enumerate(row_positions)),
                 label="read-out row")
    size = (max(187.0, 11.5 * values.shape[1]), max(58.0, 14.4 * values.shape[0]))
    colours = Colours(MAGMA, lo, hi if hi > lo else lo + 1)
    return heatmap(shown, rows, block_ticks(input_blocks(layout)), colours, size=size,
                   title="log10 |∂ read-out row / ∂ input row|",
                   hatch_label="exactly 0 (no dependence)" if (values == 0).any() else None)
