"""The standard transformer against an independent numpy forward; its hooked twin; its config."""

import json

import numpy as np
import pytest
import torch

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.model.standard import StandardTransformer
from invperm_interp.model.standard_hooked import HookedStandardTransformer

LAYOUTS = [(Layout.plain(3), "P"), (Layout.plain(3), "Y"), (Layout.scratch(3, 3), "S"),
           (Layout.of(3, "0", "P", "Y", "0"), "pad0")]


def _ln(x, w, b):
    x = x - x.mean(-1, keepdims=True)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * w + b


def numpy_forward(X, p, cfg):
    """The standard transformer written out in numpy, row by row (float64): ``p`` maps parameter
    names to arrays."""
    B, T, _ = X.shape
    ln = (lambda x, name: _ln(x, p[f"{name}.w"], p[f"{name}.b"])) if cfg.layernorm else \
        (lambda x, name: x)
    out = []
    for b in range(B):
        resid = X[b] @ p["embed.W_E"] + p["pos_embed.W_pos"]
        for layer in range(cfg.n_layers):
            x, add = ln(resid, f"blocks.{layer}.ln1"), 0
            pre = f"blocks.{layer}.attn."
            for h in range(cfg.heads[layer]):
                q, k = x @ p[pre + "W_Q"][h], x @ p[pre + "W_K"][h]
                v = x @ p[pre + "W_V"][h]
                z = np.zeros_like(v)
                for i in range(T):
                    keys = list(range(i + 1)) if cfg.causal else list(range(T))
                    s = np.array([q[i] @ k[j] for j in keys]) / np.sqrt(cfg.d_head)
                    w = np.exp(s - s.max())
                    z[i] = (w / w.sum()) @ v[keys]
                add = add + z @ p[pre + "W_O"][h]
            resid = resid + add
            if cfg.d_mlp:
                m = f"blocks.{layer}.mlp."
                x = ln(resid, f"blocks.{layer}.ln2")
                resid = resid + np.maximum(x @ p[m + "W_in"] + p[m + "b_in"], 0) @ p[m + "W_out"] \
                    + p[m + "b_out"]
        out.append(ln(resid, "ln_final")[cfg.readout_rows] @ p["unembed.W_U"])
    return np.stack(out)


@pytest.mark.parametrize("layout,readout", LAYOUTS)
@pytest.mark.parametrize("layernorm,d_mlp", [(False, None), (True, None), (False, 5), (True, 5)])
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
def test_the_forward_is_the_standard_transformer(layout, readout, layernorm, d_mlp, attention_dir):
    cfg = ModelConfig(layout, arch="standard", n_layers=2, n_heads=2, d_model=6, d_head=2,
                      layernorm=layernorm, d_mlp=d_mlp, readout=readout, dtype="float64",
                      attention_dir=attention_dir, init_scale=0.7)
    model = StandardTransformer(cfg, seed=1)
    with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so they are tested
        for name, p in model.named_parameters():
            if name.rsplit(".", 1)[-1] in ("w", "b", "b_in", "b_out"):
                p.add_(torch.randn(p.shape, dtype=p.dtype, generator=torch.Generator().manual_seed(3)))
    batch = sample_batch(layout, 3, torch.Generator().manual_seed(0), dtype=torch.float64)
    params = {n: p.detach().numpy() for n, p in model.named_parameters()}
    expected = numpy_forward(batch.X.numpy(), params, cfg)
    np.testing.assert_allclose(model(batch.X).detach().numpy(), expected, rtol=1e-10, atol=1e-10)
    hooked = HookedStandardTransformer.from_module(model)
    np.testing.assert_allclose(hooked(batch.X).detach().numpy(), expected, rtol=1e-10, atol=1e-10)
    if not (layernorm or d_mlp):  # the forward through the map, which training runs when cheaper
        got = model.note_forward(batch.X).detach().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_training_takes_the_cheaper_forward_and_its_gradients_are_the_direct_ones():
    cfg = ModelConfig(Layout.plain(10), arch="standard", d_model=64, dtype="float64")
    model = StandardTransformer(cfg, seed=0)
    assert model.through_note  # d = 10, d_model 64: the disentangled widths 30, 60 are narrower
    assert not StandardTransformer(ModelConfig(Layout.plain(2), arch="standard", d_model=4)).through_note
    batch = sample_batch(cfg.layout, 4, torch.Generator().manual_seed(0), dtype=torch.float64)
    grads = []
    for forward in (model.note_forward, model.direct):
        model.zero_grad()
        ((forward(batch.X) - batch.Y) ** 2).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_the_hooked_twin_has_transformer_lens_hook_names_and_shapes():
    cfg = ModelConfig(Layout.plain(3), arch="standard", n_heads=2, d_model=8, d_head=3,
                      layernorm=True, d_mlp=4)
    model = HookedStandardTransformer(cfg, seed=0)
    batch = sample_batch(cfg.layout, 5, torch.Generator().manual_seed(0))
    out, cache = model.run_with_cache(batch.X)
    B, T, H, m = 5, cfg.T, 2, 8
    shapes = {"hook_embed": (B, T, m), "hook_pos_embed": (B, T, m), "unembed.hook_readout": (B, 3, m),
              "blocks.1.hook_resid_pre": (B, T, m), "blocks.0.attn.hook_q": (B, T, H, 3),
              "blocks.0.attn.hook_k": (B, T, H, 3), "blocks.0.attn.hook_v": (B, T, H, 3),
              "blocks.0.attn.hook_z": (B, T, H, 3), "blocks.0.attn.hook_attn_scores": (B, H, T, T),
              "blocks.0.attn.hook_pattern": (B, H, T, T), "blocks.0.hook_attn_out": (B, T, m),
              "blocks.0.hook_resid_mid": (B, T, m), "blocks.0.mlp.hook_pre": (B, T, 4),
              "blocks.0.mlp.hook_post": (B, T, 4), "blocks.0.hook_mlp_out": (B, T, m),
              "blocks.0.hook_resid_post": (B, T, m), "blocks.0.ln1.hook_scale": (B, T, 1)}
    for name, shape in shapes.items():
        assert tuple(cache[name].shape) == shape, name
    assert torch.allclose(cache["pattern", 0].sum(-1), torch.ones(B, H, T))
    # the cache's pieces add up: resid_post = resid_mid + mlp_out = resid_pre + attn_out + mlp_out
    c = cache
    torch.testing.assert_close(c["blocks.0.hook_resid_post"], c["blocks.0.hook_resid_pre"]
                               + c["blocks.0.hook_attn_out"] + c["blocks.0.hook_mlp_out"])
    torch.testing.assert_close(out, model(batch.X))
    # a hook edits the stream: zeroing every head's output leaves embeddings alone
    hooks = [(f"blocks.{i}.hook_attn_out", lambda t, hook: t * 0) for i in range(2)]
    patched = model.run_with_hooks(batch.X, fwd_hooks=hooks)
    assert not torch.allclose(patched, out)


def test_the_weights_are_transformer_lens_shaped_and_the_init_is_the_configured_one():
    cfg = ModelConfig(Layout.plain(4), arch="standard", n_heads=2, d_model=16, d_head=8)
    model = HookedStandardTransformer(cfg, seed=0)
    assert model.W_E.shape == (4, 16) and model.W_pos.shape == (cfg.T, 16)
    assert model.W_Q.shape == (2, 2, 16, 8) and model.W_O.shape == (2, 2, 8, 16)
    assert model.W_U.shape == (16, 4)
    assert cfg.n_params == sum(p.numel() for p in model.parameters())
    assert abs(model.W_Q.std().item() - 0.1) < 0.02  # the standard default init_scale
    plain = StandardTransformer(cfg, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), model.parameters()))
    ln = ModelConfig(Layout.plain(4), arch="standard", layernorm=True, d_mlp=8, init="zeros")
    weights = dict(StandardTransformer(ln, seed=0).named_parameters())
    assert cfg.n_params and ln.n_params == sum(p.numel() for p in weights.values())
    assert torch.equal(weights["blocks.0.ln1.w"], torch.ones(64))
    assert not weights["blocks.0.attn.W_Q"].any() and not weights["blocks.0.mlp.b_in"].any()


def test_the_config_round_trips_and_old_configs_load_as_disentangled():
    cfg = ModelConfig(Layout.scratch(4, 4), arch="standard", n_heads=(1, 2), d_model=32,
                      layernorm=True, d_mlp=16, readout="S")
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    assert cfg.d_head == 16 and cfg.init_scale == 0.1  # d_model // the most heads; the default
    old = {"layout": Layout.plain(4).to_dict(), "n_layers": 2, "n_heads": 1,
           "attention_dir": "causal", "readout": "P", "dtype": "float32", "init": "normal",
           "init_scale": 0.01}
    loaded = ModelConfig.from_dict(old)
    assert loaded.arch == "disentangled" and loaded == ModelConfig(Layout.plain(4))
    assert json.loads(loaded.to_json()) == old  # a disentangled config is written as before


@pytest.mark.parametrize("kw,words", [
    ({"arch": "gpt"}, "arch must be one of"),
    ({"d_model": 8}, "d_model belong to arch='standard'"),
    ({"arch": "standard", "d_model": 0}, "d_model must be an integer >= 1"),
    ({"arch": "standard", "d_head": 0}, "d_head must be an integer >= 1"),
    ({"arch": "standard", "layernorm": "yes"}, "layernorm must be True or False"),
    ({"arch": "standard", "d_mlp": -1}, "d_mlp must be an integer >= 1"),
])
def test_bad_architecture_fields_are_refused_by_name(kw, words):
    with pytest.raises(ValueError, match=words):
        ModelConfig(Layout.plain(3), **kw)
    with pytest.raises(ValueError, match="cfg.arch must be 'standard'"):
        StandardTransformer(ModelConfig(Layout.plain(3)))


def test_the_hooked_standard_model_returns_by_return_type_the_note_loss():
    cfg = ModelConfig(Layout.plain(3), arch="standard", n_heads=2, d_model=6, d_head=2,
                      dtype="float64", init_scale=0.7)
    hooked = HookedStandardTransformer(cfg, seed=2).requires_grad_(False)
    batch = sample_batch(cfg.layout, 4, torch.Generator().manual_seed(0), dtype=torch.float64)
    out = hooked(batch.X).detach().numpy()
    expected = ((out - batch.Y.numpy()) ** 2).sum(-1).mean()  # squared error over columns, averaged
    assert float(hooked(batch.X, return_type="loss")) == pytest.approx(expected, rel=1e-12)
    both_out, both_loss = hooked(batch.X, None, "both")
    np.testing.assert_array_equal(both_out.detach().numpy(), out)
    assert float(both_loss) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match=r"^return_type must be one of \('output', 'loss', 'both'\)"):
        hooked(batch.X, return_type="logits")
