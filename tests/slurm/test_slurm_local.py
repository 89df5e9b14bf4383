"""``benchmarks/slurm_local.sh stop`` stops only the daemons the script started (by the PIDs it
recorded), never a program of the same name the machine already ran. No Slurm is needed: the
state file is written by hand, with ``sleep`` standing in for a daemon."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import REPO

SCRIPT = REPO / "benchmarks" / "slurm_local.sh"


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tac") is None, reason="needs coreutils")
def test_stop_ends_the_recorded_daemons_and_nothing_of_the_same_name(tmp_path):
    started = subprocess.Popen(["sleep", "300"])  # as if the script had started it
    other = subprocess.Popen(["sleep", "300"])  # the machine's own, not recorded
    state = tmp_path / "pids"
    reused = 2**22 + 7  # a recorded PID no process (or another program) holds now
    state.write_text(f"sleep {started.pid}\nslurmd {reused}\n")
    try:
        done = subprocess.run(["sh", str(SCRIPT), "stop"], capture_output=True, text=True,
                              env={**os.environ, "SLURM_LOCAL_STATE": str(state)}, timeout=60)
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 10
        while _alive(started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(started) and _alive(other)
        assert f"stopped sleep ({started.pid})" in done.stdout
        assert not state.exists()
        again = subprocess.run(["sh", str(SCRIPT), "stop"], capture_output=True, text=True,
                               env={**os.environ, "SLURM_LOCAL_STATE": str(state)}, timeout=60)
        assert again.returncode == 0 and "nothing recorded" in again.stdout
    finally:
        for proc in (started, other):
            if _alive(proc):
                proc.kill()
            proc.wait()



def _daemon(tmp_path, name: str, program: str, *args: str) -> tuple[subprocess.Popen, int]:
    """``program`` run as a process named ``name`` (a copy of it under that name), a stand-in for a
    daemon: a shell that waits for it (and reaps it, as init reaps a daemon), and its PID, also
    written to its PID file ``tmp_path / f"{name}.pid"``."""
    binary, pidfile = tmp_path / name, tmp_path / f"{name}.pid"
    shutil.copy(shutil.which(program), binary)
    parent = subprocess.Popen(["sh", "-c", '"$@" & echo $! >"$0"; wait', pidfile, binary, *args])
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.01)
    return parent, int(pidfile.read_text())


def _running(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/status").read_text().split("State:")[1].lstrip().startswith("Z")
    except OSError:
        return False


def _stop(state, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), "stop"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_LOCAL_STATE": str(state), **env})


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tac") is None, reason="needs coreutils")
def test_stop_finds_a_daemon_restarted_since_by_its_pid_file_and_waits_for_it(tmp_path):
    """The dead-controller test restarts slurmctld: the recorded PID is gone, the daemon's own PID
    file names the new one. ``stop`` ends it and returns once it has exited."""
    parent, pid = _daemon(tmp_path, "slurmctld", "sleep", "300")
    state = tmp_path / "pids"
    state.write_text(f"slurmctld {2**22 + 7} {tmp_path / 'slurmctld.pid'}\n")  # started as: gone
    try:
        done = _stop(state)
        assert done.returncode == 0, done.stderr
        assert not Path(f"/proc/{pid}").exists()  # exited (and reaped) before stop returned
        assert done.stdout.splitlines() == [f"stopped slurmctld ({pid})"]
        assert not state.exists()
    finally:
        parent.kill()
        parent.wait()
        if _running(pid):
            os.kill(pid, 9)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tac") is None, reason="needs coreutils")
def test_stop_says_which_daemon_outlived_the_wait_and_keeps_its_record(tmp_path):
    parent, pid = _daemon(tmp_path, "slurmd", "sh", "-c", "trap '' TERM; while :; do sleep 0.1; done")
    state = tmp_path / "pids"
    state.write_text(f"slurmd {pid}\n")
    try:
        done = _stop(state, SLURM_LOCAL_STOP_WAIT="1")
        assert _running(pid)
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.splitlines() == [
            f"slurmd ({pid}) still runs 1 s after SIGTERM: end it with kill -9 {pid}, "
            f"then rerun `sh {SCRIPT} stop`"]
        assert state.read_text() == f"slurmd {pid}\n"  # a later stop tries again
    finally:
        os.kill(pid, 9)
        parent.wait()
