"""What one training step costs in memory, counted from the code that runs it.

The tensors autograd keeps for the backward pass are counted by running one real step's forward
(``readout_forward`` and the loss, as ``Trainer`` runs them) on the ``meta`` device, where nothing
is allocated, under ``torch.autograd.graph.saved_tensors_hooks``: whatever the forward saves is
counted, so the estimate follows the code when the code changes. The backward pass then holds, at
its peak, the gradient of the largest saved tensor and one temporary of its size beside what is
still saved. ``training_estimate`` adds the weights, gradients, optimizer state, batches and the
allocator slack (``memory.SLACK``), and is what ``train`` and ``train_many`` check before they
allocate anything.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .. import memory
from ..config import ModelConfig
from ..model.disentangled import DisentangledTransformer, readout_forward
from ..task import mse

__all__ = ["saved_for_backward", "training_estimate", "training_step_bytes"]


def saved_for_backward(cfg: ModelConfig, b: int, device: str = "meta") -> list[int]:
    """Bytes of each distinct tensor autograd saves during one step's forward on ``b`` samples
    (parameters excluded: they are counted as weights). On ``"meta"`` nothing is allocated."""
    with torch.device(device):
        model = DisentangledTransformer(replace(cfg, init="zeros"))
        X = torch.zeros(b, cfg.T, cfg.d, dtype=cfg.torch_dtype)
        Y = torch.zeros(b, cfg.d, cfg.d, dtype=cfg.torch_dtype)
    params = {id(p) for p in model.parameters()}
    saved: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t if t._base is None else t._base  # a view holds its base's storage
        if id(base) not in params:
            saved[id(base)] = base
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mse(readout_forward(model, X), Y)
    return [t.numel() * t.element_size() for t in saved.values()]


def training_step_bytes(cfg: ModelConfig, b: int) -> int:
    """Peak bytes of one training step on ``b`` samples beyond the weights, gradients, optimizer
    state and the batch: what autograd saves, plus the backward's gradient and one temporary of
    the largest saved tensor."""
    sizes = saved_for_backward(cfg, b)
    return sum(sizes) + 2 * max(sizes, default=0)


def training_estimate(model_cfg: ModelConfig, optimizer: str, batch_size: int, eval_size: int,
                      what: str = "this training run") -> memory.Estimate:
    """A training run's peak: weights, gradients, optimizer state, the evaluation batch, and the
    larger of a training step (with its batch) and an evaluation chunk (``batch_size`` samples)."""
    e, n = torch.empty((), dtype=model_cfg.torch_dtype).element_size(), model_cfg.n_params
    copies = 4 + 2 if optimizer == "adam" else 2 + 1  # weights, grads, moments; step temporaries
    step = training_step_bytes(model_cfg, batch_size) + memory.batch_bytes(model_cfg, batch_size)
    evaluation = memory.forward_bytes(model_cfg, min(batch_size, eval_size))
    activations = max(step, evaluation)
    parts = {"weights, gradients and optimizer state": copies * n * e,
             "evaluation batch": memory.batch_bytes(model_cfg, eval_size),
             "activations": activations, "allocator slack": int(memory.SLACK * activations)}
    largest = max(parts, key=parts.get)
    if largest == "evaluation batch":
        lower = f"eval_size (now {eval_size})"
    elif largest.startswith("weights"):
        lower = "d, n_layers or n_heads (the widths grow as (d + T)·(1 + H)^L)"
    else:
        chunks = "" if step >= evaluation else "; evaluations run in chunks of it"
        lower = f"batch_size (now {batch_size}{chunks}), d, n_layers or n_heads"
    return memory.Estimate(what, parts, lower=lower)
