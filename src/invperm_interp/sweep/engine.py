"""``invperm sweep``: train a grid's jobs with submitit and collect them into ``sweep.jsonl``.

The sweep folder holds one run directory per job (``train``'s format), ``sweep.jsonl`` (one line per
job, in grid order: name, status, configs, steps to solve, final metrics, mechanism) and submitit's
logs under ``.submitit/``. Units of work: on a CPU one job each (vectorising does not pay there),
on a GPU one bucket of same-shape jobs (``many.bucket_key``), trained together by ``train_many``.

- ``local``: one worker process per core; each worker claims the next unclaimed unit, so fast and
  slow runs balance out.
- ``slurm``: one job array, one task per unit (at most ``jobs_per_task`` jobs of a bucket each),
  with ``partition``, ``time``, ``gpus`` and ``cpus_per_task`` from the grid's ``[slurm]`` table.
- ``debug``: submitit's in-process executor (the slurm code path, for tests).

Rerunning a sweep skips finished (or diverged) runs and resumes interrupted ones from their last
checkpoint, so a killed sweep rerun ends with the same ``sweep.jsonl``.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from ..runs.directory import RunDir
from .grid import Grid, Job, load_grid

EXECUTORS = ("local", "slurm", "debug")
SWEEP_FILE = "sweep.jsonl"  # in a sweep folder: one line per job
WALL_CLOCK = ("wall_time",)  # kept in metrics.jsonl, left out of sweep.jsonl (not reproducible)


def units(grid: Grid, out: Path) -> list[list[int]]:
    """Indices of the unfinished jobs, grouped into units of work (see the module docstring)."""
    from ..training.many import bucket_key
    from ..training.run import resolve_device

    todo = [i for i, job in enumerate(grid.jobs) if not RunDir(out / job.name).is_done]
    per = grid.slurm.get("jobs_per_task")
    groups: dict[tuple, list[int]] = {}
    for i in todo:
        job = grid.jobs[i]
        gpu = resolve_device(job.train_cfg.device).type == "cuda"
        groups.setdefault(bucket_key(job.model_cfg, job.train_cfg) if gpu else (i,), []).append(i)
    result = []
    for members in groups.values():
        size = per or len(members)
        result += [members[k:k + size] for k in range(0, len(members), size)]
    return sorted(result, key=lambda u: -_cost(grid.jobs[u[0]]) * len(u))  # longest first


def _cost(job: Job) -> float:
    """A rough relative cost of a job (steps × batch × the last layer's attention work)."""
    m, t = job.model_cfg, job.train_cfg.resolved()
    return t.steps * t.batch_size * m.T * m.T * m.widths[-1]


def _train_unit(grid_path: str, out: str, indices: list[int]) -> list[str]:
    """Train one unit's jobs (resuming any that started) and name their mechanisms when asked."""
    from dataclasses import replace

    from ..training.many import train_many

    grid = load_grid(grid_path)
    jobs = [grid.jobs[i] for i in indices]
    pairs = [(j.model_cfg, replace(j.train_cfg, out_dir=str(Path(out) / j.name))) for j in jobs]
    train_many(pairs, resume=True, progress=False)
    if grid.mechanism:
        for job in jobs:
            write_mechanism(Path(out) / job.name)
    return [j.name for j in jobs]


def _claiming_worker(grid_path: str, out: str, unit_list: list[list[int]], token: str) -> int:
    """Train every unit no other worker of this sweep (``token``) has claimed yet."""
    done = 0
    claims = Path(out) / ".claims"
    for n, unit in enumerate(unit_list):
        try:
            os.close(os.open(claims / f"{token}-{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        _train_unit(grid_path, out, unit)
        done += 1
    return done


def write_mechanism(run_dir: Path, n: int = 4096, seed: int = 0) -> str | None:
    """The run's mechanism by ``analysis.mechanism.mechanism`` (if this version has it) on ``n``
    fresh samples, cached in the run directory; None for unfinished runs or without it."""
    path = RunDir(run_dir).mechanism
    if path.is_file():
        return json.loads(path.read_text())["name"]
    if not RunDir(run_dir).is_finished:
        return None
    try:
        from ..analysis.mechanism import mechanism
    except ImportError:
        return None
    import torch

    from ..task import sample_batch
    from ..training.run import Run

    model = Run.load(run_dir).model
    batch = sample_batch(model.cfg.layout, n, torch.Generator().manual_seed(seed),
                         dtype=model.cfg.torch_dtype)
    found = mechanism(model, batch)
    from ..runs.checkpoint import atomic_write

    atomic_write(path, (json.dumps({"name": found.name, "n": n, "seed": seed}) + "\n").encode())
    return found.name


def executor_parameters(kind: str, slurm: dict) -> dict:
    """submitit parameters from a grid's ``[slurm]`` table (``time`` in minutes bounds every task;
    default one day). The debug executor gets the slurm ones, which it ignores, so a test of it
    runs the slurm code path."""
    params = {"timeout_min": slurm.get("time", 60 * 24), "name": "invperm-sweep"}
    if kind in ("slurm", "debug"):
        params.update(gpus_per_node=slurm.get("gpus", 0), cpus_per_task=slurm.get("cpus_per_task", 1))
        if "partition" in slurm:
            params["slurm_partition"] = slurm["partition"]
    return params


def make_executor(kind: str, folder: Path, slurm: dict):
    """A submitit executor writing its logs under ``folder/.submitit``."""
    import submitit

    if kind not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {kind!r}")
    executor = submitit.AutoExecutor(folder=folder / ".submitit", cluster=kind)
    executor.update_parameters(**executor_parameters(kind, slurm))
    return executor


def run_sweep(grid_path: str | Path, out: str | Path | None = None, *, executor: str = "local",
              workers: int | None = None, progress: bool = True) -> Path:
    """Train every unfinished job of the grid, then write ``out/sweep.jsonl``; returns its path."""
    grid = load_grid(grid_path)  # a malformed grid fails here, before anything starts
    out = Path(out if out is not None else Path("runs") / grid.name)
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    out.mkdir(parents=True, exist_ok=True)
    todo = units(grid, out)
    workers = workers or os.cpu_count() or 1
    if todo:
        if progress:
            left = sum(map(len, todo))
            print(f"sweep {grid.name}: {left} of {len(grid.jobs)} runs to train "
                  f"({executor}{f', {min(workers, len(todo))} workers' if executor == 'local' else ''})"
                  f" -> {out}", flush=True)
        ex = make_executor(executor, out, grid.slurm)
        grid_arg, out_arg = str(Path(grid_path).resolve()), str(out.resolve())
        if executor == "local":
            token = uuid.uuid4().hex[:12]
            (out / ".claims").mkdir(exist_ok=True)
            n = min(workers, len(todo))
            submitted = ex.map_array(_claiming_worker, [grid_arg] * n, [out_arg] * n, [todo] * n,
                                     [token] * n)
        else:
            submitted = ex.map_array(_train_unit, [grid_arg] * len(todo), [out_arg] * len(todo), todo)
        try:
            for job in submitted:
                job.result()
        except KeyboardInterrupt:
            for job in submitted:
                job.cancel(check=False)
            raise
    return collect(grid, out)


def read_sweep(folder: str | Path) -> list[tuple[int, dict]]:
    """``(line number, record)`` for every run line of ``folder/sweep.jsonl`` (blank lines skipped);
    ``ValueError`` naming the file and line when there is no such file or a line is not a run
    record: a JSON object with :func:`collect`'s keys, of its types."""
    number, optional_int = (int, float), (int, type(None))
    fields = {"name": str, "status": str, "step": optional_int, "steps_to_solve": optional_int,
              "solve_mse": number, "final": (dict, type(None)), "mechanism": (str, type(None)),
              "model": dict, "train": dict}
    path = Path(folder) / SWEEP_FILE
    if not path.is_file():
        raise ValueError(f"DIR must be a sweep folder with sweep.jsonl, found none at {path}")
    records = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} line {i} is not a run record: {err}") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {i} is not a run record: got {record!r}")
        for key, kind in fields.items():
            if key not in record:
                raise ValueError(f"{path} line {i} is not a run record: it has no {key!r}")
            value = record[key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{path} line {i} is not a run record: {key!r} is {value!r}")
        layout = record["model"].get("layout")
        if not (isinstance(layout, dict) and type(layout.get("d")) is int):
            raise ValueError(f"{path} line {i} is not a run record: model.layout is {layout!r}")
        records.append((i, record))
    return records


def collect(grid: Grid, out: Path) -> Path:
    """Write ``out/sweep.jsonl`` from the run directories (one line per job, in grid order)."""
    lines = []
    for job in grid.jobs:
        run_dir = RunDir(out / job.name)
        metrics = [{k: v for k, v in m.items() if k not in WALL_CLOCK} for m in run_dir.read_metrics()]
        if run_dir.is_diverged:
            status, step = "diverged", run_dir.read_diverged()["step"]
        elif run_dir.is_finished:
            last = metrics[-1] if metrics else {}
            status, step = ("stopped" if last.get("stopped") else "finished"), last.get("step")
        else:
            status, step = "unfinished", metrics[-1]["step"] if metrics else 0
        solved = next((m["step"] for m in metrics if m["mse"] < grid.solve_mse), None)
        mech = run_dir.mechanism
        lines.append({
            "name": job.name, "status": status, "step": step, "steps_to_solve": solved,
            "solve_mse": grid.solve_mse, "final": metrics[-1] if metrics else None,
            "mechanism": json.loads(mech.read_text())["name"] if mech.is_file() else None,
            "model": job.model_cfg.to_dict(), "train": job.train_cfg.to_dict(),
        })
    path = out / SWEEP_FILE
    from ..runs.checkpoint import atomic_write

    atomic_write(path, "".join(json.dumps(x) + "\n" for x in lines).encode())
    return path
