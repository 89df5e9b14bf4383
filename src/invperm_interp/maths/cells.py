"""The template vocabulary of attention cells, shared by the constructions and the matching.

A cell is one (query block, key block) sub-matrix of an ``A``. A construction writes a cell as a
*label*: a template name with a sign, times ``β`` (``"I"``, ``"J"``, ``"-1"``); the matching reads
a learned cell as a template and a signed least-squares scale and reports the same label. Templates:
``I`` (query i ↔ key i), ``J`` (query i ↔ key last - i), ``ones`` (written ``1``, so ``-1`` is
minus all ones) and ``shift+k`` (query i ↔ key i + k, no wrap-around).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor


class Cell(NamedTuple):
    """One template in one (query block, key block) cell of head ``head`` of ``blocks.{layer}``'s
    ``A``: the one cell value of constructions, placements, fitted atoms and records. ``label`` is
    a template with an optional sign (``"I"``, ``"-I"``, ``"J"``, ``"1"``, ``"shift+1"`` …). A
    tuple: records store it as a JSON list ``[layer, head, query, key, label]``."""

    layer: int
    head: int
    query: str
    key: str
    label: str

    @property
    def site(self) -> tuple[int, int, str, str]:
        """``(layer, head, query, key)``: the cell without its template."""
        return self.layer, self.head, self.query, self.key

    @classmethod
    def of(cls, item) -> Cell:
        """A cell from ``(layer, head, query, key, label)``, or ``(layer, query, key, label)`` on
        head 0 (how the note's one-head constructions are written); ``ValueError`` otherwise."""
        if isinstance(item, (tuple, list)) and len(item) in (4, 5):
            cell = cls(*item) if len(item) == 5 else cls(item[0], 0, *item[1:])
            if all(isinstance(v, int) and not isinstance(v, bool) for v in cell[:2]) and all(
                    isinstance(v, str) for v in cell[2:]):
                return cell
        raise ValueError(f"a cell must be (layer, [head,] query block, key block, template), "
                         f"got {item!r}")


#: ``template(rows, cols) -> (rows, cols)`` float64 tensor, or ``None`` where it does not apply.
TemplateFn = Callable[[int, int], "Tensor | None"]


def shifted(k: int) -> TemplateFn:
    """Ones at ``(i, i + k)``: query ``i`` matches key ``i + k`` (no wrap-around)."""
    if not isinstance(k, int) or k == 0:
        raise ValueError(f"shift must be a nonzero integer (shift 0 is I), got {k!r}")

    def make(r: int, c: int) -> Tensor:
        i, j = torch.arange(r)[:, None], torch.arange(c)[None, :]
        return (j - i == k).to(torch.float64)

    return make


TEMPLATES: dict[str, TemplateFn] = {
    "I": lambda r, c: torch.eye(r, c, dtype=torch.float64),
    "J": lambda r, c: torch.eye(r, c, dtype=torch.float64).flip(-1),
    "ones": lambda r, c: torch.ones(r, c, dtype=torch.float64),
}


def label(template: str, beta: float) -> str:
    """The written form of ``beta · template``: ``I``, ``J``, ``1``, ``-1``, ``-J``, ``shift+1`` …"""
    name = "1" if template == "ones" else template
    return name if beta >= 0 else ("-1" if name == "1" else f"-{name}")


def parse_label(text: str) -> tuple[str, float]:
    """``(template, sign)`` of a label: ``"-1"`` → ``("ones", -1.0)``, ``"J"`` → ``("J", 1.0)``."""
    sign, name = (-1.0, text[1:]) if text.startswith("-") else (1.0, text)
    name = "ones" if name == "1" else name
    if name not in TEMPLATES and not name.startswith("shift"):
        raise ValueError(f"template label must be one of I, J, 1, shift+k, optionally negated, "
                         f"got {text!r}")
    return name, sign


def cell_template(text: str, rows: int, cols: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """The ``(rows, cols)`` tensor a label stands for, with its sign."""
    name, sign = parse_label(text)
    make = TEMPLATES.get(name) or shifted(int(name[len("shift"):]))
    return (sign * make(rows, cols)).to(dtype)
