"""Batched weight variants (``model.variants.forward_many``) against the hooked model's own forward
and patterns, for sparse and dense variants."""

import pytest
import torch

from invperm_interp import Layout, ModelConfig
from invperm_interp.model.hooked import HookedDisentangledTransformer
from invperm_interp.model.variants import forward_many, forward_stacked
from invperm_interp.task import sample_batch

CONFIGS = [
    ModelConfig(Layout.plain(4), attention_dir="bidirectional", readout="P", n_heads=2, n_layers=3,
                dtype="float64"),
    ModelConfig(Layout.scratch(4), attention_dir="causal", readout="S", n_heads=(1, 2), n_layers=2,
                dtype="float64"),
    # one layer: the first layer is the last, its queries the read-out rows (the first rows here)
    ModelConfig(Layout.plain(4), attention_dir="causal", readout="P", n_heads=2, n_layers=1,
                dtype="float64"),
]
IDS = ["bidirectional-3x2", "causal-scratch", "causal-1-layer"]


def _reference(model, As, W_U, X):
    """The hooked model with its weights replaced: output and per-layer patterns."""
    with torch.no_grad():
        for layer, A in enumerate(As):
            model.blocks[layer].attn.A.copy_(A)
        model.unembed.W_U.copy_(W_U)
        out, cache = model.run_with_cache(X, names_filter=lambda n: n.endswith("hook_pattern"),
                                          return_cache_object=False)
    return out, [cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(len(As))]


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
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




def _plain_streams(cfg, As, h):
    """``[h^0, …, h^L]`` from ``h^0 (B, T, D_0)`` by the note's definition, with einsum."""
    T = h.shape[1]
    hidden = torch.ones(T, T, dtype=torch.bool).triu(1) if cfg.causal else torch.zeros(T, T, dtype=torch.bool)
    streams = [h]
    for A in As:
        scores = torch.einsum("bid,kde,bje->bkij", h, A, h).masked_fill(hidden, float("-inf"))
        z = torch.einsum("bkij,bjd->bikd", scores.softmax(-1), h).flatten(2)
        h = torch.cat([h, z], dim=-1)
        streams.append(h)
    return streams


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_an_edited_embedding_and_the_read_out_stream_match_the_plain_forward(cfg):
    """``h0`` replaces ``[X, I_T]`` (here with two rows zeroed and the content scaled), and
    ``readout=False`` gives the read-out rows of ``h^L`` that ``W_U`` reads."""
    g = torch.Generator().manual_seed(1)
    X = sample_batch(cfg.layout, 16, g, dtype=torch.float64).X
    As = [torch.randn(h, w, w, generator=g, dtype=torch.float64) for h, w in zip(cfg.heads, cfg.widths)]
    W_U = torch.randn(cfg.widths[-1], cfg.d, generator=g, dtype=torch.float64)
    h0 = torch.cat([2.0 * X, torch.eye(cfg.T, dtype=torch.float64).expand(len(X), -1, -1)], -1)
    h0[:, [1, cfg.T - 1]] = 0.0
    final = _plain_streams(cfg, As, h0)[-1][:, cfg.readout_rows]  # (B, d, D_L)
    stacked = [A[None] for A in As]
    out = forward_stacked(cfg, stacked, W_U[None], X, h0=h0)[0]
    torch.testing.assert_close(out, final @ W_U, rtol=1e-10, atol=1e-10)
    read = forward_stacked(cfg, stacked, torch.ones(cfg.widths[-1], 1, dtype=torch.float64)[None], X,
                           h0=h0, readout=False)[0]
    torch.testing.assert_close(read, final, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(out, forward_stacked(cfg, stacked, W_U[None], X)[0])  # h0 was used


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_model_run_gives_the_read_out_stream_with_unread_columns_zero_and_every_pattern(cfg):
    """What an analysis shares between its clean scores, gauge check and read-out ablations."""
    from invperm_interp.model.variants import model_patterns, model_run

    g = torch.Generator().manual_seed(2)
    model = HookedDisentangledTransformer(cfg)
    X = sample_batch(cfg.layout, 16, g, dtype=torch.float64).X
    read = torch.rand(cfg.widths[-1], generator=g) < 0.5  # W_U reads about half the columns
    with torch.no_grad():
        for block in model.blocks:
            block.attn.A.normal_(generator=g)
        model.unembed.W_U.normal_(generator=g).mul_(read[:, None].double())
    As = [block.attn.A.detach() for block in model.blocks]
    h0 = torch.cat([X, torch.eye(cfg.T, dtype=torch.float64).expand(len(X), -1, -1)], -1)
    want = _plain_streams(cfg, As, h0)[-1][:, cfg.readout_rows] * read.double()  # (B, d, D_L)
    final, patterns = model_run(model, X)
    torch.testing.assert_close(final, want, rtol=1e-10, atol=1e-10)
    assert bool((final[..., ~read] == 0).all())
    out, ref_patterns = _reference(model, As, model.unembed.W_U.detach().clone(), X)
    for p, q in zip(patterns, ref_patterns):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(model_patterns(model, X)[0], out, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=IDS[:2])  # a first layer before a later one
def test_variants_sharing_a_first_layer_run_from_one_and_match_the_model(cfg):
    """Variants whose first layer is equal (a circuit and the circuit less a later cell) have
    that layer formed once: within a chunk, and across chunks of one variant each
    (``max_elements=1``, as at a large batch). Each output is the hooked model's, and the same
    as the variant run alone."""
    from invperm_interp.model import variants as module

    g = torch.Generator().manual_seed(3)
    model = HookedDisentangledTransformer(cfg)
    X = sample_batch(cfg.layout, 24, g, dtype=torch.float64).X
    shapes = [b.attn.A.shape for b in model.blocks]
    def sparse(shape, density):
        return (torch.randn(shape, generator=g, dtype=torch.float64)
                * (torch.rand(shape, generator=g) < density))

    firsts = [sparse(shapes[0], p) for p in (0.3, 1.0)]
    variants = []
    for i in range(6):  # firsts alternate, so equal first layers are not neighbours
        later = [sparse(s, 0.2 * (i + 1)) for s in shapes[1:]]
        W_U = torch.randn(model.unembed.W_U.shape, generator=g, dtype=torch.float64)
        variants.append(([firsts[i % 2], *later], W_U))
    formed = []
    original = module.first_layer
    module.first_layer = lambda *a, **k: formed.append(1) or original(*a, **k)
    try:
        together = forward_many(cfg, variants, X)
        apart = forward_many(cfg, variants, X, max_elements=1)
    finally:
        module.first_layer = original
    assert len(formed) == 2  # once per distinct first layer, across the one-variant chunks
    for (As, W_U), a, b in zip(variants, together, apart):
        ref, _ = _reference(model, As, W_U, X)
        alone = forward_many(cfg, [(As, W_U)], X)[0]
        for got in (a, b):
            torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(got, alone, rtol=1e-12, atol=1e-12)


def test_a_shared_first_layer_refuses_a_column_it_did_not_form():
    from invperm_interp.model.variants import first_layer

    cfg = CONFIGS[1]
    g = torch.Generator().manual_seed(4)
    X = sample_batch(cfg.layout, 4, g, dtype=torch.float64).X
    A = torch.randn(cfg.heads[0], cfg.widths[0], cfg.widths[0], generator=g, dtype=torch.float64)
    shared = first_layer(cfg, A, X, torch.tensor([0, 1, cfg.widths[0] + 2]))
    assert shared.stream.shape == (4, cfg.T, 3)
    torch.testing.assert_close(shared.take(torch.tensor([1])), X[..., 1:2].double())
    with pytest.raises(ValueError, match="did not form"):
        shared.take(torch.tensor([0, 5]))
