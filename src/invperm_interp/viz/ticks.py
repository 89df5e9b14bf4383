"""Log-axis tick labels written in Unicode ("10⁻³", "2×10⁻³") instead of mathtext.

Matplotlib's log and symlog axes label their ticks with ``LogFormatterSciNotation``, whose labels
are mathtext (``$\\mathdefault{10^{-3}}$``): every figure parses them again (a third of a report's
training-curve drawing time went to the parser), and in an SVG each becomes several text pieces.
:func:`unicode_log_labels` keeps the same formatter's choice of ticks and labels and writes each
label as plain text with superscript digits; a label it cannot write so stays mathtext.
"""

from __future__ import annotations

import re

from matplotlib.axis import Axis
from matplotlib.ticker import LogFormatterSciNotation

from .scales import SUPERSCRIPT

_MATHDEFAULT = re.compile(r"\$\\mathdefault\{(.*)\}\$")
_POWER = re.compile(r"\^\{([-−]?[0-9]+)\}|\^([0-9])")


def unicode_text(label: str) -> str:
    """``LogFormatterSciNotation``'s mathtext label as Unicode text: ``$\\mathdefault{-2\\times10^{-3}}$``
    → ``−2×10⁻³``; any other label as it is."""
    match = _MATHDEFAULT.fullmatch(label)
    if match is None:
        return label
    body = match.group(1).replace("\\times", "×")
    body = _POWER.sub(lambda m: (m.group(1) or m.group(2)).translate(SUPERSCRIPT), body)
    if "\\" in body or "{" in body or "^" in body:  # a construct written otherwise: leave it
        return label
    return body.replace("-", "−")


class UnicodeLogFormatter(LogFormatterSciNotation):
    """``LogFormatterSciNotation`` with Unicode labels (:func:`unicode_text`)."""

    def __call__(self, x, pos=None) -> str:
        return unicode_text(super().__call__(x, pos))


def unicode_log_labels(axis: Axis) -> None:
    """Replace ``axis``'s log-scale formatters (major and minor) by :class:`UnicodeLogFormatter`
    with the same settings; call it after ``set_yscale``/``set_xscale``."""
    for getter, setter in ((axis.get_major_formatter, axis.set_major_formatter),
                           (axis.get_minor_formatter, axis.set_minor_formatter)):
        old = getter()
        if type(old) is LogFormatterSciNotation:
            setter(UnicodeLogFormatter(base=old._base, labelOnlyBase=old.labelOnlyBase,
                                       minor_thresholds=old.minor_thresholds, linthresh=old._linthresh))
