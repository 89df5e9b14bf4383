"""optim.Adam and optim.SGD against torch.optim, run side by side on the same gradients."""

import pytest
import torch

from invperm_interp.training.optim import (
    SGD,
    Adam,
    load_optimizer_tensors,
    make_optimizer,
    optimizer_tensors,
)

REFERENCE = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def _twins(dtype, seed=0):
    """Two identical parameter lists of several shapes (a scalar and an empty tensor included)."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, 5, 5), (7, 3), (), (0, 4)]
    base = [torch.randn(s, generator=g, dtype=dtype) for s in shapes]
    return ([torch.nn.Parameter(b.clone()) for b in base],
            [torch.nn.Parameter(b.clone()) for b in base])


def _set_grads(params, step, seed=1):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    for i, p in enumerate(params):
        if i == 1 and step % 3 == 2:  # a parameter without a gradient this step is skipped
            p.grad = None
            continue
        p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype) * 10.0 ** (step % 4 - 2)


@pytest.mark.parametrize("kind", ["adam", "sgd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_updates_equal_torch_optim_bit_for_bit(kind, dtype):
    ours, theirs = _twins(dtype)
    opt = make_optimizer(kind, ours, lr=1e-2)
    ref = REFERENCE[kind](theirs, lr=1e-2, foreach=False)
    for step in range(60):
        lr = 1e-2 * (1 + step % 5) / 3  # a schedule: the lr changes between steps
        opt.param_groups[0]["lr"] = lr
        for group in ref.param_groups:
            group["lr"] = lr
        _set_grads(ours, step)
        _set_grads(theirs, step)
        opt.step()
        ref.step()
        for a, b in zip(ours, theirs):
            assert torch.equal(a, b), f"step {step}"
    if kind == "adam":
        for a, b in zip(ours, theirs):
            for key in ("step", "exp_avg", "exp_avg_sq"):
                got, want = opt.state[a][key], ref.state[b][key]
                assert got.dtype == want.dtype and got.device == want.device
                assert torch.equal(got, want), key


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adam_restored_from_a_checkpoint_continues_as_the_uninterrupted_torch_run(dtype):
    ours, theirs = _twins(dtype)
    names = {id(p): f"p{i}" for i, p in enumerate(ours)}
    first = Adam(ours, lr=3e-3)
    ref = torch.optim.Adam(theirs, lr=3e-3, foreach=False)
    for step in range(10):
        _set_grads(ours, step)
        _set_grads(theirs, step)
        first.step()
        ref.step()
    tensors, scalars = optimizer_tensors(first, names)
    fresh = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    second = Adam(fresh, lr=3e-3)
    load_optimizer_tensors(second, "adam", {id(p): f"p{i}" for i, p in enumerate(fresh)},
                           tensors, scalars, "ckpt")
    for key, value in tensors.items():  # the restored state is a copy, not the checkpoint's tensors
        assert all(value is not v for s in second.state.values() for v in s.values()), key
    for step in range(10, 30):
        _set_grads(fresh, step)
        _set_grads(theirs, step)
        second.step()
        ref.step()
    for a, b in zip(fresh, theirs):
        assert torch.equal(a, b)


def test_zero_grad_drops_every_gradient():
    params, _ = _twins(torch.float32)
    opt = SGD(params, lr=0.1)
    _set_grads(params, 0)
    opt.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("call, message", [
    (lambda: make_optimizer("rmsprop", [torch.zeros(2)], 0.1), "optimizer must be 'adam' or 'sgd'"),
    (lambda: Adam([], lr=0.1), "params must hold at least one tensor"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
