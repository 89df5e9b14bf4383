"""The census figure the README and the results page show: its smallest type is legible at the
widths the pages show it (the docs' column at 800 and 1400 px screens, the README's column), and
the committed PNG was drawn at the script's width."""

from helpers import REPO, analyses_script
from PIL import Image

DPI = 110  # analyses/census_report.py saves the PNG at this resolution
#: Widths (px) the figure is shown at: the docs' column at 800 and 1400 px screens
#: (tests/docs/test_site_browser.py measures them) and the README's column on a code host.
SHOWN = (696, 880, 966)


def test_the_census_figures_smallest_type_is_at_least_9_px_where_it_is_shown(monkeypatch):
    script = analyses_script(monkeypatch, "census_report")
    width = Image.open(REPO / "assets" / "census.png").size[0]
    assert width == round(script.WIDTH_IN * DPI)  # the committed figure is the script's
    for shown in SHOWN:
        scale = min(1.0, shown / width)  # shown no wider than it is (img max-width: 100%)
        px = script.FONT_PT / 72 * DPI * scale
        assert px >= 9, (shown, px)
