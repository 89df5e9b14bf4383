"""Verdicts as measurements (standard errors, intervals, borderline), the signs that matter, the
choice among faithful constructions, and the exact minimal-circuit search against brute force."""

from itertools import combinations

import numpy as np
import pytest
import torch
from helpers import add_cells, batch_for

from invperm_interp.analysis import Score, faithfulness, judge, mechanism, minimal_circuit, perturb
from invperm_interp.analysis.faithfulness import Faithfulness
from invperm_interp.analysis.faithfulness import Tester as CircuitTester
from invperm_interp.analysis.hypothesis import Hypothesis
from invperm_interp.analysis.mechanism import Mechanism, name_on
from invperm_interp.analysis.mechanism import tested_on as scores_behind  # not collected as a test
from invperm_interp.analysis.minimal import (
    ExactSearch,
    MinimalCircuit,
    candidate_cells,
    read_candidates,
)
from invperm_interp.analysis.templates import explain
from invperm_interp.analysis.verdict import Rule, is_faithful
from invperm_interp.maths import constructions as C


def test_standard_errors_match_a_numpy_reference():
    model = perturb(C.build("two_block", 4, 6.0), gauge=1.0, noise=0.8, seed=5)
    batch = batch_for(model, 300)
    f = faithfulness(model, "two_block", batch, minimality=False)
    with torch.no_grad():
        clean = model(batch.X).numpy()
    Y = batch.Y.numpy()
    # the circuit-only model's output, rebuilt from its score's MSE is not enough: rerun it
    tester = CircuitTester(model, batch)
    from helpers import run_with_weights

    from invperm_interp.analysis.faithfulness import read_out
    from invperm_interp.analysis.projection import project
    hyp = Hypothesis("two_block", f.cells, f.read)
    out = run_with_weights(model, project(model, hyp).kept, read_out(model, f.read), batch.X).numpy()
    exact = np.all(np.round(out) == Y, axis=-1).mean(axis=1)  # per sample
    n = len(exact)
    assert f.circuit.rows_se == pytest.approx(exact.std(ddof=1) / np.sqrt(n), rel=1e-9)
    e_c = ((out - Y) ** 2).sum(-1).mean(-1)
    e_m = ((clean - Y) ** 2).sum(-1).mean(-1)
    b = 0.25 * 4
    R = (b - e_c.mean()) / (b - e_m.mean())
    cov = np.cov(np.stack([e_c, e_m]), ddof=1)
    var = (cov[0, 0] - 2 * R * cov[0, 1] + R**2 * cov[1, 1]) / (n * (b - e_m.mean()) ** 2)
    assert f.circuit.loss_recovered == pytest.approx(R, rel=1e-9)
    assert f.circuit.recovered_se == pytest.approx(np.sqrt(var), rel=1e-6)
    assert tester.clean.n == n


@pytest.mark.parametrize("rows,rows_se,rec,rec_se,verdict", [
    (0.999, 0.001, 0.95, 0.01, "faithful"),
    (0.991, 0.002, 0.95, 0.01, "borderline"),  # 0.991 - 1.96 * 0.002 < 0.99
    (0.985, 0.001, 0.95, 0.01, "not faithful"),  # 0.985 + 1.96 * 0.001 < 0.99
    (0.999, 0.001, 0.81, 0.02, "borderline"),
    (0.999, 0.001, 0.70, 0.02, "not faithful"),
    (1.0, 0.0, None, None, "not faithful"),
])
def test_the_interval_decides_the_verdict(rows, rows_se, rec, rec_se, verdict):
    assert judge(Score(0.1, rows, rec, rows_se, rec_se, 1000)) == verdict


def _faithfulness_with_betas(betas):
    s = Score(0.0, 1.0, 1.0)
    cells = tuple((0, 0, "pos.P", "x", "I") for _ in betas)
    return Faithfulness("x", "cells", cells, ("L2.x",), betas, betas, 1.0, 1.0, s, s, s)


def test_only_signs_that_matter_are_checked():
    assert _faithfulness_with_betas((5.0, 3.0)).signs_agree
    assert _faithfulness_with_betas((5.0, -0.031)).signs_agree  # near zero: no sign to speak of
    assert not _faithfulness_with_betas((5.0, -1.0)).signs_agree


def test_a_small_cell_of_its_own_has_its_sign_checked():
    """The threshold is relative to the template's own cell: a guard cell holding 6% of the
    layer's largest β, negative, is a disagreeing sign (the layer-wide threshold let it pass)."""
    s = Score(0.0, 1.0, 1.0)
    cells = ((0, 0, "pos.P", "x", "I"), (0, 0, "x", "pos.P", "1"))
    for guard, agree in ((0.3, True), (-0.3, False)):
        f = Faithfulness("x", "cells", cells, ("L2.x",), (5.0, guard), (5.0, guard), 1.0, 1.0, s, s, s)
        assert f.signs_agree == agree


def test_a_straddling_interval_is_borderline_not_a_flip():
    model = perturb(C.build("two_block", 5, 8.0), gauge=1.0, noise=0.6, seed=2)
    batch = batch_for(model, 512)
    f = faithfulness(model, "two_block", batch, minimality=False)
    assert f.circuit.recovered_se > 0
    # the rule's loss threshold exactly at the measured value: the interval straddles it
    mech = mechanism(model, batch, rule=Rule(0.0, f.circuit.loss_recovered), exact=False)
    assert mech.name is None and "two_block" in mech.borderline  # no name: the verdict says why
    assert mech.verdict == "borderline" and mech.faithfulness.hypothesis in mech.borderline
    assert mech.answer == ("borderline", None, ()) and str(mech.answer) == "borderline"
    assert "borderline" in str(mech)
    again = Mechanism.from_dict(mech.to_dict())
    assert again == mech


def test_among_faithful_constructions_the_most_loss_recovered_is_named():
    """A noisy theorem3_superposed passes several constructions' tests (its cells hold theorem3's
    and the complement lookups): the name is the most loss recovered, the others are listed."""
    model = perturb(C.build("theorem3_superposed", 5, 30.0), gauge=1.0, noise=0.3, seed=0)
    mech = mechanism(model, batch_for(model, 512), exact=False)
    passing = [t for t in mech.tested if t.signs_agree and judge(t.circuit) == "faithful"]
    assert len(passing) >= 3
    best = max(passing, key=lambda t: (round(t.circuit.loss_recovered, 4), -t.n_atoms))
    assert mech.name == best.hypothesis
    assert set(mech.also_faithful) == {t.hypothesis for t in passing} - {best.hypothesis}
    losses = [t.circuit.loss_recovered for t in mech.tested[:len(passing)]]
    assert losses == sorted(losses, reverse=True) or max(losses) - min(losses) < 1e-3


def test_a_version_1_record_still_reads():
    model = C.build("two_block", 3)
    mech = mechanism(model, batch_for(model, 64), exact=False)
    old = mech.to_dict()
    for key in ("version", "z", "also_faithful", "borderline"):
        del old[key]
    for score in [old["minimal"]["score"], *(old["faithfulness"][k] for k in ("model", "circuit"))]:
        for key in ("rows_se", "recovered_se", "n"):
            del score[key]
    del old["minimal"]["optimal"], old["minimal"]["evaluations"]
    again = Mechanism.from_dict(old)
    assert again.name == "two_block" and again.also_faithful == () and not again.minimal.optimal


def _brute_force_smallest(model, batch, cells, reads):
    """Smallest faithful set of ``cells`` (all ``reads`` kept), by trying every subset."""
    tester = CircuitTester(model, batch)
    for k in range(1, len(cells) + 1):
        sizes = [s for s in combinations(cells, k)
                 if is_faithful(tester.circuit(Hypothesis("b", s, tuple(reads))))]
        if sizes:
            return k
    return None


def _appendix_b_among_distractors():
    """appendix_b at β = 20 with two_block's cells weaker and a distractor cell, gauged and noisy:
    the model, 256 samples and its atoms."""
    model = C.build("appendix_b", 5, 20.0)
    add_cells(model, C.REGISTRY["two_block"].cells, 4.0)
    add_cells(model, [(0, "pos.P", "pos.P", "J")], 3.0)
    model = perturb(model, gauge=2.0, noise=0.05, seed=3)
    return model, batch_for(model, 256), explain(model)


def test_the_exact_search_finds_the_smallest_circuit_among_distractors():
    """appendix_b (3 cells) with two_block's cells weaker and a distractor cell: the smallest
    faithful set is appendix_b's, by brute force over every subset of the candidates."""
    model, batch, circuit = _appendix_b_among_distractors()
    cells, reads = candidate_cells(circuit), read_candidates(model)
    assert 4 <= len(cells) <= 10
    smallest = _brute_force_smallest(model, batch, cells, reads)
    result = minimal_circuit(model, batch, circuit=circuit)
    own = {c.site for c in C.REGISTRY["appendix_b"].cells}
    assert result.faithful and result.optimal and result.size == smallest == len(own)
    assert {c[:4] for c in result.cells} == own
    assert result.at_least == result.size and result.gap == 0 and result.proof == "provably smallest"


def test_the_exact_search_beats_a_greedy_start_and_says_when_it_cannot_prove():
    model = perturb(C.build("theorem2", 6, 20.0), gauge=2.0, seed=4)
    batch = batch_for(model, 256)
    start = Hypothesis("all", C.REGISTRY["theorem2"].cells,
                       ("L2.x",))
    exact = minimal_circuit(model, batch, starts=[start])
    # at this β theorem2's lookups need not its -1 guard (99%+ of rows without it)
    assert exact.optimal and exact.size == 2 and exact.faithful
    capped = minimal_circuit(model, batch, starts=[start], exact=ExactSearch(max_evaluations=1))
    assert not capped.optimal and capped.faithful and capped.size >= exact.size
    assert capped.at_least == 1 and capped.proof == "" and capped.gap == capped.size - 1


def test_a_search_cut_short_states_the_sizes_it_ruled_out():
    """appendix_b among distractors (a 3-cell answer), the exact search with the budget for every
    single cell but not every pair: it proves no one cell faithful, and says so."""
    model, batch, circuit = _appendix_b_among_distractors()
    n = len(candidate_cells(circuit))
    cut = minimal_circuit(model, batch, circuit=circuit, exact=ExactSearch(max_evaluations=2 * n))
    assert cut.faithful and not cut.optimal and cut.size >= 3
    assert 2 <= cut.at_least < cut.size and cut.gap == cut.size - cut.at_least
    assert cut.proof == f"no faithful set of fewer than {cut.at_least} cells"
    assert MinimalCircuit.from_dict(cut.to_dict()) == cut


def test_mean_ablation_keeps_a_removed_cell_whose_contribution_never_varies():
    """two_block's layer-1 cell reads positions only (pos.Y, pos.P): its score contribution is the
    same on every input, so mean-ablating it changes nothing, while zeroing it breaks the model."""
    model = C.build("two_block", 5, 60.0)
    batch = batch_for(model, 128)
    only_layer_2 = [(1, 0, "pos.P", "L1.x", "I")]
    zero = faithfulness(model, only_layer_2, batch, read=("L2.x",), minimality=False)
    mean = faithfulness(model, only_layer_2, batch, read=("L2.x",), minimality=False,
                        ablation="mean")
    assert zero.circuit.rows_exact < 0.5
    assert mean.circuit.rows_exact == 1.0 and mean.circuit.mse < 1e-8
    with pytest.raises(ValueError, match="ablation"):
        faithfulness(model, only_layer_2, batch, ablation="shuffle")


def test_resample_ablation_puts_in_another_inputs_contribution():
    """A position-only cell's contribution is the same on every input: resampling it changes
    nothing. An input-dependent cell resampled from the next sample makes each sample look up the
    other sample's rows; the result equals a plain einsum of that paired contribution."""
    model = C.build("two_block", 5, 60.0)
    batch = batch_for(model, 128)
    only_layer_2 = [(1, 0, "pos.P", "L1.x", "I")]
    resample = faithfulness(model, only_layer_2, batch, read=("L2.x",), minimality=False,
                            ablation="resample")
    assert resample.circuit.rows_exact == 1.0 and resample.circuit.mse < 1e-8
    only_layer_1 = [(0, 0, "pos.Y", "pos.P", "I")]
    swapped = faithfulness(model, only_layer_1, batch, read=("L2.x",), minimality=False,
                           ablation="resample")
    assert swapped.circuit.rows_exact < 0.5
    # the same variant by hand: layer 2's removed score h R hᵀ taken on sample b + 1
    from helpers import run_with_weights

    from invperm_interp.analysis.faithfulness import read_out
    from invperm_interp.analysis.hypothesis import Hypothesis as H
    from invperm_interp.analysis.projection import project

    proj = project(model, H("l1", tuple(only_layer_1), ("L2.x",), "cells"), betas=False)
    removed = [f - k for f, k in zip(proj.fixed, proj.kept)]
    with torch.no_grad():
        _, cache = model.run_with_cache(batch.X)
    adds = []
    for layer, R in enumerate(removed):
        h = cache[f"blocks.{layer}.hook_resid_pre"].double()[torch.arange(128).add(1) % 128]
        adds.append(torch.einsum("btd,hde,bse->bhts", h, R, h))
    hooks = [(f"blocks.{layer}.attn.hook_attn_scores", lambda s, hook, a=a: s + a.to(s))
             for layer, a in enumerate(adds)]
    with model.hooks(fwd_hooks=hooks), torch.no_grad():
        out = run_with_weights(model, proj.kept, read_out(model, ("L2.x",)), batch.X)
    assert float(((out.double() - batch.Y.double()) ** 2).sum(-1).mean()) == pytest.approx(
        swapped.circuit.mse, rel=1e-6)


def test_clear_verdicts_use_the_screen_and_straddling_ones_the_whole_batch():
    model = perturb(C.build("two_block", 5, 8.0), gauge=1.0, noise=0.6, seed=2)
    batch = batch_for(model, 1536)
    first = faithfulness(model, "two_block", batch.head(512), minimality=False)
    # at the threshold measured on the first 512 samples, two_block straddles there: measured again
    mech = mechanism(model, batch, rule=Rule(0.0, first.circuit.loss_recovered), exact=False)
    by_name = {t.hypothesis: t for t in mech.tested}
    assert by_name["two_block"].circuit.n == 1536
    whole = faithfulness(model, "two_block", batch, minimality=False)
    assert by_name["two_block"].circuit.loss_recovered == pytest.approx(
        whole.circuit.loss_recovered, rel=1e-9)
    # every other construction is far from the threshold: decided on the first 512
    assert all(t.circuit.n == 512 for name, t in by_name.items() if name != "two_block")
    assert mech.minimal.score.n == 512


def test_name_on_another_batch_is_the_rule_without_the_minimal_circuit():
    model = perturb(C.build("appendix_b", 4, 10.0), gauge=1.0, noise=0.2, seed=3)
    batch = batch_for(model, 700)
    assert name_on(model, batch) == mechanism(model, batch, exact=False).answer \
        == ("faithful", "appendix_b", ())
    assert name_on(model, batch, ablation="mean") == ("faithful", "appendix_b", ())
    # the tests behind the answer, with and without the model less each circuit: the same scores
    full, bare = scores_behind(model, batch), scores_behind(model, batch, complete=False)
    assert all(t.without is not None for t in full) and all(t.without is None for t in bare)
    assert [(t.hypothesis, t.circuit) for t in full] == [(t.hypothesis, t.circuit) for t in bare]


def test_head_is_the_first_samples():
    model = C.build("two_block", 3)
    batch = batch_for(model, 10)
    head = batch.head(4)
    assert len(head) == 4 and head.layout == batch.layout
    for a, b in zip((head.X, head.P, head.Y, head.Y_P, head.perm),
                    (batch.X, batch.P, batch.Y, batch.Y_P, batch.perm)):
        assert torch.equal(a, b[:4])


@pytest.mark.parametrize("found,exhausted,below,bound,proved", [
    (True, True, 3, 26, True),    # a 2-cell set found after every 1-cell set failed
    (False, True, 3, 26, False),  # nothing below 3 cells; sizes 3..25 never tried
    (False, True, 4, 4, True),    # every size below the greedy answer tried: it is smallest
    (True, False, 3, 26, False),  # a size did not fit the budget
])
def test_the_search_claims_a_proof_only_when_every_smaller_size_was_tried(found, exhausted, below,
                                                                           bound, proved):
    from invperm_interp.analysis.minimal import proved_smallest

    assert proved_smallest(found, exhausted, below, bound) is proved


def test_a_rule_is_one_value_with_its_judgement_and_its_words():
    """The thresholds travel as one ``Rule``: its judgement is the interval test written out here
    (estimate ± z·se against each threshold), and a bad threshold is one error naming it."""
    rule = Rule(0.9, 0.5, z=2.0)
    assert rule.judge(Score(0.1, 0.95, 0.7, 0.01, 0.05, 100)) == "faithful"  # 0.93 > 0.9, 0.6 > 0.5
    assert rule.judge(Score(0.1, 0.95, 0.7, 0.03, 0.05, 100)) == "borderline"  # 0.89 < 0.9 < 1.01
    assert rule.judge(Score(0.1, 0.85, 0.7, 0.01, 0.05, 100)) == "not faithful"  # 0.87 < 0.9
    assert rule.is_faithful(Score(0.1, 0.9, 0.5)) and not rule.is_faithful(Score(0.1, 0.9, None))
    assert "90% of rows exact and 50% of the loss recovered" in str(rule)
    with pytest.raises(ValueError, match="rows must be in"):
        Rule(rows=1.5)
    with pytest.raises(ValueError, match="z must be a number"):
        Rule(z="2")
