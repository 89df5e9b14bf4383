"""TransformerLens idioms on the hooked model: safe in-place hooks, the loss path, the cfg its tools
read, tokens, and the residual-stream decompositions in the final stream's frame."""

import pytest
import torch
from helpers import batch_for
from transformer_lens import patching

from invperm_interp import (
    HookedDisentangledTransformer,
    Layout,
    ModelConfig,
    hook_name,
    sample_batch,
)
from invperm_interp.analysis import patch_positions
from invperm_interp.maths import constructions as C
from invperm_interp.model.cache import StreamCache
from invperm_interp.model.export import to_transformer_lens
from invperm_interp.model.tokens import from_tokens, row_labels, to_tokens
from invperm_interp.task import answer, make_input, mse
from invperm_interp.viz.attention import token_labels

F64 = torch.float64


def small_model(attention_dir="bidirectional", dtype="float32", layout=None, n_heads=1):
    cfg = ModelConfig(layout or Layout.plain(4), n_layers=2, n_heads=n_heads, init_scale=0.5,
                      attention_dir=attention_dir, dtype=dtype,
                      readout="S" if layout is not None and "S" in layout.names else "P")
    return HookedDisentangledTransformer(cfg, seed=0)


# -- each defect of the issue, as a regression test ------------------------------------------------
@pytest.mark.parametrize("hook, edit", [
    (hook_name("embed"), lambda act: act[:, 0].zero_()),
    (hook_name("pos_embed"), lambda act: act[0].zero_()),  # used to zero the positional buffer for good
    (hook_name("pos_embed"), lambda act: act[:, 0].zero_()),  # used to raise: an expanded view
])
def test_in_place_edits_at_the_inputs_leave_X_the_model_and_the_next_run_untouched(hook, edit):
    model = small_model()
    X = batch_for(model, 8).X
    X_before, pos_before = X.clone(), model.pos.clone()
    clean = model(X)

    def in_place(act, hook):
        edit(act)  # returns None: the edited act itself flows on

    edited = model.run_with_hooks(X, fwd_hooks=[(hook, in_place)])
    assert not torch.allclose(edited, clean)  # the edit took effect in the run
    assert torch.equal(X, X_before) and torch.equal(model.pos, pos_before)
    assert torch.equal(model(X), clean)


def test_editing_the_pattern_in_place_then_backward_gives_the_out_of_place_gradient():
    model = small_model("causal")
    X = batch_for(model, 8).X

    def in_place(act, hook):
        act[:, :, :, 0] = 0

    def out_of_place(act, hook):
        act = act.clone()
        act[:, :, :, 0] = 0
        return act

    grads = []
    for fn in (in_place, out_of_place):
        model.zero_grad()
        out = model.run_with_hooks(X, fwd_hooks=[(hook_name("pattern", 0), fn)])
        out.pow(2).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert a.abs().sum() > 0
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_an_in_place_edit_of_the_read_out_rows_leaves_the_cached_final_stream_alone():
    model = small_model()
    X = batch_for(model, 8).X
    _, clean = model.run_with_cache(X)

    def zero(act, hook):
        act.zero_()

    with model.hooks(fwd_hooks=[(hook_name("readout"), zero)]):
        out, cache = model.run_with_cache(X)
    assert not out.any()  # the read-out rows were zeroed before W_U
    assert torch.equal(cache[hook_name("resid_post", 1)], clean[hook_name("resid_post", 1)])


# -- the loss path, W_U, tokens ---------------------------------------------------------------------
def test_loss_path_is_the_note_loss_and_defaults_to_the_inputs_own_answer():
    model = small_model(dtype="float64").requires_grad_(False)
    batch = batch_for(model, 8)
    out = model(batch.X)
    assert float(model(batch.X, return_type="loss")) == pytest.approx(float(mse(out, batch.Y)))
    other = batch_for(model, 8, seed=1).Y
    assert float(model(batch.X, other, return_type="loss")) == pytest.approx(float(mse(out, other)))
    both_out, both_loss = model(batch.X, return_type="both")
    assert torch.equal(both_out, out) and torch.equal(both_loss, model(batch.X, return_type="loss"))
    with pytest.raises(ValueError, match="return_type"):
        model(batch.X, return_type="logits")


def test_run_with_cache_incl_bwd_gives_the_gradient_of_the_loss():
    model = small_model(dtype="float64")
    batch = batch_for(model, 8)
    loss, cache = model.run_with_cache(batch.X, return_type="loss", incl_bwd=True)
    # reference: d loss / d pattern of layer 1 by plain autograd through a retained tensor
    kept = {}

    def keep(act, hook):
        act.retain_grad()
        kept["pattern"] = act

    model.zero_grad()
    model.run_with_hooks(batch.X, return_type="loss",
                         fwd_hooks=[(hook_name("pattern", 1), keep)]).backward()
    torch.testing.assert_close(cache[hook_name("pattern", 1) + "_grad"], kept["pattern"].grad)
    assert float(loss.detach()) == pytest.approx(float(mse(model(batch.X), batch.Y).detach()))


def test_W_U_and_tokens_and_str_tokens():
    layout = Layout.scratch(3, scratch=[0.5, 2.0, 0.0])
    model = small_model(layout=layout)
    batch = batch_for(model, 8)
    assert model.W_U is model.unembed.W_U
    tokens = model.to_tokens(batch.X)
    assert tokens.shape == (8, layout.T) and tokens.dtype == torch.int64
    assert torch.equal(from_tokens(layout, tokens), batch.X)
    assert torch.equal(model(tokens), model(batch.X))
    assert model.to_str_tokens(batch.X[0]) == token_labels(batch, 0) == row_labels(layout, batch.X[0])
    assert model.to_str_tokens(tokens[:1]) == token_labels(batch, 0)
    assert model.to_str_tokens(batch.X[:2]) == [token_labels(batch, 0), token_labels(batch, 1)]
    assert token_labels(batch, 0)[0] == f"P0→e{int(batch.perm[0, 0])}"
    assert token_labels(batch, 0)[3].startswith("Y0=") and token_labels(batch, 0)[6] == "S0"
    with pytest.raises(ValueError, match="neither a binary row nor the scratch vector"):
        to_tokens(layout, batch.X + 0.25)
    with pytest.raises(ValueError, match="tokens must be ids"):
        model(torch.full((1, layout.T), 99))


# -- the cfg TransformerLens's tools read ------------------------------------------------------------
def test_cfg_carries_what_transformer_lens_reads_and_follows_the_model():
    model = small_model()
    cfg = model.cfg
    assert (cfg.n_ctx, cfg.attn_only, cfg.device) == (cfg.T, True, "cpu")
    assert not model.training  # eval mode, as TransformerLens's analysis tools require
    model.to(torch.float64)
    assert model.cfg.dtype == "float64" and model.cfg.torch_dtype == F64
    assert model.blocks[0].attn.A.dtype == F64 and model(batch_for(model, 8).X).dtype == F64
    assert model.cfg == ModelConfig.from_json(model.cfg.to_json())
    assert "device" not in model.cfg.to_dict()
    with pytest.raises(ValueError, match="float32 or float64"):
        model.to(torch.float16)
    assert model.pos.dtype == F64  # refused before anything was cast
    with pytest.raises(ValueError, match="device"):
        ModelConfig(Layout.plain(2), device="gpu9")


# -- transformer_lens.patching ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["two_block", "theorem3"])
def test_transformer_lens_patching_by_position_reproduces_analysis_patch(name):
    model = C.build(name, 3)
    generator = torch.Generator().manual_seed(0)
    clean = sample_batch(model.cfg.layout, 16, generator, dtype=F64)
    other = sample_batch(model.cfg.layout, 16, generator, dtype=F64)
    corrupted = make_input(model.cfg.layout, other.P, clean.Y_P).X.to(F64)

    def metric(out):
        return mse(out, clean.Y)

    expected = patch_positions(model, clean.X, corrupted, metric)
    _, clean_cache = model.run_with_cache(model.to_tokens(clean.X))
    got = patching.get_act_patch_resid_pre(model, model.to_tokens(corrupted), clean_cache, metric)
    assert got.shape == (model.cfg.n_layers, model.cfg.T)  # position axis T, every row patched
    torch.testing.assert_close(got.double(), expected.values, atol=1e-6, rtol=0)
    assert expected.values.abs().max() > 0.1
    with pytest.raises(ValueError, match="to_tokens"):  # X's last axis is d, not T
        patching.get_act_patch_resid_pre(model, corrupted, clean_cache, metric)


SWEEPS = ["get_act_patch_attn_out", "get_act_patch_attn_head_q_all_pos",
          "get_act_patch_attn_head_k_all_pos", "get_act_patch_attn_head_v_all_pos",
          "get_act_patch_attn_head_k_by_pos", "get_act_patch_attn_head_out_all_pos"]


@pytest.mark.parametrize("sweep", SWEEPS)
def test_transformer_lens_sweeps_over_q_k_v_and_attn_out_equal_those_on_the_export(sweep):
    """The sweeps that need hook_q/k/v/attn_out run on the model and agree with the same sweep on
    the native export (an independent implementation: W_Q, W_K, W_V, W_O matrices)."""
    model = C.build("theorem3", 3, dtype=torch.float32)
    export = to_transformer_lens(model)
    generator = torch.Generator().manual_seed(1)
    clean = sample_batch(model.cfg.layout, 8, generator)
    other = sample_batch(model.cfg.layout, 8, generator)
    corrupted_X = make_input(model.cfg.layout, other.P, clean.Y_P).X
    target = answer(model.cfg.layout, corrupted_X)  # patching clean activations moves away from it
    corrupted, tokens = model.to_tokens(corrupted_X), model.to_tokens(clean.X)
    rows = model.unembed.rows
    run = getattr(patching, sweep)
    _, ours_cache = model.run_with_cache(tokens)
    ours = run(model, corrupted, ours_cache, lambda out: mse(out, target))
    _, theirs_cache = export.tl_model.run_with_cache(tokens)
    theirs = run(export.tl_model, corrupted, theirs_cache,
                 lambda logits: mse(logits[:, rows], target))
    assert ours.shape == theirs.shape
    # theorem3 carries positions, not P's content, through its values: patching v changes nothing
    assert (ours.abs().max() > 0.05) == (sweep != "get_act_patch_attn_head_v_all_pos")
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


# -- accumulated_resid / decompose_resid in the final stream's frame ----------------------------------
@pytest.mark.parametrize("attention_dir, n_heads", [("causal", 2), ("bidirectional", 1)])
def test_decompositions_sum_exactly_and_read_out_to_the_output(attention_dir, n_heads):
    model = small_model(attention_dir, "float64", n_heads=n_heads)
    X = batch_for(model, 8).X
    out, cache = model.run_with_cache(X)
    assert isinstance(cache, StreamCache)
    widths, L, rows = model.cfg.widths, model.cfg.n_layers, model.unembed.rows
    h_L = cache[hook_name("resid_post", L - 1)]
    parts, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "pos_embed"] + [f"{i}_attn_out" for i in range(L)]
    assert torch.equal(parts.sum(0), h_L)  # disjoint supports: exact
    reference = torch.einsum("btD,Dd->btd", h_L[:, rows], model.unembed.W_U)
    torch.testing.assert_close(torch.einsum("cbtD,Dd->btd", parts[:, :, rows], model.W_U), reference)
    torch.testing.assert_close(reference, out)
    stream, labels = cache.accumulated_resid(return_labels=True)
    assert labels == [f"{i}_pre" for i in range(L)] + ["final_post"]
    for i in range(L + 1):
        assert torch.equal(stream[i][..., : widths[i]], h_L[..., : widths[i]])
        assert not stream[i][..., widths[i]:].any()
        assert torch.equal(cache.decompose_resid(layer=i).sum(0), stream[i])
    heads, labels = cache.stack_head_results(return_labels=True, incl_remainder=True)
    assert labels == [f"L{i}H{k}" for i in range(L) for k in range(n_heads)] + ["remainder"]
    assert torch.equal(heads.sum(0), h_L)
    with pytest.raises(ValueError, match="no LayerNorm"):
        cache.accumulated_resid(apply_ln=True)
    for bad in (True, L + 1, 1.0):  # True would otherwise pass as layer 1
        with pytest.raises(ValueError, match="layer must be an integer"):
            cache.accumulated_resid(layer=bad)


@pytest.mark.parametrize("batch_slice, index", [(0, 0), ([1, 3], [1, 3]), ((2, 5), slice(2, 5))])
def test_a_batch_slice_of_the_cache_keeps_the_decompositions(batch_slice, index):
    """``apply_slice_to_batch_dim`` (TransformerLens's patching calls it) keeps the stream methods:
    on the slice they equal the full cache's, sliced the same way."""
    model = small_model("causal", "float64", n_heads=2)
    _, cache = model.run_with_cache(batch_for(model, 6).X)
    sliced = cache.apply_slice_to_batch_dim(batch_slice)
    assert isinstance(sliced, StreamCache)
    for method in ("accumulated_resid", "decompose_resid", "stack_head_results"):
        full = getattr(cache, method)()
        assert torch.equal(getattr(sliced, method)(), full[:, index]), method
    assert sliced.has_batch_dim == (batch_slice != 0)


def test_decompositions_equal_transformer_lens_own_on_the_export():
    model = C.build("appendix_b", 3, dtype=torch.float32)
    X = batch_for(model, 8).X
    export = to_transformer_lens(model)
    _, ours = model.run_with_cache(X)
    _, theirs = export.tl_model.run_with_cache(export.to_tokens(X))
    torch.testing.assert_close(ours.accumulated_resid(), theirs.accumulated_resid(),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.decompose_resid(), theirs.decompose_resid(), atol=1e-5, rtol=0)


def test_transformer_lens_names_this_model_lacks_say_what_to_use():
    model = HookedDisentangledTransformer(ModelConfig(Layout.plain(3)), seed=0)
    with pytest.raises(AttributeError, match=r"no W_Q or W_K: .*blocks\[l\]\.attn\.A"):
        model.W_Q  # noqa: B018
    with pytest.raises(AttributeError, match=r"no hook_result.*hook_z"):
        model.blocks[0].attn.hook_result  # noqa: B018
    with pytest.raises(AttributeError, match=r"no W_V or W_O"):
        model.blocks[0].attn.W_O  # noqa: B018
    _, cache = model.run_with_cache(torch.zeros(1, model.cfg.T, 3))
    with pytest.raises(KeyError, match=r"no hook_result.*hook_attn_out"):
        cache["result", 0]
    with pytest.raises(KeyError, match=r"no MLPs, so no hook_resid_mid.*hook_resid_post"):
        cache["resid_mid", 0]
    with pytest.raises(KeyError, match=r"attention-only.*hook_attn_out"):
        cache["blocks.1.hook_mlp_out"]
    with pytest.raises(ValueError, match=r"no LayerNorm.*W_U"):
        cache.apply_ln_to_stack(cache.accumulated_resid())
    with pytest.raises(AttributeError, match=r"has no attribute 'nope'$"):
        model.nope  # noqa: B018
