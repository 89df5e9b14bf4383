"""A small SVG writer for the report's figures: text, lines, rectangles and a raster image in a
drawing measured in points, with the colour maps the figures use and a PNG encoder. No matplotlib:
a report page took 0.80–0.93 CPU s with it drawing the eight figures (after ~0.5 s importing it),
0.015–0.018 s written here (``benchmarks/report.py``). Matplotlib still draws the PNG and SVG figures under
``assets/`` and the index and sweep pages (``viz.heatmaps``, ``viz.training``, ``viz.sweep``).

Text is ``<text>`` in matplotlib's default sans-serif font list; its width is estimated from DejaVu
Sans's advance widths (the first font of the list, and wider than the usual fallbacks), so margins
made from it hold the labels in any of them.
"""

from __future__ import annotations

import base64
import html
import struct
import zlib
from collections.abc import Sequence

import numpy as np

# Font sizes in points, the same in every figure (matplotlib's too). Figures are drawn at the size
# they are shown (an SVG's point is 4/3 CSS pixel), so 8 pt labels are ~11 px on the page; nothing
# is shrunk to fit more blocks: the figure grows instead, by BLOCK_IN a block.
LABEL_PT = 8  # tick labels, axis labels, legends
TITLE_PT = 9
BLOCK_IN = 0.2  # inches of axis per block, so a 16-block axis keeps its labels apart
FONT = "DejaVu Sans, Bitstream Vera Sans, Computer Modern Sans Serif, Lucida Grande, Verdana, " \
       "Geneva, Lucid, Arial, Helvetica, Avant Garde, sans-serif"  # matplotlib's sans-serif list
GRID = "#b0b0b0"  # matplotlib's grid colour
BLUE, RED = "#1f77b4", "#d62728"  # matplotlib's C0 and C3

# DejaVu Sans advance widths of ' ' .. '~' in hundredths of an em (from the font's hmtx table).
_ADVANCE = (32, 40, 47, 84, 64, 96, 78, 28, 39, 39, 50, 85, 32, 36, 32, 34, 64, 64, 64, 64, 64, 64,
            64, 64, 64, 64, 34, 34, 84, 85, 84, 53, 100, 68, 69, 70, 77, 63, 58, 78, 75, 29, 29,
            65, 56, 86, 75, 79, 60, 79, 70, 64, 62, 73, 68, 99, 69, 61, 68, 39, 34, 39, 84, 50, 50,
            62, 63, 56, 64, 62, 35, 64, 63, 28, 28, 58, 28, 97, 63, 61, 63, 64, 42, 52, 39, 63, 59,
            82, 59, 59, 52, 63, 34, 64, 84)
_WIDE = set("×−→≤≥")  # 84; superscripts are 40; anything else unlisted is taken as 84 (safe side)
_SUPERSCRIPTS = set("⁰¹²³⁴⁵⁶⁷⁸⁹⁻·")


def text_width(text: str, size: float) -> float:
    """Estimated width in points of ``text`` at ``size`` points (DejaVu Sans, no kerning)."""
    total = 0
    for ch in text:
        code = ord(ch)
        if 32 <= code < 127:
            total += _ADVANCE[code - 32]
        else:
            total += 40 if ch in _SUPERSCRIPTS else 84
    return total * size / 100


def _num(value: float) -> str:
    """A coordinate as SVG writes it: two decimals, no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


class Drawing:
    """An SVG drawing ``width`` × ``height`` points, built from primitives in that order (later
    over earlier); :meth:`svg` writes it. Coordinates are points from the top left."""

    def __init__(self, width: float, height: float):
        self.width, self.height = width, height
        self._items: list[str] = []
        self._hatch = False
        self._clips = 0

    def text(self, x: float, y: float, text: str, *, size: float = LABEL_PT, anchor: str = "start",
             rotate: float = 0) -> None:
        """``text`` at ``(x, y)``: ``anchor`` start/middle/end horizontally, centred on ``y``
        vertically; turned ``rotate`` degrees about ``(x, y)``."""
        turn = f' transform="rotate({_num(rotate)} {_num(x)} {_num(y)})"' if rotate else ""
        self._items.append(f'<text x="{_num(x)}" y="{_num(y)}" font-size="{_num(size)}" '
                           f'text-anchor="{anchor}" dominant-baseline="central"{turn}>'
                           f'{html.escape(text)}</text>')

    def line(self, x1: float, y1: float, x2: float, y2: float, *, colour: str = "#000",
             width: float = 0.8, dash: str | None = None, opacity: float = 1.0) -> None:
        self.polyline([(x1, y1), (x2, y2)], colour=colour, width=width, dash=dash, opacity=opacity)

    def polyline(self, points: Sequence[tuple[float, float]], *, colour: str = "#000",
                 width: float = 1.5, dash: str | None = None, opacity: float = 1.0,
                 clip: str | None = None) -> None:
        """A line through ``points`` (NaN points are skipped), inside the ``clip`` region (from
        :meth:`clip`) if given."""
        kept = " ".join(f"{_num(x)},{_num(y)}" for x, y in points if x == x and y == y)
        extra = (f' stroke-dasharray="{dash}"' if dash else "") + (
            f' stroke-opacity="{_num(opacity)}"' if opacity != 1 else "") + (
            f' clip-path="url(#{clip})"' if clip else "")
        self._items.append(f'<polyline points="{kept}" fill="none" stroke="{colour}" '
                           f'stroke-width="{_num(width)}" stroke-linejoin="round"{extra}/>')

    def clip(self, x: float, y: float, w: float, h: float) -> str:
        """A clipping rectangle; returns its id for :meth:`polyline`."""
        self._clips += 1
        name = f"clip{self._clips}"
        self._items.append(f'<clipPath id="{name}"><rect x="{_num(x)}" y="{_num(y)}" '
                           f'width="{_num(w)}" height="{_num(h)}"/></clipPath>')
        return name

    def rect(self, x: float, y: float, w: float, h: float, *, fill: str | None = None,
             stroke: str | None = None, width: float = 0.8) -> None:
        """A rectangle, filled with ``fill`` (unfilled when None), outlined with ``stroke``."""
        paint = f' fill="{fill}"' if fill else ' fill="none"'
        line = f' stroke="{stroke}" stroke-width="{_num(width)}"' if stroke else ""
        self._items.append(f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" '
                           f'height="{_num(h)}"{paint}{line}/>')

    def hatched(self, x: float, y: float, w: float, h: float, *, stroke: str | None = None) -> None:
        """A rectangle hatched with grey diagonals (what a heatmap shows where a cell has no value)."""
        self._hatch = True
        self.rect(x, y, w, h, fill="url(#hatch)", stroke=stroke)

    def image(self, x: float, y: float, w: float, h: float, rgba: np.ndarray) -> None:
        """``rgba (rows, cols, 4)`` uint8 stretched over the rectangle, one cell per pixel, drawn
        with sharp edges (no smoothing between cells)."""
        data = base64.b64encode(png(rgba)).decode("ascii")
        self._items.append(f'<image x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" '
                           f'preserveAspectRatio="none" style="image-rendering:pixelated" '
                           f'href="data:image/png;base64,{data}"/>')

    def gradient(self, x: float, y: float, w: float, h: float, stops: Sequence[str],
                 name: str) -> None:
        """A rectangle shaded bottom to top through the colours ``stops`` (a colour bar);
        ``name`` identifies the gradient within the drawing."""
        n = len(stops) - 1
        offsets = "".join(f'<stop offset="{_num(i / n)}" stop-color="{c}"/>' for i, c in enumerate(stops))
        self._items.append(f'<linearGradient id="{name}" x1="0" y1="1" x2="0" y2="0">{offsets}'
                           '</linearGradient>')
        self.rect(x, y, w, h, fill=f"url(#{name})", stroke="#000")

    def svg(self) -> str:
        """The drawing as an SVG document (its size in points: ``width`` and ``height``)."""
        defs = ('<defs><pattern id="hatch" width="4" height="4" patternUnits="userSpaceOnUse" '
                'patternTransform="rotate(45)"><rect width="4" height="4" fill="#fff"/>'
                '<line x1="0" y1="0" x2="0" y2="4" stroke="#9a9a9a" stroke-width="1.2"/>'
                '</pattern></defs>' if self._hatch else "")
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(self.width)}pt" '
                f'height="{_num(self.height)}pt" viewBox="0 0 {_num(self.width)} {_num(self.height)}" '
                f'font-family="{FONT}">{defs}<rect width="100%" height="100%" fill="#fff"/>'
                + "".join(self._items) + "</svg>")


def png(rgba: np.ndarray) -> bytes:
    """``rgba (rows, cols, 4)`` uint8 as a PNG file (8-bit RGBA, no filtering)."""
    rgba = np.ascontiguousarray(rgba, dtype=np.uint8)
    if rgba.ndim != 3 or rgba.shape[2] != 4 or 0 in rgba.shape:
        raise ValueError(f"rgba must be a non-empty (rows, cols, 4) array, got shape {rgba.shape}")
    rows, cols = rgba.shape[:2]
    scanlines = np.zeros((rows, 1 + 4 * cols), np.uint8)  # each row: filter byte 0, then pixels
    scanlines[:, 1:] = rgba.reshape(rows, 4 * cols)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", cols, rows, 8, 6, 0, 0, 0)  # 8 bits, RGBA, deflate, no interlace
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(scanlines.tobytes(), 6)) + chunk(b"IEND", b""))


# Colour maps as evenly spaced anchors, linearly interpolated: matplotlib's RdBu_r (its 11
# ColorBrewer colours) and magma sampled at 17 points (within 2.3/255 of matplotlib's 256 colours).
DIVERGING = ("053061", "2166ac", "4393c3", "92c5de", "d1e5f0", "f7f7f7", "fddbc7", "f4a582",
             "d6604d", "b2182b", "67001f")
MAGMA = ("000004", "0a0822", "1d1147", "36106b", "51127c", "6a1c81", "832681", "9c2e7f", "b73779",
         "d0416f", "e75263", "f56b5c", "fc8961", "fea772", "fec488", "fde2a3", "fcfdbf")


def colour_map(fraction: np.ndarray, anchors: Sequence[str]) -> np.ndarray:
    """``fraction`` (any shape, 0 → first anchor, 1 → last; clipped) as RGBA uint8 (shape + (4,)),
    quantised to 256 levels as matplotlib's colour maps are; NaN → transparent."""
    fraction = np.asarray(fraction, dtype=np.float64)
    table = np.array([[int(a[i:i + 2], 16) for i in (0, 2, 4)] for a in anchors], np.float64)
    level = np.clip(np.floor(np.nan_to_num(fraction) * 256), 0, 255) / 255  # matplotlib's lookup
    where = np.linspace(0, 1, len(anchors))
    rgb = np.stack([np.interp(level, where, table[:, k]) for k in range(3)], axis=-1)
    alpha = np.where(np.isnan(fraction), 0, 255)[..., None]
    return np.concatenate([np.rint(rgb), alpha], axis=-1).astype(np.uint8)
