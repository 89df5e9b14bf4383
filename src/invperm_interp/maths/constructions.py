"""Analytic weights for the note's Theorems 2 and 3 and Appendix B, as ready models.

Each construction is data: a ``ConstructionSpec`` whose ``cells`` list the nonzero
``(layer, query block, key block, template)`` cells of the attention matrices (docs/design.md
section 6), and one generic builder turns cells into a ``HookedDisentangledTransformer`` (or, for
analyses that run many at once, into bare weights: :func:`weights`). ``layer`` is the
module index (``blocks.{layer}``; the note's "layer 1" is ``0``); templates are ``"I"`` (identity),
``"J"`` (anti-diagonal) and ``"1"`` (all ones), each with an optional ``-``, times ``beta``:
labels of the vocabulary in ``cells``, which the template matching reads back. The read-out ``W_U``
is the identity on ``read_block`` of the final stream, or a signed sum of identities
(``"L2.x - L1.x"``). The printed forms are kept to show their failure; :func:`register` adds a
user's construction after checking it with :func:`verify`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from .. import memory
from ..config import ModelConfig
from ..model.hooked import HookedDisentangledTransformer
from ..stream import Stream
from ..task import Batch, Layout, mse, sample_batch
from .cells import cell_template

Cell = tuple[int, str, str, str]  # (layer, query block, key block, template)
TEMPLATES = ("I", "J", "1", "-I", "-J", "-1")
DEFAULT_BETA = 100.0


@dataclass(frozen=True)
class ConstructionSpec:
    """One row of docs/design.md section 6's table.

    ``beta_exact`` is the smallest β, in steps of 5, at which the float64 max error is below 1e-6
    for every d in {1, 2, 3, 5, 10, 16} on random data, the identity and reversal permutations with
    ``Y`` all zeros / all ones (measured; ``None`` for the printed forms, which never get there).
    It is set by the worst margin: ``β`` for one-hot lookups, ``β/4`` for ``two_block`` at d = 2,
    ``β/3`` for ``theorem3_two_block`` at d = 1 (their keys hold averages of one-hots) and
    ``β/(d - 1)`` for ``theorem3_complement`` at d = 16 (its keys hold complements); from ``min_d``
    for a form that needs another ``P`` row.
    """

    name: str
    description: str
    attention_dir: str  # "causal" or "bidirectional"
    layout: str  # "plain": [P; Y_P]; "scratch": [P; Y_P; S] with d scratch rows
    readout: str  # segment whose rows are read out
    read_block: str  # block(s) of the final stream that W_U copies: "L2.x" or "L2.x - L1.x"
    works: bool  # False for the note's printed forms
    cells: tuple[Cell, ...]
    beta_exact: float | None = None
    min_d: int = 1  # the smallest d it works at (a complement over the other P rows needs one)

    @property
    def read_terms(self) -> tuple[tuple[str, float], ...]:
        """``read_block`` as ``((block, sign), ...)``: ``"L2.x - L1.x"`` → ``(("L2.x", 1), ("L1.x", -1))``."""
        return parse_read(self.read_block)

    def make_layout(self, d: int, scratch=None) -> Layout:
        if self.layout == "scratch":
            return Layout.scratch(d, scratch=scratch)
        if scratch is not None:
            raise ValueError(f"scratch is only for scratch layouts; {self.name!r} reads [P; Y_P]")
        return Layout.plain(d)


def parse_read(text: str) -> tuple[tuple[str, float], ...]:
    """``"L2.x - L1.x"`` → ``(("L2.x", 1.0), ("L1.x", -1.0))``: block names joined by + and -."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"read must be block names joined by + and -, e.g. 'L2.x - L1.x', got {text!r}")
    terms, sign = [], 1.0
    for token in re.findall(r"[+-]|[^\s+-]+", text.strip()):
        if token in "+-":
            sign = -sign if token == "-" else sign
            continue
        terms.append((token, sign))
        sign = 1.0
    names = [t for t, _ in terms]
    if not terms or len(set(names)) != len(names):
        raise ValueError(f"read must name each block once, e.g. 'L2.x - L1.x', got {text!r}")
    return tuple(terms)


def _spec(name, description, attention_dir, layout, readout, read_block, works, cells, beta=None,
          min_d=1):
    return ConstructionSpec(name, description, attention_dir, layout, readout, read_block, works,
                            tuple(cells), beta, min_d)


# Shared by the two superposed forms: Y_P row j averages the P rows but its own (the -1 on x keeps
# it off the binary Y_P rows), and scratch row i's complement lookup, from its position and from
# its copy of itself.
_Y_COMPLEMENT = [(0, "pos.Y", "pos.P", "-I"), (0, "pos.Y", "pos.P", "1"), (0, "pos.Y", "x", "-1")]
_S_COMPLEMENT_LOOKUPS = [(1, "pos.S", "L1.x", "-I"), (1, "pos.S", "pos.Y", "1"),
                         (1, "L1.pos.S", "L1.x", "-I"), (1, "L1.pos.S", "pos.Y", "1")]

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
    # theorem3_two_block as trained scratch models run it (assets/census.md: the four-cell runs).
    # S row i scores a key by how much of its L1.x lies off column i (I - 1): the Y_P row whose
    # fetched P row is e_i scores 0, every other Y_P row -β. The guard lifts the Y_P keys instead of
    # lowering P row 0: queries on the scratch row's own L1.x (an average of the rows before it,
    # mass m ≥ 1/3) give +βm to keys that are Y_P rows or whose L1.pos.P has mass (P and Y_P rows).
    _spec("theorem3_two_block_mass", "Theorem 3, two-block with a mass guard (learned): S rows "
          "look up the Y_P row whose fetched P row is e_i and nothing else; Y_P keys lifted by the "
          "scratch row's own L1.x mass",
          "causal", "scratch", "S", "L2.x", True,
          [(0, "pos.Y", "pos.P", "I"), (1, "pos.S", "L1.x", "I"), (1, "pos.S", "L1.x", "-1"),
           (1, "L1.x", "pos.Y", "1"), (1, "L1.x", "L1.pos.P", "1")], 45),
    # What the causal scratch model learns (assets/census.md): the complement of theorem3_two_block.
    # Y_P row j attends every P row but its own ((1 - I) at (pos.Y, pos.P): -I and 1 in one cell),
    # so its L1.x is (1 - e_perm(j)) / (d - 1); S row i looks, among the Y_P rows (+1), for the one
    # whose L1.x_i is 0, i.e. perm(j) = i. The margin is β/(d - 1): it needs a larger β.
    _spec("theorem3_complement", "Theorem 3, complement two-block (learned): Y_P rows average every "
          "P row but their own, S rows look for the one missing e_i",
          "causal", "scratch", "S", "L2.x", True,
          [(0, "pos.Y", "pos.P", "-I"), (0, "pos.Y", "pos.P", "1"), (1, "pos.S", "L1.x", "-I"),
           (1, "pos.S", "pos.Y", "1")], 250),
    # The causal scratch model's most frequent circuit (assets/census.md), on the nine cells the
    # census found. Layer 1: S row i attends to itself and to the rows with a 1 in column i (the
    # P row holding e_i among them); Y_P row j averages the P rows but its own, the -1 on x keeping
    # it off the binary Y_P rows. Layer 2 runs three lookups that agree on Y_P row perm⁻¹(i): the
    # position of the P row holding e_i (L1.pos.P, theorem3's), and the complement lookup twice,
    # from the scratch row's position and from its copy of itself (L1.pos.S). Margin ~β/d.
    _spec("theorem3_superposed", "Theorem 3, superposed (learned): the P-row lookup and the "
          "complement two-block in one circuit, scratch rows also attending to themselves",
          "causal", "scratch", "S", "L2.x", True,
          [(0, "pos.S", "x", "I"), (0, "pos.S", "pos.S", "I"), *_Y_COMPLEMENT,
           (1, "L1.pos.P", "pos.Y", "I"), *_S_COMPLEMENT_LOOKUPS], 130),
    # The same three lookups, each complemented (assets/census.md: 9 runs). Layer 1: S row i
    # attends to every P row but the one holding e_i (1 at (pos.S, pos.P), -I at (pos.S, x)) and
    # to itself, so its L1.pos.P is (1 - e_{perm⁻¹(i)})/d; the Y_P rows as in theorem3_superposed.
    # Layer 2: 1 - I at (L1.pos.P, pos.Y) finds the Y_P row at the missing position, and the
    # complement lookup runs from pos.S and L1.pos.S. At d = 1 there is no other P row.
    _spec("theorem3_superposed_complement", "Theorem 3, superposed complement (learned): as "
          "theorem3_superposed with the P-row lookup complemented too",
          "causal", "scratch", "S", "L2.x", True,
          [(0, "pos.S", "x", "-I"), (0, "pos.S", "pos.P", "1"), (0, "pos.S", "pos.S", "I"),
           *_Y_COMPLEMENT, (1, "L1.pos.P", "pos.Y", "-I"), (1, "L1.pos.P", "pos.Y", "1"),
           *_S_COMPLEMENT_LOOKUPS], 125, min_d=2),
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


def _config(name: str, d: int, beta, dtype: torch.dtype, scratch) -> tuple:
    """Check the arguments of :func:`build`: ``(spec, model config, beta)``."""
    spec = get(name)
    if isinstance(d, int) and not isinstance(d, bool) and 1 <= d < spec.min_d:
        raise ValueError(f"construction {name!r} works from d={spec.min_d} (its lookups take a "
                         f"complement over the other P rows), got d={d}")
    beta = DEFAULT_BETA if beta is None else beta
    number = isinstance(beta, (int, float)) and not isinstance(beta, bool)
    if not (number and 0 < beta < float("inf")):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    cfg = ModelConfig(spec.make_layout(d, scratch), n_layers=2, n_heads=1, attention_dir=spec.attention_dir,
                      readout=spec.readout, dtype=str(dtype).removeprefix("torch."), init="zeros")
    return spec, cfg, beta


def weights(name: str, d: int, beta: float | None = None, *, dtype: torch.dtype = torch.float64,
            scratch=None, into: HookedDisentangledTransformer | None = None) -> tuple:
    """:func:`build`'s weights without a model: ``(cfg, [A (1, D_l, D_l) per layer], W_U (D_L, d))``
    (``into``: a zero model of that config to write them into instead)."""
    spec, cfg, beta = _config(name, d, beta, dtype, scratch)
    stream = Stream(cfg.layout, cfg.heads) if into is None else into.stream
    As = ([torch.zeros(1, w, w, dtype=dtype) for w in cfg.widths[:-1]] if into is None
          else [b.attn.A.data for b in into.blocks])
    W_U = torch.zeros(cfg.widths[-1], cfg.d, dtype=dtype) if into is None else into.unembed.W_U.data
    for (layer, query, key, kind), scale in ([(c, 1.0) for c in spec.cells]
                                             + scratch_guard(spec, cfg.layout.scratch_vector)):
        view = stream.split(As[layer][0], layer)[(query, key)]
        view += beta * scale * cell_template(kind, *view.shape, dtype=dtype)
    for block, sign in spec.read_terms:
        W_U[stream.slice(block, cfg.n_layers)] = sign * torch.eye(cfg.d, dtype=dtype)
    return cfg, As, W_U


def build(name: str, d: int, beta: float | None = None, *, dtype: torch.dtype = torch.float64,
          scratch=None, max_memory: int | str | None = None) -> HookedDisentangledTransformer:
    """The model of construction ``name`` at size ``d``, every cell times ``beta``.

    ``beta`` defaults to 100 (errors 1e-20 or less for the working forms at d <= 16; see
    ``ConstructionSpec.beta_exact``); ``scratch`` is the vector ``s`` (length d) of scratch layouts.
    Weights that would not fit ``max_memory`` (default: the memory left) are refused before they
    are allocated.
    """
    cfg = _config(name, d, beta, dtype, scratch)[1]
    memory.check(memory.model_estimate(cfg, f"construction {name!r} at d={d}"), max_memory)
    model = HookedDisentangledTransformer(cfg)
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


def verify(model: HookedDisentangledTransformer, n: int = 256, seed: int = 0,
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


#: Sizes and β values :func:`register` checks a new construction at (the smallest β that works).
REGISTER_DS = (3, 5, 10)
REGISTER_BETAS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
REGISTER_TOL = 1e-6


def _check_cells(cells, layout: str, attention_dir: str, readout: str, read: str) -> tuple[Cell, ...]:
    """Cells in the vocabulary, on blocks of a 2-layer one-head stream of this layout."""
    if layout not in ("plain", "scratch"):
        raise ValueError(f"layout must be 'plain' ([P; Y_P]) or 'scratch' ([P; Y_P; S]), got {layout!r}")
    if attention_dir not in ("causal", "bidirectional"):
        raise ValueError(f"attention_dir must be 'causal' or 'bidirectional', got {attention_dir!r}")
    probe = Layout.scratch(3) if layout == "scratch" else Layout.plain(3)
    if readout not in probe.names:
        raise ValueError(f"readout must be a segment of the {layout} layout {probe.names}, got {readout!r}")
    stream = HookedDisentangledTransformer(ModelConfig(probe, n_layers=2, n_heads=1)).stream
    out = []
    for cell in cells:
        if not (isinstance(cell, (tuple, list)) and len(cell) == 4):
            raise ValueError(f"cells must be (layer, query block, key block, template), got {cell!r}")
        layer, query, key, kind = cell
        if layer not in (0, 1):
            raise ValueError(f"cell {cell!r}: layer must be 0 or 1 (blocks.0, blocks.1)")
        for block in (query, key):
            if block not in stream.labels(layer):
                raise ValueError(f"cell {cell!r}: block {block!r} is not in the stream read by "
                                 f"blocks.{layer} (known: {stream.labels(layer)})")
        if kind not in TEMPLATES:
            raise ValueError(f"cell {cell!r}: template must be one of {TEMPLATES}")
        out.append((layer, query, key, kind))
    if not out:
        raise ValueError("cells must list at least one cell")
    for block, _ in parse_read(read):
        if block not in stream.labels(2):
            raise ValueError(f"read block {block!r} is not in the final stream (known: {stream.labels(2)})")
    return tuple(out)


def register(name: str, cells, *, layout: str = "plain", attention_dir: str = "bidirectional",
             readout: str | None = None, read: str = "L2.x", description: str = "",
             beta: float | None = None, replace: bool = False) -> ConstructionSpec:
    """Add a working construction to the registry, after checking that it solves the task.

    ``cells``: ``(layer, query block, key block, template)`` in the vocabulary above (layer 0 or 1
    of a two-layer, one-head model); ``layout``: ``"plain"`` or ``"scratch"``; ``readout``: the
    segment read (default ``"S"`` on scratch layouts, else ``"P"``); ``read``: the blocks ``W_U``
    copies, signed (``"L2.x - L1.x"``). :func:`verify` must find a max error below 1e-6 at every
    ``d`` in ``REGISTER_DS`` at ``beta`` (or, when ``None``, at the smallest of ``REGISTER_BETAS``
    that works, stored as ``beta_exact``); otherwise ``ValueError``. Names are unique unless
    ``replace``. The construction then works everywhere a registry name does (``build``,
    ``invperm construct``, ``analysis.mechanism``).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be an identifier-like string, got {name!r}")
    if name in REGISTRY and not replace:
        raise ValueError(f"construction {name!r} is already registered (pass replace=True)")
    readout = readout or ("S" if layout == "scratch" else "P")
    spec = ConstructionSpec(name, description or name, attention_dir, layout, readout, read, True,
                            _check_cells(cells, layout, attention_dir, readout, read))
    betas = REGISTER_BETAS if beta is None else (beta,)
    errors = {}
    for b in betas:
        errors[b] = max(_max_error(spec, d, b) for d in REGISTER_DS)
        if errors[b] < REGISTER_TOL:
            spec = ConstructionSpec(**{**vars(spec), "beta_exact": b})
            REGISTRY[name] = spec
            return spec
    worst = ", ".join(f"beta {b:g}: {e:.2g}" for b, e in errors.items())
    raise ValueError(f"construction {name!r} does not solve the task to {REGISTER_TOL:g} at every d in "
                     f"{REGISTER_DS} (max error {worst})")


def _max_error(spec: ConstructionSpec, d: int, beta: float) -> float:
    REGISTRY[spec.name], old = spec, REGISTRY.get(spec.name)
    try:
        return verify(build(spec.name, d, beta), n=256, seed=0).max_error
    finally:
        if old is None:
            del REGISTRY[spec.name]
        else:
            REGISTRY[spec.name] = old
