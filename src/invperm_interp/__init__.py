"""invperm-interp: hooked disentangled transformers for the inverse-permutation task.

The public surface is listed here explicitly; everything else is internal.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import ModelConfig
    from .disentangled import DisentangledTransformer
    from .model import HookedDisentangledTransformer
    from .runs import Run
    from .stream import Block, BlockName, Stream, hook_name
    from .task import Batch, Layout, Segment, make_input, sample_batch

# Loaded on first use (PEP 562), so that `invperm --help` does not wait for torch and TransformerLens.
_HOMES = {"ModelConfig": "config", "DisentangledTransformer": "disentangled",
          "HookedDisentangledTransformer": "model", "Run": "runs",
          "Block": "stream", "BlockName": "stream", "Stream": "stream", "hook_name": "stream",
          "Batch": "task", "Layout": "task", "Segment": "task", "make_input": "task",
          "sample_batch": "task"}


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Batch",
    "Block",
    "BlockName",
    "DisentangledTransformer",
    "HookedDisentangledTransformer",
    "Layout",
    "ModelConfig",
    "Run",
    "Segment",
    "Stream",
    "hook_name",
    "make_input",
    "sample_batch",
]
