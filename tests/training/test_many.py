"""train_many: each job is the run train makes of it, vectorised or not; a NaN instance stops alone."""

import json

import pytest
import torch

import invperm_interp.training.many as many_mod
import invperm_interp.training.trainer as trainer_mod
from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig
from invperm_interp.config import TrainConfig
from invperm_interp.training.many import Failed, bucket_key, train_many
from invperm_interp.training.run import Run
from invperm_interp.training.single import resume, train


def job(seed=0, d=3, attention_dir="bidirectional", out=None, **kw):
    model_cfg = ModelConfig(Layout.plain(d), attention_dir=attention_dir)
    base = dict(steps=8, batch_size=16, eval_every=4, eval_size=32, device="cpu", seed=seed,
                checkpoint_every=4, out_dir=None if out is None else str(out))
    base.update(kw)
    return model_cfg, TrainConfig(**base)


def close_metrics(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = x.without_wall_clock().to_dict(), y.without_wall_clock().to_dict()
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], float):
                assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-7), k
            else:
                assert x[k] == y[k], k


def close_weights(a, b, rel=1e-5):
    """Every weight tensor within ``rel`` relative error, ``‖a − b‖ ≤ rel·‖a‖`` (Frobenius): the
    vectorised forward sums in another order (batched matmuls), and Adam's normalised step turns
    float rounding in a near-zero gradient into a visible difference of that one entry."""
    for k, v in a.items():
        assert (v - b[k]).norm().item() <= rel * v.norm().item(), k


@pytest.mark.parametrize("recipe", ["adam", "paper"])
def test_vectorised_train_many_equals_train_of_each_job(tmp_path, recipe):
    lrs = [None, None, None] if recipe == "paper" else [1e-2, 3e-2, 1e-2]
    jobs = [job(seed, out=tmp_path / f"many{seed}", recipe=recipe, lr=lr)
            for seed, lr in zip((0, 1, 2), lrs)]
    jobs[2] = (jobs[2][0], TrainConfig(**{**jobs[2][1].to_dict(), "steps": 6}))  # another length
    runs = train_many(jobs, vectorize=True, progress=False)
    for (model_cfg, train_cfg), got in zip(jobs, runs):
        alone = train(model_cfg, TrainConfig(**{**train_cfg.to_dict(), "out_dir": None}),
                      progress=False)
        assert isinstance(got, Run) and got.step == alone.step == train_cfg.steps
        close_weights(alone.model.state_dict(), got.model.state_dict())
        close_metrics(alone.metrics, got.metrics)
        # The run directory is train's: loadable, and resumable by train to a longer run.
        loaded = HookedDisentangledTransformer.from_run(train_cfg.out_dir)
        close_weights(alone.model.state_dict(), loaded.state_dict())
        longer = train(model_cfg, TrainConfig(**{**train_cfg.to_dict(), "out_dir": None,
                                                 "steps": train_cfg.steps + 4}), progress=False)
        extended = resume(train_cfg.out_dir, steps=train_cfg.steps + 4, progress=False)
        close_weights(longer.model.state_dict(), extended.model.state_dict(), rel=1e-4)


def test_sequential_train_many_is_train(tmp_path):
    jobs = [job(seed, out=tmp_path / f"r{seed}") for seed in (0, 1)]
    runs = train_many(jobs, progress=False)  # the CPU default: one job after another
    for (model_cfg, train_cfg), got in zip(jobs, runs):
        alone = train(model_cfg, TrainConfig(**{**train_cfg.to_dict(), "out_dir": None}),
                      progress=False)
        for k, v in alone.model.state_dict().items():
            assert torch.equal(v, got.model.state_dict()[k])


@pytest.mark.parametrize("vectorize", [True, False])
def test_a_nan_instance_stops_alone_and_is_recorded(tmp_path, monkeypatch, vectorize):
    jobs = [job(seed, out=tmp_path / f"r{seed}", steps=12) for seed in (0, 1, 2)]
    original = trainer_mod.sample_batch

    def sample(layout, n, generator, **kw):
        batch = original(layout, n, generator, **kw)
        if generator.initial_seed() == 4 * 1 + 1:  # job 1's training stream (trainer.seed_streams)
            batch.X[0, 0, 0] = float("nan")
        return batch

    monkeypatch.setattr(trainer_mod, "sample_batch", sample)
    monkeypatch.setattr(many_mod, "sample_batch", sample)
    runs = train_many(jobs, vectorize=vectorize, progress=False)
    assert isinstance(runs[1], Failed) and "training diverged" in runs[1].error
    record = json.loads((tmp_path / "r1" / "diverged.json").read_text())
    assert record["step"] == runs[1].step and record["error"] == runs[1].error
    for i in (0, 2):
        assert isinstance(runs[i], Run) and runs[i].step == 12
        assert all(torch.isfinite(v).all() for v in runs[i].model.state_dict().values())
    # Rerun with resume: the finished runs come back as they are, the diverged one as its record.
    again = train_many(jobs, resume=True, vectorize=vectorize, progress=False)
    assert isinstance(again[1], Failed) and again[1].step == runs[1].step
    assert [r.step for r in (again[0], again[2])] == [12, 12]


def test_early_stopping_per_instance():
    jobs = [job(0, steps=40, lr=5e-2), job(1, steps=40, lr=5e-2, stop_at_mse=100.0)]
    runs = train_many(jobs, vectorize=True, progress=False)
    assert runs[0].step == 40 and runs[1].step == 0  # 100 is above the initial MSE
    assert runs[1].metrics[-1].stopped == "stop_at_mse"


def test_buckets_split_on_shape_and_reject_bad_jobs(tmp_path):
    assert bucket_key(*job(0)) == bucket_key(*job(1, lr=0.5, steps=3))
    assert bucket_key(*job(0)) != bucket_key(*job(0, d=4))
    assert bucket_key(*job(0)) != bucket_key(*job(0, attention_dir="causal"))
    mixed = [job(0, d=3), job(0, d=4), job(1, d=3)]
    runs = train_many(mixed, vectorize=True, progress=False)
    assert [r.model_cfg.d for r in runs] == [3, 4, 3]
    with pytest.raises(ValueError, match="distinct out_dir"):
        train_many([job(0, out=tmp_path / "a"), job(1, out=tmp_path / "a")], progress=False)
    with pytest.raises(ValueError, match=r"jobs\[1\]"):
        train_many([job(0), "not a job"], progress=False)
