"""The two update rules training uses, Adam and SGD, as ``torch.optim`` computes them on the CPU.

Each is torch's single-tensor update (``torch.optim.Adam`` / ``SGD`` with their defaults and
``foreach=False``) operation for operation, so the weights agree bit for bit (tests/test_optim.py
runs both side by side), and keeps its state where torch does (``param_groups[0]["lr"]``,
``state[param]`` with ``step``, ``exp_avg``, ``exp_avg_sq``), so checkpoints are unchanged. Why
not ``torch.optim`` itself: its ``step`` and ``zero_grad`` import ``torch._dynamo`` on first use,
about 70 MB of a training process's 0.4 GB.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

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
    """``torch.optim.Adam(params, lr)`` (betas 0.9, 0.999; eps 1e-8; no weight decay)."""

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2) = group["lr"], ADAM_BETAS
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state.get(p)
            if not state:
                # torch keeps the count as a float32 scalar on the CPU
                state = self.state[p] = {"step": torch.tensor(0.0, dtype=torch.float32),
                                         "exp_avg": torch.zeros_like(p),
                                         "exp_avg_sq": torch.zeros_like(p)}
            grad, exp_avg, exp_avg_sq = p.grad, state["exp_avg"], state["exp_avg_sq"]
            state["step"] += 1
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = state["step"].item()
            step_size = lr / (1 - beta1**step)
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(ADAM_EPS)
            p.addcdiv_(exp_avg, denom, value=-step_size)


class SGD(_Optimizer):
    """``torch.optim.SGD(params, lr)`` (no momentum, no weight decay): ``p -= lr · grad``."""

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        for p in group["params"]:
            if p.grad is not None:
                p.add_(p.grad, alpha=-group["lr"])


def make_optimizer(kind: str, params: Iterable[Tensor], lr: float) -> Adam | SGD:
    """``kind`` ``"adam"`` or ``"sgd"`` over ``params`` at learning rate ``lr``."""
    if kind not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {kind!r}")
    return (Adam if kind == "adam" else SGD)(params, lr)
