"""The mechanism rule at any depth and width (``analysis.placements``): a model built from a
registry construction placed on any two layers and heads is named that construction at that
placement; a shape no construction fits says why; a two-layer one-head model is tested as before."""

import pytest
import torch

from invperm_interp import ModelConfig, sample_batch
from invperm_interp.analysis.faithfulness import Tester as _Tester
from invperm_interp.analysis.hypothesis import Hypothesis
from invperm_interp.analysis.mechanism import Mechanism, mechanism, name_on
from invperm_interp.analysis.placements import KEEP_SINGLE, KEEP_SUM, candidate_placements, untested_reason
from invperm_interp.maths import constructions as C
from invperm_interp.maths.placement import SUM, Placement, build
from invperm_interp.model.hooked import HookedDisentangledTransformer
from invperm_interp.task import Layout

# the written forms; each discovered one is held to its own checks (tests/analysis/test_registration.py)
WORKING = [n for n in C.names() if C.REGISTRY[n].works and not C.REGISTRY[n].provenance]
# At exact β a learned form written with more cells than the analytic model needs is named by what
# it needs, as on two layers of one head (tests/analysis/test_faithfulness.py): one of the
# constructions its cells contain. Which one depends on the placement: after an idle first layer
# (l1 > 0) the P-row lookup of theorem3_superposed is no longer faithful alone (its cells, fitted
# in the gauge-fixed frame of a stream that holds the idle layer's prefix averages, get β 156 and
# 101 instead of 130) and the complement lookup, also inside it, is named. A guarded form is named as
# its base: at exact β its lookups alone are exact and its content-mass guard is not needed.
NAMED_AS = {"theorem3_superposed": ("theorem3", "theorem3_complement"),
            "theorem3_superposed_complement": ("theorem3_complement",)}
NAMED_AS |= {f"{base}_guarded": NAMED_AS[base] for base in list(NAMED_AS)}
# Shapes 2 × 2, 3 × 1 and 3 × 2; non-adjacent layers, head 1, and a read-out from a sum of heads
# (the read-out reads both copies: no one head of the sum passes alone).
PLACES = [((2, 2), (0, 1), (1, 0)), ((1, 1, 1), (0, 2), (0, 0)), ((2, 2, 2), (0, 2), (1, 1)),
          ((2, 2, 2), (1, 2), (0, SUM))]


def batch_for(model, n: int = 128):
    return sample_batch(model.cfg.layout, n, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("shape, layers, heads", PLACES)
@pytest.mark.parametrize("name", WORKING)
def test_a_placed_construction_is_named_at_its_placement(name, shape, layers, heads):
    placed = Placement(name, layers, heads, shape)
    model = build(placed, 4, dtype=torch.float32)
    named = name_on(model, batch_for(model)).names  # the best and those the batch cannot rank below it
    assert {str(Placement(n, layers, heads, shape)) for n in NAMED_AS.get(name, (name,))} & set(named)
    if name == "theorem3_superposed" and layers[0] == 0:
        assert str(Placement("theorem3", layers, heads, shape)) in named


def test_two_heads_that_copy_one_circuit_are_named_by_one_and_the_other_is_also_faithful():
    placed = Placement("two_block", (0, 1), (SUM, 1), (2, 2))  # both layer-1 heads fetch the P row
    model = build(placed, 4, dtype=torch.float32)
    mech = mechanism(model, batch_for(model))
    assert mech.name == "two_block @ L1h0→L2h1"
    assert "two_block @ L1h1→L2h1" in mech.also_faithful
    assert mech.placement == Placement("two_block", (0, 1), (0, 1), (2, 2))
    again = Mechanism.from_dict(mech.to_dict())
    assert again.placement == mech.placement and again.name == mech.name
    assert mech.to_dict()["placement"]["sum_of_heads"] is False


def test_a_circuit_on_a_sum_of_heads_is_recorded_as_one():
    placed = Placement("appendix_b", (0, 1), (0, SUM), (1, 2))
    model = build(placed, 4, dtype=torch.float32)
    mech = mechanism(model, batch_for(model))
    assert mech.name == "appendix_b @ L1→L2(h0+h1)" and mech.placement == placed
    assert mech.to_dict()["placement"]["sum_of_heads"] is True


def test_a_two_layer_one_head_model_tests_each_construction_once_as_registered():
    model = C.build("theorem3", 4, dtype=torch.float32)
    tester = _Tester(model, batch_for(model, 16))
    found = candidate_placements(model, tester.fixed)
    # each working scratch construction of two layers, unplaced: the note's and the discovered ones
    scratch = [n for n in C.names() if C.REGISTRY[n].works and C.REGISTRY[n].layout == "scratch"
               and len(C.REGISTRY[n].heads) == 2]
    assert [str(p) for p in found] == scratch
    assert set(WORKING) & {n for n in C.names() if C.REGISTRY[n].layout == "scratch"} < set(scratch)
    mech = mechanism(model, batch_for(model))
    assert mech.name == "theorem3" and mech.placement is None
    assert "placement" not in mech.to_dict() and "untested" not in mech.to_dict()


def test_the_placements_tested_stay_few_per_construction():
    model = build(Placement("theorem3", (0, 2), (1, 1), (2, 2, 2)), 4, dtype=torch.float32)
    found = candidate_placements(model, _Tester(model, batch_for(model, 16)).fixed)
    per = {}
    for p in found:
        per.setdefault(p.construction, []).append(p)
    assert all(len(ps) == KEEP_SINGLE + KEEP_SUM for ps in per.values())  # of 27 placements each


def test_the_model_less_the_circuit_runs_for_the_named_and_each_constructions_best_placement():
    model = build(Placement("theorem3", (0, 2), (1, 1), (2, 2, 2)), 4, dtype=torch.float32)
    batch = batch_for(model)
    mech = mechanism(model, batch)
    run = {t.hypothesis for t in mech.tested if t.without is not None}
    names = {t.hypothesis.split(" @ ")[0] for t in mech.tested}
    assert mech.name in run and set(mech.also_faithful) <= run
    # one per construction at least (its first in the rule's order), fewer than every placement
    firsts = {n: next(t.hypothesis for t in mech.tested if t.hypothesis.startswith(n + " @ "))
              for n in names}
    assert set(firsts.values()) <= run and len(run) < len(mech.tested)
    # what was run is what a whole test of that placement measures
    named = mech.faithfulness
    alone = _Tester(model, batch).test(Hypothesis(named.hypothesis, named.cells, named.read,
                                                  named.unit), minimality=False)
    assert alone.without.mse == pytest.approx(named.without.mse, rel=1e-9)
    again = Mechanism.from_dict(mech.to_dict())  # None round-trips
    assert [t.without for t in again.tested] == [t.without for t in mech.tested]


@pytest.mark.parametrize("cfg, reason", [
    (ModelConfig(Layout.plain(4), n_layers=1),
     "the model has 1 layer and every registry construction needs two"),
    (ModelConfig(Layout.plain(4), n_layers=3, n_heads=2, attention_dir="bidirectional", readout="Y"),
     "none of the registry is bidirectional on the model's layout (P, Y) reading its Y rows"),
    (ModelConfig(Layout.plain(4), n_layers=2, attention_dir="causal", readout="P"),
     "none of the registry is causal on the model's layout (P, Y) reading its P rows"),
])
def test_a_shape_no_construction_fits_says_why_in_the_record_and_its_text(cfg, reason):
    assert reason in untested_reason(cfg)
    model = HookedDisentangledTransformer(cfg, seed=0)
    mech = mechanism(model, batch_for(model, 64))
    assert mech.name is None and mech.verdict == "none" and mech.tested == ()
    assert reason in mech.untested and reason in str(mech)
    assert reason in Mechanism.from_dict(mech.to_dict()).untested


def test_the_report_page_says_why_no_construction_was_tried_and_names_the_placement():
    from invperm_interp.analysis.record import analyze, headline
    from invperm_interp.viz.mechanism import headline as page_headline
    from invperm_interp.viz.mechanism import mechanism_section

    one = HookedDisentangledTransformer(ModelConfig(Layout.plain(4), n_layers=1), seed=0)
    result = analyze(one, batch_for(one, 64))
    reason = "the model has 1 layer and every registry construction needs two"
    assert reason in mechanism_section(result) and reason in page_headline(result)
    assert reason in headline(result)
    placed = build(Placement("two_block", (0, 2), (0, 0), (1, 1, 1)), 4, dtype=torch.float32)
    result = analyze(placed, batch_for(placed, 64))
    assert "two_block @ L1→L3" in page_headline(result) and "layers 1 and 3" in page_headline(result)
    assert "two_block @ L1→L3" in mechanism_section(result)


def test_discover_groups_one_circuit_at_two_placements_into_one_form():
    from dataclasses import replace

    from invperm_interp.analysis.discover import discover

    models = {"wide": build(Placement("two_block", (0, 1), (1, 0), (2, 2)), 4, dtype=torch.float32),
              "deep": build(Placement("two_block", (0, 2), (0, 0), (1, 1, 1)), 4, dtype=torch.float32)}
    # as if the registry lacked two_block: the rule's record with the name taken away
    known = {k: replace(mechanism(m, batch_for(m)), name=None) for k, m in models.items()}
    found = discover(models, n=128, known=known)
    (proposal,) = found.proposals
    assert set(proposal.runs) == {"wide", "deep"}
    assert proposal.form.cells == tuple(sorted(C.REGISTRY["two_block"].cells))
    assert proposal.form.read == "L2.x" and proposal.exact_from is not None
    assert proposal.faithful_runs == 2
