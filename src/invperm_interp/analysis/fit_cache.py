"""The per-head fits a :class:`~invperm_interp.analysis.faithfulness.Tester` keeps for reuse,
bounded in bytes: a minimal-circuit search scores thousands of sets of cells and would otherwise
keep every fit."""

from __future__ import annotations

from collections import OrderedDict

#: A tester keeps per-head fits for reuse up to this many circuit variants' weights (least
#: recently used dropped first; every head's fit on all candidate cells, the ones a search reuses
#: most, take one): a search scoring thousands of sets of cells would otherwise keep them all.
FITS_KEPT_VARIANTS = 4


def fits_kept_bytes(cfg) -> int:
    """Bytes of fits one :class:`Tester` keeps: ``FITS_KEPT_VARIANTS`` times a variant's
    ``(M, gauge_fix(M))`` of every head, float64."""
    return FITS_KEPT_VARIANTS * 2 * 8 * sum(H * D * D for H, D in zip(cfg.heads, cfg.widths))


class FitCache(OrderedDict):
    """Per-head fits by key (``projection.project``'s ``fits``), at most ``limit`` bytes of
    tensors kept; the least recently used go first (the one just stored always stays)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.nbytes = limit, 0

    def __getitem__(self, key):
        self.move_to_end(key)
        return super().__getitem__(key)

    def __setitem__(self, key, value) -> None:
        if key in self:
            self.pop(key)
        super().__setitem__(key, value)
        self.nbytes += _nbytes(value)
        while self.nbytes > self.limit and len(self) > 1:
            self.pop(next(iter(self)))

    def pop(self, key, *default):
        if key not in self:
            return super().pop(key, *default)
        value = super().pop(key)
        self.nbytes -= _nbytes(value)
        return value


def _nbytes(value) -> int:
    return sum(t.nelement() * t.element_size() for t in value)
