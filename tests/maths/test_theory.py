"""The causal floor (Theorem 1 made quantitative) against brute force and Monte Carlo, and the
Lemma 1 certificate (``dependency_map``) on causal and bidirectional models."""

import pytest
import torch
from helpers import batch_for

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig
from invperm_interp.maths import constructions as C
from invperm_interp.maths.floors import (
    bayes_mse_monte_carlo,
    causal_floor,
    dependency_map,
    exact_floor_enumeration,
    stream_dependency,
)

# (layout builder, readout): plain, scratch with several n_scratch, the note's code layout, reversed.
CASES = {
    "plain-P": (Layout.plain, "P"),
    "plain-Y": (Layout.plain, "Y"),
    "scratch1-P": (lambda d: Layout.scratch(d, 1), "P"),
    "scratch1-Y": (lambda d: Layout.scratch(d, 1), "Y"),
    "scratch_d-S": (Layout.scratch, "S"),
    "scratch_d-Y": (Layout.scratch, "Y"),
    "scratch_2d-Y": (lambda d: Layout.scratch(d, 2 * d, scratch=torch.ones(d)), "Y"),
    "code-P": (lambda d: Layout.of(d, "0", "P", "Y", "0"), "P"),
    "code-Y": (lambda d: Layout.of(d, "0", "P", "Y", "0"), "Y"),
    "reversed-P": (lambda d: Layout.of(d, "Y", "P"), "P"),
    "reversed-Y": (lambda d: Layout.of(d, "Y", "P"), "Y"),
    "interleaved-Y": (lambda d: Layout.of(d, "P", "S:1", "Y", "S:2"), "Y"),
}


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_floor_equals_exact_enumeration(case, d):
    make, readout = CASES[case]
    layout = make(d)
    assert causal_floor(layout, readout) == pytest.approx(exact_floor_enumeration(layout, readout),
                                                          abs=1e-12)


@pytest.mark.parametrize("d", [5, 10])
@pytest.mark.parametrize("case", list(CASES))
def test_floor_equals_monte_carlo_bayes(case, d):
    make, readout = CASES[case]
    layout = make(d)
    mean, se = bayes_mse_monte_carlo(layout, readout, n_samples=8_000, seed=d)
    assert abs(causal_floor(layout, readout) - mean) <= 3 * se + 1e-12, (mean, se)


@pytest.mark.parametrize("layout, readout, floor", [
    (Layout.plain(10), "P", 2.5),  # nothing of Y is visible: 0.25·d (the note's "≈ 2.5")
    (Layout.plain(10), "Y", 1.125),  # (d-1)/8
    (Layout.scratch(10), "S", 0.0),  # Theorem 3: scratch rows see everything
    (Layout.plain(1), "P", 0.25),
    (Layout.of(2, "Y", "P"), "Y", 0.3125),  # by hand: rows cost 3/8 and 1/4
])
def test_known_floors(layout, readout, floor):
    assert abs(causal_floor(layout, readout) - floor) < 1e-12
    if layout.d <= 3:
        assert abs(exact_floor_enumeration(layout, readout) - floor) < 1e-12


def test_monte_carlo_standard_error_is_honest():
    mean, se = bayes_mse_monte_carlo(Layout.plain(5), "Y", n_samples=2_000, seed=0)
    assert 0 < se < 0.05 and abs(mean - 0.5) < 4 * se


@pytest.mark.parametrize("call", [
    lambda: exact_floor_enumeration(Layout.plain(4), "P"),
    lambda: causal_floor(Layout.scratch(3, 2), "S"),
    lambda: bayes_mse_monte_carlo(Layout.plain(3), "nope", 100, 0),
    lambda: bayes_mse_monte_carlo(Layout.plain(3), "P", 1, 0),
])
def test_theory_rejects_bad_arguments(call):
    with pytest.raises(ValueError):
        call()


def random_model(layout, attention_dir, readout, seed=0):
    cfg = ModelConfig(layout, attention_dir=attention_dir, readout=readout, dtype="float64",
                      init_scale=0.5)
    return HookedDisentangledTransformer(cfg, seed=seed)


@pytest.mark.parametrize("attention_dir, causal_ok", [("causal", True), ("bidirectional", False)])
@pytest.mark.parametrize("layout, readout", [(Layout.plain(4), "P"), (Layout.plain(4), "Y"),
                                             (Layout.scratch(4, 4, scratch=torch.ones(4)), "S")])
def test_dependency_map_of_random_models(layout, readout, attention_dir, causal_ok):
    model = random_model(layout, attention_dir, readout)
    dep = dependency_map(model, batch_for(model, 3, seed=1))
    assert dep.norms.shape == (4, layout.T)
    assert dep.positions == tuple(range(layout.rows(readout).start, layout.rows(readout).stop))
    assert dep.causal_ok is causal_ok
    for r, t in enumerate(dep.positions):  # every row sees itself and every earlier row
        assert (dep.norms[r, : t + 1] > 0).all()
    layers = stream_dependency(model, batch_for(model, 3, seed=1))
    assert all(bool((m.triu(1) == 0).all()) is causal_ok for m in layers)


@pytest.mark.parametrize("name", C.names())
def test_dependency_map_of_constructions(name):
    model = C.build(name, 5)
    dep = dependency_map(model, batch_for(model, 3, seed=1))
    assert dep.causal_ok is (model.cfg.attention_dir == "causal")
