"""invperm-interp: hooked disentangled transformers for the inverse-permutation task.

The package is laid out by stage; each subpackage's docstring says what it holds:

- ``task``, ``config``, ``stream``, ``labels``, ``memory``: the value types everything else uses;
- ``model``: the plain and the hooked model, tokens, the activation cache, TransformerLens export;
- ``maths``: template cells, the analytic constructions, the exact causal floors;
- ``runs``: the run directory and its checkpoints;
- ``training``: one run, many runs at once, the optimizers and the loop;
- ``sweep``: grids, the sweep engine and its report;
- ``analysis``: gauge, templates, faithfulness, mechanism, ablations, patching;
- ``viz``: heatmaps, attention views, pages;
- ``cli``: the ``invperm`` command.

The public surface is listed here explicitly; everything else is reached through its subpackage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .config import ModelConfig, TrainConfig
    from .model.disentangled import DisentangledTransformer
    from .model.hooked import HookedDisentangledTransformer
    from .stream import Block, BlockName, Stream, hook_name
    from .task import Batch, Layout, Segment, make_input, sample_batch
    from .training.run import Run
    from .training.single import train

_HOMES = {"ModelConfig": "config", "TrainConfig": "config",
          "DisentangledTransformer": "model.disentangled",
          "HookedDisentangledTransformer": "model.hooked", "Run": "training.run",
          "Block": "stream", "BlockName": "stream", "Stream": "stream", "hook_name": "stream",
          "Batch": "task", "Layout": "task", "Segment": "task", "make_input": "task",
          "sample_batch": "task", "train": "training.single"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["Batch", "Block", "BlockName", "DisentangledTransformer",
           "HookedDisentangledTransformer", "Layout", "ModelConfig", "Run", "Segment", "Stream",
           "TrainConfig", "hook_name", "make_input", "sample_batch", "train"]
