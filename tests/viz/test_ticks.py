"""Log-axis tick labels in Unicode: the same ticks and labels as matplotlib's mathtext ones."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from invperm_interp.viz.ticks import UnicodeLogFormatter, unicode_log_labels, unicode_text  # noqa: E402


@pytest.mark.parametrize("mathtext,text", [
    (r"$\mathdefault{10^{-3}}$", "10⁻³"),
    (r"$\mathdefault{10^{2}}$", "10²"),
    (r"$\mathdefault{-10^{-12}}$", "−10⁻¹²"),
    (r"$\mathdefault{2\times10^{-3}}$", "2×10⁻³"),
    (r"$\mathdefault{0}$", "0"),
    (r"$\mathdefault{1}$", "1"),
    ("", ""),
    ("0.5", "0.5"),
    (r"$\mathdefault{\frac{1}{2}}$", r"$\mathdefault{\frac{1}{2}}$"),  # not a form it writes: kept
])
def test_unicode_text_writes_the_scinotation_forms(mathtext, text):
    assert unicode_text(mathtext) == text


def _labels(ax):
    ax.figure.canvas.draw()
    return [(t.get_position()[1], t.get_text()) for axis_ticks in
            (ax.yaxis.get_majorticklabels(), ax.yaxis.get_minorticklabels()) for t in axis_ticks
            if t.get_text()]


@pytest.mark.parametrize("scale,kw,ylim", [
    ("log", {}, (1e-5, 3.0)),
    ("log", {}, (0.02, 0.3)),  # under a decade: minor ticks labelled too
    ("log", {}, (1e-30, 1e30)),
    ("symlog", {"linthresh": 1e-3}, (-0.1, 5.0)),
    ("symlog", {"linthresh": 1e-4}, (0.0, 0.002)),
])
def test_the_ticks_and_labels_are_matplotlibs_written_in_unicode(scale, kw, ylim):
    axes = []
    for unicode in (False, True):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [max(ylim[0], 1e-30), ylim[1]])
        ax.set_yscale(scale, **kw)
        ax.set_ylim(*ylim)
        if unicode:
            unicode_log_labels(ax.yaxis)
            assert isinstance(ax.yaxis.get_major_formatter(), UnicodeLogFormatter)
        axes.append(_labels(ax))
        plt.close(fig)
    mathtext, text = axes
    assert mathtext and [pos for pos, _ in text] == [pos for pos, _ in mathtext]
    assert [label for _, label in text] == [unicode_text(label) for _, label in mathtext]
    assert not any("$" in label for _, label in text)
