"""A construction in words, derived from its cells: what each cell makes a query row attend to, and
what ``W_U`` reads, so a discovered form reads as the note's constructions are explained.

Block names say where a row's coordinates came from: ``x`` is its content, ``pos.P`` its index
among the P rows, and each ``L{l}.`` prefix one copy by layer ``l``'s attention (``L2.L1.x``: the
content that the row it attended in layer 2 had copied in layer 1). A cell ``(query, key, T)``
scores key row ``k`` for query row ``q`` by ``β · h_q[query] T h_k[key]ᵀ``: ``I`` selects the key
whose block holds the same one-hot as the query's, ``J`` the reversed one, ``shift±k`` the shifted
one, and ``1`` any key with mass in the block; a minus sign turns selecting into avoiding.
"""

from __future__ import annotations

import re

from .cells import parse_label
from .registry import ConstructionSpec

_ROWS = {"P": "P-row", "Y": "Y_P-row", "S": "scratch-row"}
_BLOCK = re.compile(r"((?:L\d+(?:h\d+)?\.)*)(x|pos\.\w+)")


def block_words(block: str) -> str:
    """``"L2.L1.x"`` → ``"content of the row attended in layer 1 by the row attended in layer 2"``."""
    match = _BLOCK.fullmatch(block)
    if match is None:
        raise ValueError(f"block must be a stream block name like 'x', 'pos.P' or 'L2.L1.x', "
                         f"got {block!r}")
    base = match[2]
    text = "content" if base == "x" else f"{_ROWS.get(base[4:], base[4:] + '-row')} index"
    copies = re.findall(r"L(\d+)(?:h(\d+))?\.", match[1])
    for i, (layer, head) in enumerate(reversed(copies)):
        where = f"layer {layer}" + (f" head {head}" if head else "")
        text += f" of the row attended in {where}" if i == 0 else f" by the row attended in {where}"
    return text


def cell_sentence(layer: int, head: int, query: str, key: str, label: str, n_heads: int = 1) -> str:
    """One cell as a sentence: which key a query row selects (or avoids, lifts, lowers)."""
    template, sign = parse_label(label)
    where = f"layer {layer + 1}" + (f" head {head}" if n_heads > 1 else "")
    q, k = block_words(query), block_words(key)
    if template == "ones":
        verb = "lifts" if sign > 0 else "lowers"
        return f"{where}: a query row with {q} {verb} every key row with {k} (by β)"
    relation = {"I": "the same one-hot", "J": "the reversed one-hot (i ↔ d − 1 − i)"}.get(
        template, f"that one-hot shifted by {template[len('shift'):]}")
    verb = "selects" if sign > 0 else "avoids"
    return f"{where}: a query row's {q} {verb} the key row whose {k} is {relation}"


def describe(spec: ConstructionSpec) -> list[str]:
    """The construction's cells as sentences, layer by layer, then what ``W_U`` reads."""
    lines = [cell_sentence(*cell, n_heads=spec.heads[cell.layer]) for cell in
             sorted(spec.cells, key=lambda c: (c.layer, c.head, parse_label(c.label)[0] == "ones"))]
    rows = _ROWS.get(spec.readout, spec.readout + "-row").replace("-row", " rows")
    reads = " plus ".join(("minus " if sign < 0 else "") + block_words(block)
                          for block, sign in spec.read_terms)
    lines.append(f"read-out: each of the {rows} outputs the {reads} (the answer Y_i at row i)")
    return lines
