"""Ablations against the causal floor: the mask, the scratch rows and named stream blocks."""

import pytest
import torch
from helpers import batch_for

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig
from invperm_interp.analysis import (
    ablate_block,
    ablate_mask,
    ablate_scratch,
    read_blocks,
    standard_ablations,
)
from invperm_interp.analysis.ablate import AblationResult
from invperm_interp.maths import constructions as C

BIDIRECTIONAL = ["theorem2", "two_block", "appendix_b"]
SCRATCH = ["theorem3", "theorem3_two_block"]
F64 = torch.float64

# Blocks of h^layer that no cell, no later layer and no read-out weight touches: ablating them
# must change nothing at all.
UNUSED = {
    "theorem2": [("L1.x", 1), ("L1.pos.Y", 1), ("L2.L1.x", 2), ("L2.pos.P", 2)],
    "two_block": [("L1.pos.P", 1), ("L1.pos.Y", 1), ("L2.L1.x", 2)],
    "appendix_b": [("L1.pos.P", 1), ("L1.pos.Y", 1), ("L2.x", 2)],
    "theorem3": [("L1.x", 1), ("L1.pos.S", 1), ("L2.L1.pos.Y", 2), ("pos.S", 2)],
    "theorem3_two_block": [("L1.pos.S", 1), ("L1.pos.P", 1), ("L2.L1.x", 2)],
}


@pytest.mark.parametrize("d", [2, 5])
@pytest.mark.parametrize("name", BIDIRECTIONAL)
def test_masking_a_bidirectional_construction_costs_at_least_the_floor(name, d):
    model = C.build(name, d)
    masked, result = ablate_mask(model, batch_for(model, 512))
    assert result.causal_floor == pytest.approx(d / 4)  # reading P rows: nothing of Y is visible
    assert result.mse_before < 1e-9 and result.mse_after >= 0.95 * result.causal_floor
    assert masked.cfg.attention_dir == "causal" and model.cfg.attention_dir == "bidirectional"
    for key, value in model.state_dict().items():
        assert torch.equal(masked.state_dict()[key], value)


@pytest.mark.parametrize("name", SCRATCH)
def test_unmasking_a_scratch_construction_changes_nothing(name):
    """The scratch rows come last, so they see every row with or without the mask."""
    model = C.build(name, 5)
    _, result = ablate_mask(model, batch_for(model, 256))
    assert result.causal_floor == 0.0 and result.mse_after < 1e-9


@pytest.mark.parametrize("d", [3, 5])
@pytest.mark.parametrize("name", SCRATCH)
def test_removing_scratch_rows_destroys_the_theorem3_output(name, d):
    model = C.build(name, d)
    batch = batch_for(model, 256)
    removed = ablate_scratch(model, "remove", batch=batch)
    assert removed.mse_before < 1e-9
    assert removed.mse_after == pytest.approx(d / 4)  # every read-out row gone: 0.5 everywhere
    for k in range(d + 1):  # each removed row costs exactly d/4 / d of the mean
        fewer = ablate_scratch(model, "fewer", k=k, batch=batch)
        assert fewer.mse_after == pytest.approx((d - k) / 4, abs=1e-9)
    # zeroed rows attend uniformly: at best the mean of the Y_P rows, ((d - 1) / 4d per entry)
    zeroed = ablate_scratch(model, "zero", batch=batch)
    assert zeroed.mse_after > 0.9 * (d - 1) / 4


@pytest.mark.parametrize("name", SCRATCH)
def test_scratch_content_is_not_read(name):
    """The constructions find their row by the scratch rows' positions, not by their content."""
    model = C.build(name, 5)
    assert ablate_scratch(model, "random", batch=batch_for(model, 256)).mse_after < 1e-3


def test_removing_rows_is_deleting_them_when_scratch_comes_last():
    """Masking the S rows as keys gives exactly the model on the layout without S."""
    d = 3
    big_cfg = ModelConfig(Layout.scratch(d, 2), attention_dir="bidirectional", dtype="float64",
                          init_scale=2.0)
    big = HookedDisentangledTransformer(big_cfg, seed=0)
    small = HookedDisentangledTransformer(ModelConfig(Layout.plain(d), attention_dir="bidirectional",
                                                      dtype="float64", init="zeros"))
    with torch.no_grad():
        for layer in range(2):
            cells = big.stream.split(big.blocks[layer].attn.A.data[0], layer)
            for (q, k), cell in small.stream.split(small.blocks[layer].attn.A.data[0], layer).items():
                cell.copy_(cells[q, k])
        for block in small.stream.blocks(2):
            small.unembed.W_U.data[block.slice] = big.unembed.W_U.data[big.stream.slice(block.name, 2)]
    batch = batch_for(big, 32)
    with torch.no_grad():
        expected = ((small(batch.X[:, : 2 * d]) - batch.Y) ** 2).sum(-1).mean()
    assert ablate_scratch(big, "remove", batch=batch).mse_after == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("name", BIDIRECTIONAL + SCRATCH)
def test_zeroing_the_blocks_that_carry_Y_destroys_the_output(name):
    model = C.build(name, 5)
    batch = batch_for(model, 256)
    assert read_blocks(model) == [C.REGISTRY[name].read_block]
    for block, layer in [("x", 0), (C.REGISTRY[name].read_block, 2)]:
        result = ablate_block(model, block, layer, batch=batch)
        assert result.mse_before < 1e-9 and result.mse_after > 2.0, (block, layer)


@pytest.mark.parametrize("name", BIDIRECTIONAL + SCRATCH)
def test_ablating_an_unused_block_changes_nothing(name):
    model = C.build(name, 5)
    batch = batch_for(model, 256)
    for block, layer in UNUSED[name]:
        for how in ("zero", "mean"):
            result = ablate_block(model, block, layer, how, batch=batch)
            assert result.mse_after == result.mse_before, (block, layer, how)


def test_mean_ablating_a_position_block_changes_nothing():
    """Positions are the same in every sample, so their batch mean is themselves."""
    model = C.theorem3(4)
    batch = batch_for(model, 256)
    for block in ("pos.P", "pos.Y", "pos.S"):
        assert ablate_block(model, block, 0, "mean", batch=batch).change == 0.0
    assert ablate_block(model, "pos.S", 0, "zero", batch=batch).change > 0.5  # zeroing is not


def test_results_read_against_the_floor():
    model = C.two_block(10)
    _, result = ablate_mask(model, n=64)
    text = str(result)
    assert text.startswith("ablate mask: MSE ") and "→" in text and text.endswith("(causal floor 2.5)")
    assert set(result.to_dict()) == {"name", "mse_before", "mse_after", "causal_floor", "description",
                                     "how", "block", "layer", "hook", "under_mask", "text"}
    assert result.to_dict()["text"] == text
    assert result.block is None  # the mask is not a block ablation
    block = ablate_block(model, "L1.x", 2, "mean", n=16)
    assert (block.how, block.block, block.layer, block.hook) == ("mean", "L1.x", 2,
                                                                  "blocks.1.hook_resid_post")
    assert type(result).from_dict(block.to_dict()) == block  # the fields survive analysis.json
    table = standard_ablations(C.theorem3(3), n=32)
    assert [r.name for r in table] == ["ablate mask", "scratch remove", "scratch zero", "scratch random",
                                       "scratch fewer (k=1)", "zero-ablate x at h^0",
                                       "zero-ablate L2.x at h^2"]


def test_the_standard_table_ablates_read_out_blocks_as_the_hooked_run_does():
    """The table ablates blocks of ``h^L`` in the clean run's stream; each equals a hooked run
    with the block zeroed (on a model whose ``W_U`` reads every block)."""
    from invperm_interp.analysis.gauge import perturb

    model = perturb(C.theorem3(4), gauge=1.0, noise=0.1, seed=2)
    with torch.no_grad():
        model.unembed.W_U += 0.05 * torch.randn(model.unembed.W_U.shape,
                                                generator=torch.Generator().manual_seed(0), dtype=F64)
    batch = batch_for(model, 64)
    table = {r.name: r for r in standard_ablations(model, batch)}
    blocks = read_blocks(model)
    assert len(blocks) == len(model.stream.blocks(2))
    for block in blocks:
        got = table[f"zero-ablate {block} at h^2"]
        want = ablate_block(model, block, 2, batch=batch)
        assert got == want or abs(got.mse_after - want.mse_after) <= 1e-12 * want.mse_after, block


def test_bad_arguments_raise_value_errors():
    plain, scratch = C.theorem2(3), C.theorem3(3)
    with pytest.raises(ValueError, match="no scratch"):
        ablate_scratch(plain)
    with pytest.raises(ValueError, match="mode"):
        ablate_scratch(scratch, "shuffle")
    with pytest.raises(ValueError, match="k must be"):
        ablate_scratch(scratch, "fewer", k=4)
    with pytest.raises(ValueError, match="only for mode"):
        ablate_scratch(scratch, "remove", k=1)
    with pytest.raises(ValueError, match="known blocks"):
        ablate_block(plain, "L3.x", 2)
    with pytest.raises(ValueError, match="layer"):
        ablate_block(plain, "x", 3)
    with pytest.raises(ValueError, match="how"):
        ablate_block(plain, "x", 0, how="resample")
    with pytest.raises(ValueError, match="batch layout"):
        ablate_mask(plain, batch_for(scratch, 256))


def test_a_bidirectional_models_block_ablations_are_not_read_against_the_causal_floor():
    # the floor bounds a model under the causal mask: a bidirectional one only when the mask
    # ablation puts it there
    model = C.two_block(6)
    results = {r.name: r for r in standard_ablations(model, n=64)}
    block = results["zero-ablate x at h^0"]
    assert not block.under_mask and "causal floor" not in str(block)
    assert "the input stream h^0" in block.description
    assert results["ablate mask"].under_mask and str(results["ablate mask"]).endswith("(causal floor 1.5)")
    causal = C.build("theorem3", 4, 10.0)
    assert all(r.under_mask and "(causal floor" in str(r) for r in standard_ablations(causal, n=64))
    old = {k: v for k, v in block.to_dict().items() if k not in ("under_mask", "text")}
    assert AblationResult.from_dict(old).under_mask  # a record from before: as it was read then
