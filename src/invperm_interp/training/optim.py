"""The two update rules training uses, Adam and SGD: torch's own functional updates
(``torch.optim.adam.adam``, ``torch.optim.sgd.sgd``, single-tensor) over a small state container.

The weights agree bit for bit with ``torch.optim.Adam`` / ``SGD`` (tests/test_optim.py runs both
side by side), and the state sits where torch keeps it (``param_groups[0]["lr"]``, ``state[param]``
with ``step``, ``exp_avg``, ``exp_avg_sq``), so checkpoints are unchanged. Why not the
``torch.optim`` classes themselves: their ``step`` and ``zero_grad`` import ``torch._dynamo`` on
first use (``benchmarks/train_memory.py``); the functional updates do not.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from torch import Tensor
from torch.optim.adam import adam
from torch.optim.sgd import sgd

ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults


class _Optimizer:
    """What the training loop and the checkpoints read: one parameter group and per-parameter
    state."""

    def __init__(self, params: Iterable[Tensor], lr: float):
        params = list(params)
        if not params:
            raise ValueError("params must hold at least one tensor, got none")
        self.param_groups = [{"params": params, "lr": lr}]
        self.state: dict[Tensor, dict] = {}

    def load_state(self, state: dict[int, dict]) -> None:
        """Install per-parameter state given by the parameter's index (as a checkpoint keeps it):
        moments copied onto their parameter's device and dtype, Adam's count kept as given, as
        ``torch.optim``'s ``load_state_dict`` does."""
        params = self.param_groups[0]["params"]
        self.state = {}
        for index, entry in state.items():
            p = params[index]
            self.state[p] = {key: _placed(key, value, p) for key, value in entry.items()}

    def zero_grad(self) -> None:
        """Drop every gradient (``set_to_none``)."""
        for p in self.param_groups[0]["params"]:
            p.grad = None


def _placed(key: str, value, p: Tensor):
    if not isinstance(value, Tensor):
        return value
    if key == "step":
        return value.detach().clone()
    return value.detach().to(device=p.device, dtype=p.dtype, copy=True)


class Adam(_Optimizer):
    """``torch.optim.Adam(params, lr)`` (betas 0.9, 0.999; eps 1e-8; no weight decay), stepped by
    torch's own functional update (``torch.optim.adam.adam``, single-tensor)."""

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state.get(p)
            if not state:
                # torch keeps the count as a float32 scalar on the CPU
                state = self.state[p] = {"step": torch.tensor(0.0, dtype=torch.float32),
                                         "exp_avg": torch.zeros_like(p),
                                         "exp_avg_sq": torch.zeros_like(p)}
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if params:
            adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=False, capturable=False,
                 differentiable=False, fused=None, grad_scale=None, found_inf=None,
                 has_complex=False, amsgrad=False, beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1],
                 lr=group["lr"], weight_decay=0.0, eps=ADAM_EPS, maximize=False)


class SGD(_Optimizer):
    """``torch.optim.SGD(params, lr)`` (no momentum, no weight decay): ``p -= lr · grad``, by
    torch's functional update (``torch.optim.sgd.sgd``)."""

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        if params:
            sgd(params, [p.grad for p in params], [None] * len(params), weight_decay=0.0,
                momentum=0.0, lr=group["lr"], dampening=0.0, nesterov=False, maximize=False,
                foreach=False, fused=None, has_sparse_grad=False)


def make_optimizer(kind: str, params: Iterable[Tensor], lr: float) -> Adam | SGD:
    """``kind`` ``"adam"`` or ``"sgd"`` over ``params`` at learning rate ``lr``."""
    if kind not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {kind!r}")
    return (Adam if kind == "adam" else SGD)(params, lr)


# -- in a checkpoint (runs.checkpoint: ``optim.{param}.{key}`` tensors, the rest in its metadata) ----
#: Per-parameter state tensors each optimizer must have once it has taken a step.
OPTIMIZER_STATE = {"adam": ("step", "exp_avg", "exp_avg_sq"), "sgd": ()}


def optimizer_tensors(
    optimizer: Adam | SGD, names: dict[int, str]
) -> tuple[dict[str, Tensor], dict]:
    """The per-parameter state as ``optim.{param}.{key}`` tensors plus its non-tensor entries."""
    tensors, scalars = {}, {}
    for p, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, Tensor):
                tensors[f"optim.{names[id(p)]}.{key}"] = value
            elif value is not None:
                scalars.setdefault(names[id(p)], {})[key] = value
    return tensors, scalars


def load_optimizer_tensors(
    optimizer: Adam | SGD, kind: str, names: dict[int, str],
    tensors: dict[str, Tensor], scalars: dict, path: str | Path,
) -> None:
    """Restore what :func:`optimizer_tensors` saved, checking every parameter's state."""
    params = optimizer.param_groups[0]["params"]
    known = {names[id(p)] for p in params}
    state: dict[int, dict] = {}
    seen = set()
    for index, p in enumerate(params):
        name = names[id(p)]
        prefix = f"optim.{name}."
        entry = {k[len(prefix):]: v for k, v in tensors.items()
                 if k.startswith(prefix) and "." not in k[len(prefix):]}
        seen.update(prefix + k for k in entry)
        entry.update(scalars.get(name, {}))
        required = OPTIMIZER_STATE[kind]
        if entry or required:
            lacking = [k for k in required if k not in entry]
            if lacking:
                raise ValueError(f"checkpoint {path}: optimizer state of {name} lacks {lacking}")
            for key, value in entry.items():
                if isinstance(value, Tensor) and value.ndim and value.shape != p.shape:
                    raise ValueError(
                        f"checkpoint {path}: optimizer state {name}.{key} has shape "
                        f"{tuple(value.shape)}, the parameter has {tuple(p.shape)}"
                    )
            state[index] = entry
    stray = sorted(k for k in tensors if k.startswith("optim.") and k not in seen)
    stray += sorted(f"{n} (scalars)" for n in scalars if n not in known)
    if stray:
        raise ValueError(f"checkpoint {path}: optimizer state for unknown parameters {stray}")
    optimizer.load_state(state)
