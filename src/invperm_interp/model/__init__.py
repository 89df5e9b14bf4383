"""The model: the plain disentangled transformer that training updates (no hooks, no
TransformerLens), the hooked one built from the same parameters, its token vocabulary, its
activation cache, weight variants run as batched forwards, and the export to a native
TransformerLens model. docs/design.md sections 1 and 3."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .cache import StreamCache
    from .disentangled import DisentangledTransformer, readout_forward
    from .export import TransformerLensExport, to_transformer_lens
    from .hooked import HookedDisentangledTransformer
    from .tokens import from_tokens, row_labels, to_tokens
    from .variants import forward_many, forward_stacked

_HOMES = {"StreamCache": "cache", "DisentangledTransformer": "disentangled",
          "readout_forward": "disentangled", "TransformerLensExport": "export",
          "to_transformer_lens": "export", "HookedDisentangledTransformer": "hooked",
          "from_tokens": "tokens", "row_labels": "tokens", "to_tokens": "tokens",
          "forward_many": "variants", "forward_stacked": "variants"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["DisentangledTransformer", "HookedDisentangledTransformer", "StreamCache",
           "TransformerLensExport", "forward_many", "forward_stacked", "from_tokens",
           "readout_forward", "row_labels", "to_tokens",
           "to_transformer_lens"]
