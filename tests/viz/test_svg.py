"""The report's SVG figures (viz.svg, viz.scales, viz.charts), checked against matplotlib and
Pillow as independent references: colours, scales, ticks, PNG pixels, and where things are drawn."""

import io
import math

import numpy as np
import pytest
from helpers import svg_doc, svg_image, svg_polylines, svg_texts
from PIL import Image

from invperm_interp.viz.charts import Axes, Colours, Level, Series, Ticks, heatmap, line_chart
from invperm_interp.viz.scales import Scale, nice_ticks, padded
from invperm_interp.viz.svg import DIVERGING, MAGMA, Drawing, colour_map, png, text_width


def _texts(doc) -> dict[str, tuple[float, float]]:
    """Where each text is drawn, by its text."""
    return {text: (x, y) for text, x, y in svg_texts(doc)}


def test_png_decodes_to_the_same_pixels_in_pillow():
    rgba = np.random.default_rng(0).integers(0, 256, (7, 5, 4), dtype=np.uint8)
    decoded = np.asarray(Image.open(io.BytesIO(png(rgba))).convert("RGBA"))
    assert decoded.shape == (7, 5, 4) and np.array_equal(decoded, rgba)
    with pytest.raises(ValueError, match=r"rgba must be .*\(rows, cols, 4\).*\(3, 4\)"):
        png(np.zeros((3, 4), np.uint8))


@pytest.mark.parametrize("anchors, name", [(DIVERGING, "RdBu_r"), (MAGMA, "magma")])
def test_colour_maps_are_matplotlibs_within_three_levels(anchors, name):
    import matplotlib

    fraction = np.concatenate([np.linspace(-0.1, 1.1, 1201), np.random.default_rng(1).random(500)])
    ours = colour_map(fraction, anchors)
    theirs = np.rint(matplotlib.colormaps[name](fraction) * 255)
    assert np.abs(ours[:, :3].astype(int) - theirs[:, :3]).max() <= 3
    assert (ours[:, 3] == 255).all() and colour_map(np.array([np.nan]), anchors)[0, 3] == 0


@pytest.mark.parametrize("kind, lo, hi", [("log", 1e-4, 3.0), ("symlog", -3e-5, 2.0),
                                           ("linear", -0.02, 1.02)])
def test_scales_place_values_as_matplotlibs_transforms_do(kind, lo, hi):
    import matplotlib.scale as mscale

    transform = {"log": mscale.LogTransform(10), "linear": mscale.IdentityTransform(),
                 "symlog": mscale.SymmetricalLogTransform(10, 1e-4, 1)}[kind]
    values = np.array([lo, hi, 5e-4, 0.0025, 0.3, 1.0]) if kind != "log" else np.array(
        [lo, hi, 5e-4, 0.0025, 0.3, 1.0])
    t = transform.transform(values)
    expected = (t - t[0]) / (t[1] - t[0])
    assert Scale(lo, hi, kind, 1e-4).fraction(values) == pytest.approx(expected, abs=1e-12)


def test_linear_ticks_are_round_evenly_spaced_and_inside():
    for lo, hi in [(0, 1500), (-0.37, 0.37), (-6.2, -1.1), (0.001, 0.0013), (-1e-5, 3.0)]:
        ticks = nice_ticks(lo, hi)
        steps = np.diff(ticks)
        assert 3 <= len(ticks) <= 9 and all(lo - 1e-12 <= t <= hi + 1e-12 for t in ticks)
        assert np.allclose(steps, steps[0])
        mantissa = steps[0] / 10 ** math.floor(math.log10(steps[0]))
        assert any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5)), (lo, hi, steps[0])


def test_log_ticks_are_matplotlibs_powers_of_ten_in_unicode():
    from matplotlib.ticker import LogFormatterSciNotation

    from invperm_interp.viz.ticks import unicode_text

    labels = dict(Scale(2e-4, 3.0, "log").ticks())
    assert list(labels) == [1e-3, 1e-2, 1e-1, 1.0]
    formatter = LogFormatterSciNotation()
    formatter.create_dummy_axis()
    formatter.axis.set_view_interval(2e-4, 3.0)
    assert {v: unicode_text(formatter(v)) for v in labels} == labels  # 10⁻³, …, 10⁰
    symlog = dict(padded(-1e-5, 0.8, "symlog", 1e-4).ticks())
    assert symlog[0.0] == "0" and symlog[1e-4] == "10⁻⁴" and symlog[0.1] == "10⁻¹"


def test_a_heatmap_draws_each_value_in_its_cell_with_ticks_at_block_centres():
    import matplotlib
    from matplotlib.colors import Normalize

    values = np.arange(12, dtype=float).reshape(3, 4) - 5
    values[2, 3] = np.nan
    rows = Ticks(((0.5, "r0"), (2.0, "r1-2")), lines=(1.0,), label="rows")
    cols = Ticks(((2.0, "all columns"),), label="cols", rotate=True)
    doc = svg_doc(heatmap(values, rows, cols, Colours(DIVERGING, -6.0, 6.0), size=(80, 60),
                       title="a title", hatch_label="no value"))
    pixels, (x, y, w, h) = svg_image(doc)
    assert pixels.shape == (3, 4, 4)
    expected = np.rint(matplotlib.colormaps["RdBu_r"](Normalize(-6, 6)(values)) * 255)
    seen = ~np.isnan(values)
    assert np.abs(pixels[seen][:, :3].astype(int) - expected[seen][:, :3]).max() <= 3
    assert pixels[2, 3, 3] == 0  # no value: transparent over the hatch
    assert "url(#hatch)" in doc.toxml()
    texts = _texts(doc)
    assert texts["r0"][1] == pytest.approx(y + 0.5 / 3 * h, abs=0.01)
    assert texts["r1-2"][1] == pytest.approx(y + 2 / 3 * h, abs=0.01)
    assert texts["all columns"][0] == pytest.approx(x + w / 2, abs=0.01)
    assert {"a title", "rows", "cols", "no value"} <= set(texts)
    assert float(doc.documentElement.getAttribute("width")[:-2]) >= x + w + 10  # the colour bar


def test_a_line_chart_puts_data_on_the_ticks_that_label_it():
    axes = Axes(padded(1e-3, 2.0, "log"), "step", "MSE", "eval MSE")
    doc = svg_doc(line_chart([Series([0, 100, 200], [2.0, 0.01, 1e-3], label="eval MSE")], axes,
                          [Level(0.1, "#d62728", label="a floor")]))
    lines = svg_polylines(doc)
    curve = next(points for _, points in lines if len(points) == 3)
    texts = _texts(doc)
    assert curve[1][1] == pytest.approx(texts["10⁻²"][1], abs=0.01)  # 0.01 on the 10⁻² tick
    assert curve[1][0] == pytest.approx(texts["100"][0], abs=0.01)  # step 100 on its tick
    floor = next(points for colour, points in lines if colour == "#d62728")  # drawn before its key
    assert floor[0][1] == floor[1][1] == pytest.approx(texts["10⁻¹"][1], abs=0.01)
    assert {"eval MSE", "a floor", "step", "MSE"} <= set(texts)


def test_text_with_markup_characters_stays_text():
    drawing = Drawing(100, 20)
    drawing.text(1, 10, "MSE < 0.001 & rows > 99%")
    assert _texts(svg_doc(drawing)) == {"MSE < 0.001 & rows > 99%": (1.0, 10.0)}


def test_text_width_is_dejavu_sans_advance_widths():
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    font = FT2Font(font_manager.findfont("DejaVu Sans"))
    font.set_size(100, 72)
    for text in ("pos.S", "L2.L1.pos.Y", "query block", "W_U: read-out stream"):
        advance = sum(font.load_char(ord(c)).horiAdvance for c in text) / 64  # at 100 pt
        assert text_width(text, 100) == pytest.approx(advance, abs=0.6 * len(text))
    assert text_width("10⁻³", 8) >= text_width("10", 8)



def test_bad_figure_input_is_refused_naming_what_was_expected():
    with pytest.raises(ValueError, match=r"values must be a non-empty \(rows, cols\) array.*\(4,\)"):
        heatmap(np.zeros(4), Ticks(()), Ticks(()), Colours(DIVERGING, -1, 1), size=(10, 10))
    with pytest.raises(ValueError, match="as many x as y values, got 3 and 2"):
        Series([0, 1, 2], [1.0, 2.0])
