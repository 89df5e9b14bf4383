"""Attention patterns as circuitsvis views that work offline.

circuitsvis's ``RenderedHTML`` picks between an inlined bundle and a CDN import by pinging the
internet; we never call that. We read circuitsvis's own bundled ``iife.js`` once per page and render
every view from it, so a page with many views stays one copy of the bundle and needs no network.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from uuid import uuid4

import circuitsvis
import torch
from circuitsvis.utils.convert_props import convert_props

from ..model import HookedDisentangledTransformer
from ..task import Batch
from ..tokens import row_labels

BUNDLE = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"


def token_labels(batch: Batch, index: int = 0) -> list[str]:
    """One label per input row of sample ``index``: ``P3→e7`` (P row 3 is e_7), ``Y3=0110…`` (a Y_P
    row), ``S0`` (:func:`invperm_interp.tokens.row_labels`)."""
    return row_labels(batch.layout, batch.X[index])


def bundle_script() -> str:
    """circuitsvis's browser bundle as one inline ``<script>`` (defines ``CircuitsVis``)."""
    if not BUNDLE.exists():
        raise FileNotFoundError(f"circuitsvis bundle missing at {BUNDLE}; reinstall circuitsvis")
    js = BUNDLE.read_text(encoding="utf-8").replace("</script>", "")
    return f"<script>{js}</script>"


def render_element(element: str, **props) -> str:
    """A ``<div>`` rendered by ``CircuitsVis.{element}``; needs :func:`bundle_script` on the page."""
    uid = f"circuits-vis-{uuid4().hex[:12]}"
    return (f'<div id="{uid}" style="margin: 12px 0;"></div>\n'
            f"<script>CircuitsVis.render({json.dumps(uid)}, CircuitsVis.{element}, "
            f"{convert_props(props)});</script>")


def attention_views(model: HookedDisentangledTransformer, batch: Batch, index: int = 0) -> str:
    """One ``AttentionHeads`` view per layer for sample ``index`` of ``batch`` (HTML fragment)."""
    with torch.no_grad():
        _, cache = model.run_with_cache(batch.X[index: index + 1],
                                        names_filter=lambda n: n.endswith("hook_pattern"))
    tokens = token_labels(batch, index)
    parts = []
    for layer, n_heads in enumerate(model.cfg.heads):
        pattern = cache["pattern", layer][0].detach().cpu().float()  # (H, T, T)
        names = [f"layer {layer + 1} head {h}" for h in range(n_heads)]
        parts.append(f"<h3>Layer {layer + 1} (blocks.{layer}) attention "
                     f"({model.cfg.attention_dir})</h3>")
        parts.append(render_element(
            "AttentionHeads", attention=pattern.tolist(), tokens=tokens,
            attentionHeadNames=names, maskUpperTri=model.cfg.causal,
        ))
    return "\n".join(parts)


def page(title: str, body: str) -> str:
    """A standalone HTML page with the circuitsvis bundle inlined once."""
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title></head>\n<body style='font-family: sans-serif; max-width: 1100px; "
            f"margin: auto'>\n<h1>{html.escape(title)}</h1>\n{bundle_script()}\n{body}\n"
            f"</body></html>\n")


def save_attention_html(model: HookedDisentangledTransformer, batch: Batch, path: str | Path,
                        index: int = 0, title: str = "Attention patterns") -> Path:
    """Write an offline page of the model's attention on sample ``index``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title, attention_views(model, batch, index)), encoding="utf-8")
    return path
