"""Placements (``maths.placement``): a registry construction on any two layers and heads of a deeper
or wider model computes ``Y`` as the registered one does, checked against a plain numpy forward."""

import numpy as np
import pytest
import torch
from helpers import numpy_run as run

from invperm_interp import sample_batch
from invperm_interp.maths import constructions as C
from invperm_interp.maths.placement import SUM, Placement, placed_weights, placements
from invperm_interp.model.hooked import HookedDisentangledTransformer

WORKING = [n for n in C.names() if C.REGISTRY[n].works and C.REGISTRY[n].n_layers == 2]  # PLACES: 2 layers
# (shape, layers, heads): non-adjacent layers, head 1, a sum of heads in either layer
# (heads per layer: 2 × 2, 3 × 1, 3 × 2)
PLACES = [((2, 2), (0, 1), (1, 0)), ((2, 2), (0, 1), (SUM, 1)), ((1, 1, 1), (0, 2), (0, 0)),
          ((1, 1, 1), (1, 2), (0, 0)), ((2, 2, 2), (0, 2), (1, 1)), ((2, 2, 2), (1, 2), (0, SUM))]


@pytest.mark.parametrize("name", WORKING)
@pytest.mark.parametrize("shape, layers, heads", PLACES)
def test_a_placed_construction_computes_Y_as_the_registered_one(name, shape, layers, heads):
    d = max(4, C.REGISTRY[name].min_d)
    placed = Placement(name, layers, heads, shape)
    cfg, As, W_U = placed_weights(placed, d)
    assert cfg.heads == shape and [tuple(a.shape[:1]) for a in As] == [(h,) for h in shape]
    batch = sample_batch(cfg.layout, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    X = batch.X.numpy()
    out = run(cfg, As, W_U, X)
    ref_cfg, ref_As, ref_W = C.weights(name, d)
    assert np.abs(out - batch.Y.numpy()).max() < 1e-6
    assert np.abs(out - run(ref_cfg, ref_As, ref_W, X)).max() < 1e-9
    # every cell outside the placement is zero: the placed layers hold the only nonzero heads
    used = {(c.layer, c.head) for c, _ in placed.cells}
    assert all(not As[layer][head].any() for layer in range(len(shape)) for head in range(shape[layer])
               if (layer, head) not in used)
    model = HookedDisentangledTransformer(cfg)
    with torch.no_grad():
        for block, A in zip(model.blocks, As):
            block.attn.A.copy_(A)
        model.unembed.W_U.copy_(W_U)
        assert np.abs(model(batch.X).numpy() - out).max() < 1e-9


def test_block_names_follow_the_placement():
    placed = Placement("appendix_b", (0, 2), (1, 0), (2, 1, 2))
    assert placed.blocks("pos.P") == ["pos.P"]
    assert placed.blocks("L1.x") == ["L1h1.x"]
    assert placed.blocks("L2.L1.x") == ["L3h0.L1h1.x"]
    assert placed.read_terms == (("L3h0.L1h1.x", 1.0),)
    assert str(placed) == "appendix_b @ L1h1→L3h0"
    summed = Placement("two_block", (0, 1), (SUM, 1), (2, 2))
    assert summed.blocks("L1.x") == ["L1h0.x", "L1h1.x"]
    assert summed.read_terms == (("L2h1.x", 1.0),)
    # the layer-1 cell on both heads, the layer-2 lookup split over the two copies it reads
    assert summed.cells == (((0, 0, "pos.Y", "pos.P", "I"), 1.0), ((0, 1, "pos.Y", "pos.P", "I"), 1.0),
                            ((1, 1, "pos.P", "L1h0.x", "I"), 0.5), ((1, 1, "pos.P", "L1h1.x", "I"), 0.5))
    assert str(summed) == "two_block @ L1(h0+h1)→L2h1"
    assert str(Placement("two_block", (1, 2), (0, 0), (1, 1, 1))) == "two_block @ L2→L3"
    assert str(Placement("two_block", (0, 1), (0, 0), (1, 1))) == "two_block"


def test_every_placement_is_listed_once_and_reads_back():
    found = placements("theorem3", (2, 1, 2))
    # layer pairs (0,1), (0,2), (1,2); a two-head layer has 3 options (h0, h1, sum), a one-head 1
    assert len(found) == 3 * 1 + 3 * 3 + 1 * 3 == len(set(found))
    for placed in found:
        assert Placement.from_dict(placed.to_dict()) == placed
    assert Placement.own("two_block") == Placement("two_block", (0, 1), (0, 0), (1, 1))
    assert Placement.own("two_block").trivial and str(Placement.own("two_block")) == "two_block"
    assert placements("two_block", (1,)) == []


@pytest.mark.parametrize("args, match", [
    (("two_block", (1, 1), (0, 0), (1, 1)), "layers must be 2 increasing module indices"),
    (("two_block", (0, 2), (0, 0), (1, 1)), "layers must be 2 increasing module indices"),
    (("two_block", (0, 1, 2), (0, 0, 0), (1, 1, 1)), "layers must be 2 increasing module indices"),
    (("two_block", (0, 1), (0,), (1, 1)), "heads must give one choice per layer"),
    (("two_block", (0, 1), (2, 0), (2, 1)), "head of layer 0 must be in"),
    (("two_block", (0, 1), (SUM, 0), (1, 1)), "layer 0 has one head"),
    (("two_block", (0, 1), (0, 0), (1,)), "shape must list the heads of at least 2 layers"),
    (("nope", (0, 1), (0, 0), (1, 1)), "construction name must be one of"),
])
def test_a_placement_that_does_not_fit_says_why(args, match):
    with pytest.raises(ValueError, match=match):
        Placement(*args)


def test_a_placement_reads_back_from_its_record():
    placed = Placement("theorem3", (1, 2), (0, SUM), (2, 2, 2))
    data = placed.to_dict()
    assert data["layers"] == [2, 3] and data["heads"] == [0, None] and data["sum_of_heads"]
    assert Placement.from_dict(data) == placed


def test_a_circuit_on_two_heads_unplaces_to_the_construction_and_one_elsewhere_does_not():
    from invperm_interp.maths.placement import unplace

    placed = Placement("appendix_b", (0, 2), (1, 0), (2, 1, 2))
    cells = tuple(c for c, _ in placed.cells)
    read = tuple(b for b, _ in placed.read_terms)
    assert unplace(cells, read, placed.shape) == ((0, 2), (1, 0), C.REGISTRY["appendix_b"].cells,
                                                   ("L2.L1.x",))
    assert unplace(cells, ("L2.x",), placed.shape) is None  # a copy no placed head made
    assert unplace(cells + ((1, 0, "pos.P", "x", "I"),), read, placed.shape) is None  # three heads
