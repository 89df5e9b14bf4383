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
def test_an_exported_model_comes_back_with_its_weights(layernorm, d_mlp):
    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=6, d_head=2, n_heads=(1, 2),
                      attention_dir="bidirectional", init_scale=0.5, layernorm=layernorm, d_mlp=d_mlp)
    model = StandardTransformer(cfg, seed=3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.rsplit(".", 1)[-1] in ("w", "b", "b_in", "b_out"):  # not their init's 1 and 0
                p.add_(0.3 * torch.randn_like(p))
    back = standard_from_transformer_lens(standard_to_transformer_lens(model).tl_model, cfg.layout)
    assert back.cfg.attention_dir == "bidirectional"
    for name, p in model.state_dict().items():
        q = back.state_dict()[name]
        if name.endswith(("W_Q", "W_K", "W_V", "W_O")) and q.shape != p.shape:  # (1, …) → (2, …)
            assert q[1:].abs().max() == 0 if name.endswith("W_O") else True
            q = q[: p.shape[0]]
        assert (q - p).abs().max() <= 1e-6 * max(1.0, p.abs().max().item()), name


@pytest.mark.parametrize("kw,change,message", [
    ({"attn_only": False, "d_mlp": 4, "act_fn": "gelu"}, None, "act_fn='gelu'"),
    ({"attn_only": False, "d_mlp": 4, "gated_mlp": True}, None, "gated_mlp=True"),
    ({"normalization_type": "RMS"}, None, "has no RMSNorm"),
    ({"normalization_type": "LN", "final_rms": True}, None, "final_rms=True"),
    ({"normalization_type": "LN", "eps": 1e-6}, None, "eps = 1e-05"),
    ({"positional_embedding_type": "rotary", "rotary_dim": 2}, None, "positional"),
    ({"d_vocab_out": 4}, None, "output width"),
    ({"n_ctx": 5}, None, "n_ctx"),
    ({}, ("layers.1._original_component.attn._original_component.v._original_component.bias", 0.1),
     "blocks.1.attn.b_V is not zero"),
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
