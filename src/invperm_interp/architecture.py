"""The architecture a ``ModelConfig`` names, and the standard transformer's fields.

``arch="disentangled"``: the note's model (docs/design.md section 1). ``arch="standard"``: a
transformer whose heads add to a residual stream of width ``d_model``, with per-head ``W_Q, W_K,
W_V, W_O`` of width ``d_head``, optional pre-LayerNorm and MLPs of width ``d_mlp``
(docs/standard.md). :class:`ArchitectureFields` is the part of ``ModelConfig`` that says which:
only the standard architecture sets ``STANDARD_FIELDS``, and a disentangled configuration's JSON
is what it always was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from .errors import ConfigError, check_choice

Arch = Literal["disentangled", "standard"]
ARCHS = get_args(Arch)
STANDARD_FIELDS = ("d_model", "d_head", "layernorm", "d_mlp")
DEFAULT_D_MODEL = 64
# The N(0, σ²) init of a standard model's matrices (LayerNorm weights start at 1, biases at 0);
# docs/standard.md says how it was chosen.
STANDARD_INIT_SCALE = 0.1
DISENTANGLED_INIT_SCALE = 0.01


def _positive_int(name: str, value) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ConfigError(name, f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ArchitectureFields:
    """``arch`` and the standard model's shape (keyword-only fields of ``ModelConfig``)."""

    arch: Arch = "disentangled"  # or "standard"; the four fields below are the standard model's
    d_model: int | None = None  # the residual stream's width (default 64)
    d_head: int | None = None  # each head's width (default d_model // the most heads in a layer)
    layernorm: bool = False  # pre-LayerNorm before attention, MLP and read-out
    d_mlp: int | None = None  # None: attention-only; else an MLP of this width in every layer

    def _resolve_architecture(self, heads: tuple[int, ...]) -> None:
        """Check the fields and fill in their defaults (``init_scale`` None: the architecture's);
        a :class:`ConfigError` names the field and what was expected."""
        check_choice("arch", self.arch, ARCHS)
        standard = self.arch == "standard"
        if getattr(self, "init_scale", 0) is None:
            scale = STANDARD_INIT_SCALE if standard else DISENTANGLED_INIT_SCALE
            object.__setattr__(self, "init_scale", scale)
        if not standard:
            extra = [f for f in STANDARD_FIELDS if getattr(self, f) not in (None, False)]
            if extra:
                raise ConfigError(extra[0], f"{', '.join(extra)} belong to arch='standard', not "
                                            f"{self.arch!r}")
            return
        if self.d_model is None:
            object.__setattr__(self, "d_model", DEFAULT_D_MODEL)
        _positive_int("d_model", self.d_model)
        if self.d_head is None:
            object.__setattr__(self, "d_head", max(1, self.d_model // max(heads)))
        _positive_int("d_head", self.d_head)
        if not isinstance(self.layernorm, bool):
            raise ConfigError("layernorm", f"layernorm must be True or False, got {self.layernorm!r}")
        if self.d_mlp is not None:
            _positive_int("d_mlp", self.d_mlp)

    @property
    def attn_only(self) -> bool:
        """True unless the (standard) model has MLPs."""
        return self.d_mlp is None

    def _standard_dict(self) -> dict:
        """The JSON entries of the architecture: none for the disentangled model."""
        if self.arch != "standard":
            return {}
        return {"arch": self.arch, **{f: getattr(self, f) for f in STANDARD_FIELDS}}

    def _standard_params(self, d: int, T: int, heads: tuple[int, ...]) -> int:
        """Entries of a standard model's parameters: ``W_E (d, d_model)``, ``W_pos (T, d_model)``,
        per layer ``W_Q, W_K, W_V (H, d_model, d_head)``, ``W_O (H, d_head, d_model)``, the
        LayerNorms' ``w, b`` and the MLP's ``W_in, b_in, W_out, b_out``; ``W_U (d_model, d)``."""
        m = self.d_model
        ln = 2 * m if self.layernorm else 0
        mlp = 0 if self.d_mlp is None else 2 * m * self.d_mlp + self.d_mlp + m + ln
        layers = sum(4 * h * m * self.d_head + ln + mlp for h in heads)
        return (d + T) * m + layers + ln + m * d
