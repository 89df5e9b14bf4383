"""Small HTML pieces the report and the index page share: tables with captions and figures with
alt text, embedded so that a page needs no other file."""

from __future__ import annotations

import html
import io
import re
from typing import TYPE_CHECKING
from urllib.parse import quote

from .svg import Drawing

if TYPE_CHECKING:  # matplotlib is imported when a matplotlib figure is written, not before
    from matplotlib.figure import Figure

# Kept as is in a data URL: not %, #, ", <, >, newlines, nor & (the page's parser would read the
# SVG's "&lt;" in the attribute as "<" and the image would not draw).
_URL_SAFE = " !$'()*+,-./:;=?@[]^_`{|}~"
# A number, a percentage or 1e-3 form, optionally with a count in brackets ("9 (10)") or the mark
# of a passed or failed condition ("99.9% ✓")
_NUMBER = re.compile(r"[-+−]?[\d.,%×]+(?:e[-+−]?\d+)?%?(?: \(\d+\))?(?: [✓✗])?")
_SVG_SIZE = re.compile(rb'<svg[^>]*?width="([\d.]+)pt" height="([\d.]+)pt"')


def svg_bytes(fig: Figure) -> bytes:
    """``fig`` as SVG; closes it. Text stays text (``<text>`` in the figure's sans-serif font list,
    not glyph paths): about 10% faster to write and 10% smaller, it reads the same in Chromium at
    1400 and 800 px (``benchmarks/report.py``), and a reader can select and search it.

    Cropped as ``bbox_inches="tight"`` crops it, but drawn once: for a figure laid out already
    (``tight_layout``, or no layout engine) savefig's first whole draw (images resampled, every
    artist drawn to nowhere) only finds the box :func:`_tight_box` measures; on a report page it
    was about half of the SVG writing time."""
    import matplotlib.pyplot as plt
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    buffer = io.BytesIO()
    box = "tight"
    if isinstance(fig.get_layout_engine(), (PlaceHolderLayoutEngine, type(None))):
        box = _tight_box(fig)
        fig.set_layout_engine(None)  # laid out: savefig's own layout draw would change nothing
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", bbox_inches=box, metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def _tight_box(fig: Figure):
    """``fig``'s tight bounding box in inches plus ``savefig.pad_inches``, its text measured as the
    SVG backend measures it (at 72 dpi, unhinted), without drawing. One renderer measures every
    figure of the process, so a label drawn in many figures (block names, a log axis's powers of
    ten, parsed as mathtext) is measured once."""
    import matplotlib.pyplot as plt

    global _MEASURE
    if _MEASURE is None:
        from matplotlib.backends.backend_svg import RendererSVG

        _MEASURE = RendererSVG(72, 72, io.StringIO(), image_dpi=72)  # its size draws nothing here
    dpi, fig.dpi = fig.dpi, 72  # an SVG's unit, as savefig draws it
    try:
        box = fig.get_tightbbox(_MEASURE)
    finally:
        fig.dpi = dpi
    return box.padded(plt.rcParams["savefig.pad_inches"])


_MEASURE = None  # the renderer _tight_box measures with, made on first use


def figure(fig: Figure | Drawing, alt: str, caption: str = "") -> str:
    """``<figure>`` holding ``fig`` (a matplotlib figure, which it closes, or a ``viz.svg``
    drawing) as an inline SVG image at the size it was drawn (shrunk only when the page is
    narrower), with ``alt`` text and an optional caption."""
    data = fig.svg().encode("utf-8") if isinstance(fig, Drawing) else svg_bytes(fig)
    size = _SVG_SIZE.search(data[:2000])
    dims = box = ""
    if size:  # points to CSS pixels, so labels drawn at 8 pt show at ~11 px
        width, height = (round(float(v) * 4 / 3) for v in size.groups())
        dims = f' width="{width}" height="{height}"'
        box = f' style="max-width: {width}px"'  # the caption wraps at the figure's width
    # Percent-encoded rather than base64: the SVG is text (its figures ~12% smaller this way).
    src = "data:image/svg+xml;charset=utf-8," + quote(data.decode("utf-8"), safe=_URL_SAFE)
    cap = f"<figcaption>{caption}</figcaption>" if caption else ""
    return f'<figure{box}><img src="{src}" alt="{html.escape(alt)}"{dims}>{cap}</figure>'


def cell(value) -> str:
    """A ``<td>``; numbers (and number-like strings) align right."""
    text = str(value)
    numeric = isinstance(value, (int, float)) or bool(_NUMBER.fullmatch(text))
    return f'<td class="num">{html.escape(text)}</td>' if numeric else f"<td>{html.escape(text)}</td>"


def table(header: list[str], rows: list[list], caption: str = "", attrs: str = "") -> str:
    """An HTML table; ``caption`` is trusted HTML (it may hold <b> or <code>)."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in rows)
    cap = f'<p class="caption">{caption}</p>' if caption else ""
    return (f"<div class='table'>{cap}<table{attrs}><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>")
