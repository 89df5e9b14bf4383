"""The Lemma 1 certificate by one backward pass (``floors.dependency_map``) against a dense
``jacrev``."""

import pytest
import torch

from invperm_interp import Layout, ModelConfig
from invperm_interp.maths.floors import dependency_map
from invperm_interp.model.hooked import HookedDisentangledTransformer
from invperm_interp.task import sample_batch

CONFIGS = [
    ModelConfig(Layout.plain(4), attention_dir="bidirectional", readout="P", n_heads=2, n_layers=3,
                dtype="float64"),
    ModelConfig(Layout.scratch(4), attention_dir="causal", readout="S", n_heads=(1, 2), n_layers=2,
                dtype="float64"),
]



@pytest.mark.parametrize("cfg", CONFIGS, ids=["bidirectional-3x2", "causal-scratch"])
def test_dependency_map_equals_the_dense_jacobian(cfg):
    model = HookedDisentangledTransformer(cfg, seed=0)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.A.normal_(generator=torch.Generator().manual_seed(2))
    X = sample_batch(cfg.layout, 3, torch.Generator().manual_seed(3), dtype=torch.float64).X
    deps = dependency_map(model, X)
    jac = torch.func.jacrev(lambda x: model(x).sum(0))(X)  # (d, d, B, T, d): the dense check
    dense = jac.pow(2).sum(dim=(1, 4)).sqrt().amax(dim=1)
    torch.testing.assert_close(deps.norms, dense, rtol=1e-10, atol=1e-12)
    later = torch.arange(cfg.T)[None, :] > torch.tensor(deps.positions)[:, None]
    assert deps.causal_ok == cfg.causal == bool((dense[later] == 0).all())
