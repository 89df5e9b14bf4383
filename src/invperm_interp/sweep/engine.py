"""``invperm sweep``: train a grid's runs and collect them into ``sweep.jsonl`` (``collect``).

The sweep folder holds one run directory per job (``train``'s format), ``sweep.jsonl`` and the
sweep's own state under ``.sweep/`` (claims, failures, worker logs, submitted Slurm jobs; submitit's
logs under ``.submitit/``). Units of work are in ``plan``; what a worker does is in ``tasks``.

- ``local``: one worker process per core (``--workers``), each claiming the next unclaimed unit.
- ``slurm``: one submitit job array, one task per unit, with ``partition``, ``time``, ``gpus`` and
  ``cpus_per_task`` from the grid's ``[slurm]`` table.
- ``debug``: submitit's in-process executor (the slurm code path, for tests).

The sweep's bar shows the runs done, failed and left, an ETA, and the runner's counts (workers;
Slurm tasks queued and running, from ``squeue``) read at each redraw; it says each run that failed
or stopped when it sees it. The first Ctrl-C,
SIGTERM or SIGHUP (a closed terminal) stops it and its workers (each checkpoints) and cancels its
Slurm jobs; so does any exit.
A run that fails does not stop the others: the sweep ends with one line per failed run and a
summary, with ``sweep.jsonl`` written for what finished. Rerunning the same command skips finished
runs and recovers every interrupted state (``tasks``), so a killed sweep rerun ends with the same
``sweep.jsonl``. One sweep process at a time owns the folder (a lock).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from .collect import collect, read_rows, read_sweep
from .grid import Grid, load_grid
from .plan import RESUME_HINT, check_size, job_done, units
from .tasks import failed_dir
from .workers import LocalPool, SubmititArray, debug_run

EXECUTORS = ("local", "slurm", "debug")
#: what stops the sweep: Ctrl-C, ``kill`` or a scheduler, a closed terminal or ssh session
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
POLL_S = 0.2  # how often the sweep looks for runs that finished, failed or stopped
__all__ = ["EXECUTORS", "SweepIncomplete", "collect", "read_sweep", "run_sweep", "units",
           "check_workers"]


class SweepIncomplete(ValueError):
    """Some runs failed; ``sweep.jsonl`` was written for the others."""


class _StopOnSignal:
    """While entered, the first of ``STOP_SIGNALS`` sets ``signum`` (the sweep then stops its
    workers and itself); a second one stops at once."""

    def __enter__(self) -> _StopOnSignal:
        self.signum, self._old = None, {}
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: no signals
                pass
        return self

    def _handle(self, signum, frame) -> None:
        from ..training.signals import Interrupted

        if self.signum is not None:  # exits 128 + signal, as the first one would have
            raise Interrupted(f"sweep stopped at once by a second {signal.Signals(signum).name}; "
                              f"{RESUME_HINT}", signum)
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def check_workers(workers) -> None:
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool)
                                or workers < 1):
        raise ValueError(f"--workers must be a whole number >= 1, got {workers!r}")


def run_sweep(grid_path: str | Path, out: str | Path | None = None, *, executor: str = "local",
              workers: int | None = None, progress: bool = True, allow_large: bool = False) -> Path:
    """Train every unfinished run of the grid, then write ``out/sweep.jsonl``; returns its path.

    Raises :class:`SweepIncomplete` (after writing ``sweep.jsonl``) when runs failed, and
    ``signals.Interrupted`` when stopped by a signal; both say to rerun the same command."""
    from ..runs.lock import RunLock

    grid = load_grid(grid_path, allow_large, executor)  # a malformed grid fails here, before anything starts
    check_workers(workers)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    check_size(grid, allow_large)
    out = Path(out if out is not None else Path("runs") / grid.name)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out):  # one sweep process per folder
        todo = units(grid, out, executor)
        for stale in failed_dir(out).glob("*"):
            stale.unlink()
        stopped = _train(grid, Path(grid_path).resolve(), out, todo, executor,
                         workers or os.cpu_count() or 1, progress) if todo else None
        path = collect(grid, out)
    return _outcome(grid, out, path, stopped, progress)


def _train(grid: Grid, grid_path: Path, out: Path, todo: list[list[int]], executor: str,
           workers: int, progress: bool) -> int | None:
    """Run the units; returns the signal that stopped the sweep, if one did."""
    names = [grid.jobs[i].name for u in todo for i in u]
    if progress:
        print(f"sweep {grid.name}: {len(names)} of {len(grid.jobs)} runs to train or analyse "
              f"({executor}{f', {min(workers, len(todo))} workers' if executor == 'local' else ''})"
              f" -> {out}", flush=True)
    if executor == "debug":  # in this process, one unit after another
        debug_run(grid, str(grid_path), str(out), todo)
        return None
    with _StopOnSignal() as stop:
        if executor == "local":
            runner = LocalPool(grid, str(grid_path), out, todo, min(workers, len(todo)),
                               uuid.uuid4().hex[:12])
        else:
            runner = SubmititArray(grid, str(grid_path), out, todo)
        try:
            runner.start()
            if progress or executor == "slurm":  # the job id, to find or cancel it, even --quiet
                print(f"started {runner.describe()}", flush=True)
            _watch(grid, out, names, runner, stop, progress)
        except KeyboardInterrupt:
            stop.signum = stop.signum or signal.SIGINT
        finally:
            runner.stop(stop.signum)
        return stop.signum


def _watch(grid: Grid, out: Path, names: list[str], runner, stop: _StopOnSignal,
           progress: bool) -> None:
    """Wait for the runner, saying each run that failed; the bar is redrawn every ``mininterval``
    (and at the end) with the runs seen and the runner's counts read then."""
    from ..training.progress import progress_bar

    seen: set[str] = set()
    drawn = -math.inf
    with progress_bar(total=len(names), unit="run", disable=not progress, desc="sweep",
                      file=sys.stdout, dynamic_ncols=True) as bar:
        while True:
            running = runner.running()
            failed = {p.name for p in failed_dir(out).glob("*")}
            new = [n for n in names if n not in seen and (
                n in failed or job_done(out / n, grid.analysis))]
            seen.update(new)
            for name in new:  # a stop or failure is said when seen, not only in the summary
                if progress and name in failed:
                    bar.write(f"  {name}: {_reason(out, name)}", file=sys.stdout)
            done = not running or stop.signum is not None
            if progress and (done or time.monotonic() - drawn >= bar.mininterval):
                # drawn here, once per redraw, with the runner's counts read now (squeue on Slurm);
                # the last is drawn when the bar closes
                bar.n = len(seen)
                bar.set_postfix(failed=len(failed & set(names)), left=len(names) - len(seen),
                                **runner.states(), refresh=not done)
                drawn = time.monotonic()
            if done:
                return
            time.sleep(POLL_S)


def _reason(out: Path, name: str) -> str:
    try:
        return (failed_dir(out) / name).read_text().strip()
    except OSError:
        return "failed"


def _outcome(grid: Grid, out: Path, path: Path, stopped: int | None, progress: bool) -> Path:
    """Say what did not finish, in one line per run and a summary (and each run whose mechanism
    the analyses refused: it is done); raise unless all did."""
    from ..training.signals import Interrupted

    if stopped is not None:
        raise Interrupted(f"sweep stopped; its workers checkpointed; wrote {path} for what "
                          f"finished; {RESUME_HINT}", stopped)
    records = [r for _, r in read_rows(out)]
    failures = {p.name: p.read_text().strip() for p in failed_dir(out).glob("*")}
    refused = {r.name: r.mechanism_refused for r in records if r.mechanism_refused is not None}
    for name, why in refused.items() if progress else ():  # trained, and done
        print(f"  {name}: mechanism analysis refused: {why}")
    missing = [r.name for r in records if r.status == "unfinished"
               or grid.mechanism and r.status != "diverged" and r.mechanism is None
               and r.name not in refused]
    if not missing:
        return path
    for name in missing:
        print(f"  {name}: {failures.get(name, 'did not finish')}", file=sys.stderr)
    done = len(records) - len(missing)
    raise SweepIncomplete(f"{done} of {len(records)} runs finished, {len(missing)} failed "
                          f"({', '.join(missing[:3])}{', …' if len(missing) > 3 else ''}); wrote "
                          f"{path} for what finished; {RESUME_HINT}")
