"""The gauge of A: invisible to attention, and projected out exactly."""

import pytest
import torch

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch
from invperm_interp.analysis.gauge import gauge_fix, key_gauge_basis, random_gauge


def model_for(layout, heads, attention_dir):
    cfg = ModelConfig(layout, n_layers=len(heads), n_heads=list(heads),
                      attention_dir=attention_dir, dtype="float64", init_scale=0.3)
    return HookedDisentangledTransformer(cfg, seed=0)


CASES = [
    (Layout.plain(3), (1, 1), "bidirectional"),
    (Layout.scratch(3, 2, scratch=[1.0, 0, 1]), (2, 1), "causal"),
    (Layout.of(2, "0", "P", "Y", "0"), (1, 1, 1), "causal"),
]


@pytest.mark.parametrize("layout, heads, attention_dir", CASES)
def test_key_gauge_directions_are_constant_on_every_row(layout, heads, attention_dir):
    model = model_for(layout, heads, attention_dir)
    _, cache = model.run_with_cache(sample_batch(layout, 4, dtype=torch.float64).X)
    for layer in range(len(heads) + 1):
        h = cache["resid_pre", layer] if layer < len(heads) else cache["resid_post", layer - 1]
        ones = h @ key_gauge_basis(model.stream, layer)
        assert torch.allclose(ones, torch.ones_like(ones), atol=1e-12)


@pytest.mark.parametrize("layout, heads, attention_dir", CASES)
def test_gauge_changes_no_pattern_and_gauge_fix_removes_it(layout, heads, attention_dir):
    model = model_for(layout, heads, attention_dir)
    X = sample_batch(layout, 4, torch.Generator().manual_seed(1), dtype=torch.float64).X
    out, cache = model.run_with_cache(X)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            A = block.attn.A
            fixed = gauge_fix(A.clone(), model.stream, layer)
            # idempotent, and unchanged by adding pure gauge
            assert torch.allclose(gauge_fix(fixed, model.stream, layer), fixed, atol=1e-12)
            noise = torch.stack([random_gauge(model.stream, layer, gen, scale=5.0)
                                 for _ in range(A.shape[0])])
            assert torch.allclose(gauge_fix(A + noise, model.stream, layer), fixed, atol=1e-10)
            assert noise.abs().max() > 1 and not torch.allclose(fixed, A)  # both are real changes
            A.add_(noise)
    out2, cache2 = model.run_with_cache(X)
    for layer in range(len(heads)):
        assert torch.allclose(cache2["pattern", layer], cache["pattern", layer], atol=1e-10)
    assert torch.allclose(out2, out, atol=1e-10)
