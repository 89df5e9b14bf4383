"""The inverse-permutation task: input layouts, sampled batches and validated user input.

The note (Definition 1): row ``i`` of a permutation matrix ``P`` is ``e_{perm[i]}``; ``Y`` is a
``d × d`` target; the model sees ``Y_P = P Y`` and must output ``Y = Pᵀ Y_P``. The input ``X`` stacks
segments of rows: ``[P; Y_P]`` (Section 2), ``[P; Y_P; S]`` (Theorem 3) or any other order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .errors import ConfigError

#: Segment kinds: the permutation, the permuted targets, scratch rows (the vector ``s``), zero rows.
SEGMENT_KINDS = ("P", "Y", "S", "0")


def _check_d(d) -> None:
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise ConfigError("d", f"d must be an integer >= 1, got {d!r}")


#: The layouts by name (``Layout.named``) and the segment each reads out unless told otherwise:
#: ``scratch`` its S rows, which come after every input row (reading P under a causal mask sits on
#: the floor); ``code`` the note's code's first zero rows.
DEFAULT_READOUT = {"plain": "P", "scratch": "S", "code": "pad0"}


@dataclass(frozen=True)
class Segment:
    """A run of consecutive input rows with one role.

    ``name`` labels the rows' position block (``pos.{name}``) and is what ``readout`` refers to.
    """

    name: str
    kind: str  # one of SEGMENT_KINDS
    n_rows: int


@dataclass(frozen=True)
class Layout:
    """The input's segments in order, for a task of size ``d``.

    ``Layout.plain(d)`` is the note's ``[P; Y_P]``; ``Layout.scratch(d, k)`` is ``[P; Y_P; S]``;
    ``Layout.of(d, "0", "P", "Y", "0")`` is the note's code layout ``[0; P; Y_P; 0]``.
    """

    d: int
    segments: tuple[Segment, ...]
    scratch_vector: tuple[float, ...] = field(default=())  # the row ``s`` (length d) of S segments

    def __post_init__(self) -> None:
        _check_d(self.d)
        if not self.segments:
            raise ConfigError("segments", "segments must name at least one segment")
        names = [s.name for s in self.segments]
        if len(set(names)) != len(names):
            raise ConfigError("segments", f"segments must have distinct names, got {names}")
        for seg in self.segments:
            if seg.kind not in SEGMENT_KINDS:
                raise ConfigError("segments", f"segment kind must be one of {SEGMENT_KINDS}, "
                                              f"got {seg.kind!r}")
            if not isinstance(seg.n_rows, int) or isinstance(seg.n_rows, bool) or seg.n_rows < 1:
                raise ConfigError(
                    "segments", f"segment {seg.name!r} must have an integer n_rows >= 1, got {seg.n_rows!r}"
                )
            if seg.kind in ("P", "Y") and seg.n_rows != self.d:
                raise ConfigError(
                    "segments", f"segment {seg.name!r} of kind {seg.kind} must have d={self.d} rows, "
                    f"got {seg.n_rows}"
                )
        for kind in ("P", "Y"):
            if sum(s.kind == kind for s in self.segments) != 1:
                raise ConfigError("segments", f"a layout needs exactly one {kind} segment, got {names}")
        has_scratch = any(s.kind == "S" for s in self.segments)
        if has_scratch and len(self.scratch_vector) != self.d:
            raise ConfigError(
                "scratch", f"scratch must be a vector of length d={self.d}, "
                f"got length {len(self.scratch_vector)}"
            )
        if not has_scratch and self.scratch_vector:
            raise ConfigError("scratch", "scratch was given but the layout has no S segment")
        if not all(math.isfinite(v) for v in self.scratch_vector):
            raise ConfigError("scratch", f"scratch must be finite, got {self.scratch_vector}")

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def plain(cls, d: int) -> Layout:
        """``[P; Y_P]`` (T = 2d), the note's Section 2 input."""
        return cls.of(d, "P", "Y")

    @classmethod
    def scratch(cls, d: int, n_scratch: int | None = None, scratch=None) -> Layout:
        """``[P; Y_P; S]`` with ``n_scratch`` rows (default d), each the vector ``scratch`` (zeros)."""
        _check_d(d)  # before n_scratch, which defaults to d
        if n_scratch is None:
            n_scratch = d
        if not isinstance(n_scratch, int) or isinstance(n_scratch, bool) or n_scratch < 1:
            raise ConfigError("n_scratch", f"n_scratch must be an integer >= 1, got {n_scratch!r}")
        return cls.of(d, "P", "Y", f"S:{n_scratch}", scratch=scratch)

    @classmethod
    def named(cls, kind: str, d: int, n_scratch: int | None = None) -> Layout:
        """A layout by the name the command line and grid files use: ``plain`` ``[P; Y_P]``,
        ``scratch`` ``[P; Y_P; S]`` (``n_scratch`` rows), ``code`` the note's code's
        ``[0; P; Y_P; 0]`` (segments ``pad0, P, Y, pad1``). Its usual read-out:
        ``DEFAULT_READOUT[kind]``."""
        if kind not in DEFAULT_READOUT:
            raise ConfigError("layout", f"layout must be one of {tuple(DEFAULT_READOUT)}, got {kind!r}")
        if n_scratch is not None and kind != "scratch":
            raise ConfigError("n_scratch", f"n_scratch sets the scratch rows of layout 'scratch'; layout "
                             f"{kind!r} has none")
        if kind == "scratch":
            return cls.scratch(d, n_scratch)
        return cls.of(d, "0", "P", "Y", "0") if kind == "code" else cls.plain(d)

    @classmethod
    def of(cls, d: int, *specs: str, scratch=None) -> Layout:
        """Build a layout from segment specs ``"KIND"`` or ``"KIND:n_rows"`` (n_rows defaults to d).

        Repeated kinds are numbered (``"0", "0"`` become segments ``pad0``, ``pad1``); a single
        zero segment is named ``pad``.
        """
        _check_d(d)
        parsed = []
        for spec in specs:
            kind, _, n = str(spec).partition(":")
            if kind not in SEGMENT_KINDS:
                raise ConfigError("specs", f"segment spec must start with one of {SEGMENT_KINDS}, "
                                           f"got {spec!r}")
            try:
                n_rows = d if n == "" else int(n)
            except ValueError:
                raise ConfigError("specs", f"segment spec {spec!r}: n_rows must be an integer") from None
            if n_rows < 1:
                raise ConfigError("specs", f"segment spec {spec!r}: n_rows must be >= 1, got {n_rows}")
            parsed.append((kind, n_rows))
        counts = {k: sum(p[0] == k for p in parsed) for k in SEGMENT_KINDS}
        seen = dict.fromkeys(SEGMENT_KINDS, 0)
        segments = []
        for kind, n_rows in parsed:
            base = "pad" if kind == "0" else kind
            name = base if counts[kind] == 1 else f"{base}{seen[kind]}"
            seen[kind] += 1
            segments.append(Segment(name, kind, n_rows))
        if counts["S"] and scratch is None:
            scratch = [0.0] * d
        if isinstance(scratch, Tensor):
            scratch = scratch.detach().flatten().tolist()
        try:
            vector = tuple(float(v) for v in (scratch if scratch is not None else ()))
        except (TypeError, ValueError):  # complex, strings, a bare number: name the argument
            raise ConfigError("scratch", f"scratch must be a vector of d={d} real numbers, "
                                         f"got {scratch!r}") from None
        return cls(d, tuple(segments), vector)

    # -- geometry -----------------------------------------------------------------------------
    @property
    def T(self) -> int:
        """Sequence length (number of input rows)."""
        return sum(s.n_rows for s in self.segments)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.segments)

    def segment(self, name: str) -> Segment:
        for seg in self.segments:
            if seg.name == name:
                return seg
        raise ValueError(f"segment name must be one of {list(self.names)}, got {name!r}")

    def segment_of_kind(self, kind: str) -> Segment:
        return next(s for s in self.segments if s.kind == kind)

    def rows(self, name: str) -> slice:
        """The input rows of segment ``name``."""
        start = 0
        for seg in self.segments:
            if seg.name == name:
                return slice(start, start + seg.n_rows)
            start += seg.n_rows
        raise ValueError(f"segment name must be one of {list(self.names)}, got {name!r}")

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "d": self.d,
            "segments": [[s.name, s.kind, s.n_rows] for s in self.segments],
            "scratch": list(self.scratch_vector),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Layout:
        """The inverse of :meth:`to_dict`. Numbers are taken as they are: ``"d": 4.9`` or
        ``1e999`` is refused, not rounded."""
        try:
            segments = tuple(Segment(str(n), str(k), r) for n, k, r in data["segments"])
            d, scratch = data["d"], tuple(data.get("scratch", ()))
            _check_d(d)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError("layout dict must have 'd' (an integer), 'segments' ([name, kind, "
                             f"n_rows] lists) and optionally 'scratch' (numbers): {err}") from None
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scratch):
            raise ValueError(f"layout 'scratch' must be a list of numbers, got {list(scratch)}")
        return cls(d, segments, tuple(float(v) for v in scratch))

    def __str__(self) -> str:
        return "[" + "; ".join(f"{s.name}:{s.n_rows}" for s in self.segments) + f"] (d={self.d})"


@dataclass(frozen=True)
class Batch:
    """One batch of the task. ``X`` is what the model reads; the rest is ground truth.

    Shapes: ``X (B, T, d)``, ``P (B, d, d)``, ``Y (B, d, d)``, ``Y_P (B, d, d)``, ``perm (B, d)``
    with ``P[b, i] = e_{perm[b, i]}`` and ``Y_P = P @ Y``.
    """

    layout: Layout
    X: Float[Tensor, "batch pos d"]
    P: Float[Tensor, "batch d d"]
    Y: Float[Tensor, "batch d d"]
    Y_P: Float[Tensor, "batch d d"]
    perm: Int[Tensor, "batch d"]

    def __len__(self) -> int:
        return self.X.shape[0]

    def to(self, device=None, dtype=None) -> Batch:
        """The same batch on another device / float dtype (``perm`` stays integer)."""
        def cast(t):
            return t.to(device=device, dtype=dtype)

        return Batch(self.layout, cast(self.X), cast(self.P), cast(self.Y), cast(self.Y_P),
                     self.perm.to(device=device))

    def head(self, n: int) -> Batch:
        """The first ``n`` samples (views, not copies)."""
        return Batch(self.layout, self.X[:n], self.P[:n], self.Y[:n], self.Y_P[:n], self.perm[:n])


def mse(out: Tensor, Y: Tensor) -> Tensor:
    """The note's loss: squared error summed over the ``d`` columns, averaged over rows and samples.

    ``out`` and ``Y`` are ``(B, d, d)``; predicting 0.5 everywhere costs ``d/4``.
    """
    return ((out - Y.to(out)) ** 2).sum(-1).mean()


def answer(layout: Layout, X: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch d d"]:
    """The target ``Y = Pᵀ Y_P`` an input ``X (B, T, d)`` asks for, read off its ``P`` and ``Y_P``
    rows (any ``X`` of the layout's shape; for a valid input it is the ``Y`` it was made from)."""
    P = X[:, layout.rows(layout.segment_of_kind("P").name)]
    Y_P = X[:, layout.rows(layout.segment_of_kind("Y").name)]
    return P.transpose(-1, -2) @ Y_P


def _assemble_X(layout: Layout, P: Tensor, Y_P: Tensor) -> Tensor:
    """Stack the layout's segments: ``(B, d, d)`` inputs → ``X (B, T, d)``."""
    B, d = P.shape[0], layout.d
    parts = []
    for seg in layout.segments:
        if seg.kind == "P":
            parts.append(P)
        elif seg.kind == "Y":
            parts.append(Y_P)
        elif seg.kind == "S":
            s = torch.tensor(layout.scratch_vector, dtype=P.dtype, device=P.device)
            parts.append(s.expand(B, seg.n_rows, d))
        else:
            parts.append(P.new_zeros(B, seg.n_rows, d))
    return torch.cat(parts, dim=1)


def sample_batch(
    layout: Layout,
    batch_size: int,
    generator: torch.Generator | None = None,
    device=None,
    dtype: torch.dtype = torch.float32,
) -> Batch:
    """Draw ``batch_size`` uniform permutations and uniform binary ``Y`` directly on ``device``.

    Reproducible from ``generator`` (which must live on ``device``; it defaults to the global RNG).
    """
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a Layout, got {type(layout).__name__}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if generator is not None and device is None:
        device = generator.device
    d = layout.d
    # argsort of i.i.d. uniforms is a uniform permutation; one kernel for the whole batch.
    perm = torch.rand(batch_size, d, generator=generator, device=device).argsort(dim=1)  # (B, d)
    eye = torch.eye(d, dtype=dtype, device=device)
    P = eye[perm]  # (B, d, d): row i is e_{perm[i]}
    Y = torch.randint(0, 2, (batch_size, d, d), generator=generator, device=device).to(dtype)
    Y_P = Y[torch.arange(batch_size, device=device)[:, None], perm]  # = P @ Y, row i is Y[perm[i]]
    return Batch(layout, _assemble_X(layout, P, Y_P), P, Y, Y_P, perm)


def validate_permutation(P: Tensor, d: int, name: str = "P") -> Tensor:
    """Check ``P`` is a ``(B, d, d)`` stack of permutation matrices; return ``perm (B, d)``."""
    if not isinstance(P, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(P).__name__}")
    if P.dtype.is_complex:
        raise ValueError(f"{name} must be real, got dtype {P.dtype}")
    if P.ndim != 3 or P.shape[1:] != (d, d):
        raise ValueError(f"{name} must have shape (B, {d}, {d}), got {tuple(P.shape)}")
    binary = (P == 0) | (P == 1)
    if not bool(binary.all()):
        raise ValueError(f"{name} must contain only 0 and 1 (a permutation matrix)")
    if not (bool((P.sum(-1) == 1).all()) and bool((P.sum(-2) == 1).all())):
        raise ValueError(
            f"{name} must be a permutation matrix: every row and column needs exactly one 1"
        )
    return P.to(torch.int64).argmax(dim=-1)  # argmax has no bool kernel


def make_input(layout: Layout, P: Tensor, Y_P: Tensor, *, binary: bool = True) -> Batch:
    """A validated ``Batch`` from user-given ``P (B, d, d)`` and ``Y_P (B, d, d)`` (or unbatched).

    ``binary=True`` requires ``Y_P`` in ``{0, 1}`` as in the note; pass ``False`` for real targets.
    Integer or bool inputs are taken as float32; complex ones are refused.
    """
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a Layout, got {type(layout).__name__}")
    d = layout.d
    if isinstance(P, Tensor) and P.ndim == 2:
        P = P.unsqueeze(0)
    if isinstance(Y_P, Tensor) and Y_P.ndim == 2:
        Y_P = Y_P.unsqueeze(0)
    perm = validate_permutation(P, d)
    if not isinstance(Y_P, Tensor):
        raise ValueError(f"Y_P must be a torch.Tensor, got {type(Y_P).__name__}")
    if Y_P.dtype.is_complex:
        raise ValueError(f"Y_P must be real, got dtype {Y_P.dtype}")
    if Y_P.shape != P.shape:
        raise ValueError(f"Y_P must have shape {tuple(P.shape)} like P, got {tuple(Y_P.shape)}")
    dtype = Y_P.dtype if Y_P.dtype.is_floating_point else torch.float32
    Y_P = Y_P.to(dtype)
    if not bool(torch.isfinite(Y_P).all()):
        raise ValueError("Y_P must be finite (no NaN or inf)")
    if binary and not bool(((Y_P == 0) | (Y_P == 1)).all()):
        raise ValueError("Y_P must be binary (0/1) as in the note; pass binary=False for real values")
    P = P.to(dtype=dtype, device=Y_P.device)
    Y = P.transpose(-1, -2) @ Y_P  # Y = P^{-1} Y_P = Pᵀ Y_P
    return Batch(layout, _assemble_X(layout, P, Y_P), P, Y, Y_P, perm.to(Y_P.device))
