"""A user's native TransformerLens model imported into the standard model: TransformerLens's own
forward on random weights is the reference."""

import pytest
import torch

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.model import tokens
from invperm_interp.model.note_map import to_disentangled
from invperm_interp.model.standard import StandardTransformer
from invperm_interp.model.standard_export import standard_to_transformer_lens
from invperm_interp.model.standard_import import standard_from_transformer_lens


def _native(layout: Layout, d_vocab: int, **kw):
    """A native bridge on random weights (``init_weights``), its biases zeroed."""
    from transformer_lens import TransformerBridge, TransformerBridgeConfig

    settings = dict(d_model=8, d_head=3, n_heads=2, n_layers=2, n_ctx=layout.T + 2, d_vocab=d_vocab,
                    d_vocab_out=layout.d, attn_only=True, act_fn="relu", normalization_type=None,
                    attention_dir="causal", positional_embedding_type="standard", init_weights=True,
                    architecture="TransformerLensNative", model_name="user-model", device="cpu",
                    dtype=torch.float32, seed=0) | kw
    bridge = TransformerBridge.boot_native(TransformerBridgeConfig(**settings), dtype=settings["dtype"])
    with torch.no_grad():
        for name, p in bridge.original_model.named_parameters():
            p.copy_(torch.zeros_like(p) if name.endswith("bias") else 0.5 * torch.randn_like(p))
    return bridge.eval()


def _close(a, b) -> bool:
    tol = 1e-10 if b.dtype == torch.float64 else 1e-5
    return (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("layout,readout", [(Layout.plain(3), "P"), (Layout.scratch(3), "S")])
def test_the_import_computes_the_native_models_function_on_token_ids(dtype, attention_dir, layout,
                                                                     readout):
    bridge = _native(layout, tokens.vocabulary_size(layout), attention_dir=attention_dir, dtype=dtype)
    torch.manual_seed(0)
    W_E = torch.randn(layout.d, 8, dtype=dtype)  # an embedding linear in the rows, as the export's
    with torch.no_grad():
        bridge.original_model.tok_embed.weight.copy_(tokens.vocabulary(layout).to(dtype) @ W_E)
    model = standard_from_transformer_lens(bridge, layout, readout)
    assert model.embed.W_E.dtype == dtype
    batch = sample_batch(layout, 16, torch.Generator().manual_seed(0), dtype=dtype)
    rows = layout.rows(readout)
    with torch.no_grad():
        theirs = bridge(tokens.to_tokens(layout, batch.X))[:, rows]
        assert model.cfg.attention_dir == attention_dir
        assert _close(model.direct(batch.X), theirs)
        assert _close(model(batch.X), theirs)
        assert _close(to_disentangled(model)(batch.X), theirs)  # the map reads it exactly


def test_the_import_takes_an_embedding_of_d_rows_and_a_longer_context():
    layout = Layout.plain(4)
    bridge = _native(layout, layout.d, attention_dir="bidirectional")
    model = standard_from_transformer_lens(bridge, layout)
    batch = sample_batch(layout, 16, torch.Generator().manual_seed(1))
    with torch.no_grad():
        embedded = batch.X @ bridge.original_model.tok_embed.weight  # row x embeds as x W_E
        assert _close(model.direct(batch.X), bridge(embedded)[:, layout.rows("P")])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("norm,mlp", [("LN", None), (None, 5), ("LN", 5), ("LNPre", 5)])
def test_the_import_takes_layernorm_and_relu_mlps(dtype, attention_dir, norm, mlp):
    """Every LayerNorm and MLP parameter random (biases too): TransformerLens's forward on token
    ids is the reference; the map to the note's blocks is refused for the imported model."""
    layout = Layout.scratch(3)
    kw = dict(normalization_type=norm, attention_dir=attention_dir, dtype=dtype)
    if mlp:
        kw |= dict(attn_only=False, d_mlp=mlp)
    bridge = _native(layout, tokens.vocabulary_size(layout), **kw)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in bridge.original_model.named_parameters():
            if "ln" in name or "mlp" in name:  # LayerNorm and MLP weights and biases
                p.copy_((1.0 if name.endswith("weight") and "ln" in name else 0.0)
                        + 0.5 * torch.randn_like(p))
        bridge.original_model.tok_embed.weight.copy_(
            tokens.vocabulary(layout).to(dtype) @ torch.randn(layout.d, 8, dtype=dtype))
    model = standard_from_transformer_lens(bridge, layout, "S")
    assert (model.cfg.layernorm, model.cfg.d_mlp) == (norm is not None, mlp)
    batch = sample_batch(layout, 16, torch.Generator().manual_seed(0), dtype=dtype)
    with torch.no_grad():
        theirs = bridge(tokens.to_tokens(layout, batch.X))[:, layout.rows("S")]
        assert _close(model(batch.X), theirs)
    with pytest.raises(ValueError, match="exact only without LayerNorm" if norm else "MLP"):
        to_disentangled(model)


@pytest.mark.parametrize("layernorm,d_mlp", [(False, None), (True, 4)])
@pytest.mark.parametrize("heads", [(1, 2), (1, 3), (2, 2)])
def test_an_exported_model_comes_back_with_its_weights_and_heads(layernorm, d_mlp, heads):
    """The export pads a layer with fewer heads with heads of every weight 0; the import drops them."""
    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=6, d_head=2, n_heads=heads,
                      attention_dir="bidirectional", init_scale=0.5, layernorm=layernorm, d_mlp=d_mlp)
    model = StandardTransformer(cfg, seed=3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.rsplit(".", 1)[-1] in ("w", "b", "b_in", "b_out"):  # not their init's 1 and 0
                p.add_(0.3 * torch.randn_like(p))
    back = standard_from_transformer_lens(standard_to_transformer_lens(model).tl_model, cfg.layout)
    assert (back.cfg.heads, back.cfg.d_model, back.cfg.attention_dir) == (heads, 6, "bidirectional")
    for name, p in model.state_dict().items():
        assert (back.state_dict()[name] - p).abs().max() <= 1e-6 * max(1.0, p.abs().max().item()), name


@pytest.mark.parametrize("kw,change,message", [
    ({"attn_only": False, "d_mlp": 4, "act_fn": "gelu"}, None, "act_fn='gelu'"),
    ({"attn_only": False, "d_mlp": 4, "gated_mlp": True}, None, "gated_mlp=True"),
    ({"normalization_type": "RMS"}, None, "has no RMSNorm"),
    ({"normalization_type": "LN", "final_rms": True}, None, "final_rms=True"),
    ({"normalization_type": "LN", "eps": 1e-6}, None, "eps = 1e-05"),
    ({"positional_embedding_type": "rotary", "rotary_dim": 2}, None, "positional"),
    ({"d_vocab_out": 4}, None, "output width"),
    ({"n_ctx": 5}, None, "n_ctx"),
    ({"normalization_type": "LN"},
     ("layers.1._original_component.attn._original_component.v._original_component.bias", 0.1),
     "blocks.1.attn.b_V is not zero in a model with LayerNorm"),
    ({}, ("tok_embed._original_component.weight", None), "not linear"),
])
def test_what_the_import_cannot_take_is_one_line(kw, change, message):
    layout = Layout.plain(3)
    bridge = _native(layout, tokens.vocabulary_size(layout), **kw)
    if change is not None:
        name, value = change
        p = dict(bridge.original_model.named_parameters())[name]
        with torch.no_grad():
            p.fill_(value) if value is not None else p.copy_(torch.randn_like(p))
    with pytest.raises(ValueError, match=message) as err:
        standard_from_transformer_lens(bridge, layout)
    assert "\n" not in str(err.value)


def test_the_import_refuses_what_is_not_a_native_bridge():
    with pytest.raises(ValueError, match="must be a native TransformerBridge"):
        standard_from_transformer_lens(torch.nn.Linear(2, 2), Layout.plain(3))
    with pytest.raises(ValueError, match="layout must be a Layout"):
        standard_from_transformer_lens(torch.nn.Linear(2, 2), 3)


def _biased(bridge, which: str = "qkvo", scale: float = 0.5, seed: int = 5):
    """``bridge`` with every attention bias named in ``which`` (of ``q``, ``k``, ``v``, ``o``) drawn
    from ``N(0, scale²)``; returns it."""
    g = torch.Generator().manual_seed(seed)
    native = bridge.original_model
    dtype = native.head.weight.dtype
    with torch.no_grad():
        for layer in native.layers:
            for key in which:
                bias = getattr(layer.attn, key).bias
                bias.copy_(scale * torch.randn(bias.shape, generator=g, dtype=dtype))
    return bridge


def _user_model(layout: Layout, dtype=torch.float64, **kw):
    """A native bridge on random weights whose token embedding is linear in the rows (biases 0)."""
    bridge = _native(layout, tokens.vocabulary_size(layout), dtype=dtype, **kw)
    W_E = torch.randn(layout.d, 8, generator=torch.Generator().manual_seed(7), dtype=dtype)
    with torch.no_grad():
        bridge.original_model.tok_embed.weight.copy_(tokens.vocabulary(layout).to(dtype) @ W_E)
    return bridge


def _error(a, b) -> float:
    """The largest ``|a - b|`` relative to ``b``'s scale (at least 1)."""
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


@pytest.mark.parametrize("n_heads", [1, 2])
@pytest.mark.parametrize("n_layers", [1, 2])
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("layout,readout", [(Layout.plain(3), "P"), (Layout.scratch(3), "S")])
def test_attention_biases_fold_exactly_into_the_import_and_the_map(layout, readout, attention_dir,
                                                                   n_layers, n_heads):
    """Random b_Q, b_K, b_V, b_O (σ 0.5): the imported model, its forward through the map and
    ``to_disentangled`` compute TransformerLens's forward to 1e-10 of its scale (float64)."""
    bridge = _biased(_user_model(layout, attention_dir=attention_dir, n_layers=n_layers,
                                 n_heads=n_heads))
    model = standard_from_transformer_lens(bridge, layout, readout)
    assert (model.cfg.d_model, model.cfg.heads) == (8 + 1, (n_heads,) * n_layers)  # one coordinate more
    X = sample_batch(layout, 64, torch.Generator().manual_seed(0), dtype=torch.float64).X
    with torch.no_grad():
        theirs = bridge(tokens.to_tokens(layout, X))[:, layout.rows(readout)]
        for ours in (model.direct(X), model(X), to_disentangled(model)(X)):
            assert _error(ours, theirs) <= 1e-10
        for layer in bridge.original_model.layers:  # the biases matter: without them the output moves
            for key in "qvo":
                getattr(layer.attn, key).bias.zero_()
        assert _error(bridge(tokens.to_tokens(layout, X))[:, layout.rows(readout)], theirs) > 1e-2


def test_biases_fold_in_float32_and_with_relu_mlps():
    """float32 (1e-5 of the scale); and ReLU MLPs without LayerNorm read the folded coordinate too."""
    layout = Layout.scratch(3)
    for dtype, kw in ((torch.float32, {}), (torch.float64, dict(attn_only=False, d_mlp=5))):
        bridge = _biased(_user_model(layout, dtype=dtype, attention_dir="causal", **kw))
        with torch.no_grad():
            for name, p in bridge.original_model.named_parameters():
                if "mlp" in name:
                    p.copy_(0.5 * torch.randn_like(p))
        model = standard_from_transformer_lens(bridge, layout, "S")
        X = sample_batch(layout, 64, torch.Generator().manual_seed(0), dtype=dtype).X
        with torch.no_grad():
            theirs = bridge(tokens.to_tokens(layout, X))[:, layout.rows("S")]
            assert _error(model(X), theirs) <= (1e-5 if dtype == torch.float32 else 1e-10)


@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("norm", [None, "LN"])
def test_b_K_changes_nothing_so_it_is_dropped(attention_dir, norm):
    """b_K adds q·b_K to every score of a query row, which softmax cancels: TransformerLens's own
    output with and without it agrees to 1e-12, and a model with b_K alone imports unwidened."""
    layout = Layout.plain(3)
    bridge = _user_model(layout, attention_dir=attention_dir, normalization_type=norm)
    ids = tokens.to_tokens(layout, sample_batch(layout, 64, torch.Generator().manual_seed(0),
                                                dtype=torch.float64).X)
    with torch.no_grad():
        without = bridge(ids)
        _biased(bridge, "k", scale=2.0)
        with_b_K = bridge(ids)
        assert bridge.original_model.layers[0].attn.k.bias.abs().max() > 0.5
        assert _error(with_b_K, without) <= 1e-12
        model = standard_from_transformer_lens(bridge, layout)
        assert model.cfg.d_model == 8
        assert _error(model(sample_batch(layout, 64, torch.Generator().manual_seed(0),
                                         dtype=torch.float64).X), with_b_K[:, layout.rows("P")]) <= 1e-10


def test_an_imported_biased_model_exports_to_the_same_function():
    """The folded model (d_model + 1, no biases) exported again computes the user's model's output."""
    layout = Layout.plain(3)
    bridge = _biased(_user_model(layout, attention_dir="bidirectional"))
    model = standard_from_transformer_lens(bridge, layout)
    X = sample_batch(layout, 32, torch.Generator().manual_seed(0), dtype=torch.float64).X
    with torch.no_grad():
        again = standard_to_transformer_lens(model)
        assert _error(again(X), bridge(tokens.to_tokens(layout, X))[:, layout.rows("P")]) <= 1e-10
