"""Faults as they happen to a user: a training process killed with SIGKILL, a run directory that
cannot be written or fills up, a loss or weights that become NaN or inf, constructions at huge β,
determinism across processes and under PyTorch's deterministic mode, and pickle files where
checkpoints belong (refused, never unpickled).
"""

import ast
import errno
import json
import os
import pickle
import re
import shutil
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import helpers
import pytest
import torch
from helpers import assert_same_weights, cli_resume, run, start_cli_training, strip

import invperm_interp.runs.checkpoint as ckpt
import invperm_interp.training.trainer as trainer_mod
from invperm_interp import (
    HookedDisentangledTransformer,
    Layout,
    ModelConfig,
    Run,
    make_input,
    sample_batch,
)
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.maths import constructions as C
from invperm_interp.runs.directory import RunDir, checkpoint_bytes
from invperm_interp.training.single import resume

SRC = Path(trainer_mod.__file__).parent.parent  # the package


def small(tmp_path=None, d=3, attention_dir="bidirectional", **kw):
    """Eight steps with a checkpoint every two, into ``tmp_path/run`` (or memory only)."""
    args = dict(steps=8, batch_size=16, eval_every=2, eval_size=32, checkpoint_every=2,
                out_dir=None if tmp_path is None else str(tmp_path / "run"))
    return helpers.small(d, attention_dir, **{**args, **kw})


def read_metrics(run_dir):
    """The metrics file's complete lines (a SIGKILL may leave the last one torn)."""
    out = []
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def checkpoint_steps(run_dir):
    return [s for s, _ in RunDir(run_dir).checkpoints()]


class CountingSampler:
    """Stands in for ``sample_batch`` in the training module; ``poison`` maps a training batch's
    index to a function that edits it (the eval batch, drawn first, is call 0 and is not counted)."""

    def __init__(self, poison=None):
        self.calls, self.poison = 0, poison or {}

    def __call__(self, *args, **kw):
        batch = sample_batch(*args, **kw)
        step = self.calls - 1  # the training step this batch is for (-1: the eval batch)
        self.calls += 1
        if step in self.poison:
            batch = self.poison[step](batch)
        return batch


# -- SIGKILL mid-run, then resume --------------------------------------------------------------
KILL_ARGS = dict(steps=1200, batch_size=64, eval_every=10, eval_size=64, checkpoint_every=200)


def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(tmp_path):
    """``invperm train`` is killed with SIGKILL after a checkpoint and after metric lines past it,
    resumed with ``invperm train --resume``: final weights bit-identical to an uninterrupted
    in-process run, metrics equal but for wall time, every evaluation step exactly once."""
    out = tmp_path / "killed"
    proc = start_cli_training(out, KILL_ARGS)
    try:
        deadline = time.monotonic() + 120
        while True:  # kill once a checkpoint exists and 3+ evaluations were logged after it,
            # well before the next checkpoint (every 200 steps)
            assert proc.poll() is None, f"the run ended before it was killed: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            steps = checkpoint_steps(out) if (out / "metrics.jsonl").exists() else []
            if steps and 30 <= read_metrics(out)[-1]["step"] - steps[-1] <= 120:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    kept, logged = checkpoint_steps(out), read_metrics(out)
    assert not (out / "final.safetensors").exists()
    assert 0 < kept[-1] < KILL_ARGS["steps"]
    assert logged[-1]["step"] > kept[-1]  # lines past the checkpoint: resume must not repeat them

    done = cli_resume(out, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr

    model_cfg = ModelConfig(Layout.plain(4), attention_dir="bidirectional")
    straight = run(model_cfg, TrainConfig(**KILL_ARGS, device="cpu", threads=1))
    resumed = Run.load(out)
    assert resumed.step == KILL_ARGS["steps"]
    assert_same_weights(resumed.model, straight.model)
    on_disk = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in on_disk] == list(range(0, KILL_ARGS["steps"] + 1, 10))
    assert strip(on_disk) == strip(straight.metrics)


def test_resume_drops_metric_lines_past_the_checkpoint_and_a_torn_line(tmp_path):
    """The state a crash leaves, made by hand: evaluations logged after the last checkpoint, a
    torn last line, a half-written checkpoint's temporary file. Resuming keeps none of it."""
    model_cfg, train_cfg = small(tmp_path, steps=12, checkpoint_every=4)
    straight = run(model_cfg, train_cfg)
    d = tmp_path / "run"
    RunDir(d).checkpoint(12).unlink()  # killed after logging step 12, before its checkpoint
    (d / "final.safetensors").unlink()
    with open(d / "metrics.jsonl", "a") as f:
        f.write('{"step": 14, "ms')
    tmp_file = d / "checkpoints" / ".step_12.safetensors.tmp999"
    tmp_file.write_bytes(b"half a checkpoint")
    assert [m["step"] for m in read_metrics(d)] == [0, 2, 4, 6, 8, 10, 12]
    resumed = resume(d, progress=False)
    lines = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 2, 4, 6, 8, 10, 12]
    assert strip(lines) == strip(straight.metrics) == strip(resumed.metrics)
    assert_same_weights(resumed.model, straight.model)
    assert checkpoint_steps(d) == [4, 8, 12]


def test_a_finished_runs_last_record_cut_from_metrics_is_taken_back_from_its_final_weights(tmp_path):
    """``metrics.jsonl`` cut by 20 bytes after the run finished: resuming to more steps takes the
    step-12 record back from the final weights' metadata (it was lost for good, silently); with
    no final weights to hold it, a warning names the evaluations lost."""
    model_cfg, train_cfg = small(tmp_path, steps=12, checkpoint_every=4)
    straight = run(model_cfg, train_cfg)
    d = tmp_path / "run"
    cut = (d / "metrics.jsonl").read_bytes()[:-20]
    (d / "metrics.jsonl").write_bytes(cut)
    assert [m["step"] for m in read_metrics(d)] == [0, 2, 4, 6, 8, 10]
    resumed = resume(d, steps=14, progress=False)
    assert strip(resumed.metrics[:7]) == strip(straight.metrics)
    assert [m["step"] for m in read_metrics(d)] == [0, 2, 4, 6, 8, 10, 12, 14]
    (d / "metrics.jsonl").write_bytes(cut)
    (d / "final.safetensors").unlink()
    RunDir(d).checkpoint(14).unlink()
    with pytest.warns(UserWarning, match=r"metrics.jsonl lacks the evaluations at steps \[12\]"):
        resume(d, steps=14, progress=False)


# -- the run directory: not writable, not enough room, full mid-run ---------------------------
def test_out_dir_under_a_file_fails_before_any_training_work(tmp_path, monkeypatch):
    """Root can write anywhere chmod forbids, but not below a regular file."""
    (tmp_path / "afile").write_text("not a directory")
    sampler = CountingSampler()
    monkeypatch.setattr(trainer_mod, "sample_batch", sampler)
    model_cfg, train_cfg = small(out_dir=str(tmp_path / "afile" / "run"))
    with pytest.raises(ValueError, match=r"out_dir .*afile/run cannot be written \(Not a directory\)"):
        run(model_cfg, train_cfg)
    assert sampler.calls == 0  # not even the eval batch was drawn


def test_read_only_out_dir_fails_before_any_training_work(tmp_path, monkeypatch):
    """A read-only mount, simulated: every file opened for writing under out_dir fails."""
    import builtins

    real_open, target = builtins.open, tmp_path / "ro"

    def read_only_open(path, mode="r", *args, **kw):
        if any(m in mode for m in "wax+") and str(path).startswith(str(target)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, mode, *args, **kw)

    monkeypatch.setattr(builtins, "open", read_only_open)
    sampler = CountingSampler()
    monkeypatch.setattr(trainer_mod, "sample_batch", sampler)
    model_cfg, train_cfg = small(out_dir=str(target))
    with pytest.raises(ValueError, match=r"out_dir .*/ro cannot be written \(Read-only file system\); "
                                         "choose another out_dir"):
        run(model_cfg, train_cfg)
    assert sampler.calls == 0
    assert not any(target.iterdir())


def test_not_enough_room_for_the_checkpoints_fails_before_training(tmp_path, monkeypatch):
    model_cfg, train_cfg = small(tmp_path, steps=100, checkpoint_every=1)
    need = 102 * checkpoint_bytes(model_cfg, train_cfg.resolved())
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=need - 1))
    sampler = CountingSampler()
    monkeypatch.setattr(trainer_mod, "sample_batch", sampler)
    with pytest.raises(ValueError, match=f"out_dir .* has {need - 1} bytes free; this run's "
                                         f"checkpoints need about {need}"):
        run(model_cfg, train_cfg)
    assert sampler.calls == 0
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=need))
    assert run(model_cfg, replace(train_cfg, steps=2, out_dir=str(tmp_path / "ok"))).step == 2
    # the estimate is an upper bound on what a checkpoint takes
    size = RunDir(tmp_path / "ok").checkpoint(2).stat().st_size
    assert size <= checkpoint_bytes(model_cfg, train_cfg.resolved()) < 2 * size + 16384


def full_disk_at(step):
    """An ``open`` for the checkpoint module that writes half of checkpoint ``step`` and then
    fails with ENOSPC, as a filling disk does."""
    real_open = open

    class HalfWritten:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.f, name)

    def fake_open(path, mode="r", *args, **kw):
        f = real_open(path, mode, *args, **kw)
        return HalfWritten(f) if Path(path).name.startswith(f".step_{step}.") else f

    return fake_open


def test_disk_full_at_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch):
    model_cfg, train_cfg = small(tmp_path, steps=8, checkpoint_every=2)
    d = tmp_path / "run"
    monkeypatch.setattr(ckpt, "open", full_disk_at(4), raising=False)
    with pytest.raises(OSError) as e:
        run(model_cfg, train_cfg)
    assert e.value.errno == errno.ENOSPC
    message = str(e.value)
    assert re.search(r"cannot write .*checkpoints/step_4.safetensors at step 4 \(No space left on "
                     r"device\); the last good checkpoint is .*checkpoints/step_2.safetensors", message)
    assert sorted(p.name for p in (d / "checkpoints").iterdir()) == ["step_2.safetensors"]  # no debris
    kept = Run.load(d)
    assert kept.step == 2
    assert_same_weights(kept.model, run(model_cfg, replace(train_cfg, steps=2, out_dir=None)).model)
    # space freed: resuming finishes the same run as if nothing happened
    monkeypatch.undo()
    resumed = resume(d, progress=False)
    straight = run(model_cfg, replace(train_cfg, out_dir=None))
    assert_same_weights(resumed.model, straight.model)
    assert strip(resumed.metrics) == strip(straight.metrics)


def test_disk_full_on_the_command_line_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ckpt, "open", full_disk_at(2), raising=False)
    argv = ["train", "--d", "2", "--steps", "4", "--batch-size", "8", "--eval-size", "8",
            "--checkpoint-every", "2", "--device", "cpu", "--out", str(tmp_path / "r"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("invperm train: error: [Errno 28] cannot write ")
    assert err[0].endswith("(No space left on device); no checkpoint before it")


def test_ctrl_c_on_the_command_line_is_one_line(tmp_path, capsys):
    """The first Ctrl-C checkpoints and stops; the user reads how to resume, not a traceback."""
    out = tmp_path / "r"
    argv = ["train", "--d", "2", "--steps", "100000", "--batch-size", "4", "--eval-every", "100000",
            "--eval-size", "8", "--device", "cpu", "--out", str(out), "--no-progress"]
    started, done = out / "metrics.jsonl", threading.Event()

    def interrupt_once_training_runs():  # a fixed delay races start-up on a loaded machine
        deadline = time.monotonic() + 120
        while not started.exists() and not done.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not done.is_set():
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt_once_training_runs, daemon=True)
    thread.start()
    try:
        assert main(argv) == 130
    finally:
        done.set()
    (line,) = capsys.readouterr().err.strip().splitlines()
    (stopped,) = checkpoint_steps(out)
    assert line == (f"invperm train: interrupted: training stopped at step {stopped}; "
                    f"resume with --resume {out}")


def test_a_stop_before_the_first_step_leaves_a_run_that_resumes(tmp_path, monkeypatch):
    """SIGTERM while the run starts (after its config, before step 1) wrote step_0 with an empty
    Adam state that every resume refused; now nothing is checkpointed, and a resume (also of a
    run an older version left with such a step_0) ends bit-identical to an uninterrupted run."""
    model_cfg, train_cfg = small(tmp_path, steps=4, checkpoint_every=2)
    straight = run(model_cfg, replace(train_cfg, out_dir=str(tmp_path / "straight")))
    begin = trainer_mod.Trainer.begin

    def begin_then_sigterm(self):
        begin(self)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets the stop flag

    with monkeypatch.context() as m:
        m.setattr(trainer_mod.Trainer, "begin", begin_then_sigterm)
        with pytest.raises(KeyboardInterrupt, match="training stopped at step 0"):
            run(model_cfg, train_cfg)
    d = tmp_path / "run"
    assert checkpoint_steps(d) == []
    resumed = resume(d, progress=False)
    assert_same_weights(resumed.model, straight.model)
    assert strip(resumed.metrics) == strip(straight.metrics)
    # a step-0 checkpoint without optimizer state, as the stop wrote it before
    tensors, meta = ckpt.load(RunDir(d).checkpoint(2))
    kept = {k: v for k, v in tensors.items() if not k.startswith("optim.")}
    for path in RunDir(d).checkpoints():
        path[1].unlink()
    (d / "final.safetensors").unlink()
    RunDir(d).write_metrics(RunDir(d).read_metrics()[:1])
    ckpt.save(RunDir(d).checkpoint(0), kept, {**meta, "step": 0, "optimizer": {}})
    again = resume(d, progress=False)
    assert_same_weights(again.model, straight.model)


# -- NaN and inf ------------------------------------------------------------------------------
def nan_batch(batch):
    X = batch.X.clone()
    X[0, 0, 0] = float("nan")
    return replace(batch, X=X)


def test_nan_loss_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    model_cfg, train_cfg = small(tmp_path, steps=12, eval_every=3, checkpoint_every=2)
    monkeypatch.setattr(trainer_mod, "sample_batch", CountingSampler({5: nan_batch}))
    with pytest.raises(ValueError, match=r"^training diverged: the loss is nan at step 5; the last "
                                         r"good checkpoint is .*step_4.safetensors$"):
        run(model_cfg, train_cfg)
    d = tmp_path / "run"
    assert checkpoint_steps(d) == [2, 4] and not (d / "final.safetensors").exists()
    assert [m["step"] for m in read_metrics(d)] == [0, 3]  # nothing logged from the NaN on
    good = Run.load(d)
    assert good.step == 4
    assert all(torch.isfinite(p).all() for p in good.model.parameters())
    monkeypatch.undo()
    assert_same_weights(good.model, run(model_cfg, replace(train_cfg, steps=4, out_dir=None)).model)


def test_weights_that_overflow_are_never_checkpointed(tmp_path, monkeypatch):
    """The loss of step 2 is finite but its update leaves an inf weight: the run stops before
    evaluating or checkpointing those weights (this was written to disk as step_3 before)."""
    model_cfg, train_cfg = small(tmp_path, steps=12, eval_every=3, checkpoint_every=1)
    forward, calls = trainer_mod.forward, []

    def overflowing_forward(model, X):
        out = forward(model, X)
        calls.append(1)
        if len(calls) == 3:  # step 2, after its loss was formed: the update overflows
            model.blocks[0].attn.A.data[0, 0, 0] = float("inf")
        return out

    monkeypatch.setattr(trainer_mod, "forward", overflowing_forward)
    with pytest.raises(ValueError, match=r"training diverged: the weights are not finite at step 3; "
                                         r"the last good checkpoint is .*step_2.safetensors"):
        run(model_cfg, train_cfg)
    d = tmp_path / "run"
    assert checkpoint_steps(d) == [1, 2]
    for step in (1, 2):
        model = HookedDisentangledTransformer.from_run(d, step=step)
        assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_diverging_lr_on_the_command_line(tmp_path, capsys):
    """SGD at lr 1e20: the first update makes the evaluation MSE inf; nothing non-finite is logged
    or checkpointed, and the user gets one line naming the step."""
    out = tmp_path / "r"
    argv = ["train", "--d", "3", "--attention", "bidirectional", "--optimizer", "sgd", "--lr", "1e20",
            "--steps", "20", "--batch-size", "16", "--eval-every", "1", "--eval-size", "32",
            "--checkpoint-every", "1", "--device", "cpu", "--out", str(out), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["invperm train: error: training diverged: the evaluation MSE is inf at step 1; "
                   "no checkpoint before it"]
    assert checkpoint_steps(out) == []
    assert [m["step"] for m in read_metrics(out)] == [0]


@pytest.mark.parametrize("name", C.names())
@pytest.mark.parametrize("d", [1, 2, 16])
def test_constructions_stay_finite_in_float32_up_to_beta_1e6(name, d):
    """Random data, the identity permutation with Y all zeros and all ones, a large scratch
    vector for the scratch layouts: outputs and gradients finite, and exact for the working forms."""
    if d < C.REGISTRY[name].min_d:
        pytest.skip(f"{name} works from d={C.REGISTRY[name].min_d}")
    scratch = 3 * torch.ones(d) if C.REGISTRY[name].layout == "scratch" else None
    model = C.build(name, d, 1e6, dtype=torch.float32, scratch=scratch)
    layout = model.cfg.layout
    P = torch.eye(d).expand(2, d, d)
    extremes = make_input(layout, P, torch.stack([torch.zeros(d, d), torch.ones(d, d)]))
    for batch in (sample_batch(layout, 32, torch.Generator().manual_seed(d)), extremes):
        out = model(batch.X)
        assert torch.isfinite(out).all()
        loss = ((out - batch.Y) ** 2).sum(-1).mean()
        grads = torch.autograd.grad(loss, list(model.parameters()))
        assert all(torch.isfinite(g).all() for g in grads)
        if C.REGISTRY[name].works:
            assert (out - batch.Y).abs().max() < 1e-5


# -- determinism ------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe, layout, readout, attention_dir", [
    ("adam", Layout.scratch(3, scratch=[0.5, -1.0, 2.0]), "S", "causal"),
    ("paper", Layout.plain(3), "P", "bidirectional"),
])
def test_same_seed_bit_identical_under_deterministic_mode(recipe, layout, readout, attention_dir):
    """CPU training needs no deterministic-mode switch: a run under
    ``torch.use_deterministic_algorithms(True)`` (which raises on any non-deterministic kernel)
    has the same bits as one without. Across processes: see the SIGKILL test."""
    model_cfg = ModelConfig(layout, readout=readout, attention_dir=attention_dir)
    train_cfg = TrainConfig(steps=10, batch_size=32, eval_every=5, eval_size=64, device="cpu",
                            recipe=recipe, seed=3)
    plain = run(model_cfg, train_cfg)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        strict = run(model_cfg, train_cfg)
    finally:
        torch.use_deterministic_algorithms(was)
    assert_same_weights(plain.model, strict.model)
    assert strip(plain.metrics) == strip(strict.metrics)
    other = run(model_cfg, replace(train_cfg, seed=4))
    assert not torch.equal(plain.model.unembed.W_U, other.model.unembed.W_U)


# -- loading reads safetensors and JSON only --------------------------------------------------
class Payload:
    """Unpickling this creates ``marker``: proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = Path(marker)

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture
def finished_run(tmp_path):
    model_cfg, train_cfg = small(tmp_path, steps=4, checkpoint_every=2)
    run(model_cfg, train_cfg)
    return tmp_path / "run"


def test_the_payload_is_live(tmp_path):
    """So that the refusals below mean something: unpickling the payload does create the marker."""
    marker = tmp_path / "unpickled"
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


@pytest.mark.parametrize("writer", ["pickle", "torch.save"])
def test_pickle_where_a_checkpoint_belongs_is_refused(finished_run, tmp_path, writer):
    marker = tmp_path / "unpickled"
    if writer == "pickle":
        data = pickle.dumps({"model.unembed.W_U": Payload(marker)})
    else:
        path = tmp_path / "payload.pt"
        torch.save({"model.unembed.W_U": torch.zeros(2), "x": Payload(marker)}, path)
        data = path.read_bytes()
    d = finished_run
    (d / "final.safetensors").unlink()
    for step in (2, 4):
        RunDir(d).checkpoint(step).unlink()
    RunDir(d).checkpoint(10).write_bytes(data)
    for call in (lambda: Run.load(d), lambda: HookedDisentangledTransformer.from_run(d, step=10),
                 lambda: resume(d, steps=12, progress=False)):
        with pytest.raises(ValueError, match="step_10.safetensors is truncated or corrupted"):
            call()
    (d / "final.safetensors").write_bytes(data)
    with pytest.raises(ValueError, match="final.safetensors is truncated or corrupted"):
        Run.load(d)
    assert not marker.exists()


def test_a_run_with_only_pt_weights_is_refused_saying_why(finished_run, tmp_path):
    marker = tmp_path / "unpickled"
    d = finished_run
    (d / "final.safetensors").unlink()
    shutil.rmtree(d / "checkpoints")
    torch.save({"model": Payload(marker)}, d / "final.pt")
    with pytest.raises(ValueError, match=r"has neither final weights \(final.safetensors\) nor a "
                                         r"checkpoint yet; not read: \['final.pt'\] \(only "
                                         r"safetensors and JSON are loaded, nothing is unpickled\)"):
        HookedDisentangledTransformer.from_run(d)
    assert not marker.exists()


def test_no_unpickling_code_in_the_package():
    """No ``torch.load``, no pickle-family import, no ``allow_pickle=True`` or
    ``weights_only=False`` anywhere under src/ (analysis included), read from the syntax tree so
    that docstrings saying so do not count."""
    unsafe_modules = {"pickle", "cPickle", "_pickle", "dill", "joblib", "shelve", "marshal"}
    hits = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(SRC)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import) and {a.name.split(".")[0] for a in node.names} & unsafe_modules:
                hits.append(where)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in unsafe_modules:
                hits.append(where)
            elif isinstance(node, ast.Attribute) and node.attr == "load" and \
                    isinstance(node.value, ast.Name) and node.value.id == "torch":
                hits.append(where)
            elif isinstance(node, ast.keyword) and isinstance(node.value, ast.Constant) and (
                    (node.arg == "allow_pickle" and node.value.value is True)
                    or (node.arg == "weights_only" and node.value.value is False)):
                hits.append(where)
    assert hits == []
    assert len(list(SRC.rglob("*.py"))) > 10  # the scan did read the package
