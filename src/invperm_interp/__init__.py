"""invperm-interp: hooked disentangled transformers for the inverse-permutation task.

The public surface is listed here explicitly; everything else is internal.
"""

from .config import ModelConfig
from .model import HookedDisentangledTransformer
from .stream import Block, Stream
from .task import Batch, Layout, Segment, make_input, sample_batch

__all__ = [
    "Batch",
    "Block",
    "HookedDisentangledTransformer",
    "Layout",
    "ModelConfig",
    "Segment",
    "Stream",
    "make_input",
    "sample_batch",
]
