"""Attention patterns as circuitsvis views that work offline.

circuitsvis's ``RenderedHTML`` picks between an inlined bundle and a CDN import by pinging the
internet; we never call that. We read circuitsvis's own bundled ``iife.js`` once per page and render
every view from it, so a page with many views stays one copy of the bundle and needs no network. A
directory of reports can share one copy instead (:func:`write_bundle`, ``page(..., bundle=URL)``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from uuid import uuid4

import circuitsvis
import torch
from circuitsvis.utils.convert_props import convert_props

from ..labels import head_name
from ..model.hooked import HookedDisentangledTransformer
from ..model.tokens import row_labels
from ..task import Batch

BUNDLE = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"


def token_labels(batch: Batch, index: int = 0) -> list[str]:
    """One label per input row of sample ``index``: ``P3→e7`` (P row 3 is e_7), ``Y3=0110…`` (a Y_P
    row), ``S0`` (:func:`invperm_interp.tokens.row_labels`)."""
    return row_labels(batch.layout, batch.X[index])


BUNDLE_NAME = "circuitsvis.js"  # the shared copy a directory of reports points to


def bundle_script(src: str | None = None) -> str:
    """The ``<script>`` that defines ``CircuitsVis``: circuitsvis's browser bundle inlined, or, with
    ``src``, a reference to a shared copy (a relative URL such as ``../circuitsvis.js``; see
    :func:`write_bundle`)."""
    if src is not None:
        return f'<script src="{html.escape(src)}"></script>'
    if not BUNDLE.exists():
        raise FileNotFoundError(f"circuitsvis bundle missing at {BUNDLE}; reinstall circuitsvis")
    js = BUNDLE.read_text(encoding="utf-8").replace("</script>", "")
    return f"<script>{js}</script>"


def write_bundle(directory: str | Path) -> Path:
    """Copy circuitsvis's bundle to ``directory/circuitsvis.js`` once, for reports that share it."""
    if not BUNDLE.exists():
        raise FileNotFoundError(f"circuitsvis bundle missing at {BUNDLE}; reinstall circuitsvis")
    path = Path(directory) / BUNDLE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    data = BUNDLE.read_bytes()
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def render_element(element: str, **props) -> str:
    """A ``<div>`` rendered by ``CircuitsVis.{element}``; needs :func:`bundle_script` on the page."""
    uid = f"circuits-vis-{uuid4().hex[:12]}"
    return (f'<div id="{uid}" class="cv"></div>\n'
            f"<script>CircuitsVis.render({json.dumps(uid)}, CircuitsVis.{element}, "
            f"{convert_props(props)});</script>")


def attention_views(model: HookedDisentangledTransformer, batch: Batch, index: int = 0,
                    patterns=None) -> str:
    """Every head's attention pattern on sample ``index`` of ``batch``, side by side (HTML fragment).

    One ``AttentionPattern`` per head (queries down, keys across; hover for values), titled with
    the head's name; the rows the model reads out are marked ``▶`` in the token labels.
    ``patterns``: per layer ``(H, T, T)`` (tensors or nested lists) already computed on that
    sample (``ModelAnalysis.sample_patterns``); default: run the model.
    """
    if patterns is None:
        with torch.no_grad():
            _, cache = model.run_with_cache(batch.X[index: index + 1],
                                            names_filter=lambda n: n.endswith("hook_pattern"))
        patterns = [cache["pattern", layer][0] for layer in range(model.cfg.n_layers)]
    # Y rows by index only: their bits make the labels too long to show every one
    tokens = [t.split("=")[0] if t.startswith("Y") else t for t in token_labels(batch, index)]
    rows = batch.layout.rows(model.cfg.readout)
    for row in range(rows.start, rows.stop):
        tokens[row] = "▶" + tokens[row]
    panels = []
    for layer, n_heads in enumerate(model.cfg.heads):
        pattern = torch.as_tensor(patterns[layer]).detach().cpu().float()  # (H, T, T)
        for head in range(n_heads):
            view = render_element("AttentionPattern", attention=pattern[head].tolist(),
                                  tokens=tokens, maskUpperTri=model.cfg.causal, showAxisLabels=True)
            panels.append(f'<figure class="attn"><figcaption>{html.escape(head_name(layer, head))}'
                          f"</figcaption>{view}</figure>")
    return f'<div class="attn-row">{"".join(panels)}</div>'


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: auto; padding: 0 16px;
       line-height: 1.4; color: #1a1a1a; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { margin-top: 1.6em; }
.meta { color: #555; font-size: 0.92em; }
.headline { border-left: 4px solid #2b6cb0; background: #f3f7fb; padding: 8px 14px; }
.headline.none { border-left-color: #c05621; background: #fdf6ef; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
p.caption { font-size: 13px; color: #444; margin: 4px 0; max-width: 900px; }
div.table { overflow-x: auto; }
td.num { white-space: nowrap; }
figure { margin: 8px 0; } figcaption { font-size: 13px; color: #444; max-width: 900px; }
.figs { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
img { max-width: 100%; height: auto; }
.wide { overflow-x: auto; }
.attn-row { display: flex; flex-wrap: wrap; gap: 16px; }
figure.attn { width: 460px; max-width: 100%; margin: 0; }
figure.attn figcaption { font-weight: 600; }
details > summary { cursor: pointer; color: #2b6cb0; }
"""


def page(title: str, body: str, bundle: str | None = None) -> str:
    """A standalone HTML page; the circuitsvis bundle is inlined once, or with ``bundle`` (a
    relative URL) read from a shared copy (see :func:`bundle_script`)."""
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n"
            f"{bundle_script(bundle)}\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n{body}\n"
            f"</body></html>\n")


def save_attention_html(model: HookedDisentangledTransformer, batch: Batch, path: str | Path,
                        index: int = 0, title: str = "Attention patterns") -> Path:
    """Write an offline page of the model's attention on sample ``index``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title, attention_views(model, batch, index)), encoding="utf-8")
    return path
