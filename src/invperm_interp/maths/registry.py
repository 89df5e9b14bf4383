"""The registry of analytic constructions: the note's Theorems 2 and 3 and Appendix B, their
corrected forms and the forms trained models learn, each as data (docs/design.md section 6).

A ``ConstructionSpec``'s ``cells`` list the nonzero cells of the attention matrices as typed
:class:`~invperm_interp.maths.cells.Cell` values ``(layer, head, query block, key block,
template)``, on any number of layers and heads (the note's one-head forms are written
``(layer, query, key, template)``, on head 0); ``layer`` is the module index (``blocks.{layer}``; the
note's "layer 1" is ``0``); templates are ``"I"`` (identity), ``"J"`` (anti-diagonal) and ``"1"`` (all
ones), each with an optional ``-``, times ``beta``. :mod:`.constructions` builds them into models.
Beside the written forms, the registry loads those discovery registered from the data file
``discovered.json`` (:func:`load_discovered`).
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..config import AttentionDir
from ..stream import BlockName
from ..task import Layout
from .cells import Cell

CELL_LABELS = ("I", "J", "1", "-I", "-J", "-1")  # what a registered cell may hold


@dataclass(frozen=True)
class Wiring:
    """What a construction's cells run in, apart from the cells: the ``layout`` (``"plain"``:
    ``[P; Y_P]``, ``"scratch"``: ``[P; Y_P; S]`` with d scratch rows), the attention, the segment
    read out (``None``: ``"S"`` on a scratch layout, else ``"P"``) and the blocks of the final
    stream ``W_U`` copies, signed (``"L2.x - L1.x"``)."""

    layout: str = "plain"
    attention_dir: AttentionDir = "bidirectional"
    readout: str | None = None
    read: str = "L2.x"

    @property
    def segment(self) -> str:
        """The segment read out, the default filled in."""
        return self.readout or ("S" if self.layout == "scratch" else "P")


PLAIN = Wiring()  # [P; Y_P], bidirectional, W_U copies L2.x into the P rows


@dataclass(frozen=True)
class ConstructionSpec:
    """One row of docs/design.md section 6's table.

    ``beta_exact`` is the smallest β, in steps of 5, at which the float64 max error against ``Y``
    is below 1e-6 (``constructions.exact_error``: random samples, and the identity and reversal
    permutations with ``Y`` all zeros, all ones or random) at every d from ``min_d`` to ``max_d``,
    each of them checked by the tests; ``None`` for the printed forms, which never get there.
    Beyond ``max_d`` nothing is claimed: the margins shrink with d, so a larger d may need a
    larger β. The worst margin sets it: ``β`` for one-hot lookups, ``β/4`` for ``two_block`` at
    d = 2, ``β/3`` for ``theorem3_two_block`` at d = 1 (their keys hold averages of one-hots),
    ``β/(d - 1)`` for ``theorem3_complement`` and about ``β/d`` for the superposed forms, at
    ``max_d`` (their keys hold complements).
    """

    name: str
    description: str
    attention_dir: AttentionDir
    layout: str  # "plain": [P; Y_P]; "scratch": [P; Y_P; S] with d scratch rows
    readout: str  # segment whose rows are read out
    read_block: str  # block(s) of the final stream that W_U copies: "L2.x" or "L2.x - L1.x"
    works: bool  # False for the note's printed forms
    cells: tuple[Cell, ...]
    beta_exact: float | None = None
    min_d: int = 1  # the smallest d it works at (a complement over the other P rows needs one)
    max_d: int = 16  # the largest d that beta_exact is verified at
    #: where a discovered construction came from: ``(("runs", …), ("shapes", …))`` (empty for the
    #: written forms)
    provenance: tuple = ()

    @property
    def n_layers(self) -> int:
        """Layers its cells and block names span, at least two (one that copies, one that reads)."""
        return len(self.heads)

    @property
    def heads(self) -> tuple[int, ...]:
        """Heads per layer, its shape: per layer the most its cells sit on or its block names copy
        from (a layer named by head, ``L2h1.x``, has two heads at least), one where none."""
        need: dict[int, int] = {}
        blocks = [b for c in self.cells for b in (c.query, c.key)]
        blocks += [b for b, _ in parse_read(self.read_block)]
        for cell in self.cells:
            need[cell.layer] = max(need.get(cell.layer, 1), cell.head + 1)
        for block in blocks:
            for layer, head in _path(block):
                need[layer - 1] = max(need.get(layer - 1, 1), 1 if head is None else max(2, head + 1))
        return tuple(need.get(layer, 1) for layer in range(max(2, 1 + max(need, default=0))))

    @property
    def read_terms(self) -> tuple[tuple[str, float], ...]:
        """``read_block`` as ``((block, sign), ...)``: ``"L2.x - L1.x"`` → ``(("L2.x", 1), ("L1.x", -1))``."""
        return parse_read(self.read_block)

    def __post_init__(self):
        object.__setattr__(self, "cells", tuple(Cell.of(c) for c in self.cells))

    def make_layout(self, d: int, scratch=None) -> Layout:
        if self.layout == "scratch":
            return Layout.scratch(d, scratch=scratch)
        if scratch is not None:
            raise ValueError(f"scratch is only for scratch layouts; {self.name!r} reads [P; Y_P]")
        return Layout.plain(d)


def _path(block: str) -> tuple[tuple[int, int | None], ...]:
    """The copies a block name's path steps through, ``((layer, head), …)``; none for a name that is
    not a block (the registry's checks name it)."""
    try:
        return BlockName.parse(block).path
    except ValueError:
        return ()


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


# Shared by the two superposed forms: Y_P row j averages the P rows but its own (the -1 on x keeps
# it off the binary Y_P rows), and scratch row i's complement lookup, from its position and from
# its copy of itself.
_Y_COMPLEMENT = [(0, "pos.Y", "pos.P", "-I"), (0, "pos.Y", "pos.P", "1"), (0, "pos.Y", "x", "-1")]
_S_COMPLEMENT_LOOKUPS = [(1, "pos.S", "L1.x", "-I"), (1, "pos.S", "pos.Y", "1"),
                         (1, "L1.pos.S", "L1.x", "-I"), (1, "L1.pos.S", "pos.Y", "1")]

#: Layer 1's content-mass guard: the query row's content lifts the P keys, lowers the Y_P keys and
#: lowers keys by their own content (a scratch row's content is 0: its queries are untouched).
CONTENT_MASS_GUARD = tuple(map(Cell.of, ((0, "x", "pos.P", "1"), (0, "x", "pos.Y", "-1"),
                                          (0, "x", "x", "-1"))))

REGISTRY: dict[str, ConstructionSpec] = {s.name: s for s in (
    # Theorem 2 (Appendix C.2) as printed: L1 gives row-reversed P, L2 then looks up Y_P rows by
    # J·(row-reversed P); that is Y only when (JP)² = I.
    ConstructionSpec("theorem2_as_printed", "Theorem 2 as printed (J, J): fails unless (JP)^2 = I",
        "bidirectional", "plain", "P", "L2.x", False,
        [(0, "pos.P", "pos.P", "J"), (1, "L1.x", "pos.Y", "J")]),
    # P row i attends to the P row holding e_i (row perm⁻¹(i)); -1 keeps binary Y_P rows, which
    # also match e_i by content, from tying with it. L2 fetches Y_P row perm⁻¹(i) = Y_i.
    ConstructionSpec("theorem2", "Theorem 2 corrected: find the P row holding e_i, fetch its Y_P row",
        "bidirectional", "plain", "P", "L2.x", True,
        [(0, "pos.P", "x", "I"), (0, "pos.P", "pos.Y", "-1"), (1, "L1.pos.P", "pos.Y", "I")], 20),
    # What gradient descent finds (docs/design.md section 6): Y_P row j fetches P row j = e_perm(j),
    # then P row i looks up by content the Y_P row whose fetched P row is e_i.
    ConstructionSpec("two_block", "two-block variant: Y_P rows fetch their P row; P rows look them up",
        "bidirectional", "plain", "P", "L2.x", True,
        [(0, "pos.Y", "pos.P", "I"), (1, "pos.P", "L1.x", "I")], 60),
    # Appendix B's learned weights as printed: the L2 content lookup ties with Y_P rows.
    ConstructionSpec("appendix_b_as_printed", "Appendix B as printed: L2 lookup ties with binary Y_P rows",
        "bidirectional", "plain", "P", "L2.L1.x", False,
        [(0, "pos.P", "pos.Y", "I"), (1, "pos.P", "x", "I")]),
    # P row i copies Y_P row i; L2 moves it to the row perm(i) (its content lookup, with -1).
    ConstructionSpec("appendix_b", "Appendix B corrected: P rows copy Y_P rows, then look up by content",
        "bidirectional", "plain", "P", "L2.L1.x", True,
        [(0, "pos.P", "pos.Y", "I"), (1, "pos.P", "x", "I"), (1, "pos.P", "pos.Y", "-1")], 20),
    ConstructionSpec("theorem3_as_printed", "Theorem 3 as printed (J, J): fails unless (JP)^2 = I",
        "causal", "scratch", "S", "L2.x", False,
        [(0, "pos.S", "pos.P", "J"), (1, "L1.x", "pos.Y", "J")]),
    # Theorem 2's corrected lookup run from the scratch rows, which see every P and Y_P row.
    ConstructionSpec("theorem3", "Theorem 3 corrected: scratch rows find e_i in P, fetch the Y_P row",
        "causal", "scratch", "S", "L2.x", True,
        [(0, "pos.S", "x", "I"), (0, "pos.S", "pos.Y", "-1"), (1, "L1.pos.P", "pos.Y", "I")], 20),
    # -1 at (pos.S, pos.P): under the mask, P row 0 sees only itself, so its L1.x is e_perm(0).
    ConstructionSpec("theorem3_two_block", "Theorem 3, two-block variant: Y_P rows fetch their P row, S rows "
        "look them up",
        "causal", "scratch", "S", "L2.x", True,
        [(0, "pos.Y", "pos.P", "I"), (1, "pos.S", "L1.x", "I"), (1, "pos.S", "pos.P", "-1")], 45),
    # theorem3_two_block as trained scratch models run it (assets/census.md: the four-cell runs).
    # S row i scores a key by how much of its L1.x lies off column i (I - 1): the Y_P row whose
    # fetched P row is e_i scores 0, every other Y_P row -β. The guard lifts the Y_P keys instead of
    # lowering P row 0: queries on the scratch row's own L1.x (an average of the rows before it,
    # mass m ≥ 1/3) give +βm to keys that are Y_P rows or whose L1.pos.P has mass (P and Y_P rows).
    ConstructionSpec("theorem3_two_block_mass", "Theorem 3, two-block with a mass guard (learned): S rows "
        "look up the Y_P row whose fetched P row is e_i and nothing else; Y_P keys lifted by the "
        "scratch row's own L1.x mass",
        "causal", "scratch", "S", "L2.x", True,
        [(0, "pos.Y", "pos.P", "I"), (1, "pos.S", "L1.x", "I"), (1, "pos.S", "L1.x", "-1"),
         (1, "L1.x", "pos.Y", "1"), (1, "L1.x", "L1.pos.P", "1")], 45),
    # What the causal scratch model learns (assets/census.md): the complement of theorem3_two_block.
    # Y_P row j attends every P row but its own ((1 - I) at (pos.Y, pos.P): -I and 1 in one cell),
    # so its L1.x is (1 - e_perm(j)) / (d - 1); S row i looks, among the Y_P rows (+1), for the one
    # whose L1.x_i is 0, i.e. perm(j) = i. The margin is β/(d - 1): it needs a larger β.
    ConstructionSpec("theorem3_complement",
        "Theorem 3, complement two-block (learned): Y_P rows average every "
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
    ConstructionSpec("theorem3_superposed", "Theorem 3, superposed (learned): the P-row lookup and the "
        "complement two-block in one circuit, scratch rows also attending to themselves",
        "causal", "scratch", "S", "L2.x", True,
        [(0, "pos.S", "x", "I"), (0, "pos.S", "pos.S", "I"), *_Y_COMPLEMENT,
         (1, "L1.pos.P", "pos.Y", "I"), *_S_COMPLEMENT_LOOKUPS], 130),
    # The same three lookups, each complemented (a learned form: assets/census.md). Layer 1: S row i
    # attends to every P row but the one holding e_i (1 at (pos.S, pos.P), -I at (pos.S, x)) and
    # to itself, so its L1.pos.P is (1 - e_{perm⁻¹(i)})/d; the Y_P rows as in theorem3_superposed.
    # Layer 2: 1 - I at (L1.pos.P, pos.Y) finds the Y_P row at the missing position, and the
    # complement lookup runs from pos.S and L1.pos.S. At d = 1 there is no other P row.
    ConstructionSpec("theorem3_superposed_complement", "Theorem 3, superposed complement (learned): as "
        "theorem3_superposed with the P-row lookup complemented too",
        "causal", "scratch", "S", "L2.x", True,
        [(0, "pos.S", "x", "-I"), (0, "pos.S", "pos.P", "1"), (0, "pos.S", "pos.S", "I"),
         *_Y_COMPLEMENT, (1, "L1.pos.P", "pos.Y", "-I"), (1, "L1.pos.P", "pos.Y", "1"),
         *_S_COMPLEMENT_LOOKUPS], 125, min_d=2),
    # The two superposed forms as most trained scratch models run them (assets/discovery.md): plus a
    # layer-1 content-mass guard. A query row's content lifts the P keys (1 at (x, pos.P)), lowers
    # the Y_P keys (-1 at (x, pos.Y)) and lowers keys by their own content (-1 at (x, x)). It changes
    # no lookup, so it stays exact as β grows: a scratch row's content is 0, so its queries get
    # nothing; a P row's query (mass 1) lifts every earlier P key by β and lowers it by β; a Y_P
    # row's query of mass m leaves the P keys and lowers every Y_P key, widening the margin by which
    # Y_P rows attend to P rows. Its weight is what resampling layer 1's query rows breaks in the
    # unguarded forms (assets/scrubbing.md). β as its base's: the guard moves no margin's minimum.
    ConstructionSpec("theorem3_superposed_guarded", "Theorem 3, superposed with a content-mass guard "
        "(learned): theorem3_superposed plus layer-1 queries by content that lift P keys and lower "
        "Y_P keys",
        "causal", "scratch", "S", "L2.x", True,
        [(0, "pos.S", "x", "I"), (0, "pos.S", "pos.S", "I"), *_Y_COMPLEMENT, *CONTENT_MASS_GUARD,
         (1, "L1.pos.P", "pos.Y", "I"), *_S_COMPLEMENT_LOOKUPS], 130),
    ConstructionSpec("theorem3_superposed_complement_guarded", "Theorem 3, superposed complement with "
        "a content-mass guard (learned): theorem3_superposed_complement plus the same guard",
        "causal", "scratch", "S", "L2.x", True,
        [(0, "pos.S", "x", "-I"), (0, "pos.S", "pos.P", "1"), (0, "pos.S", "pos.S", "I"),
         *_Y_COMPLEMENT, *CONTENT_MASS_GUARD, (1, "L1.pos.P", "pos.Y", "-I"),
         (1, "L1.pos.P", "pos.Y", "1"), *_S_COMPLEMENT_LOOKUPS], 125, min_d=2),
)}

#: The data file of the constructions discovery registered (``invperm discover DIR --register``):
#: reviewed like code, loaded here, each entry checked against the digest written with it.
DISCOVERED = Path(__file__).with_name("discovered.json")


def entry_digest(entry: dict) -> str:
    """The sha256 of a discovered entry's content (every key but ``verified``), as written."""
    content = {k: v for k, v in entry.items() if k != "verified"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def spec_of(entry: dict) -> ConstructionSpec:
    """A discovered entry as a :class:`ConstructionSpec` (its cells ``[layer, head, query, key,
    template]``)."""
    return ConstructionSpec(entry["name"], entry["description"], entry["attention_dir"],
                            entry["layout"], entry["readout"], entry["read"], True,
                            tuple(tuple(c) for c in entry["cells"]), entry["beta_exact"],
                            entry["min_d"], entry["max_d"],
                            tuple((k, tuple(v)) for k, v in sorted(entry["provenance"].items())))


def load_discovered(path: Path = DISCOVERED) -> dict[str, ConstructionSpec]:
    """The entries of ``path`` whose digest matches what ``--register`` verified; an entry edited
    since (or a name another construction holds) is left out with a warning naming it, never
    loaded silently. A missing file holds none."""
    if not Path(path).is_file():
        return {}
    out = {}
    for entry in json.loads(Path(path).read_text()):
        name = entry.get("name")
        if entry.get("verified") != entry_digest(entry):
            warnings.warn(f"{path}: construction {name!r} is not loaded: its content differs from "
                          f"what was verified exact (edited by hand?); run `invperm discover DIR "
                          f"--register` again", stacklevel=2)
        elif name in out or (name in REGISTRY and REGISTRY[name] != spec_of(entry)):
            warnings.warn(f"{path}: construction {name!r} is not loaded: the name is taken",
                          stacklevel=2)
        else:  # new, or the same construction loaded already (the file read again)
            out[name] = spec_of(entry)
    return out


REGISTRY.update(load_discovered())

#: The registered forms that carry the layer-1 content-mass guard (:data:`CONTENT_MASS_GUARD`).
GUARDED: tuple[str, ...] = tuple(name for name, spec in REGISTRY.items()
                                 if set(CONTENT_MASS_GUARD) <= set(spec.cells))


def names() -> list[str]:
    """Names of all constructions, in registry order."""
    return list(REGISTRY)


def discovered_names() -> set[str]:
    """The constructions discovery registered (an entry with provenance: ``DISCOVERED``)."""
    return {name for name, spec in REGISTRY.items() if spec.provenance}


def get(name: str) -> ConstructionSpec:
    if name not in REGISTRY:
        raise ValueError(f"construction name must be one of {names()}, got {name!r}")
    return REGISTRY[name]
