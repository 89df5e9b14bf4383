"""Idealisation: a form missing its guard is made exact by the one guard the note's corrections add;
an exact form is kept; a ±1 beside a lookup that exactness does not need is pruned; a form that
cannot be exact says why. Exactness is checked against a plain numpy forward, not the builder."""

import numpy as np
import pytest
import torch
from helpers import numpy_run as run

from invperm_interp import sample_batch
from invperm_interp.analysis.forms import Form
from invperm_interp.analysis.idealise import core, guards, idealise, reads, screen_batch
from invperm_interp.maths import constructions as C
from invperm_interp.maths.cells import Cell
from invperm_interp.task import Layout


def _form(cells, read="L2.x", layout="plain", attention="bidirectional", readout="P") -> Form:
    return Form(attention, layout, readout, tuple(sorted(Cell.of(c) for c in cells)), read)


def _numpy_max_error(form: Form, d: int, beta: float = 1000.0) -> float:
    """Largest |numpy forward - Y| of the form built at ``beta`` on 64 fresh samples."""
    model = C.build(form.spec("_test_form"), d, beta, hooked=False)
    batch = sample_batch(model.cfg.layout, 64, generator=torch.Generator().manual_seed(100 + d),
                         dtype=torch.float64)
    out = run(model.cfg, [b.attn.A.detach() for b in model.blocks], model.unembed.W_U.detach(),
              batch.X.numpy())
    return float(np.abs(out - batch.Y.numpy()).max())


def test_appendix_b_as_printed_gets_its_guard():
    # Appendix B as printed: layer 2's content lookup for e_i ties P row perm⁻¹(i) with the Y_P
    # rows holding a 1 in column i
    printed = C.REGISTRY["appendix_b_as_printed"]
    bare = _form(printed.cells, read=printed.read_block)
    assert _numpy_max_error(bare, 6) > 0.1
    found = idealise(bare)
    assert found.exact and found.reason == ""
    assert len(found.added) == 1 and found.dropped == ()
    (guard,) = found.added
    assert (guard.layer, guard.query) == (1, "pos.P") and guard.label in ("1", "-1")
    for d in (3, 6, 9):  # beyond the sizes it was checked at, by an independent forward
        assert _numpy_max_error(found.form, d) < 1e-9
    # and the registry's own full check agrees
    spec = C.register("_idealised_appendix_b", found.form.cells,
                      C.Wiring(read=found.form.read), min_d=3, max_d=10)
    C.REGISTRY.pop(spec.name)


def test_an_exact_form_is_kept_whole():
    two_block = _form(C.REGISTRY["two_block"].cells)
    found = idealise(two_block)
    assert found.exact and found.added == () and found.dropped == ()
    assert found.form == two_block


def test_a_spare_minus_one_beside_a_lookup_is_pruned():
    # soft attention learns I - c·1 in a lookup cell; the exact form does not need the -1
    soft = _form([*C.REGISTRY["two_block"].cells, (1, "pos.P", "L1.x", "-1")])
    found = idealise(soft)
    assert found.exact and found.dropped == (Cell(1, 0, "pos.P", "L1.x", "-1"),)
    assert found.form.cells == tuple(sorted(C.REGISTRY["two_block"].cells))


def test_a_read_out_of_several_blocks_is_also_tried_one_block_at_a_time():
    # appendix_b's answer is in L2.L1.x alone: reading L2.x beside it is wrong at any β
    spec = C.REGISTRY["appendix_b"]
    both = _form(spec.cells, read="L2.L1.x + L2.x")
    assert reads(both) == ["L2.L1.x + L2.x", "L2.L1.x", "L2.x"]
    found = idealise(both)
    assert found.exact and found.form.read == "L2.L1.x"


def test_a_form_that_cannot_be_exact_says_why():
    printed = _form(C.REGISTRY["theorem2_as_printed"].cells)
    found = idealise(printed)
    assert not found.exact
    assert "error" in found.reason and found.check.max_error > 1e-3
    assert found.tried > 10


def test_core_keeps_lookups_and_lone_offsets():
    cells = [Cell(0, 0, "pos.P", "x", "I"), Cell(0, 0, "pos.P", "x", "-1"),
             Cell(0, 0, "pos.P", "pos.Y", "-1")]
    assert core(cells) == (Cell(0, 0, "pos.P", "pos.Y", "-1"), Cell(0, 0, "pos.P", "x", "I"))


def test_guards_are_pm_one_at_used_queries_and_every_key_of_the_layer():
    form = _form([(0, "pos.P", "x", "I"), (1, "L1.pos.P", "pos.Y", "I")])
    found = guards(form, form.cells)
    assert Cell(0, 0, "pos.P", "pos.Y", "-1") in found and Cell(1, 0, "L1.pos.P", "L1.x", "1") in found
    assert {c.query for c in found if c.layer == 0} == {"pos.P"}
    assert {c.label for c in found} == {"1", "-1"}
    assert len(found) == 2 * (3 + 6)  # layer 1 reads x, pos.P, pos.Y; layer 2 those and L1's


@pytest.mark.parametrize("layout", ["plain", "scratch"])
def test_the_screen_batch_holds_random_and_edge_inputs(layout):
    batch = screen_batch(Layout.scratch(5) if layout == "scratch" else Layout.plain(5))
    assert len(batch) == 64 + 6
    eye = torch.eye(5, dtype=torch.float64)
    assert torch.equal(batch.P[64], eye) and torch.equal(batch.P[-1], eye.flip(0))


def test_an_exact_form_the_model_contradicts_gives_way_to_one_it_holds():
    # the model (here a stand-in judge) holds layer 2's guard on (pos.P, pos.Y), not (pos.P, pos.P)
    printed = C.REGISTRY["appendix_b_as_printed"]
    bare = _form(printed.cells, read=printed.read_block)
    (plain,) = idealise(bare).added
    asked = []

    def holds(form):
        asked.append(form)
        return plain not in form.cells

    found = idealise(bare, accept=holds)
    assert asked and found.exact and plain not in found.form.cells
    assert holds(found.form) and len(found.added) == 1
    for d in (3, 6):
        assert _numpy_max_error(found.form, d) < 1e-9


def test_pruning_keeps_a_cell_the_model_needs_for_its_signs():
    # exactness alone drops the soft lookup's -1; a model whose sign check needs it keeps it
    spare = Cell(1, 0, "pos.P", "L1.x", "-1")
    soft = _form([*C.REGISTRY["two_block"].cells, (1, "pos.P", "L1.x", "-1")])
    found = idealise(soft, accept=lambda form: spare in form.cells)
    assert found.exact and spare in found.form.cells and found.dropped == ()


def test_when_the_model_contradicts_every_exact_form_it_says_so():
    two_block = _form(C.REGISTRY["two_block"].cells)
    found = idealise(two_block, accept=lambda form: False)
    assert not found.exact and "signs" in found.reason
    assert found.to_dict()["exact"] is False
