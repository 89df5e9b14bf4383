"""Layouts, sampled batches and validated user input."""

from typing import get_args, get_type_hints

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from invperm_interp import Layout, ModelConfig, TrainConfig, make_input, sample_batch
from invperm_interp.errors import ConfigError

layouts = st.one_of(
    st.integers(1, 8).map(Layout.plain),
    st.tuples(st.integers(1, 8), st.integers(1, 5)).map(lambda a: Layout.scratch(*a)),
    st.integers(1, 6).map(lambda d: Layout.of(d, "0", "P", "Y", "0")),
    st.integers(1, 6).map(lambda d: Layout.of(d, "Y", "S:2", "P")),
)


@settings(max_examples=40, deadline=None)
@given(layout=layouts, batch_size=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_sample_batch_is_a_valid_task(layout, batch_size, seed):
    b = sample_batch(layout, batch_size, torch.Generator().manual_seed(seed))
    d = layout.d
    assert b.X.shape == (batch_size, layout.T, d)
    assert torch.equal(b.Y_P, b.P @ b.Y)
    assert torch.equal(b.P.sum(-1), torch.ones(batch_size, d))  # rows one-hot
    assert torch.equal(b.P.sum(-2), torch.ones(batch_size, d))  # a permutation: columns too
    assert torch.equal(b.P.argmax(-1), b.perm)
    assert set(b.Y.unique().tolist()) <= {0.0, 1.0}
    # the segments sit where the layout says
    assert torch.equal(b.X[:, layout.rows(layout.segment_of_kind("P").name)], b.P)
    assert torch.equal(b.X[:, layout.rows(layout.segment_of_kind("Y").name)], b.Y_P)
    # make_input rebuilds the same batch from (P, Y_P)
    again = make_input(layout, b.P, b.Y_P)
    for field in ("X", "P", "Y", "Y_P", "perm"):
        assert torch.equal(getattr(again, field), getattr(b, field)), field


def test_sample_batch_reproducible_from_generator():
    layout = Layout.plain(6)
    a = sample_batch(layout, 8, torch.Generator().manual_seed(0))
    b = sample_batch(layout, 8, torch.Generator().manual_seed(0))
    c = sample_batch(layout, 8, torch.Generator().manual_seed(1))
    assert torch.equal(a.X, b.X) and not torch.equal(a.X, c.X)


def test_permutations_are_uniform():
    counts = torch.zeros(6)
    b = sample_batch(Layout.plain(3), 6000, torch.Generator().manual_seed(0))
    index = {p: i for i, p in enumerate([(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1),
                                         (2, 1, 0)])}
    for p in b.perm.tolist():
        counts[index[tuple(p)]] += 1
    assert (counts - 1000).abs().max() < 5 * (1000 * 5 / 6) ** 0.5  # 5 sigma


def test_scratch_rows_hold_the_scratch_vector():
    layout = Layout.scratch(3, 2, scratch=[1.0, -2.0, 0.5])
    b = sample_batch(layout, 2)
    assert torch.equal(b.X[:, layout.rows("S")], torch.tensor([1.0, -2.0, 0.5]).expand(2, 2, 3))


def test_layout_names_and_rows():
    layout = Layout.of(4, "0", "P", "Y", "0:2")
    assert layout.names == ("pad0", "P", "Y", "pad1")
    assert layout.T == 14
    assert layout.rows("Y") == slice(8, 12)
    assert Layout.from_dict(layout.to_dict()) == layout
    assert Layout.scratch(3).names == ("P", "Y", "S")
    assert Layout.scratch(3).scratch_vector == (0.0, 0.0, 0.0)


def test_identity_permutation_and_extreme_Y():
    layout = Layout.plain(3)
    P = torch.eye(3)
    for Y in (torch.zeros(3, 3), torch.ones(3, 3)):
        b = make_input(layout, P, P @ Y)
        assert torch.equal(b.Y[0], Y) and torch.equal(b.perm[0], torch.arange(3))


@pytest.mark.parametrize("P, match", [
    (torch.tensor([[1.0, 0], [1, 0]]), "exactly one 1"),  # duplicate rows
    (torch.tensor([[0.5, 0.5], [0.5, 0.5]]), "only 0 and 1"),  # non-binary (doubly stochastic)
    (torch.eye(3), r"shape \(B, 2, 2\)"),  # wrong d
    (torch.eye(2, dtype=torch.complex64), "real"),
    ([[1, 0], [0, 1]], "torch.Tensor"),
])
def test_make_input_rejects_bad_P(P, match):
    with pytest.raises(ValueError, match=match):
        make_input(Layout.plain(2), P, torch.zeros(2, 2))


@pytest.mark.parametrize("Y_P, match", [
    (torch.zeros(3, 3), "Y_P must have shape"),
    (torch.tensor([[0.0, 0.3], [1, 0]]), "binary"),
    (torch.tensor([[0.0, float("nan")], [1, 0]]), "finite"),
    (torch.tensor([[0.0, float("inf")], [1, 0]]), "finite"),
    (torch.zeros(2, 2, dtype=torch.complex64), "real"),
])
def test_make_input_rejects_bad_Y_P(Y_P, match):
    with pytest.raises(ValueError, match=match):
        make_input(Layout.plain(2), torch.eye(2), Y_P)


def test_make_input_real_targets_when_asked():
    b = make_input(Layout.plain(2), torch.tensor([[0.0, 1], [1, 0]]),
                   torch.tensor([[0.3, 0.7], [1.5, -2.0]]), binary=False)
    assert torch.allclose(b.Y[0], torch.tensor([[1.5, -2.0], [0.3, 0.7]]))


@pytest.mark.parametrize("build, match", [
    (lambda: Layout.plain(0), "d must be an integer >= 1"),
    (lambda: Layout.plain(-3), "d must be an integer >= 1"),
    (lambda: Layout.scratch(3, 0), "n_scratch must be an integer >= 1"),
    (lambda: Layout.scratch(3, -1), "n_scratch must be an integer >= 1"),
    (lambda: Layout.scratch(3, 2, scratch=[1.0]), "length d=3"),
    (lambda: Layout.scratch(3, 2, scratch=[1.0, float("nan"), 0]), "finite"),
    (lambda: Layout.of(3, "P", "Q"), "segment spec"),
    (lambda: Layout.of(3, "P"), "exactly one Y"),
    (lambda: Layout.of(3, "P", "Y", "P"), "exactly one P"),
    (lambda: Layout.of(3, "P:2", "Y"), "d=3 rows"),
    (lambda: Layout.of(3, "P", "Y", "S:x"), "n_rows must be an integer"),
    (lambda: sample_batch(Layout.plain(3), 0), "batch_size"),
    (lambda: sample_batch("plain", 2), "layout must be a Layout"),
])
def test_bad_layouts_raise(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_layouts_by_name_are_the_same_on_the_command_line_and_in_grids(tmp_path):
    from invperm_interp.sweep.grid import load_grid
    from invperm_interp.task import DEFAULT_READOUT

    assert Layout.named("plain", 3) == Layout.plain(3)
    assert Layout.named("scratch", 3, 2) == Layout.scratch(3, 2)
    assert [s.name for s in Layout.named("code", 3).segments] == ["pad0", "P", "Y", "pad1"]
    with pytest.raises(ValueError, match="layout must be one of"):
        Layout.named("zigzag", 3)
    with pytest.raises(ValueError, match="n_scratch"):
        Layout.named("plain", 3, 2)
    grid = tmp_path / "g.toml"
    grid.write_text('[model]\nlayout = "code"\nd = 3\n[train]\nsteps = 2\n')
    (job,) = load_grid(grid).jobs
    assert job.model_cfg.layout == Layout.named("code", 3)
    assert job.model_cfg.readout == DEFAULT_READOUT["code"] == "pad0"  # as `invperm train --layout code`


@pytest.mark.parametrize("build, field", [
    (lambda: Layout.plain(0), "d"),
    (lambda: Layout.scratch(3, 0), "n_scratch"),
    (lambda: Layout.of(3, "P"), "segments"),
    (lambda: Layout.scratch(3, 2, scratch=[1.0]), "scratch"),
    (lambda: Layout.named("zigzag", 3), "layout"),
    (lambda: ModelConfig(Layout.plain(3), n_layers=0), "n_layers"),
    (lambda: ModelConfig(Layout.plain(3), n_heads=(1, 2, 3)), "n_heads"),
    (lambda: ModelConfig(Layout.plain(3), attention_dir="sideways"), "attention_dir"),
    (lambda: ModelConfig(Layout.plain(3), readout="Q"), "readout"),
    (lambda: ModelConfig(Layout.plain(3), d_model=8), "d_model"),
    (lambda: ModelConfig(Layout.plain(3), arch="standard", d_mlp=0), "d_mlp"),
    (lambda: TrainConfig(eval_size=0), "eval_size"),
    (lambda: TrainConfig(recipe="slow"), "recipe"),
    (lambda: TrainConfig(optimizer="rmsprop"), "optimizer"),
    (lambda: TrainConfig(recipe="paper", lr=0.5), "lr"),  # the field recipe="paper" fixes
    (lambda: TrainConfig(stop_at_floor=-1.0), "stop_at_floor"),
])
def test_a_config_error_names_its_field(build, field):
    """The field is an attribute, read without parsing the message; the error is a ValueError."""
    with pytest.raises(ConfigError) as caught:
        build()
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("build, field", [
    (lambda **kw: ModelConfig(Layout.plain(3), **kw), "attention_dir"),
    (lambda **kw: ModelConfig(Layout.plain(3), **kw), "arch"),
    (lambda **kw: TrainConfig(**kw), "recipe"),
])
def test_a_choice_field_accepts_exactly_its_literal_type(build, field):
    """The ``Literal`` a type checker sees and the run-time check agree: each choice the annotation
    spells builds a config, anything else is refused naming the field."""
    owner = ModelConfig if field != "recipe" else TrainConfig
    choices = get_args(get_type_hints(owner)[field])
    assert len(choices) >= 2 and all(isinstance(c, str) for c in choices)
    for choice in choices:
        assert getattr(build(**{field: choice}), field) == choice
    with pytest.raises(ConfigError, match=f"^{field} must be one of") as caught:
        build(**{field: choices[0].upper()})
    assert caught.value.field == field
