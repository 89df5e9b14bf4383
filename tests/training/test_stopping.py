"""Early stopping (``stop_at_mse``, the plateau at the causal floor), the "fast" recipe and the
default thread count."""

import json
from dataclasses import replace

import pytest
import torch

from invperm_interp import Layout, ModelConfig
from invperm_interp.config import RECIPE_DEFAULTS, TrainConfig
from invperm_interp.runs.checkpoint import load as load_checkpoint
from invperm_interp.runs.evaluation import Evaluation
from invperm_interp.training.cpu import threads_for
from invperm_interp.training.run import Run
from invperm_interp.training.single import resume, train
from invperm_interp.training.stopping import stop_reason


def cfgs(attention_dir="bidirectional", d=3, **train_kw):
    model_cfg = ModelConfig(Layout.plain(d), attention_dir=attention_dir)
    kw = dict(steps=60, batch_size=32, eval_every=5, eval_size=64, device="cpu", lr=5e-2)
    kw.update(train_kw)
    return model_cfg, TrainConfig(**kw)


def without_time(metrics):
    return [replace(m, wall_time=None, stopped=None) for m in metrics]


def test_stop_at_mse_ends_at_the_first_evaluation_below_it(tmp_path):
    model_cfg, train_cfg = cfgs()
    full = train(model_cfg, train_cfg, progress=False)
    mses = [m.mse for m in full.metrics]
    threshold = (mses[0] + mses[-1]) / 2  # crossed somewhere in the middle of the run
    first = next(i for i, v in enumerate(mses) if v < threshold)
    assert 0 < first < len(mses) - 1

    out = tmp_path / "run"
    stopped = train(model_cfg, TrainConfig(**{**train_cfg.to_dict(), "stop_at_mse": threshold,
                                              "out_dir": str(out)}), progress=False)
    assert stopped.step == full.metrics[first].step < train_cfg.steps
    assert without_time(stopped.metrics) == without_time(full.metrics[: first + 1])
    assert stopped.metrics[-1].stopped == "stop_at_mse"
    assert all(m.stopped is None for m in stopped.metrics[:-1])
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["stopped"] == "stop_at_mse" and lines[-1]["step"] == stopped.step
    _, meta = load_checkpoint(out / "final.safetensors")
    assert meta["stopped"] == "stop_at_mse" and meta["step"] == stopped.step
    loaded = Run.load(out)
    assert loaded.step == stopped.step
    for k, v in stopped.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v)
    # A finished (stopped) run resumes to itself without training a step.
    again = resume(out, progress=False)
    assert again.step == stopped.step and again.metrics == loaded.metrics


def test_lifting_the_stop_on_resume_continues_the_same_trajectory(tmp_path):
    model_cfg, train_cfg = cfgs(steps=20)
    full = train(model_cfg, train_cfg, progress=False)
    out = tmp_path / "run"
    threshold = full.metrics[2].mse * 1.0001  # reached at the third evaluation (step 10)
    train(model_cfg, TrainConfig(**{**train_cfg.to_dict(), "stop_at_mse": threshold,
                                    "out_dir": str(out)}), progress=False)
    config = json.loads((out / "config.json").read_text())
    config["train"]["stop_at_mse"] = None
    (out / "config.json").write_text(json.dumps(config))
    finished = resume(out, progress=False)
    assert finished.step == 20
    for k, v in full.model.state_dict().items():
        assert torch.equal(finished.model.state_dict()[k], v), k


def test_plateau_at_the_causal_floor_stops_causal_models_only():
    # Tolerance 10: MSE <= 11 * floor holds from the start (floor d/4), so the run stops as soon as
    # floor_patience evaluations agree.
    model_cfg, train_cfg = cfgs("causal", stop_at_floor=10.0, floor_patience=3)
    run = train(model_cfg, train_cfg, progress=False)
    assert [m.step for m in run.metrics] == [0, 5, 10]
    assert run.metrics[-1].stopped == "causal_floor" and run.step == 10
    bidir_cfg, _ = cfgs("bidirectional")
    assert train(bidir_cfg, train_cfg, progress=False).step == train_cfg.steps


def test_stop_reason_against_hand_made_metrics():
    cfg = TrainConfig(stop_at_floor=0.01, floor_patience=2, stop_at_mse=1e-3)
    at = [Evaluation(step, m, causal_floor=2.5) for step, m in enumerate((3.0, 2.52, 2.51))]
    assert stop_reason(cfg, at[:2], causal=True) is None  # 3.0 is above 1.01 * 2.5
    assert stop_reason(cfg, at, causal=True) == "causal_floor"
    assert stop_reason(cfg, at, causal=False) is None
    assert stop_reason(cfg, [Evaluation(0, 9e-4, causal_floor=2.5)], causal=False) == "stop_at_mse"
    assert stop_reason(TrainConfig(), at, causal=True) is None


@pytest.mark.parametrize("bad", [dict(stop_at_mse=0), dict(stop_at_mse=float("nan")),
                                 dict(stop_at_floor=-1.0), dict(floor_patience=0),
                                 dict(stop_at_mse=True), dict(batch_size=0)])
def test_stopping_fields_reject_bad_values(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        TrainConfig(**bad)


def test_fast_recipe_is_adam_at_its_own_batch_size():
    fast = TrainConfig(recipe="fast").resolved()
    assert (fast.optimizer, fast.schedule) == ("adam", "constant")
    assert (fast.batch_size, fast.lr) == (RECIPE_DEFAULTS["fast"]["batch_size"],
                                          RECIPE_DEFAULTS["fast"]["lr"])
    assert TrainConfig().resolved().batch_size == 1024
    assert TrainConfig(recipe="fast", batch_size=512).resolved().batch_size == 512
    run = train(*cfgs(recipe="fast", steps=2, lr=None, batch_size=None), progress=False)
    assert run.train_cfg.batch_size == RECIPE_DEFAULTS["fast"]["batch_size"]


def test_default_threads_is_one_on_the_cpu_and_restored_after():
    assert threads_for(TrainConfig(device="cpu")) == 1
    assert threads_for(TrainConfig(device="cpu", threads=3)) == 3
    seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model_cfg, train_cfg = cfgs(steps=1)
        import invperm_interp.training.trainer as trainer_mod

        original = trainer_mod.Trainer.run

        def spy(self, *args, **kwargs):
            seen.append(torch.get_num_threads())
            return original(self, *args, **kwargs)

        trainer_mod.Trainer.run = spy
        try:
            train(model_cfg, train_cfg, progress=False)
        finally:
            trainer_mod.Trainer.run = original
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
