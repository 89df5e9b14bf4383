"""The page shell every HTML page shares: the style sheet, the navigation line and the circuitsvis
bundle, loaded after the first paint.

circuitsvis's ``RenderedHTML`` picks between an inlined bundle and a CDN import by pinging the
internet; we never call that. A page holding views (``<div class="cv">``, from
:func:`invperm_interp.viz.attention.render_element`) gets circuitsvis's own browser bundle once, at
the end of the body: inlined as inert text, or, with ``bundle``, a relative URL of a shared copy
(:func:`write_bundle`). A small loader runs it after the browser has painted the page, so the
headline shows before the bundle (over a megabyte of script) is parsed, then draws every queued view.
No path needs the network.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import circuitsvis

BUNDLE = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
BUNDLE_NAME = "circuitsvis.js"  # the shared copy a directory of reports points to
QUEUE = "cvQueue"  # views wait here, as [element id, component name, props], until the bundle runs

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: auto; padding: 0 16px;
       line-height: 1.4; color: #1a1a1a; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; overflow-wrap: anywhere; } h2 { margin-top: 1.6em; }
nav { font-size: 0.92em; margin-top: 10px; }
.meta { color: #555; font-size: 0.92em; }
.headline { border-left: 4px solid #2b6cb0; background: #f3f7fb; padding: 8px 14px; }
.headline.solved { border-left-color: #2f855a; background: #f0f8f3; }
.headline.none { border-left-color: #c05621; background: #fdf6ef; }
.headline .caveat { border-left: 3px solid #c05621; padding-left: 8px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
p.caption { font-size: 13px; color: #444; margin: 4px 0; max-width: 900px; }
div.table { overflow-x: auto; }
table.mechanism td:first-child { overflow-wrap: anywhere; }  /* long construction names */
td.num { white-space: nowrap; } td.num.wrap { white-space: normal; } .nowrap { white-space: nowrap; }
figure { margin: 8px 0; } figcaption { font-size: 13px; color: #444; max-width: 900px; }
.figs { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
img { max-width: 100%; height: auto; }
.wide { overflow-x: auto; }
.attn-row { display: flex; flex-wrap: wrap; gap: 16px; }
figure.attn { width: 460px; max-width: 100%; margin: 0; }
/* circuitsvis lays a view out in a grid row with -15 px gutters: the canvas drew 15 px past its
   figure on both sides (at 800 px, to the window's edge); the row is kept inside its box */
.cv div[style*="margin-left: -15px"] { margin-left: 0 !important; margin-right: 0 !important; }
figure.attn figcaption { font-weight: 600; }
details > summary { cursor: pointer; color: #2b6cb0; }
"""

# Runs the bundle after the first paint (a frame, then a task), then draws the queued views.
_LOADER = """
(() => {
  const draw = () => (window.%(queue)s || []).forEach(([id, component, props]) =>
    CircuitsVis.render(id, CircuitsVis[component], props));
  const load = () => {
    const script = document.createElement('script');
    const inline = document.getElementById('circuitsvis-bundle');
    if (inline) {
      script.text = inline.textContent;
      document.body.appendChild(script);
      draw();
    } else {
      script.src = %(src)s;
      script.onload = draw;
      document.body.appendChild(script);
    }
  };
  requestAnimationFrame(() => setTimeout(load, 0));
})();
"""


def write_bundle(directory: str | Path) -> Path:
    """Copy circuitsvis's bundle to ``directory/circuitsvis.js`` once, for pages that share it."""
    if not BUNDLE.exists():
        raise FileNotFoundError(f"circuitsvis bundle missing at {BUNDLE}; reinstall circuitsvis")
    path = Path(directory) / BUNDLE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    data = BUNDLE.read_bytes()
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def bundle_scripts(src: str | None = None) -> str:
    """The end of a page with views: the bundle (inert text inlined, or, with ``src``, the relative
    URL of a shared copy such as ``../circuitsvis.js``) and the loader that runs it after the first
    paint and draws the views."""
    parts = []
    if src is None:
        if not BUNDLE.exists():
            raise FileNotFoundError(f"circuitsvis bundle missing at {BUNDLE}; reinstall circuitsvis")
        js = BUNDLE.read_text(encoding="utf-8").replace("</script>", "")
        parts.append(f'<script type="text/plain" id="circuitsvis-bundle">{js}</script>')
    parts.append(f"<script>{_LOADER % {'queue': QUEUE, 'src': json.dumps(src)}}</script>")
    return "\n".join(parts)


def nav_line(links: list[tuple[str, str]]) -> str:
    """``<nav>`` of ``(label, relative URL)`` links, e.g. back to the index and to a run's twin."""
    if not links:
        return ""
    items = " · ".join(f'<a href="{html.escape(url)}">{html.escape(label)}</a>'
                       for label, url in links)
    return f"<nav>{items}</nav>\n"


def page(title: str, body: str, bundle: str | None = None, *,
         links: list[tuple[str, str]] | None = None, style: str = "", script: str = "") -> str:
    """A standalone HTML page. A body with circuitsvis views gets the bundle at its end, inlined or,
    with ``bundle`` (a relative URL), from a shared copy; ``links``: a navigation line above the
    title; ``style``/``script``: extra CSS and JavaScript for this page."""
    views = 'class="cv"' in body
    end = bundle_scripts(bundle) if views else ""
    extra = f"<script>{script}</script>\n" if script else ""
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}{style}</style>\n</head>\n<body>\n"
            f"{nav_line(links or [])}<h1>{html.escape(title)}</h1>\n{body}\n{extra}{end}\n"
            f"</body></html>\n")
