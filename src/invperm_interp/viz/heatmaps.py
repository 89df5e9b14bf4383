"""Labelled weight heatmaps: every axis tick is a named stream block (like the note's Figure 2).

Functions return matplotlib figures; ``save_figure`` writes PNG or SVG (the figures under
``assets/``). Matplotlib runs on the non-interactive Agg backend, so nothing needs a display. A
run's report draws its heatmaps without matplotlib (``viz.weight_maps``).
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
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from ..analysis.gauge import gauge_fix  # noqa: E402
from ..labels import head_name, hook_label  # noqa: E402
from ..model.disentangled import DisentangledModel  # noqa: E402
from ..stream import Block, input_blocks  # noqa: E402
from .svg import BLOCK_IN, LABEL_PT, TITLE_PT  # noqa: E402  (sizes: the same in every figure)

PATCH_CELL_IN = 0.5  # inches per patching cell: room for its value ("-0.05") at LABEL_PT
HATCH = "////"  # cells with no value (not in the stream yet, or exactly zero): hatched, in the legend


def _block_axis(ax: Axes, blocks: tuple[Block, ...], axis: str, fontsize: float = LABEL_PT) -> None:
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


def _axis_inches(n_blocks: int, least: float = 2.6) -> float:
    return max(least, BLOCK_IN * n_blocks)


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
        _, ax = plt.subplots(figsize=(_axis_inches(len(col_blocks)) + 1.6,
                                      _axis_inches(len(row_blocks)) + 1.4))
    vmax = float(np.abs(M).max()) or 1.0
    kwargs = dict(cmap="RdBu_r", vmin=-vmax, vmax=vmax) if symmetric else dict(cmap="viridis")
    image = ax.imshow(M, interpolation="nearest", aspect="auto", **kwargs)
    _block_axis(ax, col_blocks, "x")
    _block_axis(ax, row_blocks, "y")
    ax.set_title(title, fontsize=TITLE_PT)
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.ax.tick_params(labelsize=LABEL_PT)
    return ax


def plot_attention_weights(
    model: DisentangledModel, layer: int, head: int = 0, gauge_fixed: bool = False,
    ax: Axes | None = None,
) -> Axes:
    """``A`` of ``blocks.{layer}`` head ``head``: rows are query blocks, columns key blocks."""
    A = model.blocks[layer].attn.A[head].detach()
    if gauge_fixed:
        A = gauge_fix(A.double(), model.stream, layer)
    blocks = model.stream.blocks(layer)
    which = "gauge-fixed " if gauge_fixed else "raw "
    ax = plot_matrix(A, blocks, blocks, f"{which}A, {head_name(layer, head)}", ax)
    ax.set_xlabel("key block", fontsize=LABEL_PT)
    ax.set_ylabel("query block", fontsize=LABEL_PT)
    return ax


def plot_unembed(model: DisentangledModel, ax: Axes | None = None) -> Axes:
    """``W_U (D_L, d)``: which blocks of the final stream the read-out copies."""
    W = model.unembed.W_U.detach()
    d, L = model.cfg.d, model.cfg.n_layers
    if ax is None:
        _, ax = plt.subplots(figsize=(2.9, _axis_inches(len(model.stream.blocks(L))) + 1.4))
    cols = (Block("Y column", 0, d),)
    return plot_matrix(W, model.stream.blocks(L), cols,
                       f"W_U: read-out stream → {model.cfg.readout} rows", ax)


def plot_circuit(model: DisentangledModel, gauge_fixed: bool = False,
                 title: str | None = None, columns: int | None = None) -> Figure:
    """Every head's ``A`` and ``W_U`` side by side (the note's Figure 2, labelled); ``columns``:
    at most this many heads a row (``W_U`` at the end of the last), so a page narrower than every
    head side by side shows its labels at a readable size (default: one row)."""
    panels = [(layer, head) for layer, n in enumerate(model.cfg.heads) for head in range(n)]
    if columns is not None and (not isinstance(columns, int) or columns < 1):
        raise ValueError(f"columns must be an integer >= 1 or None, got {columns!r}")
    columns = len(panels) if columns is None else min(columns, len(panels))
    rows = -(-len(panels) // columns)
    L = model.cfg.n_layers
    side = _axis_inches(len(model.stream.blocks(L - 1))) + 2.0
    height = max(side, _axis_inches(len(model.stream.blocks(L))) + 1.9)
    fig = plt.figure(figsize=(side * columns + 2.6, height * rows))
    grid = fig.add_gridspec(rows, columns + 1, width_ratios=[1] * columns + [0.3])
    axes = [fig.add_subplot(grid[i // columns, i % columns]) for i in range(len(panels))]
    axes.append(fig.add_subplot(grid[rows - 1, columns]))  # the heads', then W_U's, then colour bars
    for ax, (layer, head) in zip(axes, panels):
        plot_attention_weights(model, layer, head, gauge_fixed=gauge_fixed, ax=ax)
    plot_unembed(model, ax=axes[-1])
    if title:
        fig.suptitle(title, fontsize=TITLE_PT + 1)
    # stacked rows: keep the title's own band above the first row's panel titles
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_size_inches()[1]) if title and rows > 1 else None)
    return fig


def _hatch_background(ax: Axes) -> None:
    """Hatch behind the image, so cells without a value (NaN: transparent) show the hatch."""
    ax.set_facecolor("white")
    ax.add_patch(Rectangle((0, 0), 1, 1, transform=ax.transAxes, facecolor="white",
                           edgecolor="#9a9a9a", hatch=HATCH, linewidth=0, zorder=-1))


def _hatch_legend(ax: Axes, label: str, below: float | None) -> None:
    """A legend entry for the hatch: under the axes (``below`` in axes fractions) or, with
    ``below=None``, in the free corner left of the x tick labels and under the y tick labels."""
    handle = Patch(facecolor="white", edgecolor="#9a9a9a", hatch=HATCH, label=label)
    where = dict(loc="upper left", bbox_to_anchor=(0, -below)) if below is not None else dict(
        loc="upper right", bbox_to_anchor=(-0.01, -0.01))
    ax.legend(handles=[handle], bbox_transform=ax.transAxes, fontsize=LABEL_PT, frameon=False,
              borderaxespad=0.2, handlelength=1.6, **where)


def plot_dependency(norms: torch.Tensor, row_positions, layout, title: str = "") -> Figure:
    """Lemma 1 certificate: ``norms (n_readout, T)`` of d output / d input row, log colour scale.

    Exactly-zero dependences are hatched (and say so in a legend), so "exactly 0" is never confused
    with "small".
    """
    values = norms.detach().cpu().double().numpy()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.16 * values.shape[1] + 2.4),
                                    max(2.4, 0.2 * values.shape[0] + 1.6)))
    _hatch_background(ax)
    shown = np.log10(np.where(values > 0, values, 1.0))
    image = ax.imshow(np.where(values > 0, shown, np.nan), cmap="magma", aspect="auto",
                      interpolation="nearest")
    _block_axis(ax, input_blocks(layout), "x")
    ax.tick_params(axis="x", labelrotation=0)
    ax.set_yticks(range(len(row_positions)), [f"row {p}" for p in row_positions], fontsize=LABEL_PT)
    ax.set_ylabel("read-out row", fontsize=LABEL_PT)
    ax.set_title(title or "log10 |∂ read-out row / ∂ input row|", fontsize=TITLE_PT)
    bar = fig.colorbar(image, ax=ax)
    bar.ax.tick_params(labelsize=LABEL_PT)
    if bool((values == 0).any()):
        _hatch_legend(ax, "exactly 0 (no dependence)", below=0.12)
    fig.tight_layout()
    return fig


FIGURE_DPI = 130


def _metadata(suffix: str) -> dict:
    """No creation date in SVGs, so regenerating an unchanged figure leaves the file unchanged."""
    return {"Date": None} if suffix == ".svg" else {}


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG or SVG (by suffix) and close it."""
    path = Path(path)
    if path.suffix not in (".png", ".svg"):
        raise ValueError(f"path must end in .png or .svg, got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=FIGURE_DPI, bbox_inches="tight", metadata=_metadata(path.suffix))
    plt.close(fig)
    return path


def save_figures(fig: Figure, path: str | Path) -> tuple[Path, Path]:
    """Write ``fig`` as both ``path.png`` and ``path.svg`` (any suffix of ``path`` is replaced)."""
    path = Path(path)
    png, svg = path.with_suffix(".png"), path.with_suffix(".svg")
    png.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.hashsalt": "invperm"}):  # the same ids on every run
        fig.savefig(svg, bbox_inches="tight", metadata=_metadata(".svg"))
    return save_figure(fig, png), svg


def plot_patching(result, title: str = "", ax: Axes | None = None) -> Axes:
    """A ``(layer, block)`` patching result (``analysis.patch_blocks``) as a labelled heatmap.

    Rows name the stream patched by the layer that reads it (``layer 1 (blocks.0) input``). Cells a
    layer's stream does not have yet (NaN) are hatched, with a legend; with ``normalize=True`` 1
    means the patch restores the clean output and 0 that it changes nothing.
    """
    if tuple(result.dims) != ("layer", "block"):
        raise ValueError(f"result must have dims ('layer', 'block'), got {tuple(result.dims)}")
    values = result.values.detach().cpu().double().numpy()
    if ax is None:
        _, ax = plt.subplots(figsize=(PATCH_CELL_IN * values.shape[1] + 3.2,
                                      PATCH_CELL_IN * values.shape[0] + 2.4))
    _hatch_background(ax)
    image = ax.imshow(values, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(values.shape[1]), result.labels["block"], rotation=90, fontsize=LABEL_PT)
    hook = result.attrs.get("hook", "resid_pre")
    ax.set_yticks(range(values.shape[0]), [hook_label(hook, lay) for lay in result.labels["layer"]],
                  fontsize=LABEL_PT)
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v) and abs(v) >= 0.005:
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=LABEL_PT,
                    color="white" if abs(v) > 0.5 else "black")
    ax.set_title(title, fontsize=TITLE_PT)
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    bar.ax.tick_params(labelsize=LABEL_PT)
    bar.set_label("share of the clean output restored", fontsize=LABEL_PT)
    _hatch_legend(ax, "not in this\nstream yet", below=None)
    return ax
