"""Model and training configuration: frozen dataclasses that round-trip through JSON.

The learning-rate schedule a ``TrainConfig`` asks for is computed in ``training.schedule``; a run's
configuration file (its text, hash and differences) is ``runs.config_file``'s."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from typing import Literal, get_args

import torch

from .architecture import ArchitectureFields
from .errors import ConfigError, check_choice, check_seed, check_threads
from .task import Layout

AttentionDir = Literal["causal", "bidirectional"]  # TransformerLens's names for masked / unmasked
ATTENTION_DIRS = get_args(AttentionDir)
DTYPES = {"float32": torch.float32, "float64": torch.float64}
INITS = ("normal", "zeros")


class JSONConfig:
    """JSON round-trip for the config dataclasses, which define ``to_dict`` / ``from_dict``."""

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class ModelConfig(ArchitectureFields, JSONConfig):
    """Everything that fixes a model's shapes and maths: the disentangled transformer's (widths
    ``D_0 = d + T``, ``D_{l+1} = D_l (1 + H_l)``: docs/design.md section 1), or with
    ``arch="standard"`` a standard one's (``architecture``, docs/standard.md)."""

    layout: Layout
    n_layers: int = 2
    n_heads: int | tuple[int, ...] = 1  # one int for every layer, or one per layer
    attention_dir: AttentionDir = "causal"  # "causal": the note's decoder; "bidirectional": Theorem 2 (CMF)
    readout: str = "P"  # name of the segment whose rows are read out (must have d rows)
    dtype: str = "float32"  # "float64" for exact checks of the constructions
    init: str = "normal"  # "normal": N(0, init_scale²); "zeros": the note's code
    init_scale: float | None = None  # None: the architecture's (0.01 for the disentangled model)
    # Where the model's weights live, as TransformerLens's cfg.device: the model is built there and
    # keeps it current on .to(); a runtime fact, so not in the JSON and not compared.
    device: str = field(default="cpu", compare=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "device", str(torch.device(self.device)))
        except (RuntimeError, TypeError):
            raise ConfigError("device", f"device must name a torch device ('cpu', 'cuda:0', ...), "
                                        f"got {self.device!r}") from None
        if not isinstance(self.layout, Layout):
            raise ConfigError("layout", f"layout must be a Layout, got {type(self.layout).__name__}")
        if not isinstance(self.n_layers, int) or isinstance(self.n_layers, bool) or self.n_layers < 1:
            raise ConfigError("n_layers", f"n_layers must be an integer >= 1, got {self.n_layers!r}")
        heads = self.n_heads
        if isinstance(heads, list):
            heads = tuple(heads)
            object.__setattr__(self, "n_heads", heads)
        if isinstance(heads, tuple):
            if len(heads) != self.n_layers:
                raise ConfigError(
                    "n_heads", f"n_heads must have one entry per layer ({self.n_layers}), got {list(heads)}"
                )
        else:
            heads = (heads,)
        if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in heads):
            raise ConfigError("n_heads", f"n_heads must be integers >= 1, got {self.n_heads!r}")
        check_choice("attention_dir", self.attention_dir, ATTENTION_DIRS)
        seg = self.layout.segment(self.readout) if self.readout in self.layout.names else None
        if seg is None:
            raise ConfigError(
                "readout", f"readout must name a segment of the layout {list(self.layout.names)}, "
                f"got {self.readout!r}"
            )
        if seg.n_rows != self.layout.d:
            raise ConfigError(
                "readout", f"readout segment {self.readout!r} must have d={self.layout.d} rows (one per row "
                f"of Y), got {seg.n_rows}"
            )
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("init", self.init, INITS)
        self._resolve_architecture(heads)
        scale = self.init_scale
        number = isinstance(scale, (int, float)) and not isinstance(scale, bool)
        if not (number and 0 <= scale < float("inf")):
            raise ConfigError("init_scale", f"init_scale must be finite and >= 0, got {self.init_scale!r}")

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
    def n_params(self) -> int:
        """Entries of the parameters: for the disentangled model every ``A`` ``(H_l, D_l, D_l)``
        and ``W_U`` ``(D_L, d)`` (``Architecture.n_params``)."""
        return self.architecture.n_params(self)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def causal(self) -> bool:
        """True when attention is causally masked (``attention_dir == "causal"``)."""
        return self.attention_dir == "causal"

    @property
    def readout_rows(self) -> slice:
        """The input rows read out (the ``readout`` segment's ``d`` rows)."""
        return self.layout.rows(self.readout)

    # -- what TransformerLens's tools read from model.cfg ---------------------------------------
    @property
    def n_ctx(self) -> int:
        """The sequence length ``T`` (TransformerLens's context length)."""
        return self.layout.T

    @property
    def n_key_value_heads(self) -> None:
        """None: every head has its own keys and values (``hook_k`` / ``hook_v`` have ``H`` heads)."""
        return None

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
            **self.architecture.config_entries(self),
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



Recipe = Literal["adam", "paper", "fast"]
RECIPES = get_args(Recipe)
# Steps to MSE < 1e-3 hardly depend on the batch size (bidirectional d = 10, Adam lr 1e-2, 8 seeds:
# median 900 steps at batch 64, 1,050 at 128, 925 at 256, 1,200 at 512 and 1,024), so the smallest
# batch solves soonest in seconds (median 12.6 s at 64, 18.0 s at 128, 28.8 s at 256 on a 2-core
# machine at load 15; benchmarks/train_many.py --part solve).
FAST_BATCH, FAST_LR = 64, 1e-2
OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("constant", "cosine")
NOTE_STEPS = 2**16  # the note trains 2^16 steps, and its code decays the lr over the run's length
# What each recipe fills in for the fields left None. "paper" is the note's code: zero init, plain
# SGD at lr 1, each gradient entry clipped to ±1, cosine decay of the lr to 0 over NOTE_STEPS = 2^16
# steps (whatever this run's length, so a shorter paper run is a prefix of the note's run).
# "fast" is Adam at the batch size that reaches MSE < 1e-3 soonest in wall-clock time on one CPU
# thread (FAST_BATCH above).
RECIPE_DEFAULTS = {
    "adam": {"optimizer": "adam", "lr": 1e-2, "schedule": "constant", "batch_size": 1024},
    "paper": {"optimizer": "sgd", "lr": 1.0, "schedule": "cosine", "init": "zeros",
              "schedule_steps": NOTE_STEPS, "batch_size": 1024},
    "fast": {"optimizer": "adam", "lr": FAST_LR, "schedule": "constant", "batch_size": FAST_BATCH},
}
PAPER_FIXED = ("optimizer", "lr", "schedule", "init")  # what recipe="paper" refuses to change



def _check_int(name: str, value, minimum: int) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        raise ConfigError(name, f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class TrainConfig(JSONConfig):
    """How to train: the recipe, the data stream, evaluation and checkpoints.

    Fields left ``None`` take the recipe's value (``RECIPE_DEFAULTS``); :meth:`resolved` fills them
    in. ``recipe="paper"`` is the note's recipe exactly and refuses fields that would change it.
    """

    steps: int = 3000
    batch_size: int | None = None  # None: the recipe's (1024; "fast": FAST_BATCH)
    recipe: Recipe = "adam"  # "adam": Adam lr 1e-2 from N(0, 0.01²), solves d=10 in ~1k steps;
    # "fast": the same at the batch size that solves soonest on a CPU; "paper": the note's
    lr: float | None = None  # None: the recipe's (adam 1e-2, paper 1.0)
    optimizer: str | None = None  # None: the recipe's ("adam"; "sgd" for paper)
    schedule: str | None = None  # None: the recipe's ("constant"; "cosine" for paper)
    schedule_steps: int | None = None  # cosine horizon; None: 2**16 for paper (the note's), else steps
    init: str | None = None  # None: the model config's init ("zeros" for paper, which requires it)
    seed: int = 0  # seeds the init, the training stream and the eval batch (separate streams)
    device: str = "auto"  # "auto": CUDA when available, else CPU
    dtype: str | None = None  # None: the model config's dtype
    eval_every: int = 100
    eval_size: int = 4096
    checkpoint_every: int = 1000
    # Dense checkpoints (to time how a circuit forms): also every checkpoint_dense_every steps while no
    # evaluation so far had MSE < checkpoint_dense_until (None: off); all kept, so at most
    # max_checkpoints files, about S/checkpoint_dense_every + steps/checkpoint_every if solved at S.
    checkpoint_dense_every: int | None = None
    checkpoint_dense_until: float = 1e-3
    out_dir: str | None = None  # None: nothing written to disk (no checkpoints, no resume)
    threads: int | None = None  # None: 1 on the CPU (measured: see threads_for), torch's on a GPU
    # Early stopping (both off by default; a stopped run is finished, its last record says why):
    stop_at_mse: float | None = None  # stop at the first evaluation with MSE < this
    stop_at_floor: float | None = None  # causal models: stop once the evaluation MSE is within
    # this relative tolerance of the exact causal floor, MSE <= (1 + tol)·floor, for
    # ``floor_patience`` consecutive evaluations (a plateau at the best a causal model can do)
    floor_patience: int = 3

    def __post_init__(self) -> None:
        _check_int("steps", self.steps, 1)
        if self.batch_size is not None:
            _check_int("batch_size", self.batch_size, 1)
        check_choice("recipe", self.recipe, RECIPES)
        number = isinstance(self.lr, (int, float)) and not isinstance(self.lr, bool)
        if self.lr is not None and not (number and 0 < self.lr < float("inf")):
            raise ConfigError("lr", f"lr must be a finite number > 0 or None, got {self.lr!r}")
        check_choice("optimizer", self.optimizer, OPTIMIZERS, optional=True)
        check_choice("schedule", self.schedule, SCHEDULES, optional=True)
        if self.schedule_steps is not None:
            _check_int("schedule_steps", self.schedule_steps, 1)
        check_choice("init", self.init, INITS, optional=True)
        check_seed("seed", self.seed)
        device = self.device
        if not isinstance(device, str) or not (
            device in ("auto", "cpu", "cuda")
            or (device.startswith("cuda:") and device[5:].isdigit())
        ):
            raise ConfigError("device", f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', "
                                        f"got {device!r}")
        check_choice("dtype", self.dtype, DTYPES, optional=True)
        _check_int("eval_every", self.eval_every, 1)
        _check_int("eval_size", self.eval_size, 1)
        _check_int("checkpoint_every", self.checkpoint_every, 1)
        if self.checkpoint_dense_every is not None:
            _check_int("checkpoint_dense_every", self.checkpoint_dense_every, 1)
        until = self.checkpoint_dense_until
        if not (isinstance(until, (int, float)) and not isinstance(until, bool) and 0 < until < math.inf):
            raise ConfigError("checkpoint_dense_until",
                              f"checkpoint_dense_until must be a finite number > 0, got {until!r}")
        if self.out_dir is not None and not (isinstance(self.out_dir, str) and self.out_dir.strip()):
            # "" would be the current directory: never a run directory by accident
            raise ConfigError("out_dir", f"out_dir must be a non-empty path string or None, "
                                         f"got {self.out_dir!r}")
        if self.threads is not None:
            check_threads("threads", self.threads)
        for name in ("stop_at_mse", "stop_at_floor"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is not None and not (number and 0 < value < float("inf")):
                raise ConfigError(name, f"{name} must be a finite number > 0 or None, got {value!r}")
        _check_int("floor_patience", self.floor_patience, 1)
        if self.recipe == "paper":
            for name in PAPER_FIXED:
                value, given = RECIPE_DEFAULTS["paper"][name], getattr(self, name)
                if given is not None and given != value:
                    raise ConfigError(
                        name, f"recipe='paper' is the note's recipe exactly and fixes {name}={value!r}, "
                        f"got {name}={given!r}; use recipe='adam' to choose it freely"
                    )

    def resolved(self) -> TrainConfig:
        """A copy with the recipe's values filled in for ``None`` fields and a cosine schedule's
        horizon fixed (the recipe's, else ``steps``; a constant lr has none, so a finished run can
        be extended)."""
        filled = {k: v for k, v in RECIPE_DEFAULTS[self.recipe].items() if getattr(self, k) is None}
        schedule = filled.get("schedule", self.schedule)
        if schedule == "cosine" and self.schedule_steps is None:
            filled.setdefault("schedule_steps", self.steps)
        elif schedule != "cosine":
            filled.pop("schedule_steps", None)
        return replace(self, **filled)

    def checkpoint_due(self, step: int, solved: bool) -> bool:
        """Whether step ``step`` is on the checkpoint schedule: every ``checkpoint_every`` steps,
        and every ``checkpoint_dense_every`` steps until the run is ``solved`` (an evaluation
        before this step had MSE < ``checkpoint_dense_until``). The last step and interruptions
        checkpoint too (the trainer decides those)."""
        dense = self.checkpoint_dense_every
        return step % self.checkpoint_every == 0 or (
            dense is not None and not solved and step % dense == 0)

    @property
    def max_checkpoints(self) -> int:
        """An upper bound on the checkpoint files a run writes (a run that never solves)."""
        dense = self.steps // self.checkpoint_dense_every if self.checkpoint_dense_every else 0
        return self.steps // self.checkpoint_every + dense + 2

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        if not isinstance(data, dict):
            raise ValueError(f"train config must be a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"train config has unknown keys {unknown}")
        return cls(**data)
