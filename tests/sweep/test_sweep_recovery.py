"""A sweep survives what users and clusters do: failed runs are one line each and a summary (with
sweep.jsonl written for what finished), a run killed before its first checkpoint restarts, a
finished run without its analysis is analysed on rerun, a stop signal stops the sweep and its
workers with a resume hint, and submission errors are one line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, fake_mechanism, tiny_grid_text

from invperm_interp.cli import main
from invperm_interp.sweep.engine import run_sweep, units
from invperm_interp.sweep.grid import load_grid
from invperm_interp.sweep.workers import slurm_error

SRC = REPO / "src"


def grid_file(tmp_path, steps=20, every=10, extra=""):
    path = tmp_path / "grid.toml"
    path.write_text(tiny_grid_text(steps=steps, every=every, head=extra))
    return path


def records(path):
    return {r["name"]: r for r in map(json.loads, Path(path).read_text().splitlines())}


@pytest.mark.slow
def test_a_failed_run_is_one_line_and_a_summary_and_a_run_never_checkpointed_restarts(
        tmp_path, capsys):
    path = grid_file(tmp_path)
    reference = run_sweep(path, tmp_path / "ref", executor="debug", progress=False)
    out = tmp_path / "out"
    run_sweep(path, out, executor="debug", progress=False)
    broken = out / "seed1"
    (broken / "final.safetensors").unlink()
    for ckpt in (broken / "checkpoints").glob("*.safetensors"):
        ckpt.write_bytes(b"not a checkpoint")
    assert main(["sweep", str(path), "--out", str(out), "--executor", "debug", "--quiet"]) == 2
    err = capsys.readouterr().err.rstrip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert len(err) == 2 and err[0].startswith("  seed1: ")
    assert err[1].startswith("invperm sweep: error: 1 of 2 runs finished, 1 failed (seed1); wrote ")
    assert err[1].endswith("rerun the same command to resume")
    rows = records(out / "sweep.jsonl")
    assert rows["seed0"]["status"] == "finished" and rows["seed1"]["status"] == "unfinished"
    # the run as a kill -9 before its first checkpoint leaves it: evaluations, no checkpoint
    for ckpt in (broken / "checkpoints").glob("*"):
        ckpt.unlink()
    assert main(["sweep", str(path), "--out", str(out), "--executor", "debug", "--quiet"]) == 0
    assert (out / "sweep.jsonl").read_text() == reference.read_text()


def test_a_finished_run_without_its_mechanism_is_analysed_on_rerun(tmp_path, monkeypatch):

    from invperm_interp.analysis.sweep_record import SweepRecord

    calls = fake_mechanism(monkeypatch, "two_block")
    path = grid_file(tmp_path, steps=10, extra="mechanism = true")
    out = tmp_path / "out"
    run_sweep(path, out, executor="debug", progress=False)
    (out / "seed1" / "mechanism.json").unlink()  # stopped between final weights and analysis
    assert units(load_grid(path), out) == [[1]]
    rows = records(run_sweep(path, out, executor="debug", progress=False))
    assert rows["seed1"]["mechanism"] == "two_block" and len(calls) == 3
    assert SweepRecord.from_dict(rows["seed1"]["analysis"]).mechanism.minimal.size == 2
    # a record cut short (a full disk) is not done and is analysed again, not a failure
    record = out / "seed0" / "mechanism.json"
    record.write_text(record.read_text()[:40])
    assert units(load_grid(path), out) == [[0]]
    rows = records(run_sweep(path, out, executor="debug", progress=False))
    assert rows["seed0"]["mechanism"] == "two_block" and len(calls) == 4


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])  # SIGHUP: a closed terminal
def test_sigterm_stops_the_sweep_and_its_workers_with_a_resume_hint(tmp_path, sig):
    from invperm_interp.runs.lock import RunLock

    path = grid_file(tmp_path, steps=400, every=20)
    reference = run_sweep(path, tmp_path / "ref", executor="debug", progress=False)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "invperm_interp.cli", "sweep", str(path), "--out", str(out),
           "--workers", "1", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(out.glob("*/checkpoints/*.safetensors")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(sig)  # the sweep alone, as a scheduler or `kill` would
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith("rerun the same command to resume")
    for run_dir in out.glob("seed*"):  # no worker is left holding a run
        with RunLock(run_dir):
            pass
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert (out / "sweep.jsonl").read_text() == reference.read_text()


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGHUP])
def test_sigusr2_and_sighup_ask_training_and_the_sweep_to_stop_like_sigterm(sig):
    from invperm_interp.sweep.engine import _StopOnSignal
    from invperm_interp.training.signals import StopRequest

    with StopRequest() as stop:
        os.kill(os.getpid(), sig)
        deadline = time.monotonic() + 5
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(0.01)
    assert stop.requested and stop.signum == sig
    assert stop.interrupted("x").exit_code == 128 + sig
    if sig == signal.SIGHUP:  # the sweep's driver (it ignores SIGUSR2, which Slurm sends tasks)
        with _StopOnSignal() as driver:
            os.kill(os.getpid(), sig)
            deadline = time.monotonic() + 5
            while driver.signum is None and time.monotonic() < deadline:
                time.sleep(0.01)
        assert driver.signum == sig


def test_a_second_sigterm_stops_the_sweep_at_once_with_sigterms_exit_status():
    """The second signal stops the driver at once; it exits 143 (128 + SIGTERM) as the first
    would have, not 130 (Ctrl-C's), and says a rerun resumes."""
    from invperm_interp.sweep.engine import _StopOnSignal
    from invperm_interp.training.signals import Interrupted

    with pytest.raises(Interrupted) as err, _StopOnSignal() as driver:
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while driver.signum is None and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(1)  # the second handler raises here, if not already
    assert err.value.exit_code == 143 and "rerun the same command to resume" in str(err.value)


def test_a_slurm_task_stopped_by_a_signal_returns_a_result_naming_the_stop(tmp_path, monkeypatch):
    """submitit writes no result for a task that raises (the driver then waited 15 s per task and
    said "ended without a result"): the task returns, each unfinished run noted as stopped."""
    from invperm_interp.sweep import tasks
    from invperm_interp.sweep.tasks import failed_dir, slurm_unit
    from invperm_interp.training.signals import Interrupted

    path = grid_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()

    def stopped(*args):
        raise Interrupted("training stopped at step 10", signal.SIGUSR2)

    monkeypatch.setattr(tasks, "train_unit", stopped)
    assert slurm_unit(str(path), str(out), [0, 1]) == ["seed0", "seed1"]
    for name in ("seed0", "seed1"):
        assert (failed_dir(out) / name).read_text().startswith(
            "stopped by SIGUSR2 (the task's time limit, scancel or pre-emption) after a "
            "checkpoint; rerun the same command to resume")


@pytest.mark.parametrize("message, line", [
    ("sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission "
     "failed: Invalid partition name specified",
     "sbatch: error: Batch job submission failed: Invalid partition name specified"),
    ('Could not detect "srun", are you indeed on a slurm cluster?',
     "no Slurm on this machine (no srun found); use --executor local"),
    ("Job 12_3 (task: 0) with path /x/12_3_0_result.pkl\nhas not produced any output "
     "(state: CANCELLED by 0)\nError stream produced:\n----\nslurmstepd: error: *** JOB 12 "
     "CANCELLED ***", "the task ended without a result (Slurm state CANCELLED by 0)"),
    ("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect "
     "failure)", "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
                 "(connect failure)"),
])
def test_slurm_errors_read_as_one_line(message, line):
    assert slurm_error(RuntimeError(message)) == line


@pytest.mark.slow
def test_a_slurm_sweep_that_cannot_be_submitted_is_one_line(tmp_path):
    """No Slurm here, no controller, or a partition it does not have: one line either way."""
    path = grid_file(tmp_path)
    path.write_text(path.read_text() + '[slurm]\npartition = "no-such-partition"\n')
    cmd = [sys.executable, "-m", "invperm_interp.cli", "sweep", str(path), "--out",
           str(tmp_path / "out"), "--executor", "slurm", "--quiet"]
    done = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True,
                          text=True, timeout=300)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert err[0].startswith("invperm sweep: error: cannot ")
