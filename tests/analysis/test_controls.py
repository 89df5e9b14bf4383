"""Negative controls (``analysis.controls``): every style rejects the empty claim and random cell
sets on a model whose mechanism is known, the old same-P scrubbing did not (so the control can
fail), and a style that does not reject the empty claim names nothing (``untestable``)."""

import pytest
from helpers import batch_for, scored

from invperm_interp.analysis.controls import (
    CONTROL_STYLES,
    Control,
    cannot_reject,
    controls,
    empty_claim,
    random_sets,
    wilson,
)
from invperm_interp.analysis.mechanism import Mechanism, mechanism, name_by_rule
from invperm_interp.analysis.scrub import fed_from, scrub
from invperm_interp.analysis.verdict import FAITHFUL, NOT_FAITHFUL, RULE, UNNAMED, UNTESTABLE, Answer
from invperm_interp.maths import constructions as C


@pytest.fixture(scope="module")
def theorem3():
    model = C.build("theorem3", 6, hooked=False)
    return model, batch_for(model, 512, seed=3)


def test_every_style_rejects_the_empty_claim_and_random_sets_and_passes_the_construction(theorem3):
    model, batch = theorem3
    others = ["theorem3_two_block", "theorem3_complement"]
    found = controls(model, "theorem3", batch, others=others, draws=20, seed=1)
    assert tuple(c.style for c in found) == CONTROL_STYLES
    for c in found:
        assert c.claim_verdict == FAITHFUL and c.empty_verdict == NOT_FAITHFUL, c
        assert c.testable and c.supports
        assert c.random_rejected >= 19 and c.draws == 20, c  # power >= 95%
        assert all(verdict == NOT_FAITHFUL for _, verdict in c.others), c
        assert Control.from_dict(c.to_dict()) == c


def test_the_empty_claim_is_scrubbed_from_other_inputs_and_fails(theorem3):
    """Scrubbing feeds the paths outside a claim from another input: the empty claim is resample
    ablation of every cell. Fed from a partner with the same P instead (what scrubbing did before),
    the empty claim recovers the whole loss on this task, where routing depends on P alone: the
    control catches a test that cannot fail."""
    model, batch = theorem3
    assert scrub(model, empty_claim(), batch).loss_recovered < 0.3
    assert scrub(model, "theorem3", batch).loss_recovered > 0.99
    (old,) = fed_from(model, batch, "P").test_many([empty_claim()], minimality=False, complete=False)
    assert cannot_reject(old)
    assert old.circuit.loss_recovered > 0.99 and old.circuit.rows_exact > 0.99


def test_a_style_that_does_not_reject_the_empty_claim_names_nothing():
    tested = [scored("theorem3", recovered=0.97, recovered_se=1e-3)]
    assert name_by_rule(tested) == Answer(FAITHFUL, "theorem3")
    rejected = scored("the empty claim", rows=0.05, recovered=0.02)
    assert name_by_rule(tested, empty=rejected) == Answer(FAITHFUL, "theorem3")
    for rows, recovered in ((1.0, 0.99), (0.995, 0.81)):  # accepted, or only borderline
        accepted = scored("the empty claim", rows=rows, rows_se=0.005, recovered=recovered)
        assert name_by_rule(tested, empty=accepted) == Answer(UNTESTABLE)
    assert UNTESTABLE in UNNAMED and "untestable" in C.RESERVED
    assert Answer.read(["untestable", None, []]) == Answer(UNTESTABLE)


def test_the_mechanism_record_keeps_the_empty_claims_test(theorem3):
    model, batch = theorem3
    mech = mechanism(model, batch)
    assert mech.name == "theorem3" and mech.empty is not None
    assert RULE.judge(mech.empty.circuit) == NOT_FAITHFUL and mech.empty.cells == ()
    back = Mechanism.from_dict(mech.to_dict())
    assert back.empty == mech.empty and back.verdict == mech.verdict
    untestable = Mechanism.from_dict({**mech.to_dict(), "name": None, "faithfulness": None,
                                      "empty": scored("the empty claim", recovered=0.99).to_dict()})
    assert untestable.verdict == UNTESTABLE and "untestable" in str(untestable)


def test_random_sets_are_distinct_cells_drawn_again_the_same_from_their_seed(theorem3):
    model, _ = theorem3
    sets = random_sets(model, 5, 30, seed=7)
    assert sets == random_sets(model, 5, 30, seed=7) and sets != random_sets(model, 5, 30, seed=8)
    sites = {(layer, head, q.name, k.name) for layer, heads in enumerate(model.cfg.heads)
             for head in range(heads) for q in model.stream.blocks(layer) for k in model.stream.blocks(layer)}
    assert all(len({c.site for c in cells}) == 5 and {c.site for c in cells} <= sites for cells in sets)
    with pytest.raises(ValueError, match="size must be in"):
        random_sets(model, len(sites) + 1, 1)
    with pytest.raises(ValueError, match="draws must be an integer"):
        controls(model, "theorem3", batch_for(model, 8), draws=-1)
    with pytest.raises(ValueError, match="style must be one of"):
        controls(model, "theorem3", batch_for(model, 8), styles=["zeros"])


def test_wilson_matches_the_closed_form():
    lo, hi = wilson(19, 20)
    assert lo == pytest.approx(0.7639, abs=1e-4) and hi == pytest.approx(0.9911, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0) and wilson(20, 20)[1] == 1.0
