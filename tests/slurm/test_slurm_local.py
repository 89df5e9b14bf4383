"""``benchmarks/slurm_local.sh stop`` stops only the daemons the script started (by the PIDs it
recorded), never a program of the same name the machine already ran. No Slurm is needed: the
state file is written by hand, with ``sleep`` standing in for a daemon."""

import os
import shutil
import subprocess
import time

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
