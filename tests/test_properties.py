"""Property-based tests over layouts, d, depth and heads: shapes, Lemma 1, and that
``sample_batch`` and ``make_input`` describe the same task.

The layouts drawn here are more general than the fixed cases of test_model/test_task: any order of
the segments, zero-row pads of any length, scratch rows with any vector, read-out from any segment
with d rows.
"""

import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, make_input, sample_batch
from invperm_interp.maths.floors import dependency_map, stream_dependency
from invperm_interp.model.disentangled import readout_forward

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_WIDTH = 320  # keeps one example's model (and its Jacobian) to milliseconds


@st.composite
def layouts(draw, max_d=4):
    """``[P; Y_P]`` plus, in any order, optional scratch rows and zero pads."""
    d = draw(st.integers(1, max_d))
    specs = ["P", "Y"]
    n_scratch = draw(st.one_of(st.none(), st.integers(1, 3)))
    if n_scratch is not None:
        specs.append(f"S:{n_scratch}")
    specs += [f"0:{n}" for n in draw(st.lists(st.integers(1, 3), max_size=2))]
    specs = draw(st.permutations(specs))
    scratch = None
    if n_scratch is not None:
        scratch = draw(st.lists(st.floats(-2, 2, allow_nan=False), min_size=d, max_size=d))
    return Layout.of(d, *specs, scratch=scratch)


@st.composite
def model_configs(draw, attention_dir=None):
    layout = draw(layouts())
    n_layers = draw(st.integers(1, 3))
    heads = draw(st.one_of(st.integers(1, 2), st.lists(st.integers(1, 2), min_size=n_layers,
                                                         max_size=n_layers).map(tuple)))
    readable = [s.name for s in layout.segments if s.n_rows == layout.d]  # P, Y, maybe S or a pad
    cfg = ModelConfig(layout, n_layers=n_layers, n_heads=heads,
                      attention_dir=attention_dir or draw(st.sampled_from(["causal", "bidirectional"])),
                      readout=draw(st.sampled_from(readable)), dtype="float64", init_scale=0.5)
    assume(cfg.widths[-1] <= MAX_WIDTH)
    return cfg


# -- shapes -----------------------------------------------------------------------------------
@settings(max_examples=40, **SETTINGS)
@given(cfg=model_configs(), batch_size=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_shapes_follow_the_config(cfg, batch_size, seed):
    d, T, H = cfg.d, cfg.T, cfg.heads
    # D_0 = d + T, D_{l+1} = D_l (1 + H_l)
    widths = [d + T]
    for h in H:
        widths.append(widths[-1] * (1 + h))
    assert cfg.widths == tuple(widths)
    model = HookedDisentangledTransformer(cfg, seed=seed)
    params = {name: tuple(p.shape) for name, p in model.named_parameters()}
    expected = {f"blocks.{i}.attn.A": (H[i], widths[i], widths[i]) for i in range(cfg.n_layers)}
    assert params == {**expected, "unembed.W_U": (widths[-1], d)}
    # the named blocks tile every layer's stream, in d-or-segment-wide pieces
    for layer in range(cfg.n_layers + 1):
        blocks = model.stream.blocks(layer)
        assert blocks[0].start == 0 and blocks[-1].stop == widths[layer]
        assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))
        assert len(set(model.stream.labels(layer))) == len(blocks)  # names are unique
    batch = sample_batch(cfg.layout, batch_size, torch.Generator().manual_seed(seed),
                         dtype=torch.float64)
    out, cache = model.run_with_cache(batch.X)
    assert out.shape == (batch_size, d, d)
    B = batch_size
    for layer in range(cfg.n_layers):
        assert cache[f"blocks.{layer}.hook_resid_pre"].shape == (B, T, widths[layer])
        assert cache["pattern", layer].shape == (B, H[layer], T, T)
        assert cache["z", layer].shape == (B, T, H[layer], widths[layer])
        assert cache[f"blocks.{layer}.hook_resid_post"].shape == (B, T, widths[layer + 1])
    assert cache["unembed.hook_readout"].shape == (B, d, widths[-1])
    # the training loop's read-out-only forward is the same function
    torch.testing.assert_close(readout_forward(model, batch.X), out, rtol=1e-10, atol=1e-10)
    assert ModelConfig.from_json(cfg.to_json()) == cfg


# -- Lemma 1 ----------------------------------------------------------------------------------
@settings(max_examples=25, **SETTINGS)
@given(cfg=model_configs(attention_dir="causal"), seed=st.integers(0, 2**16))
def test_lemma1_causal_rows_never_depend_on_later_inputs(cfg, seed):
    """Every layer's row i has an exactly zero Jacobian w.r.t. input rows j > i, and so does the
    read-out; a bidirectional model with the same weights does depend on later rows."""
    model = HookedDisentangledTransformer(cfg, seed=seed)
    batch = sample_batch(cfg.layout, 2, torch.Generator().manual_seed(seed), dtype=torch.float64)
    for layer, norms in enumerate(stream_dependency(model, batch)):  # (T, T): row i, input row j
        assert torch.equal(norms.triu(diagonal=1), torch.zeros_like(norms)), layer
        assert bool((norms.diagonal() > 0).all()), layer  # each row sees at least itself
    assert dependency_map(model, batch).causal_ok
    # the same weights without the mask: a read-out row before the last input row sees later rows
    rows = cfg.readout_rows
    if rows.start < cfg.T - 1:
        bidir = HookedDisentangledTransformer(
            ModelConfig.from_dict({**cfg.to_dict(), "attention_dir": "bidirectional"}))
        bidir.load_state_dict(model.state_dict())
        assert not dependency_map(bidir, batch).causal_ok


@settings(max_examples=25, **SETTINGS)
@given(cfg=model_configs(attention_dir="causal"), seed=st.integers(0, 2**16), data=st.data())
def test_lemma1_changing_later_rows_leaves_earlier_outputs_bit_identical(cfg, seed, data):
    model = HookedDisentangledTransformer(cfg, seed=seed)
    batch = sample_batch(cfg.layout, 3, torch.Generator().manual_seed(seed), dtype=torch.float64)
    t = data.draw(st.integers(0, cfg.T - 1), label="last unchanged row")
    X2 = batch.X.clone()
    X2[:, t + 1:] = torch.randn(X2[:, t + 1:].shape, dtype=torch.float64,
                                generator=torch.Generator().manual_seed(seed + 1))
    _, c1 = model.run_with_cache(batch.X)
    _, c2 = model.run_with_cache(X2)
    for layer in range(cfg.n_layers):
        name = f"blocks.{layer}.hook_resid_post"
        assert torch.equal(c1[name][:, : t + 1], c2[name][:, : t + 1]), name
    rows = cfg.readout_rows
    seen = max(0, min(t + 1, rows.stop) - rows.start)  # read-out rows at positions <= t
    assert torch.equal(model(batch.X)[:, :seen], model(X2)[:, :seen])


# -- sample_batch and make_input agree --------------------------------------------------------
@settings(max_examples=60, **SETTINGS)
@given(layout=layouts(max_d=6), batch_size=st.integers(1, 4), seed=st.integers(0, 2**31),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_sample_batch_and_make_input_agree(layout, batch_size, seed, dtype):
    b = sample_batch(layout, batch_size, torch.Generator().manual_seed(seed), dtype=dtype)
    for field, shape in (("X", (batch_size, layout.T, layout.d)), ("perm", (batch_size, layout.d))):
        assert getattr(b, field).shape == shape
    again = make_input(layout, b.P, b.Y_P)
    for field in ("X", "P", "Y", "Y_P", "perm"):
        assert torch.equal(getattr(again, field), getattr(b, field)), field
        assert getattr(again, field).dtype == getattr(b, field).dtype, field
    # one sample at a time, unbatched, and as integer matrices: the same rows
    for i in range(batch_size):
        one = make_input(layout, b.P[i].long(), b.Y_P[i].to(torch.uint8))
        assert torch.equal(one.X[0], b.X[i].float()) and torch.equal(one.perm[0], b.perm[i])
    # the ground truth is the note's: Y = Pᵀ Y_P, and P[b, i] = e_{perm[b, i]}
    assert torch.equal(b.P.transpose(-1, -2) @ b.Y_P, b.Y)
    assert torch.equal(b.P, torch.eye(layout.d, dtype=dtype)[b.perm])
    # every segment holds what its kind says
    for seg in layout.segments:
        rows = b.X[:, layout.rows(seg.name)]
        if seg.kind == "S":
            want = torch.tensor(layout.scratch_vector, dtype=dtype).expand_as(rows)
        else:
            want = {"P": b.P, "Y": b.Y_P, "0": torch.zeros_like(rows)}[seg.kind]
        assert torch.equal(rows, want), seg.name
