"""How a training run uses the CPU: its torch thread count (glibc malloc's treatment of freed
memory, shared with the analysis, is ``memory.keep_freed_memory``)."""

from __future__ import annotations

from ..config import TrainConfig
from .run import resolve_device


def threads_for(cfg: TrainConfig) -> int | None:
    """The torch thread count a run uses: ``cfg.threads``, else 1 on the CPU, else None (leave
    torch's). One thread per process: these models are too small for intra-op parallelism to pay,
    and on a shared machine a second thread makes steps wait for a busy core (measured in
    benchmarks/threads.py, with a CPU hog beside the run). Run several models side by side for
    parallelism instead (``train_many``, ``invperm sweep``)."""
    if cfg.threads is not None:
        return cfg.threads
    return 1 if resolve_device(cfg.device).type == "cpu" else None
