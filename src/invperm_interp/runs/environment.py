"""What a run was trained on: the software and the processor, one record per (re)start.

Float32 training is bit-identical on one machine only: another CPU's summation order moves the
weights at ~1e-7 per step and, through early stopping, stop steps and names (docs/design.md). A
run directory's ``environment.jsonl`` (:meth:`runs.directory.RunDir.append_environment`) says,
for each start and resume, the step it started from and what it ran on, so a run that moves when
trained again can be traced to a machine or to the code."""

from __future__ import annotations

import hashlib
import platform
import sys
from functools import cache
from pathlib import Path

import torch


@cache
def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``),
    or ``"unknown"``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@cache
def code_digest() -> str:
    """The first 12 hex digits of the SHA-256 over this package's Python sources (each file's
    path below the package, a NUL byte, then its bytes; files in sorted order): equal digests, the
    same code. A change of the forward's arithmetic moves runs as another CPU does."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def describe(device: torch.device, step: int) -> dict:
    """One record: ``step`` the training (re)started from, the versions of Python and torch, the
    package's code (:func:`code_digest`), the processor, the machine's architecture, torch's
    thread count and the device (with its name when it is a GPU)."""
    record = {"step": step, "python": platform.python_version(), "torch": torch.__version__,
              "code": code_digest(),
              "cpu": cpu_name(), "machine": platform.machine(), "platform": sys.platform,
              "threads": torch.get_num_threads(), "device": device.type}
    if device.type == "cuda":
        record["gpu"] = torch.cuda.get_device_name(device)
    return record
