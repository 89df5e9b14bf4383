"""Axis scales for the SVG figures (``viz.svg``, ``viz.charts``): linear, log and symmetric-log,
each mapping data to a fraction of the axis and choosing labelled ticks as matplotlib would (steps of
1, 2, 2.5 or 5 × 10ᵏ; powers of ten on a log axis, labelled in Unicode: 10⁻³)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import check_choice

KINDS = ("linear", "log", "symlog")
_LINEAR = 1 / (1 - 1 / 10)  # decades a symlog axis gives its linear part (matplotlib's linscale 1)
#: Digits, signs and the decimal point as superscripts (``viz.ticks`` writes matplotlib's labels so).
SUPERSCRIPT = str.maketrans("0123456789-−.", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁻·")


def power_label(exponent: int, mantissa: float = 1.0) -> str:
    """``10ᵏ`` in Unicode (``2×10⁻³`` with a mantissa), as matplotlib labels a log axis."""
    power = "10" + str(exponent).translate(SUPERSCRIPT)
    return power if mantissa == 1 else f"{mantissa:g}×{power}"


def nice_ticks(lo: float, hi: float, most: int = 9) -> list[float]:
    """At most ``most`` evenly spaced round values covering ``[lo, hi]`` (steps 1, 2, 2.5, 5 × 10ᵏ),
    only those inside it."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(most - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    first = math.ceil(lo / step - 1e-9)
    ticks = [(first + i) * step for i in range(int((hi - lo) / step + 1e-9) + 2)]
    return [0.0 if abs(t) < step * 1e-9 else t for t in ticks if lo - step * 1e-9 <= t <= hi + step * 1e-9]


def number_label(value: float, step: float) -> str:
    """``value`` with as many decimals as the tick ``step`` needs; minus as U+2212."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    if step > 0 and abs(round(step / 10 ** -decimals) * 10 ** -decimals - step) > step * 1e-6:
        decimals += 1  # 2.5 × 10ᵏ needs one more
    text = f"{value:.{decimals}f}"
    return text.replace("-", "−")


@dataclass(frozen=True)
class Scale:
    """An axis from ``lo`` to ``hi``: ``kind`` "linear", "log" (``lo`` > 0) or "symlog" (linear
    within ±``linthresh``, logarithmic beyond: matplotlib's symlog with base 10, linscale 1)."""

    lo: float
    hi: float
    kind: str = "linear"
    linthresh: float = 1.0

    def __post_init__(self):
        check_choice("kind", self.kind, KINDS)
        if self.kind == "log" and self.lo <= 0:
            raise ValueError(f"a log axis needs lo > 0, got {self.lo}")

    def _t(self, v: np.ndarray) -> np.ndarray:
        if self.kind == "log":
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)
        if self.kind == "symlog":  # in decades; the linear part is 10/9 of one, as matplotlib's
            a = np.abs(v) / self.linthresh
            return np.sign(v) * np.where(a > 1, _LINEAR + np.log10(np.maximum(a, 1)), a * _LINEAR)
        return v

    def _inverse(self, t: np.ndarray) -> np.ndarray:
        if self.kind == "log":
            return 10.0 ** t
        if self.kind == "symlog":
            a = np.abs(t)
            return np.sign(t) * self.linthresh * np.where(a > _LINEAR, 10.0 ** (a - _LINEAR),
                                                          a / _LINEAR)
        return t

    def fraction(self, values) -> np.ndarray:
        """Where ``values`` lie on the axis: 0 at ``lo``, 1 at ``hi`` (NaN where a log axis cannot
        show them)."""
        v = np.asarray(values, dtype=np.float64)
        lo, hi = self._t(np.array(self.lo)), self._t(np.array(self.hi))
        span = float(hi - lo) or 1.0
        return (self._t(v) - lo) / span

    def ticks(self) -> list[tuple[float, str]]:
        """Labelled major ticks inside the axis: ``(value, label)``."""
        if self.kind == "linear":
            ticks = nice_ticks(self.lo, self.hi)
            step = ticks[1] - ticks[0] if len(ticks) > 1 else abs(ticks[0]) if ticks else 1.0
            return [(t, number_label(t, step or 1.0)) for t in ticks]
        if self.kind == "log":
            return self._log_ticks(self.lo, self.hi)
        low = math.floor(math.log10(self.linthresh) + 1e-9)  # symlog: 0, ±10ᵏ for 10ᵏ ≥ linthresh
        ticks = [(0.0, "0")] if self.lo <= 0 <= self.hi else []
        ticks += self._log_ticks(10.0 ** low, self.hi)
        ticks += [(-v, "−" + label) for v, label in self._log_ticks(10.0 ** low, -self.lo)]
        return sorted(ticks)

    @staticmethod
    def _log_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
        """Powers of ten in ``[lo, hi]`` (every second or third when there are many); with fewer
        than two of them, 2× and 5× too."""
        if hi <= 0 or lo <= 0 or hi < lo:
            return []
        first, last = math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9)
        every = max(1, math.ceil((last - first + 1) / 8))
        ticks = [(10.0 ** k, power_label(k)) for k in range(first, last + 1) if (k - first) % every == 0]
        if len(ticks) < 2:
            ticks = [(m * 10.0 ** k, power_label(k, m)) for k in range(first - 1, last + 1)
                     for m in (1, 2, 5) if lo * (1 - 1e-9) <= m * 10.0 ** k <= hi * (1 + 1e-9)]
        return ticks

    def minor(self) -> list[float]:
        """Unlabelled ticks: 2–9 × 10ᵏ on a log axis, none otherwise."""
        if self.kind != "log":
            return []
        first, last = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
        if last - first > 8:
            return []
        return [m * 10.0 ** k for k in range(first, last) for m in range(2, 10)
                if self.lo <= m * 10.0 ** k <= self.hi]


def padded(lo: float, hi: float, kind: str = "linear", linthresh: float = 1.0,
           margin: float = 0.05) -> Scale:
    """The axis ``kind`` over ``[lo, hi]`` widened by ``margin`` of its span on each side, as
    matplotlib's autoscale does (in the axis's own coordinates: log space on a log axis); a single
    value gets a span of its own."""
    scale = Scale(lo, hi, kind, linthresh)
    a, b = (float(t) for t in scale._t(np.array([lo, hi], dtype=np.float64)))
    if a == b:
        a, b = a - 0.5, b + 0.5
    pad = (b - a) * margin
    low, high = (float(v) for v in scale._inverse(np.array([a - pad, b + pad])))
    return Scale(low, high, kind, linthresh)
