"""``invperm sweep --executor slurm`` on a real Slurm cluster (``benchmarks/slurm_local.sh`` starts a
single-node one): the runs go through the queue as one job array, a task cancelled mid-run is one
line in the sweep's summary and a rerun completes it with nothing lost or duplicated (sweep.jsonl
byte-identical to the in-process path), its progress bar counts the tasks squeue shows, and a bad
partition or a dead controller is one line."""

import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from helpers import tiny_grid_text

from invperm_interp.sweep.engine import run_sweep

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SRC = Path(__file__).resolve().parents[2] / "src"
HINT = ("no Slurm cluster answers here: start one with `sudo sh benchmarks/slurm_local.sh` "
        "(installs slurm-wlm, munge, slurmdbd and mariadb-server with apt)")


def _cluster_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(scope="module", autouse=True)
def cluster():
    if not _cluster_up():
        pytest.skip(HINT)


def sweep_cmd(path, out):
    return [sys.executable, "-m", "invperm_interp.cli", "sweep", str(path), "--out", str(out),
            "--executor", "slurm", "--quiet"]


ENV = {**os.environ, "PYTHONPATH": str(SRC)}


def grid_file(tmp_path, steps=1500, partition=""):
    path = tmp_path / "grid.toml"
    path.write_text(tiny_grid_text(name="slurm_tiny", d="[2, 3]", steps=steps, every=50,
                                   eval_every=50, tail=f"[slurm]\ntime = 10\n{partition}\n"))
    return path


def queue() -> list[tuple[str, str]]:
    out = subprocess.run(["squeue", "-h", "-n", "invperm-slurm_tiny", "-o", "%i %T"],
                         capture_output=True, text=True).stdout
    return [tuple(line.split()) for line in out.splitlines() if line.strip()]


def drained(seconds: float = 60) -> bool:
    """Whether the sweep's jobs leave the queue within ``seconds`` (a task that returned may still
    be COMPLETING while Slurm ends its step)."""
    deadline = time.monotonic() + seconds
    while queue() and time.monotonic() < deadline:
        time.sleep(0.5)
    return not queue()


def test_a_grid_goes_through_the_queue_survives_scancel_and_a_rerun_completes_it(tmp_path):
    path = grid_file(tmp_path)
    reference = run_sweep(path, tmp_path / "ref", executor="debug", progress=False).read_text()
    out = tmp_path / "out"
    proc = subprocess.Popen(sweep_cmd(path, out), env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen, cancelled = set(), None
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        tasks = queue()
        seen.update(state for _, state in tasks)
        running = [job for job, state in tasks if state == "RUNNING" and "_" in job]
        if cancelled is None and running:
            cancelled = running[0]
            subprocess.run(["scancel", cancelled], check=True)
        time.sleep(0.2)
    said, err = proc.communicate(timeout=300)
    assert "RUNNING" in seen and cancelled is not None, (seen, err)
    # the job id is printed (even with --quiet), the jobs named after the grid
    assert f"started Slurm job {cancelled.split('_')[0]} (invperm-slurm_tiny, 4 tasks)" in said
    lines = err.rstrip().splitlines()
    assert "Traceback" not in err
    assert lines[-1].startswith("invperm sweep: error: 3 of 4 runs finished, 1 failed"), err
    assert lines[-1].endswith("rerun the same command to resume")
    # a task cancelled while training checkpoints and says so; one cancelled while it starts ends
    # without a result
    assert "stopped by SIGTERM" in err or "CANCELLED" in err
    rows = [json.loads(x) for x in (out / "sweep.jsonl").read_text().splitlines()]
    assert sorted(r["status"] for r in rows) == ["finished"] * 3 + ["unfinished"]
    job = cancelled.split("_")[0]
    accounted = subprocess.run(["sacct", "-n", "-X", "-j", job, "-o", "JobID,State"],
                               capture_output=True, text=True).stdout
    assert "CANCELLED" in accounted and "COMPLETED" in accounted
    done = subprocess.run(sweep_cmd(path, out), env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (out / "sweep.jsonl").read_text() == reference
    assert drained()  # nothing left behind


DRAW = re.compile(rb"queued=(\d+), running=(\d+)\]")  # the end of one redraw of the sweep's bar


def counts() -> tuple[int, int]:
    """The sweep's tasks that squeue shows queued (PENDING) and running (RUNNING, COMPLETING)."""
    out = subprocess.run(["squeue", "-h", "-r", "-n", "invperm-slurm_tiny", "-o", "%T"],
                         capture_output=True, text=True, check=True).stdout.split()
    return out.count("PENDING"), out.count("RUNNING") + out.count("COMPLETING")


def drain(fd: int, text: bytearray) -> bool:
    """Append what the terminal ``fd`` holds now to ``text``; False once its writer is gone."""
    while select.select([fd], [], [], 0)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the sweep closed its terminal
            return False
        if not chunk:
            return False
        text += chunk
    return True


def test_the_progress_bar_counts_the_tasks_squeue_shows(tmp_path):
    """The sweep's bar, on a terminal (redrawn every half second), shows the queued and running
    counts squeue shows. Each comparison reads squeue, waits for the second redraw after it (its
    counts were read after the first was written, so after that squeue), then reads squeue again:
    tasks only move forward (queued, running, gone), so two equal reads mean the queue stood still
    between them, and the redraw must show it."""
    path, out = grid_file(tmp_path), tmp_path / "out"  # 4 tasks: 2 queued at first on 2 CPUs
    terminal, sweep_end = pty.openpty()
    fcntl.ioctl(sweep_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 400, 0, 0))  # no cut postfix
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(sweep_cmd(path, out)[:-1], env=ENV, stdin=subprocess.DEVNULL,
                                stdout=sweep_end, stderr=err)  # without --quiet
    os.close(sweep_end)
    text, compared, open_ = bytearray(), [], True
    deadline = time.monotonic() + 300
    try:
        while open_ and time.monotonic() < deadline:
            before = counts()
            open_ = drain(terminal, text)
            seen = len(DRAW.findall(text))
            wait = time.monotonic() + 10
            while open_ and len(DRAW.findall(text)) < seen + 2 and time.monotonic() < wait:
                time.sleep(0.05)
                open_ = drain(terminal, text)
            draws = DRAW.findall(text)
            if len(draws) >= seen + 2 and counts() == before:
                compared.append((before, tuple(map(int, draws[seen + 1]))))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(terminal)
    assert proc.returncode == 0, (tmp_path / "err").read_text()
    assert [bar for squeue, bar in compared if bar != squeue] == [], compared
    assert any(running for (_, running), _ in compared), compared  # compared while tasks ran
    assert drained()


def test_a_bad_partition_is_one_line(tmp_path):
    path = grid_file(tmp_path, steps=10, partition='partition = "no-such-partition"')
    done = subprocess.run(sweep_cmd(path, tmp_path / "out"), env=ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "invperm sweep: error: cannot submit the sweep to Slurm: sbatch: error: Batch job "
        "submission failed: Invalid partition name specified"]


def test_a_dead_controller_is_one_line(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("stopping and restarting slurmctld needs root")
    path = grid_file(tmp_path, steps=10)
    subprocess.run(["scontrol", "shutdown", "slurmctld"], check=True, capture_output=True)
    try:
        time.sleep(2)
        done = subprocess.run(sweep_cmd(path, tmp_path / "out"), env=ENV, capture_output=True,
                              text=True, timeout=300)
    finally:
        subprocess.run(["slurmctld"], check=True)
        for _ in range(30):
            if _cluster_up():
                break
            time.sleep(1)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("invperm sweep: error: cannot submit the sweep to Slurm: ")
    assert "controller" in lines[0]


def test_a_task_cancelled_while_training_says_it_stopped_after_a_checkpoint(tmp_path):
    """scancel once a run has checkpointed: the task returns a result (submitit wrote none for a
    task that raised), so the sweep reports the stop as such, not as a task without a result."""
    path = tmp_path / "grid.toml"
    path.write_text(tiny_grid_text(name="slurm_tiny", seeds="1", d="3", steps=20000, every=50,
                                   eval_every=50, tail="[slurm]\ntime = 10\n"))
    out = tmp_path / "out"
    proc = subprocess.Popen(sweep_cmd(path, out), env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(out.glob("*/checkpoints/*.safetensors")) and time.monotonic() < deadline:
        time.sleep(0.1)
    (job, _), = queue()
    subprocess.run(["scancel", job], check=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "Traceback" not in err
    assert err.splitlines()[0] == ("  seed0: stopped by SIGTERM (the task's time limit, scancel or "
                                   "pre-emption) after a checkpoint; rerun the same command to "
                                   "resume"), err
    assert drained()
