"""The built site in headless Chromium, opened as files (file://, as README and `make docs` say):
the search box finds pages with no console error, and the layout holds at 1400 and 800 px wide (the
side contents fold away at 800 px, wide tables scroll in their own box, no page scrolls sideways)."""


import pytest
from browser import BROWSER, open_page

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    BROWSER is None, reason="needs headless Chromium: apt-get install -y chromium (Debian/Ubuntu)")]


RESULTS = "#mkdocs-search-results article"


@pytest.mark.parametrize("page", ["index.html", "guide/model.html"])
def test_search_finds_pages_from_the_file_system(site, tmp_path, page):
    with open_page((site / page).as_uri(), tmp_path) as browser:
        browser.evaluate("document.querySelector('[data-bs-target=\"#mkdocs_search_modal\"]').click()")
        assert browser.wait_for("document.activeElement.id === 'mkdocs-search-query'", 10)
        browser.type("two_block")
        assert browser.wait_for(f"document.querySelectorAll({RESULTS!r}).length > 0", 20), \
            browser.evaluate("document.getElementById('mkdocs-search-results').outerHTML")
        titles = browser.evaluate(f"[...document.querySelectorAll('{RESULTS} a')].map(a => a.textContent)")
        assert "The census: what training learns, counted over seeds" in titles
        # a result's link opens its page, from this page's folder
        first = browser.evaluate(f"document.querySelector('{RESULTS} a').href")
        assert first.startswith(site.as_uri() + "/") and (site / first[len(site.as_uri()) + 1:]
                                                            .split("#")[0]).is_file()
        browser.evaluate("document.getElementById('mkdocs-search-query').value = ''")
        browser.type("nothing_is_called_this")
        assert browser.wait_for(f"document.querySelectorAll({RESULTS!r}).length == 0 && "
                                "document.getElementById('mkdocs-search-results').textContent"
                                ".includes('No results')", 10)
        assert browser.errors == []


#: What the layout probe reads: the page's sideways overflow, the side contents' and the main
#: column's widths, the widest figure, and each table's box (its width, what it holds).
LAYOUT = """(() => {
  const main = document.querySelector('[role=main]');
  const side = document.querySelector('.bs-sidebar .navbar-collapse');
  return {
    overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    side: getComputedStyle(side).display === 'none' ? 0 : side.getBoundingClientRect().width,
    toggle: getComputedStyle(document.querySelector('.bs-sidebar .navbar-toggler')).display,
    main: main.getBoundingClientRect().width,
    figure: Math.max(0, ...[...main.querySelectorAll('img')].map(i => i.getBoundingClientRect().width)),
    tables: [...main.querySelectorAll('table')].map(t => ({
      box: t.parentElement.className, boxWidth: t.parentElement.clientWidth,
      scroll: t.parentElement.scrollWidth, overflowX: getComputedStyle(t.parentElement).overflowX})),
  };
})()"""


@pytest.mark.parametrize("width", [1400, 800])
@pytest.mark.parametrize("page", ["results/census.html", "api.html", "index.html", "design.html",
                                  "results/discovered.html"])
def test_the_layout_holds_at_1400_and_800_px(site, tmp_path, page, width):
    with open_page((site / page).as_uri(), tmp_path, width=width) as browser:
        seen = browser.evaluate(LAYOUT)
        assert browser.errors == []
    assert seen["overflow"] <= 0, seen  # the page never scrolls sideways
    if width == 800:  # the side contents fold into their button; the page takes the width
        assert seen["side"] == 0 and seen["toggle"] != "none" and seen["main"] >= 700, seen
    else:
        assert seen["side"] > 200 and seen["toggle"] == "none", seen
    if page == "results/census.html":
        assert seen["figure"] >= 0.95 * seen["main"] - 30, seen
        census = seen["tables"][0]  # 13 columns: wider than the page, scrolled in its own box
        assert census["box"] == "table-scroll" and census["overflowX"] == "auto", census
        assert census["scroll"] > census["boxWidth"] and census["boxWidth"] <= seen["main"], census
    for table in seen["tables"]:
        assert table["box"] == "table-scroll", table
