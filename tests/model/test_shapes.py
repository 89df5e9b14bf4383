"""The shape-typed signatures (jaxtyping) say what the code does: checked at run time here.

The package's public functions validate their own input with ValueErrors that name the argument,
so the checker is applied to the shape-annotated functions only, not installed package-wide.
"""

import pytest
import torch
from beartype import beartype
from jaxtyping import TypeCheckError, jaxtyped

from invperm_interp import Batch, HookedDisentangledTransformer, Layout, ModelConfig, sample_batch
from invperm_interp.analysis.gauge import gauge_fix
from invperm_interp.model.disentangled import readout_forward


def checked(fn):
    return jaxtyped(typechecker=beartype)(fn)


@pytest.mark.parametrize("layout, heads", [(Layout.plain(3), (1, 1)), (Layout.scratch(2, 3), (2, 1))])
def test_annotated_shapes_hold_on_real_calls(layout, heads):
    cfg = ModelConfig(layout, n_layers=2, n_heads=list(heads), init_scale=0.3,
                      readout="P")
    model = HookedDisentangledTransformer(cfg, seed=0)
    batch = sample_batch(layout, 4)
    checked(Batch)(**{f: getattr(batch, f) for f in ("layout", "X", "P", "Y", "Y_P", "perm")})
    h = checked(type(model).embed)(model, batch.X)
    for block in model.blocks:
        checked(type(block.attn).forward)(block.attn, h)
        h = checked(type(block).forward)(block, h)
    checked(type(model.unembed).forward)(model.unembed, h)
    checked(type(model).forward)(model, batch.X)
    checked(readout_forward)(model, batch.X)
    checked(gauge_fix)(model.blocks[1].attn.A.detach(), model.stream, 1)


def test_a_wrong_shape_is_caught_by_the_annotation():
    model = HookedDisentangledTransformer(ModelConfig(Layout.plain(3)), seed=0)
    with pytest.raises(TypeCheckError):
        checked(type(model).embed)(model, torch.zeros(4, 6))  # no batch axis
    with pytest.raises(TypeCheckError):
        checked(gauge_fix)(torch.zeros(18, 17), model.stream, 1)  # not square
    batch = sample_batch(Layout.plain(3), 2)
    with pytest.raises(TypeCheckError):  # perm must be (batch, d) like P's rows
        checked(Batch)(batch.layout, batch.X, batch.P, batch.Y, batch.Y_P, batch.perm[:, :2])
