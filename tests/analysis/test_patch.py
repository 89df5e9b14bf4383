"""Activation patching localises a construction's mechanism to the blocks it uses."""

import json
import math

import pytest
import torch

from invperm_interp import sample_batch
from invperm_interp.analysis import (
    LabelledTensor,
    Sites,
    mse_to,
    patch,
    patch_block_positions,
    patch_blocks,
    patch_positions,
)
from invperm_interp.maths import constructions as C
from invperm_interp.task import make_input

F64 = torch.float64

# Which blocks of h^0 and h^1 restore the clean output when patched in, per construction, when the
# corrupted input changes P (same Y_P) or Y_P (same P). Every other block has no effect at all.
LOCALISED = [
    ("theorem2", "P", {0: {"x"}, 1: {"L1.pos.P"}}),  # the P row of e_i, found in layer 1
    ("theorem2", "Y", {0: {"x"}, 1: {"x"}}),  # the Y_P rows' content, fetched in layer 2
    ("two_block", "P", {0: {"x"}, 1: {"L1.x"}}),  # the Y_P rows' fetched P rows
    ("two_block", "Y", {0: {"x"}, 1: {"x"}}),
    ("appendix_b", "P", {0: {"x"}, 1: {"x"}}),  # layer 2 looks up P rows by content
    ("appendix_b", "Y", {0: {"x"}, 1: {"L1.x"}}),  # the Y_P rows copied onto the P rows
    ("theorem3", "P", {0: {"x"}, 1: {"L1.pos.P"}}),
    ("theorem3", "Y", {0: {"x"}, 1: {"x"}}),
    ("theorem3_two_block", "P", {0: {"x"}, 1: {"L1.x"}}),
    ("theorem3_two_block", "Y", {0: {"x"}, 1: {"x"}}),
]


def clean_and_corrupted(model, corrupt: str, n: int = 32):
    generator = torch.Generator().manual_seed(0)
    clean = sample_batch(model.cfg.layout, n, generator, dtype=F64)
    other = sample_batch(model.cfg.layout, n, generator, dtype=F64)
    if corrupt == "P":
        corrupted = make_input(model.cfg.layout, other.P, clean.Y_P)
    else:
        corrupted = make_input(model.cfg.layout, clean.P, other.Y_P)
    return clean, corrupted


@pytest.mark.parametrize("name, corrupt, expected", LOCALISED)
def test_patching_localises_the_effect_to_the_blocks_the_construction_uses(name, corrupt, expected):
    model = C.build(name, 4)
    clean, corrupted = clean_and_corrupted(model, corrupt)
    result = patch_blocks(model, clean.X, corrupted.X, mse_to(clean.Y), normalize=True)
    assert result.dims == ("layer", "block") and result.attrs["corrupted"] > 0.5
    for layer in (0, 1):
        row = dict(zip(result.labels["block"], result.values[layer].tolist()))
        effect = {block for block, v in row.items() if v == v and abs(v) > 1e-6}
        assert effect == expected[layer], (layer, row)
        for block in effect:
            assert row[block] == pytest.approx(1.0, abs=1e-6)  # the block alone restores it all


def test_position_patching_finds_the_rows_that_changed():
    model = C.theorem2(4)
    clean, corrupted = clean_and_corrupted(model, "P")
    rows = patch_positions(model, clean.X, corrupted.X, mse_to(clean.Y), normalize=True,
                           sites=Sites(layers=[0]))
    assert rows.dims == ("layer", "pos")
    assert rows.labels["pos"] == ("P[0]", "P[1]", "P[2]", "P[3]", "Y[0]", "Y[1]", "Y[2]", "Y[3]")
    values = rows.values[0]
    assert (values[4:] == 0).all() and (values[:4] > 0.05).all()  # only P rows differ
    fine = patch_block_positions(model, clean.X, corrupted.X, mse_to(clean.Y), normalize=True,
                                 sites=Sites(layers=[0], blocks=["x", "pos.P"]))
    assert fine.values.shape == (1, 2, 8)
    assert torch.allclose(fine.values[0, 0], values) and (fine.values[0, 1] == 0).all()
    assert fine.sel(layer=0, block="x", pos="P[2]") == pytest.approx(float(values[2]))


def test_resid_post_of_a_layer_is_resid_pre_of_the_next():
    model = C.two_block(3)
    clean, corrupted = clean_and_corrupted(model, "P")
    metric = mse_to(clean.Y)
    post = patch_blocks(model, clean.X, corrupted.X, metric, sites=Sites("resid_post", [0]))
    pre = patch_blocks(model, clean.X, corrupted.X, metric, sites=Sites("resid_pre", [1]))
    assert post.labels["block"] == pre.labels["block"] and post.labels["layer"] == (0,)
    assert torch.allclose(post.values, pre.values)


def test_axes_labels_and_json():
    model = C.theorem3(3)
    clean, corrupted = clean_and_corrupted(model, "Y", n=8)
    result = patch(model, clean.X, corrupted.X, mse_to(clean.Y), axes=("block", "layer"),
                   sites=Sites(positions=[3, 4, 5]))  # the Y_P rows, together
    assert result.dims == ("block", "layer") and result.values.shape == (8, 2)
    assert result.labels["block"][4] == "L1.x" and result.labels["layer"] == (0, 1)
    assert math.isnan(result.sel(layer=0, block="L1.x"))  # L1.x is not yet in h^0
    assert result.sel(layer=0, block="pos.S") == pytest.approx(result.attrs["corrupted"])
    assert result.sel(layer=1, block="x") == pytest.approx(result.attrs["clean"], abs=1e-9)
    rows_of_P = patch(model, clean.X, corrupted.X, mse_to(clean.Y), axes=("layer",),
                      sites=Sites(positions=[0, 1, 2]))
    assert rows_of_P.values.tolist() == [rows_of_P.attrs["corrupted"]] * 2  # P rows did not change
    data = json.loads(json.dumps(result.to_dict()))
    assert data["dims"] == ["block", "layer"] and data["values"][4][0] is None
    assert isinstance(result, LabelledTensor)


def test_bad_arguments_raise_value_errors():
    model = C.theorem2(3)
    clean, corrupted = clean_and_corrupted(model, "P", n=4)
    metric = mse_to(clean.Y)
    same = make_input(model.cfg.layout, corrupted.P, corrupted.P @ clean.Y)  # same Y: same answer
    with pytest.raises(ValueError, match="differ"):
        patch_blocks(model, clean.X, same.X, metric, normalize=True)
    with pytest.raises(ValueError, match="axes"):
        patch(model, clean.X, corrupted.X, metric, axes=("block", "pos"))
    with pytest.raises(ValueError, match="hook"):
        patch(model, clean.X, corrupted.X, metric, sites=Sites(hook="attn_out"))
    with pytest.raises(ValueError, match="not in the stream"):
        patch(model, clean.X, corrupted.X, metric, sites=Sites(blocks=["L3.x"]))
    with pytest.raises(ValueError, match="positions"):
        patch(model, clean.X, corrupted.X, metric, sites=Sites(positions=[6]))
    with pytest.raises(ValueError, match="shape"):
        patch(model, clean.X, corrupted.X[:2], metric)
