"""Analytic weights for the note's Theorems 2 and 3 and Appendix B, as ready models.

Each construction is data: a ``ConstructionSpec`` whose ``cells`` list the nonzero
``(layer, query block, key block, template)`` cells of the attention matrices (docs/design.md
section 6),
and one generic builder turns cells into a ``HookedDisentangledTransformer``. ``layer`` is the
module index (``blocks.{layer}``; the note's "layer 1" is ``0``); templates are ``"I"`` (identity),
``"J"`` (anti-diagonal) and ``"-1"`` (all minus ones), each times ``beta``: labels of the
vocabulary in ``cells``, which the template matching reads back. The read-out ``W_U`` is
the identity on ``read_block`` of the final stream. The printed forms are kept to show their failure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import memory
from .cells import cell_template
from .config import ModelConfig
from .model import HookedDisentangledTransformer
from .task import Batch, Layout, mse, sample_batch

Cell = tuple[int, str, str, str]  # (layer, query block, key block, template)
TEMPLATES = ("I", "J", "-1")
DEFAULT_BETA = 100.0


@dataclass(frozen=True)
class ConstructionSpec:
    """One row of docs/design.md section 6's table.

    ``beta_exact`` is the smallest β, in steps of 5, at which the float64 max error is below 1e-6
    for every d in {1, 2, 3, 5, 10, 16} on random data, the identity and reversal permutations with
    ``Y`` all zeros / all ones (measured; ``None`` for the printed forms, which never get there).
    It is set by the worst margin: ``β`` for one-hot lookups, ``β/4`` for ``two_block`` at d = 2
    and ``β/3`` for ``theorem3_two_block`` at d = 1 (their keys hold averages of one-hots).
    """

    name: str
    description: str
    attention_dir: str  # "causal" or "bidirectional"
    layout: str  # "plain": [P; Y_P]; "scratch": [P; Y_P; S] with d scratch rows
    readout: str  # segment whose rows are read out
    read_block: str  # block of the final stream that W_U copies
    works: bool  # False for the note's printed forms
    cells: tuple[Cell, ...]
    beta_exact: float | None = None

    def make_layout(self, d: int, scratch=None) -> Layout:
        if self.layout == "scratch":
            return Layout.scratch(d, scratch=scratch)
        if scratch is not None:
            raise ValueError(f"scratch is only for scratch layouts; {self.name!r} reads [P; Y_P]")
        return Layout.plain(d)


def _spec(name, description, attention_dir, layout, readout, read_block, works, cells, beta=None):
    return ConstructionSpec(name, description, attention_dir, layout, readout, read_block, works,
                            tuple(cells), beta)


REGISTRY: dict[str, ConstructionSpec] = {s.name: s for s in (
    # Theorem 2 (Appendix C.2) as printed: L1 gives row-reversed P, L2 then looks up Y_P rows by
    # J·(row-reversed P); that is Y only when (JP)² = I.
    _spec("theorem2_as_printed", "Theorem 2 as printed (J, J): fails unless (JP)^2 = I",
          "bidirectional", "plain", "P", "L2.x", False,
          [(0, "pos.P", "pos.P", "J"), (1, "L1.x", "pos.Y", "J")]),
    # P row i attends to the P row holding e_i (row perm⁻¹(i)); -1 keeps binary Y_P rows, which
    # also match e_i by content, from tying with it. L2 fetches Y_P row perm⁻¹(i) = Y_i.
    _spec("theorem2", "Theorem 2 corrected: find the P row holding e_i, fetch its Y_P row",
          "bidirectional", "plain", "P", "L2.x", True,
          [(0, "pos.P", "x", "I"), (0, "pos.P", "pos.Y", "-1"), (1, "L1.pos.P", "pos.Y", "I")], 20),
    # What gradient descent finds (docs/design.md section 6): Y_P row j fetches P row j = e_perm(j),
    # then P row i looks up by content the Y_P row whose fetched P row is e_i.
    _spec("two_block", "two-block variant: Y_P rows fetch their P row; P rows look them up",
          "bidirectional", "plain", "P", "L2.x", True,
          [(0, "pos.Y", "pos.P", "I"), (1, "pos.P", "L1.x", "I")], 60),
    # Appendix B's learned weights as printed: the L2 content lookup ties with Y_P rows.
    _spec("appendix_b_as_printed", "Appendix B as printed: L2 lookup ties with binary Y_P rows",
          "bidirectional", "plain", "P", "L2.L1.x", False,
          [(0, "pos.P", "pos.Y", "I"), (1, "pos.P", "x", "I")]),
    # P row i copies Y_P row i; L2 moves it to the row perm(i) (its content lookup, with -1).
    _spec("appendix_b", "Appendix B corrected: P rows copy Y_P rows, then look up by content",
          "bidirectional", "plain", "P", "L2.L1.x", True,
          [(0, "pos.P", "pos.Y", "I"), (1, "pos.P", "x", "I"), (1, "pos.P", "pos.Y", "-1")], 20),
    _spec("theorem3_as_printed", "Theorem 3 as printed (J, J): fails unless (JP)^2 = I",
          "causal", "scratch", "S", "L2.x", False,
          [(0, "pos.S", "pos.P", "J"), (1, "L1.x", "pos.Y", "J")]),
    # Theorem 2's corrected lookup run from the scratch rows, which see every P and Y_P row.
    _spec("theorem3", "Theorem 3 corrected: scratch rows find e_i in P, fetch the Y_P row",
          "causal", "scratch", "S", "L2.x", True,
          [(0, "pos.S", "x", "I"), (0, "pos.S", "pos.Y", "-1"), (1, "L1.pos.P", "pos.Y", "I")], 20),
    # -1 at (pos.S, pos.P): under the mask, P row 0 sees only itself, so its L1.x is e_perm(0).
    _spec("theorem3_two_block", "Theorem 3, two-block variant: Y_P rows fetch their P row, S rows "
          "look them up",
          "causal", "scratch", "S", "L2.x", True,
          [(0, "pos.Y", "pos.P", "I"), (1, "pos.S", "L1.x", "I"), (1, "pos.S", "pos.P", "-1")], 45),
)}


def names() -> list[str]:
    """Names of all constructions, in registry order."""
    return list(REGISTRY)


def get(name: str) -> ConstructionSpec:
    if name not in REGISTRY:
        raise ValueError(f"construction name must be one of {names()}, got {name!r}")
    return REGISTRY[name]


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
    layers = sorted({c[0] for c in spec.cells if c[1] == "pos.S" and c[2].endswith("x")})
    return [((layer, "pos.S", "pos.S", "-1"), scale) for layer in layers]


def build(name: str, d: int, beta: float | None = None, *, dtype: torch.dtype = torch.float64,
          scratch=None, max_memory: int | str | None = None) -> HookedDisentangledTransformer:
    """The model of construction ``name`` at size ``d``, every cell times ``beta``.

    ``beta`` defaults to 100 (errors 1e-20 or less for the working forms at d <= 16; see
    ``ConstructionSpec.beta_exact``); ``scratch`` is the vector ``s`` (length d) of scratch layouts.
    Weights that would not fit ``max_memory`` (default: the memory left) are refused before they
    are allocated.
    """
    spec = get(name)
    if beta is None:
        beta = DEFAULT_BETA
    number = isinstance(beta, (int, float)) and not isinstance(beta, bool)
    if not (number and 0 < beta < float("inf")):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    cfg = ModelConfig(spec.make_layout(d, scratch), n_layers=2, n_heads=1,
                      attention_dir=spec.attention_dir, readout=spec.readout,
                      dtype="float64" if dtype == torch.float64 else "float32", init="zeros")
    memory.check(memory.model_estimate(cfg, f"construction {name!r} at d={d}"), max_memory)
    model = HookedDisentangledTransformer(cfg)
    cells = [(c, 1.0) for c in spec.cells] + scratch_guard(spec, cfg.layout.scratch_vector)
    with torch.no_grad():
        for (layer, query, key, kind), scale in cells:
            view = model.stream.split(model.blocks[layer].attn.A.data[0], layer)[(query, key)]
            view += beta * scale * cell_template(kind, *view.shape, dtype=dtype)
        readout = model.stream.slice(spec.read_block, cfg.n_layers)
        model.unembed.W_U.data[readout] = torch.eye(d, dtype=dtype)
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


def theorem3_as_printed(d: int, beta: float | None = None, scratch=None,
                        **kw) -> HookedDisentangledTransformer:
    return build("theorem3_as_printed", d, beta, scratch=scratch, **kw)


def theorem3_two_block(d: int, beta: float | None = None, scratch=None,
                       **kw) -> HookedDisentangledTransformer:
    return build("theorem3_two_block", d, beta, scratch=scratch, **kw)


@dataclass(frozen=True)
class Verification:
    """How well a model reproduces ``Y``: largest absolute error and the note's MSE."""

    max_error: float
    mse: float  # squared error summed over the d columns, averaged over rows and samples
    n: int


def verify(model: HookedDisentangledTransformer, n: int = 256, seed: int = 0,
           batch: Batch | None = None, max_memory: int | str | None = None) -> Verification:
    """Compare ``model(X)`` with ``Y`` on ``batch``, or on ``n`` fresh samples drawn from ``seed``.

    A check that would not fit ``max_memory`` (default: the memory left) is refused first.
    """
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
