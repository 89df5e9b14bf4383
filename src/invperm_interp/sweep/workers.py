"""Who trains a sweep's units: local worker processes (:class:`LocalPool`) or a submitit job array
(:class:`SubmititArray`, Slurm; ``debug_run`` for submitit's in-process executor). Each can say
whether it is still running and stop everything it started; failures are noted per run
(``tasks.note_failure``) in one line each."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from .grid import Grid
from .plan import job_done
from .tasks import STATE_DIR, failed_dir, note_failure, one_line, slurm_unit, train_unit

GRACE_S = 60  # how long stopped workers get to checkpoint before they are killed
TERMINAL_WAIT_S = 5  # after Ctrl-C, how long workers (which got it from the terminal too) get alone
SQUEUE_TIMEOUT_S = 10  # a progress refresh waits this long at most for squeue
#: squeue's states a Slurm sweep's progress counts as queued and as running
QUEUED = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD")
RUNNING = ("RUNNING", "COMPLETING")


class LocalPool:
    """``n`` worker processes (``python -m invperm_interp.sweep.tasks``) claiming units in turn;
    their output goes to ``.sweep/logs/worker-K.log``."""

    def __init__(self, grid: Grid, grid_path: str, out: Path, todo: list[list[int]], n: int,
                 token: str):
        self.grid, self.grid_path, self.out, self.todo = grid, grid_path, out, todo
        self.n, self.token = n, token
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        state = self.out / STATE_DIR
        (state / "logs").mkdir(parents=True, exist_ok=True)
        units_file = state / f"units-{self.token}.json"
        units_file.write_text(json.dumps(self.todo))
        cmd = [sys.executable, "-m", "invperm_interp.sweep.tasks", self.grid_path,
               str(self.out.resolve()), str(units_file), self.token]
        for k in range(self.n):
            with open(state / "logs" / f"worker-{k}.log", "a") as log:
                self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL))

    def running(self) -> bool:
        busy = any(p.poll() is None for p in self.procs)
        if not busy:
            self.harvest()
        return busy

    def describe(self) -> str:
        return f"{len(self.procs)} local workers (logs in {self.out / STATE_DIR / 'logs'})"

    def states(self) -> dict[str, int]:
        return {"workers": sum(p.poll() is None for p in self.procs)}

    def harvest(self) -> None:
        """Note each unfinished run of a unit whose worker a signal killed (SIGKILL: out of memory,
        ``kill -9``) with that reason; a worker that exits by itself has noted its own failures."""
        claims = self.out / STATE_DIR / "claims"
        for k, p in enumerate(self.procs):
            if p.returncode is None or p.returncode >= 0 or getattr(p, "harvested", False):
                continue
            p.harvested = True
            reason = (f"its worker {k} (pid {p.pid}) was killed by "
                      f"{signal.Signals(-p.returncode).name}; see "
                      f"{self.out / STATE_DIR / 'logs' / f'worker-{k}.log'}")
            for n, unit in enumerate(self.todo):
                claim = claims / f"{self.token}-{n}"
                try:
                    held = claim.read_text().strip() == str(p.pid)
                except OSError:
                    held = False
                if held:
                    for name in (self.grid.jobs[i].name for i in unit):
                        if not job_done(self.out / name, self.grid.analysis) and not (
                                failed_dir(self.out) / name).exists():
                            note_failure(self.out, name, reason)

    def _wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        return not self.running()

    def stop(self, signum: int | None) -> None:
        """Stop the workers still running: each gets one SIGTERM (it checkpoints and exits),
        then SIGKILL after ``GRACE_S``. After Ctrl-C, which the terminal sent them too, they get
        ``TERMINAL_WAIT_S`` first."""
        if signum == signal.SIGINT and self._wait(TERMINAL_WAIT_S):
            return
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        if not self._wait(GRACE_S):
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def executor_parameters(kind: str, slurm: dict, name: str = "sweep") -> dict:
    """submitit parameters from a grid's ``[slurm]`` table (``time`` in minutes bounds every task;
    default one day); the jobs are named ``invperm-<grid name>``. The debug executor gets them too
    (it ignores them)."""
    params = {"timeout_min": slurm.get("time", 60 * 24), "name": f"invperm-{name}",
              "gpus_per_node": slurm.get("gpus", 0), "cpus_per_task": slurm.get("cpus_per_task", 1)}
    if "partition" in slurm:
        params["slurm_partition"] = slurm["partition"]
    if "array_parallelism" in slurm:
        params["slurm_array_parallelism"] = slurm["array_parallelism"]
    return params


def slurm_error(err: BaseException) -> str:
    """The one line that says why Slurm refused or ended a job (sbatch's error line, the task's
    state, the missing ``srun``), from submitit's long messages."""
    text = str(err)
    if "Could not detect" in text and "srun" in text:
        return "no Slurm on this machine (no srun found); use --executor local"
    state = re.search(r"state: ([A-Z_]+(?: by \d+)?)", text)
    if state:
        return f"the task ended without a result (Slurm state {state.group(1)})"
    errors = [line.strip() for line in text.splitlines() if "error:" in line]
    if errors:  # sbatch's last error line says why (the earlier ones, how it got there)
        return errors[-1]
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else type(err).__name__


@contextmanager
def captured_stderr():
    """Slurm's commands write to this process's stderr (fd 2) while submitit runs them; keep that
    text (``.text``, after the block) for the one-line error instead of the terminal."""
    box = SimpleNamespace(text="")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield box
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            box.text = tmp.read().decode(errors="replace")


def make_executor(kind: str, folder: Path, slurm: dict, name: str = "sweep"):
    """A submitit executor writing its logs under ``folder/.submitit``; a machine without Slurm is
    one ``ValueError``."""
    import submitit

    try:
        executor = submitit.AutoExecutor(folder=folder / ".submitit", cluster=kind)
    except Exception as err:  # noqa: BLE001 - submitit raises RuntimeError and others
        raise ValueError(f"cannot use --executor {kind}: {slurm_error(err)}") from None
    executor.update_parameters(**executor_parameters(kind, slurm, name))
    return executor


class SubmititArray:
    """One submitit job array, one task per unit; job ids are kept in ``.sweep/jobs.json`` so a
    later sweep of the folder cancels tasks an earlier (killed) sweep left behind."""

    def __init__(self, grid: Grid, grid_path: str, out: Path, todo: list[list[int]],
                 kind: str = "slurm"):
        self.grid, self.grid_path, self.out, self.todo, self.kind = grid, grid_path, out, todo, kind
        self.jobs: list = []
        self.harvested = False

    def _ids_file(self) -> Path:
        return self.out / STATE_DIR / "jobs.json"

    def start(self) -> None:
        ids = self._ids_file()
        if ids.is_file() and self.kind == "slurm":  # left by a sweep that was killed: ours alone
            subprocess.run(["scancel", *json.loads(ids.read_text())], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        executor = make_executor(self.kind, self.out, self.grid.slurm, self.grid.name)
        n = len(self.todo)
        try:
            with captured_stderr() as said:
                unit = slurm_unit if self.kind == "slurm" else train_unit  # debug: a stop raises
                self.jobs = executor.map_array(unit, [self.grid_path] * n,
                                               [str(self.out.resolve())] * n, self.todo)
        except Exception as err:  # noqa: BLE001 - sbatch errors arrive as several types
            reason = slurm_error(RuntimeError(f"{said.text}\n{err}"))
            raise ValueError(f"cannot submit the sweep to Slurm: {reason}") from None
        ids.parent.mkdir(parents=True, exist_ok=True)
        ids.write_text(json.dumps(self.job_ids))

    @property
    def job_ids(self) -> list[str]:
        """The Slurm job ids of the array (one, unless submitit split it)."""
        return sorted({str(j.job_id).split("_")[0] for j in self.jobs})

    def describe(self) -> str:
        return (f"Slurm job {', '.join(self.job_ids)} (invperm-{self.grid.name}, {len(self.jobs)} "
                "tasks)")

    def states(self) -> dict[str, int]:
        """How many tasks are queued and running, as ``squeue`` says now (one call; submitit's
        states are sacct's, read at most every few minutes)."""
        try:
            said = subprocess.run(["squeue", "-h", "-r", "-o", "%T", "-j", ",".join(self.job_ids)],
                                  capture_output=True, text=True, timeout=SQUEUE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):  # no counts this time
            return {}
        if said.returncode != 0:  # every id has left the queue, or the controller did not answer
            return {"queued": 0, "running": 0} if "Invalid job id" in said.stderr else {}
        states = said.stdout.split()
        return {"queued": sum(s in QUEUED for s in states), "running": sum(s in RUNNING for s in states)}

    def running(self) -> bool:
        try:
            with captured_stderr():
                busy = any(not j.done() for j in self.jobs)
        except Exception:  # noqa: BLE001 - sacct/squeue hiccups: ask again at the next poll
            return True
        if not busy:
            self.harvest()
        return busy

    def harvest(self) -> None:
        """Note every run of a task that ended without training it, with the task's reason."""
        from ..training.signals import Interrupted

        if self.harvested:
            return
        self.harvested = True
        for job, unit in zip(self.jobs, self.todo):
            try:
                job.result()
                continue
            except Interrupted:
                if self.kind == "debug":
                    raise
                reason = "stopped by a signal (a time limit or pre-emption)"
            except Exception as err:  # noqa: BLE001 - submitit's job errors
                reason = slurm_error(err)
            for i in unit:
                name = self.grid.jobs[i].name
                if not job_done(self.out / name, self.grid.analysis) and not (
                        failed_dir(self.out) / name).exists():
                    note_failure(self.out, name, f"task {job.job_id}: {reason}")

    def stop(self, signum: int | None) -> None:
        """Cancel every task still queued or running (``scancel``); forget the job ids once
        nothing is left."""
        for job in self.jobs:
            try:
                if not job.done():
                    job.cancel(check=False)
            except Exception:  # noqa: BLE001 - cancelling is best effort; ids stay for a rerun
                return
        self._ids_file().unlink(missing_ok=True)


def debug_run(grid: Grid, grid_path: str, out: str, todo: list[list[int]]) -> None:
    """The slurm code path in this process (submitit's debug executor), for tests."""
    array = SubmititArray(grid, grid_path, Path(out), todo, kind="debug")
    array.start()
    array.harvest()


__all__ = ["LocalPool", "SubmititArray", "debug_run", "executor_parameters", "make_executor",
           "one_line", "slurm_error"]
