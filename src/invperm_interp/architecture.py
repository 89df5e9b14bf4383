"""The architectures a ``ModelConfig`` can name, each one :class:`Architecture` value, and the
standard transformer's fields: the one seam between ``ModelConfig.arch`` and the code that builds,
prices, maps and labels models (``cfg.architecture``; nowhere else compares ``arch``).

``arch="disentangled"``: the note's model (docs/design.md section 1). ``arch="standard"``: a
transformer whose heads add to a residual stream of width ``d_model``, with per-head ``W_Q, W_K,
W_V, W_O`` of width ``d_head``, optional pre-LayerNorm and MLPs of width ``d_mlp``
(docs/standard.md). :class:`ArchitectureFields` is the part of ``ModelConfig`` that says which:
only the standard architecture sets ``STANDARD_FIELDS``, and a disentangled configuration's JSON
is what it always was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .errors import ConfigError, check_choice

if TYPE_CHECKING:
    from .config import ModelConfig

Arch = Literal["disentangled", "standard"]
STANDARD_FIELDS = ("d_model", "d_head", "layernorm", "d_mlp")
DEFAULT_D_MODEL = 64
# The N(0, σ²) init of a standard model's matrices (LayerNorm weights start at 1, biases at 0);
# docs/standard.md says how it was chosen.
STANDARD_INIT_SCALE = 0.1
DISENTANGLED_INIT_SCALE = 0.01
WIDTHS_HINT = "d, n_layers or n_heads (the widths grow as (d + T)·(1 + H)^L)"


@dataclass(frozen=True)
class Architecture:
    """One architecture: what every stage asks of a model of it, looked up as ``cfg.architecture``.

    A new architecture provides one of these in :data:`ARCHITECTURES` (its name joins ``Arch``, its
    own fields join :class:`ArchitectureFields` and ``fields``), and in ``model/`` a hook-free and a
    hooked model class exported by ``model/__init__`` (each ``cls(cfg, seed, max_memory=…)``, the
    hooked one with ``from_module(plain)``, the plain one with ``made_on(cfg, device)``); unless it
    is the disentangled model itself, a module of ``model/`` with its exact map to the disentangled
    model (``check_mappable(cfg)``, ``disentangled_config(cfg)``, ``to_disentangled(model)``,
    ``map_summary(model)``, as ``model.note_map``). ``model.build`` loads those by name: nothing
    else changes.
    """

    name: str  # the value of ModelConfig.arch
    fields: tuple[str, ...]  # the ArchitectureFields only this architecture sets
    init_scale: float  # the N(0, σ²) init's σ when init_scale is None
    named_in_json: bool  # False: its configuration JSON has no "arch" entry (the first architecture)
    resolve: Callable[[ModelConfig, tuple[int, ...]], None]  # check its fields, fill their defaults
    n_params: Callable[[ModelConfig], int]  # entries of its parameters
    forward_elements: Callable[[ModelConfig, int], int]  # the hooked forward's peak on b samples
    step_units: Callable[[ModelConfig], tuple[str, int]]  # a training step's price: family, units per sample
    label: Callable[[ModelConfig], str]  # what a run's group shows beyond attention, layout, read-out
    weights_hint: str  # the fields that shrink its weights (a memory refusal's advice)
    plain: str  # its hook-free model: a public name of invperm_interp.model
    hooked: str  # its hooked model: a public name of invperm_interp.model
    note_map: str | None = None  # the model/ module of its exact map; None: it is the note's model

    def config_entries(self, cfg: ModelConfig) -> dict:
        """The JSON entries of ``cfg``'s architecture: none for the first one."""
        if not self.named_in_json:
            return {}
        return {"arch": self.name, **{f: getattr(cfg, f) for f in self.fields}}


def _positive_int(name: str, value) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ConfigError(name, f"{name} must be an integer >= 1, got {value!r}")


# -- the disentangled model (docs/design.md section 1) ----------------------------------------------
def _no_fields(cfg: ModelConfig, heads: tuple[int, ...]) -> None:
    """The disentangled model has no fields of its own."""


def _disentangled_params(cfg: ModelConfig) -> int:
    """Entries of every ``A`` ``(H_l, D_l, D_l)`` and of ``W_U`` ``(D_L, d)``."""
    widths = cfg.widths
    return sum(h * w * w for h, w in zip(cfg.heads, widths)) + widths[-1] * cfg.d


def _disentangled_forward(cfg: ModelConfig, b: int) -> int:
    """The widths ``D_l``' stream, queries and scores, and the read-out rows' last layer."""
    T, peak = cfg.T, 0
    for H, D in zip(cfg.heads, cfg.widths):
        h, q, s = b * T * D, b * H * T * D, b * H * T * T
        peak = max(peak, h + 2 * q + 2 * s, h + 2 * q + h * (1 + H))
    rows = cfg.layout.segment(cfg.readout).n_rows
    return max(peak, b * T * cfg.widths[-1] + 2 * b * rows * cfg.widths[-1])


def _stream_units(cfg: ModelConfig) -> int:
    """Per sample ``T·(T·ΣD + ΣD²)``: attention scores and projections over the widths ``D``."""
    widths = cfg.widths
    return cfg.T * (cfg.T * sum(widths) + sum(w * w for w in widths))


def _note_step(cfg: ModelConfig) -> tuple[str, int]:
    return "note", _stream_units(cfg)


def _no_label(cfg: ModelConfig) -> str:
    return ""


# -- the standard transformer (docs/standard.md) ----------------------------------------------------
def _resolve_standard(cfg: ModelConfig, heads: tuple[int, ...]) -> None:
    """Fill in ``d_model`` (64) and ``d_head`` (``d_model //`` the most heads in a layer), check
    the four fields."""
    if cfg.d_model is None:
        object.__setattr__(cfg, "d_model", DEFAULT_D_MODEL)
    _positive_int("d_model", cfg.d_model)
    if cfg.d_head is None:
        object.__setattr__(cfg, "d_head", max(1, cfg.d_model // max(heads)))
    _positive_int("d_head", cfg.d_head)
    if not isinstance(cfg.layernorm, bool):
        raise ConfigError("layernorm", f"layernorm must be True or False, got {cfg.layernorm!r}")
    if cfg.d_mlp is not None:
        _positive_int("d_mlp", cfg.d_mlp)


def _standard_params(cfg: ModelConfig) -> int:
    """Entries of ``W_E (d, d_model)``, ``W_pos (T, d_model)``, per layer ``W_Q, W_K, W_V (H,
    d_model, d_head)``, ``W_O (H, d_head, d_model)``, the LayerNorms' ``w, b`` and the MLP's
    ``W_in, b_in, W_out, b_out``; ``W_U (d_model, d)``."""
    m, d = cfg.d_model, cfg.d
    ln = 2 * m if cfg.layernorm else 0
    mlp = 0 if cfg.d_mlp is None else 2 * m * cfg.d_mlp + cfg.d_mlp + m + ln
    layers = sum(4 * h * m * cfg.d_head + ln + mlp for h in cfg.heads)
    return (d + cfg.T) * m + layers + ln + m * d


def _standard_forward(cfg: ModelConfig, b: int) -> int:
    """Its stream, queries, keys, values, scores and MLP, the largest layer's."""
    T = cfg.T
    return max(b * T * (2 * cfg.d_model + 3 * H * cfg.d_head + 2 * (cfg.d_mlp or 0))
               + 2 * b * H * T * T for H in cfg.heads)


def row_costs(cfg: ModelConfig) -> tuple[int, int]:
    """Multiplications per input row of a standard model's forward ``(through the map, direct)``:
    through the map, in the disentangled streams of widths ``D_l``, its queries ``h A`` and scores
    ``H D (D + 2T)`` per layer; directly, in ``d_model``, ``H d_head (4 d_model + 2T)`` per layer and
    ``2 d_model d_mlp`` more with an MLP (the map is then not taken)."""
    m, dh, T = cfg.d_model, cfg.d_head, cfg.T
    note = sum(H * D * (D + 2 * T) for H, D in zip(cfg.heads, cfg.widths))
    mlp = 2 * m * cfg.d_mlp if cfg.d_mlp is not None else 0
    return note, sum(H * dh * (4 * m + 2 * T) + mlp for H in cfg.heads)


def note_is_cheaper(cfg: ModelConfig) -> bool:
    """Whether an attention-only model without LayerNorm computes its output with fewer
    multiplications through its map than in ``d_model`` (:func:`row_costs`): at d = 10 and
    ``d_model`` 64, 8,100 against 37,888 per row."""
    if cfg.layernorm or cfg.d_mlp is not None:
        return False
    note, direct = row_costs(cfg)
    return note < direct


def _standard_step(cfg: ModelConfig) -> tuple[str, int]:
    """``"standard"``, trained through its map, priced as the disentangled widths it is read as;
    ``"direct"``, in ``d_model``, by its multiplications per row (``sweep.plan.STEP_COST``)."""
    if note_is_cheaper(cfg):
        return "standard", _stream_units(cfg)
    return "direct", cfg.T * row_costs(cfg)[1]


def _standard_label(cfg: ModelConfig) -> str:
    """Its shape and the disentangled widths its exact map reads it in (or why there is none)."""
    shape = (f"standard, d_model {cfg.d_model}, d_head {cfg.d_head}"
             + (", LayerNorm" if cfg.layernorm else "") + (f", MLP {cfg.d_mlp}" if cfg.d_mlp else ""))
    if cfg.layernorm or cfg.d_mlp is not None:
        return f" ({shape}; no exact map)"
    return f" ({shape}; read as disentangled, widths {' → '.join(map(str, cfg.widths))})"


#: Every architecture, by ``ModelConfig.arch``; the first is the default.
ARCHITECTURES: dict[str, Architecture] = {
    "disentangled": Architecture(
        name="disentangled", fields=(), init_scale=DISENTANGLED_INIT_SCALE, named_in_json=False,
        resolve=_no_fields, n_params=_disentangled_params, forward_elements=_disentangled_forward,
        step_units=_note_step, label=_no_label, weights_hint=WIDTHS_HINT,
        plain="DisentangledTransformer", hooked="HookedDisentangledTransformer"),
    "standard": Architecture(
        name="standard", fields=STANDARD_FIELDS, init_scale=STANDARD_INIT_SCALE, named_in_json=True,
        resolve=_resolve_standard, n_params=_standard_params, forward_elements=_standard_forward,
        step_units=_standard_step, label=_standard_label,
        weights_hint="d_model, d_head, d_mlp or n_layers",
        plain="StandardTransformer", hooked="HookedStandardTransformer", note_map="note_map"),
}
ARCHS = tuple(ARCHITECTURES)
OWN_FIELDS = tuple(f for a in ARCHITECTURES.values() for f in a.fields)


@dataclass(frozen=True, kw_only=True)
class ArchitectureFields:
    """``arch`` and the standard model's shape (keyword-only fields of ``ModelConfig``)."""

    arch: Arch = "disentangled"  # or "standard"; the four fields below are the standard model's
    d_model: int | None = None  # the residual stream's width (default 64)
    d_head: int | None = None  # each head's width (default d_model // the most heads in a layer)
    layernorm: bool = False  # pre-LayerNorm before attention, MLP and read-out
    d_mlp: int | None = None  # None: attention-only; else an MLP of this width in every layer

    @property
    def architecture(self) -> Architecture:
        """The :class:`Architecture` ``arch`` names: the one lookup."""
        return ARCHITECTURES[self.arch]

    def _resolve_architecture(self, heads: tuple[int, ...]) -> None:
        """Check the fields and fill in their defaults (``init_scale`` None: the architecture's);
        a :class:`ConfigError` names the field and what was expected."""
        check_choice("arch", self.arch, ARCHS)
        own = self.architecture
        if getattr(self, "init_scale", 0) is None:
            object.__setattr__(self, "init_scale", own.init_scale)
        extra = [f for f in OWN_FIELDS if f not in own.fields and getattr(self, f) not in (None, False)]
        if extra:
            owner = next(a.name for a in ARCHITECTURES.values() if extra[0] in a.fields)
            raise ConfigError(extra[0], f"{', '.join(extra)} belong to arch={owner!r}, not "
                                        f"{self.arch!r}")
        own.resolve(self, heads)

    @property
    def attn_only(self) -> bool:
        """True unless the (standard) model has MLPs."""
        return self.d_mlp is None
