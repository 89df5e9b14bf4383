"""Figures carry the stream's block names; attention pages are self-contained (offline)."""

import json

import pytest
import torch
from helpers import loads_from_network

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, make_input
from invperm_interp.maths import constructions
from invperm_interp.viz.attention import attention_views, save_attention_html, token_labels
from invperm_interp.viz.heatmaps import plot_circuit, save_figure
from invperm_interp.viz.page import page


def test_circuit_figure_labels_every_block(tmp_path):
    model = constructions.build("theorem2", 4)
    fig = plot_circuit(model)
    axes = fig.axes
    layer1 = [t.get_text() for t in axes[1].get_xticklabels()]  # A0, A1, W_U, then colour bars
    assert layer1 == model.stream.labels(1)
    path = save_figure(plot_circuit(model, gauge_fixed=True), tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_circuit_figure_in_one_column_stacks_the_heads_and_keeps_its_labels():
    model = constructions.build("found_plain_1x1x1_46453a", 5)  # three layers
    wide, tall = plot_circuit(model), plot_circuit(model, columns=1)
    assert tall.get_size_inches()[0] < wide.get_size_inches()[0] / 2
    boxes = [ax.get_position() for ax in tall.axes[:3]]  # the three heads, one a row
    assert boxes[0].y0 > boxes[1].y0 > boxes[2].y0 and len({round(b.x0, 3) for b in boxes}) == 1
    for fig in (wide, tall):
        labels = [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes[:3]]
        assert labels == [model.stream.labels(layer) for layer in range(3)]
    with pytest.raises(ValueError, match="columns"):
        plot_circuit(model, columns=0)


def test_token_labels_name_rows_by_role():
    layout = Layout.scratch(3, 2)
    P = torch.tensor([[0.0, 1, 0], [0, 0, 1], [1, 0, 0]])
    Y_P = torch.tensor([[1.0, 0, 1], [0, 0, 0], [1, 1, 1]])
    labels = token_labels(make_input(layout, P, Y_P))
    assert labels == ["P0→e1", "P1→e2", "P2→e0", "Y0=101", "Y1=000", "Y2=111", "S0", "S1"]


def test_attention_page_is_offline_and_has_one_view_per_layer():
    cfg = ModelConfig(Layout.plain(3), n_layers=2, n_heads=[1, 2], attention_dir="causal")
    model = HookedDisentangledTransformer(cfg, seed=0)
    batch = make_input(cfg.layout, torch.eye(3), torch.ones(3, 3))
    body = attention_views(model, batch)
    assert body.count('class="cv"') == 3  # one view per head, side by side
    assert body.count('"maskUpperTri": true') == 3
    assert "layer 2 (blocks.1) head 1" in body
    assert json.dumps("▶P0→e0") in body and json.dumps("Y0") in body  # read-out rows are marked
    html = page("t", body)
    assert "var CircuitsVis" in html  # the bundle is inlined, as inert text at the end of the body
    assert html.index('<script type="text/plain" id="circuitsvis-bundle">') > html.index(body)
    assert "var CircuitsVis" not in page("t", "<p>no views</p>")
    assert not loads_from_network(html)


def test_save_attention_html_writes_an_offline_page_of_every_head(tmp_path):
    cfg = ModelConfig(Layout.plain(3), n_layers=2, n_heads=[1, 2], attention_dir="causal")
    model = HookedDisentangledTransformer(cfg, seed=0)
    batch = make_input(cfg.layout, torch.eye(3), torch.ones(3, 3))
    path = save_attention_html(model, batch, tmp_path / "views" / "attn.html")
    html = path.read_text()
    assert html.count('class="cv"') == 3 and "var CircuitsVis" in html
    assert not loads_from_network(html)


def test_bidirectional_views_are_not_masked():
    cfg = ModelConfig(Layout.plain(3), attention_dir="bidirectional")
    model = HookedDisentangledTransformer(cfg, seed=0)
    body = attention_views(model, make_input(cfg.layout, torch.eye(3), torch.ones(3, 3)))
    assert body.count('"maskUpperTri": false') == 2  # circuitsvis masks unless told not to


def test_labels_are_legible_at_the_size_drawn():
    model = constructions.build("theorem3", 10)  # 16 blocks in the read-out stream
    fig = plot_circuit(model)
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.get_yticklabels() + ax.get_xticklabels()
             if t.get_text()]
    assert min(sizes) * 4 / 3 >= 10  # points to CSS pixels at the drawn size


def test_patching_heatmap_labels_blocks_and_layers():
    from invperm_interp.analysis import mse_to, patch_blocks
    from invperm_interp.viz.heatmaps import plot_patching

    model = constructions.build("two_block", 3)
    Y_P = torch.tensor([[1.0, 0, 0], [1, 1, 0], [0, 1, 1]])
    clean = make_input(model.cfg.layout, torch.eye(3), Y_P)
    corrupted = make_input(model.cfg.layout, torch.eye(3).flip(0), Y_P)
    result = patch_blocks(model, clean.X, corrupted.X.double(), mse_to(clean.Y), normalize=True)
    ax = plot_patching(result)
    assert [t.get_text() for t in ax.get_xticklabels()] == model.stream.labels(1)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["layer 1 (blocks.0) input",
                                                           "layer 2 (blocks.1) input"]
    assert "not in this\nstream yet" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "1.00" in {t.get_text() for t in ax.texts}  # some block fully restores the output
    assert min(t.get_fontsize() for t in ax.texts) * 4 / 3 >= 10  # cell values: >= 10 px drawn


def test_a_figure_with_less_than_and_ampersand_in_its_text_reaches_the_browser_as_valid_svg():
    """The page's HTML parser decodes entities in the image's URL; the SVG it then reads must still
    be well-formed XML holding the text as drawn."""
    import html.parser
    import xml.dom.minidom
    from urllib.parse import unquote

    import matplotlib.pyplot as plt

    from invperm_interp.viz.html import figure

    fig, ax = plt.subplots()
    ax.set_ylabel("MSE < 0.001 & rows > 99%")
    srcs = []

    class Images(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            srcs.extend(v for k, v in attrs if tag == "img" and k == "src")

    Images().feed(figure(fig, "alt"))
    svg = unquote(srcs[0].split(",", 1)[1])
    texts = [t.firstChild.data for t in xml.dom.minidom.parseString(svg).getElementsByTagName("text")
             if t.firstChild]
    assert "MSE < 0.001 & rows > 99%" in texts


def test_a_figure_is_cropped_as_matplotlibs_tight_bounding_box_crops_it():
    """One draw instead of a layout draw and a draw: the SVG's size and every drawn coordinate are
    those of ``savefig(bbox_inches="tight")`` (a heatmap with colorbar and a log-scale curve with
    a legend below its axes, both laid out by ``tight_layout``, and a figure with no layout)."""
    import io
    import re

    import matplotlib.pyplot as plt

    from invperm_interp.runs.evaluation import Evaluation
    from invperm_interp.viz.heatmaps import plot_attention_weights
    from invperm_interp.viz.html import svg_bytes
    from invperm_interp.viz.training import plot_training

    def reference(fig) -> bytes:
        buffer = io.BytesIO()
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "x"}):
            fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
        return buffer.getvalue()

    def numbers(svg: bytes) -> list[float]:  # ids aside, every coordinate and size
        drawn = re.sub(rb'id="[^"]*"|#\w+', b"", svg)
        return [float(v) for v in re.findall(rb"-?\d+\.?\d*(?:e-?\d+)?", drawn)]

    metrics = [Evaluation(step=s, mse=m, train_mse=m * 1.1, causal_floor=0.25)
               for s, m in ((0, 2.5), (50, 0.3), (100, 0.004))]
    plain, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2, 3], [3, 1, 2])
    ax.set_xlabel("a label reaching past the axes' left and right edges")
    def heatmap():
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        plot_attention_weights(constructions.build("theorem3", 4), 1, gauge_fixed=True, ax=ax)
        fig.tight_layout()
        return fig

    makers = [heatmap,
              lambda: plot_training(metrics, causal=False), lambda: plain]
    for make in makers:
        expected = reference(make())
        with plt.rc_context({"svg.hashsalt": "x"}):
            got = svg_bytes(make())
        assert re.search(rb'width="[\d.]+pt" height="[\d.]+pt"', got)[0] == re.search(
            rb'width="[\d.]+pt" height="[\d.]+pt"', expected)[0]
        assert numbers(got) == pytest.approx(numbers(expected), rel=1e-6, abs=1e-5)


def test_sweep_markers_sit_nearer_their_own_d_than_the_midpoint():
    from invperm_interp.viz.sweep import plot_sweep

    rows = [{"group": g, "d": d, "seed": s, "steps": 100, "steps_to_solve": 50 + s}
            for g in ("a", "b", "c") for d in (4, 6, 8) for s in range(4)]
    fig = plot_sweep(rows)
    xs = [x for ax in fig.axes for c in ax.collections for x, _ in c.get_offsets()]
    assert len(xs) == len(rows)
    assert max(abs(x - round(x)) for x in xs) < 0.25  # ticks at 0, 1, 2; midpoints at ±0.5


def test_the_sweep_figure_stacks_each_grid_points_runs_by_mechanism():
    """Below the steps, one bar per (model kind, d) under that kind's markers: its runs stacked by
    mechanism, one colour per name, the same name the same colour at every point."""
    from invperm_interp.viz.sweep import plot_sweep

    names = {("a", 4): ["two_block", "two_block", "none"], ("a", 6): ["appendix_b", "two_block", None],
             ("b", 4): ["theorem2", "theorem2", "theorem2"], ("b", 6): ["none", "none", "two_block"]}
    rows = [{"group": g, "d": d, "seed": s, "steps": 100, "steps_to_solve": 50, "mechanism": n}
            for (g, d), ns in names.items() for s, n in enumerate(ns)]
    fig = plot_sweep(rows)
    how = fig.axes[-1]
    bars = [p for p in how.patches if p.get_height() > 0]
    stacks: dict[float, list] = {}
    for bar in bars:
        stacks.setdefault(round(bar.get_x() + bar.get_width() / 2, 6), []).append(bar)
    assert len(stacks) == 4  # one per grid point
    markers = sorted(x for ax in fig.axes for c in ax.collections for x, _ in c.get_offsets())
    for x, stack in stacks.items():
        assert sum(b.get_height() for b in stack) == 3  # the point's three runs
        assert sum(abs(m - x) < 0.1 for m in markers) == 3  # under its own three markers
    legend = how.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels[:2] == ["two_block", "theorem2"]  # most runs first (4 and 3)
    assert set(labels) == {"two_block", "theorem2", "appendix_b", "none", "not analysed"}
    name_of = {tuple(p.get_facecolor()): t for p, t in zip(legend.get_patches(), labels)}
    assert len(name_of) == 5  # one colour per name
    heights = sorted((b.get_height(), name_of[tuple(b.get_facecolor())]) for b in bars)
    assert heights == sorted([(2, "two_block"), (1, "none"), (1, "appendix_b"), (1, "two_block"),
                              (1, "not analysed"), (3, "theorem2"), (2, "none"), (1, "two_block")])


def test_a_heads_maps_draw_its_gauge_fixed_then_its_raw_weights_each_on_its_own_scale():
    """``head_maps``: the gauge-fixed ``A`` (``analysis.gauge``), then the raw ``A``, each cell in
    matplotlib's RdBu_r over ± its own largest magnitude, the same block labels on both."""
    import matplotlib
    import numpy as np
    from helpers import svg_doc, svg_image, svg_texts

    from invperm_interp.analysis.gauge import gauge_fix
    from invperm_interp.viz.weight_maps import head_maps

    model = constructions.build("theorem3", 4)
    model.blocks[1].attn.A.data[0] += 0.3  # a gauge component: raw and gauge-fixed differ
    A = model.blocks[1].attn.A[0].detach().double()
    labels = []
    for drawing, values, title in zip(head_maps(model, 1, 0),
                                      (gauge_fix(A, model.stream, 1).numpy(), A.numpy()),
                                      ("gauge-fixed A", "raw A")):
        doc = svg_doc(drawing)
        pixels, _ = svg_image(doc)
        top = np.abs(values).max()
        expected = np.rint(matplotlib.colormaps["RdBu_r"]((values + top) / (2 * top)) * 255)
        assert np.abs(pixels[..., :3].astype(int) - expected[..., :3]).max() <= 3
        texts = [text for text, _, _ in svg_texts(doc)]
        assert any(t.startswith(title) for t in texts)
        labels.append([t for t in texts if t in {b.name for b in model.stream.blocks(1)}])
    assert labels[0] == labels[1] and len(labels[0]) == 2 * len(model.stream.blocks(1))
