"""Named blocks of the disentangled residual stream (DESIGN.md section 3).

``h^0 = [X, I_T]`` has blocks ``x`` (width d) and one position block per segment (``pos.P``,
``pos.Y``, ``pos.S``, width = the segment's rows). Layer ``l`` (1-based) appends, per head, a copy
of every block of ``h^{l-1}`` under the prefix ``L{l}`` (``L{l}h{k}`` when the layer has several
heads): ``h^2`` of a one-head model on ``[P; Y_P]`` is
``x, pos.P, pos.Y, L1.x, L1.pos.P, L1.pos.Y, L2.x, L2.pos.P, L2.pos.Y, L2.L1.x, L2.L1.pos.P, L2.L1.pos.Y``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from torch import Tensor

from .task import Layout


@dataclass(frozen=True)
class Block:
    """A named, contiguous range of residual-stream features."""

    name: str
    start: int
    stop: int

    @property
    def width(self) -> int:
        return self.stop - self.start

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)


class Stream:
    """The block structure of ``h^0 … h^L`` for a layout and heads per layer."""

    def __init__(self, layout: Layout, heads: tuple[int, ...]):
        self.layout = layout
        self.heads = tuple(heads)

    @property
    def n_layers(self) -> int:
        return len(self.heads)

    @cached_property
    def _blocks(self) -> tuple[tuple[Block, ...], ...]:
        """``_blocks[l]`` lists the blocks of ``h^l`` in order."""
        base = [("x", self.layout.d)] + [(f"pos.{s.name}", s.n_rows) for s in self.layout.segments]
        levels = [base]
        for layer, n_heads in enumerate(self.heads, start=1):
            prev = levels[-1]
            new = list(prev)
            for head in range(n_heads):
                prefix = f"L{layer}" if n_heads == 1 else f"L{layer}h{head}"
                new += [(f"{prefix}.{name}", width) for name, width in prev]
            levels.append(new)
        out = []
        for level in levels:
            blocks, start = [], 0
            for name, width in level:
                blocks.append(Block(name, start, start + width))
                start += width
            out.append(tuple(blocks))
        return tuple(out)

    def _check_layer(self, layer: int) -> None:
        if not isinstance(layer, int) or not 0 <= layer <= self.n_layers:
            raise ValueError(f"layer must be an integer in [0, {self.n_layers}], got {layer!r}")

    def blocks(self, layer: int) -> tuple[Block, ...]:
        """Blocks of ``h^layer`` (``layer = 0`` is the embedding, ``n_layers`` the read-out stream)."""
        self._check_layer(layer)
        return self._blocks[layer]

    def labels(self, layer: int) -> list[str]:
        """Names of the blocks of ``h^layer``, in order."""
        return [b.name for b in self.blocks(layer)]

    def width(self, layer: int) -> int:
        """``D_layer``, the width of ``h^layer``."""
        return self.blocks(layer)[-1].stop

    def block(self, name: str, layer: int) -> Block:
        for b in self.blocks(layer):
            if b.name == name:
                return b
        raise ValueError(
            f"block name {name!r} is not in the stream at layer {layer}; "
            f"known blocks: {self.labels(layer)}"
        )

    def slice(self, name: str, layer: int) -> slice:
        """Feature range of block ``name`` in ``h^layer``."""
        return self.block(name, layer).slice

    def feature_labels(self, layer: int) -> list[str]:
        """One label per feature of ``h^layer``, e.g. ``"pos.Y[3]"``, for plots and tables."""
        return [f"{b.name}[{i}]" for b in self.blocks(layer) for i in range(b.width)]

    def split(self, A: Tensor, layer: int) -> dict[tuple[str, str], Tensor]:
        """The grid of named cells of a matrix ``A`` that reads ``h^layer``.

        ``A (..., D_layer, D_layer)`` → ``{(query block, key block): A[..., q, k]}`` in row-major
        order. The ``A`` of ``blocks.{l}`` reads ``h^l``, so ``split(model.blocks[l].attn.A, l)``.
        """
        D = self.width(layer)
        if A.shape[-2:] != (D, D):
            raise ValueError(
                f"A must end in shape ({D}, {D}) to be split at layer {layer}, got {tuple(A.shape)}"
            )
        blocks = self.blocks(layer)
        return {(q.name, k.name): A[..., q.slice, k.slice] for q in blocks for k in blocks}

    def __repr__(self) -> str:
        return f"Stream(layout={self.layout}, heads={self.heads})"
