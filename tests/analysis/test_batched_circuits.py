"""The batched circuit evaluator (``Tester.circuits``, ``test_many``, ``evaluate_many``) against
the hooked model with its weights replaced (``functional_call``), standard errors included, and
the record the report renders from without running the model."""

import io
import sys

import pytest
import torch
from helpers import differences

from invperm_interp.analysis.faithfulness import Tester as CircuitTester
from invperm_interp.analysis.faithfulness import evaluate_many, read_out, score
from invperm_interp.analysis.gauge import perturb
from invperm_interp.analysis.hypothesis import as_hypothesis
from invperm_interp.analysis.projection import project
from invperm_interp.analysis.record import analyze
from invperm_interp.maths import constructions
from invperm_interp.task import sample_batch
from invperm_interp.training.metrics import evaluate
from invperm_interp.viz.report import report_html


@pytest.fixture(scope="module")
def learned_like():
    """theorem3 at β = 10 with gauge and noise added: a deterministic causal-scratch model whose
    weights, like a trained one's, fill every cell."""
    model = perturb(constructions.build("theorem3", 5, 10.0), gauge=1.0, noise=0.05, seed=0)
    batch = sample_batch(model.cfg.layout, 128, torch.Generator().manual_seed(1),
                         dtype=torch.float64)
    return model, batch


def test_evaluate_many_scores_each_circuit_as_the_model_with_its_weights_replaced(learned_like):
    model, batch = learned_like
    names = ["theorem3", "theorem3_two_block", "theorem3_complement"]
    scores = evaluate_many(model, names, batch)
    tester = CircuitTester(model, batch)
    baseline, clean = 0.25 * model.cfg.d, tester.clean
    for name, got in zip(names, scores):
        hyp = as_hypothesis(model, name)
        kept = project(model, hyp).kept
        params = {f"blocks.{layer}.attn.A": A for layer, A in enumerate(kept)}
        params["unembed.W_U"] = read_out(model, hyp.read)
        with torch.no_grad():
            out = torch.func.functional_call(model, params, (batch.X,))
        want = score(out, batch, baseline, clean.mse, tester.clean_errors)
        assert got.rows_exact == want.rows_exact and got.n == want.n == len(batch)
        assert got.mse == pytest.approx(want.mse, rel=1e-9)
        assert got.loss_recovered == pytest.approx(want.loss_recovered, rel=1e-9)
        assert got.rows_se == pytest.approx(want.rows_se, rel=1e-9, abs=1e-15)
        assert got.recovered_se == pytest.approx(want.recovered_se, rel=1e-6, abs=1e-12)


def test_tester_reuses_fits_without_changing_them(learned_like):
    model, batch = learned_like
    tester = CircuitTester(model, batch)
    hyp = as_hypothesis(model, "theorem3")
    first, again = tester.test(hyp), tester.test(hyp)
    assert first == again == CircuitTester(model, batch).test(hyp)


def test_a_tester_given_the_clean_output_scores_as_one_that_ran_it(learned_like):
    """``output``: the model's own output, computed once by the analysis (``model_run``)."""
    from invperm_interp.model.variants import model_run

    model, batch = learned_like
    final, _ = model_run(model, batch.X)
    given = CircuitTester(model, batch, output=final @ model.unembed.W_U.detach())
    ran = CircuitTester(model, batch)
    assert given.clean.rows_exact == ran.clean.rows_exact
    assert given.clean.mse == pytest.approx(ran.clean.mse, rel=1e-12)
    hyp = as_hypothesis(model, "theorem3")
    assert given.test(hyp).circuit.loss_recovered == pytest.approx(
        ran.test(hyp).circuit.loss_recovered, rel=1e-9)
    with pytest.raises(ValueError, match="output must be the model's output on the batch"):
        CircuitTester(model, batch, output=final[:3] @ model.unembed.W_U.detach())




def test_mean_ablation_circuits_equal_the_hooked_model_with_the_mean_removed_scores_added(
        learned_like):
    """Batched circuits under mean ablation (the removed cells' scores ``h R hᵀ`` replaced by
    their batch mean) against the hooked model with those means added at ``hook_attn_scores``."""
    from helpers import run_with_weights

    model, batch = learned_like
    mean, zero = CircuitTester(model, batch, "mean"), CircuitTester(model, batch)
    hyps = [as_hypothesis(model, n) for n in ("theorem3", "theorem3_two_block")]
    together = mean.circuits(hyps)
    with torch.no_grad():
        streams = model.residual_streams(batch.X)
    for hyp, got in zip(hyps, together):
        proj = project(model, hyp)
        adds = [torch.einsum("btd,hde,bse->bhts", h.double(), F - K, h.double()).mean(0)
                for h, F, K in zip(streams, proj.fixed, proj.kept)]
        hooks = [(f"blocks.{layer}.attn.hook_attn_scores", lambda s, hook, a=a: s + a.to(s))
                 for layer, a in enumerate(adds)]
        with model.hooks(fwd_hooks=hooks):
            out = run_with_weights(model, proj.kept, read_out(model, hyp.read), batch.X)
        want = score(out, batch, 0.25 * model.cfg.d, mean.clean.mse, mean.clean_errors)
        assert got.mse == pytest.approx(want.mse, rel=1e-10)
        assert got.rows_exact == want.rows_exact and got.n == want.n
    assert together != zero.circuits(hyps)
    tested = mean.test_many(hyps)
    # run together, or beside the models without them, circuits read the union of their columns:
    # the same sums in another order
    for t, joint, alone in zip(tested, together, [mean.circuit(h) for h in hyps]):
        for other in (t.circuit, alone):
            assert other.mse == pytest.approx(joint.mse, rel=1e-12)
            assert other.rows_exact == joint.rows_exact and other.n == joint.n
    # tested beside another hypothesis or alone: the same numbers, but the variants' chunks differ,
    # so do the sums' order and (on some CPUs) their last bits
    alone = CircuitTester(model, batch, "mean").test(hyps[0])
    assert not differences(tested[0].to_dict(), alone.to_dict(), rel=1e-12, abs_tol=1e-12)


def test_the_record_carries_what_the_report_draws_and_the_report_does_not_run_the_model():
    model = constructions.build("theorem2", 4, 20.0)
    batch = sample_batch(model.cfg.layout, 64, torch.Generator().manual_seed(0), dtype=torch.float64)
    result = analyze(model, batch, "theorem2")
    acc = evaluate(model, batch)
    assert result.accuracy == pytest.approx(
        {"entry_acc": acc.entry_acc, "row_acc": acc.row_acc, "sample_acc": acc.sample_acc})
    _, cache = model.run_with_cache(batch.X[:1], names_filter=lambda n: n.endswith("hook_pattern"))
    for layer, pattern in enumerate(result.sample_patterns):
        torch.testing.assert_close(torch.tensor(pattern, dtype=torch.float64), cache["pattern", layer][0])
    assert type(result).from_json(result.to_json()) == result

    def refuse(*args, **kwargs):
        raise AssertionError("the report ran the model")

    model.forward = refuse
    assert "Attention on one sample" in report_html(model, result, batch)




@pytest.mark.parametrize("style", ["mean", "resample"])
def test_removed_scores_of_a_wide_model_equal_a_plain_numpy_sum(style):
    """Under mean and resample ablation a circuit's removed part ``R = gauge_fix(A) - gauge_fix(M)``
    and the model-less-circuit's ``gauge_fix(M)`` stand in through their cells (``Removed``, a
    few rows and columns of ``M``), and a part on every cell through the dense sum: on a 3-layer,
    2-head model with gauge and noise, all against ``h R hᵀ`` summed in numpy from the streams."""
    import numpy as np

    from invperm_interp.analysis.gauge import gauge_fix
    from invperm_interp.analysis.placements import hypothesis
    from invperm_interp.analysis.standin import Removed, few_cells
    from invperm_interp.maths.placement import Placement, build

    placed = Placement("theorem3", (0, 2), (1, 1), (2, 2, 2))
    model = perturb(build(placed, 4, 10.0), gauge=1.0, noise=0.05, seed=0)
    batch = sample_batch(model.cfg.layout, 48, torch.Generator().manual_seed(2), dtype=torch.float64)
    tester = CircuitTester(model, batch, style)
    proj = tester.project(hypothesis(model, placed), betas=False)
    with torch.no_grad():
        streams = [h.numpy() for h in model.residual_streams(batch.X)[:-1]]
    if style == "resample":  # sample b is fed from sample b + 1
        streams = [np.roll(h, -1, axis=0) for h in streams]
    fixed = [gauge_fix(A.detach().double(), model.stream, layer).numpy()
             for layer, A in enumerate(a.attn.A for a in model.blocks)]
    kept = [gauge_fix(M, model.stream, layer).numpy() for layer, M in enumerate(proj.raw)]
    raw = [a.attn.A.detach().double() for a in model.blocks]  # every cell: the dense path
    paths = []
    for whole, part, R in ((1.0, [-M for M in proj.raw], [f - k for f, k in zip(fixed, kept)]),
                           (0.0, list(proj.raw), kept), (0.0, raw, fixed)):
        got = tester._standin(Removed(whole, tuple(part)))
        for layer, (h, R_l) in enumerate(zip(streams, R)):
            want = np.einsum("btd,hde,bse->bhts", h, R_l, h)
            want = want.mean(0) if style == "mean" else want
            np.testing.assert_allclose(got[layer].numpy(), want, rtol=1e-9, atol=1e-9)
            paths.append(few_cells(part[layer], model.cfg.T))
    assert any(paths) and not all(paths)  # the cells' path and the dense one both checked


def test_analyze_refuses_a_batch_of_another_layout_before_running_the_model(learned_like):
    """One line naming both layouts (the clean run reads the batch first), not a shape error."""
    model, _ = learned_like
    other = sample_batch(constructions.build("theorem2", 5, 10.0).cfg.layout, 8,
                         torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(ValueError, match="batch layout .* differs from the model's"):
        analyze(model, other)
    with pytest.raises(ValueError, match="batch must be a Batch, got Tensor"):
        analyze(model, other.X)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:  # a bar redraws on a terminal
        return True


def test_circuits_still_running_after_a_while_show_a_progress_bar(learned_like, monkeypatch):
    """A wide model's minimal search fits circuits for tens of seconds: past ``PROGRESS_AFTER_S``
    a bar counts them; a quick batch (every 2 × 1 analysis's) prints nothing. Both score alike."""
    import importlib

    faithfulness = importlib.import_module("invperm_interp.analysis.faithfulness")  # the module
    model, batch = learned_like
    hyps = [as_hypothesis(model, name) for name in ("theorem3", "theorem3_two_block",
                                                    "theorem3_complement")]
    shown = {}
    for after in (60.0, 0.0):
        monkeypatch.setattr(faithfulness, "PROGRESS_AFTER_S", after)
        monkeypatch.setattr(sys, "stderr", _Terminal())
        scores = CircuitTester(model, batch).circuits(hyps)
        shown[after] = (sys.stderr.getvalue(), scores)
    assert shown[60.0][0] == "" and "circuits fitted and run" in shown[0.0][0]
    assert "/3 " in shown[0.0][0] and shown[60.0][1] == shown[0.0][1]  # counted out of 3
