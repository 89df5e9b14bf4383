"""What a sweep's workers do: train a unit of runs, recovering every state an interrupted sweep can
leave, analyse each finished run, and note each run that failed.

States a rerun recovers without manual deletion: a run killed before its first checkpoint starts
again from scratch; a run with checkpoints resumes from the last; a run with final weights but no
``mechanism.json`` is analysed (unless the analyses cannot read its model,
``training.run.unanalysable``: its ``sweep.jsonl`` line says why); a diverged run stays diverged.
A run that fails (a locked directory, a bad checkpoint, anything but a stop signal) is written to
``.sweep/failed/NAME`` and the worker goes on with the next; a stop signal checkpoints and ends
the worker.

Local workers run ``python -m invperm_interp.sweep.tasks GRID OUT UNITS TOKEN``: each claims the
next unit no other worker of the sweep has claimed (an ``O_EXCL`` file), so fast and slow runs
balance out, and stops when its parent (the sweep) is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from ..runs.directory import RunDir
from .grid import load_grid
from .plan import job_done, uses_gpu

STATE_DIR = ".sweep"  # in the sweep folder: claims, failures, logs, submitted Slurm jobs
MEAN_REFERENCE = 1024  # samples a mean ablation's means are taken over (cost grows with them)
LOCK_WAIT_S = 30  # how long a run locked by a dying process (an orphan of a killed sweep) is awaited


def failed_dir(out: Path) -> Path:
    return out / STATE_DIR / "failed"


def note_failure(out: Path, name: str, message: str) -> None:
    path = failed_dir(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(message + "\n")


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def restart_if_never_checkpointed(run_dir: Path) -> None:
    """A run killed before its first checkpoint (``config.json`` and maybe evaluations, but no
    checkpoint, final weights or divergence record) starts again: its files are removed."""
    from ..runs.lock import RunLock

    run = RunDir(run_dir)
    if not run.config.is_file() or run.checkpoints() or run.is_done:
        return
    with RunLock(run):
        run.config.unlink(missing_ok=True)
        run.metrics.unlink(missing_ok=True)
        run.environment.unlink(missing_ok=True)
        shutil.rmtree(run.path / RunDir.CHECKPOINTS, ignore_errors=True)


def _train(pairs: list) -> None:
    """``train_many`` with resume, waiting a while for a lock held by a dying process."""
    from ..runs.lock import RunLocked
    from ..training.many import train_many

    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            train_many(pairs, resume=True, progress=False)
            return
        except RunLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def train_unit(grid_path: str, out: str, indices: list[int]) -> list[str]:
    """Train (or resume) one unit's runs and analyse them; returns the names of the runs that
    failed (each also noted under ``.sweep/failed``). A stop signal propagates."""
    import torch

    grid, out_dir = load_grid(grid_path, allow_large=True), Path(out)
    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK", "1")))
    try:
        return _train_unit(grid, out_dir, indices)
    finally:
        torch.set_num_threads(threads)


def slurm_unit(grid_path: str, out: str, indices: list[int]) -> list[str]:
    """``train_unit`` as a Slurm task: a stop signal (the time limit's USR2, scancel's TERM) ends
    the task with a result, each unfinished run noted as stopped and checkpointed, so the sweep
    hears of it at once (submitit writes no result for a task that raises one)."""
    from ..training.signals import Interrupted

    try:
        return train_unit(grid_path, out, indices)
    except Interrupted as err:
        grid = load_grid(grid_path, allow_large=True)
        stopped = [grid.jobs[i].name for i in indices
                   if not job_done(Path(out) / grid.jobs[i].name, grid.analysis)]
        for name in stopped:
            note_failure(Path(out), name, f"stopped by {err.signal_name} (the task's time limit, "
                                          "scancel or pre-emption) after a checkpoint; rerun the "
                                          "same command to resume")
        return stopped


def _train_unit(grid, out_dir: Path, indices: list[int]) -> list[str]:
    from ..training.run import unanalysable

    jobs = [grid.jobs[i] for i in indices]
    together = len(jobs) > 1 and uses_gpu(grid, jobs[0], "local")
    groups = [jobs] if together else [[j] for j in jobs]
    failed = []
    for group in groups:
        # a finished run is analysed as it is, even one trained on past the grid's steps
        to_train = [j for j in group if not RunDir(out_dir / j.name).is_finished]
        try:
            for job in to_train:
                restart_if_never_checkpointed(out_dir / job.name)
            if to_train:
                _train([(j.model_cfg, replace(j.train_cfg, out_dir=str(out_dir / j.name)))
                        for j in to_train])
        except Exception as err:  # noqa: BLE001 - any failure of a run is reported, not raised
            for job in group:
                note_failure(out_dir, job.name, one_line(err))
                failed.append(job.name)
            continue
        for job in group:
            if grid.analysis is None or unanalysable(job.model_cfg) is not None:  # its line says why
                continue
            try:
                write_analysis(out_dir / job.name, **grid.analysis)
            except Exception as err:  # noqa: BLE001
                note_failure(out_dir, job.name, f"analysis: {one_line(err)}")
                failed.append(job.name)
    return failed


def write_analysis(run_dir: Path, samples: int = 4096, seed: int = 0, batches: int = 1,
                   mean_ablation: bool = False, resample_ablation: bool = False):
    """The finished run's :class:`analysis.sweep_record.SweepRecord`: its mechanism by the
    library's rule on ``samples`` fresh samples of generator ``seed`` (every tested construction's
    scores with standard errors, so that a report can recount at other thresholds, and the minimal
    circuit); ``batches`` > 1 also names it on the batches of seeds ``seed + 1``, …,
    ``mean_ablation`` and ``resample_ablation`` under those ablation styles (with the tests behind
    each name). Cached in ``run_dir/mechanism.json``: redone when the version, samples, seed or
    batches differ; a name (or its tests) under an ablation style the record lacks is added to it.
    None for an unfinished or diverged run."""
    from ..analysis.sweep_record import STYLES, SweepRecord

    settings = {"samples": samples, "seed": seed, "batches": batches,
                "mean_ablation": mean_ablation, "resample_ablation": resample_ablation}
    if not RunDir(run_dir).is_finished:
        return None
    path = RunDir(run_dir).mechanism
    cached = SweepRecord.of_run(run_dir)  # None: none, unreadable or of older weights
    missing = (cached.lacks(settings, RunDir(run_dir).read_config()[0]) if cached is not None
               else None)
    if missing == []:
        return cached
    from ..analysis.mechanism import name_by_rule
    from ..analysis.verdict import evaluation_batch
    from ..runs.checkpoint import atomic_write, weights_digest
    from ..training.run import Run

    model = Run.load(run_dir).analysis_model  # a standard run's exact map
    batch = evaluation_batch(model, samples, seed)
    if missing is None:
        cached = replace(_sweep_record(model, batch, samples, seed, batches),
                         weights=weights_digest(RunDir(run_dir).final))
        missing = [s for s in STYLES if settings[f"{s}_ablation"]]
    found = {s: _tested_under(s, model, batch, samples, seed + batches) for s in missing}
    tested, empty = {s: t for s, (t, _) in found.items()}, {s: e for s, (_, e) in found.items()}
    record = cached.with_names({s: name_by_rule(tested[s], empty=empty[s]) for s in missing},
                               tested, empty)
    atomic_write(path, (json.dumps(record.to_dict()) + "\n").encode())
    return record


def _tested_under(style: str, model, batch, samples: int, reference_seed: int) -> tuple:
    """The constructions tested as the rule tests them with the cells outside the circuit
    mean-ablated (means over ``MEAN_REFERENCE`` reference samples) or resample-ablated (each
    sample's removed scores taken on its own reference sample, ``samples`` of them), and the empty
    claim's test on the same testers: ``(tests, empty)``."""
    from ..analysis.mechanism import tests_on

    reference = reference_batch(style, model, samples, reference_seed)
    tested, empty = tests_on(model, batch, ablation=style, reference=reference)
    return tuple(tested), empty


def reference_batch(style: str, model, samples: int, reference_seed: int):
    """The reference samples a sweep's ``"mean"`` or ``"resample"`` ablation takes its stand-ins
    from: ``MEAN_REFERENCE`` samples (at most ``samples``) from ``reference_seed``, or ``samples``
    from ``reference_seed + 1``."""
    from ..analysis.verdict import evaluation_batch

    if style == "mean":
        return evaluation_batch(model, min(samples, MEAN_REFERENCE), reference_seed)
    return evaluation_batch(model, samples, reference_seed + 1)


def _sweep_record(model, batch, samples: int, seed: int, batches: int):
    """The run's mechanism on ``batch`` and its names on ``batches - 1`` more batches."""
    from ..analysis.mechanism import mechanism, name_on
    from ..analysis.placements import fitting_names
    from ..analysis.sweep_record import SweepRecord
    from ..analysis.templates import explain
    from ..analysis.verdict import evaluation_batch

    mech = mechanism(model, batch, circuit=explain(model))
    names = [mech.answer] + [name_on(model, evaluation_batch(model, samples, seed + k))
                             for k in range(1, batches)]
    return SweepRecord(mech, samples, seed, tuple(names),
                       registry=tuple(fitting_names(model.cfg, working=True)))


def claiming_worker(grid_path: str, out: str, unit_list: list[list[int]], token: str) -> None:
    """Train every unit no other worker of this sweep (``token``) has claimed yet."""
    claims = Path(out) / STATE_DIR / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    for n, unit in enumerate(unit_list):
        try:
            fd = os.open(claims / f"{token}-{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, str(os.getpid()).encode())  # whose unit it is, should this worker be killed
        os.close(fd)
        train_unit(grid_path, out, unit)


def _stop_when_orphaned() -> None:
    """Ask this worker to stop (SIGTERM: checkpoint, then exit) once its sweep process is gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str]) -> int:
    from ..training.signals import Interrupted

    grid_path, out, units_file, token = argv
    _stop_when_orphaned()
    try:
        claiming_worker(grid_path, out, json.loads(Path(units_file).read_text()), token)
    except Interrupted as err:
        print(f"worker stopped: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
