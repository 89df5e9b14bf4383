"""Ties: what each ablation style can tell apart (derived from the registry's cells, checked by
running the constructions' circuit-only models), and the rule reporting a tie as the set of the
constructions it cannot rank instead of naming one."""

import json
from dataclasses import replace

import pytest
from helpers import analysed, batch_for, scored

from invperm_interp.analysis import faithfulness, perturb
from invperm_interp.analysis.mechanism import name_by_rule
from invperm_interp.analysis.sweep_record import SweepRecord
from invperm_interp.analysis.ties import (
    CELLS,
    SIGNS,
    comparable,
    paired,
    relation,
    tied,
    tied_with,
    untold_pairs,
    visible_sites,
)
from invperm_interp.analysis.verdict import Answer
from invperm_interp.maths import constructions as C
from invperm_interp.maths import registry
from invperm_interp.viz.mechanism import sweep_verdict_section

SCRATCH = comparable("scratch", "causal")


def test_zero_ablation_tells_every_registered_pair_apart_and_the_others_three_pairs_by_signs_only():
    assert untold_pairs(SCRATCH, "zero") == [] == untold_pairs(comparable("plain", "bidirectional"),
                                                               "mean")
    for style in ("mean", "resample", "scrub"):
        assert untold_pairs(SCRATCH, style) == [
            ("theorem3_two_block", "theorem3_complement", SIGNS),
            ("theorem3_superposed", "theorem3_superposed_complement", SIGNS),
            ("theorem3_superposed_guarded", "theorem3_superposed_complement_guarded", SIGNS)]
    # two_block's position-only guard is invisible to mean ablation; mass's guard reads L1.x: seen
    assert (1, "pos.S", "pos.P") not in visible_sites(registry.get("theorem3_two_block"), "mean")
    assert relation("theorem3_two_block", "theorem3_two_block_mass", "mean") == CELLS
    with pytest.raises(ValueError, match="style must be one of"):
        visible_sites(registry.get("theorem3"), "ablate")


@pytest.mark.parametrize("style", ["mean", "resample"])
def test_constructions_a_style_cannot_tell_apart_score_alike_on_a_noisy_model_and_zero_separates_them(
        style):
    model = perturb(C.build("theorem3_superposed", 4, 30.0), gauge=1.0, noise=0.5, seed=1)
    batch = batch_for(model, 128)
    for a, b, _ in untold_pairs(SCRATCH, style):
        fa, fb = (faithfulness(model, n, batch, ablation=style, minimality=False) for n in (a, b))
        assert fa.circuit.mse == pytest.approx(fb.circuit.mse, rel=1e-9, abs=1e-12)
        za, zb = (faithfulness(model, n, batch, minimality=False) for n in (a, b))
        assert za.circuit.mse != pytest.approx(zb.circuit.mse, rel=1e-3)


def test_a_tie_is_intervals_that_overlap_or_estimates_within_the_rules_rounding():
    best = scored(recovered=0.95, recovered_se=0.005).circuit
    assert tied(best, scored(recovered=0.941, recovered_se=0.0).circuit)  # 0.95 - 1.96·0.005 < 0.941
    assert not tied(best, scored(recovered=0.93, recovered_se=0.0).circuit)
    exact = scored(recovered=0.95, recovered_se=0.0).circuit
    assert tied(exact, scored(recovered=0.95 - 5e-5, recovered_se=0.0).circuit)
    assert not tied(exact, scored(recovered=0.95 - 5e-4, recovered_se=0.0).circuit)


def test_the_rule_names_a_tie_as_the_set_and_the_record_keeps_it():
    tests = [scored("theorem3_two_block", recovered=0.9801, recovered_se=1e-4),
             scored("theorem3_two_block_mass", recovered=0.9800, recovered_se=1e-4),
             scored("theorem3", recovered=0.90, recovered_se=1e-3)]
    answer = name_by_rule(tests)
    assert answer == ("faithful", "theorem3_two_block", ("theorem3_two_block_mass",))
    assert str(answer) == "theorem3_two_block = theorem3_two_block_mass"
    assert answer.names == ("theorem3_two_block", "theorem3_two_block_mass")
    record = analysed("theorem3_two_block", tests=tests[:1])
    record = record.with_names({"mean": answer})
    again = SweepRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again.under["mean"] == answer
    page = sweep_verdict_section(again)
    assert ("under mean ablation of the cells outside the circuit: <b>theorem3_two_block = "
            "theorem3_two_block_mass</b> (a tie: this batch cannot rank them)") in page


def test_an_answer_of_an_older_record_reads_without_ties_and_a_malformed_one_is_refused():
    assert Answer.read(["faithful", "two_block"]) == Answer("faithful", "two_block", ())
    assert Answer.read(["none", None, []]) == Answer("none")
    for bad in (["none", None, ["two_block"]], ["faithful", "a", "b"], ["faithful"], "two_block"):
        with pytest.raises(ValueError, match="an answer must be"):
            Answer.read(bad)


def test_a_paired_difference_decides_a_tie_that_overlapping_intervals_would_call():
    """Two claims whose separate intervals overlap (each ± 0.01) but whose difference on the same
    samples is 0.004 ± 0.0005 are ranked; a difference within its interval stays a tie."""
    best = scored("a", recovered=0.970, recovered_se=0.005)
    other = scored("b", recovered=0.966, recovered_se=0.005)
    assert tied_with([best, other]) == ("b",)  # no paired difference: the intervals overlap
    apart = replace(other, versus=("a", -0.004, 0.0005))
    assert tied_with([best, apart]) == ()
    close = replace(other, versus=("a", -0.004, 0.003))
    assert tied_with([best, close]) == ("b",)
    stale = replace(other, versus=("c", -0.004, 0.0005))  # paired with another best: not read
    assert tied_with([best, stale]) == ("b",)


def test_the_paired_difference_is_the_difference_of_the_two_scores_on_the_same_samples():
    """``Tester.errors`` are the per-sample errors the scores average: the paired difference equals
    the difference of the two loss-recovered estimates, and its standard error is that of the
    per-sample differences (numpy)."""
    import numpy as np
    from helpers import batch_for

    from invperm_interp.analysis import perturb
    from invperm_interp.analysis.faithfulness import Tester
    from invperm_interp.analysis.hypothesis import as_hypothesis

    model = perturb(C.build("theorem3_superposed", 5, 30.0), gauge=1.0, noise=0.3, seed=0)
    batch = batch_for(model, 256)
    tester = Tester(model, batch, "resample")
    a, b = (as_hypothesis(model, n) for n in ("theorem3_superposed", "theorem3"))
    ea, eb = tester.errors([a, b])
    sa, sb = tester.circuit(a), tester.circuit(b)
    assert float(ea.mean()) == pytest.approx(sa.mse, rel=1e-9)
    difference, se = paired(ea, eb, tester.baseline, tester.clean.mse)
    assert difference == pytest.approx(sb.loss_recovered - sa.loss_recovered, abs=1e-9)
    d = (ea - eb).numpy()
    gap = tester.baseline - tester.clean.mse
    assert se == pytest.approx(np.std(d, ddof=1) / np.sqrt(len(d)) / gap, rel=1e-9)


def test_the_rule_pairs_every_other_faithful_construction_with_the_best_and_keeps_it():
    from invperm_interp.analysis.mechanism import Mechanism, mechanism

    model = perturb(C.build("theorem3_superposed", 5, 30.0), gauge=1.0, noise=0.3, seed=0)
    mech = mechanism(model, batch_for(model, 512), exact=False)
    compared = [t for t in mech.tested if t.versus is not None]
    assert mech.also_faithful and {t.hypothesis for t in compared} == set(mech.also_faithful)
    assert all(t.versus[0] == mech.name for t in compared)
    assert Mechanism.from_dict(mech.to_dict()) == mech
