"""What one training step costs in memory, counted from the code that runs it.

The tensors autograd keeps for the backward pass are counted by running one real step's forward
(``model.build.forward`` and the loss, as ``Trainer`` runs them) under
``torch.autograd.graph.saved_tensors_hooks``: on the CPU at two and three samples, once per model
shape, scaled to the batch (every saved tensor is affine in it), or, for weights too large to
allocate for a count, on the ``meta`` device, where nothing is allocated. Whatever the forward
saves is counted, so the estimate follows the code when the code changes. The backward pass then
holds, at its peak, the gradient of the largest saved tensor and one temporary of its size beside
what is still saved. ``training_estimate`` adds the weights, gradients, optimizer state, batches
and the allocator slack (``memory.SLACK``), and is what ``train`` and ``train_many`` check before
they allocate anything.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import torch

from .. import memory
from ..config import ModelConfig
from ..model.build import forward, made_on
from ..task import mse
from .metrics import evaluation_chunk

__all__ = ["saved_for_backward", "training_estimate", "training_step_bytes"]


def saved_for_backward(cfg: ModelConfig, b: int, device: str = "meta") -> list[int]:
    """Bytes of each distinct tensor autograd saves during one step's forward on ``b`` samples
    (parameters excluded: they are counted as weights). On ``"meta"`` nothing is allocated."""
    model = made_on(cfg, device)
    X = torch.zeros(b, cfg.T, cfg.d, dtype=cfg.torch_dtype, device=device)
    Y = torch.zeros(b, cfg.d, cfg.d, dtype=cfg.torch_dtype, device=device)
    params = {id(p) for p in model.parameters()}
    saved: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t if t._base is None else t._base  # a view holds its base's storage
        if id(base) not in params:
            saved[id(base)] = base
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mse(forward(model, X), Y)
    return [t.numel() * t.element_size() for t in saved.values()]


#: Up to this size of weights the step is counted on the CPU at two and three samples and scaled
#: (every saved tensor is affine in the batch from two samples on; one sample saves fewer);
#: above it, on the meta device at the batch itself, which counts more than the CPU saves.
CPU_COUNT_LIMIT = 256 * 2**20

#: From this many bytes on, a tensor's size overflows torch's 64-bit count, even on the meta device.
TORCH_SIZE_LIMIT = 2**63


def training_step_bytes(cfg: ModelConfig, b: int) -> int:
    """Peak bytes of one training step on ``b`` samples beyond the weights, gradients, optimizer
    state and the batch: what autograd saves, plus the backward's gradient and one temporary of
    the largest saved tensor."""
    return _steps_bytes(cfg, (b,))[0]


@lru_cache(maxsize=256)
def _cpu_counts(cfg: ModelConfig) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """What one step's forward saves at two and three samples on the CPU (None where the two
    differ in their tensors), counted once per model shape: the count runs zero weights, so the
    init does not matter, and a grid's seeds share one count (a dry run of 500 seeds took 232 s
    counting it per run)."""
    two, three = saved_for_backward(cfg, 2, "cpu"), saved_for_backward(cfg, 3, "cpu")
    return (tuple(two), tuple(three)) if len(two) == len(three) else None


def _steps_bytes(cfg: ModelConfig, batches: tuple[int, ...]) -> list[int]:
    """:func:`training_step_bytes` at each of ``batches``, the step counted once for them all
    where it scales from two and three samples."""
    e = torch.empty((), dtype=cfg.torch_dtype).element_size()
    small = cfg.n_params * e <= CPU_COUNT_LIMIT
    counted = _cpu_counts(replace(cfg, init="normal", init_scale=None)) if small else None
    result = []
    for b in batches:
        # no tensor of the step is larger than the weights times the batch or a forward's
        # activations (of either architecture: a standard d_model of 2^62 overflowed the count)
        if max(cfg.n_params * e * max(b, 1), memory.forward_bytes(cfg, b)) >= TORCH_SIZE_LIMIT:
            # no machine holds such tensors, and torch cannot describe them to count them: a
            # forward's activations (arithmetic) stand in for the step
            result.append(memory.forward_bytes(cfg, b))
            continue
        if counted is not None:
            sizes = [x + (b - 2) * (y - x) for x, y in zip(*counted)]
        else:  # the meta device allocates nothing (but some of its ops import torch._dynamo)
            sizes = saved_for_backward(cfg, b)
        result.append(sum(sizes) + 2 * max(sizes, default=0))
    return result


def training_estimate(model_cfg: ModelConfig, optimizer: str, batch_size: int, eval_size: int,
                      what: str = "this training run") -> memory.Estimate:
    """A training run's peak: weights, gradients, optimizer state, the evaluation batch, and the
    larger of a training step (with its batch) and an evaluation chunk (``metrics.evaluation_chunk``)."""
    e, n = torch.empty((), dtype=model_cfg.torch_dtype).element_size(), model_cfg.n_params
    copies = 4 + 2 if optimizer == "adam" else 2 + 1  # weights, grads, moments; step temporaries
    # an evaluation runs the step's forward without gradients: it holds at most what that forward
    # saves for backward, on a chunk of samples
    chunk = evaluation_chunk(batch_size, eval_size)
    step, evaluation = _steps_bytes(model_cfg, (batch_size, chunk))
    step += memory.batch_bytes(model_cfg, batch_size)
    activations = max(step, evaluation)
    parts = {"weights, gradients and optimizer state": copies * n * e,
             "evaluation batch": memory.batch_bytes(model_cfg, eval_size),
             "activations": activations, "allocator slack": int(memory.SLACK * activations)}
    largest = max(parts, key=parts.get)
    if largest == "evaluation batch":
        lower = f"eval_size (now {eval_size})"
    elif largest.startswith("weights"):
        lower = model_cfg.architecture.weights_hint
    elif step >= evaluation:
        lower = f"batch_size (now {batch_size}), d, n_layers or n_heads"
    else:
        lower = (f"eval_size (now {eval_size}; evaluations run in chunks of {chunk} samples), "
                 f"d, n_layers or n_heads")
    return memory.Estimate(what, parts, lower=lower)
