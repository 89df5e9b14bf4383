"""The native TransformerLens export computes the model's function, hook by hook."""

import itertools

import pytest
import torch
from transformer_lens import patching

from invperm_interp import (
    HookedDisentangledTransformer,
    Layout,
    ModelConfig,
    hook_name,
    sample_batch,
)
from invperm_interp.analysis import patch_positions
from invperm_interp.maths import constructions as C
from invperm_interp.model.export import HOOK_MAP, to_transformer_lens
from invperm_interp.task import make_input, mse

LAYOUTS = {"plain": lambda d: Layout.plain(d),
           "scratch": lambda d: Layout.scratch(d, scratch=[0.5, -1.0, 2.0][:d])}
RANDOM = list(itertools.product(("causal", "bidirectional"), LAYOUTS, (1, 2, 3), (1, 2)))


def random_model(attention_dir, layout, n_layers, n_heads, d=3):
    readout = "S" if layout == "scratch" else "P"
    cfg = ModelConfig(LAYOUTS[layout](d), n_layers=n_layers, n_heads=n_heads,
                      attention_dir=attention_dir, readout=readout, init_scale=0.3)
    return HookedDisentangledTransformer(cfg, seed=n_layers + 10 * n_heads)


def inputs(model, n=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return sample_batch(model.cfg.layout, n, generator, dtype=model.cfg.torch_dtype).X


@pytest.mark.parametrize("attention_dir, layout, n_layers, n_heads", RANDOM)
def test_export_matches_the_model_on_random_weights(attention_dir, layout, n_layers, n_heads):
    model = random_model(attention_dir, layout, n_layers, n_heads)
    export = to_transformer_lens(model)
    X = inputs(model)
    with torch.no_grad():
        expected, got = model(X), export.forward(X)
    assert got.shape == expected.shape and got.dtype == torch.float32
    assert expected.std() > 0.05  # the weights do something: not a comparison of constants
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", C.names())
def test_export_matches_every_construction_in_float32(name):
    model = C.build(name, 4, dtype=torch.float32)
    export = to_transformer_lens(model)
    X = inputs(model, n=64)
    with torch.no_grad():
        torch.testing.assert_close(export.forward(X), model(X), atol=1e-5, rtol=0)


def test_export_follows_dtype_and_per_layer_heads():
    cfg = ModelConfig(Layout.plain(3), n_layers=2, n_heads=(2, 1), attention_dir="bidirectional",
                      dtype="float64", init_scale=0.5)
    model = HookedDisentangledTransformer(cfg, seed=3)
    export = to_transformer_lens(model)
    X = inputs(model)
    assert export.tl_model.cfg.n_heads == 2 and export.tl_model.cfg.d_head == cfg.widths[1]
    with torch.no_grad():
        torch.testing.assert_close(export.forward(X), model(X), atol=1e-12, rtol=0)


@pytest.mark.parametrize("attention_dir, n_heads", [("causal", 2), ("bidirectional", 1)])
def test_every_hook_reads_back_from_the_export_cache(attention_dir, n_heads):
    model = random_model(attention_dir, "scratch", 2, n_heads)
    export = to_transformer_lens(model)
    X = inputs(model, n=4)
    with torch.no_grad():
        _, ours = model.run_with_cache(X)
        _, theirs = export.run_with_cache(X)
    assert len(ours) == 3 + 9 * model.cfg.n_layers
    for name in ours:
        got = export.activation(theirs, name)
        torch.testing.assert_close(got, ours[name], atol=1e-5, rtol=0, msg=name)
        back = export.native_name(export.tl_name(name))
        scaled = [hook_name(kind, i) for kind in ("q", "attn_scores") for i in range(2)]
        assert back == name or name in (hook_name("embed"), *scaled)
    # the export's attn_out holds the layer's new blocks in place, zero elsewhere
    attn_out = theirs["blocks.0.hook_attn_out"]
    D0, D1 = model.cfg.widths[:2]
    assert attn_out[..., :D0].abs().max() == 0 and attn_out[..., D1:].abs().max() == 0


def test_accumulated_and_decomposed_resid_on_the_export_rebuild_the_stream():
    model = C.build("theorem3_two_block", 3, dtype=torch.float32, scratch=[0.0, 2.0, 0.5])
    export = to_transformer_lens(model)
    X = inputs(model, n=8)
    tokens = export.to_tokens(X)  # (B, T): binary rows and the scratch vector s are tokens
    assert tokens.shape == (8, model.cfg.T) and int(tokens.max()) == 2**3  # s is token 2^d
    with torch.no_grad():
        _, ours = model.run_with_cache(X)
        logits, cache = export.tl_model.run_with_cache(tokens)
        accumulated, labels = cache.accumulated_resid(return_labels=True)
        decomposed, parts = cache.decompose_resid(return_labels=True)
    torch.testing.assert_close(logits[:, export.rows], model(X), atol=1e-5, rtol=0)
    torch.testing.assert_close(cache["hook_embed"], export.embed(X), atol=0, rtol=0)  # fires on ids
    L, widths = model.cfg.n_layers, model.cfg.widths
    assert accumulated.shape == (L + 1, 8, model.cfg.T, widths[-1]) and len(labels) == L + 1
    for layer in range(L):
        torch.testing.assert_close(accumulated[layer][..., : widths[layer]],
                                   ours[hook_name("resid_pre", layer)], atol=1e-5, rtol=0)
    torch.testing.assert_close(accumulated[-1], ours[hook_name("resid_post", L - 1)],
                               atol=1e-5, rtol=0)
    assert parts == ["embed", "pos_embed", "0_attn_out", "1_attn_out"]
    torch.testing.assert_close(decomposed.sum(0), accumulated[-1], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="neither a binary row nor the scratch vector"):
        export.to_tokens(X + 0.25)


def test_hook_map_names_hooks_the_export_fires():
    model = random_model("causal", "plain", 2, 2)
    export = to_transformer_lens(model)
    fired = set(export.tl_model.hook_dict)
    for kind in HOOK_MAP:
        for layer in (None,) if kind in ("embed", "pos_embed", "readout") else range(2):
            assert export.tl_name(hook_name(kind, layer)) in fired
    with pytest.raises(ValueError, match="hook name"):
        export.tl_name(hook_name("resid_pre", 5))
    with pytest.raises(ValueError, match="X must be a tensor of shape"):
        export.forward(torch.zeros(2, 3, 3))


def test_transformer_lens_patching_on_the_export_equals_analysis_patch_on_the_model():
    model = C.build("two_block", 3, dtype=torch.float32)
    export = to_transformer_lens(model)
    generator = torch.Generator().manual_seed(0)
    clean = sample_batch(model.cfg.layout, 16, generator)
    corrupted = make_input(model.cfg.layout, sample_batch(model.cfg.layout, 16, generator).P,
                           clean.Y_P).X
    expected = patch_positions(model, clean.X, corrupted, lambda out: mse(out, clean.Y))
    _, clean_cache = export.tl_model.run_with_cache(export.to_tokens(clean.X))
    got = patching.get_act_patch_resid_pre(export.tl_model, export.to_tokens(corrupted), clean_cache,
                                           lambda logits: mse(logits[:, export.rows], clean.Y))
    assert got.shape == (model.cfg.n_layers, model.cfg.T) and expected.values.abs().max() > 0.1
    torch.testing.assert_close(got.double(), expected.values, atol=1e-5, rtol=0)
