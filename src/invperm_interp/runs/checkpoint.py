"""Checkpoint files: safetensors tensors plus JSON metadata, written atomically, checked on load.

A checkpoint is one ``.safetensors`` file. Its tensors are ``model.{param}`` (the weights),
``optim.{param}.{key}`` (the optimizer's per-parameter state, ``training.optim`` names and checks
them) and ``rng.{stream}`` (generator
states as uint8). Its metadata holds ``invperm`` (JSON: format, step, config hash, device, the
optimizer's non-tensor state, loop counters) and ``sha256``, a digest of every tensor's name, dtype,
shape and bytes, so a file whose bytes changed is refused instead of half-loaded. Nothing is
unpickled: no ``torch.load`` anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor, nn

from .evaluation import Evaluation

FORMAT = "invperm-checkpoint/1"


def digest(tensors: dict[str, Tensor]) -> str:
    """SHA-256 over the tensors' names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it over
    ``path``: a crash leaves either the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def save(path: str | Path, tensors: dict[str, Tensor], meta: dict) -> None:
    """Write a checkpoint atomically. ``tensors`` are moved to the CPU; ``meta`` must be JSON."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    header = {"invperm": json.dumps({"format": FORMAT, **meta}), "sha256": digest(tensors)}
    atomic_write(path, st_save(tensors, metadata=header))


def load(path: str | Path) -> tuple[dict[str, Tensor], dict]:
    """Read and verify a checkpoint: ``(tensors on the CPU, metadata)``.

    Raises ``ValueError`` naming the file when it is truncated, corrupted or not a checkpoint.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"checkpoint {path} does not exist") from None
    try:
        tensors = st_load(data)
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + n]).get("__metadata__") or {}
        meta = json.loads(header["invperm"])
        expected = header["sha256"]
    except Exception as err:  # safetensors raises its own error type; JSON/KeyError for the header
        raise ValueError(
            f"checkpoint {path} is truncated or corrupted (cannot be read as an invperm "
            f"safetensors checkpoint: {err}); delete it to resume from an earlier one"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise ValueError(f"checkpoint {path} has format {found!r}, expected {FORMAT!r}")
    if digest(tensors) != expected:
        raise ValueError(
            f"checkpoint {path} is corrupted: its tensors do not match the digest written with "
            "them; delete it to resume from an earlier one"
        )
    check_meta(meta, path, {"step": "a step >= 0", "config_hash": "a string"})
    return tensors, meta


def weights_digest(path: str | Path) -> str | None:
    """The sha256 digest of a checkpoint's tensors, read from its header alone (no tensor is
    loaded); None when ``path`` is not a readable invperm checkpoint. It names the weights: an
    analysis records it, and is stale once the run's weights are another file."""
    try:
        with open(path, "rb") as file:
            n = int.from_bytes(file.read(8), "little")
            header = json.loads(file.read(n)).get("__metadata__") or {}
        return header["sha256"] if isinstance(header.get("sha256"), str) else None
    except (OSError, ValueError, AttributeError):
        return None


_META_KINDS = {
    "a step >= 0": lambda v: type(v) is int and v >= 0,
    "a string": lambda v: isinstance(v, str),
    "a number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "a count >= 0": lambda v: type(v) is int and v >= 0,
    "an object of objects": lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()),
}
TRAINING_META = {"device": "a string", "optimizer": "an object of objects", "elapsed": "a number",
                 "loss_sum": "a number", "loss_count": "a count >= 0"}


def check_meta(meta: dict, path: str | Path, expected: dict[str, str]) -> None:
    """``ValueError`` naming the first entry of ``meta`` that is not the kind ``expected`` says
    (a file whose digest is right but whose metadata was written by something else)."""
    for key, kind in expected.items():
        if not _META_KINDS[kind](meta.get(key)):
            raise ValueError(f"checkpoint {path} has malformed metadata: {key!r} must be {kind}, got "
                             f"{meta.get(key)!r}; delete it to resume from an earlier one")


@dataclass(frozen=True)
class CheckpointMeta:
    """A checkpoint's ``invperm`` metadata, typed (``format`` aside: :func:`save` writes it,
    :func:`load` checks it): ``from_dict(meta).to_dict() == meta``, key order too, for what the
    trainer writes. A training checkpoint holds ``device`` to ``loss_count`` (``TRAINING_META``);
    the final weights ``metrics`` (the last evaluation, ``Evaluation.to_dict``) and ``stopped``
    (why the run stopped early; None: it ran all its steps)."""

    step: int
    config_hash: str
    device: str | None = None  # where the data stream lives
    optimizer: dict | None = None  # the optimizer's non-tensor state, per parameter
    elapsed: float | None = None  # training seconds so far
    loss_sum: float | None = None  # the loop's running loss since the last evaluation …
    loss_count: int | None = None  # … over this many steps
    metrics: dict | None = None
    stopped: str | None = None

    @property
    def evaluation(self) -> Evaluation | None:
        """The last evaluation final weights keep, if they hold one this version reads."""
        try:
            return Evaluation.from_dict(self.metrics) if self.metrics else None
        except ValueError:
            return None

    def to_dict(self) -> dict:
        """The entries that are set, in field order; ``stopped`` always beside ``metrics``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
                or f.name == "stopped" and self.metrics is not None}

    @classmethod
    def from_dict(cls, meta: dict) -> CheckpointMeta:
        """``meta`` as :func:`load` returns it (keys this version does not know are let go);
        ``ValueError`` without ``step`` or ``config_hash``."""
        if not (isinstance(meta, dict) and {"step", "config_hash"} <= set(meta)):
            raise ValueError(f"checkpoint metadata must hold 'step' and 'config_hash', got {meta!r}")
        return cls(**{f.name: meta[f.name] for f in fields(cls) if f.name in meta})


# -- model state ------------------------------------------------------------------------------------
def model_tensors(model: nn.Module) -> dict[str, Tensor]:
    return {f"model.{k}": v for k, v in model.state_dict().items()}


def load_model_tensors(model: nn.Module, tensors: dict[str, Tensor], path: str | Path) -> None:
    """Copy ``model.*`` tensors into ``model`` after checking names, shapes and dtypes."""
    own = model.state_dict()
    given = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    missing, unexpected = sorted(set(own) - set(given)), sorted(set(given) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not fit the model: missing weights {missing}, "
            f"unexpected weights {unexpected}"
        )
    for name, t in given.items():
        if t.shape != own[name].shape or t.dtype != own[name].dtype:
            raise ValueError(
                f"checkpoint {path}: weight {name} has shape {tuple(t.shape)} and dtype {t.dtype}, "
                f"the model expects {tuple(own[name].shape)} and {own[name].dtype}"
            )
    model.load_state_dict(given)
