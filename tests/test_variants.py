"""Batched weight variants (``model.variants``), the batched circuit evaluator, the Lemma 1
certificate and the record the report renders from, each against an independent reference: the
hooked model's own forward (``functional_call``, ``run_with_cache``) and a dense ``jacrev``."""

import pytest
import torch
from helpers import run, small

from invperm_interp import Layout, ModelConfig
from invperm_interp.analysis.faithfulness import Tester as CircuitTester
from invperm_interp.analysis.faithfulness import evaluate_many, project, read_out, score
from invperm_interp.analysis.gauge import perturb
from invperm_interp.analysis.hypothesis import as_hypothesis
from invperm_interp.analysis.record import ModelAnalysis, analyze
from invperm_interp.cli.main import main
from invperm_interp.maths import constructions
from invperm_interp.maths.floors import dependency_map
from invperm_interp.model.hooked import HookedDisentangledTransformer
from invperm_interp.model.variants import forward_many
from invperm_interp.task import sample_batch
from invperm_interp.training.metrics import evaluate
from invperm_interp.viz.report import report_html

CONFIGS = [
    ModelConfig(Layout.plain(4), attention_dir="bidirectional", readout="P", n_heads=2, n_layers=3,
                dtype="float64"),
    ModelConfig(Layout.scratch(4), attention_dir="causal", readout="S", n_heads=(1, 2), n_layers=2,
                dtype="float64"),
]


def _reference(model, As, W_U, X):
    """The hooked model with its weights replaced: output and per-layer patterns."""
    with torch.no_grad():
        for layer, A in enumerate(As):
            model.blocks[layer].attn.A.copy_(A)
        model.unembed.W_U.copy_(W_U)
        out, cache = model.run_with_cache(X, names_filter=lambda n: n.endswith("hook_pattern"),
                                          return_cache_object=False)
    return out, [cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(len(As))]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["bidirectional-3x2", "causal-scratch"])
def test_forward_many_is_the_model_forward_for_sparse_and_dense_variants(cfg):
    g = torch.Generator().manual_seed(0)
    model = HookedDisentangledTransformer(cfg)
    X = sample_batch(cfg.layout, 32, g, dtype=torch.float64).X
    variants = []
    for density in (0.0, 0.05, 0.3, 1.0):  # all zero, a few cells, most, every entry
        As = [torch.randn(b.attn.A.shape, generator=g, dtype=torch.float64)
              * (torch.rand(b.attn.A.shape, generator=g) < density) for b in model.blocks]
        W_U = torch.randn(model.unembed.W_U.shape, generator=g, dtype=torch.float64)
        W_U *= torch.rand(W_U.shape[0], 1, generator=g) < max(density, 0.2)
        variants.append((As, W_U))
    outs = forward_many(cfg, variants, X)
    one_by_one = forward_many(cfg, variants, X, max_elements=1)
    with_patterns = forward_many(cfg, variants, X, patterns=True)
    for (As, W_U), out, single, (out_p, pats) in zip(variants, outs, one_by_one, with_patterns):
        ref, ref_pats = _reference(model, As, W_U, X)
        for got in (out, single, out_p):
            torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-10)
        for p, q in zip(pats, ref_pats):
            torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


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
    baseline, clean = 0.25 * model.cfg.d, CircuitTester(model, batch).clean
    for name, got in zip(names, scores):
        hyp = as_hypothesis(model, name)
        kept = project(model, hyp).kept
        params = {f"blocks.{layer}.attn.A": A for layer, A in enumerate(kept)}
        params["unembed.W_U"] = read_out(model, hyp.read)
        with torch.no_grad():
            out = torch.func.functional_call(model, params, (batch.X,))
        want = score(out, batch, baseline, clean.mse)
        assert got.rows_exact == want.rows_exact
        assert got.mse == pytest.approx(want.mse, rel=1e-9)
        assert got.loss_recovered == pytest.approx(want.loss_recovered, rel=1e-9)


def test_tester_reuses_fits_without_changing_them(learned_like):
    model, batch = learned_like
    tester = CircuitTester(model, batch)
    hyp = as_hypothesis(model, "theorem3")
    first, again = tester.test(hyp), tester.test(hyp)
    assert first == again == CircuitTester(model, batch).test(hyp)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["bidirectional-3x2", "causal-scratch"])
def test_dependency_map_equals_the_dense_jacobian(cfg):
    model = HookedDisentangledTransformer(cfg, seed=0)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.A.normal_(generator=torch.Generator().manual_seed(2))
    X = sample_batch(cfg.layout, 3, torch.Generator().manual_seed(3), dtype=torch.float64).X
    deps = dependency_map(model, X)
    jac = torch.func.jacrev(lambda x: model(x).sum(0))(X)  # (d, d, B, T, d): the dense check
    dense = jac.pow(2).sum(dim=(1, 4)).sqrt().amax(dim=1)
    torch.testing.assert_close(deps.norms, dense, rtol=1e-10, atol=1e-12)
    later = torch.arange(cfg.T)[None, :] > torch.tensor(deps.positions)[:, None]
    assert deps.causal_ok == cfg.causal == bool((dense[later] == 0).all())


def test_the_record_carries_what_the_report_draws_and_the_report_does_not_run_the_model():
    model = constructions.build("theorem2", 4, 20.0)
    batch = sample_batch(model.cfg.layout, 64, torch.Generator().manual_seed(0), dtype=torch.float64)
    result = analyze(model, batch, "theorem2")
    acc = evaluate(model, batch)
    assert result.accuracy == pytest.approx({k: acc[k] for k in ("entry_acc", "row_acc", "sample_acc")})
    _, cache = model.run_with_cache(batch.X[:1], names_filter=lambda n: n.endswith("hook_pattern"))
    for layer, pattern in enumerate(result.sample_patterns):
        torch.testing.assert_close(torch.tensor(pattern, dtype=torch.float64), cache["pattern", layer][0])
    assert type(result).from_json(result.to_json()) == result

    def refuse(*args, **kwargs):
        raise AssertionError("the report ran the model")

    model.forward = refuse
    assert "Attention on one sample" in report_html(model, result, batch)


@pytest.mark.slow
def test_report_directory_analyses_runs_in_workers_and_reuses_their_records(tmp_path):
    for seed in (0, 1):
        model_cfg, train_cfg = small(3, seed=seed, out_dir=str(tmp_path / f"run{seed}"))
        run(model_cfg, train_cfg)
    assert main(["report", str(tmp_path), "--n", "32", "--workers", "2"]) == 0
    for seed in (0, 1):
        run_dir = tmp_path / f"run{seed}"
        record = ModelAnalysis.from_json((run_dir / "analysis.json").read_text())
        assert record.n_samples == 32 and record.sample_patterns is not None
        (run_dir / "report.html").unlink()
    written = (tmp_path / "run0" / "analysis.json").stat().st_mtime_ns
    assert main(["report", str(tmp_path), "--n", "32", "--workers", "1"]) == 0
    assert (tmp_path / "run0" / "analysis.json").stat().st_mtime_ns == written  # reused
    assert (tmp_path / "run0" / "report.html").is_file()
