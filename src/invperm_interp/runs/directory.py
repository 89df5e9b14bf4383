"""A run directory: the one place that knows its file names and the rules for reading them.

``RunDir(path)`` holds

- ``config.json``: the model and training configurations (:meth:`RunDir.write_config`,
  :meth:`RunDir.read_config`);
- ``metrics.jsonl``: one evaluation per line, appended and flushed (:meth:`RunDir.append_metrics`,
  :meth:`RunDir.read_metrics`, which refuses lines that are not evaluation records);
- ``checkpoints/step_N.safetensors``: weights, optimizer and generator state
  (:meth:`RunDir.checkpoint`, :meth:`RunDir.checkpoints`);
- ``final.safetensors``: the trained weights (a run with it is *finished*);
- ``diverged.json``: the step and error of a run that diverged (such a run is *done* too);
- ``environment.jsonl``: what each start and resume ran on (``runs.environment``);
- ``mechanism.json``, ``analysis.json``, ``report.html``: what the analysis wrote;
- ``.invperm.lock``: the one-writer lock (``runs.lock``).

A directory *holds a run* when it has ``config.json``, ``metrics.jsonl`` or ``checkpoints/``.
:meth:`RunDir.check_new` keeps a new run out of a directory that holds another run or files that
are not a run (unless ``force``), :meth:`RunDir.check_restart` keeps a resume from silently
restarting a run whose checkpoints are gone, :meth:`RunDir.check_final` keeps a damaged final file
from passing for a finished run. Nothing here trains or builds a model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from ..config import ModelConfig, TrainConfig
from . import checkpoint as ckpt
from .config_file import config_hash, config_text, configs_from_json
from .evaluation import Evaluation

__all__ = ["RunDir", "RunWarning", "RunWeights", "checkpoint_bytes"]

_STEP_FILE = re.compile(r"^step_(\d+)\.safetensors$")
_NOT_SAFETENSORS = (".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin")


class RunWarning(UserWarning):
    """Something about a run directory the user should know, that does not stop the work."""


class RunWeights(NamedTuple):
    """What :meth:`RunDir.read_weights` returns: the configurations and one weights file's tensors."""

    model_cfg: ModelConfig
    train_cfg: TrainConfig
    tensors: dict[str, Tensor]
    step: int
    path: Path
    meta: ckpt.CheckpointMeta  # the file's metadata


def write_probe(folder: Path, size: int = 0) -> None:
    """Write ``size`` bytes to a probe file in ``folder``, synced to the disk, and remove it:
    an ``OSError`` when the folder cannot be written (a read-only mount, no permission, full)."""
    probe = Path(folder) / f".invperm-write-test{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(bytes(size))
            f.flush()
            os.fsync(f.fileno())
    finally:
        probe.unlink(missing_ok=True)


def check_writable(folder: Path, hint: str) -> None:
    """Create ``folder`` if needed and write a probe file in it, before any work whose output
    would go there; one ``ValueError`` naming it (``hint``: what to do instead) otherwise."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_probe(folder)
    except OSError as err:
        raise ValueError(f"{folder} cannot be written ({err.strerror or err}); {hint}") from None


@dataclass(frozen=True)
class RunDir:
    """A run directory (it need not exist yet). ``str(run_dir)`` is its path."""

    path: Path

    CONFIG = "config.json"
    METRICS = "metrics.jsonl"
    CHECKPOINTS = "checkpoints"
    FINAL = "final.safetensors"
    DIVERGED = "diverged.json"
    MECHANISM = "mechanism.json"
    ANALYSIS = "analysis.json"
    REPORT = "report.html"
    TIMELINE = "timeline.json"  # invperm timeline: the mechanism over the checkpoints
    ENVIRONMENT = "environment.jsonl"  # one record per start or resume (runs.environment)
    LOCK = ".invperm.lock"
    RUN_FILES = (CONFIG, METRICS, CHECKPOINTS)  # a directory with one of these holds a run

    def __init__(self, path: str | Path | RunDir):
        if isinstance(path, RunDir):
            path = path.path
        if not isinstance(path, (str, Path)) or not str(path).strip():
            raise ValueError(f"run_dir must be a non-empty path (\"\" is not the current directory "
                             f"here), got {path!r}")
        object.__setattr__(self, "path", Path(path))

    def __str__(self) -> str:
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    # -- paths ------------------------------------------------------------------------------------
    config = property(lambda self: self.path / self.CONFIG)
    metrics = property(lambda self: self.path / self.METRICS)
    final = property(lambda self: self.path / self.FINAL)
    diverged = property(lambda self: self.path / self.DIVERGED)
    mechanism = property(lambda self: self.path / self.MECHANISM)
    analysis = property(lambda self: self.path / self.ANALYSIS)
    report = property(lambda self: self.path / self.REPORT)
    timeline = property(lambda self: self.path / self.TIMELINE)
    environment = property(lambda self: self.path / self.ENVIRONMENT)
    lock_file = property(lambda self: self.path / self.LOCK)

    def checkpoint(self, step: int) -> Path:
        return self.path / self.CHECKPOINTS / f"step_{step}.safetensors"

    def checkpoints(self) -> list[tuple[int, Path]]:
        """``(step, path)`` of every ``checkpoints/step_N.safetensors``, by step."""
        folder = self.path / self.CHECKPOINTS
        if not folder.is_dir():
            return []
        return sorted((int(m.group(1)), p) for p in folder.iterdir()
                      if (m := _STEP_FILE.match(p.name)))

    # -- state ------------------------------------------------------------------------------------
    @property
    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in self.RUN_FILES)

    @property
    def is_finished(self) -> bool:
        """Trained to the end (or stopped early): the final weights are there."""
        return self.final.is_file()

    @property
    def is_diverged(self) -> bool:
        return self.diverged.is_file()

    @property
    def is_done(self) -> bool:
        """Nothing left to train: finished or diverged."""
        return self.is_finished or self.is_diverged

    # -- config -----------------------------------------------------------------------------------
    def write_config(self, model_cfg: ModelConfig, train_cfg: TrainConfig) -> None:
        """``config.json``, written atomically."""
        ckpt.atomic_write(self.config, config_text(model_cfg, train_cfg).encode())

    def read_config(self) -> tuple[ModelConfig, TrainConfig]:
        """The ``(model, train)`` configurations stored in ``config.json``."""
        if not self.config.is_file():
            raise ValueError(f"run_dir must hold a run ({self.CONFIG}), found none at {self.config}")
        return configs_from_json(self.config.read_text(), self.config)

    # -- metrics ----------------------------------------------------------------------------------
    def read_metrics(self) -> list[Evaluation]:
        """The records of ``metrics.jsonl`` (none when it does not exist); a torn last line (a crash
        while appending) is skipped. A bad line elsewhere, a line that is JSON but not an evaluation
        record (``Evaluation.from_dict``: an object with an integer ``step`` and a finite number
        ``mse``), or steps out of order (two writers) are a ``ValueError`` naming the line."""
        path = self.metrics
        lines = path.read_text().splitlines() if path.is_file() else []
        metrics: list[Evaluation] = []
        for i, line in enumerate(lines):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                if i < len(lines) - 1:  # only the last line can be torn by a crash
                    raise ValueError(f"{path} line {i + 1} is not JSON") from None
                continue
            try:
                record = Evaluation.from_dict(data)
            except ValueError as err:
                raise ValueError(f"{path} line {i + 1} is not a metrics record ({err}): "
                                 f"{line[:80]!r}") from None
            if metrics and record.step <= metrics[-1].step:
                raise ValueError(f"{path} line {i + 1}: step {record.step} after step "
                                 f"{metrics[-1].step}; the records are out of order (were two "
                                 "processes writing this run?)")
            metrics.append(record)
        return metrics

    def write_metrics(self, records: list[Evaluation]) -> None:
        """Replace ``metrics.jsonl`` by ``records``, atomically."""
        ckpt.atomic_write(self.metrics,
                          "".join(json.dumps(m.to_dict()) + "\n" for m in records).encode())

    def append_metrics(self, record: Evaluation) -> None:
        """Append one record to ``metrics.jsonl`` and flush it."""
        with open(self.metrics, "a") as f:
            f.write(json.dumps(record.to_dict()) + "\n")
            f.flush()

    # -- environment ------------------------------------------------------------------------------
    def append_environment(self, record: dict) -> None:
        """Append one record (``runs.environment.describe``) to ``environment.jsonl``."""
        with open(self.environment, "a") as f:
            f.write(json.dumps(record) + "\n")

    def read_environment(self) -> list[dict]:
        """The records of ``environment.jsonl``, oldest first (none for a run trained before the
        file existed); a line that is not JSON (a torn write) is skipped."""
        if not self.environment.is_file():
            return []
        records = []
        for line in self.environment.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records

    # -- divergence -------------------------------------------------------------------------------
    def write_diverged(self, step: int, error: str) -> None:
        ckpt.atomic_write(self.diverged, (json.dumps({"step": step, "error": error}) + "\n").encode())

    def read_diverged(self) -> dict | None:
        """``{"step", "error"}`` of a run that diverged, else None."""
        return json.loads(self.diverged.read_text()) if self.is_diverged else None

    # -- weights ----------------------------------------------------------------------------------
    def weights_path(self, step: int | None = None) -> Path:
        """The weights file to read: checkpoint ``step``, else ``final.safetensors``, else the last
        checkpoint (of a diverged run: its last good one). Only safetensors files are ever read."""
        if step is not None:
            path = self.checkpoint(step)
            if path.exists() and not path.is_file():
                raise ValueError(f"checkpoint {path} is not a file")
            if not path.is_file():
                steps = [s for s, _ in self.checkpoints()]
                raise ValueError(f"step must be one of the run's checkpoints {steps}, got {step!r}")
            return path
        if self.is_finished:
            return self.final
        found = self.checkpoints()
        if found:
            return found[-1][1]
        if self.is_diverged:  # done, not still training
            lr = self.read_config()[1].resolved().lr
            raise ValueError(f"run {self.path} diverged at step {self.read_diverged()['step']} "
                             f"(lr {lr:g}): nothing to analyse")
        others = sorted(p.name for folder in (self.path, self.path / self.CHECKPOINTS)
                        if folder.is_dir() for p in folder.iterdir() if p.suffix in _NOT_SAFETENSORS)
        unread = (f"; not read: {others} (only safetensors and JSON are loaded, nothing is "
                  "unpickled)") if others else ""
        raise ValueError(f"run {self.path} has neither final weights ({self.FINAL}) "
                         f"nor a checkpoint yet{unread}")

    def read_weights(self, step: int | None = None) -> RunWeights:
        """The configurations and the tensors of one weights file (:meth:`weights_path`), checked
        to have been written by that configuration."""
        model_cfg, train_cfg = self.read_config()
        path = self.weights_path(step)
        tensors, written = ckpt.load(path)
        meta = ckpt.CheckpointMeta.from_dict(written)
        if meta.config_hash != config_hash(model_cfg, train_cfg):
            raise ValueError(f"{path} was written by another configuration than {self.config}")
        if step is not None and meta.step != step:
            raise ValueError(f"checkpoint {path} holds step {meta.step}, not the step its name "
                             f"says ({step}); delete it or give it its own name")
        return RunWeights(model_cfg, train_cfg, tensors, meta.step, path, meta)

    # -- room and rules for a run -----------------------------------------------------------------
    def check_writable(self, model_cfg: ModelConfig, cfg: TrainConfig, resume: bool) -> None:
        """Fail before any training work when the directory cannot hold the run: it cannot be
        created or written (a path under a file, a read-only mount, no permission) or lacks the
        room for every checkpoint the run will write."""
        run_dir = self.path
        try:
            if not resume:  # a missing run to resume is read_config's error, not created here
                run_dir.mkdir(parents=True, exist_ok=True)
            if not run_dir.is_dir():
                return
            write_probe(run_dir, 4096)
            free = shutil.disk_usage(run_dir).free
        except OSError as err:
            raise ValueError(f"out_dir {run_dir} cannot be written ({err.strerror or err}); "
                             "choose another out_dir") from None
        need = cfg.max_checkpoints * checkpoint_bytes(model_cfg, cfg)
        if free < need:
            raise ValueError(f"out_dir {run_dir} has {free} bytes free; this run's checkpoints need "
                             f"about {need} (steps={cfg.steps}, "
                             f"checkpoint_every={cfg.checkpoint_every})")

    def check_new(self, force: bool = False) -> None:
        """A new run starts in an empty directory: one that holds a run is refused always, one
        that holds other files (a stray final weights file included) unless ``force``, which
        warns about what is there."""
        present = sorted(p.name for p in self.path.iterdir() if p.name != self.LOCK)
        taken = [n for n in self.RUN_FILES if n in present]
        if taken:
            raise ValueError(f"out_dir {self.path} already holds a run ({', '.join(taken)}); resume "
                             "it or choose another out_dir (force does not overwrite a run)")
        if not present:
            return
        listed = ", ".join(present[:8]) + (f" and {len(present) - 8} more" if len(present) > 8
                                           else "")
        if not force:
            raise ValueError(f"out_dir {self.path} is not empty and holds no run ({listed}); choose "
                             "an empty or new directory, or pass --force (force=True) to write the "
                             "run among these files")
        replaced = f"; its {self.FINAL} will be replaced" if self.FINAL in present else ""
        warnings.warn(f"writing a new run into {self.path}, which holds {listed}{replaced}",
                      RunWarning, stacklevel=3)

    def check_restart(self) -> None:
        """Resuming a run without checkpoints starts it again from step 0: refuse when that would
        throw away evaluations past step 0 or final weights (``checkpoints/`` deleted)."""
        metrics = self.read_metrics()
        reached = metrics[-1].step if metrics else 0
        if reached > 0 or self.is_finished:
            what = "final weights" if self.is_finished else f"metrics up to step {reached}"
            raise ValueError(f"cannot resume {self.path}: it has no checkpoint ({self.CHECKPOINTS}/ "
                             f"is missing or empty) but holds {what}; resuming would restart it "
                             "from step 0 over them. Train a new run in another directory (its "
                             "final weights, if any, still load)")

    def check_final(self) -> None:
        """On resume: an empty or damaged final weights file must not pass for a finished run; it
        is removed (with a warning), and written again when the run ends."""
        final = self.final
        try:
            if final.is_file():
                ckpt.load(final)
        except ValueError as err:
            reason = str(err).split(" (")[0].removeprefix(f"checkpoint {final} ")
            warnings.warn(f"{final} {reason}: not a finished run's weights; removed, and written "
                          "again from the last checkpoint when the run ends", RunWarning,
                          stacklevel=4)
            final.unlink()


def checkpoint_bytes(model_cfg: ModelConfig, cfg: TrainConfig) -> int:
    """About the size of one checkpoint: weights, Adam's two moments, generator state, header."""
    copies = 3 if cfg.optimizer == "adam" else 1
    element = torch.empty((), dtype=model_cfg.torch_dtype).element_size()
    return model_cfg.n_params * copies * element + 16384
