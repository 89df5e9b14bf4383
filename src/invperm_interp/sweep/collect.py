"""A sweep's result file: ``sweep.jsonl`` (one line per run, in grid order: name, variant, status,
configs, steps to solve, the last evaluation without its wall-clock time (``runs.Evaluation``),
mechanism (the rule's answer as text: a construction's name, else its verdict) and its analysis, the run's
``analysis.sweep_record.SweepRecord``; for a finished run the analyses cannot read, a standard
model with LayerNorm or MLPs, ``mechanism_refused``: why), written from the run directories alone,
so the same runs give the same bytes however they were trained."""

from __future__ import annotations

import json
from pathlib import Path

from ..runs.directory import RunDir
from ..runs.evaluation import Evaluation
from .grid import Grid

SWEEP_FILE = "sweep.jsonl"  # in a sweep folder: one line per job


def read_sweep(folder: str | Path) -> list[tuple[int, dict]]:
    """``(line number, record)`` for every run line of ``folder/sweep.jsonl`` (blank lines skipped);
    ``ValueError`` naming the file and line when there is no such file or a line is not a run
    record: a JSON object with :func:`run_record`'s keys, of its types, naming a run no earlier line
    names (two files concatenated would count every run twice). Its ``final`` is read into an
    ``Evaluation`` (None when the run has none)."""
    number, optional_int = (int, float), (int, type(None))
    fields = {"name": str, "status": str, "step": optional_int, "steps_to_solve": optional_int,
              "solve_mse": number, "final": (dict, type(None)), "mechanism": (str, type(None)),
              "model": dict, "train": dict}
    path = Path(folder) / SWEEP_FILE
    if not path.is_file():
        raise ValueError(f"DIR must be a sweep folder with sweep.jsonl, found none at {path}")
    records, seen = [], {}
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
        try:
            record["final"] = Evaluation.from_dict(record["final"]) if record["final"] else None
        except ValueError as err:
            raise ValueError(f"{path} line {i} is not a run record: final is not ({err})") from None
        first = seen.setdefault(record["name"], i)
        if first != i:
            raise ValueError(f"{path} line {i} repeats run {record['name']} (line {first})")
        records.append((i, record))
    return records


def run_record(grid: Grid, job, run_dir: Path) -> dict:
    """One run's line of ``sweep.jsonl``."""
    run_dir = RunDir(run_dir)
    metrics = run_dir.read_metrics()
    last = metrics[-1] if metrics else None
    if run_dir.is_diverged:
        status, step = "diverged", run_dir.read_diverged()["step"]
    elif run_dir.is_finished:
        status = "stopped" if last is not None and last.stopped else "finished"
        step = None if last is None else last.step
    else:
        status, step = "unfinished", 0 if last is None else last.step
    solved = next((m.step for m in metrics if m.mse < grid.solve_mse), None)
    from ..analysis.sweep_record import SweepRecord
    from ..training.run import unanalysable

    analysis = SweepRecord.of_run(run_dir)  # None: none this version reads, or of older weights
    trained = status in ("finished", "stopped")
    refused = unanalysable(job.model_cfg) if grid.mechanism and trained else None
    return {
        "name": job.name, "variant": job.variant, "status": status, "step": step,
        "steps_to_solve": solved, "solve_mse": grid.solve_mse,
        # without the wall-clock time: the same runs give the same bytes
        "final": None if last is None else last.without_wall_clock().to_dict(),
        "mechanism": str(analysis.answer) if analysis else None,
        "model": job.model_cfg.to_dict(), "train": job.train_cfg.to_dict(),
        "analysis": analysis.to_dict() if analysis else None,
        # a run whose mechanism the analyses cannot read: why (only then, so other lines keep
        # their bytes)
        **({"mechanism_refused": refused} if refused is not None else {}),
    }


def collect(grid: Grid, out: Path) -> Path:
    """Write ``out/sweep.jsonl`` from the run directories (one line per job, in grid order)."""
    from ..runs.checkpoint import atomic_write

    lines = [run_record(grid, job, out / job.name) for job in grid.jobs]
    path = out / SWEEP_FILE
    atomic_write(path, "".join(json.dumps(x) + "\n" for x in lines).encode())
    return path
