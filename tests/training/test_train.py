"""The training engine: recipes, determinism, resume, checkpoint safety, and that it learns."""

import json
import math
import os
import signal
import threading
from dataclasses import replace

import pytest
import torch
from helpers import assert_same_weights, run, small, strip, weights

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, Run, sample_batch
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.maths.floors import causal_floor
from invperm_interp.model.disentangled import DisentangledTransformer, readout_forward
from invperm_interp.runs.config_file import config_hash
from invperm_interp.runs.directory import RunDir
from invperm_interp.task import mse
from invperm_interp.training.schedule import learning_rate
from invperm_interp.training.single import resume, train_or_reuse
from invperm_interp.training.trainer import seed_streams


def snapshot(folder):
    """Every file under ``folder`` with its bytes, to prove nothing was touched."""
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- configuration ----------------------------------------------------------------------------
def test_train_config_json_round_trip_and_recipe_defaults():
    cfg = TrainConfig(steps=10, recipe="paper", schedule_steps=2**15, threads=1, out_dir="runs/x")
    assert TrainConfig.from_json(cfg.to_json()) == cfg
    resolved = cfg.resolved()
    assert (resolved.optimizer, resolved.lr, resolved.schedule, resolved.init) == (
        "sgd", 1.0, "cosine", "zeros")
    assert TrainConfig(steps=7).resolved().schedule_steps is None  # constant lr: no horizon
    assert TrainConfig(steps=7, recipe="paper").resolved().schedule_steps == 2**16  # the note's
    assert TrainConfig(steps=7, schedule="cosine").resolved().schedule_steps == 7
    assert TrainConfig().resolved().lr == 1e-2


@pytest.mark.parametrize("bad, match", [
    (dict(recipe="paper", lr=0.1), "fixes lr"),
    (dict(recipe="paper", optimizer="adam"), "fixes optimizer"),
    (dict(recipe="paper", init="normal"), "fixes init"),
    (dict(recipe="sgd"), "recipe must be"),
    (dict(steps=0), "steps must be"),
    (dict(device="gpu"), "device must be"),
    (dict(lr=float("nan")), "lr must be"),
    (dict(seed=-1), "seed must be"),
    (dict(threads=0), "threads must be"),
])
def test_train_config_rejects_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**bad)


def test_train_config_rejects_unknown_json_keys():
    with pytest.raises(ValueError, match="unknown keys"):
        TrainConfig.from_dict({"stepz": 3})


def test_paper_recipe_forces_zero_init_and_says_so():
    model_cfg, train_cfg = small(recipe="paper", steps=1)
    r = run(model_cfg, train_cfg)
    assert model_cfg.init == "normal" and r.model_cfg.init == "zeros"


# -- the step's maths -------------------------------------------------------------------------
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("layout, readout, heads", [
    (Layout.plain(4), "P", 1), (Layout.plain(3), "Y", (2, 1, 2)),
    (Layout.scratch(4, scratch=[0.5, -1.0, 2.0, 0.0]), "S", (1, 2, 1)), (Layout.plain(2), "P", 3),
])
@pytest.mark.parametrize("n_layers", [1, 2, 3])
def test_readout_forward_equals_the_hooked_forward(attention_dir, layout, readout, heads, n_layers):
    """The forward that keeps the stream without ``I_T`` (reordering ``A``'s features) against the
    hooked forward of the whole stream: outputs and the loss's gradients. Three layers with
    several heads before the last are where the kept columns' order is least trivial."""
    if isinstance(heads, tuple):
        heads = heads[:n_layers] if n_layers > 1 else heads[0]
    cfg = ModelConfig(layout, n_layers=n_layers, n_heads=heads, attention_dir=attention_dir,
                      readout=readout, dtype="float64", init_scale=0.5)
    model = HookedDisentangledTransformer(cfg, seed=3)
    batch = sample_batch(layout, 5, torch.Generator().manual_seed(0), dtype=torch.float64)
    fast, hooked = readout_forward(model, batch.X), model(batch.X)
    torch.testing.assert_close(fast, hooked, rtol=1e-12, atol=1e-12)
    params = list(model.parameters())
    for a, b in zip(torch.autograd.grad(mse(fast, batch.Y), params),
                    torch.autograd.grad(mse(hooked, batch.Y), params)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@pytest.mark.parametrize("init", ["normal", "zeros"])
def test_the_hook_free_model_is_the_hooked_model_without_hooks(attention_dir, init):
    """Same seed, same weights under the same names; the same outputs; ``from_module`` copies."""
    cfg = ModelConfig(Layout.scratch(3), n_heads=(2, 1), attention_dir=attention_dir, init=init,
                      readout="S", dtype="float64", init_scale=0.5)
    plain, hooked = DisentangledTransformer(cfg, seed=5), HookedDisentangledTransformer(cfg, seed=5)
    assert_same_weights(plain.state_dict(), hooked.state_dict())
    assert list(plain.state_dict()) == list(hooked.state_dict())
    X = sample_batch(cfg.layout, 4, torch.Generator().manual_seed(1), dtype=torch.float64).X
    torch.testing.assert_close(plain(X), hooked(X), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(plain(hooked.to_tokens(X)), hooked(X), rtol=1e-12, atol=1e-12)
    copy = HookedDisentangledTransformer.from_module(plain)
    assert_same_weights(copy.state_dict(), plain.state_dict())
    with torch.no_grad():
        plain.unembed.W_U.add_(1.0)
    assert not torch.equal(copy.W_U, plain.unembed.W_U)  # a copy, not shared
    with pytest.raises(ValueError, match=r"X must have shape \(B, 9, 3\)"):
        plain(X[:, :-1])


def test_learning_rate_schedules():
    const = TrainConfig(steps=10)
    assert learning_rate(const, 0) == learning_rate(const, 9) == 1e-2
    cos = TrainConfig(steps=10, recipe="paper", schedule_steps=8)
    assert learning_rate(cos, 0) == 1.0
    assert learning_rate(cos, 4) == pytest.approx(0.5)
    assert learning_rate(cos, 8) == learning_rate(cos, 9) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("steps", [10, 2**16])
def test_paper_recipe_decays_over_the_notes_2_to_the_16_steps(steps):
    """The note trains 2^16 steps; its code's cosine runs over that run's own length, whatever the
    length of this run (a shorter one is a prefix of the note's)."""
    cfg = TrainConfig(steps=steps, recipe="paper")
    for s in (0, 2**15, 2**16 - 1):
        assert learning_rate(cfg, s) == pytest.approx(0.5 * (1 + math.cos(math.pi * s / 2**16)),
                                                      rel=1e-12, abs=1e-15)
    assert learning_rate(cfg, 0) == 1.0 and learning_rate(cfg, 2**15) == pytest.approx(0.5)
    assert 0 < learning_rate(cfg, 2**16 - 1) < 1e-8  # the last update still moves, barely


def test_paper_recipe_is_the_notes_update_rule():
    """Two steps of zero init, SGD lr 1, gradient entries clipped to ±1, cosine over 4 steps, by
    hand on the hooked model; large scratch rows make the clipping bite."""
    layout = Layout.scratch(4, scratch=[3.0, 3.0, 3.0, 3.0])
    model_cfg, train_cfg = small(layout=layout, readout="S", attention_dir="causal",
                                 recipe="paper", steps=2, schedule_steps=4, eval_every=100)
    result = run(model_cfg, train_cfg)

    model = HookedDisentangledTransformer(replace(model_cfg, init="zeros"))
    generator = torch.Generator().manual_seed(seed_streams(train_cfg.seed)["data"])
    clipped = False
    for step in range(2):
        batch = sample_batch(layout, train_cfg.batch_size, generator)
        loss = ((model(batch.X) - batch.Y) ** 2).sum(-1).mean()
        grads = torch.autograd.grad(loss, list(model.parameters()))
        lr = 0.5 * (1 + torch.cos(torch.tensor(torch.pi * step / 4, dtype=torch.float64)))
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                clipped |= bool((g.abs() > 1).any())
                p -= float(lr) * g.clamp(-1.0, 1.0)
    assert clipped
    for name, p in model.state_dict().items():
        torch.testing.assert_close(result.model.state_dict()[name], p, rtol=1e-5, atol=1e-6)
    assert [m.lr for m in result.metrics] == [1.0, pytest.approx(float(lr))]


# -- determinism ------------------------------------------------------------------------------
def test_same_seed_same_run_and_other_seed_other_data():
    model_cfg, train_cfg = small()
    a, b = run(model_cfg, train_cfg), run(model_cfg, train_cfg)
    assert strip(a.metrics) == strip(b.metrics)
    assert_same_weights(weights(a.model), weights(b.model))
    c = run(model_cfg, replace(train_cfg, seed=1))
    assert strip(a.metrics) != strip(c.metrics)
    draw = [sample_batch(model_cfg.layout, 8, torch.Generator().manual_seed(seed_streams(s)["data"])).X
            for s in (0, 1)]
    assert not torch.equal(*draw)


def test_a_short_run_is_a_prefix_of_a_long_one():
    model_cfg, train_cfg = small(steps=6, eval_every=3)
    short, long = run(model_cfg, train_cfg), run(model_cfg, replace(train_cfg, steps=12))
    assert strip(short.metrics) == strip(long.metrics)[: len(short.metrics)]


# -- run directory, resume --------------------------------------------------------------------
def test_run_directory_layout_and_loading(tmp_path):
    model_cfg, train_cfg = small(out_dir=str(tmp_path / "r"), checkpoint_every=4)
    r = run(model_cfg, train_cfg)
    d = tmp_path / "r"
    assert {p.name for p in d.iterdir()} == {"config.json", "metrics.jsonl", "checkpoints",
                                             "environment.jsonl", "final.safetensors"}
    assert [s for s, _ in RunDir(d).checkpoints()] == [4, 6]
    stored = json.loads((d / "config.json").read_text())
    assert stored["train"]["lr"] == 1e-2 and stored["model"]["attention_dir"] == "bidirectional"
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert lines == [m.to_dict() for m in r.metrics] and [m["step"] for m in lines] == [0, 3, 6]
    assert {"mse", "entry_acc", "row_acc", "sample_acc", "train_mse", "lr", "causal_floor",
            "wall_time", "version"} <= set(lines[-1])
    assert "attention_dir" not in lines[-1]  # config.json holds it
    assert lines[-1]["causal_floor"] == causal_floor(model_cfg.layout, "P") == 1.0
    loaded = Run.load(d)
    assert loaded.step == 6 and loaded.metrics == r.metrics
    assert_same_weights(weights(loaded.model), weights(r.model))
    model = HookedDisentangledTransformer.from_run(d)
    assert_same_weights(weights(model), weights(r.model))
    assert Run.load(d, step=4).step == 4
    with pytest.raises(ValueError, match="step must be one of"):
        Run.load(d, step=5)


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path):
    # eval_every does not divide the stop step: the running train-loss mean crosses the checkpoint
    model_cfg, train_cfg = small(steps=10, eval_every=3, checkpoint_every=100)
    straight = run(model_cfg, replace(train_cfg, out_dir=str(tmp_path / "a")))
    cfg_b = replace(train_cfg, out_dir=str(tmp_path / "b"))
    stopped = run(model_cfg, cfg_b, stop_at=5)
    assert stopped.step == 5 and not (tmp_path / "b" / "final.safetensors").exists()
    resumed = resume(tmp_path / "b", progress=False)
    assert resumed.step == 10
    assert strip(resumed.metrics) == strip(straight.metrics)
    assert_same_weights(weights(resumed.model), weights(straight.model))
    on_disk = Run.load(tmp_path / "b")
    assert strip(on_disk.metrics) == strip(straight.metrics)
    assert_same_weights(weights(on_disk.model), weights(straight.model))


def test_resume_can_extend_a_finished_run(tmp_path):
    model_cfg, train_cfg = small(steps=6, eval_every=3)
    straight = run(model_cfg, replace(train_cfg, steps=9))
    run(model_cfg, replace(train_cfg, out_dir=str(tmp_path / "r")))
    extended = resume(tmp_path / "r", steps=9, progress=False)
    assert strip(extended.metrics) == strip(straight.metrics)
    assert_same_weights(weights(extended.model), weights(straight.model))


def test_ctrl_c_checkpoints_and_resumes(tmp_path):
    model_cfg, train_cfg = small(d=2, steps=2500, batch_size=4, eval_every=1000, eval_size=8,
                                 checkpoint_every=10**6, out_dir=str(tmp_path / "r"))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt, match="stopped at step"):
        run(model_cfg, train_cfg)
    timer.cancel()
    (stopped,) = RunDir(tmp_path / "r").checkpoints()
    assert 0 < stopped[0] < 2500
    resumed = resume(tmp_path / "r", progress=False)
    straight = run(model_cfg, replace(train_cfg, out_dir=None))
    assert strip(resumed.metrics) == strip(straight.metrics)
    assert_same_weights(weights(resumed.model), weights(straight.model))


@pytest.fixture
def stopped_run(tmp_path):
    model_cfg, train_cfg = small(steps=8, out_dir=str(tmp_path / "r"))
    run(model_cfg, train_cfg, stop_at=4)
    return model_cfg, train_cfg, tmp_path / "r"


@pytest.mark.parametrize("damage, match", [
    ("flip", "corrupted"), ("truncate", "truncated or corrupted"), ("empty", "truncated"),
])
def test_damaged_checkpoint_is_refused_and_left_intact(stopped_run, damage, match):
    model_cfg, train_cfg, d = stopped_run
    path = RunDir(d).checkpoint(4)
    data = path.read_bytes()
    if damage == "flip":
        data = data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]
    elif damage == "truncate":
        data = data[: len(data) - 100]
    else:
        data = b""
    path.write_bytes(data)
    before = snapshot(d)
    with pytest.raises(ValueError, match=match):
        run(model_cfg, train_cfg, resume=True)
    with pytest.raises(ValueError, match=match):
        Run.load(d)
    assert snapshot(d) == before


def test_mismatched_config_is_refused_and_left_intact(stopped_run, tmp_path):
    model_cfg, train_cfg, d = stopped_run
    before = snapshot(d)
    with pytest.raises(ValueError, match=r"differs from its config.json in train.lr"):
        run(model_cfg, replace(train_cfg, lr=0.5), resume=True)
    with pytest.raises(ValueError, match="model.attention_dir"):
        run(replace(model_cfg, attention_dir="causal"), train_cfg, resume=True)
    with pytest.raises(ValueError, match="already holds a run"):
        run(model_cfg, train_cfg)
    # a checkpoint of another run (another seed) dropped into this one
    other_cfg = replace(train_cfg, seed=5, out_dir=str(tmp_path / "other"))
    run(model_cfg, other_cfg, stop_at=6)
    foreign = RunDir(tmp_path / "other").checkpoint(6).read_bytes()
    RunDir(d).checkpoint(6).write_bytes(foreign)
    before = snapshot(d)
    with pytest.raises(ValueError, match="another run"):
        run(model_cfg, train_cfg, resume=True)
    assert snapshot(d) == before
    assert config_hash(model_cfg, train_cfg.resolved()) != config_hash(model_cfg,
                                                                       other_cfg.resolved())


def test_a_non_finite_loss_stops_with_the_step_named(tmp_path):
    model_cfg, train_cfg = small(optimizer="sgd", lr=1e30, steps=20, checkpoint_every=1,
                                 out_dir=str(tmp_path / "r"))
    with pytest.raises(ValueError, match=r"training diverged: the loss is (nan|inf) at step (\d+)") as e:
        run(model_cfg, train_cfg)
    bad = int(str(e.value).split("at step ")[1].split(";")[0])
    assert all(s <= bad for s, _ in RunDir(tmp_path / "r").checkpoints())


# -- it learns, as the maths says -------------------------------------------------------------
def test_bidirectional_learns_below_the_causal_floor_and_causal_stays_at_it():
    model_cfg, train_cfg = small(d=4, steps=600, batch_size=128, eval_every=600, eval_size=1024)
    floor = causal_floor(model_cfg.layout, "P")
    learned = run(model_cfg, train_cfg).final_metrics
    assert learned.mse < 0.05 * floor and learned.row_acc > 0.99
    causal = run(replace(model_cfg, attention_dir="causal"), train_cfg).final_metrics
    assert causal.mse >= floor - 0.05 and causal.causal_floor == floor


# -- command line -----------------------------------------------------------------------------
def test_cli_train_and_resume(tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["train", "--layout", "scratch", "--n-scratch", "4", "--attention", "causal",
            "--readout", "S", "--d", "4", "--steps", "4", "--batch-size", "16", "--eval-every",
            "2", "--eval-size", "32", "--device", "cpu", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    stored = json.loads((out / "config.json").read_text())
    assert stored["model"]["readout"] == "S" and stored["train"]["steps"] == 4
    assert main(["train", "--resume", str(out), "--steps", "6", "--no-progress"]) == 0
    assert Run.load(out).step == 6
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps({**stored, "train": {**stored["train"], "out_dir": None}}))
    assert main(["train", "--config", str(cfg_file), "--out", str(tmp_path / "c"),
                 "--no-progress"]) == 0
    assert main(args) == 2  # the run exists: refused, not overwritten
    assert "already holds a run" in capsys.readouterr().err


def test_train_or_reuse_trains_once_then_reuses_and_refuses_another_run(tmp_path, monkeypatch):
    import invperm_interp.training.single as train_mod

    model_cfg, train_cfg = small()
    first = train_or_reuse(model_cfg, train_cfg, tmp_path / "r", progress=False)
    assert first.step == 6 and (tmp_path / "r" / "final.safetensors").is_file()

    def no_training(*args, **kw):
        raise AssertionError("a finished run of the same configuration was trained again")

    monkeypatch.setattr(train_mod, "train", no_training)
    again = train_or_reuse(model_cfg, replace(train_cfg, threads=1), tmp_path / "r", progress=False)
    assert_same_weights(again.model, first.model)
    assert strip(again.metrics) == strip(first.metrics)
    with pytest.raises(ValueError, match=r"holds another run .*train\.seed: 0 -> 1"):
        train_or_reuse(model_cfg, replace(train_cfg, seed=1), tmp_path / "r", progress=False)
    with pytest.raises(ValueError, match=r"holds another run .*train\.steps: 6 -> 8"):
        train_or_reuse(model_cfg, replace(train_cfg, steps=8), tmp_path / "r", progress=False)


def test_train_or_reuse_finishes_an_interrupted_run(tmp_path):
    model_cfg, train_cfg = small(checkpoint_every=2)
    straight = run(model_cfg, train_cfg)
    run(model_cfg, replace(train_cfg, out_dir=str(tmp_path / "r")), stop_at=4)
    finished = train_or_reuse(model_cfg, train_cfg, tmp_path / "r", progress=False)
    assert finished.step == 6
    assert_same_weights(finished.model, straight.model)
    with pytest.raises(ValueError, match="run_dir .* must name the run directory"):
        train_or_reuse(model_cfg, train_cfg)


def test_cli_trains_the_notes_code_layout(tmp_path, capsys):
    """``--layout code`` is the note's code's ``[0; P; Y_P; 0]``, read out on the first padding
    segment by default: under a causal mask those rows see nothing of the task (floor d/4)."""
    common = ["--attention", "causal", "--d", "3", "--steps", "2", "--batch-size", "8",
              "--eval-every", "2", "--eval-size", "16", "--device", "cpu", "--no-progress"]
    assert main(["train", "--layout", "code", "--out", str(tmp_path / "code"), *common]) == 0
    model_cfg, _ = RunDir(tmp_path / "code").read_config()
    assert model_cfg.layout == Layout.of(3, "0", "P", "Y", "0")
    assert model_cfg.layout.names == ("pad0", "P", "Y", "pad1") and model_cfg.readout == "pad0"
    assert Run.load(tmp_path / "code").final_metrics.causal_floor == pytest.approx(3 / 4)
    assert main(["train", "--layout", "code", "--readout", "Y", "--out", str(tmp_path / "y"),
                 *common]) == 0
    assert RunDir(tmp_path / "y").read_config()[0].readout_rows == slice(6, 9)
    assert main(["train", "--layout", "code", "--n-scratch", "2", "--out", str(tmp_path / "bad"),
                 *common]) == 2
    assert "--n-scratch sets the scratch rows of --layout scratch" in capsys.readouterr().err
    assert main(["train", "--readout", "Q", "--out", str(tmp_path / "bad"), *common]) == 2
    assert "readout must name a segment of the layout" in capsys.readouterr().err


def package_digest() -> str:
    """The package's sources hashed as ``runs.environment.code_digest`` documents, by hand."""
    import hashlib
    from pathlib import Path

    import invperm_interp

    root = Path(invperm_interp.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 50 and root / "runs" / "environment.py" in files
    return hashlib.sha256(b"".join(str(f.relative_to(root)).replace("\\", "/").encode() + b"\0"
                                   + f.read_bytes() for f in files)).hexdigest()[:12]


def test_each_start_and_resume_records_what_it_ran_on(stopped_run):
    """environment.jsonl: one record per start, with the step it started from, so a run that moves
    when trained again can be traced to a machine or to the code."""
    import platform

    model_cfg, train_cfg, d = stopped_run
    run(model_cfg, train_cfg, resume=True)
    records = RunDir(d).read_environment()
    assert [r["step"] for r in records] == [0, 4]
    for r in records:
        assert (r["torch"], r["python"], r["machine"]) == (
            torch.__version__, platform.python_version(), platform.machine())
        assert r["cpu"] and r["device"] == "cpu" and r["threads"] >= 1
        assert r["code"] == package_digest()
    with pytest.raises(ValueError):  # a refused resume records nothing
        run(replace(model_cfg, attention_dir="causal"), train_cfg, resume=True)
    assert RunDir(d).read_environment() == records
