"""The standard model exported to a native TransformerLens model: the same function, its hooks."""

import pytest
import torch

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.model.standard import StandardTransformer
from invperm_interp.model.standard_export import standard_to_transformer_lens


def _model(**kw):
    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=8, d_head=3, init_scale=0.5, **kw)
    model = StandardTransformer(cfg, seed=0)
    with torch.no_grad():  # LayerNorm and MLP biases away from 1 and 0, so their copy is tested
        for name, p in model.named_parameters():
            if name.endswith((".w", ".b", "b_in", "b_out")):
                p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    return model


@pytest.mark.parametrize("kw", [{}, {"layernorm": True}, {"d_mlp": 5},
                                {"layernorm": True, "d_mlp": 5, "n_heads": (1, 2)}])
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
def test_the_export_computes_the_standard_models_function(kw, attention_dir):
    model = _model(attention_dir=attention_dir, **kw)
    export = standard_to_transformer_lens(model)
    batch = sample_batch(model.cfg.layout, 8, torch.Generator().manual_seed(0))
    with torch.no_grad():
        own = model.direct(batch.X)
        tol = 1e-5 * max(1.0, own.abs().max().item())
        assert (export(batch.X) - own).abs().max().item() <= tol
        tokens = export.tl_model(export.to_tokens(batch.X))[:, export.rows]  # the native token path
        assert (tokens - own).abs().max().item() <= tol
        _, cache = export.run_with_cache(batch.X)
    H = max(model.cfg.heads)
    assert cache["blocks.0.attn.hook_pattern"].shape == (8, H, model.cfg.T, model.cfg.T)


def test_the_export_refuses_a_disentangled_model():
    from invperm_interp import HookedDisentangledTransformer

    with pytest.raises(ValueError, match="must be a standard transformer"):
        standard_to_transformer_lens(HookedDisentangledTransformer(ModelConfig(Layout.plain(3))))
