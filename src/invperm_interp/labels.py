"""One way to name a layer in every table, figure and page (and to write an MSE against its causal
floor, :func:`excess_text`).

Layers are numbered as in the note, from 1, with the TransformerLens module beside them:
``layer 1 (blocks.0)``. The stream ``h^l`` that layer ``l`` writes is "layer l output"; ``h^0``
(the embedding) is "layer 1 input". Stream block names keep their own 1-based prefixes (``L1.x`` is
the copy layer 1 writes), which agree with this numbering. Heads keep TransformerLens's 0-based
index (``head 0``), as the stream's multi-head prefixes (``L1h0``) do.
"""

from __future__ import annotations

import re


def layer_name(block: int) -> str:
    """``layer_name(0) == "layer 1 (blocks.0)"``: the note's 1-based layer and the module index."""
    if not isinstance(block, int) or isinstance(block, bool) or block < 0:
        raise ValueError(f"block must be a TransformerLens block index >= 0, got {block!r}")
    return f"layer {block + 1} (blocks.{block})"


def head_name(block: int, head: int) -> str:
    """``"layer 1 (blocks.0) head 0"``."""
    return f"{layer_name(block)} head {head}"


def stream_name(level: int, n_layers: int) -> str:
    """The residual stream ``h^level`` by the layer that reads or writes it.

    ``h^0`` is "layer 1 (blocks.0) input"; ``h^l`` for ``l >= 1`` is "layer l (blocks.l-1) output",
    and the last one, which ``W_U`` reads, adds "(read out)".
    """
    if not isinstance(level, int) or not 0 <= level <= n_layers:
        raise ValueError(f"level must be an integer in [0, {n_layers}], got {level!r}")
    if level == 0:
        return f"{layer_name(0)} input"
    return f"{layer_name(level - 1)} output" + (", read out" if level == n_layers else "")


_STREAM = re.compile(r"\bh\^(\d+)")


def name_streams(text: str, n_layers: int) -> str:
    """``text`` with every ``h^l`` replaced by :func:`stream_name` (for analysis strings such as
    ablation names, which speak of the note's ``h^l``)."""
    return _STREAM.sub(lambda m: stream_name(int(m.group(1)), n_layers), text)


def hook_label(hook: str, block: int) -> str:
    """A patching row label: the stream read at ``blocks.{block}.{hook}`` named by its layer."""
    if hook == "resid_pre":
        return f"{layer_name(block)} input"
    if hook == "resid_post":
        return f"{layer_name(block)} output"
    return f"{layer_name(block)} {hook}"


def excess_parts(mse: float, floor: float | None) -> tuple[str, str | None]:
    """``("2.5025", "floor 2.5 + 0.0025")``: the MSE with the digits that tell it from its floor,
    and its floor plus the excess (``None`` without a floor)."""
    if floor is None or floor <= 0:
        return f"{mse:.4g}", None
    excess = mse - floor
    return f"{mse:.6g}", f"floor {floor:.6g} {'+' if excess >= 0 else '−'} {abs(excess):.3g}"


def excess_text(mse: float, floor: float | None) -> str:
    """``"2.5025 = floor 2.5 + 0.0025"``: :func:`excess_parts` as one text."""
    value, rest = excess_parts(mse, floor)
    return value if rest is None else f"{value} = {rest}"
