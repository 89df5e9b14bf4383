"""How a training run uses the CPU: its torch thread count and glibc malloc's treatment of freed
memory."""

from __future__ import annotations

import ctypes
import sys

from ..config import TrainConfig
from .run import resolve_device

KEEP_FREED_MEMORY = True  # CPU runs on Linux: tune glibc malloc once, see keep_freed_memory
_malloc_tuned = False


def keep_freed_memory() -> None:
    """Ask glibc malloc to keep freed blocks (mmap threshold 32 MiB, trim threshold 256 MiB).

    Each CPU step frees and re-allocates its activations; by default glibc hands them back to the OS
    and the next step page-faults them in again (``benchmarks/train_speed.py`` measures the cost).
    Process-wide and permanent, so done once, and only on Linux with glibc.
    """
    global _malloc_tuned
    if _malloc_tuned or not KEEP_FREED_MEMORY or not sys.platform.startswith("linux"):
        return
    _malloc_tuned = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def threads_for(cfg: TrainConfig) -> int | None:
    """The torch thread count a run uses: ``cfg.threads``, else 1 on the CPU, else None (leave
    torch's). One thread per process: these models are too small for intra-op parallelism to pay,
    and on a shared machine a second thread makes steps wait for a busy core (measured in
    benchmarks/threads.py, with a CPU hog beside the run). Run several models side by side for
    parallelism instead (``train_many``, ``invperm sweep``)."""
    if cfg.threads is not None:
        return cfg.threads
    return 1 if resolve_device(cfg.device).type == "cpu" else None
