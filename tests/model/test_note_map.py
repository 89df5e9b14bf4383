"""The map from a standard attention-only transformer to the disentangled model: the same function
(against the standard model's own forward), weights as an independent numpy map computes them."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch
from invperm_interp.model.disentangled import DisentangledTransformer
from invperm_interp.model.note_map import ov_spectra, to_disentangled
from invperm_interp.model.standard import StandardTransformer
from invperm_interp.model.standard_hooked import HookedStandardTransformer

LAYOUTS = {"plain": (Layout.plain(4), "P"), "plain_Y": (Layout.plain(4), "Y"),
           "scratch": (Layout.scratch(4, 4), "S"), "code": (Layout.of(4, "0", "P", "Y", "0"), "pad0")}


def numpy_map(params: dict, n_layers: int):
    """The note's map with numpy, head by head: M_0 = [W_E; W_pos]; A = M W_Q W_Kᵀ Mᵀ / √d_head;
    M_l = [M; M W_V W_O per head]; W_U' = M_L W_U."""
    M = np.concatenate([params["embed.W_E"], params["pos_embed.W_pos"]], axis=0)
    As = []
    for layer in range(n_layers):
        W_Q, W_K, W_V, W_O = (params[f"blocks.{layer}.attn.{n}"] for n in ("W_Q", "W_K", "W_V", "W_O"))
        As.append(np.stack([M @ W_Q[h] @ W_K[h].T @ M.T / np.sqrt(W_Q.shape[2])
                            for h in range(W_Q.shape[0])]))
        M = np.concatenate([M] + [M @ W_V[h] @ W_O[h] for h in range(W_V.shape[0])], axis=0)
    return As, M @ params["unembed.W_U"]


def _model(layout, readout, n_layers, heads, d_model, d_head, dtype, attention_dir, seed=0,
           scale=0.3):
    cfg = ModelConfig(layout, arch="standard", n_layers=n_layers, n_heads=heads, d_model=d_model,
                      d_head=d_head, readout=readout, dtype=dtype, attention_dir=attention_dir,
                      init_scale=scale)
    return StandardTransformer(cfg, seed=seed)


def _check_same_function(model, n=16, seed=0):
    cfg = model.cfg
    note = to_disentangled(model)
    hooked = isinstance(model, HookedStandardTransformer)  # the map keeps the kind: hooks or not
    assert type(note) is (HookedDisentangledTransformer if hooked else DisentangledTransformer)
    assert note.cfg.widths == cfg.widths and note.cfg.heads == cfg.heads
    batch = sample_batch(cfg.layout, n, torch.Generator().manual_seed(seed), dtype=cfg.torch_dtype)
    with torch.no_grad():  # the standard model's own forward, in d_model
        out, mapped = model.direct(batch.X), note(batch.X)
    # 1e-5 (float32) or 1e-10 (float64) of the output's scale: two summation orders of one function
    tol = (1e-10 if cfg.dtype == "float64" else 1e-5) * max(1.0, out.abs().max().item())
    assert (out - mapped).abs().max().item() <= tol
    return note


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("n_layers,heads", [(1, 1), (1, 4), (2, 1), (2, 2), (3, (1, 3, 2))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
def test_the_map_computes_the_standard_models_function(name, n_layers, heads, dtype, attention_dir):
    layout, readout = LAYOUTS[name]
    model = _model(layout, readout, n_layers, heads, 8, 3, dtype, attention_dir)
    note = _check_same_function(model)
    params = {k: v.detach().double().numpy() for k, v in model.named_parameters()}
    As, W_U = numpy_map(params, n_layers)
    for block, A in zip(note.blocks, As):
        np.testing.assert_allclose(block.attn.A.detach().double().numpy(), A, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(note.W_U.detach().double().numpy(), W_U, rtol=1e-6, atol=1e-6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.integers(1, 5), n_layers=st.integers(1, 3), heads=st.integers(1, 4),
       d_model=st.integers(1, 12), d_head=st.integers(1, 6), causal=st.booleans(),
       layout=st.sampled_from(["plain", "scratch", "code"]), seed=st.integers(0, 2**16))
def test_the_map_is_exact_on_random_shapes(d, n_layers, heads, d_model, d_head, causal, layout,
                                           seed):
    layouts = {"plain": (Layout.plain(d), "P"), "scratch": (Layout.scratch(d, d), "S"),
               "code": (Layout.of(d, "0", "P", "Y", "0"), "pad1")}
    lay, readout = layouts[layout]
    model = _model(lay, readout, n_layers, heads, d_model, d_head, "float64",
                   "causal" if causal else "bidirectional", seed=seed, scale=1.0)
    _check_same_function(model, n=4, seed=seed)


def test_the_map_takes_the_hooked_model_and_keeps_the_device_dtype_and_hooks():
    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=6, dtype="float64")
    model = HookedStandardTransformer(cfg, seed=2)
    note = _check_same_function(model)
    assert note.cfg.dtype == "float64" and note.cfg.arch == "disentangled"
    assert note.cfg.init_scale == 0.01  # the disentangled default, not the standard one


def test_the_ov_spectra_have_rank_at_most_d_head():
    layout, readout = LAYOUTS["plain"]
    model = _model(layout, readout, 2, 2, 8, 3, "float64", "causal")
    spectra = ov_spectra(model)
    assert [len(layer) for layer in spectra] == [2, 2]
    for layer, heads in enumerate(spectra):
        for h, values in enumerate(heads):
            W = model.blocks[layer].attn.W_V[h] @ model.blocks[layer].attn.W_O[h]
            expected = np.linalg.svd(W.detach().numpy(), compute_uv=False)
            np.testing.assert_allclose(values, expected, atol=1e-12)
            assert len(values) == 8 and all(v < 1e-10 for v in values[3:])


@pytest.mark.parametrize("kw,words", [
    ({"layernorm": True}, "exact only without LayerNorm"),
    ({"d_mlp": 4}, "exact only for attention-only models"),
])
def test_a_model_the_map_cannot_take_is_refused_in_one_line(kw, words):
    model = StandardTransformer(ModelConfig(Layout.plain(3), arch="standard", d_model=4, **kw))
    with pytest.raises(ValueError, match=words) as err:
        to_disentangled(model)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="takes a standard model"):
        to_disentangled(HookedDisentangledTransformer(ModelConfig(Layout.plain(3))))


def test_weights_that_do_not_fit_the_layout_are_refused_by_name():
    from invperm_interp.model.note_map import note_weights

    W_E, W_pos, W_U = torch.zeros(3, 4), torch.zeros(6, 4), torch.zeros(4, 3)
    layer = (torch.zeros(1, 4, 2), torch.zeros(1, 4, 2), torch.zeros(1, 4, 2), torch.zeros(1, 2, 4))
    assert note_weights(W_E, W_pos, [layer], W_U)[1].shape == (18, 3)  # D_1 = 2 (d + T)
    with pytest.raises(ValueError, match="W_pos must have shape"):
        note_weights(W_E, torch.zeros(6, 5), [layer], W_U)
    with pytest.raises(ValueError, match="W_U must have shape"):
        note_weights(W_E, W_pos, [layer], torch.zeros(4, 2))
    with pytest.raises(ValueError, match="layer 0 W_O must have shape"):
        note_weights(W_E, W_pos, [layer[:3] + (torch.zeros(1, 3, 4),)], W_U)
    empty = tuple(torch.zeros(1, 4, 0) for _ in range(3)) + (torch.zeros(1, 0, 4),)
    with pytest.raises(ValueError, match="layer 0 W_Q must have shape"):
        note_weights(W_E, W_pos, [empty], W_U)
