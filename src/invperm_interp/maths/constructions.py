"""Analytic weights for the note's Theorems 2 and 3 and Appendix B, as ready models.

Each construction is data (:mod:`.registry`: a ``ConstructionSpec`` listing the nonzero
``(layer, head, query block, key block, template)`` cells of the attention matrices, on any number
of layers and heads per layer), and one generic
builder turns cells into a ``HookedDisentangledTransformer``: every template times ``beta``,
labels of the vocabulary in ``cells``, which the template matching reads back. The read-out ``W_U``
is the identity on ``read_block`` of the final stream, or a signed sum of identities
(``"L2.x - L1.x"``). The printed forms are kept to show their failure; :func:`register` adds a
user's construction after checking it with :func:`verify`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .. import memory
from ..config import ATTENTION_DIRS, ModelConfig
from ..model.disentangled import DisentangledModel, DisentangledTransformer
from ..stream import Stream
from ..task import Batch, Layout, make_input, mse, sample_batch
from .cells import cell_template
from .registry import CELL_LABELS, PLAIN, REGISTRY, Cell, ConstructionSpec, Wiring, get, names, parse_read

if TYPE_CHECKING:
    from ..model.hooked import HookedDisentangledTransformer

__all__ = ["REGISTRY", "CELL_LABELS", "Cell", "ConstructionSpec", "build", "get", "names",
           "parse_read", "register", "verify", "weights", "Wiring"]

DEFAULT_BETA = 100.0


def scratch_guard(spec: ConstructionSpec, scratch) -> list[tuple[Cell, float]]:
    """Extra ``(cell, scale)`` that keep scratch keys from winning a content lookup when ``s ≠ 0``.

    A scratch row whose query compares against key content (``x`` or ``L1.x``) also scores the
    scratch keys: ``β s_i`` in layer 1, and ``β`` times an average that includes ``s`` later. Both are
    at most ``β max(1, max s)``, so ``-max(1, max s)`` at (pos.S, pos.S) in that layer restores the
    margin ``β``. The printed ``-1`` is this for ``max s ≤ 1``; it fails for larger entries.
    """
    if spec.layout != "scratch" or scratch is None:
        return []
    s = torch.as_tensor(scratch, dtype=torch.float64).flatten()
    if not bool((s > 0).any()):  # s ≤ 0 only lowers the scratch keys' scores
        return []
    scale = max(1.0, float(s.max()))
    heads = sorted({(c.layer, c.head) for c in spec.cells if c.query == "pos.S" and c.key.endswith("x")})
    return [(Cell(layer, head, "pos.S", "pos.S", "-1"), scale) for layer, head in heads]


def spec_of(construction: str | ConstructionSpec) -> ConstructionSpec:
    """A registry name's spec, or an unregistered ``ConstructionSpec`` as it is (a candidate being
    checked: :func:`max_error`, ``analysis.idealise``)."""
    return construction if isinstance(construction, ConstructionSpec) else get(construction)


def default_beta(name: str | ConstructionSpec) -> float:
    """:func:`build`'s β when none is given: the larger of 100 and the construction's ``beta_exact``."""
    return max(DEFAULT_BETA, spec_of(name).beta_exact or 0.0)


def _config(name: str | ConstructionSpec, d: int, beta, dtype: torch.dtype, scratch) -> tuple:
    """Check the arguments of :func:`build`: ``(spec, model config, beta)``."""
    spec = spec_of(name)
    if isinstance(d, int) and not isinstance(d, bool) and 1 <= d < spec.min_d:
        raise ValueError(f"construction {spec.name!r} works from d={spec.min_d} (its lookups take a "
                         f"complement over the other P rows), got d={d}")
    beta = default_beta(spec) if beta is None else beta
    number = isinstance(beta, (int, float)) and not isinstance(beta, bool)
    if not (number and 0 < beta < float("inf")):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    heads = spec.heads[0] if len(set(spec.heads)) == 1 else spec.heads  # one count: as an int
    cfg = ModelConfig(spec.make_layout(d, scratch), n_layers=spec.n_layers, n_heads=heads,
                      attention_dir=spec.attention_dir, readout=spec.readout,
                      dtype="float64" if dtype == torch.float64 else "float32", init="zeros")
    return spec, cfg, beta


def weights(name: str | ConstructionSpec, d: int, beta: float | None = None, *,
            dtype: torch.dtype = torch.float64, scratch=None, into: DisentangledModel | None = None) -> tuple:
    """:func:`build`'s weights without a model: ``(cfg, [A (H_l, D_l, D_l) per layer], W_U (D_L, d))``
    (``into``: a zero model of that config to write them into instead)."""
    spec, cfg, beta = _config(name, d, beta, dtype, scratch)
    stream = Stream(cfg.layout, cfg.heads) if into is None else into.stream
    As = ([torch.zeros(h, w, w, dtype=dtype) for h, w in zip(cfg.heads, cfg.widths[:-1])] if into is None
          else [b.attn.A.data for b in into.blocks])
    W_U = torch.zeros(cfg.widths[-1], cfg.d, dtype=dtype) if into is None else into.unembed.W_U.data
    for cell, scale in [(c, 1.0) for c in spec.cells] + scratch_guard(spec, cfg.layout.scratch_vector):
        layer, head, query, key, kind = Cell.of(cell)
        view = stream.split(As[layer][head], layer)[(query, key)]
        view += beta * scale * cell_template(kind, *view.shape, dtype=dtype)
    for block, sign in spec.read_terms:
        W_U[stream.slice(block, cfg.n_layers)] = sign * torch.eye(cfg.d, dtype=dtype)
    return cfg, As, W_U


def build(name: str | ConstructionSpec, d: int, beta: float | None = None, *,
          dtype: torch.dtype = torch.float64,
          scratch=None, max_memory: int | str | None = None,
          hooked: bool = True) -> HookedDisentangledTransformer | DisentangledTransformer:
    """The model of construction ``name`` (a registry name, or an unregistered spec) at size ``d``,
    every cell times ``beta``.

    ``beta`` defaults to :func:`default_beta`, the larger of 100 and ``beta_exact``, so a working
    form built by default has a max error below 1e-6 at every d from its ``min_d`` to its
    ``max_d`` (``ConstructionSpec``; not claimed beyond); the printed forms fail at any β.
    ``scratch`` is the vector ``s`` (length d) of scratch layouts.
    Weights that would not fit ``max_memory`` (default: the memory left) are refused before they
    are allocated. ``hooked=False``: the plain ``DisentangledTransformer`` (no TransformerLens).
    """
    spec, cfg, _ = _config(name, d, beta, dtype, scratch)
    memory.check(memory.model_estimate(cfg, f"construction {spec.name!r} at d={d}"), max_memory)
    if hooked:
        from ..model.hooked import HookedDisentangledTransformer

        model = HookedDisentangledTransformer(cfg, max_memory=max_memory)
    else:
        model = DisentangledTransformer(cfg, max_memory=max_memory)
    with torch.no_grad():
        weights(name, d, beta, dtype=dtype, scratch=scratch, into=model)
    return model


def theorem2(d: int, beta: float | None = None, **kw) -> HookedDisentangledTransformer:
    return build("theorem2", d, beta, **kw)


def theorem2_as_printed(d: int, beta: float | None = None, **kw) -> HookedDisentangledTransformer:
    return build("theorem2_as_printed", d, beta, **kw)


def two_block(d: int, beta: float | None = None, **kw) -> HookedDisentangledTransformer:
    return build("two_block", d, beta, **kw)


def appendix_b(d: int, beta: float | None = None, **kw) -> HookedDisentangledTransformer:
    return build("appendix_b", d, beta, **kw)


def appendix_b_as_printed(d: int, beta: float | None = None, **kw) -> HookedDisentangledTransformer:
    return build("appendix_b_as_printed", d, beta, **kw)


def theorem3(d: int, beta: float | None = None, scratch=None, **kw) -> HookedDisentangledTransformer:
    return build("theorem3", d, beta, scratch=scratch, **kw)


def theorem3_as_printed(d: int, beta=None, scratch=None, **kw) -> HookedDisentangledTransformer:
    return build("theorem3_as_printed", d, beta, scratch=scratch, **kw)


def theorem3_two_block(d: int, beta=None, scratch=None, **kw) -> HookedDisentangledTransformer:
    return build("theorem3_two_block", d, beta, scratch=scratch, **kw)


@dataclass(frozen=True)
class Verification:
    """How well a model reproduces ``Y``: largest absolute error and the note's MSE."""
    max_error: float
    mse: float  # squared error summed over the d columns, averaged over rows and samples
    n: int


def verify(model: DisentangledModel, n: int = 256, seed: int = 0,
           batch: Batch | None = None, max_memory: int | str | None = None) -> Verification:
    """Compare ``model(X)`` with ``Y`` on ``batch``, or on ``n`` fresh samples drawn from ``seed``;
    a check that would not fit ``max_memory`` (default: the memory left) is refused first."""
    if batch is None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        estimate = memory.evaluation_estimate(model.cfg, n, what=f"checking the model on n={n} samples")
        memory.check(estimate, max_memory, model.device)
        generator = torch.Generator(device=model.device).manual_seed(seed)
        batch = sample_batch(model.cfg.layout, n, generator=generator, dtype=model.cfg.torch_dtype)
    with torch.no_grad():
        out = model(batch.X)  # (B, d, d)
    Y = batch.Y.to(out)
    return Verification(float((out - Y).abs().max()), float(mse(out, Y)), len(batch))


def edge_inputs(layout: Layout) -> Batch:
    """The inputs random sampling rarely or never draws: ``P`` the identity or the reversal, with
    ``Y`` all zeros, all ones or one fixed random draw (six samples)."""
    d, F64 = layout.d, torch.float64
    eye = torch.eye(d, dtype=F64)
    drawn = torch.randint(0, 2, (d, d), generator=torch.Generator().manual_seed(d)).to(F64)
    Ps, Ys = zip(*[(P, Y) for P in (eye, eye.flip(0))
                   for Y in (torch.zeros(d, d, dtype=F64), torch.ones(d, d, dtype=F64), drawn)])
    P = torch.stack(Ps)
    return make_input(layout, P, P @ torch.stack(Ys))


def exact_error(name: str | ConstructionSpec, d: int, beta: float) -> float:
    """Largest ``|model(X) - Y|`` of construction ``name`` at ``d`` and ``beta`` (float64), over
    256 random samples (seed 0) and :func:`edge_inputs`: what ``beta_exact`` is held to."""
    model = build(name, d, beta, hooked=False)
    return max(verify(model, n=256, seed=0).max_error,
               verify(model, batch=edge_inputs(model.cfg.layout)).max_error)


#: β values :func:`register` tries a new construction at (the smallest that works is kept).
REGISTER_BETAS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
REGISTER_TOL = 1e-6
#: Names :func:`register` refuses, in any case: the mechanism rule's verdicts when it names no
#: construction (``analysis.verdict.UNNAMED``, which a test holds equal), so that a table of names
#: cannot read a construction as a verdict.
RESERVED = ("borderline", "none", "untestable")


#: The largest construction :func:`register` builds: layers, and heads in one layer.
MAX_LAYERS = MAX_HEADS = 8


def _check_wiring(wiring: Wiring) -> None:
    """The layout, attention and read-out segment are ones the task has."""
    layout, attention_dir, readout = wiring.layout, wiring.attention_dir, wiring.segment
    if layout not in ("plain", "scratch"):
        raise ValueError(f"layout must be 'plain' ([P; Y_P]) or 'scratch' ([P; Y_P; S]), got {layout!r}")
    if attention_dir not in ATTENTION_DIRS:
        raise ValueError(f"attention_dir must be {' or '.join(map(repr, ATTENTION_DIRS))}, "
                         f"got {attention_dir!r}")
    probe = Layout.scratch(3) if layout == "scratch" else Layout.plain(3)
    if readout not in probe.names:
        raise ValueError(f"readout must be a segment of the {layout} layout {probe.names}, got {readout!r}")


def _check_cells(spec: ConstructionSpec) -> None:
    """Cells in the vocabulary, on blocks of the stream of the construction's own shape
    (``spec.heads``: the layers and heads its cells and block names use)."""
    if not spec.cells:
        raise ValueError("cells must list at least one cell")
    for cell in spec.cells:
        if not 0 <= cell.layer < MAX_LAYERS:
            raise ValueError(f"cell {tuple(cell)!r}: layer must be in [0, {MAX_LAYERS - 1}] "
                             f"(blocks.0 …)")
        if not 0 <= cell.head < MAX_HEADS:
            raise ValueError(f"cell {tuple(cell)!r}: head must be in [0, {MAX_HEADS - 1}]")
        if cell.label not in CELL_LABELS:
            raise ValueError(f"cell {tuple(cell)!r}: template must be one of {CELL_LABELS}")
    heads = spec.heads
    if len(heads) > MAX_LAYERS or max(heads) > MAX_HEADS:
        raise ValueError(f"the construction's block names ask for {len(heads)} layers of up to "
                         f"{max(heads)} heads; at most {MAX_LAYERS} layers of {MAX_HEADS} heads")
    stream = Stream(Layout.scratch(3) if spec.layout == "scratch" else Layout.plain(3), heads)
    for cell in spec.cells:
        for block in (cell.query, cell.key):
            if block not in stream.labels(cell.layer):
                raise ValueError(f"cell {tuple(cell)!r}: block {block!r} is not in the stream read "
                                 f"by blocks.{cell.layer} of a model of {list(heads)} heads "
                                 f"(known: {stream.labels(cell.layer)})")
    for block, _ in spec.read_terms:
        if block not in stream.labels(len(heads)):
            raise ValueError(f"read block {block!r} is not in the final stream of a model of "
                             f"{list(heads)} heads (known: {stream.labels(len(heads))})")


def register(name: str, cells, wiring: Wiring = PLAIN, *, description: str = "",
             beta: float | None = None, min_d: int = 1, max_d: int = 16,
             replace: bool = False) -> ConstructionSpec:
    """Add a working construction to the registry, after checking that it solves the task.

    ``cells``: :class:`Cell` values ``(layer, head, query block, key block, template)`` in the
    vocabulary above, or ``(layer, query block, key block, template)`` on head 0, on any layers and
    heads (the construction's shape, ``ConstructionSpec.heads``, is what its cells and block names
    use: ``L2h1.x`` is head 1 of a layer of two heads at least); ``wiring``: the layout, attention,
    read-out segment and the blocks ``W_U`` copies (``Wiring``; default: ``[P; Y_P]``,
    bidirectional, reads ``L2.x`` into the ``P`` rows). The range it claims, ``min_d`` to
    ``max_d``, is checked in full: :func:`exact_error` must be below 1e-6 at every ``d`` of it at
    ``beta`` (or, when ``None``, at the smallest of ``REGISTER_BETAS`` that works, stored as ``beta_exact``);
    otherwise ``ValueError``. Names are identifiers, not in ``RESERVED``, and unique unless
    ``replace``. The construction then works everywhere a registry name does (``build``,
    ``invperm construct``, ``analysis.mechanism``).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be an identifier-like string, got {name!r}")
    if name.lower() in RESERVED:
        raise ValueError(f"name {name!r} is reserved (a verdict of the mechanism rule, like "
                         f"{' and '.join(map(repr, RESERVED))}); choose another")
    if name in REGISTRY and not replace:
        raise ValueError(f"construction {name!r} is already registered (pass replace=True)")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (min_d, max_d)) or not (
            1 <= min_d <= max_d):
        raise ValueError(f"min_d and max_d must be integers with 1 <= min_d <= max_d, got "
                         f"{min_d!r} and {max_d!r}")
    _check_wiring(wiring)
    if not isinstance(cells, (list, tuple)):
        raise ValueError(f"cells must be a list of (layer, [head,] query, key, template), got "
                         f"{type(cells).__name__}")
    parse_read(wiring.read)
    spec = ConstructionSpec(name, description or name, wiring.attention_dir, wiring.layout,
                            wiring.segment, wiring.read, True, cells, min_d=min_d, max_d=max_d)
    _check_cells(spec)
    failures = []
    for b in REGISTER_BETAS if beta is None else (beta,):
        failure = _first_failure(spec, b)
        if failure is None:
            spec = ConstructionSpec(**{**vars(spec), "beta_exact": b})
            REGISTRY[name] = spec
            return spec
        failures.append(f"beta {b:g}: {failure[1]:.2g} at d={failure[0]}")
    raise ValueError(f"construction {name!r} does not solve the task to {REGISTER_TOL:g} at every d "
                     f"from {min_d} to {max_d} (max error {', '.join(failures)})")


def _first_failure(spec: ConstructionSpec, beta: float) -> tuple[int, float] | None:
    """The first ``(d, error)`` of ``spec``'s range at which ``beta`` misses ``REGISTER_TOL``."""
    for d in range(spec.min_d, spec.max_d + 1):
        error = max_error(spec, d, beta)
        if not error < REGISTER_TOL:
            return d, error
    return None


def max_error(spec: ConstructionSpec, d: int, beta: float) -> float:
    """:func:`exact_error` of ``spec``, registered or not."""
    return exact_error(spec, d, beta)
