"""The causal mask: which keys each query may not see, as booleans and as a term added to scores.

One definition for every model and forward that masks (the plain and hooked disentangled models,
the standard model, the stacked variants, the TransformerLens export's recomputed scores).
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor


def causal_mask(T: int, device: torch.device | str | None = None) -> Bool[Tensor, "query pos"]:
    """``(T, T)`` booleans, True where the key comes after the query (hidden from it)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(diagonal=1)


def mask_term(mask: Bool[Tensor, "query pos"], dtype: torch.dtype) -> Float[Tensor, "query pos"]:
    """The mask ``(T, T)`` (True: key hidden) as a term added to scores: ``-inf`` where hidden,
    0 elsewhere (adding 0 leaves every finite score's bits as they were)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
