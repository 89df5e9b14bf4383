"""Named blocks of the disentangled residual stream, and the model's hook names (docs/design.md
section 3).

``h^0 = [X, I_T]`` has blocks ``x`` (width d) and one position block per segment (``pos.P``,
``pos.Y``, ``pos.S``, width = the segment's rows). Layer ``l`` (1-based) appends, per head, a copy
of every block of ``h^{l-1}`` under the prefix ``L{l}`` (``L{l}h{k}`` when the layer has several
heads): ``h^2`` of a one-head model on ``[P; Y_P]`` is
``x, pos.P, pos.Y, L1.x, L1.pos.P, L1.pos.Y, L2.x, L2.pos.P, L2.pos.Y, L2.L1.x, L2.L1.pos.P, L2.L1.pos.Y``.
Block names count layers from 1 (``L1`` is written by ``blocks.0``); hook names use the module index,
as TransformerLens does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from torch import Tensor

from .task import Layout

# -- hook names ---------------------------------------------------------------------------------------
_MODEL_HOOKS = {"embed": "hook_embed", "pos_embed": "hook_pos_embed",
                "readout": "unembed.hook_readout"}
_LAYER_HOOKS = {"resid_pre": "blocks.{}.hook_resid_pre", "q": "blocks.{}.attn.hook_q",
                "k": "blocks.{}.attn.hook_k", "v": "blocks.{}.attn.hook_v",
                "attn_scores": "blocks.{}.attn.hook_attn_scores",
                "pattern": "blocks.{}.attn.hook_pattern", "z": "blocks.{}.attn.hook_z",
                "attn_out": "blocks.{}.hook_attn_out", "resid_post": "blocks.{}.hook_resid_post"}
_HOOK_ALIASES = {"scores": "attn_scores", "attn": "pattern"}  # TransformerLens's get_act_name
HOOK_KINDS = (*_MODEL_HOOKS, *_LAYER_HOOKS)


def hook_name(kind: str, layer: int | None = None) -> str:
    """The name of a hook point, as TransformerLens's ``utils.get_act_name`` builds it.

    ``hook_name("pattern", 0)`` is ``"blocks.0.attn.hook_pattern"``; ``layer`` is the module index
    (the note's layer 1 is ``blocks.0``). Kinds: ``embed``, ``pos_embed``, ``readout`` (no layer);
    ``resid_pre``, ``q``, ``k``, ``v``, ``attn_scores`` (alias ``scores``), ``pattern`` (alias
    ``attn``), ``z``, ``attn_out``, ``resid_post`` (a layer).
    """
    kind = _HOOK_ALIASES.get(kind, kind)
    if kind in _MODEL_HOOKS:
        if layer is not None:
            raise ValueError(f"hook kind {kind!r} has no layer, got layer={layer!r}")
        return _MODEL_HOOKS[kind]
    if kind not in _LAYER_HOOKS:
        raise ValueError(f"hook kind must be one of {HOOK_KINDS}, got {kind!r}")
    if not isinstance(layer, int) or isinstance(layer, bool) or layer < 0:
        raise ValueError(f"hook kind {kind!r} needs layer, an integer >= 0, got {layer!r}")
    return _LAYER_HOOKS[kind].format(layer)


def layer_hook_names(kind: str, n_layers: int) -> list[str]:
    """``hook_name(kind, layer)`` of every layer: a ``names_filter`` for ``run_with_cache``."""
    return [hook_name(kind, layer) for layer in range(n_layers)]


# TransformerLens names this model does not have, and what to use instead.
_NO_QK = ("this model has no W_Q or W_K: each head's scores are h A hᵀ with one bilinear form "
          "A = blocks[l].attn.A[head], (D_l, D_l); the queries h A are hook_q")
_NO_OV = ("this model has no W_V or W_O: the values are the stream h itself (hook_v) and each head's "
          "output z is concatenated onto the stream (blocks.{l}.attn.hook_z, blocks.{l}.hook_attn_out)")
_NO_MLP = ("this model is attention-only (no MLPs, no mlp hooks): what a layer adds is "
           "blocks.{l}.hook_attn_out")
_ABSENT = {"W_Q": _NO_QK, "W_K": _NO_QK, "b_Q": _NO_QK, "b_K": _NO_QK, "QK": _NO_QK,
           "W_V": _NO_OV, "W_O": _NO_OV, "b_V": _NO_OV, "b_O": _NO_OV, "OV": _NO_OV,
           "hook_result": "this model has no hook_result (per-head outputs through W_O): use "
                          "blocks.{l}.attn.hook_z, (B, T, H, D_l), each head's output as it is "
                          "concatenated onto the stream, or blocks.{l}.hook_attn_out, all heads",
           "hook_resid_mid": "this model has no MLPs, so no hook_resid_mid: the stream after layer "
                             "l's attention is blocks.{l}.hook_resid_post",
           "hook_mlp_out": _NO_MLP, "hook_mlp_in": _NO_MLP}


def absent_name_hint(name: str) -> str | None:
    """What to use instead of a TransformerLens attribute or hook this model lacks (``W_Q``,
    ``blocks.0.attn.hook_result``, ``("result", 0)``...), or ``None`` when ``name`` is not one."""
    if isinstance(name, tuple) and name:
        name = str(name[0])
    if not isinstance(name, str):
        return None
    last = name.rsplit(".", 1)[-1]
    return _ABSENT.get(last) or _ABSENT.get(f"hook_{last}") or _ABSENT.get(f"W_{last}")


# -- block names --------------------------------------------------------------------------------------
_COPY = re.compile(r"^L(\d+)(?:h(\d+))?$")


@dataclass(frozen=True)
class BlockName:
    """A block's name, parsed: ``path`` lists the copies from the outermost layer inwards as
    ``(layer, head)`` (layer 1-based; head ``None`` for a one-head layer), ``segment`` is the
    position block's segment, ``None`` for the token block ``x``.

    ``L2.L1h0.pos.P`` is ``BlockName(((2, None), (1, 0)), "P")``; ``str()`` gives the name back.
    """

    path: tuple[tuple[int, int | None], ...] = ()
    segment: str | None = None

    @property
    def prefix(self) -> str:
        """The copy prefix, ``""`` for ``h^0``'s own blocks, else e.g. ``"L2.L1."``."""
        return "".join(f"L{layer}." if head is None else f"L{layer}h{head}."
                       for layer, head in self.path)

    @property
    def base(self) -> str:
        """The ``h^0`` block this is a copy of: ``"x"`` or ``"pos.{segment}"``."""
        return "x" if self.segment is None else f"pos.{self.segment}"

    @property
    def is_position(self) -> bool:
        return self.segment is not None

    def copied(self, layer: int, head: int | None = None) -> BlockName:
        """This block as copied by head ``head`` of layer ``layer`` (1-based)."""
        return BlockName(((layer, head), *self.path), self.segment)

    @classmethod
    def parse(cls, name: str) -> BlockName:
        """The inverse of ``str()``: ``"L1.pos.Y"`` → ``BlockName(((1, None),), "Y")``."""
        parts = str(name).split(".")
        path = []
        while parts and (m := _COPY.match(parts[0])):
            path.append((int(m.group(1)), None if m.group(2) is None else int(m.group(2))))
            parts.pop(0)
        if parts == ["x"]:
            return cls(tuple(path), None)
        if len(parts) >= 2 and parts[0] == "pos":
            return cls(tuple(path), ".".join(parts[1:]))
        raise ValueError(f"block name must look like 'x', 'pos.P', 'L1.x' or 'L2h0.L1.pos.Y', "
                         f"got {name!r}")

    def __str__(self) -> str:
        return self.prefix + self.base


@dataclass(frozen=True)
class Block:
    """A named, contiguous range of features (or rows). A :class:`Stream`'s blocks carry their
    parsed name in ``parts``; other ranges (a plot's axis) have ``parts=None``."""

    name: str
    start: int
    stop: int
    parts: BlockName | None = field(default=None, compare=False, repr=False)

    @property
    def width(self) -> int:
        return self.stop - self.start

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)


def input_blocks(layout: Layout) -> tuple[Block, ...]:
    """The input's rows as blocks, one per segment, named ``input {name}`` (the Lemma 1 map's
    columns)."""
    blocks, start = [], 0
    for seg in layout.segments:
        blocks.append(Block(f"input {seg.name}", start, start + seg.n_rows))
        start += seg.n_rows
    return tuple(blocks)


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
        base = [(BlockName(), self.layout.d)]
        base += [(BlockName((), s.name), s.n_rows) for s in self.layout.segments]
        levels = [base]
        for layer, n_heads in enumerate(self.heads, start=1):
            prev = levels[-1]
            new = list(prev)
            for head in range(n_heads):
                new += [(name.copied(layer, None if n_heads == 1 else head), width)
                        for name, width in prev]
            levels.append(new)
        out = []
        for level in levels:
            blocks, start = [], 0
            for name, width in level:
                blocks.append(Block(str(name), start, start + width, name))
                start += width
            out.append(tuple(blocks))
        return tuple(out)

    def _check_layer(self, layer: int) -> None:
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer <= self.n_layers:
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

    def copies(self, layer: int) -> dict[tuple[tuple[int, int | None], ...], list[Block]]:
        """The copies of ``h^0`` inside ``h^layer``: copy path (``()`` for ``h^0`` itself) → its
        blocks, in stream order."""
        out: dict[tuple[tuple[int, int | None], ...], list[Block]] = {}
        for b in self.blocks(layer):
            out.setdefault(b.parts.path, []).append(b)
        return out

    def resid_hook(self, layer: int) -> str:
        """The hook that carries ``h^layer``: ``blocks.{layer}.hook_resid_pre``, or the last block's
        ``hook_resid_post`` for the read-out stream ``h^L``."""
        self._check_layer(layer)
        if layer == self.n_layers:
            return hook_name("resid_post", layer - 1)
        return hook_name("resid_pre", layer)

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
