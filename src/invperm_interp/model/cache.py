"""TransformerLens's residual-stream decompositions, for a stream that grows by concatenation.

``h^l`` is ``(B, T, D_l)`` with ``D_l`` growing, so TransformerLens's ``accumulated_resid`` and
``decompose_resid`` (which stack streams of one width ``d_model``) cannot stack them. Here every
stream and every component is placed in the final stream's frame, ``(…, D_L)``, zero beyond what it
wrote: ``h^l`` fills the first ``D_l`` features, the embedding writes the ``x`` and ``pos.*`` blocks,
layer ``l`` head ``k`` writes its block ``[D_l(1+k), D_l(2+k))``. The components have disjoint
supports, so they sum to ``h^L`` exactly (no rounding), and ``component[:, rows] @ model.W_U`` is
each one's share of the output. These are the same tensors as TransformerLens's own methods give on
the exported native model (``invperm_interp.export``), whose stream is this frame.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.functional import pad
from transformer_lens import ActivationCache
from transformer_lens.utilities import Slice

from ..stream import absent_name_hint, hook_name


def _refuse(**flags) -> None:
    for name, (value, why) in flags.items():
        if value:
            raise ValueError(f"{name}=True has no meaning here: {why}")


class StreamCache(ActivationCache):
    """``ActivationCache`` with ``accumulated_resid``, ``decompose_resid`` and
    ``stack_head_results`` in the final stream's frame ``(component, …, T, D_L)``."""

    def __getitem__(self, key):
        """As TransformerLens's; a hook this model lacks (``hook_result``) says what to use."""
        try:
            return super().__getitem__(key)
        except KeyError:
            hint = absent_name_hint(key)
            if hint is None:
                raise
            raise KeyError(f"{key!r}: {hint}") from None

    def apply_ln_to_stack(self, residual_stack, *args, **kwargs):
        """Refused: the model has no LayerNorm, so a stack is already what the unembedding reads."""
        raise ValueError("apply_ln_to_stack: this model has no LayerNorm, so there is nothing to apply; "
                         "a stack from accumulated_resid or decompose_resid is already what the "
                         "unembedding reads: stack[..., rows, :] @ model.W_U")

    def apply_slice_to_batch_dim(self, batch_slice) -> StreamCache:
        """As TransformerLens's, but the sliced cache keeps this class's methods."""
        sliced = super().apply_slice_to_batch_dim(batch_slice)
        return StreamCache(sliced.cache_dict, self.model, has_batch_dim=sliced.has_batch_dim)

    def _frame(self, t: Tensor, start: int, pos_slice) -> Tensor:
        """``t (…, T, w)`` written at features ``[start, start + w)`` of a ``D_L``-wide stream."""
        D_L = self.model.cfg.widths[-1]
        return pad(pos_slice.apply(t, dim=-2), (start, D_L - start - t.shape[-1]))

    def _layer(self, layer: int | None, allow_zero: bool = True) -> int:
        L = self.model.cfg.n_layers
        if isinstance(layer, bool):  # True == 1 would silently mean layer 1
            raise ValueError(f"layer must be an integer in [0, {L}], -1 or None, got {layer!r}")
        layer = L if layer is None or layer == -1 else layer
        if not isinstance(layer, int) or not (0 if allow_zero else 1) <= layer <= L:
            raise ValueError(f"layer must be an integer in [0, {L}], -1 or None, got {layer!r}")
        return layer

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False,
                          apply_ln: bool = False, pos_slice=None, mlp_input: bool = False,
                          return_labels: bool = False):
        """``h^0, …, h^layer`` in the final frame, ``(layer + 1, …, T, D_L)``; labels ``"0_pre"``, …,
        ``"final_post"`` as in TransformerLens. ``[:, …, rows, :] @ model.W_U`` is the logit lens."""
        _refuse(incl_mid=(incl_mid, "the model has no MLPs"), mlp_input=(mlp_input, "no MLPs"),
                apply_ln=(apply_ln, "the model has no LayerNorm"))
        pos_slice = pos_slice if isinstance(pos_slice, Slice) else Slice(pos_slice)
        layer, L = self._layer(layer), self.model.cfg.n_layers
        parts, labels = [], []
        for i in range(layer + 1):
            name = hook_name("resid_post", L - 1) if i == L else hook_name("resid_pre", i)
            parts.append(self._frame(self[name], 0, pos_slice))
            labels.append("final_post" if i == L else f"{i}_pre")
        stack = torch.stack(parts)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice=None, incl_embeds: bool = True,
                        return_labels: bool = False):
        """What wrote ``h^layer``, each in the final frame: ``"embed"`` (``X`` in block ``x``),
        ``"pos_embed"`` (``I_T`` in the ``pos.*`` blocks), ``"{l}_attn_out"`` (layer ``l``'s heads
        ``[z_1, …, z_H]``); ``(components, …, T, D_L)``, summing exactly to ``h^layer``."""
        _refuse(mlp_input=(mlp_input, "the model has no MLPs"),
                apply_ln=(apply_ln, "the model has no LayerNorm"))
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f"mode must be 'all', 'attn' or 'mlp', got {mode!r}")
        pos_slice = pos_slice if isinstance(pos_slice, Slice) else Slice(pos_slice)
        layer, widths, d = self._layer(layer), self.model.cfg.widths, self.model.cfg.d
        parts, labels = [], []
        if incl_embeds:
            parts += [self._frame(self[hook_name("embed")], 0, pos_slice),
                      self._frame(self[hook_name("pos_embed")], d, pos_slice)]
            labels += ["embed", "pos_embed"]
        if mode != "mlp":  # attention only: "mlp" leaves the embeddings alone, as TransformerLens
            for i in range(layer):
                z = self[hook_name("z", i)]  # (…, T, H, D_i)
                parts.append(self._frame(z.flatten(start_dim=-2), widths[i], pos_slice))
                labels.append(f"{i}_attn_out")
        if not parts:
            raise ValueError("nothing to decompose: incl_embeds=False with no attention layers")
        stack = torch.stack(parts)
        return (stack, labels) if return_labels else stack

    def stack_head_results(self, layer: int = -1, return_labels: bool = False,
                           incl_remainder: bool = False, pos_slice=None, apply_ln: bool = False):
        """Each head's write ``z_k`` before ``layer``, in the final frame, labelled ``"L{l}H{k}"``;
        ``incl_remainder`` adds the rest of ``h^layer`` (the embeddings) as ``"remainder"``."""
        _refuse(apply_ln=(apply_ln, "the model has no LayerNorm"))
        pos_slice = pos_slice if isinstance(pos_slice, Slice) else Slice(pos_slice)
        layer, widths = self._layer(layer, allow_zero=False), self.model.cfg.widths
        parts, labels = [], []
        for i in range(layer):
            z = self[hook_name("z", i)]  # (…, T, H, D_i)
            for k in range(z.shape[-2]):
                parts.append(self._frame(z[..., k, :], widths[i] * (1 + k), pos_slice))
                labels.append(f"L{i}H{k}")
        if incl_remainder:
            rest = self[hook_name("resid_post", layer - 1)][..., : widths[0]]
            parts.append(self._frame(rest, 0, pos_slice))
            labels.append("remainder")
        stack = torch.stack(parts)
        return (stack, labels) if return_labels else stack
