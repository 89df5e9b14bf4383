"""Constructions of any depth and width: a construction written here, with cells on three layers and
on head 1 of a two-head layer, registers, builds exactly (against a plain numpy forward), and the
mechanism rule names it in a model of its own shape and placed in a larger one."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import numpy_run as run

from invperm_interp import sample_batch
from invperm_interp.analysis.mechanism import mechanism
from invperm_interp.analysis.placements import fits
from invperm_interp.maths import constructions as C
from invperm_interp.maths.cells import Cell
from invperm_interp.maths.placement import Placement, build, placements

# Layer 1 (head 0): Y_P row j fetches P row j, so its L1.x is e_perm(j). Layer 2, head 1 of two:
# every Y_P row keeps a copy of itself (L2h1.L1.x = its L1.x); head 0 holds nothing. Layer 3: P row
# i looks up the Y_P row whose relayed copy is e_i and reads its x: Y_i. Two-block, relayed.
RELAY = [(0, 0, "pos.Y", "pos.P", "I"), (1, 1, "pos.Y", "pos.Y", "I"), (2, 0, "pos.P", "L2h1.L1.x", "I")]
NAME = "relay_three_test"


@pytest.fixture
def relay():
    spec = C.register(NAME, RELAY, C.Wiring(read="L3.x"), min_d=1, max_d=6)
    try:
        yield spec
    finally:
        C.REGISTRY.pop(NAME, None)


def test_a_three_layer_two_head_construction_registers_and_is_exact(relay):
    assert relay.heads == (1, 2, 1) and relay.n_layers == 3
    assert relay.cells == tuple(Cell(*c) for c in RELAY)
    for d in range(relay.min_d, relay.max_d + 1):
        model = C.build(NAME, d, relay.beta_exact, hooked=False)
        assert model.cfg.heads == (1, 2, 1)
        batch = sample_batch(model.cfg.layout, 64, generator=torch.Generator().manual_seed(d),
                             dtype=torch.float64)
        As = [b.attn.A.detach() for b in model.blocks]
        assert not As[1][0].any() and As[1][1].any()  # head 0 of layer 2 holds nothing
        reference = run(model.cfg, As, model.unembed.W_U.detach(), batch.X.numpy())
        assert np.abs(reference - batch.Y.numpy()).max() <= 1e-9
        assert np.abs(model(batch.X).detach().numpy() - reference).max() <= 1e-12
        assert C.exact_error(NAME, d, relay.beta_exact) <= 1e-9


def test_the_rule_names_it_on_its_own_shape_and_placed_in_a_larger_model(relay):
    own = C.build(NAME, 5)
    batch = sample_batch(own.cfg.layout, 512, generator=torch.Generator().manual_seed(7),
                         dtype=torch.float64)
    mech = mechanism(own, batch)
    assert mech.name == NAME and mech.placement is None  # as registered: the bare name
    # head 1 of the construction's layer 2 on the model's head 0, its layer 3 on the model's 4th
    placed = Placement(NAME, (0, 1, 3), (1, (1, 0), 0), (2, 2, 1, 1))
    assert {(c.layer, c.head) for c, _ in placed.cells} == {(0, 1), (1, 0), (3, 0)}
    model = build(placed, 5)
    assert C.verify(model).max_error <= 1e-9
    named = mechanism(model, batch)
    assert named.name == str(placed) and named.placement == placed
    assert named.faithfulness.placement == placed
    # the record keeps the placement as a value, not as text to parse
    from invperm_interp.analysis.mechanism import Mechanism

    back = Mechanism.from_dict(named.to_dict())
    assert back.placement == placed and back.faithfulness.placement == placed


def test_placements_of_a_two_head_layer_are_ordered_choices_of_distinct_heads(relay):
    found = placements(NAME, (1, 3, 1))
    assert len(found) == 3 * 2 == len(set(found))  # ordered pairs of distinct heads of 3
    assert all(Placement.from_dict(p.to_dict()) == p for p in found)
    assert fits(NAME, (1, 2, 1)) and fits(NAME, (2, 1, 2, 1)) and not fits(NAME, (2, 2))
    assert not fits(NAME, (1, 1, 1)) and placements(NAME, (1, 1, 1)) == []
    with pytest.raises(ValueError, match="must be 2 distinct heads"):
        Placement(NAME, (0, 1, 2), (0, (1, 1), 0), (1, 2, 1))


def test_no_code_reads_a_placement_or_a_tie_back_from_its_text():
    """A placement is a value (``Placement``) and a tie a tuple of names: nothing in the package
    splits a name at " @ " or " = ", or matches the placement's printed form."""
    src = Path(__file__).resolve().parents[2] / "src" / "invperm_interp"
    pattern = re.compile(r"""split\(\s*["'] [@=] ["']|["'] [@=] ["']\s+in\b|\bin\s+\w+\.split\(["'] @|"""
                         r"""re\.compile\(.*\\?@""")
    offenders = [f"{path.relative_to(src)}:{i}" for path in src.rglob("*.py")
                 for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_the_closest_construction_of_a_placed_model_is_its_placement():
    """``closest_construction`` beyond a construction's own shape: each construction at its
    best-weighted placement, compared on the placed heads; the placed one is closest, at TV ~ 0."""
    from invperm_interp.analysis.compare import candidates, closest_construction

    placed = Placement("two_block", (0, 2), (1, 0), (2, 1, 2))
    model = build(placed, 5, 100.0)
    batch = sample_batch(model.cfg.layout, 64, generator=torch.Generator().manual_seed(3),
                         dtype=torch.float64)
    assert placed in candidates(model)
    ranked = closest_construction(model, batch)
    best = ranked[0]
    assert best.name == str(placed) and best.pattern_tv < 1e-6 and best.weight_cosine > 0.999
    assert best.cells_found == 1.0
    assert all(m.pattern_tv > best.pattern_tv for m in ranked[1:])
