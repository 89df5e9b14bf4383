"""The template vocabulary of attention cells, shared by the constructions and the matching.

A cell is one (query block, key block) sub-matrix of an ``A``. A construction writes a cell as a
*label*: a template name with a sign, times ``β`` (``"I"``, ``"J"``, ``"-1"``); the matching reads
a learned cell as a template and a signed least-squares scale and reports the same label. Templates:
``I`` (query i ↔ key i), ``J`` (query i ↔ key last - i), ``ones`` (written ``1``, so ``-1`` is
minus all ones) and ``shift+k`` (query i ↔ key i + k, no wrap-around).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

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
