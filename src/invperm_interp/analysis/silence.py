"""Silencing: a head a variant leaves no weight in writes nothing, instead of attending uniformly.

Zero ablation removes a part of ``A`` by zeroing it; a head whose whole ``A`` is zeroed then
attends uniformly (softmax of equal scores) and still writes the average of the stream into its
output block, which later layers copy and ``W_U`` may read. That answers "does the claim need this
head's *pattern*?". Silencing answers "does the claim need this head's *output* at all?": a head
with an all-zero ``A`` in a variant (a circuit with no cell on it, a placement that does not use
it, the empty claim) is knocked out, its output block and every later copy of it zero, as a
head-output knock-out (``hook_z`` zeroed) does. An idle layer is then recognised as idle: the
circuit without it is the model without it.

A zero block contributes nothing downstream: not to scores (``h A hᵀ`` over its rows and columns)
and not to the read-out; a later head copies it as zeros. So silencing equals zeroing, in every
later layer's ``A``, the rows and columns of the silenced block and its copies, and those rows of
``W_U``: the variant stays a plain ``(As, W_U)`` for ``model.variants`` to run (and its planner
then skips the silenced heads, nothing reading them).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def silent_heads(As: Sequence[Tensor]) -> frozenset[tuple[int, int]]:
    """``(layer, head)`` of every head whose ``A`` (``As[l] (H_l, D_l, D_l)``) is all zero."""
    return frozenset((layer, head) for layer, A in enumerate(As)
                     for head in range(A.shape[0]) if not bool(A[head].any()))


def written_by(heads: tuple[int, ...], widths: Sequence[int],
               silent: frozenset[tuple[int, int]]) -> list[Tensor]:
    """Per stream ``h^0 … h^L``, ``(D_l,)`` bool: the columns the ``silent`` heads wrote, directly
    (their output blocks) or through later heads' copies of them. ``h^{l+1}`` is ``h^l`` followed
    by each head's output, a mix of all of ``h^l`` with its column structure."""
    masks = [torch.zeros(widths[0], dtype=torch.bool)]
    for layer, n in enumerate(heads):
        prev = masks[-1]
        masks.append(torch.cat([prev, *(torch.ones_like(prev) if (layer, k) in silent else prev
                                        for k in range(n))]))
    return masks


def silence(cfg, As: Sequence[Tensor], W_U: Tensor) -> tuple[list[Tensor], Tensor]:
    """The variant ``(As, W_U)`` (``As[l] (H_l, D_l, D_l)``, ``W_U (D_L, d)``) of a model of config
    ``cfg`` with every all-zero head silenced: the rows and columns its output reaches zeroed in
    later layers' ``A`` and in ``W_U`` (module docstring); unchanged when no head is all zero."""
    silent = silent_heads(As)
    if not silent:
        return list(As), W_U
    masks = written_by(cfg.heads, cfg.widths, silent)
    out = []
    for layer, A in enumerate(As):
        mask = masks[layer].to(A.device)
        if bool(mask.any()):
            A = A.clone()
            A[:, mask, :] = 0
            A[:, :, mask] = 0
        out.append(A)
    W_U = W_U.clone()
    W_U[masks[-1].to(W_U.device)] = 0
    return out, W_U


__all__ = ["silence", "silent_heads", "written_by"]
