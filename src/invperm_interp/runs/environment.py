"""What a run was trained on: the software and the processor, one record per (re)start.

Float32 training is bit-identical on one machine only: another CPU's summation order moves the
weights at ~1e-7 per step and, through early stopping, stop steps and names (docs/design.md). A
run directory's ``environment.jsonl`` (:meth:`runs.directory.RunDir.append_environment`) says,
for each start and resume, the step it started from and what it ran on, so a run that moves when
trained again can be traced to a machine or to the code."""

from __future__ import annotations

import platform
import sys
from functools import cache

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


def describe(device: torch.device, step: int) -> dict:
    """One record: ``step`` the training (re)started from, the versions of Python and torch, the
    processor, the machine's architecture, torch's thread count and the device (with its name
    when it is a GPU)."""
    record = {"step": step, "python": platform.python_version(), "torch": torch.__version__,
              "cpu": cpu_name(), "machine": platform.machine(), "platform": sys.platform,
              "threads": torch.get_num_threads(), "device": device.type}
    if device.type == "cuda":
        record["gpu"] = torch.cuda.get_device_name(device)
    return record
