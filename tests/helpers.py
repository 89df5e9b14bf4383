"""Helpers shared by the tests: small configurations, quiet training, batches, weight checks."""

from __future__ import annotations

import torch
from torch import nn

from invperm_interp import Layout, ModelConfig, sample_batch
from invperm_interp.config import TrainConfig
from invperm_interp.train import train

SMALL_TRAIN = dict(steps=6, batch_size=32, eval_every=3, eval_size=64, device="cpu")


def small(d: int = 4, attention_dir: str = "bidirectional", layout: Layout | None = None,
          readout: str = "P", **train_kw) -> tuple[ModelConfig, TrainConfig]:
    """A 2-layer model on ``layout`` (default ``[P; Y_P]`` of size ``d``) and a few-step CPU run;
    ``train_kw`` override :data:`SMALL_TRAIN`."""
    model_cfg = ModelConfig(layout or Layout.plain(d), attention_dir=attention_dir, readout=readout)
    return model_cfg, TrainConfig(**{**SMALL_TRAIN, **train_kw})


def run(model_cfg: ModelConfig, train_cfg: TrainConfig, **kw):
    """``train`` without a progress bar."""
    return train(model_cfg, train_cfg, progress=False, **kw)


def strip(metrics: list[dict]) -> list[dict]:
    """Metrics without the wall-clock time, the only entry that may differ between equal runs."""
    return [{k: v for k, v in m.items() if k != "wall_time"} for m in metrics]


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the model's state (to compare with its state later)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a: nn.Module | dict, b: nn.Module | dict) -> None:
    """Bit-identical weights; ``a``/``b`` are models or state dicts."""
    sa = a.state_dict() if isinstance(a, nn.Module) else a
    sb = b.state_dict() if isinstance(b, nn.Module) else b
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def batch_for(model, n: int = 64, seed: int = 0, dtype: torch.dtype | None = None):
    """``n`` samples of the model's layout from generator seed ``seed``, in ``dtype`` (default: the
    model's)."""
    return sample_batch(model.cfg.layout, n, torch.Generator().manual_seed(seed),
                        dtype=dtype or model.cfg.torch_dtype)
