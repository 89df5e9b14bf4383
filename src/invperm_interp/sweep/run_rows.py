"""The runs of a directory as rows (``RunRow``): what the index page and the sweep report show
about each run, read from the folder's ``sweep.jsonl`` (one JSON object per run, as the sweep
command writes it) or, failing that, from every run directory below it (a folder with
``config.json``). The pages render the rows they are handed (``viz.index``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import ModelConfig
from ..runs.directory import RunDir
from ..runs.evaluation import Evaluation
from ..viz.curves import AT_FLOOR, SOLVED_BELOW
from .collect import SWEEP_FILE, SweepRow, read_rows


@dataclass(frozen=True)
class RunRow:
    """One run of the index: its model configuration and what the table shows about it."""

    dir: Path
    model: ModelConfig
    seed: int
    steps: int
    mse: float | None
    causal_floor: float | None
    row_acc: float | None
    steps_to_solve: int | None
    mechanism: str | None  # the rule's answer as text
    status: str | None = None  # "diverged", "unfinished": a run that did not end normally
    # (style, name) where the sweep's analysis names it otherwise under mean or resample ablation
    other_styles: tuple[tuple[str, str], ...] = ()
    # "key=value" of the training settings that differ between a sweep's runs (seed and folder aside)
    training: tuple[str, ...] = ()

    @property
    def d(self) -> int:
        return self.model.d

    @property
    def causal(self) -> bool:
        return self.model.causal

    @property
    def group(self) -> str:
        """The label of the runs counted together: the model kind (:func:`_model_kind`) and the
        training settings that differ between a sweep's runs."""
        return ", ".join([_model_kind(self.model), *self.training])

    @property
    def solvable(self) -> bool:
        """False for a causal run whose floor is above the target: it cannot get there."""
        return not (self.causal and (self.causal_floor or 0.0) >= SOLVED_BELOW)

    @property
    def solved(self) -> bool:
        return self.steps_to_solve is not None or (self.mse is not None and self.mse < SOLVED_BELOW)

    @property
    def at_floor(self) -> bool:
        """A causal run that cannot solve the task and ends within 1% of its floor."""
        return (not self.solvable and self.mse is not None
                and self.mse <= (1 + AT_FLOOR) * self.causal_floor)


def _model(model: dict) -> ModelConfig:
    try:
        return ModelConfig.from_dict(model)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"not a model configuration ({err}): {model}") from None


def _model_kind(cfg: ModelConfig) -> str:
    """``"bidirectional [P; Y] → P"``: the model kind, the same for every d; for a standard model
    also its shape and the disentangled widths its exact map reads it in (or why there is none:
    ``Architecture.label``)."""
    return (f"{cfg.attention_dir} [{'; '.join(s.name for s in cfg.layout.segments)}] "
            f"→ {cfg.readout}{cfg.architecture.label(cfg)}")


def _first_below(metrics: list[Evaluation], target: float) -> int | None:
    return next((m.step for m in metrics if m.mse < target), None)


def _mechanism(run_dir: Path) -> str | None:
    """The mechanism an analysis of the run named (its analysis record), if any."""
    path = RunDir(run_dir).analysis
    if not path.is_file():
        return None
    from ..analysis.record import ModelAnalysis

    try:
        return str(ModelAnalysis.from_json(path.read_text()).mechanism.answer)
    except (ValueError, KeyError, TypeError):  # a record of another version: no name to show
        return None


def _row_from_dir(run_dir: Path) -> RunRow:
    model, train = RunDir(run_dir).read_config()
    metrics = RunDir(run_dir).read_metrics()
    last = metrics[-1] if metrics else None
    return RunRow(run_dir, model, train.seed, last.step if last else 0, last and last.mse,
                  last and last.causal_floor, last and last.row_acc,
                  _first_below(metrics, SOLVED_BELOW), _mechanism(run_dir))


def _sweep_record(analysis, run_dir: Path):
    """The run's typed record (``SweepRecord``): from its sweep line's ``analysis``, else its
    ``mechanism.json``; None without one this version reads."""
    from ..analysis.sweep_record import SweepRecord

    try:
        if isinstance(analysis, dict):
            return SweepRecord.from_dict(analysis)
        path = RunDir(run_dir).mechanism
        return SweepRecord.read(path) if path.is_file() else None
    except (ValueError, KeyError, TypeError):
        return None


def _row_from_line(root: Path, line: SweepRow) -> RunRow:
    """A run from its ``sweep.jsonl`` line (``name``: its folder under the sweep)."""
    model, final, run_dir = _model(line.model), line.final, root / line.name
    typed = _sweep_record(line.analysis, run_dir)
    mechanism = str(typed.answer) if typed else line.mechanism
    others = tuple((style, str(answer)) for style, answer in (typed.under if typed else {}).items()
                   if str(answer) != mechanism)
    return RunRow(run_dir, model, int(line.train.get("seed", 0)),
                  int(line.step or (final and final.step) or 0), final and final.mse,
                  final and final.causal_floor, final and final.row_acc, line.steps_to_solve,
                  mechanism or _mechanism(run_dir),
                  None if line.status in ("finished", "stopped") else line.status, others)


def _varying_training(lines: list[SweepRow]) -> list[str]:
    """The training settings that differ between a sweep's runs (seed and folder aside): they
    join the model kind in a group's label, so runs trained otherwise are not counted together."""
    keys = sorted({k for r in lines for k in r.train} - {"seed", "out_dir"})
    return [k for k in keys if len({json.dumps(r.train.get(k)) for r in lines}) > 1]


def find_runs(directory: str | Path) -> list[RunRow]:
    """Every run of ``directory``: from its sweep file if it has one, else each folder below it
    holding a run. Raises ``ValueError`` when there is none."""
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"directory {root} does not exist")
    sweep = root / SWEEP_FILE
    if sweep.is_file():
        rows, lines = [], read_rows(root)
        varying = _varying_training([line for _, line in lines])
        for i, line in lines:
            try:
                row = _row_from_line(root, line)
            except (AttributeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{sweep} line {i} is not a run record: {err}") from None
            rows.append(replace(row, training=tuple(f"{k}={line.train.get(k)}" for k in varying)))
    else:
        rows = [_row_from_dir(p.parent) for p in sorted(root.rglob(RunDir.CONFIG))
                if p.parent != root]
    if not rows:
        raise ValueError(f"{root} holds no runs (no {SWEEP_FILE} and no run directory with "
                         f"{RunDir.CONFIG} below it)")
    return sorted(rows, key=lambda r: (r.group, r.d, r.seed, str(r.dir)))


def index_title(directory: str | Path) -> str:
    """The index page's title: ``"Sweep NAME"`` for a sweep folder, else ``"Runs in DIR"``."""
    root = Path(directory)
    return f"Sweep {root.name}" if (root / SWEEP_FILE).is_file() else f"Runs in {root}"
