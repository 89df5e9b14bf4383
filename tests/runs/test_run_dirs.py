"""Run directories as users meet them: shared by two processes, given as "", full of other files,
with a finished run in them, with metrics lines that are not records, deleted checkpoints, an empty
final file, malformed checkpoint metadata, an exhausted cosine schedule, and a job stopped by
SIGTERM as a scheduler stops it. Each gets a clear error or an explicit warning; nothing written
by a run is lost or silently replaced.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import assert_same_weights, cli_resume, run, small, start_cli_training, strip

import invperm_interp.runs.checkpoint as ckpt
from invperm_interp import Layout, ModelConfig
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.runs.directory import RunDir, RunWarning
from invperm_interp.runs.lock import RunLock, RunLocked
from invperm_interp.training.run import Run
from invperm_interp.training.single import resume, train, train_or_reuse


def finished(tmp_path, name="run", **kw):
    model_cfg, train_cfg = small(d=3, out_dir=str(tmp_path / name), checkpoint_every=2, **kw)
    run(model_cfg, train_cfg)
    return tmp_path / name, model_cfg, train_cfg


def snapshot(run_dir):
    return {p: p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file()}


def one_line(argv, capsys, code=2):
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- "" is not the current directory ------------------------------------------------------------
def test_an_empty_out_or_resume_path_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="out_dir must be a non-empty path string or None, got ''"):
        TrainConfig(out_dir="")
    with pytest.raises(ValueError, match="run_dir must be a non-empty path"):
        resume("", progress=False)
    line = one_line(["train", "--d", "2", "--out", "", "--no-progress"], capsys)
    assert line.endswith("out_dir must be a non-empty path string or None, got ''")
    finished(tmp_path, name=".")  # a run in the current directory: "" must still not resume it
    before = snapshot(tmp_path)
    line = one_line(["train", "--resume", "", "--no-progress"], capsys)
    assert "run_dir must be a non-empty path" in line
    assert snapshot(tmp_path) == before


# -- a new run needs an empty directory -----------------------------------------------------------
def test_a_directory_with_other_files_needs_force(tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "todo.txt").write_text("mine")
    model_cfg, train_cfg = small(d=3, out_dir=str(out))
    with pytest.raises(ValueError, match=r"out_dir .*notes is not empty and holds no run \(todo.txt\); "
                                         r"choose an empty or new directory, or pass --force"):
        run(model_cfg, train_cfg)
    assert sorted(p.name for p in out.iterdir()) == ["todo.txt"]
    with pytest.warns(RunWarning, match=r"writing a new run into .*notes, which holds todo.txt$"):
        done = run(model_cfg, train_cfg, force=True)
    assert done.step == 6 and (out / "todo.txt").read_text() == "mine"


def test_a_stray_final_file_is_not_overwritten_without_a_word(tmp_path, capsys):
    out = tmp_path / "fin"
    out.mkdir()
    (out / "final.safetensors").write_bytes(b"someone's weights")
    argv = ["train", "--d", "2", "--steps", "2", "--batch-size", "8", "--eval-size", "8",
            "--device", "cpu", "--out", str(out), "--no-progress"]
    assert "holds no run (final.safetensors)" in one_line(argv, capsys)
    assert (out / "final.safetensors").read_bytes() == b"someone's weights"
    assert main(argv + ["--force"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"invperm train: warning: writing a new run into {out}, which holds "
                   "final.safetensors; its final.safetensors will be replaced"]


def test_a_finished_run_is_never_overwritten_even_with_force(tmp_path):
    d, model_cfg, train_cfg = finished(tmp_path)
    before = snapshot(d)
    for force in (False, True):
        with pytest.raises(ValueError, match=r"already holds a run \(config.json, metrics.jsonl, "
                                             r"checkpoints\); resume it or choose another out_dir"):
            run(model_cfg, train_cfg, force=force)
    assert snapshot(d) == before


# -- metrics lines that are JSON but not records ----------------------------------------------------
@pytest.mark.parametrize("line, match", [
    ("42", "line 3 is not a metrics record"),
    ("null", "line 3 is not a metrics record"),
    ('{"mse": 1}', "line 3 is not a metrics record"),
    ('{"step": "3", "mse": 1}', "line 3 is not a metrics record"),
    ('{"step": 3, "mse": NaN}', "line 3 is not a metrics record"),
    ('{"step": 1, "mse": 0.5}', "line 3: step 1 after step 3; the records are out of order"),
])
def test_a_metrics_line_that_is_not_a_record(tmp_path, capsys, line, match):
    d, _, _ = finished(tmp_path)
    lines = (d / "metrics.jsonl").read_text().splitlines()  # steps 0, 3, 6
    (d / "metrics.jsonl").write_text("\n".join(lines[:2] + [line] + lines[2:]) + "\n")
    before = snapshot(d)
    for call in (lambda: RunDir(d).read_metrics(), lambda: Run.load(d), lambda: resume(d, progress=False)):
        with pytest.raises(ValueError, match=match):
            call()
    assert re.search(match, one_line(["analyze", str(d)], capsys))
    assert re.search(match, one_line(["train", "--resume", str(d), "--no-progress"], capsys))
    assert snapshot(d) == before


# -- finished runs reused: another seed, lost metrics ------------------------------------------------
def test_reusing_a_run_of_another_seed_is_refused(tmp_path):
    d, model_cfg, train_cfg = finished(tmp_path)
    with pytest.raises(ValueError, match=r"holds another run \(its config.json differs in "
                                         r"train.seed: 0 -> 1\)"):
        train_or_reuse(model_cfg, replace(train_cfg, seed=1), progress=False)


def test_a_finished_run_without_its_metrics_file_still_reports_its_last_record(tmp_path):
    """demo reads ``final_metrics.causal_floor`` of a reused run; a deleted metrics.jsonl made
    that a KeyError. The final file keeps the last record."""
    d, model_cfg, train_cfg = finished(tmp_path)
    last = RunDir(d).read_metrics()[-1]
    (d / "metrics.jsonl").unlink()
    with pytest.warns(RunWarning, match=r"metrics.jsonl lacks the records up to step 6"):
        reused = train_or_reuse(model_cfg, train_cfg, progress=False)
    assert reused.final_metrics == last and reused.final_metrics.causal_floor is not None


# -- resume without checkpoints, or with a damaged final file -----------------------------------------
@pytest.mark.parametrize("final", [True, False])
def test_resume_without_checkpoints_does_not_restart_over_the_run(tmp_path, capsys, final):
    d, _, _ = finished(tmp_path, steps=6)
    for p in (d / "checkpoints").iterdir():
        p.unlink()
    (d / "checkpoints").rmdir()
    if not final:
        (d / "final.safetensors").unlink()
    before = snapshot(d)
    what = "final weights" if final else "metrics up to step 6"
    with pytest.raises(ValueError, match=rf"cannot resume .*: it has no checkpoint .* but holds {what}; "
                                         "resuming would restart it from step 0"):
        resume(d, steps=8, progress=False)
    assert "it has no checkpoint" in one_line(["train", "--resume", str(d), "--no-progress"], capsys)
    assert snapshot(d) == before


def test_a_run_killed_before_its_first_checkpoint_still_restarts(tmp_path):
    model_cfg, train_cfg = small(d=3, out_dir=str(tmp_path / "r"), checkpoint_every=100)
    run(model_cfg, train_cfg, stop_at=1)  # stop_at checkpoints: remove it, as a kill would
    d = tmp_path / "r"
    for p in (d / "checkpoints").iterdir():
        p.unlink()
    (d / "metrics.jsonl").write_text(json.dumps(RunDir(d).read_metrics()[0].to_dict()) + "\n")  # step 0 only
    resumed = resume(d, progress=False)
    assert_same_weights(resumed.model, run(model_cfg, replace(train_cfg, out_dir=None)).model)


def test_an_empty_final_file_is_rewritten_on_resume(tmp_path, capsys):
    d, model_cfg, train_cfg = finished(tmp_path)
    good = Run.load(d)
    (d / "final.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="final.safetensors is truncated or corrupted"):
        Run.load(d)
    assert main(["train", "--resume", str(d), "--no-progress"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"invperm train: warning: .*final.safetensors is truncated or "
                                      r"corrupted: not a finished run's weights; removed, and "
                                      r"written again from the last checkpoint", err[0]), err
    again = Run.load(d)
    assert again.step == 6
    assert_same_weights(again.model, good.model)


# -- cosine schedule exhausted --------------------------------------------------------------------------
def test_extending_a_cosine_run_past_its_horizon_is_refused(tmp_path, capsys):
    d, model_cfg, train_cfg = finished(tmp_path, schedule="cosine")
    before = snapshot(d)
    assert RunDir(d).read_config()[1].schedule_steps == 6  # a cosine run's horizon is its length
    line = one_line(["train", "--resume", str(d), "--steps", "9", "--no-progress"], capsys)
    assert line.endswith("steps=9 runs past the cosine schedule's horizon schedule_steps=6, where the "
                         "lr is 0 (those steps would not change the weights); a run's horizon is "
                         "fixed when it starts: train a new run with schedule_steps >= 9")
    assert snapshot(d) == before
    with pytest.raises(ValueError, match="past the cosine schedule's horizon"):
        run(model_cfg, replace(train_cfg, steps=10, schedule_steps=8, out_dir=None))


# -- checkpoint metadata that is JSON but not ours --------------------------------------------------------
@pytest.mark.parametrize("edit, match", [
    (lambda m: m.pop("loss_count"), "'loss_count' must be a count >= 0, got None"),
    (lambda m: m.update(optimizer=[1, 2]), r"'optimizer' must be an object of objects, got \[1, 2\]"),
    (lambda m: m.update(elapsed="soon"), "'elapsed' must be a number, got 'soon'"),
    (lambda m: m.update(step="4"), "'step' must be a step >= 0, got '4'"),
    (lambda m: m.update(config_hash=None), "'config_hash' must be a string, got None"),
])
def test_checkpoint_metadata_that_is_malformed(tmp_path, capsys, edit, match):
    """The digest covers the tensors, not the metadata: a file re-written with other metadata
    still passes it, and must be refused by name (AttributeError / KeyError before)."""
    d, _, _ = finished(tmp_path, steps=6)
    (d / "final.safetensors").unlink()
    path = RunDir(d).checkpoint(6)
    tensors, meta = ckpt.load(path)
    meta.pop("format")
    edit(meta)
    ckpt.save(path, tensors, meta)
    with pytest.raises(ValueError, match=f"checkpoint .*step_6.safetensors has malformed metadata: {match}"):
        resume(d, progress=False)
    assert "has malformed metadata" in one_line(["train", "--resume", str(d), "--no-progress"], capsys)


def test_checkpoint_metadata_round_trips_through_its_typed_record(tmp_path):
    """``CheckpointMeta``: what the trainer writes, a training checkpoint's and the final weights',
    reads back to the same entries in the same order; ``RunWeights.meta`` is the typed record."""
    d, _, _ = finished(tmp_path, steps=6)
    for path in (RunDir(d).checkpoint(6), RunDir(d).final):
        _, meta = ckpt.load(path)
        assert meta.pop("format") == ckpt.FORMAT
        typed = ckpt.CheckpointMeta.from_dict(meta)
        assert json.dumps(typed.to_dict()) == json.dumps(meta) and typed.step == 6
    weights = RunDir(d).read_weights()
    assert weights.meta.evaluation.step == 6 and weights.meta.stopped is None
    with pytest.raises(ValueError, match="must hold 'step' and 'config_hash'"):
        ckpt.CheckpointMeta.from_dict({"step": 1})


# -- one writer per run directory ------------------------------------------------------------------------
def test_a_locked_run_is_not_resumed_and_the_holder_is_named(tmp_path):
    d, _, _ = finished(tmp_path, steps=6)
    before = snapshot(d)
    with RunLock(d):
        holder = json.loads(RunDir(d).lock_file.read_text())
        assert holder["pid"] == os.getpid()
        with pytest.raises(RunLocked, match=rf"{d} is being written by process {os.getpid()} on "):
            resume(d, steps=8, progress=False)
    assert not RunDir(d).lock_file.exists()  # released and removed
    assert snapshot(d) == before
    assert resume(d, steps=8, progress=False).step == 8


def test_a_stale_lock_of_a_dead_process_is_reported_and_taken_over(tmp_path):
    d, _, _ = finished(tmp_path, steps=6)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    RunDir(d).lock_file.write_text(json.dumps({"pid": dead.pid, "host": "node7", "started": "earlier",
                                           "command": "invperm train"}))
    with pytest.warns(RunWarning, match=rf"took over the lock of process {dead.pid} on node7 "
                                        r"\(since earlier: invperm train\), which ended without "
                                        r"releasing it"):
        assert resume(d, steps=8, progress=False).step == 8
    assert not RunDir(d).lock_file.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean release leaves nothing to report
        assert resume(d, steps=10, progress=False).step == 10


# -- two processes, then SIGTERM as a scheduler sends it ---------------------------------------------------
TERM_ARGS = dict(steps=10**6, batch_size=64, eval_every=10, eval_size=64, checkpoint_every=200)


def test_a_second_writer_is_refused_and_sigterm_checkpoints_then_resume_is_bit_identical(tmp_path):
    """``invperm train`` runs; ``invperm train --resume`` of the same directory from another process
    is refused in one line naming the first (both ran to the end before, interleaving 31 metric lines
    for 21 steps). SIGTERM then stops the first after a checkpoint at the step it reached (exit 143,
    one line); resuming ends bit-identical to an uninterrupted run with every evaluation once
    (compared 100 steps past the stop: a constant lr makes every length a prefix)."""
    out = tmp_path / "job"
    first = start_cli_training(out, TERM_ARGS, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() or len(RunDir(out).read_metrics()) < 3:
            assert first.poll() is None, f"the run ended early: {first.stderr.read()}"
            assert time.monotonic() < deadline, "no metrics within 120 s"
            time.sleep(0.01)
        second = cli_resume(out, timeout=120)
        assert second.returncode == 2
        (line,) = second.stderr.strip().splitlines()
        assert line.startswith(f"invperm train: error: {out} is being written by process {first.pid} on ")
        assert first.poll() is None  # the first writer goes on, alone
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 128 + signal.SIGTERM
        (line,) = first.stderr.read().strip().splitlines()
    finally:
        if first.poll() is None:
            first.kill()
        first.stderr.close()
    stopped = int(re.fullmatch(rf"invperm train: terminated by SIGTERM: training stopped at step "
                               rf"(\d+); resume with --resume {re.escape(str(out))}", line).group(1))
    assert 0 < stopped < TERM_ARGS["steps"]
    assert [s for s, _ in RunDir(out).checkpoints()][-1] == stopped  # nothing after it is lost
    assert not RunDir(out).lock_file.exists()

    end = stopped + 100
    resumed = resume(out, threads=1, stop_at=end, progress=False)
    straight = run(ModelConfig(Layout.plain(4), attention_dir="bidirectional"),
                   TrainConfig(**TERM_ARGS, device="cpu", threads=1), stop_at=end)
    assert resumed.step == straight.step == end
    assert_same_weights(resumed.model, straight.model)
    on_disk = RunDir(out).read_metrics()
    assert [m.step for m in on_disk] == list(range(0, end + 1, 10))
    assert strip(on_disk) == strip(straight.metrics)


def test_sigterm_in_process_checkpoints_like_ctrl_c(tmp_path, monkeypatch):
    """The API: ``train`` raises ``Interrupted`` (a KeyboardInterrupt) carrying the signal, after
    checkpointing the step it was in, and puts the previous handler back."""
    import invperm_interp.training.trainer as trainer_mod
    from invperm_interp.training.signals import Interrupted

    model_cfg, train_cfg = small(d=2, out_dir=str(tmp_path / "r"), steps=100000, batch_size=4,
                                 eval_every=100000, eval_size=8)
    real, calls = trainer_mod.sample_batch, []

    def sample_then_term(*args, **kw):  # call 0 is the eval batch: SIGTERM arrives in step 5
        calls.append(1)
        if len(calls) == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kw)

    monkeypatch.setattr(trainer_mod, "sample_batch", sample_then_term)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as e:
        train(model_cfg, train_cfg, progress=False)
    assert e.value.signum == signal.SIGTERM and e.value.exit_code == 143
    assert str(e.value) == f"training stopped at step 5; resume with --resume {tmp_path / 'r'}"
    assert [s for s, _ in RunDir(tmp_path / "r").checkpoints()] == [5]
    assert signal.getsignal(signal.SIGTERM) == handler
