"""``invperm import``: a TransformerLens model saved as safetensors and JSON becomes a run directory
that every command reads; its exactness is stated and recorded; what it cannot take is one line
naming the file."""

import json

import pytest
import torch
from helpers import run
from safetensors.torch import save_file

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.model import tokens
from invperm_interp.model.standard_export import standard_to_transformer_lens
from invperm_interp.model.standard_import import native_output
from invperm_interp.model.transformer_lens_files import load_native
from invperm_interp.training.run import Run


def _save(bridge, folder, name="model"):
    """The two files a user writes: ``(weights, config)`` paths as strings."""
    weights, config = folder / f"{name}.safetensors", folder / f"{name}.json"
    save_file(bridge.state_dict(), str(weights))
    config.write_text(json.dumps(bridge.cfg.to_dict(), default=str))
    return str(weights), str(config)


def _bridge(layout, d_vocab=None, seed=0, **kw):
    """A native model on random weights (σ 0.5, every attention bias too), in float32."""
    from transformer_lens import TransformerBridge, TransformerBridgeConfig

    settings = dict(d_model=8, d_head=4, n_heads=2, n_layers=2, n_ctx=layout.T + 1,
                    d_vocab=d_vocab or layout.d, d_vocab_out=layout.d, attn_only=True,
                    normalization_type=None, attention_dir="causal",
                    positional_embedding_type="standard", architecture="TransformerLensNative",
                    seed=seed) | kw
    bridge = TransformerBridge.boot_native(TransformerBridgeConfig(**settings))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in bridge.original_model.named_parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return bridge.eval()


def _record(out):
    return json.loads((out / "import.json").read_text())


@pytest.mark.slow
def test_an_exported_run_imported_again_gives_the_same_mechanism_record(tmp_path, capsys):
    """A trained standard run with heads (1, 3), exported (its layer of 1 head padded with heads of
    zeros), saved, imported: the same heads, the same weights bit for bit, the same analysis."""
    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=8, d_head=4, n_heads=(1, 3),
                      attention_dir="bidirectional")
    trained = run(cfg, TrainConfig(steps=40, batch_size=64, eval_every=20, eval_size=64,
                                   device="cpu", lr=3e-2, out_dir=str(tmp_path / "original")))
    weights, config = _save(standard_to_transformer_lens(trained.weights).tl_model, tmp_path)
    assert main(["import", weights, config, "--out", str(tmp_path / "imported")]) == 0
    imported = Run.load(tmp_path / "imported")
    assert imported.model_cfg.heads == (1, 3) and imported.model_cfg.d_model == 8
    for name, p in trained.weights.state_dict().items():
        assert torch.equal(imported.weights.state_dict()[name], p), name
    record = _record(tmp_path / "imported")
    # the export's token embedding lists vocabulary @ W_E summed in float32: linear to its rounding
    assert record["embedding_residual"] <= 1e-6 and not record["biases_folded"]
    assert record["max_relative_error_float64"] <= 1e-7
    for name in ("original", "imported"):
        assert main(["analyze", str(tmp_path / name), "--n", "64"]) == 0
    first, again = (json.loads((tmp_path / name / "analysis.json").read_text())
                    for name in ("original", "imported"))
    for key in ("mechanism", "circuit", "cells", "closest", "ablations", "mse", "lemma1"):
        assert first[key] == again[key], key
    assert "invperm analyze" in capsys.readouterr().out


@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
def test_a_biased_model_imports_exactly_and_every_command_reads_it(tmp_path, capsys, attention_dir):
    layout = Layout.scratch(3)
    bridge = _bridge(layout, attention_dir=attention_dir)
    assert bridge.original_model.layers[0].attn.v.bias.abs().max() > 0.1
    weights, config = _save(bridge, tmp_path)
    out = tmp_path / "run"
    assert main(["import", weights, config, "--layout", "scratch", "--out", str(out)]) == 0
    record = _record(out)
    assert record["max_relative_error_float64"] <= 1e-10
    assert record["max_relative_error_through_map_float64"] <= 1e-10
    assert record["max_relative_error_float32"] <= 1e-5 and record["biases_folded"]
    printed = capsys.readouterr().out
    assert "exactly" in printed and f"{record['max_relative_error_float64']:.2g} in float64" in printed
    loaded = Run.load(out)  # the run directory's model is the user's, in float64 too
    assert loaded.model_cfg.attention_dir == attention_dir and loaded.model_cfg.readout == "S"
    assert loaded.model_cfg.d_model == 9 and loaded.final_metrics.step == 0
    X = sample_batch(layout, 32, torch.Generator().manual_seed(3), dtype=torch.float64).X
    theirs = native_output(load_native(weights, config, torch.float64), layout, "S", X)
    with torch.no_grad():
        ours = loaded.weights.double()(X)
    assert (ours - theirs).abs().max() <= 1e-5 * max(1.0, theirs.abs().max().item())
    from invperm_interp.runs import checkpoint as ckpt

    assert ckpt.load(out / "final.safetensors")[1]["imported"] == record


def test_a_free_token_embedding_needs_approximate_and_its_error_is_recorded(tmp_path, capsys):
    layout = Layout.plain(3)
    weights, config = _save(_bridge(layout, d_vocab=tokens.vocabulary_size(layout)), tmp_path)
    out = tmp_path / "run"
    assert main(["import", weights, config, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not linear in the task's rows" in err
    assert "--approximate" in err and "would be off by" in err
    assert not (out / "config.json").exists()
    assert main(["import", weights, config, "--out", str(out), "--approximate"]) == 0
    record = _record(out)
    assert record["approximate"] and record["embedding_residual"] > 1e-2
    assert record["max_relative_error_float64"] > 1e-3  # not the same function, and said so
    printed = capsys.readouterr().out
    assert "approximately" in printed and f"{record['max_relative_error_float64']:.2g}" in printed
    assert f"{record['max_relative_error_float64']:.2g} of TransformerLens's output" in err


def test_a_linear_token_embedding_imports_exactly_from_token_ids(tmp_path):
    layout = Layout.plain(3)
    bridge = _bridge(layout, d_vocab=tokens.vocabulary_size(layout))
    with torch.no_grad():  # the export's embedding: token v is vocabulary[v] @ W_E
        bridge.original_model.tok_embed.weight.copy_(
            tokens.vocabulary(layout).float() @ torch.randn(layout.d, 8))
    weights, config = _save(bridge, tmp_path)
    assert main(["import", weights, config, "--out", str(tmp_path / "run")]) == 0
    record = _record(tmp_path / "run")
    assert not record["approximate"] and record["max_relative_error_float64"] <= 1e-10


def test_a_hooked_transformer_state_dict_imports_too(tmp_path):
    """Property names (``blocks.0.attn.W_Q``, per-head shapes) are converted by TransformerLens."""
    layout = Layout.plain(3)
    bridge = _bridge(layout, n_heads=2)
    _, config = _save(bridge, tmp_path)
    H, dh, native = 2, 4, bridge.original_model
    state = {"embed.W_E": native.tok_embed.weight, "pos_embed.W_pos": native.pos.weight,
             "unembed.W_U": native.head.weight.T, "unembed.b_U": torch.zeros(layout.d)}
    for i, layer in enumerate(native.layers):
        a = layer.attn
        for key in "QKV":
            linear = getattr(a, key.lower())
            state[f"blocks.{i}.attn.W_{key}"] = linear.weight.reshape(H, dh, 8).transpose(1, 2)
            state[f"blocks.{i}.attn.b_{key}"] = linear.bias.reshape(H, dh)
        state[f"blocks.{i}.attn.W_O"] = a.o.weight.T.reshape(H, dh, 8)
        state[f"blocks.{i}.attn.b_O"] = a.o.bias
    weights = tmp_path / "hooked.safetensors"
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(weights))
    assert main(["import", str(weights), config, "--out", str(tmp_path / "run")]) == 0
    assert _record(tmp_path / "run")["max_relative_error_float64"] <= 1e-10


def _config_with(tmp_path, **changes) -> tuple[str, str]:
    layout = Layout.plain(3)
    weights, config = _save(_bridge(layout), tmp_path)
    data = json.loads(open(config).read()) | changes
    with open(config, "w") as f:
        json.dump(data, f)
    return weights, config


@pytest.mark.parametrize("changes,message", [
    ({"normalization_type": "LN"}, "normalization_type='LN': invperm import takes attention only"),
    ({"attn_only": False, "d_mlp": 16}, "has MLPs (attn_only=False): invperm import takes attention "
                                        "only"),
    ({"n_ctx": 4}, "n_ctx=4, the task's layout"),
    ({"d_vocab_out": 5}, "d_vocab_out=5, the task has d = 3"),
    ({"dtype": "int8"}, "dtype must be one of"),
    ({"d_model": "8"}, "must give d_model, d_head, n_layers, n_ctx as integers"),
    ({"d_head": 2}, "has shape (8,), config"),
])
def test_what_the_import_cannot_take_is_one_line_naming_the_config(tmp_path, capsys, changes,
                                                                  message):
    weights, config = _config_with(tmp_path, **changes)
    assert main(["import", weights, config, "--d", "3", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err
    assert config in err
    assert not (tmp_path / "run" / "config.json").exists()


def test_missing_bad_and_pickled_files_are_one_line_naming_the_argument(tmp_path, capsys):
    weights, config = _save(_bridge(Layout.plain(3)), tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 20)
    (tmp_path / "model.pt").write_bytes(b"\x80\x04")
    cases = [
        ([str(tmp_path / "none.safetensors"), config], "weights", "does not exist"),
        ([weights, str(tmp_path / "none.json")], "config", "does not exist"),
        ([weights, str(tmp_path / "bad.json")], "config", "is not JSON"),
        ([str(tmp_path / "bad.safetensors"), config], "weights", "is not a safetensors file"),
        ([str(tmp_path / "model.pt"), config], "weights", "looks like a pickle"),
    ]
    for i, (files, argument, message) in enumerate(cases):
        code = main(["import", *files, "--out", str(tmp_path / f"run{i}")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "\n" not in err, err
        assert f"{argument} " in err and message in err and "save_file" in err, err


def test_the_import_writes_only_into_a_new_or_empty_directory(tmp_path, capsys):
    weights, config = _save(_bridge(Layout.plain(3)), tmp_path)
    out = tmp_path / "run"
    assert main(["import", weights, config, "--out", str(out)]) == 0
    assert main(["import", weights, config, "--out", str(out)]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_analysing_a_transformer_lens_model_directly_points_to_the_import():
    from invperm_interp.analysis import analyze
    from invperm_interp.task import Layout, sample_batch

    layout = Layout.plain(3)
    bridge = _bridge(layout)
    batch = sample_batch(layout, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="imported first: model.standard_import"):
        analyze(bridge, batch)
