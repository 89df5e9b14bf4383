"""A run on disk: the run directory (``RunDir``: its file names, configuration, metrics, weights
and the rules for a new run or a resume), one evaluation (``Evaluation``: a line of its metrics),
its one-writer lock, and the checkpoint file format (safetensors, with the optimizer and generator
state that makes a resume bit-identical)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .directory import RunDir, RunWarning, RunWeights
    from .evaluation import Evaluation
    from .lock import RunLock, RunLocked

_HOMES = {"Evaluation": "evaluation", "RunDir": "directory", "RunWarning": "directory",
          "RunWeights": "directory", "RunLock": "lock", "RunLocked": "lock"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["Evaluation", "RunDir", "RunLock", "RunLocked", "RunWarning", "RunWeights"]
