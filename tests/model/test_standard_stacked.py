"""The hooked standard model's stacked weights ``W_Q`` … ``W_O`` ``(L, H, …)``."""

import pytest

from invperm_interp import Layout, ModelConfig
from invperm_interp.model.standard_hooked import HookedStandardTransformer


def test_stacked_weights_with_different_heads_per_layer_are_refused_in_one_line():
    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=8, d_head=2, n_heads=(1, 2))
    model = HookedStandardTransformer(cfg, seed=0)
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        with pytest.raises(ValueError, match=rf"same number of heads.*blocks\[l\]\.attn\.{name}") as err:
            getattr(model, name)
        assert "\n" not in str(err.value)
    assert model.blocks[1].attn.W_Q.shape == (2, 8, 2)  # what to read instead
    same = HookedStandardTransformer(ModelConfig(Layout.plain(3), arch="standard", d_model=8, d_head=2,
                                                 n_heads=(2, 2)), seed=0)
    assert same.W_Q.shape == (2, 2, 8, 2)
