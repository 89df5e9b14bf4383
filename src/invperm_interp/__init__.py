"""invperm-interp: hooked disentangled transformers for the inverse-permutation task.

The public surface is listed here explicitly; everything else is internal.
"""

from .config import ModelConfig
from .model import HookedDisentangledTransformer
from .runs import Run
from .stream import Block, BlockName, Stream, hook_name
from .task import Batch, Layout, Segment, make_input, sample_batch

__all__ = [
    "Batch",
    "Block",
    "BlockName",
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
