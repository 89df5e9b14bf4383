"""Labelled weight heatmaps: every axis tick is a named stream block (like the note's Figure 2).

Functions return matplotlib figures; ``save_figure`` writes PNG or SVG. Matplotlib runs on the
non-interactive Agg backend, so nothing needs a display.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..analysis.gauge import gauge_fix  # noqa: E402
from ..model import HookedDisentangledTransformer  # noqa: E402
from ..stream import Block  # noqa: E402


def _block_axis(ax: Axes, blocks: tuple[Block, ...], axis: str, fontsize: float) -> None:
    """Tick each block at its centre with its name and draw thin lines between blocks."""
    centres = [(b.start + b.stop - 1) / 2 for b in blocks]
    names = [b.name for b in blocks]
    for b in blocks[1:]:
        line = ax.axvline if axis == "x" else ax.axhline
        line(b.start - 0.5, color="#999999", linewidth=0.5)
    if axis == "x":
        ax.set_xticks(centres, names, rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(centres, names, fontsize=fontsize)


def plot_matrix(
    M: torch.Tensor | np.ndarray,
    row_blocks: tuple[Block, ...],
    col_blocks: tuple[Block, ...],
    title: str = "",
    ax: Axes | None = None,
    symmetric: bool = True,
) -> Axes:
    """Heatmap of ``M (rows, cols)`` with named block ticks on both axes."""
    M = M.detach().cpu().numpy() if isinstance(M, torch.Tensor) else np.asarray(M)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    vmax = float(np.abs(M).max()) or 1.0
    kwargs = dict(cmap="RdBu_r", vmin=-vmax, vmax=vmax) if symmetric else dict(cmap="viridis")
    image = ax.imshow(M, interpolation="nearest", aspect="auto", **kwargs)
    fontsize = 7 if max(len(row_blocks), len(col_blocks)) <= 12 else 5
    _block_axis(ax, col_blocks, "x", fontsize)
    _block_axis(ax, row_blocks, "y", fontsize)
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_attention_weights(
    model: HookedDisentangledTransformer, layer: int, head: int = 0, gauge_fixed: bool = False,
    ax: Axes | None = None,
) -> Axes:
    """``A`` of ``blocks.{layer}`` head ``head``: rows are query blocks, columns key blocks."""
    A = model.blocks[layer].attn.A[head].detach()
    if gauge_fixed:
        A = gauge_fix(A.double(), model.stream, layer)
    blocks = model.stream.blocks(layer)
    which = "gauge-fixed " if gauge_fixed else ""
    ax = plot_matrix(A, blocks, blocks, f"{which}A, blocks.{layer} head {head}", ax)
    ax.set_xlabel("key block", fontsize=8)
    ax.set_ylabel("query block", fontsize=8)
    return ax


def plot_unembed(model: HookedDisentangledTransformer, ax: Axes | None = None) -> Axes:
    """``W_U (D_L, d)``: which blocks of the final stream the read-out copies."""
    W = model.unembed.W_U.detach()
    d = model.cfg.d
    cols = (Block("Y column", 0, d),)
    return plot_matrix(W, model.stream.blocks(model.cfg.n_layers), cols,
                       f"W_U (read-out of {model.cfg.readout} rows)", ax)


def plot_circuit(model: HookedDisentangledTransformer, gauge_fixed: bool = False,
                 title: str | None = None) -> Figure:
    """Every head's ``A`` and ``W_U`` side by side (the note's Figure 2, labelled)."""
    panels = [(layer, head) for layer, n in enumerate(model.cfg.heads) for head in range(n)]
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5.2 * (len(panels) + 1), 5.6),
                             gridspec_kw={"width_ratios": [1] * len(panels) + [0.45]})
    for ax, (layer, head) in zip(axes, panels):
        plot_attention_weights(model, layer, head, gauge_fixed=gauge_fixed, ax=ax)
    plot_unembed(model, ax=axes[-1])
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_dependency(norms: torch.Tensor, row_positions, layout, title: str = "") -> Figure:
    """Lemma 1 certificate: ``norms (n_readout, T)`` of d output / d input row, log colour scale."""
    values = norms.detach().cpu().double().numpy()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    shown = np.log10(values + 1e-30)
    image = ax.imshow(np.where(values > 0, shown, np.nan), cmap="magma", aspect="auto",
                      interpolation="nearest")
    ax.set_facecolor("#d9d9d9")  # exactly zero dependence shows as grey
    blocks, start = [], 0
    for seg in layout.segments:
        blocks.append(Block(f"input {seg.name}", start, start + seg.n_rows))
        start += seg.n_rows
    _block_axis(ax, tuple(blocks), "x", 7)
    ax.set_yticks(range(len(row_positions)), [f"row {p}" for p in row_positions], fontsize=6)
    ax.set_title(title or "log10 |∂ output row / ∂ input row| (grey: exactly 0)", fontsize=9)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG or SVG (by suffix) and close it."""
    path = Path(path)
    if path.suffix not in (".png", ".svg"):
        raise ValueError(f"path must end in .png or .svg, got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_patching(result, title: str = "", ax: Axes | None = None) -> Axes:
    """A ``(layer, block)`` patching result (``analysis.patch_blocks``) as a labelled heatmap.

    Cells a layer's stream does not have yet (NaN) are grey; with ``normalize=True`` 1 means the
    patch restores the clean output and 0 that it changes nothing.
    """
    if tuple(result.dims) != ("layer", "block"):
        raise ValueError(f"result must have dims ('layer', 'block'), got {tuple(result.dims)}")
    values = result.values.detach().cpu().double().numpy()
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * values.shape[1] + 2, 0.5 * values.shape[0] + 1.6))
    ax.set_facecolor("#d9d9d9")
    image = ax.imshow(values, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(values.shape[1]), result.labels["block"], rotation=90, fontsize=7)
    hook = result.attrs.get("hook", "resid_pre")
    ax.set_yticks(range(values.shape[0]), [f"{hook} {lay}" for lay in result.labels["layer"]],
                  fontsize=7)
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v) and abs(v) >= 0.005:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if abs(v) > 0.5 else "black")
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax
