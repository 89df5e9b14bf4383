"""Model configuration: a frozen dataclass that round-trips through JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from .task import Layout

ATTENTION_DIRS = ("causal", "bidirectional")  # TransformerLens's names for masked / unmasked
DTYPES = {"float32": torch.float32, "float64": torch.float64}
INITS = ("normal", "zeros")


@dataclass(frozen=True)
class ModelConfig:
    """Everything that fixes a ``HookedDisentangledTransformer``'s shapes and maths.

    Widths grow as ``D_0 = d + T`` and ``D_{l+1} = D_l (1 + H_l)`` (DESIGN.md section 1).
    """

    layout: Layout
    n_layers: int = 2
    n_heads: int | tuple[int, ...] = 1  # one int for every layer, or one per layer
    attention_dir: str = "causal"  # "causal": the note's decoder; "bidirectional": Theorem 2 (CMF)
    readout: str = "P"  # name of the segment whose rows are read out (must have d rows)
    dtype: str = "float32"  # "float64" for exact checks of the constructions
    init: str = "normal"  # "normal": N(0, init_scale²); "zeros": the note's code
    init_scale: float = 0.01

    def __post_init__(self) -> None:
        if not isinstance(self.layout, Layout):
            raise ValueError(f"layout must be a Layout, got {type(self.layout).__name__}")
        if not isinstance(self.n_layers, int) or isinstance(self.n_layers, bool) or self.n_layers < 1:
            raise ValueError(f"n_layers must be an integer >= 1, got {self.n_layers!r}")
        heads = self.n_heads
        if isinstance(heads, list):
            heads = tuple(heads)
            object.__setattr__(self, "n_heads", heads)
        if isinstance(heads, tuple):
            if len(heads) != self.n_layers:
                raise ValueError(
                    f"n_heads must have one entry per layer ({self.n_layers}), got {list(heads)}"
                )
        else:
            heads = (heads,)
        if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in heads):
            raise ValueError(f"n_heads must be integers >= 1, got {self.n_heads!r}")
        if self.attention_dir not in ATTENTION_DIRS:
            raise ValueError(
                f"attention_dir must be one of {ATTENTION_DIRS}, got {self.attention_dir!r}"
            )
        seg = self.layout.segment(self.readout) if self.readout in self.layout.names else None
        if seg is None:
            raise ValueError(
                f"readout must name a segment of the layout {list(self.layout.names)}, "
                f"got {self.readout!r}"
            )
        if seg.n_rows != self.layout.d:
            raise ValueError(
                f"readout segment {self.readout!r} must have d={self.layout.d} rows (one per row "
                f"of Y), got {seg.n_rows}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if not (self.init_scale >= 0 and self.init_scale < float("inf")):
            raise ValueError(f"init_scale must be finite and >= 0, got {self.init_scale!r}")

    # -- derived shapes -----------------------------------------------------------------------
    @property
    def d(self) -> int:
        return self.layout.d

    @property
    def T(self) -> int:
        return self.layout.T

    @property
    def heads(self) -> tuple[int, ...]:
        """Heads per layer, always a tuple of length ``n_layers``."""
        if isinstance(self.n_heads, tuple):
            return self.n_heads
        return (self.n_heads,) * self.n_layers

    @property
    def widths(self) -> tuple[int, ...]:
        """Residual-stream widths ``(D_0, …, D_L)``."""
        widths = [self.d + self.T]
        for h in self.heads:
            widths.append(widths[-1] * (1 + h))
        return tuple(widths)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "layout": self.layout.to_dict(),
            "n_layers": self.n_layers,
            "n_heads": list(self.n_heads) if isinstance(self.n_heads, tuple) else self.n_heads,
            "attention_dir": self.attention_dir,
            "readout": self.readout,
            "dtype": self.dtype,
            "init": self.init,
            "init_scale": self.init_scale,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        if not isinstance(data, dict) or "layout" not in data:
            raise ValueError("model config must be a JSON object with a 'layout' entry")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"model config has unknown keys {unknown}")
        known["layout"] = Layout.from_dict(data["layout"])
        return cls(**known)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ModelConfig:
        return cls.from_dict(json.loads(text))
