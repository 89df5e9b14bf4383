"""Silencing (``analysis.silence``, ``ablation="silence"``) against two independent references: a
numpy forward that writes zeros for the silenced heads (``helpers.numpy_forward``), and the hooked
model with those heads' ``hook_z`` zeroed (the knock-out a TransformerLens user writes)."""

import numpy as np
import pytest
import torch
from helpers import numpy_forward

from invperm_interp.analysis.faithfulness import Tester as CircuitTester
from invperm_interp.analysis.hypothesis import Hypothesis
from invperm_interp.analysis.silence import silence, silent_heads
from invperm_interp.config import ModelConfig
from invperm_interp.maths.cells import Cell
from invperm_interp.model.hooked import HookedDisentangledTransformer
from invperm_interp.model.variants import forward_many
from invperm_interp.task import Layout, sample_batch


def random_model(heads, attention_dir, seed=0):
    cfg = ModelConfig(Layout.plain(3), n_layers=len(heads), n_heads=tuple(heads),
                      attention_dir=attention_dir, dtype="float64")
    g = torch.Generator().manual_seed(seed)
    As = [torch.randn(h, D, D, generator=g, dtype=torch.float64)
          for h, D in zip(cfg.heads, cfg.widths)]
    W_U = torch.randn(cfg.widths[-1], cfg.d, generator=g, dtype=torch.float64)
    X = sample_batch(cfg.layout, 16, torch.Generator().manual_seed(seed + 1), dtype=torch.float64).X
    return cfg, As, W_U, X


@pytest.mark.parametrize("heads, silent, attention_dir", [
    ((1, 1), {(0, 0)}, "causal"),
    ((2, 1, 2), {(0, 1)}, "bidirectional"),
    ((2, 1, 2), {(1, 0), (2, 0)}, "causal"),
    ((1, 2, 1), {(0, 0), (1, 1)}, "bidirectional"),
])
def test_silencing_equals_writing_zeros_for_the_heads_a_variant_leaves_empty(heads, silent,
                                                                             attention_dir):
    cfg, As, W_U, X = random_model(heads, attention_dir)
    for layer, k in silent:
        As[layer][k] = 0
    assert silent_heads(As) == silent
    want = numpy_forward([A.numpy() for A in As], W_U.numpy(), X.numpy(), cfg.causal,
                         cfg.readout_rows, silent)
    got = forward_many(cfg, [silence(cfg, As, W_U)], X)[0]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    # and it is not what zero ablation's uniform attention computes
    uniform = numpy_forward([A.numpy() for A in As], W_U.numpy(), X.numpy(), cfg.causal,
                            cfg.readout_rows)
    assert np.abs(uniform - want).max() > 1e-3


def test_silencing_is_the_hooked_models_head_output_knock_out():
    cfg, As, W_U, X = random_model((2, 1, 2), "causal", seed=3)
    model = HookedDisentangledTransformer(cfg)
    with torch.no_grad():
        for block, A in zip(model.blocks, As):
            block.attn.A.copy_(A)
        model.unembed.W_U.copy_(W_U)

    def knock_out(z, hook):  # (B, T, H, D_l): head 1 of layer 1 and head 0 of layer 3
        z = z.clone()
        z[:, :, 1 if hook.name.startswith("blocks.0") else 0] = 0
        return z

    with torch.no_grad():
        want = model.run_with_hooks(X, fwd_hooks=[("blocks.0.attn.hook_z", knock_out),
                                                  ("blocks.2.attn.hook_z", knock_out)])
    emptied = [A.clone() for A in As]
    emptied[0][1] = 0
    emptied[2][0] = 0
    got = forward_many(cfg, [silence(cfg, emptied, W_U)], X)[0]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_no_empty_head_leaves_the_variant_unchanged():
    cfg, As, W_U, _ = random_model((1, 2), "causal")
    out, W = silence(cfg, As, W_U)
    assert all(a is b for a, b in zip(out, As)) and W is W_U


def test_the_empty_claim_silenced_writes_nothing_and_recovers_no_loss():
    cfg, As, W_U, _ = random_model((1, 1), "causal", seed=5)
    model = HookedDisentangledTransformer(cfg)
    with torch.no_grad():
        for block, A in zip(model.blocks, As):
            block.attn.A.copy_(A)
        model.unembed.W_U.copy_(W_U)
    batch = sample_batch(cfg.layout, 64, torch.Generator().manual_seed(0), dtype=torch.float64)
    empty = Hypothesis("empty", (), None, "cells")
    silenced = CircuitTester(model, batch, "silence").circuit(empty)
    # every head silenced: h^L is [X, I_T] followed by zeros, and W_U reads it whole
    rows = cfg.readout_rows
    h0 = torch.cat([batch.X, torch.eye(cfg.T, dtype=torch.float64).expand(len(batch), -1, -1)], -1)
    out = h0[:, rows] @ W_U[:cfg.widths[0]]
    want = float((out - batch.Y).pow(2).sum(-1).mean())
    assert silenced.mse == pytest.approx(want, rel=1e-10)
    zeroed = CircuitTester(model, batch, "zero").circuit(empty)
    assert abs(zeroed.mse - silenced.mse) > 1e-3


def test_a_claim_on_every_cell_is_the_model_under_silencing():
    cfg, As, W_U, _ = random_model((1, 2), "bidirectional", seed=7)
    model = HookedDisentangledTransformer(cfg)
    with torch.no_grad():
        for block, A in zip(model.blocks, As):
            block.attn.A.copy_(0.3 * A)
        model.unembed.W_U.copy_(W_U)
    batch = sample_batch(cfg.layout, 64, torch.Generator().manual_seed(0), dtype=torch.float64)
    stream = model.stream
    cells = tuple(Cell(layer, k, q, key, "1") for layer, n in enumerate(cfg.heads)
                  for k in range(n) for q in stream.labels(layer) for key in stream.labels(layer))
    whole = Hypothesis("whole", cells, None, "cells")
    assert CircuitTester(model, batch, "silence").circuit(whole).mse == pytest.approx(
        CircuitTester(model, batch, "zero").clean.mse, rel=1e-9)


def test_silence_is_a_named_ablation_style():
    cfg, As, W_U, _ = random_model((1, 1), "causal")
    model = HookedDisentangledTransformer(cfg)
    batch = sample_batch(cfg.layout, 8, torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(ValueError, match="ablation"):
        CircuitTester(model, batch, "silent")


def test_the_rule_screens_and_searches_under_the_style_it_is_given():
    from invperm_interp.analysis.controls import empty_claim
    from invperm_interp.analysis.mechanism import mechanism
    from invperm_interp.maths import constructions

    model = constructions.build("theorem3", 4, 10.0)
    batch = sample_batch(model.cfg.layout, 128, torch.Generator().manual_seed(2),
                         dtype=torch.float64)
    screen = batch.head(64)
    got = {style: mechanism(model, batch, ablation=style, screen=64, exact=False).empty.circuit
           for style in ("zero", "silence")}
    for style, score in got.items():
        want = CircuitTester(model, screen, style).circuit(empty_claim())
        assert score.mse == pytest.approx(want.mse, rel=1e-12)
    assert abs(got["zero"].mse - got["silence"].mse) > 1e-3
    with pytest.raises(ValueError, match="ablation"):
        mechanism(model, batch, ablation="silence", tester=CircuitTester(model, batch, "mean"))
