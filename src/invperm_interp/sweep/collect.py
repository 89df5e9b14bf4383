"""A sweep's result file: ``sweep.jsonl`` (one line per run, in grid order: name, variant, status,
configs, steps to solve, the last evaluation without its wall-clock time (``runs.Evaluation``),
mechanism (the rule's answer as text: a construction's name, else its verdict) and its analysis, the run's
``analysis.sweep_record.SweepRecord``; for a finished run the analyses cannot read, a standard
model with LayerNorm or MLPs, ``mechanism_refused``: why), written from the run directories alone,
so the same runs give the same bytes however they were trained."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..config import ModelConfig
from ..runs.directory import RunDir
from ..runs.evaluation import Evaluation
from .grid import Grid

SWEEP_FILE = "sweep.jsonl"  # in a sweep folder: one line per job


#: What each key of a line must hold (``mechanism_refused``, ``variant`` and ``analysis`` aside).
_KINDS = {"name": (str,), "status": (str,), "step": (int, type(None)),
          "steps_to_solve": (int, type(None)), "solve_mse": (int, float),
          "final": (dict, type(None)), "mechanism": (str, type(None)), "model": (dict,),
          "train": (dict,)}


@dataclass(frozen=True)
class SweepRow:
    """One run's line of ``sweep.jsonl``: ``from_dict(line).to_dict() == line``, key order too, for
    the lines this version writes; a line of an older one reads (keys it lacks take their defaults,
    keys it has beyond these are let go). ``model`` and ``train`` are the configurations' JSON as
    written (``model_config`` is the typed one); ``analysis`` the run's ``SweepRecord`` as a dict
    (``run_rows`` reads it typed); ``mechanism_refused``: why the analyses cannot read a finished
    run (a standard model with LayerNorm or MLPs), on its line only then."""

    name: str
    status: str  # "finished", "stopped", "unfinished" or "diverged"
    step: int | None
    steps_to_solve: int | None
    solve_mse: float
    final: Evaluation | None  # the last evaluation, without its wall-clock time
    mechanism: str | None  # the rule's answer as text
    model: dict
    train: dict
    variant: str = ""
    analysis: dict | None = None
    mechanism_refused: str | None = None

    @property
    def model_config(self) -> ModelConfig:
        return ModelConfig.from_dict(self.model)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "variant": self.variant, "status": self.status, "step": self.step,
            "steps_to_solve": self.steps_to_solve, "solve_mse": self.solve_mse,
            "final": None if self.final is None else self.final.to_dict(),
            "mechanism": self.mechanism, "model": self.model, "train": self.train,
            "analysis": self.analysis,
            # only on a refused run's line, so other lines keep their bytes
            **({"mechanism_refused": self.mechanism_refused}
               if self.mechanism_refused is not None else {}),
        }

    @classmethod
    def from_dict(cls, line: dict) -> SweepRow:
        """``ValueError`` saying what is wrong when ``line`` is not a run's line: a JSON object
        with :data:`_KINDS`' keys, of those types, and a model whose layout has an integer ``d``."""
        if not isinstance(line, dict):
            raise ValueError(f"got {line!r}")
        for key, kind in _KINDS.items():
            if key not in line:
                raise ValueError(f"it has no {key!r}")
            if not isinstance(line[key], kind) or isinstance(line[key], bool):
                raise ValueError(f"{key!r} is {line[key]!r}")
        layout = line["model"].get("layout")
        if not (isinstance(layout, dict) and type(layout.get("d")) is int):
            raise ValueError(f"model.layout is {layout!r}")
        try:
            final = Evaluation.from_dict(line["final"]) if line["final"] else None
        except ValueError as err:
            raise ValueError(f"final is not ({err})") from None
        known = {k: line[k] for k in ("variant", "analysis", "mechanism_refused") if k in line}
        return cls(
            name=line["name"], status=line["status"], step=line["step"],
            steps_to_solve=line["steps_to_solve"], solve_mse=line["solve_mse"], final=final,
            mechanism=line["mechanism"], model=line["model"], train=line["train"], **known)


def read_rows(folder: str | Path) -> list[tuple[int, SweepRow]]:
    """``(line number, row)`` for every run line of ``folder/sweep.jsonl`` (blank lines skipped);
    ``ValueError`` naming the file and line when there is no such file or a line is not a run's
    (:meth:`SweepRow.from_dict`) or names a run an earlier line names (two files concatenated
    would count every run twice)."""
    path = Path(folder) / SWEEP_FILE
    if not path.is_file():
        raise ValueError(f"DIR must be a sweep folder with sweep.jsonl, found none at {path}")
    rows, seen = [], {}
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            row = SweepRow.from_dict(json.loads(text))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} line {i} is not a run record: {err}") from None
        except ValueError as err:
            raise ValueError(f"{path} line {i} is not a run record: {err}") from None
        first = seen.setdefault(row.name, i)
        if first != i:
            raise ValueError(f"{path} line {i} repeats run {row.name} (line {first})")
        rows.append((i, row))
    return rows


def read_sweep(folder: str | Path) -> list[tuple[int, dict]]:
    """:func:`read_rows`' lines as dicts (``final`` an ``Evaluation``), for scripts that read
    them by key."""
    return [(i, {**row.to_dict(), "final": row.final}) for i, row in read_rows(folder)]


def run_record(grid: Grid, job, run_dir: Path) -> SweepRow:
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
    return SweepRow(
        name=job.name, variant=job.variant, status=status, step=step, steps_to_solve=solved,
        solve_mse=grid.solve_mse,
        # without the wall-clock time: the same runs give the same bytes
        final=None if last is None else last.without_wall_clock(),
        mechanism=str(analysis.answer) if analysis else None, model=job.model_cfg.to_dict(),
        train=job.train_cfg.to_dict(), analysis=analysis.to_dict() if analysis else None,
        mechanism_refused=refused)


def collect(grid: Grid, out: Path) -> Path:
    """Write ``out/sweep.jsonl`` from the run directories (one line per job, in grid order)."""
    from ..runs.checkpoint import atomic_write

    lines = [run_record(grid, job, out / job.name) for job in grid.jobs]
    path = out / SWEEP_FILE
    atomic_write(path, "".join(json.dumps(x.to_dict()) + "\n" for x in lines).encode())
    return path
