"""Template matching on gauge-fixed weights: the constructions' cells come back exactly, gauge
directions change nothing but the raw cosines, and ties modulo gauge go to the raw weights."""

import pytest
import torch

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch
from invperm_interp.analysis import explain, gauge_check, match_templates, perturb
from invperm_interp.maths import constructions as C

WORKING = [n for n in C.names() if C.REGISTRY[n].works]
BETA = 37.0  # not a round number: a β recovered by accident would show
F64 = torch.float64


def patterns(model, X):
    _, cache = model.run_with_cache(X, names_filter=lambda n: n.endswith("hook_pattern"),
                                    return_cache_object=False)
    return [cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(model.cfg.n_layers)]


def blank(layout, heads=(1, 1), attention_dir="bidirectional"):
    cfg = ModelConfig(layout, n_layers=len(heads), n_heads=list(heads), attention_dir=attention_dir,
                      dtype="float64", init="zeros")
    return HookedDisentangledTransformer(cfg)


def place(model, layer, query, key, values, head=0):
    with torch.no_grad():
        cell = model.stream.split(model.blocks[layer].attn.A.data[head], layer)[(query, key)]
        cell += values


@pytest.mark.parametrize("d", [2, 5, 10])
@pytest.mark.parametrize("name", C.names())
def test_circuit_is_exactly_the_registry_cells(name, d):
    cells = C.REGISTRY[name].cells
    opposite = {"-I": "1", "I": "-1"}  # 1 - I is J and I - 1 is -J at d = 2
    if d == 2 and any(c.label in opposite and c._replace(label=opposite[c.label]) in cells for c in cells):
        pytest.skip("1 - I is J at d = 2: the sparser reading wins, as it should")
    model = C.build(name, d, BETA)
    circuit = explain(model)
    if d == 2 and any(c.label == "-J" for c in circuit.cells() - set(cells)):
        pytest.skip("I beside a 1 that is -1 at the same cell modulo the gauge is -J at d = 2")
    assert circuit.cells() == set(C.REGISTRY[name].cells)
    for atom in circuit:
        assert atom.scale == pytest.approx(BETA, rel=0.01)
        assert atom.score == pytest.approx(1.0, abs=1e-9)
        shared = sum((c.layer, c.query, c.key) == (atom.layer, atom.query, atom.key)
                     for c in C.REGISTRY[name].cells)
        if shared == 1:  # a raw cell holding two templates (1 - I) matches neither alone
            assert atom.raw_score == pytest.approx(1.0)
    assert max(circuit.residual_share) < 1e-9
    in_circuit = {(a.layer, a.query, a.key): a for a in circuit}
    for row in match_templates(model):
        atom = in_circuit.get((row.layer, row.query, row.key))
        assert row.residual < 1e-9  # nothing else above a small threshold, anywhere
        if sum((c.layer, c.query, c.key) == (row.layer, row.query, row.key)
               for c in C.REGISTRY[name].cells) > 1:
            continue  # a cell holding two templates: the table shows the stronger one
        if atom is None:
            assert row.template == "zeros" and row.raw_template == "zeros" and row.raw_norm_share == 0
        else:
            assert (row.template, row.beta) == (atom.template, atom.beta)
            assert row.raw_template == atom.template and row.raw_score == pytest.approx(1.0)
            assert row.raw_beta == pytest.approx(atom.beta)


@pytest.mark.parametrize("d", [5, 10])
@pytest.mark.parametrize("name", WORKING)
def test_gauge_directions_change_patterns_and_fixed_scores_by_nothing(name, d):
    model = C.build(name, d, BETA)
    gauged = perturb(model, gauge=0.3 * BETA, seed=d)
    X = sample_batch(model.cfg.layout, 16, torch.Generator().manual_seed(d), dtype=F64).X
    for before, after in zip(patterns(model, X), patterns(gauged, X)):
        assert torch.allclose(before, after, atol=1e-9)
    clean, noisy = explain(model), explain(gauged)
    assert noisy.cells() == clean.cells()
    for a, b in zip(clean, noisy):
        assert b.beta == pytest.approx(a.beta, rel=1e-9) and b.score == pytest.approx(a.score, abs=1e-9)
    fixed = {(r.layer, r.query, r.key): r for r in match_templates(model)}
    for row in match_templates(gauged):
        ref = fixed[(row.layer, row.query, row.key)]
        assert (row.template, row.norm_share) == (ref.template, pytest.approx(ref.norm_share, abs=1e-9))
        assert row.score == pytest.approx(ref.score, abs=1e-9)
    raw = [a.raw_score for a in noisy]
    assert min(raw) < 0.9 and sum(raw) / len(raw) < 0.97  # while the raw cosines drop


@pytest.mark.parametrize("name", WORKING)
def test_learned_like_weights_are_explained_by_the_construction(name):
    """Gauge as large as a third of β plus noise: the circuit is still the construction's."""
    model = perturb(C.build(name, 10, BETA), gauge=0.3 * BETA, noise=0.005 * BETA, seed=3)
    circuit = explain(model)
    assert circuit.overlap(C.REGISTRY[name].cells) == circuit.recall(C.REGISTRY[name].cells) == 1.0
    for atom in circuit:
        assert atom.scale == pytest.approx(BETA, rel=0.03) and atom.score > 0.99
    assert max(circuit.residual_share) < 0.05


@pytest.mark.parametrize("name", WORKING)
def test_noise_makes_no_atoms(name):
    """Noise of 3% of β on every entry: the best chance correlations do not stand out from it."""
    circuit = explain(perturb(C.build(name, 5, 100.0), noise=3.0, seed=0))
    assert circuit.cells() == set(C.REGISTRY[name].cells), str(circuit)


def test_minus_one_cell_ties_with_its_gauge_twin_and_raw_weights_decide():
    """-1 at (pos.P, pos.Y) and +1 at (pos.P, pos.P) are one function (every position key of a P row
    gets +β): the same patterns, one atom, reported where the raw weights put it."""
    d = 4
    design = C.theorem2(d, BETA)
    twin = C.theorem2(d, BETA)
    place(twin, 0, "pos.P", "pos.Y", BETA)  # -1 cell gone ...
    place(twin, 0, "pos.P", "pos.P", BETA)  # ... moved to its twin
    X = sample_batch(design.cfg.layout, 8, torch.Generator().manual_seed(0), dtype=F64).X
    for a, b in zip(patterns(design, X), patterns(twin, X)):
        assert torch.allclose(a, b, atol=1e-12)
    first = {(a.query, a.key, a.label): a for a in explain(design, layer=0)}
    second = {(a.query, a.key, a.label): a for a in explain(twin, layer=0)}
    assert set(first) == {("pos.P", "x", "I"), ("pos.P", "pos.Y", "-1")}
    assert set(second) == {("pos.P", "x", "I"), ("pos.P", "pos.P", "1")}
    assert first["pos.P", "pos.Y", "-1"].twins == (("pos.P", "pos.P", "1"),)
    assert second["pos.P", "pos.P", "1"].twins == (("pos.P", "pos.Y", "-1"),)
    assert explain(twin).overlap(C.REGISTRY["theorem2"].cells) == 1.0


@pytest.mark.parametrize("template, make", [
    ("J", lambda d: torch.eye(d, dtype=F64).flip(-1)),
    ("shift+1", lambda d: torch.eye(d, dtype=F64).roll(1, 1).triu(1)),
    ("shift-1", lambda d: torch.eye(d, dtype=F64).roll(-1, 1).tril(-1)),
    ("ones", lambda d: torch.ones(d, d, dtype=F64)),
])
def test_each_library_template_is_found_where_it_was_put(template, make):
    model = blank(Layout.plain(5))
    place(model, 1, "L1.x", "pos.Y", 3.0 * make(5))
    place(model, 1, "pos.P", "L1.x", -2.0 * torch.eye(5, dtype=F64))
    atoms = {(a.query, a.key): a for a in explain(model)}
    assert set(atoms) == {("L1.x", "pos.Y"), ("pos.P", "L1.x")}
    assert atoms["L1.x", "pos.Y"].template == template
    assert atoms["L1.x", "pos.Y"].beta == pytest.approx(3.0)
    assert atoms["pos.P", "L1.x"].label == "-I" and atoms["pos.P", "L1.x"].beta == pytest.approx(-2.0)


def test_user_supplied_template_and_several_heads():
    d = 4
    perm = torch.eye(d, dtype=F64)[[2, 0, 3, 1]]
    model = blank(Layout.plain(d), heads=(2, 1))
    place(model, 0, "pos.Y", "x", 5.0 * perm, head=1)
    assert explain(model).atoms[0].template != "perm"  # not in the default library
    circuit = explain(model, templates={"perm": perm})
    assert [(a.layer, a.head, a.query, a.key, a.template) for a in circuit] == \
        [(0, 1, "pos.Y", "x", "perm")]
    assert circuit.atoms[0].beta == pytest.approx(5.0)
    assert explain(model, head=0).atoms == ()


def test_rows_cover_every_cell_and_shares_add_up():
    model = perturb(C.theorem3(3, BETA), gauge=10.0, noise=0.5, seed=0)
    rows = match_templates(model)
    n_blocks = [len(model.stream.blocks(layer)) for layer in range(2)]
    assert len(rows) == sum(n * n for n in n_blocks)
    for layer in range(2):
        mine = [r for r in rows if r.layer == layer]
        assert sum(r.norm_share for r in mine) == pytest.approx(1.0)
        assert sum(r.raw_norm_share for r in mine) == pytest.approx(1.0)
        assert all(0.0 <= r.score <= 1.0 + 1e-12 and 0.0 <= r.raw_score <= 1.0 + 1e-12 for r in mine)
    assert [r.layer for r in match_templates(model, layer=1)] == [1] * n_blocks[1] ** 2
    with pytest.raises(ValueError, match="layer"):
        match_templates(model, layer=2)
    with pytest.raises(ValueError, match="head"):
        explain(model, head=1)


def test_zero_weights_have_an_empty_circuit():
    model = blank(Layout.scratch(3), attention_dir="causal")
    assert len(explain(model)) == 0
    assert {r.template for r in match_templates(model)} == {"zeros"}


@pytest.mark.parametrize("model", [
    perturb(C.theorem3_two_block(4, BETA), gauge=BETA, noise=1.0, seed=1),
    HookedDisentangledTransformer(ModelConfig(Layout.of(3, "0", "P", "Y", "0"), n_heads=[2, 1],
                                              dtype="float64", init_scale=3.0), seed=0),
], ids=["construction", "random"])
def test_gauge_fixed_weights_give_the_same_patterns_on_data(model):
    X = sample_batch(model.cfg.layout, 32, torch.Generator().manual_seed(0), dtype=F64).X
    assert gauge_check(model, X) < 1e-9


def test_norm_share_says_how_much_of_a_circuit_a_construction_carries():
    """recall is 1 for any superset; norm_share tells the two bidirectional mechanisms apart."""
    model = C.two_block(5)
    circuit = explain(model)
    own, other = C.REGISTRY["two_block"].cells, C.REGISTRY["appendix_b"].cells
    assert circuit.norm_share(own) == pytest.approx(1.0, abs=1e-9)
    assert circuit.norm_share(other) == pytest.approx(0.0, abs=1e-9)
    assert circuit.norm_share([]) == 0.0


def test_a_layers_dictionary_is_kept_per_stream_shape_and_gives_what_a_fresh_one_gives():
    from invperm_interp.analysis import templates as T

    T._DEFAULT_DICTIONARIES.clear()
    model = perturb(C.build("theorem3", 4), gauge=1.0, noise=0.05, seed=0)
    kept = match_templates(model)
    assert len(T._DEFAULT_DICTIONARIES) == model.cfg.n_layers  # one per layer of this shape
    first = dict(T._DEFAULT_DICTIONARIES)
    again = match_templates(perturb(C.build("theorem3", 4), noise=0.1, seed=1))  # same shape
    assert all(T._DEFAULT_DICTIONARIES[k] is v for k, v in first.items())
    fresh = match_templates(model, templates={})  # the same library, its dictionaries built anew
    assert fresh == kept and again != kept
    for d in range(5, 5 + T.DICTIONARIES_KEPT):  # the least recently used shapes are let go
        explain(C.build("theorem3", d))
    assert len(T._DEFAULT_DICTIONARIES) == T.DICTIONARIES_KEPT


def test_gauge_check_reads_the_model_patterns_it_is_given():
    """Given the model's own patterns it runs the gauge-fixed twin only; given other patterns
    (here the uniform attention), it reports how far those are from the twin's."""
    from invperm_interp.model.variants import model_run

    model = perturb(C.build("theorem3", 4, 3.0), gauge=1.0, noise=0.05, seed=0)
    X = sample_batch(model.cfg.layout, 32, torch.Generator().manual_seed(0), dtype=F64).X
    _, own = model_run(model, X)
    # both are float64 rounding (~1e-15) of forwards batched differently (the model alone, or
    # beside its twin): on another CPU they need not agree to the last bit, only stay rounding
    assert gauge_check(model, X, patterns=own) < 1e-12 and gauge_check(model, X) < 1e-12
    uniform = [torch.full_like(p, 1.0 / p.shape[-1]) for p in own]
    assert gauge_check(model, X, patterns=uniform) == pytest.approx(
        max(float((p - u).abs().max()) for p, u in zip(own, uniform)), abs=1e-9)
