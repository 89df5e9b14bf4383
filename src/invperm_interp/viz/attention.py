"""Attention patterns as circuitsvis views that work offline.

Each view is an empty ``<div class="cv">`` and a line queueing what to draw in it; the page shell
(:mod:`invperm_interp.viz.page`) loads circuitsvis's bundle once, after the first paint, and draws
the queue, so a page with many views holds one copy of the bundle (or shares one) and needs no
network.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from uuid import uuid4

import torch
from circuitsvis.utils.convert_props import convert_props

from ..labels import head_name
from ..model.disentangled import DisentangledModel
from ..model.tokens import row_labels
from ..model.variants import model_patterns
from ..task import Batch
from .page import QUEUE, page


def token_labels(batch: Batch, index: int = 0) -> list[str]:
    """One label per input row of sample ``index``: ``P3→e7`` (P row 3 is e_7), ``Y3=0110…`` (a Y_P
    row), ``S0`` (:func:`invperm_interp.tokens.row_labels`)."""
    return row_labels(batch.layout, batch.X[index])


def render_element(element: str, **props) -> str:
    """A ``<div>`` that ``CircuitsVis.{element}`` draws once the page shell has loaded the bundle
    (:func:`invperm_interp.viz.page.page`)."""
    uid = f"circuits-vis-{uuid4().hex[:12]}"
    return (f'<div id="{uid}" class="cv"></div>\n'
            f"<script>(window.{QUEUE} = window.{QUEUE} || []).push([{json.dumps(uid)}, "
            f"{json.dumps(element)}, {convert_props(props)}]);</script>")


def attention_views(model: DisentangledModel, batch: Batch, index: int = 0,
                    patterns=None) -> str:
    """Every head's attention pattern on sample ``index`` of ``batch``, side by side (HTML fragment).

    One ``AttentionPattern`` per head (queries down, keys across; hover for values), titled with
    the head's name; the rows the model reads out are marked ``▶`` in the token labels.
    ``patterns``: per layer ``(H, T, T)`` (tensors or nested lists) already computed on that
    sample (``ModelAnalysis.sample_patterns``); default: run the model.
    """
    if patterns is None:
        patterns = [p[0] for p in model_patterns(model, batch.X[index: index + 1])[1]]
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


def save_attention_html(model: DisentangledModel, batch: Batch, path: str | Path,
                        index: int = 0, title: str | None = None) -> Path:
    """Write every head's attention on sample ``index`` of ``batch`` as one standalone page that
    works offline (the circuitsvis bundle inlined). For a view made with circuitsvis directly,
    write its ``.local_src``: ``str(view)`` loads the library from unpkg, i.e. the network."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    title = title or f"attention on sample {index}"
    path.write_text(page(title, attention_views(model, batch, index)), encoding="utf-8")
    return path
