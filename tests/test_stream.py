"""Named residual-stream blocks (docs/design.md section 3)."""

import pytest
import torch

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch
from invperm_interp.stream import Stream

DESIGN_READOUT_BLOCKS = ["x", "pos.P", "pos.Y", "L1.x", "L1.pos.P", "L1.pos.Y", "L2.x", "L2.pos.P",
                         "L2.pos.Y", "L2.L1.x", "L2.L1.pos.P", "L2.L1.pos.Y"]


def test_design_readout_names_at_d10():
    stream = Stream(Layout.plain(10), (1, 1))
    assert stream.labels(0) == ["x", "pos.P", "pos.Y"]
    assert stream.labels(2) == DESIGN_READOUT_BLOCKS
    assert stream.slice("L2.L1.x", 2) == slice(90, 100)  # the note's "10th block of W"
    assert [stream.width(layer) for layer in range(3)] == [30, 60, 120]


def test_multi_head_and_scratch_names():
    stream = Stream(Layout.scratch(2, 3), (2, 1))
    assert stream.labels(1) == ["x", "pos.P", "pos.Y", "pos.S",
                                "L1h0.x", "L1h0.pos.P", "L1h0.pos.Y", "L1h0.pos.S",
                                "L1h1.x", "L1h1.pos.P", "L1h1.pos.Y", "L1h1.pos.S"]
    assert stream.block("pos.S", 0).width == 3
    assert stream.labels(2)[12:14] == ["L2.x", "L2.pos.P"]
    assert stream.labels(2)[-1] == "L2.L1h1.pos.S"
    assert len(stream.feature_labels(2)) == stream.width(2)


@pytest.mark.parametrize("layout, heads", [
    (Layout.plain(3), (1, 1, 1)),
    (Layout.scratch(2, 1), (2, 1)),
    (Layout.of(2, "0", "P", "Y", "0:3"), (1, 3)),
])
def test_blocks_tile_the_stream_and_match_activations(layout, heads):
    """Blocks are contiguous, cover every feature, and name what the hooks hold."""
    cfg = ModelConfig(layout, n_layers=len(heads), n_heads=list(heads), init_scale=0.5)
    model = HookedDisentangledTransformer(cfg, seed=0)
    stream = model.stream
    for layer in range(cfg.n_layers + 1):
        blocks = stream.blocks(layer)
        assert blocks[0].start == 0 and blocks[-1].stop == cfg.widths[layer]
        assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))
    batch = sample_batch(layout, 2)
    _, cache = model.run_with_cache(batch.X)
    h0 = cache["resid_pre", 0]
    assert torch.equal(h0[..., stream.slice("x", 0)], batch.X)
    seg = layout.segments[0]
    one_hot = h0[..., stream.slice(f"pos.{seg.name}", 0)]
    assert torch.equal(one_hot[0, : seg.n_rows], torch.eye(seg.n_rows))
    # layer 1's first head output repeats h^0's blocks: its x block is pattern @ X
    prefix = "L1" if heads[0] == 1 else "L1h0"
    h1 = cache["resid_post", 0]
    expected = cache["pattern", 0][:, 0] @ batch.X
    assert torch.allclose(h1[..., stream.slice(f"{prefix}.x", 1)], expected, atol=1e-6)


def test_split_returns_writable_named_cells():
    model = HookedDisentangledTransformer(ModelConfig(Layout.plain(3), init="zeros"))
    A = model.blocks[1].attn.A.data[0]
    cells = model.stream.split(A, 1)
    assert len(cells) == 36 and list(cells)[0] == ("x", "x")
    cells[("pos.P", "L1.x")].copy_(torch.eye(3))
    q, k = model.stream.slice("pos.P", 1), model.stream.slice("L1.x", 1)
    assert torch.equal(A[q, k], torch.eye(3)) and A.sum() == 3


def test_stream_errors_name_the_problem():
    stream = Stream(Layout.plain(3), (1,))
    with pytest.raises(ValueError, match="layer must be an integer in"):
        stream.labels(2)
    with pytest.raises(ValueError, match="known blocks"):
        stream.slice("L2.x", 1)
    with pytest.raises(ValueError, match=r"shape \(18, 18\)"):
        stream.split(torch.zeros(9, 9), 1)
