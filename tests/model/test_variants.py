"""Batched weight variants (``model.variants.forward_many``) against the hooked model's own forward
and patterns, for sparse and dense variants."""

import pytest
import torch

from invperm_interp import Layout, ModelConfig
from invperm_interp.model.hooked import HookedDisentangledTransformer
from invperm_interp.model.variants import forward_many
from invperm_interp.task import sample_batch

CONFIGS = [
    ModelConfig(Layout.plain(4), attention_dir="bidirectional", readout="P", n_heads=2, n_layers=3,
                dtype="float64"),
    ModelConfig(Layout.scratch(4), attention_dir="causal", readout="S", n_heads=(1, 2), n_layers=2,
                dtype="float64"),
]


def _reference(model, As, W_U, X):
    """The hooked model with its weights replaced: output and per-layer patterns."""
    with torch.no_grad():
        for layer, A in enumerate(As):
            model.blocks[layer].attn.A.copy_(A)
        model.unembed.W_U.copy_(W_U)
        out, cache = model.run_with_cache(X, names_filter=lambda n: n.endswith("hook_pattern"),
                                          return_cache_object=False)
    return out, [cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(len(As))]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["bidirectional-3x2", "causal-scratch"])
def test_forward_many_is_the_model_forward_for_sparse_and_dense_variants(cfg):
    g = torch.Generator().manual_seed(0)
    model = HookedDisentangledTransformer(cfg)
    X = sample_batch(cfg.layout, 32, g, dtype=torch.float64).X
    variants = []
    for density in (0.0, 0.05, 0.3, 1.0):  # all zero, a few cells, most, every entry
        As = [torch.randn(b.attn.A.shape, generator=g, dtype=torch.float64)
              * (torch.rand(b.attn.A.shape, generator=g) < density) for b in model.blocks]
        W_U = torch.randn(model.unembed.W_U.shape, generator=g, dtype=torch.float64)
        W_U *= torch.rand(W_U.shape[0], 1, generator=g) < max(density, 0.2)
        variants.append((As, W_U))
    outs = forward_many(cfg, variants, X)
    one_by_one = forward_many(cfg, variants, X, max_elements=1)
    with_patterns = forward_many(cfg, variants, X, patterns=True)
    for (As, W_U), out, single, (out_p, pats) in zip(variants, outs, one_by_one, with_patterns):
        ref, ref_pats = _reference(model, As, W_U, X)
        for got in (out, single, out_p):
            torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
        for p, q in zip(pats, ref_pats):
            torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


