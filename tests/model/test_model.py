"""The hooked model against an independent numpy reference, Lemma 1, and the hook contract."""

import numpy as np
import pytest
import torch
from transformer_lens import ActivationCache

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch


def reference_forward(X, As, W_U, causal, rows):
    """The note's definition, written out with numpy loops (float64).

    X (B, T, d); As[l] (H, D_l, D_l); returns (B, n_rows, d).
    """
    B, T, _ = X.shape
    out = []
    for b in range(B):
        h = np.concatenate([X[b], np.eye(T)], axis=1)  # h^0 = [X, I]
        for A in As:
            heads = []
            for Ak in A:
                scores = h @ Ak @ h.T
                z = np.zeros_like(h)
                for i in range(T):
                    keys = range(i + 1) if causal else range(T)
                    s = np.array([scores[i, j] for j in keys])
                    w = np.exp(s - s.max())
                    w /= w.sum()
                    z[i] = sum(wj * h[j] for wj, j in zip(w, keys))
                heads.append(z)
            h = np.concatenate([h] + heads, axis=1)  # disentangled: concatenate
        out.append(h[rows] @ W_U)
    return np.stack(out)


LAYOUTS = {
    "plain": lambda d: Layout.plain(d),
    "scratch": lambda d: Layout.scratch(d, 2, scratch=[0.5] * d),
    "padded": lambda d: Layout.of(d, "0:1", "P", "Y", "0:2"),
}

CASES = [
    dict(d=2, layout="plain", n_layers=1, n_heads=1, readout="P"),
    dict(d=3, layout="plain", n_layers=2, n_heads=1, readout="Y"),
    dict(d=3, layout="scratch", n_layers=2, n_heads=2, readout="P"),
    dict(d=2, layout="padded", n_layers=3, n_heads=1, readout="Y"),
    dict(d=4, layout="plain", n_layers=2, n_heads=[2, 1], readout="P"),
]


def make_model(case, attention_dir, init_scale=0.3, seed=0):
    cfg = ModelConfig(
        LAYOUTS[case["layout"]](case["d"]),
        n_layers=case["n_layers"],
        n_heads=case["n_heads"],
        attention_dir=attention_dir,
        readout=case["readout"],
        dtype="float64",
        init_scale=init_scale,
    )
    return HookedDisentangledTransformer(cfg, seed=seed)


@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['layout']}-d{c['d']}-L{c['n_layers']}")
def test_forward_matches_reference(case, attention_dir):
    model = make_model(case, attention_dir)
    batch = sample_batch(model.cfg.layout, 3, torch.Generator().manual_seed(1), dtype=torch.float64)
    out = model(batch.X).detach().numpy()
    As = [block.attn.A.detach().numpy() for block in model.blocks]
    rows = model.cfg.layout.rows(case["readout"])
    ref = reference_forward(batch.X.numpy(), As, model.unembed.W_U.detach().numpy(),
                            attention_dir == "causal", rows)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("case", CASES[1:4], ids=lambda c: f"{c['layout']}-d{c['d']}")
def test_lemma1_later_rows_never_reach_earlier_ones(case, attention_dir):
    """Lemma 1: under the causal mask row i of every activation ignores input rows j > i."""
    model = make_model(case, attention_dir, init_scale=1.0)
    layout = model.cfg.layout
    batch = sample_batch(layout, 2, torch.Generator().manual_seed(2), dtype=torch.float64)
    i = layout.T // 2
    X2 = batch.X.clone()
    X2[:, i + 1:] = torch.rand(X2[:, i + 1:].shape, generator=torch.Generator().manual_seed(3),
                               dtype=torch.float64)
    _, c1 = model.run_with_cache(batch.X)
    _, c2 = model.run_with_cache(X2)
    changed = []
    for name in c1.keys():
        if name.endswith(("hook_resid_pre", "hook_resid_post", "hook_z", "hook_embed")):
            same = torch.equal(c1[name][:, : i + 1], c2[name][:, : i + 1])
        elif name.endswith(("hook_pattern", "hook_attn_scores")):
            same = torch.equal(c1[name][:, :, : i + 1], c2[name][:, :, : i + 1])
        else:
            continue
        changed.append(not same)
    if attention_dir == "causal":
        assert not any(changed)
    else:  # without the mask the later rows leak into earlier ones, from layer 1 on
        assert any(changed)


def expected_hook_shapes(cfg, B):
    T, d, D = cfg.T, cfg.d, cfg.widths
    shapes = {"hook_embed": (B, T, d), "hook_pos_embed": (B, T, T),
              "unembed.hook_readout": (B, d, D[-1])}
    for layer, H in enumerate(cfg.heads):
        shapes |= {
            f"blocks.{layer}.hook_resid_pre": (B, T, D[layer]),
            f"blocks.{layer}.attn.hook_q": (B, T, H, D[layer]),
            f"blocks.{layer}.attn.hook_k": (B, T, H, D[layer]),
            f"blocks.{layer}.attn.hook_v": (B, T, H, D[layer]),
            f"blocks.{layer}.attn.hook_attn_scores": (B, H, T, T),
            f"blocks.{layer}.attn.hook_pattern": (B, H, T, T),
            f"blocks.{layer}.attn.hook_z": (B, T, H, D[layer]),
            f"blocks.{layer}.hook_attn_out": (B, T, H * D[layer]),
            f"blocks.{layer}.hook_resid_post": (B, T, D[layer + 1]),
        }
    return shapes


@pytest.mark.parametrize("n_heads", [1, [2, 1, 3]])
def test_every_design_hook_exists_with_its_shape(n_heads):
    cfg = ModelConfig(Layout.scratch(3), n_layers=3, n_heads=n_heads, readout="S")
    model = HookedDisentangledTransformer(cfg, seed=0)
    out, cache = model.run_with_cache(sample_batch(cfg.layout, 2).X)
    assert isinstance(cache, ActivationCache)
    shapes = expected_hook_shapes(cfg, 2)
    assert set(model.hook_dict) == set(shapes)
    assert {name: tuple(cache[name].shape) for name in shapes} == shapes
    assert out.shape == (2, 3, 3)
    # TransformerLens shorthand indexing
    assert torch.equal(cache["pattern", 0], cache["blocks.0.attn.hook_pattern"])
    assert torch.equal(cache["resid_pre", 1], cache["blocks.1.hook_resid_pre"])
    assert torch.equal(cache["attn_scores", -1], cache["blocks.2.attn.hook_attn_scores"])
    # the read-out stream is h^L and the pattern rows are distributions
    assert torch.equal(cache["blocks.2.hook_resid_post"][:, cfg.layout.rows("S")],
                       cache["unembed.hook_readout"])
    assert torch.allclose(cache["pattern", 1].sum(-1), torch.ones(()))


@pytest.mark.parametrize("n_heads", [1, 2])
def test_queries_keys_values_and_attn_out_against_einsum(n_heads):
    """hook_q is h A_k, hook_k and hook_v are h for every head, the scores are q·k, z is the
    pattern's average of v, and hook_attn_out is what resid_post appends (a plain einsum reference)."""
    cfg = ModelConfig(Layout.plain(3), n_heads=n_heads, attention_dir="causal", dtype="float64",
                      init_scale=0.5)
    model = HookedDisentangledTransformer(cfg, seed=2)
    _, cache = model.run_with_cache(sample_batch(cfg.layout, 3, torch.Generator().manual_seed(1),
                                                 dtype=torch.float64).X)
    for layer in range(cfg.n_layers):
        h, A = cache["resid_pre", layer], model.blocks[layer].attn.A
        q, k, v = cache["q", layer], cache["k", layer], cache["v", layer]
        torch.testing.assert_close(q, torch.einsum("btd,hde->bthe", h, A), rtol=1e-12, atol=1e-12)
        for head in range(n_heads):
            assert torch.equal(k[:, :, head], h) and torch.equal(v[:, :, head], h)
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k)
        mask = torch.ones(cfg.T, cfg.T, dtype=torch.bool).triu(1)
        torch.testing.assert_close(cache["attn_scores", layer], scores.masked_fill(mask, -torch.inf))
        z = torch.einsum("bhqk,bkhe->bqhe", cache["pattern", layer], v)
        torch.testing.assert_close(cache["z", layer], z, rtol=1e-12, atol=1e-12)
        D = cfg.widths[layer]
        assert torch.equal(cache["attn_out", layer], cache["z", layer].flatten(2))
        assert torch.equal(cache["resid_post", layer][..., D:], cache["attn_out", layer])


def test_keys_and_values_patch_apart():
    """Zeroed keys give uniform attention over the same values; zeroed values give z = 0 with the
    same pattern; an in-place edit of the keys reaches neither the values nor the stream."""
    cfg = ModelConfig(Layout.plain(3), attention_dir="bidirectional", init_scale=0.5)
    model = HookedDisentangledTransformer(cfg, seed=0)
    X = sample_batch(cfg.layout, 2, torch.Generator().manual_seed(0)).X
    _, clean = model.run_with_cache(X)

    def zero_in_place(act, hook):
        act.zero_()

    with model.hooks(fwd_hooks=[("blocks.1.attn.hook_k", zero_in_place)]):
        _, keyless = model.run_with_cache(X)
    uniform = torch.full_like(keyless["pattern", 1], 1 / cfg.T)
    torch.testing.assert_close(keyless["pattern", 1], uniform)
    assert torch.equal(keyless["v", 1], clean["v", 1])
    assert torch.equal(keyless["resid_pre", 1], clean["resid_pre", 1])
    torch.testing.assert_close(keyless["z", 1], clean["v", 1].mean(1, keepdim=True).expand_as(
        clean["z", 1]))
    with model.hooks(fwd_hooks=[("blocks.1.attn.hook_v", _zero)]):
        _, valueless = model.run_with_cache(X)
    assert torch.equal(valueless["pattern", 1], clean["pattern", 1])
    assert not valueless["z", 1].any()


def test_run_with_cache_names_filter_and_plain_dict():
    cfg = ModelConfig(Layout.plain(3))
    model = HookedDisentangledTransformer(cfg, seed=0)
    X = sample_batch(cfg.layout, 2).X
    _, cache = model.run_with_cache(X, names_filter=lambda n: n.endswith("hook_pattern"),
                                    return_cache_object=False)
    assert isinstance(cache, dict) and sorted(cache) == ["blocks.0.attn.hook_pattern",
                                                         "blocks.1.attn.hook_pattern"]


def _zero(act, hook):
    return torch.zeros_like(act)


def test_zero_ablation_hook_changes_output_and_is_removed():
    cfg = ModelConfig(Layout.plain(4), attention_dir="bidirectional", init_scale=0.5)
    model = HookedDisentangledTransformer(cfg, seed=0)
    X = sample_batch(cfg.layout, 2, torch.Generator().manual_seed(0)).X
    clean = model(X)
    ablated = model.run_with_hooks(X, fwd_hooks=[("blocks.0.hook_resid_post", _zero)])
    assert not torch.allclose(clean, ablated)
    assert torch.equal(model(X), clean)  # hook gone after run_with_hooks
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_post", _zero)]):
        assert torch.equal(model(X), ablated)
    assert torch.equal(model(X), clean)


def test_hooks_removed_when_a_hook_raises():
    cfg = ModelConfig(Layout.plain(3))
    model = HookedDisentangledTransformer(cfg, seed=0)
    X = sample_batch(cfg.layout, 2).X
    clean = model(X)

    def boom(act, hook):
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        model.run_with_hooks(X, fwd_hooks=[("blocks.0.attn.hook_pattern", boom)])
    assert all(not hp.fwd_hooks for hp in model.hook_points())
    assert torch.equal(model(X), clean)


def test_widths_grow_by_concatenation():
    cfg = ModelConfig(Layout.plain(10), n_layers=2)
    model = HookedDisentangledTransformer(cfg)
    assert cfg.widths == (30, 60, 120)
    assert model.blocks[1].attn.A.shape == (1, 60, 60)
    assert model.unembed.W_U.shape == (120, 10)
    heads = ModelConfig(Layout.plain(2), n_layers=2, n_heads=[2, 3])
    assert heads.widths == (6, 18, 72)


@pytest.mark.parametrize("hooked", [True, False])
def test_residual_streams_stop_at_last_and_refuse_a_bad_one(hooked):
    """``last=k`` is the first ``k + 1`` streams of the whole list (the later layers are not
    run: a hook on them never fires), and a ``last`` outside ``[0, L]`` names the argument."""
    from invperm_interp.model.disentangled import DisentangledTransformer

    cfg = ModelConfig(Layout.scratch(3), n_layers=3, n_heads=[2, 1, 1], attention_dir="causal",
                      readout="S", dtype="float64", init_scale=0.5)
    model = (HookedDisentangledTransformer if hooked else DisentangledTransformer)(cfg, seed=1)
    X = sample_batch(cfg.layout, 4, torch.Generator().manual_seed(0), dtype=torch.float64).X
    whole = model.residual_streams(X)
    assert len(whole) == 4
    for last in range(4):
        streams = model.residual_streams(X, last=last)
        assert len(streams) == last + 1
        for a, b in zip(streams, whole):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    if hooked:
        fired = []
        with model.hooks(fwd_hooks=[("blocks.2.hook_resid_post", lambda t, hook: fired.append(1))]):
            model.residual_streams(X, last=2)
        assert not fired
    for bad in (-1, 4, 1.0, True):
        with pytest.raises(ValueError, match=r"last must be an integer in \[0, 3\]"):
            model.residual_streams(X, last=bad)


def test_zero_init_predicts_zero_and_seeded_init_is_reproducible():
    cfg = ModelConfig(Layout.plain(3), init="zeros")
    X = sample_batch(cfg.layout, 2).X
    assert torch.equal(HookedDisentangledTransformer(cfg)(X), torch.zeros(2, 3, 3))
    cfg = ModelConfig(Layout.plain(3))
    a, b, c = (HookedDisentangledTransformer(cfg, seed=s) for s in (1, 1, 2))
    assert torch.equal(a.blocks[0].attn.A, b.blocks[0].attn.A)
    assert not torch.equal(a.blocks[0].attn.A, c.blocks[0].attn.A)


def test_config_json_round_trip():
    cfg = ModelConfig(Layout.scratch(4, 3, scratch=[1, 0, 0, 1]), n_layers=3, n_heads=[1, 2, 1],
                      attention_dir="bidirectional", readout="P", dtype="float64",
                      init="zeros")
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    layout = Layout.of(5, "0", "P", "Y", "0")
    assert ModelConfig.from_json(ModelConfig(layout).to_json()).layout == layout


@pytest.mark.parametrize("kwargs, match", [
    (dict(attention_dir="sideways"), "attention_dir"),
    (dict(readout="Q"), "readout"),
    (dict(n_layers=0), "n_layers"),
    (dict(n_heads=[1]), "n_heads"),
    (dict(n_heads=0), "n_heads"),
    (dict(dtype="float16"), "dtype"),
    (dict(init="xavier"), "init"),
])
def test_bad_config_raises_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(Layout.plain(3), **kwargs)


def test_readout_segment_must_have_d_rows():
    with pytest.raises(ValueError, match="readout segment 'S' must have d=3 rows"):
        ModelConfig(Layout.scratch(3, 2), readout="S")


@pytest.mark.parametrize("X, match", [
    (torch.zeros(2, 7, 3), r"X must have shape \(B, 6, 3\)"),  # wrong T: layout disagrees
    (torch.zeros(2, 6, 4), r"X must have shape \(B, 6, 3\)"),  # wrong d
    (torch.zeros(6, 3), r"X must have shape"),
    (torch.zeros(2, 6, 3, dtype=torch.long), "floating-point"),
    (torch.full((2, 6, 3), float("nan")), "finite"),
    (torch.full((2, 6, 3), float("inf")), "finite"),
    (np.zeros((2, 6, 3)), "torch.Tensor"),
])
def test_bad_model_input_raises(X, match):
    model = HookedDisentangledTransformer(ModelConfig(Layout.plain(3)))
    with pytest.raises(ValueError, match=match):
        model(X)


def test_finite_check_is_exact_when_the_sum_overflows():
    """The cheap sum check must neither reject a huge finite X nor miss +inf/-inf that cancel."""
    model = HookedDisentangledTransformer(ModelConfig(Layout.plain(3)))
    huge = torch.full((2, 6, 3), 3e38)  # finite, but its sum overflows to inf
    assert model(huge).shape == (2, 3, 3)
    huge[0, 0, 0], huge[1, 0, 0] = float("inf"), float("-inf")
    with pytest.raises(ValueError, match="finite"):
        model(huge)
