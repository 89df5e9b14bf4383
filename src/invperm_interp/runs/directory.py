"""A training run and its directory.

A run directory holds ``config.json`` (model + train, :func:`write_config` / :func:`read_config`),
``metrics.jsonl`` (one evaluation per line, appended and flushed: :func:`append_metrics` /
:func:`read_metrics`), ``checkpoints/step_N.safetensors`` (weights, optimizer and generator state)
and ``final.safetensors`` (the trained weights); ``checkpoint.choose`` picks the weights file to
read. :class:`Run` is a trained model with its configurations and metrics. Nothing here trains:
``train.train`` and ``train.train_or_reuse`` write runs.

A run directory has one writer. :class:`RunLock` (``.invperm.lock``, an ``flock`` held for the life
of the training process, with the holder's pid, host, start time and command inside) refuses a
second writer, ``train --resume`` of a run that is still training included; the kernel drops the
lock when its process dies, so a lock file left by a killed process is reported as stale and taken
over. ``train`` and ``train_many`` (one lock per run) take it; so should any other trainer that
writes a run directory. :func:`check_new_out_dir` keeps a new run out of a directory that holds
another run or files that are not a run (unless ``force``), :func:`check_restart` keeps a resume
from silently restarting a run whose checkpoints are gone, and :func:`read_metrics` refuses lines
that are not evaluation records.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import socket
import sys
import time
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from . import checkpoint as ckpt
from ..config import ModelConfig, TrainConfig, config_hash, config_text, read_config
from ..model.disentangled import DisentangledTransformer

if TYPE_CHECKING:
    from ..model.hooked import HookedDisentangledTransformer

__all__ = ["LOCK_FILE", "Run", "RunLock", "RunLocked", "RunWarning", "append_metrics", "check_final",
           "check_new_out_dir", "check_out_dir", "check_restart", "checkpoint_bytes", "config_hash",
           "read_config", "read_metrics", "resolve_device", "write_config", "write_metrics"]

LOCK_FILE = ".invperm.lock"
RUN_FILES = ("config.json", "metrics.jsonl", "checkpoints")  # a directory with one holds a run


class RunWarning(UserWarning):
    """Something about a run directory the user should know, that does not stop the work."""


class RunLocked(ValueError):
    """Another live process holds the run directory's lock."""


def resolve_device(spec: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; anything else as given (and checked)."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={spec!r} was asked for but CUDA is not available; use 'auto'")
    return device


@dataclass
class Run:
    """A trained model with its configurations and metrics; ``dir`` is None for a run kept in
    memory only (``out_dir=None``). ``weights`` is the hook-free model training updated;
    ``model``, the hooked model of its weights, is built (importing TransformerLens) on first use."""

    model_cfg: ModelConfig
    train_cfg: TrainConfig
    weights: DisentangledTransformer
    metrics: list[dict]
    step: int
    dir: Path | None = None

    @property
    def final_metrics(self) -> dict:
        return self.metrics[-1] if self.metrics else {}

    @cached_property
    def model(self) -> HookedDisentangledTransformer:
        """The hooked model of ``weights`` (a copy, on the same device)."""
        from ..model.hooked import HookedDisentangledTransformer

        return HookedDisentangledTransformer.from_module(self.weights)

    @classmethod
    def load(cls, run_dir: str | Path, step: int | None = None, device: str = "cpu") -> Run:
        """A run from disk: the final weights, or checkpoint ``step``; safetensors only."""
        run_dir = Path(run_dir)
        weights = ckpt.read_run(run_dir, step)
        model = DisentangledTransformer(weights.model_cfg, seed=0)
        ckpt.load_model_tensors(model, weights.tensors, weights.path)
        model = model.to(resolve_device(device))
        metrics = [m for m in read_metrics(run_dir) if m["step"] <= weights.step]
        last = weights.meta.get("metrics")  # final.safetensors keeps the last record
        if isinstance(last, dict) and (not metrics or metrics[-1]["step"] < last.get("step", -1)):
            warnings.warn(f"{run_dir}/metrics.jsonl lacks the records up to step {weights.step} "
                          "(deleted or replaced?): only the final record, kept in "
                          "final.safetensors, is known", RunWarning, stacklevel=2)
            metrics = [last]
        return cls(weights.model_cfg, weights.train_cfg, model, metrics, weights.step, run_dir)


# -- files ----------------------------------------------------------------------------------------
def write_config(run_dir: str | Path, model_cfg: ModelConfig, train_cfg: TrainConfig) -> None:
    """``run_dir/config.json``, written atomically."""
    ckpt.atomic_write(Path(run_dir) / "config.json", config_text(model_cfg, train_cfg).encode())


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of ``run_dir/metrics.jsonl`` (none when it does not exist); a torn last line
    (a crash while appending) is skipped. A bad line elsewhere, a line that is JSON but not an
    evaluation record (an object with an integer ``step`` and a number ``mse``), or steps out of
    order (two writers) are a ``ValueError`` naming the line."""
    path = Path(run_dir) / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    metrics = []
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i < len(lines) - 1:  # only the last line can be torn by a crash
                raise ValueError(f"{path} line {i + 1} is not JSON") from None
            continue
        step, mse = record.get("step") if isinstance(record, dict) else None, None
        if isinstance(record, dict):
            mse = record.get("mse")
        if not (type(step) is int and step >= 0 and isinstance(mse, (int, float))
                and not isinstance(mse, bool) and math.isfinite(mse)):
            raise ValueError(f"{path} line {i + 1} is not a metrics record (a JSON object with an "
                             f"integer 'step' and a finite number 'mse'): {line[:80]!r}")
        if metrics and step <= metrics[-1]["step"]:
            raise ValueError(f"{path} line {i + 1}: step {step} after step {metrics[-1]['step']}; "
                             "the records are out of order (were two processes writing this run?)")
        metrics.append(record)
    return metrics


def write_metrics(run_dir: str | Path, records: list[dict]) -> None:
    """Replace ``run_dir/metrics.jsonl`` by ``records``, atomically."""
    lines = "".join(json.dumps(m) + "\n" for m in records)
    ckpt.atomic_write(Path(run_dir) / "metrics.jsonl", lines.encode())


def append_metrics(run_dir: str | Path, record: dict) -> None:
    """Append one record to ``run_dir/metrics.jsonl`` and flush it."""
    with open(Path(run_dir) / "metrics.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


# -- room for a run -------------------------------------------------------------------------------
def checkpoint_bytes(model_cfg: ModelConfig, cfg: TrainConfig) -> int:
    """About the size of one checkpoint: weights, Adam's two moments, generator state, header."""
    widths, heads = model_cfg.widths, model_cfg.heads
    n = sum(h * w * w for h, w in zip(heads, widths)) + widths[-1] * model_cfg.d  # A's and W_U
    copies = 3 if cfg.optimizer == "adam" else 1
    return n * copies * torch.empty((), dtype=model_cfg.torch_dtype).element_size() + 16384


def check_out_dir(run_dir: Path, model_cfg: ModelConfig, cfg: TrainConfig, resume: bool) -> None:
    """Fail before any training work when ``run_dir`` cannot hold the run: it cannot be created
    or written (a path under a file, a read-only mount, no permission) or lacks the room for
    every checkpoint the run will write."""
    try:
        if not resume:  # a missing run to resume is read_config's error, not created here
            run_dir.mkdir(parents=True, exist_ok=True)
        if not run_dir.is_dir():
            return
        probe = run_dir / f".invperm-write-test{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                f.write(bytes(4096))
                f.flush()
                os.fsync(f.fileno())
        finally:
            probe.unlink(missing_ok=True)
        free = shutil.disk_usage(run_dir).free
    except OSError as err:
        raise ValueError(f"out_dir {run_dir} cannot be written ({err.strerror or err}); "
                         "choose another out_dir") from None
    need = (cfg.steps // cfg.checkpoint_every + 2) * checkpoint_bytes(model_cfg, cfg)
    if free < need:
        raise ValueError(f"out_dir {run_dir} has {free} bytes free; this run's checkpoints need "
                         f"about {need} (steps={cfg.steps}, checkpoint_every={cfg.checkpoint_every})")


# -- who may write a run directory ---------------------------------------------------------------
def _holder(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 65536) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _who(holder: dict) -> str:
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} (since "
            f"{holder.get('started', '?')}: {holder.get('command', '?')})")


class RunLock:
    """Exclusive ownership of ``run_dir`` for the life of a training process (see the module
    docstring); a context manager, or :meth:`acquire` / :meth:`release`. ``run_dir`` must exist.

    :meth:`acquire` raises :class:`RunLocked` naming the holder while another process holds it,
    and warns (:class:`RunWarning`) when it takes over a lock file whose process has died.
    ``flock`` works between processes of one machine and on most network file systems that
    support locks; the file's contents are only what the messages report.
    """

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self.path = self.dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise RunLocked(f"{self.dir} is being written by {_who(holder)}; wait for it to end "
                                "or stop it (two writers would interleave its metrics and "
                                "checkpoints)") from None
            except BaseException:
                os.close(fd)
                raise
            try:  # the holder may have released and removed the file between our open and flock
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        stale = _holder(fd)
        if stale:
            warnings.warn(f"{self.dir}: took over the lock of {_who(stale)}, which ended without "
                          "releasing it (killed?); its last checkpoint is where this run goes on",
                          RunWarning, stacklevel=2)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)[:300]}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(me).encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file, then drop the lock (waiting openers notice the removal)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def check_new_out_dir(run_dir: Path, force: bool = False) -> None:
    """A new run starts in an empty directory: one that holds a run (``config.json``,
    ``metrics.jsonl`` or ``checkpoints``) is refused always, one that holds other files (a stray
    ``final.safetensors`` included) unless ``force``, which warns about what is there."""
    present = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_FILE)
    taken = [n for n in RUN_FILES if n in present]
    if taken:
        raise ValueError(f"out_dir {run_dir} already holds a run ({', '.join(taken)}); resume it or "
                         "choose another out_dir (force does not overwrite a run)")
    if not present:
        return
    listed = ", ".join(present[:8]) + (f" and {len(present) - 8} more" if len(present) > 8 else "")
    if not force:
        raise ValueError(f"out_dir {run_dir} is not empty and holds no run ({listed}); choose an empty "
                         "or new directory, or pass --force (force=True) to write the run among "
                         "these files")
    replaced = "; its final.safetensors will be replaced" if "final.safetensors" in present else ""
    warnings.warn(f"writing a new run into {run_dir}, which holds {listed}{replaced}", RunWarning,
                  stacklevel=2)


def check_restart(run_dir: Path) -> None:
    """Resuming a run without checkpoints starts it again from step 0: refuse when that would
    throw away evaluations past step 0 or final weights (``checkpoints/`` deleted)."""
    metrics = read_metrics(run_dir)
    reached = metrics[-1]["step"] if metrics else 0
    final = (run_dir / "final.safetensors").is_file()
    if reached > 0 or final:
        what = "final weights" if final else f"metrics up to step {reached}"
        raise ValueError(f"cannot resume {run_dir}: it has no checkpoint (checkpoints/ is missing or "
                         f"empty) but holds {what}; resuming would restart it from step 0 over them. "
                         "Train a new run in another directory (its final weights, if any, still load)")


def check_final(run_dir: Path) -> None:
    """On resume: an empty or damaged ``final.safetensors`` must not pass for a finished run; it is
    removed (with a warning), and written again when the run ends."""
    final = run_dir / "final.safetensors"
    try:
        if final.is_file():
            ckpt.load(final)
    except ValueError as err:
        reason = str(err).split(" (")[0].removeprefix(f"checkpoint {final} ")
        warnings.warn(f"{final} {reason}: not a finished run's weights; removed, and written again "
                      "from the last checkpoint when the run ends", RunWarning, stacklevel=4)
        final.unlink()
