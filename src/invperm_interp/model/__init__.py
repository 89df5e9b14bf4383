"""The model: the plain disentangled transformer that training updates (no hooks, no
TransformerLens), the hooked one built from the same parameters, its token vocabulary, its
activation cache, weight variants run as batched forwards, and the export to a native
TransformerLens model (docs/design.md sections 1 and 3); the standard transformer, plain and
hooked, its exact map to the disentangled model and its import from and export to
TransformerLens (docs/standard.md); ``build``, which of them
a configuration makes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .cache import StreamCache
    from .disentangled import DisentangledTransformer, readout_forward
    from .export import TransformerLensExport, to_transformer_lens
    from .hooked import HookedDisentangledTransformer
    from .note_map import to_disentangled
    from .standard import StandardTransformer
    from .standard_export import standard_to_transformer_lens
    from .standard_hooked import HookedStandardTransformer
    from .standard_import import standard_from_transformer_lens
    from .tokens import from_tokens, row_labels, to_tokens
    from .variants import forward_many, forward_stacked

_HOMES = {"StreamCache": "cache", "DisentangledTransformer": "disentangled",
          "readout_forward": "disentangled", "TransformerLensExport": "export",
          "to_transformer_lens": "export", "HookedDisentangledTransformer": "hooked",
          "from_tokens": "tokens", "row_labels": "tokens", "to_tokens": "tokens",
          "forward_many": "variants", "forward_stacked": "variants",
          "StandardTransformer": "standard", "HookedStandardTransformer": "standard_hooked",
          "to_disentangled": "note_map", "standard_to_transformer_lens": "standard_export",
          "standard_from_transformer_lens": "standard_import"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["DisentangledTransformer", "HookedDisentangledTransformer", "HookedStandardTransformer",
           "StandardTransformer", "StreamCache", "standard_from_transformer_lens",
           "standard_to_transformer_lens", "to_disentangled",
           "TransformerLensExport", "forward_many", "forward_stacked", "from_tokens",
           "readout_forward", "row_labels", "to_tokens",
           "to_transformer_lens"]
