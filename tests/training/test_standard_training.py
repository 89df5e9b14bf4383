"""Standard transformers train like the disentangled model: run directories, checkpoints,
bit-identical resume, early stopping, many at once, memory estimates, grids and the command."""

from dataclasses import replace

import pytest
import torch
from helpers import assert_same_weights, run, small, strip, weights

from invperm_interp import Layout, ModelConfig, Run
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.model.standard import StandardTransformer
from invperm_interp.model.standard_hooked import HookedStandardTransformer
from invperm_interp.sweep.grid import load_grid
from invperm_interp.training.footprint import saved_for_backward, training_estimate
from invperm_interp.training.many import train_many
from invperm_interp.training.single import resume

SHAPES = {"through the map": dict(d_model=32, d_head=16),  # D_l = 12, 24: narrower than d_model
          "direct, LayerNorm and MLP": dict(d_model=6, layernorm=True, d_mlp=8)}


def standard(name: str, **train_kw):
    model_cfg, train_cfg = small(d=4, **train_kw)
    return replace(model_cfg, arch="standard", init_scale=None, **SHAPES[name]), train_cfg


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_standard_run_resumes_bit_identically_and_loads_from_its_directory(tmp_path, name):
    model_cfg, train_cfg = standard(name, steps=10, eval_every=3, checkpoint_every=100)
    assert StandardTransformer(model_cfg).through_note == (name == "through the map")
    straight = run(model_cfg, replace(train_cfg, out_dir=str(tmp_path / "a")))
    assert straight.metrics[-1].mse < straight.metrics[0].mse  # it learns something
    run(model_cfg, replace(train_cfg, out_dir=str(tmp_path / "b")), stop_at=5)
    resumed = resume(tmp_path / "b", progress=False)
    assert resumed.step == 10 and strip(resumed.metrics) == strip(straight.metrics)
    assert_same_weights(weights(resumed.weights), weights(straight.weights))
    loaded = Run.load(tmp_path / "b")
    assert isinstance(loaded.weights, StandardTransformer) and loaded.model_cfg == model_cfg
    assert isinstance(loaded.model, HookedStandardTransformer)
    assert_same_weights(weights(loaded.model), weights(straight.weights))
    from_run = HookedStandardTransformer.from_run(str(tmp_path / "a"))
    assert_same_weights(weights(from_run), weights(straight.weights))


def test_early_stopping_ends_a_standard_run():
    model_cfg, train_cfg = standard("through the map", steps=30, eval_every=3, stop_at_mse=100.0)
    stopped = run(model_cfg, train_cfg)
    assert stopped.step == 0 and stopped.metrics[-1].stopped  # the first evaluation is below


def test_many_standard_runs_vectorised_equal_each_run_alone(tmp_path):
    jobs = [standard("through the map", seed=s, out_dir=str(tmp_path / f"r{s}")) for s in (0, 1)]
    runs = train_many(jobs, vectorize=True, progress=False)
    for (model_cfg, train_cfg), got in zip(jobs, runs):
        alone = run(model_cfg, replace(train_cfg, out_dir=None))
        for k, v in alone.weights.state_dict().items():  # batched matmuls sum in another order
            other = got.weights.state_dict()[k]
            assert (v - other).norm().item() <= 1e-4 * v.norm().item(), k


def test_the_memory_estimate_counts_the_standard_forward():
    model_cfg, _ = standard("direct, LayerNorm and MLP")
    assert sum(saved_for_backward(model_cfg, 3, "cpu")) > sum(saved_for_backward(model_cfg, 2, "cpu"))
    wide = replace(model_cfg, d_model=1024, d_head=1024, d_mlp=None, layernorm=False)
    estimate = training_estimate(wide, "adam", 8, 16)
    # weights, gradients and Adam's two moments of the 2-layer model, float32
    assert estimate.parts["weights, gradients and optimizer state"] >= 4 * wide.n_params * 4
    with pytest.raises(ValueError, match="GB"):
        StandardTransformer(replace(wide, d_model=2**16, d_head=2**16), max_memory="1GB")


def test_grids_take_the_architecture_as_axes(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('seeds = 1\n[model]\nd = 3\narch = "standard"\nd_model = [8, 16]\n'
                    'layernorm = [false, true]\n[train]\nsteps = 2\ndevice = "cpu"\n')
    jobs = load_grid(path).jobs
    assert sorted((j.model_cfg.d_model, j.model_cfg.layernorm) for j in jobs) == \
        [(8, False), (8, True), (16, False), (16, True)]
    assert all(j.model_cfg.arch == "standard" for j in jobs)


def test_the_command_trains_a_standard_model(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", "--arch", "standard", "--d", "3", "--d-model", "8", "--layernorm",
                 "--steps", "4", "--batch-size", "8", "--eval-size", "16", "--eval-every", "2",
                 "--device", "cpu", "--out", str(out), "--no-progress"]) == 0
    cfg = Run.load(out).model_cfg
    assert (cfg.arch, cfg.d_model, cfg.layernorm, cfg.d_mlp) == ("standard", 8, True, None)
    assert "step 4" in capsys.readouterr().out
    assert main(["train", "--d-model", "8", "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "d_model belong to arch='standard'" in capsys.readouterr().err


def test_a_standard_config_builds_the_same_weights_every_time():
    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=8)
    a, b = StandardTransformer(cfg, seed=5), StandardTransformer(cfg, seed=5)
    assert_same_weights(a, b)
    assert not torch.equal(a.embed.W_E, StandardTransformer(cfg, seed=6).embed.W_E)
    assert TrainConfig(steps=1).resolved().lr == 1e-2  # the recipe is the disentangled model's
