"""Circuit claims tested by running them: faithfulness, completeness, minimality, the mechanism rule
and the minimal circuit, on constructions (where the answer is known) and perturbed constructions."""

import pytest
import torch
from helpers import add_cells, batch_for

from invperm_interp.analysis import (
    ModelAnalysis,
    analyze,
    explain,
    faithfulness,
    gauge_fix,
    is_faithful,
    mechanism,
    minimal_circuit,
    perturb,
)
from invperm_interp.analysis.hypothesis import Hypothesis, as_hypothesis
from invperm_interp.analysis.projection import project
from invperm_interp.analysis.score import Score
from invperm_interp.maths import constructions as C

# the written forms; each discovered one is held to its own checks (tests/analysis/test_registration.py)
WORKING = [n for n in C.names() if C.REGISTRY[n].works and not C.REGISTRY[n].provenance]

# Learned forms written with every cell the trained models need: at exact β the analytic model needs
# less (one of the superposed lookups; not the L1.pos.P half of the mass guard; not the content-mass
# guard), and the rule names what it needs.
MORE_THAN_ANALYTIC = {"theorem3_superposed": "theorem3",
                      "theorem3_superposed_complement": "theorem3_complement",
                      "theorem3_superposed_guarded": "theorem3",
                      "theorem3_superposed_complement_guarded": "theorem3_complement",
                      "theorem3_two_block_mass": "theorem3_two_block_mass"}


@pytest.mark.parametrize("name", [n for n in WORKING if n not in MORE_THAN_ANALYTIC])
def test_a_construction_is_its_own_faithful_complete_minimal_mechanism(name):
    """At d = 10 and the construction's ``beta_exact``: the ``-1`` guard cells only sharpen a lookup
    that works without them as β grows (at d = 4, β = 20 ``theorem2`` less its ``-1`` still gets every
    row exact), so minimality is a statement at a given β."""
    spec = C.REGISTRY[name]
    model = C.build(name, 10, spec.beta_exact)
    batch = batch_for(model, 256)
    mech = mechanism(model, batch)
    assert mech.name == name
    f = mech.faithfulness
    assert f.circuit.mse < 1e-8 and f.circuit.rows_exact == 1.0
    # complete: without its cells the model is broken. (Not always up to the causal floor: with A
    # zeroed, uniform attention averages the visible Y rows, which beats 0.5 everywhere a little.)
    assert f.without.rows_exact < 0.5 and f.without.loss_recovered < 0.25
    # minimal: each cell is needed
    assert len(f.minimality) == len(spec.cells)
    assert all(not is_faithful(s) for s in f.minimality)
    # the minimal circuit is exactly its cells (counting a -1 cell's gauge twin as the cell)
    found = {(c[0], c[2], c[3]) for c in mech.minimal.cells}
    assert found == {(c.layer, c.query, c.key) for c in spec.cells}
    assert mech.minimal.read == tuple(block for block, _ in spec.read_terms)


@pytest.mark.parametrize("name", MORE_THAN_ANALYTIC)
def test_the_learned_forms_are_faithful_and_complete_but_not_minimal_at_exact_beta(name):
    """Some cell can go in the analytic model (trained models need them all: assets/census.md)."""
    spec = C.REGISTRY[name]
    model = C.build(spec.name, 10, spec.beta_exact)
    batch = batch_for(model, 256)
    f = faithfulness(model, spec.name, batch)
    assert f.circuit.mse < 1e-8 and f.circuit.rows_exact == 1.0 and f.signs_agree
    assert f.without.rows_exact < 0.5 and f.without.loss_recovered < 0.25
    assert any(is_faithful(s) for s in f.minimality)  # some cell can go
    assert mechanism(model, batch).name == MORE_THAN_ANALYTIC[name]


@pytest.mark.parametrize("name,other", [("two_block", "appendix_b"), ("appendix_b", "two_block"),
                                        ("theorem3_two_block", "theorem3")])
def test_a_construction_with_another_faintly_added_is_still_named(name, other):
    beta = 100.0
    model = add_cells(C.build(name, 5, beta), C.REGISTRY[other].cells, beta / 50)
    model = perturb(model, gauge=3.0, seed=1)
    batch = batch_for(model, 256)
    assert C.verify(model, batch=batch).max_error < 0.1  # it still solves the task
    mech = mechanism(model, batch)
    assert mech.name == name
    assert mech.faithfulness.circuit.mse < 1e-3


@pytest.mark.parametrize("name", ["two_block", "appendix_b", "theorem3_two_block"])
def test_a_construction_missing_a_needed_cell_is_not_named(name):
    spec = C.REGISTRY[name]
    model = C.build(name, 5, spec.beta_exact)
    add_cells(model, [spec.cells[0]], -spec.beta_exact)  # remove it
    mech = mechanism(model, batch_for(model, 256))
    assert mech.name != name


@pytest.mark.parametrize("cells", ["appendix_b", "every cell but one", "two queries by two keys"])
def test_the_cell_fit_matches_a_dense_least_squares_reference(cells):
    """The fast normal-equation fit against ``lstsq`` over every entry of the cells, gauge-fixed:
    with fewer entries than gauge directions (appendix_b's two cells) and with more, and on
    every pair of two query and two key blocks (the Kronecker path, as appendix_b's one cell a
    layer)."""
    model = perturb(C.build("appendix_b", 3, 7.0), gauge=2.0, noise=0.5, seed=3)
    stream = model.stream
    if cells == "appendix_b":
        hyp = as_hypothesis(model, "appendix_b")
    elif cells == "two queries by two keys":
        hyp = Hypothesis("square", tuple((layer, 0, q, k, "I") for layer in range(2)
                                         for q in ("x", "pos.Y") for k in ("pos.P", "x")))
    else:
        every = [(layer, 0, q.name, k.name, "I") for layer in range(2)
                 for q in stream.blocks(layer) for k in stream.blocks(layer)]
        hyp = Hypothesis("most", tuple(every[1:]))
    proj = project(model, hyp)
    for layer in range(2):
        D = stream.width(layer)
        F = gauge_fix(model.blocks[layer].attn.A.detach()[0].double(), stream, layer)
        columns = []
        for cell in hyp.cells:
            if cell[0] != layer:
                continue
            for a in range(*stream.slice(cell[2], layer).indices(D)):
                for b in range(*stream.slice(cell[3], layer).indices(D)):
                    E = torch.zeros(D, D, dtype=torch.float64)
                    E[a, b] = 1.0
                    columns.append(gauge_fix(E, stream, layer).reshape(-1))
        Phi = torch.stack(columns, dim=1)
        coef = torch.linalg.lstsq(Phi, F.reshape(-1, 1), driver="gelsd").solution
        assert torch.allclose(proj.kept[layer][0], (Phi @ coef).reshape(D, D), atol=1e-9)


@pytest.mark.parametrize("sites", [[("x", "pos.P")], [("x", "pos.P"), ("x", "x"), ("pos.Y", "pos.P"),
                                                       ("pos.Y", "x")], [("x", "pos.P"), ("pos.Y", "x")]])
def test_the_raw_cell_fit_is_the_normal_equations_solution_formed_densely(sites):
    """The fitted ``M`` itself (what the circuit-only model runs; the normal equations leave it
    free along their null space): ``m = F_S + G (1 - G)⁺ F_S`` with ``1 - G`` the rows and
    columns ``S`` of ``(1 - Π_null) ⊗ (1 - Π_key)``, formed densely in numpy, for one cell, a
    product of blocks (the Kronecker path) and two cells that are not one."""
    import numpy as np

    from invperm_interp.analysis.gauge import gauge_projectors

    model = perturb(C.build("appendix_b", 3, 7.0), gauge=2.0, noise=0.5, seed=4)
    stream = model.stream
    hyp = Hypothesis("cells", tuple((layer, 0, q, k, "I") for layer in range(2) for q, k in sites))
    proj = project(model, hyp)
    for layer in range(2):
        D = stream.width(layer)
        F = gauge_fix(model.blocks[layer].attn.A.detach()[0].double(), stream, layer).numpy()
        P_null, P_key = (p.numpy() for p in gauge_projectors(stream, layer))
        whole = np.kron(np.eye(D) - P_null, np.eye(D) - P_key)  # vec(gauge_fix(M)), row-major
        mask = np.zeros((D, D), dtype=bool)
        for q, k in sites:
            mask[stream.slice(q, layer), stream.slice(k, layer)] = True
        S = np.flatnonzero(mask)
        Cm = whole[np.ix_(S, S)]
        F_S = F.reshape(-1)[S]
        m = F_S + (np.eye(len(S)) - Cm) @ (np.linalg.pinv(Cm, rcond=1e-10, hermitian=True) @ F_S)
        M = np.zeros(D * D)
        M[S] = m
        np.testing.assert_allclose(proj.raw[layer][0].numpy(), M.reshape(D, D), atol=1e-9)


def test_the_circuit_of_every_cell_is_the_model():
    model = perturb(C.build("two_block", 3, 9.0), gauge=1.0, noise=0.3, seed=0)
    batch = batch_for(model, 64)
    cells = [(layer, 0, q.name, k.name, "I") for layer in range(2)
             for q in model.stream.blocks(layer) for k in model.stream.blocks(layer)]
    f = faithfulness(model, Hypothesis("all", tuple(cells)), batch, minimality=False)
    assert abs(f.circuit.mse - f.model.mse) < 1e-9 and abs(f.weight_share - 1.0) < 1e-9
    with torch.no_grad():
        out = model(batch.X)
    assert abs(f.model.mse - float(((out - batch.Y) ** 2).sum(-1).mean())) < 1e-12


@pytest.mark.parametrize("unit", ["cells", "atoms"])
def test_raw_weights_are_the_projection_s_raw_part(unit):
    """What a circuit-only model runs (``raw_weights``, the circuits' path) is ``project``'s
    ``raw``, with and without a shared fits cache, whichever fills the cache first."""
    from invperm_interp.analysis.projection import fixed_weights, raw_weights

    model = perturb(C.build("theorem2", 4, 6.0), gauge=1.0, noise=0.2, seed=1)
    fixed = fixed_weights(model)
    hyps = [as_hypothesis(model, "theorem2", unit=unit), as_hypothesis(model, "two_block", unit=unit),
            Hypothesis("one", ((1, 0, "pos.P", "L1.x", "I"),), None, unit)]
    for hyp in hyps:
        expected = project(model, hyp, fixed=fixed, betas=False).raw
        fits: dict = {}
        for got in (raw_weights(model, hyp, fixed), raw_weights(model, hyp, fixed, fits),
                    project(model, hyp, fixed=fixed, fits=fits).raw, raw_weights(model, hyp, fixed, fits)):
            assert len(got) == len(expected)
            for a, b in zip(got, expected):
                assert torch.equal(a, b)
        assert any(bool(r.any()) for r in expected)


def test_a_tester_runs_each_circuit_once_and_its_scores_stay_its_own():
    """A circuit met again on one tester (a construction's circuit, then a start of the minimal
    search) is scored once; the same sites in another order or with other labels (a cells fit
    reads the sites only) are the same circuit; a record's dict is a copy, so editing it leaves
    the score as it was."""
    from invperm_interp.analysis.faithfulness import Tester

    model = perturb(C.build("theorem2", 4), gauge=1.0, noise=0.2, seed=1)
    tester = Tester(model, batch_for(model, 64))
    calls = []
    run_many = tester.run_many

    def counted(variants, removed=None):
        calls.append(len(variants))
        return run_many(variants, removed)

    tester.run_many = counted
    hyp = as_hypothesis(model, "theorem2")
    relabelled = Hypothesis("again", tuple(c[:4] + ("J",) for c in reversed(hyp.cells)), hyp.read)
    first, less = tester.circuits([hyp, hyp.without(0)])
    again, same, also_less = tester.circuits([hyp, relabelled, hyp.without(0)])
    assert calls == [2] and again is first and same is first and also_less is less
    fresh = Tester(model, tester.batch).circuits([hyp.without(0), hyp])
    assert fresh == [less, first]  # what the memo hands back is what a run gives
    record = first.to_dict()
    record.clear()
    assert first.mse == fresh[1].mse and first.to_dict() == fresh[1].to_dict()


@pytest.mark.parametrize("sites", [
    [("x", "pos.P"), ("L1h0.pos.Y", "L2h1.x")],
    [("L1h1.x", "L1h0.pos.P"), ("pos.Y", "L2h0.pos.Y"), ("L2h1.pos.P", "x")],
    [(q, k) for q in ("x", "pos.Y", "L1h0.x", "L1h1.pos.P", "L2h0.x", "L2h1.pos.Y")
     for k in ("pos.P", "L1h0.pos.Y", "L1h1.x", "L2h0.pos.P", "L2h1.x", "x")][1:]])
@pytest.mark.parametrize("cholesky_from", [None, 1])
def test_the_cell_fit_on_a_third_layer_of_two_heads_is_the_dense_normal_equations(
        sites, cholesky_from, monkeypatch):
    """Where the gauge has several query-null and key-gauge directions (a 3 × 2 model's third
    layer: 8 and 9), the fit of cells that are not a product of blocks, a few of them (fewer
    entries than the gauge directions they see) and most pairs of six query and six key blocks
    (more), against ``m = F_S + (1 - C) C⁺ F_S`` with ``C`` the entries' rows and columns of
    ``(1 - Π_null) ⊗ (1 - Π_key)``, formed entry by entry in numpy. (The 2 × 1 references above
    pass with the key gauge's square root left out of the fit; this one does not.) With
    ``cholesky_from=1`` every solve takes ``projection.psd_solve``'s Cholesky path where the
    spectrum allows it (a fit this small takes it only so)."""
    import numpy as np

    from invperm_interp.analysis import projection
    from invperm_interp.analysis.gauge import gauge_projectors
    from invperm_interp.maths.placement import Placement, build

    if cholesky_from is not None:
        monkeypatch.setattr(projection, "CHOLESKY_FROM", cholesky_from)
    model = perturb(build(Placement("appendix_b", (0, 2), (1, 1), (2, 2, 2)), 3, 7.0), gauge=2.0,
                    noise=0.5, seed=5)
    stream, layer, head = model.stream, 2, 1
    proj = project(model, Hypothesis("cells", tuple((layer, head, q, k, "I") for q, k in sites)))
    D = stream.width(layer)
    F = gauge_fix(model.blocks[layer].attn.A.detach()[head].double(), stream, layer).numpy()
    P_null, P_key = (p.numpy() for p in gauge_projectors(stream, layer))
    mask = np.zeros((D, D), dtype=bool)
    for q, k in sites:
        mask[stream.slice(q, layer), stream.slice(k, layer)] = True
    a, b = np.nonzero(mask)  # row-major, as the fit orders its entries
    Cm = (np.eye(D) - P_null)[np.ix_(a, a)] * (np.eye(D) - P_key)[np.ix_(b, b)]
    F_S = F[a, b]
    m = F_S + (np.eye(len(a)) - Cm) @ (np.linalg.pinv(Cm, rcond=1e-10, hermitian=True) @ F_S)
    M = np.zeros((D, D))
    M[a, b] = m
    np.testing.assert_allclose(proj.raw[layer][head].numpy(), M, atol=1e-9)
    assert not proj.raw[layer][0].any()  # the other head holds no cell


def test_the_fitted_beta_is_the_model_s_own():
    model = perturb(C.build("two_block", 4, 37.0), gauge=5.0, seed=2)
    f = faithfulness(model, "two_block", batch_for(model, 32), minimality=False)
    assert f.betas == pytest.approx((37.0, 37.0), rel=1e-9)
    atoms = faithfulness(model, "two_block", batch_for(model, 32), unit="atoms", minimality=False)
    assert atoms.betas == pytest.approx((37.0, 37.0), rel=1e-9)
    assert atoms.circuit.mse == pytest.approx(f.circuit.mse, abs=1e-12)


def test_baseline_and_loss_recovered():
    model = C.build("theorem2", 4)
    f = faithfulness(model, "two_block", batch_for(model, 256), minimality=False)
    assert f.baseline == 1.0  # 0.5 everywhere: d/4
    assert f.circuit.loss_recovered == pytest.approx((1.0 - f.circuit.mse) / (1.0 - f.model.mse))


def reference_score(out, Y, baseline, model_mse, model_errors=None):
    """One output's score written out: the note's MSE, the share of exact rows, loss recovered
    and the standard errors over samples (the delta method, paired with the model's own errors)."""
    per = (out.double() - Y.double()).pow(2).sum(-1).mean(-1)  # (B,)
    err = float(((out - Y) ** 2).sum(-1).mean())
    exact = (out.round() == Y).all(-1).double()  # (B, rows)
    n = len(per)
    rows_se = float(exact.mean(-1).std(unbiased=True)) / n ** 0.5 if n > 1 else 0.0
    gap = baseline - model_mse
    if gap <= 1e-12:
        return Score(err, float(exact.mean()), None, rows_se, None, n)
    recovered = (baseline - err) / gap
    m = model_errors if model_errors is not None else torch.full_like(per, model_mse)
    se = float((per - recovered * m).std(unbiased=True)) / (n ** 0.5 * gap) if n > 1 else 0.0
    return Score(err, float(exact.mean()), recovered, rows_se, se, n)


@pytest.mark.parametrize("n, model_mse, own_errors", [
    (64, 0.3, True), (64, 0.3, False), (1, 0.3, True), (64, 1.0, True),  # 1.0: no gap to recover
])
@pytest.mark.parametrize("per_chunk", [5, 2, 1])
def test_scores_of_many_outputs_are_each_output_s_score_bit_for_bit(n, model_mse, own_errors,
                                                                    per_chunk, monkeypatch):
    """``scores`` reduces the variants together, ``per_chunk`` of them at a time; each must equal
    its output's score written out alone, float for float (verdicts compare them with thresholds),
    and so must ``score``, including a batch of one sample and a model without a gap to recover
    (``loss_recovered`` None)."""
    from invperm_interp.analysis import score as score_module
    from invperm_interp.analysis.score import score, scores

    monkeypatch.setattr(score_module, "SCORE_ELEMENTS", per_chunk * n * 4 * 4)  # (n, d, d), d = 4

    model = C.build("theorem2", 4)
    batch = batch_for(model, n)
    generator = torch.Generator().manual_seed(3)
    outs = batch.Y + torch.randn(5, *batch.Y.shape, generator=generator) * torch.tensor(
        [0.01, 0.2, 0.45, 0.6, 2.0])[:, None, None, None]  # (5, n, d, d): exact rows to none
    errors = torch.rand(n, generator=generator, dtype=torch.float64) if own_errors else None
    want = [reference_score(o, batch.Y, 1.0, model_mse, errors) for o in outs]
    assert scores(list(outs), batch, 1.0, model_mse, errors) == want
    assert [score(o, batch, 1.0, model_mse, errors) for o in outs] == want
    assert scores([], batch, 1.0, model_mse, errors) == []
    assert len({s.rows_exact for s in want}) > 2 or n == 1


@pytest.mark.parametrize("hypothesis,match", [
    ("no_such_construction", "construction name"),
    ([(0, "pos.P", "pos.Q", "I")], "pos.Q"),
    ([(0, "pos.P", "L1.x", "I")], "L1.x"),
    ([(2, "pos.P", "x", "I")], "layer"),
    ([(0, "pos.P", "x", "K")], "label"),
    ("theorem3", "theorem3"),  # a scratch, causal construction on a plain bidirectional model
    (42, "hypothesis"),
])
def test_bad_hypotheses_are_named(hypothesis, match):
    model = C.build("two_block", 3)
    with pytest.raises(ValueError, match=match):
        faithfulness(model, hypothesis, batch_for(model, 8))


def test_minimal_circuit_of_a_perturbed_construction_is_its_cells():
    model = perturb(C.build("theorem2", 10, 20.0), gauge=2.0, seed=4)
    result = minimal_circuit(model, batch_for(model, 256))
    assert result.faithful
    assert {c.site for c in result.cells} == {c.site for c in C.REGISTRY["theorem2"].cells}


def test_a_faithful_start_bounds_the_minimal_circuit_the_greedy_search_misses():
    """Candidates that lack a needed cell leave the greedy search with nothing faithful; a
    construction known to be faithful, given as a start, is pruned to the minimal circuit instead."""
    model = perturb(C.build("theorem2", 6, 20.0), gauge=2.0, seed=4)
    batch = batch_for(model, 256)
    needed = C.REGISTRY["theorem2"].cells[-1]  # I at (L1.pos.P, pos.Y): the fetch
    atoms = [a for a in explain(model) if (a.layer, a.head, a.query, a.key) != needed.site]
    assert not minimal_circuit(model, batch, circuit=atoms).faithful
    start = as_hypothesis(model, "theorem2")
    result = minimal_circuit(model, batch, circuit=atoms, starts=[start])
    assert result.faithful and result.score.rows_exact >= 0.99
    assert {c[:4] for c in result.cells} <= {c[:4] for c in start.cells}
    assert result.size <= len({c[:4] for c in start.cells})


def test_a_fallback_is_pruned_only_when_nothing_else_is_faithful():
    """A faithful hypothesis given as ``fallback`` (in ``mechanism``: a construction whose circuit
    is faithful but whose signs disagree) answers when the greedy search and the starts find
    nothing, and is not even scored when they find a faithful set."""
    model = perturb(C.build("theorem2", 6, 20.0), gauge=2.0, seed=4)
    batch = batch_for(model, 256)
    needed = C.REGISTRY["theorem2"].cells[-1]
    atoms = [a for a in explain(model) if (a.layer, a.head, a.query, a.key) != needed.site]
    start = as_hypothesis(model, "theorem2")
    alone = minimal_circuit(model, batch, circuit=atoms, starts=[start])
    rescued = minimal_circuit(model, batch, circuit=atoms, fallback=[start])
    assert rescued.faithful and rescued.cells == alone.cells and rescued.read == alone.read
    found = minimal_circuit(model, batch)  # the greedy search alone is faithful here
    assert found.faithful
    beside = minimal_circuit(model, batch, fallback=[start])
    assert beside == found  # same cells, score and evaluations: the fallback was never scored


def test_model_analysis_round_trips_through_json():
    model = C.build("theorem3_two_block", 3)
    record = analyze(model, batch_for(model, 32), "construction")
    again = ModelAnalysis.from_json(record.to_json())
    assert again == record
    assert again.mechanism.name == "theorem3_two_block"
    with pytest.raises(ValueError, match="version"):
        ModelAnalysis.from_json(record.to_json().replace('"version": 1', '"version": 0'))


@pytest.mark.parametrize("name, text", [("two_block", "2 cells"),
                                        ("theorem3_complement", "3 cells (4 atoms)")])
def test_a_cell_holding_two_templates_counts_once_as_a_cell_twice_as_atoms(name, text):
    model = C.build(name, 5, C.REGISTRY[name].beta_exact)
    f = faithfulness(model, name, batch_for(model, 64), minimality=False)
    assert f.size_text == text and f.n_atoms == len(C.REGISTRY[name].cells)


@pytest.mark.parametrize("singular", [False, True])
def test_psd_solve_is_numpys_pseudo_inverse_by_cholesky_only_where_nothing_is_cut(singular,
                                                                                  monkeypatch):
    """``projection.psd_solve`` against ``numpy.linalg.pinv`` (cut at ``PINV_RTOL``): a
    well-conditioned 600 × 600 matrix is solved without forming a pseudo-inverse, a nearly
    singular one (100 eigenvalues at 1e-13, under the cut: Cholesky would succeed and blow them up;
    the fit's normal equations are so when a gauge direction lies inside the cells) by the
    pseudo-inverse."""
    import numpy as np

    from invperm_interp.analysis import projection

    rng = np.random.default_rng(3)
    Q = np.linalg.qr(rng.standard_normal((600, 600)))[0]
    spectrum = rng.uniform(0.07, 1.0, 600)
    if singular:
        spectrum[:100] = 1e-13
    C = (Q * spectrum) @ Q.T
    C = (C + C.T) / 2
    x = rng.standard_normal(600)
    pinv = torch.linalg.pinv
    calls = []
    monkeypatch.setattr(torch.linalg, "pinv", lambda *a, **k: calls.append(1) or pinv(*a, **k))
    got = projection.psd_solve(torch.from_numpy(C), torch.from_numpy(x)).numpy()
    want = np.linalg.pinv(C, rcond=projection.PINV_RTOL, hermitian=True) @ x
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)
    assert len(calls) == int(singular)


def test_the_structured_gram_is_the_gauge_rows_product():
    """``projection._gauge_gram`` (the large fits' ``BᵀB`` from the rows' structure) against
    ``B.T @ B`` formed from ``_gauge_rows``, on a 3 × 2 model's third layer: random sets of cells,
    more and fewer entries than gauge directions, and a layer with no query-null direction."""
    import random

    from invperm_interp.analysis.projection import _entries, _gauge_gram, _gauge_rows, gauge_factors
    from invperm_interp.maths.placement import Placement, build

    model = build(Placement("appendix_b", (0, 2), (1, 1), (2, 2, 2)), 3, 7.0)
    for layer in (0, 2):
        U, _, V = gauge_factors(model.stream, layer)
        D, blocks = model.stream.width(layer), model.stream.blocks(layer)
        pairs = [(q, k) for q in blocks for k in blocks]
        for seed in range(3):
            mask = torch.zeros(D, D, dtype=torch.bool)
            for q, k in random.Random(seed).sample(pairs, min(len(pairs), 5 + 12 * seed)):
                mask[q.slice, k.slice] = True
            idx = mask.reshape(-1).nonzero().squeeze(1)
            entries = _entries(V, idx // D, idx % D)
            B = _gauge_rows(U, V, entries)
            torch.testing.assert_close(_gauge_gram(U, V, entries), B.T @ B,
                                       rtol=0, atol=1e-12)


def test_psd_solve_bounds_the_inverse_and_falls_back_to_its_trace_where_the_bound_is_loose(
        monkeypatch):
    """``_inverse_bound(L)`` is at least ``‖(L Lᵀ)⁻¹‖₂`` (numpy's) on random positive definite
    matrices; for ``L`` with ones below its diagonal (``L⁻¹`` is bidiagonal, but the comparison
    matrix's inverse grows as 2ⁿ) it is useless, and ``psd_solve`` still avoids the
    pseudo-inverse through ``tr C⁻¹``, matching numpy's."""
    import numpy as np

    from invperm_interp.analysis import projection

    rng = np.random.default_rng(7)
    for n in (5, 40, 200):
        A = rng.standard_normal((n, n))
        C = torch.from_numpy(A @ A.T + 0.1 * np.eye(n))
        bound = projection._inverse_bound(torch.linalg.cholesky(C))
        assert bound >= np.linalg.norm(np.linalg.inv(C.numpy()), 2) * (1 - 1e-12)
    L = torch.tril(torch.ones(600, 600, dtype=torch.float64))
    C = L @ L.T
    assert projection._inverse_bound(L) > 1e100
    x = torch.from_numpy(rng.standard_normal(600))
    pinv = torch.linalg.pinv
    calls = []
    monkeypatch.setattr(torch.linalg, "pinv", lambda *a, **k: calls.append(1) or pinv(*a, **k))
    got = projection.psd_solve(C, x).numpy()
    want = np.linalg.pinv(C.numpy(), rcond=projection.PINV_RTOL, hermitian=True) @ x.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-9)
    assert not calls
